"""A derivative estimated from values, seen in what the code does rather than how it is spelled.

A difference quotient evaluates one function at two nearby inputs, subtracts the two values, and
scales the small difference up by the inverse of the step: `(f(x + h) - f(x - h)) / (2 * h)`.
However it is written (a lambda, a helper of its own, two names for the two values, `torch.sub`,
`* (0.5 / h)`, a loop over entries, Python floats), the run shows two things that worked-out
derivatives do not do together:

- a subtraction of two tensors that nearly cancel: the difference is under `CANCEL` of the larger
  operand everywhere, and not zero (`f(x + h)` and `f(x - h)`, both close to `f(x)`);
- that difference, or anything computed from it, then scaled up by `AMPLIFY` or more (a division
  by the small step, or a multiplication by its large inverse).

Worked-out derivatives subtract tensors that differ in earnest (`probs - y`, `1 - h**2`,
`dnorm - dnorm.mean(0)`) and scale by sizes (`/ n`, `* n`, a variance's inverse), never by the
inverse of a step that made the difference small. Scalars taken out of tensors (`.item()`,
`float(t)`) leave the trace; pairs of them that nearly cancel, `PAIRS` or more, are the same
thing done in Python. The watch only looks: it changes no value and never raises into the
learner's code.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import warnings
import weakref
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

Tensor = torch.Tensor

CANCEL = 1e-2  # a difference this small against its operands is a near cancellation
AMPLIFY = 20.0  # a step's inverse: 1 / (2 * 1e-2) is 50, a size such as n = 32 is below it...
PAIRS = 8  # scalars taken out that nearly cancel in pairs: a loop of Python-float quotients
MAX_TRACKED = 50_000  # tensors followed at once: past this the watch stops following new ones

_SUBS = {"sub", "sub_", "__sub__", "__rsub__", "__isub__", "subtract"}
_DIVS = {"div", "div_", "__truediv__", "__itruediv__", "true_divide", "divide"}
_MULS = {"mul", "mul_", "__mul__", "__rmul__", "__imul__", "multiply"}
_SCALARS = {"item", "__float__", "tolist"}


class Watch(TorchFunctionMode):
    """Around one run of the learner's code: `found` once it has estimated a derivative."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False
        self._small: dict[int, weakref.ref] = {}  # tensors that carry a near cancellation
        self._scalars: list[float] = []
        self._pairs = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        # A warning the operation raises is said again from the learner's line: raised here,
        # it would be this module's, and the learner would never see it.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = func(*args, **(kwargs or {}))
        if caught:
            _warn_from_caller(caught)
        if not self.found:
            # Looking must never change what the code does: whatever fails here is not seen.
            with contextlib.suppress(Exception):
                self._see(getattr(func, "__name__", ""), args, kwargs or {}, out)
        return out

    # -- what one operation shows ----------------------------------------------------------
    def _see(self, name: str, args: tuple, kwargs: dict, out: Any) -> None:
        if name in _SCALARS:
            self._scalar(out)
            return
        operands = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        carried = [a for a in operands if self._carries(a)]
        if name in _SUBS and len(args) >= 2 and _cancels(args[0], args[1], out):
            self._follow(out)
            return
        if not carried:
            return
        if _scales_up(name, args, carried[0]):
            self.found = True
            return
        for t in out if isinstance(out, tuple | list) else (out,):
            self._follow(t)

    def _carries(self, t: Tensor) -> bool:
        ref = self._small.get(id(t))
        return ref is not None and ref() is t

    def _follow(self, t: Any) -> None:
        if not isinstance(t, Tensor) or len(self._small) >= MAX_TRACKED:
            return
        key = id(t)
        self._small[key] = weakref.ref(t, lambda _r, k=key: self._small.pop(k, None))

    def _scalar(self, value: Any) -> None:
        if not isinstance(value, float) or not math.isfinite(value):
            return
        if self._scalars and _near(self._scalars[-1], value):
            self._pairs += 1
            self.found = self._pairs >= PAIRS
        self._scalars = [value]


_TORCH = os.path.dirname(torch.__file__)


def _warn_from_caller(caught: list[warnings.WarningMessage]) -> None:
    """Each warning, from the first frame outside torch and this module (the learner's code),
    under the filters and the once-per-line registry that frame would have used."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH)
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    if frame is None:
        return
    registry = frame.f_globals.setdefault("__warningregistry__", {})
    for w in caught:
        warnings.warn_explicit(w.message, w.category, frame.f_code.co_filename,
                               frame.f_lineno, registry=registry,
                               module_globals=frame.f_globals)


def _cancels(a: Any, b: Any, out: Any) -> bool:
    """Whether `a - b` (two floating tensors) nearly cancels everywhere, and is not zero."""
    if not all(isinstance(t, Tensor) and t.is_floating_point() for t in (a, b, out)):
        return False
    if out.numel() == 0:
        return False
    with torch.no_grad():
        big = max(float(a.detach().abs().max()), float(b.detach().abs().max()))
        diff = float(out.detach().abs().max())
    return math.isfinite(big) and 0 < diff <= CANCEL * big


def _scales_up(name: str, args: tuple, carried: Tensor) -> bool:
    """Whether this operation multiplies what it carries by AMPLIFY or more."""
    if len(args) < 2:
        return False
    if name in _DIVS and args[0] is carried:
        size = _magnitude(args[1], max)
        return size is not None and 0 < size <= 1 / AMPLIFY
    if name in _MULS:
        other = args[1] if args[0] is carried else args[0]
        size = _magnitude(other, min)
        return size is not None and size >= AMPLIFY
    return False


def _magnitude(value: Any, pick) -> float | None:
    """The largest (or smallest) absolute value of a number or a tensor."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return abs(float(value))
    if isinstance(value, Tensor) and value.numel() and (value.is_floating_point()
                                                        or not value.dtype.is_complex):
        with torch.no_grad():
            a = value.detach().abs()
            return float(a.max() if pick is max else a.min())
    return None


def _near(u: float, v: float) -> bool:
    big = max(abs(u), abs(v))
    return 0 < abs(u - v) <= CANCEL * big
