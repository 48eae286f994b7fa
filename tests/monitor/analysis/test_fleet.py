"""`vramscope predict --remote A --remote B ...` (issue 21 point 5): real daemons on
loopback, each sampling a different box (two recorded DRM trees: a Strix Halo APU with
17.7 GiB of GTT room, an RX 7900 XTX with 1.9 GiB free; and this machine), and one URL
where nothing listens. Each daemon judges the launch against its own latest tick."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import arch_models as am
import pytest
from daemon_harness import free_port, running

from monitor.analysis.fleet import BoxAnswer, box_answer, exit_code, ranked

ROOT = Path(__file__).resolve().parents[3]
DRM = ROOT / "tests" / "fixtures" / "drm"
GIB = 1024**3


def tree(name: str) -> tuple[str, ...]:
    return ("--proc-root", str(DRM / name / "proc"), "--sys-root", str(DRM / name / "sys"))


def vramscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("VRAMSCOPE_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
    )


@pytest.mark.slow  # a real daemon for many seconds: the default suite stays under 5 min
def test_a_launch_is_placed_across_three_daemons(tmp_path: Path) -> None:
    model = am.qwen3_8b().write(tmp_path)  # 8.1 GiB of Q8_0 weights
    launch = ["llama-server", "-m", str(model), "-c", "4096", "-np", "1", "--cache-ram", "0"]
    nobody = f"http://127.0.0.1:{free_port()}"
    boxes = {}
    with contextlib.ExitStack() as stack:
        for name, args in (("strix", tree("strix-halo")), ("xtx", tree("rx7900xtx")), ("here", ())):
            d = tmp_path / name
            d.mkdir()
            serve = f'model_dirs = ["{tmp_path}"]\n'  # the model's folder: [http] model_dirs
            boxes[name] = stack.enter_context(running(d, serve, daemon_args=args)).url
        urls = [*boxes.values(), nobody]
        remote = [a for url in urls for a in ("--remote", url)]
        as_json = vramscope("predict", "--json", *remote, "--", *launch)
        text = vramscope("predict", *remote, "--", *launch)
    doc = json.loads(as_json.stdout)
    assert doc["schema"] == "vramscope.fleet-predict/1"
    by_url = {b["url"]: b for b in doc["boxes"]}
    strix, xtx, here = by_url[boxes["strix"]], by_url[boxes["xtx"]], by_url[boxes["here"]]
    # the APU: ~9 GiB in its 17.7 GiB of GTT room (the daemon's own picture of it)
    assert (strix["verdict"], strix["fits"], strix["error"]) == ("fits", True, None), strix
    apu = next(d for d in strix["predict"]["devices"] if d["device_id"] == "drm:0000:c5:00.0")
    assert strix["binding_device"] == "drm:0000:c5:00.0" and apu["binding"] == "GTT"
    assert strix["headroom_bytes"] == apu["room_bytes"] - apu["margin_bytes"] - apu["need_bytes"]
    assert 6 * GIB < strix["headroom_bytes"] < 10 * GIB
    # the 24 GB card with 1.9 GiB free
    assert xtx["verdict"] == "oom" and not xtx["fits"] and xtx["headroom_bytes"] < 0
    assert xtx["predict"]["schema"] == "vramscope.predict/1"  # the daemon's own document
    # this machine answered (its verdict depends on what else runs here)
    assert here["error"] is None and here["verdict"] in ("fits", "tight", "oom")
    assert "cannot reach the vramscope daemon" in by_url[nobody]["error"]
    assert boxes["strix"] in doc["fits_on"] and boxes["xtx"] not in doc["fits_on"]
    assert doc["boxes"][-1]["url"] == nobody  # unreachable boxes last
    assert as_json.returncode == 0 == doc["exit_code"]
    lines = text.stdout.splitlines()
    assert text.returncode == 0, text.stderr
    assert any(ln.startswith(f"{boxes['strix']}: FITS, headroom ") for ln in lines), lines
    assert any(ln.startswith(f"{boxes['xtx']}: OOM, short by ") for ln in lines), lines
    assert lines[-1].startswith("fits on: ") and boxes["strix"] in lines[-1]


def test_no_box_answering_is_exit_2_and_local_flags_are_refused(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    done = vramscope("predict", "--remote", nobody, "--", "llama-server", "-m", "x.gguf")
    assert done.returncode == 2 and "no answer" in done.stdout
    done = vramscope("predict", "--remote", nobody, "--fit-ctx", "--", "llama-server")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("vramscope: error: --fit-ctx judges on this box")
    done = vramscope("predict", "--remote", "ftp://x")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_hostile_answers_are_errors_of_that_box_not_figures() -> None:
    assert box_answer("u", 200, ["x"]).error is not None
    assert box_answer("u", 200, {"schema": "other", "verdict": "fits"}).error is not None
    assert box_answer("u", 200, {"schema": "vramscope.predict/1", "verdict": "great"}).error
    bad = box_answer("u", 400, {"error": "\x1b]0;pwned\x07 not a readable GGUF model file"})
    assert bad.error is not None and "\x1b" not in bad.error
    weird = box_answer(
        "u",
        200,
        {
            "schema": "vramscope.predict/1",
            "verdict": "fits",
            "devices": [{"device_id": "g", "slack_bytes": "lots"}, "x"],
            "would_unload": ["\x1b[2J" * 100] * 100,
        },
    )
    assert weird.headroom_bytes is None and len(weird.would_unload) == 16
    assert all("\x1b" not in n and len(n) <= 200 for n in weird.would_unload)


def test_ranking_and_exit_codes() -> None:
    def ok(url: str, verdict: str, slack: int, grown: str | None = None) -> BoxAnswer:
        return BoxAnswer(url, verdict, grown, slack, "g")

    a = [
        ok("tight", "tight", -1),
        BoxAnswer("down", error="x"),
        ok("small", "fits", 1),
        ok("big", "fits", 9),
        ok("grows", "fits", 20, "oom"),
    ]
    assert [x.url for x in ranked(a)] == ["big", "small", "grows", "tight", "down"]
    assert exit_code(a) == 0
    assert exit_code([ok("grows", "fits", 20, "oom"), ok("t", "oom", -5)]) == 3
    assert exit_code([ok("t", "oom", -5)]) == 1
    assert exit_code([BoxAnswer("down", error="x")]) == 2


def test_fits_at_load_only_is_said_so_not_no_box() -> None:
    """Issue 34: a box where it fits at load but no box once the caches fill says so
    (exit 3, as the help documents), instead of "fits on: no box"."""
    from monitor.report.predict import fleet_text

    grows = BoxAnswer("http://a:9835", "fits", "oom", 5 * GIB, "g")
    also = BoxAnswer("http://c:9835", "fits", "thrash", 1 * GIB, "g")
    short = BoxAnswer("http://b:9835", "oom", None, -GIB, "g")
    down = BoxAnswer("http://d:9835", error="timed out")
    answers = [short, grows, down, also]
    last = fleet_text(answers).splitlines()[-1]
    assert last == "fits at load on http://a:9835, http://c:9835; no box once caches fill"
    assert exit_code(answers) == 3
    # the noise cases: it fits somewhere once full too, or nowhere even at load
    fits = BoxAnswer("http://e:9835", "fits", "fits", GIB, "g")
    assert fleet_text([grows, fits]).splitlines()[-1] == "fits on: http://e:9835"
    assert fleet_text([short, down]).splitlines()[-1] == "fits on: no box"
    assert exit_code([short, down]) == 1
