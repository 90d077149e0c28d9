"""The lesson controller: a learner's session with one pack, with no UI in it.

Every front end (the TUI's screens, the CLI's commands, the notebook's magics) talks to a
`Lesson` and to nothing below it: it runs checks and records them, says where each step stands
and why a locked one is locked, what a check unlocked and completed (a step, an exercise, the
lesson), hands out hints and solutions, runs code without grading, runs and keeps training
runs, and keeps drafts, the cursor and the open step. A front end shows what it says and sends
what the learner does; a new front end needs no rule of its own (see docs/architecture.md).

A front end that must show the verdict before anything can go wrong with the record (the CLI,
the TUI) calls `evaluate` and then `record`; the others call `check`.

The store may be missing (progress that cannot be opened): checks still run, with the
reference solutions standing in for the earlier steps, and every outcome says what was not
saved and why.
"""

from __future__ import annotations

import ast
import re
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tutor import code_facts
from tutor.pack import curriculum
from tutor.pack.curriculum import Tally, tally
from tutor.pack.model import DEFAULT_PACK, Exercise, Pack, Step
from tutor.session.packchoice import last_pack, loadable_pack, offered_packs, remember_pack
from tutor.session.store import Store, StoreError
from tutor.source import size_problem
from tutor.values.evaluation import Evaluator
from tutor.values.records import Record
from tutor.values.results import (
    CheckError,
    CheckResult,
    ErrorKind,
    ScratchResult,
    Status,
    Traced,
)

if TYPE_CHECKING:
    from tutor.session.cells import Cell
    from tutor.values.runs import BrokenStep, RunProgress, TrainingRun

# tutor.training (the training loop's plan), a training run's types (tutor.values.runs) and a file's
# cells (tutor.session.cells) are imported where they are used: opening a lesson needs none of them,
# and their imports are a noticeable part of the TUI's first frame.

# What front ends may name without reaching below the controller: the progress counts and
# which lesson opens (the default pack, the choice at launch). The store itself is not among
# them; its error is tutor.session.errors' (a store that cannot be opened is the learner's
# problem to hear about).
__all__ = [
    "DEFAULT_PACK", "BreakError", "BrokenComparison", "CheckOutcome", "Celebration", "Hints",
    "Lesson", "Milestones", "Preview", "Tally", "TrainingSource",
    "cell_size_problem",
    "done_exercises", "is_done", "is_enterable", "last_pack", "loadable_pack", "offered_packs",
    "open_store", "remember_pack", "save", "tally",
]


def open_store(data_home: Path, pack: Pack) -> Store:
    """The learner's progress with `pack`; raises StoreError when it cannot be opened."""
    return Store.open(data_home, pack)


DONE = frozenset(str(s) for s in Status if s.done)


def is_done(status: str) -> bool:
    return status in DONE


def is_enterable(status: str) -> bool:
    return status != Status.LOCKED


def done_exercises(pack: Pack, statuses: Mapping[str, str]) -> set[int]:
    """Numbers of the exercises whose every step is done."""
    return {ex.number for ex in pack.exercises
            if all(is_done(statuses.get(s.id, "locked")) for s in ex.steps)}


def remaining_before(pack: Pack, step: Step, statuses: Mapping[str, str]) -> list[Step]:
    """The steps not done yet that keep `step` locked (see `curriculum.blockers`)."""
    return curriculum.blockers(pack, step.id,
                               {sid for sid, st in statuses.items() if is_done(str(st))})


def differentiated_lines(pack: Pack, statuses: Mapping[str, str]) -> set[str]:
    """Targets of the forward lines whose step is done."""
    return {name for s in pack.gradient_steps if is_done(statuses.get(s.id, "locked"))
            for name in s.lines}


def position_in_lesson(pack: Pack, step: Step) -> tuple[int, int]:
    """1-based position of the step in the whole lesson, and the lesson's step count: the
    numbers `backprop-tutor list` gives, so every front end counts alike."""
    return pack.index(step.id) + 1, len(pack.steps)


def save(write: Callable[[], object], tries: int = 2) -> str | None:
    """Run one write to the progress store, by default trying twice; None when it worked, else
    why not. A store locked by another process, read-only, or missing a table must cost the
    learner this record, never the verdict."""
    reason = ""
    for _ in range(tries):
        try:
            write()
            return None
        # ValueError: text sqlite cannot encode (UnicodeEncodeError), whatever got it this far.
        except (StoreError, sqlite3.Error, OSError, ValueError) as exc:
            reason = str(exc).strip() or type(exc).__name__
    return reason


