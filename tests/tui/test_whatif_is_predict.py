"""The what-if dialog asks the same question as ``vramscope predict``: for the same box
state (the frame's snapshot, recorded as a ``status --json`` file for the CLI) and the
same launch, its answer is the CLI's ``--json`` document, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cli_runner
import pytest
from fake_source import FakeSource, full_gpu
from pilot_helpers import settle, sync
from textual.widgets import Select

from monitor.report.predict import to_json
from monitor.report.status import to_json as status_json
from tui.app import VramscopeApp
from tui.screens.whatif import WhatIfScreen

ROOT = Path(__file__).resolve().parents[2]
GIB_ = 1024**3


def cli_predict(home: Path, *args: str) -> tuple[int, str]:
    done = cli_runner.vramscope(
        "predict", "--json", *args, set_env={"HOME": str(home)}, unset=("XDG_CONFIG_HOME",)
    )
    assert done.returncode in (0, 1, 3, 4), done.stderr
    return done.returncode, done.stdout


async def ask_dialog(
    app: VramscopeApp,
    pilot,
    command: str = "",  # noqa: ANN001
    model_id: str | None = None,
) -> WhatIfScreen:
    await settle(pilot)
    await pilot.press("w")
    await pilot.pause()
    dialog = app.screen
    assert isinstance(dialog, WhatIfScreen)
    if model_id is not None:
        dialog.query_one("#swap-model", Select).value = model_id
    dialog.query_one("#command").value = command
    dialog.action_predict()
    await settle(pilot)
    return dialog


@pytest.mark.parametrize("launch", [["-c", "32768", "-np", "4"], ["-c", "4096", "-np", "1"]])
@sync
async def test_the_dialogs_answer_is_predict_json_for_a_pasted_command(
    models, tmp_path: Path, launch: list[str]
) -> None:
    snaps = full_gpu(models)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(status_json(snaps[0])))
    argv = ["llama-server", "-m", models["qwen3-8b-q8_0.gguf"], *launch]
    code, expected = cli_predict(tmp_path, "--state", str(state), "--", *argv)
    app = VramscopeApp(FakeSource(snaps), refresh_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = await ask_dialog(app, pilot, " ".join(argv))
        assert dialog.result is not None, str(dialog.query_one("#verdict").render())
        assert to_json(dialog.result) + "\n" == expected
        assert dialog.result.exit_code == code
        shown = str(dialog.query_one("#verdict").render())
        assert shown.startswith(json.loads(expected)["verdict"].upper())


@sync
async def test_the_dialogs_answer_is_predict_json_for_a_llama_swap_model(
    models, tmp_path: Path
) -> None:
    """A model id: the same llama-swap config, the same model unloaded first (the running
    q4_k server, matched by its -m path), the same verdict and fixes."""
    snaps = full_gpu(models)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(status_json(snaps[0])))
    swap = tmp_path / "swap.yaml"
    swap.write_text(
        "models:\n"
        f'  small: {{cmd: "llama-server --port ${{PORT}} -m {models["qwen3-8b-q4_k.gguf"]} '
        '-c 16384 -np 2"}\n'
        f'  big: {{cmd: "llama-server --port ${{PORT}} -m {models["qwen3-8b-q8_0.gguf"]} '
        '-c 32768 -np 4"}\n'
    )
    code, expected = cli_predict(tmp_path, "--state", str(state), "--swap-config", str(swap), "big")
    doc = json.loads(expected)
    assert doc["would_unload"] == ["llama-server (qwen3-8b-q4_k.gguf)"]  # not a trivial case
    assert code == 1
    app = VramscopeApp(FakeSource(snaps), refresh_s=None, swap_config=swap)
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = await ask_dialog(app, pilot, model_id="big")
        assert dialog.result is not None, str(dialog.query_one("#verdict").render())
        assert to_json(dialog.result) + "\n" == expected


@sync
async def test_the_dialog_shows_a_user_error_as_one_line(models, tmp_path: Path) -> None:
    """The CLI's one-line error, in the dialog: a model file that does not exist."""
    snaps = full_gpu(models)
    state = tmp_path / "state.json"
    state.write_text(json.dumps(status_json(snaps[0])))
    missing = tmp_path / "missing.gguf"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor",
            "predict",
            "--state",
            str(state),
            "--",
            "llama-server",
            "-m",
            str(missing),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 2
    cli_line = done.stderr.strip().removeprefix("vramscope: error: ")
    app = VramscopeApp(FakeSource(snaps), refresh_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = await ask_dialog(app, pilot, f"llama-server -m {missing}")
        shown = str(dialog.query_one("#verdict").render())
        assert dialog.result is None
        assert shown == f"cannot predict: {cli_line}"


@sync
async def test_predict_with_no_model_chosen_asks_for_one(models, tmp_path: Path) -> None:
    """Issue 20: with a llama-swap config and nothing chosen, the dialog said "unknown
    model 'Select.NULL'" (Textual's blank sentinel taken for a model id)."""
    swap = tmp_path / "swap.yaml"
    swap.write_text(
        "models:\n"
        f'  small: {{cmd: "llama-server --port ${{PORT}} -m {models["qwen3-8b-q4_k.gguf"]} '
        '-c 4096"}\n'
    )
    app = VramscopeApp(FakeSource(full_gpu(models)), refresh_s=None, swap_config=swap)
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = await ask_dialog(app, pilot)  # no command, no model chosen
        shown = str(dialog.query_one("#verdict").render())
    assert "Select" not in shown and "unknown model" not in shown
    assert "paste a command line or choose a model" in shown


@sync
async def test_a_router_model_id_typed_in_the_dialog_is_predict_model_id(
    models, tmp_path: Path
) -> None:
    """One word that names no program: a llama-server router's model id, judged as
    ``vramscope predict ID`` judges it (the router's child launch, its LRU unload)."""
    import socket
    from dataclasses import replace

    from fake_source import server

    from collectors.base import ProcessMemory

    with socket.socket() as s:  # a port nothing listens on: the router's files are read
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    folder = tmp_path / "models"
    folder.mkdir()
    for name in ("qwen3-8b-q4_k.gguf", "qwen3-8b-q8_0.gguf"):
        (folder / name).symlink_to(models[name])
    q4 = folder / "qwen3-8b-q4_k.gguf"
    router = server(9100, ["llama-server", "--models-dir", str(folder), "--models-max", "1"])
    router = replace(router, argv=(*router.argv, "--port", str(port)))
    child = server(9101, ["llama-server", "--host", "127.0.0.1", "--port", "40000"])
    child = replace(
        child,
        ppid=9100,
        argv=(*child.argv, "--alias", "qwen3-8b-q4_k", "--model", str(q4)),
    )
    base = full_gpu(models)[0]
    mem = (ProcessMemory(9101, "nvml:GPU-0", vram_bytes=int(7.5 * GIB_)),)
    snaps = [replace(base, processes=(router, child), memory=mem)]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(status_json(snaps[0])))
    code, expected = cli_predict(tmp_path, "--state", str(state), "qwen3-8b-q8_0")
    assert json.loads(expected)["would_unload"] == ["qwen3-8b-q4_k (pid 9101)"]
    # a replayed frame, as --state: the router's files (a live one would ask its /models)
    app = VramscopeApp(FakeSource(snaps, live=False), refresh_s=None)
    async with app.run_test(size=(160, 48)) as pilot:
        dialog = await ask_dialog(app, pilot, "qwen3-8b-q8_0")
        assert dialog.result is not None, str(dialog.query_one("#verdict").render())
        assert to_json(dialog.result) + "\n" == expected
        assert dialog.result.exit_code == code
