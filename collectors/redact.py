"""Remove secrets from command lines before they are stored or shown (DESIGN.md, security).

Redacted, each replaced by ``<redacted>``:
- the value of a flag whose name says it is secret: ``--api-key X``, ``--api-key=X``,
  ``--hf-token``, ``--token``, ``--password``, ``--secret``, ``--auth`` ...;
- ``NAME=value`` arguments whose NAME ends in KEY, TOKEN, SECRET, PASSWORD, ... (``env
  HF_TOKEN=hf_x python ...``);
- passwords in URLs (``https://user:pw@host``) and secret query parameters (``?token=``,
  ``&api_key=``, ``&sig=``);
- bearer tokens, and tokens with well-known shapes (``hf_...``, ``sk-...``) wherever they are.
Flags that only name a file (``--api-key-file``, ``--ssl-key-file``) keep their path.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

_SECRET_WORDS = r"(?:api[-_]?key|apikey|key|token|secret|password|passwd|pass|auth|credentials?)"
# A flag whose last words name a secret: --api-key, --hf-token, --auth, -password ...
_SECRET_FLAG = re.compile(rf"^--?(?:[a-z0-9]+[-_])*{_SECRET_WORDS}$", re.IGNORECASE)
_SECRET_ASSIGN = re.compile(
    rf"^(--?(?:[a-z0-9]+[-_])*{_SECRET_WORDS})=(.+)$", re.IGNORECASE | re.DOTALL
)
_ENV_ASSIGN = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?))=(.+)$",
    re.IGNORECASE | re.DOTALL,
)
_URL_PASSWORD = re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@]+):[^/\s@]+@", re.IGNORECASE)
_URL_PARAM = re.compile(
    r"([?&;](?:[a-z0-9_-]*(?:token|key|secret|password|passwd|sig|signature|auth)[a-z0-9_-]*)=)"
    r"[^&;#\s]+",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}", re.IGNORECASE)
_KNOWN_TOKENS = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,})\b"
)


def _scrub(text: str) -> str:
    text = _URL_PASSWORD.sub(rf"\1:{REDACTED}@", text)
    text = _URL_PARAM.sub(rf"\1{REDACTED}", text)
    text = _BEARER.sub(rf"\1 {REDACTED}", text)
    return _KNOWN_TOKENS.sub(REDACTED, text)


def redact_argv(argv: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The command line with every secret replaced; the shape (argument count) is kept."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            hide_next = False
            if not (arg.startswith("-") and len(arg) > 1):  # `--no-auth --port 8080`
                out.append(REDACTED)
                continue
        if _SECRET_FLAG.match(arg):
            hide_next = True
            out.append(arg)
            continue
        if m := _SECRET_ASSIGN.match(arg):
            out.append(f"{m.group(1)}={REDACTED}")
            continue
        if m := _ENV_ASSIGN.match(arg):
            out.append(f"{m.group(1)}={REDACTED}")
            continue
        out.append(_scrub(arg))
    return tuple(out)
