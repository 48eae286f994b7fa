"""The edges of ``vramscope predict``: which box state (a live sample, ``--state``,
``--at``, or the daemon's snapshot); the cgroup and the answer are the use case
:mod:`monitor.usecases.predict` (shared with the HTTP API), the workflow itself
:func:`monitor.analysis.predict.answer`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collectors.base import Snapshot
from monitor.analysis.predict_request import (
    EXIT_FITS,
    EXIT_GROWS_OOM,
    EXIT_OOM,
    PredictRequest,
    PredictResult,
)
from monitor.config import Config
from monitor.usecases.predict import gpu_devices, judge, launch_cgroup

__all__ = [
    "EXIT_FITS",
    "EXIT_GROWS_OOM",
    "EXIT_OOM",
    "PredictRequest",
    "PredictResult",
    "gpu_devices",
    "launch_cgroup",
    "run_predict",
    "take_snapshot",
]


def take_snapshot(cfg: Config, req: PredictRequest, snapshot: Snapshot | None = None) -> Snapshot:
    """The box state to judge against: ``snapshot`` when given (the daemon's latest, for
    the HTTP API), else ``req.state``, ``req.at`` or a live sample."""
    from monitor.analysis.state import box_state, chosen_origin
    from monitor.daemon.oneshot import OneShotSampler

    if snapshot is not None:
        from monitor.analysis.origins import Daemon

        return box_state(Daemon(snapshot)).snapshot
    sampler = OneShotSampler(cfg.roots, cfg.collectors)
    origin = chosen_origin(cfg.roots, cfg.collectors, cfg.db_path, req.state, req.at, sampler)
    return box_state(origin).snapshot


def run_predict(
    cfg: Config,
    req: PredictRequest,
    snapshot: Snapshot | None = None,
    read_header: Callable[[str], Any] | None = None,
) -> PredictResult:
    """The whole question: the box state (``snapshot`` when given, else ``--state``,
    ``--at`` or a live sample), then :func:`monitor.usecases.predict.judge`."""
    snap = take_snapshot(cfg, req, snapshot)
    return judge(cfg, req, snap, live=snapshot is None, read_header=read_header)


def predict_on_fleet(
    urls: list[str],
    tokens: dict[str, str | None],
    command: list[str],
    margin_gib: float,
    model_id: str | None = None,
) -> list[Any]:
    """Ask each box's daemon (``POST /api/v1/predict``, at most 8 at once, each with its
    own token from ``tokens``: monitor/http/tokens.py) to judge the launch (or
    ``model_id``: a llama-server router's model on that box) against its latest tick; a
    box that cannot be reached or does not answer like a vramscope daemon is an answer
    with its one-line error (monitor/analysis/fleet.py)."""
    from concurrent.futures import ThreadPoolExecutor

    from monitor.analysis.fleet import BoxAnswer, box_answer
    from monitor.http.client import DaemonClient, RemoteError

    body: dict[str, Any] = (
        {"model_id": model_id, "margin_gib": margin_gib}
        if model_id is not None
        else {"command": command, "margin_gib": margin_gib}
    )

    def ask(url: str) -> BoxAnswer:
        try:
            status, doc = DaemonClient(url, tokens.get(url), timeout_s=30.0).post(
                "/api/v1/predict", body
            )
        except RemoteError as exc:
            return BoxAnswer(url, error=str(exc))
        return box_answer(url, status, doc)

    with ThreadPoolExecutor(max_workers=min(8, len(urls))) as pool:
        return list(pool.map(ask, urls))
