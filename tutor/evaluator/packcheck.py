"""`pack check`: everything a pack promises, verified by running it.

A pack is data written by hand, and its mistakes only show when a learner meets them: a reference
solution that autograd disagrees with, a catalogued mistake that is in fact correct (or that the
tutor recognises as some other mistake), a step with two hints. This runs the whole pack through
the same engine learners use and lists every problem it finds.
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tutor.config import Settings
from tutor.pack.model import Pack, PackError, Step, load_pack
from tutor.values.results import CheckResult

SMOKE_STEPS = 30  # training steps of the smoke test: enough to run every phase once
# The families of slips the tutor names from the step itself (tutor/core/smallest.py), each made
# once per step from its reference solution wherever the solution has a place for it.
FAMILIES = ("constant", "term", "function", "axis", "operand")
TRIES = 4  # changes of one family tried per step before it counts as not applying there


@dataclass(frozen=True)
class Problem:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


def check_pack(root: Path, settings: Settings, progress: Callable[[str], None] = print,
               families: bool = True) -> list[Problem]:
    """Every problem found in the pack at `root`; an empty list means it is ready for learners."""
    try:
        pack = load_pack(root)
    except (PackError, OSError, ValueError) as exc:
        return [Problem(str(root), f"does not load: {exc}")]
    unsolved = [s.id for s in pack.gradient_steps if not s.has_solution]
    if unsolved and len(unsolved) == len(pack.gradient_steps):
        # A student's copy (tutor/pack/student.py): nothing here to check the lesson against.
        return [Problem(str(root), "is a student's copy without reference solutions; check "
                        "the pack it was made from")]
    problems = list(_content(pack))
    try:
        from tutor.core.engine import Engine

        engine = Engine(settings, pack=pack)
    except Exception as exc:  # noqa: BLE001 - the pack's own code failed: that is the report
        return [*problems, Problem("lesson", f"cannot be built: {type(exc).__name__}: {exc}")]
    try:
        for step in pack.gradient_steps:
            progress(f"checking {step.id}")
            if step.function:
                problems += _cases(engine, step)
            problems += _solution(engine, step)
            problems += _mistakes(engine, step)
            if families:
                named = _families(engine, step)
                problems += [p for p in named if isinstance(p, Problem)]
                for family, code, message in (n for n in named if not isinstance(n, Problem)):
                    if message is None:
                        progress(f"  {family}: `{code}` is refused without a diagnosis")
        if any(s.kind.trained for s in pack.steps):
            progress("training smoke test")
            problems += _training(engine)
    finally:
        engine.close()
    return _once_per_todo(problems)


TODO_MARK = "TODO (pack new):"


def _once_per_todo(problems: list[Problem]) -> list[Problem]:
    """A step `pack new` left as a TODO makes every check that runs through it fail the same
    way: said once, at the first place, with how many more checks it stopped."""
    out: list[Problem] = []
    first: dict[str, int] = {}
    more: dict[str, int] = {}
    for p in problems:
        at = p.what.find(TODO_MARK)
        if at < 0:
            out.append(p)
            continue
        todo = p.what[at:].split(";")[0].rstrip(". ")
        if todo in first:
            more[todo] += 1
            continue
        first[todo], more[todo] = len(out), 0
        out.append(p)
    for todo, k in first.items():
        stopped = more[todo]
        tail = f" ({stopped} more check{'s' if stopped != 1 else ''} it stops)" if stopped else ""
        out[k] = Problem(out[k].where, f"{todo}: write this step's gradients by hand{tail}")
    return out


def _content(pack: Pack) -> Iterator[Problem]:
    for step in pack.steps:
        if not step.explanation.strip():
            yield Problem(step.id, "has no explanation")
        if step.kind.trained:
            continue
        if len(set(step.hints)) < 3:
            yield Problem(step.id, f"has {len(set(step.hints))} different hints; three or more "
                          "(idea, shapes, nearly the answer) are needed")
        if not step.template.strip():
            yield Problem(step.id, "has an empty template")
        else:
            try:
                ast.parse(step.template)
            except SyntaxError as exc:
                yield Problem(step.id, f"template is not valid Python: {exc.msg} (line "
                              f"{exc.lineno})")
        if step.template.strip() == step.solution.strip():
            yield Problem(step.id, "template gives the solution away")
        if step.function and f"def {step.function.name}(" not in step.template:
            yield Problem(step.id, f"template does not define {step.function.name}")
        for name in step.graded_names:
            if name not in step.template:
                yield Problem(step.id, f"template does not mention {name}")


def _cases(engine, step: Step) -> list[Problem]:
    """A function step's cases must build, and each fresh one must change some size: the point
    is to catch a function that assumes the lesson's sizes."""
    try:
        lesson, *fresh = engine.function_cases(step)
    except (PackError, KeyError, ValueError) as exc:
        return [Problem(step.id, f"its cases cannot be built: {exc}")]
    problems = []
    if not lesson.sizes:
        problems.append(Problem(step.id, "the lesson code names no sizes (upper-case ints such "
                                         "as B, T, C), so messages cannot say where it failed"))
    for case in fresh:
        if case.sizes == lesson.sizes:
            problems.append(Problem(step.id, f"{case.name} has the lesson's own sizes "
                                             f"({case.describe()}): draw different ones"))
    return problems


