"""The lesson: dataset, parameters, a batch, the forward pass as shown, and autograd's gradients.

Everything is built from the pack's own code (setup and forward lines), so the code a learner
reads is the code that runs. Each batch keeps two copies of the forward pass: float32 on the
configured device (what the learner's code sees and what `cmp` compares against) and float64 on
the CPU (the yardstick for "as accurate as autograd's own float32 result").
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cached_property

import torch

from tutor.core import packcode
from tutor.core.quick import vjp
from tutor.devices import DeviceError, judged, resolve
from tutor.pack.model import ForwardLine, Pack, Step

__all__ = ["Batch", "DeviceError", "Network", "resolve_device"]
resolve_device = resolve  # the lesson's device by its setting (tutor/devices.py)

Tensor = torch.Tensor


def data_text(pack: Pack) -> str | None:
    """The pack's data file as text, or None for a pack that makes its own data."""
    if pack.data_file is None or not pack.data_file.is_file():
        return None
    return pack.data_file.read_text(encoding="utf-8")


def setup_namespace(pack: Pack) -> dict:
    """Run the pack's setup code, under the learner's rules (tutor/core/packcode.py), and
    return the namespace it leaves: the functions it defines."""
    ns = packcode.scope()
    packcode.run(pack.setup_code, ns, f"<{pack.id} setup>")
    return ns


@dataclass
class Dataset:
    splits: dict  # "train"/"val"/"test" -> (X, Y); plus whatever else make_data returns

    text: str | None = None  # the data file as read, for sizes derived again later

    @classmethod
    def build(cls, pack: Pack, fns: dict | None = None, sizes: dict | None = None,
              text: str | None = None) -> Dataset:
        fns = fns or setup_namespace(pack)
        # Read here, not in make_data: a confined process may no longer open the file.
        text = text if text is not None else data_text(pack)
        return cls(fns["make_data"](text, sizes if sizes is not None else pack.sizes), text)

    @property
    def sizes(self) -> dict[str, int]:
        return {k: int(self.splits[k][0].shape[0]) for k in ("train", "val", "test")}

    @property
    def derived_sizes(self) -> dict[str, int]:
        """Sizes only the data knows, such as vocab_size."""
        return {k: v for k, v in self.splits.items() if k.endswith("_size")
                and isinstance(v, int)}


def setup_functions(fns: dict) -> dict:
    """What the setup defines that a forward line may call: its functions and classes (a helper
    that runs several steps of a network, say), not the modules and builtins it was given:
    of those (packcode.scope), only the sandbox's `cmp` is callable and named without an
    underscore."""
    return {k: v for k, v in fns.items() if callable(v) and not k.startswith("_")
            and k != "cmp"}


class AtPrecision(torch.overrides.TorchFunctionMode):
    """Inside a pass run in another precision than float32 (float64, the yardstick), a forward
    line's `.float()` means the pass's own precision: `F.one_hot(X, 27).float() @ W` would
    otherwise mix float32 into a float64 pass and fail."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is Tensor.float and args:
            return args[0].to(self.dtype)
        return func(*args, **kwargs)


def at_precision(dtype: torch.dtype):
    """`AtPrecision` where the pass is not float32, else nothing."""
    from contextlib import nullcontext

    return AtPrecision(dtype) if dtype != torch.float32 else nullcontext()


def forward_namespace(pack: Pack, params: dict[str, Tensor], Xb: Tensor, Yb: Tensor,
                      dtype: torch.dtype, device: torch.device, sources: list[str],
                      sizes: dict, *, fns: dict) -> dict:
    """The pack's forward lines run with autograd on every parameter: the one place the lesson
    and the training run's gradient check both get autograd's view of the network. `fns` is
    the setup's namespace: its functions are in scope."""
    n = int(Xb.shape[0])
    ns = packcode.scope(**setup_functions(fns), **sizes, n=n, batch_size=n)
    for name, p in params.items():
        ns[name] = p.detach().to(device=device, dtype=dtype).clone().requires_grad_(True)
    # Float inputs follow the pass's precision (indices, as in makemore, stay integers).
    ns["Xb"], ns["Yb"] = (t.to(device, dtype if t.is_floating_point() else t.dtype)
                          for t in (Xb, Yb))
    with torch.enable_grad(), at_precision(dtype):
        packcode.run("\n".join(sources), ns, f"<{pack.id} forward>")
    return ns



