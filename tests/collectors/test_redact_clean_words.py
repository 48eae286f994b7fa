"""collectors/redact.py's set of clean words (issue 32 item 3, churn): a launch repeated
skips the rules for the words already shown as they are, and redacts exactly as before."""

from __future__ import annotations

import pytest

from collectors import redact
from collectors.redact import REDACTED, SPELLINGS, redact_argv


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = redact._redact_arg  # noqa: SLF001

    def counted(arg: str, depth: int, out: list[str]) -> str | None:
        seen.append(arg)
        return real(arg, depth, out)

    monkeypatch.setattr(redact, "_redact_arg", counted)
    monkeypatch.setattr(redact, "_CLEAN", set())
    return seen


def test_a_repeated_launch_runs_the_rules_only_for_its_new_words(calls: list[str]) -> None:
    first = ("llama-server", "-m", "m.gguf", "--port", "20001", "--api-key", "k1")
    second = ("llama-server", "-m", "m.gguf", "--port", "20002", "--api-key", "k2")
    assert redact_argv(first) == (*first[:6], REDACTED)
    calls.clear()
    assert redact_argv(second) == (*second[:6], REDACTED)
    assert calls == ["20002", "--api-key"]  # the secret flag is never taken as clean


def test_every_spelling_is_redacted_the_same_with_the_set_warm(calls: list[str]) -> None:
    for _, argv, _ in SPELLINGS:  # the secrets' words seen on their own first
        redact_argv(tuple(w for w in argv if "S3" in w))
    for what, argv, expected in SPELLINGS:
        assert redact_argv(argv) == expected, what
        assert redact_argv(argv) == expected, what
    assert not [w for w in redact._CLEAN if "S3" in w and " " in w]  # noqa: SLF001


def test_a_word_shown_on_its_own_is_still_hidden_after_a_secret_flag(calls: list[str]) -> None:
    assert redact_argv(("S3CRET",)) == ("S3CRET",)  # nothing says it is a secret here
    assert redact_argv(("--token", "S3CRET")) == ("--token", REDACTED)
    assert redact_argv(("-u", "me:S3CRET")) == ("-u", f"me:{REDACTED}")


def test_the_set_is_bounded(calls: list[str]) -> None:
    redact_argv(tuple(f"w{i}" for i in range(redact._CLEAN_MAX + 10)))  # noqa: SLF001
    assert len(redact._CLEAN) <= redact._CLEAN_MAX  # noqa: SLF001
    redact_argv(("x" * (redact._CLEAN_WORD_MAX + 1),))  # noqa: SLF001
    assert "x" * (redact._CLEAN_WORD_MAX + 1) not in redact._CLEAN  # noqa: SLF001
