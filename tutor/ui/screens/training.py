"""Exercise 4 in the TUI: edit the training step, run it, watch the loss fall, read the results.

The run happens in the evaluator process (`Evaluator.request("train", ...)`), called from a thread
worker that only posts messages; the widgets change in the message handlers. The messages do not
bubble, so nothing leaves this screen. Like the rest of the UI, this module never imports torch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, ProgressBar, Static, TextArea

from tutor.packs import Pack
from tutor.training import (
    TrainingSettings,
    record_run,
    speed_notes,
    training_code,
    training_exercise,
    training_step,
)
from tutor.ui.widgets.editor import CodeEditor

if TYPE_CHECKING:
    from tutor.progress import Store
    from tutor.sandbox.client import Evaluator

GOOD, BAD, WARN, DIM = "bold #98c379", "bold #e06c75", "#e5c07b", "#7f8896"
CURVE = "#61afef"
DRAFT_DELAY = 0.5  # seconds of quiet typing before the edited code is saved
# Braille cells hold 2 x 4 dots; bit of the dot at (column, row) inside one cell.
BRAILLE_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))


# --- messages from the worker (they never bubble past the screen) ------------------------------


class TrainingProgress(Message, bubble=False):
    def __init__(self, payload: dict) -> None:
        super().__init__()
        self.payload = payload


class TrainingFinished(Message, bubble=False):
    def __init__(self, result: dict) -> None:
        super().__init__()
        self.result = result


class TrainingFailed(Message, bubble=False):
    """The evaluator itself failed (not the learner's code)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


# --- small formatting helpers ----------------------------------------------------------------


def spaced(number: float) -> str:
    return f"{number:,.0f}".replace(",", " ")


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "?"
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes}:{s:02d}" if minutes < 60 else f"{minutes // 60}:{minutes % 60:02d}:{s:02d}"


def braille_curve(values: list[float], slots: int, width: int, height: int,
                  lo: float, hi: float) -> list[list[int]]:
    """Dots of a line through `values` on a width x height grid of braille cells.

    Value i sits at x = i / slots of the width, so a live run grows from left to right; between
    neighbouring points the column is filled vertically, so the line stays unbroken.
    """
    cells = [[0] * width for _ in range(height)]
    dots_x, dots_y = 2 * width, 4 * height
    span = hi - lo or 1.0
    previous: int | None = None
    for i, v in enumerate(values):
        x = min(dots_x - 1, int(i * dots_x / max(1, slots)))
        y = round((hi - v) / span * (dots_y - 1))
        y = max(0, min(dots_y - 1, y))
        top, bottom = (y, y) if previous is None else (min(y, previous), max(y, previous))
        for yy in range(top, bottom + 1):
            cells[yy // 4][x // 2] |= BRAILLE_BITS[x % 2][yy % 4]
        previous = y
    return cells


class LossPlot(Widget):
    """log10(loss) against the step, drawn with braille dots, as the lecture plots it."""

    DEFAULT_CSS = """
    LossPlot { height: 12; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.points: list[float] = []
        self.every = 1
        self.steps = 1

    def reset(self, steps: int, every: int) -> None:
        self.points, self.steps, self.every = [], max(1, steps), max(1, every)
        self.refresh()

    def extend(self, points: list[float], every: int | None = None) -> None:
        self.points.extend(p for p in points if math.isfinite(p))
        if every:
            self.every = every
        self.refresh()

    def render(self) -> RenderableType:
        width, height = self.size.width, self.size.height
        label_w = 6
        plot_w, plot_h = max(4, width - label_w - 1), max(2, height - 2)
        title = Text("log10(loss)", style=DIM)
        if not self.points:
            return Group(title, Text("the curve appears once training starts", style=DIM))
        lo, hi = min(self.points), max(self.points)
        pad = max(0.01, (hi - lo) * 0.05)
        lo, hi = lo - pad, hi + pad
        slots = math.ceil(self.steps / self.every)
        cells = braille_curve(self.points, slots, plot_w, plot_h, lo, hi)
        lines = [title]
        for row, cell_row in enumerate(cells):
            value = hi - (hi - lo) * row / max(1, plot_h - 1)
            label = f"{value:5.2f}" if row in (0, plot_h // 2, plot_h - 1) else ""
            line = Text(f"{label:>{label_w - 1}} ┤" if label else " " * (label_w - 1) + " │",
                        style=DIM)
            line.append("".join(chr(0x2800 + c) for c in cell_row), style=CURVE)
            lines.append(line)
        axis = Text(" " * label_w + "0", style=DIM)
        end = f"{spaced(self.steps)} steps"
        axis.append(" " * max(1, plot_w - 1 - len(end)) + end)
        lines.append(axis)
        return Group(*lines)


def gradcheck_table(checks: list[dict]) -> RenderableType:
    """The notebook's cmp, per parameter, over every checked step (worst maxdiff)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for name, justify in (("parameter", "left"), ("exact", "left"), ("approximate", "left"),
                          ("maxdiff", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    some_steps = False
    for c in checks:
        steps = c.get("steps") or 0
        approx_steps = c.get("approximate_steps", steps)
        if approx_steps in (0, steps):
            approx = Text(str(c["approximate"]), style=GOOD if c["approximate"] else BAD)
        else:
            approx, some_steps = Text(f"{approx_steps}/{steps}", style=WARN), True
        verdict = c.get("verdict")
        mark = (Text("✓", style=GOOD) if verdict in ("exact", "approximate")
                else Text("✗ " + str(verdict), style=BAD))
        table.add_row(Text(c["grad"], style="bold"), Text(str(c["exact"])), approx,
                      f"{c['maxdiff']:.2e}" if c.get("maxdiff") else "0.0", mark)
    if not some_steps:
        return table
    steps = max(c.get("steps") or 0 for c in checks)
    note = Text(f"k/{steps}: allclose held on k of the {steps} checked steps; on the others "
                "the gap is float32 rounding, as ✓ says.", style=DIM)
    return Group(table, note)


def results_view(result: dict) -> RenderableType:
    """Calibrated split losses next to the lecture's, then the sampled names."""
    lecture = result.get("lecture") or {}
    table = Table(box=None, pad_edge=False, padding=(0, 2), show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("yours", justify="right", no_wrap=True)
    table.add_column("lecture", justify="right", no_wrap=True)
    for split in ("train", "val"):
        ours, theirs = result.get(f"{split}_loss"), lecture.get(f"{split}_loss")
        table.add_row(f"{split} loss", "—" if ours is None else f"{ours:.4f}",
                      Text("—" if theirs is None else f"{theirs:.4f}", style=DIM))
    parts: list[RenderableType] = [table]
    if result.get("samples"):
        parts.append(Text("\nnames sampled from your network", style=DIM))
        parts.append(Text("  ".join(result["samples"]), style="bold"))
    return Group(*parts)


# --- the screen ------------------------------------------------------------------------------


class TrainingScreen(Screen):
    """Exercise 4: the learner's whole backward pass, in the training loop, run for real."""

    DEFAULT_CSS = """
    TrainingScreen { layout: vertical; }
    #train-title { height: 1; padding: 0 1; background: $panel; text-style: bold; }
    #train-body { height: 1fr; }
    #train-code { width: 1fr; height: 1fr; border: none; border-right: vkey $panel-lighten-2; }
    #train-side { width: 1fr; height: 1fr; padding: 0 1; }
    #train-phase { height: auto; margin-bottom: 1; }
    #train-gradcheck { height: auto; margin-bottom: 1; }
    #train-progress { width: auto; height: 1; }
    #train-rate { height: 1; color: $text-muted; }
    #train-plot { margin-top: 1; }
    #train-results-box { height: auto; }
    #train-results { height: auto; margin-top: 1; }
    #train-notes { height: auto; margin-top: 1; color: $warning; }
    """

    BINDINGS = [
        Binding("ctrl+j,f5,ctrl+enter", "run", "Run", id="train.run", priority=True,
                tooltip="Check your gradients against autograd, then train on them"),
        Binding("f8", "cancel", "Cancel", id="train.cancel", priority=True,
                tooltip="Stop the run; the steps done so far are kept"),
        Binding("ctrl+r", "reset_code", "Reset code", id="train.reset",
                tooltip="Put back the code assembled from your accepted steps"),
        Binding("escape", "back", "Back", id="train.back", priority=True,
                tooltip="Stop a run, or leave this screen"),
    ]

    def __init__(self, evaluator: Evaluator, store: Store | None, pack: Pack, code: str, *,
                 steps: int | None = None, gradcheck_steps: int | None = None,
                 compile: bool = False) -> None:
        super().__init__()
        self.evaluator, self.store, self.pack, self.code = evaluator, store, pack, code
        self.steps, self.gradcheck_steps, self.compile = steps, gradcheck_steps, compile
        self.settings = TrainingSettings.from_pack(pack, steps=steps,
                                                   gradcheck_steps=gradcheck_steps)
        self.running = False
        self.cancelling = False
        self.result: dict | None = None
        self._draft_timer = None

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        s, ex = self.settings, training_exercise(self.pack)
        yield Static(f"Exercise {ex.number} — {ex.title} · n_hidden {s.n_hidden} · batch "
                     f"{s.batch_size} · {spaced(s.steps)} steps", id="train-title")
        with Horizontal(id="train-body"):
            yield CodeEditor(self.code, id="train-code")
            with VerticalScroll(id="train-side"):
                yield Static(self._idle_text(), id="train-phase")
                yield Static("", id="train-gradcheck")
                yield ProgressBar(total=s.steps, show_eta=False, id="train-progress")
                yield Static("", id="train-rate")
                yield LossPlot(id="train-plot")
                with Vertical(id="train-results-box"):
                    yield Static("", id="train-results")
                    yield Static("", id="train-notes")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#train-plot", LossPlot).reset(self.settings.steps,
                                                      self.settings.history_every)
        self._show_notes(speed_notes(self.code))
        self.query_one("#train-code", CodeEditor).focus()

    def _idle_text(self) -> Text:
        s = self.settings
        text = Text("F5 or Ctrl+J runs it: ", style="bold")
        text.append(f"the first {s.gradcheck_steps} steps compare every gradient with autograd, "
                    f"then {spaced(s.steps - s.gradcheck_steps)} more steps train the network on "
                    "your gradients alone. F8 stops the run at any moment.")
        return text

    def _phase(self, text: str | Text) -> None:
        self.query_one("#train-phase", Static).update(text)

    def _show_notes(self, notes: list[str]) -> None:
        self.query_one("#train-notes", Static).update("\n".join(f"note: {n}" for n in notes))

    # -- actions ------------------------------------------------------------------------------
    def action_run(self) -> None:
        if self.running:
            self.notify("A run is already going; F8 stops it.", severity="warning")
            return
        self.code = self.query_one("#train-code", CodeEditor).text
        self.running, self.cancelling, self.result = True, False, None
        self.query_one("#train-code", CodeEditor).mark_error(None)
        self.query_one("#train-gradcheck", Static).update("")
        self.query_one("#train-results", Static).update("")
        self.query_one("#train-progress", ProgressBar).update(total=self.settings.steps,
                                                              progress=0)
        self.query_one("#train-rate", Static).update("")
        self.query_one("#train-plot", LossPlot).reset(self.settings.steps,
                                                      self.settings.history_every)
        self._show_notes(speed_notes(self.code))
        self._phase(Text("Starting: the evaluator builds the network…", style=DIM))
        self._train(self.code)

    def action_cancel(self) -> None:
        if not self.running or self.cancelling:
            return
        self.cancelling = True
        self.evaluator.cancel()
        self._phase(Text("Stopping at the next step; the steps done so far are kept…", style=WARN))

    def action_back(self) -> None:
        if self.running:
            self.action_cancel()
        else:
            self.dismiss(self.result)

    def action_reset_code(self) -> None:
        if self.running:
            return
        accepted = self.store.accepted_codes() if self.store else None
        code = training_code(self.pack, accepted, self.steps)
        self.query_one("#train-code", CodeEditor).load_text(code)

    def on_unmount(self) -> None:
        if self.running:  # leaving mid-run must free the evaluator for the rest of the app
            self.evaluator.cancel()

    @on(TextArea.Changed, "#train-code")
    def _edited(self) -> None:
        if self.store is None:
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_DELAY, self._save_draft)

    def _save_draft(self) -> None:
        from tutor.progress import StoreError

        try:
            self.store.save_draft(training_step(self.pack).id,
                                  self.query_one("#train-code", CodeEditor).text)
        except StoreError as exc:
            self.notify(str(exc), severity="error")

    # -- the worker ---------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="training")
    def _train(self, code: str) -> None:
        payload = {"code": code, "steps": self.steps, "gradcheck_steps": self.gradcheck_steps,
                   "compile": self.compile, "reference": False}
        try:
            result = self.evaluator.request("train", payload, None, self._relay)
        except Exception as exc:  # noqa: BLE001 - the evaluator could not run it at all
            self.post_message(TrainingFailed(str(exc)))
            return
        if self.store is not None and "status" in result:
            try:
                result["run_id"] = record_run(self.store, self.pack, code, result)
            except Exception as exc:  # noqa: BLE001 - the run is still shown
                result.setdefault("notes", []).append(f"the run could not be saved: {exc}")
        self.post_message(TrainingFinished(result))

    def _relay(self, payload: dict) -> None:
        """Progress from the worker thread to the screen. A cancel sent before the evaluator
        had started this run was not seen by it, so it is repeated while the run goes on."""
        if self.cancelling:
            self.evaluator.cancel()
        self.post_message(TrainingProgress(payload))

    # -- messages -----------------------------------------------------------------------------
    @on(TrainingProgress)
    def _progress(self, message: TrainingProgress) -> None:
        p = message.payload
        if p["phase"] == "gradcheck":
            self._phase(Text(f"Phase 1 · gradient check against autograd · step "
                             f"{p['step']}/{p['of']}", style="bold"))
            self.query_one("#train-gradcheck", Static).update(gradcheck_table(p["checks"]))
            self.query_one("#train-progress", ProgressBar).update(progress=p["step"])
        elif p["phase"] == "train":
            if not self.cancelling:
                self._phase(Text(f"Phase 2 · training on your gradients alone · lr {p['lr']:g}",
                                 style="bold"))
            self.query_one("#train-progress", ProgressBar).update(progress=p["step"])
            rate = p.get("steps_per_s")
            loss = f" · loss {p['loss']:.4f}" if p.get("loss") is not None else ""
            self.query_one("#train-rate", Static).update(
                f"{spaced(rate)} steps/s · {duration(p.get('eta_s'))} left{loss}" if rate
                else f"{spaced(p['step'])} steps{loss}")
            self.query_one("#train-plot", LossPlot).extend(p.get("points", []), p.get("every"))
        elif p["phase"] == "results":
            self._phase(Text("Phase 3 · calibrating batchnorm over the training set, then the "
                             "losses and the samples…", style="bold"))

    @on(TrainingFinished)
    def _finished(self, message: TrainingFinished) -> None:
        self.running, self.cancelling = False, False
        r = self.result = message.result
        if r.get("history"):  # the complete curve, including the last partial span
            plot = self.query_one("#train-plot", LossPlot)
            plot.reset(self.settings.steps, r["history"]["every"])
            plot.extend(r["history"]["log10_loss"])
        if r.get("gradcheck"):
            table = gradcheck_table(r["gradcheck"]["checks"])
            self.query_one("#train-gradcheck", Static).update(table)
        self.query_one("#train-progress", ProgressBar).update(progress=r.get("steps_done", 0))
        # The live "time left" line would otherwise outlive the run it describes.
        final_loss = f" · last loss {r['last_loss']:.4f}" if r.get("last_loss") else ""
        self.query_one("#train-rate", Static).update(
            f"{spaced(r.get('steps_done', 0))} steps done{final_loss}")
        self._phase(self._summary(r))
        if r.get("train_loss") is not None:
            self.query_one("#train-results", Static).update(results_view(r))
        notes = list(r.get("notes") or [])
        if r.get("stdout"):
            printed = r["stdout"].splitlines()
            notes.append("your print output, first lines:\n  " + "\n  ".join(printed[:8]))
        self._show_notes(notes)
        line = self._error_line(r)
        if line:
            self.query_one("#train-code", CodeEditor).mark_error(line - 1)

    @on(TrainingFailed)
    def _failed(self, message: TrainingFailed) -> None:
        self.running, self.cancelling = False, False
        self._phase(Text(f"The evaluator could not run the training: {message.message}",
                         style=BAD))

    def _summary(self, r: dict) -> Text:
        status, done = r.get("status"), r.get("steps_done", 0)
        saved = f" Saved as run #{r['run_id']}." if r.get("run_id") else ""
        rate = f" ({spaced(r['steps_per_s'])} steps/s)" if r.get("steps_per_s") else ""
        if status == "finished":
            return Text(f"Finished: {spaced(done)} steps in {duration(r.get('train_s'))}{rate} "
                        f"on {r['settings']['device']}.{saved}", style=GOOD)
        if status == "cancelled":
            return Text(f"Stopped after {spaced(done)} of {spaced(self.settings.steps)} steps; "
                        f"the results below are for the network as it was then.{saved}",
                        style=WARN)
        failure = (r.get("gradcheck") or {}).get("failure")
        if status == "diverged" and failure:
            return Text(failure["message"], style=BAD)
        error = r.get("error") or {}
        return Text(f"{error.get('kind', 'error')}: {error.get('message', 'the run failed')}",
                    style=BAD)

    @staticmethod
    def _error_line(r: dict) -> int | None:
        failure = (r.get("gradcheck") or {}).get("failure")
        if failure and failure.get("line"):
            return failure["line"]
        return (r.get("error") or {}).get("line")