@dataclass
class Batch:
    """One batch pushed through the forward pass, with every gradient the steps grade."""

    n: int
    values: dict[str, Tensor]  # parameters, batch and forward tensors (float32, made on the
    # device, kept on the CPU like everything else here; a child's plan takes them to the device)
    shapes: dict[str, list[int]]
    reference: dict[tuple[str, str], Tensor]  # (step id, tensor) -> autograd float32 gradient
    reference64: dict[tuple[str, str], Tensor]  # the same in float64 on the CPU
    given: dict[tuple[str, str], Tensor]  # (step id, tensor) -> gradient handed to the learner
    lines: list[dict] = field(default_factory=list)  # shape annotation of each forward line
    sizes: dict[str, int] = field(default_factory=dict)  # the lecture's names for the sizes
    # Autograd's gradient of the loss for every forward tensor (float32): what a function step's
    # lesson code hands in as an upstream gradient.
    gradients: dict[str, Tensor] = field(default_factory=dict)

    def namespace(self) -> dict:
        # The lecture's size names (vocab_size, n_embd, ...) are in scope as the notebook has
        # them; batch_size follows the batch, so code written with it passes the fresh batch too.
        return {**self.values, **self.sizes, "n": self.n, "batch_size": self.n}


class Network:
    """Pack + dataset + parameters; makes batches with their references on demand."""

    def __init__(self, pack: Pack, device: torch.device, seed: int):
        self.pack = pack
        self.device = device
        self.seed = seed
        packcode.check(pack)  # all of it refused or allowed before any of it runs
        self.fns = setup_namespace(pack)
        self.dataset = Dataset.build(pack, self.fns)
        g = torch.Generator().manual_seed(seed)
        self.params = self.fns["init_params"](g, self.sizes)
        # The lecture samples its batch from the same generator, right after the parameters.
        self._generator = g

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.params.values())

    @cached_property
    def main(self) -> Batch:
        Xtr, Ytr = self.dataset.splits["train"]
        size = self.pack.lesson.get("batch_size", 32)
        Xb, Yb = self.fns["sample_batch"](Xtr, Ytr, size, self._generator)
        return self.make_batch(Xb, Yb)

    @cached_property
    def heldout(self) -> Batch:
        Xtr, Ytr = self.dataset.splits["train"]
        size = self.pack.lesson.get("heldout_batch_size", 17)
        g = torch.Generator().manual_seed(self.seed + 1)
        Xb, Yb = self.fns["sample_batch"](Xtr, Ytr, size, g)
        return self.make_batch(Xb, Yb)

    def make_batch(self, Xb: Tensor, Yb: Tensor, params: dict[str, Tensor] | None = None
                   ) -> Batch:
        """`Xb, Yb` through the forward pass, with the lesson's parameters or `params` (a
        notebook's own, found in its own frame: tutor/core/frame.py)."""
        lines = list(self.pack.forward_lines)
        ns32, refs32, given, full = self._forward_backward(Xb, Yb, torch.float32, self.device,
                                                           lines, params)
        _, refs64, _, _ = self._forward_backward(Xb, Yb, torch.float64, torch.device("cpu"),
                                                 lines, params)
        # Computed on the lesson's device, kept on the CPU, where everything is judged: this is
        # where the network's tensors cross (docs/architecture.md, "Where tensors live").
        values = judged({k: v.detach() for k, v in ns32.items() if isinstance(v, Tensor)})
        shapes = {k: list(v.shape) for k, v in values.items()}
        return Batch(
            n=int(Xb.shape[0]),
            values=values,
            shapes=shapes,
            reference=judged(refs32),
            reference64=refs64,
            given=judged(given),
            lines=[annotate(line, ns32) for line in lines],
            sizes=self.sizes,
            gradients=judged({k: g.detach() for k, g in full.items()}),
        )

    @property
    def sizes(self) -> dict[str, int]:
        """The network's sizes by the pack's names (vocab_size, n_embd, ... for makemore), as
        learners use them in their code."""
        return {**self.pack.sizes, **self.dataset.derived_sizes}

    def _forward_backward(self, Xb, Yb, dtype, device, lines, params=None):
        """Run the forward lines with autograd on, then ask autograd for every graded gradient."""
        ns = forward_namespace(self.pack, self.params if params is None else params, Xb, Yb,
                               dtype, device,
                               [line.source for line in lines], self.sizes, fns=self.fns)
        loss = ns[self.pack.loss]
        differentiable = [
            k
            for k, v in ns.items()
            if isinstance(v, Tensor) and v.requires_grad and k != self.pack.loss
        ]
        grads = torch.autograd.grad(
            loss, [ns[k] for k in differentiable], retain_graph=True, allow_unused=True
        )
        full = {k: g for k, g in zip(differentiable, grads, strict=False) if g is not None}
        # The loss's own gradient is one: a step whose line is the loss line, and that starts
        # the first branch of a tensor the loss reads twice (a weight penalty), needs it.
        full_with_loss = {**full, self.pack.loss: torch.ones_like(loss)}
        refs: dict[tuple[str, str], Tensor] = {}
        given: dict[tuple[str, str], Tensor] = {}
        sources = {line.target: line.source for line in lines}
        for step in self.pack.gradient_steps:
            if not step.kind.of_forward_tensors:
                continue  # graded on cases of its own (functions.py)
            for name, grad in _step_references(step, ns, full_with_loss, self.pack.loss,
                                               sources, _branch_lines(self.pack, step)).items():
                refs[(step.id, name)] = grad.detach()
            for name in step.given:
                given[(step.id, name)] = full[name].detach()
        return ns, refs, given, full


