"""The learner's own classes: plain records of attributes and methods, nothing more.

A backward pass written as a class (`class Backward:` with a method per layer storing
`self.dprobs`) is an ordinary way to organise the exercise, so the sandbox lets learner code
define classes, within these bounds:

- a class builds only on the learner's own classes (or on nothing): never on a tensor, a module's
  class or a builtin type, whose behaviour would reach below the sandbox;
- its body defines methods and plain attributes; of the double-underscore methods it may have
  only those in `METHODS` (`__init__`, `__call__`, indexing, length, iteration: the policy
  refuses the rest by name, and the builder checks again what the class ended up holding);
- an attribute is assigned only on an instance of such a class (`self.dW = ...`, `self.dC +=
  ...`), through `set_attribute` and `augment_attribute`, which the guard's rewrite puts where
  the code assigns; torch, modules and tensors stay as they are.

Reads go through the guard as every read does (guard.py).
"""

from __future__ import annotations

import builtins
import operator
import types
import weakref
from typing import Any

import torch

from tutor.sandbox.allowlist import CLASS_METHODS, SLOTS, private, slot_names
from tutor.sandbox.guard import LEARNER_CLASSES, SANDBOX_CLASSES, Refused, sandbox_class
from tutor.sandbox.screen import CODE_FILE

SET_NAME = "__tutor_setattr__"
AUGMENT_NAME = "__tutor_augattr__"

# The double-underscore methods a class of the learner's may define: building an object,
# calling it, indexing it, its length, iterating it. Nothing the tutor's own code calls on a
# value it is handed (printing, comparing, hashing, attribute hooks, torch's dispatch).
METHODS = CLASS_METHODS
# What `class` statements leave in a class's namespace besides the learner's own names.
_MADE_BY_PYTHON = METHODS | {"__module__", "__qualname__", "__doc__", "__dict__",
                             "__weakref__", "__firstlineno__", "__static_attributes__",
                             # a record's fields (`h: torch.Tensor`): their annotations
                             "__annotations__", "__annotate__", "__annotate_func__",
                             "__annotations_cache__"}
# Single-underscore names that libraries look up on an object to treat it as one of theirs (a
# named tuple's, a parameter, a view): a class of the learner's keeps its own `_norm` helpers,
# never these.
_HOOKS = frozenset({"_fields", "_make", "_asdict", "_replace", "_field_defaults", "_is_param",
                    "_is_view", "_is_protocol", "_base", "_cdata", "_version", "_grad_fn",
                    "_backward_hooks", "_torch_function", "_torch_dispatch"})
_IN_PLACE = {"+=": operator.iadd, "-=": operator.isub, "*=": operator.imul,
             "/=": operator.itruediv, "//=": operator.ifloordiv, "%=": operator.imod,
             "**=": operator.ipow, "@=": operator.imatmul, "&=": operator.iand,
             "|=": operator.ior, "^=": operator.ixor}


class LearnerObject:
    """What every class of the learner's builds on."""


_classes = LEARNER_CLASSES  # shared with the guard, which lets their own methods be called


class SimpleNamespace(LearnerObject):
    """`types.SimpleNamespace` in the sandbox: a record of the learner's (`d = SimpleNamespace();
    d.logits = ...`), made with plain names only, whose attributes are set as on any object of
    their own classes."""

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            set_attribute(self, name, value)

    def __repr__(self) -> str:
        return "namespace(" + ", ".join(f"{k}={v!r}" for k, v in vars(self).items()) + ")"


sandbox_class(SimpleNamespace)


