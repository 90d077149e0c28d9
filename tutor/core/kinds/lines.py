"""Checking a gradient step, line by line or fused: the kinds `LineGradient` and `Fused`.

The child replays the earlier steps of the exercise and runs the candidate on the main batch
and on a fresh one; here the gradients it sends back are graded against autograd's for the
step's lines, diagnosed, held to the rule (tutor/core/probe.py) and to the fresh batch
(docs/architecture.md, the path of one check). A fused step is checked as a line's: its lines'
arriving gradients are varied together by the probe.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tutor import code_facts
from tutor.core import diagnosis as dx
from tutor.core import probe, slips
from tutor.core.candidate import Output, compile_candidate, copy_namespace, execute
from tutor.core.execution import BatchPlan, CheckSpec, Replay
from tutor.core.grading import APPROXIMATE_WHY, grade, heatmap, rounding_note
from tutor.core.kinds.base import Graded, StepCheck, smallest_search
from tutor.core.kinds.records import (
    ChildAnswer,
    Foreign,
    OddTensor,
    Unreadable,
    clean_error,
    decode,
    decode_namespace,
    refuse,
    unusable,
)
from tutor.core.network import Batch
from tutor.pack.flow import gradient, tensor_of
from tutor.pack.model import Mistake, Pack, Step
from tutor.process import isolate
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.values.results import CheckResult, Heldout, TensorCheck, Verdict

Tensor = torch.Tensor


@dataclass
class Run:
    """What executing a candidate on one batch produced, as plain tensors."""

    namespace: dict
    before: dict
    code: str = ""  # the learner's code, for the search for its smallest wrong change


def _copy_of(expr: str) -> str:
    """`expr.clone()`, in parentheses where the expression needs them (`(a + b).clone()`)."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        node = None
    plain = isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
    return f"{expr}.clone()" if plain else f"({expr}).clone()"


