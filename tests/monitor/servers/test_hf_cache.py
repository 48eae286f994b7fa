"""``-hf user/model[:quant]``: the model found in llama.cpp's cache as llama-server finds it
(monitor/servers/hf_cache.py), or one line saying where it looked (issue 34)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import cli_runner
import gguf_models as g
import pytest

from collectors.base import Roots
from monitor.servers.hf_cache import HfCacheError, cache_dir, resolve
from tui.source import LiveSource

ROOT = Path(__file__).resolve().parents[3]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "unsloth/Qwen3-0.6B-GGUF"
LLAMA_SERVER = ROOT / ".cache/llama.cpp/0.3.36/bin/llama-server"


@pytest.fixture(scope="module")
def blob(tmp_path_factory: pytest.TempPathFactory) -> Path:
    md, tensors = g.qwen3_8b(n_layer=4)
    return g.write_model(
        tmp_path_factory.mktemp("m") / "blob.gguf", "qwen3", md, tensors, vocab_size=151936
    )[0]


def hub(tmp_path: Path, blob: Path, names: list[str], ref: str = "main") -> Path:
    """A Hugging Face hub cache as llama.cpp writes it: refs/main, blobs/OID, snapshot
    links ``snapshots/COMMIT/NAME -> ../../blobs/OID``."""
    repo = tmp_path / "hub" / ("models--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / ref).write_text(COMMIT)
    (repo / "blobs").mkdir()
    try:  # the blob is a sparse multi-GiB file: a hard link, not a copy of its holes
        os.link(blob, repo / "blobs" / "abc")
    except OSError:  # another filesystem
        shutil.copy(blob, repo / "blobs" / "abc")
    for name in names:
        link = repo / "snapshots" / COMMIT / name
        link.parent.mkdir(parents=True, exist_ok=True)
        up = "../" * (name.count("/") + 2)
        link.symlink_to(f"{up}blobs/abc")
    return tmp_path / "hub"


def vramscope(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command with only PATH and ``env`` (no HF_* or HOME from this box)."""
    return cli_runner.vramscope(*args, env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env})


NAMES = ["Qwen3-0.6B-Q8_0.gguf", "Qwen3-0.6B-Q4_K_M.gguf", "sub/Qwen3-0.6B-IQ2_XS.gguf"]


