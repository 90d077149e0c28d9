"""`grade`: a whole submission scored by the tutor's rules, for a course or for oneself.

A submission is a percent-format `.py` file (`# %% STEP_ID` cells), the tutor's workbook
`.ipynb`, or the lecture's own notebook filled in. One submission prints a table (or `--json`),
or writes a platform's results file (`--format gradescope|prairielearn --out FILE`); many are
graded in parallel processes into an instructor's report (`--report DIR`).

Exit codes: 0 when the submission was graded, whatever its score; 2 when it cannot be read (one
line says why; a platform's results file is still written, with a score of 0 and the reason,
since that file is all a student sees); 1 when the tutor itself could not grade.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.course.classreport import RosterError, class_entries, read_roster, write_report
from tutor.course.platforms import FORMATS, results, write_atomically
from tutor.course.scoring import TRAIN_STEPS, Grade, GradingRules, Outcome, unreadable
from tutor.course.session import GraderFailed, default_jobs, grade_file, grade_many
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.session.report import terminal_width
from tutor.values.results import Rule, Status


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                   help="a .py file of `# %%%% STEP_ID` cells, the tutor's workbook .ipynb, or the "
                   "lecture's notebook filled in")
    p.add_argument("--json", action="store_true", help="print the grade as JSON")
    p.add_argument("--format", choices=FORMATS, dest="form",
                   help="write a grading platform's results file (with --out)")
    p.add_argument("--out", metavar="FILE", help="where --format writes its results file")
    p.add_argument("--strict-rule", action="store_true",
                   help="no points for a step that is right for this network but does not "
                   "follow the line's rule")
    p.add_argument("--train-steps", type=int, default=TRAIN_STEPS, metavar="N",
                   help=f"steps of the graded training run (default {TRAIN_STEPS})")
    p.add_argument("--report", metavar="DIR",
                   help="grade every submission and write DIR/report.html and DIR/grades.csv")
    p.add_argument("--refuse-numeric", action="store_true",
                   help="no points for a step whose code estimates its derivative from the "
                   "function's values (a difference quotient) instead of working it out")
    p.add_argument("--time-budget", type=float, metavar="SECONDS", dest="budget",
                   help="stop grading a submission after this long: the steps not reached earn "
                   "nothing and say why, the rest stand (default: no limit)")
    p.add_argument("--roster", metavar="FILE",
                   help="with --report: a CSV of columns submission, student_id, name that "
                   "says whose each submission is")
    p.add_argument("--train-loss", type=float, metavar="X",
                   help="the training loss the graded run must reach (at most X), besides "
                   "coming within 5%% of the reference's (default: no target)")
    p.add_argument("--jobs", type=int, metavar="N",
                   help="processes grading at once with --report (default: one per core, "
                   "at most 8)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.train_steps < 1:
        raise UsageError("--train-steps must be at least 1")
    if args.form and not args.out:
        raise UsageError("--format writes a file: give it --out FILE")
    if args.out and not args.form:
        raise UsageError("--out needs --format gradescope or --format prairielearn")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.budget is not None and not (args.budget > 0 and args.budget < float("inf")):
        raise UsageError("--time-budget must be a number of seconds above 0")
    if args.train_loss is not None and not (0 < args.train_loss < float("inf")):
        raise UsageError("--train-loss must be a positive number")
    if args.roster and not args.report:
        raise UsageError("--roster names the students of a --report DIR")
    pack = lesson_pack(settings)
    paths = [Path(p) for p in args.submissions]
    if args.report:
        if args.form or args.json:
            raise UsageError("--report writes its own files; give no --format or --json with it")
        return _class(paths, Path(args.report), pack, settings, args)
    if len(paths) != 1:
        raise UsageError("one submission at a time, or many with --report DIR")
    return _one(paths[0], pack, settings, args)


def _rules(args: argparse.Namespace) -> GradingRules:
    return GradingRules(train_steps=args.train_steps, train_loss=args.train_loss,
                        strict_rule=args.strict_rule, time_budget=args.budget,
                        refuse_numeric=args.refuse_numeric)


def _one(path: Path, pack: Pack, settings: Settings, args: argparse.Namespace) -> int:
    try:
        with Evaluator(settings) as ev:
            grade = grade_file(path, pack, ev, _rules(args))
    except (GraderFailed, EvaluatorError) as exc:
        if args.form:
            failed = unreadable(pack, path.name, f"the grader failed, not your code: {exc}")
            _write(args, failed)  # PrairieLearn: not gradable, so the attempt is not spent
        print(f"backprop-tutor: {clean(exc, MAX_MESSAGE)}", file=sys.stderr)
        return 1
    if args.form:
        _write(args, grade)
    elif args.json:
        print(json.dumps(grade.to_dict(), indent=2))
    elif not grade.unreadable:  # a refusal is said once, as the error below
        print(format_grade(grade))
    if grade.unreadable:
        raise UsageError(grade.unreadable)
    return 0


def _write(args: argparse.Namespace, grade: Grade) -> None:
    data = results(grade, args.form)
    try:
        write_atomically(Path(args.out), data)
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None


def _mark(step) -> str:
    if step.status is Outcome.PASSED and step.rule is Rule.SKIPPED:
        return Status.SKIPPED.mark
    return step.status.mark


def format_grade(grade: Grade, width: int | None = None) -> str:
    """The grade as a table: step, mark, points, the verdict's first line."""
    width = width or terminal_width()
    # Everything from the submission is made inert again here, on its way to a terminal: a name
    # or a message that moves the cursor could print a score over the real one.
    name = clean(grade.name, MAX_MESSAGE)
    if grade.unreadable:
        return f"{name}: not graded: {clean(grade.unreadable, MAX_MESSAGE)}"
    idw = max(len(s.id) for s in grade.steps)
    lines = [f"{name} · {grade.pack} · score {grade.score:g} / {grade.max_score:g}"]
    lines += [f"note: {clean(n, MAX_MESSAGE)}" for n in grade.notes]
    for s in grade.steps:
        points = f"{s.score:g}/{s.max_score:g}"
        head = f"  {_mark(s)} {s.id:<{idw}}  {points:>7}  "
        room = max(20, width - len(head))
        text = clean(s.message, MAX_MESSAGE).replace("\n", " ")
        message = text if len(text) <= room else text[: room - 1] + "…"
        lines.append(head + message)
    counts = {o: sum(s.status is o for s in grade.steps) for o in Outcome}
    lines.append("  " + ", ".join(f"{n} {o.value}" for o, n in counts.items() if n))
    return "\n".join(lines)


