"""What a submission computes, traced: every tensor operation its code performs, recorded as it
runs, so that a gradient is found by its value wherever the code keeps it (a dict, an attribute,
a closure, a running variable) and its computation can be written out again as plain code.

Two halves. `Recorder` runs in the confined child, around the learner's program: each top-level
torch call becomes an `op` of plain data (which call, its arguments with tensors as `(object,
version)` references, what it made or changed) and the values of the tensors that could be a
gradient (the shape of a forward tensor) are kept. `written_out` runs in the engine, where
autograd's gradients are: the versions whose value is a step's gradient, the computation that
made them (back to the lesson's tensors and the gradients the step is given), written out as
straight-line code that the step's ordinary check then runs, rule probe and fresh batch included.
The literals that differ between the two batches' traces (a batch size read off a shape) are
written as the batch size (`n`), so the code holds on the fresh batch as the learner's did.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tutor.core.clock import OutOfTime
from tutor.pack.flow import OTHER_PREFIXES, PREFIX, gradient
from tutor.sandbox import allowlist
from tutor.sandbox.objects import instance_attributes

Tensor = torch.Tensor

# Operators torch hands over as dunder methods, written back as operators.
_BINARY = {"__add__": "+", "__sub__": "-", "__mul__": "*", "__truediv__": "/",
           "__matmul__": "@", "__pow__": "**", "__floordiv__": "//", "__mod__": "%",
           "__eq__": "==", "__ne__": "!=", "__lt__": "<", "__le__": "<=", "__gt__": ">",
           "__ge__": ">=", "__and__": "&", "__or__": "|", "__xor__": "^"}
_REFLECTED = {"__radd__": "+", "__rsub__": "-", "__rmul__": "*", "__rtruediv__": "/",
              "__rdiv__": "/", "__rmatmul__": "@", "__rpow__": "**", "__rfloordiv__": "//"}
_INPLACE = {"__iadd__": "+=", "__isub__": "-=", "__imul__": "*=", "__itruediv__": "/=",
            "__idiv__": "/=", "__ipow__": "**="}
_UNARY = {"__neg__": "-", "__pos__": "+", "__invert__": "~", "__abs__": "abs"}
# Attributes read as properties that may be written back; `.grad` never is (autograd's answer).
_PROPERTIES = {"T", "mT", "H", "mH", "data", "real"}
# Calls whose result depends on more than their arguments: never written back.
_REFUSED = {"grad", "backward", "autograd", "manual_seed", "seed", "set_rng_state"}
# Calls that draw random numbers: a value drawn is no computation of the step's inputs, and
# written back it would draw again (the check's child is seeded as the trace's was, so a
# learner's random test input could even come back equal to what it was compared with).
_RANDOM = {"randn", "rand", "randint", "randn_like", "rand_like", "randint_like", "randperm",
           "normal", "normal_", "bernoulli", "bernoulli_", "multinomial", "poisson",
           "uniform_", "exponential_", "geometric_", "cauchy_", "log_normal_", "random_",
           "dropout", "dropout_", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
           "feature_alpha_dropout", "rrelu", "rrelu_", "gumbel_softmax"}
# Both batches' traces travel in one message to the engine (under protocol.MAX_MESSAGE): past
# this many bytes of kept values, or this many ops (a training loop inside an exercise), a
# trace records no more; what it needs from after that point is then unknown to it, and a
# step that needs it is left to the names.
MAX_KEPT_BYTES = 12 * 2**20
MAX_OWN_NUMEL = 2**18  # in a notebook's own frame, a larger tensor is its data: not kept
MAX_OWN_OPS = 150_000  # its own data built a tensor at a time comes first
MAX_OPS = 40_000
MAX_PIECES = 16  # a gradient kept in pieces (one per head): at most this many
# Every tensor the recording has seen is kept alive (its id must not be reused): past this many
# bytes of them, nothing more is recorded (a notebook's training loop, run in its own frame, would
# otherwise keep every step's activations and run out of memory; this keeps a grading platform's
# 768 MB for the whole grade, benchmarks/grade_submission.py).
MAX_ALIVE_BYTES = 192 * 2**20


class Unrecordable(Exception):
    """An argument or call that cannot be written back as code."""


def _call_of(func: Callable) -> tuple:
    """How a torch call is written: ("method", name), ("func", "torch.x"), an operator, or a
    property read. Raises Unrecordable for anything else."""
    name = getattr(func, "__name__", "")
    if name == "__get__":
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        if prop in _PROPERTIES:
            return ("prop", prop)
        raise Unrecordable(f".{prop}")
    if name in _REFUSED or name in _RANDOM:
        raise Unrecordable(name)
    for table, kind in ((_BINARY, "bin"), (_REFLECTED, "rbin"), (_INPLACE, "iop"),
                        (_UNARY, "unary")):
        if name in table:
            return (kind, table[name])
    if name in ("__getitem__", "__setitem__"):
        return (name.strip("_"),)
    qual = getattr(func, "__qualname__", "")
    if qual.startswith(("TensorBase.", "Tensor.")) and not name.startswith("_"):
        return ("method", name)
    # The same function may be torch's and F's (`torch.conv_transpose1d` is
    # `F.conv_transpose1d`): written as the sandbox offers it, so the check can run it.
    for prefix, module, offered in (
            ("torch.", torch, allowlist.MODULES["torch"]),
            ("F.", F, allowlist.MODULES["torch.nn.functional"]),
            ("torch.linalg.", torch.linalg, allowlist.MODULES["torch.linalg"]),
            ("torch.special.", torch.special, allowlist.MODULES["torch.special"])):
        if name in offered and getattr(module, name, None) is func:
            return ("func", prefix + name)
    for prefix, module in (("torch.", torch), ("F.", F), ("torch.linalg.", torch.linalg),
                           ("torch.special.", torch.special)):
        if not name.startswith("_") and getattr(module, name, None) is func:
            return ("func", prefix + name)
    raise Unrecordable(qual or name or repr(func))


def _mutates(call: tuple) -> bool:
    return call[0] in ("iop", "setitem") or (
        call[0] == "method" and call[1].endswith("_") and not call[1].startswith("_"))


@dataclass
class Recorder(TorchFunctionMode):
    """Records every top-level torch call of the code run under it (see the module's
    docstring). `names`: id of each tensor the namespace gave the code -> its name there.
    `shapes`: the shapes whose float values are kept (a gradient has its tensor's shape)."""

    names: dict[int, str]
    shapes: set[tuple[int, ...]]
    # A notebook in its own frame: every value is kept (its batch's size is its own), and its
    # integer tensors too (where its batch is).
    keep_all: bool = False
    ops: list[dict] = field(default_factory=list)
    leaves: dict[int, str | None] = field(default_factory=dict)  # object -> name, None: foreign
    values: dict[tuple[int, int], Tensor] = field(default_factory=dict)
    own: bool = False  # set once the exercise's own cells start
    # object -> the names the program kept it under after a cell (a global, a dict's key):
    # hints only, for a gradient whose value is wrong because an earlier one of the
    # learner's was (its value finds nothing then).
    hints: dict[int, list[str]] = field(default_factory=dict)
    # The versions the program held after a cell (under a name, in a dict, a list, a tuple or
    # an object of its own), as opposed to the passing values inside an expression.
    held: set[tuple[int, int]] = field(default_factory=set)
    _objects: dict[int, int] = field(default_factory=dict)  # id(tensor) -> object
    _alive: list[Tensor] = field(default_factory=list)  # keeps ids from being reused
    _versions: list[int] = field(default_factory=list)
    _storage: list[int] = field(default_factory=list)
    _kept: int = 0
    _alive_bytes: int = 0
    _floats: bool = False  # whether a float tensor was made or read yet
    misses: int = 0  # `.grad` reads of a notebook's own frame that found no gradient

    def __post_init__(self) -> None:
        super().__init__()
        # A gradient written without its axes of one (`[64]` for `[1, 64]`) is kept too.
        self.shapes = self.shapes | {tuple(d for d in s if d != 1) for s in self.shapes}

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.keep_all and not self._floats and not _holds_float(out):
            # A notebook's own data, built before any of its parameters (a tensor a name):
            # no gradient is made of it, and recording it would take the time.
            return out
        if len(self.ops) >= (MAX_OWN_OPS if self.keep_all else MAX_OPS) \
                or self._alive_bytes > MAX_ALIVE_BYTES:
            return out
        try:
            self._record(func, args, kwargs, out)
        except OutOfTime:
            raise  # the learner's limit, arriving while this op was recorded
        except Exception as exc:  # noqa: BLE001 - an op that cannot be written back is marked
            outs = self._fresh(out)
            bumps = self._drawn_in_place(func, args, kwargs, out)
            self.ops.append({"bad": f"{type(exc).__name__}: {exc}"[:200],
                             "outs": outs, "own": self.own, "reads": [], "bumps": bumps})
            if self.keep_all:  # a notebook's own parameters, drawn at random
                self._keep([(o, 0) for o in outs if o is not None] + bumps)
        return out

    def _drawn_in_place(self, func: Callable, args: tuple, kwargs: dict, out: Any
                        ) -> list[tuple[int, int]]:
        """The new versions an op that cannot be written back made in place
        (`nn.init.normal_(p, 0, 0.02)`, a parameter drawn anew, the tensor given by position
        or by name): what is read of it after is its new value."""
        name = getattr(func, "__name__", "")
        given = [*args[:1], *kwargs.values()]
        if not (name.endswith("_") and not name.startswith("_") and isinstance(out, Tensor)
                and any(out is t for t in given) and id(out) in self._objects):
            return []
        ptr = self._storage[self._objects[id(out)]]
        bumps = []
        for o, p in enumerate(self._storage):
            if p == ptr:
                self._versions[o] += 1
                bumps.append((o, self._versions[o]))
        return bumps

    # -- objects and versions ----------------------------------------------------------------
    def _object(self, t: Tensor) -> int:
        o = self._objects.get(id(t))
        if o is None:
            o = self._new(t)
            self.leaves[o] = self.names.get(id(t))
            if self.leaves[o] is None:
                # Made where the trace cannot see (autograd's `.grad`): its value may still be
                # a gradient a step is given, which the written code then starts from.
                self._keep([(o, 0)])
        return o

    def _new(self, t: Tensor) -> int:
        self._floats = self._floats or t.is_floating_point()
        o = len(self._versions)
        self._objects[id(t)] = o
        self._alive.append(t)
        self._alive_bytes += t.numel() * t.element_size()
        self._versions.append(0)
        try:
            self._storage.append(t.untyped_storage().data_ptr())
        except Exception:  # noqa: BLE001 - a tensor without storage aliases nothing
            self._storage.append(-1 - o)
        return o

    def _ref(self, t: Tensor) -> tuple:
        o = self._object(t)
        return ("t", o, self._versions[o])

    def _fresh(self, out: Any) -> list:
        """The objects an op made: a tensor, or a tuple's tensors (None for other members)."""
        if isinstance(out, Tensor):
            return [self._new(out)] if id(out) not in self._objects else []
        if isinstance(out, (tuple, list)):
            return [self._new(x) if isinstance(x, Tensor) and id(x) not in self._objects
                    else None for x in out]
        return []

    # -- arguments as plain data -------------------------------------------------------------
    def _arg(self, x: Any, depth: int = 0) -> tuple:
        if depth > 6:
            raise Unrecordable("nesting")
        if isinstance(x, Tensor):
            return self._ref(x)
        if x is Ellipsis:
            return ("raw", "...")
        if x is None or isinstance(x, (bool, int, float, str)):
            if isinstance(x, float) and not math.isfinite(x):
                return ("raw", f"float('{x}')")
            return ("lit", x)
        if isinstance(x, torch.dtype):
            return ("raw", str(x))
        if isinstance(x, torch.device):
            return ("lit", str(x))
        if isinstance(x, slice):
            return ("slice", self._arg(x.start, depth + 1), self._arg(x.stop, depth + 1),
                    self._arg(x.step, depth + 1))
        if isinstance(x, range):
            return ("range", ("lit", x.start), ("lit", x.stop), ("lit", x.step))
        if isinstance(x, (list, tuple)) and len(x) <= 64:
            kind = "list" if isinstance(x, list) else "tuple"
            return (kind, [self._arg(y, depth + 1) for y in x])
        raise Unrecordable(type(x).__name__)

    def _record(self, func: Callable, args: tuple, kwargs: dict, out: Any) -> None:
        call = _call_of(func)
        if "out" in kwargs:
            raise Unrecordable("out=")
        enc_args = [self._arg(a) for a in args]
        enc_kwargs = {k: self._arg(v) for k, v in kwargs.items()}
        reads = _refs(enc_args) + _refs(list(enc_kwargs.values()))
        op: dict = {"call": call, "args": enc_args, "kwargs": enc_kwargs, "reads": reads,
                    "own": self.own, "bumps": [], "outs": [], "mut": None}
        if _mutates(call) and args and isinstance(args[0], Tensor):
            target = self._object(args[0])
            op["mut"] = target
            ptr = self._storage[target]
            # Every view of the changed memory changes with it.
            for o, p in enumerate(self._storage):
                if p == ptr:
                    self._versions[o] += 1
                    op["bumps"].append((o, self._versions[o]))
            self._keep([(o, v) for o, v in op["bumps"]])
        elif isinstance(out, Tensor) and id(out) in self._objects:
            return  # the op gave back a tensor it was handed (`.to()` of the same dtype)
        else:
            op["outs"] = self._fresh(out)
            op["many"] = not isinstance(out, Tensor)
            self._keep([(o, 0) for o in op["outs"] if o is not None])
        self.ops.append(op)

    def _keep(self, versions: list[tuple[int, int]]) -> None:
        for o, v in versions:
            t = self._alive[o]
            wanted = (tuple(t.shape) in self.shapes or self.keep_all) if t.is_floating_point() \
                else self.keep_all and t.dtype == torch.int64 and 1 <= t.dim() <= 3
            if self.keep_all and t.numel() > MAX_OWN_NUMEL:
                wanted = False  # the notebook's whole dataset: no batch, no parameter
            if (wanted and self._kept < MAX_KEPT_BYTES and t.layout == torch.strided):
                value = t.detach().to("cpu", copy=True)
                self._kept += value.numel() * value.element_size()
                self.values[(o, v)] = value


def _holds_float(out: Any) -> bool:
    if isinstance(out, Tensor):
        return out.is_floating_point()
    return isinstance(out, (tuple, list)) and any(
        isinstance(x, Tensor) and x.is_floating_point() for x in out)


def note_names(recorder: Recorder, ns: dict) -> None:
    """After a cell: the names the program keeps its tensors under, one level into dicts and
    the learner's own objects (never the lesson's own tensors)."""
    def hint(t: Any, name: Any) -> None:
        o = recorder._objects.get(id(t)) if isinstance(t, Tensor) else None
        if o is not None and isinstance(name, str) and not recorder.leaves.get(o):
            names = recorder.hints.setdefault(o, [])
            if name not in names and len(names) < 8:
                names.append(name)

    def hold(t: Any) -> None:
        o = recorder._objects.get(id(t)) if isinstance(t, Tensor) else None
        if o is not None and len(recorder.held) < MAX_OPS:
            recorder.held.add((o, recorder._versions[o]))

    def walk(value: Any, depth: int) -> None:
        # One level into dicts and objects; in a notebook's own frame, deeper (`model.cache`
        # is a dict of the model's: its keys are the names it keeps its tensors under).
        fields = value if isinstance(value, dict) else instance_attributes(value)
        # dict's own items, never a method a learner's dict class gave itself
        for key, item in list(dict.items(fields))[:1000]:
            hint(item, key)
            hold(item)
            if depth and isinstance(item, dict) or depth and instance_attributes(item):
                walk(item, depth - 1)
        if isinstance(value, (list, tuple)):
            for item in value[:1000]:
                hold(item)
                if depth and not isinstance(item, Tensor):
                    walk(item, depth - 1)

    for name, value in list(ns.items())[:10_000]:
        hint(value, name)
        hold(value)
        walk(value, 2 if recorder.keep_all else 0)


def _refs(encoded: list) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for e in encoded:
        if e[0] == "t":
            out.append((e[1], e[2]))
        elif e[0] in ("list", "tuple"):
            out += _refs(e[1])
        elif e[0] in ("slice", "range"):
            out += _refs(list(e[1:]))
    return out


def traced(recorder: Recorder, encode: Callable[[Tensor], tuple]) -> dict:
    """A recorder's trace as plain data for the engine (tensors as `encode` writes them)."""
    return {"ops": recorder.ops, "leaves": recorder.leaves, "hints": recorder.hints,
            "held": sorted(recorder.held), "misses": recorder.misses,
            "values": {f"{o}:{v}": encode(t) for (o, v), t in recorder.values.items()}}


# -- the engine's half: a gradient found by value, written out ------------------------------
@dataclass
class Wanted:
    """What one step needs: the gradients it answers (name -> autograd's value on the first
    batch) and those it is given (name -> value), which the written code reads by name."""

    answers: dict[str, Tensor]
    given: dict[str, Tensor]
    # First branches the step starts: written out where the program computes them, else left
    # to the check (which lets autograd's branch stand in and says so).
    partials: dict[str, Tensor] = field(default_factory=dict)
    # Where the learner's own upstream gradient was wrong: the step's answers and first branches
    # as its rule gives them from that upstream (`learner_upstream`). Their code for this step,
    # right, made these values; the check then runs it from the right upstream.
    theirs: dict[str, Tensor] | None = None
    # The complete gradients earlier steps of the exercise answer: code that works several
    # lines in one go (a layer norm's backward in one formula) starts from one of them, not
    # from what this step is given; the check's fork probe varies it (tutor/core/probe.py).
    earlier: dict[str, Tensor] = field(default_factory=dict)


def regrouped(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether shapes `a` and `b` are the same entries with neighbouring axes merged or split
    (`[B*T, C]` for `[B, T, C]`; heads folded into the batch, `[B*nh, T, hs]` for `[B, nh,
    T, hs]`), axes of one aside: a notebook that keeps its activations as rows, read in order."""
    a, b = tuple(d for d in a if d != 1), tuple(d for d in b if d != 1)
    if a == b or math.prod(a) != math.prod(b):
        return False
    ends_a, ends_b = set(itertools.accumulate(a, operator.mul)), set(
        itertools.accumulate(b, operator.mul))
    return ends_a <= ends_b or ends_b <= ends_a


def axis_order(source: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order that lays a tensor of shape `source` out as `target` (`t.permute(order)`),
    where `target`'s sizes are `source`'s in another order, each size once (so that the sizes
    alone tell the order: a notebook that keeps time first, `[T, B, C]` for `[B, C, T]`)."""
    source, target = tuple(source), tuple(target)
    if source == target or sorted(source) != sorted(target) or len(set(source)) != len(source):
        return None
    return tuple(source.index(d) for d in target)


def laid_out(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether shapes `a` and `b` hold the same entries laid out otherwise: `regrouped`, or
    the same axes in another order (`axis_order`)."""
    return regrouped(a, b) or axis_order(a, b) is not None


def layout_code(source: tuple[int, ...], target: tuple[int, ...]) -> str:
    """The method that lays a tensor of shape `source` out as `target` (`laid_out`)."""
    order = axis_order(source, target)
    if order is not None:
        return f".permute({', '.join(map(str, order))})"
    return regroup_code(source, target)


def regroup_code(source: tuple[int, ...], target: tuple[int, ...]) -> str:
    """The method that turns a tensor of shape `source` into `target` (`regrouped`), on any
    batch: the leading axes, where the batch is, merged or split with the rest kept (or the
    trailing ones, a layer's heads, with the batch's axes kept)."""
    source, target = tuple(source), tuple(target)
    if len(target) < len(source) and source[:len(target) - 1] == target[:-1]:
        return f".flatten({len(target) - 1})"
    if len(target) > len(source) and target[:len(source) - 1] == source[:-1]:
        return f".unflatten(-1, {target[len(source) - 1:]})"
    if len(target) < len(source):
        k = next((k for k in range(2, len(source)) if tuple(source[k:]) == tuple(target[1:])),
                 None)
        if k is not None:
            return f".flatten(0, {k - 1})"
    elif len(target) > len(source):
        k = next((k for k in range(2, len(target)) if tuple(target[k:]) == tuple(source[1:])),
                 None)
        if k is not None:
            return f".unflatten(0, (-1, {', '.join(map(str, target[1:k]))}))"
    return f".reshape(-1, {', '.join(map(str, target[1:]))})" if len(target) > 1 \
        else ".reshape(-1)"


def _close(a: Tensor, b: Tensor, floor: float = 0.0, regroup: bool = False) -> bool:
    """Whether `a` is `b` up to float32 rounding; `floor` is an absolute tolerance from the
    step's scale (a gradient that is all but zero, as a bias before batchnorm gets, is compared
    on the step's scale). A shape that differs only by axes of one (`[64]` for `[1, 64]`) is
    the same gradient, as the check takes it; with `regroup`, one laid out otherwise (axes
    merged, split or in another order: `laid_out`), which the written code lays out again."""
    if a.shape != b.shape:
        if a.numel() != b.numel() or [d for d in a.shape if d != 1] != [
                d for d in b.shape if d != 1] and not (regroup and laid_out(a.shape, b.shape)):
            return False
        order = axis_order(tuple(a.shape), tuple(b.shape)) if regroup else None
        a = a.permute(order) if order is not None else a.reshape(b.shape)
    a, b = a.double(), b.double()
    scale = float(b.abs().max()) if b.numel() else 0.0
    if not math.isfinite(scale):
        return False
    return bool(((a - b).abs() <= 1e-4 * scale + 1e-3 * b.abs() + floor).all())


def _fits(a: Tensor, b: Tensor) -> bool:
    """Whether `a` has `b`'s shape, up to axes of one: a value of another shape kept under a
    gradient's name (`dtok` for an embedding table's gradient, beside the lesson's `tok`) is no
    answer for it, right or wrong."""
    return a.shape == b.shape or a.numel() == b.numel() and (
        [d for d in a.shape if d != 1] == [d for d in b.shape if d != 1]
        or laid_out(a.shape, b.shape))


def _floor(wanted: Wanted) -> float:
    refs = [*wanted.answers.values(), *wanted.given.values(), *wanted.partials.values()]
    return 1e-6 * max((float(r.abs().max()) for r in refs if r.numel()), default=0.0)


class _Literals:
    """Each literal of the first batch's trace, with the same literal of the fresh batch's
    (the same op, the same place), to tell the batch size from a constant."""

    def __init__(self, n: tuple[int, int]):
        self.n = n

    def write(self, a: Any, b: Any) -> str:
        if a == b or b is _MISSING or type(a) is not type(b) or isinstance(a, bool):
            return repr(a)
        na, nb = self.n
        if isinstance(a, int):
            c, k = divmod(a - b, na - nb) if na != nb else (0, 1)
            if k == 0 and c != 0:
                k = a - c * na  # a = c * n + k on both batches
                scaled = "n" if c == 1 else f"n * {c}"
                return scaled if k == 0 else f"({scaled} {'+' if k > 0 else '-'} {abs(k)})"
        if isinstance(a, float):
            if math.isclose(a * na, b * nb, rel_tol=1e-6):
                return f"({a * na!r} / n)"
            if math.isclose(a / na, b / nb, rel_tol=1e-6):
                return f"({a / na!r} * n)"
            if a != b and a and b:
                # a = c / (n + k), as in 1 / (n - 1): k from the two batches, a small integer.
                k = (b * nb - a * na) / (a - b)
                if abs(k - round(k)) < 1e-6 and abs(k) <= 8:
                    k = round(k)
                    c = a * (na + k)
                    return f"({c!r} / (n {'+' if k >= 0 else '-'} {abs(k)}))"
        raise Unrecordable(f"a literal that changes with the batch ({a!r} / {b!r})")


class _OwnLiterals(_Literals):
    """A run in the notebook's own frame has one batch, of its own size B: a literal that is
    B (or B - 1, 1 / B, 1 / (B - 1), or k·B) is written as the batch size, for the check runs
    the code on the tutor's batches. Where B is also another size of the notebook's, that may
    be wrong: the check says so, and the code is also written without (`Traces.literals`)."""

    def __init__(self, n: tuple[int, int], own: int, less_one: bool = True,
                 sizes: frozenset[int] = frozenset()):
        super().__init__(n)
        self.own = own
        self.less_one = less_one
        # The lesson's sizes (its parameters' dimensions), which the notebook shares with it:
        # 27 is the vocabulary, not 9·B, for a batch of 3.
        self.sizes = sizes

    def write(self, a: Any, b: Any) -> str:
        m = self.own
        if isinstance(a, bool) or m < 2 or isinstance(a, int) and a != m and a in self.sizes:
            return repr(a)
        if isinstance(a, int):
            if a == m:
                return "n"
            if a == m - 1 and self.less_one:
                return "(n - 1)"
            if a > m and a % m == 0 and a // m <= 64:
                return f"(n * {a // m})"
            return repr(a)
        if isinstance(a, float) and a:
            for text, value in (("n", m), ("(n - 1)", m - 1))[:2 if self.less_one else 1]:
                if math.isclose(a * value, 1.0, rel_tol=1e-6):
                    return f"(1.0 / {text})"
                if math.isclose(a, value, rel_tol=1e-9):
                    return f"float({text})"
        return repr(a)


_MISSING = object()


def _expr(e: tuple, other: Any, names: Callable[[int], str], lits: _Literals) -> str:
    kind = e[0]
    o = other if isinstance(other, tuple) and other and other[0] == kind else None
    if kind == "t":
        return names(e[1])
    if kind == "lit":
        return lits.write(e[1], o[1] if o else _MISSING)
    if kind == "raw":
        return e[1]
    if kind == "slice":
        parts = [_expr(x, o[i + 1] if o else None, names, lits) for i, x in enumerate(e[1:])]
        parts = ["" if p == "None" else p for p in parts]
        return ":".join(parts[:2]) + (f":{parts[2]}" if parts[2] else "")
    if kind == "range":
        parts = [_expr(x, o[i + 1] if o else None, names, lits) for i, x in enumerate(e[1:])]
        return f"range({', '.join(parts)})"
    if kind in ("list", "tuple"):
        items = e[1]
        others = o[1] if o and len(o[1]) == len(items) else [None] * len(items)
        inner = ", ".join(_expr(x, y, names, lits) for x, y in zip(items, others, strict=True))
        if kind == "list":
            return f"[{inner}]"
        return f"({inner},)" if len(items) == 1 else f"({inner})"
    raise Unrecordable(kind)


def _index(e: tuple, other: Any, names: Callable[[int], str], lits: _Literals) -> str:
    """A subscript as written between brackets: slices stay slices."""
    if e[0] == "tuple" and e[1]:
        others = other[1] if isinstance(other, tuple) and other and other[0] == "tuple" \
            and len(other[1]) == len(e[1]) else [None] * len(e[1])
        return ", ".join(_expr(x, y, names, lits) for x, y in zip(e[1], others, strict=True))
    return _expr(e, other, names, lits)


def _statement(op: dict, other: dict | None, names: Callable[[int], str], lits: _Literals,
               outs: str) -> str:
    call, args, kwargs = op["call"], op["args"], op["kwargs"]
    oargs = other["args"] if other and len(other["args"]) == len(args) else [None] * len(args)
    okw = other["kwargs"] if other else {}

    def a(i: int) -> str:
        return _expr(args[i], oargs[i], names, lits)

    # Keywords torch passes itself (`_stacklevel`) are its defaults: left out.
    keywords = [f"{k}={_expr(v, okw.get(k), names, lits)}" for k, v in kwargs.items()
                if not k.startswith("_")]
    kind = call[0]
    if kind == "bin":
        expr = f"({a(0)} {call[1]} {a(1)})"
    elif kind == "rbin":
        expr = f"({a(1)} {call[1]} {a(0)})"
    elif kind == "unary":
        expr = f"abs({a(0)})" if call[1] == "abs" else f"({call[1]}{a(0)})"
    elif kind == "prop":
        expr = f"{a(0)}.{call[1]}"
    elif kind == "getitem":
        expr = f"{a(0)}[{_index(args[1], oargs[1], names, lits)}]"
    elif kind == "setitem":
        return f"{a(0)}[{_index(args[1], oargs[1], names, lits)}] = {a(2)}"
    elif kind == "iop":
        return f"{a(0)} {call[1]} {a(1)}"
    elif kind == "method":
        rest = [a(i) for i in range(1, len(args))] + keywords
        expr = f"{a(0)}.{call[1]}({', '.join(rest)})"
    else:
        every = [a(i) for i in range(len(args))] + keywords
        expr = f"{call[1]}({', '.join(every)})"
    if op["mut"] is not None:
        return expr
    return f"{outs} = {expr}"


@dataclass
class Read:
    """A trace as the engine reads it: who made each version, and the kept values by version."""

    ops: list[dict]
    leaves: dict[int, str | None]
    hints: dict[int, list[str]]
    values: dict[tuple[int, int], Tensor]
    maker: dict[tuple[int, int], int] = field(default_factory=dict)
    sums: dict[tuple[int, int], float] | None = None  # each value's sum of magnitudes
    # The version an earlier step of the exercise took for each gradient (by value, name or
    # place): where a later step is given that gradient and the learner's own value of it was
    # wrong, the later step's code starts from there.
    took: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    held: set[tuple[int, int]] = field(default_factory=set)
    readers: dict[tuple[int, int], list[int]] | None = None  # version -> ops that read it
    # In a notebook's own frame, the versions found to be the lesson's tensors by value
    # (tutor/core/frame.py): where the written code reads the lesson's tensor by its name.
    named: set[tuple[int, int]] = field(default_factory=set)
    # In a notebook's own frame, versions written as an expression of the lesson's tensors:
    # one it laid out into a lesson's tensor (`W_out`, read as `W_out.T` where the lesson has
    # `Wy`, is `Wy.T`).
    expressed: dict[tuple[int, int], str] = field(default_factory=dict)
    # In a notebook's own frame, a gradient it kept in pieces (a list of one per head) is put
    # together, as an op of its own (`assembled`).
    assembles: bool = False
    next_object: int = -1  # the number `add_op` gives the next object (-1: not counted yet)
    # A piece of a given gradient put together here: the slice of it that the piece is.
    slices: dict[tuple[int, int], str] = field(default_factory=dict)

    @classmethod
    def of(cls, trace: dict) -> Read:
        values = {}
        for key, value in trace["values"].items():
            o, v = (int(x) for x in key.split(":"))
            values[(o, v)] = value
        read = cls(trace["ops"], trace["leaves"], trace.get("hints") or {}, values)
        read.held = {(int(o), int(v)) for o, v in trace.get("held") or []}
        for i, op in enumerate(read.ops):
            for o in op.get("outs") or []:
                if o is not None:
                    read.maker[(o, 0)] = i
            for o, v in op.get("bumps") or []:
                read.maker[(o, v)] = i
        return read

    def matching(self, ref: Tensor, floor: float) -> list[tuple[int, int]]:
        """The versions whose value is `ref` (see `_close`). A sum of magnitudes that differs
        by more than the tolerance allows rules a version out before it is compared whole."""
        if self.sums is None:
            self.sums = {ov: float(v.double().abs().sum()) for ov, v in self.values.items()}
        total = float(ref.double().abs().sum())
        scale = float(ref.abs().max()) if ref.numel() else 0.0
        slack = ref.numel() * (1e-4 * scale + floor) + 1e-3 * total + 1e-9
        near = [ov for ov, value in self.values.items()
                if value.numel() == ref.numel() and abs(self.sums[ov] - total) <= slack]
        # Of the gradient's own shape first: the same entries with axes merged or split (a
        # notebook that keeps its activations as `[B*T, C]` rows) only where none is, for a
        # lesson's view (`embcat`, `emb` laid out) has its gradient in both shapes.
        return [ov for ov in near if _close(self.values[ov], ref, floor)] or [
            ov for ov in near if _close(self.values[ov], ref, floor, regroup=True)]

    def add_op(self, op: dict, value: Tensor) -> tuple[int, int]:
        """An op the program did not run but whose inputs it made (its pieces stacked, what
        it kept laid out as the lesson has it), as an op of its own making a new object: its
        code is written out like any other. Returns the new version."""
        if self.next_object < 0:
            self.next_object = 1 + max([-1, *(ov[0] for ov in self.values), *(
                x for other in self.ops for x in other.get("outs") or [] if x is not None)])
        o = self.next_object
        self.next_object += 1
        self.ops.append({"kwargs": {}, "bumps": [], "mut": None, "many": False, **op,
                         "outs": [o], "own": True, "synthetic": True})
        self.values[(o, 0)] = value
        self.maker[(o, 0)] = len(self.ops) - 1
        self.sums = self.readers = None  # built again with the new op
        return (o, 0)

    def _synthetic(self, call: tuple, args: list, reads: list, value: Tensor) -> tuple[int, int]:
        """`add_op`, or the version an op of the same call on the same inputs made already."""
        for i in range(len(self.ops) - 1, -1, -1):
            if not self.ops[i].get("synthetic"):
                break
            if self.ops[i]["call"] == call and self.ops[i]["args"] == args:
                return (self.ops[i]["outs"][0], 0)
        return self.add_op({"call": call, "args": args, "reads": reads}, value)

    def cut_out(self, ref: Tensor, floor: float) -> list[tuple[int, int]]:
        """`ref` as a part of a larger value the exercise made (`dch[:, H:]`, where a notebook
        keeps the cell's and the hidden state's gradients side by side in one tensor, or one
        entry of a stack): the new versions that cut it out, from the latest such value on."""
        if not ref.is_floating_point() or not float(ref.abs().sum()) > floor:
            return []
        out: list[tuple[int, int]] = []
        for ov, i in sorted(self.maker.items(), key=lambda item: -item[1]):
            op, value = self.ops[i], self.values.get(ov)
            if not op["own"] or op.get("synthetic") or value is None \
                    or not value.is_floating_point() or value.numel() <= ref.numel() \
                    or value.numel() > MAX_PIECES * ref.numel():
                continue
            found = None
            if value.dim() == ref.dim():
                wider = [d for d in range(value.dim()) if value.shape[d] != ref.shape[d]]
                if len(wider) == 1 and value.shape[wider[0]] > ref.shape[wider[0]]:
                    # At any offset (a bias row kept above the weights, `W[1:1 + D]`): each
                    # start is tried on the slice's first entry along `d` before the whole.
                    d, size = wider[0], ref.shape[wider[0]]
                    head = ref.select(d, 0)
                    found = next((("narrow", [("lit", d), ("lit", start), ("lit", size)],
                                   value.narrow(d, start, size))
                                  for start in range(value.shape[d] - size + 1)
                                  if _close(value.select(d, start), head, floor)
                                  and _close(value.narrow(d, start, size), ref, floor)), None)
            elif value.dim() == ref.dim() + 1:
                found = next((("select", [("lit", d), ("lit", k)], value.select(d, k))
                              for d in range(value.dim())
                              if value.shape[:d] + value.shape[d + 1:] == ref.shape
                              for k in range(value.shape[d])
                              if _close(value.select(d, k), ref, floor)), None)
            if found is not None:
                name, args, part = found
                out.append(self._synthetic(("method", name), [("t", *ov), *args], [ov],
                                           part.clone()))
        return out

    def assembled(self, ref: Tensor, floor: float) -> tuple[int, int] | None:
        """`ref` put together from versions the exercise made, one per slice along a dim (a
        list of per-head gradients, stacked) or one per equal chunk (concatenated), the latest
        of each: the new version that does so, or None."""
        found = self.assemblies(ref, floor)
        return found[0] if found else None

    def assemblies(self, ref: Tensor, floor: float) -> list[tuple[int, int]]:
        """`assembled`, from the latest version of each piece and from the earliest: where
        two versions of a piece are equal (a masked gradient that was zero where it is masked),
        either may be the step's, and its rule tells."""
        out: list[tuple[int, int]] = []
        for pick in (max, min):
            whole = self._assembled(ref, floor, pick)
            if whole is not None and whole not in out:
                out.append(whole)
        return out

    def _assembled(self, ref: Tensor, floor: float, pick: Callable) -> tuple[int, int] | None:
        for d in range(ref.dim()):
            size = ref.shape[d]
            tries = [("torch.stack", [ref.select(d, i) for i in range(size)])] \
                if 2 <= size <= MAX_PIECES else []
            tries += [("torch.cat", list(ref.chunk(k, d))) for k in range(2, MAX_PIECES + 1)
                      if size % k == 0 and size // k > 1]
            for call, pieces in tries:
                found = []
                for piece in pieces:
                    if not float(piece.abs().sum()) > floor:
                        break  # nothing tells an all-zero piece from any other
                    hits = [ov for _, ov in self.own_matching(piece, floor)
                            if ov not in found and self.values[ov].shape == piece.shape]
                    if not hits and piece.dim() == 2:
                        # kept the other way round (a tap's matrix as (in, out)): laid back
                        turned = [ov for _, ov in self.own_matching(piece.T.contiguous(), floor)
                                  if self.values[ov].shape == piece.T.shape]
                        if turned:
                            ov = pick(turned, key=self.maker.__getitem__)
                            hits = [self._synthetic(("prop", "T"), [("t", *ov)], [ov],
                                                    self.values[ov].T.contiguous())]
                    if not hits:
                        break
                    found.append(pick(hits, key=self.maker.__getitem__))
                else:
                    args = [("list", [("t", o, v) for o, v in found]), ("lit", d)]
                    for i in range(len(self.ops) - 1, -1, -1):
                        if not self.ops[i].get("synthetic"):
                            break
                        if self.ops[i]["call"] == ("func", call) and self.ops[i]["args"] == args:
                            return (self.ops[i]["outs"][0], 0)  # put together already
                    value = getattr(torch, call.split(".")[1])(
                        [self.values[ov] for ov in found], d)
                    return self.add_op({"call": ("func", call), "args": args,
                                        "reads": list(found)}, value)
        return None

    def descendants(self, start: set[tuple[int, int]]) -> list[tuple[int, int]]:
        """The versions the exercise's own ops made from `start`, directly or through others,
        in the order they were made."""
        if self.readers is None:
            self.readers = {}
            for i, op in enumerate(self.ops):
                for r in op["reads"]:
                    self.readers.setdefault(tuple(r), []).append(i)
        seen, stack, out = set(start), list(start), []
        while stack:
            for i in self.readers.get(stack.pop(), ()):
                op = self.ops[i]
                made = [(o, 0) for o in op.get("outs") or [] if o is not None] + [
                    tuple(b) for b in op.get("bumps") or []]
                for ov in made:
                    if ov not in seen:
                        seen.add(ov)
                        stack.append(ov)
                        if op["own"]:
                            out.append((i, ov))
        return [ov for _, ov in sorted(out)]

    def read_on(self, ov: tuple[int, int]) -> bool:
        """Whether an op of the exercise's own reads version `ov`."""
        if self.readers is None:
            self.descendants(set())  # builds the readers
        assert self.readers is not None
        return any(self.ops[i]["own"] for i in self.readers.get(ov, ()))

    def own_matching(self, ref: Tensor, floor: float) -> list[tuple[int, tuple[int, int]]]:
        """(op, version) of each version the exercise's own code made whose value is `ref`,
        less a passing value the code went on to change into what it kept
        (`demb = dembcat.view(emb.shape).flip(0)`: the view was never the learner's answer)."""
        return [(self.maker[ov], ov) for ov in self.matching(ref, floor)
                if ov in self.maker and self.ops[self.maker[ov]]["own"]
                and not self.changed_before_kept(ov)]

    def changed_before_kept(self, ov: tuple[int, int]) -> bool:
        """Whether `ov` was never held, and an op of the exercise's own read it alone (no
        other tensor) into a value of its shape, held, that is not `ov`'s value."""
        if ov in self.held or ov not in self.values:
            return False
        if self.readers is None:
            self.descendants(set())  # builds the readers
        assert self.readers is not None
        value = self.values[ov]
        for i in self.readers.get(ov, ()):
            op = self.ops[i]
            if not op["own"] or len({tuple(r) for r in op["reads"]}) != 1:
                continue
            made = [(o, 0) for o in op.get("outs") or [] if o is not None] + [
                tuple(b) for b in op.get("bumps") or []]
            for w in made:
                other = self.values.get(w)
                if w in self.held and other is not None and other.shape == value.shape \
                        and not _close(other, value):
                    return True
        return False

    def kept_otherwise(self, tensor: str, ref: Tensor, floor: float, bare: bool = False,
                       objects: frozenset[int] = frozenset()) -> bool:
        """Whether the program held a version under `tensor`'s gradient's own name (`dc`, not
        a bare key unless `bare`, and then one its own code made) whose value is not `ref`,
        and none that is. A later version of one of `objects` is the same answer completed
        in place (`dhs_before[:, -1] += dh_prev`, where its forward pass read a state out of
        it): that is no other value kept."""
        named = [ov for ov in self.held if ov in self.values
                 and _fits(self.values[ov], ref) and (
            self.hinted(ov[0], tensor, explicitly=True) or bare and self.hinted(ov[0], tensor)
            and ov in self.maker and self.ops[self.maker[ov]]["own"])]
        return bool(named) and not any(
            ov[0] in objects and self.added_another(ov, tensor)
            or _close(self.values[ov], ref, floor) for ov in named)

    def answered(self, tensor: str, ref: Tensor) -> bool:
        """Whether the program keeps a value of its own making, of the gradient's shape, under
        a name for `tensor`'s gradient (`dd['af']`), other than the lesson's forward tensor of
        that name: its answer, right or wrong, whatever a larger value elsewhere holds (the
        fused gates' gradient of a later exercise, whose slice is right)."""
        return any(ov in self.maker and self.ops[self.maker[ov]]["own"] and ov not in self.named
                   and self.hinted(ov[0], tensor) and _fits(self.values[ov], ref)
                   for ov in self.held if ov in self.values)

    def added_another(self, ov: tuple[int, int], tensor: str) -> bool:
        """Whether an op that changed object `ov[0]` on its way to version `ov` added what
        the program keeps under another tensor's name (`dearly[:, -1] += dh_in`): a branch
        of another gradient, not a correction of this one."""
        o, v = ov
        for op in self.ops:
            if any(b[0] == o and 0 < b[1] <= v for b in op.get("bumps") or ()) and any(
                    r[0] != o and any(gradient_of(h) != tensor for h in self.hints.get(r[0], ()))
                    for r in op["reads"]):
                return True
        return False

    def hinted(self, o: int, tensor: str, explicitly: bool = False) -> bool:
        """Whether the program kept object `o` under a name for `tensor`'s gradient (with
        `explicitly`, a gradient's own name, `dh` or `h_grad`, not the bare key `h`)."""
        return any(gradient_of(h) == tensor and not (explicitly and h == tensor)
                   for h in self.hints.get(o, ()))

    def cuts(self, wanted: Wanted) -> dict[tuple[int, int], str]:
        """The versions that are a gradient the step is given: by value, else (the learner's
        own, perhaps wrong, upstream gradient) by the name it was kept under; the check stands
        the right one in for either."""
        floor = _floor(wanted)
        cuts: dict[tuple[int, int], str] = {}
        for name, ref in wanted.given.items():
            for ov in self.matching(ref, floor):
                cuts.setdefault(ov, name)
        # The latest first: a value equal to two of them (a scale of ones makes `dlnf_norm`
        # equal `dlnf`) is the one nearest this step, where the code walking back meets it.
        for name, ref in reversed(list(wanted.earlier.items())):
            for ov in self.matching(ref, floor):
                cuts.setdefault(ov, name)
        # By name too; but a bare key (`'h'`) only where no value is that gradient: the same
        # key may hold a forward value elsewhere (`values['h']` beside `grads['h']`), where a
        # gradient's own name (`dh`, `h_grad`) cannot.
        by_value = set(cuts.values())
        for ov in self.maker:
            for name in wanted.given:
                if ov not in cuts and self.hinted(ov[0], name) and (
                        name not in by_value or self.hinted(ov[0], name, explicitly=True)):
                    cuts[ov] = name
        for name in wanted.given:
            # Where the step that made it took it: the learner's own value, even where another
            # version is the right one by value (a residual's branch), for their code reads it.
            for ov in self.took.get(_took_key(name, wanted), ()):
                cuts.setdefault(ov, name)
        # A given gradient the program kept in pieces (one per head): each piece is its slice.
        for ov, name in list(cuts.items()):
            op = self.ops[self.maker[ov]] if ov in self.maker else None
            if op is None or not op.get("synthetic") or op["call"][1] not in (
                    "torch.stack", "torch.cat"):
                continue
            d, start = op["args"][1][1], 0
            for i, piece in enumerate(tuple(r) for r in op["reads"]):
                if op["call"][1] == "torch.stack":
                    self.slices[piece] = f".select({d}, {i})"
                else:
                    size = self.values[piece].shape[d]
                    self.slices[piece] = f".narrow({d}, {start}, {size})"
                    start += size
                cuts.setdefault(piece, name)
        return cuts


ALTERNATIVES = 3


@dataclass
class Traces:
    """Both batches' traces of one program, read once for all of its steps: each op of the
    first paired with the same op of the fresh batch's where the two runs agree."""

    first: Read
    second: Read
    pairs: dict[int, int]
    n: tuple[int, int]  # the two batches' sizes
    # One run in the notebook's own frame (tutor/core/frame.py): its batch size, whose
    # literals are written as `n` (`literals`), and both "batches" are that run.
    own: int | None = None
    sizes: frozenset[int] = frozenset()  # in the own frame, the lesson's parameters' sizes

    def literals(self, mapped: str | None = "full") -> _Literals:
        """How literals are written: in a notebook's own frame, its batch size as `n`
        ("full": B, B - 1, k·B and their inverses, but never one of the lesson's sizes; "exact":
        B, k·B and 1 / B only, for a notebook whose other sizes include B - 1; "blind": as
        "full", the lesson's sizes too, for a k·B that is one of them), or not at all (None)."""
        if self.own is None or not mapped:
            return _Literals(self.n)
        return _OwnLiterals(self.n, self.own, mapped != "exact",
                            frozenset() if mapped == "blind" else self.sizes)

    @classmethod
    def of(cls, trace: dict, fresh: dict, n: tuple[int, int]) -> Traces | None:
        try:
            first, second = Read.of(trace), Read.of(fresh)
            return cls(first, second, _aligned(first.ops, second.ops), n)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return None  # a child that sent nonsense traced nothing


#: How many of the exercise's own versions are tried as the learner's (wrong) upstream gradient
#: when no earlier step found it.
MAX_UPSTREAM_TRIES = 64

StepRule = Callable[[dict[str, Tensor]], "dict[str, Tensor] | None"]


def learner_upstream(read: Read, wanted: Wanted, rule: StepRule) -> dict[str, Tensor] | None:
    """The step's answers as its rule gives them from the learner's own upstream gradients,
    where those differ from autograd's (a mistake earlier in the learner's backward pass): None
    where every gradient the step is given is right, or where nothing the exercise made is what
    the rule gives from the learner's upstream.

    The learner's upstream gradient is the version an earlier step took for it
    (`Read.took`); where none did (that step was wrong, and nothing names its value), each of
    the exercise's own versions of its shape is tried, latest first, and the one from which the
    rule gives values the exercise also made is taken. `rule(shift)` is the step's answers
    (and first branches) when each given gradient `name` arrives changed by `shift[name]`
    (linear: a backward pass is linear in the gradient it is handed), or None."""
    floor = _floor(wanted)
    shift: dict[str, Tensor] = {}
    upstream: set[tuple[int, int]] = set()
    unknown: list[str] = []
    for name, right in wanted.given.items():
        took = read.took.get(_took_key(name, wanted), [])
        # Right where what the step before took is right; where no step took it, where any
        # version is. In a notebook's own frame, any version its own code made: a value
        # autograd's `.grad` gave it (its own check) says nothing of its backward pass.
        if took and took[0] in read.values and read.values[took[0]].shape == right.shape:
            if _close(read.values[took[0]], right, floor):
                continue
        elif any(ov in read.maker or not read.named for ov in read.matching(right, floor)):
            continue
        value = _as(read.values.get(took[0]), right) if took else None
        if value is not None:
            shift[name] = value - right.detach().float().cpu()
            upstream |= set(took)
        else:
            unknown.append(name)
    scale = max((float(r.abs().max()) for r in (*wanted.answers.values(),
                                                 *wanted.partials.values()) if r.numel()),
                default=0.0)

    def made(change: dict[str, Tensor], start: set[tuple[int, int]]) -> dict[str, Tensor] | None:
        # Each answer as the rule gives it must be a value the exercise's own code made from
        # the learner's upstream version (not one that only happens to be equal). One that
        # comes out all but zero (a max's branch) tells nothing, and is not asked for.
        expected = rule(change)
        if not expected:
            return None
        # What a version put together here was made of is what the program read on.
        roots = set(start) | {tuple(r) for ov in start if ov in read.maker
                              and read.ops[read.maker[ov]].get("synthetic")
                              for r in read.ops[read.maker[ov]]["reads"]}
        after = roots | set(read.descendants(roots))  # a copy may be the very version
        told = False
        for a, value in expected.items():
            size = float(value.abs().max()) if value.numel() else 0.0
            if not size > 1e-4 * scale:
                continue
            right = wanted.answers.get(a, wanted.partials.get(a))
            if right is not None and right.shape == value.shape \
                    and _close(value, right.detach().float().cpu(), floor):
                continue  # an answer only right upstream gradients reach: the ordinary search's
            # Tolerances at the scale of these values, not of autograd's: a learner's slip can
            # make them far smaller, and then almost anything small would match.
            hits = [ov for _, ov in read.own_matching(value, 1e-6 * size)]
            if not hits and read.assembles:
                whole = read.assembled(value, 1e-6 * size)
                # Some of its pieces made from the learner's upstream (others may have had
                # only right ones: the gate whose gradient was right).
                if whole is not None and after & set(read.ops[read.maker[whole]]["reads"]):
                    hits = [whole]
                    after.add(whole)
            if not after.intersection(hits):
                if a in wanted.partials:
                    continue  # a first branch is looked for, not required
                return None
            told = True
        return expected if told else None

    if not unknown:
        return made(shift, upstream) if shift else None
    # Each by the name the program kept it under (`grad_i`, its latest version; an earlier
    # exercise's code may have made it), where it did: several wrong upstream gradients at
    # once (the four gates of one wrong `dc`).
    named = {}
    for name in unknown:
        right = wanted.given[name]
        kept = [ov for ov in read.maker if read.hinted(ov[0], name, explicitly=True)
                and _as(read.values.get(ov), right) is not None]
        if kept:
            named[name] = max(kept, key=read.maker.__getitem__)
    if len(named) == len(unknown):
        expected = made({**shift, **{name: _as(read.values[ov], wanted.given[name])
                                     - wanted.given[name].detach().float().cpu()
                                     for name, ov in named.items()}},
                        upstream | set(named.values()))
        if expected is not None:
            for name, ov in named.items():
                read.took[_took_key(name, wanted)] = [ov]
            return expected
    name, right = unknown[0], wanted.given[unknown[0]]
    tries = sorted((ov for ov, v in read.values.items() if v.numel() == right.numel()
                    and ov in read.maker and read.ops[read.maker[ov]]["own"]),
                   key=read.maker.__getitem__, reverse=True)[:MAX_UPSTREAM_TRIES]
    base = right.detach().float().cpu()
    for ov in tries:
        value = _as(read.values[ov], right)
        if value is None:
            continue
        expected = made({**shift, name: value - base}, upstream | {ov})
        if expected is not None:
            read.took[_took_key(name, wanted)] = [ov]
            return expected
    return None


def _as(value: Tensor | None, like: Tensor) -> Tensor | None:
    """`value` in `like`'s shape where it differs by axes of one (`[64]` for `[1, 64]`)."""
    if value is None or value.numel() != like.numel():
        return None
    return value.float().reshape(like.shape)


def written_out(traces: Traces, wanted: Wanted, wanted_fresh: Wanted) -> list[str]:
    """The code that computes, as the trace did, every gradient in `wanted.answers` from the
    lesson's tensors and the gradients the step is given: the exercise's own latest value of
    each first, then earlier ones (a value can equal the gradient by accident, as `dnorm_logits`
    equals `dlogits` where the max's branch is near zero: the check's rule probe tells them
    apart). Empty when the trace holds no value of one of them made by the exercise's own code,
    or when what made it cannot be written back (see the module's docstring).

    `wanted_fresh` is the step's gradients on the fresh batch. A literal that differs between
    the two batches' paired ops is written as the batch size where it is one (`n`, `n - 1`,
    `1.0 / n`). Where the two took different paths (a loop over the batch), each batch's own
    computation is written out and the code picks by the batch size: on either batch it is the
    program's own work."""
    first, second = traces.first, traces.second
    try:
        mine_found = _versions(first, wanted)
        if mine_found is None:
            return []
        theirs_found = _versions(second, wanted_fresh)
        # Every gradient's shape, for one the program keeps with its axes merged or split.
        shapes = {k: tuple(v.shape) for k, v in {
            **wanted.earlier, **wanted.answers, **wanted.partials, **wanted.given}.items()}
        fresh_shapes = {k: tuple(v.shape) for k, v in {
            **wanted_fresh.earlier, **wanted_fresh.answers, **wanted_fresh.partials,
            **wanted_fresh.given}.items()}
        out: list[str] = []
        # From what the step is given first; then also from what earlier steps answer, for
        # code that works several lines in one go (an earlier gradient met on the way back
        # may be one the learner went on from wrongly: the step's own code is theirs).
        starts = [(replace(wanted, earlier={}), replace(wanted_fresh, earlier={}))]
        if wanted.earlier or wanted_fresh.earlier:
            starts.append((wanted, wanted_fresh))
        for start, fresh_start in starts:
            cuts, fresh_cuts = first.cuts(start), second.cuts(fresh_start)
            for mapped in ("full", "exact", "blind", None) if traces.own is not None \
                    else ("full",):
                for code in _written(traces, wanted, mine_found, theirs_found, cuts,
                                     fresh_cuts, shapes, fresh_shapes, mapped):
                    if code not in out:
                        out.append(code)
        return out
    except (Unrecordable, KeyError, IndexError, TypeError, ValueError, AttributeError):
        return []  # a trace that cannot be read (or a child that sent nonsense) answers nothing


def _written(traces: Traces, wanted: Wanted, mine_found: dict, theirs_found: dict | None,
             cuts: dict, fresh_cuts: dict, shapes: dict, fresh_shapes: dict,
             mapped: str | None) -> list[str]:
    """`written_out`'s codes, with the batch's literals written as `n` or not (`mapped`)."""
    first, second, n = traces.first, traces.second, traces.n
    out: list[str] = []
    for k, copies in [(k, c) for c in (False, True) for k in range(ALTERNATIVES)]:
        chosen = {name: ovs[min(k, len(ovs) - 1)] for name, ovs in mine_found.items()}
        if copies and not any(ov in cuts for ov in chosen.values()):
            continue
        if copies and any(chosen[name] in cuts and not first.hinted(chosen[name][0], name)
                          and not (traces.own is not None and first.read_on(chosen[name]))
                          for name in wanted.answers if name in chosen):
            # An answer that is the gradient the step is given, as it arrives, is the
            # step's rule whoever wrote it: only where the program kept it under the
            # answer's name is it the learner's (a step never written earns nothing). In a
            # notebook's own frame, one its own code goes on from is its own too (a residual's
            # branch, handed as it is to the layer's backward).
            continue
        code = _code_for(first, cuts, chosen, traces.literals(mapped),
                         (second.ops, traces.pairs), copies, shapes)
        if code is None and theirs_found is not None and traces.own is None:
            other = {name: ovs[min(k, len(ovs) - 1)] for name, ovs in theirs_found.items()}
            mine = _code_for(first, cuts, chosen, _Literals(n), None, copies, shapes)
            theirs = _code_for(second, fresh_cuts, other, _Literals(n), None, copies,
                               fresh_shapes)
            if mine is not None and theirs is not None:
                code = (f"if n == {n[0]}:\n" + _indented(mine) + "else:\n"
                        + _indented(theirs))
        if code is not None and code not in out:
            out.append(code)
    return out


def _indented(code: str) -> str:
    return "".join(f"    {line}\n" for line in code.splitlines())


def _versions(read: Read, wanted: Wanted) -> dict[str, list[tuple[int, int]]] | None:
    """Each wanted gradient's candidate versions, latest first (None where an answer has
    none; a first branch without one is left to the check). Each answer's first candidate is
    what a later step given that gradient starts from (`Read.took`)."""
    found = _candidates(read, wanted)
    if found is not None:
        for name, ovs in found.items():
            # Every candidate: equal values (a copy, a branch of nearly nothing added) are all
            # what later steps may have read of it.
            read.took[f"{name}/first" if name in wanted.partials else name] = list(ovs)
    return found


def _took_key(name: str, wanted: Wanted) -> str:
    """Where `Read.took` keeps a gradient the step is given: a first branch it completes (it is
    also one of its answers) under its own key, apart from the complete gradient."""
    return f"{name}/first" if name in wanted.answers else name


def _candidates(read: Read, wanted: Wanted) -> dict[str, list[tuple[int, int]]] | None:
    found: dict[str, list[tuple[int, int]]] = {}
    floor = _floor(wanted)
    for name, ref in {**wanted.answers, **wanted.partials}.items():
        matches = read.own_matching(ref, floor)
        if not matches and wanted.theirs is not None and name in wanted.theirs:
            matches = read.own_matching(wanted.theirs[name], floor)
        if read.assembles and all(read.ops[i].get("synthetic") for i, _ in matches):
            # Kept in pieces (one per head): put together from the latest of each, the last
            # the program made of it (a version put together before may hold earlier ones).
            wholes = read.assemblies(ref, floor) or (
                read.assemblies(wanted.theirs[name], floor)
                if wanted.theirs is not None and name in wanted.theirs else [])
            matches = [(read.maker[w], w) for w in wholes] + [
                m for m in matches if m[1] not in wholes]
        objects = frozenset(ov[0] for _, ov in matches)
        if matches and name not in wanted.partials \
                and not any(ov in read.held for _, ov in matches) \
                and read.kept_otherwise(name, ref, floor, bare=True, objects=objects):
            # The value passed by (a local of a function of a later exercise) while what the
            # program keeps under this gradient's own name is another: that is its answer.
            matches = []
        others = set(wanted.answers) | set(wanted.partials) | set(wanted.given)
        others.discard(name)
        if matches and name not in wanted.partials and all(
                not read.hinted(ov[0], name) and any(read.hinted(ov[0], o) for o in others)
                for _, ov in matches) and read.kept_otherwise(name, ref, floor, bare=True,
                                                              objects=objects):
            # Each value that is right is another gradient's (a residual's two branches and
            # its given gradient are one value) while the program keeps another value under
            # this one's name: that is its answer, whatever else equals the right one.
            matches = []
        if not matches and not read.answered(name, ref):
            # Kept inside a larger value of the program's (its gradients side by side), where
            # it keeps no value of its own under this gradient's name.
            parts = read.cut_out(ref, floor) or (
                read.cut_out(wanted.theirs[name], floor)
                if wanted.theirs is not None and name in wanted.theirs else [])
            matches = [(read.maker[p], p) for p in parts]
        if not matches:
            hinted = [(i, ov) for ov, i in read.maker.items()
                      if read.ops[i]["own"] and read.hinted(ov[0], name)
                      and (ov not in read.values or _fits(read.values[ov], ref))]
            if not hinted:
                if name in wanted.partials:
                    continue
                return None
            if name not in wanted.partials:
                # Only the last value it took: its own work on a wrong upstream gradient, which
                # the check replaces with the right one.
                matches = [max(hinted)]
            else:
                # A first branch: the value it had next to the step's own answers.
                near = max((read.maker[ovs[0]] for ovs in found.values()), default=0)
                matches = [min(hinted, key=lambda m: abs(m[0] - near))]
        found[name] = [ov for _, ov in sorted(matches, reverse=True)]
    return found


def gradient_of(name: str) -> str:
    for prefix in (*OTHER_PREFIXES, "g_", PREFIX):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix):]
    for suffix in ("_grad", ".grad"):
        if name.endswith(suffix):
            return name[:-len(suffix)]
    return name


def _signature(op: dict) -> tuple:
    return (op.get("call"), len(op.get("args") or ()), tuple(sorted(op.get("kwargs") or {})))


def _aligned(a: list[dict], b: list[dict]) -> dict[int, int]:
    """Op i of one trace -> the same op of the other, where the two runs agree: the ops before
    the first place they differ and those after the last (a loop over the batch between them
    pairs nothing). Linear in the traces' length, whatever a program repeats."""
    sa, sb = [_signature(o) for o in a], [_signature(o) for o in b]
    pairs = {}
    head = 0
    while head < min(len(sa), len(sb)) and sa[head] == sb[head]:
        pairs[head] = head
        head += 1
    tail = 1
    while tail <= min(len(sa), len(sb)) - head and sa[-tail] == sb[-tail]:
        pairs[len(sa) - tail] = len(sb) - tail
        tail += 1
    return pairs


def _code_for(read: Read, cuts: dict[tuple[int, int], str],
              chosen: dict[str, tuple[int, int]], lits: _Literals,
              fresh: tuple[list[dict], dict[int, int]] | None, copies: bool = False,
              shapes: dict[str, tuple[int, ...]] | None = None) -> str | None:
    """The code for one choice of versions, or None where it cannot be written back. With
    `fresh` (the fresh batch's ops, and which of them pairs with each of these), literals that
    differ are written as the batch size; an op without a pair that holds an integer literal
    makes it None. With `copies`, an answer that is itself a version the step is given (a
    first branch that is the upstream gradient as it arrives) is written as a copy of it;
    without, it is followed back through what made it."""
    ops = read.ops
    shapes = shapes or {}
    answers = set(chosen.values())
    # An answer put together from pieces: each piece is followed back as an answer is.
    answers |= {tuple(r) for ov in list(answers) if ov in read.maker
                and ops[read.maker[ov]].get("synthetic") for r in ops[read.maker[ov]]["reads"]}
    needed: set[int] = set()
    bound: dict[int, str] = {}  # object -> the given gradient it starts from
    sliced: dict[int, str] = {}  # object -> the slice of it (a piece of one kept in pieces)
    squeezed: set[int] = set()  # objects the learner held without the gradient's axes of one
    regroup: dict[int, tuple[int, ...]] = {}  # objects held with axes merged: their shape
    # By object, as the code names them: an object with two versions so written (changed in
    # place between them) is followed back through its ops instead.
    counts: dict[int, int] = {}
    for o, _v in read.expressed:
        counts[o] = counts.get(o, 0) + 1
    expressed = {o: text for (o, _v), text in read.expressed.items() if counts[o] == 1}
    stack = list(answers)
    seen: set[tuple[int, int]] = set()
    while stack:
        ov = stack.pop()
        if ov in seen:
            continue
        seen.add(ov)
        if ov in cuts and (copies or ov not in answers):
            if ov[0] in bound and bound[ov[0]] != cuts[ov]:
                return None
            bound[ov[0]] = cuts[ov]
            sliced[ov[0]] = read.slices.get(ov, "")
            value = read.values.get(ov)
            if value is not None and value.dim() < len(shapes.get(cuts[ov], ())) \
                    and not sliced[ov[0]] and not laid_out(value.shape, shapes[cuts[ov]]):
                squeezed.add(ov[0])
            elif value is not None and cuts[ov] in shapes and not sliced[ov[0]] \
                    and laid_out(value.shape, shapes[cuts[ov]]):
                regroup[ov[0]] = tuple(value.shape)
            continue
        i = read.maker.get(ov)
        if ov in read.expressed and ov[0] in expressed:
            continue
        if i is None:
            if (ov[1] == 0 or ov in read.named) and read.leaves.get(ov[0]):
                continue  # one of the lesson's tensors, by its name
            return None  # something the code did not make here (or autograd's own answer)
        if "bad" in ops[i]:
            return None
        needed.add(i)
        stack += [tuple(r) for r in ops[i]["reads"]]
    for o in bound:
        # A given gradient is read from where it starts; what came before is not this step's.
        needed -= {i for i in needed if o in (ops[i].get("outs") or [])}
    for i in needed:
        if ops[i]["mut"] is not None and read.leaves.get(ops[i]["mut"]):
            return None  # the code changes one of the lesson's tensors: not written back


    def name_of(o: int) -> str:
        if o in expressed and o not in bound:
            return expressed[o]
        leaf = read.leaves.get(o)
        return leaf if leaf and o not in bound else f"t{o}"

    lines = [f"t{o} = {gradient(name)}{sliced.get(o, '')}.clone()" + (
        f".reshape([s for s in {gradient(name)}.shape if s != 1])" if o in squeezed else
        layout_code(shapes[name], regroup[o]) if o in regroup and name in shapes else "")
        for o, name in sorted(bound.items())]
    # Two answers may be the same version (a residual's two branches, both the gradient as it
    # arrives): each is written.
    done: dict[tuple[int, int], list[str]] = {}
    for name, ov in chosen.items():
        done.setdefault(ov, []).append(name)
    if copies:
        lines += [f"{gradient(name)} = t{ov[0]}.clone()" for ov, names in done.items()
                  if ov in cuts for name in names]
    try:
        for i in sorted(needed):
            op = ops[i]
            other = None
            if fresh is not None:
                if i in fresh[1]:
                    other = fresh[0][fresh[1][i]]
                elif op.get("synthetic"):
                    other = op  # put together here, from the program's own values
                elif _has_int_literal(op):
                    return None  # the fresh batch took another path here
            outs = op.get("outs") or []
            target = ", ".join(f"t{o}" if o is not None else "_" for o in outs)
            if op.get("many") and len(outs) == 1:
                target += ","
            lines.append(_statement(op, other, name_of, lits, target))
            for o, v in ([(o, 0) for o in outs if o is not None] + [tuple(b) for b in op["bumps"]]):
                lines += [f"{gradient(name)} = t{o}" + _laid_back(
                    read.values.get((o, v)), name, shapes) for name in done.get((o, v), ())]
    except Unrecordable:
        return None
    return "\n".join(lines) + "\n"


def _laid_back(value: Tensor | None, name: str, shapes: dict[str, tuple[int, ...]]) -> str:
    """What copies a gradient the program keeps laid out otherwise (`laid_out`) into the
    lesson's layout: its axes put back in order, or its entries reshaped as the tensor is."""
    if value is None or name not in shapes or not laid_out(tuple(value.shape), shapes[name]):
        return ".clone()"
    order = axis_order(tuple(value.shape), shapes[name])
    if order is not None:
        return f".permute({', '.join(map(str, order))}).clone()"
    return f".reshape({name}.shape).clone()"


def _has_int_literal(op: dict) -> bool:
    def walk(e: Any) -> bool:
        if isinstance(e, tuple) and e:
            if e[0] == "lit":
                return isinstance(e[1], int) and not isinstance(e[1], bool)
            if e[0] in ("list", "tuple"):
                return any(walk(x) for x in e[1])
            if e[0] in ("slice", "range"):
                return any(walk(x) for x in e[1:])
        return False
    return any(walk(a) for a in op["args"]) or any(walk(v) for v in op["kwargs"].values())
