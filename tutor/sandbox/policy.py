"""What learner code may contain, decided on the syntax tree before anything runs.

This is the friendly layer: it names a refused construct and its line before anything runs. The
boundary itself is the run-time guard on every attribute read (guard.py) and the confined process
the code runs in (isolate.py, confine.py).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from tutor.sandbox.allowlist import CLASS_METHODS, READABLE_DUNDERS, SLOTS, private, slot_names

# Attributes that would hand the answer over (autograd) or reach outside the exercise.
_AUTOGRAD_WHY = "the point is to compute the gradient yourself, so autograd's machinery is closed"
REFUSED_ATTRIBUTES = {
    "grad": "reading .grad would give the answer away",
    # `.backward` is refused when the code runs (tutor/sandbox/guard.py), on everything but a
    # method of the learner's own class (a model's `backward`): which it is, only the run knows.
    "grad_fn": _AUTOGRAD_WHY,
    "retain_grad": _AUTOGRAD_WHY,
    "retains_grad": _AUTOGRAD_WHY,
    "requires_grad": _AUTOGRAD_WHY,
    "requires_grad_": _AUTOGRAD_WHY,
    "register_hook": _AUTOGRAD_WHY,
    "autograd": _AUTOGRAD_WHY,
    "func": "torch.func computes gradients for you",
    "enable_grad": _AUTOGRAD_WHY,
    "set_grad_enabled": _AUTOGRAD_WHY,
    "hub": "the sandbox has no network access",
    "load": "the sandbox does not read files",
    "save": "the sandbox does not write files",
    "from_file": "the sandbox does not read files",
    "utils": "torch.utils is outside what this exercise needs",
    "ops": "torch.ops reaches below the tensor API",
    "library": "torch.library reaches below the tensor API",
    "jit": "compiling code is outside what this exercise needs",
    "compile": "compiling code is outside what this exercise needs",
    "manual_seed": "reseeding would change the lesson's random state",
    "seed": "reseeding would change the lesson's random state",
    "set_default_dtype": "changing global defaults would leak into later checks",
    "set_default_device": "changing global defaults would leak into later checks",
    "set_num_threads": "changing global defaults would leak into later checks",
    "distributed": "outside what this exercise needs",
    "multiprocessing": "outside what this exercise needs",
    "classes": "outside what this exercise needs",
}

REFUSED_NAMES = {
    "eval": "eval runs code the tutor cannot inspect first",
    "exec": "exec runs code the tutor cannot inspect first",
    "compile": "compile builds code the tutor cannot inspect first",
    "open": "the sandbox does not read or write files",
    "input": "the check runs without a keyboard; there is nobody to answer input()",
    "breakpoint": "there is no debugger inside the sandbox; print() shapes instead",
    "setattr": "setattr can change objects the tutor cannot see in your code",
    "delattr": "delattr can change objects the tutor cannot see in your code",
    "dir": "introspection is closed in the sandbox",
    "object": "outside what this exercise needs",
    "memoryview": "outside what this exercise needs",
    "exit": "there is nothing to exit from: your code simply ends",
    "quit": "there is nothing to exit from: your code simply ends",
    "help": "help() is interactive; the explanation key shows the step's notes",
}


# gi_frame, f_back, tb_frame, co_code, ...: the doors from a generator or an exception into the
# interpreter's frames, whose globals belong to the tutor, not to the learner.
_INTROSPECTION_PREFIXES = {"f", "gi", "cr", "ag", "tb", "co"}


@dataclass(frozen=True)
class Refusal:
    construct: str
    why: str
    line: int
    col: int

    @property
    def message(self) -> str:
        return f"line {self.line}: {self.construct} is not allowed here: {self.why}."


def _refusal(node: ast.AST, construct: str, why: str) -> Refusal:
    return Refusal(construct, why, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1)


def _nn_module(base: ast.expr) -> bool:
    """`nn.Module` or `torch.nn.Module`: the sandbox's stand-in (the build checks it again)."""
    return isinstance(base, ast.Attribute) and base.attr == "Module" and (
        isinstance(base.value, ast.Name) and base.value.id == "nn"
        or isinstance(base.value, ast.Attribute) and base.value.attr == "nn"
        and isinstance(base.value.value, ast.Name) and base.value.value.id == "torch")


def _record_decorator(node: ast.expr) -> bool:
    """`@dataclass`, `@dataclass(...)` or `@dataclasses.dataclass(...)`: the sandbox's record
    maker (sandbox/records.py), which checks again that the class is the learner's own."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Name) and node.id == "dataclass" or isinstance(
        node, ast.Attribute) and node.attr == "dataclass" and isinstance(
        node.value, ast.Name) and node.value.id == "dataclasses"


def _class_refusal(node: ast.ClassDef) -> Refusal | None:
    """A class of the learner's is a record of methods and attributes (sandbox/objects.py)."""
    if node.keywords or not all(_record_decorator(d) for d in node.decorator_list):
        return _refusal(node, "class", "a class of yours takes no decorators (but @dataclass) "
                                       "or keywords")
    if not all(isinstance(b, ast.Name) or _nn_module(b) for b in node.bases):
        return _refusal(node, "class", "a class of yours builds only on your own classes "
                                       "(or torch.nn.Module), named plainly")
    for stmt in node.body:
        # A method may be decorated (`@staticmethod`, `@torch.no_grad()`): a decorator is an
        # expression like any other, read through the guard.
        # A field of a record (`h: torch.Tensor`, `n: int = 3`): an annotated plain name.
        field = isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        if not field and not isinstance(stmt, (ast.FunctionDef, ast.Assign, ast.Expr, ast.Pass)):
            return _refusal(stmt, "this statement in a class",
                            "a class of yours holds methods and plain attributes only")
    return None


