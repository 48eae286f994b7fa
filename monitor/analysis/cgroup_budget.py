"""A memory cgroup OOM kill in terms of the cgroup's budget (issue 29 point 4).

The kernel's memcg OOM record (mm/oom_kill.c ``oom-kill:constraint=CONSTRAINT_MEMCG,...,
oom_memcg=<path>,task_memcg=<path>``, parsed by monitor/logs/kernel.py) names the cgroup
whose limit was hit. Its limit covers everything charged below it (mm/memcontrol.c: the
charge walks up the hierarchy), so every tracked process whose last sampled binding cgroup
(migration m010) is that cgroup or one under it is a member that shared the budget.

What it had to fit is the members' unreclaimable charge (anonymous + shmem; clean page
cache is reclaimed before the kill, mm/vmscan.c) plus the victim's need by its estimate.
The fixes are ``predict``'s own (monitor/analysis/predict.py ``suggest`` / ``bound_growth``),
run on the victim's launch against a picture whose host room is the limit less the other
members. Raising the limit is one fix among them, with the exact sum that was needed, named
for the hierarchy in use: ``memory.limit_in_bytes`` on cgroup v1, ``MemoryMax=``
(``memory.max``) on v2 (collectors/cgroup.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.base import DeviceSample
from monitor.analysis.picture import DevicePicture
from monitor.estimate.model import DeviceInfo, devices_from_samples
from monitor.units import GIB, MIB
from monitor.units import gib_or_mib as _gib


@dataclass(frozen=True, slots=True)
class Member:
    """One process of the killed cgroup at the kill: its host memory split as last
    measured (the victim's from the kernel record) and what it held on GPUs (not charged
    to a memory cgroup)."""

    pid: int
    name: str  # the model file's stem, else the process name
    comm: str
    argv: tuple[str, ...]
    cgroup: str
    anon_bytes: int
    file_bytes: int
    shmem_bytes: int
    gpu_bytes: int
    victim: bool = False

    @property
    def charged_bytes(self) -> int:
        return self.anon_bytes + self.file_bytes + self.shmem_bytes

    @property
    def unreclaimable_bytes(self) -> int:
        """What memcg reclaim cannot take back: anonymous and shmem pages."""
        return self.anon_bytes + self.shmem_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "name": self.name,
            "comm": self.comm,
            "cgroup": self.cgroup,
            "anon_bytes": self.anon_bytes,
            "file_bytes": self.file_bytes,
            "shmem_bytes": self.shmem_bytes,
            "gpu_bytes": self.gpu_bytes,
            "victim": self.victim,
        }


@dataclass(frozen=True, slots=True)
class BudgetFix:
    """One fix, sized to the budget: ``change`` as predict prints it, what it frees on the
    host, and the verdict with it alone."""

    change: str
    frees_bytes: int
    verdict: str
    evidence: str | None = None  # the log line a growth bound comes from


@dataclass(frozen=True, slots=True)
class Budget:
    cgroup: str
    limit_bytes: int
    version: int | None  # 1 or 2; None: unknown here
    members: tuple[Member, ...]
    need_bytes: int | None  # the victim's need by its estimate (with the grown cache)
    need_source: str
    minimum_limit_bytes: int
    need_parts: str  # "its need by its estimate", "1.3 GiB at load + ..."
    fixes: tuple[BudgetFix, ...] = field(default_factory=tuple)
    growth: str | None = None  # 'the prompt cache grew to N (log: "...")'

    @property
    def victim(self) -> Member | None:
        return next((m for m in self.members if m.victim), None)

    @property
    def others(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if not m.victim)

    def cause(self) -> str:
        """ "embd 653 MiB + big 2.7 GiB > 3.0 GiB limit": the others' unreclaimable charge
        plus the victim's need (when known), then what each member held at the kill."""
        held = " + ".join(f"{m.name} {_gib(m.charged_bytes)}" for m in self.members)
        victim = self.victim
        if self.need_bytes is not None and victim is not None:
            parts = [f"{m.name} {_gib(m.unreclaimable_bytes)}" for m in self.others]
            parts.append(f"{victim.name} {_gib(self.need_bytes)} ({self.need_parts})")
            sign = ">" if self.minimum_limit_bytes > self.limit_bytes else "vs"
            text = f"{' + '.join(parts)} {sign} {_gib(self.limit_bytes)} limit"
            text += f"; at the kill its members held {held}"
        else:
            text = f"{held} charged at the kill, at its {_gib(self.limit_bytes)} limit"
        growth = f"; {self.growth}" if self.growth else ""
        return f"In memory cgroup {self.cgroup}: {text}{growth}."

    def limit_fix(self) -> str:
        if self.minimum_limit_bytes <= self.limit_bytes:  # the estimate is below the truth
            return (
                f"raise {limit_setting(self.version)} of {self.cgroup} above "
                f"{_gib(self.limit_bytes)}: by the estimate it needed {self.need_source} = "
                f"{_gib(self.minimum_limit_bytes)}, within the limit, so what it really "
                "needed is more than estimated"
            )
        return raise_limit(self.cgroup, self.minimum_limit_bytes, self.version, self.need_source)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cgroup": self.cgroup,
            "limit_bytes": self.limit_bytes,
            "cgroup_version": self.version,
            "members": [m.as_dict() for m in self.members],
            "need_bytes": self.need_bytes,
            "need_source": self.need_source,
            "need_parts": self.need_parts,
            "minimum_limit_bytes": self.minimum_limit_bytes,
            "fixes": [
                {"change": f.change, "frees_bytes": f.frees_bytes, "verdict": f.verdict}
                | ({"evidence": f.evidence} if f.evidence else {})
                for f in self.fixes
            ],
            "growth": self.growth,
        }


