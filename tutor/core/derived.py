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
- a gate's slope written as the other activation's (`1 - o**2` for a sigmoid's `o`), a line's
  output where only a part of the line belongs (`h` for the `torch.tanh(c)` of `h = o * ...`);
- a term, a factor or a statement left out, a term with the wrong sign, `n` for `n - 1`, an
  exponent one off, a constant fraction upside down, a function left out (`logits` for its
  softmax), a mask's comparison off at its bound (`Yb > 0` for `Yb >= 0`);
- one too many: a factor another line's step multiplies by (its slope, one of its tensors),
  a gradient added as a term;
- any of these times a constant such as `n` or `1/n` (`dlogits = probs * n`);
- the solution itself where the earlier step already left the complete gradient (a second
  branch counted twice).

A function step's gradient (`explain_function`) is matched against the same rewrites, made on
the reference function's own names: its locals as they are when it returns (`function_scope`,
traced on the case), a loop's slices of its arguments (`hs[:, s]`), a local read in several
places changed in one of them. A message names a local the learner never saw by the expression
it holds. A rewrite must also fit the learner's output on another case (`confirm`), and where
several fit, one whose words are true of the learner's code (`said`) is told.

Without the solution, two patterns are read off the numbers directly: right up to a factor per
row or per column (per index of the first dimension, for more dimensions, with the count per
row of a mask it follows), and right except on a subset of entries (the correct classes, the row
maxima, some rows), which is where a branch is missing.

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
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache

import torch
import torch.nn.functional as F

from tutor import code_facts
from tutor.code_facts import changed_in_place, write_targets
from tutor.core import packcode, rewrites
from tutor.core.diagnosis import close, diagnosis
from tutor.core.quick import broadcast_shape
from tutor.pack.flow import gradient, tensor_of
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
    # What the message says the learner's code reads (the tensor it says stands in, the extra
    # factor or term): where two rewrites fit the numbers alike, one whose words are true of the
    # code is told.
    said: tuple[str, ...] = ()


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
    grad = gradient(tensor)
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
            # A rewrite whose words are false of the code comes after every one that is true.
            rank = err + (0.0 if says_true(candidate.said, code, grad) else 1e9)
            if err < off / 10 and (best is None or rank < best[0]):
                best = (rank, candidate)
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
    # The names the families of tutor/core/rewrites.py swap as pairs (None: `scope`): a
    # function's arguments, not its every local, whose pairs would be hundreds.
    pairs: dict | None = None
    # In a function that loops through time: its arguments' slices at the loop's step, by their
    # text (`hs[:, s]`), which stand in `scope` beside the names (`function_scope`).
    slices: frozenset[str] = frozenset()
    # A local of a function read where it was bound once -> the expression it holds.
    held: dict[str, ast.expr] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # a function's outputs, in the order it returns them

    def is_grad(self, name: str) -> bool:
        return tensor_of(name) in self.scope and name in self.scope

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
            broadcast_shape(ta.shape, tb.shape)
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
    for item in _new_rewrites(tree, ctx, seen):
        source, kind, message = item[:3]
        # Its own writes, not the solution's: no rewrite may change a tensor it did not copy.
        yield Candidate(kind, message, source, ctx.grad, changed_in_place(ast.parse(source)),
                        tuple(item[3]) if len(item) > 3 else (),
                        tuple(item[4]) if len(item) > 4 else ())


def _makers() -> list[Callable[[ast.Module, _Context], Iterator[tuple]]]:
    # When two rewrites fit equally well, the earlier (more telling) one is reported.
    return [
        _upstream_rewrites,
        _factor_rewrites,
        _own_output_rewrites,
        _related_swaps,
        _constant_rewrites,
        _activation_rewrites,
        _line_output_rewrites,
        _inline_swaps,
        _gradient_swaps,
        _term_rewrites,
        _statement_rewrites,
        _family_rewrites,
        _dropped_call_rewrites,
        _boundary_rewrites,
        _other_swaps,
        _extra_factor_rewrites,
        _extra_term_rewrites,
        _zeroed_argument_rewrites,
    ]


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
    pairs = ctx.scope if ctx.pairs is None else ctx.pairs
    yield from rewrites.swap_rewrites(tree, ctx.grad, pairs)
    yield from rewrites.constant_rewrites(tree, ctx.grad, pairs)
    yield from rewrites.root_rewrites(tree, ctx.grad)
    yield from rewrites.correction_rewrites(tree, ctx.grad)
    yield from rewrites.order_rewrites(tree, ctx.grad)
    yield from rewrites.unpack_rewrites(tree, ctx.grad)


def _new_rewrites(tree: ast.Module, ctx: _Context, seen: set[str]) -> Iterator[tuple]:
    """Each maker's rewrites of `tree`, every source once (`seen` holds those already tried)."""
    for make in _MAKERS:
        for item in make(tree, ctx):
            if item[0] not in seen:
                seen.add(item[0])
                yield item


