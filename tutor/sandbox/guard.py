"""Attribute access checked at run time, so the syntax tree is not the only line of defence.

Every `obj.name` that learner code reads is rewritten into `__tutor_getattr__(obj, "name")`
before compiling. The guard looks at the real object: a tensor answers only the methods a backward
pass uses, the sandbox's modules only their allow lists, and nothing answers names that lead to
interpreter internals (underscores, frames, tracebacks, code objects) or to format strings, which
can walk attributes from inside a string where no syntax check can see them.

RestrictedPython does the same kind of rewrite, but it refuses `dC[ix] += ...` (an augmented
assignment to an item, the lecture's own loop) and funnels `x += y` through a helper, which would
break the in-place semantics that the aliasing diagnosis depends on. Rewriting attribute reads
alone leaves every other statement exactly as Python runs it.
"""

from __future__ import annotations

import ast
import types
import weakref
from typing import Any

from tutor.sandbox import allowlist

GUARD_NAME = "__tutor_getattr__"

# Doors from a generator, coroutine, exception or function into the interpreter's frames, whose
# globals belong to the tutor: gi_frame, f_back, tb_frame, co_consts, cr_frame, ag_frame, ...
_INTERNAL_PREFIXES = ("f_", "gi_", "tb_", "co_", "cr_", "ag_")


class Refused(Exception):
    """Learner code asked for something the sandbox does not offer; the message says why."""


# Builtins learner code reaches only through the sandbox's own versions (tutor/sandbox/views.py):
# the names are rewritten, so that no namespace, not even one whose builtins hold the real ones
# (torch.compile's, in training), hands them the real functions.
VIEWS = {"getattr": "__tutor_getattr_fn__", "globals": "__tutor_globals__",
         "locals": "__tutor_locals__", "vars": "__tutor_vars__"}


class _Rewrite(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in VIEWS:
            return ast.copy_location(ast.Name(VIEWS[node.id], node.ctx), node)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        if node.arg in VIEWS:
            node.arg = VIEWS[node.arg]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node  # stores and deletes are refused by the policy before we get here
        call = ast.Call(
            func=ast.Name(GUARD_NAME, ast.Load()),
            args=[node.value, ast.Constant(node.attr)],
            keywords=[],
        )
        return ast.copy_location(call, node)


_AUG_OPS = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.FloorDiv: "//=",
            ast.Mod: "%=", ast.Pow: "**=", ast.MatMult: "@=", ast.BitAnd: "&=", ast.BitOr: "|=",
            ast.BitXor: "^="}


class _Stores(ast.NodeTransformer):
    """`obj.name = v` and `obj.name += v` (which the policy allows only so) become calls of the
    sandbox's setters (objects.py), which assign only on the learner's own objects."""

    def __init__(self) -> None:
        self.made = 0  # temporaries for `obj.x, obj.y = ...`, numbered in the program

    def visit_Assign(self, node: ast.Assign) -> ast.AST | list[ast.stmt]:
        self.generic_visit(node)
        target = node.targets[0]
        if len(node.targets) != 1:
            return node
        if isinstance(target, ast.Attribute):
            return ast.copy_location(ast.Expr(self._set(target, node.value)), node)
        if not isinstance(target, (ast.Tuple, ast.List)) or not any(
                isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
                for n in ast.walk(target)):
            return node
        # `obj.x, y = v`: unpacked into temporaries (names learner code cannot write), then each
        # attribute set through the setter, left to right as Python assigns them.
        sets: list[ast.stmt] = []

        def plain(t: ast.expr) -> ast.expr:
            if isinstance(t, (ast.Tuple, ast.List)):
                return type(t)([plain(e) for e in t.elts], ast.Store())
            if not isinstance(t, ast.Attribute):
                return t
            self.made += 1
            name = f"__tutor_unpacked_{self.made}"
            sets.append(ast.Expr(self._set(t, ast.Name(name, ast.Load()))))
            return ast.Name(name, ast.Store())

        first = ast.Assign([plain(target)], node.value)
        return [ast.copy_location(s, node) for s in (first, *sets)]

    @staticmethod
    def _set(target: ast.Attribute, value: ast.expr) -> ast.Call:
        return ast.Call(ast.Name("__tutor_setattr__", ast.Load()),
                        [target.value, ast.Constant(target.attr), value], [])

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        target = node.target
        if not isinstance(target, ast.Attribute):
            return node
        call = ast.Call(ast.Name("__tutor_augattr__", ast.Load()),
                        [target.value, ast.Constant(target.attr),
                         ast.Constant(_AUG_OPS[type(node.op)]), node.value], [])
        return ast.copy_location(ast.Expr(call), node)


def rewrite(tree: ast.Module) -> ast.Module:
    """The same program with every attribute read going through the guard, and every
    attribute assigned through the sandbox's setters."""
    return ast.fix_missing_locations(_Rewrite().visit(_Stores().visit(tree)))


def _refuse(obj: Any, name: str, why: str) -> Refused:
    what = obj.__name__ if isinstance(obj, types.ModuleType) else type(obj).__name__
    if isinstance(obj, type):
        what = obj.__name__
    return Refused(f"{what}.{name} is not available in the sandbox: {why}")


#: The classes learner code made (`class` statements, through tutor/sandbox/objects.py): a method
#: a learner's class defines is theirs to call, whatever its name (a model's own `backward`).
LEARNER_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()
#: The sandbox's own among them (`nn.Module`, its layers, the attribute dict): a learner's class
#: builds on them, but nothing of the learner's changes them (a method set on one, a record
#: made of one), which would reach every later use of them in the same run.
SANDBOX_CLASSES: weakref.WeakSet[type] = weakref.WeakSet()


