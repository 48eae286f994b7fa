"""Per-box tokens (issue 34): ``[fleet] boxes`` names each box's token file, ``--remote
URL`` picks its token by URL, and a box's token never reaches another box.

End to end: two real daemons on loopback with different ``[http] token``s, watched
together by ``predict --remote A --remote B`` and by the fleet overview's sources; a
small loopback HTTP server standing in for a box records every Authorization header it
is sent, so a test can see that it never gets the other box's token.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import arch_models as am
import cli_runner
import pytest
from daemon_harness import free_port, running

from monitor.analysis.fleet import BoxRow, short_reason
from monitor.config import ConfigError, box_key, load
from monitor.http.tokens import MAX_TOKEN_BYTES, read_token_file, tokens_for

ROOT = Path(__file__).resolve().parents[3]
TOKEN_A = "tokA-9f2c1e7d5b3a4c6e8f0a1b2c3d4e5f60"
TOKEN_B = "tokB-0a1b2c3d4e5f60718293a4b5c6d7e8f9"


def token_file(folder: Path, name: str, token: str, mode: int = 0o600) -> Path:
    path = folder / name
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


def fleet_config(folder: Path, boxes: list[tuple[str, Path | None]]) -> Path:
    lines = ["[fleet]", "boxes = ["]
    for url, tf in boxes:
        lines.append(
            f'  {{ url = "{url}", token_file = "{tf}" }},' if tf else f'  {{ url = "{url}" }},'
        )
    lines.append("]")
    path = folder / "fleet.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


vramscope = functools.partial(cli_runner.vramscope, unset=("VRAMSCOPE_TOKEN",))


# -- the token file: a secret, read with care ------------------------------------------


def test_a_private_token_file_is_read_and_others_are_refused_without_their_content(
    tmp_path: Path,
) -> None:
    assert read_token_file(token_file(tmp_path, "ok", TOKEN_A)) == TOKEN_A
    shared = token_file(tmp_path, "shared", TOKEN_B, 0o644)
    with pytest.raises(ConfigError, match="must be private to its owner.*chmod 600") as err:
        read_token_file(shared)
    assert TOKEN_B not in str(err.value)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "ok")
    with pytest.raises(ConfigError, match="token file .*link"):
        read_token_file(link)  # O_NOFOLLOW: a link never stands in for the file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ConfigError, match="is not a regular file"):
        read_token_file(fifo)  # O_NONBLOCK: opening a FIFO does not wait for a writer
    big = token_file(tmp_path, "big", "x" * (MAX_TOKEN_BYTES + 1))
    with pytest.raises(ConfigError, match="larger than 4096 bytes"):
        read_token_file(big)
    for name, text in (("empty", ""), ("spaced", "two words")):
        with pytest.raises(ConfigError, match="must hold one token") as err:
            read_token_file(token_file(tmp_path, name, text))
        assert "two words" not in str(err.value)
    with pytest.raises(ConfigError, match="No such file"):
        read_token_file(tmp_path / "missing")


def test_fleet_section_is_checked_key_by_key(tmp_path: Path) -> None:
    tf = token_file(tmp_path, "a.token", TOKEN_A)
    cfg = load(fleet_config(tmp_path, [("http://Box-A:9835/", tf), ("http://b:9835", None)]))
    assert [(b.url, b.token_file) for b in cfg.fleet] == [
        ("http://Box-A:9835/", tf),
        ("http://b:9835", None),
    ]
    assert box_key("http://Box-A:9835/") == box_key("http://box-a:9835") == "http://box-a:9835"
    assert box_key("ftp://x") is None
    bad = {
        "boxes = [1]": "must list tables like",
        'boxes = [{ url = "ftp://x" }]': "expected http://HOST:PORT",
        'boxes = [{ url = "http://a:1", token = "x" }]': "unknown key 'token'",
        'boxes = [{ url = "http://a:1", token_file = "rel/a" }]': "absolute path",
        'boxes = [{ url = "http://a:1" }, { url = "http://A:1/" }]': "twice",
    }
    for body, words in bad.items():
        path = tmp_path / "bad.toml"
        path.write_text(f"[fleet]\n{body}\n")
        with pytest.raises(ConfigError, match=words) as err:
            load(path)
        assert f"{path}:2" in str(err.value)  # the key's line


def test_each_url_takes_its_own_token_and_one_token_never_goes_to_two_boxes(
    tmp_path: Path,
) -> None:
    a = token_file(tmp_path, "a", TOKEN_A)
    b = token_file(tmp_path, "b", TOKEN_B)
    cfg = load(fleet_config(tmp_path, [("http://a:1", a), ("http://b:2", b), ("http://c:3", None)]))
    got = tokens_for(["http://A:1/", "http://b:2", "http://c:3"], cfg, "flag-token")
    assert got == {"http://A:1/": TOKEN_A, "http://b:2": TOKEN_B, "http://c:3": None}
    # --token: for the one box [fleet] does not list; never for two
    assert tokens_for(["http://a:1", "http://d:4"], cfg, "flag")["http://d:4"] == "flag"
    with pytest.raises(ConfigError, match="would go to 2 boxes"):
        tokens_for(["http://d:4", "http://e:5"], cfg, "flag")
    assert tokens_for(["http://d:4", "http://e:5"], cfg, None) == {
        "http://d:4": None,
        "http://e:5": None,
    }
    assert tokens_for(["http://d:4"], load(None), "one") == {"http://d:4": "one"}


def test_two_tokens_on_the_command_line_are_refused_in_one_line(tmp_path: Path) -> None:
    done = vramscope(
        "predict",
        "--config",
        "/dev/null",
        "--token",
        TOKEN_A,
        "--remote",
        f"http://127.0.0.1:{free_port()}",
        "--remote",
        f"http://127.0.0.1:{free_port()}",
        "--",
        "llama-server",
        "-m",
        "x.gguf",
    )
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("vramscope: error: --token (or $VRAMSCOPE_TOKEN) would go to 2 boxes")
    assert TOKEN_A not in done.stderr + done.stdout


def test_short_reasons_say_what_an_error_means() -> None:
    cases = {
        "cannot reach the vramscope daemon at http://x:1: [Errno 111] Connection refused": (
            "connection refused"
        ),
        "http://x:1/api/v1/snapshot: timed out: no complete answer within 5 s": "timed out",
        "http://x:1/api/v1/snapshot: HTTP 401 (wrong token)": "401: wrong token",
        "http://x:1/api/v1/snapshot: HTTP 401 (give --token)": "401: token needed",
        "http://x:1/api/v1/snapshot: not JSON (Expecting value); not a vramscope daemon?": (
            "not a vramscope daemon"
        ),
        "http://x:1/api/v1/snapshot: HTTP 502": "HTTP 502",
        "cannot reach the vramscope daemon at http://x:1: [Errno -2] Name or service not known": (
            "unknown host"
        ),
        "something else entirely": "unreachable",
    }
    for error, meaning in cases.items():
        assert short_reason(error) == meaning, error
    assert BoxRow("u", error="x: HTTP 401 (wrong token)").reason == "401: wrong token"
    assert BoxRow("u").reason is None


# -- end to end: two real daemons, different tokens ---------------------------------------


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A box that is not a vramscope daemon: it records each request's Authorization."""

    seen: list[str | None]

    def _answer(self) -> None:
        self.seen.append(self.headers.get("Authorization"))
        body = b'{"error": "recorder"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def recorder() -> Iterator[tuple[str, list[str | None]]]:
    seen: list[str | None] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_two_daemons_with_their_own_tokens_answer_together(tmp_path: Path) -> None:
    from tui.source import RemoteSource

    ta, tb = token_file(tmp_path, "a.token", TOKEN_A), token_file(tmp_path, "b.token", TOKEN_B)
    model = am.qwen3_8b().write(tmp_path)
    launch = ["llama-server", "-m", str(model), "-c", "4096", "-np", "1", "--cache-ram", "0"]
    with contextlib.ExitStack() as stack:
        urls = []
        for name, token in (("a", TOKEN_A), ("b", TOKEN_B)):
            (tmp_path / name).mkdir()
            serve = f'model_dirs = ["{tmp_path}"]\n'
            live = running(tmp_path / name, serve, token=token)
            urls.append(stack.enter_context(live).url)
        a, b = urls
        spy, seen = stack.enter_context(recorder())
        cfg_path = fleet_config(tmp_path, [(a, ta), (b, tb), (spy, None)])
        remote = ["--config", str(cfg_path), "--remote", a, "--remote", b, "--remote", spy]
        done = vramscope("predict", "--json", *remote, "--", *launch)
        tokens = tokens_for([a, b], load(cfg_path), None)
        frames = {u: RemoteSource(u, tokens[u]).latest() for u in (a, b)}
        # the noise case: B given A's token is B's error only
        (tmp_path / "wrong").mkdir()
        wrong = fleet_config(tmp_path / "wrong", [(a, ta), (b, ta)])
        mixed = vramscope("predict", "--json", "--config", str(wrong), "--remote", a,
                          "--remote", b, "--", *launch)  # fmt: skip
    doc = json.loads(done.stdout)
    by_url = {box["url"]: box for box in doc["boxes"]}
    # both daemons judged it against their own latest tick
    for url in (a, b):
        assert by_url[url]["error"] is None, by_url[url]
        assert by_url[url]["predict"]["schema"] == "vramscope.predict/1"
    assert all(frame.picture.devices for frame in frames.values())
    # the box [fleet] lists without a token file got no token at all, and never A's or B's
    assert seen and all(h is None for h in seen), seen
    assert TOKEN_A not in done.stdout + done.stderr and TOKEN_B not in done.stdout + done.stderr
    mixed_by = {box["url"]: box for box in json.loads(mixed.stdout)["boxes"]}
    assert short_reason(mixed_by[b]["error"]) == "401: wrong token"
    assert mixed_by[a]["error"] is None and mixed_by[a]["verdict"] is not None