def _class(paths: list[Path], folder: Path, pack: Pack, settings: Settings,
           args: argparse.Namespace) -> int:
    try:
        roster = read_roster(Path(args.roster), paths) if args.roster else None
    except RosterError as exc:
        raise UsageError(str(exc)) from None
    grades: dict[Path, Grade] = {}
    failed = 0
    bar = _Bar(len(paths)) if sys.stderr.isatty() else None
    jobs = args.jobs or min(default_jobs(), len(paths))
    for path, outcome in grade_many(paths, settings, _rules(args), jobs=jobs):
        name = clean(_shown(path, paths), MAX_MESSAGE)
        if isinstance(outcome, str):
            failed += 1
            print(f"backprop-tutor: {name}: {clean(outcome, MAX_MESSAGE)}", file=sys.stderr)
            outcome = unreadable(pack, path.name, outcome)
        grades[path] = outcome
        if bar:
            bar.step(name)
    if bar:
        bar.clear()
    entries = class_entries(paths, grades, roster)
    page, table = write_report(folder, pack, entries, roster)
    graded = [e for e in entries if not e.grade.unreadable]
    print(f"{len(graded)} of {len(entries)} submissions graded; {page} and {table} written")
    unnamed = [e.file for e in entries if roster and not (e.student_id or e.name)]
    if unnamed:
        shown = ", ".join(clean(f, MAX_MESSAGE) for f in unnamed[:5])
        print(f"backprop-tutor: not on the roster: {shown}"
              + (f" and {len(unnamed) - 5} more" if len(unnamed) > 5 else ""), file=sys.stderr)
    return 1 if failed else 0


def _shown(path: Path, paths: list[Path]) -> str:
    """A submission as the class's files tell it apart: its path below their common folder
    (four students' `backward.py` are `ana/backward.py`, `ben/backward.py`, ...)."""
    import os

    try:
        common = Path(os.path.commonpath([str(p.resolve().parent) for p in paths]))
        return str(path.resolve().relative_to(common))
    except ValueError:
        return path.name


class _Bar:
    """One line on stderr that says how many submissions are graded."""

    def __init__(self, total: int):
        self.total, self.done = total, 0
        self._draw("")

    def step(self, name: str) -> None:
        self.done += 1
        self._draw(name)

    def _draw(self, name: str) -> None:
        width = 24
        filled = round(width * self.done / self.total) if self.total else width
        line = f"grading [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {name}"
        sys.stderr.write("\r\x1b[K" + line[: terminal_width() - 1])
        sys.stderr.flush()

    def clear(self) -> None:
        sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()


GRADE = Command("grade", "grade a whole submission (a .py of cells, a workbook, or the lecture's "
                "notebook) by the tutor's rules", _args, run)
