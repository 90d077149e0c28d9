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
initialised; `can_fork` says when this module applies (a started child, spawn.py, serves the
rest).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
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
MAX_MESSAGE = 64 * 2**20  # a lesson's tensors are a few hundred kB; anything near this is hostile
# The tensors one batch's run starts from travel back to the engine (see encode_shared): a
# lesson's forward pass is well under a megabyte, so this leaves room for learners' own tensors
# while two batches and their gradients stay far below MAX_MESSAGE.
MAX_KEPT = 16 * 2**20


class TooLarge(Exception):
    """A message from the child would pass its limit; the text says what, in the learner's terms."""


def megabytes(size: int) -> str:
    return f"{size / 2**20:.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:.0f} MB"


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
    # Read straight from memory: data_ptr() already points at the first element of a view.
    c = t.detach().to("cpu").contiguous()
    raw = ctypes.string_at(c.data_ptr(), c.numel() * c.element_size()) if c.numel() else b""
    return ("tensor", str(c.dtype), list(c.shape), raw)


def decode_tensor(item: tuple) -> torch.Tensor:
    _, dtype_name, shape, raw = item
    dtype = _DTYPES[dtype_name]
    if not raw:
        return torch.zeros(shape, dtype=dtype)
    flat = torch.frombuffer(bytearray(raw), dtype=dtype)
    return flat.reshape(shape).clone()


def encode_shared(tensors: dict[str, torch.Tensor], limit: int = MAX_KEPT) -> dict:
    """Plain, dense tensors that may share memory, as plain data that keeps the sharing: each
    block of memory travels once, each tensor as its place in one (offset, shape, stride).

    Raises TooLarge, naming the largest tensor, when the blocks come to more than `limit` bytes;
    nothing is copied before that is known.
    """
    _check_kept(tensors, limit)
    blocks: dict[int, int] = {}
    memory: list[tuple] = []
    places = {}
    for name, t in tensors.items():
        t = t.detach()
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in blocks:
            blocks[key] = len(memory)
            flat = t.new_empty(0).set_(storage)
            memory.append(encode_tensor(flat))
        index = blocks[key]
        if memory[index][1] != str(t.dtype):
            memory.append(encode_tensor(t))
            places[name] = (len(memory) - 1, list(t.shape), None, 0)
            continue
        places[name] = (index, list(t.shape), list(t.stride()), t.storage_offset())
    return {"memory": memory, "places": places}


def _check_kept(tensors: dict[str, torch.Tensor], limit: int) -> None:
    sizes: dict[int, tuple[int, str, int]] = {}  # block -> (bytes, largest tensor, its own bytes)
    for name, t in tensors.items():
        storage = t.untyped_storage()
        own = t.numel() * t.element_size()
        known = sizes.get(storage.data_ptr())
        if known is None or own > known[2]:
            sizes[storage.data_ptr()] = (storage.nbytes(), name, own)
    total = sum(size for size, _, _ in sizes.values())
    if total <= limit:
        return
    size, name, own = max(sizes.values())
    what = (f"a {megabytes(size)} tensor `{name}`" if own >= size else
            f"`{name}`, a view into {megabytes(size)} of memory")
    kept = (f"{what} between steps" if size > limit else
            f"{megabytes(total)} of tensors between steps, the largest {what}")
    raise TooLarge(f"your code keeps {kept}; the limit is {megabytes(limit)}. Delete what the "
                   f"later steps do not need (`del {name}` at the end of the step that makes it) "
                   "or keep it smaller")


def decode_shared(data: dict) -> dict[str, torch.Tensor]:
    memory = [decode_tensor(m) for m in data["memory"]]
    out = {}
    for name, (index, shape, stride, offset) in data["places"].items():
        flat = memory[index]
        out[str(name)] = (flat.reshape(shape) if stride is None
                          else flat.as_strided(shape, stride, offset))
    return out


# -- the child ------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What became of a child: `done` with its result, or `timeout`, `died` with why."""

    status: str
    result: Any = None
    why: str = ""


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > MAX_MESSAGE:  # said here, where it is known, rather than refused by the reader
        raise TooLarge(f"the sandbox's answer came to {megabytes(len(data))}; the limit is "
                       f"{megabytes(MAX_MESSAGE)}")
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_request(fd: int) -> Any:
    header = _read_exact(fd, _HEADER.size)
    (size,) = _HEADER.unpack(header)
    return loads_plain(_read_exact(fd, size))


