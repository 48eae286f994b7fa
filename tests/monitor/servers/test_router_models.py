"""A router's model list: its --models-dir read as common/preset.cpp does, and its
recorded ``GET /models`` answers (tests/fixtures/llamacpp_router/README.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from monitor.servers import parse_command
from monitor.servers import router_models as rm
from monitor.servers.router_models import (
    DirModel,
    RouterModelsError,
    list_models_dir,
    models_answer,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "llamacpp_router"


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")
    return path


def test_the_recorded_answer_after_loading_a() -> None:
    models = models_answer((FIXTURES / "models_loaded_a.json").read_bytes())
    assert [(m.model_id, m.status) for m in models] == [("a", "loaded"), ("b", "unloaded")]
    spec = parse_command(list(models[0].args))
    assert spec is not None and spec.role == "server"
    assert (spec.model_name, spec.model_path, spec.port, spec.host) == (
        "a",
        "/tmp/rt/m/a.gguf",
        45805,
        "127.0.0.1",
    )
    # the router's own -c/-np reach the child; its --models-* do not (unset_reserved_args)
    assert (spec.ctx_size, spec.n_parallel, spec.models_dir, spec.models_max) == (
        512,
        1,
        None,
        None,
    )


def test_the_recorded_answer_after_loading_b_has_a_unloaded() -> None:
    models = models_answer((FIXTURES / "models_loaded_b.json").read_bytes())
    assert {m.model_id: m.status for m in models} == {"a": "unloaded", "b": "loaded"}


def test_the_folder_of_the_recording_lists_what_the_router_listed(tmp_path: Path) -> None:
    _touch(tmp_path / "a.gguf")
    _touch(tmp_path / "b.gguf")
    recorded = models_answer((FIXTURES / "models_loaded_a.json").read_bytes())
    listed = list_models_dir(str(tmp_path))
    assert [m.model_id for m in listed] == [m.model_id for m in recorded]
    for mine, theirs in zip(listed, recorded, strict=True):
        model = theirs.args[theirs.args.index("--model") + 1]
        assert os.path.basename(mine.model_path) == os.path.basename(model)


def test_the_folder_rules_of_preset_cpp(tmp_path: Path) -> None:
    _touch(tmp_path / "plain.gguf")
    _touch(tmp_path / "twice.gguf.gguf")  # every ".gguf" goes: id "twice"
    _touch(tmp_path / "mmproj-plain.gguf")  # companions alone are no model
    _touch(tmp_path / "mtp-plain.gguf")
    _touch(tmp_path / "notes.txt")
    big = tmp_path / "big"
    _touch(big / "big-00002-of-00002.gguf")
    _touch(big / "big-00001-of-00002.gguf")
    _touch(big / "mmproj-big.gguf")
    _touch(big / "dflash-big.gguf")
    _touch(tmp_path / "empty" / "readme.md")  # a folder with no model file
    _touch(tmp_path / "deeper" / "inner" / "x.gguf")  # only one level deep
    assert list_models_dir(str(tmp_path)) == (
        DirModel(
            "big",
            str(big / "big-00001-of-00002.gguf"),
            str(big / "mmproj-big.gguf"),
            str(big / "dflash-big.gguf"),
        ),
        DirModel("plain", str(tmp_path / "plain.gguf")),
        DirModel("twice", str(tmp_path / "twice.gguf.gguf")),
    )


def test_links_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    _touch(outside / "secret.gguf")
    models = tmp_path / "models"
    models.mkdir()
    (models / "linked.gguf").symlink_to(outside / "secret.gguf")
    (models / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")
    (models / "linked-folder").symlink_to(outside)
    listed = list_models_dir(str(models))
    assert [(m.model_id, m.via_link) for m in listed] == [("dangling", True), ("linked", True)]
    assert listed[1].model_path == str(models / "linked.gguf")  # the link, not its target
    (tmp_path / "link-to-models").symlink_to(models)
    with pytest.raises(RouterModelsError, match="symbolic link"):
        list_models_dir(str(tmp_path / "link-to-models"))


@pytest.mark.parametrize("what", ["missing", "file"])
def test_a_models_dir_that_is_no_folder_is_one_line(tmp_path: Path, what: str) -> None:
    path = tmp_path / "m"
    if what == "file":
        _touch(path)
    with pytest.raises(RouterModelsError, match="cannot read the models folder") as err:
        list_models_dir(str(path))
    assert "\n" not in str(err.value)


def test_a_folder_with_too_many_entries_is_refused_not_half_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rm, "MAX_ENTRIES", 3)
    for i in range(4):
        _touch(tmp_path / f"m{i}.gguf")
    with pytest.raises(RouterModelsError, match="more than 3 entries"):
        list_models_dir(str(tmp_path))


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"[" * 100_000, "deeper"),
        (b'{"data": ' + b"[" * 40 + b"]" * 40 + b"}", "deeper"),
        (b"not json", "not JSON"),
        (b'{"object": "list"}', 'no "data"'),
        (b"[1, 2]", 'no "data"'),
        (b" " * (rm.MAX_ANSWER_BYTES + 1), "over"),
    ],
)
def test_hostile_answers_are_one_line(raw: bytes, why: str) -> None:
    with pytest.raises(RouterModelsError, match=why):
        models_answer(raw)


def test_odd_entries_in_an_answer_are_skipped_or_unknown() -> None:
    raw = json.dumps(
        {
            "data": [
                {"id": "ok", "status": {"value": "loaded", "args": ["llama-server", 5, "-c"]}},
                {"id": 7},
                "text",
                {"id": "bare"},
                {"id": "odd", "status": {"value": ["x"], "args": "no list"}},
                {"id": "quoted [{", "status": {"value": "unloaded"}},
            ]
        }
    ).encode()
    got = [(m.model_id, m.status, m.args) for m in models_answer(raw)]
    assert got == [
        ("ok", "loaded", ("llama-server", "-c")),
        ("bare", "unknown", ()),
        ("odd", "unknown", ()),
        ("quoted [{", "unloaded", ()),
    ]
