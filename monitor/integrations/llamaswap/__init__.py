"""llama-swap: read its config, predict which models a swap unloads, read its live state.

Facts and sources: ../shared/research/estimation.md section 5, checked against
mostlygeek/llama-swap (``internal/config/{load,config,macros,commands,model_config,matrix}.go``,
``internal/router/{group,matrix,loadmetrics,base}.go``, ``internal/router/scheduler/fifo.go``,
``internal/matrix/{dsl,program}.go``).

- :mod:`.config`: reading and validating its YAML config (:func:`load_config`, :func:`resolve`);
  :mod:`.schema` the typed config it returns, :mod:`.yaml_nodes` the YAML reads,
  :mod:`.macros` macro and ``${env.VAR}`` substitution, :mod:`.matrix_sets` matrix routing;
- :mod:`.matrix`: the matrix router's set DSL (parsing, and the model sets it allows);
- :mod:`.evictions`: which running models a swap unloads first (:func:`evictions`, pure);
- :mod:`.client`: its live HTTP state, loopback only (:func:`fetch_running`,
  :func:`parse_event_frame`).
"""

from monitor.integrations.llamaswap.client import fetch_running, parse_event_frame
from monitor.integrations.llamaswap.config import load_config, resolve
from monitor.integrations.llamaswap.evictions import evictions
from monitor.integrations.llamaswap.schema import DEFAULT_GROUP_ID, SwapConfig, SwapConfigError

__all__ = [
    "DEFAULT_GROUP_ID",
    "SwapConfig",
    "SwapConfigError",
    "evictions",
    "fetch_running",
    "load_config",
    "parse_event_frame",
    "resolve",
]
