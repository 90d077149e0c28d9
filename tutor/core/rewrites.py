"""More families of wrong answers derived from a step's solution, for `tutor.core.derived`.

Each maker takes the solution's syntax tree and yields (source, kind, message): the solution
changed in one place the way backward passes and optimiser updates typically go wrong.

- an axis: a reduction over another dimension, a transpose or permute left out or with other
  axes, two same-shaped tensors swapped (q and k), an index tensor swapped for another;
- a constant: a small constant (an eps) left out or ten times off, a constant moved into or out
  of a square root, a count or a step number one off, `(1 - b)**t` for `1 - b**t`;
- an order: two consecutive statements of an update in the other order, one left out, two
  pieces of one unpacking in each other's place (`i, f, o, g = ...`);
- state: a tensor the caller passes in updated in place where it should not be (`v.sqrt_()`).

The messages say what the learner's numbers match, never the right expression.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal

import torch

Tensor = torch.Tensor
Rewrite = tuple[str, str, str]

_REDUCTIONS = {"sum", "mean", "var", "std", "amax", "max", "min", "softmax", "log_softmax",
               "cumsum", "norm"}
_DIM_CHOICES: list[object] = [0, 1, 2, -1, -2, (0, 1), (0, 1, 2), (1, 2)]


def _src(tree: ast.AST) -> str:
    return ast.unparse(tree)


def _nth(tree: ast.Module, index: int) -> ast.AST:
    return list(ast.walk(tree))[index]


def _variants(tree: ast.Module, match, make) -> Iterator[tuple[ast.AST, str]]:
    """For every node `match` accepts, the source with it replaced by each of make(node)."""
    for i, node in enumerate(list(ast.walk(tree))):
        if not match(node):
            continue
        for variant, what in make(node):
            new = copy.deepcopy(tree)
            _swap_in(new, _nth(new, i), variant)
            yield new, what


def _everywhere(tree: ast.Module, match, make) -> Iterator[tuple[ast.AST, str]]:
    """The same change made at every node `match` accepts at once (`t + 1` in both
    corrections), for each kind of change make(node) offers; only where there are several."""
    matched = [n for n in ast.walk(tree) if match(n)]
    if len(matched) < 2:
        return
    first = matched[0]
    for k, (_, what) in enumerate(make(first)):
        new = copy.deepcopy(tree)
        for node in [n for n in ast.walk(new) if match(n)]:
            variant = list(make(node))[k][0]
            _swap_in(new, node, variant)
        yield new, what


def _swap_in(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for k, item in enumerate(value):
                    if item is old:
                        value[k] = new
                        return


def _literal(value: object) -> ast.expr:
    if isinstance(value, tuple):
        return ast.Tuple([_literal(v) for v in value], ast.Load())
    if isinstance(value, (int, float)) and value < 0:
        return ast.UnaryOp(ast.USub(), ast.Constant(-value))
    return ast.Constant(value)


def _const(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return None


def axis_rewrites(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """A reduction over another dimension; a transpose or permute left out or other axes."""

    def is_reduction(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _REDUCTIONS and _dim_slot(node) is not None)

    def other_dims(node: ast.Call):
        slot, current = _dim_slot(node)  # type: ignore[misc]
        kept = any(kw.arg == "keepdim" for kw in node.keywords)
        for dim in _DIM_CHOICES:
            if dim == current:
                continue
            new = copy.deepcopy(node)
            _set_dim(new, slot, dim)
            yield new, f"`.{node.func.attr}` over dim {dim} instead of {current}"
            if not kept:  # the other axis with its dimension kept, so that it broadcasts
                new = copy.deepcopy(new)
                new.keywords.append(ast.keyword("keepdim", ast.Constant(True)))
                yield new, f"`.{node.func.attr}` over dim {dim} instead of {current}"

    def one_slice(node: ast.Call):
        # The sum over a broadcast dimension replaced by one of its slices (`dout[0]`).
        slot, current = _dim_slot(node)  # type: ignore[misc]
        if node.func.attr == "sum" and current == 0:  # type: ignore[attr-defined]
            sub = ast.Subscript(node.func.value, ast.Constant(0), ast.Load())  # type: ignore[attr-defined]
            yield sub, "one slice `[0]` in place of the sum over dim 0"

    for new, what in [*_variants(tree, is_reduction, other_dims),
                      *_variants(tree, is_reduction, one_slice)]:
        yield (_src(new), "derived",
               f"Your {grad} matches the computation with a reduction over another axis: "
               f"{what}. Check which dimension each sum or mean runs along: the one the "
               "forward line reduced (or broadcast) over, and no other.")

    def kept(node: ast.AST) -> bool:
        return is_reduction(node) and any(
            kw.arg == "keepdim" and _const(kw.value) is True
            for kw in node.keywords)  # type: ignore[attr-defined]

    def put_back_elsewhere(node: ast.Call):
        # The reduced axis restored with `.unsqueeze(k)` at another place than keepdim keeps it.
        _, current = _dim_slot(node)  # type: ignore[misc]
        bare = copy.deepcopy(node)
        bare.keywords = [kw for kw in bare.keywords if kw.arg != "keepdim"]
        for k in _DIM_CHOICES:
            if k == current or not isinstance(k, int):
                continue
            yield (ast.Call(ast.Attribute(bare, "unsqueeze", ast.Load()), [ast.Constant(k)],
                            []),
                   f"`.{node.func.attr}` over dim {current} put back with `.unsqueeze({k})`")  # type: ignore[attr-defined]

    for new, what in _variants(tree, kept, put_back_elsewhere):
        yield (_src(new), "derived",
               f"Your {grad} matches the computation with the reduced axis put back in "
               f"another place: {what}, where `keepdim=True` keeps it. The reduced result "
               "then broadcasts along the wrong axis: it must line up with the axis it was "
               "reduced over.")

    def is_permutation(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("transpose", "permute", "swapaxes", "mT", "t"))

    def without(node: ast.Call):
        yield node.func.value, f"without the `.{node.func.attr}(...)`"  # type: ignore[attr-defined]
        if node.func.attr == "transpose" and len(node.args) == 2:  # type: ignore[attr-defined]
            for pair in ((1, 2), (2, 3), (-2, -1), (0, 1), (1, 3)):
                if tuple(_const(a) for a in node.args) == pair:
                    continue
                new = copy.deepcopy(node)
                new.args = [_literal(pair[0]), _literal(pair[1])]
                yield new, f"`.transpose{pair}` in its place"

    def is_mask(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("masked_fill", "tril", "triu"))

    def unmasked(node: ast.Call):
        yield node.func.value, f"without the `.{node.func.attr}(...)`"  # type: ignore[attr-defined]

    for new, what in _variants(tree, is_mask, unmasked):
        yield (_src(new), "derived",
               f"Your {grad} matches the computation {what}: gradient reaches the positions "
               "the mask shut off. Where the forward pass masked, nothing flows back.")
    for new, what in _variants(tree, is_permutation, without):
        yield (_src(new), "derived",
               f"Your {grad} matches the computation {what}: the axes come out in another "
               "order. Follow each axis of the forward line (batch, head, time, channel) "
               "through to the gradient.")


def _dim_slot(node: ast.Call) -> tuple[object, object] | None:
    for k, kw in enumerate(node.keywords):
        if kw.arg == "dim":
            value = _const(kw.value)
            return (("kw", k), value) if value is not None else None
    if node.args:
        value = _const(node.args[0])
        if isinstance(value, (int, tuple)) and not isinstance(value, bool):
            return ("arg", 0), value
    return None


def _set_dim(node: ast.Call, slot, dim) -> None:
    where, k = slot
    if where == "kw":
        node.keywords[k].value = _literal(dim)
    else:
        node.args[k] = _literal(dim)


def swap_rewrites(tree: ast.Module, grad: str, scope: dict) -> Iterator[Rewrite]:
    """Two tensors of the same shape and kind swapped: q for k, an index tensor for another."""
    names = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Load) and isinstance(scope.get(n.id), Tensor)]
    seen = list(dict.fromkeys(names))
    for a in seen:
        for b in seen:
            ta, tb = scope[a], scope[b]
            if a >= b or ta.shape != tb.shape or ta.dtype != tb.dtype:
                continue
            new = copy.deepcopy(tree)
            for node in ast.walk(new):
                if isinstance(node, ast.Name) and node.id in (a, b):
                    node.id = b if node.id == a else a
            yield (_src(new), "derived",
                   f"Your {grad} matches the computation with `{a}` and `{b}` swapped. They "
                   "have the same shape, so nothing fails: check which one each part of the "
                   "formula needs.")
    yield from _sibling_swaps(tree, grad)
    ints = [k for k, v in scope.items() if isinstance(v, Tensor) and not v.is_floating_point()
            and v.dim() > 0]
    for a in seen:
        if a not in ints:
            continue
        if scope[a].dim() == 2:
            new = copy.deepcopy(tree)
            for node in ast.walk(new):
                for field, value in ast.iter_fields(node):
                    if isinstance(value, ast.Name) and value.id == a:
                        transposed = ast.Attribute(_name(a), "T", ast.Load())
                        setattr(node, field, ast.Call(
                            ast.Attribute(transposed, "contiguous", ast.Load()), [], []))
            yield (_src(new), "derived",
                   f"Your {grad} matches the computation with `{a}` transposed: its entries "
                   "are read in another order, so each gradient goes to another row. Follow "
                   "the order in which the forward line laid them out.")
        for b in ints:
            if b == a or scope[b].shape != scope[a].shape:
                continue
            new = copy.deepcopy(tree)
            for node in ast.walk(new):
                if isinstance(node, ast.Name) and node.id == a:
                    node.id = b
            yield (_src(new), "derived",
                   f"Your {grad} matches the computation with the indices `{b}` where `{a}` "
                   "belongs: a wrong index picks other entries. Check which tensor holds the "
                   "positions this line used.")


def _sibling_swaps(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """One use of a name swapped for a sibling unpacked with it (`q, k, v = ...`; `N, V =
    x.shape`): a function's own q and k, or two of its sizes, mixed up."""
    groups = [[e.id for e in node.targets[0].elts if isinstance(e, ast.Name)]
              for node in ast.walk(tree) if isinstance(node, ast.Assign)
              and isinstance(node.targets[0], ast.Tuple)]
    for group in groups:
        members = set(group)

        def is_member(node: ast.AST, members=members) -> bool:
            return (isinstance(node, ast.Name) and node.id in members
                    and isinstance(node.ctx, ast.Load))

        def others(node: ast.Name, group=group):
            for other in group:
                if other != node.id:
                    yield _name(other), (node.id, other)

        for new, (was, now) in _variants(tree, is_member, others):
            yield (_src(new), "derived",
                   f"Your {grad} matches the computation with `{now}` in one place where "
                   f"`{was}` belongs. They come from the same line and look alike: check which "
                   "one each part of the formula needs.")


