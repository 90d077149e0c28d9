"""A warm worker: an evaluator that outlives one command, so that `check` answers as fast as the
TUI does (docs/architecture.md, the warm worker).

Whoever holds an evaluator that is already warm (the TUI, `watch`, or `backprop-tutor warm`,
which starts one on its own) may serve it on a Unix socket (`Host`). A later `check` with the
same settings finds it through the state folder (`connect`) and sends it its requests; where
there is none, or it is busy, or it goes away mid-request, the command starts its own evaluator
as before, and the verdict is the same either way: the same worker code on the same settings.

Who may use one: only this user (the socket's folder is theirs alone, and each end reads the
other's uid off the socket where the system says it), and only with the same settings, the same
home, the same lesson files, the same tutor and the same device environment: all of those are in
the socket's name (`key`), so a warm worker is never shared between users or homes and a stale
one is never reached. Nothing here imports torch; every message is JSON, never a pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

from tutor.config import Settings
from tutor.evaluator.client import Evaluator, EvaluatorError

T = TypeVar("T")

IDLE_SECONDS = 900.0  # a worker started by `warm` leaves after this long with no request
BUSY_WAIT = 0.3  # seconds a request waits for an evaluator its owner is using, then goes cold
MAX_REQUEST = 8 * 2**20  # a check's code is at most 1 MB; its prior steps' code a few more
START_WAIT = 180.0  # how long `warm` waits for a new worker to load torch and the lesson
READ_WAIT = 10.0  # seconds a host waits for a request's bytes once a command has connected
_PATH_MAX = 100  # sockaddr_un holds 104–108 bytes, depending on the system
_OPS = ("check", "trace", "scratch")  # what another command may ask: never training


class WarmGone(EvaluatorError):
    """The warm worker went away, or would not answer, before the request was done."""


def supported() -> bool:
    return hasattr(socket, "AF_UNIX") and os.name == "posix"


# -- where one lives --------------------------------------------------------------------------
def key(settings: Settings) -> str:
    """What a warm worker must share with a command for that command to use it."""
    from tutor.pack.model import find_pack

    tutor_dir = Path(__file__).resolve().parents[1]
    try:
        pack_dir = find_pack(settings.pack)
    except Exception:  # noqa: BLE001 - a pack that does not load is the command's to report
        pack_dir = None
    facts = {
        "settings": settings.to_dict(),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith("BACKPROP_TUTOR")),
        "python": sys.executable,
        "tutor": _stamp(tutor_dir, "*.py"),
        "pack": _stamp(pack_dir, "*") if pack_dir else None,
        "uid": os.getuid(),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20]


def _stamp(folder: Path, pattern: str) -> list:
    """Each file under `folder` with its size and modification time: a change to any is a new
    key, so that a worker never answers for code or a lesson that has changed since it loaded."""
    out = []
    for path in sorted(folder.rglob(pattern)):
        if path.is_file() and "__pycache__" not in path.parts:
            st = path.stat()
            out.append((str(path.relative_to(folder)), st.st_size, st.st_mtime_ns))
    return out


def folder(settings: Settings) -> Path:
    """The user's own folder for warm workers of this home: `<home>/warm`, or where that path is
    too long for a socket, a folder of this user's in the system's temporary folder."""
    home = settings.data_home.expanduser().resolve()
    own = home / "warm"
    if len(str(own)) + 26 <= _PATH_MAX:
        return own
    tag = hashlib.sha256(str(home).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"backprop-tutor-{os.getuid()}" / tag


def address(settings: Settings) -> Path:
    return folder(settings) / f"{key(settings)}.sock"


def _own_folder(path: Path) -> Path:
    """`path`, made if need be, which only this user may enter; refused where another user
    owns it or may write to it (a folder someone else prepared for us)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    for p in (path, path.parent) if path.parent.name.startswith("backprop-tutor-") else (path,):
        st = p.stat()
        if st.st_uid != os.getuid():
            raise OSError(f"{p} belongs to another user")
        if st.st_mode & 0o077:
            os.chmod(p, 0o700)
    return path


def _peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end, where the system tells it (Linux)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _lines(conn: socket.socket, limit: int = MAX_REQUEST):
    """The JSON messages on `conn`, one per line, until it closes."""
    buffer = b""
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return
        buffer += chunk
        if len(buffer) > limit:
            raise ValueError("message too large")
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield json.loads(line)


