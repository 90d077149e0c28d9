"""The check of one candidate: run it on the lesson's batch, grade it, diagnose it, re-check it.

This is the in-process core; the sandbox worker wraps it in a separate process with a time limit,
and the CLI and TUI talk to that worker. Results are plain data (the JSON contract of DESIGN.md).
"""

from __future__ import annotations

import ast
import builtins
import copy
import io
import math
import signal
import time
import traceback
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tutor import diagnosis as dx
from tutor.config import Settings
from tutor.grading import Grade, grade, heatmap, rounding_note
from tutor.lesson import Batch, Lesson, resolve_device
from tutor.packs import Pack, Step, load_pack
from tutor.sandbox.modules import safe_view
from tutor.sandbox.policy import inspect

Tensor = torch.Tensor
CODE_FILE = "<your code>"
MAX_STDOUT = 20_000

# What learner code may call without importing: enough for loops, shapes and printing.
SAFE_BUILTINS = {
    name: getattr(builtins, name)
    for name in (
        "abs all any bool dict divmod enumerate filter float format frozenset int isinstance "
        "issubclass iter len list map max min next pow range repr reversed round set slice "
        "sorted str sum tuple zip Ellipsis True False None ArithmeticError AssertionError "
        "AttributeError Exception IndexError KeyError NameError RuntimeError TypeError "
        "ValueError ZeroDivisionError"
    ).split()
}


SANDBOX_MODULES = {"torch": safe_view(torch), "F": safe_view(F), "math": math}


def sandbox_globals(out: io.StringIO) -> dict:
    """The modules and builtins learner code runs with; `print` writes to `out`, up to a cap."""

    def captured_print(*args, sep=" ", end="\n", **_):
        room = MAX_STDOUT - out.tell()
        if room > 0:
            out.write((sep.join(str(a) for a in args) + end)[:room])

    return {**SANDBOX_MODULES, "__builtins__": {**SAFE_BUILTINS, "print": captured_print}}


class CodeError(Exception):
    """The learner's code could not be run to the end; `payload` is the JSON error object."""

    def __init__(self, kind: str, message: str, line: int | None = None, col: int | None = None):
        super().__init__(message)
        self.payload = {"kind": kind, "message": message, "line": line, "col": col}


class CheckTimeout(Exception):
    pass


def compile_candidate(code: str):
    """Parse, apply the policy, compile. Raises CodeError for syntax errors and refusals."""
    try:
        tree = ast.parse(code, CODE_FILE)
        refusal = inspect(tree)
        if refusal:
            raise CodeError("forbidden", refusal.message, refusal.line, refusal.col)
        # Some errors (a starred expression alone, `return` outside a function) only show here.
        return compile(tree, CODE_FILE, "exec")
    except (SyntaxError, ValueError) as exc:
        lineno, offset = getattr(exc, "lineno", None), getattr(exc, "offset", None)
        where = f"line {lineno}, column {offset}" if lineno else "your code"
        message = getattr(exc, "msg", None) or str(exc)
        raise CodeError("syntax", f"{where}: {message}", lineno, offset) from None


def _timeout_error(seconds: float) -> CodeError:
    return CodeError(
        "timeout",
        f"your code was stopped after {seconds:g} s. Is there a loop that never ends? The "
        "gradients here take milliseconds.",
    )


def _runtime_error(exc: BaseException, code: str) -> CodeError:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == CODE_FILE]
    line = frames[-1].lineno if frames else None
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text:
        return CodeError(
            "memory",
            (f"line {line}: " if line else "")
            + "that needs more memory than the sandbox allows. The gradients here are small "
            "tensors; check the sizes you are creating.",
            line,
        )
    source = code.splitlines()[line - 1].strip() if line and line <= len(code.splitlines()) else ""
    hint = ""
    if "cannot be multiplied" in text or "size of tensor a" in text:
        hint = (
            " Compare the shapes on the forward line: a matmul needs the inner "
            "dimensions to agree, so one operand may need .T or the order swapped."
        )
    elif isinstance(exc, NameError):
        hint = " Only the forward tensors, the parameters and earlier gradients are defined."
    where = f"line {line}: `{source}`\n" if line else ""
    return CodeError("runtime", f"{where}{type(exc).__name__}: {text}.{hint}", line)


@dataclass
class Run:
    """What executing a candidate on one batch produced."""

    namespace: dict
    before: dict
    stdout: str


