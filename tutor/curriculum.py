"""The lesson's rules, apart from how progress is stored: which steps are open, which depend on
which, what a new achievement unlocks. Pure functions of the pack and the achievements."""

from __future__ import annotations

from collections.abc import Mapping

from tutor.packs import Pack
from tutor.results import Status


def statuses(pack: Pack, achieved: Mapping[str, str]) -> dict[str, Status]:
    """Every step's status, in order. Gradient steps open one after another; the training step
    opens once every gradient step is done."""
    gradient = [s for s in pack.steps if not s.is_training]
    all_done = all(s.id in achieved for s in gradient)
    earlier_done = True
    out: dict[str, Status] = {}
    for s in pack.steps:
        reachable = all_done if s.is_training else earlier_done
        if s.id in achieved:
            out[s.id] = Status(achieved[s.id])
        else:
            out[s.id] = Status.UNLOCKED if reachable else Status.LOCKED
        if not s.is_training:
            earlier_done = earlier_done and s.id in achieved
    return out


def dependents(pack: Pack, step_id: str) -> list[str]:
    """Steps whose accepted work builds on this one and so must be redone if it changes: later
    steps of the same exercise that replay it, and the training step for any gradient step."""
    step = pack.step(step_id)
    later = pack.steps[pack.index(step.id) + 1:]
    return [s.id for s in later
            if (s.exercise == step.exercise and s.replay and not s.is_training)
            or (s.is_training and not step.is_training)]


def unlocked(before: Mapping[str, Status], after: Mapping[str, Status]) -> list[str]:
    """Steps that were locked before and are open now."""
    return [sid for sid, st in after.items()
            if before.get(sid) is Status.LOCKED and st is not Status.LOCKED]


def upgrade(old: Status | None, new: Status) -> Status:
    """The status after earning `new` on a step that had `old`: achievements only go up, and a
    revealed step stays revealed."""
    if old is Status.REVEALED:
        return old
    order = (None, Status.PASSED, Status.EXACT)
    return new if order.index(new if new in order else None) >= order.index(
        old if old in order else None) else old
