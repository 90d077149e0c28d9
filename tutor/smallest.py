"""The smallest change to the learner's own code that makes a wrong gradient right.

The catalogue and the rewrites of the reference solution (tutor/derived.py) explain a wrong
answer that someone foresaw. A learner's code is often right but for one slip in a formula of
their own: a constant inside one term, one function or one axis of a fused line, one operand of
a run of in-place updates. This module parses the learner's code, makes one change at a time
and runs each changed program on the same inputs (the caller's `run`); the first change that
makes the answer right is what the message names, with where it is and what kind of change it
is, never the corrected code:

- a term (an operand of a sum, or what a `+=` adds) off by a constant factor: the factor comes
  from a least-squares fit of the term's share of the answer, and is confirmed by running the
  program with the term scaled by it;
- a constant written inside the formula (a literal, `math.pi`, a size such as `n`) with one
  operation of it the other way round (`2 * pi` for `2 / pi`) or a square root too many;
- a function of the same family in place of another (`log_softmax` and `softmax`, `exp` and
  `log`, `sum` and `mean`, `argmax` and `argmin`, `max` and `min`);
- a reduction, softmax or index over another dimension, or with `keepdim` the other way;
- one read of a tensor in place of another tensor of the same shape, in one statement.

The learner's code runs here, in the worker, not in the confined child: only code inside a
small subset is searched (`searchable`): assignments and expressions of tensors, numbers and
calls of listed torch functions and methods, with no loop, definition other than the step's
function, comprehension, lambda, import, string or attribute outside the list, no constructor
given sizes that are not read off a tensor, and no power with an exponent that could grow
without bound. Such a program runs in a time set by the lesson's tensors, and on top of that
it is compiled behind the same policy and guard as every run of learner code. Anything outside
the subset is simply not searched: its wrong answer gets the other diagnoses or none.
"""

from __future__ import annotations

import ast
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from tutor.diagnosis import _close as close
from tutor.diagnosis import diagnosis
from tutor.results import Diagnosis

Tensor = torch.Tensor

BUDGET = 0.05  # seconds one search may take: a verdict stays well within 100 ms of the check
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
_BUILTINS = {"range", "len", "float", "int", "abs", "min", "max", "round"}
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
}
# Constructors that take sizes: allowed only with sizes read off tensors or names the code
# does not bind (the lesson's sizes), or small literals.
_SIZED = {"zeros", "ones", "full", "empty", "new_zeros", "new_ones", "range", "one_hot"}
_BIG = 4096


@dataclass(frozen=True)
class Edit:
    """One change to the learner's program: the changed source and what the change says."""

    family: str
    source: str
    message: str


# --- the subset ---------------------------------------------------------------------------------


def searchable(tree: ast.Module, function: str | None = None) -> bool:
    """Whether the program is inside the subset that may run in the worker (module docstring)."""
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
    return all(_statement_ok(s, bound, function is not None) for s in body)


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
    return isinstance(s, ast.Pass)


def _target_ok(t: ast.expr) -> bool:
    if isinstance(t, ast.Name):
        return _name_ok(t.id)
    if isinstance(t, ast.Tuple):
        return all(isinstance(e, ast.Name) and _name_ok(e.id) for e in t.elts)
    if isinstance(t, ast.Subscript):
        return isinstance(t.value, ast.Name) and _name_ok(t.value.id) and _expr_ok(t.slice, set())
    return False


def _name_ok(name: str) -> bool:
    return not name.startswith("_")


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
        if name not in _BUILTINS:
            return False
    elif isinstance(f, ast.Attribute):
        name = f.attr
    else:
        return False
    if name in _SIZED:
        sizes = list(node.args) + [k.value for k in node.keywords
                                   if k.arg in ("num_classes", "size")]
        if name == "one_hot":
            sizes = sizes[1:]
        if not all(_size_ok(a, bound) for a in sizes):
            return False
    return not any(isinstance(a, ast.Starred) for a in node.args)