def _alarm(_signum, _frame):
    raise CheckTimeout()


class Engine:
    def __init__(self, settings: Settings | None = None, pack: Pack | None = None):
        self.settings = settings or Settings()
        self.pack = pack or load_pack()
        self.device = resolve_device(self.settings.device)
        self.lesson = Lesson(self.pack, self.device, self.settings.seed)
        self._replays: dict[tuple, tuple[dict, list[str]]] = {}
        self._mistake_values: dict[tuple, Tensor | None] = {}
        # Python loops can be interrupted from inside; the client's hard kill is the backstop.
        self._deadline: float | None = None
        self._can_alarm = hasattr(signal, "setitimer")
        if self._can_alarm:
            try:
                signal.signal(signal.SIGALRM, _alarm)
            except ValueError:  # not the main thread (e.g. tests in threads)
                self._can_alarm = False

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
        }

    # -- namespaces ----------------------------------------------------------------------------
    def namespace_before(
        self, step: Step, batch: Batch, prior: dict[str, str]
    ) -> tuple[dict, list[str]]:
        """Forward tensors plus the gradients of the earlier steps, replayed as in the notebook."""
        earlier = self._earlier(step)
        key = (id(batch), step.id, tuple((s.id, prior.get(s.id)) for s in earlier))
        if key not in self._replays:
            ns = batch.namespace()
            for name in step.given:
                ns[f"d{name}"] = batch.given[(step.id, name)].clone()
            notes: list[str] = []
            for s in earlier:
                code = prior.get(s.id)
                if code is not None:
                    trial = copy_namespace(ns)
                    try:
                        self._exec(compile_candidate(code), trial, io.StringIO())
                        ns = trial
                        notes += self._stand_in_partials(s, ns, batch)
                        continue
                    except (CodeError, CheckTimeout, Exception) as exc:  # noqa: BLE001
                        notes.append(
                            f"your saved code for {s.id} failed when replayed "
                            f"({exc}); its reference solution was used instead"
                        )
                self._exec(compile_candidate(s.solution), ns, io.StringIO())
            self._replays[key] = (ns, notes)
        return self._replays[key]

    def _stand_in_partials(self, step: Step, ns: dict, batch: Batch) -> list[str]:
        """A first branch the learner did not start is taken from autograd, and said so, so a
        later `+=` still works; their own second branch is what gets graded there."""
        notes = []
        for name in step.partials:
            if not isinstance(ns.get(f"d{name}"), Tensor):
                ns[f"d{name}"] = batch.reference[(step.id, name)].clone()
                notes.append(
                    f"your code for {step.id} does not start d{name}, the first branch of "
                    f"{name}; autograd's first branch stands in for it"
                )
        return notes

    def _earlier(self, step: Step) -> list[Step]:
        if not step.replay:
            return []
        steps = [s for s in self.pack.gradient_steps if s.exercise == step.exercise]
        return steps[: steps.index(step)]

    def _exec(self, compiled, ns: dict, out: io.StringIO) -> None:
        ns.update(sandbox_globals(out))
        if self._can_alarm:
            # One budget per check (the run, the fresh-batch re-run and any replay together).
            budget = self.settings.timeout if self._deadline is None else (
                self._deadline - time.monotonic())
            if budget <= 0:
                raise CheckTimeout()
            signal.setitimer(signal.ITIMER_REAL, budget)
        try:
            # Warnings from the learner's code (a deprecated .T on a 1-D tensor, say) are part of
            # what they should see, next to their own prints, not on the worker's stderr.
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                exec(compiled, ns)
        finally:
            for w in locals().get("caught") or []:
                if w.filename == CODE_FILE and out.tell() < MAX_STDOUT:
                    text = str(w.message).split(" (Triggered internally")[0]
                    out.write(f"warning (line {w.lineno}): {text}\n")
            if self._can_alarm:
                signal.setitimer(signal.ITIMER_REAL, 0)
            ns.pop("__builtins__", None)

    def run(self, step: Step, compiled, code: str, batch: Batch, prior: dict[str, str]) -> Run:
        base, _ = self.namespace_before(step, batch, prior)
        ns = copy_namespace(base)
        out = io.StringIO()
        try:
            self._exec(compiled, ns, out)
        except CheckTimeout:
            raise _timeout_error(self.settings.timeout) from None
        except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
            err = _runtime_error(exc, code)
            err.payload["stdout"] = out.getvalue()
            raise err from None
        return Run(ns, base, out.getvalue())

    # -- the check -----------------------------------------------------------------------------
    def check(self, step_id: str, code: str, prior: dict[str, str] | None = None) -> dict:
        self._deadline = time.monotonic() + self.settings.timeout
        try:
            return self._check(step_id, code, prior)
        except CheckTimeout:  # the budget ran out outside the candidate's own run (a replay)
            return {
                "step": self.pack.step(step_id).id, "passed": False, "device": str(self.device),
                "checks": [], "heldout": None, "stdout": "", "notes": [], "figure": None,
                "error": _timeout_error(self.settings.timeout).payload,
            }
        finally:
            self._deadline = None

    def _check(self, step_id: str, code: str, prior: dict[str, str] | None) -> dict:
        step = self.pack.step(step_id)
        prior = prior or {}
        result: dict = {
            "step": step.id,
            "passed": False,
            "device": str(self.device),
            "checks": [],
            "heldout": None,
            "error": None,
            "stdout": "",
            "notes": [],
            "figure": None,
        }
        if step.is_training:
            result["error"] = {
                "kind": "usage",
                "message": "the training step is run with `backprop-tutor train`, not checked",
                "line": None,
                "col": None,
            }
            return result
        try:
            compiled = compile_candidate(code)
            batch = self.lesson.main
            run = self.run(step, compiled, code, batch, prior)
        except CodeError as exc:
            result["stdout"] = exc.payload.pop("stdout", "")
            result["error"] = exc.payload
            return result
        result["stdout"] = run.stdout
        result["notes"] += self.namespace_before(step, batch, prior)[1]
        grades = self._grade(step, run, batch, prior)
        self._check_mutations(step, run, code, grades, result["notes"])
        for name in step.partials:
            if not isinstance(run.namespace.get(f"d{name}"), Tensor):
                closing = next(
                    (s.id for s in self.pack.gradient_steps[self.pack.index(step.id) + 1 :]
                     if name in s.checks), "a later step")
                result["notes"].append(
                    f"{name} is used twice; its gradient d{name} can be started here with the "
                    f"branch from this line (it is graded in full at {closing}). Until you do, "
                    "autograd's first branch stands in for it."
                )
        result["checks"] = [g.to_dict() for g in grades]
        passed = all(g.accepted and not g.diagnosis for g in grades)
        if passed:
            result["heldout"] = self._heldout(step, compiled, code, prior, grades)
            passed = result["heldout"]["passed"]
            result["checks"] = [g.to_dict() for g in grades]
        result["passed"] = passed
        if passed:
            result["figure"] = self._figure(step, run)
        return result

    def _grade(self, step: Step, run: Run, batch: Batch, prior: dict[str, str]) -> list[Grade]:
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
            g = grade(tensor, value, ref32, ref64, partial=partial)
            if isinstance(value, Tensor):
                self._diagnose(g, step, value, ref32, run, batch, prior)
            elif not g.message:
                g.message = f"d{tensor} is missing"
            grades.append(g)
        return grades

    def _diagnose(
        self,
        g: Grade,
        step: Step,
        value: Tensor,
        ref: Tensor,
        run: Run,
        batch: Batch,
        prior: dict[str, str],
    ) -> None:
        role = " (its first branch, completed in a later step)" if g.partial else ""
        mistakes = self._mistakes_for(g.tensor, step, batch, prior)
        if g.verdict == "shape":
            known = dx.matching_mistake(value, mistakes)
            g.diagnosis = known or dx.shape_diagnosis(g.tensor, value, ref)
            g.message = g.diagnosis["message"]
            return
        if g.accepted:
            g.message = rounding_note(g) + role
            return
        earlier = run.before.get(f"d{g.tensor}")
        g.diagnosis = dx.value_diagnosis(
            g.tensor,
            value,
            ref,
            batch.n,
            earlier if isinstance(earlier, Tensor) else None,
            mistakes,
        )
        pattern = dx.where_wrong(value, ref) if torch.isfinite(value).all() else ""
        g.message = (g.diagnosis["message"] if g.diagnosis else f"d{g.tensor} is wrong{role}") + (
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
        """Lazily evaluate a catalogued mistake on the same namespace as the learner's code."""

        def evaluate() -> Tensor | None:
            base, _ = self.namespace_before(step, batch, prior)
            key = (id(base), m.code, tensor)  # the same mistake on the same namespace
            if key not in self._mistake_values:
                ns = copy_namespace(base)
                try:
                    self._exec(compile_candidate(m.code), ns, io.StringIO())
                    value = ns.get(f"d{tensor}")
                except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
                    value = None
                self._mistake_values[key] = value if isinstance(value, Tensor) else None
            return self._mistake_values[key]

        return evaluate

    def _check_mutations(
        self, step: Step, run: Run, code: str, grades: list[Grade], notes: list[str]
    ) -> None:
        """Earlier gradients must come out of a step as they went in; forward tensors too."""
        written = {
            n.id
            for n in ast.walk(ast.parse(code))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
        }
        checked = {f"d{t}" for t in step.checks + step.partials}
        for name, before in run.before.items():
            after = run.namespace.get(name)
            if not isinstance(before, Tensor) or name in checked:
                continue
            changed = (
                not isinstance(after, Tensor)
                or after.shape != before.shape
                or not torch.equal(after, before)
            )
            if not changed:
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
            culprit = next(
                (
                    g
                    for g in grades
                    if isinstance(run.namespace.get(g.grad), Tensor)
                    and _shares_memory(run.namespace[g.grad], after)
                ),
                grades[0],
            )
            culprit.diagnosis = dx.diagnosis(
                "aliasing",
                f"your code also changed {name}, which an earlier step already checked: "
                f"{culprit.grad} and {name} are the same tensor in memory (an assignment like "
                f"`{culprit.grad} = {name}` copies no data), so the in-place update reached both. "
                f"Start {culprit.grad} from {name}.clone(), or update it out of place "
                f"(`{culprit.grad} = {culprit.grad} + ...`).",
            )
            culprit.message = culprit.diagnosis["message"]
        for g in grades:
            value = run.namespace.get(g.grad)
            if not isinstance(value, Tensor):
                continue
            for name, other in run.namespace.items():
                if (
                    name != g.grad
                    and name.startswith("d")
                    and isinstance(other, Tensor)
                    and other.shape == value.shape
                    and _shares_memory(value, other)
                ):
                    notes.append(
                        f"{g.grad} and {name} share memory: a later `+=` on one changes the "
                        "other. A .clone() keeps them apart."
                    )
                    break

    def _heldout(
        self, step: Step, compiled, code: str, prior: dict[str, str], grades: list[Grade]
    ) -> dict:
        batch = self.lesson.heldout
        out = {"passed": True, "batch_size": batch.n, "message": None}
        try:
            run = self.run(step, compiled, code, batch, prior)
            failures = []
            for g in grades:
                value = run.namespace.get(g.grad)
                h = grade(
                    g.tensor,
                    value,
                    batch.reference[(step.id, g.tensor)],
                    batch.reference64[(step.id, g.tensor)],
                )
                if not h.accepted:
                    failures.append(f"{g.grad} ({h.verdict})")
            if failures:
                out["message"] = (
                    f"right for this batch of {self.lesson.main.n}, but wrong on a fresh batch "
                    f"of {batch.n}: {', '.join(failures)}. Is a batch size written in as a "
                    "number? Use n or a tensor's .shape instead."
                )
        except CodeError as exc:
            out["message"] = (
                f"right for this batch of {self.lesson.main.n}, but on a fresh batch of "
                f"{batch.n} it fails: {exc.payload['message']} Is a batch size written in as a "
                "number? Use n or a tensor's .shape instead."
            )
        if out["message"]:
            out["passed"] = False
            grades[0].diagnosis = dx.diagnosis("heldout", out["message"])
            grades[0].message = out["message"]
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


def copy_namespace(ns: dict) -> dict:
    """Fresh copies of every tensor, so a candidate cannot touch what later checks use.

    One deepcopy memo for the whole namespace keeps aliasing exactly as the learner made it: two
    names for one tensor stay one tensor, a view stays a view of its base.
    """
    memo: dict = {}
    out = {}
    for name, value in ns.items():
        if isinstance(value, types.ModuleType):
            out[name] = value
            continue
        try:
            out[name] = copy.deepcopy(value, memo)
        except Exception:  # noqa: BLE001 - uncopyable learner objects are shared as they are
            out[name] = value
    return out


def _shares_memory(a: Tensor, b: Tensor) -> bool:
    try:
        return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    except RuntimeError:
        return False
