"""The sandbox worker: a long-lived process that holds torch, the lesson and the engine.

Started by `tutor.evaluator.client.Evaluator` as `python -m tutor.evaluator.worker`. It reads
requests from stdin and answers on the original stdout; anything else that writes to stdout
(warnings, learner prints are captured anyway) is sent to stderr so it cannot corrupt the pipe.

The worker never runs learner code itself: checks and training runs each get a confined child,
forked (isolate.py) or freshly started (spawn.py), which it kills at its wall-clock deadline. It
also never opens the progress store. When its client goes away (the pipe closes, however the
client ended), it exits at once, and its children die with it.
"""

from __future__ import annotations

import atexit
import os
import queue
import secrets
import shutil
import sys
import tempfile
import threading
import traceback
import warnings
from typing import Any

from tutor.process import protocol
from tutor.sandbox.clean import clean
from tutor.values.results import CheckError, ErrorKind

# Importing torch without NumPy present prints a warning that means nothing to a learner.
warnings.filterwarnings("ignore", message=".*NumPy.*")


# A full run is about two minutes of CPU; this only stops a runaway one, as the wall clock does.
TRAINING_CPU_SECONDS = 3 * 3600
TRAINING_WALL_SECONDS = 3 * 3600
# The longest a training child may stay silent, by what it said comes next. Between steps it
# reports ten times a second, so a step's silence is the step itself (the per-step limit) and the
# tutor's own work around it (autograd's gradients in phase 1); compiling and the results phase
# run the tutor's code only, and take longer on a slow machine.
STEP_GRACE = 2.0
COMPILE_SECONDS = 900.0
# Before the first step: the child reads the pack, builds the network and loads the batches.
# That is not a step, and a loaded machine can take many seconds over it.
SETUP_SECONDS = 300.0
RESULTS_SECONDS = 900.0


