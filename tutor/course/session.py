"""Grading files: one submission in one evaluator, or many in parallel processes.

The evaluator is the sandbox every check runs in; a grading process starts one and grades a
whole submission with it (and, in a pool, every submission that process is handed).
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from tutor.config import Settings
from tutor.course.scoring import TRAIN_STEPS, Grade, grade, unreadable
from tutor.course.submission import Unreadable, read_submission
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack, find_pack, load_pack
from tutor.session.controller import Lesson


class GraderFailed(RuntimeError):
    """The tutor could not grade (its evaluator failed): not the student's doing."""


def grade_file(path: Path, pack: Pack, evaluator: Evaluator, *, strict_rule: bool = False,
               train_steps: int = TRAIN_STEPS,
               progress: Callable[[str], None] | None = None) -> Grade:
    """One submission's grade; an unreadable one gets a grade that says why (`unreadable`)."""
    try:
        sub = read_submission(path, pack)
    except Unreadable as exc:
        return unreadable(pack, path.name, str(exc))
    lesson = Lesson(pack, None, evaluator, "grading keeps no progress")
    try:
        return grade(lesson, sub, strict_rule=strict_rule, train_steps=train_steps,
                     progress=progress)
    except EvaluatorError as exc:
        raise GraderFailed(str(exc)) from exc


# --- many submissions ----------------------------------------------------------------------

_evaluator: Evaluator | None = None  # one per pool process, started on its first submission


def _pool_grade(path: str, settings: Settings, strict_rule: bool,
                train_steps: int) -> tuple[str, Grade | str]:
    global _evaluator
    pack = load_pack(find_pack(settings.pack))  # kept parsed on disk: cheap after the first
    try:
        if _evaluator is None:
            _evaluator = Evaluator(settings)
            atexit.register(_evaluator.close)
        return path, grade_file(Path(path), pack, _evaluator, strict_rule=strict_rule,
                                train_steps=train_steps)
    except (GraderFailed, EvaluatorError) as exc:
        if _evaluator is not None:  # a fresh one for the next submission
            _evaluator.close()
            _evaluator = None
        return path, f"the grader failed: {exc}"


def grade_many(paths: list[Path], settings: Settings, *, jobs: int,
               strict_rule: bool = False, train_steps: int = TRAIN_STEPS
               ) -> Iterator[tuple[Path, Grade | str]]:
    """(path, grade or why the grader failed), as each finishes, from `jobs` processes."""
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_pool_grade, str(p), settings, strict_rule, train_steps)
                   for p in paths]
        for future in as_completed(futures):
            path, outcome = future.result()
            yield Path(path), outcome


def default_jobs() -> int:
    """Processes for many submissions: one per core this process may use, at most 8 (each
    holds an evaluator of a few hundred MB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))