def explain_function(step: Step, name: str, value: Tensor, ref: Tensor, inputs: dict,
                     call: Callable[[str], dict | None], start: Tensor | None = None,
                     pack: Pack | None = None, code: str = "",
                     confirm: Callable[[str], bool] | None = None) -> Diagnosis | None:
    """A function step's wrong output, matched against rewrites of its reference function.

    `call(source)` defines the rewritten function and calls it on copies of the case's inputs
    (the engine's way, behind the guard); `inputs` are those inputs, for the rewrites that need
    to know which names hold tensors and counts. With the `pack`, a gradient is also matched
    against the rewrites a line step's gradient is (`candidates`), made on the function's own
    names: the same slip is named the same way in a line step and inside a function; where two
    fit alike, one whose words are true of the learner's `code` is told, and only one that
    `confirm` finds right on another case too (where given).
    """
    if value.shape != ref.shape or not torch.isfinite(value).all():
        return None
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return None
    scope = {k: v for k, v in inputs.items() if isinstance(v, (Tensor, int))}
    if pack is not None and _gradient_name(name):
        scope = function_scope(step, inputs, scope) or scope
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
        made = (function_gradient_rewrites(pack, step, name, scope, inputs)
                if pack is not None and _gradient_name(name)
                else [(*r, ()) for r in function_rewrites(step.solution, tree, name, scope)])
        first = None
        for source, kind, message, said in made:
            produced = (call(source) or {}).get(name)
            if not isinstance(produced, Tensor) or produced.shape != ref.shape:
                continue
            produced = moved(produced)
            if (produced.isfinite().all() and close(value, produced)
                    and _distance(value, produced, ref) < off / 10):
                if confirm is not None and not confirm(source):
                    continue
                if says_true(said, code):
                    return diagnosis(kind, message)
                first = first or diagnosis(kind, message)
    finally:
        torch.set_num_threads(threads)
    return first


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


def _gradient_name(name: str) -> bool:
    """A function's output named as a gradient (`dxs`), as tutor.core.functions reads it."""
    return tensor_of(name) is not None


# (step, the case's sizes) -> the reference function's names when it returns.
_SCOPES: dict[tuple, dict] = {}


def function_scope(step: Step, inputs: dict, known: dict) -> dict:
    """The names of the reference function when it returns, called on copies of a case's
    inputs: its arguments, and its local tensors and counts (their last values, inside a loop
    the last step's). A line step's rewrites read and swap the tensors of its namespace; a
    function's read and swap these. Traced here: the reference is the pack's trusted code.
    {} where it cannot run."""
    import sys

    spec = step.function
    if spec is None:
        return {}
    key = (step.id, step.solution, tuple(sorted(
        (k, tuple(v.shape), str(v.dtype)) if isinstance(v, Tensor) else (k, v)
        for k, v in known.items())))
    if key in _SCOPES:
        return _SCOPES[key]
    ns: dict = {"torch": torch, "F": F, "math": math}
    args = {k: v.clone() if isinstance(v, Tensor) else v for k, v in inputs.items()}
    seen: dict = {}
    try:
        exec(packcode.compiled(step.solution, f"<{step.id} solution>"),  # noqa: S102
             _guarded(ns))  # the pack's own solution, behind the policy and the guard
        code = ns[spec.name].__code__

        def local(frame, event, _arg):
            if event == "return" and frame.f_code is code:
                seen.update(frame.f_locals)
            return local

        def tracer(frame, _event, _arg):
            return local if frame.f_code is code else None

        before = sys.gettrace()
        sys.settrace(tracer)
        try:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ns[spec.name](*[args[a] for a in spec.arguments])
        finally:
            sys.settrace(before)
    except Exception:  # noqa: BLE001 - a reference that cannot run here gives no names
        seen = {}
    # Only the shapes and kinds are kept (meta tensors, no values): the reference's locals hold
    # its answers, and nothing the worker keeps may (a child forked later inherits it).
    scope = {**known, **{k: v.to("meta") if isinstance(v, Tensor) else v for k, v in seen.items()
                         if isinstance(v, Tensor) or (type(v) is int)}}
    if len(_SCOPES) > 64:
        _SCOPES.clear()
    _SCOPES[key] = scope if seen else {}
    return _SCOPES[key]


def _time_slices(step: Step, tree: ast.Module, scope: dict) -> dict[str, Tensor]:
    """A function that loops through time reads its arguments one step at a time: each
    argument with the time axis of the step's `time` output, sliced at the loop's variable
    (`hs[:, s]`), by its text, with the shape one step has (its first step's values)."""
    spec = step.function
    if spec is None or spec.time is None:
        return {}
    name, axis = spec.time
    out = scope.get(name)
    loops = [n.target.id for n in ast.walk(tree) if isinstance(n, ast.For)
             and isinstance(n.target, ast.Name)]
    if not isinstance(out, Tensor) or out.dim() <= axis or not loops:
        return {}
    steps = out.shape[axis]
    found = {}
    for arg in spec.arguments:
        value = scope.get(arg)
        if isinstance(value, Tensor) and value.dim() > axis and value.shape[axis] == steps:
            text = f"{arg}[{', '.join([':'] * axis + [loops[0]])}]"
            found[text] = value.select(axis, 0)
    return found


