"""The edges of ``vramscope predict``: which box state (a live sample, ``--state``,
``--at``, or the daemon's snapshot) and which memory cgroup the launch runs under; the
workflow itself is :func:`monitor.analysis.predict.answer`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from collectors.base import CgroupMemory, Snapshot
from monitor.analysis.predict import (
    EXIT_FITS,
    EXIT_GROWS_OOM,
    EXIT_OOM,
    PredictRequest,
    PredictResult,
    answer,
    swap_cgroup,
)
from monitor.config import Config
from monitor.errors import UsageError
from monitor.estimate import EstimateError
from monitor.estimate.model import DeviceInfo, devices_from_samples

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
    from monitor.analysis.state import Daemon, box_state, chosen_origin

    origin = (
        Daemon(snapshot)
        if snapshot is not None
        else chosen_origin(cfg.roots, cfg.collectors, cfg.db_path, req.state, req.at)
    )
    return box_state(origin).snapshot


def launch_cgroup(
    cfg: Config, req: PredictRequest, snap: Snapshot, live: bool
) -> tuple[CgroupMemory | None, str | None]:
    """(the memory cgroup limit the launch will run under, a note saying which one).

    ``--cgroup``/``--unit`` name it; ``predict MODEL_ID`` takes llama-swap's (its children
    inherit it); otherwise a live prediction takes predict's own (/proc/self/cgroup: a
    launch from this shell inherits it). A recorded state (--state, --at) or the daemon's
    snapshot (the HTTP API: the daemon is not the launcher) has no "self"."""
    from collectors import cgroup

    if req.cgroup is not None or req.unit is not None:
        if req.unit is not None and ("/" in req.unit or req.unit in ("", ".", "..")):
            raise EstimateError(
                f"--unit {req.unit}: expected a systemd unit name, e.g. llama-swap.service"
            )
        given = req.cgroup if req.cgroup is not None else f"/system.slice/{req.unit}"
        try:
            hier, path = cgroup.resolve(
                cfg.roots,
                given,
                None if req.unit is None or req.cgroup else f"--unit {req.unit} ({given})",
            )
        except ValueError as exc:  # collectors/ raises no VramscopeError: typed here, at source
            raise UsageError(str(exc)) from None
        limit = cgroup.read_limit(hier, path)
        return limit, f"the launch runs in the memory cgroup {path}" + (
            "" if limit is not None else " (no memory limit on it or its ancestors)"
        )
    if req.model_id is not None:
        return swap_cgroup(req, snap)
    if live and req.state is None and req.at is None:
        h = cgroup.memory_hierarchy(cfg.roots)
        found = cgroup.pid_limit(cfg.roots, h, "self")
        if found is not None:
            return found, (
                f"this shell runs in the memory cgroup {found.path}; a launch "
                "from it inherits it (--cgroup/--unit to judge another)"
            )
    return None, None


def gpu_devices(snap: Snapshot, cfg: Config) -> list[DeviceInfo]:
    return devices_from_samples(snap.devices, cfg.gpu_overhead_mib * 1024 * 1024)


def run_predict(
    cfg: Config,
    req: PredictRequest,
    snapshot: Snapshot | None = None,
    read_header: Callable[[str], Any] | None = None,
) -> PredictResult:
    """The whole question: the box state (``snapshot`` when given: the daemon's latest,
    for the HTTP API), the launch's cgroup, then :func:`answer`. ``read_header``: how
    model files are read (the HTTP API's: only inside [http] model_dirs, only what the
    caller could read, monitor/http/access.py); None: the plain reader (the CLI, as its
    user; the header bounds and O_NONBLOCK|O_NOFOLLOW opens apply there too)."""
    snap = take_snapshot(cfg, req, snapshot)
    launch = launch_cgroup(cfg, req, snap, live=snapshot is None)
    return answer(req, snap, gpu_devices(snap, cfg), launch, read_header=read_header)


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
