"""collectors/tracking.py's first cut: which comm or executable name may be a server's."""

from __future__ import annotations

import pytest

from collectors.tracking import could_be_server, engine_of


@pytest.mark.parametrize(
    "name",
    [
        "llama-server",
        "ollama",
        "ollama_llama_se",  # ollama_llama_server, cut at 15 bytes by the kernel
        "text-generation",  # text-generation-launcher / -server, cut likewise
        "python3.11",
        "python",
        "VLLM::EngineCor",
        "sglang::schedul",
        "",  # unknown: read the argv
    ],
)
def test_could_be_server(name: str) -> None:
    assert could_be_server(name)


@pytest.mark.parametrize("name", ["sleep", "bash", "sh", "git", "pytest", "llama", "text-gen"])
def test_could_not_be_server(name: str) -> None:
    assert not could_be_server(name)


@pytest.mark.parametrize("name", ["sleep", "bash", "git", "node", "cc1", "kworker/0:1"])
def test_never_a_server_whatever_its_argv_says_in_engine_of(name: str) -> None:
    """The cut is safe: a name it rejects is one engine_of rejects too when argv[0] is
    that program (the usual case: comm is argv[0]'s base name)."""
    assert engine_of(name, (f"/usr/bin/{name}", "-m", "vllm", "--model", "x.gguf")) is None
