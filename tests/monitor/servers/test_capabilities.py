"""The engine table (monitor/servers/capabilities.py) is complete and is what the code obeys:
every engine the collectors can name is in it, and the estimator, the path resolution and
the /slots poller each do what its row says."""

from __future__ import annotations

import pytest

from collectors import tracking
from monitor.estimate import EstimateError, estimate
from monitor.estimate.model import DeviceInfo
from monitor.servers.capabilities import ENGINES, ESTIMATED, LLAMACPP_ESTIMATED, SLOTS
from monitor.servers.spec import LaunchSpec, resolve_paths

GIB = 1024**3


def test_every_engine_the_collectors_name_has_a_row() -> None:
    named = set(tracking._EXECUTABLES.values())
    named |= {engine for _marker, engine in tracking._PYTHON_MARKERS}
    named |= {engine for _prefix, engine in tracking._COMM_PREFIXES}
    assert named <= set(ENGINES), f"no row in ENGINES for {sorted(named - set(ENGINES))}"
    assert all(name == row.name for name, row in ENGINES.items())


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_the_estimator_is_the_one_in_the_table(name: str) -> None:
    row = ENGINES[name]
    spec = LaunchSpec(engine=name, gpu_memory_utilization=0.5)
    if row.estimator is None:
        with pytest.raises(EstimateError, match="no estimator"):
            estimate(spec, [DeviceInfo("gpu0", total_bytes=8 * GIB)])
    elif row.estimator == "vllm":  # the pre-allocated share, whatever the model
        est = estimate(spec, [DeviceInfo("gpu0", total_bytes=8 * GIB)])
        assert est.total_bytes("budget") == 4 * GIB
    else:  # llama.cpp's formulas read the model file: none given, none read
        with pytest.raises(EstimateError, match="no model path"):
            estimate(spec, [], read_header=lambda path: pytest.fail(f"read {path}"))


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_relative_model_paths_join_the_cwd_only_where_the_table_says(name: str) -> None:
    spec = resolve_paths(LaunchSpec(engine=name, model_path="models/m.gguf"), "/srv/llm")
    joined = spec.model_path == "/srv/llm/models/m.gguf"
    assert joined is ENGINES[name].model_path_is_file


def test_derived_sets() -> None:
    assert LLAMACPP_ESTIMATED <= ESTIMATED
    assert SLOTS <= LLAMACPP_ESTIMATED  # only llama-server answers /slots
    assert "llama-swap" not in ESTIMATED and ENGINES["llama-swap"].role == "proxy"
