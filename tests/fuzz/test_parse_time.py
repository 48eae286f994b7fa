"""Parse time and memory of every text parser on hostile input (issue 14, item 3).

A crafted 4 KiB line must not stall the daemon: each parser gets lines of 4 KiB and more
built to make a backtracking regex blow up - a slice of a real line repeated until the line
is long, then cut, ended by a character that makes the match fail (the shape that finds
nested quantifiers and overlapping alternations), plus hand-made cases - and each call must
take under ``CALL_BOUND_S`` of CPU time, all of them under ``TOTAL_BOUND_S``, and the
Python memory a call allocates at its peak (tracemalloc) under ``PEAK_BOUND_BYTES``.

CPU time of this thread (``time.thread_time``), not wall time: a busy machine delays a call
but does not make it burn more CPU. A call over the bound is measured twice more and the
least taken (a garbage collection can land inside one call); a catastrophic regex is 10 to
1000 times over, not a little. The fast tier draws ``FAST_SLICES`` slices per seed line;
the slow tier (``slow`` marker) ``SLOW_SLICES``. ``worst_times()`` is what
bench/RESULTS.md quotes.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from collectors import drm, procfs
from collectors.redact import redact_argv
from monitor.integrations import slots as usage
from monitor.integrations.llamaswap import config as llamaswap
from monitor.logs import kernel as kernlog
from monitor.logs import server_log as llamalog
from monitor.logs.kernel_patterns import parse_kmsg_record
from monitor.logs.kernel_records import MAX_MESSAGE_CHARS
from monitor.servers.recognise import parse_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LINE_CHARS = 4096
CALL_BOUND_S = 0.050  # per call on a line
# A whole llama-swap config: per 4 KiB of it, twice a line's bound (pure-Python PyYAML
# scans ~100 KiB/s; the file is read at start and on SIGHUP, not per tick).
FILE_BOUND_S = 0.100
FILE_PARSERS = frozenset({"llama-swap config"})
TOTAL_BOUND_S = 4.0  # per parser, fast tier
PEAK_BOUND_BYTES = 4 * 1024 * 1024
FAST_SLICES = 12
SLOW_SLICES = 400


def _fixture_lines(folder: str, limit: int = 400) -> list[str]:
    lines: list[str] = []
    for path in sorted((FIXTURES / folder).iterdir()):
        if path.is_file():
            lines += [x for x in path.read_text("utf-8", "replace").splitlines() if len(x) > 8]
    return lines[:limit]


# --- the parsers, each fed one text -------------------------------------------------------


def _kernel(text: str) -> None:
    kernlog.parse_lines([text])
    parser = kernlog.KernelLogParser()
    parser.feed(text, kernel=True)
    parser.feed(text, kernel=False)
    parser.flush()
    kernlog.parse_journal_json(json.dumps({"MESSAGE": text, "_TRANSPORT": "kernel"}))
    parse_kmsg_record(f"6,1,2,-;{text}")


def _engine(text: str) -> None:
    llamalog.parse_llama_log([text])
    llamalog.parse_vllm_log([text])


def _fdinfo(text: str) -> None:
    data = text.encode("utf-8", "replace")
    drm.parse_fdinfo(data)
    drm.parse_uevent(data)
    drm.parse_kfd_properties(data)


def _procfs(text: str) -> None:
    data = text.encode("utf-8", "replace")
    procfs.parse_status(data, 1)
    procfs.parse_stat(data)
    procfs.parse_cmdline(data.replace(b" ", b"\0"))
    procfs.host_device(data)


def _slots(text: str) -> None:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = [{"id": 0, "n_ctx": 8192, "n_prompt_tokens": text}]
    usage.parse_slots(doc)
    usage.parse_n_tokens_max(text)


def _swap_config(text: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", encoding="utf-8", errors="replace") as f:
        f.write(text)
        f.flush()
        with contextlib.suppress(llamaswap.SwapConfigError):
            llamaswap.load_config(f.name)


def _redact(text: str) -> None:
    redact_argv([text])  # one argument holding a command (sh -c '...')


def _redact_words(text: str) -> None:
    redact_argv(text.split())


def _argv(text: str) -> None:
    parse_command(["llama-server", *text.split()], {"LLAMA_ARG_MODEL": text})


# --- seeds: real lines of each kind -------------------------------------------------------

_KERNEL_SEEDS = _fixture_lines("kernlog") + [
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
    "global_oom,task_memcg=/user.slice/user-1000.slice/session-2.scope,task=llama-server,"
    "pid=1234,uid=1000",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/system.slice/llama.service,task_memcg=/system.slice/llama.service,"
    "task=llama-server,pid=99,uid=0",
    "Memory cgroup out of memory: Killed process 1234 (llama-server) total-vm:100kB, "
    "anon-rss:50kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:10kB oom_score_adj:0",
    "amdgpu 0000:c3:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32770, "
    "for process llama-server pid 4242 thread llama-server pid 4242)",
    "amdgpu 0000:c3:00.0: amdgpu:   in page starting at address 0x0000000012345000 from "
    "IH client 0x1b (UTCL2)",
    "amdgpu 0000:c3:00.0: amdgpu: GCVM_L2_PROTECTION_FAULT_STATUS:0x00301031",
    "systemd-oomd[612]: Killed /user.slice/user-1000.slice/app.scope due to memory pressure "
    "for /user.slice/user-1000.slice being 81.22% > 80.00% for > 20s with reclaim activity",
]
_ENGINE_SEEDS = _fixture_lines("llamalog") + [
    "common_memory_breakdown_print: |   - ROCm0 (RX 7900 XTX) | 24560 = 1000 + (22000 = "
    "20000 + 1500 + 500) + 1560 |",
    "\x1b[0;33m0.00.193.540 W llama_context: n_ctx_per_seq (4096) < n_ctx_train\x1b[0m",
    "Maximum concurrency for 8,192 tokens per request: 12.5x",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
    "total capacity of 23.64 GiB of which 1.2 GiB is free.",
]
_FDINFO_SEEDS = [
    "pos:\t0\nflags:\t02100002\nmnt_id:\t24\ndrm-driver:\tamdgpu\ndrm-client-id:\t42\n"
    "drm-pdev:\t0000:c3:00.0\npasid:\t32772\ndrm-memory-vram:\t1048576 KiB\n"
    "drm-memory-gtt:\t20971520 KiB\ndrm-memory-cpu:\t0 KiB\ndrm-engine-gfx:\t123456 ns\n"
    "drm-resident-local0:\t4096 KiB\ndrm-total-system0:\t8 MiB\n",
    "PCI_SLOT_NAME=0000:c3:00.0\nDRIVER=amdgpu\nPCI_ID=1002:1586\n",
    "cpu_cores_count 16\nsimd_count 80\nmem_banks_count 1\nlocal_mem_size 0\n",
]
_PROCFS_SEEDS = [
    "Name:\tllama-server\nUmask:\t0022\nState:\tS (sleeping)\nPid:\t4242\nUid:\t1000\t1000"
    "\t1000\t1000\nVmHWM:\t 1234 kB\nVmRSS:\t 1200 kB\nRssAnon:\t 1000 kB\nRssFile:\t 200 kB"
    "\nRssShmem:\t 0 kB\nVmSwap:\t 0 kB\n",
    "4242 (llama-server (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 8 0 12345",
    "MemTotal:       131072000 kB\nMemFree:        1000000 kB\nMemAvailable:   2000000 kB\n",
]
_SLOTS_SEEDS = [
    json.dumps(
        [
            {
                "id": 0,
                "id_task": 7,
                "n_ctx": 8192,
                "is_processing": True,
                "next_token": [{"n_decoded": 12, "n_remain": -1}],
                "n_prompt_tokens": 100,
            }
        ]
    ),
    "# HELP llamacpp:n_tokens_max Largest observed n_tokens.\n"
    '# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max{model="x"} 8192 1700000\n',
]
_SWAP_SEEDS = [
    (FIXTURES / "llamaswap" / name).read_text()
    for name in ("matrix.yaml", "macros.yaml", "groups.yaml", "cmd-comments.yaml")
]
_REDACT_SEEDS = [
    "llama-server --api-key sk-abcdefghijklmnopqrstuvwxyz -m /m.gguf --hf-token hf_abcdefghij"
    "klmnopqrstuvwxyz",
    "curl -H 'Authorization: Bearer abcdefghijkl' https://user:pw@example.invalid/v1?token=x"
    "&key=y&api_key=z",
    "env HF_TOKEN=hf_x OPENAI_API_KEY=sk-x TOKEN=t PASSWORD=p sh -c 'llama-server --passphrase "
    "p --password=q --secret s'",
    'vllm serve m --header \'{"Authorization": "Bearer abc", "api_key": "k"}\' -o '
    '\'{"token":"t","password":"p"}\'',
]
_ARGV_SEEDS = [
    "llama-server -m /models/q.gguf -c 8192 -np 4 -ngl 99 -fa on --cache-type-k q8_0 "
    "--tensor-split 3,1 -ot blk\\.[0-9]+\\.ffn_.*=CPU --override-kv a.b=int:3",
    "python -m vllm.entrypoints.openai.api_server --model m --max-model-len 32k "
    "--gpu-memory-utilization 0.9 --kv-cache-dtype fp8",
]

PARSERS: dict[str, tuple[Callable[[str], None], list[str]]] = {
    "kernel log": (_kernel, _KERNEL_SEEDS),
    "engine log": (_engine, _ENGINE_SEEDS),
    "fdinfo/uevent/kfd": (_fdinfo, _FDINFO_SEEDS),
    "procfs": (_procfs, _PROCFS_SEEDS),
    "/slots + /metrics": (_slots, _SLOTS_SEEDS),
    "llama-swap config": (_swap_config, _SWAP_SEEDS),
    "redaction (one argument)": (_redact, _REDACT_SEEDS),
    "redaction (argv)": (_redact_words, _REDACT_SEEDS),
    "command line": (_argv, _ARGV_SEEDS),
}

# YAML aliases that expand to 9**7 strings when walked as a tree ("billion laughs").
_LAUGHS = (
    "a: &a ["
    + ",".join(["lol"] * 9)
    + "]\n"
    + "".join(
        f"{b}: &{b} [" + ",".join([f"*{a}"] * 9) + "]\n"
        for a, b in zip("abcdef", "bcdefg", strict=True)
    )
    + "models:\n  m:\n    cmd: llama-server --port ${PORT}\n    aliases: *g\n"
)
_MERGE_LAUGHS = (
    "a: &a {x: 1}\n"
    + "".join(
        f"{b}: &{b} {{<<: [*{a}, *{a}, *{a}]}}\n"
        for a, b in zip("abcdefghijklmn", "bcdefghijklmno", strict=True)
    )
    + "models:\n  m:\n    cmd: llama-server --port ${PORT}\n    <<: *o\n"
)
_MACRO_LAUGHS = (
    "macros:\n  m0: lol\n"
    + "".join(f'  m{i + 1}: "${{m{i}}} ${{m{i}}} ${{m{i}}}"\n' for i in range(30))
    + "models:\n  m:\n    cmd: llama-server --port ${PORT} ${m30}\n"
)
_SELF_MERGE = "a: &a {<<: *a, x: 1}\nmodels:\n  m:\n    <<: *a\n    cmd: x ${PORT}\n"
_MATRIX_OR = (
    "models:\n"
    + "".join(f"  m{i}:\n    cmd: x ${{PORT}}\n" for i in range(24))
    + (
        "routing:\n  router:\n    use: matrix\n    settings:\n      matrix:\n        sets:\n"
        '          s: "' + " & ".join(f"(m{i} | m{i + 1})" for i in range(23)) + '"\n'
    )
)

# Hand-made: the line of issue 14 (64 s before the fix) and its relatives.
_SUMMARY_UNIT = ",cpuset=,mems_allowed=,oom_memcg=,task_memcg="
ADVERSARIAL: dict[str, list[str]] = {
    "kernel log": [
        "oom-kill:constraint=X,nodemask=" + _SUMMARY_UNIT * 90 + "x",
        "oom-kill:constraint=X,nodemask=" + _SUMMARY_UNIT * 90,
        "oom-kill:constraint=X" + ",cpuset=a,mems_allowed=" * 200 + ",task=a,pid=1,uid=x",
        "Killed process 1 (" + "a) " * 2000,
        "Out of memory: " + ": " * 2000 + "Killed process",
        "x invoked oom-killer: " + "gfp_mask=0x1(" * 300 + "order=",
        "amdgpu [gfxhub] page fault (src_id:0 ring:0 vmid:0 pasid:0, for process "
        + "a pid 1 thread " * 250,
        "amdgpu " + "_L2_PROTECTION_FAULT_STATUS" * 150,
        "NVRM: Xid (PCI:0000:01:00): 79, " + "pid=1, name=a, " * 250,
        "Killed /a due to memory pressure for /a being 1% > 1% for > " + "x " * 2000,
        "0" * 4096 + "MiB",
    ],
    "engine log": [
        "load_tensors: " + "0MiB" * 1000 + " buffer size = 1 MiB",
        "llama_kv_cache: size = 1 MiB (" + "0x1a" * 1000 + " cells",
        "| - " + "| - 1 = 1 + (" * 300 + "|",
        "failed to allocate " + "buffer " * 600,
        "\x1b[" + "0;" * 2000 + "\x1b",
    ],
    "redaction": [
        "a://b:" * 700,
        "sh -c '" * 700,
        "--" + "a-" * 2000 + "!",
        "Authorization: " + "Bearer " * 600,
        "?token=" * 600,
        '{"api_key": ' * 400,
    ],
    "command line": ["A" * 4096 + "=", "a" * 4096 + "::" + "b" * 10, "1" * 4096 + "x"],
    "llama-swap config": [
        _LAUGHS,
        _LAUGHS.replace("${PORT}", "${PORT} ${env.HOME}"),
        _MERGE_LAUGHS,
        _MACRO_LAUGHS,
        _SELF_MERGE,
        _MATRIX_OR,
        "models: " + "[{a: " * 1500,
        "x: ${env.HOME}\nm: " + "[" * 3000,
    ],
}


def _adversarial(name: str) -> list[str]:
    return ADVERSARIAL.get(name.split(" (")[0], []) + ADVERSARIAL.get(name, [])


def _repeat_slices(seeds: list[str], per_seed: int, rng: random.Random) -> Iterator[str]:
    """A slice of a seed repeated past ``LINE_CHARS``, between the seed's own start and an
    end that fails the match (nothing, a NUL, a letter, or the seed's real end)."""
    for seed in seeds:
        for _ in range(per_seed):
            i = rng.randrange(len(seed))
            j = rng.randrange(i + 1, min(len(seed), i + 120) + 1)
            unit = seed[i:j]
            times = LINE_CHARS // len(unit) + 1
            tail = rng.choice(("", "\x00", "x", ")", seed[j:]))
            yield seed[:i] + unit * times + tail


def _bound_s(name: str, text: str) -> float:
    return FILE_BOUND_S * max(1.0, len(text) / 4096) if name in FILE_PARSERS else CALL_BOUND_S


def _cpu_time(parse: Callable[[str], None], text: str, bound_s: float = CALL_BOUND_S) -> float:
    start = time.thread_time()
    parse(text)
    took = time.thread_time() - start
    if took > bound_s:  # measure again: one call may carry a garbage collection
        for _ in range(2):
            start = time.thread_time()
            parse(text)
            took = min(took, time.thread_time() - start)
    return took


def worst_times(per_seed: int, seed: int = 14) -> dict[str, tuple[float, float, int, str, bool]]:
    """name -> (worst call s, total s, calls, the worst input's start, any over its bound)."""
    rng = random.Random(seed)
    out: dict[str, tuple[float, float, int, str, bool]] = {}
    for name, (parse, seeds) in PARSERS.items():
        worst, total, calls, worst_text, over = 0.0, 0.0, 0, "", False
        texts = list(_repeat_slices(seeds, per_seed, rng)) + _adversarial(name)
        for text in texts:
            bound = _bound_s(name, text)
            took = _cpu_time(parse, text, bound)
            total += took
            calls += 1
            over = over or took > bound
            if took > worst:
                worst, worst_text = took, text
        out[name] = (worst, total, calls, worst_text[:80], over)
    return out


def _check(per_seed: int, total_bound_s: float) -> None:
    times = worst_times(per_seed)
    slow = {
        name: (round(w * 1000, 1), start) for name, (w, _, _, start, over) in times.items() if over
    }
    assert not slow, f"calls over {CALL_BOUND_S * 1000:.0f} ms (ms, input start): {slow}"
    for name, (_, total, calls, _, _) in times.items():
        assert total < total_bound_s, f"{name}: {calls} calls took {total:.2f} s CPU"


def test_issue_14_oom_summary_line_parses_fast() -> None:
    line = "oom-kill:constraint=X,nodemask=" + _SUMMARY_UNIT * 90 + "x"
    assert len(line) <= MAX_MESSAGE_CHARS
    parser = kernlog.KernelLogParser()
    took = _cpu_time(lambda text: parser.feed(text, kernel=True), line)
    assert took < CALL_BOUND_S, f"{took:.3f} s"


def test_oom_summary_still_parsed_after_the_rewrite() -> None:
    line = (
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
        "oom_memcg=/system.slice/a,b.service,task_memcg=/system.slice/a,b.service,"
        "task=llama,server,pid= 4242,uid=1000"
    )
    (event,) = kernlog.parse_lines([line])
    assert event.kind == "oom_kill" and event.pid == 4242 and event.comm == "llama,server"
    assert event.data["memcg"] == "/system.slice/a,b.service"
    assert event.data["task_memcg"] == "/system.slice/a,b.service"
    assert event.data["mems_allowed"] == "0-1" and event.data["scope"] == "memcg"
    assert event.data["nodemask"] == "(null)" and event.data["cpuset"] == "/"


def test_every_parser_is_fast_on_hostile_lines() -> None:
    _check(FAST_SLICES, TOTAL_BOUND_S)


@pytest.mark.slow
def test_every_parser_is_fast_on_many_hostile_lines() -> None:
    _check(SLOW_SLICES, TOTAL_BOUND_S * SLOW_SLICES / FAST_SLICES)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_parse_peak_memory_is_bounded(name: str) -> None:
    parse, seeds = PARSERS[name]
    texts = list(_repeat_slices(seeds[:4], 2, random.Random(7))) + _adversarial(name)
    texts.append(("x" * 1000 + "\n") * 16)
    tracemalloc.start()
    try:
        for text in texts:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            parse(text)
            peak = tracemalloc.get_traced_memory()[1] - before
            assert peak < PEAK_BOUND_BYTES, f"{name}: {peak} bytes for {text[:60]!r}"
    finally:
        tracemalloc.stop()
