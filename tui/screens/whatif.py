"""What-if: choose a llama-swap model, paste a command line or type a llama-server router's
model id (one word: the router on the box serving it, as ``vramscope predict ID``); see the
projected bar,
the verdict and the fixes. The estimate and prediction run in a worker (GGUF reads)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import get_current_worker

from monitor.device_names import device_labels
from tui.format import plain, size
from tui.source import Frame
from tui.widgets.device_panel import DevicePanel, panels_from_frame

if TYPE_CHECKING:
    from monitor.api import Prediction, PredictResult

_VERDICT_STYLE = {"oom": "$error", "tight": "$warning", "thrash": "$warning"}


@dataclass
class PredictionReady(Message, bubble=False):
    result: PredictResult | None
    error: str | None = None


class WhatIfScreen(ModalScreen[None]):
    """A dialog over the main screen."""

    BINDINGS = [
        Binding("escape", "dismiss_dialog", "Close"),
        Binding("f5", "predict", "Predict"),
    ]

    def __init__(self, frame: Frame | None) -> None:
        super().__init__()
        self.frame = frame
        self.result: PredictResult | None = None  # what `vramscope predict` would answer

    @property
    def prediction(self) -> Prediction | None:
        return self.result.prediction if self.result is not None else None

    def compose(self) -> ComposeResult:
        swap: list[str] = getattr(self.app, "swap_models", lambda: [])()
        with Vertical(id="whatif"):
            yield Label("[b]what if I load…[/b]")
            if swap:
                yield Select([(m, m) for m in swap], prompt="a llama-swap model", id="swap-model")
            with Horizontal(id="whatif-row"):
                yield Input(
                    placeholder="or paste a command line: llama-server -m … -c … (or a router "
                    "model id)",
                    id="command",
                )
                yield Button("Predict", id="predict", variant="primary")
            with VerticalScroll(id="whatif-result"):
                yield Static("", id="verdict")
                yield Vertical(id="projected")
                yield Static("", id="fixes")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#whatif").border_title = "what-if"
        self.query_one("#command", Input).focus()

    def action_dismiss_dialog(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted, "#command")
    @on(Button.Pressed, "#predict")
    def action_predict(self) -> None:
        if self.frame is None:
            self.query_one("#verdict", Static).update("[$warning]no sample yet to judge against[/]")
            return
        command = self.query_one("#command", Input).value.strip()
        model_id = None
        selects = self.query("#swap-model")
        if selects and not command:
            value = selects.first(Select).value
            # nothing chosen is Select.NULL (a sentinel, not a str): never a model id
            model_id = value if isinstance(value, str) else None
        if not command and model_id is None:
            self.query_one("#verdict", Static).update(
                "[$warning]paste a command line or choose a model[/]"
            )
            return
        self.query_one("#verdict", Static).update("[$text-muted]estimating…[/]")
        self.run_prediction(self.frame, command, model_id)

    @work(thread=True, exclusive=True, group="whatif")
    def run_prediction(self, frame: Frame, command: str, model_id: str | None) -> None:
        worker = get_current_worker()
        from monitor.errors import describe

        try:
            message = PredictionReady(predict_for(self.app, frame, command, model_id))
        except Exception as exc:  # one line in the dialog (as the CLI's), never a traceback
            message = PredictionReady(None, describe(exc))
        if not worker.is_cancelled:
            self.post_message(message)

    def on_prediction_ready(self, message: PredictionReady) -> None:
        verdict = self.query_one("#verdict", Static)
        fixes = self.query_one("#fixes", Static)
        box = self.query_one("#projected", Vertical)
        box.remove_children()
        if message.error:
            verdict.update(
                Content.styled("cannot predict:", "bold $error")
                + Content(" ")
                + plain(message.error)
            )
            fixes.update("")
            return
        if message.result is None or self.frame is None:
            return
        self.result = message.result
        result = message.result.prediction
        from monitor.api import need_by_device

        need = need_by_device(result.estimate, message.result.picture)
        verdicts: dict[str, str] = {d.device_id: d.verdict for d in result.devices}
        pics = self.frame.picture.devices.values()
        names = device_labels((d.device_id, d.name) for d in pics)  # as the panels
        style = _VERDICT_STYLE.get(result.verdict, "$success")
        model = (result.estimate.model_path or "-").split("/")[-1]
        headline = result.verdict.upper()
        if result.grown_verdict == "oom" and result.verdict != "oom":
            headline += ", OOM once the caches fill"  # `predict` exits 3
        lines = [
            Content.styled(headline, f"bold {style}")
            + plain(f"  {result.estimate.engine}: {model}")
        ]
        for d in result.devices:
            tail = (
                f"short by {size(-d.slack_bytes)}"
                if d.verdict == "oom"
                else f"{size(d.slack_bytes)} to spare after the margin"
            )
            lines.append(
                plain(
                    f"  {names.get(d.device_id, d.device_id)}: needs {size(d.need_bytes)}, "
                    f"can get "
                    f"{size(d.room_bytes)} ({d.binding or '-'}) → {d.verdict}, "
                    f"{tail}"
                )
            )
        for note in message.result.all_notes:
            lines.append(plain(f"  note: {note}", "$text-muted"))
        verdict.update(Content("\n").join(lines))
        panels = [
            p
            for p in panels_from_frame(self.frame, need, verdicts, "this load")
            if p.projected_bytes
        ]
        box.mount_all([DevicePanel(p) for p in panels])
        if result.fixes:
            out = [Content.styled("what would make it fit", "bold")]
            for f in result.fixes:
                frees = ", ".join(f"{size(v)} on {names.get(k, k)}" for k, v in f.frees.items())
                out.append(plain(f"  {f.change}: frees {frees} → {f.verdict}"))
            fixes.update(Content("\n").join(out))
        else:
            fixes.update("")


def predict_for(app: object, frame: Frame, command: str, model_id: str | None) -> PredictResult:
    """Blocking (worker threads only): the same workflow as ``vramscope predict --state``
    on the frame's snapshot, with the source's GPUs and GGUF header cache."""
    from monitor.api import PredictRequest, answer
    from monitor.errors import UsageError

    builder = app.source.builder  # type: ignore[attr-defined]
    margin_gib = builder.margin_bytes / (1024**3)
    if model_id is not None:
        swap_config = app.swap_config  # type: ignore[attr-defined]
        req = PredictRequest([], model_id=model_id, margin_gib=margin_gib, swap_config=swap_config)
    else:
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"cannot split the command line: {exc}") from None
        if len(argv) == 1 and not _names_a_program(argv[0]):  # a router's model id
            from tui.source import RemoteSource

            if isinstance(app.source, RemoteSource):  # type: ignore[attr-defined]
                raise UsageError(
                    "a router's model is judged on its own box: "
                    f"vramscope predict --remote URL {argv[0]}"
                )
            # a replayed frame (the database): the routers' files, never a live answer
            req = PredictRequest(
                [], model_id=argv[0], margin_gib=margin_gib, ask_routers=frame.live
            )
        else:
            req = PredictRequest(argv, margin_gib=margin_gib)
    return answer(
        req, frame.snapshot, builder.devices(frame.snapshot), read_header=builder.read_header
    )


def _names_a_program(word: str) -> bool:
    """One word that is a program on PATH or an existing path is a command (as the CLI's
    ``predict WORD`` reads it), else a model id."""
    import os
    import shutil

    return shutil.which(word) is not None or os.path.exists(word)
