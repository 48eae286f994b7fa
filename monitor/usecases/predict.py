"""The predict use case the CLI and the HTTP API share: a box state already taken, the
launch's memory cgroup, the GPUs with the configured overhead, then
:func:`monitor.analysis.predict.answer`. Which box state (a live sample, ``--state``,
``--at``) is the CLI's own edge (monitor/cli/predict.py); the HTTP API brings the daemon's
latest tick."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from collectors.base import CgroupMemory, Snapshot
from monitor.analysis.predict import answer
from monitor.analysis.predict_request import PredictRequest, PredictResult
from monitor.analysis.predict_target import swap_cgroup
from monitor.config import Config
from monitor.errors import UsageError
from monitor.estimate import EstimateError
from monitor.estimate.model import DeviceInfo, devices_from_samples

__all__ = ["gpu_devices", "judge", "launch_cgroup"]


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


def judge(
    cfg: Config,
    req: PredictRequest,
    snap: Snapshot,
    live: bool,
    read_header: Callable[[str], Any] | None = None,
) -> PredictResult:
    """The answer for ``req`` on the box state ``snap`` (``live``: sampled here and now,
    so a launch from this shell inherits predict's own cgroup). ``read_header``: how
    model files are read (the HTTP API's: only inside [http] model_dirs, only what the
    caller could read, monitor/http/access.py); None: the plain reader (the CLI, as its
    user; the header bounds and O_NONBLOCK|O_NOFOLLOW opens apply there too). On a box
    state of now (not ``--state``/``--at``), processes' allow-listed environments are
    read: a router's children inherit its ``LLAMA_ARG_*`` (server-models.cpp)."""
    if req.env_for is None and req.state is None and req.at is None:
        req = replace(req, env_for=_env_reader(cfg))
    launch = launch_cgroup(cfg, req, snap, live)
    return answer(req, snap, gpu_devices(snap, cfg), launch, read_header=read_header)


def _env_reader(cfg: Config) -> Callable[[int], dict[str, str]]:
    """A live process's allow-listed environment (monitor/servers/environ.py), under the
    configured /proc root."""
    from monitor.servers import read_llama_env

    return lambda pid: read_llama_env(cfg.roots.proc, pid)
