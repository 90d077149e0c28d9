"""The learner's name for a tensor's gradient (`dlogits` for `logits`), spelled once.

It lives with the values, the lowest layer, so that a stored check kept without its gradient's
name (an early version's record) reads back with it; everything above asks the lesson's
backward graph (`tutor/pack/flow.py`), which hands on these.
"""

from __future__ import annotations

from collections.abc import Iterable

#: What the learner's name for a tensor's gradient starts with: `dlogits` for `logits`.
PREFIX = "d"


def gradient(tensor: str) -> str:
    """The learner's name for the gradient of `tensor` (`logits` -> `dlogits`)."""
    return PREFIX + tensor


def gradients(tensors: Iterable[str]) -> frozenset[str]:
    """The learner's names for the gradients of `tensors`."""
    return frozenset(PREFIX + t for t in tensors)


def tensor_of(name: str) -> str | None:
    """The tensor whose gradient `name` spells (`dlogits` -> `logits`), or None for a name that
    spells no gradient."""
    return name[len(PREFIX):] if name.startswith(PREFIX) and len(name) > len(PREFIX) else None


#: Other ways a learner spells a gradient's name: `d_logits`, `grad_logits`, `logits_grad`, and
#: the mathematician's `δlogits`, `Δlogits`, `∂logits`, `delta_logits`.
OTHER_PREFIXES = ("d_", "grad_", "delta_", "δ", "Δ", "∂")
SUFFIXES = ("_grad",)


def spellings(tensor: str) -> tuple[str, ...]:
    """Every name a learner may give `tensor`'s gradient, the tutor's own first."""
    return (gradient(tensor), *(p + tensor for p in OTHER_PREFIXES),
            *(tensor + s for s in SUFFIXES))
