"""Two of torch's helpers, without the import that makes one-shot commands slow.

`torch.autograd.grad(outputs, inputs, grad_outputs=...)`, given a tensor as a cotangent, and
`torch.broadcast_shapes` import torch's symbolic-shape machinery (and sympy with it) on first use:
over half a second, paid by every one-shot command (`check`, `pack check`, `pack new`).

- `vjp` asks for the gradient of `sum((o * v).sum())` instead, which needs no cotangent;
  autograd's backward of `sum` and `*` passes the cotangent through unchanged, so the values are
  the same to the bit.
- `broadcast_shape` is the broadcasting rule itself, on plain tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor


def vjp(outputs: Tensor | Sequence[Tensor], inputs: Tensor | Sequence[Tensor],
        cotangents: Tensor | Sequence[Tensor | None] | None = None, *,
        retain_graph: bool | None = None, allow_unused: bool = False) -> tuple[Tensor | None, ...]:
    """What `torch.autograd.grad(outputs, inputs, cotangents, ...)` returns.

    A cotangent of another shape than its output is refused as autograd refuses it
    (`RuntimeError`); a missing one stands for ones, as for autograd on a scalar output."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    if cotangents is None:
        cots: list[Tensor | None] = [None] * len(outs)
    elif isinstance(cotangents, Tensor):
        cots = [cotangents]
    else:
        cots = list(cotangents)
    if len(cots) != len(outs):
        raise RuntimeError(f"{len(outs)} outputs but {len(cots)} cotangents")
    total = None
    for out, cot in zip(outs, cots, strict=True):
        if cot is None:
            if out.numel() != 1:
                raise RuntimeError("a cotangent is needed for an output of more than one entry")
            term = out.sum()
        else:
            if cot.shape != out.shape:
                raise RuntimeError(f"a cotangent of shape {tuple(cot.shape)} for an output of "
                                   f"shape {tuple(out.shape)}")
            term = (out * cot.to(out.dtype)).sum()
        total = term if total is None else total + term
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    return torch.autograd.grad(total, ins, retain_graph=retain_graph, allow_unused=allow_unused)


def broadcast_shape(*shapes: Iterable[int]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to; `RuntimeError` where they do not broadcast."""
    sized = [tuple(s) for s in shapes]
    width = max((len(s) for s in sized), default=0)
    out = [1] * width
    for shape in sized:
        for i, d in enumerate(shape, start=width - len(shape)):
            if d == out[i] or d == 1:
                continue
            if out[i] != 1:
                raise RuntimeError(f"shapes {sized} do not broadcast")
            out[i] = d
    return tuple(out)
