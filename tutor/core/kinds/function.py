"""Checking a function step: the kind `Function` (docs/architecture.md, a function step).

The learner's whole function is called in the child on the lesson's own tensors and then on
inputs of freshly drawn sizes (tutor/core/functions.py builds the cases); the lesson's case
makes the
rows and their diagnoses, and the fresh cases must agree. A rewrite of the reference that
explains a row must give the learner's output on the first fresh case too. A loop through time
is told where it first goes wrong, then why (tutor/core/timesteps.py, tutor/core/derived.py).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import torch

from tutor import code_facts
from tutor.core import diagnosis as dx
from tutor.core.candidate import Output
from tutor.core.execution import FunctionCheckSpec, call_function
from tutor.core.functions import (
    DEMO,
    SAME_SIZES,
    Case,
    carried_series,
    cases,
    demo_case,
    is_gradient,
    later_case,
    one_thread,
    output_label,
    same_sizes_case,
    time_steps,
)
from tutor.core.grading import grade, heatmap, rounding_note
from tutor.core.kinds.base import Graded, StepCheck, smallest_search
from tutor.core.kinds.records import (
    ChildAnswer,
    Foreign,
    OddTensor,
    Unreadable,
    clean_error,
    decode_namespace,
    refuse,
    unusable,
)
from tutor.core.timesteps import TimeSteps, by_time
from tutor.pack.model import PackError, Step
from tutor.sandbox.clean import clean
from tutor.values.results import CheckResult, Diagnosis, Heldout, TensorCheck, Verdict

Tensor = torch.Tensor


def _calls(code: str) -> list[str]:
    """The names the code reads that it does not define itself (a function it calls)."""
    facts = code_facts.of(code)
    if facts.tree is None:
        return []
    defined = facts.bound | {n.name for n in ast.walk(facts.tree)
                             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return sorted(facts.read - defined)


class FunctionCheck(StepCheck):
    """A function step: its outputs (or the arguments it updates in place) graded on the
    lesson's case, then held to the cases at fresh sizes."""

    plan_types = (FunctionCheckSpec,)

    def __init__(self, network, settings):
        super().__init__(network, settings)
        self._cases: dict[str, list[Case]] = {}  # function step -> its cases, lesson's first
        # function step -> its picture's base cases (the lesson's, then the demos), each with
        # its calls on the steps after every t but the last
        self._pictures: dict[str, list[tuple[Case, list[Case]]]] = {}
        self.picture_problems: dict[str, str] = {}  # step -> why its picture cannot be drawn
        self._mistake_values: dict[tuple, Tensor | None] = {}
        # (step, case, a rewrite of the reference's source) -> its outputs on that case
        self._rewritten: dict[tuple, dict | None] = {}
        # The learner's changed functions' outputs, and the changes that explained an output:
        # another output of the same code tries those first (tutor/core/smallest.py).
        self._theirs: dict[tuple, list[dict | None]] = {}
        self._edits: dict[tuple, list] = {}
        # The learner's outputs on the first fresh case of the check being graded: a rewrite
        # of the reference that fits the lesson's case must fit there too (tutor/core/derived.py).
        self._fresh: tuple[Case, dict] | None = None

    # -- the cases and the plan ----------------------------------------------------------------
    def cases(self, step: Step) -> list[Case]:
        """A function step's cases with their expected outputs, built once."""
        if step.id not in self._cases:
            self._cases[step.id] = cases(step, self.network.main, self.settings.seed,
                                         self.network.device)
        return self._cases[step.id]

    def _same_sizes(self, step: Step) -> Case | None:
        """Fresh values at the lesson's sizes, run with the cases: whether a fresh case failed
        because of its sizes (functions.same_sizes_case)."""
        key = f"{step.id} {SAME_SIZES}"
        if key not in self._cases:
            same = same_sizes_case(step, self.cases(step)[0], self.settings.seed,
                                   self.network.device)
            self._cases[key] = [same] if same else []
        return next(iter(self._cases[key]), None)

    def built(self, step: Step) -> bool:
        return step.id in self._cases

    def build_ahead(self, step: Step) -> bool:
        # Built in the worker, where the pack's expect code may still do what a confined child
        # cannot (torch.optim looks for a cache folder the first time it runs); a child forked
        # before knows nothing of them.
        if step.id in self._cases:
            return False
        self.cases(step)
        self.pictures(step)
        return True

    def pictures(self, step: Step) -> list[tuple[Case, list[Case]]]:
        """The step's picture ([steps.picture]): the lesson's case and each demo, with the calls
        on the steps after each t, built once (one thread: hundreds of tiny autograd passes,
        which threads only slow down)."""
        picture = step.function.picture if step.function else None
        if picture is None:
            return []
        if step.id not in self._pictures:
            device = self.network.device
            try:
                with one_thread():
                    bases = [self.cases(step)[0], *(demo_case(step, d, device)
                                                    for d in picture.demos)]
                    self._pictures[step.id] = [
                        (base, [later_case(step, base, t, device)
                                for t in range(time_steps(step, base) - 1)]) for base in bases]
            except PackError as exc:
                # The pack's picture code is wrong: the check goes on without the picture,
                # and says why (pack check reports it too).
                self._pictures[step.id] = []
                self.picture_problems[step.id] = str(exc)
        return self._pictures[step.id]

    def plan(self, step: Step, code: str, prior: dict[str, str],
             compiled: bytes | None = None) -> FunctionCheckSpec:
        fn = step.function
        assert fn is not None
        return FunctionCheckSpec(
            step.id, code, fn.name, fn.call, fn.arguments, fn.outputs, step.checks,
            [(c.name, c.inputs) for c in [*self.cases(step),
                                          *filter(None, [self._same_sizes(step)])]],
            dict(self.network.sizes), self.settings.timeout, compiled,
            pictures=[(c.name, c.inputs) for _, laters in self.pictures(step) for c in laters],
            picture_output=fn.picture.carry if fn.picture else "",
            tutor_seconds=self.settings.tutor_seconds,
            **self._helpers(step, code, prior))

    def _helpers(self, step: Step, code: str, prior: dict[str, str]) -> dict:
        """The other function steps whose functions the code calls, and what those call in
        turn: the accepted ones' code (`helpers`), defined before the learner's function as a
        training run defines them all, and the functions whose step has not passed (`waiting`).
        Earlier or later in the lesson alike: exercise 2's loop may call exercise 3's step."""
        steps = {s.function.name: s for s in self.pack.steps
                 if s.function is not None and s.id != step.id}
        helpers: list[tuple[str, str]] = []
        waiting: list[tuple[str, str]] = []
        wanted, seen = list(_calls(code)), set()
        while wanted:
            name = wanted.pop(0)
            if name in seen or name not in steps:
                continue
            seen.add(name)
            other = steps[name]
            text = prior.get(other.id)
            if text is None:
                waiting.append((name, other.id))
                continue
            helpers.append((other.id, text))
            wanted += _calls(text)
        return {"helpers": tuple(helpers), "waiting": tuple(waiting)}

    def first(self, step: Step) -> str:
        return self.cases(step)[0].name

    def figure(self, step: Step, graded: Graded, passed: bool) -> dict | None:
        # Right or wrong: the learner's output beside autograd's, step by step, is the picture
        # of a loop through time either way.
        return graded.state.figure() if isinstance(graded.state, TimeSteps) else None

    def forget(self) -> None:
        self._cases.clear()
        self._pictures.clear()
        self._rewritten.clear()
        self._mistake_values.clear()
        self._theirs.clear()
        self._edits.clear()

    # -- the rows ------------------------------------------------------------------------------
    def grade(self, step: Step, code: str, prior: dict[str, str], outcome: ChildAnswer,
              result: CheckResult) -> Graded:
        """The lesson's case decides the rows and their diagnoses."""
        own = self.cases(step)[0]
        record = outcome.records[own.name]
        try:
            values = decode_namespace(record.get("after"))
        except Exception as exc:  # noqa: BLE001 - the child's data did not decode: never trust it
            raise Unreadable() from exc
        self._fresh = self._fresh_outputs(step, outcome.records)
        grades = [self._grade_output(step, name, values.get(name), own, code)
                  for name in step.checks]
        self._explain_by_change(step, grades, values, own, code)
        self._same_slip(step, grades, values, own)
        steps = self._by_time(step, grades, values, own, result, outcome.records)
        for name in record.get("changed") or []:
            if isinstance(name, str):
                result.notes.append(
                    f"your function changed its argument {clean(name, 40)} in place, but the "
                    "caller may still need it (a backward pass reads its inputs again): compute "
                    "into new tensors instead.")
        return Graded(grades, state=steps)

    def _same_slip(self, step: Step, grades: list[TensorCheck], values: dict, case: Case
                   ) -> None:
        """A catalogued mistake is a whole wrong function. When it explains the output it was
        written for, the other outputs it moves too point to that row instead of staying
        unexplained: only where the mistake's own value of that output is the learner's."""
        told = {g.tensor: g.diagnosis.message for g in grades if g.diagnosis is not None}
        catalogued = {m.message for m in step.mistakes}
        for m in step.mistakes:
            owner = m.tensor or step.checks[0]
            if told.get(owner) != m.message:
                continue
            for g in grades:
                value = values.get(g.tensor)
                # The mistake the catalogue names comes before any derived explanation of
                # the same numbers.
                if (g.accepted or (g.diagnosis is not None
                                   and g.diagnosis.message in catalogued) or g.tensor == owner
                        or not isinstance(value, Tensor) or g.verdict is Verdict.SHAPE):
                    continue
                start = case.inputs.get(g.tensor)
                start = start if isinstance(start, Tensor) and not is_gradient(g.tensor) \
                    else None
                if dx.matching_mistake(value, [(m, self._function_mistake(step, m, g.tensor,
                                                                          case))], start):
                    short = f"wrong for the same reason as {owner} (above)"
                    g.diagnosis = dx.diagnosis(m.kind, short)
                    g.message = short + g.message[len(f"{g.tensor} is wrong"):] \
                        if g.message.startswith(f"{g.tensor} is wrong") else short

    def _by_time(self, step: Step, grades: list[TensorCheck], values: dict, case: Case,
                 result: CheckResult, outcome_records: dict[str, dict]) -> TimeSteps | None:
        """The output with a time axis (the step's `time`), compared one step at a time: a
        wrong one's row says at which step it first goes wrong, going back from the last; a
        right one, beside wrong outputs that add up over the steps, says so in a note."""
        if step.function is None or step.function.time is None:
            return None
        name, axis = step.function.time
        if name not in case.reference:
            return None
        steps = by_time(name, axis, values.get(name), case.reference[name],
                        case.reference64[name])
        if steps is None:
            return None
        steps.panels = self._panels(step, outcome_records)
        if step.id in self.picture_problems:
            result.notes.append(f"the picture through time could not be drawn: "
                                f"{self.picture_problems[step.id]}")
        steps.about = step.function.picture.about if step.function.picture else ""
        row = next((g for g in grades if g.tensor == name), None)
        if row is not None and not row.accepted and steps.first_wrong is not None:
            if row.diagnosis is not None and row.verdict is not Verdict.SHAPE:
                # Localise, then explain: where the loop first goes wrong, then what the
                # numbers match there, as a line step would say it. A catalogued mistake's
                # words stay the pack's own (they are how it is recognised).
                if all(m.message != row.diagnosis.message for m in step.mistakes):
                    row.diagnosis = dx.diagnosis(row.diagnosis.kind,
                                                 f"{steps.message()} {row.diagnosis.message}")
                row.message = f"{steps.message()} {row.message}"
            else:
                row.message = (f"{row.message}. {steps.message()}" if row.message
                               else steps.message())
        elif row is not None and row.accepted:
            others = [g.tensor for g in grades if g.tensor != name
                      and (not g.accepted or g.diagnosis is not None)]
            if others:
                result.notes.append(steps.right_everywhere(others))
        return steps

    def _panels(self, step: Step, records: dict[str, dict]) -> list[dict]:
        """The picture's panels: the learner's calls on the steps after each t (run in the
        child with the cases) beside autograd's, on the lesson's case and on each demo."""
        fn = step.function
        if fn is None or fn.picture is None:
            return []
        carry = fn.picture.carry
        return [carried_series(
            step, base.name.removeprefix(DEMO), base.inputs,
            [_carried(records.get(c.name), carry) for c in laters],
            [c.reference[carry] for c in laters], [c.reference64[carry] for c in laters],
        ).to_dict() for base, laters in self.pictures(step)]

    def _grade_output(self, step: Step, name: str, value: Any, case: Case, code: str = ""
                      ) -> TensorCheck:
        g = self._measure_output(step, name, value, case, code)
        g.tensor = name  # the row is the output, by the name the call gives it
        return g

    def _measure_output(self, step: Step, name: str, value: Any, case: Case, code: str = ""
                        ) -> TensorCheck:
        tensor = output_label(name)
        ref32, ref64 = case.reference[name], case.reference64[name]
        if isinstance(value, (OddTensor, Foreign)):
            return unusable(tensor, value, ref32, False, name)
        g = grade(tensor, value, ref32, ref64, label=name)
        if not isinstance(value, Tensor) or g.accepted:
            if g.accepted:
                g.message = rounding_note(g)
            return g
        mistakes = [(m, self._function_mistake(step, m, name, case)) for m in step.mistakes
                    if (m.tensor or step.checks[0]) == name]
        start = case.inputs.get(name)
        known = None
        if not is_gradient(name):
            # An update is recognised by how it moved the tensor, not by where it ended up
            # (a step a tenth too small is no update left out).
            known = dx.matching_mistake(value, mistakes, start)
        if known:
            g.diagnosis = known
        elif g.verdict is Verdict.SHAPE:
            g.diagnosis = dx.matching_mistake(value, mistakes) or (
                dx.shape_diagnosis(tensor, value, ref32) if is_gradient(name) else
                dx.diagnosis("shape", f"{name} has shape {g.shape}; it must keep its shape "
                                      f"{g.expected_shape}"))
            if is_gradient(name) and code and dx.guessed(g.diagnosis.message):
                # The shapes alone say nothing of how: an axis or a function of the learner's
                # own code may (tutor/core/smallest.py), as in a line step.
                g.diagnosis = self._shape_change(step, name, value, code) or g.diagnosis
        elif (isinstance(start, Tensor) and start.shape == value.shape
              and torch.equal(value.to(start.device, start.dtype), start)):
            g.diagnosis = dx.diagnosis(
                "unchanged", f"{name} came back unchanged. {step.function.name} returns nothing: "
                f"it must update {' and '.join(step.checks)} in place (`-=`, `+=`, `.mul_()`, "
                "`.copy_()`); a plain assignment inside the function only renames a local.")
        elif is_gradient(name):
            g.diagnosis = dx.value_diagnosis(tensor, value, ref32, _scale_size(case), None,
                                             mistakes)
        if g.verdict is not Verdict.SHAPE and (g.diagnosis is None or (
                g.diagnosis.kind == "scale" and "constant factors" in g.diagnosis.message)):
            # A factor no count explains may still be a rewrite (a size for another).
            g.diagnosis = (self._derived_output(step, name, value, ref32, case, code)
                           or g.diagnosis)
        pattern = dx.where_wrong(value, ref32) if (
            g.verdict is not Verdict.SHAPE and torch.isfinite(value).all()
            and (g.diagnosis is None or g.diagnosis.kind != "unchanged")) else ""
        g.message = (g.diagnosis.message if g.diagnosis else f"{name} is wrong") + (
            f" ({pattern})" if pattern else "")
        if pattern:
            g.heatmap = heatmap(value.to(ref32.dtype) - ref32)
        return g

    def _explain_by_change(self, step: Step, grades: list[TensorCheck], values: dict,
                           case: Case, code: str) -> None:
        """An output left unexplained that the change found for another output of the same
        code makes right too (a `v` updated from the wrong tensor also moves `param` wrong):
        it gets that change's message. Only the changed programs' values already sent back are
        compared: nothing runs again."""
        smallest = smallest_search()
        edits = self._edits.get((step.id, case.name, code))
        if not edits or step.function is None or smallest is None:
            return
        for g in grades:
            value = values.get(g.tensor)
            if g.accepted or g.diagnosis is not None or not isinstance(value, Tensor) \
                    or g.verdict is Verdict.SHAPE:
                continue
            refs, starts = self._targets(step, g.tensor)
            found = smallest.search_edit(
                code, self._runner(step, code, g.tensor, cached_only=True), value, refs,
                self._sizes(case), smallest.function_shapes(case.inputs),
                function=step.function.name, starts=starts, first=tuple(edits))
            if found is not None:
                g.diagnosis = dx.diagnosis("derived", found.message)
                g.message = found.message + g.message[len(f"{g.tensor} is wrong"):]

    def _shape_change(self, step: Step, name: str, value: Tensor, code: str
                      ) -> Diagnosis | None:
        """The change to the learner's function that gives an output of the wrong shape the
        right one, and the right values (an axis, a function): None where none does."""
        smallest = smallest_search()
        if step.function is None or smallest is None:
            return None
        case = self.cases(step)[0]
        refs, starts = self._targets(step, name)
        edit = smallest.search_edit(code, self._runner(step, code, name), value, refs,
                                    self._sizes(case), smallest.function_shapes(case.inputs),
                                    function=step.function.name, starts=starts)
        return dx.diagnosis("shape", edit.message) if edit is not None else None

    def _sizes(self, case: Case) -> dict[str, int]:
        return {**self.network.sizes, **{k: v for k, v in case.inputs.items() if type(v) is int}}

    def _targets(self, step: Step, name: str) -> tuple[list[Tensor], list[Tensor | None]]:
        """Autograd's value of an output on the lesson's case and the first fresh one (which
        confirms a change found on the first), and where an updated argument started."""
        refs, starts = [], []
        for case in self.cases(step)[:2]:
            if name not in case.reference:
                break
            refs.append(case.reference[name])
            start = case.inputs.get(name)
            starts.append(start if isinstance(start, Tensor) and not is_gradient(name)
                          else None)
        return refs, starts

    def _runner(self, step: Step, code: str, name: str, cached_only: bool = False
                ) -> Callable[[list[str]], list[list[Tensor | None]]]:
        """Changed functions run in a confined child (`StepCheck.changed_values`), their
        outputs kept for the other outputs of the same check."""

        def run(sources: list[str]) -> list[list[Tensor | None]]:
            new = [x for x in sources if (step.id, code, x) not in self._theirs]
            if new and not cached_only:
                if len(self._theirs) > 512:
                    self._theirs.clear()
                for source, got in zip(new, self.changed_values(step, code, {}, new),
                                       strict=True):
                    self._theirs[(step.id, code, source)] = got
            out = []
            for source in sources:
                per = self._theirs.get((step.id, code, source)) or []
                out.append([v.get(name) if isinstance(v, dict)
                            and isinstance(v.get(name), Tensor) else None for v in per])
            return out

        return run

    def _fresh_outputs(self, step: Step, records: dict[str, dict]) -> tuple[Case, dict] | None:
        """The first fresh case and the learner's outputs on it, where it ran to the end."""
        fresh = self.cases(step)[1:2]
        record = records.get(fresh[0].name) if fresh else None
        if not record or record.get("error"):
            return None
        try:
            return fresh[0], decode_namespace(record.get("after"))
        except Exception:  # noqa: BLE001 - undecodable: nothing confirms, nothing is claimed
            return None

    def _confirm(self, step: Step, name: str) -> Callable[[str], bool] | None:
        """Whether a rewrite that fits the lesson's case also gives the learner's output on the
        first fresh case: a lesson's zeros (a start state) fit many rewrites by chance."""
        from tutor.core import derived

        if self._fresh is None or not is_gradient(name):
            return None
        case, values = self._fresh
        theirs = values.get(name)
        if not isinstance(theirs, Tensor) or theirs.shape != case.reference[name].shape:
            return None

        def confirm(source: str) -> bool:
            key = (step.id, case.name, source)
            if key not in self._rewritten:
                self._rewritten[key] = derived.call_function(step, source, case.inputs,
                                                             self.network.sizes)
            produced = (self._rewritten[key] or {}).get(name)
            return isinstance(produced, Tensor) and produced.shape == theirs.shape \
                and dx.close(theirs, produced)

        return confirm

    def _derived_output(self, step: Step, name: str, value: Tensor, ref: Tensor, case: Case,
                        code: str = "") -> Diagnosis | None:
        """Nobody catalogued this one: rewrites of the reference function, the smallest change
        to the learner's own function (run in a child, tutor/core/smallest.py), then the state's own
        patterns (tutor/core/derived.py, tutor/core/rewrites.py)."""
        from tutor.core import derived
        from tutor.core.rewrites import state_patterns

        smallest = smallest_search()

        def call(source: str) -> dict | None:
            # A rewrite of the reference gives the same outputs on a case whoever asks: every
            # output of this check, and every later check, reads them from here.
            key = (step.id, case.name, source)
            if key not in self._rewritten:
                if len(self._rewritten) > 2048:
                    self._rewritten.clear()
                self._rewritten[key] = derived.call_function(step, source, case.inputs,
                                                             self.network.sizes)
            return self._rewritten[key]

        start = case.inputs.get(name)
        start = start if isinstance(start, Tensor) and not is_gradient(name) else None
        found = derived.explain_function(step, name, value, ref, case.inputs, call, start,
                                         self.pack, code, confirm=self._confirm(step, name))
        if found is None and code and step.function is not None and smallest is not None:
            key = (step.id, case.name, code)
            refs, starts = self._targets(step, name)
            edit = smallest.search_edit(code, self._runner(step, code, name), value, refs,
                                        self._sizes(case), smallest.function_shapes(case.inputs),
                                        function=step.function.name, starts=starts,
                                        first=tuple(self._edits.get(key, ())))
            if edit is not None:
                self._edits.setdefault(key, []).append(edit)
                if len(self._edits) > 64:
                    self._edits.clear()
                found = dx.diagnosis("derived", edit.message)
        if found is None and not is_gradient(name):
            why = state_patterns(name, value, ref, start)
            found = dx.diagnosis("derived", why) if why else None
        return found

    def _function_mistake(self, step: Step, m, name: str, case: Case
                          ) -> Callable[[], Tensor | None]:
        """A catalogued wrong function, called on the same inputs (our code, run here)."""

        def evaluate() -> Tensor | None:
            key = (step.id, case.name, m.code, name)
            if key not in self._mistake_values:
                try:
                    values, _ = call_function(self.plan(step, m.code, {}), m.code,
                                              case.inputs, Output(), None)
                    value = values.get(name)
                except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
                    value = None
                self._mistake_values[key] = value if isinstance(value, Tensor) else None
            return self._mistake_values[key]

        return evaluate

    # -- the fresh sizes -----------------------------------------------------------------------
    def hold_out(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded
                 ) -> Heldout | None:
        """The fresh sizes must agree with the lesson's case. Where the tutor's own time ran
        out before some of them, those that finished decide, and None says none failed."""
        own, *fresh = self.cases(step)
        records = outcome.records
        timed_out = outcome.timeout
        where = "; ".join(c.describe() for c in fresh)
        out = Heldout(what=f"fresh sizes ({where})")
        for case in fresh:
            record = records.get(case.name)
            if record is None and outcome.short == "fresh":
                continue  # not run: the tutor's time, not the learner's code
            if record is None:
                reason = "it ran out of time" if timed_out else "it did not finish"
            elif record.get("error"):
                reason = f"it fails: {clean_error(record['error']).message.rstrip('. ')}"
            else:
                values = decode_namespace(record.get("after"))
                failures = []
                for name in step.checks:
                    value = values.get(name)
                    h = grade(output_label(name), value if isinstance(value, Tensor) else None,
                              case.reference[name], case.reference64[name], label=name)
                    if h.verdict is Verdict.SHAPE:
                        failures.append(f"{name} has shape {h.shape} where {h.expected_shape} "
                                        "is needed")
                    elif not h.accepted:
                        failures.append(f"{name} is {'missing' if value is None else 'wrong'}")
                if not failures:
                    continue
                reason = ", ".join(failures)
            same = self._same_sizes(step)
            zero = _zero_in_lesson(own, case)
            if same is not None and self._fails(step, same, records.get(same.name)) and zero:
                # Right where some inputs are all zeros, wrong where they are not: how the
                # function reads those is what the lesson's case could not show.
                found = self._explain_case(step, same, records[same.name])
                named = " and ".join(f"`{k}`" for k in zero)
                start = (", the state the loop starts from" if step.function
                         and step.function.time else "")
                out.message = (
                    f"right on the lesson's tensors ({own.describe()}), where {named} "
                    f"{'is' if len(zero) == 1 else 'are'} all zeros{start}, but at "
                    f"{case.describe()}, where {'it is' if len(zero) == 1 else 'they are'} not, "
                    f"{reason}, and also for fresh values at the lesson's own sizes: no size is "
                    f"to blame. Check how your function reads {named}: zeros there hide any use "
                    "of them, or any lack of one."
                    + (f" {found.message}" if found else ""))
            elif same is not None and self._fails(step, same, records.get(same.name)):
                # Wrong at the lesson's own sizes too: the values made the difference.
                found = self._explain_case(step, same, records[same.name])
                out.message = (
                    f"right on the lesson's tensors ({own.describe()}), but at "
                    f"{case.describe()} {reason}, and it is also wrong for fresh values at the "
                    f"lesson's own sizes: no size is to blame. It is right only for these "
                    f"particular values: check the parts whose effect is tiny here (a term "
                    f"scaled by a small constant, the order of two updates)."
                    + (f" {found.message}" if found else ""))
            else:
                out.message = (
                    f"right on the lesson's tensors ({own.describe()}), but at "
                    f"{case.describe()} {reason}. Does the function use a size of the lesson (a "
                    f"number such as {_lesson_numbers(own)}{self._size_names(own)}) "
                    "instead of reading every size off its arguments' shapes?")
            refuse(out, graded.rows)
            break
        return None if out.passed and outcome.short == "fresh" else out

    def _explain_case(self, step: Step, case: Case, record: dict) -> Diagnosis | None:
        """The derived diagnosis of the first wrong output of a case, if any."""
        if record.get("error"):
            return None
        values = decode_namespace(record.get("after"))
        for name in step.checks:
            value = values.get(name)
            if not isinstance(value, Tensor) or value.shape != case.reference[name].shape:
                continue
            if not grade(output_label(name), value, case.reference[name],
                         case.reference64[name], label=name).accepted:
                return self._derived_output(step, name, value, case.reference[name], case)
        return None

    def _fails(self, step: Step, case: Case, record: dict | None) -> bool:
        """Whether the learner's function got this case wrong (a failure to run counts)."""
        if record is None:
            return False
        if record.get("error"):
            return True
        values = decode_namespace(record.get("after"))
        for name in step.checks:
            value = values.get(name)
            h = grade(output_label(name), value if isinstance(value, Tensor) else None,
                      case.reference[name], case.reference64[name], label=name)
            if not h.accepted:
                return True
        return False

    def _size_names(self, own: Case) -> str:
        """The lesson's names for the sizes of its case (C=32 is n_embd), as a learner might
        have used them."""
        values = set(own.sizes.values())
        names = [k for k, v in self.network.sizes.items() if v in values][:2]
        return f", or a name such as {' or '.join(names)}" if names else ""


