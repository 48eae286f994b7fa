"""Fixtures shared by the NVML tests (test_nvml.py, test_nvml_recorder.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def procs() -> Iterator[dict[str, int]]:
    """Real sleeping processes standing in for llama-server, a draft model, vLLM ..."""
    names = ("llama", "draft", "vllm", "worker", "idle")
    children = {n: subprocess.Popen(["sleep", "600"]) for n in names}
    yield {n: p.pid for n, p in children.items()}
    for p in children.values():
        p.kill()
        p.wait()
