"""Messages that evaluator workers post back to the app.

Workers run in threads and never touch widgets; they report through these messages, which
Textual delivers on the app's own thread (the harlequin pattern).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # imported only to be named: the first frame needs neither
    from tutor.values.results import CheckResult, ScratchResult
    from tutor.values.runs import TrainingRun


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


class TrainingRecorded(Message):
    """The training screen kept a run in the store (it may have completed exercise 4)."""

    def __init__(self, result: TrainingRun) -> None:
        super().__init__()
        self.result = result
