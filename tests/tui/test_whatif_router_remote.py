"""The what-if dialog's router model id on a remote frame: a router's model is judged on
its own box (``predict --remote``), so the dialog refuses it in one line before asking
anything; on this box's frame the same word goes to the router discovery (noise)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_source import FakeSource

from collectors.base import Snapshot
from monitor.errors import UsageError
from monitor.estimate.kv import EstimateError
from tui.screens.whatif import predict_for
from tui.source import RemoteSource

EMPTY = Snapshot(1000, (), (), (), (), (), ())


def test_a_router_id_on_a_remote_frame_is_refused_in_one_line() -> None:
    source = RemoteSource("http://127.0.0.1:9")  # never asked: the refusal comes first
    app = SimpleNamespace(source=source, swap_config=None)
    frame = SimpleNamespace(snapshot=EMPTY, live=True)
    with pytest.raises(UsageError) as caught:
        predict_for(app, frame, "qwen3-8b", None)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    assert "judged on its own box: vramscope predict --remote URL qwen3-8b" in message


def test_the_same_word_on_this_boxs_frame_asks_the_routers_here() -> None:
    app = SimpleNamespace(source=FakeSource([EMPTY]), swap_config=None)
    frame = SimpleNamespace(snapshot=EMPTY, live=False)
    with pytest.raises(EstimateError, match="no llama-server router on this box serves"):
        predict_for(app, frame, "qwen3-8b", None)  # type: ignore[arg-type]