def _branch_lines(pack: Pack, step: Step) -> list[str]:
    """The lines whose branches a partial of `step` holds once the step is done: its own and
    those of the exercise's earlier steps. A tensor read by three lines is started at the first
    step that meets it, added to at the next and completed at the last; after the middle one,
    the learner's gradient holds two branches, and that is what it is graded as there."""
    steps = [s for s in pack.gradient_steps if s.exercise == step.exercise]
    upto = steps[: steps.index(step) + 1] if step in steps else [step]
    return [t for s in upto if s.kind.of_forward_tensors for t in s.lines]


def _step_references(
    step: Step, ns: dict, full: dict, loss: str, sources: dict[str, str],
    branch_lines: list[str] | None = None,
) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    if step.target == loss and step.upstream is None:
        for name in step.checks:
            out[name] = full[name]
    else:
        upstream = full[step.upstream] if step.upstream else None
        grads = vjp(ns[step.target], [ns[c] for c in step.checks], upstream, retain_graph=True)
        out.update(zip(step.checks, grads, strict=False))
    # A partial is the part of a tensor's gradient that has arrived by the end of this step: what
    # reaches it through the lines of this step and the exercise's earlier ones that read it
    # (the first branch, or the first two of three). Re-running those lines with every other
    # operand detached gives exactly that local vector-Jacobian product, without the other
    # paths autograd would also follow.
    for name in step.partials:
        leaf = ns[name].detach().requires_grad_(True)
        local = {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in ns.items()}
        local[name] = leaf
        # Only the step's lines that read it send it anything (a fused step's other lines may
        # read other tensors alone).
        pairs = [(o, full[t]) for t in (branch_lines or step.lines)
                 if name in _names_read(sources[t])
                 and isinstance(o := _eval(_value(sources[t]), local, grad=True), Tensor)
                 and o.requires_grad]
        (grad,) = vjp([o for o, _ in pairs], [leaf], [g for _, g in pairs], allow_unused=True)
        out[name] = grad if grad is not None else torch.zeros_like(leaf)
    return out


# --- shape annotations for the forward panel -------------------------------------------------

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**", ast.MatMult: "@"}


def _fmt(value) -> str:
    if isinstance(value, Tensor):
        return "[" + ", ".join(str(d) for d in value.shape) + "]"
    if isinstance(value, tuple) and value and all(isinstance(v, Tensor) for v in value):
        # what a setup helper hands back: a named tuple shows its names
        names = getattr(value, "_fields", None) or [""] * len(value)
        return "(" + ", ".join(f"{k} {_fmt(v)}".strip() for k, v in zip(names, value,
                                                                         strict=False)) + ")"
    return "scalar"


# How tightly each operator binds, as in Python: what decides where brackets are needed.
_BINDS = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2, ast.MatMult: 2, ast.Pow: 3}
# Longer than this, a line's shapes would not fit beside or under it in a narrow forward panel:
# the products are shown by their results, and then only the last operator's two sides.
MAX_ANNOTATION = 64
_SHORT_NUMBER = 16  # a number written in the line (`1e-5`, `n`) shows as written up to this


def _arithmetic(node: ast.expr, ns: dict, source: str, products: bool = True) -> str:
    """An expression of + - * / @ ** with each operand shown by its shape, in source order and
    bracketed as the line groups them: `x @ W + h @ U + b` is `[32, 10] @ [10, 128] + [32, 32]
    @ [32, 128] + [128]`. A number (`1e-5`, `1/n`) shows as written. Without `products`, a
    product inside a sum shows by its result's shape alone, to keep a long line's shapes short."""
    return _operands(node, ns, source, products, collapse=False)[0]


