"""The reference for tests/collectors/test_redact_alphabets.py: collectors/redact.py as it was
on main at 7d0adf8 (2026-11-27), before its patterns were compiled per alphabet on first use
(issue 32 item 4), kept word for word below this docstring as the oracle the new module must
equal on every command line. Not used by the project."""

from __future__ import annotations

import re
import shlex

REDACTED = "<redacted>"

_SECRET_WORDS = (
    r"(?:api[-_]?keys?|apikey|keys?|tokens?|secrets?|passwords?|passwd|passphrase|pass|pwd"
    r"|auth|authorization|bearer|credentials?)"
)
# A flag whose last words name a secret: --api-key, --hf-token, --auth, -password ...
_SECRET_FLAG = re.compile(rf"^--?(?:[a-z0-9]+[-_])*{_SECRET_WORDS}$", re.IGNORECASE)
_SECRET_ASSIGN = re.compile(
    rf"^(--?(?:[a-z0-9]+[-_])*{_SECRET_WORDS})=(.+)$", re.IGNORECASE | re.DOTALL
)
# Short or odd flags that take a secret: llama.cpp's -hft (--hf-token); curl's -u/--user
# and --proxy-user take "user:password" (the user name is kept).
_SECRET_SHORT = frozenset({"-hft", "-hf-token"})
_USER_PASSWORD = frozenset({"-u", "--user", "-U", "--proxy-user"})
_ENV_FLAG = re.compile(r"^(--env|-e|--build-arg|--set-env)=(.+)$", re.DOTALL)
_HEADER = re.compile(
    r"^(\s*(?:authorization|proxy-authorization|x-api-key|api-key|x-auth-token|cookie"
    r"|x-goog-api-key|private-token)\s*:\s*)(?:(bearer|basic|token)\s+)?\S.*$",
    re.IGNORECASE | re.DOTALL,
)
_ENV_ASSIGN = re.compile(
    r"^((?:[A-Za-z_][A-Za-z0-9_]*)?(?:KEYS?|TOKENS?|SECRETS?|PASSWORDS?|PASSWD|PASS|PASSPHRASE"
    r"|PWD|CREDENTIALS?|AUTH))=(.+)$",
    re.IGNORECASE | re.DOTALL,
)
# Greedy to the last "@": a password may hold "/" or "@"; over-redacting is the safe side.
# A scheme starts where a run of scheme characters starts (not at each of them: linear).
_URL_PASSWORD = re.compile(r"(?<![a-z0-9+.-])([a-z][a-z0-9+.-]*://[^/\s:@]+):\S*@", re.IGNORECASE)
_URL_PARAM = re.compile(
    r"([?&;#](?:[a-z0-9_-]{0,40}(?:token|key|secret|password|passwd|sig|signature|auth)"
    r"[a-z0-9_-]{0,40})=)"
    r"[^&;#\s]+",
    re.IGNORECASE,
)
_BEARER = re.compile(
    r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+|\b(Token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE
)
# A secret key's value in JSON: "api_key": "x", "Authorization": "Bearer x", "token": 123.
# An unterminated string is hidden to its end (possessive: no backtracking on hostile text).
_JSON_SECRET = re.compile(
    r"(\"[A-Za-z0-9_.-]{0,40}?" + _SECRET_WORDS + r"\"\s{0,8}:\s{0,8})"
    r"(?:\"(?:[^\"\\]|\\.)*+\"?|[^\s,}\]]++)",
    re.IGNORECASE,
)
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,})\b"
)


def _scrub(text: str) -> str:
    if "://" in text and "@" in text:
        # only up to the last "@": past it ``\S*@`` could never match, and trying costs
        # the rest of the text at every "://" (quadratic on a crafted argument)
        end = text.rfind("@") + 1
        text = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text[:end]) + text[end:]
    text = _URL_PARAM.sub(rf"\1{REDACTED}", text)
    if '"' in text:
        text = _JSON_SECRET.sub(rf'\1"{REDACTED}"', text)
    text = _BEARER.sub(lambda m: f"{m.group(1) or m.group(2)} {REDACTED}", text)
    return _KNOWN_TOKENS.sub(REDACTED, text)


