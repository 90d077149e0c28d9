"""The one seam between what decides and what runs: `Evaluator`, the checks a lesson asks for.

Two things satisfy it: the worker's client (`tutor.evaluator.client.Evaluator`, which runs them
in the sandbox worker) and the in-process engine (`tutor.core.engine.Engine`, which the worker
itself holds, and tests and benchmarks use directly). The lesson controller is written against
this protocol, so it never needs to know which one it was handed.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from tutor.values.results import CheckResult, ScratchResult, Traced


@runtime_checkable
class Evaluator(Protocol):
    def check(self, step_id: str, code: str, prior: dict[str, str] | None = None
              ) -> CheckResult:
        """Grade `code` for a step, the learner's accepted code for earlier steps in `prior`."""
        ...

    def scratch(self, step_id: str, code: str, prior: dict[str, str] | None = None
                ) -> ScratchResult:
        """Run `code` against the lesson without grading it."""
        ...

    def trace(self, cells: list[tuple[bool, str]], steps: list[str]) -> Traced:
        """What a program computes for each step, as code a check can run (best first)."""
        ...
