"""The spawned child: a fresh interpreter that runs one piece of learner code, confined.

Started by `spawn.Spawned` as `python -m tutor.evaluator.child`. Its life, in order:

1. read its setup from the worker (its kind of work, the device, the settings);
2. import torch, initialise the device and warm up what a check or a run uses, while files can
   still be opened (a check child runs a small check of its own; a training child builds the
   lesson's data);
3. confine itself (confine.py: dies with the worker, CPU and memory limits, Landlock with the
   device's libraries readable, seccomp) and say it is ready;
4. read one request, run it, send plain data back, exit.

It never sees an answer: a check's plan holds the forward tensors and what the earlier steps
need, never autograd's gradients for the step (see docs/architecture.md). The worker kills it
at its deadline; nothing here needs to stop on its own.

With `--server` it is a check kind's fork server instead (sandbox/forkserver.py): it takes
steps 1 and 2 once, then forks a child for each pair of pipes the worker hands it; each child
takes steps 3 and 4 on its own pipes. The server itself runs no learner code and sees no plan.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import pickle
import signal
import socket
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, NoReturn

warnings.filterwarnings("ignore", message=".*NumPy.*")


@dataclass
class Host:
    """What a training run asks of the engine, built in the child (no answers in it)."""

    pack: Any
    settings: Any
    device: Any
    network: Any


def _warm_device(device: Any) -> None:
    """Open what the device's driver opens on first use (its files, its math libraries)."""
    import torch

    a = torch.ones(8, 8, device=device)
    float((a @ a).exp().sum().item())
    torch.randn(4, generator=None, device=device).softmax(0)


def _warm_check(device: Any) -> None:
    """One small check through the same code the learner's will take, so that theirs finds
    every module imported and every first-use cost paid."""
    import torch

    from tutor.core.execution import BatchPlan, CheckSpec, run_check

    ns = {"x": torch.randn(4, 3, device=device), "n": 4}
    code = "dx = (x * 2).exp().sum(1, keepdim=True) / n + x.max(1, keepdim=True).values\n"
    run_check(CheckSpec("warm", code, ("x",), [BatchPlan("warm", ns, [])], 5.0))


def _prepare(setup: dict) -> Any:
    """Everything that needs files, done before confinement; returns the work to run."""
    import torch

    from tutor import devices
    from tutor.core.execution import run_spec

    torch.set_num_threads(1)
    device = devices.resolve(setup["device"])
    devices.use(device)  # the learner's code makes its tensors here (devices.learner)
    _warm_device(device)
    if setup["kind"] == "check":
        _warm_check(device)

        def check(request: dict, _send: Any, _cancel: threading.Event) -> dict:
            return run_spec(request["spec"], bool(request.get("scratch")))

        return check, device
    from tutor.config import Settings
    from tutor.core.network import Network
    from tutor.pack.model import find_pack, load_pack
    from tutor.training import run_training

    settings = Settings.from_dict(setup["settings"])
    pack = load_pack(find_pack(settings.pack))
    host = Host(pack, settings, device, Network(pack, device, settings.seed))

    def train(request: dict, send: Any, cancel: threading.Event) -> dict:
        return run_training(host, request, send, cancel,  # type: ignore[arg-type]
                            lambda w: send({"window": w}))

    return train, device


def _listen(requests: int, cancel: threading.Event) -> None:
    """After the request, the worker only ever sends a cancel; its pipe closing means it went."""
    from tutor.process.isolate import loads_plain
    from tutor.process.protocol import read_frame

    while True:
        try:
            message = loads_plain(read_frame(requests))
        except Exception:  # noqa: BLE001 - the worker is gone: nothing may outlive it
            os._exit(1)
        if isinstance(message, dict) and message.get("type") == "cancel":
            cancel.set()


def _failed(results: int, exc: BaseException) -> None:
    from tutor.process.protocol import write_message

    with contextlib.suppress(BaseException):  # when it fails, nobody is left to tell
        why = f"{type(exc).__name__}: {str(exc)[:300]}{_where(exc)}"
        write_message(results, {"type": "crashed", "why": why})


