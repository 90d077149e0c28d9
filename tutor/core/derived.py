"""Diagnoses derived from the step itself, for wrong answers nobody catalogued.

The catalogue (`[[steps.mistakes]]` in the pack) names the mistakes people are known to make.
Everything else would only get "wrong". This module asks instead: which small change to the
step's own reference solution produces the learner's numbers? It rewrites the solution (trusted
pack code, so a plain `exec` on copies of the tensors is enough) in the ways backward passes
typically go wrong, evaluates each rewrite on the same namespace the learner's code saw, and
reports the one the learner's tensor matches best (it must match far better than the right
gradient does, so a rewrite that is merely another way to the right answer explains nothing):

- the local derivative without the gradient arriving from above, or that gradient alone;
- one operand in place of another tensor on the line or a related one (`bnvar` for `bnvar_inv`,
  `h` for `hpreact`), a tensor for its own gradient or the other way round;
- the line's function applied once more to its own output (`torch.tanh(h)` where `h` is tanh'd);
- a term, a factor or a statement left out, a term with the wrong sign, `n` for `n - 1`, an
  exponent one off, a constant fraction upside down;
- any of these times a constant such as `n` or `1/n` (`dlogits = probs * n`);
- the solution itself where the earlier step already left the complete gradient (a second
  branch counted twice).

Without the solution, two patterns are read off the numbers directly: right up to a factor per
row or per column, and right except on a subset of entries (the correct classes, the row maxima,
some rows), which is where a branch is missing.

Diagnosis kinds: "partial" when a term, a statement or a subset of entries is missing (the
closest catalogued kind), "scale" for a factor per row or column, and "derived" for the rest: an
explanation derived from the step rather than from the catalogue. Messages say what the numbers
match without handing over the answer. Only plain tensors are needed: the namespace before the
learner's code ran, the learner's value and autograd's reference.
"""

from __future__ import annotations

import ast
import copy
import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F

from tutor import code_facts
from tutor.code_facts import changed_in_place, write_targets
from tutor.core import rewrites
from tutor.core.diagnosis import close, diagnosis
from tutor.pack.model import Pack, Step
from tutor.values.results import Diagnosis

Tensor = torch.Tensor

CACHE_SIZE = 16  # namespaces whose candidate values are kept (one per step and prior, roughly)
MAX_CANDIDATE_LISTS = 256  # (step, tensor, shapes) combinations kept; a session needs a few dozen


@dataclass(frozen=True)
class Candidate:
    """One rewrite of the reference solution: a plausible wrong answer and what it means."""

    kind: str
    message: str
    source: str
    target: str  # the gradient the candidate computes
    writes: tuple[str, ...]  # names the code changes in place: copied before it runs
    # Names the message says the learner's code leaves out: a claim that is false of code that
    # reads them, so such code never gets this message.
    absent: tuple[str, ...] = ()


@dataclass
class _Values:
    """Candidate values on one namespace, computed as they are first needed."""

    before: dict  # held so that its id cannot be reused while the entry lives
    scope: dict
    candidates: list[Candidate]
    values: dict[int, Tensor | None] = field(default_factory=dict)

    def get(self, i: int) -> Tensor | None:
        if i not in self.values:
            self.values[i] = _evaluate(self.candidates[i], self.scope)
        return self.values[i]


_CANDIDATES: dict[tuple, list[Candidate]] = {}
_VALUES: OrderedDict[tuple, _Values] = OrderedDict()


def explain(
    pack: Pack,
    step: Step,
    tensor: str,
    value: Tensor,
    ref: Tensor,
    before: dict,
    n: int,
    code: str = "",
    own: Callable[[], Diagnosis | None] | None = None,
) -> Diagnosis | None:
    """The diagnosis of a wrong same-shape answer that matches a rewrite of the solution, or
    else the smallest change to the learner's own `code` that makes it right
    (tutor/core/smallest.py), or else a pattern of the numbers that is true of that code."""
    if value.shape != ref.shape or not torch.isfinite(value).all():
        return None
    # The tensors are tiny: one thread is fastest, and on a busy machine a second one waiting
    # for a core costs tens of milliseconds per operation.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _explain(pack, step, tensor, value, ref, before, n, code, own)
    finally:
        torch.set_num_threads(threads)


def _explain(
    pack: Pack, step: Step, tensor: str, value: Tensor, ref: Tensor, before: dict, n: int,
    code: str = "", own: Callable[[], Diagnosis | None] | None = None,
) -> Diagnosis | None:
    found = _values(pack, step, tensor, before, n)
    grad = f"d{tensor}"
    off = _distance(value, ref)
    best: tuple[float, Candidate] | None = None
    scaled: list[tuple[float, Candidate]] = []
    reads = reads_into(code, grad) if code else frozenset()
    for i, candidate in enumerate(found.candidates):
        if reads & set(candidate.absent):
            continue  # it would say the code leaves out what the code reads
        produced = found.get(i)
        if produced is None or produced.shape != ref.shape or not produced.isfinite().all():
            continue  # it cannot run here
        # A candidate explains the answer when it is close to it and much closer than the right
        # gradient is: a rewrite that is just another way to the right answer explains nothing,
        # while one that only drops the 1e-5 of a variance still does.
        if close(value, produced):
            err = _distance(value, produced, ref)
            if err < off / 10 and (best is None or err < best[0]):
                best = (err, candidate)
            continue
        c = _nice_factor(value, produced, n)
        if c is not None and _distance(value, c * produced, ref) < off / 10:
            scaled.append((c, candidate))
    if best is not None:
        return diagnosis(best[1].kind, best[1].message)
    if own is not None:
        # The smallest change to the learner's own code: searched by the caller, whose child
        # runs the changed programs (tutor/core/smallest.py); nothing of the learner's runs here.
        changed = own()
        if changed is not None:
            return changed
    term = _scaled_reference_term(step, tensor, value, ref, found.scope)
    if term is not None:
        return term
    pattern = (_subset(pack, grad, value, ref, found.scope, code)
               or _per_slice(grad, value, ref, found.scope))
    if pattern:
        return pattern
    if scaled:
        c, candidate = scaled[0]
        return diagnosis("derived", f"{candidate.message} {_times(grad, c, n)}")
    return None


