"""`train`: exercise 4 without the TUI: gradient check, training on your gradients, results.

The run happens in the evaluator process; this side prints its progress (on a terminal) and its
result, and keeps the run in the progress store. Ctrl+C stops the run and keeps what it did.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tutor.commands.base import Command, UsageError, lesson_pack, open_store, read_source
from tutor.config import Settings
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack
from tutor.session.controller import BreakError, BrokenComparison, Lesson
from tutor.session.report import terminal_width, wrap
from tutor.session.runtext import format_comparison, format_run
from tutor.source import size_problem
from tutor.training.plan import speed_notes, training_code, without_reference
from tutor.values.durations import clock, spaced
from tutor.values.runs import (
    RunPhase,
    RunProgress,
    RunStatus,
)

if TYPE_CHECKING:
    from tutor.session.store import Store

LOG_INTERVAL = 2.0  # seconds between progress lines written to a file or a pipe
BAR_WIDTH = 24


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, metavar="N",
                   help="training steps (default: the lesson's own; --print-code says how many)")
    p.add_argument("--gradcheck-steps", type=int, metavar="K",
                   help="first steps whose gradients are compared with autograd (default: the "
                   "lesson's own)")
    p.add_argument("--reference", action="store_true",
                   help="train with the reference solutions instead of your accepted code")
    p.add_argument("--file", metavar="PATH",
                   help="run this training step instead of your draft or the one assembled from "
                   "your progress (start from --print-code)")
    p.add_argument("--from-exercises", action="store_true",
                   help="run the training step assembled from your solved steps, even when the "
                   "tutor's training screen saved a draft of it")
    p.add_argument("--print-code", action="store_true",
                   help="print the training step that would run (your training-screen draft, if "
                   "there is one), and exit")
    p.add_argument("--compile", action="store_true",
                   help="run the training phase through torch.compile (eager if it cannot)")
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p.add_argument("--no-record", action="store_true", help="do not keep the run in your progress")
    p.add_argument("--break", dest="break_step", metavar="STEP",
                   help="train once more with STEP's code replaced by one of its catalogued "
                   "mistakes (or --mine), and show its loss next to a good run's")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--mistake", type=int, metavar="N",
                       help="with --break: the step's catalogued mistake N (default 1)")
    which.add_argument("--mine", action="store_true",
                       help="with --break: your own first refused attempt at the step")


def run(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    if args.steps is not None and args.steps < 1:
        raise UsageError("--steps must be at least 1")
    if args.gradcheck_steps is not None and args.gradcheck_steps < 0:
        raise UsageError("--gradcheck-steps cannot be negative")
    if sum(map(bool, (args.file, args.reference, args.from_exercises))) > 1:
        raise UsageError("choose one of --file, --reference and --from-exercises")
    if args.reference and not all(s.has_solution for s in pack.gradient_steps):
        raise UsageError("this copy of the lesson holds no reference solutions (your course's "
                         "grader keeps them): train on your own code")
    if args.break_step is not None:
        return _run_broken(args, settings, pack)
    if args.mistake is not None or args.mine:
        raise UsageError("--mistake and --mine choose how --break STEP breaks its step")
    store = open_store(settings, pack)
    if store is None and not args.reference:
        return 1
    try:
        code, origin = _training_code(args, pack, store)
    except UsageError:
        if store is not None:
            store.close()
        raise
    if args.print_code:
        if store is not None:
            store.close()
        print(code, end="")
        _say(origin)
        return 0
    _say(origin)
    width = terminal_width()
    for note in speed_notes(code):
        print("\n".join(wrap(note, "note: ", " " * 6, width)), file=sys.stderr)
    show = _display(args)
    ran = _in_evaluator(settings, show, lambda ev: functools.partial(
        Lesson(pack, store, ev).train, code, args.steps, gradcheck_steps=args.gradcheck_steps,
        compile=args.compile, reference=args.reference))
    if ran is None:
        return 1
    result, interrupted = ran
    if store is not None and not args.no_record:
        # Recorded before printing, because the run's id is part of what is printed; a failure
        # costs the record and one warning, never the run. Not retried: the run and its
        # attempt are two writes, and a retry after the first could keep the run twice.
        reason = Lesson(pack, store, None).keep_run(code, result)
        if reason:
            print(f"backprop-tutor: warning: this run was not saved to your progress: {reason}",
                  file=sys.stderr)
    if store is not None:
        store.close()
    print(json.dumps(result.to_dict(), indent=2) if args.json
          else format_run(result, pack.baseline))
    if interrupted:
        return 130
    return 0 if result.status is RunStatus.FINISHED else 1


def _run_broken(args: argparse.Namespace, settings: Settings, pack: Pack) -> int:
    """`train --break STEP`: the training code assembled from the solved steps, with STEP's
    code swapped for a mistake, next to a good run of the same code and length (the last one
    kept that passed, else one trained now and kept as any run). The broken run is shown,
    never kept: it could not pass the exercise, and the runs table is the learner's own."""
    for flag, given in (("--file", args.file), ("--reference", args.reference),
                        ("--from-exercises", args.from_exercises),
                        ("--gradcheck-steps", args.gradcheck_steps is not None)):
        if given:
            raise UsageError(f"{flag} does not go with --break, which swaps one step of the "
                             "code assembled from your solved steps (its gradient check is off)")
    if args.mistake is not None and args.mistake < 1:
        raise UsageError("--mistake counts from 1")
    store = open_store(settings, pack)
    if store is None:
        return 1
    with store:
        lesson = Lesson(pack, store, None)
        try:
            broken = lesson.breakage(args.break_step, args.mistake, mine=args.mine)
        except BreakError as exc:
            raise UsageError(str(exc)) from None
        if args.print_code:
            print(lesson.assembled_code(args.steps, broken), end="")
            return 0
        _say(f"{broken.step} broken with {broken.label}: {broken.message}")
        show = _display(args)

        def stage(which: str) -> None:
            if show:
                show.clear()
            _say("first a good run of your code, to compare with" if which == "good" else
                 f"now the run with {broken.step} broken")

        def compare(ev: Evaluator) -> Callable[..., BrokenComparison]:
            lesson.evaluator = ev
            return functools.partial(lesson.compare_broken, broken, args.steps,
                                     compile=args.compile, keep=not args.no_record,
                                     stage=stage)

        ran = _in_evaluator(settings, show, compare)
        if ran is None:
            return 1
        comparison, interrupted = ran
    if comparison.problem:
        print(f"backprop-tutor: warning: the good run was not saved to your progress: "
              f"{comparison.problem}", file=sys.stderr)
    print(json.dumps(comparison.to_dict(), indent=2) if args.json
          else format_comparison(comparison))
    if interrupted:
        return 130
    return 0