# -- the side that has the evaluator ------------------------------------------------------------
class Host:
    """Serves `evaluator` on this user's socket for the settings it was made with, in a thread,
    until `close`. One request at a time, through the evaluator's own lock: a request that finds
    its owner using it waits `BUSY_WAIT`, then is told to go cold."""

    def __init__(self, evaluator: Evaluator, settings: Settings, *, stoppable: bool = False):
        self.evaluator = evaluator
        self.settings = settings
        self.stoppable = stoppable  # `warm --stop` ends only workers that `warm` started
        self.stopped = threading.Event()
        self.last_used = time.monotonic()
        self.working = 0  # requests being answered: a worker is never idle in the middle of one
        self.answered = 0  # requests answered for other commands (`hello` says how many)
        self._count = threading.Lock()
        self.path: Path | None = None
        self._sockets: list[tuple[Path, socket.socket]] = []

    def start(self) -> bool:
        """Listen, unless another live host already serves these settings; whether it does.
        A worker of `--device auto` that has started also answers for the device it chose
        (`--device cpu` where that is the CPU): the same worker, on the same device."""
        if not supported():
            return False
        sock = self._listen(self.settings)
        if sock is None:
            return False  # no warm worker here: every command starts its own, as before
        self.path = address(self.settings)
        self._sockets.append((self.path, sock))
        for alias in _aliases(self.settings, self.evaluator.started_info):
            also = self._listen(alias)
            if also is not None:
                self._sockets.append((address(alias), also))
        for _, listening in self._sockets:
            threading.Thread(target=self._accept, args=(listening,), daemon=True,
                             name="warm-host").start()
        return True

    @staticmethod
    def _listen(settings: Settings) -> socket.socket | None:
        try:
            path = address(settings)
            _own_folder(path.parent)
            if path.exists():
                if _alive(path):
                    return None
                path.unlink()  # left by a host that ended without cleaning up
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            os.chmod(path, 0o600)
            sock.listen(8)
        except OSError:
            return None
        return sock

    def close(self) -> None:
        sockets, self._sockets = self._sockets, []
        for path, sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
            with contextlib.suppress(OSError):
                path.unlink()

    def _accept(self, listening: socket.socket) -> None:
        while self._sockets:
            try:
                conn, _ = listening.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                uid = _peer_uid(conn)
                if uid is not None and uid != os.getuid():
                    return  # another user's process: not a word
                conn.settimeout(READ_WAIT)  # a command that sends half a request is not waited on
                request = next(_lines(conn), None)
                if isinstance(request, dict):
                    self._answer(conn, request)
            except (OSError, ValueError):
                return  # the command went away, or sent what is not a request

    def _answer(self, conn: socket.socket, request: dict) -> None:
        with self._count:
            self.working += 1
        try:
            self._reply(conn, request)
        finally:
            with self._count:
                self.working -= 1

    def _reply(self, conn: socket.socket, request: dict) -> None:
        op = request.get("op")
        if op == "hello":
            info = self.evaluator.started_info
            _send(conn, {"type": "hello", "info": info, "pid": os.getpid(),
                         "stoppable": self.stoppable, "answered": self.answered}
                  if info else {"type": "busy"})
        elif op == "stop" and self.stoppable:
            _send(conn, {"type": "stopped"})
            self.stopped.set()
        elif op in _OPS and isinstance(request.get("payload"), dict):
            self._forward(conn, op, request)
        else:
            _send(conn, {"type": "refused"})

    def _forward(self, conn: socket.socket, op: str, request: dict) -> None:
        lock = self.evaluator._lock
        if not lock.acquire(timeout=BUSY_WAIT):
            _send(conn, {"type": "busy"})
            return
        try:
            limit = request.get("limit")
            limit = float(limit) if isinstance(limit, int | float) else None
            result = self.evaluator.request(op, request["payload"], limit)
        finally:
            lock.release()
            self.last_used = time.monotonic()  # a `hello` is not a use: only what it answers
        self.answered += 1
        _send(conn, {"type": "result", "result": result})


def _aliases(settings: Settings, info: dict | None) -> list[Settings]:
    """The settings a started worker of `--device auto` also serves: the device it chose."""
    device = (info or {}).get("device")
    if settings.device != "auto" or not isinstance(device, str):
        return []
    names = {device, device.removesuffix(":0")} & {"cpu", "mps", "cuda", *(
        f"cuda:{i}" for i in range(16))}
    return [replace(settings, device=name) for name in sorted(names)]


@contextlib.contextmanager
def hosting(evaluator: Evaluator, settings: Settings) -> Iterator[Host]:
    """`evaluator` served as a warm worker while the block runs (where it can be)."""
    host = Host(evaluator, settings)
    host.start()
    try:
        yield host
    finally:
        host.close()


def _alive(path: Path) -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        s.connect(str(path))
        return True
    return False


