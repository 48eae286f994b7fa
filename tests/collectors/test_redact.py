"""Secrets never survive into stored or displayed command lines."""

from __future__ import annotations

import pytest

from collectors.redact import REDACTED, redact_argv

R = REDACTED


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["llama-server", "--api-key", "s3cret", "-c", "8192"],
         ["llama-server", "--api-key", R, "-c", "8192"]),
        (["llama-server", "--api-key=s3cret"], ["llama-server", f"--api-key={R}"]),
        (["vllm", "serve", "--hf-token", "hf_abcdefghijklmnopqrstuvwxyz"],
         ["vllm", "serve", "--hf-token", R]),
        (["x", "--token", "abc", "--password", "pw", "--secret=zz"],
         ["x", "--token", R, "--password", R, f"--secret={R}"]),
        (["env", "HF_TOKEN=hf_x", "OPENAI_API_KEY=sk-1", "PATH=/usr/bin", "python"],
         ["env", f"HF_TOKEN={R}", f"OPENAI_API_KEY={R}", "PATH=/usr/bin", "python"]),
        (["curl", "https://user:pa55@example.com/v1?x=1&token=abc&api_key=def"],
         ["curl", f"https://user:{R}@example.com/v1?x=1&token={R}&api_key={R}"]),
        (["curl", "-H", "Authorization: Bearer abcdef123456789"],
         ["curl", "-H", f"Authorization: Bearer {R}"]),
        (["python", "serve.py", "--model", "m", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz12"],
         ["python", "serve.py", "--model", "m", R]),
        # Not secrets: flags that merely contain letters of the words, and file paths.
        (["llama-server", "--top-k", "40", "-ctk", "q8_0", "--keep", "-1"],
         ["llama-server", "--top-k", "40", "-ctk", "q8_0", "--keep", "-1"]),
        (["llama-server", "--api-key-file", "/etc/keys.txt", "--ssl-key-file", "/k.pem"],
         ["llama-server", "--api-key-file", "/etc/keys.txt", "--ssl-key-file", "/k.pem"]),
        # A boolean secret-ish flag followed by another flag keeps that flag.
        (["srv", "--no-auth", "--port", "8080"], ["srv", "--no-auth", "--port", "8080"]),
        (["srv", "--api-key"], ["srv", "--api-key"]),
        ([], []),
    ],
)
def test_redact(argv: list[str], expected: list[str]) -> None:
    assert redact_argv(argv) == tuple(expected)


def test_shape_is_kept() -> None:
    argv = ["a", "--api-key", "x", "b", "HF_TOKEN=y"]
    assert len(redact_argv(argv)) == len(argv)