def _size_ok(a: ast.expr, bound: set[str]) -> bool:
    """A size read off a tensor, a lesson size the code does not bind, or a small literal."""
    if isinstance(a, ast.Constant):
        return isinstance(a.value, (int, float)) and abs(a.value) <= _BIG
    if isinstance(a, ast.Name):
        return a.id not in bound or a.id in ("dtype",)
    if isinstance(a, ast.keyword):
        return True
    reads_shape = any(isinstance(s, ast.Attribute) and s.attr in ("shape", "size", "numel")
                      for s in ast.walk(a))
    small = all(not isinstance(s, ast.BinOp) or isinstance(s.op, (ast.Sub, ast.FloorDiv))
                for s in ast.walk(a))
    return reads_shape and small


# --- the edits ----------------------------------------------------------------------------------


def _where(node: ast.AST, code: str) -> str:
    line = getattr(node, "lineno", None)
    return f"line {line}" if line else "your code"


def _text(node: ast.AST, code: str, limit: int = 70) -> str:
    text = ast.get_source_segment(code, node) or ast.unparse(node)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _edited(tree: ast.Module, index: int, make: Callable[[ast.AST], ast.AST]) -> str:
    new = copy.deepcopy(tree)
    nodes = list(ast.walk(new))
    old = nodes[index]
    replacement = make(old)
    for parent in nodes:
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, replacement)
                return ast.unparse(new)
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = replacement
                        return ast.unparse(new)
    return ast.unparse(new)


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
            source = _edited(tree, i, lambda n, o=other: ast.Attribute(n.value, o, n.ctx))
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
            source = _edited(tree, i, lambda n, o=other, s=slot: _with_dim(n, s, o))
            yield Edit("axis", source,
                       f"{_where(node, code)} of your code: `{_text(node, code)}` runs over "
                       f"{_describe_dim(dim)}, the wrong axis: over {_describe_dim(other)} "
                       "the rest of your code gives the right answer. Check which dimension "
                       "the forward pass reduced or broadcast along.")
        if name in ("sum", "mean", "amax", "max", "min", "amin", "var", "std"):
            keep = next((k.value.value for k in node.keywords if k.arg == "keepdim"
                         and isinstance(k.value, ast.Constant)), False)
            source = _edited(tree, i, lambda n, k=keep: _with_keepdim(n, not k))
            yield Edit("axis", source,
                       f"{_where(node, code)} of your code: `{_text(node, code)}` "
                       + ("keeps the summed dimension, which must go"
                          if keep else "drops the summed dimension, which must stay (size 1)")
                       + ": the gradient then broadcasts the wrong way.")


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
            source = _edited(tree, i, lambda _n, o=other: ast.Name(o, ast.Load()))
            yield Edit("operand", source,
                       f"{_where(node, code)} of your code reads `{node.id}` where another "
                       f"tensor of the same shape belongs (in `{_statement_text(tree, node, code)}`"
                       "): the shapes agree, so nothing fails. Check which tensor this part of "
                       "the formula needs, and what it holds by that statement.")


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
    import math

    try:
        v = eval(compile(ast.Expression(copy.deepcopy(node)), "<constant>", "eval"),  # noqa: S307
                 {"__builtins__": {}, "math": math}, dict(sizes))
    except Exception:  # noqa: BLE001 - a constant that cannot be worked out is not named
        return None
    return float(v) if isinstance(v, (int, float)) else None


def _number(x: float) -> str:
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
                      else _edited(tree, i, lambda _n, v=variant: v))
            yield Edit("constant", source,
                       f"{_where(node, code)} of your code: the constant `{_text(node, code)}` "
                       f"is {_number(was)} where {_number(now)} is needed; everything else in "
                       "your formula is right.")


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


def _scaled(node: ast.AST, c: float) -> ast.AST:
    return ast.BinOp(ast.Constant(c), ast.Mult(), node)


# --- the search ---------------------------------------------------------------------------------


