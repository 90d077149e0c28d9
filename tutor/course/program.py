"""A submission as the program the kernel ran, and the code in it that answers one step.

A learner's notebook is a program: its cells run in order, each stopping at its first error while
the next cell still runs. Whatever the layout (answers above the exercise's comment, one
statement per cell, two attempts in a cell, the whole gradient in one late line), what the
notebook computes for a gradient is fixed by that order, so the grade reads it from there:

- `text` is the program itself, for the tutor's namespace (each cell in a `try`). The value of a
  gradient the learner compared is the value at their last comparison: the learner stood behind
  that one, whatever the name was used for afterwards.
- `answer` is one step's own code, found by following what the compared value reads back through
  the program: every statement it needs, up to the gradients the step is given (which the check
  provides, as for any step) and the lesson's own tensors. That is code the check can hold to the
  line's rule and diagnose, since it is exactly the learner's code for this gradient.

Nothing here runs code; no torch.
"""

from __future__ import annotations

import ast
import builtins
import copy
import sys
import textwrap
from dataclasses import dataclass, field
from functools import lru_cache

from tutor.code_facts import (
    ATTRIBUTE_DICT,
    LESSON_TEXT,
    UNAVAILABLE,
    AutogradReads,
    bound,
    read,
    written,
)
from tutor.pack.flow import gradients
from tutor.pack.model import Pack, Step
from tutor.sandbox.allowlist import IMPORTABLE, importable
from tutor.sandbox.policy import inspect

# Names the tutor's namespace or Python itself gives: a read of one is never followed.
_BUILTINS = frozenset(dir(builtins)) | {"torch", "F", "nn", "math", "np"}


@dataclass
class Line:
    """One top-level statement of the program: its text, what it writes and reads, whether it
    changes something already held (`+=`, `x[i] = `, `x.add_()`), and the gradients it compares
    (a comparison runs nothing in the program: it marks what the learner stood behind)."""

    source: str
    writes: set[str]
    reads: set[str]
    augmented: bool
    compares: set[str] = field(default_factory=set)


