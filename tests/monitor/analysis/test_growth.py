"""Growth over the estimate named from the server's own log (issue 18 point 5): the log
parser (monitor/logs/server_cache.py) on real llama.cpp logs and hostile ones, and the
pure attribution (monitor/analysis/growth.py, diagnose.judge_findings)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from monitor.analysis.diagnose import Finding, judge_findings
from monitor.analysis.growth import (
    CHECKPOINTS,
    PROMPT_CACHE,
    UNACCOUNTED,
    Evidence,
    attribute_growth,
    evidence_from_log,
)
from monitor.analysis.judge import Tolerance
from monitor.analysis.measured import Measured
from monitor.estimate.model import HOST, Component, MemoryEstimate
from monitor.logs.server_cache import (
    MAX_QUOTE_CHARS,
    MAX_READ_BYTES,
    MAX_SLOTS,
    ServerLogFollower,
    log_file_of,
    log_source,
    parse_server_cache,
)

MIB, GIB = 1024**2, 1024**3
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llamalog"
GPU = "nvml:0"

STATE = (
    "0.42.101.912 W srv        update:  - cache state: {n} prompts, {mib:.3f} MiB "
    "(limits: 8192.000 MiB, 4096 tokens, 8589934592 est)"
)
CREATED = (
    "1.02.000.001 I slot create_check: id  {slot} | task 7 | created context checkpoint "
    "{i} of {of} (pos_min = 0, pos_max = 99, n_tokens = 100, size = {mib:.3f} MiB)"
)


def real(name: str) -> list[str]:
    return (FIXTURES / name).read_text().splitlines()


# --- the log ------------------------------------------------------------------------------


def test_real_log_cache_state_and_live_checkpoints() -> None:
    r = parse_server_cache(real("real-cpu-gemma3-iswa.log"))
    assert (r.cache_prompts, r.cache_bytes, r.cache_limit_bytes) == (0, 0, 8192 * MIB)
    assert r.cache_line is not None and r.cache_line.startswith("srv        update:  - cache")
    assert r.checkpoints_max == 32 and r.checkpoint_lines == 2
    (slot,) = r.checkpoints
    assert slot.slot_id == 1
    assert slot.sizes_bytes == (int(0.137 * MIB), int(1.252 * MIB))
    assert "created context checkpoint 2 of 32" in slot.line


def test_real_log_without_checkpoints() -> None:
    r = parse_server_cache(real("real-cpu-draft.log"))
    assert r.cache_bytes == 0 and r.checkpoints == () and r.checkpoint_lines == 0


def test_the_latest_cache_state_wins_and_a_new_run_starts_over() -> None:
    lines = [STATE.format(n=1, mib=100.0), STATE.format(n=3, mib=300.0)]
    assert parse_server_cache(lines).cache_bytes == 300 * MIB
    restarted = [*lines, "0.00.002.239 I cmn  common_param: system_info: n_threads = 2"]
    assert parse_server_cache(restarted).cache_bytes is None  # unknown, never 0


def test_checkpoints_follow_the_slot_through_erase_and_the_prompt_cache() -> None:
    lines = [CREATED.format(slot=0, i=i, of=3, mib=float(i)) for i in (1, 2, 3)]
    assert parse_server_cache(lines).checkpoints[0].sizes_bytes == (MIB, 2 * MIB, 3 * MIB)
    # at -ctxcp 3 the oldest goes first, then the 4th is created
    lines += [
        "slot create_check: id  0 | task 7 | erasing old context checkpoint (pos_min = 0, "
        "pos_max = 9, n_tokens = 10, size = 1.000 MiB)",
        CREATED.format(slot=0, i=3, of=3, mib=4.0),
    ]
    assert parse_server_cache(lines).checkpoints[0].sizes_bytes == (2 * MIB, 3 * MIB, 4 * MIB)
    lines.append(
        "slot update_slots: id  0 | task 8 | erased invalidated context checkpoint "
        "(pos_min = 0, pos_max = 99, n_tokens = 100, n_swa = 4, pos_next = 50, size = 4.000 MiB)"
    )
    assert parse_server_cache(lines).checkpoint_bytes == 5 * MIB
    # a new task on slot 0 moves its prompt, checkpoints and all, into the prompt cache
    moved = [
        *lines,
        "slot get_availabl: id  0 | task -1 | selected slot by LRU, t_last = 12",
        "srv  get_availabl: updating prompt cache",
    ]
    assert parse_server_cache(moved).checkpoints == ()
    idle = [*lines, "slot process_sing: id  0 | task -1 | saving idle slot to prompt cache"]
    assert parse_server_cache(idle).checkpoints == ()


def test_a_missed_create_is_counted_from_n_of_m() -> None:
    """The tail of a long log starts mid-run: 'checkpoint 5 of 32' is 5 held, only the
    sizes seen are summed (a lower bound), never more than the count."""
    r = parse_server_cache([CREATED.format(slot=2, i=5, of=32, mib=2.0)])
    assert r.checkpoints[0].sizes_bytes == (2 * MIB,)
    many = [CREATED.format(slot=2, i=1, of=32, mib=1.0)] * 10
    assert parse_server_cache(many).checkpoints[0].sizes_bytes == (MIB,)


def test_disabled_prompt_cache() -> None:
    r = parse_server_cache(["srv    load_model: prompt cache is disabled - use `--cache-ram N`"])
    assert r.cache_disabled and r.cache_bytes is None
    _, checked = evidence_from_log(r, "llama.cpp log x")
    assert "llama.cpp log x: the prompt cache is disabled" in checked


def test_hostile_lines_are_bounded_and_never_raise() -> None:
    junk = [
        "cache state: 99999999999999999999 prompts, 1e999 MiB",
        "cache state: 3 prompts, 1.2.3 MiB",
        "created context checkpoint 1 of 3 (size = nan MiB)",
        "created context checkpoint 1 of 3 (size = 5.000 MiB)",  # no slot id
        b"\xff\xfe cache state: 1 prompts, 1.000 MiB \x1b]52;c;cGF5bG9hZA==\x07",
        None,
        12,
        "x" * 100_000 + "cache state: 1 prompts, 7.000 MiB",  # beyond the line cut
    ]
    r = parse_server_cache(junk)
    assert r.cache_bytes == MIB  # the bytes line, control characters kept for escaping
    assert r.cache_line is not None and len(r.cache_line) <= MAX_QUOTE_CHARS
    assert r.checkpoints == ()
    long = "srv update:  - cache state: 2 prompts, 2.000 MiB (limits: 1.000 MiB" + "y" * 9000
    quoted = parse_server_cache([long]).cache_line
    assert quoted is not None and len(quoted) == MAX_QUOTE_CHARS and quoted.endswith("...")
    slots = [CREATED.format(slot=i, i=1, of=2, mib=1.0) for i in range(MAX_SLOTS + 50)]
    assert len(parse_server_cache(slots).checkpoints) == MAX_SLOTS


def test_parse_time_is_bounded_on_a_big_log() -> None:
    lines = [CREATED.format(slot=i % 8, i=1 + i % 32, of=32, mib=1.0) for i in range(50_000)]
    start = time.monotonic()
    r = parse_server_cache(lines)
    assert time.monotonic() - start < 30  # generous: a busy 2-core box
    assert sum(len(s.sizes_bytes) for s in r.checkpoints) <= 8 * 32


def test_the_follower_reads_the_end_then_what_is_appended(tmp_path: Path) -> None:
    log = tmp_path / "llama.log"
    filler = "".join(f"srv  update_slots: all slots are idle {i}\n" for i in range(400_000))
    log.write_text(STATE.format(n=1, mib=1.0) + "\n" + filler)
    assert log.stat().st_size > MAX_READ_BYTES
    follower = ServerLogFollower(log)
    first = follower.read()
    assert first is not None and first.cache_bytes is None  # beyond the tail read: unknown
    with log.open("a") as f:
        f.write(STATE.format(n=2, mib=2.0) + "\n" + STATE.format(n=3, mib=3.0))
    second = follower.read()
    assert second is not None and second.cache_bytes == 2 * MIB  # the unfinished line waits
    with log.open("a") as f:
        f.write("\n")
    third = follower.read()
    assert third is not None and third.cache_bytes == 3 * MIB
    log.write_text(STATE.format(n=4, mib=4.0) + "\n")  # truncated: read from its start
    fourth = follower.read()
    assert fourth is not None and fourth.cache_bytes == 4 * MIB
    follower.close()


def test_the_follower_never_reads_through_a_link_or_a_fifo(tmp_path: Path) -> None:
    log = tmp_path / "llama.log"
    log.write_text(STATE.format(n=1, mib=1.0) + "\n")
    link = tmp_path / "link.log"
    link.symlink_to(log)
    follower = ServerLogFollower(link)
    assert follower.read() is None and follower.error
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    follower = ServerLogFollower(fifo)
    assert follower.read() is None  # O_NONBLOCK: never waits for a writer
    assert follower.error == "fifo.log: not a regular file"
    assert ServerLogFollower(tmp_path / "none.log").read() is None


def test_log_file_of_a_command_line() -> None:
    argv = ["llama-server", "-m", "m.gguf", "--log-file", "a.log", "--log-file=/var/b.log"]
    assert log_file_of(argv, "/srv") == Path("/var/b.log")
    assert log_file_of(argv[:5], "/srv") == Path("/srv/a.log")
    assert log_file_of(argv[:5], None) is None  # relative, and the cwd is unknown
    assert log_file_of(["llama-server", "--log-file"], "/srv") is None
    deep = Path("/" + "d/" * 5000 + "llama.log")
    assert log_source(deep).endswith("d/llama.log") and len(log_source(deep)) < 250


# --- the attribution ----------------------------------------------------------------------


def estimate(device_bytes: int, host_bytes: int, cache_ram_mib: int = 8192) -> MemoryEstimate:
    return MemoryEstimate(
        "llama.cpp",
        "m.gguf",
        (
            Component("weights", GPU, device_bytes, "f"),
            Component("kv", HOST, host_bytes, "f", "anon"),
            Component("cache_ram", HOST, cache_ram_mib * MIB, "f", "anon", "grows"),
        ),
    )


def cache_evidence(mib: int) -> Evidence:
    return Evidence(
        PROMPT_CACHE,
        mib * MIB,
        "llama.cpp log /l",
        STATE.format(n=3, mib=float(mib)),
        3,
        8192 * MIB,
    )


def test_growth_explained_by_the_prompt_cache_leaves_nothing_unaccounted() -> None:
    est = estimate(2 * GIB, 100 * MIB)
    held = Measured(2 * GIB, 100 * MIB + 310 * MIB, 0)
    g = attribute_growth(held, est, [cache_evidence(300)], ["log: 300 MiB"])
    assert g.growth_bytes == 310 * MIB
    (cause,) = g.causes
    assert (cause.component, cause.bytes) == (PROMPT_CACHE, 300 * MIB)
    assert "cache state: 3 prompts, 300.000 MiB" in (cause.evidence or "")
    assert cause.fix == "--cache-ram 0 (off)" and cause.frees_bytes == 300 * MIB
    big = attribute_growth(Measured(2 * GIB, 3 * GIB, 0), est, [cache_evidence(2900)])
    assert big.causes[0].fix == "--cache-ram 1280"  # half of 2900 MiB, in 256 MiB steps
    assert big.causes[0].frees_bytes == (2900 - 1280) * MIB


def test_the_rest_is_unaccounted_only_beyond_the_tolerance_and_says_where() -> None:
    est = estimate(2 * GIB, 100 * MIB)
    over = Measured(2 * GIB + 600 * MIB, 400 * MIB, 0)
    g = attribute_growth(over, est, [cache_evidence(300)], ["llama.cpp log /l: 300 MiB"])
    assert [c.component for c in g.causes] == [PROMPT_CACHE, UNACCOUNTED]
    rest = g.causes[1]
    assert rest.bytes == 600 * MIB and rest.fix is None
    assert "+0.6 GiB on the GPUs, +0.3 GiB in host RAM" in rest.cause
    assert "checked: llama.cpp log /l: 300 MiB" in rest.cause
    assert "driver context" not in rest.cause
    strict = Tolerance(over_pct=1.0, over_min_bytes=5 * MIB)
    near = Measured(2 * GIB, 100 * MIB + 330 * MIB, 0)  # 30 MiB beyond the cache
    assert [c.component for c in attribute_growth(near, est, [cache_evidence(300)]).causes] == [
        PROMPT_CACHE
    ]
    assert UNACCOUNTED in [
        c.component for c in attribute_growth(near, est, [cache_evidence(300)], (), strict).causes
    ]


def test_without_evidence_the_bound_is_named_not_a_guess() -> None:
    est = estimate(GIB, 100 * MIB, cache_ram_mib=4096)
    g = attribute_growth(Measured(GIB, 500 * MIB, 0), est, [], ["no llama.cpp log known"])
    (rest,) = g.causes
    assert rest.component == UNACCOUNTED and rest.bytes == 400 * MIB
    assert "checked: no llama.cpp log known" in rest.cause
    assert "the prompt cache and checkpoints may hold up to 4.0 GiB" in rest.cause


def test_checkpoints_fix_keeps_a_quarter_of_ctxcp_and_frees_the_oldest() -> None:
    sizes = tuple(i * MIB for i in range(1, 13))  # 12 held in one slot, 78 MiB
    ev = Evidence(
        CHECKPOINTS, sum(sizes), "llama.cpp log /l", "created ...", 12, None, 32, (sizes,)
    )
    est = estimate(GIB, 0)
    g = attribute_growth(Measured(GIB, sum(sizes), 0), est, [ev], tolerance=Tolerance(0, 0))
    (cause,) = g.causes
    assert cause.fix == "-ctxcp 8"
    assert cause.frees_bytes == (1 + 2 + 3 + 4) * MIB  # the 4 oldest beyond the newest 8


def test_summary_blames_the_growth_not_the_kv_type() -> None:
    """The issue: over the estimate by the prompt cache, the old summary offered -ctk q8_0
    (the biggest launch finding with a price); the excess over the estimate is growth."""
    est = estimate(GIB, 100 * MIB)
    kv = Finding("kv", GIB, "KV cache 1.0 GiB", "-ctk q8_0 -ctv q8_0", 512 * MIB)
    held = Measured(GIB, 100 * MIB + 300 * MIB, 0)
    d = judge_findings(1, "m.gguf", est, (kv,), held, evidence=[cache_evidence(300)])
    assert d.verdict == "over"
    assert "prompt cache: 300 MiB" in d.summary and "--cache-ram 0 (off) frees" in d.summary
    assert "-ctk" not in d.summary
    without = judge_findings(1, "m.gguf", est, (kv,), held)
    assert "-ctk" not in without.summary and "explained by no evidence" in without.summary
    # over a budget but within the estimate: the launch's biggest part is the cause
    budget = judge_findings(1, "m.gguf", est, (kv,), Measured(GIB, 100 * MIB, 0), None, GIB // 2)
    assert "KV cache 1.0 GiB" in budget.summary and "-ctk q8_0 -ctv q8_0 frees" in budget.summary
