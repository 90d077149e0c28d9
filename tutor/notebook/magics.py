"""The tutor inside IPython: `%%check`, `%hint`, `%progress`, `%train` and `%tutor`.

The learner's code never runs in the kernel: a `%%check` cell's text goes to the same evaluator
the TUI and the CLI use (a worker process that runs each check in a confined child, against
autograd), and what comes back is shown. Everything the check changes goes through the session
(`tutor.session.controller`), into the same progress store: the notebook has no rule of its own.

Every failure is one line on stderr, never a traceback: a kernel is where a learner works, and
a traceback from the tutor reads as a mistake in their own code.
"""

from __future__ import annotations

import atexit
import functools
import sys
from collections.abc import Callable

from IPython.core.magic import no_var_expand

from tutor.config import ConfigError, Settings, resolve, unavailable_device
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.notebook import render
from tutor.pack.model import Pack, PackError
from tutor.session.controller import BreakError, CheckOutcome, Lesson
from tutor.session.errors import StoreError
from tutor.session.lookup import UsageError, lesson_pack, position, step_id, try_open_store
from tutor.source import size_problem

_EXPECTED = (UsageError, ConfigError, EvaluatorError, StoreError, PackError, OSError)
_SETTINGS = ("pack", "device", "home")  # what `%tutor NAME VALUE` may change
TRAIN_USAGE = ("`%train [--steps N]` trains your code; `%train --break STEP [--mistake N | "
               "--mine] [--steps N]` trains once more with STEP broken and shows both curves")


def say(message: str) -> None:
    print(f"backprop-tutor: {message}", file=sys.stderr, flush=True)


def show(bundle: render.Bundle) -> None:
    from IPython.display import display

    display(bundle, raw=True)


def one_line(method: Callable) -> Callable:
    """Run a magic so that whatever goes wrong is one line: the tutor's own message for the
    failures it knows, the exception's name and text for anything else."""

    @functools.wraps(method)
    def run(self: NotebookTutor, *args) -> None:
        try:
            method(self, *args)
        except _EXPECTED as exc:
            if isinstance(exc, EvaluatorError):
                self.stop()  # the next check starts a fresh worker
            say(str(exc))
        except KeyboardInterrupt:
            # The check may still be running in the worker; a fresh one answers the next.
            self.stop()
            say("interrupted. What was recorded before stays recorded; the sandbox starts "
                "again with the next check.")
        except Exception as exc:  # noqa: BLE001 (a kernel must never see the tutor's traceback)
            say(f"internal error: {type(exc).__name__}: {exc}")

    return run


def magic(method: Callable) -> Callable:
    """A method the kernel calls as a magic: one line when it fails, and its line taken as
    written. IPython otherwise expands `{expr}` and `$name` in a magic's line before the magic
    sees it, which runs `expr` in the kernel: a `%%check {...}` would execute the learner's
    code there, the one place it must never run."""
    return no_var_expand(one_line(method))


