"""`autograder`: the Gradescope bundle (`--out autograder.zip`), and, inside a grading
container, the run that grades one submission (`--run gradescope|prairielearn`).

In the container (Gradescope: `/autograder`, PrairieLearn: `/grade`, or `$AUTOGRADER_ROOT`) the
student's files are in `submission/` (PrairieLearn: `student/`), and the results go to
`results/results.json`, written last and atomically by this process: the student's code runs in
the tutor's sandbox, which can write no file. A submission that is not exactly one `.py` or
`.ipynb` file still gets a results file, with a score of 0 and the reason. The grading rules
come from `grading.json` (Gradescope: in `source/`, PrairieLearn: in `tests/`, or `--config`),
written when the bundle or the question was built; options given here override them.

`--prairielearn DIR` writes PrairieLearn's image recipe and question (tutor.course.prairielearn).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from tutor.commands.base import Command, UsageError, lesson_pack
from tutor.config import Settings
from tutor.course.bundle import (
    BundleError,
    checked_wheel,
    make_bundle,
    pack_files,
)
from tutor.course.platforms import FORMATS, results, write_atomically
from tutor.course.prairielearn import IMAGE, timeout_for, write_recipe
from tutor.course.rules import (
    CONFIG_NAME,
    GRADESCOPE_BUDGET,
    PLATFORM_MARGIN,
    GradingRules,
    RulesError,
    check_values,
    make_rules,
    read_rules,
)
from tutor.course.scoring import TRAIN_STEPS, Grade, unreadable
from tutor.course.session import GraderFailed, grade_file
from tutor.evaluator.client import Evaluator, EvaluatorError
from tutor.pack.model import Pack
from tutor.pack.student import student_wheel

# Per platform: the default root, the student's folder under it.
PLATFORMS = {"gradescope": ("/autograder", "submission"), "prairielearn": ("/grade", "student")}
RULES_AT = {"gradescope": "source", "prairielearn": "tests"}  # grading.json's folder, per platform
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
                   help=f"steps of the graded training run (default {TRAIN_STEPS}, or the "
                   "lesson's whole run when shorter)")
    p.add_argument("--train-loss", type=float, metavar="X",
                   help="the training loss a submission's graded run must reach (at most X), "
                   "besides coming within 5%% of the reference's (default: no target)")
    p.add_argument("--refuse-numeric", action="store_true",
                   help="no points for a step whose code estimates its derivative from the "
                   "function's values (a difference quotient) instead of working it out")
    p.add_argument("--time-budget", type=float, metavar="SECONDS",
                   help="the most one submission's grading may take: what is not reached in "
                   "time earns nothing and says so (default: Gradescope's 10 minutes, or the "
                   "PrairieLearn question's timeout, less a margin)")
    p.add_argument("--prairielearn", metavar="DIR",
                   help="write PrairieLearn's image recipe (DIR/image) and question "
                   "(DIR/questions/backprop)")
    p.add_argument("--image", metavar="NAME", default=IMAGE,
                   help=f"with --prairielearn: the image's name, as you push it (default {IMAGE})")
    p.add_argument("--student-wheel", metavar="DIR",
                   help="write the wheel students install into DIR: the same tutor, its "
                   "lessons without reference solutions or last hints (the grader keeps them)")
    p.add_argument("--config", metavar="FILE",
                   help=f"with --run: the grading rules (default: {CONFIG_NAME} in source/ on "
                   "Gradescope, tests/ on PrairieLearn)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.train_steps is not None and args.train_steps < 1:
        raise UsageError("--train-steps must be at least 1")
    try:
        check_values(None, args.train_loss)
    except RulesError as exc:
        raise UsageError(f"--train-loss: {exc}") from None
    try:
        check_values(None, None, args.time_budget)
    except RulesError as exc:
        raise UsageError(f"--time-budget: {exc}") from None
    if args.student_wheel:
        return _student_wheel(args)
    if sum(map(bool, (args.out, args.platform, args.prairielearn))) != 1:
        raise UsageError("give --out autograder.zip to build the bundle, --prairielearn DIR for "
                         "PrairieLearn's image and question, or --run PLATFORM inside a grading "
                         "container")
    if args.config and not args.platform:
        raise UsageError("--config is read by --run; building takes --train-steps, --train-loss "
                         "and --strict-rule")
    pack = lesson_pack(settings)
    if args.platform:
        return _grade_in_container(args, settings, pack)
    if args.wheel and not Path(args.wheel).is_file():
        raise UsageError(f"no such file: {args.wheel}")
    rules = make_rules(pack, args.train_steps, args.train_loss, args.strict_rule,
                       args.time_budget or _platform_budget(args, pack), args.refuse_numeric)
    target = args.out or args.prairielearn
    try:
        names = _build(args, pack, settings, rules)
    except BundleError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    print(f"{target}: {', '.join(names[:4])}"
          + (f" and {len(names) - 4} more" if len(names) > 4 else "")
          + f"; graded runs of {rules.train_steps} steps"
          + (f", train loss {rules.train_loss:g} or lower" if rules.train_loss else "")
          + f"; at most {rules.time_budget:g} s a submission")
    return 0


def _student_wheel(args: argparse.Namespace) -> int:
    if args.out or args.platform or args.prairielearn:
        raise UsageError("--student-wheel is made on its own: give it alone (with --wheel)")
    if args.wheel and not Path(args.wheel).is_file():
        raise UsageError(f"no such file: {args.wheel}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = checked_wheel(Path(args.wheel) if args.wheel else None, Path(tmp))
            made = student_wheel(wheel, Path(args.student_wheel))
    except (BundleError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.student_wheel}: {exc.strerror or exc}") from None
    print(f"{made}: the tutor for students, its lessons without reference solutions")
    return 0


def _platform_budget(args: argparse.Namespace, pack: Pack) -> float:
    """The platform's time limit less a margin: Gradescope's default, or the question's."""
    if args.out:
        return GRADESCOPE_BUDGET
    steps = args.train_steps or make_rules(pack).train_steps
    return max(PLATFORM_MARGIN, timeout_for(steps) - PLATFORM_MARGIN)


