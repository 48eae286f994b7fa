"""The models table: one row per inference server, measured vs estimated."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message
from textual.widgets import DataTable

from tui.format import signed, size
from tui.source import ModelRow

COLUMNS = ("engine", "model", "ctx×slots", "cache", "measured", "estimate", "Δ", "KV", "flags")


class ModelsTable(DataTable):
    """Rows keyed by pid; refreshed in place so the cursor stays on its model."""

    DEFAULT_CSS = """
    ModelsTable { height: auto; max-height: 12; }
    """

    @dataclass
    class Selected(Message):
        """The highlighted model changed (None: no model)."""

        row: ModelRow | None

    def __init__(self, **kwargs: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)  # type: ignore[arg-type]
        self._rows: dict[str, ModelRow] = {}

    def on_mount(self) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)

    @staticmethod
    def cells(row: ModelRow) -> tuple[str, ...]:
        flags = "; ".join(row.flags)
        delta = row.delta_bytes
        return (row.engine, row.model, row.ctx_slots, row.cache_types, size(row.measured_bytes),
                size(row.estimate_bytes), signed(delta), size(row.kv_bytes), flags or "-")

    def show(self, rows: tuple[ModelRow, ...]) -> None:
        keys = [str(r.pid) for r in rows]
        old = list(self._rows)
        self._rows = dict(zip(keys, rows, strict=True))
        if keys == old:
            for key, row in zip(keys, rows, strict=True):
                for col, value in zip(COLUMNS, self.cells(row), strict=True):
                    if self.get_cell(key, col) != value:
                        self.update_cell(key, col, value)
        else:
            selected = self.selected_key()
            self.clear()
            for key, row in zip(keys, rows, strict=True):
                self.add_row(*self.cells(row), key=key)
            if selected in self._rows:
                self.move_cursor(row=keys.index(selected))
        self.post_message(self.Selected(self.selected_row()))

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
