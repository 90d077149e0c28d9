"""Whose time a check's child spends, and how much of it (docs/architecture.md, the check's
time budget).

The learner's limit (`Settings.timeout`) is CPU time of their own code: one `Budget` for every run
of it that the verdict reads. It is measured only while their code runs, as CPU time of this
process, so that a busy machine, which stretches the wall clock, stops nothing that would finish
alone: ITIMER_PROF raises `CheckTimeout` when the budget is spent, and in a confined child
RLIMIT_CPU, lowered to the same budget plus a grace while their code runs, ends one long tensor
operation, which no signal interrupts.

The tutor's own work after the run that decides the verdict has a wall-clock budget of its own
(`Settings.tutor_seconds`, a `Phase`): ITIMER_REAL raises `TutorTimeout`, and the runs that
finished keep their verdict. A stop there is still the learner's when their code, in that phase,
used far more CPU time than in its first run (`Phase.learners_fault`): a loop, not a busy
machine.

Where a process cannot set these timers (Windows, a thread other than the main one) nothing is
armed here, and the parent's wall-clock backstop is what stops a child.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tutor.sandbox import confine

# How much CPU time past its budget the learner's code may take in one long tensor operation
# (which the alarm cannot interrupt) before the system's CPU limit ends the child: at least this,
# and less than a second more (the system counts whole seconds).
CPU_GRACE = 0.25


# A stop on the tutor's budget is the learner's only when their code used, after its first run,
# more than this many times the CPU time of that run, and this much more (`Phase.learners_fault`):
# the runs after it (the fresh batch, the probe's two runs) are the same code on data of the same
# kind, and take about as long each.
LOOP_FACTOR = 8
LOOP_FLOOR = 0.05


class OutOfTime(BaseException):
    """A budget ran out. A BaseException, so that `except Exception:` cannot swallow it."""


class CheckTimeout(OutOfTime):
    """The learner's limit ran out: their code used up its CPU time."""


class TutorTimeout(OutOfTime):
    """The tutor's own wall-clock budget ran out: the learner is not to blame."""


_CAN_TIME = hasattr(signal, "setitimer")
# What the alarms stop, while it runs: a signal that comes late finds None and does nothing,
# so that it can never land in the tutor's code after the run it was set for.
_running: Budget | None = None
_phase: Phase | None = None


def _on_cpu(_signum: int, _frame: Any) -> None:
    if _running is not None:
        _running.exhausted = True  # spent, whatever a coarser clock still counts as left
        raise CheckTimeout()


def _on_wall(_signum: int, _frame: Any) -> None:
    if _phase is not None:
        raise TutorTimeout()


@contextmanager
def watching() -> Iterator[bool]:
    """The alarms' handlers, for one check in this process; the ones before are put back after.
    Yields whether they could be set (only the main thread may)."""
    if not _CAN_TIME:
        yield False
        return
    try:
        before = signal.signal(signal.SIGPROF, _on_cpu), signal.signal(signal.SIGALRM, _on_wall)
    except ValueError:  # not the main thread
        yield False
        return
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, before[0])
        signal.signal(signal.SIGALRM, before[1])


def _armed() -> bool:
    return _CAN_TIME and signal.getsignal(signal.SIGPROF) is _on_cpu


class Budget:
    """CPU seconds that some runs of sandboxed code may use together: the learner's limit, or
    the cost limit of the picture's calls or of the changed programs. With `kill`, RLIMIT_CPU is
    lowered to it too while the code runs (the learner's limit: a stop they can swallow or a
    tensor operation the alarm cannot interrupt still ends there)."""

    def __init__(self, seconds: float, kill: bool = False) -> None:
        self.seconds = max(seconds, 0.0)
        self.kill = kill
        self.spent = 0.0  # CPU seconds of the runs that ended
        self.exhausted = False  # the alarm went off: nothing more runs on this budget
        self._since: float | None = None  # this process's CPU time when the current run began

    @property
    def used(self) -> float:
        """CPU seconds used so far, the run under way included."""
        under_way = time.process_time() - self._since if self._since is not None else 0.0
        return self.spent + under_way

    @property
    def left(self) -> float:
        return 0.0 if self.exhausted else self.seconds - self.spent

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around one run of the code: raises CheckTimeout when the budget is spent, before or
        during it."""
        global _running
        if self.left <= 0:
            raise CheckTimeout()
        armed = _armed()
        self._since = time.process_time()
        if armed:
            _running = self
            signal.setitimer(signal.ITIMER_PROF, max(self.left, 1e-3))
        if self.kill:
            confine.tighten_cpu(self.left + CPU_GRACE)
        try:
            yield
        finally:
            _running = None  # first: an alarm from here on stops nothing
            if armed:
                signal.setitimer(signal.ITIMER_PROF, 0)
            if self.kill:
                confine.tighten_cpu(None)
            self.spent += time.process_time() - self._since
            self._since = None


class Phase:
    """The tutor's own work after the run that decides the verdict, from `with` to its end, on
    the wall clock: `seconds` of its own, and what is left of the learner's limit, since their
    runs inside it (the fresh batch, the probe) are timed by that limit (`learner`) and not by
    the tutor's budget. Raises `TutorTimeout` when that runs out, and at once where `seconds`
    is 0 (no work of the tutor's at all)."""

    def __init__(self, seconds: float, learner: Budget) -> None:
        self.seconds = max(seconds, 0.0)
        self.learner = learner
        self._before = 0.0  # the learner's CPU time before the phase: their first run

    def __enter__(self) -> Phase:
        global _phase
        self._before = self.learner.used
        if self.seconds <= 0:
            raise TutorTimeout()
        if _armed():
            _phase = self
            signal.setitimer(signal.ITIMER_REAL, self.seconds + max(self.learner.left, 0.0))
        return self

    def __exit__(self, *_: Any) -> None:
        global _phase
        _phase = None  # first: an alarm from here on stops nothing
        if _armed():
            signal.setitimer(signal.ITIMER_REAL, 0)

    def learners_fault(self) -> bool:
        """Whether the time ran out because of the learner's code after all: it used far more
        CPU time in this phase than in its first run, where the same code on data of the same
        kind took little (it loops when probed, or on fresh sizes). A busy machine, or the
        tutor's own work, is never theirs, whatever the share: a machine that gives this process
        less time slows their code and the tutor's alike."""
        return self.learner.used - self._before > LOOP_FACTOR * self._before + LOOP_FLOOR
