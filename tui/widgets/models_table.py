"""The models table: one row per inference server, measured vs estimated."""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.cache import LRUCache
from textual.message import Message
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey

from tui.format import cell, middle_cut, safe, signed, size
from tui.source import ModelRow

# what an operator acts on first (an 80-column terminal shows these), then the launch
COLUMNS = ("model", "measured", "estimate", "Δ", "flags", "ctx×slots", "cache", "KV", "engine")
MODEL_MIN = 20
"""The model column's narrowest (80 columns: the rest of the row scrolls)."""


class ModelsTable(DataTable):
    """Rows keyed by pid; refreshed in place so the cursor stays on its model."""

    DEFAULT_CSS = """
    ModelsTable { height: auto; max-height: 12; }
    """

    @dataclass
    class Selected(Message):
        """The highlighted model changed (None: no model)."""

        row: ModelRow | None

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        # Before DataTable's __init__, whose reactives clear the caches.
        self._cells = LRUCache[tuple, list[list[Segment]]](4096)
        """Rendered cells keyed by their value (see ``_render_cell``)."""
        self._lines = LRUCache[tuple, Strip](1024)
        """Rendered lines keyed by their row's values (see ``_render_line``)."""
        self._cell_updates = 0
        """How many of DataTable's update counts are our own ``update_cell`` calls."""
        self._widths: tuple = ()
        """The columns' widths the caches were drawn at."""
        super().__init__(cursor_type="row", zebra_stripes=True, id=id, classes=classes)
        self._rows: dict[str, ModelRow] = {}
        self._shown: tuple | None = None
        """(rows, width, scrollbar) of the last ``show``: the same again changes nothing."""
        self.shows_skipped = 0
        """How many ``show`` calls found the rows and width already on screen."""

    def on_mount(self) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)

    @staticmethod
    def cells(row: ModelRow, model_width: int | None = None) -> tuple[object, ...]:
        """Text from the process (its command line, its model's file name) is Content: a
        str cell would be parsed as markup (``[/]x.gguf`` raises). ``model_width``: the
        model column's width; a longer name is cut in the middle with "…", keeping its end
        (quant, shard), and the breakdown shows it whole."""
        flags = "; ".join(row.flags)
        delta = row.delta_bytes
        model = safe(row.model)
        if model_width is not None:  # the end tells models apart
            model = middle_cut(model, model_width)
        return (
            cell(model),
            size(row.measured_bytes),
            size(row.estimate_bytes),
            signed(delta),
            cell(flags or "-"),
            cell(row.ctx_slots),
            cell(row.cache_types),
            size(row.kv_bytes),
            cell(row.engine),
        )

    def show(self, rows: tuple[ModelRow, ...]) -> None:
        """Show ``rows`` in this order. The same models (a new order, new values) keep
        their rows: changed cells are updated, a new order moves the rows; only a model
        that comes or goes rebuilds the table. The screen shows the selected model's new
        values itself (``selected_row``): no message per frame. The rows already shown, at
        the same width, are left alone (an idle box sends equal rows every refresh: fitting
        the model column and comparing every cell was ~0.8 ms of each refresh,
        bench/bench_tui_refresh.py)."""
        shown = (rows, self.scrollable_content_region.width, self.show_vertical_scrollbar)
        if shown == self._shown:
            self.shows_skipped += 1
            return
        self._shown = shown
        keys = [str(r.pid) for r in rows]
        old = list(self._rows)
        selected = self.selected_key()
        self._rows = dict(zip(keys, rows, strict=True))
        width = self._fit_model_column(rows)
        if sorted(keys) != sorted(old) or (keys != old and not self._reorder(keys)):
            self.clear()
            for key, row in zip(keys, rows, strict=True):
                self.add_row(*self.cells(row, width), key=key)
            if selected in self._rows:
                self.move_cursor(row=keys.index(selected))
            return
        for key, row in zip(keys, rows, strict=True):
            for col, value in zip(COLUMNS, self.cells(row, width), strict=True):
                if self.get_cell(key, col) != value:
                    count = self._update_count
                    self.update_cell(key, col, value)
                    self._cell_updates += self._update_count - count
        if keys != old and selected is not None:
            self.move_cursor(row=keys.index(selected))  # the cursor stays on its model

    def _fit_model_column(self, rows: tuple[ModelRow, ...]) -> int:
        """The model column's width: the longest CURRENT name (so it shrinks when long
        names go; DataTable's auto width only grows), capped so that every other column
        still fits the table's width (at least ``MODEL_MIN``)."""
        pad = 2 * self.cell_padding
        others = [
            max([cell_len(name), *(cell_len(str(c)) for c in cols)]) + pad
            for name, cols in zip(
                COLUMNS[1:], zip(*(self.cells(r)[1:] for r in rows), strict=True), strict=True
            )
        ] if rows else [cell_len(name) + pad for name in COLUMNS[1:]]  # fmt: skip
        region = self.scrollable_content_region.width or 120
        room = region - sum(others) - pad - self._scrollbar_room(len(rows))
        longest = max([cell_len("model"), *(cell_len(safe(r.model)) for r in rows)])
        width = min(longest, max(room, MODEL_MIN))
        column = self.columns.get(ColumnKey("model"))
        if column is not None and (column.auto_width or column.width != width):
            column.auto_width, column.width = False, width
            self._require_update_dimensions = True
            self.refresh()
        return width

    def _scrollbar_room(self, count: int) -> int:
        """The columns the vertical scrollbar that ``count`` rows bring will take (the
        table's height is auto up to its max-height; a shown one is already left out of
        ``scrollable_content_region``)."""
        cap = self.styles.max_height
        if cap is None or not cap.is_cells or self.show_vertical_scrollbar:
            return 0
        visible = int(cap.value) - self.styles.gutter.height - 1  # the header's line
        return self.styles.scrollbar_size_vertical if count > visible else 0

    def on_resize(self) -> None:
        """A new width: the model column fitted again (its names cut or whole)."""
        if self._rows:
            self._shown = None  # fitted again whatever the width reads now
            self.show(tuple(self._rows.values()))

    def _reorder(self, keys: list[str]) -> bool:
        """Put the rows in the order of ``keys`` without rebuilding them (as
        ``DataTable.sort`` does, which sorts by cell values, not by our order); False:
        this DataTable version keeps its rows otherwise."""
        try:
            locations = type(self._row_locations)
            by_value = {k.value: k for k in self.rows}
            self._row_locations = locations({by_value[k]: i for i, k in enumerate(keys)})
        except (AttributeError, KeyError, TypeError):
            return False
        self._update_count += 1
        self.refresh()
        return True

    # DataTable keys its render caches by a count of *all* updates, so one changed cell
    # re-renders every visible cell and line (108 cells, 12 lines per refresh at 4 GPUs x
    # 30 models: most of the table's time). Here cells and lines are also keyed by their
    # values, with a count that leaves out our own ``update_cell`` calls: a refresh
    # re-renders only the cells and lines whose text changed. Any other change (rows
    # added or cleared, column widths, resize, sort) still changes the count and so
    # re-renders everything, as DataTable does; style and option changes clear the caches.

    def _structure(self) -> int:
        return self._update_count - self._cell_updates

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        try:
            if row_index < 0 or column_index < 0:
                raise LookupError  # the header and row labels: DataTable's own cache
            row_key = self._row_locations.get_key(row_index)
            column_key = self._column_locations.get_key(column_index)
            if row_key is None or column_key is None:
                raise LookupError
            key = (
                self._structure(),
                row_key,
                column_key,
                self._data[row_key][column_key],
                row_index,
                column_index,
                base_style,
                width,
                cursor,
                hover,
                self._show_hover_cursor,
                self._pseudo_class_state,
            )
            lines = self._cells.get(key)
        except (AttributeError, LookupError, TypeError):  # another DataTable version
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        if lines is None:
            lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
            self._cells[key] = lines
        return lines

    def _render_line(self, y: int, x1: int, x2: int, base_style: Style) -> Strip:
        try:
            row_key, _ = self._get_offsets(y)
            values = self._data.get(row_key)
            key = (
                self._structure(),
                y,
                x1,
                x2,
                self.size.width,
                self.cursor_coordinate,
                self.hover_coordinate,
                base_style,
                self.cursor_type,
                self._show_hover_cursor,
                self._pseudo_class_state,
                row_key,
                None if values is None else tuple(values.items()),
            )
            self._drop_caches_on_new_widths()
            strip = self._lines.get(key)
        except (AttributeError, LookupError, TypeError):
            return super()._render_line(y, x1, x2, base_style)
        if strip is None:
            strip = super()._render_line(y, x1, x2, base_style)
            self._lines[key] = strip
        return strip

    def _drop_caches_on_new_widths(self) -> None:
        """DataTable sets the columns' widths on idle without counting it as an update, and
        keys its own header cells by that count: a header drawn before the rows came kept
        its narrow cells over the wide rows. New widths clear every cache (rare: a new
        model, a longer value)."""
        widths = tuple((c.width, c.content_width, c.auto_width) for c in self.columns.values())
        if widths != self._widths:
            self._widths = widths
            self._clear_caches()

    def _clear_caches(self) -> None:
        super()._clear_caches()
        self._cells.clear()
        self._lines.clear()

    def notify_style_update(self) -> None:
        self._cells.clear()
        self._lines.clear()
        super().notify_style_update()

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except Exception:
            return None

    def selected_row(self) -> ModelRow | None:
        key = self.selected_key()
        return self._rows.get(key) if key is not None else None

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.Selected(self._rows.get(event.row_key.value or "")))