@dataclass(repr=False, eq=False)
class Hints(Record):
    """The hints of one step shown so far, after asking for the next: `new` says whether this
    ask showed one (the last hint stays the last), `problem` why it could not be counted."""

    step: str
    shown: tuple[str, ...]
    total: int
    new: bool
    problem: str | None = None


@dataclass(repr=False, eq=False)
class CheckOutcome(Record):
    """A check and what it changed: the step's status after it, the steps it opened, and why
    it was not saved when it was not."""

    result: CheckResult
    status: Status | None = None  # None when nothing was recorded
    unlocked: list[str] = field(default_factory=list)
    problem: str | None = None
    # Every step's status after the check, computed once here: front ends show these rather
    # than asking the store again.
    statuses: dict[str, Status] = field(default_factory=dict)

    @property
    def revealed_pass(self) -> bool:
        """Right, on a step whose solution was shown: it counts as an attempt, not a solve."""
        return self.result.passed and self.status is Status.REVEALED


class _CheckAndRecord:
    """Checking and recording, which work without a store too (the CLI's commands)."""

    def __init__(self, pack: Pack, store: Store | None, evaluator: Evaluator | None,
                 problem: str | None = None):
        self.pack = pack
        self.store = store
        self.evaluator = evaluator
        self.problem = problem  # why there is no store, when there is none

    def prior(self) -> dict[str, str]:
        """The accepted code of every solved step; empty (reference solutions stand in) when
        progress cannot be read."""
        if self.store is None:
            return {}
        prior: dict[str, str] = {}
        problem = save(lambda: prior.update(self.store.accepted_codes()))
        if problem:
            self.problem = problem
            return {}
        return prior

    def statuses(self) -> dict[str, Status]:
        if self.store is None:
            return curriculum.statuses(self.pack, {})
        return self.store.statuses()

    def evaluate(self, step_id: str, code: str, prior: dict[str, str] | None = None
                 ) -> CheckResult:
        """Run the candidate against autograd; nothing is recorded."""
        return self.evaluator.check(step_id, code, self.prior() if prior is None else prior)

    def traced(self, cells: list[tuple[bool, str]], step_ids: list[str], own: bool = False
               ) -> Traced:
        """What a whole program computes for each step, as code a check can run (the engine's
        trace: tutor/core/trace.py), best first; steps it does not compute are left out.
        `cells`: the program's cells in order, each with whether it is the exercise's own.
        `own`: the program is the whole notebook, run in its own frame (tutor/core/frame.py)."""
        return self.evaluator.trace(cells, step_ids, own)

    def record(self, step_id: str, code: str, result: CheckResult) -> CheckOutcome:
        """Record an attempt and say what it changed."""
        if self.store is None:
            return CheckOutcome(result, problem=self.problem or "there is no progress store",
                                statuses=self.statuses())
        store = self.store
        before = store.statuses()
        problem = save(lambda: store.record_attempt(step_id, code, result))
        after = store.statuses()
        sid = self.pack.step(step_id).id
        return CheckOutcome(result, after.get(sid), curriculum.unlocked(before, after), problem,
                            after)

    def check(self, step_id: str, code: str) -> CheckOutcome:
        return self.record(step_id, code, self.evaluate(step_id, code))

    def is_attempt(self, step_id: str, code: str) -> bool:
        """Whether checking `code` counts as an attempt: the untouched template does not, nor
        code that is still only placeholders (`dx = ...`, a comment above it, as an exported
        script has them), since a workbook or a file run from the top checks every step,
        solved or not."""
        return (code.strip() != self.pack.step(step_id).template.strip()
                and not code_facts.only_placeholders(code))

    def hints_shown(self, step_id: str) -> int:
        return 0 if self.store is None else self.store.hints_shown(step_id)

    def explanation_counts(self, step_id: str) -> bool:
        """Would opening the step's explanation count as its hints? While the step is not done
        and some hint is still unseen: the explanation works the step out."""
        step = self.pack.step(step_id)
        return (self.store is not None and step.kind.checked and bool(step.hints)
                and not is_done(self.status(step.id))
                and self.hints_shown(step.id) < len(step.hints))

    def count_explanation(self, step_id: str) -> str | None:
        """Count every hint of the step as shown (its explanation was opened); why it could not
        be counted, or None."""
        step = self.pack.step(step_id)
        problem = None
        while problem is None and self.hints_shown(step.id) < len(step.hints):
            problem = self.next_hint(step.id).problem
        return problem

    def next_hint(self, step_id: str, count: bool = True) -> Hints:
        """Show the step's next hint and count it; with `count` False, only the hints shown so
        far. Shown even when it cannot be counted: the learner asked for help, and gets it."""
        step = self.pack.step(step_id)
        before = self.hints_shown(step.id)
        new = count and before < len(step.hints)
        problem = None
        if new:
            if self.store is None:
                problem = self.problem or "there is no progress store"
            else:
                problem = save(lambda: self.store.show_hint(step.id))
        shown = before + 1 if new else before
        return Hints(step.id, tuple(step.hints[:shown]), len(step.hints), new, problem)