def redact_text(text: str) -> str:
    """Secrets in one free-text value (an environment value, a URL): URL passwords, secret
    query parameters and JSON keys, bearer and well-known tokens."""
    return _scrub(text)


_MAX_NESTING = 4  # sh -c 'sh -c "..."' levels split and redacted word by word
# Top-level arguments every rule passed unchanged and that hide no next argument (``-m``,
# ``model.gguf``, ``--port``): the rules are a function of the argument alone there, so a
# launch repeated (a churning box starts the same command again and again) skips them.
# Only words shown as they are are kept (never one a rule hides: a value after a secret flag
# is hidden before this set is looked at), short ones, a bounded number.
_CLEAN: set[str] = set()
_CLEAN_MAX = 4096
_CLEAN_WORD_MAX = 256


def redact_argv(argv: list[str] | tuple[str, ...], _depth: int = 0) -> tuple[str, ...]:
    """The command line with every secret replaced; the shape (argument count) is kept.

    An argument that holds a whole command (``sh -c 'llama-server --api-key X'``) is
    split into words, redacted the same way, and joined again.
    """
    out: list[str] = []
    hide_next: str | None = None  # "all", or "password" (keep the user of user:password)
    for arg in argv:
        if hide_next is not None:
            mode, hide_next = hide_next, None
            out.append(_hide_password(arg) if mode == "password" else REDACTED)
            continue
        if _depth == 0 and arg in _CLEAN:
            out.append(arg)
            continue
        hide_next = _redact_arg(arg, _depth, out)
        if _depth == 0 and hide_next is None and out[-1] == arg:
            _remember_clean(arg)
    return tuple(out)


def _remember_clean(arg: str) -> None:
    if len(arg) <= _CLEAN_WORD_MAX:
        if len(_CLEAN) >= _CLEAN_MAX:
            _CLEAN.clear()
        _CLEAN.add(arg)


def _redact_arg(arg: str, depth: int, out: list[str]) -> str | None:
    """Append ``arg`` redacted to ``out``; what to hide of the next argument ("all",
    "password": keep the user of user:password), if anything."""
    if arg.lower().startswith("--no-"):  # a switch (`--no-auth`), never takes a value
        out.append(arg)
    elif _SECRET_FLAG.match(arg) or arg in _SECRET_SHORT:
        out.append(arg)
        return "all"
    elif arg in _USER_PASSWORD:
        out.append(arg)
        return "password"
    elif (m := _SECRET_ASSIGN.match(arg)) and not _is_path_flag(m.group(1)):
        out.append(f"{m.group(1)}={REDACTED}")
    elif arg.startswith(("--user=", "--proxy-user=")):
        flag, _, value = arg.partition("=")
        out.append(f"{flag}={_hide_password(value)}")
    elif m := _ENV_FLAG.match(arg):
        out.append(f"{m.group(1)}={_redact_word(m.group(2))}")
    elif m := _HEADER.match(arg):
        scheme = f"{m.group(2)} " if m.group(2) else ""
        out.append(f"{m.group(1)}{scheme}{REDACTED}")
    elif arg.lstrip().startswith(("{", "[")):  # JSON: its secret keys' values
        out.append(_scrub(arg))
    elif " " in arg.strip():
        out.append(_redact_words(arg, depth + 1))
    else:
        out.append(_redact_word(arg))
    return None


def _is_path_flag(flag: str) -> bool:
    return flag.lower().endswith(("-file", "_file", "-path", "_path"))


def _hide_password(value: str) -> str:
    user, found, _ = value.partition(":")
    return f"{user}:{REDACTED}" if found else REDACTED


def _redact_word(word: str) -> str:
    if m := _ENV_ASSIGN.match(word):
        return f"{m.group(1)}={REDACTED}"
    return _scrub(word)


