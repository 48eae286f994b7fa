"""Render the TUI's screens to SVG with Textual's own screenshot, then PNG with Chromium
(scripts/tui-screens). Real widgets, a real database, the scenario of tests/tui."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "tui"), str(ROOT / "tests" / "fakes")]

from fake_source import T0, discrete_three  # noqa: E402

from monitor.api import BoxRow  # noqa: E402
from monitor.store.database import Store  # noqa: E402
from tui.app import VramscopeApp  # noqa: E402
from tui.source import StoreSource  # noqa: E402

MODELS = {
    name: f"/models/{name}"
    for name in ("qwen3-8b-q8_0.gguf", "qwen3-8b-q4_k.gguf", "qwen3-draft-q8_0.gguf")
}
SCREENS = {
    "main": [],
    "history": ["h", "2", "left"] * 1,
    "help": ["question_mark"],
    "fleet": [],  # `tui --prometheus URL`
}


def database(path: Path) -> Path:
    """An hour of 5 s ticks of the three-server box, the models breathing by +-30 %."""
    (base,) = discrete_three(MODELS, ticks=1)
    store = Store.open(path)
    try:
        for i in range(0, 3600, 5):
            f = 1 + 0.3 * math.sin(i / 600)
            memory = tuple(
                dataclasses.replace(m, vram_bytes=int(m.vram_bytes * f)) if m.vram_bytes else m
                for m in base.memory
            )
            store.write(dataclasses.replace(base, ts_ms=T0 + i * 1000, memory=memory))
    finally:
        store.close()
    return path


class Prometheus:
    """The fleet screen's boxes as monitor.http.prometheus.PrometheusFleet reads them from a
    Prometheus that scrapes four daemons, one of them down (the rows of
    tests/tui/test_snapshots_sizes.py; tests/tui/test_prometheus_fleet.py reads a real one)."""

    url = "http://prometheus.example.internal:9090"

    def rows(self) -> list[BoxRow]:
        gib = 2**30
        two = "GPU0 RTX 4090 19.3G/24.0G, GPU1 RTX 4090 21.7G/24.0G, host RAM 38G/128G"
        alert = ("GPU1 RTX 4090 memory above 85% for 60 s",)
        return [
            BoxRow("http://gpu-box-rack3-node07.example.internal:9835", two, 12,
                   int(2.3 * gib), "GPU1 RTX 4090", alert, None, 5400.0),
            BoxRow("http://strix-halo.lan:9835", "GPU0 Strix Halo 61.0G/96.0G", 3, 35 * gib,
                   "GPU0 Strix Halo"),
            BoxRow("http://10.0.0.12:9835", error="Prometheus target down: connection refused"),
            BoxRow("http://dgx-spark-01.example.internal:9835", "GPU0 GB10 88.0G/119.7G", 5,
                   31 * gib, "GPU0 GB10", (), None, 9e4),
        ]  # fmt: skip


async def shoot(db: Path, size: tuple[int, int], keys: list[str], svg: Path) -> None:
    app = VramscopeApp(StoreSource(db), refresh_s=None)
    if svg.name.startswith("fleet"):
        app = VramscopeApp(
            StoreSource(db), refresh_s=None, prometheus=Prometheus(), token_of=lambda _u: None
        )
    async with app.run_test(size=size) as pilot:
        for _ in range(10):
            await pilot.pause(0.05)
        for key in keys:
            await pilot.press(key)
            for _ in range(6):
                await pilot.pause(0.05)
        app.save_screenshot(str(svg))


def main() -> None:
    tmp, out = Path(sys.argv[1]), Path(sys.argv[2])
    db = database(tmp / "box.db")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    for name, keys in SCREENS.items():
        for w, h in ((80, 24), (200, 50)):
            svg = tmp / f"{name}-{w}x{h}.svg"
            asyncio.run(shoot(db, (w, h), keys, svg))
            if chromium is None:
                shutil.copy(svg, out / svg.name)
                continue
            subprocess.run(
                [
                    chromium,
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--hide-scrollbars",
                    f"--user-data-dir={tmp / 'chromium'}",
                    f"--screenshot={out / svg.with_suffix('.png').name}",
                    f"--window-size={w * 10 + 40},{h * 22 + 70}",
                    svg.as_uri(),
                ],
                check=True,
                capture_output=True,
                timeout=120,
            )
            print(out / svg.with_suffix(".png").name)


if __name__ == "__main__":
    main()
