"""The smallest change to the learner's own code that makes a wrong gradient right.

The catalogue and the rewrites of the reference solution (tutor/core/derived.py) explain a wrong
answer that someone foresaw. A learner's code is often right but for one slip in a formula of
their own: a constant inside one term, one function or one axis of a fused line, one operand of
a run of in-place updates. This module parses the learner's code and makes one change at a
time; the caller's `run` has each changed program run on the same inputs; the first change
that makes the answer right, on the main batch and on the fresh one, is what the message
names, with where it is and what kind of change it is, never the corrected code:

- a term (an operand of a sum, or what a `+=` adds) off by a constant factor: the factor comes
  from a least-squares fit of the term's share of the answer, and is confirmed by running the
  program with the term scaled by it;
- a constant written inside the formula (a literal, `math.pi`, a size such as `n`) with one
  operation of it the other way round (`2 * pi` for `2 / pi`) or a square root too many;
- a function of the same family in place of another (`log_softmax` and `softmax`, `exp` and
  `log`, `sum` and `mean`, `argmax` and `argmin`, `max` and `min`);
- a reduction, softmax or index over another dimension, or with `keepdim` the other way;
- a comparison off at its bound (`>` for `>=`), a reshape where dims had to move first;
- one read of a tensor in place of another tensor of the same shape, in one statement;
- in a function: a local made from one tensor (`ai = torch.logit(i)`) read where that tensor
  belongs, a factor of a product or a term too many.

Nothing of the learner's code, original or changed, runs here. This module only makes the
changed programs (plain work on the syntax tree) and compares what comes back; the caller's
`run` compiles them as a candidate is compiled (behind the policy and the guard) and has a
confined child run them on the namespace the learner's code started from, on the main batch and
on the fresh one (`execution.run_variants`, `Engine.run_variants`), which sends back their
values, bounded in count, size and time. A constant's value is read off its syntax
(`_arithmetic`), never evaluated. Only code inside a small subset is searched (`searchable`):
assignments and expressions of tensors, numbers and calls of listed torch functions and
methods, with no comprehension, lambda, import or definition other than the step's function,
and a loop or a branch only inside that function (a loop through time, which the budget ends);
a line step may loop over a `range` (a pool's windows, a batch's rows).
That is a cost limit, so that the changes stay few and each runs in a time set by the lesson's
tensors; the child's confinement is what keeps a changed program from doing harm.
"""

from __future__ import annotations

import ast
import copy
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from dataclasses import field as default

import torch

from tutor.core.diagnosis import close, diagnosis
from tutor.pack.flow import tensor_of
from tutor.values.results import Diagnosis

Tensor = torch.Tensor

# What a search may run is a count (MAX_EDITS), so that what it finds is the same on a busy
# machine, a quiet one and the simulated device. The CPU seconds below are only a backstop for a
# changed program that runs away (a size in a loop's bound changed): every program of an ordinary
# search runs well inside them, so they never decide which change is named. A refused verdict
# waits for the search (benchmarks/diagnoses.py says how long that is on either path).
BUDGET = 2.0
MAX_EDITS = 120  # changed programs run at most per search
MAX_NODES = 600  # a longer program is not searched: its edits would not fit the budget

# Functions that are easily confused with one another: each may stand for the others.
_FAMILIES = [
    ("softmax", "log_softmax"),
    ("exp", "log"),
    ("sum", "mean"),
    ("argmax", "argmin"),
    ("max", "min"),
    ("amax", "amin"),
    ("tanh", "sigmoid"),
    ("sqrt", "rsqrt"),
]
_SWAPS = {a: [b for fam in _FAMILIES if a in fam for b in fam if b != a]
          for fam in _FAMILIES for a in fam}
# Calls whose `dim` decides the axis: the position of `dim` among a method's arguments, and
# among a function's (`F.softmax(x, 1)`).
_DIMMED = {"sum": 0, "mean": 0, "softmax": 0, "log_softmax": 0, "max": 0, "min": 0,
           "argmax": 0, "argmin": 0, "amax": 0, "amin": 0, "var": 0, "std": 0, "cumsum": 0,
           "norm": 1, "cat": 1, "stack": 1}
_DIM_CHOICES: list[object] = [0, 1, 2, -1, -2, (0, 1), (0, 1, 2), (1, 2)]

_MODULES = {"torch", "F", "math", "nn", "functional"}
_BUILTINS = {"range", "len", "float", "int", "abs", "min", "max", "round", "reversed",
             "enumerate", "zip"}
# Tensor methods and torch functions a searched program may call or read.
_ATTRIBUTES = set(_SWAPS) | set(_DIMMED) | {
    "T", "mT", "shape", "size", "dim", "numel", "dtype", "device", "view", "reshape",
    "transpose", "permute", "unsqueeze", "squeeze", "flatten", "contiguous", "clone", "detach",
    "float", "double", "long", "int", "bool", "to", "type_as", "view_as", "reshape_as",
    "pow", "square", "abs", "sign", "neg", "clamp", "clamp_min", "clamp_max", "relu",
    "where", "masked_fill", "masked_fill_", "matmul", "mm", "bmm", "t", "outer", "einsum",
    "indices", "values", "split", "chunk", "gather", "index_select", "index_add",
    "index_add_", "scatter_add", "scatter_add_", "one_hot", "zeros_like", "ones_like",
    "empty_like", "full_like", "rand_like", "add", "sub", "mul", "div", "add_", "sub_",
    "mul_", "div_", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_", "copy_",
    "zero_", "fill_", "sqrt_", "exp_", "neg_", "pi", "e", "tril", "triu", "eq", "ne", "lt",
    "gt", "le", "ge", "logical_not", "sigmoid_", "tanh_", "square_", "reciprocal",
    "reciprocal_", "cross_entropy", "functional", "nn", "new_zeros", "new_ones", "zeros",
    "ones", "full", "empty", "sqrt", "rsqrt", "log1p", "expm1", "erf", "mv", "diag",
    "diagonal", "flip", "roll", "all", "any", "item", "prod", "cumprod",
    "unbind", "narrow", "select", "hstack", "vstack", "movedim", "expand_as",
    "logit", "cosh", "sinh", "atanh", "tanh", "sigmoid", "append", "insert",
    # Convolutions, pools and the layouts around them: each makes a tensor no larger than its
    # operands times a size the code reads (a sized call's sizes are held to `_SIZED`'s rule).
    "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "unfold", "fold", "pad",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "repeat", "repeat_interleave",
    "expand", "arange", "exp", "log", "gelu", "softplus", "embedding", "stack", "cat",
    # Products and layouts spelled otherwise: no larger than what `einsum` already makes.
    "tensordot", "swapaxes", "swapdims", "unflatten", "rot90", "scatter", "scatter_", "linear",
    "max_unpool2d", "max_unpool1d",
}
# Constructors that take sizes: allowed only with sizes read off tensors or names the code
# does not bind (the lesson's sizes), or small literals.
_SIZED = {"zeros", "ones", "full", "empty", "new_zeros", "new_ones", "range", "one_hot",
          "repeat", "repeat_interleave", "expand", "arange", "fold", "pad"}
# Sized calls that make copies of a whole tensor: their counts stay small.
_COPIES = {"repeat", "repeat_interleave"}
# Sized calls whose first argument, called from a module (`torch.repeat_interleave(t, 2)`,
# `F.fold(cols, ...)`), is the tensor rather than a size.
_TENSOR_FIRST = {"one_hot", "repeat_interleave", "fold", "pad"}
_BIG = 4096


@dataclass(frozen=True)
class Edit:
    """One change to the learner's program: the changed source and what the change says."""

    family: str
    source: str
    message: str


# --- the subset ---------------------------------------------------------------------------------