#: Named tuples the sandbox's `collections.namedtuple` made: their own API is spelled with one
#: underscore (`Acts._fields`, `row._asdict()`), and it is open on them (and their objects) only.
RECORD_TUPLES: weakref.WeakSet[type] = weakref.WeakSet()
_TUPLE_API = frozenset({"_fields", "_asdict", "_replace", "_make", "_field_defaults"})


def sandbox_class(cls: type) -> type:
    """`cls` as one of the sandbox's own classes that learner classes build on."""
    LEARNER_CLASSES.add(cls)
    SANDBOX_CLASSES.add(cls)
    return cls


def _learner_method(obj: Any, name: str) -> bool:
    """Whether `name` is defined by the learner's own class of `obj` (or a learner base)."""
    cls = type(obj)
    return cls in LEARNER_CLASSES and any(
        k in LEARNER_CLASSES and name in vars(k) for k in cls.__mro__)


class Guard:
    """The callable installed as `__tutor_getattr__` in every sandbox namespace.

    It is on the path of every attribute read, the training loop's included, so the common cases
    (a tensor method, a module function) are answered from precomputed tables first.
    """

    def __init__(self, tensor_type: type, modules: dict[str, frozenset[str]],
                 wrapped: dict[str, Any], alias: type) -> None:
        self.tensor_type = tensor_type
        self.alias = alias  # what learner code calls torch.Tensor
        self.modules = modules  # stand-in module name -> the names it holds
        self.stand_ins: dict[str, types.ModuleType] = {}  # stand-in module name -> the module
        self.by_name: frozenset[str] = frozenset()  # modules opened by their name alone
        self.wrapped = wrapped  # tensor methods replaced by safer ones (new_empty, ...)
        self.tensor_names = frozenset(
            n for n in dir(tensor_type) if allowlist.tensor_allows(n) and n not in wrapped)

    def __call__(self, obj: Any, name: str) -> Any:
        if type(obj) is self.tensor_type and name in self.tensor_names:
            return getattr(obj, name)
        if type(obj) is types.ModuleType:
            # Keyed by name, not by the module object: torch.compile traces this function
            # during training and cannot use modules as dictionary keys. The object must be the
            # stand-in itself, for Python's own modules: their real ones (torch's own
            # `functools`) would answer the stand-in's names with real, open objects. torch's
            # and math's real modules answer as before (the tutor's own namespaces hold them).
            names = self.modules.get(obj.__name__)
            if names is not None and (obj.__name__ in self.by_name
                                      or self.stand_ins.get(obj.__name__) is obj):
                if name in names:
                    return getattr(obj, name)
                raise Refused(f"{obj.__name__}.{name} is not available in the sandbox: "
                              f"{allowlist.reason(name)}")
        return self._slow(obj, name)

    def _unbound(self, name: str) -> Any:
        wrapper = self.wrapped[name]

        def method(t: Any, *args: Any, **kw: Any) -> Any:
            if not isinstance(t, self.tensor_type):
                raise TypeError(f"torch.Tensor.{name} needs a tensor as its first argument, "
                                f"not a {type(t).__name__}")
            return wrapper(t)(*args, **kw)

        method.__name__ = name
        return method

    def _slow(self, obj: Any, name: str) -> Any:
        if type(obj) is super and name in allowlist.CLASS_METHODS:
            # `super().__init__()` in a class of the learner's, whose bases are theirs too
            # (objects.py): their own method, or the do-nothing one every class has.
            return getattr(obj, name)
        if name == allowlist.SLOTS and (type(obj) in LEARNER_CLASSES or obj in LEARNER_CLASSES):
            # The names a class of the learner's listed, as a tuple of strings.
            listed = allowlist.slot_names(getattr(obj, name, ()))
            if listed is not None:
                return listed
        if name in allowlist.READABLE_DUNDERS:
            value = getattr(obj, name)
            if type(value) is str:
                return value
            raise _refuse(obj, name, "only a name given as a string can be read")
        if allowlist.private(name) and type(obj) in LEARNER_CLASSES:
            return getattr(obj, name)  # a learner's object keeps `_cache` for itself
        if name in _TUPLE_API and (type(obj) in RECORD_TUPLES or obj in RECORD_TUPLES):
            return getattr(obj, name)
        if name.startswith("_"):
            raise _refuse(obj, name, "names starting with an underscore reach into Python's "
                                     "internals")
        if name.startswith(_INTERNAL_PREFIXES):
            raise _refuse(obj, name, "frames, code objects and tracebacks lead outside the "
                                     "sandbox")
        if name in ("format", "format_map", "mro"):
            raise _refuse(obj, name, allowlist.reason(name))
        if obj is self.alias:
            obj = self.tensor_type
        if type(obj) is self.tensor_type and not hasattr(self.tensor_type, name) \
                and name in object.__getattribute__(obj, "__dict__"):
            return object.__getattribute__(obj, "__dict__")[name]  # a note of the learner's
        if isinstance(obj, self.tensor_type) or (
                isinstance(obj, type) and issubclass(obj, self.tensor_type)):
            if not allowlist.tensor_allows(name):
                raise Refused(f"the tensor attribute .{name} is not available in the sandbox: "
                              f"{allowlist.reason(name)}")
            if name in self.wrapped:
                if isinstance(obj, type):  # torch.Tensor.new_empty(x, ...): the same wrapper
                    return self._unbound(name)
                return self.wrapped[name](obj)
            return getattr(obj, name)
        if isinstance(obj, types.ModuleType):
            raise _refuse(obj, name, "only the sandbox's own torch, F and math are open")
        if name in allowlist.REASONS and not _learner_method(obj, name):
            raise _refuse(obj, name, allowlist.REASONS[name])
        return getattr(obj, name)
