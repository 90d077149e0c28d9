"""How the engine checks one kind of step: the engine's tier of the step kinds.

A pack's step has a kind (tutor/pack/kinds.py: a gradient line by line, fused lines, a whole
function, the training run). The engine runs one pipeline for every check (docs/architecture.md,
the path of one check): compile the candidate once, plan the child's work, run it confined,
grade what comes back, confirm the rule, hold the answer out on data it has not seen, draw the
figure. Each step of that pipeline that depends on the kind is a method of `StepCheck`; a new
kind of step is one subclass, listed in `tutor/core/kinds/__init__.py`.

A `StepCheck` runs in the worker, next to autograd's answers, and plans in the child that runs
the learner's code (forked from the worker, it plans from what it inherited, then `forget`s
every answer before the learner's code runs).
"""

from __future__ import annotations

import marshal
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from tutor.config import Settings
from tutor.core.execution import CheckSpec, FunctionCheckSpec
from tutor.core.kinds.records import ChildAnswer
from tutor.core.network import Network
from tutor.pack.model import Step
from tutor.values.results import CheckError, CheckResult, Heldout, TensorCheck

Spec = CheckSpec | FunctionCheckSpec


class NotChecked(Exception):
    """A step of this kind is not checked at all (the training run is trained, not checked)."""

    def __init__(self, error: CheckError):
        super().__init__(error.message)
        self.error = error


@dataclass
class Graded:
    """What grading the child's answer gave: the rows, and what later stages of the pipeline
    read again (`state`: the kind's own, such as the namespaces a per-line check ran in)."""

    rows: list[TensorCheck]
    state: Any = None

    @property
    def passed(self) -> bool:
        """Every row accepted and none diagnosed: the answer goes on to the rule and the
        held-out data."""
        return all(g.accepted and not g.diagnosis for g in self.rows)