def _distance(a: Tensor, b: Tensor, scale_of: Tensor | None = None) -> float:
    """Largest difference, relative to the size of the right gradient."""
    a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
    scale = float((scale_of if scale_of is not None else b).detach().abs().max()) or 1.0
    return float((a64 - b64).abs().max()) / scale


# --- candidates --------------------------------------------------------------------------------


def _values(pack: Pack, step: Step, tensor: str, before: dict, n: int) -> _Values:
    key = (pack.id, step.id, tensor, id(before))
    entry = _VALUES.get(key)
    if entry is not None and entry.before is before:
        _VALUES.move_to_end(key)
        return entry
    scope = _scope(before, n)
    shapes = tuple(sorted((k, tuple(v.shape)) for k, v in scope.items() if isinstance(v, Tensor)))
    ckey = (pack.id, step.id, tensor, shapes)
    if ckey not in _CANDIDATES:
        if len(_CANDIDATES) >= MAX_CANDIDATE_LISTS:
            _CANDIDATES.clear()  # learners' own temporaries make new shape sets: keep it bounded
            _CODE.clear()
        _CANDIDATES[ckey] = list(candidates(pack, step, tensor, scope))
    entry = _Values(before, scope, _CANDIDATES[ckey])
    _VALUES[key] = entry
    while len(_VALUES) > CACHE_SIZE:
        _VALUES.popitem(last=False)
    return entry


def _scope(before: dict, n: int) -> dict:
    """Tensors and sizes from the learner's namespace, with the real torch (trusted code)."""
    scope: dict = {"torch": torch, "F": F, "math": math}
    for name, v in before.items():
        if isinstance(v, Tensor) or (isinstance(v, int) and not isinstance(v, bool)):
            scope[name] = v
    scope["n"] = n
    return scope


@dataclass
class _Context:
    """What the rewrites need to know about the step and its tensors."""

    grad: str
    scope: dict
    upstream: set[str]  # gradients arriving at the step's line(s)
    related: list[str]  # tensors on the line, then their neighbours: tried first as swaps
    forward: list[str]  # every float tensor that is not a gradient
    unary: dict[str, ast.expr]  # output of a one-operand line -> the line's expression of it
    pack_lines: tuple = ()  # every forward line of the pack
    # A name the solution binds -> the tensors its value reads: a factor written with such a
    # local still depends on those tensors, it is no constant.
    local: dict[str, list[str]] = field(default_factory=dict)

    def is_grad(self, name: str) -> bool:
        return name.startswith("d") and name[1:] in self.scope and name in self.scope

    def compatible(self, a: str, b: str) -> bool:
        """Could `b` stand where `a` is written? The same shape up to size-1 dimensions, or one
        that broadcasts with it (a `[n, 1]` gradient where an `[n, 27]` one belongs, or the
        other way round); whether the result has the right shape is checked once it has run."""
        ta, tb = self.scope.get(a), self.scope.get(b)
        if not (isinstance(ta, Tensor) and isinstance(tb, Tensor)) or a == b:
            return False
        if not tb.is_floating_point() or tb.dim() == 0:
            return False  # indices and the scalar loss stand in for nothing
        if [d for d in ta.shape if d != 1] == [d for d in tb.shape if d != 1]:
            return True
        try:
            torch.broadcast_shapes(ta.shape, tb.shape)
        except RuntimeError:
            return False
        return True


def candidates(pack: Pack, step: Step, tensor: str, scope: dict) -> Iterator[Candidate]:
    """The step's plausible wrong answers for d{tensor}, most specific first."""
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return
    ctx = _context(pack, step, tensor, scope)
    ctx.local = locals_read(tree, scope)
    writes = changed_in_place(tree)  # rewrites only replace expressions: they write no new names
    _SLOTS.clear()
    seen: set[str] = {ast.unparse(tree)}
    if _accumulates(tree, ctx.grad):
        # The solution itself, where the earlier step already left the complete gradient: the
        # learner typed both branches there and adds this one again.
        yield Candidate(
            "derived",
            f"Your {ctx.grad} counts this line's branch twice: {ctx.grad} already held the "
            "complete gradient when this step began (your code for the earlier step computed "
            f"both branches), and this step added the branch again. Leave {ctx.grad} as it is "
            "here, or keep only the first branch in the earlier step.",
            ast.unparse(tree),
            ctx.grad,
            writes,
        )
    # When two rewrites fit equally well, the earlier (more telling) one is reported.
    makers: list[Callable[[ast.Module, _Context], Iterator[tuple[str, str, str]]]] = [
        _upstream_rewrites,
        _factor_rewrites,
        _own_output_rewrites,
        _related_swaps,
        _constant_rewrites,
        _term_rewrites,
        _statement_rewrites,
        _family_rewrites,
        _other_swaps,
    ]
    for make in makers:
        for item in make(tree, ctx):
            source, kind, message = item[:3]
            if source in seen:
                continue
            seen.add(source)
            # Its own writes, not the solution's: no rewrite may change a tensor it did not copy.
            yield Candidate(kind, message, source, ctx.grad, changed_in_place(ast.parse(source)),
                            tuple(item[3]) if len(item) > 3 else ())