def limit_setting(version: int | None) -> str:
    """The file (or systemd property) that holds a memory cgroup's hard limit:
    cgroup v1 ``memory.limit_in_bytes``; v2 ``memory.max``, ``MemoryMax=`` in a unit."""
    if version == 1:
        return "memory.limit_in_bytes"
    if version == 2:
        return "MemoryMax= (memory.max)"
    return "its memory limit (MemoryMax= on cgroup v2, memory.limit_in_bytes on v1)"


def raise_limit(cgroup: str, minimum: int, version: int | None, why: str) -> str:
    """Raise the limit to ``minimum`` (rounded up to a MiB), said as the value to write."""
    mib = math.ceil(minimum / MIB)
    value = f"{mib}M" if version == 2 else str(mib * MIB) if version == 1 else f"{mib} MiB"
    gib = math.ceil(mib * MIB / GIB * 100 - 1e-9) / 100  # never said below the need
    return f"raise {limit_setting(version)} of {cgroup} to at least {gib:.2f} GiB ({value}: {why})"


def in_cgroup(path: str, cgroup: str) -> bool:
    """``path`` is ``cgroup`` or below it (the limit covers the subtree)."""
    root = cgroup.rstrip("/")
    return path == cgroup or path.startswith(root + "/")


def member_name(argv: Sequence[str], comm: str) -> str:
    model = next(
        (argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("-m", "--model")),
        next((a for a in argv if a.endswith(".gguf")), None),
    )
    return Path(model).stem if model else comm


def minimum_needed(
    members: Sequence[Member], need: int | None, need_parts: str = ""
) -> tuple[int, str]:
    """(the limit that would have held them all, how it is made up): the others'
    unreclaimable charge plus the victim's need by its estimate, else what it held."""
    others = sum(m.unreclaimable_bytes for m in members if not m.victim)
    victim = next((m for m in members if m.victim), None)
    held = victim.charged_bytes if victim else 0
    names = " + ".join(f"{m.name} {_gib(m.unreclaimable_bytes)}" for m in members if not m.victim)
    if need is not None:
        total = others + max(need, 0)
        parts = f" ({need_parts})" if need_parts else ""
        why = f"{names + ' + ' if names else ''}the victim's need {_gib(need)}{parts}"
    else:
        total = others + held
        why = (
            f"{names + ' + ' if names else ''}the {_gib(held)} it held when killed; "
            "its full need is unknown (no estimate)"
        )
    return total, why


