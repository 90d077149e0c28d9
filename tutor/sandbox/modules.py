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

from tutor.sandbox import allowlist, layers, objects, records
from tutor.sandbox.classes import Tensor
from tutor.sandbox.guard import RECORD_TUPLES, Guard, Refused
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

    def as_strided(t: torch.Tensor) -> Any:
        return lambda size, stride, storage_offset=None: strided_view(t, size, stride,
                                                                       storage_offset)

    return {"new_empty": new_empty, "new_empty_strided": new_empty_strided,
            "as_strided": as_strided}


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
            ) -> torch.Tensor:
    """`F.linear`, as the product it is (`input @ weight.T + bias`): a notebook that keeps its
    weights as (out, in) is traced reading each one laid out (tutor/core/frame.py), where the
    lesson keeps it as (in, out)."""
    out = input @ weight.T
    return out if bias is None else out + bias


def strided_view(t: torch.Tensor, size: Any, stride: Any, storage_offset: Any = None
                 ) -> torch.Tensor:
    """`t.as_strided(size, stride)`, the windows of a convolution or a pool, over `t`'s own
    entries only: a view that reaches past them would read what else its memory holds (another
    tensor's values, or memory never written)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("as_strided needs a tensor")
    size, stride = tuple(int(n) for n in size), tuple(int(s) for s in stride)
    start = t.storage_offset() if storage_offset is None else int(storage_offset)
    if len(size) != len(stride) or any(n < 0 for n in size) or any(s < 0 for s in stride):
        raise Refused("as_strided takes as many sizes as strides, none of them negative")
    if not t.is_contiguous():
        raise Refused("as_strided in the sandbox reads a contiguous tensor's own entries: call "
                      ".contiguous() on it first")
    if all(n > 0 for n in size):
        last = start + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
        if start < t.storage_offset() or last >= t.storage_offset() + t.numel():
            raise Refused("as_strided in the sandbox reads only the tensor's own entries: this "
                          "view reaches past them (check its sizes and strides)")
    return torch.as_strided(t, size, stride, start)


def _table(module_name: str, real: types.ModuleType, stand_ins: dict[str, types.ModuleType]
           ) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for name in allowlist.MODULES[module_name]:
        qualified = f"{module_name}.{name}"
        if qualified in stand_ins:
            values[name] = stand_ins[qualified]
        elif hasattr(real, name):
            values[name] = getattr(real, name)
    if module_name == "torch.nn.functional":
        values["linear"] = _linear
    if module_name == "torch":
        values["as_strided"] = strided_view
        values.update(_zeros_like_empty())
        values.update(_bytes_refusing_asarray())
        values["Tensor"] = Tensor
    return values


def _build() -> tuple[dict[str, types.ModuleType], Guard]:
    real = {"torch": torch, "torch.nn": torch.nn, "torch.nn.functional": F,
            "torch.linalg": torch.linalg, "torch.special": torch.special, "torch.fft": torch.fft,
            "torch.nn.utils.rnn": torch.nn.utils.rnn,
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
    for name in allowlist.SMALL_MODULES["random"] - {"Random"}:
        setattr(module, name, getattr(own, name))

    def Random(seed: Any = None) -> random.Random:  # noqa: N802 - the class's own name
        """A generator of the notebook's own (`rng = random.Random(7)`), seeded as it says."""
        return random.Random(seed)

    module.Random = Random  # type: ignore[attr-defined]
    return module


def _collections() -> types.ModuleType:
    """The containers a notebook builds its data with (a window of context as a `deque`)."""
    import collections

    module = types.ModuleType("collections")
    for name in allowlist.SMALL_MODULES["collections"]:
        setattr(module, name, getattr(collections, name))

    @functools.wraps(collections.namedtuple)
    def namedtuple(*args: Any, **kw: Any) -> type:
        made = collections.namedtuple(*args, **kw)
        RECORD_TUPLES.add(made)
        return made

    module.namedtuple = namedtuple
    return module


def _held(name: str) -> types.ModuleType:
    """A module of Python's own, holding only what its allow list names: each a plain function
    of what it is given (or a constant), none of them a door to the process."""
    import importlib

    real = importlib.import_module(name)
    module = types.ModuleType(name)
    for attr in allowlist.SMALL_MODULES[name]:
        if hasattr(real, attr):
            setattr(module, attr, getattr(real, attr))
    return module


_STAND_INS, GUARD = _build()
# torch.nn's base class and parameter, as a learner's model builds on them (sandbox/objects.py).
_STAND_INS["torch.nn"].Module = objects.Module
_STAND_INS["torch.nn"].Parameter = objects.parameter
for _name, _layer in layers.LAYERS.items():  # and its layers (sandbox/layers.py)
    setattr(_STAND_INS["torch.nn"], _name, _layer)
_STAND_INS["torch.nn"].init = layers.init_module()
assert set(layers.LAYERS) | {"Module", "Parameter", "init"} == allowlist.NN
GUARD.modules["torch.nn"] = GUARD.modules["torch.nn"] | allowlist.NN
GUARD.modules["torch.nn.init"] = layers.INIT
for _name, _module in (("functools", _functools()), ("types", _types()),
                       ("random", _random()), ("collections", _collections()),
                       ("dataclasses", records.module()), ("itertools", _held("itertools")),
                       ("string", _held("string")), ("time", _held("time")),
                       ("hashlib", _held("hashlib")), ("zlib", _held("zlib"))):
    _STAND_INS[_name] = _module
    GUARD.modules[_name] = frozenset(k for k in vars(_module) if not k.startswith("_"))

_STAND_INS["torch.nn.init"] = _STAND_INS["torch.nn"].init
GUARD.stand_ins = _STAND_INS
GUARD.by_name = frozenset({"torch", "torch.nn", "torch.nn.functional", "torch.linalg",
                           "torch.special", "torch.fft", "torch.nn.utils.rnn", "torch.nn.init",
                           "math"})
assert set(GUARD.modules) <= set(_STAND_INS)

# The names learner code starts with.
MODULES = {"torch": _STAND_INS["torch"], "F": _STAND_INS["torch.nn.functional"],
           "math": _STAND_INS["math"], "functools": _STAND_INS["functools"],
           "types": _STAND_INS["types"], "random": _STAND_INS["random"],
           "collections": _STAND_INS["collections"], "dataclasses": _STAND_INS["dataclasses"],
           "itertools": _STAND_INS["itertools"], "string": _STAND_INS["string"],
           "time": _STAND_INS["time"], "hashlib": _STAND_INS["hashlib"],
           "zlib": _STAND_INS["zlib"],
           "rnn_utils": _STAND_INS["torch.nn.utils.rnn"]}
