"""One long-lived thread that runs the lesson's checks and scratch runs, one at a time.

A Textual thread worker starts from an asyncio task on the next turn of the event loop, and its
thread then waits for the GIL while the screen repaints "Checking…": the learner's code reached
the checker several milliseconds after the key. Here the thread is already waiting for work,
and `submit` hands the job over before returning, so the code is on its way to the checker
before the screen repaints. Jobs report back as workers do, by posting messages to the screen.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

# The longest the app's thread waits for the runner to take a job. Taking it needs only the
# GIL, which the waiting thread gives up; the limit matters only if the runner is still busy.
HANDOFF = 0.05  # seconds


class Runner:
    """Runs submitted jobs in order on its own daemon thread, started on first use."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._taken = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, job: Callable[[], None]) -> None:
        """Queue `job` and wait (briefly) until the runner has taken it. The job must catch
        its own exceptions and report through messages."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
            self._thread.start()
        self._taken.clear()
        self._jobs.put(job)
        self._taken.wait(HANDOFF)

    def close(self) -> None:
        """Let the thread end once the job under way (if any) returns."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._taken.set()
            job()