@dataclass(repr=False, eq=False)
class Preview(Record):
    """What a verdict on screen will change once its attempt is recorded: the first step it
    opens, said as a note, and whether it passed a step whose solution stays revealed."""

    note: str | None
    revealed: bool


@dataclass(repr=False, eq=False)
class TrainingSource(Record):
    """The training code to run: the learner's draft (and whether it differs from the code
    assembled from the solved steps), or the assembled code with the steps not solved yet,
    whose reference solutions stand in."""

    code: str
    draft: bool
    differs: bool
    missing: list[str]


def _statements(code: str) -> list[str]:
    """The lines that run: the header's comments mention a step count that may differ."""
    return [line.rstrip() for line in code.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _as_read(code: str) -> list[str]:
    """The lines as a learner reads them, the numbers in comments left out: the assembled
    loop's header names a step count that the step-count field changes, while a comment of the
    learner's own is an edit."""
    return [re.sub(r"\d[\d,. _]*", "N", line.rstrip()) if line.lstrip().startswith("#")
            else line.rstrip() for line in code.splitlines() if line.strip()]


class BreakError(ValueError):
    """Why a step cannot be broken as asked (no such step, none in the backward pass, no
    mistake of that number, no refused attempt): one line for the learner."""


@dataclass(repr=False, eq=False)
class BrokenComparison(Record):
    """A run with one step broken on purpose next to a good run of the same code and length:
    the learner's last kept run that passed (`fresh` False) or one trained just now."""

    broken_step: BrokenStep
    good: TrainingRun
    broken: TrainingRun
    fresh: bool
    problem: str | None = None  # why the fresh good run was not kept, when it was not

    def checkpoints(self, count: int = 6) -> list[tuple[int, float | None, float | None]]:
        """(step, the good run's loss, the broken run's) at `count` points of the curves."""
        from tutor.values.runs import checkpoints

        done = max(self.good.steps_done or 0, self.broken.steps_done or 0)
        return checkpoints(self.good.history, self.broken.history, count, done or None)

    def to_dict(self) -> dict:
        return {"broken_step": self.broken_step.to_dict(), "fresh_good_run": self.fresh,
                "checkpoints": [{"step": step, "good": good, "broken": broken}
                                for step, good, broken in self.checkpoints()],
                "good": self.good.to_dict(), "broken": self.broken.to_dict()}


@dataclass(repr=False, eq=False)
class Celebration(Record):
    """What a change completed: each exercise (with the next one not done, if any), then
    possibly the whole lesson, and the figures their summaries show."""

    finished: list[tuple[Exercise, Exercise | None]]
    lesson_done: bool
    rows: list[dict]
    run: TrainingRun | None  # the last finished training run


class Milestones:
    """The exercises done so far, so that each completion is celebrated once."""

    def __init__(self, lesson: Lesson, statuses: Mapping[str, str]):
        self.lesson = lesson
        self.done = done_exercises(lesson.pack, statuses)

    def after(self, statuses: Mapping[str, str],
              before_summary: Callable[[], object] | None = None) -> Celebration | None:
        """What this change completed, or None when it completed no exercise.
        `before_summary` runs first when there is something to summarize (a front end saves
        the time it counts, so the summary includes this very minute)."""
        pack = self.lesson.pack
        done = done_exercises(pack, statuses)
        finished = sorted(done - self.done)
        lesson_done = len(done) == len(pack.exercises) and len(self.done) < len(done)
        self.done = done
        if not finished:
            return None
        if before_summary is not None:
            before_summary()
        from tutor.values.runs import RunStatus

        rows = self.lesson.summary()
        runs = self.lesson.training_runs()
        run = next((r for r in reversed(runs) if r.status is RunStatus.FINISHED), None)
        pairs = []
        for number in finished:
            following = next((ex for ex in pack.exercises
                              if ex.number > number and ex.number not in done), None)
            pairs.append((pack.exercise(number), following))
        return Celebration(pairs, lesson_done, rows, run)


class Lesson(_CheckAndRecord):
    """The whole lesson for a front end: checking and recording, and every rule a screen
    would otherwise decide. Reads that need the store assume there is one (a TUI always has
    one); the CLI's commands work without."""

    @property
    def keeps_progress(self) -> bool:
        """Whether there is a progress store to read and record in."""
        return self.store is not None

    @property
    def progress_path(self) -> Path:
        """Where the learner's progress is kept (the welcome says so)."""
        return self.store.path

    # -- where the learner is -------------------------------------------------------------

    def opening_step(self) -> Step:
        """The step the learner was on last time; a finished pack reopens its last step. The
        training step is never the opening one: it has a screen of its own, opened over the
        last checked step when the learner left from it (`reopens_training`)."""
        try:
            step = self.pack.step(self.store.current_step())
        except (KeyError, TypeError):
            step = self.pack.steps[0]
        if step.kind.trained:
            step = self.pack.gradient_steps[-1]
        return step

    def reopens_training(self) -> Step | None:
        """The training step, when the learner was on its screen last time (a front end records
        it with `open_step`) and it is still open: a front end opens that screen again."""
        try:
            step = self.pack.step(self.store.current_step())
        except (KeyError, TypeError):
            return None
        if not step.kind.trained or remaining_before(self.pack, step, self.statuses()):
            return None
        return step

    def open_step(self, step_id: str) -> None:
        self.store.set_current_step(step_id)

    def status(self, step_id: str) -> str:
        return str(self.statuses().get(self.pack.step(step_id).id, Status.LOCKED))

    def locked_reason(self, step_id: str, statuses: Mapping[str, str] | None = None
                      ) -> str | None:
        """Why the step cannot be opened, in one line; None when it can."""
        step = self.pack.step(step_id)
        statuses = self.statuses() if statuses is None else statuses
        if is_enterable(statuses.get(step.id, "locked")):
            return None
        left = remaining_before(self.pack, step, statuses)
        more = f" and {len(left) - 1} more" if len(left) > 1 else ""
        first = left[0].title if left else "the steps before it"
        return f"{step.title} is locked: finish {first}{more} first."

    def open_steps(self) -> list[tuple[Step, str]]:
        """Every step the learner may open now, with its status, in lesson order. The
        training step opens with the exercises it requires, not with the step before it."""
        statuses = self.statuses()
        out = []
        for step in self.pack.steps:
            status = str(statuses.get(step.id, Status.LOCKED))
            if step.kind.trained:
                if remaining_before(self.pack, step, statuses):
                    continue
            elif not is_enterable(status):
                continue
            out.append((step, status))
        return out

    def first_open_step(self, exercise: Exercise) -> Step:
        """Where to go on in an exercise: its first step not done, else its first."""
        statuses = self.statuses()
        return next((s for s in exercise.steps if not is_done(statuses.get(s.id, "locked"))),
                    exercise.steps[0])

    def first_time(self, key: str) -> bool:
        """Whether this is the first time for something shown once (the welcome, an
        exercise's introduction); it is not the first time any more once asked."""
        if self.store.remembered(key) is not None:
            return False
        self.store.remember(key, "1")
        return True

    def seen(self, key: str) -> bool:
        return self.store.remembered(key) is not None

    # -- what a check changes -------------------------------------------------------------

    def preview(self, step_id: str, result: CheckResult, before: Mapping[str, Status]
                ) -> Preview:
        """What recording `result` will change, worked out from the statuses `before` it, so
        a front end shows it with the verdict, before the write."""
        sid = self.pack.step(step_id).id
        earned = result.achievement
        after = curriculum.after_check(self.pack, before, sid, earned)
        unlocked = [self.pack.step(s) for s in curriculum.unlocked(before, after)]
        note = None
        if unlocked and not unlocked[0].kind.trained:
            note = unlocked[0].title
        elif unlocked:
            note = f"{unlocked[0].title} (everything it needs is done)"
        return Preview(note, earned is not None and before.get(sid) is Status.REVEALED)

    def milestones(self) -> Milestones:
        """A tracker of completed exercises from now on (see `Milestones.after`)."""
        return Milestones(self, self.statuses())

    def summary(self) -> list[dict]:
        """One row per step: status, attempts, hints, best maxdiff, time."""
        return self.store.summary()

    def accepted_codes(self) -> dict[str, str]:
        """The accepted code of every solved step (raises when progress cannot be read; see
        `prior` for the forgiving read a check uses)."""
        return self.store.accepted_codes()

    def redone_by_reset(self, step_id: str) -> list[str]:
        """The done steps that resetting `step_id` sends back to be redone: they replay its
        code."""
        statuses = self.statuses()
        return [d for d in self.store.dependents(self.pack.step(step_id).id)
                if is_done(statuses.get(d, Status.LOCKED))]

    def reset(self, step_id: str) -> list[str]:
        """Start a step over, and what depends on it; returns the steps that changed."""
        return self.store.reset(self.pack.step(step_id).id)

    def reset_all(self) -> None:
        self.store.reset_all()

    def training_runs(self) -> list[TrainingRun]:
        """Every run kept so far, oldest first, read back typed (rows kept by earlier versions
        included)."""
        from tutor.values.runs import TrainingRun

        return [TrainingRun.from_dict(row) for row in self.store.training_runs()]

    def add_time(self, step_id: str, seconds: float) -> None:
        self.store.add_time(step_id, seconds)

    # -- solutions ------------------------------------------------------------------------

    def reveal_needs_asking(self, step_id: str) -> bool:
        """A finished step shows its solution without asking: nothing is left to lose, and a
        solved step stays solved (the store never lowers an achievement)."""
        return not is_done(self.status(step_id))

    def can_reveal(self, step_id: str) -> bool:
        """False in a student's copy of the lesson, which holds no reference solutions (a
        course's grader keeps them: tutor/pack/student.py)."""
        return self.pack.step(step_id).has_solution

    def reveal(self, step_id: str) -> None:
        self.store.reveal(self.pack.step(step_id).id)

    def solution_shown(self, step_id: str) -> bool:
        return self.status(step_id) == Status.REVEALED

    # -- drafts and the cursor ------------------------------------------------------------

    def draft(self, step_id: str) -> str | None:
        """What the editor opens with: the draft, else the code that passed the step (a step
        passed from the command line or a notebook shows that code, not the template)."""
        saved = self.store.draft(step_id)
        if saved is not None:
            return saved
        try:
            return self.store.accepted_codes().get(step_id)
        except Exception:  # noqa: BLE001 - progress that cannot be read: the template, then
            return None

    def save_draft(self, step_id: str, code: str) -> None:
        self.store.save_draft(step_id, code)

    def cursor(self, step_id: str) -> tuple[int, int] | None:
        saved = self.store.remembered(f"cursor.{step_id}")
        try:
            row, col = (int(x) for x in (saved or "").split(","))
        except ValueError:
            return None
        return row, col

    def remember_cursor(self, step_id: str, row: int, col: int) -> None:
        self.store.remember(f"cursor.{step_id}", f"{row},{col}")

    # -- a run without grading ------------------------------------------------------------

    def scratch(self, step_id: str, code: str, prior: dict[str, str] | None = None
                ) -> ScratchResult:
        """Run the code without grading: its print output and the shapes it makes; nothing
        is recorded."""
        return self.evaluator.scratch(step_id, code, self.prior() if prior is None else prior)

    # -- training -------------------------------------------------------------------------

    def training_code(self, steps: int | None = None, *, draft: bool = True) -> str:
        """The training step's code: the learner's draft when there is one (and `draft`),
        else the training loop assembled from the accepted steps."""
        from tutor.training.plan import training_code, training_step

        if draft and (kept := self.store.draft(training_step(self.pack).id)):
            return kept
        return training_code(self.pack, self.store.accepted_codes(), steps,
                             revealed=self.store.revealed())

    def training_source(self, steps: int | None = None, *,
                        from_exercises: bool = False) -> TrainingSource:
        """The training code `train` runs, and where it comes from: the training screen's
        draft (the screen reopens with it, so the command line runs the same code), unless
        `from_exercises` asks for the code assembled from the solved steps."""
        from tutor.session.store import training_draft
        from tutor.training.plan import backward_sections, training_code

        accepted = self.store.accepted_codes()
        assembled = training_code(self.pack, accepted, steps, self.store.revealed())
        draft = None if from_exercises else training_draft(self.store, self.pack)
        if draft is None:
            missing = [s.step.id for s in backward_sections(self.pack, accepted) if not s.yours]
            return TrainingSource(assembled, draft=False, differs=False, missing=missing)
        return TrainingSource(draft, draft=True,
                              differs=_statements(draft) != _statements(assembled), missing=[])

    def save_training_draft(self, code: str) -> None:
        """Keep the training screen's code as a draft only where it is the learner's own: the
        code assembled from the solved steps (whatever step count its header says) is no draft,
        so that a step fixed later reaches the training loop without `--from-exercises`."""
        from tutor.training.plan import training_code, training_step

        assembled = training_code(self.pack, self.store.accepted_codes(),
                                  revealed=self.store.revealed())
        own = code if _as_read(code) != _as_read(assembled) else ""
        self.store.save_draft(training_step(self.pack).id, own)

    def remembered(self, key: str) -> str | None:
        return self.store.remembered(key)

    def remember(self, key: str, value: str) -> None:
        self.store.remember(key, value)

    def train(self, code: str, steps: int, *, gradcheck_steps: int | None = None,
              compile: bool = False, reference: bool = False,
              progress: Callable[[RunProgress], None] | None = None) -> TrainingRun:
        """Run the training loop in the evaluator; `progress` hears how it goes. Nothing is
        recorded (see `keep_run`)."""
        return self.evaluator.train(code, steps, gradcheck_steps=gradcheck_steps,
                                    compile=compile, reference=reference, progress=progress)

    # -- what a wrong gradient does ----------------------------------------------------------

    def breakable_steps(self) -> list[Step]:
        """The steps whose code the training step is assembled from, in its order: those a
        run with one gradient broken on purpose can swap."""
        from tutor.training.plan import backward_sections

        return [sec.step for sec in backward_sections(self.pack, None)]

    def _breakable(self, step_id: str) -> Step:
        try:
            step = self.pack.step(step_id)
        except KeyError:
            raise BreakError(f"no step '{step_id}'; `backprop-tutor list` shows them") from None
        steps = self.breakable_steps()
        if step not in steps:
            raise BreakError(f"{step.id} is not part of the training step; these are: "
                             + ", ".join(s.id for s in steps))
        fn = step.function
        if fn is not None and not _called(self.assembled_code(None), fn.name):
            # The training code defines it but nothing calls it (an `lstm_backward` written
            # without `lstm_step_backward`): a broken copy would train exactly as the good one.
            others = ", ".join(s.id for s in steps if s is not step)
            raise BreakError(f"your training code never calls {fn.name}, so breaking it would "
                             f"change nothing; call it from your own code, or break "
                             f"{others or 'another step'}")
        return step

    def first_refused(self, step_id: str) -> BrokenStep | None:
        """The learner's first refused attempt at the step that ran (one that stopped with an
        error would stop the training at once), as a way to break it; None when there is none."""
        from tutor.values.runs import BrokenStep

        step = self._breakable(step_id)
        if self.store is None:
            return None
        attempts: list[dict] = []
        if save(lambda: attempts.extend(self.store.attempts(step.id))):
            return None
        for a in attempts:
            if not a["passed"] and a["verdict"] != "error":
                why = f" ({a['diagnosis']})" if a["diagnosis"] else ""
                return BrokenStep(step.id, None, "your first refused attempt",
                                  f"refused on {a['at'][:10]}: {a['verdict']}{why}", a["code"])
        return None

    def breakages(self, step_id: str) -> list[BrokenStep]:
        """Every way to break the step: its catalogued mistakes, then the learner's own first
        refused attempt, if any."""
        from tutor.values.runs import BrokenStep

        step = self._breakable(step_id)
        count = len(step.mistakes)
        ways = [BrokenStep(step.id, k, f"mistake {k} of {count}", m.message, m.code)
                for k, m in enumerate(step.mistakes, 1)]
        mine = self.first_refused(step.id)
        return ways + ([mine] if mine else [])

    def breakage(self, step_id: str, mistake: int | None = None, *, mine: bool = False
                 ) -> BrokenStep:
        """One way to break the step: catalogued mistake `mistake` (from 1; the first by
        default) or, with `mine`, the learner's first refused attempt. Raises BreakError."""
        step = self._breakable(step_id)
        if mine:
            found = self.first_refused(step.id)
            if found is None:
                raise BreakError(f"you have no refused attempt at {step.id} that ran")
            return found
        count = len(step.mistakes)
        if count == 0:
            raise BreakError(f"{step.id} has no catalogued mistakes; --mine trains with your "
                             "own first refused attempt instead")
        k = 1 if mistake is None else mistake
        if not 1 <= k <= count:
            raise BreakError(f"{step.id} has {count} catalogued mistake"
                             f"{'s' if count > 1 else ''}: choose one from 1 to {count}")
        return self.breakages(step.id)[k - 1]

    def assembled_code(self, steps: int | None, swapped: BrokenStep | None = None) -> str:
        """The training code assembled from the solved steps (the references standing in for
        the others), with one step's code swapped when asked."""
        from tutor.training.plan import training_code

        accepted = self.prior()
        revealed: set[str] = set()
        if self.store is not None:
            save(lambda: revealed.update(self.store.revealed()))
        if swapped is None:
            return training_code(self.pack, accepted, steps, revealed)
        return training_code(self.pack, {**accepted, swapped.step: swapped.code}, steps,
                             revealed, {swapped.step: f"{swapped.label}, broken on purpose"})

    def train_broken(self, step_id: str, code: str, steps: int | None = None, *,
                     compile: bool = False, broken: BrokenStep | None = None,
                     progress: Callable[[RunProgress], None] | None = None) -> TrainingRun:
        """Train with step `step_id`'s code replaced by `code`, the rest as the training code
        assembled from the solved steps. The gradient check is off (it would stop the run at
        its first step, the point is to watch what the wrong gradient does); the run says so
        (`settings.broken`), never passes the exercise and is never kept (`keep_run`)."""
        from tutor.values.runs import BrokenStep

        step = self._breakable(step_id)
        what = broken or BrokenStep(step.id, None, "code of your choice", "", code)
        if what.step != step.id or what.code != code:
            what = BrokenStep(step.id, what.mistake, what.label, what.message, code)
        text = self.assembled_code(steps, what)
        run = self.evaluator.train(text, steps, gradcheck_steps=0, compile=compile,
                                   progress=progress)
        run.settings.broken = what
        run.code = text
        return run

    def comparable_run(self, steps: int | None = None) -> TrainingRun | None:
        """The learner's last kept run that passed the exercise, of the code assembled from
        the solved steps (the code a broken run swaps one step of), of `steps` steps (any
        length when None)."""
        if self.store is None:
            return None
        runs: list[TrainingRun] = []
        if save(lambda: runs.extend(self.training_runs())):
            return None
        for run in reversed(runs):
            if not run.exercise.passed or not run.code:
                continue
            if steps is not None and run.planned_steps != steps:
                continue
            if _statements(run.code) == _statements(self.assembled_code(run.planned_steps)):
                return run
        return None

    def compare_broken(self, broken: BrokenStep, steps: int | None = None, *,
                       compile: bool = False, keep: bool = True,
                       stage: Callable[[str], None] | None = None,
                       progress: Callable[[RunProgress], None] | None = None
                       ) -> BrokenComparison:
        """A run with `broken` in its step's place next to a good run of the same length: the
        last kept run that passed (`comparable_run`), else one trained now on the assembled
        code with the gradient check on, kept (with `keep`) as any run. `stage` hears "good"
        before a fresh good run and "broken" before the broken one."""
        good = self.comparable_run(steps)
        fresh, problem = good is None, None
        if good is None:
            if stage:
                stage("good")
            code = self.assembled_code(steps)
            good = self.train(code, steps or self._default_steps(), progress=progress)
            if keep:
                problem = self.keep_run(code, good)
        if stage:
            stage("broken")
        run = self.train_broken(broken.step, broken.code, good.planned_steps, compile=compile,
                                broken=broken, progress=progress)
        return BrokenComparison(broken, good, run, fresh, problem)

    def _default_steps(self) -> int:
        from tutor.training.plan import TrainingSettings

        return TrainingSettings.from_pack(self.pack).steps

    def check_cells(self, text: str, prior: dict[str, str]) -> list[CheckResult]:
        """Check each `# %% STEP_ID` cell of a file in order; nothing is recorded. A failing
        cell's step falls back to the reference for the cells after it, so one mistake is
        reported once instead of cascading."""
        return _check_cells(self.evaluator, self.pack, text, prior)

    def record_cells(self, text: str, results: list[CheckResult]) -> list[str | None]:
        """Record each checked cell as an attempt (see `_record_cells`); per recorded cell,
        why it was not saved (None when it was)."""
        return _record_cells(self, text, results)

    def keep_run(self, code: str, run: TrainingRun) -> str | None:
        """Keep a training run (a finished run of the learner's own code also passes the
        training step) and put its id in `run`; None when kept, else why not. Not
        retried: the run and its attempt are two writes, and a retry after the first could
        keep the run twice."""
        from tutor.session.store import record_run

        if self.store is None:
            return self.problem or "there is no progress store"
        if run.settings.broken is not None:
            return "a run with a step broken on purpose is only shown, never kept"
        kept: list[int | None] = []
        problem = save(lambda: kept.append(record_run(self.store, self.pack, code, run)),
                       tries=1)
        if kept:
            run.run_id, run.saved = kept[0], True
        return problem


def _called(code: str, name: str) -> bool:
    """Whether `code` reads `name` anywhere outside the body of its own `def` (a function that
    only calls itself is still never run)."""

    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return any(reads(d) for d in node.decorator_list)
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            return True
        return any(reads(child) for child in ast.iter_child_nodes(node))

    try:
        return reads(ast.parse(code))
    except SyntaxError:
        return True  # the run itself will say what is wrong with the code

# --- a file of `# %% STEP_ID` cells, checked from the top (check --all, watch) -----------------

_LEADING_LINE = re.compile(r"\Aline (\d+)\b")


def _check_cells(ev, pack: Pack, text: str, prior: dict[str, str]) -> list[CheckResult]:
    """Check each cell in order. A failing cell's step falls back to the reference for the cells
    after it, so one mistake is reported once instead of cascading."""
    from tutor.session.cells import parse_cells

    prior = dict(prior)
    results = []
    for cell in checked_cells(pack, parse_cells(text)):
        result = _check_cell(ev, pack, cell, prior)
        result.extra["cell_line"] = cell.line
        results.append(result)
        if result.passed:
            prior[result.step] = cell.code
        else:
            prior.pop(result.step, None)
    return results


def checked_cells(pack: Pack, cells: list[Cell]) -> list[Cell]:
    """The cells a check goes through: all but the training step's, which `train` runs and
    `grade` trains (an exported script ends with one)."""
    return [c for c in cells if not _trained(pack, c.step)]


def _trained(pack: Pack, step_id: str) -> bool:
    try:
        return pack.step(step_id).kind.trained
    except KeyError:
        return False


def _check_cell(ev, pack: Pack, cell: Cell, prior: dict[str, str]) -> CheckResult:
    """One cell's result; a cell that cannot be checked gets a result with an error."""
    try:
        sid = pack.step(cell.step).id
    except KeyError:
        return _cell_error(cell.step, f"line {cell.line}: no step '{cell.step}'")
    if pack.step(sid).kind.trained:
        return _cell_error(sid, "the training cell runs with `backprop-tutor train`")
    too_big = cell_size_problem(cell, sid)
    if too_big:
        return _cell_error(sid, too_big)
    result = ev.check(sid, cell.code, prior)
    _to_file_lines(result, cell)
    return result


def cell_size_problem(cell: Cell, sid: str) -> str | None:
    """Why a cell is too big to check, or None."""
    return size_problem(cell.code, f"the cell for {sid} on line {cell.line}")


def _to_file_lines(result: CheckResult, cell: Cell) -> None:
    """The evaluator counts lines from the top of the cell; the learner's editor counts them
    from the top of the file. Shift the error's line, and the "line N" its message starts with."""
    error = result.error
    if not error or not error.line:
        return
    shift = cell.code_line - 1
    error.line += shift
    error.message = _LEADING_LINE.sub(lambda m: f"line {int(m[1]) + shift}", error.message)


def _record_cells(session: Lesson, text: str, results: list[CheckResult]) -> list[str | None]:
    """Record each checked cell as an attempt, as the TUI would; untouched templates are not
    attempts, and cells naming no step have nothing to record. Returns, per recorded cell,
    why it was not saved (None when it was)."""
    from tutor.session.cells import parse_cells

    reasons = []
    for cell, result in zip(checked_cells(session.pack, parse_cells(text)), results,
                            strict=False):
        if result.error and result.error.kind is ErrorKind.USAGE:
            continue
        if not session.is_attempt(result.step, cell.code):
            continue
        reasons.append(session.record(result.step, cell.code, result).problem)
    return reasons


def _cell_error(step: str, message: str) -> CheckResult:
    return CheckResult.failure(step, CheckError(ErrorKind.USAGE, message))



