"""The check of one candidate: run it on the lesson's batches, grade it, diagnose it.

The engine holds the lesson and autograd's gradients. Learner code never runs here: each check
goes to a confined child that replays the earlier steps and runs the candidate on the main and
the fresh batch (execution.py), then sends back plain tensors. The child is forked from this
process (sandbox/isolate.py) where that serves, or else a freshly started interpreter that gets
the plan without answers (sandbox/spawn.py): on a GPU, on Windows, or when asked for. Grading,
diagnosis and the held-out verdict happen here, on that data, in one pipeline for every kind of
step: what depends on the kind (the plan, the rows, the rule probe, the held-out data) is the
kind's check (tutor/core/kinds/). A check returns a typed `CheckResult`
(tutor/values/results.py); the
worker turns it into the plain data of docs/json.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import torch
from torch import Tensor

from tutor import devices
from tutor.code_facts import LESSON_TEXT
from tutor.config import Settings
from tutor.core import frame, probe
from tutor.core.candidate import CodeError, program, timeout_error
from tutor.core.execution import BatchPlan, CheckSpec, FunctionCheckSpec, run_spec
from tutor.core.functions import Case
from tutor.core.kinds import Checks, NotChecked, Unreadable
from tutor.core.kinds.function import FunctionCheck
from tutor.core.kinds.records import ChildAnswer, clean_error
from tutor.core.network import DeviceError, Network, data_text, resolve_device
from tutor.core.trace import Traces, Wanted, learner_upstream, written_out
from tutor.pack.flow import tensor_of
from tutor.pack.model import Pack, Step, find_pack, load_pack
from tutor.process import forkserver, isolate, spawn
from tutor.process.isolate import decode_tensor
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.sandbox.confine import prepare
from tutor.values.results import CheckError, CheckResult, Defined, ScratchResult, Traced

# How long past its wall-clock backstop (`Settings.backstop`: the learner's limit counts CPU
# time, the tutor's own work wall-clock time) a child may run before it is killed.
KILL_GRACE = 0.5
# What a child says the tutor's own time ran out for (`short`, tutor/core/clock.py), in words.
RAN_OUT = {"heldout": "the fresh batch", "probe": "the rule probe", "fresh": "the fresh sizes",
           "pictures": "the picture through time",
           "search": "the search for the smallest change to your code"}
# Started children kept waiting for the next checks: two, so that `check --all` and a quick
# re-check after a fix rarely wait for an interpreter to load torch.
SPARES = 2
# The longest the client is asked to wait for the lesson's own material for a step (its cases and
# pictures, built once, on the first check of the step): the time they took is all that counts
# in the end (Engine._build), so this only needs to exceed it on the slowest machine.
BUILD_ALLOWANCE = 120.0


def isolation_for(asked: str, device: torch.device) -> str:
    """How checks are kept apart on this device: "fork" or "spawn" (see sandbox/spawn.py)."""
    if asked == "auto":
        return "fork" if isolate.can_fork(device) else "spawn"
    if asked == "fork" and not isolate.can_fork(device):
        where = "Windows" if not hasattr(os, "fork") else f"the {device.type} device"
        raise DeviceError(f"isolation 'fork' cannot serve {where} (a forked child cannot use "
                          "it); use 'auto' or 'spawn'")
    return asked


class Engine:
    def __init__(self, settings: Settings | None = None, pack: Pack | None = None):
        self.settings = settings or Settings()
        self.pack = pack or load_pack(find_pack(self.settings.pack))
        self.device = resolve_device(self.settings.device)
        self.network = Network(self.pack, self.device, self.settings.seed)
        self.isolation = isolation_for(self.settings.isolation, self.device)
        prepare()
        # Built once here, not again in every child (the batches are cached properties).
        _ = self.network.main, self.network.heldout
        # How each kind of step is planned, graded and held out, with the caches it keeps.
        self.kinds = Checks(self.network, self.settings)
        for kind in self.kinds.each():
            # A refused answer's changed programs (tutor/core/smallest.py) run in a child too.
            kind.run_variants = self.run_variants
        self._lock = threading.RLock()
        self._spare: isolate.Child | None = None
        self._spawned: list[spawn.Spawned] = []
        # Forks the spawn path's children where the system allows it (started when needed).
        self._server = forkserver.Keeper(self.device.type, spawn.START_LIMIT)
        # Told how long a check may wait for its child to start (the worker tells its client).
        self.on_wait: Callable[[float], None] | None = None
        # What the tutor's own time ran out for in the check under way (words of RAN_OUT).
        self._ran_out: list[str] = []

    # -- the lesson as plain data ------------------------------------------------------------
    def info(self) -> dict:
        batch = self.network.main
        return {
            "device": devices.describe(self.device),
            "torch_version": torch.__version__.split("+")[0],
            "batch_size": batch.n,
            "heldout_batch_size": self.network.heldout.n,
            "parameters": self.network.n_params,
            "dataset": self.network.dataset.sizes,
            "lines": batch.lines,
            "isolation": self.isolation,
        }

    # -- running learner code ------------------------------------------------------------------
    def function_cases(self, step: Step) -> list[Case]:
        """A function step's cases with their expected outputs, built once."""
        check = self.kinds.of(step)
        assert isinstance(check, FunctionCheck), f"{step.id} is not a function step"
        return check.cases(step)

    def _scrub(self) -> None:
        """In the child, before learner code runs: forget every answer it could look for."""
        for batch in (self.network.main, self.network.heldout):
            batch.reference.clear()
            batch.reference64.clear()
            batch.gradients.clear()
        for s in self.pack.steps:
            object.__setattr__(s, "solution", "")
            object.__setattr__(s, "mistakes", ())
        for kind in self.kinds.each():
            kind.forget()

    def _spec(self, step: Step, code: str, prior: dict[str, str],
              compiled: bytes | None = None) -> CheckSpec | FunctionCheckSpec:
        """The child's work for this check, planned by the step's kind (tutor/core/kinds/)."""
        return self.kinds.of(step).plan(step, code, prior, compiled)

    def _in_child(self, request: dict, _send: Callable, _cancel: threading.Event) -> dict:
        """The child's whole life: plan from the lesson, forget the answers, run the code."""
        if request.get("trace") is not None:
            spec = self._trace_spec([(bool(o), str(c)) for o, c in request["trace"]],
                                    bool(request.get("own")))
            self._scrub()
            return run_spec(spec, False)
        spec = self._spec(self.pack.step(request["step"]), request["code"], request["prior"],
                          request.get("compiled"))
        if request.get("variants") is not None:
            spec.variants = tuple(request["variants"])
            spec.variant_seconds = float(request["seconds"])
        self._scrub()
        return run_spec(spec, bool(request.get("scratch")))

    def _fork(self) -> isolate.Child:
        return isolate.Child(self._in_child, cpu_seconds=self.settings.child_cpu_seconds,
                             memory_gb=self.settings.memory_limit_gb)

    def _start(self) -> spawn.Spawned:
        """A started child for the next check: forked by the fork server where it serves (one
        torch import for all checks), else a fresh interpreter of its own."""
        setup = {"device": str(self.device), "cpu_seconds": self.settings.child_cpu_seconds,
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

    def execute(self, step: Step, code: str, prior: dict[str, str], scratch: bool = False,
                compiled: bytes | None = None) -> dict:
        """Run the candidate in a confined child, forked or started for it. `compiled` is the
        candidate as the check already compiled it (compiled here when not given)."""
        if compiled is None:
            compiled = _compiled(code)
        limit = self.settings.backstop + KILL_GRACE
        built = self._build(step)
        if self.isolation == "spawn":
            return self._execute_spawned(self._spec(step, code, prior, compiled), scratch, limit)
        if built:
            self.close()  # children forked before know nothing of what was built
        child, self._spare = self._spare, None
        if child is None or not child.alive():
            child = self._fork()
        outcome = child.run({"step": step.id, "code": code, "prior": prior, "scratch": scratch,
                             "compiled": compiled}, timeout=limit)
        return _answer(outcome)

    def _build(self, step: Step) -> bool:
        """Build what planning `step` needs, once (`build_ahead`), off the check's clock: the
        lesson's own work, which no learner's code makes longer. The client is told to wait
        for it, and then how long it took, so that on a slow or busy machine the first check
        of a step is not taken for a hung worker (evaluator/client.py). True when something
        was built."""
        kind = self.kinds.of(step)
        if self.on_wait is None or kind.built(step):
            return kind.build_ahead(step)
        started = time.monotonic()
        self.on_wait(BUILD_ALLOWANCE)
        try:
            return kind.build_ahead(step)
        finally:
            self.on_wait(time.monotonic() - started - BUILD_ALLOWANCE)

    def run_variants(self, step: Step, code: str, prior: dict[str, str],
                     programs: list[bytes], seconds: float) -> dict:
        """Changed programs of the learner's code, compiled behind the policy and the guard, run
        in a confined child as a check runs (`execution.run_variants`): their values per batch,
        as plain data. Called while a check is graded; nothing of them runs here. All of it is the
        tutor's own work: a child that runs out of the tutor's time says so in the check's notes."""
        answer = self._variants(step, code, prior, programs, seconds)
        if answer.get("short") or (answer.get("timeout") and "variants" not in answer):
            self._ran_out.append("search")  # the child's own word, or killed from outside
        return answer

    def _variants(self, step: Step, code: str, prior: dict[str, str],
                  programs: list[bytes], seconds: float) -> dict:
        compiled = _compiled(code)
        # The tutor's own budget, and the learner's limit for replaying their earlier steps, as
        # in the child (execution.run_variants).
        limit = self.settings.tutor_seconds + self.settings.timeout + KILL_GRACE
        if self.isolation == "spawn":
            spec = self._spec(step, code, prior, compiled)
            spec.variants, spec.variant_seconds = tuple(programs), seconds
            return self._execute_spawned(spec, False, limit)
        child, self._spare = self._spare, None
        if child is None or not child.alive():
            child = self._fork()
        outcome = child.run({"step": step.id, "code": code, "prior": prior,
                             "compiled": compiled, "variants": list(programs),
                             "seconds": seconds}, timeout=limit)
        return _answer(outcome)

    def _execute_spawned(self, spec: CheckSpec | FunctionCheckSpec, scratch: bool,
                         limit: float) -> dict:
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
        # No random state goes along: every check's child seeds its own (execution.CHECK_SEED).
        outcome = child.run({"spec": spec, "scratch": scratch}, timeout=limit)
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
            compiled = program(code)
        except CodeError as exc:
            result.error = exc.error
            return result
        with self._lock:
            outcome = self.execute(step, code, prior or {}, scratch=True, compiled=compiled)
        if outcome.get("timeout"):
            result.error = timeout_error(self.settings.timeout).error
            return result
        if "stdout" not in outcome:
            result.error = _stopped(outcome.get("crashed"))
            return result
        result.stdout = clean(outcome.get("stdout", ""))
        result.error = clean_error(outcome["error"]) if outcome.get("error") else None
        result.defined = [
            Defined(clean(d.get("name", ""), 60), clean(d.get("what", ""), 200))
            for d in (outcome.get("defined") or [])[:100] if isinstance(d, dict)]
        return result

    # -- a whole program, traced ---------------------------------------------------------------
    def _trace_spec(self, cells: list[tuple[bool, str]], own: bool = False) -> CheckSpec:
        """The child's work for a trace: both batches' tensors, nothing replayed, no answers.
        `own`: the notebook in its own frame (tutor/core/frame.py): none of the lesson's
        tensors, only its data's text for the notebook's own loading of it."""
        if own:
            plan = BatchPlan("main", {LESSON_TEXT: self._data_text()}, [],
                             autograd=dict(getattr(self, "_own_gradients", {})))
            return CheckSpec("trace", "", (), [plan], self.settings.timeout,
                             trace_cells=tuple(cells), trace_own=True)
        # A copy of autograd's gradients: the child forgets the lesson's own (`_scrub`), and a
        # traced program's `.grad` reads these, never as the learner's own work.
        plans = [BatchPlan(name, batch.namespace(), [], autograd=dict(batch.gradients))
                 for name, batch in (("main", self.network.main),
                                     ("heldout", self.network.heldout))]
        # Both batches, with the recording's own cost, on the learner's limit (half each:
        # execution.run_trace), so the child's CPU limit holds as for a check.
        return CheckSpec("trace", "", (), plans, self.settings.timeout,
                         trace_cells=tuple(cells))

    def _data_text(self) -> str:
        """The lesson's data as text, read here (a check's child reads no file) and kept."""
        if not hasattr(self, "_text"):
            self._text = data_text(self.pack) or ""
        return self._text

    def trace_own(self, cells: list[tuple[bool, str]], step_ids: list[str]) -> Traced:
        """`trace` for a notebook whose forward pass the names do not find: its cells run in
        their own frame (its data, parameters and batch), the lesson's tensors found among its
        values by running the lesson's forward pass on what it made (tutor/core/frame.py), and
        each step's answer written out in the lesson's names, for an ordinary check."""
        trace = self._own_run(cells, {})
        framed = frame.found(self.network, trace) if trace is not None else None
        if framed is not None and trace.get("misses"):
            # Its code read autograd's gradient of its own tensors (`state.grad`, where the
            # lesson gives `dstate`): run again, with autograd's gradients of those the first
            # run found to be the lesson's, by the trace's numbers for them.
            given = frame.gradients_by_number(*framed)
            again = self._own_run(cells, given) if given else None
            framed = (frame.found(self.network, again) if again is not None else None) or framed
        if framed is None:
            return Traced()
        batch, read = framed
        graph = probe.Graph.of(self.network, batch)
        found: dict[str, list[str]] = {}
        exercises = {self.pack.step(sid).exercise for sid in step_ids}
        for step in self.pack.steps:
            if step.exercise not in exercises or not step.kind.of_forward_tensors \
                    or step.kind.trained:
                continue
            wanted = self._wanted(step, batch)
            wanted.theirs = learner_upstream(read.first, wanted, self._rule(step, wanted, graph))
            codes = written_out(read, wanted, wanted)
            if codes and step.id in step_ids:
                found[step.id] = codes
        return Traced(found, frame.own_names(read.first, set(self.network.params)))

    def _own_run(self, cells: list[tuple[bool, str]], gradients: dict) -> dict | None:
        """One run of a notebook in its own frame (`gradients`: what its `.grad` reads)."""
        limit = self.settings.backstop * 3 + KILL_GRACE
        self._data_text()  # before the child is forked: it cannot read the file
        self._own_gradients = gradients
        with self._lock:
            if self.isolation == "spawn":
                outcome = self._execute_spawned(self._trace_spec(cells, own=True), False, limit)
            else:
                outcome = _answer(self._fork().run(
                    {"trace": [list(c) for c in cells], "own": True}, timeout=limit))
        traces = outcome.get("traces") if isinstance(outcome, dict) else None
        if not isinstance(traces, list) or len(traces) != 1:
            return None
        traces[0]["values"] = {k: decode_tensor(v) for k, v in traces[0]["values"].items()}
        return traces[0]

    def trace(self, cells: list[tuple[bool, str]], step_ids: list[str]) -> Traced:
        """Each step's gradients as a program computes them (tutor/core/trace.py): its cells
        in order (each with whether it is the exercise's own), run traced in a confined child
        on both batches; for each of `step_ids` whose gradients the exercise's own cells
        compute, code that computes them from the step's inputs (best first), for an ordinary
        check. Steps not found are left out."""
        limit = self.settings.backstop * 3 + KILL_GRACE
        with self._lock:
            if self.isolation == "spawn":
                outcome = self._execute_spawned(self._trace_spec(cells), False, limit)
            else:
                outcome = _answer(self._fork().run({"trace": [list(c) for c in cells]},
                                                   timeout=limit))
        traces = outcome.get("traces") if isinstance(outcome, dict) else None
        if not isinstance(traces, list) or len(traces) != 2:
            return Traced()
        for t in traces:
            t["values"] = {k: decode_tensor(v) for k, v in t["values"].items()}
        main, fresh = self.network.main, self.network.heldout
        read = Traces.of(traces[0], traces[1], (main.n, fresh.n))
        if read is None:
            return Traced()
        found = {}
        graphs = (probe.Graph.of(self.network, main), probe.Graph.of(self.network, fresh))
        # Every step of the exercises asked about, in order: where the learner's own upstream
        # gradient was wrong, a step is found from what an earlier step took for it.
        exercises = {self.pack.step(sid).exercise for sid in step_ids}
        for step in self.pack.steps:
            if step.exercise not in exercises or not step.kind.of_forward_tensors \
                    or step.kind.trained:
                continue
            wanted = []
            for batch, graph, side in ((main, graphs[0], read.first),
                                       (fresh, graphs[1], read.second)):
                w = self._wanted(step, batch)
                w.theirs = learner_upstream(side, w, self._rule(step, w, graph))
                wanted.append(w)
            codes = written_out(read, *wanted)
            if codes and step.id in step_ids:
                found[step.id] = codes
        return Traced(found)

    def _rule(self, step: Step, wanted: Wanted, graph: probe.Graph
              ) -> Callable[[dict[str, Tensor]], dict[str, Tensor] | None]:
        """The step's answers (and first branches) by its lines' rule when each gradient it is
        given arrives changed by `shift[name]`: autograd's values plus the VJP of the change
        through the step's lines, and the change itself for a first branch it adds to."""
        sources = {line.target: line.source for line in self.pack.forward_lines}
        arriving = [t for _, t in probe.arriving(step)]

        def rule(shift: dict[str, Tensor]) -> dict[str, Tensor] | None:
            through = [t for t in arriving if t in shift]
            out = {}
            for name, right in {**wanted.answers, **wanted.partials}.items():
                value = right.detach().float().cpu()
                if through:
                    delta = graph.vjp(through, [shift[t] for t in through], name,
                                      torch.float32, name in wanted.partials, sources)
                    if delta is None or delta.shape != value.shape:
                        return None
                    value = value + delta.detach().float().cpu()
                if name in shift and name not in wanted.partials:
                    value = value + shift[name]  # the first branch it adds to was off too
                out[name] = value
            return out

        return rule

    def _wanted(self, step: Step, batch) -> Wanted:
        """What the step answers (its checks; a first branch it starts only where the program
        writes it) and what it is given, by autograd, on `batch`."""
        answers = {t: batch.reference[(step.id, t)] for t in step.checks
                   if (step.id, t) in batch.reference}
        # A line's gradient arrives from outside the step unless another of its lines reads
        # that line's output (`i = torch.sigmoid(ai)` in a fused step: `dai` is its own work).
        inner = {op for line in self.pack.forward_lines if line.target in step.lines
                 for op in line.operands}
        given = {t: batch.gradients[t] for t in step.lines
                 if t in batch.gradients and t not in inner}
        given |= {g: batch.given[(step.id, g)] for g in step.given
                  if (step.id, g) in batch.given}
        flow = self.pack.flow
        for name in flow.adds(step):  # the first branch an earlier step started
            key = (flow.starter(name, step.exercise), tensor_of(name))
            if key in batch.reference:
                given[key[1]] = batch.reference[key]
        partials = {t: batch.reference[(step.id, t)] for t in step.partials
                    if (step.id, t) in batch.reference}
        before = self.pack.steps[:self.pack.index(step.id)]
        earlier = {t: batch.reference[(s.id, t)] for s in before
                   if s.exercise == step.exercise and s.kind.of_forward_tensors
                   for t in s.checks if (s.id, t) in batch.reference
                   and t not in given and t not in answers and t not in partials}
        return Wanted(answers, given, partials, earlier=earlier)

    def _check(self, step_id: str, code: str, prior: dict[str, str]) -> CheckResult:
        """One pipeline for every kind of step (docs/architecture.md, the path of one check):
        compile, plan and execute in a child, grade, confirm the rule, hold out, figure. What
        depends on the kind is the kind's (tutor/core/kinds/)."""
        step = self.pack.step(step_id)
        kind = self.kinds.of(step)
        result = CheckResult(step.id, passed=False, device=devices.describe(self.device))
        self._ran_out = []
        try:
            kind.admit(step)
            # Parsed, refused or compiled once, here, before any process starts; the child loads
            # these bytes.
            compiled = program(code)
        except (NotChecked, CodeError) as exc:
            result.error = exc.error
            return result
        # Planned by the kind, in the child or here.
        outcome = ChildAnswer.of(self.execute(step, code, prior, compiled=compiled))
        first = outcome.record(kind.first(step))
        if not _usable(outcome, first, result, self.settings.timeout):
            return result
        try:
            graded = kind.grade(step, code, prior, outcome, result)
        except Unreadable as exc:
            result.error = exc.error
            return result
        passed = graded.passed and kind.confirm(step, code, outcome, graded)
        if passed:
            # None where the tutor's own time ran out before the fresh data: the verdict stands.
            result.heldout = kind.hold_out(step, code, outcome, graded)
            passed = result.heldout is None or result.heldout.passed
        result.checks = graded.rows
        result.passed = passed
        if passed and (first or {}).get("estimates"):  # seen in the run (core/quotient.py)
            result.numeric = True
            result.notes.append(
                "Your code estimates the derivative from the function's values (a difference "
                "quotient, as a numerical gradient check does) instead of working it out: the "
                "numbers are right, and no derivative is written. That is the check's job, not "
                "the exercise's; a course may refuse it (`grade --refuse-numeric`).")
        if not passed:
            # Wrong for this network: whether it is the line's rule is not the question.
            for row in result.checks:
                row.rule = None
        result.figure = kind.figure(step, graded, passed)
        result.notes += _ran_out_notes([outcome.short, *self._ran_out], passed)
        return result


def _compiled(code: str) -> bytes | None:
    """The candidate as the check compiled it (cached), for the child to load; None where it
    does not compile (the child then says why, as it would have)."""
    try:
        return program(code)
    except CodeError:
        return None


def _answer(outcome: isolate.Outcome) -> dict:
    """What a child's end means for the check: its answer, a timeout, or why it has none."""
    if outcome.status == "done" and isinstance(outcome.result, dict):
        return outcome.result
    if outcome.status == "timeout" or outcome.why in ("cpu", "killed"):
        return {"timeout": True, "records": {}}
    return {"timeout": False, "records": {}, "crashed": outcome.why}


# What only a right answer would have been held to: for a wrong one, nothing is missing there.
_ONLY_IF_RIGHT = ("heldout", "probe", "fresh")


def _ran_out_notes(words: list[str | None], passed: bool) -> list[str]:
    """A note for each part of the tutor's own work its time ran out for: never the learner's
    fault, and the verdict of the runs that finished stands."""
    said = dict.fromkeys(w for w in words if w in RAN_OUT
                         and (passed or w not in _ONLY_IF_RIGHT))
    return [f"the tutor ran out of its own time for {RAN_OUT[w]}; the verdict stands without it"
            for w in said]


def _usable(outcome: ChildAnswer, first: dict | None, result: CheckResult, timeout: float
            ) -> bool:
    """Whether the child answered for the first batch (or case) without an error; if not, the
    result says why."""
    if first is None:
        result.error = (timeout_error(timeout).error if outcome.timeout else
                        _stopped(outcome.crashed))
        return False
    result.stdout = clean(first.get("stdout", ""))
    if first.get("error"):
        result.error = clean_error(first["error"])
        return False
    return True


def _stopped(crashed: str | None) -> CheckError:
    """The child ended without an answer (it crashed or was killed): an internal error."""
    why = clean(crashed or "it ended without an answer", MAX_MESSAGE)
    return CheckError.internal(f"the sandbox stopped before answering: {why}")
