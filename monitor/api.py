"""The one face of monitor/ the TUI sees (like nvitop's ``api``): every function and type
the TUI's sources, screens and widgets use, by name, whichever layer of monitor/ it lives
in (docs/architecture.md). ``tui/`` imports ``monitor`` only through here, and the shared
vocabulary (``monitor.errors``, ``monitor.units``, ``monitor.textsafe``): the
``[tool.importlinter]`` contract "tui talks to monitor through monitor.api" checks it.

Each name is imported when first asked for (PEP 562 ``__getattr__``), not when this
module is: ``import tui.source`` must load neither NVML nor the estimator stack (the
sampler and the GGUF reader load in the first poll worker; tests/tui/test_layering.py).
The imports under ``TYPE_CHECKING`` are the same table for mypy and for import-linter
(which counts them), so the layers contract sees every arrow this facade draws."""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same table as _WHERE (tests/test_import_hygiene.py)
    from monitor.analysis.assess import Assessment as Assessment
    from monitor.analysis.assess import Launch as Launch
    from monitor.analysis.assess import assess as assess
    from monitor.analysis.assess import assessments_from_document as assessments_from_document
    from monitor.analysis.assess import judged as judged
    from monitor.analysis.assess import launch_key as launch_key
    from monitor.analysis.assess_cache import AssessCache as AssessCache
    from monitor.analysis.diagnose import Diagnosis as Diagnosis
    from monitor.analysis.diagnose import kv_over_p99 as kv_over_p99
    from monitor.analysis.diagnose import times as times
    from monitor.analysis.fleet import BoxRow as BoxRow
    from monitor.analysis.fleet import active_alerts as active_alerts
    from monitor.analysis.growth import Evidence as Evidence
    from monitor.analysis.growth import evidence_from_log as evidence_from_log
    from monitor.analysis.measured import Measured as Measured
    from monitor.analysis.measured import measure as measure
    from monitor.analysis.picture import DEFAULT_MARGIN_BYTES as DEFAULT_MARGIN_BYTES
    from monitor.analysis.picture import DevicePicture as DevicePicture
    from monitor.analysis.picture import Picture as Picture
    from monitor.analysis.picture import picture_from_snapshot as picture_from_snapshot
    from monitor.analysis.picture import servers_cgroup as servers_cgroup
    from monitor.analysis.predict import answer as answer
    from monitor.analysis.predict_request import PredictRequest as PredictRequest
    from monitor.analysis.predict_request import PredictResult as PredictResult
    from monitor.analysis.predict_verdicts import Prediction as Prediction
    from monitor.analysis.predict_verdicts import need_by_device as need_by_device
    from monitor.analysis.slot_usage import usage_p99 as usage_p99
    from monitor.analysis.state import BoxState as BoxState
    from monitor.analysis.state import DatabaseMoment as DatabaseMoment
    from monitor.analysis.state import Live as Live
    from monitor.analysis.state import Remote as Remote
    from monitor.analysis.state import box_state as box_state
    from monitor.analysis.stored import assessments_at as assessments_at
    from monitor.daemon.lock import lock_holder as lock_holder
    from monitor.daemon.sampler import Sampler as Sampler
    from monitor.estimate import MemoryEstimate as MemoryEstimate
    from monitor.estimate import features_of as features_of
    from monitor.estimate.certainty import model_specific as model_specific
    from monitor.estimate.model import DeviceInfo as DeviceInfo
    from monitor.estimate.model import devices_from_samples as devices_from_samples
    from monitor.exits import classify_legacy as classify_legacy
    from monitor.gguf.reader import read_header as read_header
    from monitor.http.client import DaemonClient as DaemonClient
    from monitor.http.client import RemoteError as RemoteError
    from monitor.http.client import events_doc_problem as events_doc_problem
    from monitor.http.prometheus import PrometheusError as PrometheusError
    from monitor.http.prometheus import PrometheusFleet as PrometheusFleet
    from monitor.http.tokens import fleet_token as fleet_token
    from monitor.http.tokens import tokens_for as tokens_for
    from monitor.integrations.llamaswap import load_config as load_llamaswap_config
    from monitor.logs.server_cache import ServerLogFollower as ServerLogFollower
    from monitor.logs.server_cache import log_file_of as log_file_of
    from monitor.logs.server_cache import log_source as log_source
    from monitor.report.events import grouped as grouped_events
    from monitor.servers import parse_command as parse_command
    from monitor.servers import read_llama_env as read_llama_env
    from monitor.servers.capabilities import ESTIMATED as ESTIMATED
    from monitor.servers.capabilities import LLAMACPP_ESTIMATED as LLAMACPP_ESTIMATED
    from monitor.servers.recognise import helper_parents as helper_parents
    from monitor.servers.router import Router as Router
    from monitor.servers.router import process_links as process_links
    from monitor.servers.router import snapshot_links as snapshot_links
    from monitor.store.database import StoreError as StoreError
    from monitor.store.database import open_readonly as open_readonly
    from monitor.store.estimates import has_table as has_estimates_table
    from monitor.store.moment import check_moment as check_moment
    from monitor.store.moment import parse_time as parse_time
    from monitor.store.reads import device_peaks as device_peaks
    from monitor.store.reads import events_between as events_between
    from monitor.store.reads import last_tick_ms as last_tick_ms
    from monitor.store.reads import latest_tick as latest_tick
    from monitor.store.reads import reading as reading
    from monitor.store.reads import sample_span as sample_span
    from monitor.store.reads import server_peaks as server_peaks
    from monitor.store.reads import ticks_between as ticks_between

