"""`autograder`: the Gradescope bundle (`--out autograder.zip`), and, inside a grading
container, the run that grades one submission (`--run gradescope|prairielearn`).

In the container (Gradescope: `/autograder`, PrairieLearn: `/grade`, or `$AUTOGRADER_ROOT`) the
student's files are in `submission/` (PrairieLearn: `student/`), and the results go to
`results/results.json`, written last and atomically by this process: the student's code runs in
the tutor's sandbox, which can write no file. A submission that is not exactly one `.py` or
`.ipynb` file still gets a results file, with a score of 0 and the reason.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.course.bundle import BundleError, make_bundle
from tutor.course.platforms import FORMATS, results, write_atomically
from tutor.course.scoring import TRAIN_STEPS, Grade, unreadable
from tutor.course.session import GraderFailed, grade_file
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack

# Per platform: the default root, the student's folder under it.
PLATFORMS = {"gradescope": ("/autograder", "submission"), "prairielearn": ("/grade", "student")}
SUFFIXES = (".py", ".ipynb")


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="ZIP", help="write the Gradescope bundle here")
    p.add_argument("--wheel", metavar="FILE",
                   help="the tutor's wheel to put in the bundle (default: built from the "
                   "repository this tutor runs from)")
    p.add_argument("--run", choices=FORMATS, metavar="PLATFORM", dest="platform",
                   help="inside a grading container: grade the submission and write "
                   "results/results.json (gradescope or prairielearn)")
    p.add_argument("--strict-rule", action="store_true",
                   help="no points for a step right for this network but not by the line's rule")
    p.add_argument("--train-steps", type=int, metavar="N",
                   help=f"steps of the graded training run (default {TRAIN_STEPS})")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.train_steps is not None and args.train_steps < 1:
        raise UsageError("--train-steps must be at least 1")
    if bool(args.out) == bool(args.platform):
        raise UsageError("give --out autograder.zip to build the bundle, or --run PLATFORM "
                         "inside a grading container")
    pack = lesson_pack(settings)
    if args.platform:
        return _grade_in_container(args, settings, pack)
    if args.wheel and not Path(args.wheel).is_file():
        raise UsageError(f"no such file: {args.wheel}")
    try:
        names = make_bundle(Path(args.out), pack, settings.pack, Path(args.wheel)
                            if args.wheel else None, strict_rule=args.strict_rule,
                            train_steps=args.train_steps)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    print(f"{args.out}: {', '.join(names[:3])}"
          + (f" and the pack's {len(names) - 3} files" if len(names) > 3 else ""))
    return 0


def _submission(folder: Path) -> tuple[Path | None, str | None]:
    """The one .py or .ipynb the student handed in, or why there is not exactly one."""
    if not folder.is_dir():
        return None, f"there is no {folder.name}/ folder to grade"
    found = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES
                   and not any(part.startswith((".", "__")) for part in
                               p.relative_to(folder).parts))
    if not found:
        return None, "no .py or .ipynb file was submitted"
    if len(found) > 1:
        names = ", ".join(p.relative_to(folder).as_posix() for p in found[:5])
        return None, f"submit exactly one .py or .ipynb file (found {len(found)}: {names})"
    return found[0], None


def _grade_in_container(args: argparse.Namespace, settings: Settings, pack: Pack) -> int:
    default_root, student = PLATFORMS[args.platform]
    root = Path(os.environ.get("AUTOGRADER_ROOT") or default_root)
    out = root / "results" / "results.json"
    path, problem = _submission(root / student)
    code = 0
    grade: Grade
    if path is None:
        grade = unreadable(pack, "submission", problem or "nothing to grade")
    else:
        try:
            with Evaluator(settings) as ev:
                grade = grade_file(path, pack, ev, strict_rule=args.strict_rule,
                                   train_steps=args.train_steps or TRAIN_STEPS)
        except (GraderFailed, EvaluatorError) as exc:
            print(f"backprop-tutor: {exc}", file=sys.stderr)
            grade = unreadable(pack, path.name, f"the grader failed, not your code: {exc}")
            code = 1
    # Last, and atomically: nothing the student's code did can stand in for this file.
    write_atomically(out, results(grade, args.platform))
    print(f"{grade.name}: {grade.score:g} / {grade.max_score:g}"
          + (f" (not graded: {grade.unreadable})" if grade.unreadable else ""))
    return code


AUTOGRADER = Command("autograder", "build the Gradescope autograder bundle (or, in a grading "
                     "container, grade the submission)", _args, run)