def _shown_names(pack: Pack, step: Step, tree: ast.Module, scope: dict) -> dict[str, str]:
    """How a message names the reference function's own locals: by the expression they hold
    (`tc` is `torch.tanh(cs[:, s])`), where the step's text never shows the name. A name the
    template or the explanation shows, an argument, a forward tensor or a gradient of one keeps
    its name."""
    spec = step.function
    words = set(_WORDS.findall(f"{step.template} {step.explanation}")) | set(
        spec.arguments if spec else ())
    for line in pack.forward_lines:
        words |= {line.target, *line.operands}
    words |= {gradient(w) for w in list(words)}
    return {k: v for k, v in _held(tree, scope).items() if k not in words and len(v) <= 40}


def _held(tree: ast.Module, scope: dict) -> dict[str, str]:
    """Each local tensor bound once, by a plain assignment -> the expression it holds."""
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else [])
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name):
                    value = node.value if isinstance(node, ast.Assign) and t is sub else None
                    assigned.setdefault(sub.id, []).append(value)
    return {name: ast.unparse(values[0]) for name, values in assigned.items()
            if isinstance(scope.get(name), Tensor) and len(values) == 1
            and values[0] is not None}


_WORDS = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")

# (step, the names' shapes) -> a function's gradient rewrites, in order, each message with
# _OUTPUT where the output's name goes: the changed sources are the same for every output.
_GRADIENT_REWRITES: dict[tuple, list[tuple[str, str, str, tuple[str, ...]]]] = {}
_OUTPUT = "\x00output\x00"


def function_gradient_rewrites(pack: Pack, step: Step, name: str, scope: dict, inputs: dict
                               ) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """The rewrites a line step's gradient is matched against (`candidates`), made of a
    function's reference for one of its gradient outputs, on the function's own names
    (`function_scope`): a factor or a term left out or extra, one tensor where another belongs,
    a gate's function applied once more, with the families of `function_rewrites` (their
    pairs of the arguments, `inputs`)."""
    shapes = tuple(sorted((k, tuple(v.shape), str(v.dtype)) if isinstance(v, Tensor) else (k, v)
                          for k, v in scope.items()))
    key = (pack.id, step.id, step.solution, shapes)
    if key not in _GRADIENT_REWRITES:
        if len(_GRADIENT_REWRITES) > 16:
            _GRADIENT_REWRITES.clear()
        _GRADIENT_REWRITES[key] = _gradient_rewrites(pack, step, scope, inputs)
    return [(source, kind, message.replace(_OUTPUT, name), said)
            for source, kind, message, said in _GRADIENT_REWRITES[key]]


