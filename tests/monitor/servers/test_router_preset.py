"""A router's child launches from its files: ``--models-preset`` INI, ``--models-dir``,
its own command line, rendered as server-models.cpp ``update_args`` renders them."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from monitor.servers import parse_command
from monitor.servers import router_preset as rp
from monitor.servers.router_models import DirModel, RouterModelsError, list_models_dir
from monitor.servers.router_preset import (
    base_from_argv,
    child_launches,
    parse_ini,
    presets_from_ini,
    read_preset_file,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llamacpp_router"
BIN = "/work/main/.cache/llama.cpp/0.3.36/bin/llama-server"
# the recorded router's command line (tests/fixtures/llamacpp_router/README.md)
ROUTER = [BIN, "--models-dir", "/tmp/rt/m", "--models-max", "1", "--host", "127.0.0.1"]
ROUTER += ["--port", "18431", "-c", "512", "-np", "1"]


def _ini(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "models.ini"
    path.write_text(text)
    return path


def _without_port(argv: tuple[str, ...]) -> list[str]:
    args = list(argv)
    args[args.index("--port") + 1] = "N"
    return args


def test_the_files_render_what_the_real_router_rendered() -> None:
    """The recorded ``GET /models`` args (real llama-server 0c1e57098) are what the router's
    argv and its folder render, option for option and in the router's order."""
    recorded = json.loads((FIXTURES / "models_loaded_b.json").read_text())["data"]
    dirs = [DirModel("a", "/tmp/rt/m/a.gguf"), DirModel("b", "/tmp/rt/m/b.gguf")]
    mine = child_launches(ROUTER, dirs)
    for model in recorded:
        assert _without_port(mine[model["id"]]) == _without_port(tuple(model["status"]["args"]))


def test_preset_sections_defaults_and_key_spellings(tmp_path: Path) -> None:
    ini = _ini(
        tmp_path,
        "; router presets\n"
        "version = 1\n"
        "[*]\n"
        "c = 4096            # every model\n"
        "flash-attn = on\n"
        "models-max = 9\n"
        "[a]\n"
        "parallel = 2\n"
        "LLAMA_ARG_CACHE_TYPE_K = q8_0\n"
        "[big]\n"
        "model = /m/big.gguf\n"
        "ctx-size = 16384\n"
        "no-kv-unified = true\n"
        "alias = bigger,largest\n"
        "port = 1\n"
        "load-on-startup = true\n",
    )
    launches = child_launches(
        [BIN, "--models-dir", "/m", "--models-max", "2"],
        [DirModel("a", "/m/a.gguf")],
        read_preset_file(str(ini)),
    )
    assert launches["a"] == (
        BIN, "--host", "127.0.0.1", "--port", "0", "--alias", "a", "--ctx-size", "4096",
        "--cache-type-k", "q8_0", "--flash-attn", "on", "--model", "/m/a.gguf",
        "--parallel", "2",
    )  # fmt: skip
    big = parse_command(list(launches["big"]))
    assert big is not None and big.role == "server"
    assert (big.model_path, big.ctx_size, big.kv_unified, big.model_name) == (
        "/m/big.gguf",
        16384,
        False,
        "big",  # the router sets --alias to the id; the preset's aliases are routing names
    )
    assert "--models-max" not in launches["big"]  # reserved: the router removes it
    assert "load-on-startup" not in " ".join(launches["big"])  # preset-only
    assert launches["big"][launches["big"].index("--port") + 1] == "0"


def test_the_routers_own_options_win_over_the_preset(tmp_path: Path) -> None:
    """server-models.cpp lines 707-711: the router's argv is merged over every preset."""
    ini = read_preset_file(str(_ini(tmp_path, "[a]\nc = 8192\nparallel = 4\n")))
    launches = child_launches([BIN, "-c", "1024", "--models-preset", "x.ini"], (), ini)
    spec = parse_command(list(launches["a"]))
    assert spec is not None
    assert (spec.ctx_size, spec.n_parallel) == (1024, 4)


def test_negated_and_false_flags_render_as_the_router_writes_them(tmp_path: Path) -> None:
    ini = read_preset_file(
        str(_ini(tmp_path, "[a]\nmodel = /m/a.gguf\nkv-unified = false\nno-mmproj = 1\n"))
    )
    args = child_launches([BIN], (), ini)["a"]
    assert "--no-kv-unified" in args and "--kv-unified" not in args
    assert "--no-mmproj-auto" in args  # args_neg.back(): how the router writes it
    base = base_from_argv([BIN, "--no-kv-unified", "--ctx_size", "64"])
    assert {o.long: v for o, v in base.items()} == {"--kv-unified": "0", "--ctx-size": "64"}


