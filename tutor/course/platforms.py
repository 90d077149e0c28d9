"""The grading platforms' results files: Gradescope's autograder `results.json` and
PrairieLearn's external grader `results.json`, from a `Grade`.

Each file is what a student sees, so each is written whatever happened (an unreadable submission
gets a score of 0 and the reason), kept under 1 MB whatever the learner's code printed, and
written last and atomically by the grading process (a temporary file beside it, then
`os.replace`): a reader never sees half a file, and nothing written earlier survives in its
place.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from tutor.course.scoring import Grade, Outcome, StepGrade
from tutor.sandbox.clean import whole_characters
from tutor.session.report import shortened

MAX_RESULTS_BYTES = 1_000_000  # both platforms' limit; the file is kept below it
FORMATS = ("gradescope", "prairielearn")


def _header(grade: Grade) -> str:
    if grade.unreadable:
        return f"Your submission could not be graded: {grade.unreadable}"
    lines = [f"Score: {grade.score:g} / {grade.max_score:g} ({grade.pack})"]
    counts = {o: sum(s.status is o for s in grade.steps) for o in Outcome}
    lines.append(", ".join(f"{n} {o.value}" for o, n in counts.items() if n))
    lines += grade.notes
    return "\n".join(lines)


def _step_text(step: StepGrade, limit: int | None) -> str:
    """The step's full feedback (its one-line message when it has none), cut to `limit`."""
    text = step.feedback or step.message
    return text if limit is None else shortened(text, limit)


def gradescope(grade: Grade, limit: int | None = None) -> dict:
    """Gradescope's results: the score on top, one test per step (its feedback as Markdown)."""
    tests = []
    for number, step in enumerate(grade.steps, start=1):
        body = _step_text(step, limit) if step.feedback else ""
        tests.append({
            "name": f"{step.id}: {step.title}",
            "number": f"{step.exercise}.{number}",
            "score": step.score,
            "max_score": step.max_score,
            "status": "passed" if step.status is Outcome.PASSED else "failed",
            "output": f"**{step.status.value}**: {_md_line(step.message)}"
                      + (f"\n\n```\n{_fenced(body)}\n```" if body else ""),
            "output_format": "md",
            "visibility": "visible",
        })
    return {
        "score": grade.score,
        "execution_time": round(grade.execution_time, 3),
        "output": _header(grade),
        "output_format": "text",
        "visibility": "visible",
        "tests": tests,
    }


def _md_line(text: str) -> str:
    # One line of Markdown: the learner's words are shown as code, never as markup.
    return "`" + text.replace("`", "'") + "`" if text else ""


def _fenced(text: str) -> str:
    return text.replace("```", "'''")


def prairielearn(grade: Grade, limit: int | None = None) -> dict:
    """PrairieLearn's results: a score in [0, 1], one test per step; an unreadable submission is
    not gradable (the student keeps the attempt) and says why in `format_errors`."""
    if grade.unreadable:
        return {"gradable": False, "score": 0.0, "message": _header(grade),
                "format_errors": {"submission": grade.unreadable}, "tests": []}
    total = grade.max_score
    return {
        "gradable": True,
        "score": round(grade.score / total, 6) if total else 0.0,
        "message": _header(grade),
        "output": "",
        "tests": [{
            "name": f"{step.id}: {step.title}",
            "description": f"exercise {step.exercise}",
            "points": step.score,
            "max_points": step.max_score,
            "message": f"{step.status.value}: {step.message}",
            "output": _step_text(step, limit),
        } for step in grade.steps],
    }


def results(grade: Grade, form: str) -> bytes:
    """The results file's bytes, under MAX_RESULTS_BYTES: each step's feedback is cut shorter
    until the whole fits (the scores never change)."""
    make = {"gradescope": gradescope, "prairielearn": prairielearn}[form]
    limit: int | None = None
    while True:
        data = _utf8(json.dumps(make(grade, limit), ensure_ascii=False, indent=1))
        if len(data) < MAX_RESULTS_BYTES:
            return data
        if limit == 0:
            # Only the header and messages are left; cut the header, the notes' home.
            grade.notes = grade.notes[:3]
            data = _utf8(json.dumps(make(grade, 0), ensure_ascii=False))
            return data[: MAX_RESULTS_BYTES - 1] if len(data) >= MAX_RESULTS_BYTES else data
        limit = 4000 if limit is None else limit // 4


def _utf8(text: str) -> bytes:
    # A lone surrogate anywhere in the grade (a notebook may hold one) must not cost the file.
    return whole_characters(text).encode()


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and os.replace, so
    the file is either the old one or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
