"""Malformed input to every text parser the daemon feeds: a documented error, or skipped,
never another exception; each example under a deadline."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors import _fs
from collectors.drm import (
    ClientMemory,
    parse_fdinfo,
    parse_kfd_properties,
    parse_size,
    parse_uevent,
)
from collectors.procfs import host_device, parse_cmdline, parse_stat, parse_status
from monitor import config as config_mod
from monitor.integrations.llamaswap import config as llamaswap
from monitor.logs import kernel as kernlog
from monitor.logs import server_log as llamalog
from monitor.logs.kernel_patterns import parse_kmsg_record
from monitor.logs.kernel_records import KernelEvent, KmsgRecord

FAST = settings(
    max_examples=300, deadline=500, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def _lines(keys: list[str], values: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    """Text made of plausible ``key: value`` lines, noise lines and odd separators."""
    line = st.one_of(
        st.tuples(
            st.sampled_from(keys), st.sampled_from([":", ":\t", ": ", "", "::", "="]), values
        ).map("".join),
        st.text(max_size=60),
    )
    return st.lists(line, max_size=30).map(
        lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")
    )


_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["", " ", "-1", "1e9", "0x10", "١٢", "1_000", "9" * 5000, "nan", "\0"]),
)
_VALUES = st.tuples(
    _NUMBERS,
    st.sampled_from(["", " kB", " KiB", " MiB", " GiB", " B", " kb", " TiB", " x", "kB kB"]),
).map("".join)
_BYTES = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=512).map(lambda t: t.encode("utf-8", "surrogatepass")),
)

FDINFO_KEYS = [
    "drm-driver",
    "drm-pdev",
    "drm-client-id",
    "pasid",
    "pdev",
    "drm-memory-vram",
    "drm-memory-gtt",
    "drm-memory-cpu",
    "drm-resident-vram",
    "drm-total-gtt",
    "drm-resident-local0",
    "drm-total-system0",
    "drm-resident-vram0",
    "drm-shared-system",
    "drm-purgeable-gtt",
    "drm-active-vram",
    "vram mem",
    "gtt mem",
    "cpu mem",
    "drm-",
    "drm--",
    "drm-engine-gfx",
    "drm-cycles-rcs",
]


@FAST
@given(
    st.one_of(
        _BYTES,
        _lines(
            FDINFO_KEYS,
            st.one_of(
                _VALUES, st.sampled_from(["amdgpu", "i915", "xe", "0000:03:00.0", "AMDGPU", "\xff"])
            ),
        ),
    )
)
def test_fdinfo_never_raises(data: bytes) -> None:
    got = parse_fdinfo(data)
    assert isinstance(got, ClientMemory)
    for value in (got.vram_bytes, got.gtt_bytes, got.cpu_bytes, got.client_id, got.pasid):
        assert value is None or (isinstance(value, int) and value >= 0)
    assert got.total_bytes() >= 0
    size = parse_size(data[:40])
    assert size is None or size >= 0
    assert isinstance(parse_uevent(data), dict)
    assert all(isinstance(v, int) for v in parse_kfd_properties(data).values())


@settings(FAST, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(_BYTES, _VALUES.map(str.encode), _NUMBERS.map(lambda n: (n + "\n").encode())))
def test_sysfs_int_file_is_an_int_or_none(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "mem_info_vram_used"
    path.write_bytes(data)
    got = _fs.try_read_int(path)
    assert got is None or isinstance(got, int)
    assert _fs.try_read_int(tmp_path / "absent") is None


STATUS_KEYS = [
    "Name",
    "Uid",
    "VmHWM",
    "VmLck",
    "RssAnon",
    "RssFile",
    "RssShmem",
    "VmSwap",
    "MemTotal",
    "MemAvailable",
    "MemFree",
    "Hugepagesize",
    "HugePages_Total",
    "HugePages_Free",
    "SwapTotal",
    "SwapFree",
    "Shmem",
    "Mlocked",
]


@FAST
@given(
    st.one_of(
        _BYTES,
        _lines(STATUS_KEYS, st.one_of(_VALUES, st.lists(_NUMBERS, max_size=4).map("\t".join))),
    )
)
def test_proc_status_and_meminfo_never_raise(data: bytes) -> None:
    row, uid = parse_status(data, 42)
    assert row.pid == 42 and (uid is None or uid >= 0)
    assert host_device(data).device_id == "host"


_COMM = st.text(max_size=20).map(lambda t: t.encode("utf-8", "surrogatepass"))


@FAST
@given(
    st.one_of(
        _BYTES,
        st.tuples(
            st.integers(0, 2**22).map(str), _COMM, st.lists(_NUMBERS, max_size=30).map(" ".join)
        ).map(lambda t: t[0].encode() + b" (" + t[1] + b") " + t[2].encode(errors="replace")),
    )
)
def test_proc_stat_is_a_triple_or_none(data: bytes) -> None:
    got = parse_stat(data)
    if got is not None:
        comm, ppid, start_ticks = got
        assert isinstance(comm, str) and isinstance(ppid, int) and isinstance(start_ticks, int)
    assert all(isinstance(a, str) for a in parse_cmdline(data))


KERNEL_LINES = [
    "Out of memory: Killed process 1234 (llama-server) total-vm:100kB, anon-rss:50kB, "
    "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:10kB oom_score_adj:0",
    "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,"
    "global_oom,task_memcg=/user.slice,task=llama-server,pid=1234,uid=1000",
    "llama-server invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE), order=0",
    "NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus.",
    "amdgpu 0000:03:00.0: amdgpu: [gfxhub] page fault (src_id:0 ring:24 vmid:3 pasid:32770)",
    "systemd-oomd[612]: Killed /user.slice/app.scope due to memory pressure",
    "6,1234,5678901,-;Out of memory: Killed process 99 (python)",
    "[12345.678901] amdgpu: VM_L2_PROTECTION_FAULT_STATUS:0x00301031",
    '{"MESSAGE": "Out of memory: Killed process 7 (x)", "_TRANSPORT": "kernel"}',
    '{"MESSAGE": [255, 254, 0], "__REALTIME_TIMESTAMP": "x"}',
    " SUBSYSTEM=pci",
]


def _mutated(seeds: list[str]) -> st.SearchStrategy[str]:
    """A seed line cut, spliced with noise, or with digits replaced."""
    return st.tuples(
        st.sampled_from(seeds), st.integers(0, 400), st.text(max_size=40), st.booleans()
    ).map(lambda t: (t[0][: t[1]] + t[2] + t[0][t[1] :]) if t[3] else t[0][: t[1]] + t[2])


@FAST
@given(
    st.lists(
        st.one_of(_mutated(KERNEL_LINES), st.text(max_size=200), st.binary(max_size=200)),
        max_size=20,
    )
)
def test_kernel_log_lines_never_raise(lines: list[str | bytes]) -> None:
    events = kernlog.parse_lines(lines)  # type: ignore[arg-type]
    assert all(isinstance(e, KernelEvent) for e in events)
    for line in lines:
        got = parse_kmsg_record(line)
        assert got is None or isinstance(got, KmsgRecord)
        if isinstance(line, str):
            kernlog.parse_journal_json(line)


LLAMA_LINES = [
    "load_tensors:        ROCm0 model buffer size =  4403.49 MiB",
    "load_tensors:   CPU_Mapped model buffer size =   315.30 MiB",
    "llama_kv_cache:      ROCm0 KV buffer size =  1152.00 MiB",
    "llama_kv_cache: size = 1152.00 MiB (  8192 cells,  36 layers,  1/1 seqs), "
    "K (f16):  576.00 MiB, V (f16):  576.00 MiB",
    "llama_context:      ROCm0 compute buffer size =   304.00 MiB",
    "llama_context:  ROCm_Host  output buffer size =     0.58 MiB",
    "llama_context: n_ctx         = 8192",
    "srv load_model: loading model '/m.gguf'",
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9000.00 MiB on device 0: "
    "cudaMalloc failed: out of memory",
    "common_memory_breakdown_print: |   - ROCm0 (RX 7900 XTX) | 24560 = 1000 + (22000 = "
    "20000 + 1500 + 500) + 1560 |",
    "INFO 01-01 00:00:00 worker.py:1] Model loading took 14.99 GiB",
    "Maximum concurrency for 8,192 tokens per request: 12.5x",
]


@FAST
@given(
    st.lists(
        st.one_of(
            _mutated(LLAMA_LINES),
            st.text(max_size=300),
            st.binary(max_size=100),
            st.none(),
            st.integers(),
        ),
        max_size=30,
    )
)
def test_llama_log_lines_never_raise(lines: list[object]) -> None:
    report = llamalog.parse_llama_log(lines)  # type: ignore[arg-type]
    assert isinstance(report, llamalog.LlamaLogReport)
    assert isinstance(llamalog.parse_vllm_log(lines), llamalog.VllmLogReport)  # type: ignore[arg-type]


_YAML_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["${PORT}", "${env.NOPE}", "${x}", "$${y}", "}{"]),
)
_YAML_TREE = st.recursive(
    _YAML_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=12), st.integers()), inner, max_size=4),
    ),
    max_leaves=20,
)
_SWAP_KEYS = [
    "models",
    "groups",
    "macros",
    "startPort",
    "globalTTL",
    "healthCheckTimeout",
    "logLevel",
    "hooks",
    "matrix",
    "includeAliasesInList",
    "sendLoadingState",
]
_MODEL_KEYS = [
    "cmd",
    "proxy",
    "aliases",
    "env",
    "ttl",
    "unlisted",
    "useModelName",
    "filters",
    "checkEndpoint",
    "concurrencyLimit",
    "macros",
    "cmdStop",
    "name",
]
_SWAP_DOC = st.fixed_dictionaries(
    {},
    optional={
        "models": st.dictionaries(
            st.text(min_size=1, max_size=8),
            st.dictionaries(st.sampled_from(_MODEL_KEYS), _YAML_TREE, max_size=5),
            max_size=3,
        ),
        **{k: _YAML_TREE for k in _SWAP_KEYS[1:]},
    },
)


def _dump(doc: object) -> str:
    try:
        return yaml.safe_dump(doc, allow_unicode=True)
    except (yaml.YAMLError, ValueError):
        return "{"


@settings(FAST, max_examples=200)
@given(
    st.one_of(
        _SWAP_DOC.map(_dump), _YAML_TREE.map(_dump), st.text(max_size=300), st.binary(max_size=200)
    )
)
def test_llama_swap_config_gives_only_swap_config_error(text: str | bytes) -> None:
    with tempfile.NamedTemporaryFile("wb", suffix=".yaml") as f:
        f.write(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
        f.flush()
        try:
            got = llamaswap.load_config(f.name)
        except llamaswap.SwapConfigError as exc:
            assert "\n" not in str(exc) and str(exc).startswith(f.name), str(exc)
        else:
            assert isinstance(got, llamaswap.SwapConfig)


_TOML_VALUE = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(str),
    st.floats(allow_nan=False).map(repr),
    st.booleans().map(lambda b: "true" if b else "false"),
    st.text(max_size=20).map(lambda t: '"' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.sampled_from(
        [
            "[]",
            "[1, 2]",
            '["a"]',
            "{}",
            "{ a = 1 }",
            "inf",
            "nan",
            "1979-05-27",
            '"0.0.0.0:9835"',
            '"/tmp/x.db"',
            '"1GiB"',
            "-1",
            "0",
            "0.01",
        ]
    ),
)
_TOML_KEYS = [
    "interval",
    "db",
    "collectors",
    "enabled",
    "top_n",
    "max_tracked",
    "rescan_s",
    "listen",
    "token",
    "urls",
    "command",
    "cooldown_s",
    "raw_days",
    "minute_days",
    "files",
    "units",
    "swap_url",
    "swap_config",
    "gpu_overhead_mib",
    "x",
]
_TOML_SECTIONS = [
    "daemon",
    "collectors",
    "processes",
    "http",
    "alerts",
    "retention",
    "logs",
    "budgets",
    "llama_swap",
    "nope",
    "daemon.sub",
]
_TOML_DOC = st.lists(
    st.tuples(
        st.sampled_from(_TOML_SECTIONS),
        st.lists(st.tuples(st.sampled_from(_TOML_KEYS), _TOML_VALUE), max_size=5),
    ),
    max_size=5,
).map(
    lambda sections: "".join(
        f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in pairs) for name, pairs in sections
    )
)


@settings(FAST, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.one_of(_TOML_DOC, st.text(max_size=200), st.binary(max_size=100)))
def test_own_toml_gives_only_config_error(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "vramscope.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        got = config_mod.read_file(path)
    except config_mod.ConfigError as exc:
        assert "\n" not in str(exc).strip() or "TOML" in str(exc), str(exc)
        return
    assert isinstance(got, dict)
    with contextlib.suppress(config_mod.ConfigError):  # what the daemon builds from it
        config_mod.load(path, db=tmp_path / "v.db", interval_s=None)
