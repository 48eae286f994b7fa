"""A device panel's pool figures at the pool's resolution (tui/widgets/device_panel.py,
tui/format.py ``size_of``): a few MiB moving on a GiB pool (the box's other jobs, the UIs'
own RSS) leave the panel as it was; a move the panel prints shows at the next frame."""

from __future__ import annotations

import dataclasses

from fake_source import EVENTS, FakeSource, discrete_three, host
from pilot_helpers import settle, sync

from monitor.units import GIB, MIB
from tui.app import VramscopeApp
from tui.format import size, size_of
from tui.messages import FrameReady
from tui.widgets.device_panel import DevicePanel

SIZE = (120, 40)


def test_a_part_is_printed_in_the_unit_of_its_whole() -> None:
    assert size_of(912 * MIB, int(23.5 * GIB)) == "0.9G"
    assert size_of(40 * MIB, 24 * GIB) == "<0.1G"  # never "0.0G" for something held
    assert size_of(0, 24 * GIB) == "0.0G"
    assert size_of(52 * MIB, 24 * GIB) == "0.1G"
    assert size_of(int(9.64 * GIB), 24 * GIB) == "9.6G"
    assert size_of(912 * MIB, 1000 * MIB) == "912M"  # a whole under 1 GiB: MiB, as size()
    assert size_of(None, 24 * GIB) == size_of(None, None) == size(None)
    assert size_of(912 * MIB, None) == "912M"


def quiet_box(models: dict[str, str], used_bytes: int, ts_s: int = 0):  # noqa: ANN201
    """discrete_three's tick with host RAM ``used_bytes`` of 64 GiB and no process on it
    (so all of it is "others"), ``ts_s`` seconds on."""
    first = discrete_three(models, ticks=1)[0]
    devices = tuple(
        host(64 * GIB, 64 * GIB - used_bytes) if d.device_id == "host" else d for d in first.devices
    )
    memory = tuple(m for m in first.memory if m.device_id != "host")
    return dataclasses.replace(
        first, ts_ms=first.ts_ms + 1000 * ts_s, devices=devices, memory=memory
    )


def panel_text(panel: DevicePanel) -> str:
    return "\n".join(s.text for s in panel.render_lines(panel.region.reset_offset))


@sync
async def test_mib_moves_on_a_gib_pool_redraw_nothing_and_a_printed_move_shows(models) -> None:  # noqa: ANN001
    """Noise: host RAM used (all of it others) moves 900 -> 930 -> 915 MiB on 64 GiB: the
    host panel reads "0.9G/64.0G", "others 0.9G" every time and is not repainted.
    Signal: 1.3 GiB shows at the next frame."""
    snaps = [quiet_box(models, (900 + 30 * (i % 2) - 15 * (i == 2)) * MIB, i) for i in range(3)]
    snaps.append(quiet_box(models, int(1.3 * GIB), 3))
    source = FakeSource(snaps, EVENTS)
    app = VramscopeApp(source, refresh_s=None)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        panel = [p for p in app.screen.query(DevicePanel) if p.data.picture.device_id == "host"][0]
        before = panel_text(panel)
        assert "0.9G/64.0G" in before and "others 0.9G" in before, before
        repaints: list[int] = []
        original = panel.refresh
        panel.refresh = lambda *a, **k: repaints.append(1) or original(*a, **k)  # type: ignore[method-assign]
        for _ in range(2):
            app.screen.post_message(FrameReady(source.latest()))
            await settle(pilot)
            assert panel_text(panel) == before
        assert source.index == 3 and repaints == []
        app.screen.post_message(FrameReady(source.latest()))
        await settle(pilot)
        after = panel_text(panel)
        assert "1.3G/64.0G" in after and "others 1.3G" in after, after
        assert repaints