def _operands(node: ast.expr, ns: dict, source: str, products: bool,
              collapse: bool) -> tuple[str, bool]:
    """`_arithmetic`'s text for `node`, and whether it is an operator's (then it may need
    brackets where it is an operand); `collapse`: a product shown by its result's shape."""
    value = _eval(node, ns)
    arithmetic = isinstance(node, ast.BinOp) and type(node.op) in _BINDS
    if not isinstance(value, Tensor):
        written = ast.get_source_segment(source, node) or ""
        if 0 < len(written) <= _SHORT_NUMBER:
            return written, arithmetic
    if not arithmetic:
        return _fmt(value), False
    binds = _BINDS[type(node.op)]  # type: ignore[attr-defined]
    if collapse and binds > 1:
        return _fmt(value), False

    def side(child: ast.expr, right: bool) -> str:
        text, compound = _operands(child, ns, source, products,
                                   collapse=not products and binds == 1)
        inner = _BINDS[type(child.op)] if compound else binds  # type: ignore[attr-defined]
        # a looser operator inside needs its brackets; so does an equal one on the right of
        # all but `**`, and one on the left of `**`, which groups from the right
        if compound and (inner < binds or (inner == binds and right != (binds == 3))):
            return f"({text})"
        return text

    return f"{side(node.left, False)} {_OPS[type(node.op)]} {side(node.right, True)}", True


def _in_source_order(expr: ast.expr, names: tuple[str, ...]) -> list[str]:
    """`names` in the order they first appear in the line: the pack reads them breadth first,
    which puts `hs_after` before `h` in `torch.cat([hs_before, h[:, None], hs_after], 1)`."""
    first: dict[str, tuple[int, int]] = {}
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and node.id in names:
            at = (node.lineno, node.col_offset)
            first[node.id] = min(first.get(node.id, at), at)
    return sorted(names, key=lambda name: first.get(name, (0, 0)))


def annotate(line: ForwardLine, ns: dict) -> dict:
    """Shapes of a line's output and operands, and whether broadcasting happens in it."""
    out = ns.get(line.target)
    expr = _value(line.source)
    notes: list[str] = []
    if isinstance(expr, ast.BinOp) and type(expr.op) in _OPS:
        left, right = _eval(expr.left, ns), _eval(expr.right, ns)
        text = f"{_fmt(out)} ← {_arithmetic(expr, ns, line.source)}"
        if len(text) > MAX_ANNOTATION:  # each term's shape alone, then the last operator's
            text = f"{_fmt(out)} ← {_arithmetic(expr, ns, line.source, products=False)}"
        if len(text) > MAX_ANNOTATION:
            text = f"{_fmt(out)} ← {_fmt(left)} {_OPS[type(expr.op)]} {_fmt(right)}"
        if type(expr.op) is not ast.MatMult and isinstance(out, Tensor):
            for operand in (left, right):
                note = _broadcast_note(operand, out)
                if note:
                    notes.append(note)
    else:
        operands = [ns[name] for name in _in_source_order(expr, line.operands)
                    if isinstance(ns.get(name), Tensor)]
        text = f"{_fmt(out)} ← " + ", ".join(_fmt(v) for v in operands) if operands else _fmt(out)
    return {
        "index": line.index,
        "target": line.target,
        "source": line.source,
        "exercise": line.exercise,
        "shape": list(out.shape) if isinstance(out, Tensor) else None,
        "annotation": text,
        "broadcast": bool(notes),
        "broadcast_note": "; ".join(notes) or None,
    }


def _value(source: str) -> ast.expr:
    return ast.parse(source).body[0].value  # type: ignore[attr-defined]


def _names_read(source: str) -> set[str]:
    return {n.id for n in ast.walk(_value(source)) if isinstance(n, ast.Name)}


def _eval(node: ast.expr, ns: dict, grad: bool = False):
    # Pack code is trusted; evaluating a sub-expression is how we learn its shape.
    with torch.set_grad_enabled(grad):
        return eval(compile(ast.Expression(node), "<forward>", "eval"), dict(ns))


def _broadcast_note(operand, out: Tensor) -> str | None:
    if not isinstance(operand, Tensor) or operand.shape == out.shape:
        return None
    shape = [1] * (out.dim() - operand.dim()) + list(operand.shape)
    dims = [d for d, (a, b) in enumerate(zip(shape, out.shape, strict=False)) if a == 1 and b != 1]
    if not dims:
        return None
    where = ", ".join(str(d) for d in dims)
    return f"{_fmt(operand)} is broadcast along dim {where}"
