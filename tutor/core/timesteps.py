"""An output with a time axis, compared one time step at a time.

A function that loops through time (backprop through time, `lstm_backward`) writes one slice of
an output per step. When that output is wrong as a whole, the step where it first leaves
autograd's says which part of the loop is wrong: the last step alone (what the loop starts
from), every step but the last (a gradient carried from one step to the one before), the first
step alone (the starting state). A backward loop runs from the last step to the first, so the
first wrong step is counted from there.

The step field `time` (`dxs[:, t]`, tutor/pack/model.py) names the output and its axis; nothing
here knows which network it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tutor.core.grading import PROBE_HEADROOM, RELATIVE_FLOOR, ROUNDING_HEADROOM

Tensor = torch.Tensor

FIGURE_KIND = "time"  # `CheckResult.figure["kind"]` of the per-step picture


@dataclass
class TimeSteps:
    """One output compared step by step: the size of each step's slice (its norm), the
    learner's and autograd's, the largest |yours − autograd| in it, and whether it is wrong."""

    name: str  # the output, `dxs`
    axis: int
    yours: list[float]
    autograd: list[float]
    maxdiff: list[float]
    wrong: list[bool]
    # The step's picture ([steps.picture]): a carried gradient at every step, on the lesson's
    # case and on each demo (Series.to_dict), drawn under this output's own bars.
    panels: list[dict] = field(default_factory=list)
    about: str = ""  # what the picture's demos show (its `about`)

    @property
    def steps(self) -> int:
        return len(self.wrong)

    @property
    def first_wrong(self) -> int | None:
        """The first wrong step going back from the last, as a backward loop meets them."""
        return next((t for t in reversed(range(self.steps)) if self.wrong[t]), None)

    def slice(self, t: int | str) -> str:
        return f"{self.name}[{', '.join([':'] * self.axis + [str(t)])}]"

    def message(self) -> str:
        """Where the output first goes wrong, going back from the last step; "" when no step is
        wrong."""
        first = self.first_wrong
        if first is None:
            return ""
        last = self.steps - 1
        back = last - first
        right = (f"t = {last} is right" if back == 1 else
                 f"t = {last} down to {first + 1} are right" if back > 1 else "")
        where = ("the last step, where the backward loop starts" if back == 0 else
                 f"{_steps(back)} before the last ({right})")
        if first == 0 and back > 0:
            where = f"the first step, {where}"
        wrong = [t for t in range(self.steps) if self.wrong[t]]
        if len(wrong) == self.steps:
            tail = "; it is wrong at every step"
        elif wrong == list(range(first + 1)):
            tail = "" if first == 0 else ", and at every step before it"
        else:
            shown = ", ".join(str(t) for t in reversed(wrong[-6:]))
            tail = (f"; it is wrong at {len(wrong)} of {self.steps} steps: t = {shown}"
                    + (", ..." if len(wrong) > 6 else ""))
        return (f"Step by step, going back from the last (t = {last}): {self.slice('t')} first "
                f"differs from autograd's at t = {first}, {where}{tail}.")

    def right_everywhere(self, others: list[str]) -> str:
        """Said when this output is right at every step and `others` (outputs without a time
        axis) are not: what reaches each step is right; what is summed over them is not."""
        return (f"{self.slice('t')} is right at every time step (t = 0 to {self.steps - 1}): "
                f"what reaches each step is right, so the error is in "
                f"{', '.join(others)}, which add up over the steps.")

    def figure(self) -> dict:
        """The picture's data (`CheckResult.figure`): per step, the size of the learner's slice
        and of autograd's, and where they differ."""
        return {
            "kind": FIGURE_KIND,
            "title": self.slice("t"),
            "name": self.name,
            "axis": self.axis,
            "yours": self.yours,
            "autograd": self.autograd,
            "maxdiff": self.maxdiff,
            "wrong": self.wrong,
            "first_wrong": self.first_wrong,
            "panels": self.panels,
            "about": self.about,
        }


