"""What monitor/analysis/predict_fixes.py suggests: a change that makes a launch fit
(:class:`Fix`) and the context llama.cpp's own fit will choose (:class:`LlamaFit`). Apart
from predict_verdicts.py so that a launch that fits as given, with its -c, builds neither
class (issue 32 item 4); ``monitor.analysis.predict_verdicts`` still names both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monitor.analysis.predict_verdicts import Verdict


@dataclass(frozen=True, slots=True)
class Fix:
    change: str  # e.g. "-c 16384", "-ctk q8_0 -ctv q8_0", "stop llama-server (pid 42)"
    frees: dict[str, int]  # device -> bytes freed
    verdict: Verdict  # the verdict with this change alone


@dataclass(frozen=True, slots=True)
class LlamaFit:
    """What llama.cpp's fit will choose for a launch with no ``-c``."""

    ctx: int  # the -c it will run with
    full_ctx: int  # n_ctx_train x streams: where it starts
    min_ctx: int  # -fitc
    target_mib: tuple[int, ...]  # -fitt, per device
    devices: tuple[str, ...]  # the devices it fits on
