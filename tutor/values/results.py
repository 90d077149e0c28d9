"""What a check says, typed once for everything that reads it: the engine's result, the client,
the progress store, the CLI and the TUI.

The engine builds a `CheckResult`; it becomes the plain data of docs/json.md (`to_dict`) only
where it crosses a process boundary (the worker's pipe, `check --json`) and is read back into
types on the other side (`from_dict`). No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Self

from tutor.values.gradnames import gradient
from tutor.values.records import Record


class Word(str, Enum):
    """A word of the JSON contract as an enum: printed as the word itself, and read back from
    plain data without trusting it (`named`: None for a word this version does not know)."""

    def __str__(self) -> str:  # the word itself, in f-strings and prints alike
        return self.value

    @classmethod
    def named(cls, word: object) -> Self | None:
        try:
            return cls(word)
        except ValueError:
            return None


class Verdict(Word):
    """How one gradient compares with autograd's."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    WRONG = "wrong"
    SHAPE = "shape"
    MISSING = "missing"

    @property
    def accepted(self) -> bool:
        return self in (Verdict.EXACT, Verdict.APPROXIMATE)

    @property
    def mark(self) -> str:
        """✓ or ✗: the same in the CLI, the TUI and the notebook."""
        return "✓" if self.accepted else "✗"


class Status(str, Enum):
    """Where a step stands for the learner. Achievements only go up: passed < exact; revealed
    stays revealed."""

    LOCKED = "locked"
    UNLOCKED = "unlocked"
    SKIPPED = "skipped"  # right for this network, but not by the line's own rule (Rule)
    PASSED = "passed"
    EXACT = "exact"
    REVEALED = "revealed"

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> bool:
        return self in (Status.SKIPPED, Status.PASSED, Status.EXACT, Status.REVEALED)

    @property
    def mark(self) -> str:
        """One character that reads without colour, the same in the CLI and the TUI."""
        return _MARKS[self]

    @property
    def words(self) -> str:
        return _WORDS[self]


_MARKS = {Status.LOCKED: "·", Status.UNLOCKED: "○", Status.SKIPPED: "↷", Status.PASSED: "✓",
          Status.EXACT: "≡", Status.REVEALED: "◇"}
_WORDS = {Status.LOCKED: "locked", Status.UNLOCKED: "open",
          Status.SKIPPED: "passed without the line's rule",
          Status.PASSED: "passed (approximately equal)", Status.EXACT: "exact (bit for bit)",
          Status.REVEALED: "solution revealed"}

# The order achievements rank in: a later one replaces an earlier one, never the reverse.
ACHIEVEMENTS = (Status.SKIPPED, Status.PASSED, Status.EXACT)


class Rule(Word):
    """The second question a gradient's verdict answers, once its values are right for this
    network (this batch and a fresh one): is the code the line's rule? The rule probe asks it
    with every entry of the arriving gradient random (docs/architecture.md, the rule probe).

    FOLLOWED: the answer changes as the line's vector-Jacobian product says, whatever arrives.
    SKIPPED: it does not (or the probe's run did not finish with a gradient), yet its values
    match, because of something this network always sends (a gradient that is 0 or nearly 0
    there, the loss's own derivative): the step passes, with its own mark and a note saying
    what was skipped. A row the probe does not apply to has no rule (None)."""

    FOLLOWED = "followed"
    SKIPPED = "skipped"


class ErrorKind(str, Enum):
    """Why code could not be graded (docs/json.md, "Errors")."""

    SYNTAX = "syntax"
    FORBIDDEN = "forbidden"
    RUNTIME = "runtime"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    USAGE = "usage"  # the step was called the wrong way
    INTERNAL = "internal"  # the tutor itself failed
    # Only a training run stops for these: a gradient whose shape cannot update its parameter,
    # a loss that stopped being finite.
    SHAPE = "shape"
    NAN = "nan"

    def __str__(self) -> str:
        return self.value


@dataclass(repr=False, eq=False)
class CheckError(Record):
    """Why a check (or a scratch run) has no rows: what went wrong and where in the code."""

    kind: ErrorKind
    message: str
    line: int | None = None
    col: int | None = None

    @classmethod
    def internal(cls, message: str) -> CheckError:
        """The tutor itself failed (the sandbox died, sent bad data, was closed)."""
        return cls(ErrorKind.INTERNAL, message)

    @classmethod
    def from_dict(cls, d: dict) -> CheckError:
        line, col = d.get("line"), d.get("col")
        try:
            kind = ErrorKind(d.get("kind", "runtime"))
        except ValueError:
            kind = ErrorKind.RUNTIME
        return cls(kind, str(d.get("message", "")), line if isinstance(line, int) else None,
                   col if isinstance(col, int) else None)

    def to_dict(self) -> dict:
        return {"kind": self.kind.value, "message": self.message, "line": self.line,
                "col": self.col}


