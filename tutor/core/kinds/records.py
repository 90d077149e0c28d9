"""What a confined child sends back, read: plain data that is never trusted to be well formed.

Every kind of step reads the child's records through these (tutor/core/kinds/), and so does the
engine for what all checks share (an error, a scratch run's output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from tutor.core import diagnosis as dx
from tutor.pack.flow import gradient
from tutor.process import isolate
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.values.results import CheckError, ErrorKind, Heldout, TensorCheck, Verdict

Tensor = torch.Tensor


class Unreadable(Exception):
    """The child's data did not decode: the check is not graded (an internal error)."""

    @property
    def error(self) -> CheckError:
        return CheckError.internal("the sandbox sent back data that does not read as tensors; "
                                   "the check was not graded")


@dataclass(frozen=True)
class Foreign:
    """A value that is not a tensor, by the name of its type."""

    type_name: str


@dataclass(frozen=True)
class OddTensor:
    """A tensor that cannot be graded as a gradient (sparse, meta, complex, ...), and why."""

    why: str


def decode(item: Any) -> Any:
    kind = item[0] if isinstance(item, tuple) and item else None
    if kind == "tensor":
        return isolate.decode_tensor(item)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "odd":
        return OddTensor(clean(item[1], 300))
    return Foreign(clean(item[1] if kind == "object" else "unknown", 60))


def decode_namespace(encoded: Any) -> dict:
    if not isinstance(encoded, dict):
        return {}
    return {str(k): decode(v) for k, v in encoded.items()}


def unusable(tensor: str, value: OddTensor | Foreign, ref: Tensor, partial: bool,
             label: str | None = None) -> TensorCheck:
    """A verdict for a value that cannot be compared with autograd's at all."""
    g = TensorCheck(tensor, label or gradient(tensor), list(ref.shape), partial=partial)
    if isinstance(value, OddTensor):
        g.verdict = Verdict.WRONG
        g.message = f"{g.grad} is {value.why}."
    else:
        g.message = (f"{g.grad} is a {value.type_name}, but it must be a tensor of shape "
                     f"{list(ref.shape)}" + ("" if label else f" like {tensor}"))
    return g


@dataclass
class ChildAnswer:
    """What a child sent back for a check, read once into types and never trusted to be well
    formed: whether the learner's time ran out, each batch's (or case's) record by name, why it
    ended without an answer (crashed, killed) when it did, and what the tutor's own time ran out
    for (`short`: "heldout", "probe", "fresh", "pictures"; tutor/core/clock.py), when it did.
    A record stays plain data: each kind reads its own."""

    timeout: bool = False
    records: dict[str, dict] = field(default_factory=dict)
    crashed: str | None = None
    short: str | None = None

    @classmethod
    def of(cls, plain: Any) -> ChildAnswer:
        if not isinstance(plain, dict):
            return cls(crashed="the sandbox sent an answer that is not one")
        records = plain.get("records")
        crashed = plain.get("crashed")
        short = plain.get("short")
        return cls(
            timeout=bool(plain.get("timeout")),
            records={str(k): v for k, v in records.items() if isinstance(v, dict)}
            if isinstance(records, dict) else {},
            crashed=crashed if isinstance(crashed, str) else None,
            short=short if isinstance(short, str) else None,
        )

    def record(self, name: str) -> dict | None:
        return self.records.get(name)


def refuse(heldout: Heldout, grades: list[TensorCheck]) -> None:
    """The fresh re-check failed: the first row carries why."""
    heldout.passed = False
    grades[0].diagnosis = dx.diagnosis("heldout", heldout.message or "")
    grades[0].message = heldout.message or ""


# The kinds of error a child may report; anything else it says is read as a runtime error.
_CHILD_KINDS = (ErrorKind.SYNTAX, ErrorKind.FORBIDDEN, ErrorKind.RUNTIME, ErrorKind.TIMEOUT,
                ErrorKind.MEMORY)


def clean_error(payload: Any) -> CheckError:
    """An error from the child, shown as is but never trusted to be well formed."""
    if not isinstance(payload, dict):
        return CheckError.internal("the sandbox sent a malformed error")
    error = CheckError.from_dict(payload)
    if error.kind not in _CHILD_KINDS:
        error.kind = ErrorKind.RUNTIME
    error.message = clean(error.message, MAX_MESSAGE)
    return error