# -- the side that asks ---------------------------------------------------------------------------
class WarmEvaluator(Evaluator):
    """An Evaluator whose worker is a warm one: each request goes over the socket. Raises
    `WarmGone` where the worker goes away or is busy, so that the caller can start its own."""

    def __init__(self, settings: Settings, path: Path, info: dict, pid: int):
        super().__init__(settings)
        self.path, self.pid = path, pid
        self.owned = False  # whether an open tutor or `watch` holds it (it goes with them)
        self._info = info
        self._ready.set()

    def start(self) -> None:
        return None

    def info(self, timeout: float | None = None) -> dict:
        return self._info  # type: ignore[return-value]

    def close(self) -> None:
        self._closed = True  # the worker is its owner's; it stays warm

    def request(self, op: str, payload: dict, limit: float | None,
                on_progress: Callable[[dict], None] | None = None) -> dict:
        if op not in _OPS:
            raise WarmGone(f"a warm worker does not run {op}")
        answer = _ask(self.path, {"op": op, "payload": payload, "limit": limit},
                      None if limit is None else limit + START_WAIT)
        if not isinstance(answer, dict) or answer.get("type") != "result":
            raise WarmGone("the warm worker is busy" if answer and answer.get("type") == "busy"
                           else "the warm worker did not answer")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise WarmGone("the warm worker's answer could not be read")
        return result


def _ask(path: Path, message: dict, timeout: float | None) -> dict | None:
    """One request and its answer, or None where the socket does not answer as a host would."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            uid = _peer_uid(s)
            if uid is not None and uid != os.getuid():
                return None
            _send(s, message)
            return next(_lines(s, 1 << 31), None)
    except (OSError, ValueError):
        return None


def connect(settings: Settings) -> WarmEvaluator | None:
    """The warm worker for these settings, ready, or None (no such worker, another user's
    socket, or one still loading)."""
    if not supported() or os.environ.get("BACKPROP_TUTOR_NO_WARM"):
        return None
    try:
        path = address(settings)
        st = path.stat()
        if st.st_uid != os.getuid() or path.parent.stat().st_mode & 0o077:
            return None
    except OSError:
        return None
    hello = _ask(path, {"op": "hello"}, 5.0)
    if not hello or hello.get("type") != "hello" or not isinstance(hello.get("info"), dict):
        return None
    found = WarmEvaluator(settings, path, hello["info"], int(hello.get("pid") or 0))
    found.owned = not hello.get("stoppable")  # the TUI's or `watch`'s, not `warm`'s own
    return found


def using(settings: Settings, run: Callable[[Evaluator], T]) -> T:
    """`run` with the warm worker when there is one, and again with a new evaluator of its own
    where that worker went away or was busy: the same verdict either way."""
    warm = connect(settings)
    if warm is not None:
        try:
            return run(warm)
        except WarmGone:
            pass
    with Evaluator(settings) as ev:
        return run(ev)


# -- a worker of its own: `backprop-tutor warm` ----------------------------------------------------
def launch(settings: Settings, idle: float = IDLE_SECONDS) -> WarmEvaluator | None:
    """Start a warm worker for `settings` in the background, if none is there, and wait until it
    is ready; the worker, or None where it could not start (its log says why)."""
    found = connect(settings)
    if found is not None:
        return found
    log = _own_folder(folder(settings)) / "warm.log"
    with open(log, "ab") as err:
        subprocess.Popen(
            [sys.executable, "-m", "tutor.evaluator.warm", json.dumps(settings.to_dict()),
             str(idle)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            start_new_session=True, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        found = connect(settings)
        if found is not None:
            return found
        time.sleep(0.1)
    return None


def stop_all(settings: Settings) -> list[int]:
    """Stop every warm worker that `warm` started for this home; the pids stopped."""
    base = folder(settings)
    stopped: list[int] = []
    for path in sorted(base.glob("*.sock")) if base.is_dir() else []:
        hello = _ask(path, {"op": "hello"}, 5.0)
        pid = int((hello or {}).get("pid") or 0)
        if hello and hello.get("stoppable") and pid not in stopped and (
                _ask(path, {"op": "stop"}, 5.0) or {}).get("type") == "stopped":
            stopped.append(pid)  # once, whichever of its names answered
    return stopped


def serve(settings: Settings, idle: float) -> int:
    """The warm worker's own process: an evaluator, served until it has been idle for `idle`
    seconds or is stopped."""
    ev = Evaluator(settings)
    host = Host(ev, settings, stoppable=True)
    try:
        ev.info()
        if not host.start():
            return 0  # another one serves these settings already
        while not host.stopped.wait(1.0):
            if not host.working and time.monotonic() - host.last_used > idle:
                break
    except EvaluatorError as exc:
        print(f"backprop-tutor warm: {exc}", file=sys.stderr)
        return 1
    finally:
        host.close()
        ev.close()
    return 0


if __name__ == "__main__":
    sys.exit(serve(Settings.from_dict(json.loads(sys.argv[1])), float(sys.argv[2])))