def searchable(tree: ast.Module, function: str | None = None) -> bool:
    """Whether the program is inside the subset whose changes are searched: a cost limit (the
    changes stay few), not what keeps them from harm (the child is; module docstring)."""
    body = tree.body
    if function is not None:
        defs = [s for s in body if isinstance(s, ast.FunctionDef)]
        if len(defs) != 1 or defs[0].name != function or len(body) != 1:
            return False
        fn = defs[0]
        if fn.decorator_list or fn.returns or fn.args.vararg or fn.args.kwarg \
                or fn.args.kw_defaults or fn.args.defaults:
            return False
        body = fn.body
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return False
    bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)}
    if function is not None:
        bound |= {a.arg for a in tree.body[0].args.args}  # type: ignore[attr-defined]
    # A size the code reads off a tensor once (`B, H = dh.shape`) is as good as the shape.
    bound = _Bound(bound - _shape_names(tree))
    bound.helpers = frozenset(_helpers(tree))
    return all(_statement_ok(s, bound, function is not None) for s in body)


class _Bound(set):
    """The names the code binds, and which of them are its one-line helpers (lambdas)."""

    helpers: frozenset[str] = frozenset()


def _helpers(tree: ast.Module) -> Iterator[str]:
    """Names bound once, to a lambda: a call of one runs an expression of the subset."""
    stores: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            stores[n.id] = stores.get(n.id, 0) + 1
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Lambda) \
                and stores.get(node.targets[0].id) == 1:
            yield node.targets[0].id


def _shape_names(tree: ast.Module) -> set[str]:
    """Names bound exactly once, to a size read off a tensor (`B, H = x.shape`,
    `H = h.shape[1]`, `n = x.size(0)`)."""
    stores: dict[str, int] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            stores[n.id] = stores.get(n.id, 0) + 1
    out = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        v = node.value
        if isinstance(v, ast.Subscript):
            v = v.value
        reads = (isinstance(v, ast.Attribute) and v.attr == "shape") or (
            isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute)
            and v.func.attr in ("size", "dim"))
        if reads:
            out |= {n.id for n in ast.walk(node.targets[0]) if isinstance(n, ast.Name)
                    and stores.get(n.id) == 1}
    return out


def _statement_ok(s: ast.stmt, bound: set[str], in_function: bool) -> bool:
    if isinstance(s, ast.Assign):
        return all(_target_ok(t) for t in s.targets) and _expr_ok(s.value, bound)
    if isinstance(s, ast.AugAssign):
        return _target_ok(s.target) and _expr_ok(s.value, bound) and not isinstance(
            s.op, (ast.Pow, ast.LShift, ast.RShift))
    if isinstance(s, ast.Expr):
        return isinstance(s.value, (ast.Call, ast.Constant)) and _expr_ok(s.value, bound) \
            and not (isinstance(s.value, ast.Constant) and not isinstance(s.value.value, str))
    if isinstance(s, ast.Return):
        return in_function and (s.value is None or _expr_ok(s.value, bound))
    if isinstance(s, ast.For) and not in_function and not _ranged(s):
        return False
    if isinstance(s, ast.For) or (in_function and isinstance(s, (ast.While, ast.If))):
        # A function's loop through its steps (backprop through time) and its branches: each
        # changed program runs them within the search's budget, which ends a long one.
        if isinstance(s, ast.For) and not _target_ok(s.target):
            return False
        if isinstance(s, (ast.For, ast.While)) and s.orelse:
            return False
        head = s.iter if isinstance(s, ast.For) else s.test
        return _expr_ok(head, bound) and all(_statement_ok(b, bound, in_function)
                                             for b in [*s.body, *s.orelse])
    return isinstance(s, ast.Pass) or (in_function and isinstance(s, (ast.Break, ast.Continue)))


def _ranged(s: ast.For) -> bool:
    """A line step's loop over a `range` (windows, rows, positions): its changed programs run
    as many times as the lesson's sizes say, which the budget bounds."""
    return isinstance(s.iter, ast.Call) and isinstance(s.iter.func, ast.Name) \
        and s.iter.func.id == "range" and not s.iter.keywords


def _target_ok(t: ast.expr) -> bool:
    if isinstance(t, ast.Name):
        return _name_ok(t.id)
    if isinstance(t, ast.Tuple):
        return all(isinstance(e, ast.Name) and _name_ok(e.id) for e in t.elts)
    if isinstance(t, ast.Subscript):
        return isinstance(t.value, ast.Name) and _name_ok(t.value.id) and _expr_ok(t.slice, set())
    return False


def _name_ok(name: str) -> bool:
    return name == "_" or not name.startswith("_")  # `_`: a value thrown away


def _expr_ok(e: ast.AST, bound: set[str]) -> bool:
    for node in ast.walk(e):
        if isinstance(node, (ast.expr_context, ast.operator, ast.unaryop, ast.cmpop,
                             ast.boolop, ast.keyword, ast.Slice)):
            if isinstance(node, ast.keyword) and node.arg is None:
                return False  # **kwargs
            continue
        if isinstance(node, ast.Name):
            if not _name_ok(node.id):
                return False
        elif isinstance(node, ast.Constant):
            v = node.value
            if (isinstance(v, str) and len(v) > 40) or not isinstance(
                    v, (str, int, float, bool, type(None))) or (
                    isinstance(v, (int, float)) and abs(v) > 1e12):
                return False
        elif isinstance(node, ast.Attribute):
            if node.attr not in _ATTRIBUTES and node.attr not in _MODULES:
                return False
        elif isinstance(node, ast.BinOp):
            if any(isinstance(x, (ast.List, ast.Tuple)) or (
                    isinstance(x, ast.Constant) and isinstance(x.value, str))
                    for x in (node.left, node.right)):
                return False  # [a] * k, "s" * k: sizes out of nothing
            if isinstance(node.op, (ast.Pow, ast.LShift)) and not _exponent_ok(node):
                return False
        elif isinstance(node, ast.Call):
            if not _call_ok(node, bound):
                return False
        elif isinstance(node, ast.Subscript | ast.UnaryOp | ast.Compare | ast.BoolOp
                        | ast.IfExp | ast.Tuple | ast.List):
            continue
        elif isinstance(node, ast.Lambda):
            # A one-line helper (`up = lambda t: ...`): its body is walked as any expression.
            a = node.args
            if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.posonlyargs:
                return False
        elif isinstance(node, ast.arguments | ast.arg):
            continue
        else:
            return False
    return True


def _exponent_ok(node: ast.BinOp) -> bool:
    """A power with a small written exponent, or a name for one over a base with no power in
    it: nothing that grows without bound (`n ** n ** n`)."""
    if isinstance(node.op, ast.LShift):
        return False
    e = node.right
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, (ast.USub, ast.UAdd)):
        e = e.operand
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) \
            and not isinstance(e.value, bool):
        return abs(e.value) <= 16
    if isinstance(e, ast.Name):
        return not any(isinstance(s, ast.BinOp) and isinstance(s.op, ast.Pow)
                       for s in ast.walk(node.left))
    return False


def _call_ok(node: ast.Call, bound: set[str]) -> bool:
    f = node.func
    if isinstance(f, ast.Name):
        name = f.id
        if name not in _BUILTINS and name not in getattr(bound, "helpers", ()):
            return False
    elif isinstance(f, ast.Attribute):
        name = f.attr
    else:
        return False
    if name in _SIZED:
        sizes = list(node.args) + [k.value for k in node.keywords
                                   if k.arg in ("num_classes", "size")]
        called_on_module = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
            and f.value.id in _MODULES
        if name in _TENSOR_FIRST and (called_on_module or name == "one_hot"):
            sizes = sizes[1:]
        if name == "pad":
            sizes = sizes[:1] if called_on_module else sizes  # the widths, not the value
        if not all(_size_ok(a, bound) for a in sizes):
            return False
        if name in _COPIES and any(isinstance(a, ast.Constant) and isinstance(a.value, int)
                                   and a.value > 16 for a in sizes):
            return False  # a few copies, not a thousand of each dim (their product grows)
    return not any(isinstance(a, ast.Starred) for a in node.args)


