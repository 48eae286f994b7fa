"""What-if: choose a llama-swap model or paste a command line; see the projected bar,
the verdict and the fixes. The estimate and prediction run in a worker (GGUF reads)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import get_current_worker

from tui.format import plain, size
from tui.source import Frame
from tui.widgets.device_panel import DevicePanel, panels_from_frame


@dataclass
class PredictionReady(Message, bubble=False):
    prediction: object | None
    notes: list[str]
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
        self.prediction: object | None = None

    def compose(self) -> ComposeResult:
        swap = getattr(self.app, "swap_models", lambda: [])()
        with Vertical(id="whatif"):
            yield Label("[b]what if I load…[/b]")
            if swap:
                yield Select([(m, m) for m in swap], prompt="a llama-swap model",
                             id="swap-model")
            with Horizontal(id="whatif-row"):
                yield Input(placeholder="or paste a command line: llama-server -m … -c …",
                            id="command")
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
            self.query_one("#verdict", Static).update("[$warning]no sample yet to judge "
                                                      "against[/]")
            return
        command = self.query_one("#command", Input).value.strip()
        model_id = None
        selects = self.query("#swap-model")
        if selects and not command:
            value = selects.first(Select).value
            model_id = None if value is Select.BLANK else str(value)
        if not command and model_id is None:
            self.query_one("#verdict", Static).update(
                "[$warning]paste a command line or choose a model[/]")
            return
        self.query_one("#verdict", Static).update("[$text-muted]estimating…[/]")
        self.run_prediction(command, model_id)

    @work(thread=True, exclusive=True, group="whatif")
    def run_prediction(self, command: str, model_id: str | None) -> None:
        worker = get_current_worker()
        try:
            prediction, notes = predict_for(self.app, self.frame, command, model_id)
            message = PredictionReady(prediction, notes)
        except Exception as exc:  # shown in the dialog, never a traceback
            message = PredictionReady(None, [], str(exc) or type(exc).__name__)
        if not worker.is_cancelled:
            self.post_message(message)

    def on_prediction_ready(self, message: PredictionReady) -> None:
        verdict = self.query_one("#verdict", Static)
        fixes = self.query_one("#fixes", Static)
        box = self.query_one("#projected", Vertical)
        box.remove_children()
        if message.error:
            verdict.update(Content.styled("cannot predict:", "bold $error") + Content(" ")
                           + plain(message.error))
            fixes.update("")
            return
        result = message.prediction
        self.prediction = result
        from monitor.analysis.predict import need_by_device

        need = need_by_device(result.estimate, self.frame.picture)  # type: ignore[union-attr]
        verdicts = {d.device_id: d.verdict for d in result.devices}  # type: ignore[union-attr]
        style = {"oom": "$error", "tight": "$warning"}.get(result.verdict, "$success")  # type: ignore[union-attr]
        model = (result.estimate.model_path or '-').split('/')[-1]  # type: ignore[union-attr]
        lines = [Content.styled(result.verdict.upper(), f"bold {style}")  # type: ignore[union-attr]
                 + plain(f"  {result.estimate.engine}: {model}")]  # type: ignore[union-attr]
        for d in result.devices:  # type: ignore[union-attr]
            tail = (f"short by {size(-d.slack_bytes)}" if d.verdict == "oom"
                    else f"{size(d.slack_bytes)} to spare after the margin")
            lines.append(plain(f"  {d.device_id}: needs {size(d.need_bytes)}, can get "
                               f"{size(d.room_bytes)} ({d.binding or '-'}) → {d.verdict}, "
                               f"{tail}"))
        for note in message.notes + list(result.notes):  # type: ignore[union-attr]
            lines.append(plain(f"  note: {note}", "$text-muted"))
        verdict.update(Content("\n").join(lines))
        panels = [p for p in panels_from_frame(self.frame, need, verdicts, "this load")
                  if p.projected_bytes]
        box.mount_all([DevicePanel(p) for p in panels])
        if result.fixes:  # type: ignore[union-attr]
            out = [Content.styled("what would make it fit", "bold")]
            for f in result.fixes:  # type: ignore[union-attr]
                frees = ", ".join(f"{size(v)} on {k}" for k, v in f.frees.items())
                out.append(plain(f"  {f.change}: frees {frees} → {f.verdict}"))
            fixes.update(Content("\n").join(out))
        else:
            fixes.update("")


def predict_for(app: object, frame: Frame, command: str, model_id: str | None
                ) -> tuple[object, list[str]]:
    """Blocking: estimate a launch against the frame's picture (worker threads only)."""
    from monitor.analysis.predict import predict
    from monitor.cli.predict import PredictRequest, running_servers, swap_target
    from monitor.engines import parse_command

    source = app.source  # type: ignore[attr-defined]
    builder = source.builder
    notes: list[str] = []
    evicted = []
    if model_id is not None:
        req = PredictRequest([], model_id=model_id, swap_config=app.swap_config)  # type: ignore[attr-defined]
        argv, evicted, notes = swap_target(req, frame.picture)
    else:
        argv = shlex.split(command)
    spec = parse_command(argv)
    if spec is None:
        raise ValueError(f"not an inference server command: {' '.join(argv[:3])}")
    running = [u for u in running_servers(frame.picture) if u.pid not in {e.pid for e in evicted}]
    result = predict(spec, frame.picture, builder.devices(frame.snapshot), evicted, running,
                     read_header=builder.read_header)
    return result, notes
