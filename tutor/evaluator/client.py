"""The evaluator as the UI and the CLI see it: a worker process behind a blocking, thread-safe API.

This module never imports torch. The worker loads torch and builds the lesson in the background
while the caller paints its first frame. A candidate that runs past its time limit gets the worker
killed and a new one started; the caller just receives a "timeout" result.
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from tutor.config import Settings
from tutor.process import protocol
from tutor.values.results import CheckError, CheckResult, ErrorKind, ScratchResult, Traced
from tutor.values.runs import RunProgress, TrainingRun

# How much longer than the worker's own limits to wait before killing the process: the worker
# kills its children at their limits; this is for a worker that no longer answers at all.
HARD_KILL_GRACE = 1.5
# The most one request may wait for the worker to start a child (a fresh interpreter loading torch
# on a busy machine); the worker kills a child that takes longer.
MAX_EXTENSION = 150.0


def check_limit(settings: Settings) -> float:
    """How long the client waits for one check before it takes the worker for hung: the check's
    child at its wall-clock backstop, the child that runs the changed programs of the search for
    the smallest change (the tutor's own budget and the limit again), the worker's own grading
    on the tutor's budget once more, and a grace for each child (docs/architecture.md, the
    check's time budget)."""
    return (settings.backstop + settings.timeout + 2 * settings.tutor_seconds
            + 2 * HARD_KILL_GRACE)


class EvaluatorError(RuntimeError):
    """The worker could not start (bad device, broken installation); the message says why."""


class EvaluatorNotReady(EvaluatorError):
    """info(timeout) ran out while the worker is still loading; try again later."""


class Evaluator:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.RLock()  # one request at a time
        self._proc: subprocess.Popen | None = None
        self._ready = threading.Event()
        self._info: dict | None = None
        self._failure: str | None = None
        self._messages: queue.Queue = queue.Queue()
        self._next_id = 0
        self._stderr = None
        self._closed = False

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn the worker; returns at once. Safe to call again after a kill."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self._ready.clear()
            self._closed = False
            self._info, self._failure = None, None
            self._messages = queue.Queue()
            self._stderr = tempfile.TemporaryFile()
            env = dict(os.environ, PYTHONWARNINGS="ignore")
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "tutor.evaluator.worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                env=env,
                start_new_session=True,  # Ctrl+C in the terminal goes to us, not the worker
            )
            protocol.send(self._proc.stdin, {"op": "init", "settings": self.settings.to_dict()})
            threading.Thread(
                target=self._read, args=(self._proc, self._messages), daemon=True
            ).start()

    def _read(self, proc: subprocess.Popen, messages: queue.Queue) -> None:
        while True:
            try:
                message = protocol.receive(proc.stdout)
            except (OSError, ValueError, EOFError):
                message = None
            if proc is not self._proc:
                messages.put({"type": "exit"})  # wake a request still waiting on this worker
                return  # a worker we already killed, replaced or closed
            if message is None:
                if not self._ready.is_set():
                    self._failure = self._failure or self._worker_log() or "the worker exited"
                    self._ready.set()
                messages.put({"type": "exit"})
                return
            if message["type"] == "ready":
                self._info = message["info"]
                self._ready.set()
            elif message["type"] == "failed":
                self._failure = message["message"]
                self._ready.set()
            else:
                messages.put(message)

    def _worker_log(self) -> str:
        try:
            self._stderr.seek(0)
            lines = self._stderr.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
        except (OSError, AttributeError, ValueError):
            return ""

    @property
    def failure(self) -> str | None:
        """Why the worker could not start, once that is known; None while starting or ready."""
        return self._failure if self._ready.is_set() else None

    @property
    def started_info(self) -> dict | None:
        """What `info` gives once the worker is ready, without waiting or starting it."""
        return self._info if self._ready.is_set() and not self._failure else None

    def info(self, timeout: float | None = None) -> dict:
        """Block until the worker has built the lesson; its device, shapes and sizes."""
        if self._proc is None:
            self.start()
        if not self._ready.wait(timeout):
            raise EvaluatorNotReady("the evaluator is still starting")
        if self._failure:
            raise EvaluatorError(self._failure)
        return self._info  # type: ignore[return-value]

    def close(self) -> None:
        """Stop the worker at once, even mid-request or mid-start; wakes anyone in info()."""
        proc, self._proc = self._proc, None
        self._closed = True
        self._failure = self._failure or "the evaluator was closed"
        self._ready.set()
        if proc is None:
            return
        try:
            protocol.send(proc.stdin, {"op": "exit"})
            proc.stdin.close()
            proc.wait(timeout=0.5)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def _kill_and_restart(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.kill()
            proc.wait()
        self._proc = None
        self.start()

    def __enter__(self) -> Evaluator:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ---------------------------------------------------------------------------
    def request(
        self,
        op: str,
        payload: dict,
        limit: float | None,
        on_progress: Callable[[dict], None] | None = None,
    ) -> dict:
        """Send one request and wait for its result (progress messages go to on_progress).

        `limit` is the wall-clock budget once the worker is ready; None waits indefinitely.
        Returns the result dict, or {"error": {...}} when the worker timed out or died.
        """
        with self._lock:
            self.info()
            self._next_id += 1
            rid = self._next_id
            try:
                protocol.send(self._proc.stdin, {"op": op, "id": rid, **payload})
            except (OSError, ValueError):
                self._kill_and_restart()
                return _failure("internal", "the evaluator had stopped; it has been restarted")
            deadline = None if limit is None else time.monotonic() + limit
            while True:
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    message = self._messages.get(timeout=wait)
                except queue.Empty:
                    if self._closed:
                        return _failure("internal", "the evaluator was closed")
                    self._kill_and_restart()
                    return _failure(
                        "timeout",
                        f"the check did not finish in {limit:g} s and the sandbox was "
                        "restarted. Is there a loop that never ends, or a very large tensor "
                        "operation?",
                    )
                if self._closed:
                    return _failure("internal", "the evaluator was closed")
                if message["type"] == "exit":
                    try:
                        code = self._proc.wait(timeout=1) if self._proc else None
                    except subprocess.TimeoutExpired:
                        code = None
                    self._kill_and_restart()
                    return _failure(
                        "memory" if code in (-9, 137) else "internal",
                        "the sandbox stopped unexpectedly"
                        + (" (probably out of memory)" if code in (-9, 137) else "")
                        + "; it has been restarted.",
                    )
                if message.get("id") != rid:
                    continue
                if message["type"] == "extend":
                    # The check waits for its child to start, or for the lesson's material for
                    # the step; a negative extension gives back what was not used.
                    if deadline is not None:
                        deadline += min(float(message.get("seconds") or 0), MAX_EXTENSION)
                    continue
                if message["type"] == "progress":
                    if on_progress:
                        on_progress(message["payload"])
                    continue
                return message["result"]

    def cancel(self) -> None:
        """Ask a running long request (training) to stop at its next step."""
        proc = self._proc
        if proc is not None and proc.stdin:
            with contextlib.suppress(OSError, ValueError):
                protocol.send(proc.stdin, {"op": "cancel"})

    def check(self, step_id: str, code: str, prior: dict[str, str] | None = None
              ) -> CheckResult:
        result = self.request("check", {"step": step_id, "code": code, "prior": prior or {}},
                              check_limit(self.settings))
        if "step" not in result:  # the worker died or timed out: a check result with the error
            return CheckResult.failure(step_id, CheckError.from_dict(result["error"]),
                                       (self._info or {}).get("device"))
        return CheckResult.from_dict(result)


    def scratch(self, step_id: str, code: str, prior: dict[str, str] | None = None
                ) -> ScratchResult:
        """Run code against the lesson without grading it: output, error, what it defined."""
        # The worker kills the child at its backstop; the grace is the worker's own.
        limit = self.settings.backstop + HARD_KILL_GRACE
        result = self.request("scratch", {"step": step_id, "code": code, "prior": prior or {}},
                              limit)
        return ScratchResult.from_dict({"step": step_id, **result})

    def trace(self, cells: list[tuple[bool, str]], steps: list[str], own: bool = False
              ) -> Traced:
        """Each step's gradients as a whole program computes them, written out as code for an
        ordinary check (Engine.trace; with `own`, the program in its own frame,
        Engine.trace_own); nothing found where the trace could not be made."""
        limit = self.settings.backstop * 3 + HARD_KILL_GRACE
        result = self.request("trace", {"cells": [list(c) for c in cells], "steps": steps,
                                        "own": own}, limit)
        return Traced.from_dict(result)

    def train(self, code: str, steps: int | None, *, gradcheck_steps: int | None = None,
              compile: bool = False, reference: bool = False,
              progress: Callable[[RunProgress], None] | None = None) -> TrainingRun:
        """A training run (exercise 4), typed; `progress` hears how it goes. A worker that died
        or a run stopped from outside comes back as a run that ended with an error. No time
        limit here: the worker keeps the run's clock (see evaluator/worker.py)."""
        payload = {"code": code, "steps": steps, "gradcheck_steps": gradcheck_steps,
                   "compile": compile, "reference": reference}
        relay = None if progress is None else (lambda p: progress(RunProgress.from_dict(p)))
        return TrainingRun.from_dict(self.request("train", payload, None, relay))


def _failure(kind: str, message: str) -> dict:
    """An answer the worker could not give, as the worker would have sent it."""
    return {"error": CheckError(ErrorKind(kind), message).to_dict()}