def _size_ok(a: ast.expr, bound: set[str]) -> bool:
    """A size read off a tensor, a lesson size the code does not bind, or a small literal."""
    if isinstance(a, ast.UnaryOp) and isinstance(a.op, (ast.USub, ast.UAdd)):
        a = a.operand  # a step of -1
    if isinstance(a, ast.Constant):
        return isinstance(a.value, (int, float)) and abs(a.value) <= _BIG
    if isinstance(a, (ast.Tuple, ast.List)):
        return len(a.elts) <= 8 and all(_size_ok(x, bound) for x in a.elts)
    if isinstance(a, ast.Name):
        return a.id not in bound or a.id in ("dtype",)
    if isinstance(a, ast.keyword):
        return True
    reads_shape = any(isinstance(s, ast.Attribute) and s.attr in ("shape", "size", "numel")
                      for s in ast.walk(a))
    sized = all(not isinstance(s, ast.Name) or s.id not in bound for s in ast.walk(a)) and any(
        isinstance(s, ast.Name) for s in ast.walk(a))
    # Sizes may be told apart or halved, or taken a few times (`4 * H`): nothing that grows
    # without bound, as a product of two sizes could.
    small = all(not isinstance(s, ast.BinOp) or isinstance(s.op, (ast.Sub, ast.FloorDiv))
                or (isinstance(s.op, ast.Mult) and any(
                    isinstance(x, ast.Constant) and isinstance(x.value, int)
                    and 0 < x.value <= 16 for x in (s.left, s.right)))
                for s in ast.walk(a)) or _two_sizes(a, bound)
    return (reads_shape or sized) and small


def _two_sizes(a: ast.expr, bound: set[str]) -> bool:
    """A product of two of the lesson's sizes (`block_size * n_embd`, the entries of one map):
    as large as a tensor the lesson already holds, never more."""
    return isinstance(a, ast.BinOp) and isinstance(a.op, ast.Mult) and all(
        isinstance(x, ast.Name) and x.id not in bound for x in (a.left, a.right))


# --- the edits ----------------------------------------------------------------------------------


def _where(node: ast.AST, code: str) -> str:
    line = getattr(node, "lineno", None)
    return f"line {line}" if line else "your code"


def _text(node: ast.AST, code: str, limit: int = 70) -> str:
    text = ast.get_source_segment(code, node) or ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def edited(tree: ast.Module, index: int, make: Callable[[ast.AST], ast.AST]) -> str:
    """The source of `tree` with the node at walk position `index` replaced by make(node).
    The replacement is put in, the source read, and the node put back: copying a whole
    function for each of a hundred changes costs far more than the changes. `make` builds new
    nodes (it may share the old one's children) and changes none in place."""
    nodes = list(ast.walk(tree))
    old = nodes[index]
    replacement = make(old)
    for parent in nodes:
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, replacement)
                try:
                    return ast.unparse(tree)
                finally:
                    setattr(parent, field, old)
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = replacement
                        try:
                            return ast.unparse(tree)
                        finally:
                            value[k] = old
    return ast.unparse(tree)


def edited_all(tree: ast.Module, makes: dict[int, Callable[[ast.AST], ast.AST]]) -> str:
    """`edited` at several walk positions at once (the same slip made twice)."""
    copied = copy.deepcopy(tree)
    nodes = list(ast.walk(copied))
    swaps = {id(nodes[i]): make(nodes[i]) for i, make in makes.items()}
    for parent in nodes:
        for field, value in ast.iter_fields(parent):
            if id(value) in swaps:
                setattr(parent, field, swaps[id(value)])
            elif isinstance(value, list):
                value[:] = [swaps.get(id(item), item) for item in value]
    return ast.unparse(copied)


def _writes(tree: ast.Module) -> set[int]:
    """Nodes an assignment writes to: never changed, so an edit writes no other tensor."""
    fixed: set[int] = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AugAssign) else [])
        for t in targets:
            fixed |= {id(s) for s in ast.walk(t)}
        if isinstance(node, ast.FunctionDef):
            fixed.add(id(node.args))
            fixed |= {id(s) for s in ast.walk(node.args)}
    return fixed


def function_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not isinstance(node, ast.Attribute) or node.attr not in _SWAPS:
            continue
        for other in _SWAPS[node.attr]:
            source = edited(tree, i, lambda n, o=other: ast.Attribute(n.value, o, n.ctx))
            yield Edit("function", source,
                       f"{_where(node, code)} of your code calls `{node.attr}` "
                       f"(`{_text(node, code)}`): that is the wrong function there, and with "
                       "the right one the rest of your code gives the right answer. Which "
                       "function's derivative is this?")


def _dim_slot(call: ast.Call) -> tuple[str, int | None] | None:
    """Where the call's dimension is: ("kw", None) for `dim=`, ("arg", k) positional."""
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in _DIMMED:
        return None
    if any(k.arg == "dim" for k in call.keywords):
        return ("kw", None)
    module = isinstance(f.value, ast.Name) and f.value.id in _MODULES
    k = _DIMMED[f.attr] + (1 if module and f.attr not in ("cat", "stack") else 0)
    if f.attr in ("cat", "stack"):
        k = 1
    return ("arg", k) if len(call.args) > k else None


def _dim_value(call: ast.Call, slot: tuple[str, int | None]) -> object:
    node = next(k.value for k in call.keywords if k.arg == "dim") if slot[0] == "kw" \
        else call.args[slot[1]]  # type: ignore[index]
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def _with_dim(call: ast.Call, slot: tuple[str, int | None], dim: object) -> ast.Call:
    new = copy.copy(call)
    value = ast.parse(repr(dim), mode="eval").body
    if slot[0] == "kw":
        new.keywords = [ast.keyword("dim", value) if k.arg == "dim" else k
                        for k in call.keywords]
    else:
        new.args = list(call.args)
        new.args[slot[1]] = value  # type: ignore[index]
    return new


def _with_keepdim(call: ast.Call, keep: bool) -> ast.Call:
    new = copy.copy(call)
    new.keywords = [k for k in call.keywords if k.arg != "keepdim"]
    new.keywords.append(ast.keyword("keepdim", ast.Constant(keep)))
    return new


def _describe_dim(dim: object) -> str:
    return f"dims {dim}" if isinstance(dim, tuple) else f"dim {dim}"


def axis_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not isinstance(node, ast.Call):
            continue
        slot = _dim_slot(node)
        if slot is None:
            continue
        dim = _dim_value(node, slot)
        if dim is None:
            continue
        name = node.func.attr  # type: ignore[attr-defined]
        for other in _DIM_CHOICES:
            if other == dim:
                continue
            source = edited(tree, i, lambda n, o=other, s=slot: _with_dim(n, s, o))
            yield Edit("axis", source,
                       f"{_where(node, code)} of your code: `{_text(node, code)}` runs over "
                       f"{_describe_dim(dim)}, the wrong axis: over {_describe_dim(other)} "
                       "the rest of your code gives the right answer. Check which dimension "
                       "the forward pass reduced or broadcast along.")
        if name in ("sum", "mean", "amax", "max", "min", "amin", "var", "std"):
            keep = next((k.value.value for k in node.keywords if k.arg == "keepdim"
                         and isinstance(k.value, ast.Constant)), False)
            source = edited(tree, i, lambda n, k=keep: _with_keepdim(n, not k))
            yield Edit("axis", source,
                       f"{_where(node, code)} of your code: `{_text(node, code)}` "
                       + ("keeps the summed dimension, which must go"
                          if keep else "drops the summed dimension, which must stay (size 1)")
                       + ": the gradient then broadcasts the wrong way.")