class Module(LearnerObject):
    """`torch.nn.Module` as the sandbox offers it: a class of the learner's own to build on
    (its layers keep their tensors as attributes, or in lists and dicts of them), whose call is
    its `forward`. Nothing of autograd's or of torch's own modules comes with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        before, after = _hooks(self)
        for hook in list(before):
            changed = hook(self, args)
            if changed is not None:
                args = changed if isinstance(changed, tuple) else (changed,)
        out = self.forward(*args, **kwargs)  # type: ignore[attr-defined]
        for hook in list(after):
            changed = hook(self, args, out)
            if changed is not None:
                out = changed
        return out

    def register_forward_hook(self, hook: Any) -> Handle:
        """`hook(module, args, output)` after each call (a notebook keeping every layer's
        input and output for its own backward pass); what it returns, if anything, is the
        output."""
        return Handle(_hooks(self)[1], hook)

    def register_forward_pre_hook(self, hook: Any) -> Handle:
        return Handle(_hooks(self)[0], hook)

    def named_modules(self, memo: Any = None, prefix: str = "") -> list:
        """It and every module it holds, each once, with the dotted path it is kept under."""
        out: list = []

        def walk(value: Any, path: str, depth: int) -> None:
            if isinstance(value, Module):
                if any(value is m for _, m in out):
                    return
                out.append((path, value))
                items = vars(value).items()
            elif isinstance(value, (list, tuple)):
                items = ((str(i), item) for i, item in enumerate(value))
            elif isinstance(value, dict):
                items = value.items()
            else:
                return
            if depth > 8:
                return
            for key, item in items:
                hidden = isinstance(key, str) and key.startswith("_")
                walk(item, path if hidden else f"{path}.{key}".lstrip("."), depth + 1)

        walk(self, prefix, 0)
        return out

    def modules(self) -> list:
        return [m for _, m in self.named_modules()]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def parameters(self, recurse: bool = True) -> list:
        """Every parameter it holds (a tensor made by `nn.Parameter`), its layers' included,
        each once, in the order it set them."""
        out: list = []

        def walk(value: Any, depth: int) -> None:
            if isinstance(value, torch.Tensor):
                if _is_parameter(value) and not any(value is t for t in out):
                    out.append(value)
            elif depth > 8:
                return
            elif isinstance(value, Module):
                for item in vars(value).values():
                    walk(item, depth + 1)
            elif isinstance(value, (list, tuple)):
                for item in value:
                    walk(item, depth + 1)
            elif isinstance(value, dict):
                for item in value.values():
                    walk(item, depth + 1)

        walk(self, 0)
        return out

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> list:
        """Each parameter with the dotted path it is kept under (`blocks.0.attn.weight`)."""
        out: list = []
        seen: list = []

        def walk(value: Any, path: str, depth: int) -> None:
            if isinstance(value, torch.Tensor):
                if _is_parameter(value) and not any(value is t for t in seen):
                    seen.append(value)
                    out.append((path, value))
            elif depth > 8:
                return
            elif isinstance(value, Module):
                for key, item in vars(value).items():
                    walk(item, f"{path}.{key}".lstrip(".") if not key.startswith("_")
                         else path, depth + 1)
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    walk(item, f"{path}.{i}".lstrip("."), depth + 1)
            elif isinstance(value, dict):
                for key, item in value.items():
                    walk(item, f"{path}.{key}".lstrip("."), depth + 1)

        walk(self, prefix, 0)
        return out

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        """A tensor the module keeps that is no parameter (a causal mask)."""
        set_attribute(self, name, tensor)

    def register_parameter(self, name: str, param: Any) -> None:
        set_attribute(self, name, param)

    def add_module(self, name: str, module: Any) -> None:
        set_attribute(self, name, module)

    def children(self) -> list:
        return [v for v in vars(self).values() if isinstance(v, Module)]

    def apply(self, fn: Any) -> Module:
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def zero_grad(self, *args: Any, **kwargs: Any) -> None:
        pass

    def train(self, mode: bool = True) -> Module:
        return self

    def eval(self) -> Module:
        return self

    def to(self, *args: Any, **kwargs: Any) -> Module:
        return self  # where the tutor runs it, as its tensors are

    def cpu(self) -> Module:
        return self

    def cuda(self, *args: Any, **kwargs: Any) -> Module:
        return self

    def float(self) -> Module:
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        return self


sandbox_class(Module)


class Handle:
    """What registering a hook gives: `remove()` takes the hook off again."""

    def __init__(self, hooks: list, hook: Any) -> None:
        self._hooks, self._hook = hooks, hook
        hooks.append(hook)

    def remove(self) -> None:
        if any(h is self._hook for h in self._hooks):
            self._hooks.remove(self._hook)


# Each module's hooks, before and after its forward, by id with a weak reference to tell a
# reused id: kept outside the module, where its own attributes would show them.
_HOOK_LISTS: dict[int, tuple[weakref.ref, list, list]] = {}


def _hooks(module: Module) -> tuple[list, list]:
    held = _HOOK_LISTS.get(id(module))
    if held is None or held[0]() is not module:
        held = (weakref.ref(module), [], [])
        _HOOK_LISTS[id(module)] = held
    return held[1], held[2]


# The tensors `nn.Parameter` was given, by id, each with a weak reference to tell a reused id.
_PARAMETERS: dict[int, weakref.ref] = {}


class AttributeDict(dict):
    """A dict whose entries read and write as attributes too (`d.logits` is `d['logits']`),
    as a notebook's `class Grads(dict)` with `__getattr__ = dict.__getitem__` makes one; the
    learner's class builds on it (course/program.py rewrites theirs so)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self[name]
        except KeyError:
            raise AttributeError(name) from None


