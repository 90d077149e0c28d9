"""The sandbox worker: a long-lived process that holds torch, the lesson and the engine.

Started by `tutor.sandbox.client.Evaluator` as `python -m tutor.sandbox.worker`. It reads
requests from stdin and answers on the original stdout; anything else that writes to stdout
(warnings, learner prints are captured anyway) is sent to stderr so it cannot corrupt the pipe.
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


def _limit_memory(extra_gb: float) -> None:
    """Cap the address space a little above what the lesson needs, so huge allocations fail
    cleanly with MemoryError instead of pushing the whole machine into swap."""
    try:
        import resource

        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[0])
        current = pages * os.sysconf("SC_PAGE_SIZE")
        limit = current + int(extra_gb * 2**30)
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or limit < hard:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError):
        pass  # not Linux: the client's time limit still protects the learner


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
            message = protocol.receive(stream)
            if message is None or message.get("op") == "exit":
                self.requests.put(None)
                return
            if message.get("op") == "cancel":
                self.cancel.set()
            else:
                self.requests.put(message)

    def start(self, init: dict) -> bool:
        from tutor.config import Settings
        from tutor.engine import Engine
        from tutor.lesson import DeviceError

        settings = Settings.from_dict(init["settings"])
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
        if self.engine.device.type == "cpu":
            _limit_memory(settings.memory_limit_gb)
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
                result = {"error": {"kind": "internal", "message": f"{type(exc).__name__}: {exc}"}}
            self.send({"type": "result", "id": rid, "result": result})

    def handle(self, request: dict, rid) -> dict:
        op = request["op"]
        if op == "check":
            return self.engine.check(request["step"], request["code"], request.get("prior"))
        if op == "info":
            return self.engine.info()
        if op == "train":
            from tutor.training import run_training

            def progress(payload: dict) -> None:
                self.send({"type": "progress", "id": rid, "payload": payload})

            return run_training(self.engine, request, progress, self.cancel)
        raise ValueError(f"unknown request {op!r}")


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