def source_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """A local made from one tensor by one call (`ai = torch.logit(i)`), read where that tensor
    itself belongs: every read of it replaced by the tensor it was made from."""
    stores: dict[str, list[ast.Assign]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            stores.setdefault(node.targets[0].id, []).append(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.For)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        stores.setdefault(n.id, []).append(node)  # type: ignore[arg-type]
    fixed = _writes(tree)
    for name, nodes in stores.items():
        node = nodes[0]
        if len(nodes) != 1 or not isinstance(node, ast.Assign) \
                or not isinstance(node.value, ast.Call):
            continue
        call = node.value
        func = call.func
        inner = None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
                and func.value.id in _MODULES and len(call.args) == 1:
            inner = call.args[0]  # torch.logit(i)
        elif isinstance(func, ast.Attribute) and not call.args and not call.keywords:
            inner = func.value  # i.logit()
        if not isinstance(inner, (ast.Name, ast.Subscript)):
            continue
        reads = [i for i, n in enumerate(ast.walk(tree)) if isinstance(n, ast.Name)
                 and n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in fixed]
        if not reads:
            continue
        new = copy.deepcopy(tree)
        nodes_new = list(ast.walk(new))
        for i in reads:
            old = nodes_new[i]
            for parent in nodes_new:
                for field, value in ast.iter_fields(parent):
                    if value is old:
                        setattr(parent, field, copy.deepcopy(inner))
                    elif isinstance(value, list):
                        for k, item in enumerate(value):
                            if item is old:
                                value[k] = copy.deepcopy(inner)
        yield Edit("source", ast.unparse(new),
                   f"{_where(node, code)} of your code makes `{name}` from `{ast.unparse(inner)}` "
                   f"(`{_statement_text(tree, node, code)}`), and your code reads `{name}` where "
                   f"`{ast.unparse(inner)}` itself belongs: with `{ast.unparse(inner)}` there, "
                   "the rest of your code gives the right answer.")


_RESHAPES = {"reshape", "view"}
_AXIS_PAIRS = [(0, 1), (1, 2), (0, 2), (-2, -1)]


def _moved_first(n: ast.Call, a: int, b: int) -> ast.Call:
    """`x.reshape(...)` (or a view) with dims `a` and `b` of `x` swapped first."""
    inner = ast.Call(ast.Attribute(n.func.value, "transpose", ast.Load()),  # type: ignore[attr-defined]
                     [ast.Constant(a), ast.Constant(b)], [])
    return ast.Call(ast.Attribute(inner, "reshape", ast.Load()), n.args, n.keywords)


def layout_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """A reshape where the dimensions had to move first: `x.reshape(n, 2, h)` of a `[2, n, h]`
    tensor keeps its entries' order in memory and mixes its rows; with two dims swapped before
    it (a transpose), the reshape reads the axes the forward pass laid out."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if (id(node) in fixed or not isinstance(node, ast.Call)
                or not isinstance(node.func, ast.Attribute) or node.func.attr not in _RESHAPES):
            continue
        for a, b in _AXIS_PAIRS:
            yield Edit("layout", edited(tree, i, lambda n, a=a, b=b: _moved_first(n, a, b)),
                       f"{_where(node, code)} of your code: `{_text(node, code)}` "
                       f"{node.func.attr}s the tensor as its entries lie in memory, which moves "
                       f"no dimension: with dims {a} and {b} swapped first (a transpose or a "
                       "permute), the rest of your code gives the right answer. A reshape keeps "
                       "the entries' order; it never turns one axis into another.")


def layout_pair_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """The same slip twice: two reshapes (a transposed operand, and the result put back) that
    each needed the same two dims swapped first. Only where the code has few reshapes: each
    pair is one program per pair of axes."""
    fixed = _writes(tree)
    at = [i for i, node in enumerate(ast.walk(tree)) if id(node) not in fixed
          and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr in _RESHAPES]
    if not 2 <= len(at) <= 4:
        return
    nodes = list(ast.walk(tree))
    for i, j in itertools.combinations(at, 2):
        for a, b in _AXIS_PAIRS:
            def moved(n, a=a, b=b):
                return _moved_first(n, a, b)

            one, two = sorted((nodes[i], nodes[j]), key=lambda n: (n.lineno, n.col_offset))
            yield Edit("layout", edited_all(tree, {i: moved, j: moved}),
                       f"{_where(one, code)} and {_where(two, code)} of your code: "
                       f"`{_text(one, code, 50)}` and `{_text(two, code, 50)}` reshape tensors "
                       "as their entries lie in memory, which moves no dimension: with dims "
                       f"{a} and {b} swapped first in both (transposes), the rest of your code "
                       "gives the right answer. A reshape keeps the entries' order; it never "
                       "turns one axis into another.")


def _window(node: ast.AST, loops: set[str]) -> tuple[str, int] | None:
    """`i:i + k` with `i` a loop's variable and k ≥ 2: a window of k that starts at `i`."""
    if not (isinstance(node, ast.Slice) and node.step is None
            and isinstance(node.lower, ast.Name) and node.lower.id in loops
            and isinstance(node.upper, ast.BinOp) and isinstance(node.upper.op, ast.Add)
            and isinstance(node.upper.left, ast.Name) and node.upper.left.id == node.lower.id
            and isinstance(node.upper.right, ast.Constant)
            and isinstance(node.upper.right.value, int) and 2 <= node.upper.right.value <= 8):
        return None
    return node.lower.id, node.upper.right.value


def stride_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """Windows of k walked one entry apart (`x[i:i + k]` for each `i` of a loop) where they
    lie k apart and do not overlap (a pool's windows): every such window made to start at
    `k * i`, reads and writes alike (the same slip on every axis the loop walks)."""
    loops = {n.target.id for n in ast.walk(tree)
             if isinstance(n, ast.For) and isinstance(n.target, ast.Name)}
    found = {i: w for i, node in enumerate(ast.walk(tree)) if (w := _window(node, loops))}
    if not found or len(found) > 8:
        return

    def spaced(n: ast.Slice) -> ast.Slice:
        k = n.upper.right.value
        start = ast.BinOp(ast.Constant(k), ast.Mult(), ast.Name(n.lower.id, ast.Load()))
        return ast.Slice(start, ast.BinOp(start, ast.Add(), ast.Constant(k)), None)

    first = min((node for node in ast.walk(tree) if isinstance(node, ast.Slice)
                 and _window(node, loops)), key=lambda n: (n.lineno, n.col_offset))
    var, k = _window(first, loops)
    yield Edit("stride", edited_all(tree, {i: spaced for i in found}),
               f"{_where(first, code)} of your code: `{_text(first, code, 30)}` starts a "
               f"window of {k} at every entry, so the windows overlap and only the first few "
               f"are reached. Windows that do not overlap (a pool's, with its stride of {k}) "
               f"start {k} entries apart, at `{k} * {var}`: so placed, the rest of your code "
               "gives the right answer.")


_GROUPED = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@"}
_ASSOCIATIVE = (ast.Add, ast.Mult)
_PRECEDENCE = {ast.Add: 1, ast.Sub: 1, ast.Mult: 2, ast.Div: 2, ast.MatMult: 2}


def _closed(node: ast.expr, code: str) -> bool:
    """Whether the learner wrote `node` inside parentheses of its own: a `)` right after it."""
    lines = code.splitlines()
    end, col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
    if end is None or col is None or not 0 < end <= len(lines):
        return False
    return lines[end - 1][col:].lstrip().startswith(")")


def grouping_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """Parentheses: two operators whose operands Python groups otherwise than the formula.
    `dh * 1 - h**2` is `(dh * 1) - h**2` and `x / n * m` is `(x / n) * m`; a comparison binds
    after all arithmetic, so `d * m != 0` compares the product. Each pair regrouped."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _GROUPED:
            for side in ("left", "right"):
                inner = getattr(node, side)
                if not (isinstance(inner, ast.BinOp) and type(inner.op) in _GROUPED) or (
                        type(inner.op) is type(node.op) and isinstance(node.op, _ASSOCIATIVE)):
                    continue
                # Only a grouping Python chose (no parentheses needed to write it): one the
                # learner spelled out with parentheses is what they meant.
                tighter = _PRECEDENCE[type(inner.op)] - _PRECEDENCE[type(node.op)]
                if (side == "left" and tighter < 0) or (side == "right" and tighter <= 0):
                    continue

                def regrouped(n, side=side):
                    inner = getattr(n, side)
                    if side == "left":  # (a o1 b) o2 c -> a o1 (b o2 c)
                        return ast.BinOp(inner.left, inner.op,
                                         ast.BinOp(inner.right, n.op, n.right))
                    return ast.BinOp(ast.BinOp(n.left, n.op, inner.left), inner.op, inner.right)

                yield Edit("grouping", edited(tree, i, regrouped),
                           f"{_where(node, code)} of your code: Python reads "
                           f"`{_text(node, code)}` as `{_grouped(node, side, code)}` (it "
                           "multiplies and divides before it adds and subtracts, left to right "
                           "among equals). Grouped the other way, the rest of your code gives "
                           "the right answer: check the parentheses.")
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 \
                and isinstance(node.left, ast.BinOp) and type(node.left.op) in _GROUPED \
                and not _closed(node.left, code):
            def compared_inside(n):
                b = n.left
                return ast.BinOp(b.left, b.op, ast.Compare(b.right, n.ops, n.comparators))

            yield Edit("grouping", edited(tree, i, compared_inside),
                       f"{_where(node, code)} of your code: `{_text(node, code)}` compares "
                       f"the whole `{_text(node.left, code, 40)}`, because a comparison binds "
                       "after every arithmetic operator; comparing only its last operand, the "
                       "rest of your code gives the right answer: check the parentheses.")


def division_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """`//` where `/` belongs: a floor division rounds every quotient down to a whole number
    (`1 // 2` is 0, a gradient's `-0.3 // n` is -1)."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not (isinstance(node, ast.BinOp)
                                     and isinstance(node.op, ast.FloorDiv)):
            continue
        yield Edit("grouping", edited(tree, i, lambda n: ast.BinOp(n.left, ast.Div(), n.right)),
                   f"{_where(node, code)} of your code: `{_text(node, code)}` is a floor "
                   "division, which rounds each quotient down to a whole number; divided "
                   "exactly, the rest of your code gives the right answer.")


def _grouped(node: ast.BinOp, side: str, code: str) -> str:
    def part(x: ast.AST) -> str:
        text = _text(x, code, 30)
        return f"({text})" if isinstance(x, (ast.BinOp, ast.Compare, ast.BoolOp)) else text

    inner = getattr(node, side)
    o1, o2 = _GROUPED[type(inner.op)], _GROUPED[type(node.op)]
    grouped = f"({part(inner.left)} {o1} {part(inner.right)})"
    if side == "left":
        return f"{grouped} {o2} {part(node.right)}"
    return f"{part(node.left)} {o2} {grouped}"


def tiling_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """Tiled for spread, or spread for tiled: `t.repeat(1, 1, 2, 2)` lays whole copies of `t`
    side by side, `repeat_interleave` repeats each entry next to itself (a pool's window)."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not isinstance(node, ast.Call) or node.keywords \
                or not isinstance(node.func, ast.Attribute) or not node.args:
            continue
        if node.func.attr == "repeat":
            def spread(n):
                out, k = n.func.value, len(n.args)
                for d, a in enumerate(n.args):
                    if not (isinstance(a, ast.Constant) and a.value == 1):
                        out = ast.Call(ast.Attribute(out, "repeat_interleave", ast.Load()), [a],
                                       [ast.keyword("dim", ast.Constant(d - k))])
                return out

            yield Edit("tiling", edited(tree, i, spread),
                       f"{_where(node, code)} of your code: `{_text(node, code)}` lays whole "
                       "copies of the tensor side by side (it tiles it), so an entry's copies "
                       "land far from it. With each entry repeated next to itself instead, "
                       "the rest of your code gives the right answer.")
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not (isinstance(node, ast.Call)
                                     and isinstance(node.func, ast.Attribute)
                                     and node.func.attr == "repeat_interleave"):
            continue
        times = node.args[0] if node.args else None
        dim = next((k.value for k in node.keywords if k.arg == "dim"),
                   node.args[1] if len(node.args) > 1 else None)
        if not (isinstance(times, ast.Constant) and isinstance(times.value, int)
                and 2 <= times.value <= 8 and dim is not None):
            continue

        def tiled(n, r=times.value, d=dim):
            return ast.Call(ast.Attribute(ast.Name("torch", ast.Load()), "cat", ast.Load()),
                            [ast.List([n.func.value] * r, ast.Load())], [ast.keyword("dim", d)])

        yield Edit("tiling", edited(tree, i, tiled),
                   f"{_where(node, code)} of your code: `{_text(node, code)}` repeats each "
                   "entry next to itself; with whole copies of the tensor side by side (a "
                   "tile) instead, the rest of your code gives the right answer.")


_PRODUCTS = {"matmul", "mm", "bmm"}


def _operands(node: ast.AST) -> tuple[ast.expr, ast.expr] | None:
    """A matrix product's two operands: `a @ b`, `a.mm(b)`, `torch.matmul(a, b)`."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return node.left, node.right
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in _PRODUCTS and not node.keywords:
        on_module = isinstance(node.func.value, ast.Name) and node.func.value.id in _MODULES
        args = node.args if on_module else [node.func.value, *node.args]
        if len(args) == 2:
            return args[0], args[1]
    return None


def _product(a: ast.expr, b: ast.expr) -> ast.AST:
    """The product of `a` and `b`, written as `@` whichever way the learner wrote it."""
    return ast.BinOp(a, ast.MatMult(), b)


def _transposed(x: ast.expr) -> tuple[ast.expr, bool]:
    """`x` with its last two dims swapped: a transpose taken off where there is one (True)."""
    if isinstance(x, ast.Attribute) and x.attr in ("T", "mT"):
        return x.value, True
    if isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) \
            and x.func.attr in ("transpose", "t") and not x.keywords:
        return x.func.value, True
    return ast.Call(ast.Attribute(x, "transpose", ast.Load()),
                    [ast.Constant(-2), ast.Constant(-1)], []), False