class Worker:
    def __init__(self, out) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.requests: queue.Queue = queue.Queue()
        self.cancel = threading.Event()
        self.engine = None
        self.confinement: list[str] = []  # the OS layers the lesson's code runs under here

    def send(self, message: dict) -> None:
        with self.lock:
            protocol.send(self.out, message)

    def read_requests(self, stream) -> None:
        # Runs in a thread so a cancel can arrive while a long request (training) is running.
        while True:
            try:
                message = protocol.receive(stream)
            except Exception:  # noqa: BLE001 - a broken pipe is a client that went away
                message = None
            if message is None or message.get("op") == "exit":
                # The client is gone or done: nothing may keep running for it, whatever the
                # main thread is waiting on. Children get SIGKILL through PR_SET_PDEATHSIG.
                remove_scratch()
                os._exit(0)
            if message.get("op") == "cancel":
                self.cancel.set()
            else:
                self.requests.put(message)

    def start(self, init: dict) -> bool:
        from tutor.config import Settings
        from tutor.core.engine import Engine
        from tutor.core.network import DeviceError
        from tutor.pack.model import find_pack, load_pack

        settings = Settings.from_dict(init["settings"])
        import torch

        # The worker grades small tensors; a second thread only spins against the child's.
        torch.set_num_threads(1)
        try:
            pack = load_pack(find_pack(settings.pack))
            # The lesson's own code (its setup, data and forward pass) runs here, whoever
            # wrote the pack: behind the OS layers too, from before it first runs.
            self.confinement = confined(pack, settings)
            self.engine = Engine(settings, pack=pack)
            info = {**self.engine.info(), "lesson_confined": self.confinement}
        except DeviceError as exc:
            self.send({"type": "failed", "message": str(exc)})
            return False
        except Exception as exc:  # noqa: BLE001 - reported to the learner, not raised
            self.send({"type": "failed", "message": f"the lesson could not be built: {exc}"})
            traceback.print_exc()
            return False
        self.engine.prepare()
        self.send({"type": "ready", "info": info})
        return True

    def serve(self) -> None:
        while True:
            request = self.requests.get()
            if request is None:
                return
            self.cancel.clear()
            rid = request.get("id")
            try:
                result = self.handle(request, rid)
            except MemoryError:
                result = {"error": CheckError(ErrorKind.MEMORY,
                                              "the sandbox ran out of memory").to_dict()}
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                result = {"error": CheckError.internal(
                    f"the tutor failed ({type(exc).__name__}: {first}); this is a bug in the "
                    "tutor, not in your code").to_dict()}
            self.send({"type": "result", "id": rid, "result": result})
            try:
                self.engine.prepare()  # the next check's child, forked while the learner reads
            except OSError:
                traceback.print_exc()  # no spare: the next check forks its own

    def handle(self, request: dict, rid) -> dict:
        op = request["op"]
        # A check that must wait for its child to start says so, and the client waits longer.
        self.engine.on_wait = lambda seconds: self.send(
            {"type": "extend", "id": rid, "seconds": seconds})
        if op == "check":
            # Typed until here: plain data only for the pipe (docs/json.md).
            return self.engine.check(request["step"], request["code"],
                                     request.get("prior")).to_dict()
        if op == "scratch":
            return self.engine.scratch(request["step"], request["code"],
                                       request.get("prior")).to_dict()
        if op == "trace":
            cells = [(bool(o), str(c)) for o, c in request["cells"]]
            trace = self.engine.trace_own if request.get("own") else self.engine.trace
            return trace(cells, request["steps"]).to_dict()
        if op == "info":
            return self.engine.info()
        if op == "train":
            return self.train(request, rid)
        raise ValueError(f"unknown request {op!r}")


    def train(self, request: dict, rid: object) -> dict:
        """A training run in its own confined child; progress is passed on as it comes, and the
        child is killed when it stays silent longer than its window or runs past the run's
        limit (its own per-step alarm can be caught by the code it stops; this cannot)."""
        from tutor.process import isolate, spawn
        from tutor.training import run_training

        engine = self.engine
        # The secret that picks the steps checked at random (training/run.py, random_checks):
        # drawn here, for this run only, whatever the request says.
        request = {**request, "check_seed": secrets.randbits(64)}
        timeout = engine.settings.timeout
        windows = {"setup": SETUP_SECONDS, "step": timeout + STEP_GRACE,
                   "compile": COMPILE_SECONDS, "results": RESULTS_SECONDS}
        now = {"window": "setup", "step": 0}

        def message(payload: dict) -> None:
            if not isinstance(payload, dict):
                return
            if "window" in payload:  # for the clock here, not for the learner
                now["window"] = payload["window"] if payload["window"] in windows else "step"
                return
            now["window"] = "results" if payload.get("phase") == "results" else "step"
            if isinstance(payload.get("step"), int):
                now["step"] = payload["step"]
            self.send({"type": "progress", "id": rid, "payload": inert(payload)})

        def quiet() -> float:
            return windows[now["window"]]

        # torch.compile runs a C++ compiler and writes its cache: a started child whose
        # Landlock rules allow the system's programs and one folder to write in (its workshop).
        compile_ = bool(request.get("compile"))
        if engine.isolation == "fork" and not compile_:
            outcome = isolate.run(
                lambda send, cancel: run_training(
                    engine, request, send, cancel, lambda w: send({"window": w})),
                timeout=TRAINING_WALL_SECONDS, cpu_seconds=TRAINING_CPU_SECONDS,
                memory_gb=engine.settings.memory_limit_gb, on_message=message,
                cancel=self.cancel, quiet=quiet)
        else:
            workshop = compile_workshop(engine.settings) if compile_ else None
            env = {"TORCHINDUCTOR_CACHE_DIR": workshop, "TMPDIR": workshop} if workshop else {}
            child = spawn.Spawned("train", {
                "device": str(engine.device), "settings": engine.settings.to_dict(),
                "cpu_seconds": TRAINING_CPU_SECONDS, "workshop": workshop,
                "memory_gb": engine.settings.memory_limit_gb}, env)
            outcome = child.run(request, timeout=TRAINING_WALL_SECONDS, on_message=message,
                                cancel=self.cancel, quiet=quiet)
        if outcome.status == "done" and isinstance(outcome.result, dict):
            return inert(outcome.result)
        return stopped(outcome, now["window"], now["step"], timeout)