def _skipped_line_rewrites(tree: ast.Module, ctx: _Context):
    """A line's output recomputed from the input of the line before it (a softmax of the scores
    before the mask): `att` as `F.softmax(preatt, ...)` where `att = F.softmax(preatt_masked)`
    and `preatt_masked` masks `preatt`."""
    lines = {line.target: line for line in ctx.pack_lines}
    for i, node in _loads(tree):
        line = lines.get(node.id)
        if line is None:
            continue
        inputs = [t for t in line.operands if isinstance(ctx.scope.get(t), Tensor)]
        if len(inputs) != 1 or inputs[0] not in lines:
            continue
        before = [t for t in lines[inputs[0]].operands
                  if isinstance(ctx.scope.get(t), Tensor)
                  and ctx.scope[t].shape == ctx.scope[inputs[0]].shape]
        for skipped in before:
            again = _substitute_name(_expr(line.source), inputs[0], skipped)
            everywhere = ast.parse(ast.unparse(tree))
            for sub in ast.walk(everywhere):
                for slot, value in ast.iter_fields(sub):
                    if (isinstance(value, ast.Name) and value.id == node.id
                            and isinstance(value.ctx, ast.Load)):
                        setattr(sub, slot, copy.deepcopy(again))
            message = (
                f"Your {ctx.grad} matches the formula with `{node.id}` recomputed from "
                f"`{skipped}`, skipping the line that makes `{inputs[0]}` "
                f"(`{lines[inputs[0]].source}`). Use the tensor the forward pass actually "
                "computed.")
            yield ast.unparse(everywhere), "derived", message
            yield (_replace(tree, i, lambda _n, e=again: copy.deepcopy(e)), "derived",
                   f"Your {ctx.grad} matches the formula with `{node.id}` recomputed from "
                   f"`{skipped}`, skipping the line that makes `{inputs[0]}` "
                   f"(`{lines[inputs[0]].source}`). Use the tensor the forward pass actually "
                   "computed.")


def _family_rewrites(tree: ast.Module, ctx: _Context):
    """Axes, indices, constants, roots and order (tutor/core/rewrites.py)."""
    yield from _skipped_line_rewrites(tree, ctx)
    yield from rewrites.axis_rewrites(tree, ctx.grad)
    yield from rewrites.swap_rewrites(tree, ctx.grad, ctx.scope)
    yield from rewrites.constant_rewrites(tree, ctx.grad, ctx.scope)
    yield from rewrites.root_rewrites(tree, ctx.grad)
    yield from rewrites.correction_rewrites(tree, ctx.grad)
    yield from rewrites.order_rewrites(tree, ctx.grad)


def explain_function(step: Step, name: str, value: Tensor, ref: Tensor, inputs: dict,
                     call: Callable[[str], dict | None], start: Tensor | None = None
                     ) -> Diagnosis | None:
    """A function step's wrong output, matched against rewrites of its reference function.

    `call(source)` defines the rewritten function and calls it on copies of the case's inputs
    (the engine's way, behind the guard); `inputs` are those inputs, for the rewrites that need
    to know which names hold tensors and counts.
    """
    if value.shape != ref.shape or not torch.isfinite(value).all():
        return None
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return None
    scope = {k: v for k, v in inputs.items() if isinstance(v, (Tensor, int))}
    if start is not None and start.shape == value.shape:
        # An update is compared by how it moved the tensor: a step far smaller than the
        # tensor itself must still be told apart.
        base = start.detach().double()
        moved = lambda t: t.detach().double() - base  # noqa: E731
    else:
        moved = lambda t: t  # noqa: E731
    value, ref = moved(value), moved(ref)
    off = _distance(value, ref)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for source, kind, message in function_rewrites(step.solution, tree, name, scope):
            produced = (call(source) or {}).get(name)
            if not isinstance(produced, Tensor) or produced.shape != ref.shape:
                continue
            produced = moved(produced)
            if (produced.isfinite().all() and close(value, produced)
                    and _distance(value, produced, ref) < off / 10):
                return diagnosis(kind, message)
    finally:
        torch.set_num_threads(threads)
    return None


# (solution, output, what the rewrites read of the inputs) -> the rewrites, in the order tried.
# They depend on nothing a learner writes, and making them copies the solution's tree hundreds
# of times: a worker makes them once per output.
_FUNCTION_REWRITES: dict[tuple, list[tuple[str, str, str]]] = {}


def function_rewrites(solution: str, tree: ast.Module, name: str, scope: dict
                      ) -> list[tuple[str, str, str]]:
    """Every rewrite of a reference function tried for output `name`, once each."""
    key = (solution, name, tuple(sorted(
        (k, v) if isinstance(v, int) else (k, tuple(v.shape), str(v.dtype))
        for k, v in scope.items())))
    if key not in _FUNCTION_REWRITES:
        makers = [
            rewrites.constant_rewrites(tree, name, scope),
            rewrites.root_rewrites(tree, name),
            rewrites.correction_rewrites(tree, name),
            rewrites.order_rewrites(tree, name),
            rewrites.axis_rewrites(tree, name),
            rewrites.swap_rewrites(tree, name, scope),
        ]
        seen = {ast.unparse(tree)}
        found = []
        for family in makers:
            for source, kind, message in family:
                if source not in seen:
                    seen.add(source)
                    found.append((source, kind, message))
        if len(_FUNCTION_REWRITES) > 64:
            _FUNCTION_REWRITES.clear()
        _FUNCTION_REWRITES[key] = found
    return _FUNCTION_REWRITES[key]


def call_function(step: Step, source: str, inputs: dict, sizes: dict) -> dict | None:
    """Define a rewrite of the reference function and call it on copies of a case's inputs:
    its outputs (or the arguments it updates in place) by name; None if it fails. Trusted code
    (a rewrite of the pack's own solution), so a plain exec, as for the per-line rewrites."""
    spec = step.function
    if spec is None:
        return None
    ns: dict = {"torch": torch, "F": F, "math": math, **sizes}
    args = {k: v.clone() if isinstance(v, Tensor) else v for k, v in inputs.items()}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(_compiled(source), ns)
            result = ns[spec.name](*[args[a] for a in spec.arguments])
    except Exception:  # noqa: BLE001 - a rewrite that cannot run here is no candidate
        return None
    if not spec.outputs:
        return {name: args[name] for name in step.checks}
    result = result if len(spec.outputs) > 1 else (result,)
    if not isinstance(result, (tuple, list)) or len(result) != len(spec.outputs):
        return None
    return dict(zip(spec.outputs, result, strict=True))


