"""The check of one candidate: run it on the lesson's batches, grade it, diagnose it.

The engine holds the lesson and autograd's gradients. Learner code never runs here: each check
goes to a confined child that replays the earlier steps and runs the candidate on the main and
the fresh batch (execution.py), then sends back plain tensors. The child is forked from this
process (sandbox/isolate.py) where that serves, or else a freshly started interpreter that gets
the plan without answers (sandbox/spawn.py): on a GPU, on Windows, or when asked for. Grading,
diagnosis and the held-out verdict happen here, on that data. A check returns a typed
`CheckResult` (tutor/results.py); the worker turns it into the plain data of docs/json.md.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tutor import code_facts, probe
from tutor import diagnosis as dx
from tutor.candidate import (
    CodeError,
    Output,
    compile_candidate,
    copy_namespace,
    execute,
    timeout_error,
)
from tutor.config import Settings
from tutor.execution import (
    BatchPlan,
    CheckSpec,
    FunctionCheckSpec,
    Replay,
    call_function,
    run_spec,
)
from tutor.functions import SAME_SIZES, Case, cases, is_gradient, output_label, same_sizes_case
from tutor.grading import APPROXIMATE_WHY, grade, heatmap, rounding_note
from tutor.lesson import Batch, DeviceError, Lesson, resolve_device
from tutor.packs import Pack, Step, find_pack, load_pack
from tutor.results import (
    CheckError,
    CheckResult,
    Defined,
    Diagnosis,
    ErrorKind,
    Heldout,
    ScratchResult,
    TensorCheck,
    Verdict,
)
from tutor.sandbox import forkserver, isolate, spawn
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.sandbox.confine import prepare

Tensor = torch.Tensor

# How long past its time limit a child that ignores the alarm (a swallowed stop, one long tensor
# operation) may run before it is killed.
KILL_GRACE = 0.5
# Started children kept waiting for the next checks: two, so that `check --all` and a quick
# re-check after a fix rarely wait for an interpreter to load torch.
SPARES = 2


def isolation_for(asked: str, device: torch.device) -> str:
    """How checks are kept apart on this device: "fork" or "spawn" (see sandbox/spawn.py)."""
    if asked == "auto":
        return "fork" if isolate.can_fork(device) else "spawn"
    if asked == "fork" and not isolate.can_fork(device):
        where = "Windows" if not hasattr(os, "fork") else f"the {device.type} device"
        raise DeviceError(f"isolation 'fork' cannot serve {where} (a forked child cannot use "
                          "it); use 'auto' or 'spawn'")
    return asked


@dataclass
class Run:
    """What executing a candidate on one batch produced, as plain tensors."""

    namespace: dict
    before: dict


@dataclass(frozen=True)
class Foreign:
    """A value that is not a tensor, by the name of its type."""

    type_name: str


@dataclass(frozen=True)
class OddTensor:
    """A tensor that cannot be graded as a gradient (sparse, meta, complex, ...), and why."""

    why: str


def decode(item: Any) -> Any:
    kind = item[0] if isinstance(item, tuple) and item else None
    if kind == "tensor":
        return isolate.decode_tensor(item)
    if kind == "ellipsis":
        return Ellipsis
    if kind == "odd":
        return OddTensor(clean(item[1], 300))
    return Foreign(clean(item[1] if kind == "object" else "unknown", 60))


def decode_namespace(encoded: Any) -> dict:
    if not isinstance(encoded, dict):
        return {}
    return {str(k): decode(v) for k, v in encoded.items()}


class Engine:
    def __init__(self, settings: Settings | None = None, pack: Pack | None = None):
        self.settings = settings or Settings()
        self.pack = pack or load_pack(find_pack(self.settings.pack))
        self.device = resolve_device(self.settings.device)
        self.lesson = Lesson(self.pack, self.device, self.settings.seed)
        self.isolation = isolation_for(self.settings.isolation, self.device)
        prepare()
        # Built once here, not again in every child (the batches are cached properties).
        _ = self.lesson.main, self.lesson.heldout
        # (batch, step, earlier code) -> (namespace before the candidate, notes, reusable)
        self._befores: dict[tuple, tuple[dict, list[str], bool]] = {}
        self._mistake_values: dict[tuple, Tensor | None] = {}
        self._lock = threading.RLock()
        self._spare: isolate.Child | None = None
        self._spawned: list[spawn.Spawned] = []
        # Forks the spawn path's children where the system allows it (started when needed).
        self._server = forkserver.Keeper(self.device.type, spawn.START_LIMIT)
        # Told how long a check may wait for its child to start (the worker tells its client).
        self.on_wait: Callable[[float], None] | None = None
        self._cases: dict[str, list[Case]] = {}  # function step -> its cases, lesson's first
        self._graph: probe.Graph | None = None  # the main batch under autograd, for the probe

    # -- the lesson as plain data ------------------------------------------------------------
    def info(self) -> dict:
        batch = self.lesson.main
        return {
            "device": str(self.device),
            "torch_version": torch.__version__.split("+")[0],
            "batch_size": batch.n,
            "heldout_batch_size": self.lesson.heldout.n,
            "parameters": self.lesson.n_params,
            "dataset": self.lesson.dataset.sizes,
            "lines": batch.lines,
            "isolation": self.isolation,
        }

    # -- running learner code ------------------------------------------------------------------
    def _earlier(self, step: Step) -> list[Step]:
        if not step.replay or step.is_function:
            return []
        steps = [s for s in self.pack.gradient_steps if s.exercise == step.exercise]
        return steps[: steps.index(step)]

    def function_cases(self, step: Step) -> list[Case]:
        """A function step's cases with their expected outputs, built once."""
        if step.id not in self._cases:
            self._cases[step.id] = cases(step, self.lesson.main, self.settings.seed, self.device)
        return self._cases[step.id]

    def _same_sizes(self, step: Step) -> Case | None:
        """Fresh values at the lesson's sizes, run with the cases: whether a fresh case failed
        because of its sizes (functions.same_sizes_case)."""
        key = f"{step.id} {SAME_SIZES}"
        if key not in self._cases:
            same = same_sizes_case(step, self.function_cases(step)[0], self.settings.seed,
                                   self.device)
            self._cases[key] = [same] if same else []
        return next(iter(self._cases[key]), None)

    def _plan(self, step: Step, batch: Batch, name: str, prior: dict[str, str]) -> BatchPlan:
        """What the child needs for one batch: its tensors and how to replay earlier steps.

        Once a replay has come back as plain tensors, later checks of the step start from those
        and replay nothing.
        """
        known = self._befores.get(self._before_key(step, batch, prior))
        if known is not None and known[2]:
            return BatchPlan(name, known[0], [], known[1], known=True)
        ns = batch.namespace()
        for given in step.given:
            ns[f"d{given}"] = batch.given[(step.id, given)].clone()
        replays = [
            Replay(s.id, prior.get(s.id), s.solution,
                   {p: batch.reference[(s.id, p)] for p in s.partials})
            for s in self._earlier(step)
        ]
        return BatchPlan(name, ns, replays, mention=step.checks)

    def _remember(self, record: dict, step: Step, batch: Batch, prior: dict[str, str]) -> dict:
        """The namespace a run started from, decoded; kept for diagnosis and later checks."""
        key = self._before_key(step, batch, prior)
        if "before" not in record and key in self._befores:
            return self._befores[key][0]
        before = {**batch.namespace(), **{k: v for k, v in (record.get("scalars") or {}).items()
                                          if v is None or type(v) in (int, float, bool, str)}}
        # On a GPU the child's tensors come back to the CPU: diagnosis runs the catalogued
        # mistakes on them next to the lesson's own, so they go back to the device.
        before.update(spawn.to_device(isolate.decode_shared(record["before"]), self.device))
        notes = [clean(n, MAX_MESSAGE) for n in record.get("notes", [])]
        if len(self._befores) > 256:
            self._befores.clear()
        self._befores[key] = (
            before, notes, bool(record.get("cacheable")))
        return before

    def _scrub(self) -> None:
        """In the child, before learner code runs: forget every answer it could look for."""
        for batch in (self.lesson.main, self.lesson.heldout):
            batch.reference.clear()
            batch.reference64.clear()
            batch.gradients.clear()
        self._cases.clear()
        for s in self.pack.steps:
            object.__setattr__(s, "solution", "")
            object.__setattr__(s, "mistakes", ())
        self._befores.clear()
        self._mistake_values.clear()

    def _spec(self, step: Step, code: str, prior: dict[str, str]
              ) -> CheckSpec | FunctionCheckSpec:
        if step.function is not None:
            return self._function_spec(step, code)
        main = self.lesson.main
        replay = lambda s: Replay(s.id, prior.get(s.id), s.solution,  # noqa: E731
                                  {p: main.reference[(s.id, p)] for p in s.partials})
        return CheckSpec(step.id, code, step.checks + step.partials, [
            self._plan(step, main, "main", prior),
            self._plan(step, self.lesson.heldout, "heldout", prior),
        ], self.settings.timeout,
            probe.spec_for(self.pack, step, self._earlier(step), self.settings.seed, replay,
                           code))

    def _function_spec(self, step: Step, code: str) -> FunctionCheckSpec:
        fn = step.function
        assert fn is not None
        return FunctionCheckSpec(
            step.id, code, fn.name, fn.call, fn.arguments, fn.outputs, step.checks,
            [(c.name, c.inputs) for c in [*self.function_cases(step),
                                          *filter(None, [self._same_sizes(step)])]],
            dict(self.lesson.sizes), self.settings.timeout)

    def _in_child(self, request: dict, _send: Callable, _cancel: threading.Event) -> dict:
        """The child's whole life: plan from the lesson, forget the answers, run the code."""
        spec = self._spec(self.pack.step(request["step"]), request["code"], request["prior"])
        self._scrub()
        return run_spec(spec, bool(request.get("scratch")))

    def _fork(self) -> isolate.Child:
        return isolate.Child(self._in_child, cpu_seconds=self.settings.timeout + 1,
                             memory_gb=self.settings.memory_limit_gb)

    def _start(self) -> spawn.Spawned:
        """A started child for the next check: forked by the fork server where it serves (one
        torch import for all checks), else a fresh interpreter of its own."""
        setup = {"device": str(self.device), "cpu_seconds": self.settings.timeout + 1,
                 "memory_gb": self.settings.memory_limit_gb}
        return spawn.Spawned("check", setup, launch=self._server.launcher(setup))

    def prepare(self) -> None:
        """Start the next checks' children now, while nobody waits for them."""
        with self._lock:
            if self.isolation == "spawn":
                self._spawned = [c for c in self._spawned if c.alive()]
                while len(self._spawned) < SPARES:
                    self._spawned.append(self._start())
            elif self._spare is None or not self._spare.alive():
                self._spare = self._fork()

    def ready(self) -> bool:
        """Whether the next check finds its child waiting (forked, or started and ready)."""
        if self.isolation == "spawn":
            return bool(self._spawned) and all(c.ready() for c in self._spawned)
        return self._spare is not None and self._spare.alive()

    def close(self) -> None:
        if self._spare is not None:
            self._spare.discard()
            self._spare = None
        for child in self._spawned:
            child.discard()
        self._spawned = []
        self._server.close()

    def execute(self, step: Step, code: str, prior: dict[str, str], scratch: bool = False
                ) -> dict:
        """Run the candidate in a confined child, forked or started for it."""
        if self.isolation == "spawn":
            return self._execute_spawned(self._spec(step, code, prior), scratch)
        if step.function is not None and step.id not in self._cases:
            # Built here, where the pack's expect code may still do what a confined child
            # cannot (torch.optim looks for a cache folder the first time it runs); a child
            # forked before knows nothing of them.
            self.function_cases(step)
            self.close()
        child, self._spare = self._spare, None
        if child is None or not child.alive():
            child = self._fork()
        outcome = child.run({"step": step.id, "code": code, "prior": prior, "scratch": scratch},
                            timeout=self.settings.timeout + KILL_GRACE)
        return _answer(outcome)

    def _execute_spawned(self, spec: CheckSpec | FunctionCheckSpec, scratch: bool) -> dict:
        """The plan, built here without answers, run by a started child (a ready one first)."""
        self._spawned = [c for c in self._spawned if c.alive()]
        ready = [c for c in self._spawned if c.ready()]
        child = (ready or self._spawned or [None])[0]
        if child is None:
            child = self._start()
        else:
            self._spawned.remove(child)
        if not child.ready() and self.on_wait is not None:
            self.on_wait(spawn.START_LIMIT)
        # The random state goes along: a forked child inherits the worker's, and code that
        # draws random numbers must see the same ones on either path, check after check.
        rng = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        outcome = child.run({"spec": spec, "scratch": scratch, "rng": rng},
                            timeout=self.settings.timeout + KILL_GRACE)
        return _answer(outcome)

    # -- the check -----------------------------------------------------------------------------
    def check(self, step_id: str, code: str, prior: dict[str, str] | None = None
              ) -> CheckResult:
        with self._lock:  # one check at a time: the lesson's caches are shared
            return self._check(step_id, code, prior or {})

    def scratch(self, step_id: str, code: str, prior: dict[str, str] | None = None
                ) -> ScratchResult:
        """Run code against the lesson without grading it or counting an attempt: its printed
        output, its error if any, and a line about each name it defined or changed."""
        step = self.pack.step(step_id)
        result = ScratchResult(step.id)
        try:
            compile_candidate(code)
        except CodeError as exc:
            result.error = exc.error
            return result
        with self._lock:
            outcome = self.execute(step, code, prior or {}, scratch=True)
        if outcome.get("timeout"):
            result.error = timeout_error(self.settings.timeout).error
            return result
        if "stdout" not in outcome:
            result.error = _stopped(outcome)
            return result
        result.stdout = clean(outcome.get("stdout", ""))
        result.error = _clean_error(outcome["error"]) if outcome.get("error") else None
        result.defined = [
            Defined(clean(d.get("name", ""), 60), clean(d.get("what", ""), 200))
            for d in (outcome.get("defined") or [])[:100] if isinstance(d, dict)]
        return result

    def _check(self, step_id: str, code: str, prior: dict[str, str]) -> CheckResult:
        step = self.pack.step(step_id)
        result = CheckResult(step.id, passed=False, device=str(self.device))
        if step.is_training:
            result.error = CheckError(
                ErrorKind.USAGE,
                "the training step is run with `backprop-tutor train`, not checked")
            return result
        try:
            compile_candidate(code)  # syntax errors and refusals, before any process starts
        except CodeError as exc:
            result.error = exc.error
            return result
        outcome = self.execute(step, code, prior)
        records = outcome.get("records") or {}
        first = self.function_cases(step)[0].name if step.function else "main"
        main = records.get(first)
        if not _usable(outcome, main, result, self.settings.timeout):
            return result
        if step.function is not None:
            return self._grade_function(step, outcome, result)
        batch = self.lesson.main
        try:
            run = self._run_from(main, step, batch, prior)
            heldout = records.get("heldout")
            if heldout and not heldout.get("error"):
                self._remember(heldout, step, self.lesson.heldout, prior)
        except Exception:  # noqa: BLE001 - the child's data did not decode: never trust it
            result.error = _unreadable()
            return result
        result.notes += [clean(n, MAX_MESSAGE) for n in main.get("notes", [])]
        grades = self._grade(step, run, batch, prior)
        self._check_mutations(step, main.get("mutations") or {}, code, grades, result.notes)
        self._partial_notes(step, run, result.notes)
        result.stdout = self._with_cmp_rows(step, main, result.stdout)
        for g in grades:
            value = run.namespace.get(g.grad)
            if isinstance(value, Tensor) and value.dtype in (torch.float16, torch.bfloat16):
                result.notes.append(
                    f"{g.grad} is a {str(value.dtype)[6:]} tensor, which keeps only about three "
                    "significant digits; compute gradients in float32, like the forward pass")
        passed = all(g.accepted and not g.diagnosis for g in grades)
        if passed:
            passed = self._rule_probe(step, run, main.get("probe"), grades, code)
        if passed:
            result.heldout = self._heldout(step, records.get("heldout"),
                                           bool(outcome.get("timeout")), grades, code)
            passed = result.heldout.passed
        result.checks = grades
        result.passed = passed
        if passed:
            result.figure = self._figure(step, run)
        return result

    def _rule_probe(self, step: Step, run: Run, record: Any, grades: list[TensorCheck],
                    code: str) -> bool:
        """The verdict on the rule (tutor/probe.py): False when it refused a gradient."""
        spec = probe.spec_for(self.pack, step, self._earlier(step), self.settings.seed,
                              code=code)
        if spec is None or not isinstance(record, dict):
            return True
        if self._graph is None:
            self._graph = probe.Graph.of(self.lesson, self.lesson.main)
        try:
            line, fork = (decode_namespace(record.get(k)) if record.get(k) else None
                          for k in ("line", "fork"))
        except Exception:  # noqa: BLE001 - undecodable probe data: the real runs decide alone
            return True
        return probe.apply(self.pack, step, self._graph, spec, run.before, run.namespace, line,
                           fork, grades, self.lesson.main.n, code)

    # -- function steps ------------------------------------------------------------------------
    def _grade_function(self, step: Step, outcome: dict, result: CheckResult) -> CheckResult:
        """The lesson's case decides the rows and their diagnoses; the fresh sizes must agree."""
        lesson, *fresh = self.function_cases(step)
        records = outcome.get("records") or {}
        record = records[lesson.name]
        try:
            values = decode_namespace(record.get("after"))
        except Exception:  # noqa: BLE001 - the child's data did not decode: never trust it
            result.error = _unreadable()
            return result
        grades = [self._grade_output(step, name, values.get(name), lesson)
                  for name in step.checks]
        for name in record.get("changed") or []:
            if isinstance(name, str):
                result.notes.append(
                    f"your function changed its argument {clean(name, 40)} in place, but the "
                    "caller may still need it (a backward pass reads its inputs again): compute "
                    "into new tensors instead.")
        passed = all(g.accepted and not g.diagnosis for g in grades)
        if passed:
            result.heldout = self._fresh_verdict(step, lesson, fresh, records,
                                                 bool(outcome.get("timeout")), grades)
            passed = result.heldout.passed
        result.checks = grades
        result.passed = passed
        return result

    def _grade_output(self, step: Step, name: str, value: Any, case: Case) -> TensorCheck:
        g = self._measure_output(step, name, value, case)
        g.tensor = name  # the row is the output, by the name the call gives it
        return g

    def _measure_output(self, step: Step, name: str, value: Any, case: Case) -> TensorCheck:
        tensor = output_label(name)
        ref32, ref64 = case.reference[name], case.reference64[name]
        if isinstance(value, (OddTensor, Foreign)):
            return _unusable(tensor, value, ref32, False, name)
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
            g.diagnosis = self._derived_output(step, name, value, ref32, case) or g.diagnosis
        pattern = dx.where_wrong(value, ref32) if (
            g.verdict is not Verdict.SHAPE and torch.isfinite(value).all()
            and (g.diagnosis is None or g.diagnosis.kind != "unchanged")) else ""
        g.message = (g.diagnosis.message if g.diagnosis else f"{name} is wrong") + (
            f" ({pattern})" if pattern else "")
        if pattern:
            g.heatmap = heatmap(value.to(ref32.dtype) - ref32)
        return g

    def _derived_output(self, step: Step, name: str, value: Tensor, ref: Tensor, case: Case
                        ) -> Diagnosis | None:
        """Nobody catalogued this one: rewrites of the reference function, then the state's
        own patterns (tutor/derived.py, tutor/rewrites.py)."""
        from tutor import derived
        from tutor.rewrites import state_patterns

        def call(source: str) -> dict | None:
            return derived.call_function(step, source, case.inputs, self.lesson.sizes)

        start = case.inputs.get(name)
        start = start if isinstance(start, Tensor) and not is_gradient(name) else None
        found = derived.explain_function(step, name, value, ref, case.inputs, call, start)
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
                    values, _ = call_function(self._function_spec(step, m.code), m.code,
                                              case.inputs, Output(), None)
                    value = values.get(name)
                except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
                    value = None
                self._mistake_values[key] = value if isinstance(value, Tensor) else None
            return self._mistake_values[key]

        return evaluate

    def _fresh_verdict(self, step: Step, lesson: Case, fresh: list[Case], records: dict,
                       timed_out: bool, grades: list[TensorCheck]) -> Heldout:
        where = "; ".join(c.describe() for c in fresh)
        out = Heldout(what=f"fresh sizes ({where})")
        for case in fresh:
            record = records.get(case.name)
            if record is None:
                reason = "it ran out of time" if timed_out else "it did not finish"
            elif record.get("error"):
                reason = f"it fails: {_clean_error(record['error']).message}"
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
            if same is not None and self._fails(step, same, records.get(same.name)):
                # Wrong at the lesson's own sizes too: the values made the difference.
                found = self._explain_case(step, same, records[same.name])
                out.message = (
                    f"right on the lesson's tensors ({lesson.describe()}), but at "
                    f"{case.describe()} {reason}, and it is also wrong for fresh values at the "
                    f"lesson's own sizes: no size is to blame. It is right only for these "
                    f"particular values: check the parts whose effect is tiny here (a term "
                    f"scaled by a small constant, the order of two updates)."
                    + (f" {found.message}" if found else ""))
            else:
                out.message = (
                    f"right on the lesson's tensors ({lesson.describe()}), but at "
                    f"{case.describe()} {reason}. Does the function use a size of the lesson (a "
                    f"number such as {_lesson_numbers(lesson)}{self._size_names(lesson)}) "
                    "instead of reading every size off its arguments' shapes?")
            _refuse(out, grades)
            break
        return out

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

    def _size_names(self, lesson: Case) -> str:
        """The lesson's names for the sizes of its case (C=32 is n_embd), as a learner might
        have used them."""
        values = set(lesson.sizes.values())
        names = [k for k, v in self.lesson.sizes.items() if v in values][:2]
        return f", or a name such as {' or '.join(names)}" if names else ""

    def _run_from(self, record: dict, step: Step, batch: Batch, prior: dict[str, str]) -> Run:
        before = self._remember(record, step, batch, prior)
        return Run(decode_namespace(record.get("after")), before)

    def _before_key(self, step: Step, batch: Batch, prior: dict[str, str]) -> tuple:
        return (id(batch), step.id, tuple((s.id, prior.get(s.id)) for s in self._earlier(step)))

    def namespace_before(self, step: Step, batch: Batch, prior: dict[str, str]) -> dict:
        """The namespace the candidate started from, as the child last reported it."""
        known = self._befores.get(self._before_key(step, batch, prior))
        return known[0] if known else {}

    def _partial_notes(self, step: Step, run: Run, notes: list[str]) -> None:
        for name in step.partials:
            if not isinstance(run.namespace.get(f"d{name}"), Tensor):
                closing = next(
                    (s.id for s in self.pack.gradient_steps[self.pack.index(step.id) + 1:]
                     if name in s.checks), "a later step")
                notes.append(
                    f"{name} is used twice; its gradient d{name} can be started here with the "
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
        batch = self.lesson.main
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

    def _grade(self, step: Step, run: Run, batch: Batch, prior: dict[str, str]
               ) -> list[TensorCheck]:
        grades = []
        names = [(t, False) for t in step.checks] + [(t, True) for t in step.partials]
        for tensor, partial in names:
            value = run.namespace.get(f"d{tensor}")
            if partial and not isinstance(value, Tensor):
                # Starting a first branch early is the notebook's way, not a requirement: the
                # tensor is graded in full where its last branch arrives.
                continue
            ref32 = batch.reference[(step.id, tensor)]
            ref64 = batch.reference64[(step.id, tensor)]
            if isinstance(value, (OddTensor, Foreign)):
                grades.append(_unusable(tensor, value, ref32, partial))
                continue
            # Parameters are held to what their update `p -= lr * dp` needs (see grading).
            g = grade(tensor, value, ref32, ref64, partial, tensor in self.lesson.params)
            if partial and not g.accepted:
                # Both branches typed at once are right: grade against the closing step.
                from tutor.grading import closing_grade

                closing = next((s.id for s in self.pack.gradient_steps[
                    self.pack.index(step.id) + 1:] if tensor in s.checks), None)
                if closing:
                    g = closing_grade(g, value, batch.reference[(closing, tensor)],
                                      batch.reference64[(closing, tensor)], closing)
            if isinstance(value, Tensor):
                self._diagnose(g, step, value, ref32, run, batch, prior)
            elif not g.message:
                g.message = f"d{tensor} is missing"
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
        role = " (its first branch, completed in a later step)" if g.partial else ""
        mistakes = self._mistakes_for(g.tensor, step, batch, prior)
        if g.verdict is Verdict.SHAPE:
            known = dx.matching_mistake(value, mistakes)
            g.diagnosis = known or dx.shape_diagnosis(g.tensor, value, ref)
            g.message = g.diagnosis.message
            return
        if g.accepted:
            g.message = rounding_note(g) + ("" if g.reference_step else role)
            return
        from tutor import derived
        from tutor.grading import as_graded

        value = as_graded(value, ref)  # a shape that fits is diagnosed on what it broadcasts to
        earlier = run.before.get(f"d{g.tensor}")
        g.diagnosis = dx.value_diagnosis(
            g.tensor,
            value,
            ref,
            batch.n,
            earlier if isinstance(earlier, Tensor) else None,
            mistakes,
            "\n".join(self.pack.line_for(t).source for t in step.lines),
        )
        if g.diagnosis is None and torch.isfinite(value).all():
            # Nobody catalogued this one: compare with wrong answers derived from the step.
            g.diagnosis = derived.explain(
                self.pack, step, g.tensor, value, ref, run.before, batch.n
            )
        pattern = dx.where_wrong(value, ref) if torch.isfinite(value).all() else ""
        g.message = (g.diagnosis.message if g.diagnosis else f"d{g.tensor} is wrong{role}") + (
            f" ({pattern})" if pattern else ""
        )
        if torch.isfinite(value).all():
            g.heatmap = heatmap(value.to(ref.dtype) - ref)

    def _mistakes_for(self, tensor, step, batch, prior) -> list[tuple]:
        """The step's catalogued mistakes about this tensor, each with a lazy evaluator."""
        return [
            (m, self._mistake_value(m, tensor, step, batch, prior))
            for m in step.mistakes
            if (m.tensor or step.checks[0]) == tensor
        ]

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
                    value = ns.get(f"d{tensor}")
                except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
                    value = None
                self._mistake_values[key] = value if isinstance(value, Tensor) else None
            return self._mistake_values[key]

        return evaluate

    def _check_mutations(
        self, step: Step, facts: dict, code: str, grades: list[TensorCheck], notes: list[str]
    ) -> None:
        """Earlier gradients must come out of a step as they went in; forward tensors too."""
        written = code_facts.of(code).bound
        by_grad = {g.grad: g for g in grades}
        for change in facts.get("changed", []):
            name = str(change.get("name"))
            if change.get("deleted"):
                notes.append(f"your code deleted {name}; it is back for the next check")
                continue
            if not name.startswith("d"):
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
            culprit.diagnosis = dx.diagnosis(
                "aliasing",
                f"your code also changed {name}, which an earlier step already checked: "
                f"{culprit.grad} and {name} are the same tensor in memory (an assignment like "
                f"`{culprit.grad} = {name}` copies no data), so the in-place update reached both. "
                f"Start {culprit.grad} from {name}.clone(), or update it out of place "
                f"(`{culprit.grad} = {culprit.grad} + ...`).",
            )
            culprit.message = culprit.diagnosis.message
        for grad, other in (facts.get("shared") or {}).items():
            if grad in by_grad:
                notes.append(
                    f"{grad} and {other} share memory: a later `+=` on one changes the "
                    "other. A .clone() keeps them apart."
                )

    def _heldout(self, step: Step, record: dict | None, timed_out: bool,
                 grades: list[TensorCheck], code: str = "") -> Heldout:
        batch = self.lesson.heldout
        out = Heldout(batch_size=batch.n)
        advice = "Is a batch size written in as a number? Use n or a tensor's .shape instead."
        if (code and record is not None and not record.get("error")
                and not _writes_the_batch_size(code, self.lesson.main.n, self.lesson.sizes)):
            # Only the batch changes between the two batches, and nothing in the code reads as
            # its size: the values made the difference, not a size.
            advice = ("Nothing in your code reads as the batch size written in, so the size is "
                      "not to blame: the rule holds for this batch's values only. Check the "
                      "parts whose effect is tiny here.")
        if record is None or record.get("error"):
            if record is None:
                reason = ("it ran out of time" if timed_out else "it did not finish")
            else:
                reason = f"it fails: {_clean_error(record['error']).message}"
            out.message = (f"right for this batch of {self.lesson.main.n}, but on a fresh "
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
                    parameter=g.tensor in self.lesson.params,
                )
                if not h.accepted and not (g.partial and value is None):
                    failures.append(f"{g.grad} ({h.verdict})")
            if failures:
                out.message = (
                    f"right for this batch of {self.lesson.main.n}, but wrong on a fresh batch "
                    f"of {batch.n}: {', '.join(failures)}. {advice}"
                )
        if out.message:
            _refuse(out, grades)
        return out

    def _figure(self, step: Step, run: Run) -> dict | None:
        if not step.figure:
            return None
        value = run.namespace[f"d{step.figure}"].detach().to("cpu", torch.float32)
        return {
            "title": f"d{step.figure}",
            "values": [[float(x) for x in row] for row in value],
            "row_sums_max_abs": float(value.sum(1).abs().max()),
            "targets": [int(y) for y in self.lesson.main.values["Yb"].cpu()],
        }


def _answer(outcome: isolate.Outcome) -> dict:
    """What a child's end means for the check: its answer, a timeout, or why it has none."""
    if outcome.status == "done" and isinstance(outcome.result, dict):
        return outcome.result
    if outcome.status == "timeout" or outcome.why in ("cpu", "killed"):
        return {"timeout": True, "records": {}}
    return {"timeout": False, "records": {}, "crashed": outcome.why}


def _usable(outcome: dict, first: dict | None, result: CheckResult, timeout: float) -> bool:
    """Whether the child answered for the first batch (or case) without an error; if not, the
    result says why."""
    if first is None:
        result.error = (timeout_error(timeout).error if outcome.get("timeout") else
                        _stopped(outcome))
        return False
    result.stdout = clean(first.get("stdout", ""))
    if first.get("error"):
        result.error = _clean_error(first["error"])
        return False
    return True


def _stopped(outcome: dict) -> CheckError:
    """The child ended without an answer (it crashed or was killed): an internal error."""
    why = clean(outcome.get("crashed") or "it ended without an answer", MAX_MESSAGE)
    return CheckError.internal(f"the sandbox stopped before answering: {why}")


def _unreadable() -> CheckError:
    return CheckError.internal("the sandbox sent back data that does not read as tensors; "
                                 "the check was not graded")


def _refuse(heldout: Heldout, grades: list[TensorCheck]) -> None:
    """The fresh re-check failed: the first row carries why."""
    heldout.passed = False
    grades[0].diagnosis = dx.diagnosis("heldout", heldout.message or "")
    grades[0].message = heldout.message or ""


def _writes_the_batch_size(code: str, n: int, sizes: dict) -> bool:
    """Whether a number in the code could be the lesson's batch size, or a count made from it
    (n - 1, 1/n, n times a size): the one thing the fresh batch changes besides the values."""
    counts = {n, n - 1, n + 1} | {n * v for v in sizes.values() if isinstance(v, int) and v > 1}
    said = code_facts.of(code)
    if said.tree is None:
        return True
    return any(abs(value - c) < 1e-9 or abs(value * c - 1) < 1e-6
               for value in said.numbers for c in counts)


def _scale_size(case: Case) -> int:
    """The count a mean divides by in this case, for the scale diagnosis ("a factor n")."""
    s = case.sizes
    if "N" in s:
        return s["N"]
    return s.get("B", 1) * s.get("T", 1) if ("B" in s or "T" in s) else 1


def _lesson_numbers(case: Case) -> str:
    numbers = sorted({v for v in case.sizes.values() if v > 1}, reverse=True)[:3]
    return " or ".join(str(n) for n in numbers) if numbers else "32"


def _unusable(tensor: str, value: OddTensor | Foreign, ref: Tensor, partial: bool,
              label: str | None = None) -> TensorCheck:
    """A verdict for a value that cannot be compared with autograd's at all."""
    g = TensorCheck(tensor, label or f"d{tensor}", list(ref.shape), partial=partial)
    if isinstance(value, OddTensor):
        g.verdict = Verdict.WRONG
        g.message = f"{g.grad} is {value.why}."
    else:
        g.message = (f"{g.grad} is a {value.type_name}, but it must be a tensor of shape "
                     f"{list(ref.shape)}" + ("" if label else f" like {tensor}"))
    return g


# The kinds of error a child may report; anything else it says is read as a runtime error.
_CHILD_KINDS = (ErrorKind.SYNTAX, ErrorKind.FORBIDDEN, ErrorKind.RUNTIME, ErrorKind.TIMEOUT,
                ErrorKind.MEMORY)


def _clean_error(payload: Any) -> CheckError:
    """An error from the child, shown as is but never trusted to be well formed."""
    if not isinstance(payload, dict):
        return CheckError.internal("the sandbox sent a malformed error")
    error = CheckError.from_dict(payload)
    if error.kind not in _CHILD_KINDS:
        error.kind = ErrorKind.RUNTIME
    error.message = clean(error.message, MAX_MESSAGE)
    return error