def constant_rewrites(tree: ast.Module, grad: str, scope: dict) -> Iterator[Rewrite]:
    """A small constant left out or ten times off; a step count one off; `(1 - b)**t`."""

    def is_small(node: ast.AST) -> bool:
        return (isinstance(node, ast.Constant) and isinstance(node.value, float)
                and 0 < abs(node.value) < 1e-2)

    def changed(node: ast.Constant):
        c = node.value
        yield ast.Constant(0.0), f"the constant {c:g} left out"
        for other in (c * 10, c / 10, 1e-8, 1e-5, 1e-6):
            if abs(other - c) > 1e-12 * abs(c):
                yield ast.Constant(other), f"{other:g} for the constant {c:g}"

    def is_precise(node: ast.AST) -> bool:
        return (isinstance(node, ast.Constant) and isinstance(node.value, float)
                and len(f"{abs(node.value):.10g}".replace(".", "").lstrip("0")) > 3)

    def rounded(node: ast.Constant):
        c = node.value
        for digits in (4, 3, 2):
            # As a person rounds the written number: half up, on its decimal digits.
            exact = Decimal(repr(c))
            step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
            near = float(exact.quantize(step, rounding=ROUND_HALF_UP))
            if near != c:
                yield ast.Constant(near), f"{near:g} for the constant {c:g}"

    yield from ((_src(new), "derived",
                 f"Your {grad} matches the formula with {what}: a constant rounded. The "
                 "derivative needs the constant exactly as the forward line has it.")
                for new, what in [*_everywhere(tree, is_precise, rounded),
                                  *_variants(tree, is_precise, rounded)])
    for new, what in _variants(tree, is_small, changed):
        yield (_src(new), "derived",
               f"Your {grad} matches the formula with {what}. A constant of the forward line, "
               "however small, keeps its exact value in the derivative.")
    counts = [k for k, v in scope.items() if type(v) is int and k not in ("n",)]
    for node in ast.walk(tree):  # sizes a function reads off a shape: `B, T, C = inp.shape`
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "shape" and isinstance(node.targets[0], ast.Tuple)):
            counts += [e.id for e in node.targets[0].elts if isinstance(e, ast.Name)]

    def is_count(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in counts and isinstance(node.ctx, ast.Load)

    def shifted(node: ast.Name):
        for op, word in ((ast.Add(), "+ 1"), (ast.Sub(), "- 1")):
            yield ast.BinOp(_name(node.id), op, ast.Constant(1)), f"`{node.id} {word}`"

    for new, what in [*_everywhere(tree, is_count, shifted),
                      *_variants(tree, is_count, shifted)]:
        yield (_src(new), "derived",
               f"Your {grad} matches the formula with {what} where `{_first_count(what)}` "
               "belongs: a count one off. Check where the count starts (at 0 or at 1) and what "
               "it counts.")

    def is_power_in_difference(node: ast.AST) -> bool:
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
                and isinstance(node.right, ast.BinOp) and isinstance(node.right.op, ast.Pow))

    def grouped(node: ast.BinOp):
        power = node.right
        yield (ast.BinOp(ast.BinOp(node.left, ast.Sub(), power.left), ast.Pow(), power.right),
               "the power applied to the whole difference")  # type: ignore[attr-defined]

    for new, what in [*_everywhere(tree, is_power_in_difference, grouped),
                      *_variants(tree, is_power_in_difference, grouped)]:
        yield (_src(new), "derived",
               f"Your {grad} matches the formula with {what}: `(a - b)**t` where only `b` is "
               "raised to the power. Check what the exponent applies to.")


