"""Actual context use of llama-server slots, and a right-sized ``-c`` / ``-np`` from it.

llama-server pre-allocates its whole KV cache (``-c`` cells) at start, but most boxes use a
small part of it. This module watches what the slots really hold and suggests the smallest
``-c`` / ``-np`` that would have covered it (../shared/research/estimation.md sections 1a, 5, 6).

Sources, llama.cpp ``tools/server``:

- ``GET /slots`` is a JSON array of ``server_slot::to_json``: ``id, n_ctx, speculative,
  is_processing`` always, and once a slot has had a task ``id_task, n_prompt_tokens,
  n_prompt_tokens_processed, n_prompt_tokens_cache, params, next_token: [{has_next_token,
  has_new_line, n_remain, n_decoded}]`` (server-context.cpp). ``n_prompt_tokens`` is
  ``prompt.tokens.size()``: the slot's whole cached sequence. Generated tokens are pushed onto
  ``prompt.tokens`` as they are decoded (``slot.prompt.tokens.push_back(slot.sampled)``; the
  context shift treats the generated tail as part of it), so in current builds
  ``n_prompt_tokens`` already counts generation and is the cells the slot occupies now. Adding
  ``n_decoded`` on top would count the generated part twice, so it is used only when
  ``n_prompt_tokens`` is missing. Older shapes: late-2025 builds print no ``n_prompt_tokens``
  (only ``next_token[0].n_decoded``, a lower bound); 2024 builds used ``state`` (0 idle,
  1 processing) instead of ``is_processing`` and ``next_token`` as an object, not a list.
  Lower-bound samples are marked ``exact=False`` and kept out of the token distribution.
- ``GET /metrics`` (only with ``--metrics``) has ``llamacpp:n_tokens_max``, the largest
  ``slot.prompt.n_tokens()`` seen since start ("prompt + generation"): a high watermark.
- Router mode: put ``?model=<name>`` in the base URL; its query is kept on every request.
- llama-swap: ``/upstream/<model>/slots`` *loads* the model (the path is not in
  ``upstream.ignorePaths``). Callers must poll an upstream URL only for a model that
  ``/running`` shows as ``ready``; this module never talks to llama-swap by itself.

The sizing rule is llama.cpp's (``src/llama-context.cpp``): ``n_ctx = pad256(-c)``; unified KV:
one buffer of n_ctx cells that every slot may fill; split KV (``-np N`` without ``-kvu``): each
slot gets ``pad256(n_ctx / np)`` cells and the total is that times np, which can round *up*.

The poller is loopback-only (:mod:`monitor.integrations.loopback`), never uses a proxy, follows
no redirects, is throttled per base URL and backs off after errors.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from monitor.integrations.loopback import loopback_url

__all__ = [
    "Recommendation",
    "SlotPoller",
    "SlotSample",
    "UsageStats",
    "UsageTracker",
    "cells_for",
    "parse_n_tokens_max",
    "parse_slots",
    "recommend",
]

PAD = 256  # GGML_PAD(n_ctx, 256) and GGML_PAD(n_ctx_seq, 256), llama.cpp PR #17046
MAX_BODY_BYTES = 16 * 1024 * 1024  # /slots carries prompt text with LLAMA_SERVER_SLOTS_DEBUG
_MAX_SLOTS = 4096  # bounds for garbage input: real servers have a handful
_MAX_MODELS = 256
_TOKENS_MAX = re.compile(
    r"^llamacpp:n_tokens_max(?:\{[^}]*\})?\s+([-+0-9.eEinfINFaN]+)(?:\s+-?\d+)?\s*$"
)


# --- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotSample:
    slot_id: int
    n_ctx: int  # the slot's context (cells it may use); 0 where not reported
    tokens: int  # cells the slot holds now (prompt + generated so far)
    busy: bool  # is_processing (older builds: state != 0)
    exact: bool = True  # False: no n_prompt_tokens, ``tokens`` is n_decoded (a lower bound)


def _int(value: object) -> int | None:
    """A JSON integer (or integral float) as int; None for bools, strings, NaN, other."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _n_decoded(item: dict[str, object]) -> int | None:
    nt = item.get("next_token")
    if isinstance(nt, list):  # current: a one-element list
        nt = nt[0] if nt else None
    if isinstance(nt, dict):  # 2024: an object
        return _int(nt.get("n_decoded"))
    return None


