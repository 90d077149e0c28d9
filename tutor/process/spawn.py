"""A freshly started, confined interpreter for learner code, where a fork cannot serve.

A child forked from the worker (isolate.py) is the fast path, but CUDA cannot be used in a child
forked after it was initialised, MPS neither, Windows has no fork, and `torch.compile` runs a
compiler the forked child's limits refuse. There the worker starts `python -m tutor.evaluator.child`
instead: a new interpreter that imports torch, initialises the device, builds what its kind of
work needs, confines itself (confine.py, with the device's libraries readable), says it is
ready, then waits for one request. Starting one costs about as much as importing torch, so the
engine keeps one or two started while the learner reads (see docs/architecture.md). On Linux
with a CPU a check's child is forked by a fork server that paid that once (forkserver.py) and
driven from here all the same.

The worker sends its request as a pickle with tensors kept apart (`pack_plan`): plain blocks of
memory, each once, so tensors that share memory still do in the child, and on the child's own
device. The child answers as a forked child does: plain data read with the no-classes unpickler
(`isolate.loads_plain`), each message capped at `protocol.MAX_MESSAGE`.

Every wait here has a wall-clock limit the parent enforces by killing the child: the time to
start, the request's deadline, and the longest silence allowed while it runs (`quiet`), so no
code inside the child can outlast its limit by catching the alarm that stops it.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from tutor.process.isolate import Outcome, Spill, loads_plain
from tutor.process.protocol import CHILD_HEADER, MAX_MESSAGE, frame, read_exact

CHILD_COMMAND = (sys.executable, "-m", "tutor.evaluator.child")
# Loading torch in a new interpreter takes about a second on an idle machine; on a busy one, or a
# GPU's first initialisation, much longer. Past this the child is taken for broken.
START_LIMIT = 120.0


# -- the request, tensors kept apart -------------------------------------------------------------
class _PlanPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.blocks: dict[int, int] = {}
        self.memory: list[bytes] = []
        self.tensors: list[tuple] = []

    def persistent_id(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor):
            return None
        t = obj.detach()
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key not in self.blocks:
            self.blocks[key] = len(self.memory)
            cpu = storage.cpu()
            self.memory.append(ctypes.string_at(cpu.data_ptr(), cpu.nbytes())
                               if cpu.nbytes() else b"")
        self.tensors.append((self.blocks[key], str(t.dtype), list(t.shape), list(t.stride()),
                             t.storage_offset(), obj.requires_grad))
        return len(self.tensors) - 1


def pack_plan(obj: Any) -> bytes:
    """`obj` (the worker's own data: dataclasses of execution.py, dicts, tensors) as bytes."""
    buffer = io.BytesIO()
    pickler = _PlanPickler(buffer)
    pickler.dump(obj)
    return pickle.dumps((pickler.memory, pickler.tensors, buffer.getvalue()),
                        protocol=pickle.HIGHEST_PROTOCOL)


class _PlanUnpickler(pickle.Unpickler):
    """Reads what `pack_plan` wrote. Only the worker writes it, but the child still accepts no
    class outside the request's own vocabulary."""

    def __init__(self, data: bytes, tensors: list[torch.Tensor],
                 allowed: frozenset[tuple[str, str]]) -> None:
        super().__init__(io.BytesIO(data))
        self._tensors = tensors
        self._allowed = allowed  # (module, class name): what the step kinds' plans hold

    def persistent_load(self, pid: Any) -> torch.Tensor:
        return self._tensors[pid]

    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] == "builtins" and name in ("set", "frozenset", "slice"):
            return super().find_class(module, name)
        if (module, name) in self._allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a request may not hold {module}.{name}")