def _scaled_reference_term(step: Step, tensor: str, value: Tensor, ref: Tensor, scope: dict
                           ) -> Diagnosis | None:
    """Right but for one term of the solution's formula, off by a constant factor: the term's
    share of the right answer, fitted to the learner's numbers and confirmed by running the
    solution with that term scaled (trusted code, as for every rewrite here)."""
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return None
    from tutor.core.smallest import number, scaled, terms

    grad = f"d{tensor}"
    run = lambda source: _evaluate(  # noqa: E731
        Candidate("derived", "", source, grad, changed_in_place(ast.parse(source))), scope)
    v = value.detach().to("cpu", torch.float64)
    r = ref.detach().to("cpu", torch.float64)
    local = locals_read(tree, scope)
    for i, node in terms(tree):
        without = run(_replace_at(tree, i, lambda n: scaled(n, 0.0)))
        if without is None or without.shape != ref.shape:
            continue
        base = without.detach().to("cpu", torch.float64)
        share = (r - base).flatten()
        denom = float(share @ share)
        if denom <= 1e-12 * max(float(r.flatten() @ r.flatten()), 1e-30):
            continue
        c = float((v - base).flatten() @ share) / denom
        if not math.isfinite(c) or abs(c - 1) < 1e-3 or abs(c) < 1e-6 or abs(c + 1) < 1e-3:
            continue  # right, a term left out, or one of the wrong sign: said elsewhere
        if not close(v, base + c * (r - base)):
            continue
        confirm = run(_replace_at(tree, i, lambda n, c=c: scaled(n, c)))
        if confirm is None or not close(value, confirm):
            continue
        names = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name):
                held = isinstance(scope.get(sub.id), Tensor)
                names += [sub.id] if held else local.get(sub.id, [])
        names = [x for x in dict.fromkeys(names) if x != grad]
        which = ("the one with " + " and ".join(f"`{x}`" for x in names)) if names else \
            "a constant one"
        size = (f"{number(c)} times what it should be" if c > 0 else
                f"{number(-c)} times what it should be, and of the wrong sign")
        return diagnosis(
            "derived",
            f"Your {grad} is right but for one term of the formula, {which}: that term is "
            f"{size}. Check the constant factors and the count it divides by (a sum where a "
            "mean belongs, n where another size does); the other terms are right.")
    return None


def _replace_at(tree: ast.Module, index: int, make: Callable[[ast.AST], ast.AST]) -> str:
    """`tutor.core.smallest.edited`: the source with the node at walk position `index` replaced."""
    from tutor.core.smallest import edited

    return edited(tree, index, make)


def _accumulates(tree: ast.Module, grad: str) -> bool:
    """Does the solution add to a gradient that an earlier step started (`dX += ...`)?"""
    for node in ast.walk(tree):
        target = getattr(node, "target", None)
        if isinstance(node, ast.AugAssign) and isinstance(target, ast.Name) and target.id == grad:
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == grad for t in node.targets
        ):
            reads = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if grad in reads:
                return True
    return False


def _context(pack: Pack, step: Step, tensor: str, scope: dict) -> _Context:
    lines = [pack.line_for(t) for t in step.lines]
    tensors = {k for k, v in scope.items() if isinstance(v, Tensor)}
    grads = {k for k in tensors if k.startswith("d") and k[1:] in tensors}
    forward = [k for k in scope if k in tensors and k not in grads and scope[k].is_floating_point()]
    upstream = {f"d{line.target}" for line in lines}
    if step.upstream:
        upstream.add(f"d{step.upstream}")
    on_line = [t for line in lines for t in (*line.operands, line.target)]
    neighbours = []
    for line in pack.forward_lines:
        if line.target in on_line or any(t in line.operands for t in on_line):
            neighbours += [line.target, *line.operands]
    related = [t for t in dict.fromkeys(on_line + neighbours) if t in forward]
    unary = {}
    for line in lines:
        inputs = [t for t in line.operands if t in tensors]
        if len(inputs) == 1:
            unary[line.target] = _substitute_name(_expr(line.source), inputs[0], line.target)
    return _Context(f"d{tensor}", scope, upstream & tensors, related, forward, unary,
                    tuple(pack.forward_lines))


def _expr(source: str) -> ast.expr:
    return ast.parse(source).body[0].value  # type: ignore[attr-defined]


def _substitute_name(node: ast.expr, old: str, new: str) -> ast.expr:
    node = copy.deepcopy(node)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == old:
            sub.id = new
    return node


# Rewrites address nodes by their position in a pre-order walk, so that one occurrence of a
# name (or one product among several) can be changed. The change is made in place, the source
# text taken, and the node put back: copying the tree for every rewrite costs far more.


def _preorder(node: ast.AST) -> Iterator[ast.AST]:
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)


Slot = tuple[ast.AST, str, int | None]  # parent, field, position in a list field (or None)
_SLOTS: dict[int, tuple[ast.AST, list[Slot | None]]] = {}


def _slots(tree: ast.AST) -> list[Slot | None]:
    """Where each node of the pre-order walk sits in its parent (None for the root)."""
    cached = _SLOTS.get(id(tree))
    if cached is not None and cached[0] is tree:
        return cached[1]
    out: list[Slot | None] = [None]

    def walk(node: ast.AST) -> None:
        # The same order as ast.iter_child_nodes, which _preorder follows.
        for name, value in ast.iter_fields(node):
            if isinstance(value, ast.AST):
                out.append((node, name, None))
                walk(value)
            elif isinstance(value, list):
                for k, item in enumerate(value):
                    if isinstance(item, ast.AST):
                        out.append((node, name, k))
                        walk(item)

    walk(tree)
    _SLOTS[id(tree)] = (tree, out)
    return out


def _put(slot: Slot, node: ast.AST) -> ast.AST:
    """Put `node` into the slot and return what was there."""
    parent, attr, k = slot
    if k is None:
        old = getattr(parent, attr)
        setattr(parent, attr, node)
    else:
        old = getattr(parent, attr)[k]
        getattr(parent, attr)[k] = node
    return old


