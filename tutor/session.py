"""A learner's session with one pack: run a check, record it, say what changed.

The TUI, `check`, `check --all`, `watch` and training all do the same thing around the
evaluator: take the accepted code of the earlier steps, run the candidate, record the attempt
and work out what it unlocked. That lives here, once, with no UI in it. A front end that must
show the verdict before anything can go wrong with the record (the CLI) calls `evaluate` and
then `record`; the others call `check`.

The store may be missing (progress that cannot be opened): checks still run, with the
reference solutions standing in for the earlier steps, and every outcome says what was not
saved and why.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field

from tutor import curriculum
from tutor.packs import Pack
from tutor.progress import Store, StoreError
from tutor.results import CheckResult, Status


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


@dataclass
class Hints:
    """The hints of one step shown so far, after asking for the next: `new` says whether this
    ask showed one (the last hint stays the last), `problem` why it could not be counted."""

    step: str
    shown: tuple[str, ...]
    total: int
    new: bool
    problem: str | None = None


@dataclass
class CheckOutcome:
    """A check and what it changed: the step's status after it, the steps it opened, and why
    it was not saved when it was not."""

    result: CheckResult
    status: Status | None = None  # None when nothing was recorded
    unlocked: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def revealed_pass(self) -> bool:
        """Right, on a step whose solution was shown: it counts as an attempt, not a solve."""
        return self.result.passed and self.status is Status.REVEALED


class Session:
    def __init__(self, pack: Pack, store: Store | None, evaluator, problem: str | None = None):
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

    def record(self, step_id: str, code: str, result: CheckResult) -> CheckOutcome:
        """Record an attempt and say what it changed."""
        if self.store is None:
            return CheckOutcome(result, problem=self.problem or "there is no progress store")
        store = self.store
        before = store.statuses()
        problem = save(lambda: store.record_attempt(step_id, code, result))
        after = store.statuses()
        sid = self.pack.step(step_id).id
        return CheckOutcome(result, after.get(sid), curriculum.unlocked(before, after), problem)

    def check(self, step_id: str, code: str) -> CheckOutcome:
        return self.record(step_id, code, self.evaluate(step_id, code))

    def is_attempt(self, step_id: str, code: str) -> bool:
        """Whether checking `code` counts as an attempt: the untouched template does not (a
        workbook or a file run from the top checks every step, solved or not)."""
        return code.strip() != self.pack.step(step_id).template.strip()

    def hints_shown(self, step_id: str) -> int:
        return 0 if self.store is None else self.store.hints_shown(step_id)

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

    def record_training_run(self, run: dict) -> tuple[int | None, str | None]:
        """(the run's id, None), or (None, why it was not saved)."""
        if self.store is None:
            return None, self.problem or "there is no progress store"
        saved: list[int] = []
        problem = save(lambda: saved.append(self.store.record_training_run(run)), tries=1)
        return (saved[0] if saved else None), problem
