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
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tutor.process.protocol import (
    CHILD_HEADER,
    MAX_MESSAGE,
    TooLarge,
    megabytes,
    read_frame,
    write_message,
)
from tutor.sandbox import confine
from tutor.sandbox.clean import Capped, clean

# The tensors one batch's run starts from travel back to the engine (see encode_shared): a
# lesson's forward pass is well under a megabyte, so this leaves room for learners' own tensors
# while two batches and their gradients stay far below MAX_MESSAGE.
MAX_KEPT = 16 * 2**20


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
    """A plain, dense tensor as plain data. The caller has checked that it is one, and that it
    is small enough to send: a view that repeats its memory becomes its whole size here."""
    size = t.numel() * t.element_size()
    if size > MAX_MESSAGE:  # refused before anything is copied
        raise TooLarge(f"a tensor of {megabytes(size)}; the limit is {megabytes(MAX_MESSAGE)}")
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
    check_kept(tensors, limit)
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


def check_kept(tensors: dict[str, torch.Tensor], limit: int = MAX_KEPT) -> None:
    """Raise TooLarge, naming the largest tensor, when what `tensors` can reach passes `limit`.

    Each block of memory counts once, with the tensors that are views into it (as
    `encode_shared` sends them). A tensor counts in full, as a copy of its own, when it reads
    more than its block holds (`expand`, `as_strided` with a stride of 0: a few bytes that
    become its whole size wherever it is copied or compared, as the steps after the one that
    keeps it would) or reads the block as another dtype (sent as a copy). Only sizes are read
    here: nothing is copied.
    """
    blocks: dict[int, tuple[int, torch.dtype]] = {}  # block -> (its bytes, its first dtype)
    # (what it adds, what it is, bytes it reads, name, in words, said after "between steps")
    parts: list[tuple[int, int, int, str, str, str]] = []
    for name, t in tensors.items():
        if t.is_meta:  # a shape without memory: nothing to copy or send
            continue
        try:
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse, meta: no one block
            key, nbytes = id(t), 0
        reads = t.numel() * t.element_size() if t.layout == torch.strided else nbytes
        new = key not in blocks
        _, dtype = blocks.setdefault(key, (nbytes, t.dtype))
        if reads > nbytes:
            parts.append((reads, reads, reads, name, f"`{name}`",
                          f", a view that reads {megabytes(reads)} from {_bytes(nbytes)} of "
                          "memory (expand, or a stride of 0, repeats memory without copying "
                          f"it: a later step that copies it needs all {megabytes(reads)})"))
        elif t.dtype != dtype:
            parts.append((reads, reads, reads, name, f"`{name}`",
                          f", {megabytes(reads)} viewed as {str(t.dtype).replace('torch.', '')}"
                          ", which is sent as a copy of its own"))
        else:
            parts.append((nbytes if new else 0, nbytes, reads, name,
                          f"a {megabytes(nbytes)} tensor `{name}`" if reads >= nbytes else
                          f"`{name}`, a view into {megabytes(nbytes)} of memory", ""))
    total = sum(adds for adds, *_ in parts)
    if total <= limit:
        return
    _, size, _, name, what, detail = max(parts, key=lambda p: (p[1], p[2]))
    kept = (f"{what} between steps{detail}" if size > limit else
            f"{megabytes(total)} of tensors between steps, the largest {what}{detail}")
    raise TooLarge(f"your code keeps {kept}; the limit is {megabytes(limit)}. Delete what the "
                   f"later steps do not need (`del {name}` at the end of the step that makes it) "
                   "or keep it smaller")


def _bytes(size: int) -> str:
    if size < 2**10:
        return f"{size} bytes"
    return f"{size / 2**10:.1f} kB" if size < 2**20 else megabytes(size)