def _replace(tree: ast.Module, index: int, make: Callable[[ast.AST], ast.AST]) -> str:
    """The source of the tree with node `index` (pre-order) replaced by make(node)."""
    slot = _slots(tree)[index]
    assert slot is not None, "the module itself is never replaced"
    parent, attr, k = slot
    node = getattr(parent, attr) if k is None else getattr(parent, attr)[k]
    _put(slot, make(node))
    try:
        return ast.unparse(tree)
    finally:
        _put(slot, node)


def _nodes(tree: ast.Module) -> Iterator[tuple[int, ast.AST]]:
    """Nodes that may be rewritten, with their pre-order index. What an assignment writes to
    (`dlogits[...] -= 1`) or an in-place method changes (`dC.index_add_`) is left alone: a swap
    there would make the rewrite change another tensor of the namespace instead."""
    fixed = {
        id(sub) for node in ast.walk(tree) for root in write_targets(node) for sub in ast.walk(root)
    }
    for i, node in enumerate(_preorder(tree)):
        if id(node) not in fixed:
            yield i, node


def _loads(tree: ast.Module) -> Iterator[tuple[int, ast.Name]]:
    for i, node in _nodes(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield i, node


def _name(name: str) -> ast.Name:
    return ast.Name(id=name, ctx=ast.Load())


def _call(func: str, *args: ast.expr) -> ast.Call:
    mod, attr = func.split(".")
    return ast.Call(ast.Attribute(_name(mod), attr, ast.Load()), list(args), [])


def _renamed(tree: ast.Module, index: int, name: str, message: str) -> tuple[str, str, str]:
    """A candidate with the name at `index` replaced by `name`, and what it would mean."""
    return _replace(tree, index, lambda _n: _name(name)), "derived", message


def _upstream_rewrites(tree: ast.Module, ctx: _Context):
    """The gradient from above left out (all ones), or a tensor where that gradient belongs."""
    grad = ctx.grad
    for i, node in _loads(tree):
        if node.id in ctx.upstream:
            up = node.id
            yield (
                _replace(tree, i, lambda _n, up=up: _call("torch.ones_like", _name(up))),
                "derived",
                f"Your {grad} is the local derivative of the line on its own, as if the gradient "
                f"arriving at its output were all ones. The chain rule multiplies it by the "
                f"gradient that reached the output, `{up}`.",
                (up,),
            )
        if ctx.is_grad(node.id) and ctx.compatible(node.id, node.id[1:]):
            yield _renamed(tree, i, node.id[1:],
                           f"Your {grad} is what the formula gives with the tensor "
                           f"`{node.id[1:]}` where its gradient `{node.id}` belongs. Check each "
                           "name: a gradient and its tensor differ only by the `d`.")
        others = [g for g in ctx.scope if ctx.is_grad(g) and g != ctx.grad]
        for other in others if ctx.is_grad(node.id) else []:
            if ctx.compatible(node.id, other):
                yield _renamed(tree, i, other,
                               f"Your {grad} is what the formula gives with the gradient "
                               f"`{other}` where `{node.id}` belongs. Check which gradient "
                               "arrives at the output of this line.")


def _own_output_rewrites(tree: ast.Module, ctx: _Context):
    """The line's function applied once more to its own output: `torch.tanh(h)` for `h`, at
    one place or, where the output is read more than once (`s * (1 - s)`), at every place."""
    places: dict[str, list[int]] = {}
    for i, node in _loads(tree):
        if node.id in ctx.unary:
            places.setdefault(node.id, []).append(i)
            again = ctx.unary[node.id]
            yield (
                _replace(tree, i, lambda _n, e=again: copy.deepcopy(e)),
                "derived",
                _once_more(ctx.grad, node.id, again),
            )
    for name, indices in places.items():
        if len(indices) > 1:
            yield _replace_all(tree, indices, ctx.unary[name]), "derived", _once_more(
                ctx.grad, name, ctx.unary[name])


def _once_more(grad: str, name: str, again: ast.expr) -> str:
    return (f"Your {grad} matches the formula with `{name}` passed through this line's "
            f"function once more (`{ast.unparse(again)}`). `{name}` is already the output "
            "of the line: check whether the local derivative needs the function applied "
            "again, or the value it already produced.")


def _replace_all(tree: ast.Module, indices: list[int], new: ast.expr) -> str:
    """The source of the tree with every node at `indices` (pre-order names, so no one holds
    another) replaced by a copy of `new`."""
    slots = [_slots(tree)[i] for i in indices]
    old = [_put(slot, copy.deepcopy(new)) for slot in slots if slot is not None]
    try:
        return ast.unparse(tree)
    finally:
        for slot, node in zip([s for s in slots if s is not None], old, strict=True):
            _put(slot, node)


def _swaps(tree: ast.Module, ctx: _Context, pool: list[str], with_grads: bool):
    for i, node in _loads(tree):
        if node.id not in ctx.forward:
            continue
        for other in pool:
            if ctx.compatible(node.id, other):
                yield _renamed(tree, i, other,
                               f"Your {ctx.grad} is what the formula gives if `{other}` stands "
                               f"where `{node.id}` should. Check which tensor each part of the "
                               "local derivative is written in.")
        grad = f"d{node.id}"
        if with_grads and grad != ctx.grad and ctx.compatible(node.id, grad):
            yield _renamed(tree, i, grad,
                           f"Your {ctx.grad} is what the formula gives with the gradient "
                           f"`{grad}` where the tensor `{node.id}` belongs. Check each name: a "
                           "gradient and its tensor differ only by the `d`.")


def _related_swaps(tree: ast.Module, ctx: _Context):
    """One operand swapped for a tensor on the line or next to it (bnvar for bnvar_inv)."""
    yield from _swaps(tree, ctx, ctx.related, with_grads=True)


def _other_swaps(tree: ast.Module, ctx: _Context):
    """One operand swapped for any other tensor of the forward pass with its shape."""
    rest = [t for t in ctx.forward if t not in ctx.related]
    yield from _swaps(tree, ctx, rest, with_grads=False)


def number(node: ast.AST) -> float | None:
    """The value of a literal number, with its sign, or None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = number(node.operand)
        return None if inner is None else -inner
    return None


def _literal(x: float) -> ast.expr:
    x = int(x) if float(x).is_integer() else x
    return ast.UnaryOp(ast.USub(), ast.Constant(-x)) if x < 0 else ast.Constant(x)


def _only_sizes(node: ast.AST) -> bool:
    """An expression of numbers and `n` alone, like `n / (n - 1)`."""
    names = [s for s in ast.walk(node) if isinstance(s, ast.Name)]
    return all(s.id == "n" for s in names) and not any(
        isinstance(s, (ast.Call, ast.Attribute, ast.Subscript)) for s in ast.walk(node)
    )


_COUNTS = ("Check which count each factor comes from: the mean divides by n, the unbiased "
           "variance by n - 1.")


def _constant_rewrites(tree: ast.Module, ctx: _Context):
    """`n` for `n - 1` and back, an exponent one off, a constant fraction upside down."""
    grad = ctx.grad
    for i, node in _nodes(tree):
        if isinstance(node, ast.Name) and node.id == "n" and isinstance(node.ctx, ast.Load):
            yield (
                _replace(tree, i, lambda _n: ast.BinOp(_name("n"), ast.Sub(), ast.Constant(1))),
                "derived",
                f"Your {grad} matches the formula with `n - 1` where `n` belongs. {_COUNTS}",
            )
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Sub)
            and isinstance(node.left, ast.Name)
            and node.left.id == "n"
            and number(node.right) == 1
        ):
            yield (
                _replace(tree, i, lambda _n: _name("n")),
                "derived",
                f"Your {grad} matches the formula with `n` where `n - 1` belongs. {_COUNTS}",
            )
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            e = number(node.right)
            if e is None:
                continue
            for shifted in (e - 1, e + 1):
                yield (
                    _replace(
                        tree, i, lambda n_, s=shifted: ast.BinOp(n_.left, ast.Pow(), _literal(s))
                    ),
                    "derived",
                    f"Your {grad} matches the formula with an exponent one off. The power rule "
                    "lowers the exponent by exactly one: the derivative of x**p is "
                    "p * x**(p - 1).",
                )
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Div)
            and _only_sizes(node)
            and any(isinstance(s, ast.Name) for s in ast.walk(node))
        ):
            yield (
                _replace(tree, i, lambda n_: ast.BinOp(n_.right, ast.Div(), n_.left)),
                "derived",
                f"Your {grad} matches the formula with one of its constant fractions upside "
                "down. Work out which count belongs on top and which below.",
            )


def _tensor_names(node: ast.AST, ctx: _Context) -> list[str]:
    """The tensors an expression reads, in order, without the gradient being computed; a local
    of the solution stands for the tensors its value reads."""
    names: list[str] = []
    for s in ast.walk(node):
        if not isinstance(s, ast.Name) or s.id == ctx.grad:
            continue
        if isinstance(ctx.scope.get(s.id), Tensor):
            names.append(s.id)
        elif s.id in ctx.local:
            names += [t for t in ctx.local[s.id] if t != ctx.grad]
    return list(dict.fromkeys(names))


def reads_into(code: str, grad: str) -> frozenset[str]:
    """The names the code reads to make `grad`: what the statements writing it read, and what
    the locals among those were made from (the code's reads for other gradients left out)."""
    tree = code_facts.of(code).tree
    if tree is None:
        return code_facts.of(code).read
    wanted, reads = {grad}, set()
    for stmt in reversed([s for s in ast.walk(tree) if isinstance(s, ast.stmt)
                          and not isinstance(s, (ast.Module, ast.FunctionDef, ast.For,
                                                 ast.While, ast.If, ast.With))]):
        if code_facts.written(stmt) & wanted or code_facts.bound(stmt) & wanted:
            got = code_facts.read(stmt)
            reads |= got
            wanted |= got
    return frozenset(reads)


def locals_read(tree: ast.Module, scope: dict) -> dict[str, list[str]]:
    """Each name the code binds by a plain assignment -> the tensors of `scope` its value reads,
    through earlier locals too."""
    out: dict[str, list[str]] = {}
    for stmt in ast.walk(tree):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            continue
        reads: list[str] = []
        for s in ast.walk(stmt.value):
            if isinstance(s, ast.Name):
                if isinstance(scope.get(s.id), Tensor):
                    reads.append(s.id)
                else:
                    reads += out.get(s.id, [])
        name = stmt.targets[0].id
        if not isinstance(scope.get(name), Tensor):
            out[name] = list(dict.fromkeys(out.get(name, []) + reads))
    return out


def _involving(node: ast.AST, ctx: _Context) -> str:
    names = _tensor_names(node, ctx)
    if not names:
        return "a constant"
    return "the one with " + " and ".join(f"`{x}`" for x in names)


def _term_rewrites(tree: ast.Module, ctx: _Context):
    """A term of a sum left out, or added with the wrong sign."""
    grad = ctx.grad
    missing = (
        f"Your {grad} matches the formula with one term left out: {{}}. Every path from this "
        "tensor to the loss contributes a term; check that each is there."
    )
    for i, node in _nodes(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub))):
            continue
        if _only_sizes(node):
            continue  # `n - 1` is a count, not two terms
        plus = isinstance(node.op, ast.Add)
        constant = number(node.right)
        yield (
            _replace(tree, i, lambda n_: n_.left),
            "partial" if constant is None else "derived",
            missing.format(_involving(node.right, ctx))
            if constant is None
            else f"Your {grad} matches the formula with the constant {constant:g} left out of a "
            "sum. Small as it is, it is on the forward line, so the derivative keeps it.",
        )
        yield (
            _replace(tree, i, _right_term if plus else _minus_right_term),
            "partial",
            missing.format(_involving(node.left, ctx)),
        )
        yield (
            _replace(tree, i, _minus_for_plus if plus else _plus_for_minus),
            "derived",
            f"Your {grad} matches the formula with one term added with the wrong sign: "
            f"{_involving(node.right, ctx)}. Follow the minus signs of the forward line through "
            "the derivative.",
        )


