"""Function steps: the cases a learner's whole function is called on, and what it must return.

A function step (llm.c's `layernorm_backward`, say) is graded first on the lesson's own tensors,
then on inputs of freshly drawn sizes: a function that reads a size off the lesson (a literal 32,
or `n_embd`) instead of off its arguments is right on the first case and wrong on the others.
The pack's trusted code builds each case's inputs (`lesson`, `draw`) and the expected outputs
(`expect`). Those are computed twice from the same float32 inputs: in float32, as the learner's
code computes them (for the notebook's exact / approximate / maxdiff), and in float64 on the CPU
(the yardstick that decides acceptance, as for every gradient).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from tutor.core import packcode
from tutor.core.network import Batch
from tutor.core.timesteps import Series, series
from tutor.devices import judged
from tutor.pack.flow import tensor_of
from tutor.pack.model import FunctionSpec, PackError, Step

Tensor = torch.Tensor

FRESH_CASES = 2  # cases at new sizes, after the lesson's own
LESSON_CASE = "lesson"
SAME_SIZES = "lesson sizes"  # fresh values at the lesson's sizes: did sizes make the difference?


@dataclass
class Case:
    name: str  # "lesson", "fresh 1", ...
    sizes: dict[str, int]  # the upper-case sizes the pack's code named (B, T, C, NH, ...)
    inputs: dict[str, Any]  # the call's arguments: tensors (float32, kept on the CPU) and numbers
    reference: dict[str, Tensor]  # the expected outputs, float32
    reference64: dict[str, Tensor]  # the same from float64 arithmetic, on the CPU

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.sizes.items()) or "its own sizes"


def _spec(step: Step) -> FunctionSpec:
    if step.function is None:
        raise PackError(f"step {step.id} is not a function step")
    return step.function


def _run(code: str, ns: dict, where: str) -> None:
    try:
        with torch.enable_grad():
            packcode.run(code, ns, where)
    except PackError:
        raise
    except Exception as exc:  # noqa: BLE001 - the pack's code is wrong: say where
        raise PackError(f"{where} fails: {type(exc).__name__}: {exc}") from exc


def _scope() -> dict:
    """A namespace for the pack's code: under the learner's rules (tutor/core/packcode.py)."""
    return packcode.scope()


def lesson_case(step: Step, batch: Batch, device: torch.device) -> Case:
    """The call's inputs made of the lesson's tensors, with autograd's upstream gradients."""
    spec = _spec(step)
    ns = {**_scope(), **{k: v.clone() if isinstance(v, Tensor) else v
                         for k, v in batch.namespace().items()}}
    ns["grad"] = lambda name: batch.gradients[name].clone()
    _run(spec.lesson, ns, f"<{step.id} lesson>")
    return _case(LESSON_CASE, step, ns, device)


def fresh_case(step: Step, seed: int, index: int, device: torch.device) -> Case:
    """Inputs at sizes the pack's `draw` code picks from a generator seeded for this case."""
    spec = _spec(step)
    ns = {**_scope(), "g": torch.Generator().manual_seed(seed * 7919 + 104729 * (index + 1))}
    _run(spec.draw, ns, f"<{step.id} draw>")
    return _case(f"fresh {index + 1}", step, ns, device)


def same_sizes_case(step: Step, own: Case, seed: int, device: torch.device) -> Case | None:
    """Fresh values drawn as for a fresh case, but at the lesson's sizes: the pack's `draw` with
    every size it picks pinned to the lesson's. A function right on the lesson's case and wrong
    on this one is wrong for other values, whatever its sizes; None where the sizes cannot be
    pinned (a size drawn in a way this does not recognise)."""
    spec = _spec(step)
    tree = ast.parse(spec.draw)
    for node in tree.body:
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target = node.targets[0]
        if isinstance(target, ast.Name) and target.id in own.sizes:
            node.value = ast.Constant(own.sizes[target.id])
        elif (isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
              and len(target.elts) == len(node.value.elts)):
            for k, elt in enumerate(target.elts):
                if isinstance(elt, ast.Name) and elt.id in own.sizes:
                    node.value.elts[k] = ast.Constant(own.sizes[elt.id])
    ns = {**_scope(), "g": torch.Generator().manual_seed(seed * 7919 + 104729 * 99)}
    try:
        _run(ast.unparse(tree), ns, f"<{step.id} draw at the lesson's sizes>")
        case = _case(SAME_SIZES, step, ns, device)
    except PackError:
        return None
    return case if case.sizes == own.sizes else None


def _case(name: str, step: Step, ns: dict, device: torch.device) -> Case:
    spec = _spec(step)
    inputs: dict[str, Any] = {}
    for arg in spec.arguments:
        if arg not in ns:
            raise PackError(f"step {step.id}: the {name} case does not define '{arg}'")
        value = ns[arg]
        if isinstance(value, Tensor):
            value = value.detach().to(device)
            value = (value.float() if value.is_floating_point() else value).contiguous().clone()
        inputs[arg] = value
    sizes = {k: int(v) for k, v in ns.items() if k.isupper() and type(v) is int}
    # Autograd's float32 outputs come from the device the learner's code runs on; the case is
    # kept on the CPU, where it is judged (docs/architecture.md, "Where tensors live").
    reference = judged(expected(step, inputs))
    reference64 = expected(step, {k: as64(v) for k, v in inputs.items()})
    return Case(name, sizes, judged(inputs), reference, reference64)


