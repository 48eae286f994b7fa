"""The cyclic garbage collector during start-up (issue 32 item 4, monitor/cli/main.py
GC_OFF_COMMANDS): off while a one-shot ``status`` / ``predict`` starts and runs, back on
(after gc.freeze) as soon as a command that may run for long is known (the daemon, the TUI,
the history's reads), and as it was when main() returns to a caller in the same process
that had it on.

Observed from inside a real run in a fresh interpreter, without touching the project's code:
an audit hook (``sys.addaudithook``) notes ``gc.isenabled()`` at the first event the command
really causes (its first open of a /proc file, of the model file, the daemon's
``sqlite3.connect`` of its database).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import tiny_models

ROOT = Path(__file__).resolve().parents[3]

PROBE = """
import atexit, gc, json, os, sys
entry, event, prefix = sys.argv[1:4]
seen = []
def hook(name, args):
    if name == event and not seen and args and str(args[0]).startswith(prefix):
        seen.append(gc.isenabled())
        if os.environ.get("PROBE_STOP"):  # a daemon: stop it right there
            print(json.dumps({"at_event": seen[0], "frozen": gc.get_freeze_count()}))
            sys.stdout.flush()
            os._exit(0)
sys.addaudithook(hook)
class Teardown:  # the interpreter's teardown frees it: a line on fd 1 says it ran
    def __del__(self, write=os.write):  # its own os.write: teardown clears the globals
        write(1, b"TEARDOWN\\n")
kept = Teardown()
def report():  # every exit runs atexit handlers, the quick one (monitor/cli/main.py) too
    doc = {"at_event": seen[0] if seen else None, "after": gc.isenabled(),
           "frozen": gc.get_freeze_count()}
    print("\\n" + json.dumps(doc))
atexit.register(report)
if entry in ("module", "console-off"):  # as `python -m monitor` (monitor/__main__.py)
    gc.disable()
if entry in ("module", "in-process"):  # in-process: a caller with the collector on
    from monitor.cli.main import main
else:  # the console script `vramscope` (tui.entry:main), which adds `tui`
    from tui.entry import main
sys.argv = ["vramscope", *sys.argv[4:]]
try:
    main()
except SystemExit as exc:
    if entry != "in-process":
        raise
    print("RETURNED", exc.code)
"""


def probe(
    entry: str, event: str, prefix: str, args: list[str], cwd: Path, stop: bool = False
) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd)}
    if stop:
        env["PROBE_STOP"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, entry, event, prefix, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard only
    )
    lines = done.stdout.splitlines()
    doc: dict[str, object] = json.loads(next(x for x in reversed(lines) if x.startswith("{")))
    return {**doc, "code": done.returncode, "teardown": "TEARDOWN" in lines, "out": done.stdout}


def test_status_runs_with_the_collector_off_and_gives_it_back(tmp_path: Path) -> None:
    # the console script and `python -m monitor` end with it off, and end at once: atexit
    # handlers run, the interpreter's teardown does not; main() called by a caller with it
    # on gives it back and returns (SystemExit) to that caller
    for entry in ("module", "console", "in-process"):
        doc = probe(entry, "open", "/proc/", ["status", "--json"], tmp_path)
        own = entry != "in-process"
        assert doc["code"] == 0, entry
        assert doc["at_event"] is False, entry  # sampling /proc with the collector off
        assert doc["after"] is not own, entry
        assert doc["teardown"] is not own, entry
        assert ("RETURNED 0" in str(doc["out"])) is not own, entry
        assert doc["frozen"] == 0  # nothing frozen: a one-shot command
        assert '"schema": "vramscope.status/' in str(doc["out"])  # flushed whole


def test_status_still_prints_the_box(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "status", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert isinstance(json.loads(done.stdout), dict)


def test_a_cold_predict_reads_its_model_with_the_collector_off(tmp_path: Path) -> None:
    tiny_models.write_llama(tmp_path / "x.gguf")
    model = str(tmp_path / "x.gguf")
    args = ["predict", "--json", "--", "llama-server", "-m", model, "-c", "512"]
    doc = probe("console", "open", model, args, tmp_path)
    assert doc["at_event"] is False and doc["code"] in (0, 1, 3)  # 1/3: predict's verdicts


def test_the_daemon_opens_its_database_with_the_collector_on(tmp_path: Path) -> None:
    db = str(tmp_path / "v.db")
    doc = probe("module", "sqlite3.connect", db, ["daemon", "--db", db], tmp_path, stop=True)
    assert doc["at_event"] is True
    assert isinstance(doc["frozen"], int) and doc["frozen"] > 1000  # start-up's objects


def test_every_other_command_gets_the_collector_back(tmp_path: Path) -> None:
    for args in (["events", "--help"], ["postmortem", "--help"], ["daemon", "--help"]):
        doc = probe("module", "-", "-", args, tmp_path)
        assert doc["code"] == 0 and doc["after"] is True, args
        assert isinstance(doc["frozen"], int) and doc["frozen"] > 1000  # start-up's objects
    doc = probe("console-off", "-", "-", ["tui", "--help"], tmp_path)
    assert doc["code"] == 0 and doc["after"] is True
    doc = probe("module", "-", "-", ["--help"], tmp_path)  # no command: stays off
    assert doc["code"] == 0 and doc["after"] is False and doc["teardown"] is False


def test_a_quick_end_keeps_the_exit_status_and_a_closed_pipe_says_so(tmp_path: Path) -> None:
    doc = probe("console", "-", "-", ["predict", "--bogus-option"], tmp_path)
    assert doc["code"] == 2 and doc["teardown"] is False  # a usage error: one line, exit 2
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    for run in range(2):  # the reader gone before status writes: as before, no traceback
        reader = subprocess.Popen(  # noqa: S603
            [sys.executable, "-m", "monitor", "status"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert reader.stdout is not None
        reader.stdout.close()
        _, err = reader.communicate(timeout=180)  # a hang guard only
        assert b"Traceback" not in err, (run, err[-2000:])


TUI_PROBE = """
import gc, os, sys
report = int(sys.argv[1])  # a pipe to the test: the pty is the program's terminal
def hook(name, args):  # textual's first import: the TUI is opening
    if name == "import" and args and args[0] == "textual":
        os.write(report, b"GC-ON\\n" if gc.isenabled() else b"GC-OFF\\n")
        os._exit(0)
sys.addaudithook(hook)
from tui.entry import main
sys.argv = ["vramscope"]
main()
"""


def test_no_command_on_a_terminal_opens_the_tui_with_the_collector_on(tmp_path: Path) -> None:
    """`vramscope` with no command on a terminal opens the TUI: a long-running program,
    so the collector is back before textual is imported (observed on a real pty)."""
    import pty

    master, slave = pty.openpty()
    read_end, write_end = os.pipe()
    try:
        done = subprocess.run(
            [sys.executable, "-c", TUI_PROBE, str(write_end)],
            stdin=slave, stdout=slave, stderr=subprocess.PIPE, pass_fds=(write_end,),
            env={**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
            cwd=tmp_path, timeout=180,  # a hang guard only
        )  # fmt: skip
        os.close(write_end)
        write_end = -1
        with os.fdopen(read_end, "rb") as seen:
            read_end = -1
            assert done.returncode == 0, done.stderr[-2000:]
            assert seen.read() == b"GC-ON\n"
    finally:
        for fd in (master, slave, read_end, write_end):
            if fd >= 0:
                os.close(fd)