class LineCheck(StepCheck):
    """A gradient step: its `checks` (and the first branches in `partials`) graded against
    autograd on the main batch, its rule probed, then the fresh batch."""

    plan_types = (CheckSpec, BatchPlan, Replay, probe.ProbeSpec, probe.Fork)

    def __init__(self, network, settings):
        super().__init__(network, settings)
        # (batch, step, earlier code) -> (namespace before the candidate, notes, reusable)
        self._befores: dict[tuple, tuple[dict, list[str], bool]] = {}
        self._mistake_values: dict[tuple, Tensor | None] = {}
        self._graph: probe.Graph | None = None  # the main batch under autograd, for the probe
        # The changed programs of the last code searched (tutor/core/smallest.py) and their values
        # per batch: each refused row of the same check reads them, run once.
        self._variants_key: tuple | None = None
        self._variants: dict[str, list[dict | None]] = {}

    # -- the plan ------------------------------------------------------------------------------
    def earlier(self, step: Step) -> list[Step]:
        """The earlier steps of the exercise, replayed before the candidate (the pack's
        `replay`)."""
        if not step.kind.replays_earlier(step):
            return []
        steps = [s for s in self.pack.gradient_steps if s.exercise == step.exercise]
        return steps[: steps.index(step)]

    def plan(self, step: Step, code: str, prior: dict[str, str],
             compiled: bytes | None = None) -> CheckSpec:
        main = self.network.main
        replay = lambda s: Replay(s.id, prior.get(s.id), s.solution,  # noqa: E731
                                  {p: main.reference[(s.id, p)] for p in s.partials},
                                  _answers(s, main))
        return CheckSpec(step.id, code, step.checks + step.partials, [
            self._batch_plan(step, main, "main", prior),
            self._batch_plan(step, self.network.heldout, "heldout", prior),
        ], self.settings.timeout,
            probe.spec_for(self.pack, step, self.earlier(step), self.settings.seed, replay,
                           code), compiled, tutor_seconds=self.settings.tutor_seconds)

    def _batch_plan(self, step: Step, batch: Batch, name: str, prior: dict[str, str]
                    ) -> BatchPlan:
        """What the child needs for one batch: its tensors and how to replay earlier steps.

        Once a replay has come back as plain tensors, later checks of the step start from those
        and replay nothing.
        """
        known = self._befores.get(self._before_key(step, batch, prior))
        if known is not None and known[2]:
            return BatchPlan(name, known[0], [], known[1], known=True)
        ns = batch.namespace()
        # An earlier step that is replayed reads what it was given, as this step does.
        for s in [*self.earlier(step), step]:
            for given in s.given:
                ns[gradient(given)] = batch.given[(s.id, given)].clone()
        replays = [
            Replay(s.id, prior.get(s.id), s.solution,
                   {p: batch.reference[(s.id, p)] for p in s.partials},
                   _answers(s, batch))
            for s in self.earlier(step)
        ]
        return BatchPlan(name, ns, replays, mention=step.checks)

    def first(self, step: Step) -> str:
        return "main"

    def forget(self) -> None:
        self._befores.clear()
        self._mistake_values.clear()
        self._variants.clear()

    # -- the namespaces a check started from ---------------------------------------------------
    def _before_key(self, step: Step, batch: Batch, prior: dict[str, str]) -> tuple:
        return (id(batch), step.id, tuple((s.id, prior.get(s.id)) for s in self.earlier(step)))

    def namespace_before(self, step: Step, batch: Batch, prior: dict[str, str]) -> dict:
        """The namespace the candidate started from, as the child last reported it."""
        known = self._befores.get(self._before_key(step, batch, prior))
        return known[0] if known else {}

    def _remember(self, record: dict, step: Step, batch: Batch, prior: dict[str, str]) -> dict:
        """The namespace a run started from, decoded; kept for diagnosis and later checks."""
        key = self._before_key(step, batch, prior)
        if "before" not in record and key in self._befores:
            return self._befores[key][0]
        before = {**batch.namespace(), **{k: v for k, v in (record.get("scalars") or {}).items()
                                          if v is None or type(v) in (int, float, bool, str)}}
        # The child's tensors come back on the CPU, where the lesson's own are judged.
        before.update(isolate.decode_shared(record["before"]))
        notes = [clean(n, MAX_MESSAGE) for n in record.get("notes", [])]
        if len(self._befores) > 256:
            self._befores.clear()
        self._befores[key] = (
            before, notes, bool(record.get("cacheable")))
        return before

    # -- the rows ------------------------------------------------------------------------------
    def grade(self, step: Step, code: str, prior: dict[str, str], outcome: ChildAnswer,
              result: CheckResult) -> Graded:
        records = outcome.records
        main = records["main"]
        batch = self.network.main
        try:
            before = self._remember(main, step, batch, prior)
            run = Run(decode_namespace(main.get("after")), before, code)
            heldout = records.get("heldout")
            if heldout and not heldout.get("error"):
                self._remember(heldout, step, self.network.heldout, prior)
        except Exception as exc:  # noqa: BLE001 - the child's data did not decode: never trust it
            raise Unreadable() from exc
        result.notes += [clean(n, MAX_MESSAGE) for n in main.get("notes", [])]
        grades = self._rows(step, run, batch, prior)
        self._check_mutations(main.get("mutations") or {}, step, code, prior, grades,
                              result.notes)
        self._partial_notes(step, run, result.notes)
        result.stdout = self._with_cmp_rows(step, main, result.stdout)
        for g in grades:
            value = run.namespace.get(g.grad)
            if isinstance(value, Tensor) and value.dtype in (torch.float16, torch.bfloat16):
                result.notes.append(
                    f"{g.grad} is a {str(value.dtype)[6:]} tensor, which keeps only about three "
                    "significant digits; compute gradients in float32, like the forward pass")
        return Graded(grades, run)

    def _rows(self, step: Step, run: Run, batch: Batch, prior: dict[str, str]
              ) -> list[TensorCheck]:
        grades = []
        names = [(t, False) for t in step.checks] + [(t, True) for t in step.partials]
        for tensor, partial in names:
            value = run.namespace.get(gradient(tensor))
            if partial and not isinstance(value, Tensor):
                # Starting a first branch early is the notebook's way, not a requirement: the
                # tensor is graded in full where its last branch arrives.
                continue
            ref32 = batch.reference[(step.id, tensor)]
            ref64 = batch.reference64[(step.id, tensor)]
            if isinstance(value, (OddTensor, Foreign)):
                grades.append(unusable(tensor, value, ref32, partial))
                continue
            # Parameters are held to what their update `p -= lr * dp` needs (see grading).
            g = grade(tensor, value, ref32, ref64, partial, tensor in self.network.params)
            if partial and not g.accepted:
                # Both branches typed at once are right: grade against the closing step.
                from tutor.core.grading import closing_grade

                closing = next((s.id for s in self.pack.gradient_steps[
                    self.pack.index(step.id) + 1:] if tensor in s.checks), None)
                if closing:
                    g = closing_grade(g, value, batch.reference[(closing, tensor)],
                                      batch.reference64[(closing, tensor)], closing)
            if g.verdict is Verdict.WRONG and isinstance(value, Tensor):
                # A max-pool's ties: another valid split of a window's gradient, where nothing
                # of the difference flows on, is as right as autograd's (tutor/core/slips.py).
                why = slips.tie_equivalent(self.pack, step, tensor, value, ref64, run.before)
                if why:
                    g.verdict, g.note = Verdict.APPROXIMATE, why
            if isinstance(value, Tensor):
                self._diagnose(g, step, value, ref32, run, batch, prior)
            elif not g.message:
                g.message = f"{gradient(tensor)} is missing"
            grades.append(g)
        return grades

    def _diagnose(
        self,
        g: TensorCheck,
        step: Step,
        value: Tensor,
        ref: Tensor,
        run: Run,
        batch: Batch,
        prior: dict[str, str],
    ) -> None:
        role = ""
        if g.partial:
            role = (" (its branches so far, completed in a later step)"
                    if self._started_earlier(step, g.tensor)
                    else " (its first branch, completed in a later step)")
        mistakes = self._mistakes_for(g.tensor, step, batch, prior)
        if g.verdict is Verdict.SHAPE:
            known = dx.matching_mistake(value, mistakes) or dx.shape_diagnosis(
                g.tensor, value, ref)
            if dx.guessed(known.message):
                known = slips.explain_layout(self.pack, step, g.tensor, value, ref) or known
            if dx.guessed(known.message):
                # Nothing in the shapes alone says how: an axis or a keepdim of the learner's
                # own code, else a sum over the wrong dims of a gradient in reach.
                found = self._own_change(step, g.tensor, value, ref, run, prior, [])()
                sources = [tuple(v.shape) for k, v in run.before.items()
                           if tensor_of(k) is not None and isinstance(v, Tensor)]
                known = (dx.diagnosis("shape", found.message) if found else
                         dx.shape_diagnosis(g.tensor, value, ref, sources))
            g.diagnosis = known
            g.message = g.diagnosis.message
            return
        if g.accepted:
            g.message = rounding_note(g) + ("" if g.reference_step else role)
            return
        from tutor.core import derived
        from tutor.core.grading import as_graded

        whole = dx.integer_diagnosis(g.tensor, value, ref)
        value = as_graded(value, ref)  # a shape that fits is diagnosed on what it broadcasts to
        earlier = run.before.get(gradient(g.tensor))
        if whole is not None:
            g.diagnosis = whole
            g.message = whole.message
            return
        # A catalogued mistake first (it is this lesson's own word), then the slips of the
        # line's operations (tutor/core/slips.py), which every step where they occur shares.
        g.diagnosis = dx.matching_mistake(value, mistakes) or slips.explain(
            self.pack, step, g.tensor, value, ref, run.before) or dx.matching_mistake(
            value, self._carried_for(g.tensor, step, batch, prior)) or dx.value_diagnosis(
            g.tensor,
            value,
            ref,
            batch.n,
            earlier if isinstance(earlier, Tensor) else None,
            mistakes,
            "\n".join(self.pack.line_for(t).source for t in step.lines),
            run.code,
            self.pack.sizes,
        )
        if g.diagnosis is not None and g.diagnosis.kind == "scale":
            # A factor says what was seen, not why: where the learner's own operators group
            # otherwise than their formula, that is the why (`x / n * m`).
            g.diagnosis = self._own_change(step, g.tensor, value, ref, run, prior, [],
                                           ("grouping",))() or g.diagnosis
        if g.diagnosis is None and torch.isfinite(value).all():
            # Nobody catalogued this one: compare with wrong answers derived from the step.
            lines = [self.pack.line_for(t) for t in step.lines]
            related = [t for line in lines for t in (*line.operands, line.target)]
            related += [gradient(t) for t in related]
            g.diagnosis = derived.explain(
                self.pack, step, g.tensor, value, ref, run.before, batch.n, run.code,
                self._own_change(step, g.tensor, value, ref, run, prior, related),
            ) or slips.patterns(self.pack, step, g.tensor, value, ref, run.before
                                ) or dx.noise_diagnosis(g.tensor, value, ref)
        pattern = dx.where_wrong(value, ref) if torch.isfinite(value).all() else ""
        g.message = (g.diagnosis.message if g.diagnosis else f"{gradient(g.tensor)} is "
                                                             f"wrong{role}") + (
            f" ({pattern})" if pattern else ""
        )
        if torch.isfinite(value).all():
            g.heatmap = heatmap(value.to(ref.dtype) - ref)

    def _own_change(self, step: Step, tensor: str, value: Tensor, ref: Tensor, run: Run,
                    prior: dict[str, str], related: list[str],
                    families: tuple[str, ...] = ()) -> Callable[[], Any]:
        """The search for the smallest change to the learner's own code (tutor/core/smallest.py),
        to be made only where nothing else explains the row: its changed programs run in a
        confined child on the main and the fresh batch, and the change must make both right.
        `families` narrows it to those kinds of change."""
        smallest = smallest_search()

        def search() -> Any:
            if not run.code or self.run_variants is None or smallest is None:
                return None
            grad = gradient(tensor)
            refs = [ref]
            fresh = self.network.heldout.reference.get((step.id, tensor))
            if fresh is not None:
                refs.append(fresh)
            key = (step.id, run.code, tuple(sorted(prior.items())))
            if self._variants_key != key:
                self._variants_key, self._variants = key, {}
            cache = self._variants

            def values(sources: list[str]) -> list[list[Tensor | None]]:
                new = [x for x in sources if x not in cache]
                if new:
                    for source, got in zip(new, self.changed_values(step, run.code, prior, new),
                                           strict=True):
                        cache[source] = got
                out = []
                for source in sources:
                    per = []
                    for v in cache.get(source) or []:
                        t = v.get(grad) if isinstance(v, dict) else None
                        per.append(t if isinstance(t, Tensor) and t.is_floating_point()
                                   else None)
                    out.append(per)
                return out

            return smallest.search(
                run.code, values, value, refs, smallest.line_sizes(run.before),
                smallest.line_shapes(run.code, run.before, related), families=families)

        return search

    def _mistakes_for(self, tensor, step, batch, prior) -> list[tuple]:
        """The step's catalogued mistakes about this tensor, each with a lazy evaluator."""
        return [
            (m, self._mistake_value(m, tensor, step, batch, prior))
            for m in step.mistakes
            if (m.tensor or step.checks[0]) == tensor
        ]

    def _carried_for(self, tensor, step, batch, prior) -> list[tuple]:
        """The other steps' catalogued mistakes, carried to this step where its solution is the
        same code on other tensors (tutor/pack/transplant.py): a slip catalogued on one layer
        is recognised on every layer, in words said of this one."""
        return [(m, self._mistake_value(m, tensor, step, batch, prior))
                for m in carried_mistakes(self.pack, step.id) if m.tensor == tensor]

    def _mistake_value(self, m, tensor, step, batch, prior) -> Callable[[], Tensor | None]:
        """Lazily evaluate a catalogued mistake on the namespace the learner's code started from.

        The mistake is our code, run here on plain tensors the child sent back.
        """

        def evaluate() -> Tensor | None:
            key = (*self._before_key(step, batch, prior), m.code, tensor)
            if key not in self._mistake_values:
                ns = copy_namespace(self.namespace_before(step, batch, prior))
                try:
                    execute(compile_candidate(m.code), ns, Output())
                    value = ns.get(gradient(tensor))
                except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
                    value = None
                self._mistake_values[key] = value if isinstance(value, Tensor) else None
            return self._mistake_values[key]

        return evaluate

    def _made_as(self, step: Step, code: str, prior: dict[str, str], grad: str, base: str
                 ) -> tuple[str, str] | None:
        """Where `grad` was last made from `base` on its own line, this step's code first, then
        the earlier steps' replayed code: the expression (`dhs[:, t]`) and the step's id."""
        for sid, text in [(step.id, code), *((s.id, prior.get(s.id) or "")
                                             for s in reversed(self.earlier(step)))]:
            if code_facts.rebinds(text, grad):
                found = code_facts.assigned_expression(text, grad)
                if found and base in code_facts.of(found).read:
                    return found, sid
                return None  # made some other way, where a copy is no one expression
        return None

    def _view_notes(self, facts: dict, step: Step, code: str, grades: list[TensorCheck],
                    notes: list[str]) -> set[str]:
        """A first branch made as a view of an earlier tensor passes here and is refused where a
        later step adds to it with `+=`, which writes through to that tensor: said here, with
        the expression to copy. The gradients it was said of."""
        said = set()
        partials = {g.grad for g in grades if g.partial}
        for grad, base in (facts.get("views") or {}).items():
            if grad not in partials:
                continue
            found = self._made_as(step, code, {}, grad, base)
            if found:
                expr = found[0]
                what = (f"is {base} itself" if expr.strip() == base else f"is a view of {base}")
                notes.append(f"`{grad} = {expr}` {what}: a later `{grad} += ...` would change "
                             f"{base} too; write `{_copy_of(expr)}`.")
            else:
                notes.append(f"{grad} shares memory with {base}: a later `{grad} += ...` would "
                             f"change {base} too; make {grad} a copy with .clone().")
            said.add(grad)
        return said

    def _check_mutations(self, facts: dict, step: Step, code: str, prior: dict[str, str],
                         grades: list[TensorCheck], notes: list[str]) -> None:
        """Earlier gradients must come out of a step as they went in; forward tensors too."""
        said = self._view_notes(facts, step, code, grades, notes)
        facts_of = code_facts.of(code)
        written = facts_of.bound
        own = set(code_facts.changed_in_place(facts_of.tree)) if facts_of.tree else set()
        # A tensor this step's lines read whose first branch an earlier step started, completed
        # by a later one: the step adds its own branch (`demb[:, 1] += ...`), as the template
        # says. That is no change of an earlier step's gradient.
        read = {o for t in step.lines for o in self.pack.line_for(t).operands}
        branches = {gradient(t) for t in read if (s := self.pack.flow.starter(
            gradient(t), step.exercise)) is not None and self.pack.index(s) < self.pack.index(
            step.id)}
        by_grad = {g.grad: g for g in grades}
        for change in facts.get("changed", []):
            name = str(change.get("name"))
            if name in branches and (name in written or name in own):
                continue
            if change.get("deleted"):
                notes.append(f"your code deleted {name}; it is back for the next check")
                continue
            if tensor_of(name) is None:
                notes.append(
                    f"your code changed the forward tensor {name} in place; it was restored "
                    "before any later check, but gradients computed from it may be off"
                )
                continue
            if name in written:
                notes.append(f"your code reassigned {name}, an earlier step's gradient")
                continue
            if not grades:
                continue
            culprit = by_grad.get(change.get("culprit")) or grades[0]
            made = self._made_as(step, code, prior, culprit.grad, name)
            if made:
                expr, where = made
                there = "" if where == step.id else f" in {where}"
                how = (f"{culprit.grad} was made as `{culprit.grad} = {expr}`{there}, which "
                       f"copies no data: {culprit.grad} and {name} share memory, so the "
                       f"in-place update reached both. Write `{culprit.grad} = {_copy_of(expr)}`"
                       f"{there}, or update it out of place here "
                       f"(`{culprit.grad} = {culprit.grad} + ...`).")
            else:
                how = (f"{culprit.grad} and {name} are the same tensor in memory (an assignment "
                       f"like `{culprit.grad} = {name}` copies no data), so the in-place update "
                       f"reached both. Start {culprit.grad} from {name}.clone(), or update it "
                       f"out of place (`{culprit.grad} = {culprit.grad} + ...`).")
            gave = next((s.id for s in self.earlier(step) if tensor_of(name) in s.given), None)
            whose = (f"which autograd gave {gave}" if gave else
                     "which an earlier step already checked")
            culprit.diagnosis = dx.diagnosis(
                "aliasing", f"your code also changed {name}, {whose}: {how}")
            culprit.message = culprit.diagnosis.message
        # Shared memory matters only where a later step adds to one of the two in place.
        flow = self.pack.flow
        at = self.pack.index(step.id)
        added_later = frozenset().union(*(flow.adds(s) for s in self.pack.steps[at + 1:]
                                          if s.exercise == step.exercise))
        for grad, other in (facts.get("shared") or {}).items():
            if grad in by_grad and grad not in said and {grad, other} & added_later:
                notes.append(
                    f"{grad} and {other} share memory: a later `+=` on one changes the "
                    "other. A .clone() keeps them apart."
                )

    def _started_earlier(self, step: Step, name: str) -> bool:
        """Was `name`'s gradient started at an earlier step of the exercise (so that this step
        adds a middle branch to it)?"""
        return any(name in s.partials for s in self.earlier(step)) or any(
            name in s.partials for s in self.pack.gradient_steps[: self.pack.index(step.id)]
            if s.exercise == step.exercise)

    def _partial_notes(self, step: Step, run: Run, notes: list[str]) -> None:
        for name in step.partials:
            if self._started_earlier(step, name):
                continue  # started where it was first met: the note was given there
            if not isinstance(run.namespace.get(gradient(name)), Tensor):
                closing = next(
                    (s.id for s in self.pack.gradient_steps[self.pack.index(step.id) + 1:]
                     if name in s.checks), "a later step")
                notes.append(
                    f"{name} is used twice; its gradient {gradient(name)} can be started here "
                    f"with the "
                    f"branch from this line (it is graded in full at {closing}). Until you do, "
                    "autograd's first branch stands in for it."
                )

    def _with_cmp_rows(self, step: Step, record: dict, stdout: str) -> str:
        """The learner's own cmp(...) calls, answered with the tutor's row where they were made.

        Only gradients graded up to this step are answered, once per name: a row says no more
        than the check itself shows.
        """
        calls = record.get("cmp") or []
        if not calls:
            return stdout
        batch = self.network.main
        upto = self.pack.gradient_steps[: self.pack.index(step.id) + 1]
        pieces, last, seen = [], 0, set()
        for pos, name, encoded in calls:
            if not isinstance(pos, int) or not isinstance(name, str) or name in seen:
                continue
            seen.add(name)
            key = next(((s.id, name) for s in reversed(upto) if name in s.checks + s.partials
                        and (s.id, name) in batch.reference), None)
            value = decode(encoded)
            if key is None or not isinstance(value, Tensor):
                continue
            g = grade(name, value, batch.reference[key], batch.reference64[key])
            row = (f"cmp {name:<15} exact {str(g.exact):<5}  approximate {str(g.approximate):<5}"
                   f"  maxdiff {g.maxdiff if g.maxdiff is not None else '-'}"
                   + ("" if g.shape == g.expected_shape else
                      f"  (shape {g.shape}, expected {g.expected_shape})")
                   + (f"\n    ({APPROXIMATE_WHY})" if g.accepted and not g.approximate else "")
                   + "\n")
            pos = max(last, min(pos, len(stdout)))
            pieces += [stdout[last:pos], row]
            last = pos
        pieces.append(stdout[last:])
        return "".join(pieces)

    # -- the rule, the fresh batch, the figure -------------------------------------------------
    def confirm(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded) -> bool:
        """The rule (tutor/core/probe.py): each right row followed the line's rule or skipped it.
        Never refuses: right values are right for this network, and a skipped rule passes with
        its own mark."""
        spec = probe.spec_for(self.pack, step, self.earlier(step), self.settings.seed,
                              code=code)
        if spec is None:
            return True
        record: Any = (outcome.record("main") or {}).get("probe")
        if not isinstance(record, dict) and outcome.short in ("heldout", "probe"):
            # The tutor's own time ran out before the probe finished: the question is not
            # answered either way (no ↷ for the learner's code), and the engine says so.
            return True
        line = fork = None
        why: dict = {}
        if not isinstance(record, dict):
            # No probe record: the check's time ran out before or during it, or the child
            # could not say. Either way nothing shows the rule.
            why["line"] = ("it ran out of time" if outcome.timeout
                           else "it gave no answer")
        else:
            why = {k: clean(str(v), 300) for k, v in (record.get("why") or {}).items()
                   if k in ("line", "fork") and v} if isinstance(record.get("why"), dict) else {}
            try:
                line, fork = (decode_namespace(record[k]) if record.get(k) is not None
                              else None for k in ("line", "fork"))
            except Exception:  # noqa: BLE001 - undecodable probe data shows no rule
                line = fork = None
                why = {"line": "what it handed back could not be read"}
            if line is None and "line" not in why:
                why["line"] = "it gave no answer"
        if self._graph is None:
            self._graph = probe.Graph.of(self.network, self.network.main)
        run: Run = graded.state
        probe.apply(self.pack, step, self._graph, spec, run.before, run.namespace, line, fork,
                    graded.rows, self.network.main.n, code, why)
        return True

    def hold_out(self, step: Step, code: str, outcome: ChildAnswer, graded: Graded
                 ) -> Heldout | None:
        record = outcome.record("heldout")
        if record is None and outcome.short == "heldout":
            return None  # the tutor's own time ran out first: the main batch's verdict stands
        timed_out = outcome.timeout
        grades = graded.rows
        batch = self.network.heldout
        out = Heldout(batch_size=batch.n)
        advice = "Is a batch size written in as a number? Use n or a tensor's .shape instead."
        sized = not code or writes_the_batch_size(code, self.network.main.n, self.network.sizes)
        typed = None if sized else typed_count(code, self.network.main.namespace(),
                                               batch.namespace())
        if typed is not None:
            # A count this batch decides (how many positions a mask keeps, a length) written in
            # as a number: the fresh batch has another.
            number, what, fresh = typed
            advice = (f"Your code writes {number}, which is {what} on this batch and {fresh} on "
                      "the fresh one: a count of this batch, written in as a number. Compute it "
                      "from the tensors instead.")
        elif not sized and record is not None and not record.get("error"):
            # Only the batch changes between the two batches, and nothing in the code reads as
            # its size: the values made the difference, not a size.
            advice = ("Nothing in your code reads as the batch size written in, so the size is "
                      "not to blame: the rule holds for this batch's values only. Check the "
                      "parts whose effect is tiny here.")
        if record is None or record.get("error"):
            if record is None:
                reason = ("it ran out of time" if timed_out else "it did not finish")
            else:
                reason = f"it fails: {clean_error(record['error']).message}"
            out.message = (f"right for this batch of {self.network.main.n}, but on a fresh "
                              f"batch of {batch.n} {reason} {advice}")
        else:
            namespace = decode_namespace(record.get("after"))
            failures = []
            for g in grades:
                value = namespace.get(g.grad)
                # A first branch typed complete is held to the full gradient, as on the main batch.
                key = (g.reference_step or step.id, g.tensor)
                h = grade(
                    g.tensor,
                    value if isinstance(value, Tensor) else None,
                    batch.reference[key],
                    batch.reference64[key],
                    parameter=g.tensor in self.network.params,
                )
                if h.verdict is Verdict.WRONG and slips.tie_equivalent(
                        self.pack, step, g.tensor, value, batch.reference64[key], batch.values):
                    continue  # another split of a max-pool's ties, as on the main batch
                if not h.accepted and not (g.partial and value is None):
                    failures.append(f"{g.grad} ({h.verdict})")
            if failures:
                out.message = (
                    f"right for this batch of {self.network.main.n}, but wrong on a fresh batch "
                    f"of {batch.n}: {', '.join(failures)}. {advice}"
                )
        if out.message:
            refuse(out, grades)
        return out

    def figure(self, step: Step, graded: Graded, passed: bool) -> dict | None:
        if not step.figure or not passed:  # a solved step's gradient, worth looking at
            return None
        run: Run = graded.state
        value = run.namespace[gradient(step.figure)].detach().to("cpu", torch.float32)
        return {
            "title": gradient(step.figure),
            "values": [[float(x) for x in row] for row in value],
            "row_sums_max_abs": float(value.sum(1).abs().max()),
            "targets": [int(y) for y in self.network.main.values["Yb"].cpu()],
        }


