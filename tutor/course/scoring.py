"""Grading a submission: every step by exactly the rules `check` uses, in one evaluator, and the
training step by a short graded run; then the points.

Each checked step goes through `Lesson.evaluate` as `check --all` sends it: in the pack's order,
with the code of the earlier steps that passed replayed before it (a step that failed falls back
to the reference for the steps after it, so one mistake costs one step). A step with no code is
missing. A step that passed with its rule skipped (right for this network, not the line's rule)
counts as passed, with its note, and earns its points unless the instructor asks for the rule
(`strict_rule`). The training step trains `train_steps` steps with the gradient check on and
passes as a run passes exercise 4 (`TrainingRun.exercise`), and ends at or below the
instructor's loss target when there is one (`train_loss`).

A grade may have a time budget (the platform's timeout, less a margin): a step not reached in
time earns nothing and says so, a training run still going is stopped, and the steps graded
before stand. Every text that came from the submission is made inert here (no terminal control
sequences, no lone surrogates), since the grade is printed and written for others to read.
"""

from __future__ import annotations

import ast
import textwrap
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from tutor import code_facts
from tutor.course.lecture import lesson_names, own_training, setup_names
from tutor.course.submission import Submission
from tutor.evaluator.client import EvaluatorError
from tutor.pack.flow import gradient, gradients
from tutor.pack.model import Pack, Step
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.session.controller import Lesson
from tutor.session.report import format_result, shortened
from tutor.source import size_problem
from tutor.values.results import CheckResult, ErrorKind, Rule, Traced
from tutor.values.runs import ExerciseVerdict, RunStatus, TrainingRun

TRAIN_STEPS = 1000  # long enough for the loss to fall measurably, short enough for a container
FEEDBACK_WIDTH = 96
MAX_STDOUT = 2000  # of a learner's print output, per step, in the feedback
MAX_FEEDBACK = 6000  # characters of feedback per step