def _right_term(node: ast.BinOp) -> ast.expr:
    return node.right


def _minus_right_term(node: ast.BinOp) -> ast.expr:
    return ast.UnaryOp(ast.USub(), node.right)


def _minus_for_plus(node: ast.BinOp) -> ast.expr:
    return ast.BinOp(node.left, ast.Sub(), node.right)


def _plus_for_minus(node: ast.BinOp) -> ast.expr:
    return ast.BinOp(node.left, ast.Add(), node.right)


def _statement_rewrites(tree: ast.Module, ctx: _Context):
    """One statement of a several-statement computation left out, or an update of the wrong sign."""
    grad = ctx.grad
    for i, stmt in enumerate(tree.body):
        if i > 0:
            rest = ast.Module(body=tree.body[:i] + tree.body[i + 1 :], type_ignores=[])
            yield (
                ast.unparse(rest),
                "partial",
                f"Your {grad} is what the computation gives with one of its steps left out: "
                f"{_involving(stmt, ctx)}. Check that every part of the derivative is applied.",
            )
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Add, ast.Sub)):
            op = stmt.op
            stmt.op = ast.Sub() if isinstance(op, ast.Add) else ast.Add()
            flipped = ast.unparse(tree)
            stmt.op = op
            yield (
                flipped,
                "derived",
                f"Your {grad} matches the computation with one in-place update going the wrong "
                "way (a `+=` where a `-=` belongs, or the reverse). Follow the signs through.",
            )


