"""Grading files: one submission in one evaluator, or many in parallel processes.

The evaluator is the sandbox every check runs in; a grading process starts one and grades a
whole submission with it (and, in a pool, every submission that process is handed).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tutor.config import Settings
from tutor.course.scoring import DEFAULT_RULES, Grade, GradingRules, grade, unreadable
from tutor.course.submission import Unreadable, read_submission
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack, find_pack, load_pack
from tutor.sandbox.clean import clean
from tutor.session.controller import Lesson

MAX_NAME = 200  # characters of a submission's file name shown anywhere


class GraderFailed(RuntimeError):
    """The tutor could not grade (its evaluator failed): not the student's doing."""


def grade_file(path: Path, pack: Pack, evaluator: Evaluator,
               rules: GradingRules = DEFAULT_RULES,
               progress: Callable[[str], None] | None = None) -> Grade:
    """One submission's grade; an unreadable one gets a grade that says why (`unreadable`).

    The rules' time budget holds from the first byte read: reading that outlasts it is stopped
    (`reading`) and the grade says so, and the steps then have what is left of it."""
    name = clean(path.name, MAX_NAME)  # a file's name can hold what a terminal would obey
    started = time.monotonic()
    budget = rules.time_budget
    try:
        with reading(budget):
            sub = read_submission(path, pack)
    except ReadingTooLong:
        return unreadable(pack, name, f"reading it took longer than the {budget:g} s set for "
                          "grading one submission; is it much larger than the lesson needs?")
    except Unreadable as exc:
        return unreadable(pack, name, str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever the file holds, it gets a result
        return unreadable(pack, name, f"the grader could not read it ({type(exc).__name__}); "
                          "send it to your instructor")
    sub.name = name
    lesson = Lesson(pack, None, evaluator, "grading keeps no progress")
    try:
        return grade(lesson, sub, rules, progress, started=started)
    except EvaluatorError as exc:
        raise GraderFailed(str(exc)) from exc


class ReadingTooLong(BaseException):
    """Reading a submission outlasted the time budget (a BaseException: no `except Exception`
    in the reading code may swallow it)."""


@contextlib.contextmanager
def reading(budget: float | None) -> Iterator[None]:
    """Raise ReadingTooLong in the block once `budget` seconds of wall-clock time have passed.
    Reading runs the tutor's own parsing only, in this process's main thread, where an alarm
    can stop it; elsewhere (another thread, no alarms) nothing is armed."""
    can = (budget is not None and hasattr(signal, "setitimer")
           and threading.current_thread() is threading.main_thread())
    if not can:
        yield
        return

    def ring(_signum, _frame):
        raise ReadingTooLong()

    before = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, budget)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


# --- many submissions ----------------------------------------------------------------------

_evaluator: Evaluator | None = None  # one per pool process, started on its first submission


def _pool_grade(path: str, settings: Settings, rules: GradingRules) -> tuple[str, Grade | str]:
    global _evaluator
    try:
        pack = load_pack(find_pack(settings.pack))  # kept parsed on disk: cheap after the first
        if _evaluator is None:
            _evaluator = Evaluator(settings)
            atexit.register(_evaluator.close)
        return path, grade_file(Path(path), pack, _evaluator, rules)
    except Exception as exc:  # noqa: BLE001 - this file's result; the class goes on
        if _evaluator is not None:  # a fresh one for the next submission
            _evaluator.close()
            _evaluator = None
        return path, f"the grader failed: {exc}"


def grade_many(paths: list[Path], settings: Settings, rules: GradingRules, *, jobs: int
               ) -> Iterator[tuple[Path, Grade | str]]:
    """(path, grade or why the grader failed), as each finishes, from `jobs` processes; every
    path given comes back once. A grading process that dies (a submission that blew its memory
    up, say) takes no other file with it: what it left unfinished is graded again one file at a
    time, so the file that kills its process is that file's result alone."""
    args = (settings, rules)
    unfinished = []
    for path, outcome in _pooled([str(p) for p in paths], args, jobs):
        if outcome is None:
            unfinished.append(path)
        else:
            yield Path(path), outcome
    for path in unfinished:  # again, each in a process of its own
        (_, outcome), = _pooled([path], args, 1)
        yield Path(path), outcome or ("the grader's process died while grading this file "
                                      "(out of memory, or killed)")


def _pooled(paths: list[str], args: tuple, jobs: int
            ) -> Iterator[tuple[str, Grade | str | None]]:
    """(path, outcome) from a pool of `jobs` processes, as each finishes; None for a file whose
    process died (or that a death in the pool left ungraded)."""
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(_pool_grade, p, *args): p for p in paths}
        for future in as_completed(futures):
            try:
                _, outcome = future.result()
            except BrokenProcessPool:
                yield futures[future], None
                continue
            yield futures[future], outcome


def default_jobs() -> int:
    """Processes for many submissions: one per core this process may use, at most 8 (each
    holds an evaluator of a few hundred MB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))