def _build(args: argparse.Namespace, pack: Pack, settings: Settings,
           rules: GradingRules) -> list[str]:
    """The Gradescope bundle, or PrairieLearn's recipe and question; the names written."""
    wheel = Path(args.wheel) if args.wheel else None
    if args.out:
        return make_bundle(Path(args.out), pack, settings.pack, wheel, rules)
    with tempfile.TemporaryDirectory() as tmp:
        return write_recipe(Path(args.prairielearn), pack, checked_wheel(wheel, Path(tmp)),
                            rules, pack_files(settings.pack), args.image)


def _rules(args: argparse.Namespace, root: Path, pack: Pack) -> GradingRules:
    """The rules the bundle or the question was built with, the options given here over
    them; RulesError when the file is there but cannot be followed."""
    path = Path(args.config) if args.config else root / RULES_AT[args.platform] / CONFIG_NAME
    built = read_rules(path, pack) if args.config or path.is_file() else make_rules(pack)
    return make_rules(pack, args.train_steps or built.train_steps,
                      args.train_loss if args.train_loss is not None else built.train_loss,
                      args.strict_rule or built.strict_rule,
                      args.time_budget or built.time_budget,
                      args.refuse_numeric or built.refuse_numeric)


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
    try:
        rules = _rules(args, root, pack)
    except RulesError as exc:
        # The instructor's file, not the student's: PrairieLearn keeps the attempt.
        print(f"backprop-tutor: {exc}", file=sys.stderr)
        path, problem, code = None, f"the grader failed, not your code: {exc}", 1
    if path is None:
        grade = unreadable(pack, "submission", problem or "nothing to grade")
    else:
        try:
            with Evaluator(settings) as ev:
                grade = grade_file(path, pack, ev, rules)
        except (GraderFailed, EvaluatorError) as exc:
            print(f"backprop-tutor: {exc}", file=sys.stderr)
            grade = unreadable(pack, path.name, f"the grader failed, not your code: {exc}")
            code = 1
        except Exception as exc:  # noqa: BLE001 - whatever happened, the platform gets a file
            print(f"backprop-tutor: {type(exc).__name__}: {exc}", file=sys.stderr)
            grade = unreadable(pack, path.name, "the grader failed, not your code "
                               f"({type(exc).__name__})")
            code = 1
    # Last, and atomically: nothing the student's code did can stand in for this file.
    write_atomically(out, results(grade, args.platform))
    print(f"{grade.name}: {grade.score:g} / {grade.max_score:g}"
          + (f" (not graded: {grade.unreadable})" if grade.unreadable else ""))
    return code


AUTOGRADER = Command("autograder", "build the Gradescope autograder bundle (or, in a grading "
                     "container, grade the submission)", _args, run)