def inert(value: Any) -> Any:
    """A training child's plain data with every string cleaned for the terminal (`clean`): the
    child cleaned its print output and messages already, but it ran the learner's code, and what
    the front ends show and the store keeps is taken from here."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {k: inert(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [inert(v) for v in value]
    return value


def confined(pack, settings) -> list[str]:
    """This process under the OS layers for a lesson's code (sandbox/confine.py,
    `confine_lesson`): what applied. On a GPU the driver's device files stay open (the process
    and its children use the device); on a system without Landlock or seccomp (macOS, where
    `mps` runs) nothing applies and the lesson's code runs behind the syntax check and the
    guard only (README, "Safety")."""
    from tutor.core.network import resolve_device
    from tutor.pack.cache import cache_dir
    from tutor.sandbox.confine import confine_lesson

    device = resolve_device(settings.device).type

    # The parsed-pack cache is read by the children it starts, never written from here.
    reads = (*pack.folders, *(str(p) for p in [cache_dir()] if p.is_dir()))
    workshop = compile_workshop(settings)
    # The only place left to write: a temporary folder of this process's own inside it, for
    # what torch and a lesson's libraries put in one (gone when the process ends).
    _sweep(workshop)
    scratch = tempfile.mkdtemp(prefix=f"lesson-{os.getpid()}-", dir=workshop)
    _SCRATCH.append(scratch)
    atexit.register(remove_scratch)
    os.environ["TMPDIR"] = tempfile.tempdir = scratch
    report = confine_lesson(device, reads, workshop)
    return report.applied


_SCRATCH: list[str] = []  # this process's temporary folder, once it is confined


def remove_scratch() -> None:
    for folder in _SCRATCH:
        shutil.rmtree(folder, ignore_errors=True)


def _sweep(workshop: str) -> None:
    """The temporary folders of workers that ended without removing theirs (killed)."""
    with os.scandir(workshop) as entries:
        for entry in entries:
            parts = entry.name.split("-")
            if len(parts) < 3 or parts[0] != "lesson" or not parts[1].isdigit():
                continue
            try:
                os.kill(int(parts[1]), 0)
            except ProcessLookupError:
                shutil.rmtree(entry.path, ignore_errors=True)
            except OSError:
                continue  # alive, another user's: not ours to touch


def compile_workshop(settings) -> str:
    """The folder torch.compile's child may write in: its cache, kept between runs so that a
    second run of the same code compiles in seconds."""
    folder = settings.data_home / "compile-cache"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder.resolve())


def stopped(outcome, window: str, step: int, timeout: float) -> dict:
    """A run whose child was killed or died, shaped as a run that ended with an error."""
    if outcome.status == "timeout" and outcome.why == "quiet":
        kind, message = "timeout", {
            "step": f"a training step ran past the time limit of {timeout:g} s and did not "
                    "stop when asked, so the run was stopped from outside. Is there a loop "
                    "that never ends, perhaps inside a try/except that catches the stop?",
            "setup": f"setting the run up took more than {SETUP_SECONDS:g} s, so the run was "
                     "stopped",
            "compile": f"compiling the training step took more than {COMPILE_SECONDS:g} s, so "
                       "the run was stopped. Run without --compile.",
            "results": f"the results phase took more than {RESULTS_SECONDS:g} s, so the run "
                       "was stopped",
        }[window]
    elif outcome.status == "timeout":
        kind = "timeout"
        message = (f"the run went on for more than {TRAINING_WALL_SECONDS / 3600:g} hours, the "
                   "limit of one run, and was stopped")
    elif outcome.why == "cpu":
        kind, message = "timeout", "the run used up its CPU time and was stopped"
    elif outcome.why == "killed":
        kind, message = "memory", "the run was killed (probably out of memory)"
    else:
        kind, message = "internal", f"the training run stopped unexpectedly ({outcome.why})"
    return {"status": "error", "step": step, "steps_done": 0, "gradcheck": None,
            "history": None, "samples": [], "notes": [],
            "error": {"kind": kind, "line": None, "col": None,
                      "message": f"{message} (at step {step})"}}


def main() -> None:
    # Keep the real stdout for messages; point fd 1 at stderr for everything else.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    init = protocol.receive(stdin)
    if init is None:
        return
    worker = Worker(out)
    if not worker.start(init):
        return
    threading.Thread(target=worker.read_requests, args=(stdin,), daemon=True).start()
    worker.serve()


if __name__ == "__main__":
    main()
