"""The classes learner code can hold: `type()` hands out none that builds something dangerous.

The real class of a tensor is a door below the tensor API. Called, `torch.Tensor` runs the legacy
constructor, which gives uninitialised memory for sizes and wraps whatever address `cdata=` names;
its methods read on the class would skip the sandbox's zeroing wrappers. The class of a function,
a module or a generator builds interpreter objects from parts learner code should never hold.

So `type()` answers with stand-ins. Every tensor's class is the sandbox's `torch.Tensor`, whose
call builds zeros or copies data. Anything else that is not plain data gets a class that prints,
compares (`type(a) is type(b)`) and answers `isinstance` like the real one, but refuses to be
called. Plain data (numbers, strings, containers), the classes the sandbox's modules and builtins
already hand out (`torch.Size`, `torch.dtype`, `torch.finfo`, `range`, ...), the named tuples
that `x.max(1)` returns, and ordinary exceptions come back as they are: calling them builds
nothing that reaches memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from tutor.sandbox.guard import Refused

# Values whose class may be called freely: it builds the same kind of plain value.
_PLAIN: frozenset[type] = frozenset((
    int, float, complex, bool, str, bytes, list, tuple, dict, set, frozenset, range, slice,
    type(None), type(Ellipsis), type(NotImplemented),
))


def _is_sizes(args: tuple) -> bool:
    if len(args) == 1 and isinstance(args[0], torch.Size):
        return True
    return all(isinstance(a, int) and not isinstance(a, bool) for a in args)


def legacy_tensor(*args: Any, **kw: Any) -> torch.Tensor:
    """`torch.Tensor(...)` as learner code may call it: sizes give zeros, a list or tuple of
    numbers is copied, a tensor is returned as the real constructor would (as itself)."""
    for name in kw:
        if name != "device":
            why = ("it wraps the memory at a raw address, which reaches below the tensor"
                   if name == "cdata" else "the sandbox's torch.Tensor takes sizes or data")
            raise Refused(f"torch.Tensor(..., {name}=...) is not available in the sandbox: {why}; "
                          "use torch.zeros(sizes) or torch.tensor(data)")
    device = kw.get("device")
    dtype = torch.get_default_dtype()
    if _is_sizes(args):
        return torch.zeros(*(args or (0,)), dtype=dtype, device=device)
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return torch.tensor(args[0], dtype=dtype, device=device)
    if len(args) == 1 and type(args[0]) is torch.Tensor and args[0].dtype == dtype:
        return args[0] if device is None else args[0].to(device)
    raise Refused("torch.Tensor(...) takes sizes, a list of numbers or a float tensor in the "
                  "sandbox (storages, buffers and other tensor kinds reach below the tensor); "
                  "use torch.zeros(sizes) or torch.tensor(data)")


class _TensorMeta(type):
    """The sandbox's `torch.Tensor`: isinstance and issubclass work as usual; calling it goes
    through `legacy_tensor`."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Tensor)

    def __subclasscheck__(cls, sub: type) -> bool:
        return sub is cls or (isinstance(sub, type) and issubclass(sub, torch.Tensor))

    def __call__(cls, *args: Any, **kw: Any) -> torch.Tensor:
        return legacy_tensor(*args, **kw)


# Named as the real class is, so that `print(type(x))` shows <class 'torch.Tensor'>.
Tensor = _TensorMeta("Tensor", (), {"__module__": "torch", "__qualname__": "Tensor",
                                    "__doc__": "Stands for torch.Tensor in learner code."})

_REAL: dict[type, type] = {}  # stand-in -> the class it stands for


class _StandInMeta(type):
    """A class that stands for a real one it must not hand out: the same name, the same answers
    to isinstance and issubclass, no calls."""

    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, _REAL[cls])

    def __subclasscheck__(cls, sub: type) -> bool:
        real = _REAL.get(sub, sub)
        return isinstance(real, type) and issubclass(real, _REAL[cls])

    def __call__(cls, *args: Any, **kw: Any) -> Any:
        raise Refused(f"calling type(...) of a {cls.__name__} is not available in the sandbox: "
                      "type() hands out a class to print and compare, not to build new objects")


def _module_name(real: type) -> str:
    # The sandbox's own classes (a refusal caught as an exception, say) are not named by their
    # module: it would only tell learner code where the tutor keeps its files.
    module = getattr(real, "__module__", None) or "builtins"
    return "sandbox" if module.split(".")[0] == "tutor" else module


class TypeOf:
    """The `type` builtin of the sandbox: `TypeOf(classes)(obj)`, where `classes` are those the
    sandbox already hands out and so may come back as they are."""

    __name__ = "type"

    def __repr__(self) -> str:
        return "<class 'type'>"  # as the builtin prints; not where the tutor keeps this one

    def __init__(self, classes: Iterable[type]) -> None:
        self._open = _PLAIN | frozenset(c for c in classes if c is not Tensor)
        self._stand_ins: dict[type, type] = {}

    def __call__(self, obj: Any) -> type:
        if isinstance(obj, type):
            raise Refused("type() of a class is not available in the sandbox: the class of a class "
                          "builds new classes; print the class itself instead")
        if isinstance(obj, torch.Tensor):
            return Tensor
        real = type(obj)
        if real in self._open or _handed_out(real):
            return real
        stand_in = self._stand_ins.get(real)
        if stand_in is None:
            stand_in = _StandInMeta(real.__name__, (), {
                "__module__": _module_name(real), "__qualname__": real.__qualname__,
                "__doc__": None})
            _REAL[stand_in] = real
            self._stand_ins[real] = stand_in
        return stand_in


def _handed_out(real: type) -> bool:
    """torch's named tuples (`x.max(1)`) and the exceptions of Python and torch: calling them
    builds a tuple or an exception, nothing more."""
    module = getattr(real, "__module__", "") or ""
    if module == "torch.return_types":
        return True
    return issubclass(real, Exception) and (module == "builtins"
                                            or module.split(".")[0] == "torch")
