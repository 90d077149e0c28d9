"""One started interpreter that forks each check's child, where the system allows it.

A started child (spawn.py) pays for importing torch and warming up, about a second of CPU, and
runs one check. On Linux with a CPU the engine instead starts one fork server: the same
`python -m tutor.evaluator.child`, which imports torch and warms up once but does not confine
itself (it must be able to fork) and never receives a plan. For each child the worker makes two
pipes and hands the child's ends to the server over a unix socket (SCM_RIGHTS); the server forks,
and the forked child closes everything else, confines itself exactly as a started child does,
says it is ready and runs one plan it reads from its pipe (see docs/architecture.md). The
server holds no answers: the plan, built by the engine without them, goes straight to the child.

The server leaves its children unreaped until the worker asks: a finished child stays a zombie
that keeps its pid, so the worker's kill at the deadline cannot reach another process, and the
worker learns how it ended (a signal, SIGXCPU) as it would from its own child. It watches each
child through a pidfd. The server dies with the worker and its children with the server
(PR_SET_PDEATHSIG both times).

CUDA cannot be used in a child forked after it was initialised, and a child that initialised it
itself would pay that on every check: a GPU, like macOS and Windows, keeps one started
interpreter per check (`unavailable` says why), and so does every check with
BACKPROP_TUTOR_FORK_SERVER=0, which the tests use to hold that path to the same verdicts.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping

from tutor.config import simulated
from tutor.process.isolate import loads_plain

SERVER_COMMAND = (sys.executable, "-m", "tutor.evaluator.child", "--server")
_MESSAGE = 1 << 16  # the socket carries small control messages only; plans go on the pipes


class ServerGone(OSError):
    """The fork server ended or answered nonsense; the engine stops using it."""


def unavailable(device: str, environ: Mapping[str, str] = os.environ) -> str | None:
    """Why a fork server cannot serve checks on `device` here, or None when it can. The
    simulated accelerator has no driver to initialise, so its children are forked too: the plan
    still crosses to them as memory and lands on the device there, as on a GPU."""
    if environ.get("BACKPROP_TUTOR_FORK_SERVER") == "0":
        return "turned off with BACKPROP_TUTOR_FORK_SERVER=0"
    if not sys.platform.startswith("linux"):
        return "only Linux's pidfds let the worker watch a child it did not fork"
    if device != "cpu" and not (device == "cuda" and simulated(environ)):
        return (f"a child forked from a process that initialised {device} cannot use it, "
                "and initialising it in every child costs more than starting one")
    if not (hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
            and hasattr(signal, "pidfd_send_signal")):
        return "this Python lacks pidfds or descriptor passing"
    return None


def _dumps(message: dict) -> bytes:
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


class ForkServer:
    """The worker's side of one fork server. Starting returns at once; the first `fork` waits
    until the server has loaded torch (at most `start_limit` seconds)."""

    def __init__(self, setup: dict, start_limit: float) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        with theirs:
            self._proc = subprocess.Popen(list(SERVER_COMMAND), stdin=theirs,
                                          stdout=subprocess.DEVNULL, env=env, close_fds=True)
        self._sock = ours
        self._lock = threading.Lock()
        self._start_limit = start_limit
        self._ready = False
        self.broken: str | None = None
        # An engine dropped without close() must not leave a server holding torch's memory.
        weakref.finalize(self, _stop, self._proc, ours)
        self._sock.send(_dumps({"kind": "check", "parent": os.getpid(), **setup}))

    def _ask(self, message: dict, fds: list[int] = ()) -> dict:
        """One request and its answer; the caller holds the lock."""
        if self.broken:
            raise ServerGone(self.broken)
        try:
            if not self._ready:
                self._sock.settimeout(self._start_limit)
                if loads_plain(self._sock.recv(_MESSAGE)) != {"type": "ready"}:
                    raise ServerGone("the fork server did not start")
                self._ready = True
            self._sock.settimeout(None)
            socket.send_fds(self._sock, [_dumps(message)], list(fds))
            data = self._sock.recv(_MESSAGE)
            if not data:
                raise ServerGone("the fork server ended")
            answer = loads_plain(data)
            if not isinstance(answer, dict) or "error" in answer:
                raise ServerGone(f"the fork server refused: {answer!r:.200}")
            return answer
        except (OSError, pickle.UnpicklingError, EOFError) as exc:
            self.broken = self.broken or (str(exc) if isinstance(exc, ServerGone) else
                                          f"the fork server failed ({exc})")
            raise ServerGone(self.broken) from exc

    def fork(self) -> ServerChild:
        """A new child, forked by the server: it confines itself, then says it is ready."""
        req_read, req_write = os.pipe()
        res_read, res_write = os.pipe()
        out_read, out_write = os.pipe()  # its stdout and stderr (isolate.Spill)
        try:
            with self._lock:
                pid = self._ask({"op": "fork"}, [req_read, res_write, out_write])["pid"]
                pidfd = os.pidfd_open(pid)  # before the server may reap it (only when asked)
        except BaseException:
            for fd in (req_write, res_read, out_read):
                os.close(fd)
            raise
        finally:
            os.close(req_read)
            os.close(res_write)
            os.close(out_write)
        return ServerChild(self, pid, pidfd, req_write, res_read, out_read)

    def reap(self, pid: int) -> int:
        """Collect an ended child; its exit code as subprocess gives it (-N: killed by N)."""
        with self._lock:
            code = self._ask({"op": "reap", "pid": pid})["code"]
        return int(code)

    def alive(self) -> bool:
        return self.broken is None and self._proc.poll() is None

    def close(self) -> None:
        self.broken = self.broken or "closed"
        _stop(self._proc, self._sock)


def _stop(proc: subprocess.Popen, sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        proc.kill()
    with contextlib.suppress(OSError):
        sock.close()
    threading.Thread(target=proc.wait, daemon=True).start()


class ServerChild:
    """A child the server forked, seen as `subprocess.Popen` shows one (what spawn.Spawned
    drives): its pipes (`output`, the descriptor its stdout and stderr write to, is the
    reader's to close), `poll`, `wait`, `kill`."""

    def __init__(self, server: ForkServer, pid: int, pidfd: int, requests: int,
                 results: int, output: int) -> None:
        self._server = server
        self.pid = pid
        self._pidfd = pidfd
        self._code: int | None = None
        self._lock = threading.Lock()
        weakref.finalize(self, os.close, pidfd)  # readable once the child ends, reaped or not
        self.stdin = open(requests, "wb", buffering=0)  # noqa: SIM115 - closed by Spawned
        self.stdout = open(results, "rb", buffering=0)  # noqa: SIM115
        self.output = output

    def _ended(self, timeout: float | None) -> bool:
        ready, _, _ = select.select([self._pidfd], [], [], timeout)
        return bool(ready)

    def _collect(self) -> int:
        with self._lock:
            if self._code is None:
                try:
                    self._code = self._server.reap(self.pid)
                except ServerGone:
                    self._code = -signal.SIGKILL  # it died with the server
            return self._code

    def poll(self) -> int | None:
        if self._ended(0) or not self._server.alive():  # gone with the server, or going
            return self._collect()
        return None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended(timeout):
            raise subprocess.TimeoutExpired(list(SERVER_COMMAND), timeout or 0)
        return self._collect()

    def kill(self) -> None:
        with self._lock:
            if self._code is None:  # the pidfd names this process, never a later one
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


class Keeper:
    """An engine's fork server: started when its first child is asked for, started once more
    if it dies (its children went with it), else none: then, as where `unavailable` says it
    cannot serve, each child is a fresh interpreter of its own."""

    def __init__(self, device: str, start_limit: float) -> None:
        self._device = device
        self._start_limit = start_limit
        self._server: ForkServer | None = None
        self._starts = 2

    def launcher(self, setup: dict) -> Callable[[], ServerChild] | None:
        """What forks the next child (for spawn.Spawned), or None: start an interpreter."""
        if self._server is not None and not self._server.alive():
            self._starts -= 1
            print(f"backprop-tutor: the fork server stopped ({self._server.broken or 'it ended'})"
                  "; " + ("starting another" if self._starts else
                          "each check starts its own interpreter from now on"), file=sys.stderr)
            self._server.close()
            self._server = None
        if self._server is None and self._starts:
            if unavailable(self._device) is not None:
                self._starts = 0  # decided once: the README's per-OS table says why
            else:
                try:
                    self._server = ForkServer(setup, self._start_limit)
                except OSError as exc:
                    self._starts = 0
                    print(f"backprop-tutor: no fork server ({exc}); each check starts its own "
                          "interpreter", file=sys.stderr)
        return self._server.fork if self._server is not None else None

    def close(self) -> None:
        """Stop the server and its waiting children; the next child starts a new one."""
        if self._server is not None:
            self._server.close()
            self._server = None