def test_section_tags_are_canonical_and_a_repeated_header_starts_again() -> None:
    parsed = parse_ini("[org/m:q4_k_m]\nc = 1\n[x]\nc = 2\n[x]\nnp = 3\r\n", "t")
    glob, presets = presets_from_ini(parsed, "t")
    assert glob == {}
    assert sorted(presets) == ["org/m:Q4_K_M", "x"]
    assert {o.long: v for o, v in presets["x"].items()} == {"--parallel": "3"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[a]\n  c = 1\n", "line 2: not 'key = value'"),  # the key must start the line
        ("[a]\nc 1\n", "line 2: not 'key = value'"),
        ("[a\nc = 1\n", "line 1: not a [section] header"),
        ("[]\n", "line 1: not a [section] header"),
        ("[a] junk\n", "line 1: not a [section] header"),
        ("[a]\n9c = 1\n", "line 2"),
        ("[a]\nctx-sizes = 1\n", "option 'ctx-sizes' not recognized in preset 'a'"),
        ("[a]\nLLAMA_ARG_NOPE = 1\n", "not recognized"),
    ],
)
def test_malformed_preset_files_are_one_line(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(RouterModelsError, match=says.replace("[", r"\[")) as err:
        read_preset_file(str(_ini(tmp_path, text)))
    assert "\n" not in str(err.value)


def test_comments_end_values_and_blank_values_are_kept() -> None:
    parsed = parse_ini("[a]\nmodel = /m/a b.gguf ; the model\nalias =\n# x = 1\n", "t")
    assert parsed == {"a": {"model": "/m/a b.gguf", "alias": ""}}


def test_hostile_preset_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = _ini(tmp_path, "[a]\nc = 1\n")
    link = tmp_path / "link.ini"
    link.symlink_to(real)
    with pytest.raises(RouterModelsError, match="symbolic link"):
        read_preset_file(str(link))
    with pytest.raises(RouterModelsError, match="not a regular file"):
        read_preset_file(str(tmp_path))
    fifo = tmp_path / "fifo.ini"
    os.mkfifo(fifo)  # O_NONBLOCK: opening a FIFO with no writer does not block
    done: list[str] = []

    def attempt() -> None:
        try:
            read_preset_file(str(fifo))
        except RouterModelsError as exc:
            done.append(str(exc))

    worker = threading.Thread(target=attempt, daemon=True)
    worker.start()
    worker.join(60)  # a hang guard, not a timing assertion
    assert done and "not a regular file" in done[0]
    huge = _ini(tmp_path, "[a]\n" + "c = 1\n" * (rp.MAX_PRESET_BYTES // 6 + 1))
    with pytest.raises(RouterModelsError, match="over"):
        read_preset_file(str(huge))
    monkeypatch.setattr(rp, "MAX_PRESET_LINES", 10)
    with pytest.raises(RouterModelsError, match="more than 10 lines"):
        read_preset_file(str(_ini(tmp_path, "\n" * 20)))
    with pytest.raises(RouterModelsError, match="cannot read"):
        read_preset_file(str(tmp_path / "missing.ini"))


def test_a_router_command_line_it_cannot_read_is_one_line() -> None:
    with pytest.raises(RouterModelsError, match="invalid argument: --no-such"):
        base_from_argv([BIN, "--no-such", "1"])
    with pytest.raises(RouterModelsError, match="-c expects a value"):
        base_from_argv([BIN, "-c"])


def test_dir_and_preset_together_merge_per_model(tmp_path: Path) -> None:
    models = tmp_path / "m"
    models.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (models / name).write_bytes(b"GGUF")
    ini = read_preset_file(str(_ini(tmp_path, "[*]\nnp = 2\n[b]\nctk = q4_0\n[c]\nm = /x.gguf\n")))
    launches = child_launches([BIN], list_models_dir(str(models)), ini)
    assert sorted(launches) == ["a", "b", "c"]
    specs = {k: parse_command(list(v)) for k, v in launches.items()}
    assert specs["a"] is not None and specs["a"].n_parallel == 2
    assert specs["b"] is not None and specs["b"].cache_type_k == "q4_0"
    assert specs["b"].model_path == str(models / "b.gguf")
    assert specs["c"] is not None and specs["c"].model_path == "/x.gguf"
