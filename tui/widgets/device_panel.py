"""One device: a stacked memory bar with a segment per model, a marker per model's
estimate, others, reserved, free and the safety margin. Unified pools add a line with the
VRAM carve-out, GTT and host RAM parts (never summed away).

A model's segment is the part of its memory this device holds: VRAM+GTT on a GPU, anonymous
+ shared memory (``anon+shm``) on the host bar (its mmap'd weights are page cache, counted
as available). The legend names that part and, where it differs, the model's measured
total (monitor/analysis/measured.py, the figure the models table shows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.segment import Segment as RichSegment
from rich.style import Style as RichStyle
from textual.cache import LRUCache
from textual.content import Content, Span
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

from collectors.base import DeviceSample
from monitor.api import DevicePicture, Picture
from monitor.device_names import device_labels, display_order
from tui.format import middle_cut, safe, size, size_of

if TYPE_CHECKING:
    from tui.source import Frame

PALETTE = (
    "$primary",
    "$accent",
    "$secondary",
    "$success",
    "$primary-lighten-2",
    "$accent-lighten-2",
    "$secondary-lighten-2",
    "$success-lighten-2",
)
OTHERS, RESERVED, FREE, MARGIN = "$foreground-muted", "$text-disabled", "$success-muted", "$warning"
PROJECTED, OVER = "$warning", "$error"

_VERDICT_STYLE = {"oom": "$error", "tight": "$warning", "thrash": "$warning"}


@dataclass(frozen=True, slots=True)
class Segment:
    label: str
    bytes: int | None  # this device's part; None: the driver lists it without a size
    estimate_bytes: int | None = None
    part: str = ""  # which part ``bytes`` is: "GPU" (VRAM+GTT) or "anon+shm" (host RAM)
    measured_bytes: int | None = None  # the model's measured total; None: unknown
    has_measured: bool = False  # False: no measured total to show (not a model)


def sensor_bits(sample: DeviceSample | None) -> list[str]:
    """``["61°C", "142W", "87% busy", "mem 8501MHz"]``: temperature, power, utilisation and
    memory clock where the driver gives them (NVML, amdsmi, hwmon, pp_dpm_mclk), most
    telling first; nothing for a figure it does not give."""
    if sample is None:
        return []
    bits = []
    if sample.temp_c is not None:
        bits.append(f"{sample.temp_c:.0f}°C")
    if sample.power_w is not None:
        bits.append(f"{sample.power_w:.0f}W")
    if sample.util_pct is not None:
        bits.append(f"{sample.util_pct:.0f}% busy")
    if sample.mem_clock_mhz is not None:
        bits.append(f"mem {sample.mem_clock_mhz:.0f}MHz")
    return bits


def sensor_text(sample: DeviceSample | None) -> str:
    """``61°C 142W 87% busy mem 8501MHz`` (see :func:`sensor_bits`)."""
    return " ".join(sensor_bits(sample))


def named_devices(picture: Picture) -> list[tuple[DevicePicture, str]]:
    """The picture's devices in display order (GPUs by id, host RAM last), each with its
    short name (GPU0 RTX 4090, GPU1 ..., host RAM): the panels and the fleet rows agree."""
    labels = device_labels((p.device_id, p.name) for p in picture.devices.values())
    return [(picture.devices[d], labels[d]) for d in display_order(labels)]


def part_of(memory_kind: str) -> str:
    """The part of a process's memory a device's bar shows (monitor/analysis/picture.py)."""
    return "anon+shm" if memory_kind == "host" else "GPU"


@dataclass(frozen=True, slots=True)
class PanelData:
    picture: DevicePicture
    sample: DeviceSample | None
    models: tuple[Segment, ...] = ()
    host_available_bytes: int | None = None  # unified pools only: their last line shows it
    projected_bytes: int | None = None
    projected_label: str = "projected"
    verdict: str | None = None
    label: str = ""  # "GPU0 RTX 4090" (tui/format.py short_device_name); "": the id
    show_id: bool = False  # the long device id beside the label (key i)
    oom_in_s: float | None = None  # filling steadily: seconds to its limit at that rate


class DevicePanel(Widget):
    """A device's memory map; redraws when ``data`` changes."""

    DEFAULT_CSS = """
    DevicePanel {
        height: auto;
        padding: 0 1;
        border-left: tall $primary-muted;
        margin-bottom: 1;
    }
    .-narrow DevicePanel { margin-bottom: 0; }
    DevicePanel.-oom { border-left: tall $error; }
    """

    data: reactive[PanelData | None] = reactive(None, repaint=False)
    """What to draw; None draws nothing (a new height only when the line count changes,
    a repaint only when the drawn text or its styles change: new samples often move
    bytes that the panel rounds away)."""

    def __init__(
        self, data: PanelData | None = None, *, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.set_reactive(DevicePanel.data, data)
        self._drawn: tuple[PanelData | None, int, Content] | None = None
        """(data, width, content) of the last ``render``."""
        self._split: tuple[Content, list[Content]] | None = None
        """The last ``render``'s content and its lines."""
        self._strips = LRUCache[tuple, Strip](64)
        """Rendered lines keyed by their text, styles and width (see ``render_line``)."""

    def watch_data(self, old: PanelData | None, data: PanelData | None) -> None:
        self.set_class(bool(data and data.verdict == "oom"), "-oom")
        if self._lines_for(old) != self._lines_for(data):
            self.refresh(layout=True)
            return
        drawn = self._drawn
        if drawn is None or drawn[1] != self._width():
            self.refresh()
            return
        shown = self._split
        content = self._content(data, drawn[1])
        if content.plain == drawn[2].plain and content.spans == drawn[2].spans:
            self._split = shown  # the lines of what stays on screen
            return
        self._drawn = (data, drawn[1], content)  # render() takes it as it is
        new = self._split
        if shown is None or shown[0] is not drawn[2] or new is None or len(new[1]) != len(shown[1]):
            self.refresh()
            return
        # only the lines whose text or styles changed (render_line draws line by line)
        self.refresh(
            *(
                Region(0, y, drawn[1], 1)
                for y, (a, b) in enumerate(zip(shown[1], new[1], strict=True))
                if a.plain != b.plain or a.spans != b.spans
            )
        )

    @property
    def drawn_width(self) -> int | None:
        """The width the panel's text was last built at; None before its first render."""
        drawn = self._drawn
        return None if drawn is None else drawn[1]

    @staticmethod
    def text_of(data: PanelData, width: int) -> tuple[tuple[str, tuple[object, ...]], ...]:
        """Each line's text and styles as ``render`` draws ``data`` at ``width`` (pure:
        the poll thread compares a new frame's panels with the drawn ones off the event
        loop, tui/screens/main.py)."""
        return tuple((line.plain, tuple(line.spans)) for line in DevicePanel._lines(data, width))

    @staticmethod
    def _lines_for(data: PanelData | None) -> int:
        if data is None:
            return 0
        return 5 if data.picture.memory_kind == "unified" else 4

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._lines_for(self.data)

    def _width(self) -> int:
        return max(10, self.content_region.width or self.size.width or 60)

    def _content(self, data: PanelData | None, width: int) -> Content:
        if data is None:
            return Content("")
        lines = self._lines(data, width)
        content = Content("\n").join(lines)
        self._split = (content, lines)
        return content

    def render(self) -> Content:
        data, width, drawn = self.data, self._width(), self._drawn
        if drawn is not None and drawn[0] is data and drawn[1] == width:
            return drawn[2]
        content = self._content(data, width)
        self._drawn = (data, width, content)
        return content

    def render_line(self, y: int) -> Strip:
        """Line ``y`` of ``render()``, rendered on its own and kept by its text and styles
        (Textual renders every line of a widget when one changes: the host RAM panel's
        figures move every second, its bar and markers seldom)."""
        if self.text_selection is not None:  # selection offsets span the lines
            return super().render_line(y)
        self._dirty_regions.clear()  # what Widget.render_line's full render would clear
        width, style = self.size.width, self.visual_style
        content = self.render()
        if self._split is None or self._split[0] is not content:
            self._split = (content, content.split("\n", allow_blank=True))
        lines = self._split[1]
        if y >= len(lines):
            return Strip.blank(width, style.rich_style)
        line = lines[y]
        key = (line.plain, tuple(line.spans), width, style, y)
        strip = self._strips.get(key)
        if strip is None:
            strips = Visual.to_strips(self, line, width, 1, style)
            strip = on_line(strips[0], y) if strips else Strip.blank(width, style.rich_style)
            self._strips[key] = strip
        return strip

    def notify_style_update(self) -> None:
        self._strips.clear()  # a new theme: the same text in new colours
        super().notify_style_update()

    # ------------------------------------------------------------------ drawing

    @staticmethod
    def _lines(data: PanelData, width: int) -> list[Content]:
        pic = data.picture
        used = pic.used_bytes
        cap = pic.capacity_bytes or ((used or 0) + (pic.available_bytes or 0)) or 1
        title = data.label or f"{safe(pic.device_id)}  {safe(pic.name or '')}".rstrip()
        if data.label and data.show_id:
            title += f" ({safe(pic.device_id)})"
        kind = pic.memory_kind
        used_text = f"{size_of(used, pic.capacity_bytes)}/{size(pic.capacity_bytes)}"
        room = pic.headroom_bytes
        room_text = f"room {size(room)}" + (f" ({safe(pic.binding)})" if pic.binding else "")
        # one Content per line (assemble): each ``+`` copies the text and strips control
        # codes from all of it again, a large part of drawing a panel
        parts = [piece(title, "bold"), " ", piece(kind, "$text-muted"), " ", f"{used_text} · "]
        parts.append(piece(room_text, "$error") if room is not None and room < 0 else room_text)
        head_plain = f"{title} {kind} {used_text} · {room_text}"
        verdict: list[str | tuple[str, str]] = []
        if data.verdict:
            style = _VERDICT_STYLE.get(data.verdict, "$success")
            verdict = ["  ", piece(data.verdict.upper(), f"bold {style}")]
        verdict_plain = f"  {data.verdict.upper()}" if data.verdict else ""
        if data.oom_in_s is not None:
            ahead = f"OOM in ~{max(1, round(data.oom_in_s / 60))} min"
            verdict += ["  ", piece(ahead, "bold $warning")]
            verdict_plain += f"  {ahead}"
        bits = sensor_bits(data.sample)
        while bits and cell_len(head_plain) + 3 + cell_len(" ".join(bits) + verdict_plain) > width:
            bits.pop()  # the least telling figure first (the memory clock on 80 columns)
        if bits:
            parts += [" · ", piece(" ".join(bits), "$text-muted")]
        head = Content.assemble(*parts, *verdict)
        if cell_len(head.plain) > width:
            head = head[: width - 1] + Content("…")
        # segments: (bytes, style, char)
        segs: list[tuple[int, str, str]] = []
        for i, m in enumerate(data.models):
            segs.append((m.bytes or 0, PALETTE[i % len(PALETTE)], "█"))
        if pic.others_bytes:
            segs.append((pic.others_bytes, OTHERS, "▓"))
        if pic.reserved_bytes:
            segs.append((pic.reserved_bytes, RESERVED, "▒"))
        taken = sum(s[0] for s in segs)
        if data.projected_bytes:
            segs.append((data.projected_bytes, PROJECTED, "▞"))
        free = max(0, cap - taken - (data.projected_bytes or 0))
        margin = min(pic.margin_bytes, free)
        segs.append((free - margin, FREE, "░"))
        segs.append((margin, MARGIN, "╳"))
        text: list[str] = []
        spans: list[Span] = []
        cum, col = 0, 0
        for value, style, char in segs:
            cum += max(0, value)
            end = min(width, round(cum / cap * width))
            if end > col:
                text.append(char * (end - col))
                spans.append(Span(col, end, style))
                col = end
        if col < width:
            text.append("░" * (width - col))
            spans.append(Span(col, width, FREE))
        over = taken + (data.projected_bytes or 0) - cap
        bar = Content("".join(text), spans)
        if over > 0:
            bar = bar[: width - 1] + Content.styled("!", f"bold {OVER}")
        # estimate markers, above the bar: where each model's segment would end
        marks = [" "] * width
        mark_spans: list[Span] = []
        start = 0
        for i, m in enumerate(data.models):
            if m.estimate_bytes is not None:
                pos = min(width - 1, max(0, round((start + m.estimate_bytes) / cap * width) - 1))
                marks[pos] = "▼"
                mark_spans.append(Span(pos, pos + 1, PALETTE[i % len(PALETTE)]))
            start += m.bytes or 0
        marker = Content("".join(marks), mark_spans)
        legend = DevicePanel._legend(data, free, margin, width)
        lines = [head, marker, bar, legend]
        if pic.memory_kind == "unified":
            lines.append(DevicePanel._unified(data))
        return lines

    @staticmethod
    def _legend(data: PanelData, free: int, margin: int, width: int) -> Content:
        pic = data.picture
        parts: list[tuple[tuple[str, str], str]] = []  # (mark and its colour, text)
        for i, m in enumerate(data.models):
            est = f" est {size(m.estimate_bytes)}" if m.estimate_bytes is not None else ""
            held = f"{m.part} {size(m.bytes)}" if m.part else size(m.bytes)
            if m.has_measured and (m.measured_bytes != m.bytes or m.bytes is None):
                held += f" (measured {size(m.measured_bytes)})"
            figures = f" {held}{est}"
            label = safe(m.label)
            if i == 0 and cell_len(label) + cell_len(figures) + 2 > width:  # cut the name
                label = middle_cut(label, max(width - 4 - cell_len(figures), 8))  # and " …"
            parts.append((("■ ", PALETTE[i % len(PALETTE)]), label + figures))
        if pic.others_bytes:
            # what the rest of the box holds: a part of the pool that moves with everything
            # on it, in the pool's unit (tui/format.py ``size_of``)
            others = size_of(pic.others_bytes, pic.capacity_bytes)
            parts.append((("▓ ", OTHERS), f"others {others}"))
        if pic.reserved_bytes:
            parts.append((("▒ ", RESERVED), f"reserved {size(pic.reserved_bytes)}"))
        if data.projected_bytes:
            parts.append(
                (("▞ ", PROJECTED), f"{data.projected_label} {size(data.projected_bytes)}")
            )
        parts.append((("░ ", FREE), f"free {size(free - margin)}"))  # MiB count when nearly full
        parts.append((("╳ ", MARGIN), f"margin {size(pic.margin_bytes)}"))
        # as many parts as fit, then " …"; assembled once (see the head line)
        pieces: list[str | tuple[str, str]] = []
        length = 0
        for mark, text in parts:
            n = cell_len(mark[0]) + cell_len(text)
            if not pieces and n > width:  # still too long: cut whole (the figures too)
                text = text[: max(width - cell_len(mark[0]) - 1, 1)] + "…"
                n = cell_len(mark[0]) + cell_len(text)
            if pieces and length + 2 + n > width:
                if length + 2 <= width:
                    pieces.append(" …")
                break
            if pieces:
                pieces.append("  ")
                length += 2
            pieces += [mark, text]
            length += n
        return Content.assemble(*pieces)

    @staticmethod
    def _unified(data: PanelData) -> Content:
        s = data.sample
        bits = []
        if s is not None and s.vram_total_bytes is not None:
            bits.append(f"VRAM carve-out {size(s.vram_used_bytes)}/{size(s.vram_total_bytes)}")
        if s is not None and s.gtt_total_bytes is not None:
            ceiling = s.gtt_ceiling_bytes or s.gtt_total_bytes
            bits.append(f"GTT {size(s.gtt_used_bytes)}/{size(ceiling)}")
        if data.host_available_bytes is not None:
            bits.append(f"host RAM available {size(data.host_available_bytes)}")
        if not bits:
            bits.append("one pool shared with the host (MemAvailable binds)")
        return Content.styled(" · ".join(bits), "$text-muted")


def piece(text: str, style: str) -> str | tuple[str, str]:
    """``text`` in ``style`` for ``Content.assemble`` (no span for no text, as
    ``Content.styled``)."""
    return (text, style) if text and style else text


def on_line(strip: Strip, y: int) -> Strip:
    """``strip``, rendered as a content's only line, as line ``y`` of it: the offsets in
    its styles (where a mouse selection starts) name line ``y``."""
    if not y:
        return strip
    segments = []
    for text, style, control in strip:
        meta = style.meta if style is not None else {}
        if style is not None and "offset" in meta:
            style = style + RichStyle.from_meta({"offset": (meta["offset"][0], y)})
        segments.append(RichSegment(text, style, control))
    return Strip(segments, strip.cell_length)


def panels_from_frame(
    frame: Frame,
    projected: dict[str, int] | None = None,
    verdicts: dict[str, str] | None = None,
    projected_label: str = "projected",
    show_ids: bool = False,
) -> list[PanelData]:
    """One PanelData per device of a Frame (host RAM last), models labelled by file name,
    devices by a short name (GPU0 RTX 4090) and, with ``show_ids``, their long id."""
    rows = {r.pid: r for r in frame.models}
    samples = {d.device_id: d for d in frame.snapshot.devices}
    ahead = {f.pool: f.seconds for f in frame.snapshot.time_to_oom}
    host = samples.get("host")
    host_available = host.available_bytes if host is not None else None
    out = []
    for pic, device_label in named_devices(frame.picture):
        segs = []
        part = part_of(pic.memory_kind)
        for use in pic.processes:
            row = rows.get(use.pid)
            label = row.model if row is not None else use.name
            est = row.need_by_device.get(pic.device_id) if row is not None else None
            segs.append(
                Segment(
                    label,
                    use.bytes,
                    est,
                    part,
                    row.measured_bytes if row is not None else None,
                    row is not None,
                )
            )
        listed = {use.pid for use in pic.processes}
        for row in frame.models:  # on this GPU without a size: shown as unknown, never 0
            if (
                row.pid not in listed
                and row.held is not None
                and pic.device_id in row.held.unknown_device_ids
            ):
                segs.append(
                    Segment(
                        row.model,
                        None,
                        row.need_by_device.get(pic.device_id),
                        part,
                        row.measured_bytes,
                        True,
                    )
                )
        out.append(
            PanelData(
                pic,
                samples.get(pic.device_id),
                tuple(segs),
                # only where it is drawn: a dedicated GPU's data stays equal while host RAM
                # moves, so its panel is left alone (no watcher, no text to compare)
                host_available if pic.memory_kind == "unified" else None,
                (projected or {}).get(pic.device_id),
                projected_label,
                (verdicts or {}).get(pic.device_id),
                device_label,
                show_ids,
                ahead.get(pic.device_id),
            )
        )
    return out