_WHERE: dict[str, tuple[str, str]] = {
    "assess": ("monitor.analysis.assess", "assess"),
    "Assessment": ("monitor.analysis.assess", "Assessment"),
    "assessments_from_document": ("monitor.analysis.assess", "assessments_from_document"),
    "judged": ("monitor.analysis.assess", "judged"),
    "Launch": ("monitor.analysis.assess", "Launch"),
    "launch_key": ("monitor.analysis.assess", "launch_key"),
    "AssessCache": ("monitor.analysis.assess_cache", "AssessCache"),
    "Diagnosis": ("monitor.analysis.diagnose", "Diagnosis"),
    "kv_over_p99": ("monitor.analysis.diagnose", "kv_over_p99"),
    "times": ("monitor.analysis.diagnose", "times"),
    "active_alerts": ("monitor.analysis.fleet", "active_alerts"),
    "BoxRow": ("monitor.analysis.fleet", "BoxRow"),
    "Evidence": ("monitor.analysis.growth", "Evidence"),
    "evidence_from_log": ("monitor.analysis.growth", "evidence_from_log"),
    "measure": ("monitor.analysis.measured", "measure"),
    "Measured": ("monitor.analysis.measured", "Measured"),
    "DEFAULT_MARGIN_BYTES": ("monitor.analysis.picture", "DEFAULT_MARGIN_BYTES"),
    "DevicePicture": ("monitor.analysis.picture", "DevicePicture"),
    "Picture": ("monitor.analysis.picture", "Picture"),
    "picture_from_snapshot": ("monitor.analysis.picture", "picture_from_snapshot"),
    "servers_cgroup": ("monitor.analysis.picture", "servers_cgroup"),
    "answer": ("monitor.analysis.predict", "answer"),
    "need_by_device": ("monitor.analysis.predict_verdicts", "need_by_device"),
    "Prediction": ("monitor.analysis.predict_verdicts", "Prediction"),
    "PredictRequest": ("monitor.analysis.predict_request", "PredictRequest"),
    "PredictResult": ("monitor.analysis.predict_request", "PredictResult"),
    "usage_p99": ("monitor.analysis.slot_usage", "usage_p99"),
    "box_state": ("monitor.analysis.state", "box_state"),
    "BoxState": ("monitor.analysis.state", "BoxState"),
    "DatabaseMoment": ("monitor.analysis.state", "DatabaseMoment"),
    "Live": ("monitor.analysis.state", "Live"),
    "Remote": ("monitor.analysis.state", "Remote"),
    "assessments_at": ("monitor.analysis.stored", "assessments_at"),
    "lock_holder": ("monitor.daemon.lock", "lock_holder"),
    "Sampler": ("monitor.daemon.sampler", "Sampler"),
    "parse_command": ("monitor.servers", "parse_command"),
    "read_llama_env": ("monitor.servers", "read_llama_env"),
    "ESTIMATED": ("monitor.servers.capabilities", "ESTIMATED"),
    "LLAMACPP_ESTIMATED": ("monitor.servers.capabilities", "LLAMACPP_ESTIMATED"),
    "helper_parents": ("monitor.servers.recognise", "helper_parents"),
    "process_links": ("monitor.servers.router", "process_links"),
    "snapshot_links": ("monitor.servers.router", "snapshot_links"),
    "Router": ("monitor.servers.router", "Router"),
    "features_of": ("monitor.estimate", "features_of"),
    "MemoryEstimate": ("monitor.estimate", "MemoryEstimate"),
    "model_specific": ("monitor.estimate.certainty", "model_specific"),
    "DeviceInfo": ("monitor.estimate.model", "DeviceInfo"),
    "devices_from_samples": ("monitor.estimate.model", "devices_from_samples"),
    "classify_legacy": ("monitor.exits", "classify_legacy"),
    "read_header": ("monitor.gguf.reader", "read_header"),
    "DaemonClient": ("monitor.http.client", "DaemonClient"),
    "events_doc_problem": ("monitor.http.client", "events_doc_problem"),
    "RemoteError": ("monitor.http.client", "RemoteError"),
    "PrometheusError": ("monitor.http.prometheus", "PrometheusError"),
    "PrometheusFleet": ("monitor.http.prometheus", "PrometheusFleet"),
    "fleet_token": ("monitor.http.tokens", "fleet_token"),
    "tokens_for": ("monitor.http.tokens", "tokens_for"),
    "load_llamaswap_config": ("monitor.integrations.llamaswap", "load_config"),
    "log_file_of": ("monitor.logs.server_cache", "log_file_of"),
    "log_source": ("monitor.logs.server_cache", "log_source"),
    "grouped_events": ("monitor.report.events", "grouped"),
    "ServerLogFollower": ("monitor.logs.server_cache", "ServerLogFollower"),
    "open_readonly": ("monitor.store.database", "open_readonly"),
    "StoreError": ("monitor.store.database", "StoreError"),
    "has_estimates_table": ("monitor.store.estimates", "has_table"),
    "check_moment": ("monitor.store.moment", "check_moment"),
    "parse_time": ("monitor.store.moment", "parse_time"),
    "device_peaks": ("monitor.store.reads", "device_peaks"),
    "events_between": ("monitor.store.reads", "events_between"),
    "last_tick_ms": ("monitor.store.reads", "last_tick_ms"),
    "latest_tick": ("monitor.store.reads", "latest_tick"),
    "reading": ("monitor.store.reads", "reading"),
    "sample_span": ("monitor.store.reads", "sample_span"),
    "server_peaks": ("monitor.store.reads", "server_peaks"),
    "ticks_between": ("monitor.store.reads", "ticks_between"),
}
"""Each name of the facade: (the module that defines it, its name there)."""

