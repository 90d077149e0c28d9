"""Why a wrong gradient is wrong: shape, sign, scale, transpose, a missing branch, a known mistake.

Every diagnosis comes from comparing numbers: the learner's tensor against autograd's, against the
earlier partial gradient, or against what a catalogued mistake evaluates to on the same batch.
Messages point at the cause without handing over the answer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tutor.pack.flow import gradient
from tutor.pack.model import Mistake
from tutor.values.results import Diagnosis

Tensor = torch.Tensor


def diagnosis(kind: str, message: str) -> Diagnosis:
    return Diagnosis(kind, message)


def close(a: Tensor, b: Tensor) -> bool:
    a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    if a64.shape != b64.shape:
        return False
    # A learner's value may hold a nan or an inf: those must sit where the other's do, and the
    # scale comes from the finite entries (a nan scale is no tolerance at all).
    finite = torch.isfinite(b64)
    if not torch.equal(finite, torch.isfinite(a64)) or not torch.equal(a64[~finite],
                                                                        b64[~finite]):
        return False
    a64, b64 = a64[finite], b64[finite]
    scale = max(float(b64.abs().max()) if b64.numel() else 0.0, 1e-12)
    return bool(torch.allclose(a64, b64, rtol=1e-4, atol=1e-4 * scale))


def _shape(t) -> str:
    return "[" + ", ".join(str(d) for d in t) + "]"


GENERIC_SHAPE = "A gradient always has the shape of the tensor it belongs to."
# A guess from the shapes alone (two sizes swapped): the learner's own code may say otherwise
# (a `cat` along the wrong dim swaps the sizes too), so it is said only where that says nothing.
SWAPPED = "The dimensions are swapped: check which operand needs a transpose."
REORDERED = ("Check the order of the axes where your code transposes, permutes or lays the "
             "gradient out.")


# A gradient summed down to one number: what the shapes say, which the learner's code may say
# more precisely (the axes its sum should have kept).
ONE_NUMBER = ("Sum only over the dimensions it was broadcast along in the forward pass, and "
              "keep one gradient per entry.")


def guessed(message: str) -> bool:
    """Whether a shape's message says nothing the code was asked about: the general sentence,
    the guess of a transpose from two swapped sizes, or a sum over everything."""
    return message.endswith((GENERIC_SHAPE, SWAPPED, REORDERED, ONE_NUMBER))


def _reduced(shape: tuple, dims: tuple[int, ...], keep: bool) -> tuple:
    return tuple(1 if d in dims else s for d, s in enumerate(shape)) if keep else \
        tuple(s for d, s in enumerate(shape) if d not in dims)


def _reductions(shape: tuple, target: tuple) -> list[tuple[int, ...]]:
    """Every set of dims of `shape` whose sum (keeping them or not) has the shape `target`."""
    from itertools import combinations

    out = []
    for k in range(1, len(shape)):
        for dims in combinations(range(len(shape)), k):
            if target in (_reduced(shape, dims, True), _reduced(shape, dims, False)):
                out.append(dims)
    return out


def _dims(shape: tuple, dims: tuple[int, ...]) -> str:
    what = ", ".join(f"{d} (size {shape[d]})" for d in dims)
    return f"dim {what}" if len(dims) == 1 else f"dims {what}"


def wrong_axis(name: str, got: list[int], want: list[int], sources: list[tuple]) -> str | None:
    """A shape that a sum over the wrong dims of a gradient explains, and only it: which dims
    the sum ran over and which ones the tensor was broadcast along (what the sum needs)."""
    for shape in sources:
        ran, needed = _reductions(shape, tuple(got)), _reductions(shape, tuple(want))
        if len(ran) != 1 or len(needed) != 1 or ran == needed:
            continue
        return (f"{gradient(name)} has shape {_shape(got)}, but {name} has shape {_shape(want)}: "
                f"{_shape(got)} is what a sum of the {_shape(shape)} gradient over "
                f"{_dims(shape, ran[0])} gives, and those are dimensions {name} has its own "
                f"entries along. {name} was broadcast along {_dims(shape, needed[0])} in the "
                f"forward pass: its gradient adds up the copies along those instead.")
    return None


def explain_shape(name: str, got: list[int], want: list[int], sources: list[tuple] = ()
                  ) -> str:
    """A sentence about how a gradient of the wrong shape came about and what shape is needed.
    `sources` are the shapes of the gradients in reach, for a sum over the wrong dims."""
    head = f"{gradient(name)} has shape {_shape(got)}, but {name} has shape {_shape(want)}"
    if not [d for d in got if d != 1] and [d for d in want if d != 1]:
        return (f"{head}: one number, what a sum over every dimension gives. {name} has "
                f"entries of its own along {_dims(tuple(want), tuple(range(len(want))))}. "
                f"{ONE_NUMBER}")
    squeezed_got = [d for d in got if d != 1]
    squeezed_want = [d for d in want if d != 1]
    if squeezed_got == squeezed_want and len(got) > len(want):
        return (
            f"{head}. There is an extra dimension of size 1. The notebook's cmp would let this "
            f"broadcast, but an update like `{name} -= lr * {gradient(name)}` would then turn "
            f"{name} into "
            f"a {_shape(got)} tensor (or fail when done in place). Sum without keepdim, or "
            f"reshape to {name}.shape."
        )
    if sorted(got) == sorted(want) and len(got) == len(want) and len(got) > 2:
        moved = ", ".join(str(d) for d in range(len(got)) if got[d] != want[d])
        return f"{head}: the right sizes in another order (dims {moved}). {REORDERED}"
    if squeezed_got == squeezed_want and len(got) < len(want):
        return (
            f"{head}. The same numbers with a dimension missing: the forward pass kept a "
            "dimension of size 1 here, so keep it in the gradient too (keepdim=True)."
        )
    if len(got) == len(want) and all(w in (1, g) for g, w in zip(got, want, strict=False)):
        dims = [
            str(d) for d, (g, w) in enumerate(zip(got, want, strict=False)) if w == 1 and g != 1
        ]
        return (
            f"{head}. {name} was broadcast along dim {', '.join(dims)} in the forward pass, so "
            f"every copy sends gradient back to the same entry: add those contributions up "
            f"along dim {', '.join(dims)}, keeping the dimension."
        )
    if len(got) > len(want) and got[len(got) - len(want) :] == want:
        lead = got[: len(got) - len(want)]
        which = "it" if len(lead) == 1 else "them"
        return (
            f"{head}. {name} was broadcast over every leading dimension of the tensor it was "
            f"added to (the batch, and time where there is one) in the forward pass, and your "
            f"{gradient(name)} still has {_shape(lead)} of {which} left: sum over every dimension "
            f"{name} was broadcast along, to get one gradient per entry of {name}."
        )
    if sorted(got) == sorted(want) and len(got) == 2:
        return f"{head}. {SWAPPED}"
    axis = wrong_axis(name, got, want, list(sources))
    if axis:
        return axis
    return f"{head}. {GENERIC_SHAPE}"


def shape_diagnosis(name: str, value: Tensor, ref: Tensor, sources: list[tuple] = ()
                    ) -> Diagnosis:
    if value.dim() == 2 and value.shape == ref.shape[::-1] and close(value.T, ref):
        return diagnosis(
            "transpose",
            f"{gradient(name)} holds the right numbers, transposed: {_shape(value.shape)} "
            f"instead of "
            f"{_shape(ref.shape)}. Swap and transpose the operands of the matmul so the result "
            f"has {name}'s shape.",
        )
    return diagnosis("shape", explain_shape(name, list(value.shape), list(ref.shape), sources))


def permuted(value: Tensor, ref: Tensor) -> tuple[int, ...] | None:
    """The order of `ref`'s dims that `value` is laid out in, where it is `ref` permuted."""
    from itertools import permutations

    if value.dim() != ref.dim() or value.dim() < 3 or value.dim() > 5 \
            or sorted(value.shape) != sorted(ref.shape) or value.shape == ref.shape:
        return None
    v = value.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    for order in permutations(range(r.dim())):
        moved = r.permute(order)
        if moved.shape == v.shape and close(v, moved):
            return order
    return None


