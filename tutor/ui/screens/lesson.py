"""The lesson screen: forward pass, editor, feedback and steps, with the keys that act on them.

The screen owns everything about the open step: its widgets, its bindings and actions (check,
hint, solution, scratch run, template, moving between steps), the draft in the editor, this
session's results, and the moments when an exercise is done. What outlives a screen stays on
the app: settings, the lesson controller (pack, progress, evaluator), active time, quitting.
Every rule (what is locked, what a check unlocks or completes, when a solution needs asking
for) is the controller's (`tutor.session.controller.Lesson`); this screen shows what it says.

Checks and scratch runs go to the evaluator from one long-lived thread (`tutor.ui.runner`) that
only posts messages back to this screen; the widgets change in the message handlers, on the
app's thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import OptionList, TextArea
from textual.widgets.text_area import Selection

from tutor.pack.flow import gradient
from tutor.pack.model import Exercise, Step
from tutor.session.controller import (
    Celebration,
    Lesson,
    differentiated_lines,
    position_in_lesson,
)
from tutor.source import size_problem
from tutor.ui.highlight import warm_up
from tutor.ui.palette import BAD, DIM, WARN
from tutor.ui.runner import Runner
from tutor.ui.widgets.editor import CodeEditor
from tutor.ui.widgets.feedback import Feedback
from tutor.ui.widgets.forward import ForwardPanel
from tutor.ui.widgets.topbar import TopBar
from tutor.values.results import CheckError, CheckResult, ScratchResult, Status

if TYPE_CHECKING:
    from tutor.ui.host import LessonHost
    from tutor.ui.widgets.steps import StepList

DRAFT_DELAY = 0.5  # seconds of quiet typing before the draft is saved
NARROW = 100  # below this many columns the steps sidebar starts hidden
DONE_WORDS = {str(status): f"{status.mark} {words}" for status, words in (
    (Status.EXACT, "Done: your code matched autograd bit for bit."),
    (Status.PASSED, "Done: your code matched autograd within float32 rounding."),
    (Status.SKIPPED, "Done: your values matched autograd's, but without the line's own rule; "
                     "write the rule to earn ✓."),
    (Status.REVEALED, "Done by revealing the solution; a passing check of your own version "
                      "is still recorded."))}


# What the checks' thread (`tutor.ui.runner`) posts back to this screen: it never touches a
# widget; Textual delivers these on the app's own thread.


class CheckFinished(Message):
    """A candidate was graded; `result` is the evaluator's typed result."""

    def __init__(self, step_id: str, code: str, result: CheckResult) -> None:
        super().__init__()
        self.step_id = step_id
        self.code = code
        self.result = result


class CheckFailed(Message):
    """The evaluator itself failed while checking (not the learner's code)."""

    def __init__(self, step_id: str, message: str) -> None:
        super().__init__()
        self.step_id = step_id
        self.message = message


class ScratchFinished(Message):
    """A run without grading came back; `result` has stdout, error and what the code defined."""

    def __init__(self, step_id: str, result: ScratchResult) -> None:
        super().__init__()
        self.step_id = step_id
        self.result = result


def idle_text(step: Step, status: str = "unlocked") -> Text:
    """What the empty feedback panel says before the step's first check in this session: what
    to do on an open step, how it went on a finished one."""
    if status in DONE_WORDS:
        return Text.styled(f"{DONE_WORDS[status]} ^j checks the editor's code again; ^n goes on.",
                           DIM)
    if step.function is None:
        return Text.styled(
            "Write the gradient in the editor, then press ^j or F5 to compare it with "
            "autograd. F1 gives a hint.", DIM)
    return Text.styled(
        f"Write the function in the editor, then press ^j or F5: the tutor calls it as "
        f"`{step.function.call}`, on the lesson's tensors and then at freshly drawn "
        "sizes. F1 gives a hint.", DIM)


# Seconds between looks at the progress for steps checked outside the tutor.
OUTSIDE_POLL = 2.0


