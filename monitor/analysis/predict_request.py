"""A prediction's question and its answer: :class:`PredictRequest` in, :class:`PredictResult`
(verdicts, picture, notes, expected tokens/s, exit code) out."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from monitor.analysis.picture import Picture
from monitor.analysis.predict_verdicts import Prediction, Verdict

if TYPE_CHECKING:  # the roofline's module is imported only when tokens/s are asked for
    from monitor.analysis.throughput import Speculation

EXIT_FITS, EXIT_OOM = 0, 1
EXIT_GROWS_OOM = 3  # fits at load, not once the prompt cache / checkpoints fill
EXIT_THRASH = 4  # runs, but its mmap'd weights cannot all stay resident: slow, not killed


@dataclass
class PredictRequest:
    """One question: will this launch (``command``, or llama-swap's ``model_id``) fit?
    ``state``/``at`` and the cgroup fields are read by the CLI's edge (what box state, which
    cgroup); :func:`answer` reads the rest."""

    command: list[str]
    model_id: str | None = None
    state: Path | None = None
    at: str | None = None
    swap_config: Path | None = None
    swap_url: str | None = None
    # a llama-server router's model id (monitor/analysis/router_predict.py): --router URL,
    # --router-config FILE.ini, or (both None, no swap_config) the router on this box
    router_url: str | None = None
    router_config: Path | None = None
    ask_routers: bool = True  # False: a recorded state (the TUI's replay): files only
    # a live process's allow-listed environment (environ.read_llama_env): a router's
    # children inherit the router's LLAMA_ARG_* (router_predict.py); None: none read
    env_for: Callable[[int], Mapping[str, str]] | None = None
    margin_gib: float = 0.5
    want_fit_ctx: bool = False
    bandwidth_gbs: dict[str, float] = field(default_factory=dict)
    flops_tflops: dict[str, float] = field(default_factory=dict)  # --flops DEV=TFLOPS
    accept: float | None = None  # --accept RATE (None: DEFAULT_ACCEPT)
    cgroup: str | None = None  # --cgroup PATH: the memory cgroup the launch will run in
    unit: str | None = None  # --unit NAME: a systemd unit's cgroup (system.slice/NAME)
    # --growth-horizon / [predict] growth_horizon_tokens: a cache that overflows only after
    # more distinct prompt tokens than this is a note, not exit 3/4
    growth_horizon_tokens: int = 1_000_000
    # ask the llama-server binary the command names which flags it takes (its --help):
    # the CLI on the launching box does; the daemon's HTTP API never runs a named binary
    check_engine_flags: bool = False
    # --cpu-features: the CPU that will run the server; None: the box state's
    cpu_features: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Throughput:
    """Expected decode speed by the roofline (monitor/analysis/throughput.py). ``unknown``:
    why there is no figure (a device with no bandwidth or peak known), else None."""

    tokens_per_s: float | None  # this launch, drafting off (or no draft)
    speculation: Speculation | None = None  # with the draft vs its baseline
    baseline: str = ""  # the placement the draft is judged against: "no draft, -ngl 27"
    unknown: str | None = None
    sources: tuple[str, ...] = ()  # where each device's figures come from
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PredictResult:
    """The answer to a :class:`PredictRequest`: the verdicts (``prediction``), the picture
    they were judged against, the workflow's own notes (the launch's cgroup, llama-swap),
    ``--fit-ctx``'s answer, the expected tokens/s, and the exit code a script reads."""

    prediction: Prediction
    picture: Picture
    notes: tuple[str, ...] = ()  # before the prediction's and the estimate's own notes
    want_fit_ctx: bool = False
    fit_ctx: int | None = None  # the largest -c that fits (asked with want_fit_ctx)
    throughput: Throughput | None = None
    growth_horizon_tokens: int = 1_000_000
    command: tuple[str, ...] = ()  # the launch judged (a model id's: as its config renders it)

    @property
    def growth_within_horizon(self) -> bool:
        """Can the caches pass the room within the horizon (or is that unknown)?"""
        tokens = self.prediction.overflow_tokens
        return tokens is None or tokens <= self.growth_horizon_tokens

    @property
    def verdict(self) -> Verdict:
        return self.prediction.verdict

    @property
    def all_notes(self) -> tuple[str, ...]:
        return self.notes + self.prediction.notes + tuple(self.prediction.estimate.notes)

    @property
    def exit_code(self) -> int:
        """0 fits (at load and once the caches fill), 1 OOM at load (or no -c fits when
        ``--fit-ctx`` asked), 3 OOM once the caches fill, 4 runs but thrashes, at load or
        once the caches fill (its mmap'd weights do not all stay resident)."""
        if self.verdict == "oom" or (self.want_fit_ctx and self.fit_ctx is None):
            return EXIT_OOM
        grown = self.prediction.grown_verdict if self.growth_within_horizon else None
        if grown == "oom":
            return EXIT_GROWS_OOM
        return EXIT_THRASH if "thrash" in (self.verdict, grown) else EXIT_FITS