def _factor_rewrites(tree: ast.Module, ctx: _Context):
    """One factor of a product left out: the local derivative, the upstream gradient, or another."""
    grad = ctx.grad
    # "Only the gradient from above is there" is true only of a whole right-hand side: inside
    # `dh * o * (1 - t**2)`, dropping `o` from `dh * o` leaves more than `dh`.
    whole = {id(n.value) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign))}
    for i, node in _nodes(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Div))):
            continue
        sides = [(node.left, node.right), (node.right, node.left)]
        if isinstance(node.op, ast.Div):
            sides = sides[:1]  # dropping a divisor; a lone reciprocal is no likely slip
        for kept, dropped in sides:
            kept_up = set(_tensor_names(kept, ctx)) & ctx.upstream
            dropped_up = set(_tensor_names(dropped, ctx)) & ctx.upstream
            if (isinstance(kept, ast.Name) and kept.id in ctx.upstream and not dropped_up
                    and id(node) in whole):
                message = (
                    f"Your {grad} matches the formula with the local derivative left out: only "
                    f"the gradient from above, `{kept.id}`, is there. It passes through unchanged "
                    "only where the local derivative is 1."
                )
            elif dropped_up and not kept_up:
                message = (
                    f"Your {grad} is the local derivative of the line on its own. The chain rule "
                    f"multiplies it by the gradient that reached the output "
                    f"({', '.join(f'`{u}`' for u in sorted(dropped_up))})."
                )
                yield (_replace(tree, i, lambda _n, k=kept: k), "derived", message,
                       tuple(sorted(dropped_up)))
                continue
            elif isinstance(node.op, ast.Div):
                message = (
                    f"Your {grad} matches the formula with one division left out: "
                    f"{_involving(dropped, ctx)}."
                )
            else:
                message = (
                    f"Your {grad} matches the formula with one factor of a product left out: "
                    f"{_involving(dropped, ctx)}."
                )
            yield (_replace(tree, i, lambda _n, k=kept: k), "derived", message)


def _evaluate(candidate: Candidate, scope: dict) -> Tensor | None:
    """Run one rewrite on copies of what it writes; anything that fails simply matches nothing."""
    ns = dict(scope)
    for name in candidate.writes:
        if isinstance(ns.get(name), Tensor):
            ns[name] = ns[name].clone()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(_compiled(candidate.source), ns)  # trusted: a rewrite of the pack's solution
    except Exception:  # noqa: BLE001 - a rewrite that cannot run here is no candidate
        return None
    out = ns.get(candidate.target)
    return out if isinstance(out, Tensor) and out.is_floating_point() else None


_CODE: dict[str, object] = {}


def _compiled(source: str):
    if source not in _CODE:
        _CODE[source] = compile(source, "<derived candidate>", "exec")
    return _CODE[source]


# --- patterns read off the numbers -------------------------------------------------------------


def _nice_factor(value: Tensor, produced: Tensor, n: int) -> float | None:
    """A constant like n, 1/n or n**2 by which the value is the candidate, if any."""
    v, p = value.detach().double().flatten(), produced.detach().double().flatten()
    denom = float(p @ p)
    if denom == 0:
        return None
    c = float(v @ p) / denom
    for nice in _NICE(n):
        if abs(c - nice) <= 1e-3 * abs(nice) and close(value, c * produced):
            return nice
    return None


def _NICE(n: int) -> list[float]:  # noqa: N802 - a table, computed per batch size
    return [n, 1 / n, n * n, 1 / (n * n), n - 1, 1 / (n - 1), 2, 0.5, -1, -n, -1 / n]


def _times(grad: str, c: float, n: int) -> str:
    names = {
        n: "n",
        1 / n: "1/n",
        n * n: "n²",
        1 / (n * n): "1/n²",
        n - 1: "n - 1",
        1 / (n - 1): "1/(n - 1)",
        2: "2",
        0.5: "1/2",
        -n: "-n",
        -1 / n: "-1/n",
    }
    if c == -1:
        return f"On top of that, {grad} has the opposite sign of that."
    return (
        f"On top of that, {grad} is {names.get(c, f'{c:.4g}')} times that: check the constant "
        "factors too (the loss is a mean over the n examples of the batch)."
    )