def decode_shared(data: dict) -> dict[str, torch.Tensor]:
    memory = [decode_tensor(m) for m in data["memory"]]
    out = {}
    for name, (index, shape, stride, offset) in data["places"].items():
        flat = memory[index]
        out[str(name)] = (flat.reshape(shape) if stride is None
                          else flat.as_strided(shape, stride, offset))
    return out


# -- what a child writes outside its answers --------------------------------------------------
# A child's stdout and stderr: whatever writes there without going through the captured
# `print` (a traceback Python prints for an exception raised while a generator is collected, a
# library's warning, a write to the descriptor itself). Each child's goes to a pipe of its own; the
# worker reads it as it comes and keeps the first and last part, which it writes to its own
# stderr when the child ends, with a note of what was cut: a child that writes in a loop costs
# the log a few kilobytes, however long it writes.
OUTPUT_HEAD = OUTPUT_TAIL = 16 * 1024


def _cut_bytes(count: int) -> bytes:
    return f"\n… {_bytes(count)} cut …\n".encode()


class Spill:
    """The reading end of a child's stdout and stderr, drained without blocking: what it held,
    first and last part, goes to the worker's stderr (`finish`). `what` names the child there."""

    def __init__(self, fd: int, what: str) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.what = what
        self.text: Capped[bytes] = Capped(b"", OUTPUT_HEAD, OUTPUT_TAIL, _cut_bytes)
        self.open = True

    def drain(self) -> bool:
        """Read what is waiting, at most a megabyte (a child that writes without end must not
        keep its reader from its other work); False once every writer has closed its end."""
        for _ in range(16):
            if not self.open:
                break
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                chunk = b""
            if not chunk:
                self.open = False
                break
            self.text.write(chunk)
        return self.open

    def follow(self) -> None:
        """Drain until every writer has closed its end, then `finish` (a thread's whole life,
        for a child that is not watched by `_collect`)."""
        with contextlib.suppress(OSError, ValueError):
            while self.open and self.fd >= 0:
                select.select([self.fd], [], [])
                self.drain()
        self.finish()

    def finish(self) -> None:
        """What is left to read, then the log; the pipe is closed after."""
        if self.fd < 0:
            return
        self.drain()
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1
        if self.text.written:
            log(f"{self.what} wrote:\n" + self.text.text().decode(errors="replace"))


def log(text: str) -> None:
    """A line for the worker's stderr, written to the descriptor at once: no lock of
    `sys.stderr` is taken, which a child forked meanwhile would inherit held. Learner text in it
    is made inert for a terminal, as everywhere it is shown."""
    data = ("backprop-tutor: " + clean(text, 4 * (OUTPUT_HEAD + OUTPUT_TAIL)) + "\n").encode()
    with contextlib.suppress(OSError):
        view = memoryview(data)
        while view:
            view = view[os.write(2, view):]


# -- the child ------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What became of a child: `done` with its result, or `timeout`, `died` with why."""

    status: str
    result: Any = None
    why: str = ""


def _read_request(fd: int) -> Any:
    return loads_plain(read_frame(fd))