def _first_count(what: str) -> str:
    return what.strip("`").split(" ")[0]


def _name(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def root_rewrites(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """A constant moved into or out of a square root (or a power): `sqrt(v) + eps` and
    `sqrt(v + eps)`."""

    def root_of_sum(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("sqrt", "rsqrt")
                and isinstance(node.func.value, ast.BinOp)
                and isinstance(node.func.value.op, ast.Add))

    def moved_out(node: ast.Call):
        inner = node.func.value  # type: ignore[attr-defined]
        call = ast.Call(ast.Attribute(inner.left, node.func.attr, ast.Load()), [], [])  # type: ignore[attr-defined]
        yield ast.BinOp(call, ast.Add(), inner.right), "outside the square root"

    def sum_with_root(node: ast.AST) -> bool:
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                and isinstance(node.left, ast.Call) and isinstance(node.left.func, ast.Attribute)
                and node.left.func.attr == "sqrt" and not node.left.args)

    def moved_in(node: ast.BinOp):
        base = node.left.func.value  # type: ignore[attr-defined]
        inside = ast.BinOp(base, ast.Add(), node.right)
        yield ast.Call(ast.Attribute(inside, "sqrt", ast.Load()), [], []), "inside the square root"

    def power_of_sum(node: ast.AST) -> bool:
        return (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow)
                and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Add)
                and _const(node.left.right) is not None)

    def power_out(node: ast.BinOp):
        inner = node.left
        yield (ast.BinOp(ast.BinOp(inner.left, ast.Pow(), node.right), ast.Add(), inner.right),
               "outside the power")  # type: ignore[attr-defined]

    for match, make in ((root_of_sum, moved_out), (sum_with_root, moved_in),
                        (power_of_sum, power_out)):
        for new, what in _variants(tree, match, make):
            yield (_src(new), "derived",
                   f"Your {grad} matches the formula with the added constant (an eps) "
                   f"{what}. Where the eps sits changes the value: put it where the forward "
                   "line (or the method) puts it.")


