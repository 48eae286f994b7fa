"""Which running models llama-swap unloads before it loads another (pure).

Source: mostlygeek/llama-swap ``internal/router/{group,matrix,loadmetrics,base}.go``,
``internal/router/scheduler/fifo.go``.

Eviction (``groupSwapper.EvictionFor``), for each running model other than the target:

- same group as the target and the group has swap=true: unloaded;
- another group, the target's group is exclusive, the other group is not persistent:
  unloaded. Loading a model of a *non*-exclusive group never unloads other groups, even
  exclusive ones (a kept "gotcha" of llama-swap).

Matrix (``internal/matrix``): every set is a DSL expression (``a & b``, ``a | b``,
parentheses, ``+set`` references) describing model sets that may coexist; identifiers
are ``vars`` keys or model IDs. For a target that is not running, the solver looks at
every set containing it and evicts the running models outside the cheapest one (ties:
set order — referenced sets first — then expression order); a target in no set evicts
everything. The cost of evicting a model is its ``evict_costs`` multiplier (default 1)
times llama-swap's measured median load time in ms, which it learns at run time and is 1
before any load was measured. :func:`evictions` uses 1 unless you pass ``load_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from monitor.integrations.llamaswap.config import resolve
from monitor.integrations.llamaswap.matrix import evaluate
from monitor.integrations.llamaswap.schema import SwapConfig, SwapMatrix

__all__ = ["evictions"]


def _matrix_evictions(
    matrix: SwapMatrix, running: list[str], target: str, load_ms: Mapping[str, int] | None
) -> list[str]:
    if target in running:
        return []
    relevant = frozenset([target, *running])

    def cost(model: str) -> int:
        estimate = max(int((load_ms or {}).get(model, 1)), 1)
        return matrix.evict_costs.get(model, 1) * estimate

    best: frozenset[str] | None = None
    best_cost = -1
    memo: dict[int, list[frozenset[str]]] = {}
    for _name, root, support in matrix._program:
        if target not in support:
            continue
        for state in evaluate(root, relevant, memo):
            if target not in state:
                continue
            total = sum(cost(m) for m in running if m not in state)
            if best is None or total < best_cost:
                best, best_cost = state, total
    if best is None:
        return list(running)
    return [m for m in running if m not in best]


def evictions(
    config: SwapConfig,
    running: Iterable[str],
    target: str,
    *,
    load_ms: Mapping[str, int] | None = None,
) -> tuple[str, ...]:
    """Running models llama-swap stops before it loads ``target`` (sorted model IDs).

    ``running`` is every model whose state is not stopped/shutdown (IDs or aliases).
    ``load_ms`` matters only for the matrix router: the per-model load-time estimate
    llama-swap's cost tracker holds (its evict cost is multiplier x estimate); models not
    listed, and every model when it is None, count 1 — llama-swap's value before it has
    measured any load.
    """
    target_id = resolve(config, target).model_id
    running_ids = sorted({resolve(config, name).model_id for name in running})
    if config.matrix is not None:
        return tuple(sorted(_matrix_evictions(config.matrix, running_ids, target_id, load_ms)))
    group_of = {member: group for group in config.groups for member in group.members}
    target_group = group_of[target_id]
    evict = []
    for model in running_ids:
        if model == target_id:
            continue
        group = group_of[model]
        if group is target_group:
            if target_group.swap:
                evict.append(model)
        elif target_group.exclusive and not group.persistent:
            evict.append(model)
    return tuple(evict)