def _read_exact(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            raise EOFError("the parent went away")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def keep_only(*fds: int) -> None:
    """In a freshly forked child: only these descriptors and stderr stay open (stdin reads
    nothing), not the worker's pipe to the client, nor anything else the parent held."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    keep = sorted({*fds, 0, 1, 2})
    low = 3
    for k in keep:
        if k >= low:
            os.closerange(low, k)
            low = k + 1
    os.closerange(low, 1 << 16)


def _child(requests: int, results: int, parent: int, work: Callable, cpu_seconds: float,
           memory_gb: float | None, os_layers: bool) -> None:
    """Runs in the forked child; never returns."""
    try:
        keep_only(requests, results)
        torch.set_num_threads(1)  # OpenMP's pool does not survive fork; one thread is plenty
        if memory_gb is not None:
            confine.limit_memory(memory_gb)
        confine.confine(parent, cpu_seconds, os_layers)
        cancel = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: cancel.set())
        request = _read_request(requests)

        def send(message: dict) -> None:
            _send(results, {"type": "message", "message": message})

        result = work(request, send, cancel)
        _send(results, {"type": "done", "result": result})
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends regardless
        with contextlib.suppress(BaseException):
            _send(results, {"type": "crashed", "why": f"{type(exc).__name__}: {str(exc)[:300]}"})
    finally:
        os._exit(0)


class Child:
    """A confined child, forked now, that will run `work(request, send, cancel)` once.

    Forking a process that holds torch takes tens of milliseconds, so the worker forks the next
    child as soon as a check is answered; the learner's next check then finds it ready. Until
    the request arrives the child only waits on its pipe, already confined.
    """

    def __init__(self, work: Callable[[Any, Callable[[dict], None], threading.Event], Any], *,
                 cpu_seconds: float, memory_gb: float | None = None,
                 os_layers: bool = True) -> None:
        req_read, self._requests = os.pipe()
        self._results, res_write = os.pipe()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        # Objects the collector would visit in the child are copied page by page when it does:
        # freezing them first keeps the child's memory shared and its start fast.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            gc.disable()  # a child lives for one check; its garbage goes with it
            os.close(self._requests)
            os.close(self._results)
            _child(req_read, res_write, parent, work, cpu_seconds, memory_gb, os_layers)
        os.close(req_read)
        os.close(res_write)
        self.pid = pid
        self._used = False

    def alive(self) -> bool:
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return False
        return done == 0

    def run(self, request: Any, *, timeout: float | None,
            on_message: Callable[[dict], None] | None = None,
            cancel: threading.Event | None = None,
            quiet: Callable[[], float | None] | None = None) -> Outcome:
        """Hand the child its request and wait for its answer; the child is gone afterwards.
        `quiet()` is the longest the child may now go without a message."""
        if self._used:
            raise RuntimeError("a child runs one request")
        self._used = True
        try:
            try:
                _send(self._requests, request)
            except OSError:
                return Outcome("died", why="it had ended before the request")
            return _collect(self.pid, self._results, timeout, on_message, cancel, quiet)
        finally:
            self.discard()

    def discard(self) -> None:
        for fd in (self._requests, self._results):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._requests = self._results = -1
        _reap(self.pid)


def run(work: Callable[[Callable[[dict], None], threading.Event], Any], *,
        timeout: float | None, cpu_seconds: float, memory_gb: float | None = None,
        on_message: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None, os_layers: bool = True,
        quiet: Callable[[], float | None] | None = None) -> Outcome:
    """Run `work(send, cancel)` in a new confined child and return what it returned.

    `timeout` is wall-clock: past it the child is killed; so it is when it stays silent for
    longer than `quiet()` allows. `cancel` set in the parent is passed on
    as SIGUSR1, which sets the child's own event. Messages the child sends go to `on_message`.
    """
    child = Child(lambda _request, send, cancel_: work(send, cancel_), cpu_seconds=cpu_seconds,
                  memory_gb=memory_gb, os_layers=os_layers)
    return child.run(None, timeout=timeout, on_message=on_message, cancel=cancel, quiet=quiet)


def _reap(pid: int) -> None:
    """Kill and collect a child without waiting for it: tearing down a process that shared the
    worker's memory takes longer than the whole check, and nobody needs to wait for that."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    threading.Thread(target=_wait, args=(pid,), daemon=True).start()


def _wait(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _collect(pid: int, fd: int, timeout: float | None, on_message: Callable | None,
             cancel: threading.Event | None,
             quiet: Callable[[], float | None] | None = None) -> Outcome:
    deadline = None if timeout is None else time.monotonic() + timeout
    heard = time.monotonic()
    buffer = bytearray()
    cancelled = False
    while True:
        wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        silence = quiet() if quiet is not None else None
        if silence is not None and time.monotonic() >= heard + silence:
            return Outcome("timeout", why="quiet")
        ready, _, _ = select.select([fd], [], [], wait)
        if cancel is not None and cancel.is_set() and not cancelled:
            cancelled = True
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGUSR1)
        if not ready:
            if deadline is not None and time.monotonic() >= deadline:
                return Outcome("timeout", why="deadline")
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return Outcome("died", why=_exit_reason(pid))
        heard = time.monotonic()
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