def _scale_message(name: str, c: float, n: int, source: str = "",
                   sizes: dict[str, int | float] | None = None, code: str | None = None) -> str:
    near = lambda x: abs(c - x) <= 1e-3 * max(1.0, abs(x))  # noqa: E731
    if near(n):
        why = "a factor n too large: the loss averages over the batch"
    elif near(1 / n):
        why = "a factor n too small: is there a 1/n too many?"
    elif near(n * n) or near(1 / (n * n)):
        why = "that is n squared (or its inverse): the batch size is applied the wrong way round"
    elif near(n / (n - 1)) or near((n - 1) / n):
        why = "that is n/(n-1) or its inverse: check 1/n against 1/(n-1) (Bessel's correction)"
    elif (near(2) or near(0.5)) and "**2" in source.replace(" ", ""):
        why = "a factor of 2: check the derivative of the square"
    elif near(2) or near(0.5):
        why = ("a factor of 2: check each constant of the local derivative, and whether a "
               "contribution was counted twice (or halved)")
    else:
        why = _size_factor(c, n, sizes or {}, near, code or "") or \
            "check the constant factors of the local derivative"
    return f"{gradient(name)} is {c:.4g} times autograd's gradient, everywhere: {why}."


def _size_factor(c: float, n: int, sizes: dict[str, int | float],
                 near: Callable[[float], bool], code: str) -> str | None:
    """A factor that is one of the lesson's sizes (or that times the batch size), or its
    inverse: a count the code divides by or multiplies with once too often. Sizes that share
    the value are all named, since the numbers cannot tell them apart, unless the learner's
    code names only one of them."""
    import re

    by_value: dict[int, list[str]] = {}
    for key, size in sizes.items():
        if isinstance(size, int) and size > 2 and size != n:
            by_value.setdefault(size, []).append(key)
    for size, all_keys in sorted(by_value.items()):
        used = [k for k in all_keys if re.search(rf"\b{re.escape(k)}\b", code)]
        keys = [f"`{k}`" for k in (used if len(used) == 1 else all_keys)]
        named = keys[0] if len(keys) == 1 else " or ".join(keys)
        for k, count in ((size, f"{size}, the size {named}"),
                         (n * size, f"{n * size}, the batch size times {named}")):
            if near(1 / k):
                return (f"that is 1/{count}: a division by that count too many, or a mean "
                        "taken over entries the loss does not average over")
            if near(k):
                return (f"that is {count}: a division by that count left out, or a "
                        "gradient added up once per copy where there is one")
    return None


