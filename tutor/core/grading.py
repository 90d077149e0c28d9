"""Grading one gradient: shape first, then the notebook's exact / approximate / maxdiff.

`exact`, `approximate` and `maxdiff` are measured against autograd's float32 gradient, as the
notebook's `cmp` does. Acceptance is decided against a float64 reference instead: an answer passes
when it is as close to the true gradient as autograd's own float32 result is (with headroom), so a
correct formula is never refused because float32 rounded it differently.

Shape comes first, judged by what the gradient is used for. Exactly the tensor's shape passes
silently. A shape that differs only by size-1 dimensions, and whose values broadcast to the right
gradient, is graded on those broadcast values and passes with a note: the lecture's own
`dbnmeani = (-dbndiff).sum(0)` is `[64]` for a `[1, 64]` tensor, and everything downstream works.
A parameter is held to what its update needs: `p -= lr * dp` must neither fail nor change `p`'s
shape, so `db2` of `[1, 27]` for `b2` of `[27]` is refused while `[64]` for `bngain` of `[1, 64]`
is not.
"""

from __future__ import annotations

import torch

from tutor.core.quick import broadcast_shape
from tutor.pack.flow import gradient
from tutor.values.results import TensorCheck, Verdict

Tensor = torch.Tensor

RTOL, ATOL = 1e-5, 1e-8  # torch.allclose defaults, as in cmp
# How many times autograd's own float32 error an answer may have. Measured on every correct
# answer we keep (benchmarks/headroom.py): correct answers reach 3.0 to 3.4 times, GELU with
# 0.04472 for 0.044715 reaches 9.2 on the lesson's batch; 5.5 is the geometric middle.
ROUNDING_HEADROOM = 5.5
# The rule probe grades the change between two runs, which carries the rounding of both and is
# judged against one float32 VJP: correct answers reach 15 times there. It looks for wrong
# rules, which are thousands of times off; near misses are the values' job.
PROBE_HEADROOM = 64.0
RELATIVE_FLOOR = 1e-6  # errors below this fraction of the gradient's size are rounding


def grade(
    tensor: str,
    value,
    ref32: Tensor,
    ref64: Tensor,
    partial: bool = False,
    parameter: bool = False,
    label: str | None = None,
    headroom: float | None = None,
) -> TensorCheck:
    """Compare a learner's gradient with autograd's; no diagnosis yet, only the facts.

    `parameter` says the tensor is trained with `p -= lr * dp`, which decides which shapes other
    than the exact one can stand. `label` is the name the learner's code gives the value, when
    it is not `d<tensor>` (a function step's outputs).
    """
    g = TensorCheck(tensor, label or gradient(tensor), list(ref32.shape), partial=partial)
    if value is None:
        g.message = f"your code does not define {g.grad}"
        return g
    if value is Ellipsis:
        g.message = f"{g.grad} is still `...`: replace it with your expression"
        return g
    if not isinstance(value, Tensor):
        g.message = (
            f"{g.grad} is a {type(value).__name__}, but it must be a tensor of shape "
            f"{list(ref32.shape)}" + ("" if label else f" like {tensor}")
        )
        return g
    g.shape = list(value.shape)
    if value.shape != ref32.shape:
        if not fits(value.shape, ref32.shape, parameter):
            g.verdict = Verdict.SHAPE
            return g
        # A shape that only stands if its values are right: compare what it broadcasts to.
        _measure(g, as_graded(value, ref32), ref32, ref64, headroom)
        if not g.right and value.numel() != ref32.numel():
            # [1, 64] for [n, 64] is a shape mistake unless every row of the truth is the same.
            g.exact = g.approximate = False
            g.maxdiff = None
            g.verdict = Verdict.SHAPE
            return g
        if g.right:
            g.note = shape_note(tensor, g.shape, g.expected_shape, parameter)
        return g
    _measure(g, value, ref32, ref64, headroom)
    return g


def _measure(g: TensorCheck, value: Tensor, ref32: Tensor, ref64: Tensor,
             headroom: float | None = None) -> None:
    """exact / approximate / maxdiff against float32, acceptance against float64."""
    if not value.is_floating_point():
        value = value.to(ref32.dtype)
    g.exact = bool(torch.equal(value.to(ref32.dtype), ref32))
    g.approximate = bool(torch.allclose(value.to(ref32.dtype), ref32, rtol=RTOL, atol=ATOL))
    g.maxdiff = float((value.to(ref32.dtype) - ref32).abs().max().item()) if value.numel() else 0.0
    ours = value.detach().to("cpu", torch.float64)
    if not torch.isfinite(ours).all():
        g.verdict = Verdict.WRONG
        return
    accepted = g.exact or (accepts(ours, ref32, ref64) if headroom is None else
                           accepts(ours, ref32, ref64, headroom))
    g.verdict = (Verdict.EXACT if g.exact else Verdict.APPROXIMATE if accepted else
                 Verdict.WRONG)
    if accepted and not g.approximate:
        g.note = APPROXIMATE_WHY  # the row says False under a pass: say why, once