def batch_counts(main: dict, fresh: dict) -> list[tuple[float, str, float]]:
    """The counts a batch decides that the fresh batch has otherwise: (this batch's value, what
    it is, the fresh batch's). A number of the namespace, a tensor's size along a dim, and how
    many entries a 0/1 tensor (a mask) keeps."""
    found: list[tuple[float, str, float]] = []
    for name in sorted(set(main) & set(fresh)):
        a, b = main[name], fresh[name]
        if type(a) is int and type(b) is int and a != b:
            found.append((float(a), f"`{name}`", float(b)))
        if not (isinstance(a, Tensor) and isinstance(b, Tensor)) or a.dim() != b.dim():
            continue
        if a.numel() and bool(((a == 0) | (a == 1)).all()) and b.numel():
            ka, kb = float(a.sum()), float(b.sum())
            if ka != kb and ka > 1:
                found.append((ka, f"how many entries of `{name}` are 1 (`{name}.sum()`)", kb))
        for d, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)):
            if x != y and x > 1:
                found.append((float(x), f"the size of dim {d} of `{name}`", float(y)))
    return found


def typed_count(code: str, main: dict, fresh: dict) -> tuple[str, str, str] | None:
    """A number written in the code that is a count of this batch (`batch_counts`) and not the
    same on the fresh one: (the number as written, what it counts, the fresh batch's count)."""
    said = code_facts.of(code)
    if said.tree is None:
        return None
    counts = batch_counts(main, fresh)
    for value in said.numbers:
        for count, what, other in counts:
            if abs(value - count) < 1e-9 or abs(value * count - 1) < 1e-9:
                shown = f"{value:g}" if abs(value - count) < 1e-9 else f"1/{count:g}"
                return shown, what, f"{other:g}"
    return None


