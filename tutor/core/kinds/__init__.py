"""The engine's tier of the step kinds: how a check of each kind is planned, graded and held
out (`StepCheck`, tutor/core/kinds/base.py). The pack's tier, what every layer may ask of a kind, is
tutor/pack/kinds.py; `CHECKS` pairs each kind there with its class here.
"""

from __future__ import annotations

from tutor.config import Settings
from tutor.core.kinds.base import Graded, NotChecked, StepCheck
from tutor.core.kinds.function import FunctionCheck
from tutor.core.kinds.lines import LineCheck
from tutor.core.kinds.records import Unreadable
from tutor.core.kinds.training import TrainingCheck
from tutor.core.network import Network
from tutor.pack.kinds import Function, Fused, LineGradient, StepKind, Training
from tutor.pack.model import Step

#: Each kind of step and the class that checks it. Per-line and fused steps share one.
CHECKS: dict[type[StepKind], type[StepCheck]] = {
    LineGradient: LineCheck,
    Fused: LineCheck,
    Function: FunctionCheck,
    Training: TrainingCheck,
}

__all__ = ["CHECKS", "Checks", "Graded", "NotChecked", "StepCheck", "Unreadable",
           "plan_classes"]


def plan_classes() -> frozenset[tuple[str, str]]:
    """(module, name) of every class a kind's plan may hold: what a started child's unpickler
    accepts, derived from the kinds so that a new kind brings its own."""
    return frozenset((cls.__module__, cls.__qualname__)
                     for check in dict.fromkeys(CHECKS.values()) for cls in check.plan_types)


class Checks:
    """One `StepCheck` per class for a lesson, each with the caches it keeps between checks."""

    def __init__(self, network: Network, settings: Settings):
        self._by_class = {cls: cls(network, settings) for cls in dict.fromkeys(CHECKS.values())}

    def of(self, step: Step) -> StepCheck:
        """The check of `step`'s kind. Raises KeyError for a kind no class checks."""
        return self._by_class[CHECKS[type(step.kind)]]

    def each(self) -> list[StepCheck]:
        return list(self._by_class.values())
