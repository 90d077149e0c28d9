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