def product_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """A matrix product's slips: an operand that needed its last two dims swapped (or had them
    swapped once too often), and the two operands in the other order."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        pair = None if id(node) in fixed else _operands(node)
        if pair is None:
            continue
        a, b = pair
        for k, x in enumerate(pair):
            other, undone = _transposed(x)

            def toggled(n, k=k, other=other):
                left, right = _operands(n)  # type: ignore[misc]
                return _product(other, right) if k == 0 else _product(left, other)

            said = (f"the transpose of `{_text(other, code, 30)}` is one too many"
                    if undone else f"`{_text(x, code, 30)}` is taken as it is, where its last "
                    "two dims had to be swapped (a transpose)")
            yield Edit("product", edited(tree, i, toggled),
                       f"{_where(node, code)} of your code: in the product `{_text(node, code)}`"
                       f", {said}: with that, the rest of your code gives the right answer. "
                       "Which axis does the product sum over, and which one does each operand "
                       "keep?")
        yield Edit("product", edited(tree, i, lambda n: _product(*_operands(n)[::-1])),
                   f"{_where(node, code)} of your code: `{_text(node, code)}` multiplies its "
                   "operands in the wrong order (a matrix product does not commute): the other "
                   "way round, the rest of your code gives the right answer.")


def accumulate_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """`=` where `+=` belongs, or the other way: a gradient gathered from several uses written
    over by its later part, or added onto a value it should have replaced."""
    nodes = list(ast.walk(tree))
    assigned: dict[str, int] = {}
    for node in sorted((n for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign))),
                       key=lambda n: n.lineno):
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target
        if not isinstance(target, ast.Name) or (isinstance(node, ast.Assign)
                                                and len(node.targets) != 1):
            continue
        name, i = target.id, nodes.index(node)
        reads = any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node.value))
        if isinstance(node, ast.Assign) and name in assigned and not reads:
            yield Edit("accumulate", edited(tree, i, lambda n: ast.copy_location(
                           ast.AugAssign(n.targets[0], ast.Add(), n.value), n)),
                       f"{_where(node, code)} of your code: `{_statement_text(tree, node, code)}` "
                       f"replaces what {_where(nodes[assigned[name]], code)} put in `{name}`: "
                       "adding to it instead, the rest of your code gives the right answer. A "
                       "tensor read in several places gathers a gradient from each.")
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) \
                and name not in assigned:
            yield Edit("accumulate", edited(tree, i, lambda n: ast.copy_location(
                           ast.Assign([n.target], n.value), n)),
                       f"{_where(node, code)} of your code: `{_statement_text(tree, node, code)}` "
                       f"adds onto what `{name}` held before your code ran: with this line "
                       "setting it instead, the rest of your code gives the right answer.")
        assigned.setdefault(name, i)


_IN_PLACE_STATEMENTS = (ast.AugAssign, ast.Assign, ast.Expr)


def alias_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """A second name for a tensor taken for a copy: `g = att`, then `g *= datt` changes `att`
    too, and every later read of `att` sees the changed numbers. The copy made where the second
    name is bound."""
    nodes = list(ast.walk(tree))
    for node in nodes:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, (ast.Name, ast.Attribute, ast.Subscript))):
            continue
        name = node.targets[0].id
        changed = next((s for s in nodes if isinstance(s, _IN_PLACE_STATEMENTS)
                        and getattr(s, "lineno", 0) > node.lineno and _changes(s, name)), None)
        if changed is None:
            continue
        value = nodes.index(node.value)
        yield Edit("alias", edited(tree, value, lambda n: ast.Call(
                       ast.Attribute(n, "clone", ast.Load()), [], [])),
                   f"{_where(node, code)} of your code: `{_text(node, code)}` gives "
                   f"`{_text(node.value, code, 30)}` a second name, not a copy, so the "
                   f"in-place `{_statement_text(tree, changed, code)}` ({_where(changed, code)}) "
                   f"changes `{_text(node.value, code, 30)}` as well, and every later read of it "
                   "sees "
                   "the changed numbers. With a copy there, the rest of your code gives the "
                   "right answer.")


def _changes(s: ast.stmt, name: str) -> bool:
    """Whether statement `s` changes the tensor `name` holds, in place."""
    def is_name(t: ast.AST) -> bool:
        return isinstance(t, ast.Name) and t.id == name

    if isinstance(s, ast.AugAssign):
        return is_name(s.target) or (isinstance(s.target, ast.Subscript)
                                     and is_name(s.target.value))
    if isinstance(s, ast.Assign):
        return any(isinstance(t, ast.Subscript) and is_name(t.value) for t in s.targets)
    call = s.value
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
        and is_name(call.func.value) and call.func.attr.endswith("_") \
        and not call.func.attr.startswith("_")


_FLIPPED = {ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Lt: ast.LtE, ast.LtE: ast.Lt}


def comparison_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """A comparison off at its bound: `>` for `>=`, `<` for `<=`, or the other way round."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if (id(node) in fixed or not isinstance(node, ast.Compare) or len(node.ops) != 1
                or type(node.ops[0]) not in _FLIPPED):
            continue

        def flipped(n):
            new = copy.copy(n)
            new.ops = [_FLIPPED[type(n.ops[0])]()]
            return new

        now = ast.unparse(flipped(node))
        yield Edit("comparison", edited(tree, i, flipped),
                   f"{_where(node, code)} of your code: `{_text(node, code)}` is off at its "
                   f"bound: with `{now}` the rest of your code gives the right answer. Check "
                   "whether the entries exactly at the bound belong in.")