def _entry_close(value: Tensor, ref: Tensor) -> Tensor:
    v, r = value.detach().double().cpu(), ref.detach().double().cpu()
    scale = max(float(r.abs().max()), 1e-12)
    return (v - r).abs() <= 1e-4 * scale + 1e-4 * r.abs()


def _walks_rows(code: str) -> bool:
    """Whether the code could reach only some rows: a loop, a slice or a row index it builds."""
    tree = code_facts.of(code).tree
    if tree is None:
        return True
    return any(isinstance(node, (ast.For, ast.While, ast.comprehension, ast.Slice))
               or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                   and node.func.id == "range")
               for node in ast.walk(tree))


def _subset(pack: Pack, grad: str, value: Tensor, ref: Tensor, scope: dict, code: str = ""
            ) -> Diagnosis | None:
    """Right except on a recognisable subset of entries: where a branch is missing."""
    if value.dim() != 2:
        return None
    wrong = ~_entry_close(value, ref)
    if not wrong.any() or wrong.all():
        return None
    rows, cols = ref.shape
    r = ref.detach().abs().cpu()
    nonzero = r > 1e-6 * float(r.max())  # entries right for a reason, not zero on both sides
    for mask, where in _masks(pack, scope, rows, cols):
        if not (wrong & ~mask).any() and (nonzero & ~mask).any():
            return diagnosis(
                "partial",
                f"Your {grad} is right everywhere except {where}. The part of the derivative "
                "that acts only there is missing or off.",
            )
    live = nonzero.any(1)  # rows whose gradient is not simply zero
    right_rows = ~wrong.any(1) & live
    bad_rows = wrong.any(1)
    # Rows right by chance (where the gradient arriving there is zero, say) are no sign of a
    # loop: the claim is made only of code that walks or indexes rows.
    if right_rows.any() and bad_rows.any() and (not code or _walks_rows(code)):
        return diagnosis(
            "partial",
            f"Your {grad} is right in {int(right_rows.sum())} rows and wrong in "
            f"{int(bad_rows.sum())}: part of the gradient reaches only some rows. Look for a loop "
            "that stops early or an index that skips or repeats rows.",
        )
    return None


def _masks(pack: Pack, scope: dict, rows: int, cols: int) -> Iterator[tuple[Tensor, str]]:
    """Entries the pack's own forward pass singles out, one per row: those an integer index
    picks (`x[range(n), Y]`) and the largest of a row (`x.max(1)`, `x.argmax(1)`). Read from the
    forward code, so no lesson's names are written here."""
    for kind, name in _singled_out(tuple(line.source for line in pack.forward_lines)):
        t = scope.get(name)
        if not isinstance(t, Tensor):
            continue
        if kind == "index" and t.dim() == 1 and t.shape[0] == rows and not t.is_floating_point() \
                and t.numel() and int(t.max()) < cols and int(t.min()) >= 0:
            picked = F.one_hot(t.cpu().long(), cols).bool()
            yield picked, (f"at the entries `[range(n), {name}]` picks, one per row (the "
                           "entries the forward pass indexes)")
        elif kind == "max" and t.is_floating_point() and tuple(t.shape) == (rows, cols):
            maxima = F.one_hot(t.detach().cpu().argmax(1), cols).bool()
            yield maxima, f"at the largest entry of `{name}` in each row"


@lru_cache(maxsize=16)
def _singled_out(sources: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """("index", Y) for each `x[range(...), Y]` and ("max", x) for each `x.max(1)` or
    `x.argmax(1)` in the forward lines."""
    found: list[tuple[str, str]] = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) \
                    and len(node.slice.elts) == 2 and isinstance(node.slice.elts[1], ast.Name) \
                    and isinstance(node.slice.elts[0], ast.Call):
                found.append(("index", node.slice.elts[1].id))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("max", "argmax") \
                    and isinstance(node.func.value, ast.Name):
                found.append(("max", node.func.value.id))
    return tuple(dict.fromkeys(found))


def _per_slice(grad: str, value: Tensor, ref: Tensor, scope: dict) -> Diagnosis | None:
    """Right up to a factor that differs from row to row, or from column to column."""
    if value.dim() != 2:
        return None
    v, r = value.detach().double().cpu(), ref.detach().double().cpu()
    nonzero = r.abs() > 1e-6 * float(r.abs().max())
    for dim, what in ((1, "row"), (0, "column")):
        norm = (r * r).sum(dim, keepdim=True)
        if int((norm > 0).sum()) < 2:
            continue
        factor = torch.where(norm > 0, (v * r).sum(dim, keepdim=True) / norm.clamp_min(1e-300),
                             torch.zeros_like(norm))
        live = factor[norm > 0]
        spread = float(live.max() - live.min())
        if spread <= 1e-3 * float(live.abs().max()) or not close(v, factor * r):
            continue  # one factor for all is a plain scale, caught before
        named = _named_factor(factor, scope)
        # With one non-zero entry per row (or column) any value fits some factor: only a factor
        # that is a tensor of the namespace then says something.
        if not named and float(nonzero.sum(dim).double().mean()) < 2:
            continue
        return diagnosis(
            "scale",
            f"Each {what} of your {grad} is the right gradient times a number of its own (the "
            f"factors differ from {what} to {what}){named}. A factor with one value per {what} "
            f"is missing or extra.",
        )
    return None


def _named_factor(factor: Tensor, scope: dict) -> str:
    """Say which tensor of the namespace the per-row (or per-column) factor is, if any."""
    flat = factor.flatten()
    for name, t in scope.items():
        if not (isinstance(t, Tensor) and t.is_floating_point()) or t.numel() != flat.numel():
            continue
        if t.dim() > 2 or name.startswith("d"):
            continue
        tt = t.detach().double().cpu().flatten()
        if close(flat, tt):
            return f": exactly the matching entries of `{name}`, one too many"
        if bool((tt != 0).all()) and close(flat, 1 / tt):
            return f": exactly one over the matching entries of `{name}`, a factor `{name}` short"
    return ""
