"""The lesson's rules, apart from how progress is stored: which steps are open, which depend on
which, what a new achievement unlocks, and how the achievements are counted. Pure functions of
the pack and the achievements."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from tutor.pack.model import Pack, Step
from tutor.values.records import FrozenRecord
from tutor.values.results import Status


def statuses(pack: Pack, achieved: Mapping[str, str]) -> dict[str, Status]:
    """Every step's status, in order. An exercise opens when the exercises it requires are
    done (docs/packs.md), and its steps open one after another."""
    return {s.id: Status(achieved[s.id]) if s.id in achieved
            else Status.LOCKED if _blockers(pack, s, achieved) else Status.UNLOCKED
            for s in pack.steps}


def blockers(pack: Pack, step_id: str, done: Collection[str]) -> list[Step]:
    """The steps not in `done` that must still be done before a step opens, in lesson order:
    every step of the exercises its exercise requires, the earlier steps of its own exercise,
    and what keeps each of those locked in turn (the LSTM's training requires exercises 2 and 3,
    which require exercise 1: thirteen steps at the start, not three)."""
    found: dict[str, Step] = {}
    waiting = _blockers(pack, pack.step(step_id), done)
    while waiting:
        step = waiting.pop()
        if step.id not in found:
            found[step.id] = step
            waiting += _blockers(pack, step, done)
    return sorted(found.values(), key=lambda s: pack.index(s.id))


def _blockers(pack: Pack, step: Step, done: Collection[str]) -> list[Step]:
    exercise = pack.exercise(step.exercise)
    required = [s for ex in pack.exercises if ex.number in exercise.requires for s in ex.steps]
    # Found by id: comparing whole steps field by field would cost every status read more.
    earlier = exercise.steps[:[s.id for s in exercise.steps].index(step.id)]
    return [s for s in (*required, *earlier) if s.id not in done]


def dependents(pack: Pack, step_id: str) -> list[str]:
    """Steps whose accepted work builds on this one and so must be redone if it changes: later
    steps of the same exercise that replay it, and the training step of an exercise that
    requires this one's."""
    step = pack.step(step_id)
    later = pack.steps[pack.index(step.id) + 1:]
    return [s.id for s in later
            if (s.exercise == step.exercise and s.replay and not s.kind.trained)
            or (s.kind.trained and not step.kind.trained
                and step.exercise in pack.exercise(s.exercise).requires)]


def unlocked(before: Mapping[str, Status], after: Mapping[str, Status]) -> list[str]:
    """Steps that were locked before and are open now."""
    return [sid for sid, st in after.items()
            if before.get(sid) is Status.LOCKED and st is not Status.LOCKED]


def after_check(pack: Pack, before: Mapping[str, Status], step_id: str,
                earned: Status | None) -> dict[str, Status]:
    """Every step's status once a check that earned `earned` (None: it did not pass) is
    recorded on `step_id`, as the progress store will record it: worked out before the write,
    so the verdict can be shown first."""
    achieved = {sid: st for sid, st in before.items() if Status(st).done}
    if earned is not None:
        old = achieved.get(step_id)
        achieved[step_id] = upgrade(Status(old) if old else None, earned)
    return statuses(pack, achieved)


def upgrade(old: Status | None, new: Status) -> Status:
    """The status after earning `new` on a step that had `old`: achievements only go up, and a
    revealed step stays revealed."""
    if old is Status.REVEALED:
        return old
    order = (None, Status.SKIPPED, Status.PASSED, Status.EXACT)
    return new if order.index(new if new in order else None) >= order.index(
        old if old in order else None) else old


@dataclass(repr=False, eq=False)
class Tally(FrozenRecord):
    """The learner's steps counted in the one vocabulary every front end uses: a step is done
    when it is exact, passed (approximately equal), passed without the line's rule (skipped)
    or revealed, and each done step is exactly one of the four."""

    steps: int
    exact: int
    passed: int
    revealed: int
    skipped: int = 0
    attempts: int = 0
    hints: int = 0
    seconds: float = 0.0

    @property
    def done(self) -> int:
        return self.exact + self.passed + self.skipped + self.revealed

    @property
    def parts(self) -> str:
        """"6 exact, 2 passed, 14 revealed": the parts that are not zero."""
        parts = [(self.exact, Status.EXACT), (self.passed, Status.PASSED),
                 (self.skipped, "passed without the rule"), (self.revealed, Status.REVEALED)]
        return ", ".join(f"{n} {word}" for n, word in parts if n) or "none done yet"

    def sentence(self) -> str:
        """"22 of 23 steps done (6 exact, 2 passed, 14 revealed)"."""
        parts = f" ({self.parts})" if self.done else ""
        return f"{self.done} of {self.steps} steps done{parts}"

    def to_dict(self) -> dict:
        return {"steps": self.steps, "done": self.done, "exact": self.exact,
                "passed": self.passed, "skipped": self.skipped, "revealed": self.revealed,
                "attempts": self.attempts,
                "hints": self.hints, "seconds": round(self.seconds, 1)}


def tally(rows: Iterable[Mapping]) -> Tally:
    """Count rows shaped like the progress store's summary (a status per step, and optionally
    attempts, hints and seconds)."""
    rows = list(rows)
    status = [str(r["status"]) for r in rows]
    return Tally(steps=len(rows), exact=status.count(Status.EXACT.value),
                 passed=status.count(Status.PASSED.value),
                 skipped=status.count(Status.SKIPPED.value),
                 revealed=status.count(Status.REVEALED.value),
                 attempts=sum(r.get("attempts", 0) for r in rows),
                 hints=sum(r.get("hints", 0) for r in rows),
                 seconds=sum(r.get("seconds", 0.0) for r in rows))