def _carried(record: dict | None, name: str) -> Tensor | None:
    """The picture's output from one of its calls, if the call finished and returned a tensor."""
    if record is None or record.get("error"):
        return None
    try:
        value = decode_namespace(record.get("after")).get(name)
    except Exception:  # noqa: BLE001 - the child's data did not decode: draw nothing
        return None
    return value if isinstance(value, Tensor) else None


def _zero_in_lesson(own: Case, other: Case) -> list[str]:
    """The inputs that are all zeros in the lesson's case and not in `other` (a start state of
    zeros): what the lesson's case cannot show about how a function reads them."""
    out = []
    for name, value in own.inputs.items():
        theirs = other.inputs.get(name)
        if (isinstance(value, Tensor) and value.is_floating_point() and value.numel()
                and not bool(value.any()) and isinstance(theirs, Tensor) and bool(theirs.any())):
            out.append(name)
    return out


def _scale_size(case: Case) -> int:
    """The count a mean divides by in this case, for the scale diagnosis ("a factor n")."""
    s = case.sizes
    if "N" in s:
        return s["N"]
    return s.get("B", 1) * s.get("T", 1) if ("B" in s or "T" in s) else 1


def _lesson_numbers(case: Case) -> str:
    numbers = sorted({v for v in case.sizes.values() if v > 1}, reverse=True)[:3]
    return " or ".join(str(n) for n in numbers) if numbers else "32"