class Outcome(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    MISSING = "missing"
    ERROR = "error"  # the tutor could not grade it (its own failure, not the learner's)

    def __str__(self) -> str:
        return self.value

    @property
    def mark(self) -> str:
        return {"passed": "✓", "failed": "✗", "missing": "–", "error": "!"}[self.value]


@dataclass
class StepGrade:
    id: str
    title: str
    exercise: int
    status: Outcome
    rule: Rule | None
    score: float
    max_score: float
    message: str  # one line: the verdict, or the diagnosis's first line
    feedback: str = ""  # the tutor's feedback in full, without the answer

    def to_dict(self) -> dict:
        return {"id": self.id, "status": self.status.value,
                "rule": self.rule.value if self.rule else None, "score": self.score,
                "max_score": self.max_score, "message": self.message}


@dataclass
class Grade:
    pack: str
    name: str
    steps: list[StepGrade] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unreadable: str | None = None  # why the submission could not be graded at all
    execution_time: float = 0.0

    @property
    def score(self) -> float:
        return _round(sum(s.score for s in self.steps))

    @property
    def max_score(self) -> float:
        return _round(sum(s.max_score for s in self.steps))

    def to_dict(self) -> dict:
        d = {"pack": self.pack, "score": self.score, "max_score": self.max_score,
             "steps": [s.to_dict() for s in self.steps]}
        if self.unreadable:
            d["error"] = self.unreadable
        return d


def _round(x: float) -> float:
    # Points add up in binary floating point: 0.1 + 0.2 should still read 0.3.
    return round(x, 6)


def max_points(pack: Pack) -> float:
    return _round(sum(s.points for s in pack.steps))


def unreadable(pack: Pack, name: str, why: str) -> Grade:
    """The grade of a submission that could not be read: every step missing, and why."""
    why = clean(why, MAX_MESSAGE)
    grade = Grade(pack.id, clean(name, MAX_MESSAGE), unreadable=why)
    grade.steps = [_missing(s, why) for s in pack.steps]
    return grade


def _missing(step: Step, why: str = "no code for this step") -> StepGrade:
    return StepGrade(step.id, step.title, step.exercise, Outcome.MISSING, None, 0,
                     step.points, why)


@dataclass(frozen=True)
class GradingRules:
    """What a submission must do to earn its points, as an instructor sets it for a class (and
    `grading.json` keeps it for an autograder: tutor/course/rules.py)."""

    train_steps: int = TRAIN_STEPS
    train_loss: float | None = None  # None: the reference's loss after as many steps, plus 5%
    strict_rule: bool = False  # no points for a step right for this network, not by its rule
    time_budget: float | None = None  # seconds for one submission; None: no limit
    refuse_numeric: bool = False  # no points for a derivative estimated from values


DEFAULT_RULES = GradingRules()


def grade(lesson: Lesson, sub: Submission, rules: GradingRules = DEFAULT_RULES,
          progress: Callable[[str], None] | None = None, started: float | None = None
          ) -> Grade:
    """Grade every step of the lesson's pack for `sub` (see the module's docstring) by
    `rules`; the time budget counts from `started` (`time.monotonic()`: when reading began),
    else from now."""
    started = time.monotonic() if started is None else started
    budget = rules.time_budget
    deadline = None if budget is None else started + budget
    pack = lesson.pack
    out = Grade(pack.id, clean(sub.name, MAX_MESSAGE),
                notes=[clean(n, MAX_MESSAGE) for n in (*sub.notes, *sub.unknown)])
    prior: dict[str, str] = {}
    results: dict[str, CheckResult] = {}
    codes: dict[str, str] = {}
    settled: set[str] = set()  # steps whose verdict is on their own statements
    tensors = lesson_names(pack)
    traces: dict[tuple[int, bool], Traced] = {}
    for step in pack.steps:
        if progress:
            progress(step.id)
        if deadline is not None and time.monotonic() >= deadline:
            out.steps.append(_out_of_time(step, budget or 0.0))
            continue
        if step.kind.trained:
            wrong = [g.id for g in out.steps if g.id in sub.training_needs
                     and g.status is Outcome.FAILED]
            if sub.training is not None and wrong:
                out.steps.append(_trained_on_wrong(step, wrong))
                continue
            training = sub.training
            own = {k: v for key, t in traces.items() if key[1] for k, v in t.names.items()}
            if training is None and own and sub.cells:
                # Its loop reads the parameters by its own names: read again with the names
                # its own frame found for them.
                training = own_training(pack, sub.cells, own)
            out.steps.append(_training(lesson, step, training, rules.train_steps,
                                       deadline, rules.train_loss))
            continue
        code, mark, result = _graded(lesson, sub, step, prior, rules, tensors, settled)
        earned = mark.status is Outcome.PASSED and mark.rule is not Rule.SKIPPED
        if not earned and step.id in settled and not _right_as_run(lesson, sub, step, mark):
            traced = _by_trace(lesson, sub, step, rules, traces, own_only=True)
            if isinstance(traced, tuple):
                code, mark, result = traced
        elif not earned and (step.id not in settled
                             or _right_as_run(lesson, sub, step, mark)):
            traced = _by_trace(lesson, sub, step, rules, traces)
            if isinstance(traced, str):
                if mark.status is Outcome.MISSING:
                    mark.message += (" (what your submission computes for it, traced as it "
                                     f"ran, is not right: {traced})")
            elif traced is not None:
                code, mark, result = traced
                settled.add(step.id)
        if result is not None:
            results[step.id] = result
            if result.passed:
                prior[step.id] = code or ""
        if code is not None:
            codes[step.id] = code
        out.steps.append(mark)
    _as_computed(lesson, sub, out, rules, deadline, settled)
    _unwritten_branches(pack, codes, results, out)
    out.execution_time = time.monotonic() - started
    return out


def _graded(lesson: Lesson, sub: Submission, step: Step, prior: dict[str, str],
            rules: GradingRules, tensors: set[str], settled: set[str]
            ) -> tuple[str | None, StepGrade, CheckResult | None]:
    """A step graded on its own statements in the program the submission is (tutor/course/
    program.py: followed back from where the learner last compared its gradients to the
    gradients it is given), else on the code the cut into steps found for it; the code, the
    mark and the check's result. A verdict on the step's own statements is `settled`: no
    other reading of the submission overrides it."""
    program = sub.programs.get(step.exercise)
    # The tutor's data and sizes stand in for the notebook's own (`vocab_size = len(itos)` is
    # never a step's statement).
    answer = program.answer(lesson.pack, step, tensors, setup_names(lesson.pack)) \
        if program else None
    cut = sub.code.get(step.id)
    # What the step's code must write: its gradients, or the function it defines.
    grads = {step.function.name} if step.function is not None else gradients(step.checks)
    if sub.form == "lecture" and program is not None and not grads <= program.written and (
            cut is None or not grads <= code_facts.of(cut).bound):
        return None, _missing(step), None  # the notebook never writes this step's gradients
    # The tutor's own forms name each cell's step: the learner said what answers it, and only
    # where that fails is the program asked. A notebook is read as its program first.
    tried: dict[str, tuple[StepGrade, CheckResult | None]] = {}
    for code in ((cut, answer) if sub.form != "lecture" else (answer, cut)):
        if not code or code.strip() in tried:
            continue
        mark, result = tried[code.strip()] = _check(lesson, step, code, prior, rules)
        if code is answer:
            if result is not None and (result.passed or result.error is None):
                settled.add(step.id)
                if cut is None or answer.strip() != cut.strip():
                    mark.feedback = (f"graded on the statements of your submission that "
                                     f"compute {', '.join(step.graded_names)}, as it runs:\n"
                                     + textwrap.indent(clean(answer, MAX_FEEDBACK // 2), "    ")
                                     + "\n\n" + mark.feedback)
                return answer, mark, result
        elif mark.status not in (Outcome.MISSING, Outcome.FAILED) or not answer \
                or answer.strip() == code.strip():
            if answer and result is not None and result.error is None:
                settled.add(step.id)
            return code, mark, result
    if cut is not None and cut.strip() in tried:
        return (cut, *tried[cut.strip()])
    return None, _missing(step), None


def _right_as_run(lesson: Lesson, sub: Submission, step: Step, mark: StepGrade) -> bool:
    """Whether a step its own statements failed is right as the whole program runs (the value
    the learner last compared): then those statements were not the whole story (a running
    variable reused, say), and the trace may say what computed it."""
    program = sub.programs.get(step.exercise)
    if mark.status is not Outcome.FAILED or program is None or not (
            gradients(step.checks) <= program.written_here):
        return False
    result = _whole_program(lesson, step, program.text())
    return result is not None and result.passed


def _whole_program(lesson: Lesson, step: Step, program: str) -> CheckResult | None:
    """The whole program's values for the step held to autograd; None where it cannot run."""
    try:
        return lesson.evaluate(step.id, program, {})
    except EvaluatorError:
        raise
    except Exception:  # noqa: BLE001 - a program that cannot run changes nothing
        return None


def _by_trace(lesson: Lesson, sub: Submission, step: Step, rules: GradingRules,
              traces: dict[tuple[int, bool], Traced], own_only: bool = False
              ) -> tuple[str, StepGrade, CheckResult] | str | None:
    """A step that its names could not grade by its rule (no code found, or found only by
    values), graded on what the exercise's own code computes for it wherever it keeps it: the
    program run traced (tutor/core/trace.py, once per exercise), the computation of each value
    equal to the step's gradients written out from the step's inputs and checked as any answer
    is, rule probe and fresh batch included. Only a pass by the rule is taken; where what it
    found fails, what the check said of it (for the learner's message), else None."""
    program = sub.programs.get(step.exercise)
    if program is None or step.kind.trained:
        return None
    steps = [s.id for s in lesson.pack.steps if s.exercise == step.exercise]

    def trace(own: bool) -> dict[str, list[str]]:
        key = (step.exercise, own)
        if key not in traces:
            cells = program.whole if own else program.traced_cells()
            try:
                traces[key] = lesson.traced(cells, steps, own) if cells else Traced()
            except EvaluatorError:
                raise
            except Exception:  # noqa: BLE001 - a trace that cannot be made grades nothing
                traces[key] = Traced()
        return traces[key].found

    # In the tutor's frame first (the notebook's forward pass read by its names); where that
    # finds nothing for the step, in the notebook's own (tutor/core/frame.py).
    if own_only:
        # Its own statements failed by their names: taken otherwise only where its own frame
        # reads more of the exercise than the names' frame does (its forward pass is its own,
        # time first or in rows: its `x` is not the lesson's), and finds the step right there.
        if len(trace(True)) <= len(trace(False)):
            return None
        codes = trace(True).get(step.id, [])
    else:
        # The names' frame first; where what it finds does not pass (a statement of the
        # notebook's setup cut into the step, say), its own frame's.
        codes = list(dict.fromkeys([*trace(False).get(step.id, []),
                                    *trace(True).get(step.id, [])]))
    said = None
    for code in codes:
        # From autograd's gradients for the steps before: the written-out code reads only what
        # the step is given, and the learner's earlier code, replayed, may have left other
        # values under those names.
        mark, result = _check(lesson, step, code, {}, rules)
        if said is None and result is not None and result.error is None and not result.passed:
            said = mark.message
        mark.feedback = (f"graded on what your submission computes for "
                         f"{', '.join(step.graded_names)}, traced as it ran and written "
                         "out from this step's inputs:\n"
                         + textwrap.indent(clean(code, MAX_FEEDBACK // 2), "    ")
                         + "\n\n" + mark.feedback)
        if result is not None and result.passed and result.rule is not Rule.SKIPPED:
            return code, mark, result
    # A failure is not taken: code found by a name alone may be another step's (the first
    # branch an earlier step starts), and a step never written is missing, not failed. What
    # the check said is still worth the learner's reading: it is about what their code computes.
    return said


def _check(lesson: Lesson, step: Step, code: str, prior: dict[str, str], rules: GradingRules
           ) -> tuple[StepGrade, CheckResult | None]:
    """One step's code checked after the earlier steps' code that passed."""
    too_big = size_problem(code, f"the code for {step.id}")
    if too_big:
        return StepGrade(step.id, step.title, step.exercise, Outcome.FAILED, None, 0,
                         step.points, too_big), None
    try:
        result = lesson.evaluate(step.id, code, dict(prior))
    except EvaluatorError:
        raise  # the grader's own failure: the caller says so for the whole submission
    except Exception as exc:  # noqa: BLE001 - one step's trouble is that step's result
        return StepGrade(step.id, step.title, step.exercise, Outcome.ERROR, None, 0,
                         step.points, f"the grader failed on this step ({type(exc).__name__}), "
                         "not your code"), None
    return _checked(step, result, rules), result


def _as_computed(lesson: Lesson, sub: Submission, out: Grade, rules: GradingRules,
                 deadline: float | None, settled: set[str]) -> None:
    """A step that neither the cut into steps nor its own statements in the program
    (tutor/course/program.py: followed back from where the learner last compared the gradient
    to the gradients the step is given) could grade, because those statements cannot run alone
    (they lean on something the program did around them), is held to autograd by what the whole
    program computes: the submission's code up to the step's exercise, as the kernel ran it, on
    the tutor's forward pass, on this batch and a fresh one. Right, it passes by values only (↷,
    a point unless the course asks for the rule); wrong, the step keeps what the cut said, with
    no diagnosis of code that may not be this step's."""
    for mark in out.steps:
        if mark.status not in (Outcome.MISSING, Outcome.FAILED) or mark.id in settled \
                or mark.message.startswith("not graded:"):
            continue
        step = lesson.pack.step(mark.id)
        program = sub.programs.get(step.exercise)
        if step.kind.trained or program is None:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            return
        if gradients(step.checks) <= program.written_here:
            _by_values(lesson, step, program.text(), mark, rules)


def _by_values(lesson: Lesson, step: Step, program: str, mark: StepGrade,
               rules: GradingRules) -> None:
    """The whole program held to autograd (see `_as_computed`)."""
    if not gradients(step.checks) <= code_facts.of(program).bound:
        # The program must write the step's gradients itself: what the check stands in
        # for earlier steps (their references, autograd's first branches) answers nothing.
        return
    result = _whole_program(lesson, step, program)
    if result is None:
        return
    if not result.passed:
        if mark.status is Outcome.MISSING:
            mark.message += " (and what your submission computes for it is not right)"
        return
    mark.status, mark.rule = Outcome.PASSED, Rule.SKIPPED
    mark.score = 0 if rules.strict_rule else step.points
    mark.message = ("right, as your submission computes it: which of its code answers this "
                    "step could not be told apart, so the line's rule could not be probed"
                    + (" (no points: the rule is required)" if rules.strict_rule else ""))
    mark.feedback = mark.message + "\n\n" + feedback(result)


def _unwritten_branches(pack: Pack, codes: dict[str, str], results: dict[str, CheckResult],
                        out: Grade) -> None:
    """A first branch is graded where the learner was asked to write it. A step that passed
    without starting it (the check lets autograd's branch stand in, so the closing step's `+=`
    still works, and says so) earns its point only when the closing step writes the whole
    gradient itself; where the closing step adds to the stood-in branch, nobody wrote it."""
    graded = {s.id: s for s in out.steps}
    for step in pack.steps:
        result = results.get(step.id)
        mark = graded.get(step.id)
        if result is None or mark is None or mark.status is not Outcome.PASSED:
            continue
        started = {c.tensor for c in result.checks}
        for tensor in step.partials:
            if tensor in started:
                continue
            closing = next((s for s in pack.gradient_steps[pack.index(step.id) + 1:]
                            if tensor in s.checks), None)
            code = codes.get(closing.id) if closing else None
            done = results.get(closing.id) if closing else None
            if closing is not None and code is None:
                continue  # nothing completes it, so nothing leans on the branch that stood in
            share = gradients(step.lines) & code_facts.of(code or "").read
            if code and not _adds_to(code, gradient(tensor)) and (
                    share or (done is not None and done.passed)):
                # The whole gradient written at the closing step: both branches are the
                # learner's (built from what this step's share is built from), and whether the
                # line is right is the closing step's point.
                continue
            where = (f"your code at {closing.id} adds to it" if code and _adds_to(
                code, gradient(tensor)) else f"your code at {closing.id} writes it without this "
                "line's share" if code else "no later step completes it")
            mark.status, mark.score, mark.rule = Outcome.FAILED, 0, None
            mark.message = (f"the first branch of {gradient(tensor)} (this line's share) is not "
                            f"written "
                            f"here, and {where}: autograd's branch stood in for yours")
            mark.feedback = mark.message + "\n\n" + mark.feedback


def _adds_to(code: str, grad: str) -> bool:
    """Whether `code` reads `grad` before it assigns it (`dcounts += ...`, `dcounts = dcounts +
    ...`): it completes a branch someone else started rather than writing the whole gradient."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    for stmt in body:
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name) \
                and stmt.target.id == grad:
            return True
        if any(isinstance(n, ast.Name) and n.id == grad and isinstance(n.ctx, ast.Load)
               for n in ast.walk(stmt)):
            return True
        if any(isinstance(n, ast.Name) and n.id == grad and isinstance(n.ctx, ast.Store)
               for n in ast.walk(stmt)):
            return False
    return True


def _out_of_time(step: Step, budget: float) -> StepGrade:
    return StepGrade(step.id, step.title, step.exercise, Outcome.FAILED, None, 0, step.points,
                     f"not graded: the {budget:g} s set for grading this submission ran out "
                     "before this step (the steps before it stand)")


def _checked(step: Step, result: CheckResult, rules: GradingRules) -> StepGrade:
    strict_rule = rules.strict_rule
    rule = result.rule
    error = result.error
    if error is not None and error.kind in (ErrorKind.INTERNAL, ErrorKind.USAGE):
        status = Outcome.ERROR
    else:
        status = Outcome.PASSED if result.passed else Outcome.FAILED
    numeric = rules.refuse_numeric and result.numeric
    earns = result.passed and not (strict_rule and rule is Rule.SKIPPED) and not numeric
    message = (_one("right, but estimated from the function's values (a difference quotient), "
                    "not worked out: this course asks for the derivative itself")
               if result.passed and numeric else first_line(result, strict_rule))
    return StepGrade(step.id, step.title, step.exercise, status, rule,
                     step.points if earns else 0, step.points, message, feedback(result))


def first_line(result: CheckResult, strict_rule: bool = False) -> str:
    """The check in one line: what passed, or the first thing that is wrong and why."""
    if result.error:
        return _one(f"{result.error.kind} error: {result.error.message}")
    if result.passed:
        if result.rule is Rule.SKIPPED:
            note = next((c.note for c in result.checks if c.skipped_rule and c.note), None)
            lead = ("right for this network, not by the line's rule"
                    + (" (no points: the rule is required)" if strict_rule else ""))
            return _one(f"{lead}: {note}" if note else lead)
        return result.summary()
    for row in result.failed():
        text = (row.diagnosis.message if row.diagnosis else row.message) or \
            f"{row.grad} {row.verdict.value}"
        return _one(f"{row.grad}: {text}")
    if result.heldout and not result.heldout.passed:
        return _one(f"wrong on a fresh batch: {result.heldout.message or ''}".rstrip(": "))
    return result.summary()


def _one(text: str, limit: int = 1000) -> str:
    # Room for the longest diagnosis whole; past it, cut where a sentence or a clause ends.
    # On one line, every line of it kept: a runtime error's cause follows the line it names.
    return shortened(" ".join(part.strip() for part in text.strip().splitlines()
                              if part.strip()), limit)


def feedback(result: CheckResult) -> str:
    """The tutor's feedback for one check, as `check` prints it (never the solution), with the
    learner's print output cut short."""
    if len(result.stdout) > MAX_STDOUT:
        result.stdout = result.stdout[:MAX_STDOUT] + "\n… (the rest of your print output is cut)"
    return _capped(format_result(result, width=FEEDBACK_WIDTH))


def _capped(text: str, limit: int = MAX_FEEDBACK) -> str:
    return shortened(text, limit)


def _trained_on_wrong(step: Step, wrong: list[str]) -> StepGrade:
    """A notebook whose own loop computes gradients its answers to other steps got wrong: its
    loop trained on them (Submission.training_needs)."""
    message = (f"your training loop computes what {', '.join(wrong)} computes, in your own "
               "code as the lesson's training does, and your answer there is not right: the "
               "loop trained on that gradient")
    return StepGrade(step.id, step.title, step.exercise, Outcome.FAILED, None, 0, step.points,
                     _one(message), message)


def _training(lesson: Lesson, step: Step, code: str | None, steps: int,
              deadline: float | None = None, target: float | None = None) -> StepGrade:
    if code is None:
        return _missing(step, "no training loop with your backward pass")
    gradcheck = min(lesson_gradcheck(lesson.pack), max(1, steps // 2))
    # A run still going at the deadline is stopped, as F8 stops one: what it did stands.
    timer = None if deadline is None else threading.Timer(
        max(0.0, deadline - time.monotonic()), lesson.evaluator.cancel)
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        run = lesson.train(code, steps, gradcheck_steps=gradcheck)
    finally:
        if timer is not None:
            timer.cancel()
    stopped = deadline is not None and run.steps_done < steps and (
        run.status is RunStatus.CANCELLED or time.monotonic() >= deadline - 1.0)
    verdict = against_target(run, target)
    if run.status is RunStatus.ERROR and run.error and run.error.kind is ErrorKind.INTERNAL:
        status = Outcome.ERROR
    else:
        status = Outcome.PASSED if verdict.passed else Outcome.FAILED
    if stopped and not verdict.passed:
        message = (f"stopped after {run.steps_done} of {steps} steps: the time set for grading "
                   "this submission ran out")
    elif verdict.passed:
        message = (f"trained {run.steps_done} steps on your gradients: train loss "
                   f"{run.train_loss:.4f} (the reference reaches {run.reference_train_loss:.4f})")
    elif run.error is not None:
        where = f" at step {run.step}" if run.step is not None else ""
        message = _one(f"{run.error.kind} error{where}: {run.error.message}")
    else:
        message = _one(verdict.reason or "the run did not pass")
    return StepGrade(step.id, step.title, step.exercise, status, None,
                     step.points if verdict.passed else 0, step.points, message,
                     _capped(run_feedback(run, message)))


def against_target(run: TrainingRun, target: float | None) -> ExerciseVerdict:
    """The run's verdict for exercise 4, with the instructor's loss target (when one is set)
    as one more bar: a run that passes but ends above it fails, saying both numbers."""
    verdict = run.exercise
    if not verdict.passed or target is None or run.train_loss is None:
        return verdict
    if run.train_loss <= target:
        return verdict
    return ExerciseVerdict(False, f"train loss {run.train_loss:.4f} after {run.steps_done} "
                           f"steps: this assignment asks for {target:g} or lower")


def lesson_gradcheck(pack: Pack) -> int:
    from tutor.training.plan import TrainingSettings

    return TrainingSettings.from_pack(pack).gradcheck_steps


def run_feedback(run: TrainingRun, message: str) -> str:
    """A training run in a few lines: how it ended, its gradient check, its losses."""
    lines = [message]
    check = run.gradcheck
    if check is not None:
        checked = f"the first {check.steps} steps"
        if check.random_steps:
            checked += f" and {len(check.random_steps)} more drawn at random"
        lines.append(f"gradient check ({checked}): "
                     + ("every gradient matched autograd's" if check.passed else
                        (check.failure.message if check.failure else "did not pass")))
    if run.train_loss is not None:
        val = f", validation loss {run.val_loss:.4f}" if run.val_loss is not None else ""
        lines.append(f"after {run.steps_done} steps: train loss {run.train_loss:.4f}{val}")
    lines += [f"note: {n}" for n in run.notes]
    if run.stdout:
        out = run.stdout[:MAX_STDOUT]
        lines += ["your print output:", *(f"  {line}" for line in out.splitlines())]
    return "\n".join(lines)