def _training_code(args: argparse.Namespace, pack: Pack,
                   store: Store | None) -> tuple[str, str | None]:
    """The training step to run, and what to tell the learner about where it comes from.

    The tutor's exercise-4 screen saves its editor as a draft and reopens with it, so that draft
    is what runs here too, unless a file, the references or the solved steps are asked for.
    """
    if args.file:
        return read_source(args.file), None
    if args.reference:
        return training_code(pack, None, args.steps), None
    chosen = Lesson(pack, store, None).training_source(args.steps,
                                                       from_exercises=args.from_exercises)
    if not chosen.draft:
        unsolved = without_reference(pack, store.accepted_codes() if store else None)
        if unsolved and not args.print_code:
            raise UsageError("solve these steps first: this copy of the lesson has no reference "
                             "solutions to stand in for them: " + ", ".join(unsolved))
        if not chosen.missing:
            return chosen.code, None
        return chosen.code, ("not solved yet, so their reference solutions are used: "
                             + ", ".join(chosen.missing))
    too_big = size_problem(chosen.code, "your training-screen draft")  # the limit of any code
    if too_big:
        raise UsageError(too_big)
    # The screen's key for "Reset code" is the UI's to choose; its footer shows it.
    return chosen.code, (
        "this is your draft, as the tutor's training screen saved it"
        + (", which differs from the code assembled from your solved steps"
           if chosen.differs else "")
        + ". `backprop-tutor train --from-exercises` runs the assembled code instead; "
        "\"Reset code\" in that screen's footer puts it back into the draft.")


def _say(origin: str | None) -> None:
    """Where the code comes from, on stderr: stdout carries the code or the run's result."""
    if origin:
        print("\n".join(wrap(origin, "backprop-tutor train: ", "  ")), file=sys.stderr)