def _where(exc: BaseException) -> str:
    """The tutor's own line an internal error came from, for the report a learner sends us."""
    import traceback

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ours = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.startswith(root)
            and os.path.basename(f.filename) != "devices.py"]  # where it was called from
    if not ours:
        return ""
    last = ours[-1]
    return f" (at {os.path.relpath(last.filename, os.path.dirname(root))}:{last.lineno})"


def _live(requests: int, results: int, work: Any, device: Any, setup: dict,
          parent: int) -> NoReturn:
    """Steps 3 and 4: confine, say so, run one request, answer, exit."""
    try:
        from tutor.core.kinds import plan_classes
        from tutor.process.protocol import read_frame, write_message
        from tutor.process.spawn import unpack_plan
        from tutor.sandbox import confine

        allowed = plan_classes()  # what the step kinds' plans hold, and nothing else

        if setup.get("memory_gb") is not None and device.type == "cpu":
            # A GPU's driver reserves far more address space than it uses: no cap there.
            confine.limit_memory(setup["memory_gb"])
        confine.confine(parent, setup["cpu_seconds"], device=device.type,
                        workshop=setup.get("workshop"))
        write_message(results, {"type": "ready"})
        request = unpack_plan(read_frame(requests), device, allowed)
        cancel = threading.Event()
        threading.Thread(target=_listen, args=(requests, cancel), daemon=True).start()

        def send(message: dict) -> None:
            write_message(results, {"type": "message", "message": message})

        write_message(results, {"type": "done", "result": work(request, send, cancel)})
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends regardless
        _failed(results, exc)
    finally:
        sys.stderr.flush()
        os._exit(0)


def _serve(sock: socket.socket) -> NoReturn:
    """The fork server (sandbox/forkserver.py): steps 1 and 2 once, then, for each request
    from the worker, a forked child that takes steps 3 and 4 on the two pipes it was handed.
    It runs no learner code and sees no plan; it is not confined, as it must fork."""
    from tutor.process.isolate import keep_only, loads_plain
    from tutor.sandbox import confine

    def answer(message: dict) -> None:
        sock.send(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))

    try:
        setup = loads_plain(sock.recv(1 << 16))
        confine.die_with_parent(ctypes.CDLL(None, use_errno=True), setup["parent"])
        work, device = _prepare(setup)
        confine.prepare()
        answer({"type": "ready"})
    except BaseException:  # noqa: BLE001 - the worker reads the closed socket and falls back
        traceback.print_exc()
        os._exit(1)
    server = os.getpid()
    # Objects the collector would visit in a child are copied page by page when it does:
    # frozen, they stay shared and the child starts fast.
    gc.freeze()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(sock, 1 << 16, 3)
            request = loads_plain(data) if data else None
        except Exception:  # noqa: BLE001 - the worker is gone, or wrote nonsense: end
            os._exit(0)
        if not isinstance(request, dict):
            os._exit(0)
        if request.get("op") == "fork" and len(fds) == 3:
            pid = os.fork()
            if pid == 0:
                gc.disable()  # a child lives for one check; its garbage goes with it
                # Its stdout and stderr go to the worker's pipe for them (isolate.Spill), not to
                # the server's, which the worker could not bound per child.
                keep_only(fds[0], fds[1], output=fds[2])
                _live(fds[0], fds[1], work, device, setup, server)
            answer({"pid": pid})
        elif request.get("op") == "reap":
            try:
                _, status = os.waitpid(int(request["pid"]), 0)
                answer({"code": os.waitstatus_to_exitcode(status)})
            except (ChildProcessError, ValueError, KeyError):
                answer({"code": -signal.SIGKILL})
        else:
            answer({"error": f"unknown request {request.get('op')!r}"})
        for fd in fds:
            os.close(fd)


def main() -> None:
    # The results go on the original stdout; anything else printed goes to stderr.
    results = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if "--server" in sys.argv[1:]:
        _serve(socket.socket(fileno=0))
    from tutor.process.isolate import loads_plain
    from tutor.process.protocol import read_frame
    from tutor.sandbox import confine

    try:
        setup = loads_plain(read_frame(0))
        work, device = _prepare(setup)
        confine.prepare()
    except BaseException as exc:  # noqa: BLE001 - reported, then the child ends regardless
        _failed(results, exc)
        sys.stderr.flush()
        os._exit(0)
    _live(0, results, work, device, setup, setup["parent"])


if __name__ == "__main__":
    main()