def _busy(item: dict[str, object]) -> bool:
    flag = item.get("is_processing")
    if isinstance(flag, bool):
        return flag
    state = _int(item.get("state"))  # 2024: SLOT_STATE_IDLE = 0, SLOT_STATE_PROCESSING = 1
    return state is not None and state != 0


def parse_slots(doc: object) -> list[SlotSample]:
    """``GET /slots`` JSON (already decoded) as samples; [] for anything unrecognised.

    Accepts the array llama-server returns and, leniently, ``{"slots": [...]}``. Entries that
    are not objects are skipped; a missing ``id`` becomes the entry's index; negative counts
    become 0. Never raises.
    """
    try:
        if isinstance(doc, dict):
            doc = doc.get("slots")
        if not isinstance(doc, list):
            return []
        out: list[SlotSample] = []
        for index, item in enumerate(doc[:_MAX_SLOTS]):
            if not isinstance(item, dict):
                continue
            slot_id = _int(item.get("id"))
            n_ctx = _int(item.get("n_ctx"))
            n_prompt = _int(item.get("n_prompt_tokens"))
            n_decoded = _n_decoded(item)
            if n_prompt is not None:
                tokens, exact = n_prompt, True
            elif "next_token" not in item and "id_task" not in item:
                tokens, exact = 0, True  # never given a task: it holds nothing
            else:
                tokens, exact = n_decoded or 0, False
            out.append(
                SlotSample(
                    slot_id=index if slot_id is None else slot_id,
                    n_ctx=max(0, n_ctx or 0),
                    tokens=max(0, tokens),
                    busy=_busy(item),
                    exact=exact,
                )
            )
        return out
    except Exception:  # the contract is "never raises on odd JSON"
        return []


def parse_n_tokens_max(metrics_text: str) -> int | None:
    """``llamacpp:n_tokens_max`` from Prometheus text exposition; None when absent or bad.

    Labels and a trailing timestamp are allowed; with several samples the largest wins.
    """
    if not isinstance(metrics_text, str):
        return None
    best: int | None = None
    for line in metrics_text.splitlines():
        line = line.strip()
        if not line.startswith("llamacpp:n_tokens_max"):
            continue
        m = _TOKENS_MAX.match(line)
        if not m:
            continue
        try:
            value = float(m.group(1))
        except ValueError:
            continue
        if not math.isfinite(value) or value < 0:
            continue
        best = max(best or 0, int(value))
    return best


# --- tracking -----------------------------------------------------------------------------


class _Reservoir:
    """Uniform sample of at most ``cap`` values over everything added (Algorithm R)."""

    __slots__ = ("cap", "items", "seen", "_rng")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.items: list[int] = []
        self.seen = 0
        self._rng = random.Random(0x5EED)  # deterministic: same input, same stats

    def add(self, value: int) -> None:
        self.seen += 1
        if len(self.items) < self.cap:
            self.items.append(value)
            return
        j = self._rng.randrange(self.seen)
        if j < self.cap:
            self.items[j] = value


def _quantile(sorted_values: list[int], q: float) -> int:
    """Nearest-rank quantile (the smallest value with at least q of the data at or below)."""
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass(frozen=True, slots=True)
class UsageStats:
    """What the busy slots of one model held. Tokens = KV cells of one sequence.

    Polling samples a request each time it is seen busy, so long-running requests weigh more
    (the distribution is over time, not over requests).
    """

    model: str
    samples: int  # busy-slot observations with an exact token count (all seen, not the kept)
    p50: int  # tokens in use per busy slot
    p99: int
    max_tokens: int  # the largest observed (exact, over every sample, not just the kept ones)
    n_tokens_max: int | None  # llamacpp:n_tokens_max high watermark, if /metrics answered
    busy_polls: int  # polls with at least one busy slot
    busy_p99: int  # p99 of slots busy at once, over busy polls
    busy_max: int
    concurrent_p99: int  # p99 of the summed tokens of the busy slots of one poll
    concurrent_max: int
    inexact_samples: int  # busy slots of older builds (no n_prompt_tokens): not in p50/p99
    n_slots: int | None  # slots in the latest poll (= -np)
    slot_n_ctx: int | None  # the largest slot n_ctx in the latest poll
    first_ts_ms: int | None
    last_ts_ms: int | None

    @property
    def peak(self) -> int:
        """The most one sequence is known to have held: max of samples and the watermark."""
        return max(self.max_tokens, self.n_tokens_max or 0)