def _display(args: argparse.Namespace) -> Progress | ProgressLog | None:
    """How a run's progress is shown: a line rewritten in place on a terminal, whole lines in
    a log (`train > log`), nothing where the output is JSON for a program."""
    if sys.stderr.isatty():
        return Progress(sys.stderr)
    if not sys.stdout.isatty() and not args.json:
        return ProgressLog(sys.stdout)
    return None


def _in_evaluator(settings: Settings, show: Progress | ProgressLog | None,
                  make: Callable[[Evaluator], Callable[..., Any]]) -> tuple[Any, bool] | None:
    """The run `make(evaluator)` returns, in an evaluator of its own, with Ctrl+C handled
    (`_run`): (its result, whether it was interrupted), or None when the evaluator failed
    (said on stderr)."""
    try:
        with Evaluator(settings) as ev:
            return _run(ev, make(ev), show)
    except EvaluatorError as exc:
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        return None
    finally:
        if show:
            show.clear()


def _run(ev: Evaluator, run: Callable[..., Any],
         show: Progress | ProgressLog | None) -> tuple[Any, bool]:
    """`run(progress=...)` (the controller's training run) runs in a thread so Ctrl+C reaches
    us: the first one cancels the run (its partial result still comes back), a second one
    gives up waiting."""
    box: dict = {}
    interrupted = False

    def progress(p: RunProgress) -> None:
        # A cancel sent before the evaluator started this run was not seen: repeat it.
        if interrupted:
            ev.cancel()
        if show:
            show.update(p)

    def request() -> None:
        try:
            box["result"] = run(progress=progress)
        except Exception as exc:  # noqa: BLE001 - re-raised on the main thread
            box["error"] = exc
        finally:
            done.set()

    # An Event, not Thread.join: a KeyboardInterrupt inside join() can leave the thread
    # looking finished while it still runs.
    done = threading.Event()
    threading.Thread(target=request, daemon=True).start()
    while not done.is_set():
        try:
            done.wait(0.2)
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            ev.cancel()
            print("\ncancelling; the steps done so far are kept (Ctrl+C again to quit now)",
                  file=sys.stderr)
    if "error" in box:
        raise box["error"]
    return box["result"], interrupted


# --- progress on a terminal ------------------------------------------------------------------


class Progress:
    """One status line, rewritten in place."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.width = 0

    def update(self, p: RunProgress) -> None:
        self.write(progress_line(p))

    def write(self, text: str) -> None:
        # Kept to one row: a line the terminal wraps is rewritten from its last row only, and
        # each update would leave the rows above it behind. A terminal that gives no width (0)
        # gets the whole line.
        columns = self._columns()
        if columns > 1:
            text = text[: columns - 1]
        self.stream.write("\r" + text.ljust(self.width))
        self.stream.flush()
        self.width = len(text)

    def _columns(self) -> int:
        try:
            return os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            return shutil.get_terminal_size().columns

    def clear(self) -> None:
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0


class ProgressLog:
    """Progress for a file or a pipe: whole lines, flushed at once, at most one per
    LOG_INTERVAL seconds within a phase (and one at each new phase)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.phase: RunPhase | None = None
        self.last = 0.0

    def update(self, p: RunProgress) -> None:
        now = time.monotonic()
        if p.phase == self.phase and now - self.last < LOG_INTERVAL:
            return
        self.phase, self.last = p.phase, now
        print(progress_line(p), file=self.stream, flush=True)

    def clear(self) -> None:
        pass  # lines in a log stay


def progress_line(p: RunProgress) -> str:
    if p.phase is RunPhase.GRADCHECK:
        return f"gradient check against autograd: step {p.step}/{p.of}"
    if p.phase is RunPhase.RESULTS:
        return p.doing
    steps = p.steps or 0
    done = p.step / steps if steps else 0.0
    filled = int(done * BAR_WIDTH)
    bar = "█" * filled + "░" * (BAR_WIDTH - filled)
    rate = f"{spaced(p.steps_per_s)} steps/s" if p.steps_per_s else "… steps/s"
    loss = f" · loss {p.loss:.4f}" if p.loss is not None else ""
    return (f"{bar} {spaced(p.step)}/{spaced(steps)} · {rate} · "
            f"{clock(p.eta_s, '?')} left{loss}")


# --- the result as text ------------------------------------------------------------------------


TRAIN = Command("train", "the training exercise: train the network on your own backward pass",
                _args, run)