def operand_edits(tree: ast.Module, code: str, shapes: dict[str, tuple]) -> Iterator[Edit]:
    """One read of a tensor replaced by another name of the same shape, in one statement."""
    fixed = _writes(tree)
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in shapes]
    names = list(dict.fromkeys(names + list(shapes)))
    for i, node in enumerate(ast.walk(tree)):
        if (id(node) in fixed or not isinstance(node, ast.Name)
                or not isinstance(node.ctx, ast.Load) or node.id not in shapes):
            continue
        for other in names:
            if other == node.id or shapes[other] != shapes[node.id]:
                continue
            source = edited(tree, i, lambda _n, o=other: ast.Name(o, ast.Load()))
            yield Edit("operand", source,
                       f"{_where(node, code)} of your code reads `{node.id}` where another "
                       f"tensor of the same shape belongs (in `{_statement_text(tree, node, code)}`"
                       "): the shapes agree, so nothing fails. Check which tensor this part of "
                       "the formula needs, and what it holds by that statement.")


def gradient_read_edits(tree: ast.Module, code: str, shapes: dict[str, tuple]
                        ) -> Iterator[Edit]:
    """A gradient read where its own tensor belongs (`dout = dlogits @ dW.T` for `W.T`): the
    names differ by a letter and the shapes agree, so nothing fails. One read at a time."""
    fixed = _writes(tree)
    # The lesson's tensors, and the code's own (`cols`, an unfolded input, beside `dcols`).
    known = set(shapes) | {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
                           and isinstance(n.ctx, ast.Store)}
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not (isinstance(node, ast.Name)
                                     and isinstance(node.ctx, ast.Load)):
            continue
        tensor = tensor_of(node.id)
        if tensor not in known:
            continue
        source = edited(tree, i, lambda _n, t=tensor: ast.Name(t, ast.Load()))
        yield Edit("operand", source,
                   f"{_where(node, code)} of your code reads `{node.id}`, a gradient, where "
                   f"the forward tensor `{tensor}` belongs (in "
                   f"`{_statement_text(tree, node, code)}`): the shapes agree, so nothing "
                   f"fails. The local derivative of a product is the other factor's value, "
                   "not its gradient.")


def _statement_text(tree: ast.Module, node: ast.AST, code: str) -> str:
    line = getattr(node, "lineno", None)
    lines = code.splitlines()
    if line and 0 < line <= len(lines):
        text = lines[line - 1].strip()
        return text if len(text) <= 70 else text[:69] + "…"
    return ast.unparse(node)


def _constant(node: ast.AST, ints: set[str]) -> bool:
    """An expression of numbers, `math.pi`-like names and the lesson's sizes only."""
    for s in ast.walk(node):
        if isinstance(s, ast.Constant):
            if not isinstance(s.value, (int, float)) or isinstance(s.value, bool):
                return False
        elif isinstance(s, ast.Name):
            if s.id not in ints and s.id not in ("math",):
                return False
        elif isinstance(s, ast.Attribute):
            if s.attr not in ("pi", "e", "sqrt") or not (
                    isinstance(s.value, ast.Name) and s.value.id == "math"):
                return False
        elif isinstance(s, ast.Call):
            if not (isinstance(s.func, ast.Attribute) and s.func.attr == "sqrt"
                    and len(s.args) == 1 and not s.keywords):
                return False
        elif not isinstance(s, (ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop,
                                ast.expr_context)):
            return False
    return True


def _constants(tree: ast.Module, ints: set[str]) -> list[tuple[int, ast.AST]]:
    """Maximal constant subexpressions (a lone `1` or `2` included), by pre-order index."""
    fixed = _writes(tree)
    # A call's arguments (a dim, a size, a class count) and an index are no factor of the formula.
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Attribute)
                                               and node.func.attr == "sqrt"):
            for a in [*node.args, *(k.value for k in node.keywords)]:
                if _constant(a, ints):
                    fixed |= {id(s) for s in ast.walk(a)}
        elif isinstance(node, ast.Subscript):
            fixed |= {id(s) for s in ast.walk(node.slice)}
    out: list[tuple[int, ast.AST]] = []
    inside: set[int] = set()
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or id(node) in inside or not isinstance(node, ast.expr):
            continue
        if isinstance(node, ast.Name) and node.id == "math":
            continue
        if _constant(node, ints) and not (isinstance(node, ast.Call) and not node.args):
            out.append((i, node))
            inside |= {id(s) for s in ast.walk(node)}
    return out


def _constant_variants(node: ast.AST) -> Iterator[ast.AST]:
    """The constant with one operation the other way round or one root too many or few."""
    nodes = list(ast.walk(node))
    for k, sub in enumerate(nodes):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.Mult, ast.Div)):
            new = copy.deepcopy(node)
            target = list(ast.walk(new))[k]
            target.op = ast.Div() if isinstance(sub.op, ast.Mult) else ast.Mult()  # type: ignore[attr-defined]
            yield new
        if isinstance(sub, ast.Call) and k == 0:
            yield copy.deepcopy(sub.args[0])  # the root dropped
    yield ast.Call(ast.Attribute(ast.Name("math", ast.Load()), "sqrt", ast.Load()),
                   [copy.deepcopy(node)], [])  # a root missing


def _value(node: ast.AST, sizes: dict[str, int]) -> float | None:
    """The number a constant of the learner's code stands for, worked out here from its syntax
    alone (numbers, the lesson's sizes, `math.pi`, `math.e`, `math.sqrt`, arithmetic in floats,
    which overflow rather than grow without bound); None for anything else. Nothing of the
    learner's code is run for it."""
    try:
        v = _arithmetic(node, sizes)
    except (ArithmeticError, ValueError, TypeError, RecursionError):
        return None
    return v if v is not None and math.isfinite(v) else None


_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.Pow: lambda a, b: math.pow(a, b),
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
}