@dataclass
class Program:
    """The submission's code up to one exercise, cell by cell, as the tutor's names."""

    cells: list[list[Line]]
    # What the exercise's own cells write (not the exercises before it): a step graded by the
    # whole program's values must be answered there, not by an earlier exercise's code.
    written_here: set[str] = field(default_factory=set)
    # Whether each cell is the exercise's own (not an earlier exercise's): what a trace may
    # take a step's answer from (tutor/core/trace.py). Empty: every cell is.
    own: list[bool] = field(default_factory=list)
    # The notebook's cells up to the exercise as its own frame runs them (`own_source`): its own
    # data, parameters and forward pass, for a trace that finds the lesson's tensors among its
    # values (tutor/core/frame.py), each with whether it is the exercise's own.
    whole: list[tuple[bool, str]] = field(default_factory=list)

    def traced_cells(self) -> list[tuple[bool, str]]:
        """The cells as a trace runs them: each one's code (comparisons left out: they run
        nothing in the program) and whether it is the exercise's own."""
        own = self.own or [True] * len(self.cells)
        out = []
        for cell, mine in zip(self.cells, own, strict=False):
            text = "\n".join(line.source for line in cell if line.source.strip())
            if text.strip():
                out.append((mine, text + "\n"))
        return out

    @property
    def lines(self) -> list[Line]:
        return [line for cell in self.cells for line in cell]

    @property
    def checked_lines(self) -> list[Line]:
        """The lines a step's own code is cut from: not those only a trace may run (a `.grad`
        read), which a check refuses."""
        return [line for line in self.lines if not _traced_only(line.source)]

    @property
    def written(self) -> set[str]:
        """Every name the program writes."""
        return set().union(*(line.writes for line in self.lines))

    def text(self) -> str:
        """The program for the tutor's namespace, each cell in a `try` as a kernel runs it; a
        compared gradient ends as its value where it was last compared."""
        blocks = []
        stood: list[str] = []
        for cell in self.cells:
            body = []
            for line in cell:
                if _traced_only(line.source):
                    continue  # it reads autograd's `.grad`: only a trace may run it
                if line.compares:
                    for name in sorted(line.compares):
                        body.append(f"stood_{name} = {name}.clone() if isinstance({name}, "
                                    f"torch.Tensor) else {name}")
                        stood.append(name)
                else:
                    body.append(line.source)
            if body:
                blocks.append("try:\n" + textwrap.indent("\n".join(body), "    ")
                              + "\nexcept Exception:\n    pass")
        for name in dict.fromkeys(stood):
            blocks.append(f"try:\n    {name} = stood_{name}\nexcept Exception:\n    pass")
        return "\n".join(blocks) + "\n" if blocks else ""

    def _first_branch(self, pack: Pack, step: Step, name: str) -> int | None:
        """The statement that starts gradient `name` as the step of `step`'s exercise that
        starts it asks (its share, written fresh where that step's gradients stand), or None."""
        lines = self.checked_lines
        flow = pack.flow
        starter = flow.starter(name, step.exercise)
        if starter is None:
            return None
        own = flow.completes(starter)
        stand = max(_stand(lines, g) for g in own)
        j = next((j for j in range(stand - 1, -1, -1) if name in lines[j].writes), None)
        if j is None or lines[j].augmented or name in lines[j].reads \
                or lines[j].reads & (flow.later(starter) | own) \
                or not lines[j].reads & gradients(pack.step(starter).lines):
            return None  # not its share: that is built from what the starting line is given
        return j

    def answer(self, pack: Pack, step: Step, lesson: set[str],
               data: frozenset[str] = frozenset()) -> str | None:
        """The step's own code: the statements its gradients (and the first branches it starts)
        need, in the program's order, from where the learner last compared them back to the
        gradients it is given. None when the program never writes one of them. A statement
        that computes from the notebook's own data (`data`: `vocab_size = len(itos)`) is never
        one: the tutor's namespace has what it computes."""
        lines = self.checked_lines
        flow = pack.flow
        order = {s.id: i for i, s in enumerate(pack.steps)}
        grads = flow.all
        own = flow.completes(step)
        started_before = flow.adds(step)
        later = flow.later(step)
        stops = (grads - own - flow.starts(step)) | lesson | _BUILTINS
        upstream = flow.given(step)
        taken: set[int] = set()
        touched: set[str] = set()
        claimed = {name: self._first_branch(pack, step, name) for name in started_before}

        def last_def(name: str, before: int) -> int | None:
            return next((j for j in range(before - 1, -1, -1) if name in lines[j].writes), None)

        def follow(name: str, before: int, into: set[int]) -> None:
            j = last_def(name, before)
            if j is None or j in into or (lines[j].reads & data and not lines[j].writes & grads):
                return
            into.add(j)
            for r in lines[j].reads:
                if r in stops or (r in started_before and last_def(r, j) == claimed.get(r)):
                    # The first branch an earlier step started is that step's: the check
                    # provides it, as it provides every gradient given to this step.
                    touched.add(r)
                    continue
                follow(r, j, into)

        stand = 0
        for name in sorted(own):
            # Where the learner compared it, latest first; then each value it took.
            ends = [i for i in range(len(lines) - 1, -1, -1) if name in lines[i].compares] + [
                i + 1 for i in range(len(lines) - 1, -1, -1) if name in lines[i].writes]
            chosen, best = None, (-1, -1)
            for end in ends:
                # Where the same name answers two exercises in one program (exercise 1's
                # dlogits and exercise 2's), the answer to this step is the one computed from
                # the gradients this step is given, else from the branch it completes.
                trial: set[int] = set()
                touched.clear()
                if last_def(name, end) is None:
                    continue
                follow(name, end, trial)
                given = upstream - {name} if name in started_before else upstream
                if name in started_before and last_def(name, end) == claimed[name]:
                    continue  # only the first branch an earlier step started: not this step's
                # Else the one built from the gradients nearest this step (exercise 1's
                # dhprebn from dbndiff2, not exercise 3's from dhpreact).
                near = max((order[flow.completer(g)] for g in touched & grads
                            if flow.completer(g) is not None), default=-1)
                score = (2, 0) if (not given or touched & given) else (
                    int(bool(touched & started_before)), near)
                if score > best:
                    chosen, best = (end, trial), score
                if score[0] == 2:
                    break
            if chosen is None:
                return None
            stand = max(stand, chosen[0])
            taken |= chosen[1]
        for name in sorted(flow.starts(step)):
            # The latest statement that starts it fresh from this step's own share: a later one
            # that writes it from a later step's gradient (`dcounts = dcounts_sum...`, an `=`
            # where `+=` belonged) is that step's slip, not a missing first branch here.
            j = last_def(name, stand)
            while j is not None and not lines[j].augmented and name not in lines[j].reads \
                    and lines[j].reads & later:
                j = last_def(name, j)
            if j is None or lines[j].augmented or name in lines[j].reads \
                    or lines[j].reads & later:
                continue  # no first branch of its own here: the closing step writes it whole
            follow(name, j + 1, taken)
        return "\n".join(lines[j].source for j in sorted(taken)) + "\n" if taken else None


