"""What a piece of code says, read off its syntax tree: the names it binds, writes, changes in
place and reads, and the numbers written in it.

One home for these questions, asked of the learner's candidate (by the engine, the rule probe
and the child that runs it), of a training step's code and of the wrong answers derived from a
step's solution. Each question is a different one on purpose: `x = ...` binds `x` but leaves the
tensor `x` held untouched, while `x += ...` and `x.add_(...)` change that tensor in place. A
candidate is parsed once per process however many of them ask (`of`). No torch here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cached_property, lru_cache


class CodeFacts:
    """The facts of one source text; `tree` is None when it does not parse."""

    def __init__(self, code: str):
        try:
            self.tree: ast.Module | None = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            self.tree = None

    @cached_property
    def bound(self) -> frozenset[str]:
        return frozenset(bound(self.tree)) if self.tree else frozenset()

    @cached_property
    def names(self) -> frozenset[str]:
        """Every plain name in the code, read or written."""
        if self.tree is None:
            return frozenset()
        return frozenset(n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name))

    @cached_property
    def read(self) -> frozenset[str]:
        return frozenset(read(self.tree)) if self.tree else frozenset()

    @cached_property
    def numbers(self) -> tuple[float, ...]:
        """Every non-zero number written in the code (booleans are not numbers here)."""
        if self.tree is None:
            return ()
        return tuple(float(n.value) for n in ast.walk(self.tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, (int, float))
                     and not isinstance(n.value, bool) and n.value)


@lru_cache(maxsize=64)
def of(code: str) -> CodeFacts:
    """The facts of `code`, parsed once: a check asks several questions of the same candidate."""
    return CodeFacts(code)


def bound(node: ast.AST) -> set[str]:
    """Names the code binds or deletes (`x = ...`, `x += ...`, `for x in ...`, `del x`)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, (ast.Store, ast.Del))}


def read(node: ast.AST) -> set[str]:
    """Every plain name the code loads."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def written(node: ast.AST) -> set[str]:
    """Names a statement writes: assigned, augmented, subscripted into or mutated in place."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store):
            base = n.value
            while isinstance(base, ast.Subscript):
                base = base.value
            if isinstance(base, ast.Name):
                out.add(base.id)
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr.endswith("_") and isinstance(n.func.value, ast.Name)):
            out.add(n.func.value.id)  # torch's trailing underscore: an in-place method
    return out


def write_targets(node: ast.AST) -> Iterator[ast.AST]:
    """What one statement or call writes through: its targets, or the receiver of `x.add_()`."""
    if isinstance(node, ast.AugAssign):
        yield node.target
    elif isinstance(node, ast.Assign):
        yield from node.targets
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.endswith("_")
        and not node.func.attr.startswith("_")
    ):
        yield node.func.value


def assigned_expression(code: str, name: str) -> str | None:
    """The source of the expression the code last assigns to `name` on its own (`dh = dhs[:, t]`
    gives `dhs[:, t]`), among its top-level statements; None when there is no such line. A
    message about a view names the expression to copy."""
    tree = of(code).tree
    if tree is None:
        return None
    found = None
    for stmt in tree.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name):
            found = ast.get_source_segment(code, stmt.value)
    return found


def rebinds(code: str, name: str) -> bool:
    """Whether the code binds `name` to a new value: anything but `name += ...`, which changes
    the tensor it already holds."""
    tree = of(code).tree
    if tree is None:
        return False
    augmented = {id(n.target) for n in ast.walk(tree) if isinstance(n, ast.AugAssign)}
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
               and id(n) not in augmented for n in ast.walk(tree))


def changed_in_place(tree: ast.AST) -> tuple[str, ...]:
    """Names a piece of code changes in place: `x += ...`, `x[i] = ...`, `x.add_(...)`."""
    out: list[str] = []
    for node in ast.walk(tree):
        for target in write_targets(node):
            if isinstance(node, ast.Assign) and isinstance(target, ast.Name):
                continue  # `x = ...` rebinds the name; the old tensor is untouched
            while isinstance(target, (ast.Subscript, ast.Attribute)):
                target = target.value
            if isinstance(target, ast.Name):
                out.append(target.id)
    return tuple(dict.fromkeys(out))


# --- what a loop hands from one pass to the next ---------------------------------------------


def carried(loop: ast.For | ast.While) -> set[str]:
    """Names one pass of the loop hands to the next: bound with a plain `=` in the loop and read
    there before that pass binds them (`dh = dhs[:, s] + dh_next` ... `dh_next = ...`), in the
    loop or in a loop inside it. Such a loop is a recurrence: each pass needs the one before, so
    no tensor operation can do all of them at once. An accumulator (`dW += ...`, `dC[ix] += ...`)
    is not one: its passes can be summed in any order."""
    plain = _plain_bound(loop)
    found: set[str] = set()
    if isinstance(loop, ast.While):
        found |= _loads(loop.test) & plain  # the test is read at the start of every pass
    start = bound(loop.target) if isinstance(loop, ast.For) else set()
    _block(loop.body, start, plain, found)
    return found


def _plain_bound(loop: ast.For | ast.While) -> set[str]:
    """Names a plain `=` (or `x: T = ...`, or `x := ...`) binds in the loop's body."""
    out: set[str] = set()
    for stmt in loop.body:
        for n in _walk_here(stmt):
            if isinstance(n, ast.Assign):
                for target in n.targets:
                    out |= _target_names(target)
            elif isinstance(n, ast.AnnAssign) and n.value is not None:
                out |= _target_names(n.target)
            elif isinstance(n, ast.NamedExpr):
                out.add(n.target.id)
    return out