def _solution(engine, step: Step) -> list[Problem]:
    result = engine.check(step.id, step.solution)
    if result.passed:
        return _picture(step, result)
    if result.error:
        return [Problem(step.id, f"reference solution fails to run: {result.error.message}")]
    wrong = [f"{c.grad} ({c.verdict})" for c in result.checks if not c.right]
    if wrong:
        return [Problem(step.id, f"reference solution disagrees with autograd: "
                                 f"{', '.join(wrong)}")]
    return [Problem(step.id, f"reference solution fails the fresh batch: "
                             f"{result.heldout.message if result.heldout else None}")]


def _picture(step: Step, result: CheckResult) -> list[Problem]:
    """A [steps.picture] drawn from the reference solution must match autograd's at every step
    and on every demo: else its `later` or `shown` code is not what the function computes."""
    picture = step.function.picture if step.function else None
    if picture is None:
        return []
    panels = (result.figure or {}).get("panels") or []
    expected = 1 + len(picture.demos)
    if len(panels) != expected:
        why = next((n for n in result.notes if n.startswith("the picture through time")),
                   "its calls did not all finish")
        return [Problem(step.id, f"the picture has {len(panels)} panels, not {expected}: "
                                 f"{why}")]
    return [Problem(step.id, f"the picture's {p['case']} panel differs from autograd's at "
                             f"t = {', '.join(str(t) for t, w in enumerate(p['wrong']) if w)} "
                             "for the reference solution: check its `later` and `shown`")
            for p in panels if any(p["wrong"]) or None in p["yours"]]


def _mistakes(engine, step: Step) -> list[Problem]:
    problems = []
    for i, mistake in enumerate(step.mistakes, 1):
        where = f"{step.id} mistake {i}"
        result = engine.check(step.id, mistake.code)
        if result.passed:
            problems.append(Problem(where, "passes: a catalogued mistake must be wrong"))
            continue
        if result.error:
            problems.append(Problem(where, f"does not run: {result.error.message}"))
            continue
        tensor = mistake.tensor or step.checks[0]
        label = step.kind.graded_name(tensor)
        row = next((c for c in result.checks if c.grad == label), None)
        diagnosis = row.diagnosis if row else None
        if row is None or diagnosis is None or diagnosis.message != mistake.message:
            got = (diagnosis.kind if diagnosis else None) or (row.verdict if row else "no row")
            problems.append(Problem(where, f"is not recognised as itself on {label} (the "
                                           f"tutor says: {got})"))
        elif diagnosis.kind != mistake.kind:
            problems.append(Problem(where, f"is recognised, but with kind "
                                           f"{diagnosis.kind} instead of {mistake.kind}"))
    return problems