def unpack_plan(data: bytes, device: torch.device,
                allowed: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """A plan `pack_plan` wrote, its tensors on `device`; a class outside `allowed` (module,
    name) is refused, as is every other class but set, frozenset and slice."""
    memory, places, body = pickle.loads(data)
    blocks = _on_device(memory, device)
    tensors = []
    for index, dtype_name, shape, stride, offset, grad in places:
        dtype = getattr(torch, dtype_name.removeprefix("torch."))
        block = blocks[index]
        flat = block.view(dtype) if block.numel() else torch.empty(0, dtype=dtype, device=device)
        t = flat.as_strided(shape, stride, offset)
        tensors.append(t.requires_grad_() if grad else t)
    return _PlanUnpickler(body, tensors, allowed).load()


def _on_device(memory: list[bytes], device: torch.device) -> list[torch.Tensor]:
    """The plan's blocks of memory on `device`. Off the CPU they cross in one transfer, not one
    per block (each a wait on the host), and are then copied apart there: blocks that were apart
    in the worker stay apart in the child."""
    if device.type == "cpu":
        return [torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else
                torch.empty(0, dtype=torch.uint8) for raw in memory]
    whole = b"".join(memory)
    moved = (torch.frombuffer(bytearray(whole), dtype=torch.uint8) if whole else
             torch.empty(0, dtype=torch.uint8)).to(device)
    blocks, at = [], 0
    for raw in memory:
        blocks.append(moved[at:at + len(raw)].clone())
        at += len(raw)
    return blocks


# -- the parent's side --------------------------------------------------------------------------
def _frame(data: bytes) -> bytes:
    return frame(data)


class Spawned:
    """A confined child started now, which will run one request of its `kind` ("check" or
    "train"). Starting returns at once; the child loads torch while the learner reads.

    With `launch` (a fork server's `fork`, see forkserver.py), the child is forked from an
    interpreter that already has torch loaded and its setup, instead of started afresh; it is
    launched in the background, and everything after is the same."""

    def __init__(self, kind: str, setup: dict, env: dict[str, str] | None = None,
                 launch: Callable[[], Any] | None = None) -> None:
        self._proc: Any = None
        self._messages: queue.Queue = queue.Queue()
        self._ready = threading.Event()
        self._used = False
        self._lock = threading.Lock()  # the process, set once, and whether it was discarded
        self._discarded = self._failed = False
        self.started = time.monotonic()
        self._what = "a check's child" if kind == "check" else "a training run's child"
        if launch is not None:
            threading.Thread(target=self._launch, args=(launch,), daemon=True).start()
            return
        env = dict(os.environ, PYTHONWARNINGS="ignore", **(env or {}))
        # Its stdout and stderr (the child points its stdout at its stderr): a pipe of its own,
        # drained and bounded here (isolate.Spill), not the worker's stderr.
        out_read, out_write = os.pipe()
        try:
            self._proc = subprocess.Popen(
                list(CHILD_COMMAND), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=out_write, env=env, close_fds=True, bufsize=0)
        except BaseException:
            os.close(out_read)
            raise
        finally:
            os.close(out_write)
        self._follow(out_read)
        threading.Thread(target=self._read, daemon=True).start()
        self._write(pickle.dumps({"kind": kind, "parent": os.getpid(), **setup},
                                 protocol=pickle.HIGHEST_PROTOCOL))

    def _launch(self, launch: Callable[[], Any]) -> None:
        try:
            proc = launch()
        except Exception as exc:  # noqa: BLE001 - said to whoever waits for this child
            self._failed = True
            self._messages.put({"type": "crashed", "why": f"it could not be forked ({exc})"})
            return
        with self._lock:
            self._proc = proc
            discarded = self._discarded
        self._follow(proc.output)
        if discarded:
            _end(proc)
            return
        self._read()

    def _follow(self, fd: int) -> None:
        """Drain what the child writes to its stdout and stderr, in the background, until it
        ends; its first and last part then go to the worker's stderr."""
        spill = Spill(fd, f"{self._what} (pid {self.pid})")
        threading.Thread(target=spill.follow, daemon=True).start()

    def _write(self, data: bytes) -> bool:
        try:
            self._proc.stdin.write(_frame(data))
            self._proc.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    def _read(self) -> None:
        """Messages as they come, into the queue; a closed pipe, an oversized or unreadable
        message ends the reading (the waiting side then kills the child)."""
        stream = self._proc.stdout
        while True:
            header = read_exact(stream, CHILD_HEADER.size)
            if header is None:
                break
            (size,) = CHILD_HEADER.unpack(header)
            if size > MAX_MESSAGE:
                self._messages.put({"type": "crashed", "why": "the sandbox sent a message too "
                                    "large to be real"})
                break
            data = read_exact(stream, size)
            if data is None:
                break
            try:
                message = loads_plain(data)
            except Exception as exc:  # noqa: BLE001 - a forged message is the child's failure
                self._messages.put({"type": "crashed",
                                    "why": f"the sandbox sent something unreadable ({exc})"})
                break
            if isinstance(message, dict) and message.get("type") == "ready":
                self._ready.set()
                continue
            self._messages.put(message)
        self._messages.put({"type": "ended"})
        with contextlib.suppress(OSError):
            stream.close()  # here, by the only reader: its descriptor is not reused under it

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def ready(self) -> bool:
        return self._ready.is_set()

    def alive(self) -> bool:
        if self._used or self._failed:
            return False
        return self._proc is None or self._proc.poll() is None

    def run(self, request: Any, *, timeout: float | None,
            on_message: Callable[[dict], None] | None = None,
            cancel: threading.Event | None = None,
            quiet: Callable[[], float | None] | None = None) -> Outcome:
        """Hand the child its request once it is ready and wait for its answer; the child is
        gone afterwards. `timeout` counts from the request; `quiet()` is the longest the child
        may now go without a message."""
        if self._used:
            raise RuntimeError("a child runs one request")
        self._used = True
        try:
            deadline = self.started + START_LIMIT
            while not self._ready.wait(0.05):
                # A child that failed while starting has said why, or at least ended.
                if not self._messages.empty() or time.monotonic() >= deadline:
                    return self._early_end() or Outcome("died", why="it did not start in time")
            if not self._write(pack_plan(request)):
                return Outcome("died", why="it had ended before the request")
            return self._collect(timeout, on_message, cancel, quiet)
        finally:
            self.discard()

    def _early_end(self) -> Outcome | None:
        try:
            message = self._messages.get_nowait()
        except queue.Empty:
            return None
        if message.get("type") == "crashed":
            return Outcome("died", why=str(message.get("why")))
        return Outcome("died", why=self._exit_reason())

    def _collect(self, timeout: float | None, on_message: Callable | None,
                 cancel: threading.Event | None, quiet: Callable[[], float | None] | None
                 ) -> Outcome:
        now = time.monotonic()
        deadline = None if timeout is None else now + timeout
        heard = now
        cancelled = False
        while True:
            if cancel is not None and cancel.is_set() and not cancelled:
                cancelled = True
                self._write(pickle.dumps({"type": "cancel"}))
            now = time.monotonic()
            limits = [0.1]
            if deadline is not None:
                limits.append(deadline - now)
            silence = quiet() if quiet is not None else None
            if silence is not None:
                limits.append(heard + silence - now)
            try:
                message = self._messages.get(timeout=max(0.0, min(limits)))
            except queue.Empty:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return Outcome("timeout", why="deadline")
                if silence is not None and now >= heard + silence:
                    return Outcome("timeout", why="quiet")
                continue
            heard = time.monotonic()
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "done":
                return Outcome("done", message.get("result"))
            if kind == "crashed":
                return Outcome("died", why=str(message.get("why")))
            if kind == "ended":
                return Outcome("died", why=self._exit_reason())
            if kind == "message" and on_message is not None:
                on_message(message.get("message"))

    def _exit_reason(self) -> str:
        if self._proc is None:
            return "it did not start"
        try:
            code = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "it ended without an answer"
        if code < 0:
            import signal

            sig = -code
            if sig == getattr(signal, "SIGXCPU", None):
                return "cpu"
            if sig == signal.SIGKILL:
                return "killed"
            return f"signal {signal.Signals(sig).name}"
        return "it ended without an answer"

    def discard(self) -> None:
        """Kill the child (if it still runs) and collect it in the background."""
        with self._lock:
            self._used = self._discarded = True
            proc = self._proc
        if proc is not None:
            _end(proc)


def _end(proc: Any) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(OSError, ValueError):
        proc.stdin.close()
    threading.Thread(target=proc.wait, daemon=True).start()
