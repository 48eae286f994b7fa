"""llama-swap running a llama-server router (issue 31 item 5; monitor/analysis/swap_router.py):
with ``--swap-config``, a llama-swap model whose ``cmd`` is a router runs when its router
does, stopping it frees the router's children too, and an id the router serves is predicted
as the router's child launch (the router's LRU when it runs; llama-swap's groups when it
must be started first). Real CLI, real files (tiny GGUFs, a YAML config, a recorded box
state)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_models
from box_states import host, write_state
from router_http import predict as predict_json  # `vramscope predict --json`

from collectors.base import ProcessInfo, ProcessMemory
from monitor.servers.router_models import list_models_dir
from monitor.servers.router_preset import child_launches

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3
ROUTER, CHILD_A, BIG = 700, 701, 800
HELD_A, HELD_BIG, HELD_ROUTER = 2 * GIB, 3 * GIB, 20 << 20


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    tiny_models.write_llama(folder / "a.gguf", seed=1, name="a")
    tiny_models.write_llama(folder / "b.gguf", seed=2, name="b", n_layer=8)
    other = tmp_path / "other"
    other.mkdir()
    tiny_models.write_llama(other / "big.gguf", seed=3, name="big")
    return folder


def _router_argv(models: Path) -> tuple[str, ...]:
    return ("llama-server", "--models-dir", str(models), "--models-max", "1", "--port", "5800")


def _swap(tmp_path: Path, models: Path) -> Path:
    """Two llama-swap models in the default group (one runs at a time): `r`, a router,
    and `big`, a plain server."""
    big = models.parent / "other" / "big.gguf"
    path = tmp_path / "swap.yaml"
    path.write_text(
        "models:\n"
        f'  r: {{cmd: "llama-server --models-dir {models} --models-max 1 --port ${{PORT}}'
        ' -c 2048"}\n'
        f'  big: {{cmd: "llama-server -m {big} --port ${{PORT}}"}}\n'
    )
    return path


def _proc(pid: int, ppid: int, argv: tuple[str, ...]) -> ProcessInfo:
    return ProcessInfo(
        pid, pid, pid * 1000, ppid, 1000, "llama-server", argv, "llama.cpp", ("inference",)
    )


def _state(tmp_path: Path, models: Path, router: bool, big: bool) -> Path:
    procs = []
    if router:
        argv = (*_router_argv(models), "-c", "2048")
        launch_a = child_launches(list(argv), list_models_dir(str(models)))["a"]
        procs += [
            (_proc(ROUTER, 1, argv), [ProcessMemory(ROUTER, "host", rss_anon_bytes=HELD_ROUTER)]),
            (
                _proc(CHILD_A, ROUTER, launch_a),
                [ProcessMemory(CHILD_A, "host", rss_anon_bytes=HELD_A)],
            ),
        ]
    if big:
        argv = ("llama-server", "-m", str(models.parent / "other" / "big.gguf"), "--port", "5801")
        procs.append((_proc(BIG, 1, argv), [ProcessMemory(BIG, "host", rss_anon_bytes=HELD_BIG)]))
    return write_state(tmp_path / f"state-{router}-{big}.json", [host(64 * GIB)], procs)


def _pids(doc: dict) -> set[int]:
    return {int(n.rsplit("pid ", 1)[1].split(")")[0].split(",")[0]) for n in doc["would_unload"]}


def test_stopping_a_running_router_model_frees_its_children(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, router=True, big=False)
    code, doc, err = predict_json(
        "--state", str(state), "--swap-config", str(_swap(tmp_path, models)), "big"
    )
    assert code == 0, err
    assert doc["devices"][0]["freed_bytes"] == HELD_A + HELD_ROUTER
    assert len(doc["would_unload"]) == 2
    assert any("llama-swap unloads first: r" in n for n in doc["notes"])


def test_an_id_of_a_running_router_follows_the_routers_lru(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, router=True, big=False)
    code, doc, err = predict_json(
        "--state", str(state), "--swap-config", str(_swap(tmp_path, models)), "b"
    )
    assert code == 0, err
    assert doc["would_unload"] == ["a (pid 701)"] and doc["unloaded_by"] == "the router"
    assert doc["devices"][0]["freed_bytes"] == HELD_A
    assert any("llama-swap model r runs the llama-server router that serves b (running" in n
               for n in doc["notes"])  # fmt: skip


def test_an_id_of_a_stopped_router_is_its_child_after_llama_swaps_unload(
    tmp_path: Path, models: Path
) -> None:
    state = _state(tmp_path, models, router=False, big=True)
    code, doc, err = predict_json(
        "--state", str(state), "--swap-config", str(_swap(tmp_path, models)), "a"
    )
    assert code == 0, err
    assert doc["devices"][0]["freed_bytes"] == HELD_BIG  # llama-swap stops big to start r
    argv = doc["launch"]["argv"]
    assert "--alias" in argv and str(models / "a.gguf") in argv
    assert doc["launch"]["n_ctx"] == 2048  # the router's -c reaches its child
    assert any("not running now: llama-swap starts it first" in n for n in doc["notes"])


def test_nothing_running_nothing_unloaded(tmp_path: Path, models: Path) -> None:
    """Noise: with no model of llama-swap's running, neither path frees anything."""
    state = _state(tmp_path, models, router=False, big=False)
    swap = str(_swap(tmp_path, models))
    for model in ("a", "big"):
        code, doc, err = predict_json("--state", str(state), "--swap-config", swap, model)
        assert code == 0, err
        assert doc["would_unload"] == [] and doc["devices"][0]["freed_bytes"] == 0


def test_an_id_neither_serves_is_one_line(tmp_path: Path, models: Path) -> None:
    state = _state(tmp_path, models, router=False, big=False)
    code, doc, err = predict_json(
        "--state", str(state), "--swap-config", str(_swap(tmp_path, models)), "zz"
    )
    assert code == 2 and doc == {} and err.count("\n") == 1, err
    assert "unknown model 'zz'" in err


def test_an_id_of_a_router_llama_swap_does_not_run_is_still_found(
    tmp_path: Path, models: Path
) -> None:
    """A router on the box outside llama-swap (its config has no router model) serves `b`:
    a configured llama-swap does not hide it; the router's LRU applies."""
    state = _state(tmp_path, models, router=True, big=False)
    swap = tmp_path / "plain.yaml"
    swap.write_text('models:\n  big: {cmd: "llama-server -m /x/big.gguf --port ${PORT}"}\n')
    code, doc, err = predict_json("--state", str(state), "--swap-config", str(swap), "b")
    assert code == 0, err
    assert doc["would_unload"] == ["a (pid 701)"] and doc["unloaded_by"] == "the router"
