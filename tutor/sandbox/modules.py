"""What `torch`, `F` and `math` are inside the sandbox, and the guard that answers for them.

Learner code gets stand-in module objects named like the real ones, holding only the allowed
names (see allowlist.py), and every attribute read goes through the guard (guard.py), which
refuses a missing name with its reason. So a module handed to learner code carries none of what
the real module imports (`torch.sys`, `torch.os`, the `_C` re-exports).
"""

from __future__ import annotations

import functools
import math
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from tutor.sandbox import allowlist, objects
from tutor.sandbox.classes import Tensor
from tutor.sandbox.guard import Guard, Refused
from tutor.sandbox.objects import SimpleNamespace, learner_function


def _zeros_like_empty() -> dict[str, Any]:
    """torch.empty and friends, answered with zeros (see allowlist.UNINITIALISED)."""

    def empty(*size: Any, **kw: Any) -> torch.Tensor:
        return torch.zeros(*size, **kw)

    def empty_like(t: torch.Tensor, **kw: Any) -> torch.Tensor:
        return torch.zeros_like(t, **kw)

    def empty_strided(size: Any, stride: Any, **kw: Any) -> torch.Tensor:
        return torch.empty_strided(size, stride, **kw).zero_()

    return {"empty": empty, "empty_like": empty_like, "empty_strided": empty_strided}


_BYTES = (bytes, bytearray, memoryview)


def _bytes_refusing_asarray() -> dict[str, Any]:
    """torch.asarray reads an object that offers its buffer in place: on a bytes literal it gives
    a tensor whose writes land in memory Python holds as immutable, so bytes are refused."""

    def asarray(obj: Any, *args: Any, **kw: Any) -> torch.Tensor:
        if isinstance(obj, _BYTES):
            raise Refused("torch.asarray of bytes is not available in the sandbox: it reads the "
                          "object's raw memory; use torch.tensor(list(data))")
        return torch.asarray(obj, *args, **kw)

    return {"asarray": asarray}


def _tensor_wrappers() -> dict[str, Any]:
    """Tensor methods whose result must not carry uninitialised memory, bound per tensor."""

    def new_empty(t: torch.Tensor) -> Any:
        return lambda *size, **kw: t.new_zeros(*size, **kw)

    def new_empty_strided(t: torch.Tensor) -> Any:
        return lambda size, stride, **kw: t.new_empty_strided(size, stride, **kw).zero_()

    return {"new_empty": new_empty, "new_empty_strided": new_empty_strided}


def _table(module_name: str, real: types.ModuleType, stand_ins: dict[str, types.ModuleType]
           ) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in allowlist.MODULES[module_name]:
        qualified = f"{module_name}.{name}"
        if qualified in stand_ins:
            values[name] = stand_ins[qualified]
        elif hasattr(real, name):
            values[name] = getattr(real, name)
    if module_name == "torch":
        values.update(_zeros_like_empty())
        values.update(_bytes_refusing_asarray())
        values["Tensor"] = Tensor
    return values


def _build() -> tuple[dict[str, types.ModuleType], Guard]:
    real = {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": F,
            "torch.linalg": torch.linalg, "torch.special": torch.special, "torch.fft": torch.fft,
            "math": math}
    stand_ins = {name: types.ModuleType(name) for name in real}
    held = {}
    for name, module in real.items():
        table = _table(name, module, stand_ins)
        for attr, value in table.items():
            setattr(stand_ins[name], attr, value)
        held[name] = frozenset(table)
    guard = Guard(torch.Tensor, held, _tensor_wrappers(), Tensor)
    return stand_ins, guard


def _functools() -> types.ModuleType:
    """What a backward pass built of closures uses of functools (`@functools.wraps(fn)` on a
    decorator of the learner's, `partial`, `reduce`, a cache): `wraps` dresses only a function
    of the learner's, and copies its name and text, never another object's attributes."""
    module = types.ModuleType("functools")

    def wraps(wrapped: Any) -> Callable[[Any], Any]:
        def decorate(wrapper: Any) -> Any:
            if not learner_function(wrapper):
                raise Refused("functools.wraps dresses only a function of yours")
            return functools.update_wrapper(wrapper, wrapped, updated=())
        return decorate

    held = {"wraps": wraps, "partial": functools.partial, "reduce": functools.reduce,
            "lru_cache": functools.lru_cache, "cache": functools.cache}
    assert set(held) == allowlist.SMALL_MODULES["functools"]
    for name, value in held.items():
        setattr(module, name, value)
    return module


def _types() -> types.ModuleType:
    """`types.SimpleNamespace`, the record a notebook keeps its gradients in."""
    module = types.ModuleType("types")
    module.SimpleNamespace = SimpleNamespace  # type: ignore[attr-defined]
    return module


def _random() -> types.ModuleType:
    """`random` as a notebook shuffles its words with it: a generator of its own (seeded by
    `random.seed`), never the process's."""
    import random

    module = types.ModuleType("random")
    own = random.Random(0)
    for name in allowlist.SMALL_MODULES["random"]:
        setattr(module, name, getattr(own, name))
    return module


def _collections() -> types.ModuleType:
    """The containers a notebook builds its data with (a window of context as a `deque`)."""
    import collections

    module = types.ModuleType("collections")
    for name in allowlist.SMALL_MODULES["collections"]:
        setattr(module, name, getattr(collections, name))
    return module


_STAND_INS, GUARD = _build()
# torch.nn's base class and parameter, as a learner's model builds on them (sandbox/objects.py).
_STAND_INS["torch.nn"].Module = objects.Module
_STAND_INS["torch.nn"].Parameter = objects.parameter
GUARD.modules["torch.nn"] = GUARD.modules["torch.nn"] | allowlist.NN
for _name, _module in (("functools", _functools()), ("types", _types()),
                       ("random", _random()), ("collections", _collections())):
    _STAND_INS[_name] = _module
    GUARD.modules[_name] = frozenset(k for k in vars(_module) if not k.startswith("_"))

# The names learner code starts with.
MODULES = {"torch": _STAND_INS["torch"], "F": _STAND_INS["torch.nn.functional"],
           "math": _STAND_INS["math"], "functools": _STAND_INS["functools"],
           "types": _STAND_INS["types"], "random": _STAND_INS["random"],
           "collections": _STAND_INS["collections"]}
