"""The sandbox worker: a long-lived process that holds torch, the lesson and the engine.

Started by `tutor.sandbox.client.Evaluator` as `python -m tutor.sandbox.worker`. It reads
requests from stdin and answers on the original stdout; anything else that writes to stdout
(warnings, learner prints are captured anyway) is sent to stderr so it cannot corrupt the pipe.

The worker never runs learner code itself: checks and training runs each get a forked, confined
child (isolate.py). It also never opens the progress store. When its client goes away (the pipe
closes, however the client ended), it exits at once, and its children die with it.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import traceback
import warnings

from tutor.sandbox import protocol

# Importing torch without NumPy present prints a warning that means nothing to a learner.
warnings.filterwarnings("ignore", message=".*NumPy.*")


# A full run is about two minutes of CPU; this only stops a runaway one.
TRAINING_CPU_SECONDS = 3 * 3600


class Worker:
    def __init__(self, out) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.requests: queue.Queue = queue.Queue()
        self.cancel = threading.Event()
        self.engine = None

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
                os._exit(0)
            if message.get("op") == "cancel":
                self.cancel.set()
            else:
                self.requests.put(message)

    def start(self, init: dict) -> bool:
        from tutor.config import Settings
        from tutor.engine import Engine
        from tutor.lesson import DeviceError

        settings = Settings.from_dict(init["settings"])
        import torch

        # The worker grades small tensors; a second thread only spins against the child's.
        torch.set_num_threads(1)
        try:
            self.engine = Engine(settings)
            info = self.engine.info()
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
                result = {"error": {"kind": "memory", "message": "the sandbox ran out of memory"}}
            except Exception as exc:  # noqa: BLE001
                traceback.print_exc()
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                result = {"error": {"kind": "internal", "line": None, "col": None,
                                    "message": f"the tutor failed ({type(exc).__name__}: {first})"
                                    "; this is a bug in the tutor, not in your code"}}
            self.send({"type": "result", "id": rid, "result": result})
            try:
                self.engine.prepare()  # the next check's child, forked while the learner reads
            except OSError:
                traceback.print_exc()  # no spare: the next check forks its own

    def handle(self, request: dict, rid) -> dict:
        op = request["op"]
        if op == "check":
            return self.engine.check(request["step"], request["code"], request.get("prior"))
        if op == "scratch":
            return self.engine.scratch(request["step"], request["code"], request.get("prior"))
        if op == "info":
            return self.engine.info()
        if op == "train":
            return self.train(request, rid)
        raise ValueError(f"unknown request {op!r}")


    def train(self, request: dict, rid: object) -> dict:
        """A training run in its own confined child; progress is passed on as it comes."""
        from tutor.sandbox import isolate
        from tutor.training import run_training

        def progress(payload: dict) -> None:
            self.send({"type": "progress", "id": rid, "payload": payload})

        engine = self.engine
        if not engine.isolated:
            from tutor.torchstate import TorchState

            with TorchState.kept():
                return run_training(engine, request, progress, self.cancel)
        outcome = isolate.run(
            lambda send, cancel: run_training(engine, request, send, cancel),
            timeout=None,
            cpu_seconds=TRAINING_CPU_SECONDS,
            memory_gb=engine.settings.memory_limit_gb,
            on_message=progress,
            cancel=self.cancel,
            # torch.compile runs a C++ compiler and writes its cache: that child keeps the
            # guard, the CPU limit and death with its parent, but not the file-system layers.
            os_layers=not request.get("compile"),
        )
        if outcome.status == "done" and isinstance(outcome.result, dict):
            return outcome.result
        why = "it used up its CPU time" if outcome.why == "cpu" else outcome.why
        return {"error": {"kind": "internal", "line": None, "col": None,
                          "message": f"the training run stopped unexpectedly ({why})"}}


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
