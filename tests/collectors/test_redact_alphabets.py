"""collectors/redact.py compiles each rule's pattern per alphabet on first use (issue 32
item 4): re.ASCII for a pure-ASCII text, the Unicode form otherwise. Security code, so it
is checked against the module it replaced (tests/fakes/redact_before.py, main's copy, one
Unicode pattern set for every text) on generated command lines: the same output for every
argv and every free text, including the four non-ASCII characters that Unicode case folding
adds to ``(?i)[a-z]`` (U+0130, U+0131, U+017F, U+212A), the separators U+001C-U+001F that
Unicode ``\\s`` matches and re.ASCII's does not, and other non-ASCII spaces and letters.
"""

from __future__ import annotations

import redact_before
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import redact

# pieces the rules look for, in groups drawn alike, so generated words hit them often (a
# secret word beside a space of either alphabet, say), plus any text at all
SPACES = (" ", "\t", "\n", "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u3000")
PUNCTUATION = (
    "-", "--", "=", ":", "://", "@", "?", "&", ";", "#", '"', "{", "}", "[", ",", "\\", "/",
    "'", "_", ".", "+", "~", "sh -c ",
)  # fmt: skip
WORDS = (
    "api", "key", "KEY", "token", "Token", "TOKEN", "secret", "pass", "password", "pwd", "auth",
    "authorization", "Authorization", "bearer", "Bearer", "basic", "sig", "credentials",
    "file", "-file", "_path", "no-", "env", "-e", "--env", "--build-arg", "--user", "-u",
    "-hft", "x-api-key", "cookie", "private-token", "https", "http", "u", "S3CRET", "hf_",
    "sk-", "ghp_", "xoxb-", "A1b2C3d4E5f6G7h8I9j0", "BEARER",
)  # fmt: skip
NON_ASCII = (
    "\u0130", "\u0131", "\u017f", "\u212a", "é", "ß", "ǅ", "Σ", "ﬀ", "İ",
    "ſecret", "\u212aey", "paſſword", "toKen", "authorİzation", "baſic",
)  # fmt: skip
PIECE = st.one_of(
    *(st.sampled_from(group) for group in (SPACES, PUNCTUATION, WORDS, NON_ASCII)),
    st.text(max_size=4),
)
WORD = st.lists(PIECE, max_size=12).map("".join)
ARGV = st.lists(WORD, max_size=8)
SETTINGS = settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(ARGV)
def test_every_command_line_is_redacted_as_before(argv: list[str]) -> None:
    assert redact.redact_argv(argv) == redact_before.redact_argv(argv)


@SETTINGS
@given(WORD)
def test_every_free_text_is_redacted_as_before(text: str) -> None:
    assert redact.redact_text(text) == redact_before.redact_text(text)


def test_the_case_folding_and_space_corners() -> None:
    """Each corner once by hand, where the ASCII and Unicode forms would differ if the text's
    alphabet were not looked at: found as secret by both modules, or by neither."""
    cases = [
        ["--\u017fecret", "S3CRET"],  # long s folds to s: a secret flag
        ["--api-\u212aey=S3CRET"],  # Kelvin sign folds to k
        ["--author\u0130zation", "S3CRET"],
        ["Authorization:\x1cBearer S3CRET"],  # U+001C is \s in Unicode
        ["Authorization:\x85S3CRET"],
        ["use Bearer\x1fS3CRET here"],
        ['{"token":\x1e"S3CRET"}'],
        ["https://u:S3\x1dCRET@host"],
        ["--passwd", "S3CRET"],
    ]
    for argv in cases:
        assert redact.redact_argv(argv) == redact_before.redact_argv(argv), argv
    assert redact.redact_argv(["--\u017fecret", "S3CRET"])[1] == redact.REDACTED


def test_patterns_are_compiled_on_first_use_per_alphabet() -> None:
    unicode, ascii_only = redact._COMPILED  # noqa: SLF001
    unicode.clear()
    ascii_only.clear()
    redact.redact_argv(["llama-server", "-m", "model.gguf", "--port", "8080"])
    assert not unicode and "secret_flag" in ascii_only
    assert "json_secret" not in ascii_only and "url_password" not in ascii_only  # no '"', "://"
    redact.redact_argv(["--\u017fecret", "x"])
    assert "secret_flag" in unicode
