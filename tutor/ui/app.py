"""The backprop-tutor TUI: the app around the lesson screen.

The lesson itself (forward pass, editor, feedback, steps, and the keys that act on them) is
`LessonScreen`. The app holds what outlives any one screen: the settings, the pack and its
progress store, the evaluator and the lesson controller (`session`, a
`tutor.session.controller.Lesson`,
which the screens ask for every rule and record), active time, the keys that work everywhere
(progress, help, quit) and the command palette. When several packs are
installed and none was named, the app first asks which one (`PackScreen`).

The app never imports torch. The evaluator is a separate process that holds torch; it starts
from a thread worker once the lesson's first frame is out, so that frame paints while torch is
still loading.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen

from tutor.config import Settings
from tutor.pack.model import Pack, Step, find_pack, load_pack
from tutor.session.errors import StoreError
from tutor.session.packchoice import (
    installed_choices,
    last_pack,
    offered_packs,
    remember_pack,
)
from tutor.ui import palette
from tutor.ui.activity import ActiveClock

if TYPE_CHECKING:
    from tutor.evaluator.client import Evaluator
    from tutor.evaluator.warm import Host
    from tutor.session.controller import Lesson
    from tutor.session.store import Store
    from tutor.ui.screens.lesson import LessonScreen
    from tutor.ui.screens.training import TrainingRecorded

READY_POLL = 0.25  # seconds per wait for the evaluator, so shutdown is never held up
TIME_FLUSH = 20.0  # seconds between saves of the active time, so a crash loses little
# Events that show the learner is at the keyboard (see tutor.ui.activity).
ACTIVITY = (events.Key, events.MouseDown, events.MouseScrollDown, events.MouseScrollUp,
            events.Paste)
NARROW = 100  # below this many columns panels and dialogs use their narrow sizes
SHORT = 32  # below this many rows the panels use their compact sizes
# The help lists the lesson's keys and the app's in one table: the footer's keys first, in the
# footer's order, then the quieter ones, then help and quit.
HELP_ORDER = ("check", "hint", "reveal", "scratch", "explain", "next_step", "previous_step",
              "reset_step", "progress", "toggle_steps", "lessons", "help", "quit")



# What the thread that starts the evaluator posts back to the app (see `_start_evaluator`).


class EvaluatorReady(Message):
    """The sandbox worker has built the lesson state; `info` holds device and shapes."""

    def __init__(self, info: dict) -> None:
        super().__init__()
        self.info = info


class EvaluatorFailed(Message):
    """The sandbox worker could not start (no PyTorch, device unavailable, ...)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

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

    # The keys that work on any screen; the lesson's own are LessonScreen.BINDINGS.
    BINDINGS = [
        Binding("ctrl+o", "progress", "Progress", id="progress", show=False,
                tooltip="Status, attempts, hints and time per step, and in total"),
        Binding("ctrl+l", "lessons", "Lessons", id="lessons", show=False,
                tooltip="Save and choose another lesson (each keeps its own progress)"),
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
        *,
        greet: bool = True,
        packs: list[str] | None = None,
        lessons: list[str] | None = None,
        named: bool = False,
    ) -> None:
        """`greet=False` skips the welcome and the exercise introductions (for tests that
        drive the lesson from a fresh start). With more than one pack in `packs` the app asks
        which to open first, then opens its progress itself; an evaluator passed in must serve
        the pack chosen. `lessons` are the packs ctrl+l offers instead of the open one (by
        default `packs`): the app then ends with `choose_again` set."""
        super().__init__()
        palette.install(self, self.theme_variables)
        self.settings = settings
        self.greet = greet
        self.packs = list(packs or [])
        self.lessons = list(lessons or packs or [])
        self.named = named  # the lesson was named at launch, not opened as last time
        self.choose_again = False  # the learner asked for the chooser: run_app shows it
        if store is not None and self.choosing:
            raise ValueError("a progress store belongs to one pack: give a store or a choice "
                             "of packs, not both")
        # What we create we close; what the caller passes in stays the caller's.
        self._owns_store = store is None
        self._owns_evaluator = evaluator is None
        self._store: Store | None = store
        self._pack: Pack | None = None
        self._evaluator = evaluator
        self._host: Host | None = None  # the evaluator served to other commands, once warm
        self._evaluator_lock = threading.Lock()
        self._session: Lesson | None = None
        self.info: dict | None = None  # from evaluator.info(), once PyTorch is ready
        self.evaluator_error: str | None = None
        self.lesson: LessonScreen | None = None  # once a pack is open
        self._clock = ActiveClock()
        self._timed_step: str | None = None  # the step active time is counted on
        self._closing = False  # set at shutdown; worker threads stop waiting
        if not self.choosing:
            self._open_pack(settings.pack)

    @property
    def choosing(self) -> bool:
        """Whether the learner picks the pack before the lesson opens."""
        return len(self.packs) > 1

    @property
    def pack(self) -> Pack:
        if self._pack is None:
            raise RuntimeError("no pack is open yet: the learner is choosing one")
        return self._pack

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("no pack is open yet: the learner is choosing one")
        return self._store

    def _open_pack(self, name: str) -> None:
        """Load the pack and open its progress (unless the caller gave a store)."""
        self.settings = replace(self.settings, pack=name)  # the evaluator serves this pack
        self._pack = load_pack(find_pack(name))
        if self._store is None:
            from tutor.session.controller import open_store  # once a pack is chosen

            self._store = open_store(self.settings.data_home, self._pack)
        if name in self.lessons:
            remember_pack(self.settings.data_home, name)

    def _new_lesson(self) -> LessonScreen:
        # Imported with the lesson's first screen: while the learner chooses a pack, the
        # chooser's first frame does not wait for the lesson's widgets.
        from tutor.ui.screens.lesson import LessonScreen

        self.lesson = LessonScreen(self.session, greet=self.greet)
        return self.lesson

    # -- screens --------------------------------------------------------------------------

    def get_default_screen(self) -> Screen:
        # Textual's App.query_one searches this screen, whatever is on top of it, so callers
        # find the lesson's widgets through the app. While the learner chooses a pack, a blank
        # screen lies under the chooser, and the lesson gets a stack of its own (_pack_chosen).
        return super().get_default_screen() if self.choosing else self._new_lesson()

    def on_mount(self) -> None:
        self._fit_to_terminal(self.size.width, self.size.height)
        self.set_interval(TIME_FLUSH, self.flush_time)
        if self.lesson is not None:
            self._show_notices()
            if len(self.lessons) > 1:
                how = "" if self.named else ", as last time"
                self.notify(f"{self.pack.title}{how}: ctrl+l chooses another lesson.",
                            title="Lesson", timeout=6)
        else:
            from tutor.ui.screens.packs import PackScreen  # only when there is a choice

            self.push_screen(PackScreen(self.packs, last_pack(self.settings.data_home)),
                             self._pack_chosen)

    def on_ready(self) -> None:
        _collect_garbage_again()  # Textual's Ready comes once the first frame is out

    def _pack_chosen(self, name: str | None) -> None:
        if name is None:
            return
        try:
            self._open_pack(name)
        except StoreError as exc:
            self.exit(return_code=1, message=f"backprop-tutor: {exc}")
            return
        # Textual's modes: the lesson's stack starts with the lesson, as without a chooser,
        # since the default screen cannot be swapped for another in place.
        self.add_mode("lesson", self._new_lesson)
        self.switch_mode("lesson")
        self._show_notices()

    def _show_notices(self) -> None:
        for notice in self.store.notices:
            self.notify(str(notice), title="Progress", timeout=8)

    def watch_theme(self, _theme: str) -> None:
        palette.install(self)  # the panels' Rich styles follow the new theme
        self.refresh_css()

    def on_resize(self, event: events.Resize) -> None:
        self._fit_to_terminal(event.size.width, event.size.height)

    def _fit_to_terminal(self, width: int, height: int) -> None:
        # On the app, so the lesson's panels and every dialog size themselves (see app.tcss).
        self.set_class(height < SHORT, "-short")
        self.set_class(width < NARROW, "-narrow")
        if self.lesson is not None and self.lesson.is_mounted:
            self.lesson.fit_sidebar(width)

    def _back_to_lesson(self, _result: object = None) -> None:
        if self.lesson is not None:
            self.lesson.back_to_editor()

    # -- what tests and scripts read from outside ---------------------------------------------

    @property
    def step(self) -> Step:
        """The open step (the lesson screen's)."""
        assert self.lesson is not None, "no pack is open yet"
        return self.lesson.step

    @property
    def checking(self) -> bool:
        """Whether a check is under way on the lesson screen."""
        return self.lesson is not None and self.lesson.checking

    # -- active time ----------------------------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, ACTIVITY):
            self._clock.touch()
        await super().on_event(event)

    def on_app_blur(self) -> None:
        self._clock.pause()  # the terminal lost focus: the learner is elsewhere

    def _busy(self) -> bool:
        from tutor.ui.screens.training import TrainingScreen

        training = any(isinstance(s, TrainingScreen) and s.running for s in self.screen_stack)
        return training or (self.lesson is not None and self.lesson.busy)

    def flush_time(self) -> None:
        """Add the active seconds counted so far to the step they were spent on."""
        if self._timed_step is None:
            return  # no lesson yet: the seconds wait for the first step
        if self._busy():
            self._clock.touch()  # watching a check or a training run is time on the step
        seconds = self._clock.take()
        if seconds <= 0:
            return
        try:
            self.session.add_time(self._timed_step, seconds)
        except Exception as exc:  # a full disk must not end the session
            self.log.warning(f"could not save time: {exc}")

    def count_time_on(self, step_id: str) -> None:
        """From now on, count active time on `step_id` (what went before stays where it was)."""
        if self._timed_step is None:
            self._clock.take()  # choosing a pack is not time on a step
        if step_id != self._timed_step:
            self.flush_time()
            self._timed_step = step_id

    # -- evaluator ------------------------------------------------------------------------

    @property
    def session(self) -> Lesson:
        """The lesson controller for this pack: every screen's rules and records go through
        it. The evaluator is made on its first use, not here (see `evaluator`)."""
        if self._session is None:
            from tutor.session.controller import Lesson

            self._session = Lesson(self.pack, self.store, _LazyEvaluator(self))
        return self._session

    @property
    def evaluator(self) -> Evaluator:
        # Created on first use, from whichever worker thread gets there first.
        with self._evaluator_lock:
            if self._evaluator is None:
                from tutor.evaluator.client import Evaluator

                self._evaluator = Evaluator(self.settings)
            return self._evaluator

    def start_evaluator(self) -> None:
        """Start the evaluator in the background; the lesson hears back when it is ready."""
        self._start_evaluator()

    @work(thread=True, exclusive=True, group="evaluator", exit_on_error=False)
    def _start_evaluator(self) -> None:
        from tutor.evaluator.client import EvaluatorNotReady  # after the first frame, off its path

        try:
            evaluator = self.evaluator
            evaluator.start()
            # Wait in slices so this thread never outlives the app; a real failure raises.
            while not self._closing:
                try:
                    info = evaluator.info(timeout=READY_POLL)
                except EvaluatorNotReady:
                    continue
                self._serve_warm(evaluator)
                self.post_message(EvaluatorReady(info))
                return
        except Exception as exc:  # any failure becomes a message on screen, never a traceback
            from tutor.ui.screens.lesson import describe  # loaded already: the lesson asked

            self.post_message(EvaluatorFailed(describe(exc)))

    def _serve_warm(self, evaluator: Evaluator) -> None:
        """While the TUI is open its warm evaluator answers `check` from another terminal with
        the same settings (tutor/evaluator/warm.py); a check there waits for none of ours."""
        if not self._owns_evaluator or self._host is not None:
            return
        from tutor.evaluator.warm import Host

        self._host = Host(evaluator, self.settings)
        self._host.start()

    def on_evaluator_ready(self, message: EvaluatorReady) -> None:
        self.info = message.info
        if self.lesson is not None:
            self.lesson.evaluator_ready(message.info)

    def on_evaluator_failed(self, message: EvaluatorFailed) -> None:
        self.evaluator_error = message.message
        if self.lesson is not None:
            self.lesson.evaluator_failed(message.message)

    def on_training_recorded(self, _message: TrainingRecorded) -> None:
        # The training screen is the lesson's sibling in the stack, so its news comes here.
        if self.lesson is not None:
            self.lesson.training_recorded()

    # -- keys and commands that work anywhere ---------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # No progress to show while the learner is still choosing a pack.
        if action == "lessons":
            return self.lesson is not None and len(self.lessons) > 1
        return not (action == "progress" and self.lesson is None)

    async def action_lessons(self) -> None:
        """Save, leave, and have `run_app` ask which lesson to open."""
        self.choose_again = True
        await self.action_quit()

    def action_progress(self) -> None:
        from tutor.ui.screens.progress import ProgressScreen

        self.flush_time()  # so the table's times include this very minute
        self.push_screen(ProgressScreen(self.pack, self.session.summary()),
                         self._back_to_lesson)

    def help_bindings(self) -> list[Binding]:
        """Every key of the screen in front (the lesson's, or exercise 4's) and of the app, in
        the order the help lists them."""
        from tutor.ui.screens.lesson import LessonScreen
        from tutor.ui.screens.training import TrainingScreen

        screen = next((s for s in reversed(self.screen_stack)
                       if isinstance(s, (LessonScreen, TrainingScreen))), None)
        own = TrainingScreen.BINDINGS if isinstance(screen, TrainingScreen) else \
            LessonScreen.BINDINGS
        bindings = [b for b in (*own, *self.BINDINGS) if isinstance(b, Binding)]

        def rank(binding: Binding) -> int:
            return HELP_ORDER.index(binding.id) if binding.id in HELP_ORDER else len(HELP_ORDER)

        return sorted(bindings, key=rank)

    def action_help(self) -> None:
        from tutor.ui.screens.help import HelpScreen

        self.push_screen(HelpScreen(self.help_bindings()))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        if self.lesson is not None and screen is self.lesson:  # the step's commands
            yield from self.lesson.system_commands()
        from tutor.ui.screens.training import TrainingScreen

        if isinstance(screen, TrainingScreen):
            for title, help_text, callback in screen.system_commands():
                yield SystemCommand(title, help_text, callback)
        if self.lesson is not None:
            yield SystemCommand("Progress", "Status, attempts, hints and time per step",
                                self.action_progress)
            yield SystemCommand("Welcome", "The first page again: what this is, the keys",
                                self.lesson.show_welcome)
            if len(self.lessons) > 1:
                yield SystemCommand("Lessons", "Save and choose another lesson",
                                    self.action_lessons)
        yield SystemCommand("Keys", "List every key", self.action_help)
        # Textual's own "Keys" opens a panel of the same bindings: one "Keys" is enough.
        yield from (c for c in super().get_system_commands(screen) if c.title != "Keys")

    # -- shutdown -------------------------------------------------------------------------

    async def action_quit(self) -> None:
        """Save and leave, after the keys typed just before ctrl+q have reached the editor.

        ctrl+q is handled at once, while keys typed in the same instant may still wait in the
        editor's queue; a callback queued behind them runs once they are in the text.
        """
        from tutor.ui.screens.training import TrainingScreen
        from tutor.ui.widgets.editor import CodeEditor

        editor: CodeEditor | None = None
        if self.lesson is not None:
            editor = self.lesson.query_one("#editor", CodeEditor)
        for screen in self.screen_stack:
            if isinstance(screen, TrainingScreen):
                editor = screen.query_one("#train-code", CodeEditor)
        if editor is None:
            self.exit()  # still choosing a pack: nothing to save
            return
        editor.call_later(self._quit_now)

    def _quit_now(self) -> None:
        from tutor.ui.screens.training import TrainingScreen

        for screen in self.screen_stack:
            if isinstance(screen, TrainingScreen):
                screen.save_draft()
        if self.lesson is not None:
            self.lesson.save_before_quitting()
        self.exit()

    def on_unmount(self) -> None:
        self._closing = True
        try:
            if self.lesson is not None:
                self.lesson.leave_step()
                self.flush_time()
        finally:
            if self._host is not None:
                self._host.close()
            if self._owns_evaluator and self._evaluator is not None:
                self._evaluator.close()
            if self._owns_store and self._store is not None:
                self._store.close()