def _target_names(target: ast.expr) -> set[str]:
    """The plain names an assignment target rebinds (`x`, `a, b`, `*rest`), not `x[i]`/`x.a`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_target_names(e) for e in target.elts))
    if isinstance(target, ast.Starred):
        return _target_names(target.value)
    return set()


def _walk_here(node: ast.AST) -> Iterator[ast.AST]:
    """`ast.walk` that does not go into a function or class defined inside: its body runs later,
    in a scope of its own."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield from _walk_here(child)


def _loads(node: ast.AST) -> set[str]:
    """Names an expression (or the parts of a statement it is handed) reads, less the names a
    comprehension in it binds for itself."""
    names = set()
    own = set()
    for n in _walk_here(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            names.add(n.id)
        elif isinstance(n, ast.comprehension):
            own |= bound(n.target)
    return names - own


def _block(body: list[ast.stmt], assigned: set[str], plain: set[str], found: set[str]) -> set[str]:
    """Follow one pass through `body` in order: every read of a name in `plain` that this pass
    has not bound yet goes into `found`. Returns the names surely bound once the block ends."""
    assigned = set(assigned)
    for stmt in body:
        assigned = _statement(stmt, assigned, plain, found)
    return assigned


def _statement(stmt: ast.stmt, assigned: set[str], plain: set[str],
               found: set[str]) -> set[str]:
    def reads(*nodes: ast.AST | None) -> None:
        for node in nodes:
            if node is not None:
                found.update((_loads(node) & plain) - assigned)

    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        reads(*stmt.decorator_list)
        return assigned | {stmt.name}
    if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        # the value is computed first; `x[i] = v` and `x += v` read x too
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        reads(stmt.value, *(t for t in targets if not isinstance(t, ast.Name)))
        if isinstance(stmt, ast.AugAssign):
            name = stmt.target.id if isinstance(stmt.target, ast.Name) else None
            if name in plain and name not in assigned:
                found.add(name)  # `x += v` reads the x an earlier pass bound
            return assigned
        if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
            return assigned
        return assigned | set().union(*(_target_names(t) for t in targets)) | _walrus(stmt)
    if isinstance(stmt, ast.If):
        reads(stmt.test)
        here = assigned | _walrus(stmt.test)
        # only what both branches bind is bound afterwards
        return (_block(stmt.body, here, plain, found)
                & _block(stmt.orelse, here, plain, found))
    if isinstance(stmt, (ast.For, ast.While)):
        # an inner loop may run no pass at all: what it binds is not surely bound after it
        if isinstance(stmt, ast.For):
            reads(stmt.iter)
            inner = assigned | bound(stmt.target)
        else:
            reads(stmt.test)
            inner = set(assigned)
        _block(stmt.body, inner, plain, found)
        _block(stmt.orelse, assigned, plain, found)
        found.update(carried(stmt))  # a recurrence inside makes the whole loop one
        return assigned
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        reads(*(item.context_expr for item in stmt.items))
        here = assigned | set().union(*(bound(item.optional_vars) for item in stmt.items
                                         if item.optional_vars is not None))
        return _block(stmt.body, here, plain, found)
    if isinstance(stmt, ast.Delete):
        reads(*(t for t in stmt.targets if not isinstance(t, ast.Name)))
        return assigned - bound(stmt)
    if isinstance(stmt, ast.Try):
        # each block on its own, from what was bound before the try: any may be cut short
        for block in (stmt.body, stmt.orelse, stmt.finalbody,
                      *(handler.body for handler in stmt.handlers)):
            _block(block, assigned, plain, found)
        return assigned
    if isinstance(stmt, ast.Match):
        reads(stmt.subject)
        for case in stmt.cases:
            reads(case.guard)
            _block(case.body, assigned, plain, found)
        return assigned
    reads(stmt)
    return assigned | _walrus(stmt)


def _walrus(node: ast.AST) -> set[str]:
    return {n.target.id for n in _walk_here(node) if isinstance(n, ast.NamedExpr)}


def only_placeholders(code: str) -> bool:
    """Whether `code` writes nothing yet: blank, comments, `pass`, a docstring or a bare `...`,
    and names given `...` or None (`dx = ...`, `dx += ...`, `da, db = None, None`). Code that
    does not parse is not placeholders: it is an answer, a wrong one."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return not code.strip()
    for node in body:
        if isinstance(node, ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare `...`
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if all(isinstance(v, ast.Constant) and v.value in (None, Ellipsis) for v in values):
                continue
        return False
    return True


# What a traced program's `.grad` read becomes (tutor/core/execution.py `_autograd_reads`).
AUTOGRAD_READ = "autograd_gradient_of"
# The lesson's data as text, which a notebook run in its own frame reads where it opened its
# data file (course/program.py `own_cells`, tutor/core/frame.py).
LESSON_TEXT = "lesson_data_text"
# What a notebook's import of a module the sandbox does not hold binds, in its own frame
# (sandbox/objects.py `Unavailable`): an annotation may name it; a call says it is not there.
UNAVAILABLE = "not_in_sandbox"
# The base a notebook's dict of attributes (`class Grads(dict): __getattr__ = dict.__getitem__`)
# builds on in its own frame (sandbox/objects.py `AttributeDict`).
ATTRIBUTE_DICT = "attribute_dict"


class AutogradReads(ast.NodeTransformer):
    """Each `t.grad` read written as `autograd_gradient_of(t)`."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr == "grad" and isinstance(node.ctx, ast.Load):
            return ast.copy_location(
                ast.Call(ast.Name(AUTOGRAD_READ, ast.Load()), [node.value], []), node)
        return node