@dataclass
class Series:
    """One panel of a step's picture: a gradient the function carries (`dh_t`), its size at
    every time step, the learner's beside autograd's; None where the learner's call failed or
    ran out of its time."""

    title: str  # `dh_t`
    case: str  # "lesson", or a demo's name ("forget gate shut")
    yours: list[float | None]
    autograd: list[float]
    wrong: list[bool]

    def to_dict(self) -> dict:
        return {"title": self.title, "case": self.case, "yours": self.yours,
                "autograd": self.autograd, "wrong": self.wrong}


def series(title: str, case: str, yours: list[Tensor | None], ref32: list[Tensor],
           ref64: list[Tensor]) -> Series:
    """Sizes per step of `yours` and autograd's, and whether each step is wrong.

    Each step is held to its own size: a picture spans powers of ten (a gradient vanishing to
    1e-13), and a tolerance set by the largest step would pass anything at the small ones. A
    step's slice rounds with fewer entries to average over than a whole output, and a value of
    1e-13 computed in float32 carries the rounding of every step it went through, so the
    headroom is the probe's (correct functions stay below a tenth of it; wrong ones are 1e5
    times past it)."""
    sizes, autograd, wrong = [], [], []
    for mine, theirs32, theirs in zip(yours, ref32, ref64, strict=True):
        theirs = theirs.detach().to("cpu", torch.float64)
        autograd.append(_round(float(theirs.norm())))
        if (not isinstance(mine, Tensor) or mine.shape != theirs.shape
                or not torch.isfinite(mine).all()):
            sizes.append(None)
            wrong.append(isinstance(mine, Tensor))  # a value that cannot be drawn is wrong
            continue
        mine = mine.detach().to("cpu", torch.float64)
        sizes.append(_round(float(mine.norm())))
        tolerance = _tolerance(theirs32.detach().to("cpu", torch.float64), theirs,
                               PROBE_HEADROOM)
        wrong.append(float((mine - theirs).abs().max()) > tolerance if mine.numel() else False)
    return Series(title, case, sizes, autograd, wrong)


def _tolerance(ref32: Tensor, ref64: Tensor, headroom: float = ROUNDING_HEADROOM) -> float:
    """How far from the float64 reference a value may be: the tolerance `grading.accepts` gives
    the whole output (autograd's own float32 rounding, with headroom, or a relative floor)."""
    autograd_error = float((ref32 - ref64).abs().max()) if ref64.numel() else 0.0
    top = float(ref64.abs().max()) if ref64.numel() else 0.0
    return max(headroom * autograd_error, RELATIVE_FLOOR * top)


def _steps(k: int) -> str:
    return "one step" if k == 1 else f"{k} steps"


def by_time(name: str, axis: int, value: Tensor, ref32: Tensor, ref64: Tensor
            ) -> TimeSteps | None:
    """`value` against autograd's, one slice of `axis` at a time; None where the value cannot
    be sliced like the reference (another shape, not finite, no such axis).

    A step is wrong when its slice is further from the float64 reference than the whole output
    may be (the tolerance `grading.accepts` gives the whole): the output is wrong exactly when
    some step is, and a step's own rounding never counts against it.
    """
    if (not isinstance(value, Tensor) or value.shape != ref32.shape or axis >= value.dim()
            or value.shape[axis] == 0):
        return None
    ours = value.detach().to("cpu", torch.float64)
    if not torch.isfinite(ours).all():
        return None
    ref64 = ref64.detach().to("cpu", torch.float64)
    tolerance = _tolerance(ref32.detach().to("cpu", torch.float64), ref64)
    yours, autograd, maxdiff, wrong = [], [], [], []
    for t in range(value.shape[axis]):
        mine, theirs = ours.select(axis, t), ref64.select(axis, t)
        diff = float((mine - theirs).abs().max()) if mine.numel() else 0.0
        yours.append(_round(float(mine.norm())))
        autograd.append(_round(float(theirs.norm())))
        maxdiff.append(_round(diff))
        wrong.append(diff > tolerance)
    return TimeSteps(name, axis, yours, autograd, maxdiff, wrong)


def _round(x: float) -> float:
    return float(f"{x:.4g}")