sandbox_class(AttributeDict)


# Modules that only show things (plots, progress bars, rich output).
_DISPLAY = frozenset({"matplotlib", "seaborn", "IPython", "tqdm", "plotly"})


class Unavailable:
    """What a notebook's import of something the sandbox does not hold binds (`from typing import
    Dict`, `import numpy as np`): the notebook goes on as a kernel would run it, an annotation
    may name it (`Dict[str, Tensor]`, `int | None`), and only a use of it says that it is not
    there. It holds nothing: every attribute is another such name, and a call is refused."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "name", str(name))

    def __getattr__(self, attr: str) -> Unavailable:
        if attr.startswith("_"):
            raise AttributeError(attr)
        return Unavailable(f"{self.name}.{attr}")

    def __setattr__(self, attr: str, value: Any) -> None:
        raise Refused(f"{self.name} is not available in the sandbox")

    def __getitem__(self, key: Any) -> Unavailable:
        return self

    def __or__(self, other: Any) -> Unavailable:
        return self

    __ror__ = __or__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        root = self.name.split(".")[0]
        if root in _DISPLAY:
            # Showing, not computing: a plot or a progress bar changes no value, so it does
            # nothing here (a progress bar gives back what it wraps).
            last = self.name.rsplit(".", 1)[-1]
            if last == "tqdm" and args:
                return args[0]
            if last == "trange":
                return range(*args)
            return self
        raise Refused(f"{self.name} is not available in the sandbox: the notebook imported it, "
                      "but the tutor runs your code with torch, F, math and a few of Python's "
                      "own modules only")

    def __iter__(self) -> Any:
        return iter(())

    def __repr__(self) -> str:
        return f"<{self.name}: not available in the sandbox>"


def parameter(data: Any = None, requires_grad: bool = True) -> Any:
    """`torch.nn.Parameter` in the sandbox: the tensor itself (no gradient is autograd's here),
    which a module's `parameters()` then lists."""
    if isinstance(data, torch.Tensor):
        _PARAMETERS[id(data)] = weakref.ref(data)
    return data


def _is_parameter(t: torch.Tensor) -> bool:
    ref = _PARAMETERS.get(id(t))
    return ref is not None and ref() is t


def build_class(body: Any, name: str, *bases: Any, **keywords: Any) -> type:
    """Python's `__build_class__` for the sandbox: a `class` statement of the learner's."""
    if keywords:
        raise Refused(f"class {name}: a class of yours takes no keywords (no metaclass)")
    for base in bases:
        if base not in _classes:
            what = getattr(base, "__name__", type(base).__name__)
            raise Refused(f"class {name} cannot build on {what}: a class of yours may build "
                          "only on your own classes")
    # A class body records the module it was made in, read from its globals (the namespace).
    body.__globals__.setdefault("__name__", "__learner__")
    cls = builtins.__build_class__(body, name, *(bases or (LearnerObject,)))
    odd = sorted(k for k in vars(cls) if k.startswith("_") and k not in _MADE_BY_PYTHON
                 and not (k == SLOTS and slot_names(vars(cls)[k]) is not None)
                 and not (private(k) and k not in _HOOKS))
    if odd or type(cls) is not type:
        raise Refused(f"class {name}: {', '.join(odd) or 'its metaclass'} is not allowed here")
    _classes.add(cls)
    return cls


def learner_function(obj: Any) -> bool:
    """Whether `obj` is a function the learner's code defined (a `def` or a lambda of theirs),
    which may carry attributes of its own (`wrapper.calls = 0`)."""
    return type(obj) is types.FunctionType and obj.__code__.co_filename == CODE_FILE


def noted(obj: Any, name: str) -> bool:
    """Whether `obj.name` is a note a learner keeps on a plain tensor (`x.g`, its gradient, as
    one course writes it): a name of their own, none a tensor has."""
    return type(obj) is torch.Tensor and isinstance(name, str) and name.isidentifier() \
        and not name.startswith("_") and not hasattr(torch.Tensor, name)


def _assignable(obj: Any, name: str, value: Any = None) -> None:
    # A class of the learner's may be given a method of theirs afterwards (`Grads.ce_fused =
    # ce_fused`); nothing else is set on a class, theirs or not.
    if isinstance(obj, type) and not (obj in _classes and obj not in SANDBOX_CLASSES
                                      and learner_function(value)):
        raise Refused(f"assigning to .{name} of a class: a class of yours may be given only "
                      "a function of yours, as a method")
    if learner_function(obj) or isinstance(obj, type):
        # A function of the learner's carries plain attributes of its own.
        if not isinstance(name, str) or name.startswith("_"):
            raise Refused(f"the attribute .{name} is closed: names starting with an underscore "
                          "reach into Python's internals")
        return
    if noted(obj, name):
        return
    if type(obj) not in _classes:
        raise Refused(f"assigning to .{name} of a {type(obj).__name__}: attributes can be set "
                      "only on objects of your own classes (or a name of your own on a tensor, "
                      "`x.g`); assign to a plain name instead")
    if not isinstance(name, str) or name.startswith("_") and not private(name):
        raise Refused(f"the attribute .{name} is closed: names starting with an underscore "
                      "reach into Python's internals")


def set_attribute(obj: Any, name: str, value: Any) -> None:
    """`obj.name = value`, for an object of the learner's own classes."""
    _assignable(obj, name, value)
    setattr(obj, name, value)


def augment_attribute(obj: Any, name: str, op: str, value: Any) -> None:
    """`obj.name += value` (or another augmented operator), in place where the value allows,
    as Python does it."""
    _assignable(obj, name)
    setattr(obj, name, _IN_PLACE[op](getattr(obj, name), value))


def instance_attributes(obj: Any) -> dict[str, Any]:
    """An object's attributes, where it is one of the learner's (for the tutor's own reading of
    what a program kept, never for learner code)."""
    if type(obj) not in _classes:
        return {}
    kept = dict(vars(obj))
    for cls in type(obj).__mro__:  # and what a class keeps in its `__slots__`
        for name in slot_names(vars(cls).get(SLOTS, ())) or ():
            if name not in kept and hasattr(obj, name):
                kept[name] = getattr(obj, name)
    return kept
