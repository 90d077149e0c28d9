"""What a check says, typed once for everything that reads it: the engine's result, the client,
the progress store, the CLI and the TUI.

The engine still speaks the JSON contract of docs/json.md across the process boundary; a
`CheckResult` is that contract read back into types (`from_dict`), and `to_dict` writes it out
again unchanged. No torch here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Verdict(str, Enum):
    """How one gradient compares with autograd's."""

    EXACT = "exact"
    APPROXIMATE = "approximate"
    WRONG = "wrong"
    SHAPE = "shape"
    MISSING = "missing"

    def __str__(self) -> str:  # the word itself, in f-strings and prints alike
        return self.value

    @property
    def accepted(self) -> bool:
        return self in (Verdict.EXACT, Verdict.APPROXIMATE)


class Status(str, Enum):
    """Where a step stands for the learner. Achievements only go up: passed < exact; revealed
    stays revealed."""

    LOCKED = "locked"
    UNLOCKED = "unlocked"
    PASSED = "passed"
    EXACT = "exact"
    REVEALED = "revealed"

    def __str__(self) -> str:
        return self.value

    @property
    def done(self) -> bool:
        return self in (Status.PASSED, Status.EXACT, Status.REVEALED)

    @property
    def mark(self) -> str:
        """One character that reads without colour, the same in the CLI and the TUI."""
        return _MARKS[self]

    @property
    def words(self) -> str:
        return _WORDS[self]


_MARKS = {Status.LOCKED: "·", Status.UNLOCKED: "○", Status.PASSED: "✓", Status.EXACT: "≡",
          Status.REVEALED: "◇"}
_WORDS = {Status.LOCKED: "locked", Status.UNLOCKED: "open",
          Status.PASSED: "passed (approximately equal)", Status.EXACT: "exact (bit for bit)",
          Status.REVEALED: "solution revealed"}

# The order achievements rank in: a later one replaces an earlier one, never the reverse.
ACHIEVEMENTS = (Status.PASSED, Status.EXACT)


@dataclass
class TensorCheck:
    """One gradient's row: the notebook's cmp columns, the verdict and why."""

    tensor: str
    grad: str
    verdict: Verdict
    shape: list[int] | None = None
    expected_shape: list[int] | None = None
    exact: bool = False
    approximate: bool = False
    maxdiff: float | None = None
    diagnosis: dict | None = None
    message: str = ""
    partial: bool = False
    note: str | None = None
    heatmap: list[list[float]] | None = None
    extra: dict = field(default_factory=dict)  # fields this version does not know, kept as is

    _KNOWN = ("tensor", "grad", "verdict", "shape", "expected_shape", "exact", "approximate",
              "maxdiff", "diagnosis", "message", "partial", "note", "heatmap")

    @classmethod
    def from_dict(cls, d: dict) -> TensorCheck:
        known = {k: d[k] for k in cls._KNOWN if k in d and k not in ("verdict", "tensor", "grad")}
        tensor = str(d.get("tensor", ""))
        return cls(tensor=tensor, grad=str(d.get("grad", f"d{tensor}")), **known,
                   verdict=Verdict(d.get("verdict", "missing")),
                   extra={k: v for k, v in d.items() if k not in cls._KNOWN})

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self._KNOWN}
        d["verdict"] = self.verdict.value
        return {**d, **self.extra}

    @property
    def accepted(self) -> bool:
        return self.verdict.accepted and not self.diagnosis


@dataclass
class CheckResult:
    """A whole check: the rows, the fresh-batch verdict, the code's error and output."""

    step: str
    passed: bool
    checks: list[TensorCheck] = field(default_factory=list)
    heldout: dict | None = None
    error: dict | None = None
    stdout: str = ""
    notes: list[str] = field(default_factory=list)
    figure: dict | None = None
    device: str | None = None
    extra: dict = field(default_factory=dict)

    _KNOWN = ("step", "passed", "checks", "heldout", "error", "stdout", "notes", "figure",
              "device")

    @classmethod
    def failure(cls, step: str, error: dict, device: str | None = None) -> CheckResult:
        """A check that could not run: no rows, only the error."""
        return cls(step=step, passed=False, error={"line": None, "col": None, **error},
                   device=device)

    @classmethod
    def from_dict(cls, d: dict) -> CheckResult:
        return cls(
            step=d.get("step", ""),
            passed=bool(d.get("passed")),
            checks=[TensorCheck.from_dict(c) for c in d.get("checks") or []],
            heldout=d.get("heldout"),
            error=d.get("error"),
            stdout=d.get("stdout") or "",
            notes=list(d.get("notes") or []),
            figure=d.get("figure"),
            device=d.get("device"),
            extra={k: v for k, v in d.items() if k not in cls._KNOWN},
        )

    def to_dict(self) -> dict:
        return {"step": self.step, "passed": self.passed,
                "checks": [c.to_dict() for c in self.checks], "heldout": self.heldout,
                "error": self.error, "stdout": self.stdout, "notes": self.notes,
                "figure": self.figure, "device": self.device, **self.extra}

    def failed(self) -> list[TensorCheck]:
        """The rows that keep the check from passing."""
        return [c for c in self.checks if not c.accepted]

    @property
    def achievement(self) -> Status | None:
        """The status a passing check earns: exact when every row is bit for bit."""
        if not self.passed:
            return None
        exact = self.checks and all(c.verdict is Verdict.EXACT for c in self.checks)
        return Status.EXACT if exact else Status.PASSED

    def summary(self) -> str:
        """One line: what the check came to."""
        if self.error:
            return f"{self.error.get('kind', 'runtime')} error"
        if self.passed:
            return "exact" if self.achievement is Status.EXACT else "passed"
        failing = self.failed()
        if failing:
            return ", ".join(f"{c.grad} {c.verdict.value}" for c in failing)
        if self.heldout and not self.heldout.get("passed"):
            return "wrong on the fresh batch"
        return "not passed"