def _gradient_rewrites(pack: Pack, step: Step, scope: dict, inputs: dict
                       ) -> list[tuple[str, str, str, tuple[str, ...]]]:
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return []
    slices = _time_slices(step, tree, scope)
    scope = {**scope, **slices}
    ctx = _context(pack, step, _OUTPUT[1:], scope)
    ctx.grad = _OUTPUT
    # Inside a function every name is the function's own: a gradient is what its name says.
    ctx.forward = [k for k in ctx.forward if not _gradient_name(k)]
    ctx.related = [k for k in ctx.related if k in ctx.forward]
    ctx.local = locals_read(tree, scope)
    ctx.pairs = {k: v for k, v in inputs.items() if isinstance(v, (Tensor, int))}
    ctx.slices = frozenset(slices)
    ctx.outputs = tuple(step.function.outputs) if step.function else ()
    # A gate read off the function's arguments is still its line's output (`i = sigmoid(ai)`),
    # though the pre-activation is nowhere in the function.
    ctx.unary = {line.target: _substitute_name(_expr(line.source), _inputs(line, ctx)[0],
                                               line.target)
                 for line in _one_input_lines(ctx) if line.target in step.lines}
    shown = _shown_names(pack, step, tree, scope)
    ctx.held = {k: _expr(v) for k, v in _held(tree, scope).items()}
    _SLOTS.clear()
    seen = {ast.unparse(tree)}
    found: list[tuple[str, str, str, tuple[str, ...]]] = []
    for item in _new_rewrites(tree, ctx, seen):
        source, kind, message = item[:3]
        said = tuple(item[4]) if len(item) > 4 else ()
        for local, text in shown.items():
            message = message.replace(f"`{local}`", f"`{text}`")
            said = tuple(text if x == local else x for x in said)
        found.append((source, kind, message, said))
    return found


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
            exec(_compiled(source), _guarded(ns))
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
    try:
        from tutor.core.smallest import number, scaled, terms
    except ImportError:  # the student's wheel leaves it out (tutor/pack/student.py)
        return None

    grad = gradient(tensor)
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
    grads = {k for k in tensors if tensor_of(k) in tensors}
    forward = [k for k in scope if k in tensors and k not in grads and scope[k].is_floating_point()]
    upstream = {gradient(line.target) for line in lines}
    if step.upstream:
        upstream.add(gradient(step.upstream))
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
    return _Context(gradient(tensor), scope, upstream & tensors, related, forward, unary,
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


def _name(name: str) -> ast.expr:
    """A read of `name`, or of a slice the scope names by its text (`hs[:, s]`)."""
    if name.isidentifier():
        return ast.Name(id=name, ctx=ast.Load())
    return ast.parse(name, mode="eval").body


def _method(node: ast.expr, name: str) -> ast.Call:
    return ast.Call(ast.Attribute(node, name, ast.Load()), [], [])


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
        if ctx.is_grad(node.id) and ctx.compatible(node.id, tensor_of(node.id)):
            yield _renamed(tree, i, tensor_of(node.id),
                           f"Your {grad} is what the formula gives with the tensor "
                           f"`{tensor_of(node.id)}` where its gradient `{node.id}` belongs. "
                           f"Check each "
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


def _reads(tree: ast.Module, ctx: _Context) -> Iterator[tuple[int, str]]:
    """Each read of a tensor: a name, or a function's slice of an argument at the loop's step
    (`cs[:, s]`, `_Context.slices`), with its pre-order index and how the scope names it."""
    inside: set[int] = set()
    for i, node in _nodes(tree):
        if id(node) in inside:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            yield i, node.id
        elif ctx.slices and isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            text = ast.unparse(node)
            if text in ctx.slices:
                inside |= {id(n) for n in ast.walk(node)}
                yield i, text


def _swaps(tree: ast.Module, ctx: _Context, pool: list[str], with_grads: bool):
    for i, read in _reads(tree, ctx):
        if read not in ctx.forward:
            continue
        for other in pool:
            if ctx.compatible(read, other):
                yield (*_renamed(tree, i, other,
                                 f"Your {ctx.grad} is what the formula gives if `{other}` stands "
                                 f"where `{read}` should. Check which tensor each part of the "
                                 "local derivative is written in."), (), (other,))
        grad = gradient(read)
        if with_grads and grad != ctx.grad and ctx.compatible(read, grad):
            yield _renamed(tree, i, grad,
                           f"Your {ctx.grad} is what the formula gives with the gradient "
                           f"`{grad}` where the tensor `{read}` belongs. Check each name: a "
                           "gradient and its tensor differ only by the `d`.")


def _inline_swaps(tree: ast.Module, ctx: _Context):
    """A function's local read in several places, written out in one of them with one tensor
    for another (`torch.tanh(c_prev)` in one place where `tc = torch.tanh(cs[:, s])` is read)."""
    pool = [k for k in dict.fromkeys([*ctx.related, *sorted(ctx.slices)]) if k in ctx.forward]
    for local, held in ctx.held.items():
        places = [i for i, node in _loads(tree) if node.id == local]
        wrapped = ast.Module([ast.Expr(held)], [])
        if len(places) < 2 or len([r for _, r in _reads(wrapped, ctx) if r in ctx.forward]) != 1:
            continue  # read once, the swap in its own assignment says the same; or no one input
        for k, read in list(_reads(wrapped, ctx)):
            if read not in ctx.forward:
                continue
            for other in pool:
                if other == read or not ctx.compatible(read, other):
                    continue
                changed = _replace(wrapped, k, lambda _n, o=other: _name(o))
                for i in places:
                    yield (_replace(tree, i, lambda _n, c=changed: _expr(c)), "derived",
                           f"Your {ctx.grad} is what the formula gives if `{other}` stands "
                           f"where `{read}` should, in one of the places that reads "
                           f"`{local}`. Check which tensor each part of the local derivative "
                           "is written in.", (), (other,))
        _SLOTS.pop(id(wrapped), None)


def _gradient_swaps(tree: ast.Module, ctx: _Context):
    """In a function: one gradient read where another belongs (`dhs[:, s]` where the step's
    whole `dh` belongs)."""
    if not ctx.slices:
        return
    grads = [k for k, v in ctx.scope.items() if isinstance(v, Tensor)
             and _gradient_name(k) and k != ctx.grad]
    for i, read in _reads(tree, ctx):
        if read not in grads:
            continue
        for other in grads:
            if other != read and ctx.compatible(read, other):
                yield (*_renamed(tree, i, other,
                                 f"Your {ctx.grad} is what the formula gives with the gradient "
                                 f"`{other}` where `{read}` belongs. Check which gradient "
                                 "arrives at the output of this line."), (), (other,))


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


# Only where the formula itself has `n - 1` is there a variance to speak of: said of a mean's
# `n`, Bessel's correction would send the learner to a variance the line does not have.
_COUNTS = ("Check which count each factor comes from: the mean divides by n, the unbiased "
           "variance by n - 1.")
_COUNT = "Count again how many entries the average runs over."


def _constant_rewrites(tree: ast.Module, ctx: _Context):
    """`n` for `n - 1` and back, an exponent one off, a constant fraction upside down."""
    grad = ctx.grad
    for i, node in _nodes(tree):
        if isinstance(node, ast.Name) and node.id == "n" and isinstance(node.ctx, ast.Load):
            yield (
                _replace(tree, i, lambda _n: ast.BinOp(_name("n"), ast.Sub(), ast.Constant(1))),
                "derived",
                f"Your {grad} matches the formula with `n - 1` where `n` belongs. {_COUNT}",
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


def says_true(said: tuple[str, ...], code: str, grad: str | None = None) -> bool:
    """Whether the code reads what a message says it reads: each name among the names read to
    make `grad` (or anywhere, without `grad`), each other expression written in the code
    (spaces aside). Without the code, everything is taken as true."""
    if not said or not code:
        return True
    names = reads_into(code, grad) if grad else code_facts.of(code).read
    flat = "".join(code.split())
    return all((x in names) if x.isidentifier() else bool(re.search(
        r"(?<![A-Za-z0-9_.])" + re.escape("".join(x.split())), flat)) for x in said)


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


# --- slips a line's derivative does not have: a factor, a term, a function too many ------------


def _chain(node: ast.AST) -> list[ast.expr]:
    """The factors of a product written as a chain of `*` (`dh * tc * o * (1 - o)`)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _chain(node.left) + _chain(node.right)
    return [node]  # type: ignore[list-item]


def _product(factors: list[ast.expr]) -> ast.expr:
    out = copy.deepcopy(factors[0])
    for f in factors[1:]:
        out = ast.BinOp(out, ast.Mult(), copy.deepcopy(f))
    return out


def _products(tree: ast.Module) -> Iterator[tuple[int, ast.BinOp]]:
    """Each whole product of the code (a chain of `*` inside no other), by pre-order index."""
    inner = set()
    for i, node in _nodes(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and id(node) not in inner:
            inner |= {id(n) for n in ast.walk(node) if n is not node
                      and isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult)}
            yield i, node


def _inputs(line, ctx: _Context) -> list[str]:
    """The tensors a forward line reads: its operands that other lines make."""
    made = {ln.target for ln in ctx.pack_lines}
    return [t for t in line.operands if t in made]


def _one_input_lines(ctx: _Context) -> list:
    """Forward lines of one input whose output the scope holds (`o = torch.sigmoid(ao)`)."""
    return [line for line in ctx.pack_lines if isinstance(ctx.scope.get(line.target), Tensor)
            and len(_inputs(line, ctx)) == 1]


def _slope(name: str, line_source: str) -> tuple[str, ast.expr] | None:
    """The local derivative of a one-operand line, written with its output, as the lesson's
    solutions write it: `s * (1 - s)` for a sigmoid, `1 - t**2` for a tanh."""
    if "sigmoid" in line_source:
        return "sigmoid", _expr(f"{name} * (1 - {name})")
    if "tanh" in line_source:
        return "tanh", _expr(f"(1 - {name} ** 2)")
    return None


def _is_one_minus(node: ast.AST, name: str, square: bool) -> bool:
    """`1 - name` (or, with `square`, `1 - name**2` / `1 - name*name`)."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)
            and number(node.left) == 1):
        return False
    r = node.right
    if not square:
        return isinstance(r, ast.Name) and r.id == name
    if isinstance(r, ast.BinOp) and isinstance(r.op, ast.Pow):
        return isinstance(r.left, ast.Name) and r.left.id == name and number(r.right) == 2
    return (isinstance(r, ast.BinOp) and isinstance(r.op, ast.Mult)
            and all(isinstance(x, ast.Name) and x.id == name for x in (r.left, r.right)))


def _activation_rewrites(tree: ast.Module, ctx: _Context):
    """A gate's slope written as the other activation's: `1 - o**2` where `o` is a sigmoid's
    output, `g * (1 - g)` where `g` is a tanh's."""
    kinds = {}
    for line in _one_input_lines(ctx):
        slope = _slope(line.target, line.source)
        if slope:
            kinds[line.target] = (slope[0], line.source)
    for i, node in _products(tree):
        factors = _chain(node)
        for name, (kind, source) in kinds.items():
            other = "tanh" if kind == "sigmoid" else "sigmoid"
            swapped = _slope(name, other)
            assert swapped is not None
            if kind == "sigmoid":
                at = [k for k, f in enumerate(factors) if _is_one_minus(f, name, False)]
                own = [k for k, f in enumerate(factors) if isinstance(f, ast.Name) and f.id == name]
                if not at or not own:
                    continue
                new = [f for k, f in enumerate(factors) if k != own[0]]
                new[new.index(factors[at[0]])] = swapped[1]
            else:
                at = [k for k, f in enumerate(factors) if _is_one_minus(f, name, True)]
                if not at:
                    continue
                new = factors[:at[0]] + [swapped[1]] + factors[at[0] + 1:]
            yield (_replace(tree, i, lambda _n, new=new: _product(new)), "derived",
                   f"Your {ctx.grad} matches the formula with the slope of a {other}, "
                   f"`{ast.unparse(swapped[1])}`, for `{name}`. `{name}` is a {kind}'s output "
                   f"(`{source}`): its slope is the {kind}'s, written with `{name}`.")


def _factors_of_lines(ctx: _Context) -> list[tuple[str, str]]:
    """Factors another line's backward step multiplies by, each with what it is: the slope of
    a one-operand line, and the tensors on the step's lines and next to them."""
    out = []
    for line in _one_input_lines(ctx):
        slope = _slope(line.target, line.source)
        if slope:
            out.append((ast.unparse(slope[1]),
                        f": the slope of `{line.source}`, which that line's own step "
                        "multiplies by"))
    out += [(t, "") for t in ctx.related]
    return out


def _extra_factor_rewrites(tree: ast.Module, ctx: _Context):
    """A product with one factor too many: another line's slope or one of its tensors (the
    next line's derivative applied a line early)."""
    extras = _factors_of_lines(ctx)
    for i, node in _products(tree):
        # A derivative's product: one of its factors is a gradient, whose shape an extra
        # factor has.
        grads = [n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                 and (n.id in ctx.upstream or _gradient_name(n.id))]
        if not grads:
            continue
        for text, why in extras:
            extra = _expr(text)
            names = [n.id for n in ast.walk(extra) if isinstance(n, ast.Name)]
            if not all(ctx.compatible(grads[0], x) for x in names):
                continue
            yield (_replace(tree, i, lambda n_, e=extra: ast.BinOp(n_, ast.Mult(), e)),
                   "scale",  # a factor too many, the closest catalogued kind
                   f"Your {ctx.grad} matches the formula with an extra factor, `{text}`, in the "
                   f"product of {_listed(node, ctx)}{why}. Each line's backward step multiplies "
                   "by that line's own local derivative only: check which factors belong here.",
                   (), tuple(dict.fromkeys(n.id for n in ast.walk(extra)
                                           if isinstance(n, ast.Name))))


def _extra_term_rewrites(tree: ast.Module, ctx: _Context):
    """An assignment with a gradient added that does not reach it: another gradient as an
    extra term (`dh_prev = difgo @ Wh.T + dh`)."""
    grads = [k for k, v in ctx.scope.items() if isinstance(v, Tensor) and v.is_floating_point()
             and (k in ctx.upstream or _gradient_name(k) or ctx.is_grad(k))]
    returned = [node.value.elts for node in ast.walk(tree) if isinstance(node, ast.Return)
                and isinstance(node.value, ast.Tuple)]
    for elts in returned:
        for k, elt in enumerate(elts):
            read = {n.id for n in ast.walk(elt) if isinstance(n, ast.Name)}
            where = (f"`{ctx.outputs[k]}`" if len(ctx.outputs) == len(elts)
                     else f"`{ast.unparse(elt)}`")
            index = next(i for i, n in _nodes(tree) if n is elt)
            for g in grads:
                if g not in read:
                    yield (_replace(tree, index, lambda n_, g=g: ast.BinOp(n_, ast.Add(),
                                                                            _name(g))),
                           "derived",
                           f"Your {ctx.grad} matches the formula with an extra term, `{g}`, "
                           f"added where {where} is computed. A gradient is the sum over the "
                           f"paths from its tensor to the loss, each once: `{g}` is no such "
                           "path here.", (), (g,))
    for i, node in _nodes(tree):
        if not isinstance(node, (ast.Assign, ast.AugAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        written = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        read = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        if not all(isinstance(t, ast.Name) for t in targets):
            continue  # a slice or several names: the shape of what is written is not known
        # What is written has the shape of its name, or of its tensor where it is a gradient
        # the step makes (`dh_prev` of `h_prev`).
        shaped = [t.id if t.id in ctx.scope else t.id[1:] for t in targets]
        for g in grads:
            if g in written or g in read or not all(
                    ctx.compatible(t, g) for t in shaped if t in ctx.scope):
                continue
            value = ast.BinOp(copy.deepcopy(node.value), ast.Add(), _name(g))

            def added(n_, v=value):
                new = copy.copy(n_)
                new.value = v
                return new

            yield (_replace(tree, i, added), "derived",
                   f"Your {ctx.grad} matches the formula with an extra term, `{g}`, added where "
                   f"{_targets(node)} is computed. A gradient is the sum over the paths from its "
                   f"tensor to the loss, each once: `{g}` is no such path here.", (), (g,))


def _listed(node: ast.AST, ctx: _Context) -> str:
    """A product's factors as its code writes them (`dh` and `torch.tanh(c)`), or the tensors
    it reads where a factor is long."""
    factors = [ast.unparse(f) for f in _chain(node)]
    if any(len(f) > 30 for f in factors):
        factors = _tensor_names(node, ctx) or ["constants"]
    named = [f"`{x}`" for x in factors]
    return named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]


def _targets(node: ast.Assign | ast.AugAssign) -> str:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return " and ".join(f"`{ast.unparse(t)}`" for t in targets)


def _line_output_rewrites(tree: ast.Module, ctx: _Context):
    """A line's output where only a part of the line belongs: `h` for the `torch.tanh(c)` of
    `h = o * torch.tanh(c)`, the gate already applied."""
    parts: dict[str, list[int]] = {}
    for i, node in _nodes(tree):
        if isinstance(node, ast.Call):
            parts.setdefault(ast.unparse(node), []).append(i)
    for line in ctx.pack_lines:
        if not isinstance(ctx.scope.get(line.target), Tensor):
            continue
        made = _expr(line.source)
        if isinstance(made, ast.Call):
            continue  # the line is that one call: its output is the part itself
        for sub in ast.walk(made):
            text = ast.unparse(sub) if isinstance(sub, ast.Call) else None
            if text is None or text not in parts:
                continue
            for i in parts[text]:
                copied = _method(_name(line.target), "clone")
                yield (_replace(tree, i, lambda _n, e=copied: e), "derived",
                       f"Your {ctx.grad} matches the formula with `{line.target}` where `{text}` "
                       f"belongs: `{line.target}` is all of `{ast.unparse(made)}` "
                       f"(`{line.source}`), not that part of it alone.", (), (line.target,))


def _zeroed_argument_rewrites(tree: ast.Module, ctx: _Context):
    """In a function: an argument taken as zeros wherever it is read (a start state of zeros
    in place of the one passed in), which only a case where it is not zero shows."""
    if not ctx.pairs:
        return
    loads: dict[str, list[int]] = {}
    for i, node in _loads(tree):
        if isinstance(ctx.pairs.get(node.id), Tensor) and ctx.pairs[node.id].is_floating_point():
            loads.setdefault(node.id, []).append(i)
    for name, places in loads.items():
        yield (_replace_all(tree, places, _call("torch.zeros_like", _name(name))), "derived",
               f"Your {ctx.grad} matches the computation with `{name}` taken as zeros wherever "
               f"it is read: the function must use the `{name}` it is given.")


_DROPPABLE = {"softmax", "log_softmax", "sigmoid", "tanh", "exp", "log", "relu", "sqrt"}


def _dropped_call_rewrites(tree: ast.Module, ctx: _Context):
    """A function of the formula left out: `logits` where `F.softmax(logits, -1)` belongs."""
    for i, node in _nodes(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _DROPPABLE):
            continue
        module = isinstance(node.func.value, ast.Name) and node.func.value.id in (
            "torch", "F", "nn", "functional")
        inner = node.args[0] if module and node.args else (node.func.value if not module
                                                            else None)
        if inner is None:
            continue
        # A copy: the rewrite's own updates in place must not reach the tensor it reads.
        copied = _method(copy.deepcopy(inner), "clone")
        yield (_replace(tree, i, lambda _n, e=copied: e), "derived",
               f"Your {ctx.grad} matches the formula with `{ast.unparse(inner)}` where its "
               f"{node.func.attr} belongs (`{ast.unparse(node)}`): the {node.func.attr} is left "
               "out. Check what the forward pass applied to it before the loss read it.")


_BOUNDARY = {ast.GtE: ast.Gt, ast.Gt: ast.GtE, ast.LtE: ast.Lt, ast.Lt: ast.LtE}


def _boundary_rewrites(tree: ast.Module, ctx: _Context):
    """A mask of the forward pass recomputed with its comparison off at the boundary:
    `(Yb > 0)` where the line has `Yb >= 0`, so the entries equal to the bound drop out."""
    for line in ctx.pack_lines:
        if line.target not in ctx.scope:
            continue
        made = _expr(line.source)
        compares = [c for c in ast.walk(made) if isinstance(c, ast.Compare)
                    and len(c.ops) == 1 and type(c.ops[0]) in _BOUNDARY]
        if not compares:
            continue
        loads = [i for i, n in _loads(tree) if n.id == line.target]
        if not loads:
            continue
        was = ast.unparse(compares[0])
        compares[0].ops = [_BOUNDARY[type(compares[0].ops[0])]()]
        now = ast.unparse(compares[0])
        yield (_replace_all(tree, loads, made), "derived",
               f"Your {ctx.grad} matches the formula with `{line.target}` made with `{now}` "
               f"where the forward line has `{was}` (`{line.source}`): the entries exactly at "
               "the bound fall out. Check which entries the forward pass kept.")


def _evaluate(candidate: Candidate, scope: dict) -> Tensor | None:
    """Run one rewrite on copies of what it writes; anything that fails simply matches nothing."""
    ns = dict(scope)
    for name in candidate.writes:
        if isinstance(ns.get(name), Tensor):
            ns[name] = ns[name].clone()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(_compiled(candidate.source), _guarded(ns))  # a rewrite of the pack's solution
    except Exception:  # noqa: BLE001 - a rewrite that cannot run here is no candidate
        return None
    out = ns.get(candidate.target)
    return out if isinstance(out, Tensor) and out.is_floating_point() else None


_CODE: dict[str, object] = {}


def _compiled(source: str):
    """A rewrite of the pack's solution, run in a namespace that `_guarded` gave the sandbox's
    builtins. The solution itself passed the learner's rules when the lesson was built
    (packcode.check), and a rewrite only moves, swaps or changes what it already holds, with
    the tutor's own words: checking each of hundreds of rewrites again would spend the tutor's
    time budget on what cannot have changed."""
    if source not in _CODE:
        _CODE[source] = compile(source, "<derived candidate>", "exec")
    return _CODE[source]


def _guarded(ns: dict) -> dict:
    """`ns` with the sandbox's guard and builtins, for `_compiled` code."""
    for k, v in packcode.scope().items():
        ns.setdefault(k, v)
    return ns


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
    # A slice with no bounds (`x[:, 0]`) takes every row: it skips none.
    return any(isinstance(node, (ast.For, ast.While, ast.comprehension))
               or (isinstance(node, ast.Slice) and (node.lower or node.upper or node.step))
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
    """Right up to a factor that differs from row to row, or from column to column (for a
    tensor of more dimensions: from one index of its first dimension to the next)."""
    if value.dim() > 2 and value.shape[0] > 1:
        return _per_row(grad, value.reshape(value.shape[0], -1), ref.reshape(ref.shape[0], -1),
                        scope)
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


def _per_row(grad: str, v: Tensor, r: Tensor, scope: dict) -> Diagnosis | None:
    """A tensor of three or more dimensions, flattened to rows by its first: right up to a
    factor of its own for each row."""
    v, r = v.detach().double().cpu(), r.detach().double().cpu()
    norm = (r * r).sum(1, keepdim=True)
    if int((norm > 0).sum()) < 2:
        return None
    factor = torch.where(norm > 0, (v * r).sum(1, keepdim=True) / norm.clamp_min(1e-300),
                         torch.zeros_like(norm))
    live = factor[norm > 0]
    if float(live.max() - live.min()) <= 1e-3 * float(live.abs().max()) \
            or not close(v, factor * r):
        return None
    named = _named_factor(factor, scope) or _counted_factor(factor, scope)
    return diagnosis(
        "scale",
        f"Each row of your {grad} (each index of its first dimension) is the right gradient "
        f"times a number of its own (the factors differ from row to row){named}. A factor "
        "with one value per row is missing or extra.")


def _counted_factor(factor: Tensor, scope: dict) -> str:
    """Say which count per row the factor follows, if any: one over the entries a 0/1 tensor
    of the namespace keeps in each row (a mean per row where one mean over all of them
    belongs), or that count itself."""
    f = factor.flatten().double()
    live = f != 0
    for name, t in sorted(scope.items()):
        if not isinstance(t, Tensor) or t.dim() < 2 or t.shape[0] != f.numel() \
                or tensor_of(name) is not None or not bool(((t == 0) | (t == 1)).all()):
            continue
        counts = t.detach().reshape(t.shape[0], -1).double().cpu().sum(1)
        if not bool((counts[live] > 0).all()):
            continue
        for power, what in ((1, "one over"), (-1, "")):
            ratio = f[live] * counts[live] ** power
            if float(ratio.max() - ratio.min()) <= 1e-4 * float(ratio.abs().max()):
                said = f"{what} the count of `{name}` in that row" if what else \
                    f"the count of `{name}` in that row"
                return (f": each is {said} (`{name}.sum(1)`), up to one constant, as if a "
                        f"mean were taken per row where the loss takes one mean over all "
                        f"the entries `{name}` keeps")
    return ""


def _named_factor(factor: Tensor, scope: dict) -> str:
    """Say which tensor of the namespace the per-row (or per-column) factor is, if any."""
    flat = factor.flatten()
    for name, t in scope.items():
        if not (isinstance(t, Tensor) and t.is_floating_point()) or t.numel() != flat.numel():
            continue
        if t.dim() > 2 or tensor_of(name) is not None:
            continue
        tt = t.detach().double().cpu().flatten()
        if close(flat, tt):
            return f": exactly the matching entries of `{name}`, one too many"
        if bool((tt != 0).all()) and close(flat, 1 / tt):
            return f": exactly one over the matching entries of `{name}`, a factor `{name}` short"
    return ""


# Every maker a line step's gradient is matched against, in the order tried.
_MAKERS = _makers()