def _gpu_pictures(
    gpus: Sequence[DeviceSample], victim_bytes: int, margin: int
) -> dict[str, DevicePicture]:
    """The GPUs at the kill as predict sees a device: free memory, plus what the victim
    held there (its own allocations were freed by its death)."""
    out = {}
    for d in gpus:
        if d.total_bytes is None or d.used_bytes is None:
            continue
        free = d.total_bytes - d.used_bytes - (d.reserved_bytes or 0)
        out[d.device_id] = DevicePicture(
            d.device_id,
            d.name,
            d.memory_kind,
            d.total_bytes,
            d.used_bytes,
            d.reserved_bytes,
            d.free_bytes,
            available_bytes=max(0, free) + (victim_bytes if len(gpus) == 1 else 0),
            margin_bytes=margin,
            binding="VRAM",
        )
    return out


def budget_fixes(
    argv: Sequence[str],
    cgroup: str,
    limit: int,
    members: Sequence[Member],
    margin: int,
    grew: bool,
    ts_ms: int,
    gpus: Sequence[DeviceSample] = (),
) -> tuple[int | None, dict[str, int], list[BudgetFix]]:
    """(the victim's host need at load by a fresh estimate; what each run-time cache holds
    at its bound (``prompt_cache``: --cache-ram, ``checkpoints``: -ctxcp); the fixes
    ``predict`` would print for its launch in this cgroup with the other members in it).
    Nothing when the launch cannot be estimated here (not a llama.cpp command, the model
    file gone). ``gpus``: the box's GPUs at the kill: the launch's layers go where its
    -ngl put them (not all to the host), and a GPU's room is what it had free plus what
    the victim held there."""
    from monitor.analysis.picture import DevicePicture, Picture, ProcessUse
    from monitor.analysis.predict_fixes import bound_growth, suggest
    from monitor.analysis.predict_verdicts import need_by_device
    from monitor.estimate import estimate
    from monitor.estimate.model import HOST, MemoryEstimate
    from monitor.servers import parse_command

    spec = parse_command(list(argv)) if argv else None
    if spec is None or not spec.model_path or not Path(spec.model_path).exists():
        return None, {}, []

    devices = devices_from_samples(gpus, DeviceInfo("x").overhead_bytes)

    def estimator(s: Any) -> MemoryEstimate:
        return estimate(s, devices)

    try:
        base = estimator(spec)
    except Exception:  # the model changed or cannot be read: no fixes, not a failure
        return None, {}, []
    others = [m for m in members if not m.victim]
    running = [
        ProcessUse(m.pid, m.name, m.unreclaimable_bytes, "llama.cpp", m.argv, cgroup_path=cgroup)
        for m in others
        if m.unreclaimable_bytes
    ]
    host = DevicePicture(
        HOST,
        "Host RAM",
        "host",
        limit,
        None,
        None,
        None,
        available_bytes=max(0, limit - sum(m.unreclaimable_bytes for m in others)),
        margin_bytes=margin,
        processes=tuple(running),
        binding=f"cgroup {cgroup}",
    )
    victim_gpu = sum(m.gpu_bytes for m in members if m.victim)
    picture = Picture(ts_ms, {HOST: host, **_gpu_pictures(gpus, victim_gpu, margin)})
    need = need_by_device(base, picture).get(HOST, 0)
    found = (bound_growth if grew else suggest)(spec, base, estimator, picture, {}, running)
    if grew and not found:  # nothing bounds the growth alone: what makes it load
        found = suggest(spec, base, estimator, picture, {}, running)
    fixes = [BudgetFix(f.change, f.frees.get(HOST, 0), f.verdict) for f in found]
    bounds = {
        cause: base.total_bytes(name, HOST, include_growth=True)
        for cause, name in (("prompt_cache", "cache_ram"), ("checkpoints", "checkpoints"))
    }
    return need, bounds, fixes