class NotebookTutor:
    """One per kernel: the settings, the lesson, and the evaluator, started once and reused."""

    def __init__(self, flags: dict[str, str] | None = None):
        self.flags = dict(flags or {})
        self.settings: Settings = resolve(**self.flags)
        self.pack: Pack = lesson_pack(self.settings)
        self._evaluator: Evaluator | None = None

    # -- the evaluator ----------------------------------------------------------------------
    def evaluator(self) -> Evaluator:
        if self._evaluator is None:
            problem = unavailable_device(self.settings.device)
            if problem:
                raise UsageError(f"device '{self.settings.device}' cannot be used here: "
                                 f"{problem}. `%tutor device cpu` uses the CPU.")
            self._evaluator = Evaluator(self.settings)
            self._evaluator.start()  # loads torch and builds the lesson in the background
        return self._evaluator

    @one_line
    def start(self) -> None:
        """Start the evaluator now, so the first check does not wait for PyTorch to load; a
        device that is not there is said here, and again at each check until it is changed."""
        self.evaluator()
        show(self.describe())

    @property
    def started(self) -> bool:
        return self._evaluator is not None

    def stop(self) -> None:
        evaluator, self._evaluator = self._evaluator, None
        if evaluator is not None:
            evaluator.close()

    def session(self) -> Lesson:
        """A session over a freshly opened store (closed by the caller), so that a kernel
        holds no lock on the progress the TUI or the CLI may be writing."""
        store, problem = try_open_store(self.settings, self.pack)
        return Lesson(self.pack, store, self.evaluator(), problem)

    # -- the magics -------------------------------------------------------------------------
    @magic
    def check(self, line: str, cell: str) -> None:
        if not line.strip():
            raise UsageError("which step? Start the cell with `%%check STEP_ID`")
        sid = step_id(self.pack, line.strip())
        if self.pack.step(sid).kind.trained:
            raise UsageError("the training step runs with `%train`, in the tutor or with "
                             "`backprop-tutor train`, not in a cell")
        too_big = size_problem(cell, "this cell")
        if too_big:
            raise UsageError(too_big)
        session = self.session()
        try:
            result = session.evaluate(sid, cell)
            recorded = session.is_attempt(sid, cell)
            outcome = session.record(sid, cell, result) if recorded else CheckOutcome(result)
        finally:
            if session.store is not None:
                session.store.close()
        show(render.check_bundle(outcome, position(self.pack, sid), recorded))
        for image in render.heatmap_bundles(result):
            show(image)

    @magic
    def hint(self, line: str) -> None:
        if not line.strip():
            raise UsageError("which step? `%hint STEP_ID`")
        sid = step_id(self.pack, line.strip())
        store, problem = try_open_store(self.settings, self.pack)
        if store is None:  # without the count there is no telling which hint is next
            raise UsageError(problem or "your progress cannot be opened")
        with store:
            hints = Lesson(self.pack, store, None).next_hint(sid)
        show(render.hints_bundle(hints, position(self.pack, sid)))

    @magic
    def progress(self, line: str) -> None:
        if line.strip():
            raise UsageError("`%progress` takes no arguments")
        store, problem = try_open_store(self.settings, self.pack)
        if store is None:
            raise UsageError(problem or "your progress cannot be opened")
        with store:
            rows = Lesson(self.pack, store, None).summary()
        show(render.progress_bundle(rows))

    @magic
    def train(self, line: str) -> None:
        """Exercise 4 in a cell: the training code `train` runs (your draft, or the code
        assembled from your solved steps), kept like any run; with `--break STEP`, the same code
        with STEP swapped for a mistake, next to a good run (see `Lesson.compare_broken`)."""
        options = _train_options(line)
        store, problem = try_open_store(self.settings, self.pack)
        if store is None:
            raise UsageError(problem or "your progress cannot be opened")
        with store:
            session = Lesson(self.pack, store, None, problem)
            if options["break"] is None:
                source = session.training_source(options["steps"])
                too_big = size_problem(source.code, "your training draft")
                if too_big:
                    raise UsageError(too_big)
                session.evaluator = self.evaluator()
                run = session.train(source.code, options["steps"])
                reason = session.keep_run(source.code, run)
                if reason:
                    say(f"this run was not saved to your progress: {reason}")
                for bundle in render.run_bundles(run, self.pack.baseline):
                    show(bundle)
                return
            try:
                broken = session.breakage(options["break"], options["mistake"],
                                          mine=options["mine"])
            except BreakError as exc:
                raise UsageError(str(exc)) from None
            session.evaluator = self.evaluator()
            comparison = session.compare_broken(broken, options["steps"])
        if comparison.problem:
            say(f"the good run was not saved to your progress: {comparison.problem}")
        for bundle in render.comparison_bundles(comparison):
            show(bundle)

    @magic
    def configure(self, line: str) -> None:
        words = line.split(maxsplit=1)
        if not words:
            show(self.describe())
            return
        if words[0] not in _SETTINGS or len(words) != 2:
            raise UsageError("`%tutor` shows the settings; `%tutor pack ID`, "
                             "`%tutor device NAME` or `%tutor home DIR` changes one")
        flags = {**self.flags, words[0]: words[1].strip()}
        try:
            settings = resolve(**flags)
        except ConfigError as exc:  # it names the flag; here the setting was a magic's word
            raise UsageError(str(exc).replace(f"--{words[0]}", f"%tutor {words[0]}")) from None
        pack = lesson_pack(settings)
        self.stop()
        self.flags, self.settings, self.pack = flags, settings, pack
        self.evaluator()
        show(self.describe())

    def describe(self) -> render.Bundle:
        s = self.settings
        text = (f"lesson: {self.pack.title} ({self.pack.id}), {len(self.pack.steps)} steps; "
                f"device: {s.device}{self._running_on()}; progress in {s.data_home}")
        return {"text/plain": text}


    def _running_on(self) -> str:
        """Where the checks run, once the evaluator knows: `auto` may have chosen a GPU."""
        if self._evaluator is None:
            return ""
        info = self._evaluator.started_info
        if info is None:
            return " (the evaluator is still starting)" if self._evaluator.failure is None else ""
        device = info.get("device")
        return f" (checks run on {device})" if device else ""