def import_bindings(node: ast.stmt) -> str | None:
    """A notebook's import as what it binds in the sandbox (`from types import SimpleNamespace`
    -> `SimpleNamespace = types.SimpleNamespace`, `from math import sqrt, pi` -> `sqrt, pi =
    math.sqrt, math.pi`), one statement; None where it binds nothing new or names a module the
    sandbox does not have."""
    pairs: list[tuple[str, str]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            held = IMPORTABLE.get(alias.name)
            if held is None:
                return None
            bound = alias.asname or alias.name.split(".")[0]
            if alias.asname and bound != held:
                pairs.append((bound, held))
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
        for alias in node.names:
            whole = f"{node.module}.{alias.name}"
            if whole in IMPORTABLE:  # `from torch.nn import functional as F`
                value = IMPORTABLE[whole]
            elif node.module in IMPORTABLE and importable(node.module, alias.name):
                value = f"{IMPORTABLE[node.module]}.{alias.name}"
            else:
                return None
            bound = alias.asname or alias.name
            if bound != value:
                pairs.append((bound, value))
    if not pairs:
        return None
    return f"{', '.join(b for b, _ in pairs)} = {', '.join(v for _, v in pairs)}"


def _unavailable(node: ast.stmt) -> str | None:
    """An import the sandbox does not hold all of, as what it binds: what the sandbox holds as
    itself, the rest bound to what says so when used (`sandbox/objects.py` `Unavailable`), so
    that `from typing import Dict` leaves annotations working and `import numpy as np` fails
    only where `np` is used, as the rest of the notebook runs."""
    pairs: list[tuple[str, str]] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            bound = alias.asname or alias.name.split(".")[0]
            if alias.name in IMPORTABLE:
                if alias.asname and bound != IMPORTABLE[alias.name]:
                    pairs.append((bound, IMPORTABLE[alias.name]))
                continue  # `import torch.nn` binds `torch`, which is there
            pairs.append((bound, f"{UNAVAILABLE}({(alias.name if alias.asname else bound)!r})"))
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
        for alias in node.names:
            if alias.name == "*":
                continue
            bound, whole = alias.asname or alias.name, f"{node.module}.{alias.name}"
            if whole in IMPORTABLE:
                value = IMPORTABLE[whole]
            elif node.module in IMPORTABLE and importable(node.module, alias.name):
                value = f"{IMPORTABLE[node.module]}.{alias.name}"
            else:
                value = f"{UNAVAILABLE}({whole!r})"
            if bound != value:
                pairs.append((bound, value))
    if not pairs:
        return None
    return f"{', '.join(b for b, _ in pairs)} = {', '.join(v for _, v in pairs)}"


def reads_autograd_only(node: ast.stmt) -> bool:
    """Whether the sandbox refuses `node` only for the `.grad` it reads (`dstate =
    state.grad`, where a lesson gives `dstate`): a traced program runs it with autograd's
    gradient there, which is never the learner's own work; nothing else does."""
    try:
        changed = AutogradReads().visit(copy.deepcopy(node))
        module = ast.fix_missing_locations(ast.Module([changed], []))
    except (RecursionError, MemoryError):
        return False
    return inspect(module) is None


@lru_cache(maxsize=4096)
def _traced_only(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return inspect(tree) is not None and all(reads_autograd_only(n) for n in tree.body)


def _stand(lines: list[Line], name: str) -> int:
    """Where the learner last stood behind `name`: their last comparison of it, else the end."""
    return next((i for i in range(len(lines) - 1, -1, -1) if name in lines[i].compares),
                len(lines))


def first_line(node: ast.stmt) -> int:
    """Where a statement starts: a decorated function or class at its first decorator."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def line_of(node: ast.stmt, text: str, compares: set[str] | None = None) -> Line:
    """A statement of a cell's text as a Line."""
    rows = text.split("\n")
    source = textwrap.dedent("\n".join(rows[first_line(node) - 1:node.end_lineno]))
    writes = written(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        writes = {node.name}  # what its body assigns stays inside it
    augmented = isinstance(node, ast.AugAssign) or any(
        isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) for n in ast.walk(node))
    value = node.value if isinstance(node, ast.Expr) else None
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
            and isinstance(value.func.value, ast.Name) and value.func.attr.endswith("_")):
        # `dC.index_add_(...)`: torch's in-place methods end in an underscore.
        writes.add(value.func.value.id)
        augmented = True
    reads = read(node)
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        reads.add(node.target.id)
    if isinstance(node, (ast.For, ast.While, ast.If, ast.With)):
        # A loop's own counters and temporaries (`for k ...: ix = Xb[k, j]`) are not read from
        # outside it; what it only subscripts into (`dC[ix] += ...`) is.
        reads -= bound(node)
    return Line(source, writes, reads, augmented, compares or set())


def own_source(source: str) -> str:
    """A notebook cell as its own frame runs it (tutor/core/frame.py): its imports as what they
    bind in the sandbox, and its reads of its data file (`open('names.txt').read()`, `with open(
    ...) as f`, `Path(...).read_text()`) as reads of the lesson's data, which the sandbox gives
    as text (`LESSON_TEXT`): the sandbox opens no file."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return source
    body: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            binding = import_bindings(node)
            if binding is None:
                binding = _unavailable(node)
            if binding is not None:
                body += ast.parse(binding).body
            continue
        if _own_autograd(node):
            continue
        node = _attribute_dict(node) or node
        for made in _DataReads().visit_many(node):
            out = _Unmarked().visit(made)
            body += out if isinstance(out, list) else [out]
    try:
        return ast.unparse(ast.fix_missing_locations(ast.Module(body, [])))
    except Exception:  # noqa: BLE001 - a cell it cannot rewrite runs as it was written
        return source


_ITEM_ALIASES = {"__getattr__": "__getitem__", "__setattr__": "__setitem__",
                 "__delattr__": "__delitem__"}


def _attribute_dict(node: ast.stmt) -> ast.stmt | None:
    """`class Grads(dict): __getattr__ = dict.__getitem__; __setattr__ = dict.__setitem__`, a
    dict whose entries are attributes too, as the sandbox's own such dict (sandbox/objects.py
    `AttributeDict`): the class's body reaches into Python's own methods, which the sandbox
    keeps closed, to say only that."""
    if not isinstance(node, ast.ClassDef) or node.decorator_list or node.keywords \
            or [ast.unparse(b) for b in node.bases] != ["dict"]:
        return None
    body = [n for n in node.body if not (isinstance(n, ast.Expr)
                                         and isinstance(n.value, ast.Constant)
                                         or isinstance(n, ast.Pass))]
    if not body or not all(
            isinstance(n, ast.Assign) and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name) and n.targets[0].id in _ITEM_ALIASES
            and ast.unparse(n.value) == f"dict.{_ITEM_ALIASES[n.targets[0].id]}"
            for n in body):
        return None
    return ast.ClassDef(node.name, [ast.Name(ATTRIBUTE_DICT, ast.Load())], [], [ast.Pass()],
                        [], **({"type_params": []} if sys.version_info >= (3, 12) else {}))


def _text() -> ast.expr:
    return ast.Name(LESSON_TEXT, ast.Load())


def _lines() -> ast.expr:
    return ast.Call(ast.Attribute(_text(), "splitlines", ast.Load()), [ast.Constant(True)], [])


def _opens(node: ast.AST) -> bool:
    """`open(...)`, `Path(...).open()`: a file opened for reading."""
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "open") or (
        isinstance(f, ast.Attribute) and f.attr == "open" and isinstance(f.value, ast.Call)
        and _is_path(f.value))


def _is_path(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "Path") or (
        isinstance(f, ast.Attribute) and f.attr == "Path")


class _DataReads(ast.NodeTransformer):
    """The data file's reads as the lesson's text (see `own_source`)."""

    def __init__(self) -> None:
        self.files: set[str] = set()  # names a `with open(...) as f` bound

    def visit_many(self, node: ast.stmt) -> list[ast.stmt]:
        if isinstance(node, ast.With) and len(node.items) == 1 and _opens(
                node.items[0].context_expr) and isinstance(node.items[0].optional_vars, ast.Name):
            self.files.add(node.items[0].optional_vars.id)
            out = []
            for inner in node.body:
                out += self.visit_many(inner)
            return out
        return [self.visit(node)]

    def visit_Call(self, node: ast.Call) -> ast.expr:
        f = node.func
        if isinstance(f, ast.Attribute) and (_opens(f.value) or (
                isinstance(f.value, ast.Name) and f.value.id in self.files)):
            if f.attr == "read":
                return _text()
            if f.attr == "readlines":
                return _lines()
        if isinstance(f, ast.Attribute) and f.attr == "read_text" and _is_path(f.value):
            return _text()
        if _opens(node):
            return _lines()  # iterated over: its lines
        self.generic_visit(node)
        return node

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.files and isinstance(node.ctx, ast.Load):
            return _lines()
        return node


# What only marks a tensor for autograd or seeds a generator: the notebook's own frame needs
# none of it (its values are compared with autograd's by the tutor), and the sandbox refuses it.
_MARKS = frozenset({"requires_grad_", "retain_grad", "manual_seed"})
_SEEDS = frozenset({"manual_seed", "seed", "manual_seed_all"})


def _own_autograd(node: ast.stmt) -> bool:
    """A statement that only reseeds or clears autograd's answer (`torch.manual_seed(0)`,
    `random.seed(1)`, `p.grad = None`). (`loss.backward()` stays: the sandbox refuses it on a
    tensor as it runs, and a learner's own `model.backward()` is their work.)"""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) \
            and isinstance(node.value.func, ast.Attribute):
        f = node.value.func
        if f.attr in _SEEDS and isinstance(f.value, ast.Name) \
                and f.value.id in ("torch", "random", "np"):
            return True
    targets = node.targets if isinstance(node, ast.Assign) else []
    return any(isinstance(t, ast.Attribute) and t.attr == "grad" for t in targets)


class _Unmarked(ast.NodeTransformer):
    """`p.requires_grad_()`, `t.retain_grad()`, `g.manual_seed(1)` as `p`, `t`, `g`;
    `requires_grad=True` left out of a call."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in _MARKS and not (
                isinstance(f.value, ast.Name) and f.value.id in ("torch", "random")):
            return f.value
        node.keywords = [k for k in node.keywords if k.arg != "requires_grad"]
        return node

    def visit_Assign(self, node: ast.Assign) -> ast.stmt | list[ast.stmt]:
        if any(isinstance(t, ast.Attribute) and t.attr in ("requires_grad", "grad")
               for t in node.targets):
            return ast.Pass()  # `p.requires_grad = True`, `p.grad = None`
        self.generic_visit(node)
        if len(node.targets) > 1 and all(isinstance(t, (ast.Name, ast.Attribute, ast.Subscript))
                                         for t in node.targets):
            # `c = self.cache = {}`: the sandbox sets an attribute on a line of its own.
            last = node.targets[-1]
            load = copy.deepcopy(last)
            load.ctx = ast.Load()
            return [ast.Assign([last], node.value), *(
                ast.Assign([t], copy.deepcopy(load)) for t in node.targets[:-1])]
        return node