def keep_only(*fds: int, output: int | None = None) -> None:
    """In a freshly forked child: only these descriptors, stdout and stderr stay open (stdin
    reads nothing), not the worker's pipe to the client, nor anything else the parent held.
    With `output`, stdout and stderr write to it (a `Spill`'s pipe) instead of the parent's."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    if output is not None:
        os.dup2(output, 1)
        os.dup2(output, 2)
        # New stream objects for them too, and Python's own hooks that write there: the
        # parent's may write elsewhere than its descriptors or collect what they are given (a
        # test runner's), or be held by one of its threads, whose lock the fork copied.
        stream = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)  # noqa: SIM115
        sys.stdout = sys.stderr = sys.__stdout__ = sys.__stderr__ = stream
        sys.excepthook, sys.unraisablehook = sys.__excepthook__, sys.__unraisablehook__
    keep = sorted({*fds, 0, 1, 2})
    low = 3
    for k in keep:
        if k >= low:
            os.closerange(low, k)
            low = k + 1
    os.closerange(low, 1 << 16)


def _child(requests: int, results: int, output: int, parent: int, work: Callable,
           cpu_seconds: float, memory_gb: float | None, os_layers: bool) -> None:
    """Runs in the forked child; never returns."""
    try:
        keep_only(requests, results, output=output)
        torch.set_num_threads(1)  # OpenMP's pool does not survive fork; one thread is plenty
        if memory_gb is not None:
            confine.limit_memory(memory_gb)
        confine.confine(parent, cpu_seconds, os_layers)
        cancel = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: cancel.set())
        request = _read_request(requests)

        def send(message: dict) -> None:
            write_message(results, {"type": "message", "message": message})

        result = work(request, send, cancel)
        write_message(results, {"type": "done", "result": result})
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends regardless
        with contextlib.suppress(BaseException):
            why = f"{type(exc).__name__}: {str(exc)[:300]}"
            write_message(results, {"type": "crashed", "why": why})
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
                 os_layers: bool = True, what: str = "a check's child") -> None:
        req_read, self._requests = os.pipe()
        self._results, res_write = os.pipe()
        out_read, out_write = os.pipe()
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
            os.close(out_read)
            _child(req_read, res_write, out_write, parent, work, cpu_seconds, memory_gb,
                   os_layers)
        os.close(req_read)
        os.close(res_write)
        os.close(out_write)
        self.pid = pid
        self.output = Spill(out_read, f"{what} (pid {pid})")
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
                write_message(self._requests, request)
            except OSError:
                return Outcome("died", why="it had ended before the request")
            return _collect(self.pid, self._results, timeout, on_message, cancel, quiet,
                            self.output)
        finally:
            self.discard()

    def discard(self) -> None:
        for fd in (self._requests, self._results):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._requests = self._results = -1
        self.output.finish()
        _reap(self.pid)


def run(work: Callable[[Callable[[dict], None], threading.Event], Any], *,
        timeout: float | None, cpu_seconds: float, memory_gb: float | None = None,
        on_message: Callable[[dict], None] | None = None,
        cancel: threading.Event | None = None, os_layers: bool = True,
        quiet: Callable[[], float | None] | None = None,
        what: str = "a training run's child") -> Outcome:
    """Run `work(send, cancel)` in a new confined child and return what it returned.

    `timeout` is wall-clock: past it the child is killed; so it is when it stays silent for
    longer than `quiet()` allows. `cancel` set in the parent is passed on
    as SIGUSR1, which sets the child's own event. Messages the child sends go to `on_message`.
    """
    child = Child(lambda _request, send, cancel_: work(send, cancel_), cpu_seconds=cpu_seconds,
                  memory_gb=memory_gb, os_layers=os_layers, what=what)
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
             quiet: Callable[[], float | None] | None = None,
             output: Spill | None = None) -> Outcome:
    """The child's messages until its answer, its end or its deadline; what it writes to its
    stdout and stderr meanwhile is drained into `output`, so that writing never blocks it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    heard = time.monotonic()
    buffer = bytearray()
    cancelled = False
    while True:
        wait = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        silence = quiet() if quiet is not None else None
        if silence is not None and time.monotonic() >= heard + silence:
            return Outcome("timeout", why="quiet")
        watched = [fd, output.fd] if output is not None and output.open else [fd]
        ready, _, _ = select.select(watched, [], [], wait)
        if output is not None and output.open and output.fd in ready:
            output.drain()
            ready = [r for r in ready if r == fd]
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
        while len(buffer) >= CHILD_HEADER.size:
            (size,) = CHILD_HEADER.unpack_from(buffer)
            if size > MAX_MESSAGE:
                return Outcome("died", why="the sandbox sent a message too large to be real")
            if len(buffer) < CHILD_HEADER.size + size:
                break
            data = bytes(buffer[CHILD_HEADER.size:CHILD_HEADER.size + size])
            del buffer[:CHILD_HEADER.size + size]
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