class StepCheck(ABC):
    """The engine's questions about one kind of step, answered once per kind for one lesson.

    Built by the engine with its lesson and settings; holds the caches the kind keeps between
    checks (the namespaces a step starts from, a function's cases), which `forget` clears.
    """

    #: The classes this kind's plan holds when it crosses to a started child: the child's
    #: unpickler accepts these and no others (`kinds.plan_classes`, `spawn.unpack_plan`).
    plan_types: ClassVar[tuple[type, ...]] = ()

    def __init__(self, network: Network, settings: Settings):
        self.network = network
        self.pack = network.pack
        self.settings = settings
        # How changed programs of a refused answer run: in a confined child, as the engine runs
        # a check (`Engine.run_variants`: step, code, prior, compiled programs, seconds -> the
        # child's answer). None where no engine runs children: then no change is searched.
        self.run_variants: Callable[[Step, str, dict[str, str], list[bytes], float], dict] \
            | None = None

    def changed_values(self, step: Step, code: str, prior: dict[str, str],
                       sources: list[str]) -> list[list[dict | None]]:
        """Changed programs of the learner's code (tutor/core/smallest.py), each compiled as the
        candidate is (`candidate.program`: the policy and the guard) and run in a confined child
        on what the candidate started from: per source, its graded values per batch (or case),
        the main one first, None where it failed; an empty list where it did not run (it does
        not compile, or the child ran out of time or ended)."""
        from tutor.core.candidate import CodeError, compile_candidate
        from tutor.core.kinds.records import decode_namespace

        smallest = smallest_search()
        out: list[list[dict | None]] = [[] for _ in sources]
        if self.run_variants is None or smallest is None:
            return out
        programs, at = [], []
        for i, source in enumerate(sources):
            try:
                # As candidate.program compiles, without filling its cache with these.
                programs.append(marshal.dumps(compile_candidate(source)))
            except (CodeError, ValueError, RecursionError, MemoryError):
                continue  # the policy refuses it: it runs nowhere
            at.append(i)
        if not programs:
            return out
        answer = self.run_variants(step, code, prior, programs, smallest.BUDGET)
        got = answer.get("variants") if isinstance(answer, dict) else None
        for i, per in zip(at, got if isinstance(got, list) else [], strict=False):
            try:
                out[i] = [decode_namespace(v) if isinstance(v, dict) else None
                          for v in (per if isinstance(per, list) else [])]
            except Exception:  # noqa: BLE001 - data that does not decode matches nothing
                out[i] = []
        return out

    def admit(self, step: Step) -> None:
        """Whether `step` can be checked at all, asked before anything is compiled or run.

        Takes the step; returns None. Raises NotChecked with the learner's error when a step of
        this kind is not checked.
        """
        return None

    def built(self, step: Step) -> bool:
        """Whether `build_ahead` has nothing left to build for `step` (so that it is quick)."""
        return True

    def build_ahead(self, step: Step) -> bool:
        """Build, in the worker, what planning `step` needs and a confined child cannot build
        (the pack's trusted code may open files the first time it runs).

        Takes the step; returns True when it built something a child forked earlier does not
        have (the engine then forks afresh). Raises what the pack's code raises (PackError).
        """
        return False

    @abstractmethod
    def plan(self, step: Step, code: str, prior: dict[str, str],
             compiled: bytes | None = None) -> Spec:
        """The child's work for one check: what to run, on what, within which time.

        Takes the step, the candidate's source, the learner's accepted code for earlier steps
        (`prior`, by step id) and the candidate already compiled behind the guard (marshalled,
        from `candidate.program`; None to have the child compile it). Returns the spec the
        child runs (`execution.run_spec`); it holds no answer for the step. Raises nothing.
        """

    @abstractmethod
    def first(self, step: Step) -> str:
        """The name of the record (batch or case) whose answer makes the rows.

        Takes the step; returns the record's name. Raises nothing.
        """

    @abstractmethod
    def grade(self, step: Step, code: str, prior: dict[str, str], outcome: ChildAnswer,
              result: CheckResult) -> Graded:
        """The rows: each graded name against autograd, diagnosed where wrong.

        Takes the step, the candidate, `prior`, the child's whole answer (`records` by name,
        `timeout`) whose first record is usable (no error), and the result so far, to which it
        adds notes and the printed output as the learner should see them. Returns the rows and
        what the later stages need. Raises Unreadable when the child's data does not decode.
        """

    def confirm(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded) -> bool:
        """The rule, beyond the numbers, for an answer whose rows all passed: each row's
        `rule` (followed or skipped; None where no probe applies).

        Takes the step, the candidate, the child's answer and the rows; returns False when it
        refused a row (and diagnosed it there), which no kind does today: a skipped rule still
        passes. Raises nothing.
        """
        return True

    @abstractmethod
    def hold_out(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded
                 ) -> Heldout | None:
        """The answer held to data it was not written for (a fresh batch, fresh sizes), once
        the rows and the rule passed.

        Takes the step, the candidate, the child's answer and the rows; returns the Heldout,
        not passed (and said on the first row) when the answer fails there, or None when the
        tutor's own time ran out before that data was run (`outcome.short`) and nothing that
        finished fails: the verdict stands, and the engine says so. Raises nothing.
        """

    def figure(self, step: Step, graded: Graded, passed: bool) -> dict | None:
        """A picture of the step's answer, as plain data, or None: of a solved step's answer,
        or, for a kind whose picture shows where an answer goes wrong, of a wrong one too.

        Takes the step, its rows and whether the check passed; returns the figure's data.
        Raises nothing.
        """
        return None

    def forget(self) -> None:
        """In the child, before the learner's code runs: drop every answer this kind holds.

        Returns None. Raises nothing.
        """
        return None


def smallest_search() -> Any:
    """tutor/core/smallest.py, or None where it is not installed. The student's wheel leaves it
    out (tutor/pack/student.py): every change it finds is a right answer's code, there for any
    program that imports it to read. Without it a wrong answer is explained by the catalogue,
    the slips of the line's operation and the patterns of the numbers, as before."""
    try:
        from tutor.core import smallest
    except ImportError:
        return None
    return smallest