def test_a_box_never_receives_another_box_s_token(tmp_path: Path) -> None:
    ta, tb = token_file(tmp_path, "a.token", TOKEN_A), token_file(tmp_path, "b.token", TOKEN_B)
    with recorder() as (a, seen_a), recorder() as (b, seen_b):
        cfg_path = fleet_config(tmp_path, [(a, ta), (b, tb)])
        done = vramscope("predict", "--config", str(cfg_path), "--remote", a, "--remote", b,
                         "--", "llama-server", "-m", "x.gguf")  # fmt: skip
        tokens = tokens_for([a, b], load(cfg_path), None)
        from tui.source import RemoteSource, SourceError

        for url in (a, b):
            with pytest.raises(SourceError, match="HTTP 404"):
                RemoteSource(url, tokens[url]).latest()
    assert done.returncode == 2, done.stdout + done.stderr  # neither is a daemon: no answer
    assert seen_a and set(seen_a) == {f"Bearer {TOKEN_A}"}, seen_a
    assert seen_b and set(seen_b) == {f"Bearer {TOKEN_B}"}, seen_b


def test_tui_refuses_one_token_for_two_boxes_before_opening(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VRAMSCOPE_TOKEN": TOKEN_B}
    done = subprocess.run(
        [sys.executable, "-c", "from tui.entry import main; main()", "tui", "--config",
         "/dev/null", "--remote", "http://127.0.0.1:1", "--remote", "http://127.0.0.1:2"],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("vramscope: error: --token (or $VRAMSCOPE_TOKEN) would go to 2")
    assert TOKEN_B not in done.stderr + done.stdout
