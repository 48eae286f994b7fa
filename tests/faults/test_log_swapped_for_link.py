"""A followed engine log replaced by a symbolic link (issue 28, item 13): a root daemon
must never open what the link points at (here a root-only file of ours holding an
out-of-memory line, so reading it would show as an event) and says why it stopped
following. Real files, a real link, the real ``FileTail``."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from monitor.logs.follow import FileTail

OOM = "ggml_backend_cuda_buffer_type_alloc_buffer: cudaMalloc failed: out of memory"


def test_a_log_swapped_for_a_link_is_not_followed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = tmp_path / "shadow"
    secret.write_text(f"root:$6$secret:19000::::::\n{OOM}\n")
    secret.chmod(0o600)
    log = tmp_path / "llama-server.log"
    log.write_text("started\n")
    tail = FileTail(log)
    assert tail.read() == []
    log.unlink()
    log.symlink_to(secret)  # what a user who can write the log's folder can do
    with caplog.at_level(logging.WARNING, logger="monitor.logs.follow"):
        got = tail.read()
        assert got == [], "the link's target was opened and read"
        assert tail.read() == []  # still refused, logged once
    assert tail.error is not None and "symbolic link" in tail.error
    refusals = [r for r in caplog.records if "not following" in r.getMessage()]
    assert len(refusals) == 1 and str(log) in refusals[0].getMessage()
    log.unlink()
    log.write_text(f"{OOM}\n")  # a real file again: followed from its start
    (event,) = tail.read()
    assert event.kind == "engine_oom" and tail.error is None
    tail.close()


def test_a_log_started_as_a_fifo_or_link_is_never_opened(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    link = tmp_path / "engine.log"
    link.symlink_to(fifo)
    tail = FileTail(link)
    assert tail.read() == [] and tail.error and "symbolic link" in tail.error
    plain_fifo = FileTail(fifo)
    assert plain_fifo.read() == [] and plain_fifo.error and "not a regular file" in plain_fifo.error