__all__ = [
    "AssessCache",
    "Assessment",
    "BoxRow",
    "BoxState",
    "DEFAULT_MARGIN_BYTES",
    "DaemonClient",
    "DatabaseMoment",
    "DeviceInfo",
    "DevicePicture",
    "Diagnosis",
    "ESTIMATED",
    "Evidence",
    "LLAMACPP_ESTIMATED",
    "Launch",
    "Live",
    "Measured",
    "MemoryEstimate",
    "Picture",
    "PredictRequest",
    "PredictResult",
    "Prediction",
    "PrometheusError",
    "PrometheusFleet",
    "Remote",
    "RemoteError",
    "Router",
    "Sampler",
    "ServerLogFollower",
    "StoreError",
    "active_alerts",
    "answer",
    "assess",
    "assessments_at",
    "assessments_from_document",
    "box_state",
    "check_moment",
    "classify_legacy",
    "device_peaks",
    "devices_from_samples",
    "events_between",
    "events_doc_problem",
    "evidence_from_log",
    "features_of",
    "fleet_token",
    "grouped_events",
    "has_estimates_table",
    "helper_parents",
    "judged",
    "kv_over_p99",
    "last_tick_ms",
    "latest_tick",
    "launch_key",
    "load_llamaswap_config",
    "lock_holder",
    "log_file_of",
    "log_source",
    "measure",
    "model_specific",
    "need_by_device",
    "open_readonly",
    "parse_command",
    "parse_time",
    "picture_from_snapshot",
    "process_links",
    "snapshot_links",
    "read_header",
    "read_llama_env",
    "reading",
    "sample_span",
    "server_peaks",
    "servers_cgroup",
    "ticks_between",
    "times",
    "tokens_for",
    "usage_p99",
]


def __getattr__(name: str) -> Any:
    """The name from the module that defines it, looked up there on every use (not
    copied here, so the facade never holds a stale object). A module already imported is
    taken from ``sys.modules`` (``import_module`` costs ~4 us a call through the import
    machinery; the TUI's live frame made ~38 such lookups: issue 32 item 3); one still
    being imported by another thread goes through ``import_module``, which waits for it."""
    try:
        module, attribute = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'monitor.api' has no attribute {name!r}") from None
    found = sys.modules.get(module)
    if found is None or getattr(getattr(found, "__spec__", None), "_initializing", False):
        found = importlib.import_module(module)
    return getattr(found, attribute)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
