"""The training step's check: there is none. It is trained (`train`, tutor/training/), and a
check of it is the learner's mistake of usage, said before anything runs."""

from __future__ import annotations

from typing import NoReturn

from tutor.core.kinds.base import Graded, NotChecked, Spec, StepCheck
from tutor.core.kinds.records import ChildAnswer
from tutor.pack.model import Step
from tutor.values.results import CheckError, CheckResult, ErrorKind, Heldout


class TrainingCheck(StepCheck):
    """Refuses every check of a training step (`admit`); nothing past it is ever asked."""

    def admit(self, step: Step) -> None:
        raise NotChecked(CheckError(
            ErrorKind.USAGE, "the training step is run with `backprop-tutor train`, not checked"))

    def plan(self, step: Step, code: str, prior: dict[str, str],
             compiled: bytes | None = None) -> Spec:
        self._refuse(step)

    def first(self, step: Step) -> str:
        self._refuse(step)

    def grade(self, step: Step, code: str, prior: dict[str, str], outcome: ChildAnswer,
              result: CheckResult) -> Graded:
        self._refuse(step)

    def hold_out(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded) -> Heldout:
        self._refuse(step)

    def _refuse(self, step: Step) -> NoReturn:
        self.admit(step)
        raise AssertionError("unreachable")  # admit always raises