@dataclass
class Search:
    """One learner's program, its wrong value and the right one, and how to run a change."""

    code: str
    run: Callable[[str], Tensor | None]
    value: Tensor
    ref: Tensor
    start: Tensor | None = None  # an updated tensor: compared by how it moved
    deadline: float = 0.0
    runs: int = 0

    def moved(self, t: Tensor) -> Tensor:
        t = t.detach().to("cpu", torch.float64)
        if self.start is not None and self.start.shape == t.shape:
            return t - self.start.detach().to("cpu", torch.float64)
        return t

    def produce(self, source: str, forced: bool = False) -> Tensor | None:
        if not forced and (self.runs >= MAX_EDITS or time.monotonic() > self.deadline):
            raise TimeoutError
        self.runs += 1
        out = self.run(source)
        if not isinstance(out, Tensor) or out.shape != self.ref.shape:
            return None
        return out if bool(torch.isfinite(out).all()) else None

    def right(self, produced: Tensor | None) -> bool:
        return produced is not None and close(self.moved(produced), self.moved(self.ref))


def search(code: str, run: Callable[[str], Tensor | None], value: Tensor, ref: Tensor,
           sizes: dict[str, int], shapes: dict[str, tuple], function: str | None = None,
           start: Tensor | None = None, budget: float | None = None,
           first: tuple[Edit, ...] = ()) -> Diagnosis | None:
    """`search_edit`, said as a diagnosis."""
    edit = search_edit(code, run, value, ref, sizes, shapes, function, start, budget, first)
    return diagnosis("derived", edit.message) if edit else None


