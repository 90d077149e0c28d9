"""The backprop-tutor TUI: forward pass, editor, feedback, steps, all on one screen.

The app never imports torch. Checks go to the evaluator (a separate process that holds
torch) from thread workers that only post messages back, so the first frame paints while
torch is still loading and the screen stays responsive while a candidate runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, OptionList, TextArea
from textual.widgets.text_area import Selection

from tutor.config import Settings
from tutor.packs import Pack, Step, load_pack
from tutor.sandbox.client import EvaluatorNotReady
from tutor.source import size_problem
from tutor.ui.highlight import warm_up
from tutor.ui.messages import CheckFailed, CheckFinished, EvaluatorFailed, EvaluatorReady
from tutor.ui.progress_view import (
    differentiated_lines,
    is_done,
    is_enterable,
    position_in_exercise,
    remaining_before,
)
from tutor.ui.widgets.editor import CodeEditor
from tutor.ui.widgets.feedback import Feedback
from tutor.ui.widgets.forward import ForwardPanel
from tutor.ui.widgets.steps import StepList
from tutor.ui.widgets.topbar import TopBar

if TYPE_CHECKING:
    from tutor.progress import Store
    from tutor.sandbox.client import Evaluator

READY_POLL = 0.25  # seconds per wait for the evaluator, so shutdown is never held up
DRAFT_DELAY = 0.5  # seconds of quiet typing before the draft is saved
STEP_ACTIONS = frozenset(
    {"check", "hint", "reveal", "explain", "next_step", "previous_step", "toggle_steps"}
)
NARROW = 100  # below this many columns the steps sidebar starts hidden
SHORT = 32  # below this many rows the panels use their compact sizes


def _step_commands():
    # Imported when the palette first opens: textual.command is slow to import.
    from tutor.ui.commands import StepCommands

    return StepCommands


class TutorApp(App[int], inherit_bindings=False):
    """One learner, one pack: write each backward line and have it checked."""

    TITLE = "backprop-tutor"
    # Absolute, so subclasses defined elsewhere (benchmarks, tests) find it too.
    CSS_PATH = Path(__file__).with_name("app.tcss")
    COMMANDS = App.COMMANDS | {_step_commands}
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("ctrl+j,f5,ctrl+enter", "check", "Check", id="check",
                tooltip="Run your code and compare it with autograd"),
        Binding("f1", "hint", "Hint", id="hint", tooltip="Show the next hint for this step"),
        Binding("f2", "reveal", "Solution", id="reveal",
                tooltip="Show the reference solution (asks first)"),
        Binding("f3", "explain", "Explain", id="explain",
                tooltip="Read what this step is about"),
        Binding("ctrl+n,ctrl+down", "next_step", "Next", id="next_step",
                tooltip="Open the next step"),
        Binding("ctrl+up", "previous_step", "Prev", id="previous_step",
                tooltip="Open the previous step"),
        # Shown only in the help screen, so the footer fits 80 columns.
        Binding("f4", "toggle_steps", "Steps", id="toggle_steps", show=False,
                tooltip="Show or hide the steps sidebar"),
        Binding("f9,question_mark", "help", "Keys", id="help",
                tooltip="List every key (? works outside the editor)"),
        Binding("ctrl+q", "quit", "Quit", id="quit", priority=True, show=False,
                tooltip="Save your draft and leave"),
        # Not inherited (so the footer keeps this order); ctrl+c copies in the editor.
        Binding("ctrl+c", "help_quit", show=False, system=True),
    ]

    def __init__(
        self,
        settings: Settings,
        store: Store | None = None,
        evaluator: Evaluator | None = None,
    ) -> None:
        super().__init__()
        self.settings = settings
        self.pack: Pack = load_pack()
        # What we create we close; what the caller passes in stays the caller's.
        self._owns_store = store is None
        self._owns_evaluator = evaluator is None
        if store is None:
            from tutor.progress import Store

            store = Store.open(settings.data_home, self.pack)
        self.store: Store = store
        self._evaluator = evaluator
        self._evaluator_lock = threading.Lock()
        self.info: dict | None = None  # from evaluator.info(), once PyTorch is ready
        self.evaluator_error: str | None = None
        self.checking = False
        self.step: Step = self._opening_step()
        self._results: dict[str, tuple[dict, str | None]] = {}  # this session's last results
        self._loaded_text = ""  # the editor text as last loaded or saved
        self._editor_text = ""
        self._draft_timer: Timer | None = None
        self._step_started = time.monotonic()
        self._closing = False  # set at shutdown; worker threads stop waiting
        self._steps_chosen = False  # set once the learner shows or hides the sidebar

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield TopBar(id="topbar")
        with Horizontal(id="body"):
            yield StepList(self.pack, id="steps")
            with Vertical(id="work"):
                yield ForwardPanel(self.pack.forward_lines, id="forward")
                yield CodeEditor(id="editor")
                yield Feedback(id="feedback")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # The first frame goes out before anything else competes for the CPU: then the
        # evaluator starts (PyTorch loads in its own process) and highlighting warms up.
        self.call_after_refresh(self._after_first_frame)
        self._fit_to_terminal(self.size.width, self.size.height)
        self._open(self.step)
        self.query_one("#feedback", Feedback).show_status(
            Text("Loading PyTorch… you can start typing; checks run once it is ready.",
                 style="#7f8896"))
        for notice in self.store.notices:
            self.notify(str(notice), title="Progress", timeout=8)

    def _after_first_frame(self) -> None:
        self._start_evaluator()
        self.call_after_refresh(self._highlight_code)

    def _highlight_code(self) -> None:
        """Turn syntax highlighting on once the first frame is out (the lexer is slow to build)."""
        warm_up()
        editor = self.query_one(CodeEditor)
        editor.mark_error(editor.error_row)  # rebuilds the editor's highlights
        self.query_one(ForwardPanel).refresh_window()
        self.query_one(Feedback).rehighlight()

    def on_resize(self, event) -> None:
        self._fit_to_terminal(event.size.width, event.size.height)

    def _fit_to_terminal(self, width: int, height: int) -> None:
        self.set_class(height < SHORT, "-short")
        self.set_class(width < NARROW, "-narrow")
        steps = self.query_one("#steps", StepList)
        if not self._steps_chosen:
            # Until the learner toggles it, the sidebar gives way on narrow terminals.
            steps.display = width >= NARROW

    # -- evaluator ------------------------------------------------------------------------

    @property
    def evaluator(self) -> Evaluator:
        # Created on first use, from whichever worker thread gets there first.
        with self._evaluator_lock:
            if self._evaluator is None:
                from tutor.sandbox.client import Evaluator

                self._evaluator = Evaluator(self.settings)
            return self._evaluator

    @work(thread=True, exclusive=True, group="evaluator", exit_on_error=False)
    def _start_evaluator(self) -> None:
        try:
            evaluator = self.evaluator
            evaluator.start()
            # Wait in slices so this thread never outlives the app; a real failure raises.
            while not self._closing:
                try:
                    info = evaluator.info(timeout=READY_POLL)
                except EvaluatorNotReady:
                    continue
                self.post_message(EvaluatorReady(info))
                return
        except Exception as exc:  # any failure becomes a message on screen, never a traceback
            self.post_message(EvaluatorFailed(_describe(exc)))

    @work(thread=True, exclusive=True, group="check", exit_on_error=False)
    def _run_check(self, step_id: str, code: str, prior: dict[str, str]) -> None:
        try:
            result = self.evaluator.check(step_id, code, prior)
        except Exception as exc:
            self.post_message(CheckFailed(step_id, _describe(exc)))
            return
        self.post_message(CheckFinished(step_id, code, result))

    def on_evaluator_ready(self, message: EvaluatorReady) -> None:
        self.info = message.info
        self.query_one(TopBar).show_device(message.info.get("device", "?"), ready=True)
        self.query_one(ForwardPanel).set_shapes(message.info.get("lines", []))
        if not self.checking:
            self._show_idle()
        self.refresh_bindings()

    def on_evaluator_failed(self, message: EvaluatorFailed) -> None:
        self.evaluator_error = message.message
        self.query_one(TopBar).show_device("PyTorch unavailable", ready=False)
        self.checking = False
        self.query_one(Feedback).show_status(Text.assemble(
            ("The checker could not start: ", "bold #e06c75"), message.message))
        self.refresh_bindings()

    # -- steps ----------------------------------------------------------------------------

    def _opening_step(self) -> Step:
        """The step the learner was on last time; a finished pack reopens its last step."""
        try:
            step = self.pack.step(self.store.current_step())
        except (KeyError, TypeError):
            step = self.pack.steps[0]
        if step.is_training:
            step = self.pack.gradient_steps[-1]
        return step

    def goto_step(self, step_id: str) -> bool:
        """Open a step if it is not locked; say why when it is."""
        step = self.pack.step(step_id)
        statuses = self.store.statuses()
        if step.is_training:
            left = remaining_before(self.pack, step, statuses)
            if left:
                self.notify(f"Training opens once every gradient is in place: "
                            f"{len(left)} step{'s' if len(left) != 1 else ''} to go.",
                            title="Locked")
                self.query_one(StepList).follow(self.step.id)
                return False
            self._open_training(step)
            return True
        if not is_enterable(statuses.get(step.id, "locked")):
            before = [s for s in self.pack.steps[: self.pack.index(step.id)]
                      if not is_done(statuses.get(s.id, "locked")) and not s.is_training]
            reason = f"finish {before[0].title} first" if before else "finish the steps before it"
            self.notify(f"{step.title} is locked: {reason}.", title="Locked", severity="warning")
            self.query_one(StepList).follow(self.step.id)
            return False
        if step.id != self.step.id:
            self._leave_step()
            self.step = step
            self.store.set_current_step(step.id)
            self._open(step)
        return True

    def _open_training(self, step: Step) -> None:
        """Exercise 4 has a screen of its own; the editor starts from the learner's steps."""
        from tutor.training import training_code
        from tutor.ui.screens.training import TrainingScreen

        self._save_draft()
        code = self.store.draft(step.id) or training_code(self.pack, self.store.accepted_codes())
        self.push_screen(
            TrainingScreen(self.evaluator, self.store, self.pack, code),
            lambda _result: self._show_progress(),
        )

    def _leave_step(self) -> None:
        self._save_draft()
        elapsed = time.monotonic() - self._step_started
        if elapsed >= 1:
            self.store.add_time(self.step.id, elapsed)

    def _open(self, step: Step) -> None:
        self._step_started = time.monotonic()
        editor = self.query_one(CodeEditor)
        draft = self.store.draft(step.id)
        text = draft if draft is not None else step.template
        self._loaded_text = self._editor_text = text
        editor.load_text(text)
        editor.mark_error(None)
        _select_placeholder(editor)
        editor.border_title = f"Your backward code · {step.title}"
        feedback = self.query_one(Feedback)
        last = self._results.get(step.id)
        feedback.show_result(last[0] if last else None, last[1] if last else None)
        shown = self.store.hints_shown(step.id)
        feedback.show_hints(list(step.hints[:shown]), len(step.hints))
        statuses = self.store.statuses()
        revealed = statuses.get(step.id) == "revealed"
        feedback.show_solution(step.solution if revealed else None)
        if not self.checking and self.info is not None:
            self._show_idle()
        self._show_progress(statuses)
        self.query_one(StepList).follow(step.id)
        editor.focus()

    def _show_idle(self) -> None:
        """A reminder of what to do, until the step has been checked in this session."""
        nothing_yet = self.step.id not in self._results
        self.query_one(Feedback).show_status(
            Text("Write the gradient in the editor, then press ^j or F5 to compare it with "
                 "autograd. F1 gives a hint.", style="#7f8896") if nothing_yet else ""
        )

    def _show_progress(self, statuses: dict[str, str] | None = None) -> None:
        """Refresh everything that depends on statuses: sidebar, forward marks, top bar."""
        statuses = statuses if statuses is not None else self.store.statuses()
        step = self.step
        self.query_one(StepList).show(statuses, step.id)
        self.query_one(ForwardPanel).show(
            step.exercise, set(step.lines), differentiated_lines(self.pack, statuses)
        )
        exercise = self.pack.exercise(step.exercise)
        x, n = position_in_exercise(self.pack, step)
        self.query_one(TopBar).show_place(
            # The numbers first: on a narrow terminal the title is what gets truncated.
            f"Exercise {exercise.number} · step {x}/{n} · {exercise.title}"
        )
        self.refresh_bindings()

    def _neighbour(self, offset: int) -> Step | None:
        index = self.pack.index(self.step.id) + offset
        if 0 <= index < len(self.pack.steps):
            return self.pack.steps[index]
        return None

    @on(OptionList.OptionSelected, "#steps")
    def _step_chosen(self, event: OptionList.OptionSelected) -> None:
        if event.option.id:
            self.goto_step(event.option.id)

    # -- drafts ---------------------------------------------------------------------------

    @on(TextArea.Changed, "#editor")
    def _editor_changed(self, event: TextArea.Changed) -> None:
        # Mirrored here because at shutdown the widgets are gone before the last draft save.
        self._editor_text = event.text_area.text
        if self._draft_timer is not None:
            self._draft_timer.stop()
        self._draft_timer = self.set_timer(DRAFT_DELAY, self._save_draft)

    def _save_draft(self) -> None:
        if self._draft_timer is not None:
            self._draft_timer.stop()
            self._draft_timer = None
        text = self._editor_text
        if text != self._loaded_text:
            self.store.save_draft(self.step.id, text)
            self._loaded_text = text

    # -- actions --------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # The step keys belong to the main screen; dialogs and the training screen have theirs.
        if action in STEP_ACTIONS and len(self.screen_stack) > 1:
            return False
        # None greys the key out in the footer: one check at a time, and only with a checker.
        if action == "check" and (self.checking or self.evaluator_error is not None):
            return None
        if action == "next_step" and self._neighbour(1) is None:
            return None
        if action == "previous_step" and self._neighbour(-1) is None:
            return None
        return True

    def action_check(self) -> None:
        if self.checking:
            return
        self._save_draft()
        code = self.query_one(CodeEditor).text
        if too_big := size_problem(code):  # refused, not recorded, as on the command line
            return self.notify(too_big, title="Not checked", severity="error")
        self.checking = True
        self.refresh_bindings()
        self.query_one(CodeEditor).mark_error(None)
        waiting = "" if self.info else " (waiting for PyTorch to finish loading)"
        self.query_one(Feedback).show_status(
            Text(f"Checking {self.step.title}…{waiting}", style="#e5c07b"))
        self._run_check(self.step.id, code, dict(self.store.accepted_codes()))

    def on_check_finished(self, message: CheckFinished) -> None:
        self.checking = False
        before = self.store.statuses()
        try:
            self.store.record_attempt(message.step_id, message.code, message.result)
        except Exception as exc:
            self.notify(f"Could not save this attempt: {_describe(exc)}", severity="error")
        after = self.store.statuses()
        unlocked = [s for s in self.pack.steps
                    if before.get(s.id) == "locked" and after.get(s.id) != "locked"]
        note = None
        if unlocked and not unlocked[0].is_training:
            note = unlocked[0].title
        elif unlocked:
            note = f"{unlocked[0].title} (every gradient is in place)"
        self._results[message.step_id] = (message.result, note)
        if message.step_id == self.step.id:
            feedback = self.query_one(Feedback)
            feedback.show_result(message.result, note)
            self._show_idle()
            self._point_at_error(message.result.get("error"))
        self._show_progress(after)

    def on_check_failed(self, message: CheckFailed) -> None:
        self.checking = False
        self.query_one(Feedback).show_status(Text.assemble(
            ("The checker failed: ", "bold #e06c75"), message.message,
            ("\nYour code was not graded; try again.", "#7f8896")))
        self.refresh_bindings()

    def _point_at_error(self, error: dict | None) -> None:
        """Put the editor cursor on the reported line and column, and tint the line."""
        if not error or not error.get("line"):
            return
        editor = self.query_one(CodeEditor)
        row = min(max(int(error["line"]) - 1, 0), editor.document.line_count - 1)
        col = max(int(error.get("col") or 1) - 1, 0)
        col = min(col, len(editor.document.get_line(row)))
        editor.move_cursor((row, col))
        editor.mark_error(row)
        editor.focus()

    def action_hint(self) -> None:
        step = self.step
        total = len(step.hints)
        if self.store.hints_shown(step.id) >= total:
            self.notify(f"All {total} hints for this step are shown below.", title="Hints")
        else:
            self.store.show_hint(step.id)
        shown = self.store.hints_shown(step.id)
        feedback = self.query_one(Feedback)
        feedback.show_hints(list(step.hints[:shown]), total)
        feedback.scroll_to_part("hints")

    def action_reveal(self) -> None:
        step = self.step
        if is_done(self.store.statuses().get(step.id, "locked")):
            # Nothing left to lose: a finished step shows the reference without asking.
            self._show_solution(step)
            return

        def decided(reveal: bool | None) -> None:
            if reveal and step.id == self.step.id:
                self.store.reveal(step.id)
                self._show_solution(step)

        from tutor.ui.screens.confirm import ConfirmReveal

        self.push_screen(ConfirmReveal(step.title), decided)

    def _show_solution(self, step: Step) -> None:
        feedback = self.query_one(Feedback)
        feedback.show_solution(step.solution)
        feedback.scroll_to_part("solution")
        self._show_progress()

    def action_explain(self) -> None:
        from tutor.ui.screens.explain import ExplainScreen

        self.push_screen(ExplainScreen(self.pack.exercise(self.step.exercise), self.step))

    def action_help(self) -> None:
        from tutor.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def action_next_step(self) -> None:
        step = self._neighbour(1)
        if step is not None:
            self.goto_step(step.id)

    def action_previous_step(self) -> None:
        step = self._neighbour(-1)
        if step is not None:
            self.goto_step(step.id)

    def action_toggle_steps(self) -> None:
        self._steps_chosen = True
        steps = self.query_one(StepList)
        steps.display = not steps.display

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("Check", "Run your code and compare it with autograd",
                            self.action_check)
        yield SystemCommand("Hint", "Show the next hint for this step", self.action_hint)
        yield SystemCommand("Solution", "Show the reference solution (asks first)",
                            self.action_reveal)
        yield SystemCommand("Explain", "Read what this step is about", self.action_explain)
        yield SystemCommand("Next step", "Open the next step", self.action_next_step)
        yield SystemCommand("Previous step", "Open the previous step",
                            self.action_previous_step)
        yield SystemCommand("Steps sidebar", "Show or hide the list of steps",
                            self.action_toggle_steps)
        yield SystemCommand("Keys", "List every key", self.action_help)
        yield from super().get_system_commands(screen)

    # -- shutdown -------------------------------------------------------------------------

    def on_unmount(self) -> None:
        self._closing = True
        try:
            self._leave_step()
        finally:
            if self._owns_evaluator and self._evaluator is not None:
                self._evaluator.close()
            if self._owns_store:
                self.store.close()


def _select_placeholder(editor: CodeEditor) -> None:
    """Select the template's first `...`, so typing replaces it; else go to the end."""
    for row in range(editor.document.line_count):
        col = editor.document.get_line(row).find("...")
        if col >= 0:
            editor.selection = Selection((row, col), (row, col + 3))
            return
    last = editor.document.line_count - 1
    editor.move_cursor((last, len(editor.document.get_line(last))))


def _describe(exc: BaseException) -> str:
    """A one-line account of an exception, for the screen (no traceback)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_app(settings: Settings) -> int:
    """Open the learner's progress, start the checker and run the TUI until they quit."""
    from tutor.progress import Store, StoreError
    from tutor.sandbox.client import Evaluator

    pack = load_pack()
    try:
        store = Store.open(settings.data_home, pack)
    except StoreError as exc:
        print(f"backprop-tutor: {exc}")
        return 1
    evaluator = Evaluator(settings)
    try:
        app = TutorApp(settings, store=store, evaluator=evaluator)
        app.run()
    finally:
        evaluator.close()
        store.close()
    return app.return_code or 0