def run_app(settings: Settings, packs: list[str] | None = None) -> int:
    """Open the learner's progress, start the checker and run the TUI until they quit.

    `packs` are the packs to choose from; by default the installed ones when the learner named
    none (see `offered_packs`), and `[]` opens `settings.pack` without asking. With a choice,
    the lesson opened last opens directly, and ctrl+l in it brings the chooser back.
    """
    offered = offered_packs(settings) if packs is None else packs
    # A lesson named at launch opens directly; ctrl+l in it still offers the installed ones,
    # and the lesson is remembered for the next plain launch like one chosen there.
    choices = offered or installed_choices()
    ask = last_pack(settings.data_home) not in offered
    named = not offered
    while True:
        with _collection_paused_until_first_frame():
            if len(choices) > 1 and ask and not named:
                # The pack is not known yet: the app opens its progress and checker once chosen.
                app = TutorApp(settings, packs=choices)
                app.run()
            else:
                name = settings.pack if named else last_pack(settings.data_home) \
                    if len(offered) > 1 else settings.pack
                app = _run_lesson(replace(settings, pack=name or settings.pack), choices,
                                  named=named)
                if app is None:
                    return 1
        if not app.choose_again:
            return app.return_code or 0
        ask, named = True, False


@contextmanager
def _collection_paused_until_first_frame() -> Iterator[None]:
    """Until an app's first frame is out, Python's cycle collector would walk the objects being
    made (styles, widgets, the pack) over and over, though nearly all of them live as long as
    the app: it waits, and then (`_collect_garbage_again`) sets them aside for good, so later
    collections, during checks, walk only what came after. Once the app has ended, what it
    leaves behind can be collected again."""
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.enable()


def _collect_garbage_again() -> None:
    """Called once the first frame is out; a no-op unless collection was paused for it."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def _run_lesson(settings: Settings, lessons: list[str], named: bool = False
                ) -> TutorApp | None:
    """Run the TUI on `settings.pack` with its progress store, closed after. The app makes its
    checker itself once the first frame is out, and closes it."""
    pack = load_pack(find_pack(settings.pack))
    try:
        from tutor.session.controller import open_store

        store = open_store(settings.data_home, pack)
    except StoreError as exc:
        print(f"backprop-tutor: {exc}")
        return None
    try:
        app = TutorApp(settings, store=store, lessons=lessons, named=named)
        app.run()
    finally:
        store.close()
    return app


class _LazyEvaluator:
    """The app's evaluator as the controller sees it: made on first use (from whichever
    thread gets there first), so opening the lesson starts no process before the first frame."""

    def __init__(self, app: TutorApp):
        self._app = app

    def __getattr__(self, name: str):
        return getattr(self._app.evaluator, name)