def search_edit(code: str, run: Callable[[str], Tensor | None], value: Tensor, ref: Tensor,
                sizes: dict[str, int], shapes: dict[str, tuple], function: str | None = None,
                start: Tensor | None = None, budget: float | None = None,
                first: tuple[Edit, ...] = ()) -> Edit | None:
    """The one change to `code` that makes its value right, said without the changed code.

    `run(source)` runs a changed program on the inputs the learner's code saw and returns its
    value for this gradient (None when it fails); `sizes` are the lesson's sizes by name,
    `shapes` the tensors a changed read may name instead (name -> shape)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not searchable(tree, function):
        return None
    s = Search(code, run, value, ref, start,
               time.monotonic() + (BUDGET if budget is None else budget))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: a second thread only waits for a core
    try:
        # The families in the order of how few programs each takes: a function or an axis has
        # a handful of alternatives, a term two runs, an operand one per same-shaped tensor.
        for edit in first:  # what explained another output of the same code
            if s.right(s.produce(edit.source, forced=True)):
                return edit
        if value.shape != ref.shape:
            # A wrong shape: only an axis, a function or an operand can change it.
            for family in (axis_edits(tree, code), function_edits(tree, code)):
                for edit in family:
                    if s.right(s.produce(edit.source)):
                        return edit
            return None
        # In a function's run of in-place updates an operand read too early or too late is the
        # likeliest slip: tried first there.
        if function is not None:
            for edit in operand_edits(tree, code, shapes):
                if s.right(s.produce(edit.source)):
                    return edit
        for family in (function_edits(tree, code), axis_edits(tree, code),
                       constant_edits(tree, code, sizes)):
            for edit in family:
                if s.right(s.produce(edit.source)):
                    return edit
        term = _scaled_term(s, tree, sizes)
        if term:
            return term
        for edit in operand_edits(tree, code, shapes):
            if s.right(s.produce(edit.source)):
                return edit
    except TimeoutError:
        return None
    finally:
        torch.set_num_threads(threads)
    return None


def _scaled_term(s: Search, tree: ast.Module, sizes: dict[str, int]) -> Edit | None:
    """A term off by a constant factor: fitted, then confirmed by running it scaled."""
    value, ref = s.moved(s.value), s.moved(s.ref)
    for i, node in terms(tree):
        without = s.produce(_edited(tree, i, lambda n: _scaled(n, 0.0)))
        if without is None:
            continue
        base = s.moved(without)
        share = (value - base).flatten()
        denom = float(share @ share)
        if denom <= 1e-12 * max(float(ref.flatten() @ ref.flatten()), 1e-30):
            continue  # this term adds nothing here
        c = float((ref - base).flatten() @ share) / denom
        if not torch.isfinite(torch.tensor(c)) or abs(c - 1) < 1e-3 or abs(c) < 1e-6:
            continue  # right as it is, or a term to drop: other diagnoses say that
        fixed = _edited(tree, i, lambda n, c=c: _scaled(n, c))
        if not s.right(s.produce(fixed)):
            continue
        return Edit("term", fixed, _term_message(s.code, node, c, sizes))
    return None


def _term_message(code: str, node: ast.AST, c: float, sizes: dict[str, int]) -> str:
    where = _where(node, code)
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
            return (f"{head}: {_number(was)} where {_number(needed)}{also} is needed. The rest "
                    "of your formula is right.")
    what = (f"{_number(1 / c)} times too large" if abs(c) < 1 else
            f"{_number(c)} times too small")
    sign = " and of the wrong sign" if c < 0 else ""
    what = (f"{_number(abs(1 / c))} times too large" if abs(c) < 1 else
            f"{_number(abs(c))} times too small") + sign if c < 0 else what
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


# --- running a change ---------------------------------------------------------------------------


def line_runner(before: dict, grad: str) -> Callable[[str], Tensor | None]:
    """Run a changed program of a gradient step on the namespace the learner's code started
    from: behind the policy and the guard, on fresh copies of every tensor it names (their
    aliasing kept), so nothing it does reaches the namespace later checks start from."""
    from tutor.candidate import Output, compile_candidate, copy_namespace, execute

    def run(source: str) -> Tensor | None:
        try:
            named = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
            ns = dict(before)
            ns.update(copy_namespace({k: v for k, v in before.items() if k in named}))
            execute(compile_candidate(source), ns, Output())
        except Exception:  # noqa: BLE001 - a change that cannot run matches nothing
            return None
        out = ns.get(grad)
        return out if isinstance(out, Tensor) and out.is_floating_point() else None

    return run


def line_search(code: str, before: dict, tensor: str, value: Tensor, ref: Tensor,
                related: list[str]) -> Diagnosis | None:
    """The search for a gradient step: sizes are the namespace's integers, and a changed read
    may name any tensor the code or the step's lines name."""
    named = related + [n for n in _names(code) if n in before]
    shapes = {k: tuple(before[k].shape) for k in dict.fromkeys(named)
              if isinstance(before.get(k), Tensor) and before[k].is_floating_point()
              and before[k].dim() > 0}
    sizes = {k: v for k, v in before.items() if type(v) is int}
    return search(code, line_runner(before, f"d{tensor}"), value, ref, sizes, shapes)


def _names(code: str) -> list[str]:
    try:
        return list(dict.fromkeys(n.id for n in ast.walk(ast.parse(code))
                                  if isinstance(n, ast.Name)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []


def function_search(code: str, name: str, value: Tensor, ref: Tensor, inputs: dict,
                    sizes: dict[str, int], call: Callable[[str], dict | None],
                    function: str, start: Tensor | None = None,
                    first: tuple[Edit, ...] = (), budget: float | None = None) -> Edit | None:
    """The search for a function step: `call(source)` defines the changed function and calls it
    on copies of the case's inputs (the engine's way, behind the guard), giving its outputs by
    name; a changed read may name any argument of the same shape. An output updated in place
    (`start` given) is compared by how it moved."""
    shapes = {k: tuple(v.shape) for k, v in inputs.items()
              if isinstance(v, Tensor) and v.is_floating_point() and v.dim() > 0}

    def run(source: str) -> Tensor | None:
        out = (call(source) or {}).get(name)
        return out if isinstance(out, Tensor) else None

    return search_edit(code, run, value, ref, sizes, shapes, function=function, start=start,
                       first=first, budget=budget)