def correction_rewrites(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """A division meant for a value applied after its square root: `x = a / b` then
    `x.sqrt()` written as `a.sqrt() / b`."""
    quotients = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, ast.Div)):
            quotients[node.targets[0].id] = node.value

    def root_of_quotient(node: ast.AST) -> bool:
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "sqrt" and isinstance(node.func.value, ast.Name)
                and node.func.value.id in quotients)

    def after(node: ast.Call):
        q = quotients[node.func.value.id]  # type: ignore[attr-defined]
        root = ast.Call(ast.Attribute(copy.deepcopy(q.left), "sqrt", ast.Load()), [], [])
        yield ast.BinOp(root, ast.Div(), copy.deepcopy(q.right)), ast.unparse(q.right)

    for new, what in _variants(tree, root_of_quotient, after):
        yield (_src(new), "derived",
               f"Your {grad} matches the computation with the division by `{what}` applied "
               "after the square root instead of before it: the correction belongs to the "
               "value whose root is taken, so its root is what divides.")


def _bodies(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef)):
            yield node.body


def order_rewrites(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """Two consecutive statements in the other order, or one of them left out."""
    for body in _bodies(tree):
        for i in range(len(body)):
            if isinstance(body[i], (ast.FunctionDef, ast.Return, ast.Expr)):
                continue
            if i + 1 < len(body) and not isinstance(body[i + 1], (ast.Return, ast.Expr)):
                body[i], body[i + 1] = body[i + 1], body[i]
                swapped = _src(tree)
                body[i], body[i + 1] = body[i + 1], body[i]
                yield (swapped, "derived",
                       f"Your {grad} matches the computation with two consecutive updates in "
                       f"the other order ({_pair(body[i], body[i + 1])}). Each update reads "
                       "what the one before it left: check the order.")
            for where, place in ((len(body) - 1, "last"), (0, "first")):
                if where == i or abs(where - i) == 1:
                    continue  # no move, or the swap above
                moved = body.pop(i)
                body.insert(where, moved)
                text = _src(tree)
                body.pop(where)
                body.insert(i, moved)
                yield (text, "derived",
                       f"Your {grad} matches the computation with the update of "
                       f"{_writes_of(moved)} done {place} instead of where it belongs. Each "
                       "update reads what the ones before it left: check the order.")
            if len(body) > 1:
                kept = body.pop(i)
                dropped = _src(tree)
                body.insert(i, kept)
                yield (dropped, "partial",
                       f"Your {grad} matches the computation with one of its updates left "
                       f"out: the one that changes {_writes_of(kept)}.")


def _pair(a: ast.stmt, b: ast.stmt) -> str:
    first, second = _writes_of(a), _writes_of(b)
    return f"two updates of {first}" if first == second else f"{first} and {second}"


def _writes_of(stmt: ast.stmt) -> str:
    targets = [stmt.target] if isinstance(stmt, ast.AugAssign) else getattr(stmt, "targets", [])
    names = [ast.unparse(t) for t in targets]
    return " and ".join(f"`{n}`" for n in names) or "a value"


def state_patterns(name: str, value: Tensor, ref: Tensor, start: Tensor | None) -> str | None:
    """An in-place update of state that should not be: the value is a function of the right one
    (its square root, its square) or a fixed multiple of it (a correction stored)."""
    from tutor.core.diagnosis import close

    v, r = value.detach().double().cpu(), ref.detach().double().cpu()
    if v.shape != r.shape or not torch.isfinite(v).all():
        return None
    if bool((r >= 0).all()) and close(v, r.sqrt()):
        return (f"{name} came back as the square root of what it must hold: an in-place "
                f"operation (`{name}.sqrt_()`, or `sqrt` written into it) changed the caller's "
                f"state. Compute a new tensor from {name} instead of changing it.")
    if close(v, r * r):
        return (f"{name} came back as the square of what it must hold: an in-place operation "
                "changed the caller's state.")
    denom = float((r * r).sum())
    if denom > 0:
        c = float((v * r).sum()) / denom
        if abs(c - 1) > 1e-3 and close(v, c * r):
            return (f"{name} came back {c:.4g} times what it must hold, everywhere: a correction "
                    f"meant only for this step (a bias correction, a scale) was stored in {name} "
                    "itself. Keep it in a new tensor; the state keeps the raw value.")
    return None


def unpack_rewrites(tree: ast.Module, grad: str) -> Iterator[Rewrite]:
    """Two pieces of one unpacking in each other's place (`i, f, o, g = gates.chunk(4, 1)` for
    pieces laid out i, f, g, o): every later read of either gets the other's values."""
    for i, node in enumerate(list(ast.walk(tree))):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Tuple)):
            continue
        names = [e.id if isinstance(e, ast.Name) else None for e in node.targets[0].elts]
        for a in range(len(names)):
            for b in range(a + 1, len(names)):
                if names[a] is None or names[b] is None:
                    continue
                new = copy.deepcopy(tree)
                elts = _nth(new, i).targets[0].elts  # type: ignore[attr-defined]
                elts[a], elts[b] = elts[b], elts[a]
                order = ", ".join(ast.unparse(e) for e in elts)
                yield (_src(new), "derived",
                       f"Your {grad} matches the computation with `{names[a]}` and "
                       f"`{names[b]}` in each other's place where they are unpacked "
                       f"(`{order} = ...`): each then holds the other's piece. Unpack them in "
                       "the order the forward pass laid them out.")

