"""Exit counters by class and model (issue 29 point 5): two crashes of two models are two
series; the model label stays bounded (MODEL_SLOTS models, the rest "other")."""

from __future__ import annotations

from collectors.base import ExitedProcess, ProcessInfo
from monitor.daemon.counters import (
    EXIT_CAUSES,
    MAX_MODEL_CHARS,
    MODEL_HOLD_MS,
    MODEL_SLOTS,
    EventCounts,
)


def server(pid: int, model: str) -> ProcessInfo:
    argv = ("llama-server", "-m", f"/models/{model}", "--port", str(8000 + pid))
    return ProcessInfo(pid, pid, None, 1, 1000, "llama-server", argv, "llama.cpp", ("inference",))


def crash(p: ProcessInfo, cause: str = "crashed") -> ExitedProcess:
    return ExitedProcess(p.pid, p.start_ticks, 0, cause=cause)


def test_two_crashes_of_two_models_are_two_series() -> None:
    counts = EventCounts()
    a, b = server(1, "a.gguf"), server(2, "b.gguf")
    counts.observe([], [], [a, b], 1000)
    zeros = counts.totals().exits_by_model
    assert zeros[("crashed", "a.gguf")] == zeros[("crashed", "b.gguf")] == 0  # before the crash
    counts.observe([crash(a)], [], [b], 2000)
    counts.observe([crash(b)], [], [], 3000)
    totals = counts.totals()
    assert totals.exits_by_model[("crashed", "a.gguf")] == 1
    assert totals.exits_by_model[("crashed", "b.gguf")] == 1
    assert totals.exits["crashed"] == 2  # the sum by cause
    assert sum(totals.exits.values()) == 2


def test_a_normal_stop_counts_under_its_own_class_and_model() -> None:
    counts = EventCounts()
    a = server(1, "a.gguf")
    counts.observe([], [], [a], 0)
    counts.observe([crash(a, "stopped")], [], [], 1)
    by_model = counts.totals().exits_by_model
    assert by_model[("stopped", "a.gguf")] == 1
    assert by_model[("crashed", "a.gguf")] == 0


def test_models_past_the_slots_count_as_other_until_a_slot_frees() -> None:
    counts = EventCounts()
    first = [server(i, f"m{i}.gguf") for i in range(MODEL_SLOTS)]
    late = server(100, "late.gguf")
    counts.observe([], [], [*first, late], 0)
    counts.observe([crash(late)], [], first, 1)
    by_model = counts.totals().exits_by_model
    assert ("crashed", "late.gguf") not in by_model
    assert by_model[("crashed", "other")] == 1
    models = {m for _, m in by_model}
    assert len(models) == MODEL_SLOTS + 2  # the slots, "" and "other"
    assert len(by_model) == len(EXIT_CAUSES) * (MODEL_SLOTS + 2)
    # m0 stops; an hour later its place goes to the next new model, its series go
    counts.observe([crash(first[0], "stopped")], [], first[1:], 2)
    again = server(101, "again.gguf")
    counts.observe([], [], [*first[1:], again], 2 + MODEL_HOLD_MS - 1)
    assert ("crashed", "again.gguf") not in counts.totals().exits_by_model  # held: m0's exit
    counts.observe([], [], [*first[1:], again], 2 + MODEL_HOLD_MS)
    by_model = counts.totals().exits_by_model
    assert by_model[("crashed", "again.gguf")] == 0
    assert ("stopped", "m0.gguf") not in by_model
    assert len(by_model) == len(EXIT_CAUSES) * (MODEL_SLOTS + 2)


def test_a_live_model_never_loses_its_slot() -> None:
    counts = EventCounts()
    first = [server(i, f"m{i}.gguf") for i in range(MODEL_SLOTS)]
    counts.observe([], [], first, 0)
    late = server(100, "late.gguf")
    counts.observe([], [], [*first, late], 10 * MODEL_HOLD_MS)
    assert {m for _, m in counts.totals().exits_by_model} >= {f"m{i}.gguf" for i in range(16)}
    assert ("crashed", "late.gguf") not in counts.totals().exits_by_model


def test_the_model_label_is_the_file_name_cut_to_64_characters() -> None:
    counts = EventCounts()
    long = server(1, "x" * 100 + ".gguf")
    counts.observe([], [], [long], 0)
    counts.observe([crash(long)], [], [], 1)
    (model,) = {m for (c, m), n in counts.totals().exits_by_model.items() if n}
    assert model == "x" * MAX_MODEL_CHARS