def _redact_words(text: str, depth: int) -> str:
    """A command held in one argument: redact its words as if they were argv. Nested
    deeper than ``_MAX_NESTING`` it is hidden whole (the safe side, and bounded work)."""
    if depth > _MAX_NESTING:
        return REDACTED
    try:
        words = shlex.split(text)
    except ValueError:  # unbalanced quotes: fall back to whitespace
        words = text.split()
    redacted = redact_argv(words, depth)
    if redacted == tuple(words):
        return _scrub(text)  # nothing found word by word: keep the original spacing
    return shlex.join(redacted)


# Every spelling handled: (what, argv, argv as stored). The secret is always "S3CRET" (or a
# part of it), so each row's test can also check it is gone; tests/collectors/test_redact.py
# runs one test per row.
_R = REDACTED
SPELLINGS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("--api-key X", ("--api-key", "S3CRET"), ("--api-key", _R)),
    ("--api-key=X", ("--api-key=S3CRET",), (f"--api-key={_R}",)),
    ("--api-key-file keeps its path", ("--api-key-file", "/etc/k"), ("--api-key-file", "/etc/k")),
    ("--hf-token X", ("--hf-token", "S3CRET"), ("--hf-token", _R)),
    ("-hft X", ("-hft", "S3CRET"), ("-hft", _R)),
    ("--passphrase X", ("--passphrase", "S3CRET"), ("--passphrase", _R)),
    ("--password X", ("--password", "S3CRET"), ("--password", _R)),
    ("--password=X", ("--password=S3CRET",), (f"--password={_R}",)),
    ("--secret X", ("--secret", "S3CRET"), ("--secret", _R)),
    ("--token X", ("--token", "S3CRET"), ("--token", _R)),
    ("-u user:X", ("-u", "me:S3CRET"), ("-u", f"me:{_R}")),
    (
        "-H 'Authorization: Bearer x'",
        ("-H", "Authorization: Bearer S3"),
        ("-H", f"Authorization: Bearer {_R}"),
    ),
    ("-H 'x-api-key: X'", ("-H", "x-api-key: S3CRET"), ("-H", f"x-api-key: {_R}")),
    (
        "a short Bearer token anywhere",
        ("--note", "use Bearer S3 here"),
        ("--note", f"use Bearer {_R} here"),
    ),
    ("FOO_TOKEN=X", ("FOO_TOKEN=S3CRET",), (f"FOO_TOKEN={_R}",)),
    ("TOKEN=X", ("TOKEN=S3CRET",), (f"TOKEN={_R}",)),
    ("API_KEY=X", ("API_KEY=S3CRET",), (f"API_KEY={_R}",)),
    ("PASSWORD=X", ("PASSWORD=S3CRET",), (f"PASSWORD={_R}",)),
    ("--env=HF_TOKEN=X", ("--env=HF_TOKEN=S3CRET",), (f"--env=HF_TOKEN={_R}",)),
    ("URL userinfo", ("https://u:S3CRET@host/x",), (f"https://u:{_R}@host/x",)),
    (
        "URL query ?token=x&key=y",
        ("https://host/x?token=S3CRET&key=S3CRET&n=1",),
        (f"https://host/x?token={_R}&key={_R}&n=1",),
    ),
    (
        'JSON "Authorization"',
        ("--header", '{"Authorization": "Bearer S3CRET"}'),
        ("--header", f'{{"Authorization": "{_R}"}}'),
    ),
    ('JSON "api_key"', ("-o", '{"api_key":"S3CRET","n":1}'), ("-o", f'{{"api_key":"{_R}","n":1}}')),
    ('JSON "token"', ("-o", '{"token": "S3CRET"}'), ("-o", f'{{"token": "{_R}"}}')),
    (
        'JSON "password"',
        ("-o", '{"db": {"password": "S3\\"CRET"}}'),
        ("-o", f'{{"db": {{"password": "{_R}"}}}}'),
    ),
    ('JSON "secret" unterminated', ("-o", '{"secret": "S3CRET'), ("-o", f'{{"secret": "{_R}"')),
    ("known shape hf_...", ("hf_S3CRETS3CRETS3CRETS3CRET",), (_R,)),
    (
        "inside sh -c",
        ("sh", "-c", "llama-server --passphrase S3CRET"),
        ("sh", "-c", f"llama-server --passphrase '{_R}'"),
    ),
)
