"""Exercise 4 in the TUI: edit the training step, choose how long to train, run it, watch the
loss fall, read the results, and compare with earlier runs.

The run happens in the evaluator process (`Lesson.train`, which comes back with a typed
`TrainingRun` and hears typed `RunProgress`), called from a thread worker that only posts
messages; the widgets change in the message handlers. Those messages do
not bubble; only `TrainingRecorded` goes on to the app, once a run is kept, so it can mark the
moment. Like the rest of the UI, this module never imports torch.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, ProgressBar, Static, TextArea

from tutor.pack.model import DEFAULT_BASELINE
from tutor.session.controller import BrokenComparison, Lesson
from tutor.session.errors import StoreError
from tutor.training import (
    TrainingSettings,
    speed_notes,
    training_exercise,
    with_header,
)
from tutor.ui import palette
from tutor.ui.palette import BAD, DIM, GOOD, WARN
from tutor.ui.screens.breaking import BreakChooser
from tutor.ui.widgets.editor import CodeEditor
from tutor.ui.widgets.footer import TutorFooter
from tutor.ui.widgets.lossplot import LossPlot, Series, braille_curve, spaced
from tutor.ui.widgets.runs import RunsTable, clock, when
from tutor.ui.widgets.timebars import run_picture
from tutor.values.durations import loss_text
from tutor.values.runs import (
    BrokenStep,
    ParameterCheck,
    RunPhase,
    RunProgress,
    RunStatus,
    SplitLosses,
    TrainingRun,
)

__all__ = ["LossPlot", "Series", "TrainingScreen", "braille_curve", "parse_steps", "spaced"]


DRAFT_DELAY = 0.5  # seconds of quiet typing before the edited code is saved
MAX_STEPS = 10_000_000  # more would run for hours; the evaluator holds no checkpoint


# --- messages from the worker (they never bubble past the screen) ------------------------------


class TrainingRecorded(Message):
    """The training screen kept a run in the store (it may have completed exercise 4)."""

    def __init__(self, result: TrainingRun) -> None:
        super().__init__()
        self.result = result


class TrainingProgress(Message, bubble=False):
    def __init__(self, progress: RunProgress) -> None:
        super().__init__()
        self.progress = progress


class TrainingFinished(Message, bubble=False):
    def __init__(self, result: TrainingRun) -> None:
        super().__init__()
        self.result = result


class BreakStage(Message, bubble=False):
    """A comparison with a broken step moves on: "good" (a good run first) or "broken"."""

    def __init__(self, which: str, broken: BrokenStep) -> None:
        super().__init__()
        self.which, self.broken = which, broken


class BrokenFinished(Message, bubble=False):
    def __init__(self, comparison: BrokenComparison) -> None:
        super().__init__()
        self.comparison = comparison


class TrainingFailed(Message, bubble=False):
    """The evaluator itself failed (not the learner's code)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


# --- small helpers ----------------------------------------------------------------------------


def parse_steps(text: str) -> int | None:
    """A step count as typed: "200 000", "200_000", "20k", "1,000". None if it is not one."""
    cleaned = text.strip().lower().replace(" ", "").replace("_", "").replace(",", "")
    scale = 1
    if cleaned.endswith("k"):
        cleaned, scale = cleaned[:-1], 1000
    if not cleaned.isdigit():
        return None
    steps = int(cleaned) * scale
    return steps if 1 <= steps <= MAX_STEPS else None


def gradcheck_table(checks: list[ParameterCheck]) -> RenderableType:
    """The notebook's cmp, per parameter, over every checked step (worst maxdiff)."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for name, justify in (("parameter", "left"), ("exact", "left"), ("approximate", "left"),
                          ("maxdiff", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
    some_steps = False
    for c in checks:
        if c.approximate_on_some_steps:
            approx, some_steps = Text.styled(f"{c.approximate_steps}/{c.steps}", WARN), True
        else:
            approx = Text.styled(str(c.approximate), GOOD if c.approximate else BAD)
        mark = (Text.styled(c.verdict.mark, GOOD) if c.verdict.accepted
                else Text.styled(f"✗ {c.verdict}", BAD))
        table.add_row(Text.styled(c.grad, "bold"), Text(str(c.exact)), approx,
                      f"{c.maxdiff:.2e}" if c.maxdiff else "0.0", mark)
    if not some_steps:
        return table
    steps = max(c.steps for c in checks)
    note = Text.styled(f"k/{steps}: allclose held on k of the {steps} checked steps; on the others "
                       "the gap is float32 rounding, as ✓ says.", DIM)
    return Group(table, note)


def results_view(result: TrainingRun, baseline: str = DEFAULT_BASELINE) -> RenderableType:
    """Calibrated split losses next to the lecture's (or what the pack's `baseline` names),
    then the sampled names."""
    lecture = result.lecture or SplitLosses()
    baseline = lecture.label(baseline, result.settings.steps if result.settings else None)
    table = Table(box=None, pad_edge=False, padding=(0, 2), show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("yours", justify="right", no_wrap=True)
    table.add_column(baseline, justify="right", no_wrap=True)
    for split, ours, theirs in (("train", result.train_loss, lecture.train_loss),
                                ("val", result.val_loss, lecture.val_loss)):
        table.add_row(f"{split} loss", "—" if ours is None else f"{ours:.4f}",
                      Text.styled("—" if theirs is None else f"{theirs:.4f}", DIM))
    parts: list[RenderableType] = [table]
    if result.samples:
        parts.append(Text.styled("\nnames sampled from your network", DIM))
        parts.append(Text.styled("  ".join(result.samples), "bold"))
    return Group(*parts)


def comparison_view(c: BrokenComparison) -> RenderableType:
    """The broken run next to the good one: what broke, the loss at a few steps, the final
    losses, and how the broken run ended when it did not finish."""
    b, good, broken = c.broken_step, c.good, c.broken
    origin = ("a good run trained just now" if c.fresh
              else f"your run #{good.run_id}" if good.run_id else "your last good run")
    head = Text.assemble((f"{b.step} broken with {b.label}", "bold"), f": {b.message}\n",
                         (f"next to {origin}, the same seed and batches", DIM))
    table = Table(box=None, pad_edge=False, padding=(0, 2), show_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("good", justify="right", no_wrap=True)
    table.add_column("broken", justify="right", no_wrap=True)
    for step, ok, bad in c.checkpoints():
        table.add_row(f"step {spaced(step)}", loss_text(ok), Text.styled(loss_text(bad), BAD))
    for split, ok, bad in (("train loss", good.train_loss, broken.train_loss),
                           ("val loss", good.val_loss, broken.val_loss)):
        table.add_row(Text.styled(split, "bold"), loss_text(ok), Text.styled(loss_text(bad), BAD))
    parts: list[RenderableType] = [head, table]
    if broken.status is not RunStatus.FINISHED:
        stopped = broken.error.message if broken.error else str(broken.status)
        parts.append(Text.styled(f"The broken run stopped after {spaced(broken.steps_done)} "
                                 f"steps: {stopped}", WARN))
    parts.append(Text.styled("The broken run is only shown: it never counts for the exercise "
                             "and is not kept. F3 breaks another.", DIM))
    return Group(*parts)


# --- the screen ------------------------------------------------------------------------------


class TrainingScreen(Screen):
    """Exercise 4: the learner's whole backward pass, in the training loop, run for real."""

    DEFAULT_CSS = """
    TrainingScreen { layout: vertical; }
    /* A second line rather than a cut: the step count is at the end. */
    #train-title { height: auto; max-height: 2; padding: 0 1; background: $panel;
                   text-style: bold; }
    #train-body { height: 1fr; }
    #train-code { width: 1fr; height: 1fr; border: none; border-right: vkey $panel-lighten-2; }
    #train-side { width: 1fr; height: 1fr; padding: 0 1; }
    #train-phase { height: auto; margin-bottom: 1; }
    #train-settings { height: auto; margin-bottom: 1; }
    #train-steps-label { width: auto; color: $text-muted; }
    #train-steps { width: 14; height: 1; border: none; padding: 0 1; }
    #train-steps:focus { background: $boost; }
    #train-steps-hint { width: 1fr; height: auto; color: $text-muted; padding-left: 1; }
    #train-gradcheck { height: auto; margin-bottom: 1; }
    #train-progress { width: auto; height: 1; }
    #train-rate { height: 1; color: $text-muted; }
    #train-plot { margin-top: 1; }
    #train-picture { height: auto; margin-top: 1; display: none; }
    #train-results-box { height: auto; }
    #train-results { height: auto; margin-top: 1; }
    #train-notes { height: auto; margin-top: 1; color: $warning; }
    #train-runs-title { height: auto; margin-top: 1; color: $text-muted; }
    #train-runs { height: auto; max-height: 12; }
    /* Only one of code and run fits beside the other on a narrow terminal; F4 switches. */
    TrainingScreen.-run-only #train-code { display: none; }
    TrainingScreen.-narrow #train-code { width: 1fr; border-right: none; }
    TrainingScreen.-narrow #train-side { display: none; }
    TrainingScreen.-narrow.-run-only #train-side { display: block; }
    TrainingScreen.-short #train-plot { height: 9; }
    """

    BINDINGS = [
        Binding("ctrl+j,f5,ctrl+enter", "run", "Run", id="train.run", priority=True,
                tooltip="Check your gradients against autograd, then train on them"),
        Binding("f8", "cancel", "Stop", id="train.cancel", priority=True,
                tooltip="Stop the run; the steps done so far are kept"),
        Binding("f6", "steps", "Steps", id="train.steps", priority=True,
                tooltip="Choose how many steps the next run trains"),
        Binding("f3", "break_step", "Break", id="train.break",
                tooltip="Train once more with one step's gradient swapped for a mistake (or "
                "your first refused attempt) and see both loss curves"),
        Binding("f4", "toggle_view", "Code/Run", id="train.view",
                tooltip="Show the code or the run (on a narrow terminal one at a time)"),
        Binding("ctrl+t", "reset_code", "Reset code", id="train.reset",
                tooltip="Put back the code assembled from your accepted steps"),
        Binding("escape", "back", "Back", id="train.back", priority=True,
                tooltip="Stop a run, leave the steps field, or leave this screen"),
    ]

    def __init__(self, lesson: Lesson, code: str, *, steps: int | None = None,
                 gradcheck_steps: int | None = None, compile: bool = False) -> None:
        super().__init__()
        self.lesson, self.pack, self.code = lesson, lesson.pack, code
        self.evaluator = lesson.evaluator  # to stop a run: cancelling is not a lesson's rule
        self.gradcheck_steps, self.compile = gradcheck_steps, compile
        if steps is None and lesson.keeps_progress:
            steps = parse_steps(lesson.remembered("train.steps") or "")  # the last choice
        self.steps = steps
        self.pictures: list[dict] = []  # the run's pictures through time: its first, its latest
        self.settings = TrainingSettings.from_pack(self.pack, steps=steps,
                                                   gradcheck_steps=gradcheck_steps)
        self.code = with_header(code, self.settings)
        self.running = False
        self.cancelling = False
        self.result: TrainingRun | None = None
        self._draft_timer = None

    # -- layout -------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(self._title(), id="train-title")
        with Horizontal(id="train-body"):
            yield CodeEditor(self.code, id="train-code")
            with VerticalScroll(id="train-side"):
                yield Static(self._idle_text(), id="train-phase")
                with Horizontal(id="train-settings"):
                    yield Static("steps", id="train-steps-label")
                    yield Input(spaced(self.settings.steps), id="train-steps",
                                restrict=r"[0-9 _,kK]*", max_length=12,
                                tooltip="How many steps the next run trains (e.g. 5000, 20k)")
                    yield Static("F6 changes it · F8 stops a run",
                                 id="train-steps-hint")
                yield Static("", id="train-gradcheck")
                yield ProgressBar(total=self.settings.steps, show_eta=False, id="train-progress")
                yield Static("", id="train-rate")
                yield LossPlot(id="train-plot")
                yield Static("", id="train-picture")
                with Vertical(id="train-results-box"):
                    yield Static("", id="train-results")
                    yield Static("", id="train-notes")
                yield Static("", id="train-runs-title")
                yield RunsTable(id="train-runs")
        yield TutorFooter()

    def _title(self) -> str:
        s, ex = self.settings, training_exercise(self.pack)
        sizes = "".join(f" · {k} {v}" for k, v in s.sizes.items())
        update = f" · {s.optimizer}" if s.optimizer else ""
        return (f"Exercise {ex.number} — {ex.title}{sizes} · batch {s.batch_size} · "
                f"{spaced(s.steps)} steps{update}")

    def on_mount(self) -> None:
        palette.install(self.app)  # the screen may be shown by an app of its own
        self.query_one("#train-plot", LossPlot).reset(self.settings.steps,
                                                      self.settings.history_every)
        self._show_notes(speed_notes(self.code))
        self._show_history()
        self.query_one("#train-code", CodeEditor).focus()

    def _idle_text(self) -> Text:
        s = self.settings
        text = Text("F5 or Ctrl+J runs it: ", style="bold")
        if s.gradcheck_steps:
            text.append(f"the first {spaced(s.gradcheck_steps)} steps compare every gradient "
                        "with autograd, then ")
        text.append(f"{spaced(s.steps - s.gradcheck_steps)} "
                    f"{'more ' if s.gradcheck_steps else ''}steps train the network on your "
                    "gradients alone.")
        if s.steps <= s.lr_decay_step:
            text.append(f" The learning rate stays at {s.lr:g} (it drops to "
                        f"{s.lr_after_decay:g} only from step {spaced(s.lr_decay_step)}).",
                        style=DIM)
        return text

    def _phase(self, text: str | Text) -> None:
        self.query_one("#train-phase", Static).update(text)

    def _show_notes(self, notes: list[str]) -> None:
        self.query_one("#train-notes", Static).update("\n".join(f"note: {n}" for n in notes))

    # -- earlier runs -------------------------------------------------------------------------
    def _runs(self) -> list[TrainingRun]:
        if not self.lesson.keeps_progress:
            return []
        try:
            return self.lesson.training_runs()
        except Exception:  # noqa: BLE001 - the screen works without its history
            return []

    def _show_history(self, reopen: bool = True) -> None:
        """The runs kept so far; on opening (`reopen`), the last one fills the panels as it
        ended."""
        runs = self._runs()
        table = self.query_one("#train-runs", RunsTable)
        table.display = bool(runs)
        title = self.query_one("#train-runs-title", Static)
        title.update(Text.assemble(
            (f"Your runs ({len(runs)})", "bold"),
            ("  enter or a click draws one on the plot to compare", DIM)) if runs else "")
        table.show_runs(runs)
        if reopen and runs and self.result is None and not self.running:
            self._show_run(runs[-1], reopened=True)

    @on(RunsTable.CompareChanged)
    def _compare(self, message: RunsTable.CompareChanged) -> None:
        self.query_one("#train-plot", LossPlot).compare(message.series)

    # -- actions ------------------------------------------------------------------------------
    def action_steps(self) -> None:
        if self.running:
            return
        self._show_side()
        field = self.query_one("#train-steps", Input)
        field.focus()
        field.select_all()

    @on(Input.Submitted, "#train-steps")
    def _steps_chosen(self) -> None:
        if self._apply_steps() and not self.has_class("-run-only"):
            self.query_one("#train-code", CodeEditor).focus()

    @on(Input.Blurred, "#train-steps")
    def _steps_left(self) -> None:
        self._apply_steps()

    def _apply_steps(self) -> bool:
        """Take the steps field's value as the next run's length; say so when it is no count."""
        field = self.query_one("#train-steps", Input)
        steps = parse_steps(field.value)
        if steps is None:
            self.notify(f"Steps must be a whole number from 1 to {spaced(MAX_STEPS)}, e.g. "
                        "5000 or 20k.", title="Steps", severity="warning")
            field.value = spaced(self.settings.steps)
            return False
        field.value = spaced(steps)
        if steps != self.settings.steps:
            self.steps = steps
            self.settings = TrainingSettings.from_pack(self.pack, steps=steps,
                                                       gradcheck_steps=self.gradcheck_steps)
            self.query_one("#train-title", Static).update(self._title())
            editor = self.query_one("#train-code", CodeEditor)
            code = with_header(editor.text, self.settings)
            if code != editor.text:  # the opening comment names the new count
                editor.replace(code, editor.document.start, editor.document.end,
                               maintain_selection_offset=True)
            if not self.running and self.result is None:
                self._phase(self._idle_text())
            if self.lesson.keeps_progress:
                self.lesson.remember("train.steps", str(steps))
        return True

    def action_run(self) -> None:
        if self.running:
            self.notify("A run is already going; F8 stops it.", severity="warning")
            return
        if not self._apply_steps():
            return
        self.code = self.query_one("#train-code", CodeEditor).text
        self.running, self.cancelling, self.result = True, False, None
        self.query_one("#train-code", CodeEditor).mark_error(None)
        self.query_one("#train-gradcheck", Static).update("")
        self.query_one("#train-results", Static).update("")
        self.query_one("#train-progress", ProgressBar).update(total=self.settings.steps,
                                                              progress=0)
        self.query_one("#train-rate", Static).update("")
        self.pictures = []
        self._show_picture(self.pictures)
        self.query_one("#train-plot", LossPlot).reset(self.settings.steps,
                                                      self.settings.history_every)
        self._show_notes(speed_notes(self.code))
        self._phase(Text.styled("Starting: the evaluator builds the network…", DIM))
        self._show_side()
        self._train(self.code, self.settings.steps)

    def system_commands(self) -> list[tuple[str, str, object]]:
        """The palette's commands for this screen: (title, help, callback)."""
        return [("Run the training", "Check your gradients, then train on them", self.action_run),
                ("Break a gradient", "Train once more with one step swapped for a mistake, "
                 "next to a good run", self.action_break_step)]

    def action_break_step(self) -> None:
        if self.running:
            self.notify("A run is already going; F8 stops it.", severity="warning")
            return
        choices = []
        try:
            for step in self.lesson.breakable_steps():
                ways = self.lesson.breakages(step.id)
                if ways:
                    choices.append((f"{step.title} ({step.id})", ways))
        except Exception as exc:  # noqa: BLE001 - the choice needs the progress store
            self.notify(f"The steps to break cannot be listed: {exc}", severity="error")
            return
        if not choices:
            self.notify("No step of this training code has a catalogued mistake or a refused "
                        "attempt of yours.", severity="warning")
            return
        self.app.push_screen(BreakChooser(choices), self._break_chosen)

    def _break_chosen(self, broken: BrokenStep | None) -> None:
        if broken is None or self.running or not self._apply_steps():
            return
        self.running, self.cancelling = True, False
        self.query_one("#train-code", CodeEditor).mark_error(None)
        for name in ("#train-gradcheck", "#train-results", "#train-rate", "#train-notes"):
            self.query_one(name, Static).update("")
        self.query_one("#train-plot", LossPlot).compare([])
        self._phase(Text.styled(f"Starting: {broken.step} broken with {broken.label}…", DIM))
        self._show_side()
        self._train_broken(broken, self.settings.steps)

    @work(thread=True, exclusive=True, group="training")
    def _train_broken(self, broken: BrokenStep, steps: int) -> None:
        try:
            comparison = self.lesson.compare_broken(
                broken, steps, compile=self.compile, progress=self._relay,
                stage=lambda which: self.post_message(BreakStage(which, broken)))
        except Exception as exc:  # noqa: BLE001 - the evaluator could not run it at all
            self.post_message(TrainingFailed(str(exc)))
            return
        self.post_message(BrokenFinished(comparison))

    @on(BreakStage)
    def _break_stage(self, message: BreakStage) -> None:
        b = message.broken
        label = "good run" if message.which == "good" else f"{b.step} broken"
        what = ("First a good run of your code, to compare with" if message.which == "good"
                else f"Training with {b.step} broken ({b.label}), the gradient check off")
        self._phase(Text.styled(what + "…", "bold"))
        self.query_one("#train-gradcheck", Static).update("")  # the good run's, if any
        self.query_one("#train-progress", ProgressBar).update(total=self.settings.steps,
                                                              progress=0)
        self.query_one("#train-plot", LossPlot).reset(self.settings.steps,
                                                      self.settings.history_every, label=label)

    @on(BrokenFinished)
    def _broken_finished(self, message: BrokenFinished) -> None:
        c = message.comparison
        good, broken = c.good, c.broken
        plot = self.query_one("#train-plot", LossPlot)
        planned = broken.planned_steps or self.settings.steps
        every = broken.history.every if broken.history else self.settings.history_every
        plot.reset(planned, every, label=f"{c.broken_step.step} broken")
        plot.extend(broken.history.log10_loss if broken.history else [])
        if good.history:
            name = f"run #{good.run_id}" if good.run_id else "good run"
            plot.compare([Series(name, good.history.every, good.planned_steps or planned,
                                 WARN, good.history.finite())])
        self.query_one("#train-progress", ProgressBar).update(total=planned,
                                                              progress=broken.steps_done)
        self.query_one("#train-rate", Static).update(f"{spaced(broken.steps_done)} steps done")
        # the broken run's own picture: its carried gradient beside autograd's
        self.pictures = list(broken.pictures)
        self._show_picture(self.pictures)
        self._phase(comparison_view(c))
        notes = [f"the good run could not be saved: {c.problem}"] if c.problem else []
        self._show_notes(notes)
        self.running, self.cancelling = False, False
        if c.fresh and good.run_id:
            self._show_history(reopen=False)  # the panels show the comparison
            self.post_message(TrainingRecorded(good))

    def action_cancel(self) -> None:
        if not self.running or self.cancelling:
            return
        self.cancelling = True
        self.evaluator.cancel()
        self._phase(Text.styled("Stopping at the next step; the steps done so far are kept…", WARN))

    def action_back(self) -> None:
        if self.running:
            self.action_cancel()
        elif self.focused is self.query_one("#train-steps", Input):
            self._apply_steps()
            self._show_code()
        else:
            self.dismiss(self.result)

    def action_toggle_view(self) -> None:
        if self.has_class("-run-only"):
            self._show_code()
        else:
            self.add_class("-run-only")

    def _show_side(self) -> None:
        # A run needs its panel in view; only a narrow terminal hides the code for it.
        if self.has_class("-narrow"):
            self.add_class("-run-only")

    def on_resize(self) -> None:
        self.set_class(self.size.width < NARROW, "-narrow")
        self.set_class(self.size.height < SHORT, "-short")

    def _show_code(self) -> None:
        self.remove_class("-run-only")
        self.query_one("#train-code", CodeEditor).focus()

    def action_reset_code(self) -> None:
        if self.running:
            return
        code = self.lesson.training_code(self.steps, draft=False)
        self._show_code()
        editor = self.query_one("#train-code", CodeEditor)
        # One edit, so ctrl+z brings the learner's version back.
        editor.replace(code, editor.document.start, editor.document.end,
                       maintain_selection_offset=False)

    def on_unmount(self) -> None:
        if self.running:  # leaving mid-run must free the evaluator for the rest of the app
            self.evaluator.cancel()

    @on(TextArea.Changed, "#train-code")
    def _edited(self) -> None:
        if not self.lesson.keeps_progress:
            return
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_DELAY, self.save_draft)

    def save_draft(self) -> None:
        """Keep the code as the training step's draft (also called by the app on quit)."""
        if self._draft_timer is not None:
            self._draft_timer.stop()
            self._draft_timer = None
        if not self.lesson.keeps_progress:
            return
        try:
            self.lesson.save_training_draft(self.query_one("#train-code", CodeEditor).text)
        except StoreError as exc:
            self.notify(str(exc), severity="error")

    # -- the worker ---------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="training")
    def _train(self, code: str, steps: int) -> None:
        try:
            result = self.lesson.train(code, steps, gradcheck_steps=self.gradcheck_steps,
                                       compile=self.compile, progress=self._relay)
        except Exception as exc:  # noqa: BLE001 - the evaluator could not run it at all
            self.post_message(TrainingFailed(str(exc)))
            return
        if self.lesson.keeps_progress:
            try:
                problem = self.lesson.keep_run(code, result)
            except Exception as exc:  # noqa: BLE001 - whatever the store did, the run is shown
                problem = str(exc)
            if problem:  # the run is still shown
                result.notes.append(f"the run could not be saved: {problem}")
        self.post_message(TrainingFinished(result))

    def _relay(self, progress: RunProgress) -> None:
        """Progress from the worker thread to the screen. A cancel sent before the evaluator
        had started this run was not seen by it, so it is repeated while the run goes on."""
        if self.cancelling:
            self.evaluator.cancel()
        self.post_message(TrainingProgress(progress))

    # -- messages -----------------------------------------------------------------------------
    @on(TrainingProgress)
    def _progress(self, message: TrainingProgress) -> None:
        p = message.progress
        if p.phase is RunPhase.GRADCHECK:
            self._phase(Text.styled(f"Phase 1 · gradient check against autograd · step "
                                    f"{p.step}/{p.of}", "bold"))
            self.query_one("#train-gradcheck", Static).update(gradcheck_table(p.checks))
            self.query_one("#train-progress", ProgressBar).update(progress=p.step)
        elif p.phase is RunPhase.TRAIN:
            if not self.cancelling:
                self._phase(Text.styled(
                    f"Phase 2 · training on your gradients alone · lr {p.lr:g}",
                    "bold"))
            self.query_one("#train-progress", ProgressBar).update(progress=p.step)
            rate = p.steps_per_s
            loss = f" · loss {p.loss:.4f}" if p.loss is not None else ""
            self.query_one("#train-rate", Static).update(
                f"{spaced(rate)} steps/s · {clock(p.eta_s)} left{loss}" if rate
                else f"{spaced(p.step)} steps{loss}")
            self.query_one("#train-plot", LossPlot).extend(p.points, p.every)
            if p.picture is not None:
                self.pictures = [*self.pictures[:1], p.picture]
                self._show_picture(self.pictures)
        elif p.phase is RunPhase.RESULTS:
            self._phase(Text.styled(f"Phase 3 · {p.doing}…", "bold"))

    @on(TrainingFinished)
    def _finished(self, message: TrainingFinished) -> None:
        self.running, self.cancelling = False, False
        r = self.result = message.result
        self._show_run(r)
        if r.run_id:
            self._show_history()
            self.post_message(TrainingRecorded(r))  # on to the app: it may end exercise 4
        line = r.error_line
        if line:
            self._show_code()
            self.query_one("#train-code", CodeEditor).mark_error(line - 1)

    def _show_picture(self, pictures: list[dict]) -> None:
        """The run's latest picture through time, its first one's range beside (none for a
        lesson without one)."""
        view = self.query_one("#train-picture", Static)
        view.display = bool(pictures)  # a lesson without a picture keeps its layout
        view.update(run_picture(pictures[-1], pictures[0]) if pictures else "")

    def _show_run(self, r: TrainingRun, reopened: bool = False) -> None:
        """Fill the panels with one run's outcome: its curve, checks, losses and notes."""
        planned = r.planned_steps or self.settings.steps
        self.pictures = list(r.pictures)
        self._show_picture(self.pictures)
        if r.history:  # the complete curve, including the last partial span
            plot = self.query_one("#train-plot", LossPlot)
            plot.reset(planned, r.history.every,
                       label=f"run #{r.run_id}" if reopened else "this run")
            plot.extend(r.history.log10_loss)
        if r.gradcheck:
            table = gradcheck_table(r.gradcheck.checks)
            self.query_one("#train-gradcheck", Static).update(table)
        self.query_one("#train-progress", ProgressBar).update(
            total=planned, progress=r.steps_done)
        # The live "time left" line would otherwise outlive the run it describes.
        final_loss = f" · last loss {r.last_loss:.4f}" if r.last_loss else ""
        self.query_one("#train-rate", Static).update(
            f"{spaced(r.steps_done)} steps done{final_loss}")
        summary = self._summary(r, planned) + self._verdict(r)
        if reopened:
            summary = Text.styled(f"Your last run, #{r.run_id} on {when(r.at)}: ",
                                  "bold") + summary
            summary.append("\nF5 runs again.", style=DIM)
        self._phase(summary)
        if r.train_loss is not None:
            self.query_one("#train-results", Static).update(results_view(r, self.pack.baseline))
        notes = [] if reopened else list(r.notes)
        if r.stdout:
            printed = r.stdout.splitlines()
            notes.append("your print output, first lines:\n  " + "\n  ".join(printed[:8]))
        self._show_notes(notes)

    @on(TrainingFailed)
    def _failed(self, message: TrainingFailed) -> None:
        self.running, self.cancelling = False, False
        self._phase(Text.styled(f"The evaluator could not run the training: {message.message}",
                                BAD))

    def _verdict(self, r: TrainingRun) -> Text:
        """Whether the run passes the exercise, and why not: the controller's rule, shown."""
        verdict = r.exercise
        if verdict.passed:
            return Text.styled("\n✓ This run passes the exercise.", GOOD)
        return Text.styled(f"\n✗ This run does not pass the exercise: {verdict.reason}.", WARN)

    def _summary(self, r: TrainingRun, planned: int) -> Text:
        done = r.steps_done
        # Only a run kept just now says so; one reopened from the store says when it ran.
        saved = f" Saved as run #{r.run_id}." if r.saved and r.run_id else ""
        rate = f" ({spaced(r.steps_per_s)} steps/s)" if r.steps_per_s else ""
        if r.status is RunStatus.FINISHED:
            device = r.settings.device or "?"
            return Text.styled(
                f"Finished: {spaced(done)} steps in {clock(r.train_s)}{rate} "
                f"on {device}.{saved}", GOOD)
        if r.status is RunStatus.CANCELLED:
            return Text.styled(f"Stopped after {spaced(done)} of {spaced(planned)} steps; "
                               f"the results below are for the network as it was then.{saved}",
                               WARN)
        failure = r.gradcheck.failure if r.gradcheck else None
        if r.status is RunStatus.DIVERGED and failure:
            return Text.styled(failure.message, BAD)
        if r.error is None:
            return Text.styled("error: the run failed", BAD)
        return Text.styled(f"{r.error.kind}: {r.error.message}", BAD)


NARROW = 100  # columns below which code and run take turns (as the app hides its sidebar)
SHORT = 32  # rows below which the plot is shorter
