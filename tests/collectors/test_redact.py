"""Secrets never survive into stored or displayed command lines."""

from __future__ import annotations

import pytest

from collectors.redact import REDACTED, SPELLINGS, redact_argv

R = REDACTED


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["llama-server", "--api-key", "s3cret", "-c", "8192"],
            ["llama-server", "--api-key", R, "-c", "8192"],
        ),
        (["llama-server", "--api-key=s3cret"], ["llama-server", f"--api-key={R}"]),
        (
            ["vllm", "serve", "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz"],
            ["vllm", "serve", "--hf-token", R],
        ),
        (
            ["x", "--token", "abc", "--password", "pw", "--secret=zz"],
            ["x", "--token", R, "--password", R, f"--secret={R}"],
        ),
        (
            ["env", "HF_TOKEN=hf_x", "OPENAI_API_KEY=sk-1", "PATH=/usr/bin", "python"],
            ["env", f"HF_TOKEN={R}", f"OPENAI_API_KEY={R}", "PATH=/usr/bin", "python"],
        ),
        (
            ["curl", "https://user:pa55@example.com/v1?x=1&token=abc&api_key=def"],
            ["curl", f"https://user:{R}@example.com/v1?x=1&token={R}&api_key={R}"],
        ),
        (
            ["curl", "-H", "Authorization: Bearer abcdef123456789"],
            ["curl", "-H", f"Authorization: Bearer {R}"],
        ),
        (
            ["python", "serve.py", "--model", "m", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz12"],
            ["python", "serve.py", "--model", "m", R],
        ),
        # Not secrets: flags that merely contain letters of the words, and file paths.
        (
            ["llama-server", "--top-k", "40", "-ctk", "q8_0", "--keep", "-1"],
            ["llama-server", "--top-k", "40", "-ctk", "q8_0", "--keep", "-1"],
        ),
        (
            ["llama-server", "--api-key-file", "/etc/keys.txt", "--ssl-key-file", "/k.pem"],
            ["llama-server", "--api-key-file", "/etc/keys.txt", "--ssl-key-file", "/k.pem"],
        ),
        # A --no- switch takes no value.
        (["srv", "--no-auth", "--port", "8080"], ["srv", "--no-auth", "--port", "8080"]),
        # Found in review: curl users, headers, env flags, shells, short flags, fragments.
        (
            ["curl", "-u", "admin:hunter2", "--user=bob:pw2", "x"],
            ["curl", "-u", f"admin:{R}", f"--user=bob:{R}", "x"],
        ),
        (
            ["curl", "-H", "x-api-key: abc123", "-H", "api-key: def", "-H", "Authorization: raw"],
            ["curl", "-H", f"x-api-key: {R}", "-H", f"api-key: {R}", "-H", f"Authorization: {R}"],
        ),
        (["curl", "--oauth2-bearer", "tok"], ["curl", "--oauth2-bearer", R]),
        (
            ["docker", "run", "--env=HF_TOKEN=hf_1", "-e", "API_KEY=k", "img"],
            ["docker", "run", f"--env=HF_TOKEN={R}", "-e", f"API_KEY={R}", "img"],
        ),
        (
            ["sh", "-c", "llama-server --api-key s3cret -m /m.gguf"],
            ["sh", "-c", f"llama-server --api-key '{R}' -m /m.gguf"],
        ),
        (["bash", "-c", "HF_TOKEN=x vllm serve m"], ["bash", "-c", f"'HF_TOKEN={R}' vllm serve m"]),
        (
            ["llama-server", "-hft", "short", "--api-keys", "k1,k2"],
            ["llama-server", "-hft", R, "--api-keys", R],
        ),
        (["llama-server", "--api-key", "-dash-first"], ["llama-server", "--api-key", R]),
        (["x", "https://h/cb#access_token=abc&x=1"], ["x", f"https://h/cb#access_token={R}&x=1"]),
        (["x", "postgres://u:p/a@ss@db:5432/x"], ["x", f"postgres://u:{R}@db:5432/x"]),
        (["srv", "--api-key"], ["srv", "--api-key"]),
        ([], []),
    ],
)
def test_redact(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == tuple(expected)


def test_shape_is_kept() -> None:
    argv = ["a", "--api-key", "x", "b", "HF_TOKEN=y"]
    assert len(redact_argv(argv)) == len(argv)


@pytest.mark.parametrize(
    ("argv", "expected"), [row[1:] for row in SPELLINGS], ids=[row[0] for row in SPELLINGS]
)
def test_every_spelling_in_the_table(argv: tuple[str, ...], expected: tuple[str, ...]) -> None:
    """One row of collectors.redact.SPELLINGS: redacted as the row says, no secret left."""
    got = redact_argv(argv)
    assert got == expected
    assert not any(part in " ".join(got) for part in ("S3CRET", "S3 ", "CRET"))
    assert redact_argv(got) == got  # redacting again changes nothing