def _train_options(line: str) -> dict:
    """`%train`'s words: --steps N, --break STEP, --mistake N, --mine; a usage error otherwise."""
    words = line.split()
    options: dict = {"steps": None, "break": None, "mistake": None, "mine": False}
    numbers = {"--steps": "steps", "--mistake": "mistake"}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--mine":
            options["mine"] = True
        elif word in numbers or word == "--break":
            if i + 1 >= len(words):
                raise UsageError(f"{word} needs a value. {TRAIN_USAGE}")
            value = words[i + 1]
            if word == "--break":
                options["break"] = value
            elif not value.isdigit() or int(value) < 1:
                raise UsageError(f"{word} takes a whole number from 1, not '{value}'")
            else:
                options[numbers[word]] = int(value)
            i += 1
        else:
            raise UsageError(f"unknown option '{word}'. {TRAIN_USAGE}")
        i += 1
    if options["break"] is None and (options["mine"] or options["mistake"] is not None):
        raise UsageError(f"--mistake and --mine choose how --break STEP breaks it. {TRAIN_USAGE}")
    if options["mine"] and options["mistake"] is not None:
        raise UsageError("choose one of --mistake N and --mine")
    return options


_tutor: NotebookTutor | None = None


def load(ipython, flags: dict[str, str] | None = None) -> None:
    global _tutor
    try:
        tutor = NotebookTutor(flags)
    except _EXPECTED as exc:  # a setting that cannot be used: nothing to load
        say(str(exc))
        return
    if _tutor is not None:
        _tutor.stop()
    _tutor = tutor
    atexit.register(tutor.stop)
    ipython.register_magic_function(tutor.check, "cell", "check")
    ipython.register_magic_function(tutor.hint, "line", "hint")
    ipython.register_magic_function(tutor.progress, "line", "progress")
    ipython.register_magic_function(tutor.train, "line", "train")
    ipython.register_magic_function(tutor.configure, "line", "tutor")

    def start_after_cell(*_) -> None:
        # Started when the loading cell ends, not at once: a `%tutor pack ...` in the same
        # cell (the workbook's first) chooses the lesson before PyTorch loads one to discard.
        ipython.events.unregister("post_run_cell", start_after_cell)
        if tutor is _tutor and not tutor.started:
            tutor.start()

    ipython.events.register("post_run_cell", start_after_cell)


def unload() -> None:
    global _tutor
    if _tutor is not None:
        _tutor.stop()
        _tutor = None