def _same(value: Tensor, produced: Tensor) -> bool:
    """Close where both are finite, and NaN or infinite at the same entries: a catalogued
    mistake whose value is NaN (a log of a negative number) is still recognised."""
    a, b = value.detach().cpu(), produced.detach().cpu()
    if a.shape != b.shape:
        return False
    bad_a, bad_b = ~torch.isfinite(a), ~torch.isfinite(b)
    if not bad_a.any() and not bad_b.any():
        return close(a, b)
    if not torch.equal(bad_a, bad_b):
        return False
    return bool(bad_a.all()) or close(a[~bad_a], b[~bad_b])


def matching_mistake(
    value: Tensor, mistakes: list[tuple[Mistake, Callable[[], Tensor | None]]],
    start: Tensor | None = None,
) -> Diagnosis | None:
    """The catalogued mistake whose result the learner's tensor reproduces, if any. With
    `start` (a tensor updated in place), what is compared is the change from it."""
    for mistake, evaluate in mistakes:
        produced = evaluate()
        if produced is None:
            continue
        if start is not None and start.shape == value.shape == produced.shape:
            base = start.detach().to("cpu", torch.float64)
            same = _same(value.detach().to("cpu", torch.float64) - base,
                         produced.detach().to("cpu", torch.float64) - base)
        else:
            same = _same(value, produced)
        if same:
            return diagnosis(mistake.kind, mistake.message)
    return None


def value_diagnosis(
    name: str,
    value: Tensor,
    ref: Tensor,
    n: int,
    prior: Tensor | None,
    mistakes: list[tuple[Mistake, Callable[[], Tensor | None]]],
    source: str = "",
    code: str | None = None,
    sizes: dict[str, int | float] | None = None,
) -> Diagnosis | None:
    """The most specific explanation for a same-shape wrong answer, or None. `source` is the
    forward code of the step's lines, for messages that depend on what is on them; `code` the
    learner's, where a message says something of it (None: not known); `sizes` the lesson's
    own, which a factor may be."""
    known = matching_mistake(value, mistakes)  # first: a catalogued mistake may well be NaN
    if known:
        return known
    if not torch.isfinite(value).all():
        bad = int((~torch.isfinite(value)).sum())
        return diagnosis(
            "nan",
            f"{gradient(name)} has {bad} entries that are NaN or infinite. Look for a division "
            f"by zero, "
            "a log of zero or a power of a negative number.",
        )
    if value.numel() and not bool(value.any()) and bool(ref.any()):
        return diagnosis("scale", _zero_message(name, source, code))
    if close(value, -ref):
        return diagnosis("sign", f"{gradient(name)} has the right size but the wrong sign "
                                 f"everywhere.")
    if prior is not None and not close(prior, torch.zeros_like(prior)):
        if close(value, ref - prior):
            return diagnosis(
                "partial",
                f"{gradient(name)} holds only the new branch: {name} is used in two places, and "
                f"the "
                f"gradient from the first one (already in {gradient(name)}) was overwritten. Add "
                f"to it "
                "with += instead of assigning with =.",
            )
        if close(value, prior):
            return diagnosis(
                "partial",
                f"{gradient(name)} still holds only the first branch: add this line's "
                f"contribution.",
            )
    v, r = value.detach().double().flatten(), ref.detach().double().flatten()
    denom = float(r @ r)
    if denom > 0:
        c = float(v @ r) / denom
        if abs(c - 1) > 1e-3 and close(value, c * ref):
            if abs(c + 1) <= 1e-3:
                return diagnosis("sign", f"{gradient(name)} has the right size but the wrong sign.")
            return diagnosis("scale", _scale_message(name, c, n, source, sizes, code))
    if value.dim() == 2 and value.shape[0] == value.shape[1] and close(value.T, ref):
        return diagnosis("transpose", f"{gradient(name)} is the transpose of the right answer.")
    return None