def writes_the_batch_size(code: str, n: int, sizes: dict) -> bool:
    """Whether a number in the code could be the lesson's batch size, or a count made from it
    (n - 1, 1/n, n times a size): the one thing the fresh batch changes besides the values."""
    counts = {n, n - 1, n + 1} | {n * v for v in sizes.values() if isinstance(v, int) and v > 1}
    said = code_facts.of(code)
    if said.tree is None:
        return True
    return any(abs(value - c) < 1e-9 or abs(value * c - 1) < 1e-6
               for value in said.numbers for c in counts)


def _answers(step: Step, batch: Batch) -> dict[str, Tensor]:
    """Autograd's gradients of what an earlier step grades, for a pack without its solution
    (a student's build): they stand in for the replay of the reference where the learner has no
    accepted code (or it fails). Nothing is sent where the solution is there."""
    if step.solution.strip():
        return {}
    return {c: batch.reference[(step.id, c)] for c in step.checks
            if (step.id, c) in batch.reference}


_CARRIED: dict[tuple[int, str], tuple[Pack, tuple[Mistake, ...]]] = {}


def carried_mistakes(pack: Pack, step_id: str) -> tuple[Mistake, ...]:
    """Every other step's catalogued mistake made on this step, with its message said of this
    step; only those whose change lines up here and whose words stay true. Made once per pack
    and step: it is text work only."""
    key = (id(pack), step_id)
    if key not in _CARRIED or _CARRIED[key][0] is not pack:
        _CARRIED[key] = (pack, _carried(pack, step_id))
    return _CARRIED[key][1]


def _carried(pack: Pack, step_id: str) -> tuple[Mistake, ...]:
    from tutor.pack.transplant import carried_message, counterpart, transplant

    step = pack.step(step_id)
    out: list[Mistake] = []
    seen = {m.code.strip() for m in step.mistakes}
    for source in pack.gradient_steps:
        if source is step or type(source.kind) is not type(step.kind) or not source.mistakes:
            continue
        lines = ("\n".join(pack.line_for(t).source for t in source.lines),
                 "\n".join(pack.line_for(t).source for t in step.lines))
        for m in source.mistakes:
            code = transplant(source.solution, m.code, step.solution, lines)
            if code is None or code.strip() in seen:
                continue
            tensor = counterpart(source.solution, step.solution, m.tensor or source.checks[0],
                                 lines)
            message = carried_message(m.message, source.solution, step.solution, lines)
            if message is None or tensor not in (*step.checks, *step.partials):
                continue
            seen.add(code.strip())
            out.append(Mistake(code, message, m.kind, tensor))
    return tuple(out)