@dataclass(repr=False, eq=False)
class Diagnosis(Record):
    """What a mistake most likely is: a kind (sign, scale, shape, heldout, ...) and a sentence."""

    kind: str
    message: str

    @classmethod
    def from_dict(cls, d: dict | None) -> Diagnosis | None:
        if not d:
            return None
        return cls(str(d.get("kind", "")), str(d.get("message", "")))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message}


@dataclass(repr=False, eq=False)
class Heldout(Record):
    """The re-check on a fresh batch (or, for a function step, at fresh sizes)."""

    passed: bool = True
    batch_size: int | None = None
    message: str | None = None
    what: str | None = None  # what was fresh, when it was not a batch (function steps)

    @classmethod
    def from_dict(cls, d: dict | None) -> Heldout | None:
        if d is None:
            return None
        return cls(bool(d.get("passed")), d.get("batch_size"), d.get("message"), d.get("what"))

    def to_dict(self) -> dict:
        if self.what is None:
            return {"passed": self.passed, "batch_size": self.batch_size, "message": self.message}
        return {"passed": self.passed, "batch_size": self.batch_size, "what": self.what,
                "message": self.message}


@dataclass(repr=False, eq=False)
class TensorCheck(Record):
    """One gradient's row: the notebook's cmp columns, the verdict and why. The engine's grading
    builds it (tutor/core/grading.py); everything else reads it."""

    tensor: str
    grad: str
    expected_shape: list[int] | None = None
    verdict: Verdict = Verdict.MISSING
    shape: list[int] | None = None
    exact: bool = False
    approximate: bool = False
    maxdiff: float | None = None
    diagnosis: Diagnosis | None = None
    message: str = ""
    partial: bool = False
    note: str | None = None  # why an accepted answer of another shape counts, or similar
    rule: Rule | None = None  # for a row whose values are right: did it follow the line's rule?
    heatmap: list[list[float]] | None = None
    # Whose reference the verdict was measured against, when not the step's own: a first branch
    # typed complete is graded against the step that closes the tensor (kept out of the JSON).
    reference_step: str | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as is

    # The JSON row's keys, in the order docs/json.md shows them.
    _KNOWN = ("tensor", "grad", "shape", "expected_shape", "exact", "approximate", "maxdiff",
              "verdict", "diagnosis", "message", "partial", "heatmap", "note", "rule")

    @classmethod
    def from_dict(cls, d: dict) -> TensorCheck:
        plain = ("shape", "expected_shape", "exact", "approximate", "maxdiff", "message",
                 "partial", "note", "heatmap")
        known = {k: d[k] for k in plain if k in d}
        tensor = str(d.get("tensor", ""))
        return cls(tensor=tensor, grad=str(d.get("grad", gradient(tensor))), **known,
                   verdict=Verdict(d.get("verdict", "missing")),
                   rule=Rule.named(d.get("rule")),
                   diagnosis=Diagnosis.from_dict(d.get("diagnosis")),
                   extra={k: v for k, v in d.items() if k not in cls._KNOWN})

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self._KNOWN}
        d["verdict"] = self.verdict.value
        d["rule"] = self.rule.value if self.rule else None
        d["diagnosis"] = self.diagnosis.to_dict() if self.diagnosis else None
        return {**d, **self.extra}

    @property
    def right(self) -> bool:
        """The values match autograd's (exactly or within rounding), whatever else is said."""
        return self.verdict.accepted

    @property
    def accepted(self) -> bool:
        return self.verdict.accepted and not self.diagnosis

    @property
    def skipped_rule(self) -> bool:
        """Accepted for its values, not for its rule: shown with its own mark, never ✓."""
        return self.accepted and self.rule is Rule.SKIPPED

    @property
    def mark(self) -> str:
        """✓, ↷ (right for this network, not the line's rule) or ✗, alike in every front end."""
        if self.skipped_rule:
            return Status.SKIPPED.mark
        return self.verdict.mark