class _ModelUsage:
    __slots__ = (
        "tokens", "busy", "concurrent", "max_tokens", "busy_max", "concurrent_max", "inexact",
        "n_tokens_max", "n_slots", "slot_n_ctx", "first_ts", "last_ts", "touched",
    )  # fmt: skip

    def __init__(self, cap: int) -> None:
        self.tokens = _Reservoir(cap)
        self.busy = _Reservoir(cap)
        self.concurrent = _Reservoir(cap)
        self.max_tokens = 0
        self.busy_max = 0
        self.concurrent_max = 0
        self.inexact = 0
        self.n_tokens_max: int | None = None
        self.n_slots: int | None = None
        self.slot_n_ctx: int | None = None
        self.first_ts: int | None = None
        self.last_ts: int | None = None
        self.touched = 0


class UsageTracker:
    """Per model key (model path, swap id): bounded reservoirs of tokens per busy slot.

    Memory is bounded: ``max_samples`` values per reservoir (three per model) and at most
    256 models (the least recently fed is dropped). Thread-safe.
    """

    def __init__(self, max_samples: int = 10_000) -> None:
        if max_samples < 1:
            raise ValueError("max_samples must be >= 1")
        self.max_samples = max_samples
        self._models: dict[str, _ModelUsage] = {}
        self._lock = threading.Lock()
        self._clock = 0

    def _get(self, model: str) -> _ModelUsage:
        usage = self._models.get(model)
        if usage is None:
            if len(self._models) >= _MAX_MODELS:
                oldest = min(self._models, key=lambda k: self._models[k].touched)
                del self._models[oldest]
            usage = self._models[model] = _ModelUsage(self.max_samples)
        self._clock += 1
        usage.touched = self._clock
        return usage

    def add(self, model: str, slots: Iterable[SlotSample], ts_ms: int) -> None:
        """One poll's slots. Idle slots only update the slot count; a poll with no busy
        slot does not enter the concurrency figures (they describe load when there is some).
        """
        slots = list(slots)
        with self._lock:
            usage = self._get(model)
            if usage.first_ts is None:
                usage.first_ts = ts_ms
            usage.last_ts = ts_ms
            if slots:
                usage.n_slots = len(slots)
                usage.slot_n_ctx = max(s.n_ctx for s in slots)
            busy = [s for s in slots if s.busy]
            if not busy:
                return
            total = 0
            for s in busy:
                total += s.tokens
                if s.exact:
                    usage.tokens.add(s.tokens)
                    usage.max_tokens = max(usage.max_tokens, s.tokens)
                else:
                    usage.inexact += 1
            usage.busy.add(len(busy))
            usage.busy_max = max(usage.busy_max, len(busy))
            if all(s.exact for s in busy):
                usage.concurrent.add(total)
                usage.concurrent_max = max(usage.concurrent_max, total)

    def set_high_watermark(self, model: str, n_tokens_max: int) -> None:
        """Record ``llamacpp:n_tokens_max`` (monotonic per server; a lower value means a
        restart, and the newest value is kept)."""
        if isinstance(n_tokens_max, bool) or not isinstance(n_tokens_max, int):
            return
        with self._lock:
            self._get(model).n_tokens_max = max(0, n_tokens_max)

    def models(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def stats(self, model: str) -> UsageStats | None:
        """None when nothing was ever added for ``model``."""
        with self._lock:
            usage = self._models.get(model)
            if usage is None:
                return None
            tokens = sorted(usage.tokens.items)
            busy = sorted(usage.busy.items)
            concurrent = sorted(usage.concurrent.items)
            return UsageStats(
                model=model,
                samples=usage.tokens.seen,
                p50=_quantile(tokens, 0.50),
                p99=_quantile(tokens, 0.99),
                max_tokens=usage.max_tokens,
                n_tokens_max=usage.n_tokens_max,
                busy_polls=usage.busy.seen,
                busy_p99=_quantile(busy, 0.99),
                busy_max=usage.busy_max,
                concurrent_p99=_quantile(concurrent, 0.99),
                concurrent_max=usage.concurrent_max,
                inexact_samples=usage.inexact,
                n_slots=usage.n_slots,
                slot_n_ctx=usage.slot_n_ctx,
                first_ts_ms=usage.first_ts,
                last_ts_ms=usage.last_ts,
            )


# --- recommendation -----------------------------------------------------------------------


def _pad(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def cells_for(ctx: int, np: int, kv_unified: bool, pad: int = PAD) -> tuple[int, int]:
    """(total KV cells, cells per slot) llama.cpp allocates for ``-c ctx -np np``.

    ``src/llama-context.cpp``: ``n_ctx = pad(ctx)``; unified: per slot = n_ctx; otherwise
    per slot = ``pad(n_ctx / np)`` (integer division) and total = per slot * np.
    (``-c 0``, the training context, and fit's choice are not handled: pass the real value.)
    """
    np = max(1, np)
    n_ctx = _pad(max(0, ctx), pad)
    if kv_unified:
        return n_ctx, n_ctx
    per_slot = _pad(n_ctx // np, pad)
    return per_slot * np, per_slot


@dataclass(frozen=True, slots=True)
class Recommendation:
    ctx: int  # the -c to use
    np: int  # the -np to use
    kv_unified: bool  # unchanged from the input
    cells_before: int  # total KV cells of the current -c/-np (llama.cpp's rounding)
    cells_after: int
    per_slot_before: int  # cells one slot may use
    per_slot_after: int
    reason: str  # one sentence

    @property
    def args(self) -> str:
        return f"-c {self.ctx} -np {self.np}" + (" -kvu" if self.kv_unified else "")


def recommend(
    stats: UsageStats,
    *,
    current_ctx: int,
    current_np: int,
    kv_unified: bool,
    headroom: float = 1.25,
    pad: int = PAD,
) -> Recommendation:
    """The smallest ``-c`` / ``-np`` covering what the slots used, by llama.cpp's own rule.

    - per-slot need = ``max(ceil(p99 * headroom), peak)``: p99 tokens per busy slot with
      headroom, and never below the longest sequence actually seen (samples and the
      ``n_tokens_max`` watermark), so no request that happened would have overflowed.
    - ``np = max(1, p99 of slots busy at once)``.
    - split KV: each slot gets ``pad(c / np)``, so ``c = np * pad(need)`` (then -c equals the
      cells allocated; any -c between ``np*pad(need) - np*pad + 1`` and it gives the same).
    - unified KV: one buffer shared by all, so ``c = pad(max(need, ceil(concurrent_p99 *
      headroom), concurrent_max))``; headroom is applied to the sum too, because running out
      of cells in a unified cache fails the request.
    With no exact samples and no watermark, the current setting is returned unchanged.
    """
    if current_np < 1:
        raise ValueError("current_np must be >= 1")
    if headroom < 1.0:
        raise ValueError("headroom must be >= 1.0 (it would recommend below use)")
    if pad < 1:
        raise ValueError("pad must be >= 1")
    cells_before, per_slot_before = cells_for(current_ctx, current_np, kv_unified, pad)
    peak = stats.peak
    if stats.samples == 0 and peak == 0:
        return Recommendation(
            current_ctx, current_np, kv_unified, cells_before, cells_before, per_slot_before,
            per_slot_before,
            f"No busy slot with a token count observed for {stats.model} yet; keeping "
            f"-c {current_ctx} -np {current_np}.",
        )  # fmt: skip
    from_p99 = math.ceil(stats.p99 * headroom)
    need = max(from_p99, peak, 1)
    np = max(1, stats.busy_p99)
    if kv_unified:
        shared = max(math.ceil(stats.concurrent_p99 * headroom), stats.concurrent_max)
        ctx = _pad(max(need, shared), pad)
    else:
        ctx = np * _pad(need, pad)
    cells_after, per_slot_after = cells_for(ctx, np, kv_unified, pad)
    basis = (
        f"p99 {stats.p99} tokens x {headroom:g} = {from_p99}"
        if from_p99 >= peak
        else f"the longest sequence seen ({peak} tokens, above p99 {stats.p99} x {headroom:g})"
    )
    mode = (
        f"unified KV shared by {np} slot(s) (p99 of concurrent use {stats.concurrent_p99})"
        if kv_unified
        else f"{np} slot(s) of {per_slot_after} cells"
    )
    verb = "keeps"
    if cells_after != cells_before:
        verb = "shrinks" if cells_after < cells_before else "grows"
    reason = (
        f"Busy slots of {stats.model} needed {basis} per slot and at most {np} at once (p99), "
        f"so -c {ctx} -np {np} gives {mode}, which {verb} the KV cache from {cells_before} "
        f"to {cells_after} cells."
    )
    return Recommendation(
        ctx, np, kv_unified, cells_before, cells_after, per_slot_before, per_slot_after, reason
    )


# --- polling ------------------------------------------------------------------------------


class _HttpError(Exception):
    pass


@dataclass(slots=True)
class _Target:
    next_at: float = -math.inf  # earliest now_s of the next request
    last_at: float | None = None
    failures: int = 0
    metrics: bool | None = None  # None: not asked yet; False: it did not answer
    last_error: str | None = None


class SlotPoller:
    """Throttled loopback poller of llama-server ``/slots`` (and ``/metrics``).

    ``poll`` makes at most one ``/slots`` request per ``min_interval_s`` per base URL; after a
    failure the wait doubles (``min_interval_s * 2**failures``, at most ``max_backoff_s``).
    ``/metrics`` is asked once after the first good ``/slots``, and then on every poll only if
    it answered with ``llamacpp:n_tokens_max``. Connections go straight to the host (no proxy
    environment is consulted) and redirects are not followed. Samples feed ``self.tracker``.
    """

    def __init__(
        self, min_interval_s: float = 10.0, timeout_s: float = 1.0, *, max_backoff_s: float = 300.0
    ) -> None:
        self.min_interval_s = float(min_interval_s)
        self.timeout_s = float(timeout_s)
        self.max_backoff_s = max(float(max_backoff_s), self.min_interval_s)
        self.tracker = UsageTracker()
        self._targets: dict[str, _Target] = {}
        self._lock = threading.Lock()

    def last_error(self, base_url: str) -> str | None:
        with self._lock:
            target = self._targets.get(base_url.rstrip("/"))
            return target.last_error if target else None

    def _get(self, scheme: str, host: str, port: int, path: str) -> bytes:
        cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
        conn = cls(host, port, timeout=self.timeout_s)
        try:
            conn.request("GET", path, headers={"Accept": "application/json, text/plain"})
            resp = conn.getresponse()
            body = resp.read(MAX_BODY_BYTES + 1)
            if resp.status != 200:
                raise _HttpError(f"HTTP {resp.status} for {path}")
            if len(body) > MAX_BODY_BYTES:
                raise _HttpError(f"{path}: body over {MAX_BODY_BYTES} bytes")
            return body
        finally:
            conn.close()

    def poll(self, base_url: str, model: str, now_s: float) -> list[SlotSample] | None:
        """Fresh slots of the server at ``base_url``, or None (throttled, backing off, or the
        request failed). UsageError, before any traffic, for a non-loopback URL."""
        url = loopback_url(base_url, "llama-server URL")
        scheme, host, port, prefix, query = url.scheme, url.host, url.port, url.path, url.query
        key = base_url.rstrip("/")
        suffix = f"?{query}" if query else ""
        with self._lock:
            target = self._targets.setdefault(key, _Target())
            if target.last_at is not None and now_s < target.last_at:
                target.next_at = now_s  # the caller's clock went back: do not stall forever
            if now_s < target.next_at:
                return None
            target.last_at = now_s
            target.next_at = now_s + self.min_interval_s  # reserve the slot before the I/O
            ask_metrics = target.metrics is not False
        try:
            body = self._get(scheme, host, port, f"{prefix}/slots{suffix}")
            doc = json.loads(body)
            if not isinstance(doc, list | dict):
                raise _HttpError("/slots did not return a JSON array")
        except (OSError, http.client.HTTPException, _HttpError, ValueError) as exc:
            with self._lock:
                target.failures += 1
                wait = min(self.max_backoff_s, self.min_interval_s * 2**target.failures)
                target.next_at = now_s + wait
                target.last_error = f"{type(exc).__name__}: {exc}"
            return None
        slots = parse_slots(doc)
        with self._lock:
            target.failures = 0
            target.last_error = None
        self.tracker.add(model, slots, time.time_ns() // 1_000_000)
        if ask_metrics:
            self._poll_metrics(target, scheme, host, port, f"{prefix}/metrics{suffix}", model)
        return slots

    def _poll_metrics(
        self, target: _Target, scheme: str, host: str, port: int, path: str, model: str
    ) -> None:
        try:
            text = self._get(scheme, host, port, path).decode("utf-8", "replace")
        except _HttpError:  # 501 without --metrics, 404 on other servers: stop asking
            with self._lock:
                target.metrics = False
            return
        except (OSError, http.client.HTTPException):
            return  # a transient failure: ask again next time
        value = parse_n_tokens_max(text)
        with self._lock:
            target.metrics = value is not None
        if value is not None:
            self.tracker.set_high_watermark(model, value)