class LessonScreen(Screen[None]):
    """One step at a time: write its backward lines and have them checked against autograd."""

    BINDINGS = [
        Binding("ctrl+j,f5,ctrl+enter", "check", "Check", id="check",
                tooltip="Run your code and compare it with autograd"),
        Binding("f1", "hint", "Hint", id="hint", tooltip="Show the next hint for this step"),
        Binding("f2", "reveal", "Solution", id="reveal",
                tooltip="Show the reference solution (asks first unless the step is solved)"),
        Binding("ctrl+r", "scratch", "Run", id="scratch",
                tooltip="Run your code without grading: its print output and the shapes it "
                        "makes; no attempt is counted"),
        Binding("f3", "explain", "Explain", id="explain",
                tooltip="Read what this step and its exercise are about"),
        Binding("ctrl+n,ctrl+down", "next_step", "Next", id="next_step",
                tooltip="Open the next step"),
        Binding("ctrl+up", "previous_step", "Prev", id="previous_step",
                tooltip="Open the previous step"),
        # Shown only in the help screen, so the footer fits 80 columns.
        Binding("ctrl+t", "reset_step", "Template", id="reset_step", show=False,
                tooltip="Put the step's template back in the editor (ctrl+z undoes it)"),
        Binding("f4", "toggle_steps", "Steps", id="toggle_steps", show=False,
                tooltip="Show or hide the steps sidebar"),
    ]

    def __init__(self, lesson: Lesson, *, greet: bool = True) -> None:
        """`greet=False` skips the welcome and the exercise introductions."""
        super().__init__(id="lesson")
        self.lesson = lesson
        self.pack = lesson.pack
        self.greet = greet
        self.checking = False  # a check is under way
        self.scratching = False  # a run without grading is under way
        # A check or a run asked for while another was under way: (action, step id). It starts
        # when the running one ends, on the code in the editor then, so the panel always ends
        # on the verdict of the code on screen.
        self._queued: tuple[str, str] | None = None
        self._unrecorded: list[CheckFinished] = []  # verdicts on screen, attempts not yet saved
        self.step: Step = self._opening_step()
        # This session's last result per step: the result, the step it unlocked, and whether
        # it passed a step that stays revealed.
        self.results: dict[str, tuple[dict, str | None, bool]] = {}
        self._loaded_text = ""  # the editor text as last loaded or saved
        self._editor_text = ""
        self._draft_timer: Timer | None = None
        self._steps_chosen = False  # set once the learner shows or hides the sidebar
        # Every step's status as last read from the store: the verdict is shown before the
        # attempt is written, with what it will unlock worked out from these.
        self._statuses = lesson.statuses()
        self._milestones = lesson.milestones()  # for completion moments
        self._runner = Runner("lesson-checks")  # checks and scratch runs, one at a time

    @property
    def tutor(self) -> LessonHost:
        """The app, as this screen needs it: the evaluator's state and the active-time clock."""
        return cast("LessonHost", self.app)

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # In the first frame the steps sidebar (filled only after it: laying out every step's
        # option would be its largest cost) and the key bar (whose keys come after it too) are
        # empty stand-ins styled like them: the real widgets' own styles would cost the first
        # frame more than all they show in it. `_complete_layout` swaps them in right after.
        yield TopBar(id="topbar")
        with Horizontal(id="body"):
            yield _StandIn(id="steps-soon")
            with Vertical(id="work"):
                yield ForwardPanel(self.pack.forward_lines, id="forward")
                yield CodeEditor(id="editor")
                yield Feedback(id="feedback")
        yield _StandIn(id="keys-soon")

    def on_mount(self) -> None:
        # The first frame goes out before anything else competes for the CPU: then the
        # evaluator starts (PyTorch loads in its own process) and highlighting warms up.
        self.call_after_refresh(self._after_first_frame)
        self.fit_sidebar(self.app.size.width)
        self.tutor.count_time_on(self.step.id)
        self._open(self.step)
        self.query_one(Feedback).show_status(
            Text.styled("Loading PyTorch… you can start typing; checks run once it is ready.",
                        DIM))

    def _after_first_frame(self) -> None:
        self.set_interval(OUTSIDE_POLL, self._outside_changes)
        self.tutor.start_evaluator()
        self.call_later(self._complete_layout)
        self._greet()
        self.call_after_refresh(self._highlight_code)

    async def _complete_layout(self) -> None:
        """The steps sidebar and the key bar in place of their stand-ins (see `compose`), in one
        update of the screen."""
        # Imported here, after the first frame, which they are not part of: importing them
        # (Textual's footer most of all) would cost it more than it shows.
        from tutor.ui.widgets.footer import TutorFooter
        from tutor.ui.widgets.steps import StepList

        steps = StepList(self.pack, id="steps")
        steps.display = self.query_one("#steps-soon").display
        async with self.batch():
            await self.query("#steps-soon, #keys-soon").remove()
            await self.query_one("#body").mount(steps, before="#work")
            await self.mount(TutorFooter())
        self._show_progress(self._statuses)  # fills the sidebar, and the key bar's keys

    def _greet(self) -> None:
        """The welcome on the first launch, else the open exercise's introduction the first
        time: over the lesson's first frame, not in it (Markdown is slow to start)."""
        if self.greet and self.lesson.first_time("welcomed"):
            first = self.pack.exercises[0]
            self.lesson.first_time(f"intro.{first.number}")  # the welcome includes it
            self.show_welcome()
        elif training := self.lesson.reopens_training():
            # Left from the training screen: back to it, over the last checked step.
            self._open_training(training)
        else:
            self._introduce(self.step.exercise)

    def _highlight_code(self) -> None:
        """Turn syntax highlighting on once the first frame is out (the lexer is slow to build)."""
        warm_up()
        editor = self.query_one(CodeEditor)
        editor.mark_error(editor.error_row)  # rebuilds the editor's highlights
        self.query_one(ForwardPanel).refresh_window()
        self.query_one(Feedback).rehighlight()

    def _sidebar(self) -> Widget:
        """The steps sidebar, or its stand-in in the first frame."""
        return self.query("#steps, #steps-soon").first()

    def _steps(self) -> StepList | None:
        """The steps sidebar, once it is in place (see `compose`)."""
        return cast("StepList | None", next(iter(self.query("#steps")), None))

    def fit_sidebar(self, width: int) -> None:
        # Until the learner toggles it, the sidebar gives way on narrow terminals.
        if not self._steps_chosen:
            self._sidebar().display = width >= NARROW

    def _fit_to_feedback(self) -> None:
        """Once the feedback has something to read (a result, hints, a solution), it takes the
        room: the forward pass shrinks to the lines around the current one (see app.tcss)."""
        self.set_class(self.query_one("#feedback", Feedback).has_content, "-reading")

    def back_to_editor(self, _result: object = None) -> None:
        """Focus the editor, unless another screen has come up meanwhile (a dialog's callback)."""
        if self.is_active:
            self.query_one("#editor", CodeEditor).focus()

    def _introduce(self, exercise_number: int) -> None:
        """Show an exercise's introduction the first time one of its steps opens."""
        if not self.greet:
            return
        key = f"intro.{exercise_number}"
        exercise = self.pack.exercise(exercise_number)
        if not exercise.intro.strip() or not self.lesson.first_time(key):
            return
        from tutor.ui.screens.welcome import IntroScreen

        self.app.push_screen(IntroScreen(exercise), self.back_to_editor)

    def show_welcome(self) -> None:
        from tutor.ui.screens.welcome import WelcomeScreen

        self.app.push_screen(WelcomeScreen(self.lesson.progress_path, self.pack),
                             self.back_to_editor)

    # -- the evaluator, as the app reports it -------------------------------------------------

    @property
    def busy(self) -> bool:
        """A check or a run without grading is under way (time spent watching it counts)."""
        return self.checking or self.scratching

    def evaluator_ready(self, info: dict) -> None:
        self.query_one(TopBar).show_device(info.get("device", "?"), ready=True)
        self.query_one(ForwardPanel).set_shapes(info.get("lines", []))
        if not self.checking:
            self._show_idle()
        self.refresh_bindings()

    def evaluator_failed(self, message: str) -> None:
        self.query_one(TopBar).show_device("PyTorch unavailable", ready=False)
        self.checking = False
        self.query_one(Feedback).show_status(Text.assemble(
            ("The checker could not start: ", BAD), message))
        self.refresh_bindings()

    # -- steps ----------------------------------------------------------------------------

    def _opening_step(self) -> Step:
        return self.lesson.opening_step()

    def goto_step(self, step_id: str) -> bool:
        """Open a step if it is not locked; say why when it is."""
        step = self.pack.step(step_id)
        locked = self.lesson.locked_reason(step.id)
        if locked is not None:
            self.notify(locked, title="Locked", severity="warning")
            if steps := self._steps():
                steps.follow(self.step.id)
            return False
        if step.kind.trained:
            self._open_training(step)
            return True
        if step.id != self.step.id:
            self.leave_step()
            self.step = step
            self.tutor.count_time_on(step.id)
            self.lesson.open_step(step.id)
            self._open(step)
            self._introduce(step.exercise)
        return True

    def _open_training(self, step: Step) -> None:
        """The training exercise has a screen of its own; its editor starts from the learner's
        accepted steps."""
        from tutor.ui.screens.training import TrainingScreen

        self._save_draft()
        self.tutor.count_time_on(step.id)
        # Where the learner is, so that leaving the tutor from this screen reopens it.
        self.lesson.open_step(step.id)
        code = self.lesson.training_code()

        def closed(_result: object) -> None:
            self.lesson.open_step(self.step.id)
            self.tutor.count_time_on(self.step.id)
            self._show_progress()
            self.back_to_editor()

        self.app.push_screen(TrainingScreen(self.lesson, code),
                             closed)
        self._introduce(step.exercise)

    def leave_step(self) -> None:
        """Save what the learner leaves behind: the draft, where the cursor was, and the last
        check's attempt if it is not saved yet."""
        self._save_attempts()
        self._save_draft()
        self._remember_cursor()

    def _remember_cursor(self) -> None:
        try:
            row, col = self.query_one("#editor", CodeEditor).cursor_location
            self.lesson.remember_cursor(self.step.id, row, col)
        except Exception as exc:  # at shutdown the editor is gone; a cursor is not worth more
            self.log.warning(f"could not save the cursor: {exc}")

    def _restore_cursor(self, editor: CodeEditor, step: Step) -> bool:
        """Put the cursor back where the learner left it in this step's draft."""
        saved = self.lesson.cursor(step.id)
        if saved is None:
            return False
        row, col = saved
        row = min(max(row, 0), editor.document.line_count - 1)
        col = min(max(col, 0), len(editor.document.get_line(row)))
        editor.move_cursor((row, col), center=True)
        return True

    def _open(self, step: Step) -> None:
        editor = self.query_one("#editor", CodeEditor)
        draft = self.lesson.draft(step.id)
        text = draft if draft is not None else step.template
        self._loaded_text = self._editor_text = text
        editor.load_text(text)
        editor.mark_error(None)
        if draft is None or not self._restore_cursor(editor, step):
            _select_placeholder(editor)
        editor.border_title = f"Your backward code · {step.title}"
        feedback = self.query_one(Feedback)
        last = self.results.get(step.id)
        if last:
            feedback.show_result(*last)
        else:
            feedback.show_result(None)
        hints = self.lesson.next_hint(step.id, count=False)
        feedback.show_hints(list(hints.shown), hints.total)
        statuses = self._statuses = self.lesson.statuses()
        revealed = statuses.get(step.id) == "revealed"
        feedback.show_solution(step.solution if revealed else None)
        if not self.checking and self.tutor.info is not None:
            self._show_idle()
        self._show_progress(statuses)
        self._fit_to_feedback()
        if steps := self._steps():
            steps.follow(step.id)
        editor.focus()

    def _outside_changes(self) -> None:
        """Steps checked from another terminal (`check`, `watch`, a notebook) while the tutor is
        open: the sidebar, the forward marks and the top bar follow, and a change to the open
        step is said."""
        if self.checking:
            return  # our own check's record is on its way: it redraws all this itself
        try:
            statuses = self.lesson.statuses()
        except Exception:  # noqa: BLE001 - progress unreadable for a moment: next time
            return
        if statuses == self._statuses:
            return
        before = self._statuses.get(self.step.id)
        self._show_progress(statuses)
        now = statuses.get(self.step.id)
        if now != before and now is not None:
            self.notify(f"{self.step.title} is now {now}: it was checked outside the tutor.",
                        title="Progress")

    def _show_idle(self) -> None:
        """A reminder of what to do, until the step has been checked in this session."""
        feedback = self.query_one(Feedback)
        nothing_yet = self.step.id not in self.results and not feedback.has_content
        status = str(self._statuses.get(self.step.id, "unlocked"))
        feedback.show_status(idle_text(self.step, status) if nothing_yet else "")

    def _show_progress(self, statuses: dict[str, str] | None = None) -> None:
        """Refresh everything that depends on statuses: sidebar, forward marks, top bar."""
        statuses = statuses if statuses is not None else self.lesson.statuses()
        self._statuses = statuses
        step = self.step
        if steps := self._steps():
            steps.show(statuses, step.id)
        self.query_one(ForwardPanel).show(
            step.exercise, set(step.lines), differentiated_lines(self.pack, statuses)
        )
        exercise = self.pack.exercise(step.exercise)
        x, n = position_in_lesson(self.pack, step)
        self.query_one(TopBar).show_place(
            # The numbers first: on a narrow terminal the title is what gets truncated. Steps
            # are counted over the lesson, as `backprop-tutor list` numbers them.
            f"Exercise {exercise.number} · step {x} of {n} · {exercise.title}"
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
            self.lesson.save_draft(self.step.id, text)
            self._loaded_text = text
            self._remember_cursor()

    def save_before_quitting(self) -> None:
        """Keep the editor's text as it is now (keys typed just before quitting included)."""
        self._editor_text = self.query_one("#editor", CodeEditor).text
        self.leave_step()

    # -- checking -------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # Behind a dialog the step keys do nothing; the footer that shows through says so by
        # leaving them out.
        if not self.is_active:
            return False
        # None greys the key out in the footer: only with a checker. While a run is under way
        # the key still works: it queues the next one.
        if action in ("check", "scratch") and self.tutor.evaluator_error is not None:
            return None
        if action == "next_step" and self._neighbour(1) is None:
            return None
        if action == "previous_step" and self._neighbour(-1) is None:
            return None
        return True

    def action_check(self) -> None:
        code = self._begin_run("check", "Not checked", f"Checking {self.step.title}…")
        if code is not None:
            self.checking = True
            self._run_check(self.step.id, code, self.lesson.prior())
            self._save_draft()  # while the check runs

    def _begin_run(self, action: str, refused: str, status: str) -> str | None:
        """What a check and a scratch run share before they start: the size limit (refused,
        never recorded, as on the command line), the old error mark and the old result gone,
        and a status line. Returns the code to run, or None when nothing may start now: while
        another run is under way this one is queued behind it. The draft is saved either way;
        when a run starts, the caller saves it once the run is on its way."""
        if self.busy:
            self._save_draft()
            self._queued = (action, self.step.id)
            self.query_one(Feedback).show_status(Text.styled(
                       f"{status} (the run under way finishes first, then this code is run)",
                       WARN))
            return None
        editor = self.query_one("#editor", CodeEditor)
        code = editor.text
        if too_big := size_problem(code):
            self._save_draft()
            self.notify(too_big, title=refused, severity="error")
            return None
        if editor.error_row is not None:  # unmarking rebuilds the highlights: only if marked
            editor.mark_error(None)
        waiting = "" if self.tutor.info else " (waiting for PyTorch to finish loading)"
        feedback = self.query_one(Feedback)
        feedback.show_result(None)  # the old verdict is not about this code
        feedback.show_status(Text.styled(f"{status}{waiting}", WARN))
        # The panels keep their sizes while the check runs: a re-layout now and another one
        # when the verdict comes would cost more than the check itself.
        return code

    def on_unmount(self) -> None:
        self._runner.close()

    def _run_queued(self) -> bool:
        """Start the run asked for while the last one was under way, if it is still for the
        open step. Returns whether one started."""
        queued, self._queued = self._queued, None
        if queued is None or queued[1] != self.step.id:
            return False
        getattr(self, f"action_{queued[0]}")()
        return True

    def _run_check(self, step_id: str, code: str, prior: dict[str, str]) -> None:
        def check() -> None:  # on the runner's thread: it only posts messages back
            try:
                result = self.lesson.evaluate(step_id, code, prior)
            except Exception as exc:
                self.post_message(CheckFailed(step_id, describe(exc)))
                return
            self.post_message(CheckFinished(step_id, code, result))

        self._runner.submit(check)

    def on_check_finished(self, message: CheckFinished) -> None:
        """Show the verdict at once; record the attempt once it is on screen (a durable write
        waits for the disk), then bring the statuses up to date."""
        self.checking = False
        sid, result = message.step_id, message.result
        superseded = self._queued is not None and self._queued[1] == sid
        preview = self.lesson.preview(sid, result, self._statuses)
        note, revealed = preview.note, preview.revealed
        self.results[sid] = (result, note, revealed)
        if sid == self.step.id and not superseded:
            feedback = self.query_one(Feedback)
            feedback.show_result(result, note, revealed)
            self._show_idle()
            self._fit_to_feedback()
            self._point_at_error(result.error)
        self._unrecorded.append(message)
        self.call_after_refresh(self._record)  # the attempt is written once this is painted
        self._paint_now()

    def _paint_now(self) -> None:
        """Lay out and paint the whole screen at once, rather than on the next tick of Textual's
        frame timer: after the "Checking…" repaint, that tick comes 10 to 25 ms after the
        verdict's handler, longer than most checks take.

        Textual has no public call for this, so it is the UI's one use of Textual's private
        names (`_dirty_widgets`, `_on_timer_update`: what the tick itself does), allowed by
        tests/test_layers.py here only. If an upgrade takes them away, the screen is refreshed
        the public way and painted on the next tick. The panels' own refreshes, which reach the
        screen only after this handler, then cost one more (partial) paint."""
        if not self.is_current:
            return  # a dialog is on top: the timer paints this screen when it shows again
        try:
            dirty, tick = self._dirty_widgets, self._on_timer_update
        except AttributeError:  # a later Textual: the public way, painted on the next tick
            self.refresh(layout=True)
            return
        self.refresh(repaint=False, layout=True)
        dirty.add(self)  # all of it, in the layout's one pass
        tick()

    def _record(self) -> None:
        """Save the attempts whose verdicts are on screen, then bring the statuses up to date
        (the controller's, computed once with the last record)."""
        after = self._save_attempts()
        if after is None:
            return
        self._show_progress(after)
        if not self._run_queued():
            self._celebrate(after)

    def _save_attempts(self) -> dict[str, Status] | None:
        """Record the checks whose verdicts are shown but not saved yet; whether there were any.
        Also on leaving a step or the app, so a verdict shown just before is never lost. Returns
        the statuses after the last one, or None when there was none to save."""
        after = None
        while self._unrecorded:
            message = self._unrecorded.pop(0)
            outcome = self.lesson.record(message.step_id, message.code, message.result)
            after = outcome.statuses
            if outcome.problem:
                self.notify(f"Could not save this attempt: {outcome.problem}", severity="error")
        return after

    def on_check_failed(self, message: CheckFailed) -> None:
        # A failed scratch run reports here too: either way nothing is under way any more.
        self.checking = self.scratching = False
        self.query_one(Feedback).show_status(Text.assemble(
            ("The checker failed: ", BAD), message.message,
            ("\nYour code was not graded; try again.", DIM)))
        self.refresh_bindings()
        self._run_queued()

    def _point_at_error(self, error: CheckError | None) -> None:
        """Put the editor cursor on the reported line and column, and tint the line."""
        if not error or not error.line:
            return
        editor = self.query_one("#editor", CodeEditor)
        row = min(max(error.line - 1, 0), editor.document.line_count - 1)
        col = max((error.col or 1) - 1, 0)
        col = min(col, len(editor.document.get_line(row)))
        editor.move_cursor((row, col))
        editor.mark_error(row)
        editor.focus()

    # -- hints and the solution -----------------------------------------------------------

    def action_hint(self) -> None:
        step = self.step
        hints = self.lesson.next_hint(step.id)
        if not hints.new:
            self.notify(f"All {hints.total} hints for this step are shown below.", title="Hints")
        if hints.problem:
            self.notify(f"This hint was not counted: {hints.problem}", title="Hints",
                        severity="warning")
        feedback = self.query_one(Feedback)
        feedback.show_hints(list(hints.shown), hints.total)
        self._fit_to_feedback()
        feedback.scroll_to_part("hints")

    def action_reveal(self) -> None:
        step = self.step
        if not self.lesson.can_reveal(step.id):
            self.notify("This copy of the lesson holds no reference solutions: your course's "
                        "grader keeps them. The hints (F1) are all here but the last.",
                        title="No solution to show")
            return
        if not self.lesson.reveal_needs_asking(step.id):
            self._show_solution(step, revealed=self.lesson.solution_shown(step.id))
            return

        def decided(reveal: bool | None) -> None:
            if reveal and step.id == self.step.id:
                self.lesson.reveal(step.id)
                self._show_solution(step, revealed=True)
                self._celebrate(self.lesson.statuses())

        from tutor.ui.screens.confirm import ConfirmReveal

        self.app.push_screen(ConfirmReveal(step.title), decided)

    def _show_solution(self, step: Step, revealed: bool) -> None:
        feedback = self.query_one(Feedback)
        feedback.show_solution(step.solution, revealed)
        self._show_idle()
        self._fit_to_feedback()
        feedback.scroll_to_part("solution")
        self._show_progress()

    # -- a run without grading ------------------------------------------------------------

    def action_scratch(self) -> None:
        code = self._begin_run("scratch", "Not run", "Running your code without grading…")
        if code is not None:
            self.scratching = True
            self._run_scratch(self.step.id, code, self.lesson.prior())
            self._save_draft()

    def _run_scratch(self, step_id: str, code: str, prior: dict[str, str]) -> None:
        def scratch() -> None:  # on the runner's thread, like a check
            try:
                result = self.lesson.scratch(step_id, code, prior)
            except Exception as exc:
                self.post_message(CheckFailed(step_id, describe(exc)))
                return
            self.post_message(ScratchFinished(step_id, result))

        self._runner.submit(scratch)

    def on_scratch_finished(self, message: ScratchFinished) -> None:
        self.scratching = False
        self.refresh_bindings()
        if self._run_queued() or message.step_id != self.step.id:
            return
        feedback = self.query_one(Feedback)
        feedback.show_scratch(message.result, self._expected_shapes())
        self._show_idle()
        self._fit_to_feedback()
        feedback.scroll_to_part("scratch")
        self._point_at_error(message.result.error)
        self._paint_now()

    def _expected_shapes(self) -> dict[str, list[int] | None]:
        """The shape each gradient of the open step must have, where it is known: forward
        tensors from the evaluator's shapes, parameters from this session's last check."""
        lines = (self.tutor.info or {}).get("lines", [])
        shapes = {line["target"]: line.get("shape") for line in lines}
        last = self.results.get(self.step.id)
        for check in last[0].checks if last else []:
            shapes.setdefault(check.tensor, check.expected_shape)
        if not self.step.kind.of_forward_tensors:
            return {}  # its arguments' shapes change from case to case
        return {gradient(t): shapes[t] for t in self.step.checks if shapes.get(t) is not None}

    def action_reset_step(self) -> None:
        """The step's template back in the editor, as one edit that ctrl+z takes back."""
        editor = self.query_one("#editor", CodeEditor)
        if editor.text == self.step.template:
            return
        editor.replace(self.step.template, editor.document.start, editor.document.end,
                       maintain_selection_offset=False)
        _select_placeholder(editor)
        editor.focus()
        self.notify("The template is back; ctrl+z brings your code back.", title="Template")

    # -- completion moments ---------------------------------------------------------------

    def training_recorded(self) -> None:
        """The training screen kept a run: it may have finished its exercise."""
        self._show_progress()
        self._celebrate(self.lesson.statuses())

    def _celebrate(self, statuses: dict[str, str]) -> None:
        """A summary for each exercise this change completed, then one for the whole lesson,
        shown one after the other."""
        from tutor.ui.screens.completion import CompletionScreen, exercise_view, lesson_view

        moment: Celebration | None = self._milestones.after(statuses, self.tutor.flush_time)
        if moment is None:
            return
        rows, run = moment.rows, moment.run
        queue: list[tuple[CompletionScreen, Exercise | None]] = []
        for exercise, following in moment.finished:
            hint = (f"enter: on to exercise {following.number} · esc: stay here" if following
                    else "enter or esc to close")
            body = exercise_view(self.pack, exercise, rows, run, following)
            queue.append((CompletionScreen(body, hint), following))
        if moment.lesson_done:
            queue.append((CompletionScreen(lesson_view(self.pack, rows, run),
                                           "enter or esc to close"), None))
        self._show_in_turn(queue)

    def _show_in_turn(self, queue: list) -> None:
        if not queue:
            return
        screen, following = queue[0]

        def closed(go_on: bool | None) -> None:
            if len(queue) > 1:
                self._show_in_turn(queue[1:])
            else:
                self._after_celebration(go_on, following)

        self.app.push_screen(screen, closed)

    def _after_celebration(self, go_on: bool | None, following: Exercise | None) -> None:
        if go_on and following is not None and self.is_active:
            self.goto_step(self.lesson.first_open_step(following).id)
        else:
            self.back_to_editor()

    # -- moving around --------------------------------------------------------------------

    def action_explain(self) -> None:
        from tutor.ui.screens.explain import ExplainScreen

        step = self.step

        def show() -> None:
            self.app.push_screen(ExplainScreen(self.pack.exercise(step.exercise), step))

        if not self.lesson.explanation_counts(step.id):
            show()
            return

        def decided(go: bool | None) -> None:
            if go and step.id == self.step.id:
                problem = self.lesson.count_explanation(step.id)
                if problem:
                    self.notify(f"The hints were not counted: {problem}", title="Hints",
                                severity="warning")
                show()

        from tutor.ui.screens.confirm import ConfirmExplain

        self.app.push_screen(ConfirmExplain(step.title, len(step.hints)), decided)

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
        steps = self._sidebar()
        steps.display = not steps.display

    def on_key(self, event: events.Key) -> None:
        """A character typed while the sidebar or the feedback has focus goes to the editor,
        and focus with it: typing always types."""
        if not event.is_printable or event.character is None:
            return
        editor = self.query_one("#editor", CodeEditor)
        # A key bound to an action (`?` for the keys) reaches the app's bindings, as before.
        if self.focused is editor or event.key in self.active_bindings:
            return
        event.stop()
        editor.focus()
        start, end = editor.selection
        editor.replace(event.character, start, end, maintain_selection_offset=False)

    def system_commands(self) -> Iterator[SystemCommand]:
        """The palette's commands for the open step (the app adds those that act anywhere)."""
        yield SystemCommand("Check", "Run your code and compare it with autograd",
                            self.action_check)
        yield SystemCommand("Run without grading",
                            "See what your code prints and the shapes it makes",
                            self.action_scratch)
        yield SystemCommand("Hint", "Show the next hint for this step", self.action_hint)
        yield SystemCommand("Solution", "Show the reference solution (asks first unless "
                            "the step is solved)", self.action_reveal)
        yield SystemCommand("Explain", "Read what this step is about", self.action_explain)
        yield SystemCommand("Template", "Put the step's template back in the editor",
                            self.action_reset_step)
        yield SystemCommand("Next step", "Open the next step", self.action_next_step)
        yield SystemCommand("Previous step", "Open the previous step",
                            self.action_previous_step)
        yield SystemCommand("Steps sidebar", "Show or hide the list of steps",
                            self.action_toggle_steps)


class _StandIn(Widget):
    """An empty panel in the first frame, where the real widget comes right after it."""

    def render(self) -> str:
        return ""


def _select_placeholder(editor: CodeEditor) -> None:
    """Select the template's first `...`, so typing replaces it; else go to the end."""
    for row in range(editor.document.line_count):
        col = editor.document.get_line(row).find("...")
        if col >= 0:
            editor.selection = Selection((row, col), (row, col + 3))
            return
    last = editor.document.line_count - 1
    editor.move_cursor((last, len(editor.document.get_line(last))))


def describe(exc: BaseException) -> str:
    """A one-line account of an exception, for the screen (no traceback)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
