"""The picture through time during a run (`[training] picture`, docs/packs.md).

A pack whose training driver calls a function step with a [steps.picture] (the lstm lesson's
`lstm_backward`) may ask for that picture during the run: at a few steps, the driver runs once
more on a fixed handful of validation names, the learner's function is called on the steps after
each t of that batch, and autograd's `expect` on the same inputs gives what it should send back.
The learner sees `dh_t` change as the network learns, beside autograd's.

It runs in the training child, on the learner's own function as training calls it; nothing it
finds changes the run or its verdict.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from tutor.pack.model import Pack, Step

PICTURE_NAMES = 8  # validation names in the picture's batch, the longest
PICTURES = 8  # pictures over the training phase, besides the one after the gradient check


class RunPicture:
    """Where the driver calls the pictured function, and how to draw one picture."""

    def __init__(self, step: Step, arguments: dict[str, str]) -> None:
        self.step = step
        self.arguments = arguments  # the function's parameter -> the driver's name for it

    @classmethod
    def of(cls, pack: Pack, step_id: str, code: str) -> RunPicture | None:
        """The picture of `step_id` when the training code calls its function with plain
        names; None when the pack asks for none or the call cannot be found."""
        if not step_id:
            return None
        try:
            step = pack.step(step_id)
        except (KeyError, ValueError, IndexError):
            return None  # no such step: pack check says so
        fn = step.function
        if fn is None or fn.picture is None:
            return None
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return None
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id == fn.name and not node.keywords
                    and len(node.args) == len(fn.arguments)
                    and all(isinstance(a, ast.Name) for a in node.args)):
                return cls(step, {p: a.id for p, a in  # type: ignore[attr-defined]
                                  zip(fn.arguments, node.args, strict=True)})
        return None

    def draw(self, ns: dict, call: Callable[[dict], Any], case: str) -> dict | None:
        """One picture from the namespace the driver just ran in: the panel's plain data, or
        None when the driver's names are not tensors there. `call(inputs)` runs the learner's
        function on one call's inputs and returns its outputs, or None where it failed; `case`
        says which batch it is."""
        import torch

        from tutor.core.functions import as64, carried_series, expected, later_inputs

        fn = self.step.function
        assert fn is not None and fn.picture is not None and fn.time is not None
        inputs = {p: ns.get(name) for p, name in self.arguments.items()}
        if not all(isinstance(v, torch.Tensor) for v in inputs.values()):
            return None
        inputs = {k: v.detach().clone() for k, v in inputs.items()}
        name, axis = fn.time
        steps = int(expected(self.step, inputs)[name].shape[axis])
        carry = fn.picture.carry
        yours, ref32, ref64 = [], [], []
        for t in range(steps - 1):
            later = later_inputs(self.step, inputs, t)
            got = call(later)
            value = got.get(carry) if isinstance(got, dict) else None
            yours.append(value.detach() if isinstance(value, torch.Tensor) else None)
            ref32.append(expected(self.step, later)[carry])
            ref64.append(expected(self.step, {k: as64(v) for k, v in later.items()})[carry])
        if not ref32:
            return None
        return carried_series(self.step, case, inputs, yours, ref32, ref64).to_dict()
