"""A fresh, confined process for every piece of learner code.

The worker keeps the lesson warm and never runs learner code itself: it forks a child per check
(or per training run). The child confines itself (confine.py), drops what it must not see, runs
the code, sends back plain data and exits. Whatever the code did to torch's global state, the
random generator, or the interpreter dies with the child, so every check starts from the tutor's
state. Forking with torch loaded costs a few milliseconds.

The child's messages are read with an unpickler that accepts no classes at all: a child that
escaped its guards could otherwise send a pickle that runs code in the worker. Tensors travel as
(dtype, shape, bytes) triples (see `encode_tensor`).

Fork is not available on Windows, and CUDA cannot be used in a child forked after it was
initialised; `can_fork` says when this module applies (see `InProcess` in engine.py for the rest).
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tutor.sandbox import confine

_HEADER = struct.Struct("!Q")
MAX_MESSAGE = 512 * 2**20  # a lesson's tensors are a few hundred kB; anything near this is hostile


def can_fork(device: torch.device) -> bool:
    return hasattr(os, "fork") and device.type == "cpu"


# -- plain data on the pipe --------------------------------------------------------------------
class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the sandbox sent an object of class {module}.{name}")


def loads_plain(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64,
                               torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8,
                               torch.bool)}


def encode_tensor(t: torch.Tensor) -> tuple:
    """A plain, dense tensor as plain data. The caller has checked that it is one."""
    c = t.detach().to("cpu").contiguous().clone()
    raw = ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()) if c.numel() else b""
    return ("tensor", str(c.dtype), list(c.shape), raw)


def decode_tensor(item: tuple) -> torch.Tensor:
    _, dtype_name, shape, raw = item
    dtype = _DTYPES[dtype_name]
    if not raw:
        return torch.zeros(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=dtype)
    return flat.reshape(shape).clone()


# -- the child ------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What became of a child: `done` with its result, or `timeout`, `died` with why."""

    status: str
    result: Any = None
    why: str = ""


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _child(fd: int, parent: int, work: Callable, cpu_seconds: float, memory_gb: float | None,
           scrub: Callable[[], None] | None, os_layers: bool) -> None:
    """Runs in the forked child; never returns."""
    try:
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        # Only the result pipe and stderr stay open: not the worker's pipe to the client, nor
        # anything else the parent happened to hold.
        keep = sorted({fd, 0, 1, 2})
        low = 3
        for k in keep:
            if k >= low:
                os.closerange(low, k)
                low = k + 1
        os.closerange(low, 1 << 16)
        torch.set_num_threads(1)  # OpenMP's pool does not survive fork; one thread is plenty
        if memory_gb is not None:
            confine.limit_memory(memory_gb)
        confine.confine(parent, cpu_seconds, os_layers)
        cancel = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: cancel.set())
        if scrub is not None:
            scrub()

        def send(message: dict) -> None:
            _send(fd, {"type": "message", "message": message})

        result = work(send, cancel)
        _send(fd, {"type": "done", "result": result})
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends regardless
        with contextlib.suppress(BaseException):
            _send(fd, {"type": "crashed", "why": f"{type(exc).__name__}: {str(exc)[:300]}"})
    finally:
        os._exit(0)


def run(work: Callable[[Callable[[dict], None], threading.Event], Any], *,
        timeout: float | None, cpu_seconds: float, memory_gb: float | None = None,
        scrub: Callable[[], None] | None = None,
        on_message: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None, os_layers: bool = True) -> Outcome:
    """Run `work(send, cancel)` in a confined child and return what it returned.

    `timeout` is wall-clock: past it the child is killed. `cancel` set in the parent is passed on
    as SIGUSR1, which sets the child's own event. Messages the child sends go to `on_message`.
    """
    read_fd, write_fd = os.pipe()
    parent = os.getpid()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(write_fd, parent, work, cpu_seconds, memory_gb, scrub, os_layers)
    os.close(write_fd)
    try:
        return _collect(pid, read_fd, timeout, on_message, cancel)
    finally:
        os.close(read_fd)
        _reap(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _collect(pid: int, fd: int, timeout: float | None, on_message: Callable | None,
             cancel: threading.Event | None) -> Outcome:
    deadline = None if timeout is None else time.monotonic() + timeout
    buffer = bytearray()
    cancelled = False
    while True:
        wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        ready, _, _ = select.select([fd], [], [], wait)
        if cancel is not None and cancel.is_set() and not cancelled:
            cancelled = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)
        if not ready:
            if deadline is not None and time.monotonic() >= deadline:
                return Outcome("timeout")
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return Outcome("died", why=_exit_reason(pid))
        buffer += chunk
        while len(buffer) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(buffer)
            if size > MAX_MESSAGE:
                return Outcome("died", why="the sandbox sent a message too large to be real")
            if len(buffer) < _HEADER.size + size:
                break
            data = bytes(buffer[_HEADER.size:_HEADER.size + size])
            del buffer[:_HEADER.size + size]
            try:
                message = loads_plain(data)
            except Exception as exc:  # noqa: BLE001 - a forged message is the child's failure
                return Outcome("died", why=f"the sandbox sent something unreadable ({exc})")
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "done":
                return Outcome("done", message.get("result"))
            if kind == "crashed":
                return Outcome("died", why=str(message.get("why")))
            if kind == "message" and on_message is not None:
                on_message(message.get("message"))


def _exit_reason(pid: int) -> str:
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "it ended without an answer"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU:
            return "cpu"
        if sig == signal.SIGKILL:
            return "killed"
        return f"signal {signal.Signals(sig).name}"
    return "it ended without an answer"
