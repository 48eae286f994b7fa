"""``vramscope predict``'s two renderings of one :class:`PredictResult`: the
``vramscope.predict/1`` JSON document (docs/api.md) and the text a person reads. Both read
the typed result; neither goes through the other."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from monitor.analysis.predict_request import PredictResult
from monitor.analysis.predict_verdicts import DeviceVerdict
from monitor.device_names import device_labels, relabel
from monitor.units import gib_number as _gib

if TYPE_CHECKING:
    from monitor.analysis.predict_request import Throughput


def _device(d: DeviceVerdict) -> dict[str, Any]:
    return {
        **dataclasses.asdict(d),
        "slack_bytes": d.slack_bytes,
        "must_fit_bytes": d.must_fit_bytes,
        "not_resident_bytes": d.not_resident_bytes,
    }


def _throughput(t: Throughput) -> dict[str, Any]:
    s = t.speculation
    return {
        "tokens_per_s": t.tokens_per_s,  # this launch, drafting off
        "unknown": t.unknown,
        "draft": None
        if s is None
        else {
            "verdict": "wins" if s.wins else "loses",
            "baseline": t.baseline,
            "without_draft_tokens_per_s": s.plain_tokens_per_s,
            "with_draft_tokens_per_s": s.draft_tokens_per_s,
            "gain_pct": s.gain_pct,
            "accept": s.accept,
            "n_draft": s.n_draft,
            "break_even_accept": s.break_even_accept,
            "verification_bound": s.target_bound,
        },
        "sources": list(t.sources),
        "notes": list(t.notes),
    }


def _throughput_lines(t: Throughput) -> list[str]:
    s = t.speculation
    if t.unknown is not None:
        lines = [f"throughput (roofline): unknown, {t.unknown}"]
    elif s is None:
        lines = [f"throughput (roofline): {t.tokens_per_s} tokens/s"]
    else:
        from monitor.analysis import throughput as tp

        even = (
            "it cannot win even with every drafted token accepted"
            if s.break_even_accept is None
            else f"break-even acceptance {s.break_even_accept:.2f}"
        )
        lines = [
            f"throughput (roofline): without the draft {s.plain_tokens_per_s} tokens/s "
            f"({t.baseline}); with the draft at acceptance {s.accept:.2f} per token "
            f"(--accept, default {tp.DEFAULT_ACCEPT:.2f}), "
            f"{s.n_draft} drafted per pass: {s.draft_tokens_per_s} tokens/s",
            f"  {s.verdict}; {even}; the verification pass is {s.target_bound}-bound",
        ]
    return [*lines, *(f"  {note}" for note in t.notes), "  figures: " + "; ".join(t.sources)]


def to_dict(result: PredictResult) -> dict[str, Any]:
    """The ``vramscope.predict/1`` document (key order is part of the output)."""
    p = result.prediction
    est = p.estimate
    return {
        "schema": "vramscope.predict/1",
        "verdict": p.verdict,
        "engine": est.engine,
        "model_path": est.model_path,
        "devices": [_device(d) for d in p.devices],
        "grown": None
        if p.grown_verdict is None
        else {
            "verdict": p.grown_verdict,
            "devices": [_device(d) for d in p.grown],
            "bounds": [dataclasses.asdict(f) for f in p.growth_bounds],
            "grows": [
                {"name": c.name, "device": c.device, "bytes": c.bytes, "formula": c.formula}
                for c in est.components
                if c.when == "grows"
            ],
        },
        "llama_fit": None if p.fit is None else dataclasses.asdict(p.fit),
        "would_unload": list(p.evicted),
        "unloaded_by": p.evictor if p.evicted else None,
        "fixes": [dataclasses.asdict(f) for f in p.fixes],
        "fit_ctx": result.fit_ctx if result.want_fit_ctx else None,
        "throughput": None if result.throughput is None else _throughput(result.throughput),
        "estimate_by_device": est.by_device(),
        "notes": list(result.all_notes),
        "approximate": list(est.approximate),
        "launch": {"argv": list(result.command), "n_ctx": est.n_ctx},
    }


def to_json(result: PredictResult) -> str:
    return json.dumps(to_dict(result), indent=2)


def _tail(d: DeviceVerdict) -> str:
    if d.verdict == "oom":
        short = d.must_fit_bytes - d.room_bytes if d.evictable_bytes else -d.slack_bytes
        return f"short by {_gib(short)} GiB"
    if d.verdict == "thrash":
        return (
            f"it loads, but {_gib(d.not_resident_bytes)} GiB of its mmap'd weights will not "
            "stay resident: the kernel evicts their page cache instead of killing, and each "
            "token re-reads them from disk (slow, not dead)"
        )
    return f"{_gib(d.slack_bytes)} GiB to spare after the margin"


def _needs(d: DeviceVerdict) -> str:
    """What the load needs, with the part the kernel may evict named."""
    if not d.evictable_bytes:
        return f"needs {_gib(d.need_bytes)} GiB"
    return (
        f"needs {_gib(d.need_bytes)} GiB ({_gib(d.must_fit_bytes)} GiB that must fit + "
        f"{_gib(d.evictable_bytes)} GiB mmap'd weights, evictable page cache)"
    )


def render_text(result: PredictResult) -> str:
    """The verdict per device, what grows, what would make it fit, the notes; the last
    line is ``verdict: ...``. Not terminal-safe by itself: the CLI escapes it."""
    p = result.prediction
    est = p.estimate
    lines = [f"{est.engine}: {est.model_path or '-'}"]
    for d in p.devices:
        freed = f" (+{_gib(d.freed_bytes)} GiB freed by unloading)" if d.freed_bytes else ""
        lines.append(
            f"{d.device_id}: {_needs(d)}, can get "
            f"{_gib(d.room_bytes)} GiB{freed} (binding: {d.binding or '-'}), margin "
            f"{_gib(d.margin_bytes)} GiB -> {d.verdict.upper()}, {_tail(d)}"
        )
    grown = p.grown_verdict
    if grown is not None:
        what = ", ".join(
            f"{c.name} {_gib(c.bytes)} GiB" for c in est.components if c.when == "grows"
        )
        lines.append(f"once the caches fill ({what}):")
        for d in p.grown:
            lines.append(
                f"  {d.device_id}: {_needs(d)}, can get "
                f"{_gib(d.room_bytes)} GiB -> {d.verdict.upper()}, {_tail(d)}"
            )
        if p.growth_bounds:
            lines.append("  what would make it fit once full:")
            for f in p.growth_bounds:
                frees = ", ".join(f"{_gib(v)} GiB on {k}" for k, v in f.frees.items())
                lines.append(f"    {f.change}: frees {frees} -> {f.verdict}")
    if p.evicted:
        lines.append(f"{p.evictor} would unload first: {', '.join(p.evicted)}")
    if p.fixes:
        lines.append("what would make it fit:")
        for f in p.fixes:
            frees = ", ".join(f"{_gib(v)} GiB on {k}" for k, v in f.frees.items())
            lines.append(f"  {f.change}: frees {frees} -> {f.verdict}")
    if result.want_fit_ctx and result.fit_ctx is not None:
        lines.append(f"largest context that fits: -c {result.fit_ctx}")
    if result.throughput is not None:
        lines += _throughput_lines(result.throughput)
    for note in result.all_notes:
        lines.append(f"note: {note}")
    for line in est.approximate:
        lines.append(f"approximate: {line}")
    verdict = p.verdict.upper()
    if grown == "oom" and p.verdict != "oom":
        verdict += ", OOM once the caches fill"
    elif grown == "thrash" and p.verdict not in ("oom", "thrash"):
        verdict += ", THRASH once the caches fill (its mmap'd weights are evicted)"
    if p.verdict == "thrash":
        verdict += " (it loads; slow, not killed)"
    lines.append(f"verdict: {verdict}")
    # every device by the name status and the TUI print (GPU0 RTX 4060); JSON keeps the id
    pics = result.picture.devices.values()
    return relabel("\n".join(lines), device_labels((d.device_id, d.name) for d in pics))


def fleet_text(answers: list[Any]) -> str:
    """One line per box, best place first (monitor/analysis/fleet.py ranks them)."""
    from monitor.analysis.fleet import ranked

    lines = []
    for a in ranked(answers):
        if a.error is not None:
            lines.append(f"{a.url}: no answer: {a.error}")
            continue
        verdict = (a.verdict or "?").upper()
        if a.grown_verdict == "oom" and a.verdict != "oom":
            verdict += ", OOM once the caches fill"
        room = ""
        if a.headroom_bytes is not None:
            what = "short by" if a.headroom_bytes < 0 else "headroom"
            room = f", {what} {_gib(abs(a.headroom_bytes))} GiB on {a.binding_device}"
        unload = f"; llama-swap would unload {', '.join(a.would_unload)}" if a.would_unload else ""
        lines.append(f"{a.url}: {verdict}{room}{unload}")
    lines.append(_fleet_summary(ranked(answers)))
    return "\n".join(lines)


def _fleet_summary(answers: list[Any]) -> str:
    """The last line: where it fits once full too; else where it fits only at load
    (exit 3: monitor/analysis/fleet.py); else no box."""
    fits = [a.url for a in answers if a.fits]
    if fits:
        return f"fits on: {', '.join(fits)}"
    at_load = [a.url for a in answers if a.error is None and a.fits_at_load]
    if at_load:
        return f"fits at load on {', '.join(at_load)}; no box once caches fill"
    return "fits on: no box"


def fleet_json(answers: list[Any]) -> str:
    """``vramscope.fleet-predict/1``: each box's summary and the daemon's own document."""
    from monitor.analysis.fleet import exit_code, ranked

    boxes = [
        {
            "url": a.url,
            "verdict": a.verdict,
            "grown_verdict": a.grown_verdict,
            "fits": a.fits,
            "headroom_bytes": a.headroom_bytes,
            "binding_device": a.binding_device,
            "would_unload": list(a.would_unload),
            "error": a.error,
            "predict": a.document,
        }
        for a in ranked(answers)
    ]
    doc = {
        "schema": "vramscope.fleet-predict/1",
        "fits_on": [b["url"] for b in boxes if b["fits"]],
        "exit_code": exit_code(answers),
        "boxes": boxes,
    }
    return json.dumps(doc, indent=2)