def _calls_on_super(node: ast.Attribute) -> bool:
    """`super().__init__`: a method of the learner's own base class, through `super()`."""
    return node.attr in CLASS_METHODS and isinstance(node.value, ast.Call) \
        and isinstance(node.value.func, ast.Name) and node.value.func.id == "super"


def _unpacked(target: ast.expr) -> list[ast.expr]:
    """The targets an assignment binds, through tuples and lists (not starred ones)."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [t for e in target.elts for t in _unpacked(e)]
    return [target]


def _slots(stmt: ast.stmt) -> bool:
    """`__slots__ = ('dW', 'db')` in a class's body: plain names written out."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == SLOTS):
        return False
    try:
        return slot_names(ast.literal_eval(stmt.value)) is not None
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False


def _allowed_places(tree: ast.AST) -> tuple[set[int], set[int]]:
    """The double-underscore methods a class may define (`CLASS_METHODS`), directly in its
    body, and the attribute targets the guard turns
    into the sandbox's setters (a lone `obj.name = ...`, or `obj.name += ...`)."""
    inits: set[int] = set()
    stores: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            inits |= {id(s) for s in node.body
                      if isinstance(s, ast.FunctionDef) and s.name in CLASS_METHODS}
            inits |= {id(s.targets[0]) for s in node.body if _slots(s)}
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            # `obj.x = v`, and `obj.x, obj.y = f()` (a tuple of names and attributes)
            stores |= {id(t) for t in _unpacked(node.targets[0])
                       if isinstance(t, ast.Attribute)}
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Attribute):
            stores.add(id(node.target))
    return inits, stores


def inspect(tree: ast.AST) -> Refusal | None:
    """The first construct the sandbox refuses, or None when the code may run."""
    inits, stores = _allowed_places(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return _refusal(
                node, "import", "torch, F (torch.nn.functional) and math are already in scope"
            )
        if isinstance(node, (ast.AsyncFunctionDef, ast.AsyncFor, ast.AsyncWith, ast.Await)):
            return _refusal(node, "async code", "the checks run synchronously")
        if isinstance(node, ast.Match):
            return _refusal(
                node, "match", "its class patterns read attributes of any object; use if/elif"
            )
        if isinstance(node, ast.ClassDef):
            refusal = _class_refusal(node)
            if refusal:
                return refusal
        # `def _():` (a throwaway name) and `_helper` (a learner's private one) are plain
        # names; a double underscore is Python's own.
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_") \
                and node.name != "_" and not private(node.name) and id(node) not in inits:
            return _refusal(
                node, f"the name {node.name}",
                "names starting with an underscore reach into Python's internals",
            )
        if isinstance(node, ast.ExceptHandler) and (node.name or "").startswith("_") \
                and not private(node.name or ""):
            return _refusal(node, f"the name {node.name}", "underscore names are closed")
        if isinstance(node, ast.keyword) and (node.arg or "").startswith("_"):
            return _refusal(node, f"the keyword {node.arg}", "underscore names are closed")
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            return _refusal(node, "global/nonlocal", "the step's variables are already shared")
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                and id(node) not in stores:
            return _refusal(
                node, f"assigning to .{node.attr}",
                "an attribute is set on its own line (`self.dW = ...`), and only on objects of "
                "your own classes; changing torch or a tensor would leak into later checks",
            )
        if isinstance(node, ast.Attribute):
            if node.attr.split("_", 1)[0] in _INTROSPECTION_PREFIXES and "_" in node.attr:
                return _refusal(
                    node, f"the attribute .{node.attr}",
                    "frames, code objects and tracebacks lead outside the sandbox",
                )
            if node.attr.startswith("_") and node.attr not in READABLE_DUNDERS \
                    and not (node.attr == SLOTS and isinstance(node.ctx, ast.Load)) \
                    and not _calls_on_super(node) and not private(node.attr):
                return _refusal(
                    node, f"the attribute .{node.attr}",
                    "names starting with an underscore reach into Python's internals",
                )
            if node.attr in REFUSED_ATTRIBUTES:
                return _refusal(node, f"the attribute .{node.attr}", REFUSED_ATTRIBUTES[node.attr])
        if isinstance(node, ast.Name) and id(node) not in inits:  # `__slots__` in a class
            if node.id.startswith("_") and node.id != "_" and not private(node.id):
                return _refusal(
                    node, f"the name {node.id}",
                    "names starting with an underscore reach into Python's internals",
                )
            if node.id in REFUSED_NAMES:
                return _refusal(node, f"{node.id}()", REFUSED_NAMES[node.id])
        if isinstance(node, ast.arg) and node.arg.startswith("_") and node.arg != "_" \
                and not private(node.arg):
            return _refusal(node, f"the name {node.arg}", "underscore names are closed")
    return None
