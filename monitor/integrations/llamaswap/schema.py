"""A llama-swap config as vramscope holds it: its models, groups and matrix (frozen), and the
one error a config vramscope cannot use raises."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.errors import InputError

__all__ = [
    "DEFAULT_GROUP_ID",
    "SwapConfig",
    "SwapConfigError",
    "SwapGroup",
    "SwapMatrix",
    "SwapModel",
]

DEFAULT_GROUP_ID = "(default)"
DEFAULT_START_PORT = 5800
DEFAULT_PROXY = "http://localhost:${PORT}"


class SwapConfigError(InputError):
    """A llama-swap config vramscope cannot use; the message is one line."""


@dataclass(frozen=True, slots=True)
class SwapModel:
    model_id: str
    cmd: tuple[str, ...]
    env: tuple[str, ...]
    aliases: tuple[str, ...]
    ttl: int | None


@dataclass(frozen=True, slots=True)
class SwapGroup:
    name: str
    swap: bool
    exclusive: bool
    persistent: bool
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SwapMatrix:
    vars: dict[str, str]
    evict_costs: dict[str, int]  # model ID -> multiplier (vars resolved)
    sets: tuple[tuple[str, str], ...]  # (name, DSL) in file order
    _program: tuple[Any, ...]  # compiled sets in solve order: (name, root node, models)


@dataclass(frozen=True, slots=True)
class SwapConfig:
    models: dict[str, SwapModel]
    groups: tuple[SwapGroup, ...]
    router: str  # "groups" | "matrix" | "default"
    matrix: SwapMatrix | None