def integer_diagnosis(name: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """A gradient kept in a tensor of whole numbers (a buffer made from Python ints, or with an
    index's dtype): every number written into it was cut to an integer."""
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool \
            or not ref.is_floating_point():
        return None
    return diagnosis("dtype", f"{gradient(name)} is a tensor of whole numbers ({value.dtype}), "
                              "so every gradient written into it was cut to an integer (most to "
                              "0). A buffer made from Python ints (`torch.tensor([0] * k)`) or "
                              "with an index's dtype (`zeros_like(Xb)`, `dtype=Xb.dtype`) keeps "
                              "that dtype: make it a float tensor.")


def noise_diagnosis(name: str, value: Tensor, ref: Tensor) -> Diagnosis | None:
    """A gradient that is float32's rounding and nothing more, where autograd's is not: a
    formula whose terms cancel, said as seen (a last resort: a rewrite that names the term
    left out comes first)."""
    top = float(value.detach().double().abs().max()) if value.numel() else 0.0
    right = float(ref.detach().double().abs().max()) if ref.numel() else 0.0
    if not 0 < top <= 1e-4 * right:
        return None
    return diagnosis("scale", f"{gradient(name)} is rounding noise and nothing more: its "
                              f"largest entry is {top:.2g}, where autograd's reaches "
                              f"{right:.2g}. Something in your formula adds up to zero before "
                              "it is used: a gradient summed where it cancels (at a softmax's "
                              "input each row adds up to zero, for one).")


_ZEROS = {"zeros", "zeros_like", "new_zeros", "empty", "empty_like", "new_empty"}


def _zero_message(name: str, source: str, code: str | None) -> str:
    """Why a gradient is zero everywhere, said only as far as it is true of the code: the story
    of a buffer that nothing reaches only for code that makes a buffer and writes into it."""
    import ast

    grad = gradient(name)
    buffer = writes = False
    try:
        tree = ast.parse(code) if code else None
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == grad for t in node.targets):
            f = node.value.func if isinstance(node.value, ast.Call) else None
            buffer = buffer or (isinstance(f, (ast.Attribute, ast.Name)) and getattr(
                f, "attr", getattr(f, "id", "")) in _ZEROS)
        elif (isinstance(node, (ast.AugAssign, ast.Assign)) and any(
                isinstance(t, ast.Subscript) or (isinstance(t, ast.Name) and t.id == grad
                                                 and isinstance(node, ast.AugAssign))
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))) or (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == grad):
            writes = True
    if code is None or (buffer and writes):
        return (f"{grad} is zero everywhere. A buffer made with zeros_like (or zeros) still "
                "needs the gradient added into it: check that every assignment reaches it.")
    line = f" (`{source.strip().splitlines()[0]}`)" if source.strip() else ""
    made = " Your code sets it to zeros and adds nothing to it." if buffer else ""
    return (f"{grad} is zero everywhere, yet {name} reaches the loss through this step's "
            f"line{line}, so a change of {name} changes the loss: its gradient is not zero."
            f"{made} Work out what the line sends back to {name}.")


def where_wrong(value: Tensor, ref: Tensor) -> str:
    """Describe the pattern of errors so the learner knows where to look."""
    diff = (value.detach().double() - ref.detach().double()).abs()
    scale = float(ref.abs().max()) or 1.0
    wrong = diff > 1e-4 * scale + 1e-7
    total, bad = wrong.numel(), int(wrong.sum())
    if bad == 0:
        return "the values differ slightly more than float32 rounding explains"
    parts = [f"{bad} of {total} entries are wrong"]
    if wrong.dim() == 2 and bad < total:
        rows, cols = wrong.any(1), wrong.any(0)
        per_row = wrong.sum(1)
        if int(rows.sum()) < wrong.shape[0]:
            parts.append(f"in {int(rows.sum())} of {wrong.shape[0]} rows")
        elif int(cols.sum()) < wrong.shape[1]:
            parts.append(f"in {int(cols.sum())} of {wrong.shape[1]} columns")
        elif bool((per_row == 1).all()):
            parts.append("exactly one per row")
    return ", ".join(parts)