def _arithmetic(node: ast.AST, sizes: dict[str, int]) -> float | None:
    if isinstance(node, ast.Constant):
        v = node.value
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(node, ast.Name):
        v = sizes.get(node.id)
        return float(v) if type(v) is int else None
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id == "math" and node.attr in ("pi", "e"):
        return math.pi if node.attr == "pi" else math.e
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "sqrt" and len(node.args) == 1 and not node.keywords:
        x = _arithmetic(node.args[0], sizes)
        return math.sqrt(x) if x is not None else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        x = _arithmetic(node.operand, sizes)
        return None if x is None else (-x if isinstance(node.op, ast.USub) else x)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _arithmetic(node.left, sizes), _arithmetic(node.right, sizes)
        return None if a is None or b is None else _BINARY[type(node.op)](a, b)
    return None


def number(x: float) -> str:
    if abs(x - round(x)) <= 1e-6 * max(1.0, abs(x)):
        return str(int(round(x)))
    if x and abs(1 / x - round(1 / x)) <= 1e-6 * max(1.0, abs(1 / x)):
        return f"1/{int(round(1 / x))}"
    return f"{x:.4g}"


def _everywhere(tree: ast.Module, text: str, variant: ast.AST) -> str:
    """The source with every constant written as `text` replaced by `variant` (a constant the
    learner wrote the same way in several places, as in a repeated `math.sqrt(...)`)."""
    new = copy.deepcopy(tree)
    for parent in ast.walk(new):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, ast.expr) and ast.unparse(value) == text:
                setattr(parent, field, copy.deepcopy(variant))
            elif isinstance(value, list):
                for k, item in enumerate(value):
                    if isinstance(item, ast.expr) and ast.unparse(item) == text:
                        value[k] = copy.deepcopy(variant)
    return ast.unparse(new)


def constant_edits(tree: ast.Module, code: str, sizes: dict[str, int]) -> Iterator[Edit]:
    found = _constants(tree, set(sizes))
    counts: dict[str, int] = {}
    for _, node in found:
        counts[ast.unparse(node)] = counts.get(ast.unparse(node), 0) + 1
    for i, node in found:
        was = _value(node, sizes)
        if was is None or isinstance(node, ast.Constant):
            continue  # a lone number is fitted by the term search, which says by how much
        text = ast.unparse(node)
        for variant in _constant_variants(node):
            now = _value(variant, sizes)
            if now is None or abs(now - was) <= 1e-9 * max(1.0, abs(was)):
                continue
            source = (_everywhere(tree, text, variant) if counts[text] > 1
                      else edited(tree, i, lambda _n, v=variant: v))
            yield Edit("constant", source,
                       f"{_where(node, code)} of your code: the constant `{_text(node, code)}` "
                       f"is {number(was)} where {number(now)} is needed; everything else in "
                       "your formula is right.")
    # A count made of the lesson's sizes where another size belongs (`n * block_size` for the
    # channels): on a batch of another size it is off by another factor, so only a size of the
    # lesson, not a fitted number, makes it right on both batches.
    for i, node in found:
        if not any(isinstance(s, ast.Name) and s.id in sizes for s in ast.walk(node)):
            continue
        was = _value(node, sizes)
        if was is None:
            continue
        for name, now in sizes.items():
            if now <= 1 or abs(now - was) <= 1e-9 * max(1.0, abs(was)):
                continue
            yield Edit("constant", edited(tree, i, lambda _n, k=name: ast.Name(k, ast.Load())),
                       f"{_where(node, code)} of your code: the count `{_text(node, code)}` is "
                       f"{number(was)} where {number(now)} is needed here, so the term it is "
                       "in is off by a constant factor. Check what this part of the formula "
                       "counts over; everything else in your formula is right.")


def terms(tree: ast.Module) -> list[tuple[int, ast.AST]]:
    """The terms of the program: operands of a sum and what a `+=` or `-=` adds."""
    fixed = _writes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in fixed:
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
            for side in (node.left, node.right):
                out.append(side)
        elif isinstance(node, ast.AugAssign):
            out.append(node.value)
    index = {id(n): i for i, n in enumerate(ast.walk(tree))}
    return [(index[id(n)], n) for n in out if not (
        isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)))]


def scaled(node: ast.AST, c: float) -> ast.AST:
    return ast.BinOp(ast.Constant(c), ast.Mult(), node)


# --- the search ---------------------------------------------------------------------------------

# What running changed programs gives: for each source asked, its value on each batch (or case)
# it ran on, the main one first, None where it failed; an empty list where it did not run.
Runner = Callable[[list[str]], list[list[Tensor | None]]]


@dataclass
class Search:
    """One learner's program, its wrong value and the right ones, and the changed programs'
    values as they come back from the child."""

    code: str
    run: Runner
    value: Tensor  # the learner's value on the main batch
    refs: list[Tensor]  # autograd's, per batch: the main one, then the fresh one if any
    # An updated tensor's value before, per batch: it is compared by how it moved.
    starts: list[Tensor | None]
    results: dict[str, list[Tensor | None]] = default(default_factory=dict)
    asked: int = 0

    def moved(self, t: Tensor, k: int = 0) -> Tensor:
        t = t.detach().to("cpu", torch.float64)
        start = self.starts[k] if k < len(self.starts) else None
        if start is not None and start.shape == t.shape:
            return t - start.detach().to("cpu", torch.float64)
        return t

    def ask(self, sources: list[str]) -> None:
        """Run the sources not run yet, in one child, within MAX_EDITS for the search."""
        new = [x for x in dict.fromkeys(sources) if x not in self.results]
        new = new[: max(0, MAX_EDITS - self.asked)]
        if not new:
            return
        self.asked += len(new)
        got = self.run(new)
        for source, values in zip(new, got, strict=False):
            self.results[source] = list(values)

    def produced(self, source: str, k: int = 0) -> Tensor | None:
        values = self.results.get(source) or []
        out = values[k] if k < len(values) else None
        if not isinstance(out, Tensor) or out.shape != self.refs[k].shape:
            return None
        return out if bool(torch.isfinite(out).all()) else None

    def right(self, source: str) -> bool:
        """Right on every batch: a change that fits the main batch only is no answer."""
        for k, ref in enumerate(self.refs):
            out = self.produced(source, k)
            if out is None or not close(self.moved(out, k), self.moved(ref, k)):
                return False
        return True


def search(code: str, run: Runner, value: Tensor, refs: list[Tensor], sizes: dict[str, int],
           shapes: dict[str, tuple], function: str | None = None,
           starts: list[Tensor | None] | None = None,
           first: tuple[Edit, ...] = (), families: tuple[str, ...] = ()) -> Diagnosis | None:
    """`search_edit`, said as a diagnosis."""
    edit = search_edit(code, run, value, refs, sizes, shapes, function, starts, first, families)
    return diagnosis("derived", edit.message) if edit else None


