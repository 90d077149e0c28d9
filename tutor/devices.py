"""Where tensors live: the device a lesson runs on, and a simulated accelerator for a CPU.

The rule (docs/architecture.md, "Where tensors live"): the network, the learner's code and
autograd's float32 references run on the lesson's device; everything that is judged (verdicts,
diagnoses, heatmaps, pictures) is judged on the CPU, and the one place a tensor crosses between
the two is `judged` (device to CPU) or the plan's unpacking in a child (CPU to device). Inside the
learner's code the lesson's device is PyTorch's default device (`learner_default`), so
`torch.ones(n)` lands beside the network as it does on a CPU.

A CPU-only machine cannot show a mistake of device mixing, since every tensor is on the CPU. With
`BACKPROP_TUTOR_SIMULATED_DEVICE=1` the accelerator is simulated: "cuda" resolves to a device
whose tensors really are CPU tensors, tagged, and a `TorchFunctionMode` (`Simulated`) holds every
torch call to CUDA's rules: mixing a tagged tensor with an untagged one fails as CUDA fails (a
0-dim CPU tensor is allowed anywhere, a CPU index tensor in indexing), `.numpy()` fails, `.cpu()`
and `.to()` copy across, and `tensor.device` says `cuda:0`. Every process the tutor starts under
that variable installs the mode on each of its threads (`install`), so the worker, the checks'
children, training, grading and the notebook's evaluator all run on it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map_only

from tutor.config import SIMULATED_DEVICE, simulated

__all__ = ["SIMULATED_DEVICE", "DeviceError", "Simulated", "describe", "install", "judged",
           "learner_default", "resolve", "simulated"]

CPU = torch.device("cpu")
ACCELERATOR = torch.device("cuda", 0)  # what the simulated device says it is
_TAG = "_backprop_tutor_device"  # the attribute that marks a tensor as on the simulated device


class DeviceError(RuntimeError):
    pass


def resolve(name: str) -> torch.device:
    """`auto` picks cuda, then mps, then cpu; an explicit device must exist. Under the simulated
    device, "cuda" (and so "auto") is the simulated accelerator, and this thread runs on it."""
    if simulated() and (name == "auto" or torch.device(name).type == "cuda"):
        install()
        return ACCELERATOR
    has_mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if has_mps else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("CUDA was asked for, but this PyTorch sees no CUDA device")
    if name == "mps" and not has_mps:
        raise DeviceError("MPS (Apple GPU) was asked for, but it is not available here")
    return torch.device(name)


def describe(device: torch.device | str) -> str:
    """The device as a learner reads it in a check's output: `cuda:0`, or `cuda:0 (simulated on
    the CPU)`."""
    text = str(device)
    if simulated() and torch.device(text).type == "cuda":
        return f"{text} (simulated on the CPU)"
    return text


def judged(value: Any) -> Any:
    """`value` (a tensor, or a container of them) on the CPU, where everything is judged: the
    one crossing from the lesson's device into grading. A CPU tensor is returned as it is."""
    return tree_map_only(torch.Tensor, _to_cpu, value)


def _to_cpu(t: torch.Tensor) -> torch.Tensor:
    return t if t.device.type == "cpu" else t.cpu()


_lesson = threading.local()


def use(device: torch.device) -> None:
    """The device this process runs the learner's code on (a check's or a run's child)."""
    _lesson.device = device


@contextlib.contextmanager
def learner() -> Iterator[None]:
    """Around the learner's own code: tensors made without a device land on the lesson's device,
    as code that ran on a CPU expects (`torch.ones(n) @ dlogits`, a mask from `torch.arange`,
    `torch.eye(T)`). The tutor's own code around it keeps PyTorch's default."""
    device = getattr(_lesson, "device", None)
    if device is None or device.type == "cpu":
        yield
        return
    with learner_default(device):
        yield


@contextlib.contextmanager
def learner_default(device: torch.device | str) -> Iterator[None]:
    """Inside: tensors made without a device land on `device`."""
    device = torch.device(device)
    if device.type == "cpu":
        yield
        return
    mode = _current()
    if mode is not None:
        before, mode.default = mode.default, True
        try:
            yield
        finally:
            mode.default = before
        return
    with _Placement(device):
        yield


# --- real accelerators: factories without a device land on it --------------------------------

_LIKE = {torch.zeros_like, torch.ones_like, torch.empty_like, torch.full_like, torch.rand_like,
         torch.randn_like, torch.randint_like}


def _constructors() -> set:
    from torch.utils._device import _device_constructors

    return set(_device_constructors())


class _Placement(TorchFunctionMode):
    """PyTorch's default device, plus `*_like` of a CPU value (which PyTorch leaves on the
    CPU): the learner wrote none of them with a device in mind."""

    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.device = device
        self.constructors = _constructors()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if kwargs.get("device") is None and (func in self.constructors or func in _LIKE):
            kwargs = {**kwargs, "device": self.device}
        return func(*args, **kwargs)


# --- the simulated accelerator -----------------------------------------------------------------

_installed = threading.local()
_patched = False
_lock = threading.Lock()


def install() -> None:
    """Under the simulated device: run this thread, and every thread started after, on it.
    Safe to call again; does nothing without `BACKPROP_TUTOR_SIMULATED_DEVICE`."""
    global _patched
    if not simulated():
        return
    if getattr(_installed, "mode", None) is None:
        mode = Simulated()
        mode.__enter__()
        _installed.mode = mode
    with _lock:
        if not _patched:
            # Function modes belong to a thread: a thread the worker starts must get one too.
            run = threading.Thread.run

            def run_simulated(self: threading.Thread) -> None:
                install()
                run(self)

            threading.Thread.run = run_simulated  # type: ignore[method-assign]
            _patched = True


def _current() -> Simulated | None:
    return getattr(_installed, "mode", None)


# The simulation's own Python (it tags every tensor an operation makes) costs CPU time that no
# real device spends: about three times a plain CPU check's. A CPU budget of the tutor's own
# work (the search for a wrong answer's smallest change) is stretched by this much under it, so
# that a diagnosis the CPU finds within its budget is found on the simulated device too.
SIMULATION_COST = 4.0


def cost() -> float:
    """How much more CPU time the tutor's own work takes on this thread's device than on the
    CPU: SIMULATION_COST under the simulated accelerator, else 1."""
    return SIMULATION_COST if _current() is not None else 1.0


def on_accelerator(t: torch.Tensor) -> bool:
    """Whether `t` is on the simulated accelerator (always False without it)."""
    return bool(t.__dict__.get(_TAG)) if _has_dict(t) else False


def _has_dict(t: torch.Tensor) -> bool:
    try:
        t.__dict__  # noqa: B018 - a tensor subclass without one is on the CPU
    except AttributeError:
        return False
    return True


def _tag(value: Any, on: bool) -> Any:
    if on:
        for t in _tensors(value):
            t.__dict__[_TAG] = True
    return value


def _tensors(value: Any, depth: int = 3) -> list[torch.Tensor]:
    """The tensors in a call's arguments or results: tensors, and tuples, lists and dicts of
    them a few levels deep (what torch's functions take and give). Faster than a pytree walk,
    which every torch call under the simulated device would pay."""
    if isinstance(value, torch.Tensor):
        return [value]
    if depth == 0:
        return []
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (tuple, list)):
        return []
    out: list[torch.Tensor] = []
    for item in value:
        if isinstance(item, torch.Tensor):
            out.append(item)
        elif isinstance(item, (tuple, list, dict)):
            out += _tensors(item, depth - 1)
    return out


def _is_device(value: Any) -> bool:
    return isinstance(value, (str, torch.device, int)) and not isinstance(value, bool)


def _accelerated(device: Any) -> bool:
    """Whether a device argument names the accelerator."""
    if isinstance(device, int):
        return True  # a bare ordinal is a CUDA device
    return torch.device(device).type == "cuda"


def _elsewhere(device: Any) -> bool:
    """A device that is neither the CPU nor the accelerator (`meta`, for shapes without
    values): PyTorch handles it as it always does."""
    return (device is not None and not isinstance(device, int) and _is_device(device)
            and torch.device(device).type not in ("cpu", "cuda"))


def _mixed(where: str) -> RuntimeError:
    return RuntimeError("Expected all tensors to be on the same device, but found at least two "
                        f"devices, cuda:0 and cpu! ({where})")


_T = torch.Tensor
_GET_DEVICE = _T.device.__get__
_GET_IS_CUDA = _T.is_cuda.__get__
_GET_IS_CPU = _T.is_cpu.__get__
_GRAD_SET = _T.grad.__set__
_INDEXING = {_T.__getitem__, _T.__setitem__, _T.index_put_, _T.index_put, torch.index_put,
             torch.index_put_}
# Copies across devices are what they are for.
_CROSSING = {_T.copy_, torch.Tensor.set_}


def _name(func: Any) -> str:
    return getattr(func, "__name__", None) or str(func)


class Simulated(TorchFunctionMode):
    """CUDA's rules about devices, on CPU tensors: a tagged tensor is "on cuda:0". `default`:
    tensors made without a device land on the accelerator (inside `learner_default`)."""

    def __init__(self) -> None:
        super().__init__()
        self.default = False
        self.constructors = _constructors()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, C901
        kwargs = dict(kwargs or {})
        if func in (_GET_DEVICE, _GET_IS_CUDA, _GET_IS_CPU, _T.get_device) \
                and on_accelerator(args[0]):
            return {_GET_DEVICE: ACCELERATOR, _GET_IS_CUDA: True, _GET_IS_CPU: False}.get(func, 0)
        if func in (_T.cpu, _T.cuda, _T.to):
            return self._move(func, args, kwargs)
        if func == _T.numpy and on_accelerator(args[0]):
            raise TypeError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() "
                            "to copy the tensor to host memory first.")
        if (func == _GRAD_SET and args[1] is not None
                and on_accelerator(args[0]) != on_accelerator(args[1])):
            raise RuntimeError("assigned grad has data located on a different device")
        if func in (_T.__repr__, _T.__str__) and on_accelerator(args[0]):
            text = func(*args, **kwargs)
            return text[:-1] + ", device='cuda:0')" if text.endswith(")") else text
        on = self._placed(func, args, kwargs)
        return _tag(func(*args, **kwargs), on)

    def _placed(self, func: Any, args: tuple, kwargs: dict) -> bool:
        """Whether `func`'s outputs are on the accelerator; raises where CUDA would refuse."""
        if _elsewhere(kwargs.get("device")):
            return False
        if "device" in kwargs and kwargs["device"] is not None:
            on = _accelerated(kwargs["device"])
            kwargs["device"] = CPU
            self._generator(kwargs, on)
            return on
        if func in self.constructors:
            self._generator(kwargs, self.default)
            return self.default
        tensors = _tensors(args) + (_tensors(kwargs) if kwargs else [])
        if func in _LIKE:
            return on_accelerator(tensors[0]) or self.default
        if not tensors:
            return False
        on = [on_accelerator(t) for t in tensors]
        if not any(on):
            return False
        if all(on) or func in _CROSSING:
            return True
        first = tensors[0]
        for t, here in zip(tensors, on, strict=True):
            if here or t.dim() == 0:
                continue  # CUDA takes a CPU scalar tensor in any operation
            if func in _INDEXING and t is not first:
                continue  # and CPU index tensors (and values) in indexing
            raise _mixed(_name(func))
        if not on[0] and first.dim() == 0 and func not in _INDEXING:
            return True  # a CPU scalar with a cuda tensor gives a cuda tensor
        return on[0] or func not in _INDEXING

    def _generator(self, kwargs: dict, on: bool) -> None:
        g = kwargs.get("generator")
        if on and g is not None and g.device.type == "cpu":
            raise RuntimeError("Expected a 'cuda' device type for generator but found 'cpu'")

    def _move(self, func: Any, args: tuple, kwargs: dict) -> torch.Tensor:
        """`.cpu()`, `.cuda()` and `.to(...)`: a copy where the device changes, as on CUDA."""
        source, rest = args[0], list(args[1:])
        if any(_elsewhere(a) for a in (*rest, kwargs.get("device"))):
            return func(*args, **kwargs)  # to `meta`: neither device here, and no copy to make
        was = on_accelerator(source)
        if func == _T.cpu:
            target = False
        elif func == _T.cuda:  # its arguments (an ordinal, non_blocking) change nothing here
            target, rest, kwargs, func = True, [], {}, _T.to
        else:
            target = was
            if rest and isinstance(rest[0], torch.Tensor):
                target = on_accelerator(rest[0])
                other = rest.pop(0)
                kwargs.setdefault("dtype", other.dtype)
            elif rest and _is_device(rest[0]):
                target = _accelerated(rest.pop(0))
            if kwargs.get("device") is not None:
                target = _accelerated(kwargs.pop("device"))
            rest = [a for a in rest if not _is_device(a)]
            func = _T.to
        out = func(source, *rest, **kwargs) if (rest or kwargs or func != _T.to) else source
        if target != was and (out is source or _shares(out, source)):
            out = out.clone()
        if target:
            return _tag(out, True)
        if out is not source and on_accelerator(out):
            out.__dict__.pop(_TAG, None)
        return out


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