@dataclass(repr=False, eq=False)
class CheckResult(Record):
    """A whole check: the rows, the fresh-batch verdict, the code's error and output."""

    step: str
    passed: bool
    checks: list[TensorCheck] = field(default_factory=list)
    heldout: Heldout | None = None
    error: CheckError | None = None
    stdout: str = ""
    notes: list[str] = field(default_factory=list)
    figure: dict | None = None
    device: str | None = None
    # The code estimates its derivative from the function's values (a difference quotient)
    # instead of working it out: right, and a course may still refuse it.
    numeric: bool = False
    extra: dict = field(default_factory=dict)

    _KNOWN = ("step", "passed", "rule", "checks", "heldout", "error", "stdout", "notes",
              "figure", "device", "numeric")

    @classmethod
    def failure(cls, step: str, error: CheckError, device: str | None = None) -> CheckResult:
        """A check that could not run: no rows, only the error."""
        return cls(step=step, passed=False, error=error, device=device)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(
            step=d.get("step", ""),
            passed=bool(d.get("passed")),
            checks=[TensorCheck.from_dict(c) for c in d.get("checks") or []],
            heldout=Heldout.from_dict(d.get("heldout")),
            error=CheckError.from_dict(d["error"]) if d.get("error") else None,
            stdout=d.get("stdout") or "",
            notes=list(d.get("notes") or []),
            figure=d.get("figure"),
            device=d.get("device"),
            numeric=bool(d.get("numeric")),
            extra={k: v for k, v in d.items() if k not in cls._KNOWN},
        )

    def to_dict(self) -> dict:
        rule = self.rule
        return {"step": self.step, "passed": self.passed, "rule": rule.value if rule else None,
                "checks": [c.to_dict() for c in self.checks],
                "heldout": self.heldout.to_dict() if self.heldout else None,
                "error": self.error.to_dict() if self.error else None, "stdout": self.stdout,
                "notes": self.notes, "figure": self.figure, "device": self.device,
                "numeric": self.numeric, **self.extra}

    def failed(self) -> list[TensorCheck]:
        """The rows that keep the check from passing."""
        return [c for c in self.checks if not c.accepted]

    @property
    def rule(self) -> Rule | None:
        """The step's answer to "is it the line's rule?": skipped when any row skipped it,
        followed when every probed row followed it, None when no probe applied (or the values
        were not right, so the question was never asked)."""
        if not self.passed:
            return None
        rules = [c.rule for c in self.checks if c.rule is not None]
        if not rules:
            return None
        return Rule.SKIPPED if Rule.SKIPPED in rules else Rule.FOLLOWED

    @property
    def achievement(self) -> Status | None:
        """The status a passing check earns: exact when every row is bit for bit, skipped when
        a row's values are right but not by the line's rule."""
        if not self.passed:
            return None
        if self.rule is Rule.SKIPPED:
            return Status.SKIPPED
        exact = self.checks and all(c.verdict is Verdict.EXACT for c in self.checks)
        return Status.EXACT if exact else Status.PASSED

    def summary(self) -> str:
        """One line: what the check came to."""
        if self.error:
            return f"{self.error.kind} error"
        if self.passed:
            achieved = self.achievement
            return ("exact" if achieved is Status.EXACT else
                    "passed, rule skipped" if achieved is Status.SKIPPED else "passed")
        # A row that is right here but failed the fresh batch reads as that, not as "exact".
        failing = [c for c in self.failed() if not c.right]
        if failing:
            return ", ".join(f"{c.grad} {c.verdict.value}" for c in failing)
        if self.heldout and not self.heldout.passed:
            return "wrong on the fresh batch"
        flagged = [c for c in self.failed() if c.diagnosis]
        if flagged:  # right values, refused for another reason (an input changed in place)
            return ", ".join(f"{c.grad} {c.diagnosis.kind}" for c in flagged if c.diagnosis)
        return "not passed"


@dataclass(repr=False, eq=False)
class Defined(Record):
    """A name a scratch run defined or changed, and a few words on what it holds."""

    name: str
    what: str


@dataclass(repr=False, eq=False)
class ScratchResult(Record):
    """A run of code against the lesson, not graded: its output, its error, what it defined."""

    step: str
    stdout: str = ""
    error: CheckError | None = None
    defined: list[Defined] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict) -> ScratchResult:
        return cls(str(d.get("step", "")), d.get("stdout") or "",
                   CheckError.from_dict(d["error"]) if d.get("error") else None,
                   [Defined(str(x.get("name", "")), str(x.get("what", "")))
                    for x in d.get("defined") or [] if isinstance(x, dict)])

    def to_dict(self) -> dict:
        return {"step": self.step, "stdout": self.stdout,
                "error": self.error.to_dict() if self.error else None,
                "defined": [{"name": x.name, "what": x.what} for x in self.defined]}


@dataclass(repr=False, eq=False)
class Traced(Record):
    """What a whole program computes for each step, as code a check can run (best first), and,
    for a notebook run in its own frame, its own names for the lesson's parameters (`K1` is
    `w1`): what its training loop reads them by."""

    found: dict[str, list[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: object) -> Traced:
        d = d if isinstance(d, dict) else {}
        found, names = d.get("found"), d.get("names")
        return cls({str(k): [str(c) for c in v] for k, v in found.items() if isinstance(v, list)}
                   if isinstance(found, dict) else {},
                   {str(k): str(v) for k, v in names.items()} if isinstance(names, dict)
                   else {})

    def to_dict(self) -> dict:
        return {"found": self.found, "names": self.names}