def as64(value: Any) -> Any:
    if isinstance(value, Tensor):
        value = value.detach().cpu()
        return value.double() if value.is_floating_point() else value
    return value


def expected(step: Step, inputs: dict[str, Any]) -> dict[str, Tensor]:
    """What the function must return for these inputs (the pack's `expect` code, on copies)."""
    ns = {**_scope(), **{k: v.clone() if isinstance(v, Tensor) else v
                         for k, v in inputs.items()}}
    _run(_spec(step).expect, ns, f"<{step.id} expect>")
    out = {}
    for name in step.checks:
        value = ns.get(name)
        if not isinstance(value, Tensor):
            raise PackError(f"step {step.id}: 'expect' does not assign the tensor '{name}'")
        out[name] = value.detach()
    return out


def cases(step: Step, batch: Batch, seed: int, device: torch.device) -> list[Case]:
    """The lesson's case first, then the fresh ones."""
    return [lesson_case(step, batch, device),
            *(fresh_case(step, seed, i, device) for i in range(FRESH_CASES))]


# -- the picture through time ([steps.picture]) -----------------------------------------------
DEMO_SEED = 7  # every demo draws from the same seed: they differ only where the pack says
DEMO = "demo "  # a demo's case is named so, then the demo's own name


@contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread for a while: many tiny operations, which threads only slow down."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def time_steps(step: Step, case: Case) -> int:
    """How many time steps a case has: the length of the `time` output's axis."""
    spec = _spec(step)
    assert spec.time is not None
    name, axis = spec.time
    return int(case.reference[name].shape[axis])


def later_inputs(step: Step, inputs: dict[str, Any], t: int) -> dict[str, Any]:
    """The call's inputs on the steps after `t` alone, starting from the state step `t` left
    (the picture's `later` code, on copies)."""
    picture = _spec(step).picture
    assert picture is not None
    ns = {**_scope(), **{k: v.clone() if isinstance(v, Tensor) else v
                         for k, v in inputs.items()}, "t": t}
    _run(picture.later, ns, f"<{step.id} picture later>")
    return {a: ns[a] for a in _spec(step).arguments if a in ns}


def later_case(step: Step, base: Case, t: int, device: torch.device) -> Case:
    """The call on the steps after `t`, as a case: its `carry` output is what those steps send
    back to step `t`."""
    return _case(f"{base.name} after t={t}", step, later_inputs(step, base.inputs, t), device)


def demo_case(step: Step, name: str, device: torch.device) -> Case:
    """One of the picture's demos: inputs drawn by its `demo` code, `demo` naming which."""
    picture = _spec(step).picture
    assert picture is not None
    ns = {**_scope(), "g": torch.Generator().manual_seed(DEMO_SEED), "demo": name}
    _run(picture.demo, ns, f"<{step.id} picture demo>")
    return _case(f"{DEMO}{name}", step, ns, device)


def shown(step: Step, inputs: dict[str, Any], t: int, carry: Tensor) -> Tensor:
    """What the picture draws at step `t`: the `shown` expression on the case's inputs, with
    `carry` what the later steps sent back."""
    picture = _spec(step).picture
    assert picture is not None
    ns = {**_scope(), **inputs, "t": t, picture.carry: carry}
    try:
        value = packcode.evaluate(picture.shown, ns, f"<{step.id} picture shown>")
    except PackError:
        raise
    except Exception as exc:  # noqa: BLE001 - the pack's expression is wrong: say where
        raise PackError(f"<{step.id} picture shown> fails: {type(exc).__name__}: {exc}") from exc
    return value.detach() if isinstance(value, Tensor) else torch.as_tensor(value)


def carried_series(step: Step, case: str, inputs: dict[str, Any],
                   yours: list[Tensor | None], ref32: list[Tensor], ref64: list[Tensor]
                   ) -> Series:
    """One panel of the picture: at each step t, `shown` of what the steps after t sent back
    (`yours` from the learner's calls, `ref32`/`ref64` autograd's; one fewer than the steps, as
    nothing comes after the last), on the case's `inputs`."""
    picture = _spec(step).picture
    assert picture is not None
    inputs64 = {k: as64(v) for k, v in inputs.items()}
    nothing = torch.zeros_like(ref32[0]) if ref32 else None
    drawn, drawn32, drawn64 = [], [], []
    for t in range(len(ref32) + 1):
        last = t == len(ref32)
        mine = nothing if last else yours[t]
        theirs32 = nothing if last else ref32[t]
        theirs64 = as64(nothing) if last else ref64[t]
        if isinstance(mine, Tensor) and nothing is not None and mine.shape == nothing.shape:
            mine = shown(step, inputs, t, mine.to(nothing.device, nothing.dtype))
        drawn.append(mine)
        drawn32.append(shown(step, inputs, t, theirs32))
        drawn64.append(shown(step, inputs64, t, theirs64))
    return series(picture.title, case, drawn, drawn32, drawn64)


def output_label(name: str) -> str:
    """The tensor an output is the gradient of (`dinp` -> `inp`); other outputs stand for
    themselves (`param`, updated in place)."""
    return tensor_of(name) if is_gradient(name) else name


def is_gradient(name: str) -> bool:
    return tensor_of(name) is not None