def fits(shape, target, parameter: bool = False) -> bool:
    """Can a gradient of `shape` stand for one of `target`, if its values broadcast right?

    Only if it broadcasts *into* `target`: missing leading dimensions (`[64]` for `[1, 64]`) or
    size-1 ones (`[1, 64]` for `[n, 64]`). For a parameter that is exactly what the in-place
    update `p -= lr * dp` needs to run and keep p's shape. For any other tensor it is what lets
    later lines use the gradient as they would the exact one; extra dimensions do not: an extra
    leading 1 (`[1, n, 64]`) turns the next `.sum(0)` into a sum over nothing and the next `+=`
    into an error, so it is refused with the shape diagnosis, parameter or not.
    """
    shape, target = tuple(shape), tuple(target)
    try:
        return broadcast_shape(shape, target) == target
    except RuntimeError:
        return False


def as_graded(value: Tensor, ref: Tensor) -> Tensor:
    """The learner's values as they are graded: broadcast to the reference's shape if they fit."""
    if value.shape == ref.shape or not fits(value.shape, ref.shape):
        return value
    return value.expand(ref.shape)


def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def shape_note(tensor: str, got: list[int], want: list[int], parameter: bool) -> str:
    """Why an answer of another shape counts, and what keepdim would change."""
    head = f"{gradient(tensor)} is {_shape(got)} where {tensor} is {_shape(want)}"
    update = f"`{tensor} -= lr * {gradient(tensor)}`"
    if int(torch.Size(got).numel()) != int(torch.Size(want).numel()):
        return (
            f"{head}. The right gradient is the same along the dimensions you left at size 1, "
            f"so your values, broadcast, are exactly it, and later lines that read "
            f"{gradient(tensor)} "
            f"work the same. keepdim plays no part here; a gradient normally has its tensor's "
            f"full shape, which a broadcast such as `torch.ones_like({tensor}) * ...` would give."
        )
    keep = (
        f"keepdim=True on the sum would give exactly {tensor}'s shape, and your values "
        f"broadcast the same way, so everything downstream works."
    )
    if parameter:
        return (
            f"{head}. {keep} For a parameter the shape matters in the update {update}: "
            f"here it broadcasts {_shape(got)} into {_shape(want)} and leaves {tensor}'s "
            f"shape alone, so this is accepted. The other way round (a [1, k] gradient for "
            f"a 1-D parameter like b2) the update would fail or reshape the parameter."
        )
    return (
        f"{head}. {keep} It would matter for a parameter: there the update `p -= lr * dp` "
        f"must leave p's shape unchanged."
    )


def closing_grade(g: TensorCheck, value, full32: Tensor, full64: Tensor, closing: str
                  ) -> TensorCheck:
    """A first-branch row that holds the complete gradient already (both branches) is right.

    The learner added the later branch early; grade against the full gradient of the step that
    closes the tensor and say what that means for that step.
    """
    if not isinstance(value, Tensor) or g.right:
        return g
    full = grade(g.tensor, value, full32, full64, partial=True)
    if not full.right:
        return g
    full.reference_step = closing
    full.note = (
        f"this is already the complete {gradient(g.tensor)}, both branches: it matches the "
        f"gradient "
        f"that {closing} checks, not just this line's first branch. At {closing} there is then "
        f"nothing left to add; adding that branch again would count it twice."
    )
    return full


def accepts(ours64: Tensor, ref32: Tensor, ref64: Tensor,
            headroom: float = ROUNDING_HEADROOM) -> bool:
    """Is this answer as accurate as autograd's own float32 gradient, give or take rounding?"""
    if ours64.numel() == 0:
        return True
    # No allclose shortcut: its absolute 1e-8 is looser than float32 rounding for gradients
    # of size 1e-3, and let a rounded constant through (benchmarks/headroom.py).
    autograd_error = float((ref32.detach().to("cpu", torch.float64) - ref64).abs().max())
    scale = float(ref64.abs().max())
    tolerance = max(headroom * autograd_error, RELATIVE_FLOOR * scale)
    return float((ours64 - ref64).abs().max()) <= tolerance


def rounding_note(g: TensorCheck) -> str:
    if g.verdict is Verdict.EXACT:
        return "bit for bit what autograd computed"
    if g.verdict is Verdict.APPROXIMATE:
        return (
            "correct: it differs from autograd only by float32 rounding "
            f"(maxdiff {g.maxdiff:.1e}; both are that close to the float64 gradient)"
        )
    return ""


# Said wherever a row shows `approximate False` beside a verdict that accepts it.
APPROXIMATE_WHY = ("approximate is False because torch.allclose's default tolerance (rtol 1e-5, "
                   "atol 1e-8) is tighter than float32 rounding for these values; the verdict "
                   "compares with the float64 gradient instead")


def heatmap(diff: Tensor, max_rows: int = 8, max_cols: int = 32) -> list[list[float]]:
    """|yours - autograd| pooled to at most max_rows x max_cols cells (max within each cell)."""
    d = diff.detach().abs().to("cpu", torch.float32)
    if d.dim() == 0:
        d = d.view(1, 1)
    elif d.dim() == 1:
        d = d.view(1, -1)
    elif d.dim() > 2:
        # Where along the last two axes (a sequence's positions and channels, an image's rows
        # and columns): the leading ones, the batch first, folded by their largest entry.
        d = d.reshape(-1, d.shape[-2], d.shape[-1]).amax(0)
    rows, cols = d.shape
    out_r, out_c = min(rows, max_rows), min(cols, max_cols)
    pooled = torch.nn.functional.adaptive_max_pool2d(d[None, None], (out_r, out_c))[0, 0]
    return [[float(f"{float(x):.3g}") for x in row] for row in pooled]