def search_edit(code: str, run: Runner, value: Tensor, refs: list[Tensor],
                sizes: dict[str, int], shapes: dict[str, tuple], function: str | None = None,
                starts: list[Tensor | None] | None = None,
                first: tuple[Edit, ...] = (), families: tuple[str, ...] = ()) -> Edit | None:
    """The one change to `code` that makes its value right, said without the changed code.

    Only the changed sources are made here (plain work on the syntax tree); `run` runs them
    where learner code runs, in a confined child, on the inputs the learner's code saw, and
    gives back their values per batch: the main batch, and the fresh one that confirms the change
    is no fit to the main batch's numbers. `sizes` are the lesson's sizes by name, `shapes` the
    tensors a changed read may name instead (name -> shape). Two runs at most: every change at
    once, then, for a term off by a factor, the term scaled by the fitted factor."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not searchable(tree, function):
        return None  # a cost limit: such code would take too many changes to search
    s = Search(code, run, value, refs, list(starts or [None] * len(refs)))
    made, after, zeroed = _edits(tree, code, value.shape == refs[0].shape, sizes, shapes,
                                 function)
    if families:  # only these kinds of change (a cheap search where a pattern already spoke)
        made = [e for e in made if e.family in families]
        after, zeroed = [e for e in after if e.family in families], []
        if not made and not after:
            return None
    before = [*first, *made]
    s.ask([e.source for e in before] + [z for _, _, z in zeroed] + [e.source for e in after])
    for edit in before:
        if s.right(edit.source):
            return edit
    for _, node, source in zeroed:
        if s.right(source):
            return Edit("term", source, _term_message(code, node, 0.0, sizes))
    term = _scaled_term(s, tree, sizes, zeroed)
    if term:
        return term
    return next((edit for edit in after if s.right(edit.source)), None)


# (code, whether the shape is right, sizes, shapes, function) -> its changes: every output of
# a check is searched with the same changes, which are made once.
_MADE: dict[tuple, tuple[list[Edit], list[Edit], list[tuple[int, ast.AST, str]]]] = {}


def _edits(tree: ast.Module, code: str, same_shape: bool, sizes: dict[str, int],
           shapes: dict[str, tuple], function: str | None
           ) -> tuple[list[Edit], list[Edit], list[tuple[int, ast.AST, str]]]:
    """The changes to try, in the order of how likely each slip is: a function or an axis has a
    handful of alternatives, a constant a few, a term two runs, an operand one per tensor of
    the same shape. In a function's run of in-place updates an operand read too early or too
    late is the likeliest: tried first there. Then the terms, each without it, and last the
    changes tried only if nothing before fits (`after`)."""
    key = (code, same_shape, tuple(sorted(sizes.items())), tuple(sorted(shapes.items())),
           function)
    if key in _MADE:
        return _MADE[key]
    before: list[Edit] = []
    after: list[Edit] = []
    zeroed: list[tuple[int, ast.AST, str]] = []
    if not same_shape:
        # A wrong shape: only an axis, a function or an operand can change it.
        before += [*axis_edits(tree, code), *function_edits(tree, code)]
    else:
        if function is not None:
            before += [*source_edits(tree, code), *operand_edits(tree, code, shapes)]
        # The slips a rule names wherever they occur first: each is a handful of programs.
        before += [*grouping_edits(tree, code), *division_edits(tree, code),
                   *alias_edits(tree, code),
                   *tiling_edits(tree, code), *accumulate_edits(tree, code),
                   *product_edits(tree, code), *stride_edits(tree, code),
                   *gradient_read_edits(tree, code, shapes)]
        before += [*function_edits(tree, code), *axis_edits(tree, code),
                   *comparison_edits(tree, code), *layout_edits(tree, code),
                   *constant_edits(tree, code, sizes), *layout_pair_edits(tree, code)]
        zeroed = [(i, node, edited(tree, i, lambda n: scaled(n, 0.0)))
                  for i, node in terms(tree)]
        if function is None:
            after += operand_edits(tree, code, shapes)
        else:
            # A line step's extra factor is a rewrite of its solution, or a factor per row
            # (tutor/core/derived.py); a function's loop is searched here.
            after += factor_edits(tree, code)
    if len(_MADE) > 8:
        _MADE.clear()
    _MADE[key] = (before, after, zeroed)
    return _MADE[key]


def factor_edits(tree: ast.Module, code: str) -> Iterator[Edit]:
    """One factor of a product too many: the product with that factor left out."""
    fixed = _writes(tree)
    for i, node in enumerate(ast.walk(tree)):
        if id(node) in fixed or not (isinstance(node, ast.BinOp)
                                     and isinstance(node.op, ast.Mult)):
            continue
        for kept, dropped in ((node.left, node.right), (node.right, node.left)):
            if isinstance(dropped, ast.Constant):
                continue  # a constant off is the term search's
            yield Edit("factor", edited(tree, i, lambda _n, k=kept: k),
                       f"{_where(node, code)} of your code: the factor `{_text(dropped, code)}` "
                       f"in `{_text(node, code)}` is one too many: without it the rest of your "
                       "code gives the right answer. Which line's derivative does it belong "
                       "to?")


def _scaled_term(s: Search, tree: ast.Module, sizes: dict[str, int],
                 zeroed: list[tuple[int, ast.AST, str]]) -> Edit | None:
    """A term off by a constant factor: its factor fitted on the main batch from the program
    without it, then confirmed by running the program with the term scaled by it."""
    value, ref = s.moved(s.value), s.moved(s.refs[0])
    fitted: list[tuple[ast.AST, float, str]] = []
    for i, node, source in zeroed:
        without = s.produced(source)
        if without is None:
            continue
        base = s.moved(without)
        share = (value - base).flatten()
        denom = float(share @ share)
        if denom <= 1e-12 * max(float(ref.flatten() @ ref.flatten()), 1e-30):
            continue  # this term adds nothing here
        c = float((ref - base).flatten() @ share) / denom
        if not math.isfinite(c) or abs(c - 1) < 1e-3 or abs(c) < 1e-6:
            continue  # right as it is, or a term to drop: other diagnoses say that
        if not close(base + c * (value - base), ref):
            continue  # no factor of this term alone makes it right
        fitted.append((node, c, edited(tree, i, lambda n, c=c: scaled(n, c))))
    s.ask([source for _, _, source in fitted])
    for node, c, source in fitted:
        if s.right(source):
            return Edit("term", source, _term_message(s.code, node, c, sizes))
    return None


def _term_message(code: str, node: ast.AST, c: float, sizes: dict[str, int]) -> str:
    where = _where(node, code)
    if c == 0:
        return (f"{where} of your code: the term `{_text(node, code)}` is one too many: without "
                "it the rest of your code gives the right answer. Which paths from this tensor "
                "to the loss are there?")
    head = f"{where} of your code: the term `{_text(node, code)}` is off by a constant factor"
    if isinstance(node, ast.Constant):  # a lone number: the statement says where it is
        head = (f"{where} of your code, `{_statement_text(ast.parse(code), node, code)}`: the "
                "constant it adds or takes away is off by a constant factor")
    # Where the term holds one constant, say what it is and what it needs to be.
    consts = [(k, n) for k, n in _constants(ast.Module([ast.Expr(node)], []), set(sizes))
              if not (isinstance(n, ast.Constant) and n.value in (0,))]
    if len(consts) == 1:
        k, const = consts[0]
        was = _value(const, sizes)
        divisor = _divides(node, const)
        if was:
            needed = was / c if divisor else was * c
            named = [k for k, v in sizes.items() if abs(v - needed) < 1e-9]
            also = f" (that is `{named[0]}`)" if len(named) == 1 else ""
            return (f"{head}: {number(was)} where {number(needed)}{also} is needed. The rest "
                    "of your formula is right.")
    what = (f"{number(1 / c)} times too large" if abs(c) < 1 else
            f"{number(c)} times too small")
    sign = " and of the wrong sign" if c < 0 else ""
    what = (f"{number(abs(1 / c))} times too large" if abs(c) < 1 else
            f"{number(abs(c))} times too small") + sign if c < 0 else what
    return (f"{head}: it is {what}. Check which count that term divides by (a sum where a "
            "mean belongs, or the other way round) and its constants. The rest of your formula "
            "is right.")


def _divides(term: ast.AST, const: ast.AST) -> bool:
    """Whether the constant divides the term (`x / 27`) rather than multiplies it."""
    for node in ast.walk(term):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and any(
                s is const for s in ast.walk(node.right)):
            return True
    return False


# --- what a change may read instead ---------------------------------------------------------


def line_shapes(code: str, before: dict, related: list[str]) -> dict[str, tuple]:
    """For a gradient step: the tensors a changed read may name, those the code or the step's
    lines name (name -> shape)."""
    named = related + [n for n in _names(code) if n in before]
    return {k: tuple(before[k].shape) for k in dict.fromkeys(named)
            if isinstance(before.get(k), Tensor) and before[k].is_floating_point()
            and before[k].dim() > 0}


def line_sizes(before: dict) -> dict[str, int]:
    return {k: v for k, v in before.items() if type(v) is int}


def _names(code: str) -> list[str]:
    try:
        return list(dict.fromkeys(n.id for n in ast.walk(ast.parse(code))
                                  if isinstance(n, ast.Name)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []


def function_shapes(inputs: dict) -> dict[str, tuple]:
    """For a function step: a changed read may name any argument of the same shape."""
    return {k: tuple(v.shape) for k, v in inputs.items()
            if isinstance(v, Tensor) and v.is_floating_point() and v.dim() > 0}
