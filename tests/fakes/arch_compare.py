"""Line up what llama.cpp logged with what ``estimate`` says, per context and buffer kind.

Used by the default-suite check of the real-architecture fixtures
(tests/monitor/estimate/test_architectures.py) and by tests/realworld/arch_table.py, which
prints the table of the report. A fixture (tests/fixtures/llamalog/arch/<id>.json) holds the
llama.cpp commit, the command line with ``{model}`` / ``{draft}`` for the paths, and the log lines.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from arch_models import model_for

MIB = 1024 * 1024
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llamalog" / "arch"
PREFIX = {"target": "", "draft": "draft_", "mtp": "mtp_"}
# per kind: the log's buffer kind (None: the KV lines) and the estimate's component names
KINDS = {
    "weights": ("model", ("weights",)),
    "kv": (None, ("kv", "kv_swa")),
    "rs": ("RS", ("rs",)),
    "compute": ("compute", ("compute",)),
    "output": ("output", ("output",)),
}


@dataclass(frozen=True)
class Row:
    context: str  # target | draft | mtp
    kind: str  # weights | kv | rs | compute | output
    logged_mib: float
    estimate_mib: float

    @property
    def diff(self) -> float:
        """Relative difference of the estimate (0.05 = 5 % too high)."""
        if not self.logged_mib:
            return 0.0 if not self.estimate_mib else float("inf")
        return self.estimate_mib / self.logged_mib - 1


def fixture_paths() -> list[Path]:
    return sorted(FIXTURES.glob("*.json"))


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def argv_for(doc: dict, models_dir: Path) -> list[str]:
    """The fixture's command line with the models written (sparse) into ``models_dir``."""
    paths = {"{model}": str(model_for(doc["model"]).write(models_dir))}
    if doc.get("draft"):
        paths["{draft}"] = str(model_for(doc["draft"]).write(models_dir))
    return [paths.get(a, a) for a in doc["argv"]]


def rows(doc: dict, est, report) -> list[Row]:
    """One row per (context, kind) that llama.cpp logged or the estimate has."""
    out = []
    for context, prefix in PREFIX.items():
        for kind, (log_kind, names) in KINDS.items():
            if log_kind is None:
                logged = sum(
                    k.size_mib for k in report.kv if k.context == context and k.cache != "rs"
                )
            else:
                logged = report.total_mib(kind=log_kind, context=context)
            estimated = sum(est.total_bytes(prefix + n) for n in names) / MIB
            if logged or estimated:
                out.append(Row(context, kind, round(logged, 2), round(estimated, 2)))
    return out