def test_estimate_finds_the_hf_model_in_the_cache(tmp_path: Path, blob: Path) -> None:
    cache = hub(tmp_path, blob, NAMES)
    snap = cache / f"models--unsloth--Qwen3-0.6B-GGUF/snapshots/{COMMIT}"
    env = {"HF_HUB_CACHE": str(cache), "HOME": str(tmp_path / "home")}
    cases = {
        f"{REPO}:Q8_0": "Qwen3-0.6B-Q8_0.gguf",
        f"{REPO}:q8_0": "Qwen3-0.6B-Q8_0.gguf",  # the tag matches case-insensitively
        REPO: "Qwen3-0.6B-Q4_K_M.gguf",  # no tag: Q4_K_M first
    }
    for repo_tag, name in cases.items():
        result = vramscope("estimate", "--cpu-only", "--", "llama-server", "-hf", repo_tag, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[0] == f"llama.cpp: {snap / name}"
    picked = vramscope(
        "estimate", "--cpu-only", "--", "llama-server", "-hf", REPO,
        "-hff", "sub/Qwen3-0.6B-IQ2_XS.gguf", env=env,
    )  # fmt: skip
    assert picked.stdout.splitlines()[0] == f"llama.cpp: {snap / 'sub/Qwen3-0.6B-IQ2_XS.gguf'}"


def test_an_hf_model_not_in_the_cache_says_where_it_looked(tmp_path: Path, blob: Path) -> None:
    cache = hub(tmp_path, blob, NAMES[:1])
    env = {"HOME": str(tmp_path / "home"), "HF_HOME": str(tmp_path / "hf")}
    result = vramscope("estimate", "--cpu-only", "--", "llama-server", "-hf", REPO, env=env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"vramscope: error: -hf {REPO}: not in llama.cpp's cache: no refs/main in "
        f"{tmp_path}/hf/hub/models--unsloth--Qwen3-0.6B-GGUF (the cache from HF_HOME)"
    ]
    env = {"HF_HUB_CACHE": str(cache)}
    other = vramscope("predict", "--", "llama-server", "-hf", f"{REPO}:Q5_K_M", env=env)
    assert other.returncode == 2
    assert "no model GGUF matching Q5_K_M in " in other.stderr
    assert "(1 file(s) there)" in other.stderr and "Traceback" not in other.stderr


def test_cache_folder_follows_llama_cpp_order() -> None:
    """common/hf-cache.cpp get_cache_directory: the first variable set wins."""
    full = {
        "LLAMA_CACHE": "/a",
        "HF_HUB_CACHE": "/b",
        "HUGGINGFACE_HUB_CACHE": "/c",
        "HF_HOME": "/d",
        "XDG_CACHE_HOME": "/e",
        "HOME": "/f",
    }
    expected = ["/a", "/b", "/c", "/d/hub", "/e/huggingface/hub", "/f/.cache/huggingface/hub"]
    keys = list(full)
    for i, want in enumerate(expected):
        assert cache_dir({k: full[k] for k in keys[i:]}) == (want, keys[i])
    assert cache_dir({}) is None


def test_a_link_out_of_the_repository_is_not_followed(tmp_path: Path, blob: Path) -> None:
    cache = hub(tmp_path, blob, [])
    snap = cache / f"models--unsloth--Qwen3-0.6B-GGUF/snapshots/{COMMIT}"
    snap.mkdir(parents=True)
    (snap / "Qwen3-0.6B-Q8_0.gguf").symlink_to(blob)  # outside the cache
    with pytest.raises(HfCacheError, match="links out of .* not followed"):
        resolve(f"{REPO}:Q8_0", None, {"LLAMA_CACHE": str(cache)})
    with pytest.raises(HfCacheError, match="expected <user>/<model>"):
        resolve("../../etc:Q8_0", None, {"LLAMA_CACHE": str(cache)})


def test_running_server_with_hf_is_estimated_from_its_own_cache_env(
    tmp_path: Path, blob: Path
) -> None:
    """A real process launched with -hf and HF_HUB_CACHE in its environment: estimate --pid
    reads the (allow-listed) variable and finds the file."""
    cache = hub(tmp_path, blob, NAMES[:1])
    exe = tmp_path / "llama-server"
    shutil.copy(sys.executable, exe)
    script = tmp_path / "serve.py"
    script.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen(
        [str(exe), str(script), "-hf", f"{REPO}:Q8_0"],
        env={"PATH": "/usr/bin:/bin", "HF_HUB_CACHE": str(cache)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        result = vramscope("estimate", "--cpu-only", "--pid", str(child.pid), env={})
        source = LiveSource(Roots(), ["procfs"])  # the daemon's and the TUI's assess()
        try:
            (row,) = [r for r in source.latest().models if r.pid == child.pid]
        finally:
            source.close()
    finally:
        child.kill()
        child.wait()
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].endswith(f"{COMMIT}/Qwen3-0.6B-Q8_0.gguf")
    assert row.estimate is not None and row.error is None, row.error
    assert str(row.estimate.model_path).endswith(f"{COMMIT}/Qwen3-0.6B-Q8_0.gguf")
    assert row.model == f"{REPO}:Q8_0"


@pytest.mark.slow
@pytest.mark.skipif(not LLAMA_SERVER.exists(), reason="the built llama-server is not here")
def test_real_llama_server_loads_the_file_we_resolve(tmp_path: Path, blob: Path) -> None:
    """llama-server --offline -hf, on the same cache, tries to load the file we name (the
    header-only model then fails to load: its path is in the error line)."""
    cache = hub(tmp_path, blob, NAMES)
    for repo_tag, extra in ((REPO, []), (f"{REPO}:Q8_0", []), (REPO, ["-hff", NAMES[2]])):
        run = subprocess.run(
            [str(LLAMA_SERVER), "--offline", "-hf", repo_tag, *extra, "--port", "0"],
            env={"PATH": "/usr/bin:/bin", "HF_HUB_CACHE": str(cache), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        loaded = re.findall(r"failed to load model '([^']+)'", run.stdout + run.stderr)
        hff = extra[1] if extra else None
        assert loaded and loaded[0] == resolve(repo_tag, hff, {"HF_HUB_CACHE": str(cache)})


def test_draft_from_the_cache_with_hfd(tmp_path: Path, blob: Path) -> None:
    """``-hfd user/model[:quant]`` (LLAMA_ARG_SPEC_DRAFT_HF_REPO): the draft's file from the
    cache, priced as its own weights and KV; not cached: the line names -hfd."""
    cache = hub(tmp_path, blob, NAMES)
    env = {"HF_HUB_CACHE": str(cache)}
    base = ["estimate", "--json", "--cpu-only", "--", "llama-server", "-hf", f"{REPO}:Q8_0"]
    plain = vramscope(*base, env=env)
    drafted = vramscope(*base, "-hfd", f"{REPO}:Q4_K_M", env=env)
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    names = {c["name"] for c in json.loads(drafted.stdout)["components"]}
    assert "draft_weights" in names
    assert "draft_weights" not in {c["name"] for c in json.loads(plain.stdout)["components"]}
    missing = vramscope(*base, "-hfd", "someone/Other-GGUF", env=env)
    assert missing.returncode == 2
    assert "error: -hfd someone/Other-GGUF: not in llama.cpp's cache: no refs/main" in (
        missing.stderr
    )
