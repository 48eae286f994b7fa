"""``vramscope estimate`` output: a per-component, per-device table, or JSON."""

from __future__ import annotations

import dataclasses
from typing import Any

from monitor.estimate.model import MemoryEstimate
from monitor.units import MIB, gib_or_mib


def to_json(est: MemoryEstimate) -> dict[str, Any]:
    return {
        "schema": "vramscope.estimate/1",
        "engine": est.engine,
        "model_path": est.model_path,
        "estimator_version": est.version,
        "context": {
            "n_ctx": est.n_ctx,
            "n_ctx_seq": est.n_ctx_seq,
            "n_seq_max": est.n_seq_max,
            "n_stream": est.n_stream,
            "kv_unified": est.kv_unified,
            "cells": est.cells,
            "flash_attn": est.flash_attn,
        },
        "components": [dataclasses.asdict(c) for c in est.components],
        "totals_at_load": est.by_device(),
        "totals_with_growth": est.by_device(include_growth=True),
        "notes": list(est.notes),
        "approximate": list(est.approximate),
    }


def render_text(est: MemoryEstimate, width: int | None = None) -> str:
    lines = [f"{est.engine}: {est.model_path or '-'}"]
    if est.cells is not None:
        lines.append(
            f"context: {est.cells} cells = {est.n_ctx_seq} per stream x {est.n_stream} "
            f"stream(s), {est.n_seq_max} slot(s), kv_unified={est.kv_unified}, "
            f"flash_attn={'on' if est.flash_attn else 'off'}"
        )
    lines.append("")
    rows = [("COMPONENT", "DEVICE", "MiB", "WHERE", "HOW")]
    for c in est.components:
        where = c.residency + (f" {c.buffer}" if c.buffer else "")
        where += " (grows)" if c.when == "grows" else ""
        rows.append((c.name, c.device, f"{c.bytes / MIB:.2f}", where, c.formula))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        line = "  ".join(
            [
                r[0].ljust(widths[0]),
                r[1].ljust(widths[1]),
                r[2].rjust(widths[2]),
                r[3].ljust(widths[3]),
                r[4],
            ]
        )
        lines.append(line[:width] if width else line)
    lines.append("")
    load, grown = est.by_device(), est.by_device(include_growth=True)
    for device in sorted(grown):
        extra = grown[device] - load.get(device, 0)
        tail = f" (up to {grown[device] / MIB:.2f} MiB as caches fill)" if extra else ""
        lines.append(f"total on {device}: {load.get(device, 0) / MIB:.2f} MiB at load{tail}")
    for note in est.notes:
        lines.append(f"note: {note}")
    for line in est.approximate:
        lines.append(f"approximate: {line}")
    return "\n".join(lines)


# estimate component names -> (llama.cpp log context, buffer kind)
_REPORTED = (
    ("weights", "target", "model"),
    ("kv + kv_swa", "target", "KV"),
    ("rs", "target", "RS"),
    ("compute", "target", "compute"),
    ("output", "target", "output"),
    ("draft_weights", "draft", "model"),
    ("draft_kv + draft_kv_swa", "draft", "KV"),
    ("draft_compute", "draft", "compute"),
    ("draft_output", "draft", "output"),
    ("mtp_kv", "mtp", "KV"),
    ("mtp_compute", "mtp", "compute"),
    ("mtp_output", "mtp", "output"),
)


def compare_with_log(est: MemoryEstimate, report: Any) -> list[dict[str, Any]]:
    """Estimated beside llama.cpp's own logged buffers (monitor/logs/server_log.py), per kind."""
    rows = []
    for names, context, kind in _REPORTED:
        estimated = sum(est.total_bytes(n.strip()) for n in names.split("+")) / MIB
        reported = report.total_mib(kind=kind, context=context)
        if estimated or reported:
            rows.append(
                {
                    "component": names,
                    "estimated_mib": _mib2(estimated),
                    "reported_mib": _mib2(reported),
                    "delta_mib": _mib2(estimated - reported),
                }
            )
    return rows


def _mib2(mib: float) -> float:
    """MiB to 2 decimals, never -0.0: an estimate 0.004 MiB under the log's figure is a
    delta of 0.00, not "-0.00" (round() keeps the sign of a negative that rounds to 0)."""
    return round(mib, 2) + 0.0


def render_comparison(rows: list[dict[str, Any]]) -> str:
    name_width = max([len("COMPONENT"), *(len(r["component"]) for r in rows)]) + 2
    lines = [
        "",
        "estimated vs reported by llama.cpp (its log):",
        f"{'COMPONENT':<{name_width}}{'ESTIMATED':>12}{'REPORTED':>12}{'DELTA':>10}",
    ]
    for r in rows:  # z: a negative that rounds to zero prints 0.00 (the rows hold 2 decimals)
        lines.append(
            f"{r['component']:<{name_width}}{r['estimated_mib']:>z12.2f}"
            f"{r['reported_mib']:>z12.2f}{r['delta_mib']:>+z10.2f}"
        )
    return "\n".join(lines)


def render_measured(
    est: MemoryEstimate, measured: dict[str, int | None], labels: dict[str, str], pid: int
) -> str:
    """``estimate --pid``: beside each device's estimate (at load, and once every growing
    buffer is full), what the server holds there now (monitor/analysis/measured.py: a
    GPU's VRAM + GTT; the host's resident anonymous + file pages, so mapped weights the
    kernel has not paged in, or has evicted, are not counted). ``-``: not read."""
    at_load, full = est.by_device(), est.by_device(include_growth=True)
    devices = sorted({*at_load, *full, *measured}, key=lambda d: (d == "host", labels.get(d, d)))
    rows = [("DEVICE", "ESTIMATE", "WHEN FULL", "MEASURED NOW")]
    for device in devices:
        now = gib_or_mib(measured[device]) if device in measured else "-"
        at, top = gib_or_mib(at_load.get(device, 0)), gib_or_mib(full.get(device, 0))
        rows.append((labels.get(device, device), at, top, now))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["", f"measured now (pid {pid}):"]
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells))
    return "\n".join(lines) + "\n"