def family_mistakes(engine, step: Step) -> Iterator[tuple[str, str, str]]:
    """(family, changed line, changed solution): the step's solution with one slip of each
    family, as a learner might make it. A term is made three times too large; the others are
    the first changes of tutor/core/smallest.py's families. Whether each is wrong is the engine's
    to say: a change may well be another way to the right answer."""
    import ast

    from tutor.core.kinds.base import smallest_search

    smallest = smallest_search()
    try:
        tree = ast.parse(step.solution)
    except SyntaxError:
        return
    if smallest is None:  # the student's wheel: no families to make
        return
    if step.function:
        inputs = engine.function_cases(step)[0].inputs
    else:
        inputs = engine.network.main.namespace()
    import torch

    shapes = {k: tuple(v.shape) for k, v in inputs.items()
              if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() > 0}
    sizes = {k: v for k, v in {**engine.network.sizes, **inputs}.items() if type(v) is int}
    code = step.solution
    made = {
        "constant": (e.source for e in smallest.constant_edits(tree, code, sizes)),
        "term": (smallest.edited(tree, i, lambda n: smallest.scaled(n, 3.0))
                 for i, _ in smallest.terms(tree)),
        "function": (e.source for e in smallest.function_edits(tree, code)),
        "axis": (e.source for e in smallest.axis_edits(tree, code)),
        "operand": (e.source for e in smallest.operand_edits(tree, code, shapes)),
    }
    for family in FAMILIES:
        for source in list(made[family])[:TRIES]:
            yield family, _changed_line(step.solution, source), source


def _changed_line(before: str, after: str) -> str:
    import ast

    old = ast.unparse(ast.parse(before)).splitlines()
    new = after.splitlines()
    return next((b for a, b in zip(old, new, strict=False) if a != b), new[-1] if new else "")


def wrong_slips(engine, step: Step) -> Iterator[tuple[str, str, str, CheckResult]]:
    """(family, changed line, code, its check) for each family's first slip of the step's
    solution that the check refuses (a slip that passes or does not run is not a mistake)."""
    done: set[str] = set()
    for family, line, source in family_mistakes(engine, step):
        if family in done:
            continue
        result = engine.check(step.id, source)
        if result.passed or result.error:
            continue
        done.add(family)
        yield family, line, source, result


def _families(engine, step: Step) -> list:
    """Each family's first slip that is wrong, checked: a Problem where the message gives the
    answer away (a line of the solution), else (family, changed line, message or None)."""
    out: list = []
    for family, line, source, result in wrong_slips(engine, step):
        wrong = [c for c in result.checks if not c.accepted]
        named = next((c.diagnosis.message for c in wrong if c.diagnosis), None)
        # A line of the solution the slip itself also holds is the learner's own code when
        # quoted back; only a line the slip lacks would give the answer away.
        given = [ln.strip() for ln in step.solution.splitlines()
                 if len(ln.strip()) > 12 and not ln.strip().startswith("#")
                 and ln.strip() not in source]
        leaked = [ln for ln in given if any(ln in c.message for c in wrong)]
        if leaked:
            out.append(Problem(f"{step.id} {family} slip", f"its message gives the answer "
                                                           f"away: {leaked[0]}"))
        out.append((family, line.strip(), named))
    return out


def _training(engine) -> list[Problem]:
    from tutor.training import Trainer
    from tutor.values.runs import RunStatus

    run = Trainer(engine, {"steps": SMOKE_STEPS, "gradcheck_steps": SMOKE_STEPS // 2},
                  lambda _: None, threading.Event()).execute()
    if run.status is not RunStatus.FINISHED:
        message = run.error.message if run.error else run.status.value
        return [Problem("training", f"the smoke test did not finish: {message}")]
    if not (run.gradcheck and run.gradcheck.passed):
        return [Problem("training", "the reference backward pass disagrees with autograd in "
                                    "the gradient check")]
    if run.train_loss is None:
        return [Problem("training", "the run's evaluation gave no loss ([training.eval])")]
    return _run_pictures(engine, run)


def _run_pictures(engine, run) -> list[Problem]:
    """A pack that asks for a picture during training must get one, right for the reference."""
    from tutor.training.plan import TrainingSettings

    step_id = TrainingSettings.from_pack(engine.pack).picture
    if not step_id:
        return []
    if not run.pictures:
        return [Problem("training", f"[training] picture = {step_id!r} drew nothing: the step "
                                    "needs a [steps.picture], and the driver must call its "
                                    "function with plain names")]
    if any(any(p["panel"]["wrong"]) for p in run.pictures):
        return [Problem("training", "the picture drawn during the run differs from autograd's "
                                    "for the reference solutions")]
    return []
