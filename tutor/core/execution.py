"""The learner's side of a check: replay the earlier steps, run the candidate, report facts.

This is what runs inside the confined child (or, where there is no fork, inside the worker with
torch's state restored afterwards). It sees the forward tensors, what the earlier steps need and
the candidate; autograd's gradients stay with the engine, which grades the plain data this returns.
"""

from __future__ import annotations

import ast
import marshal
import types
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch

from tutor import code_facts, devices
from tutor.config import DEFAULT_TUTOR_SECONDS
from tutor.core import quotient
from tutor.core.candidate import (
    CodeError,
    Output,
    compile_candidate,
    copy_namespace,
    earlier_file,
    execute,
    load,
    runtime_error,
    shares_memory,
)
from tutor.core.clock import Budget, CheckTimeout, Phase, TutorTimeout, watching
from tutor.core.probe import ProbeSpec, cotangents
from tutor.core.trace import Recorder, note_names, traced
from tutor.pack.flow import gradient, tensor_of
from tutor.process.isolate import (
    MAX_KEPT,
    MAX_MESSAGE,
    TooLarge,
    check_kept,
    encode_shared,
    encode_tensor,
    megabytes,
)

Tensor = torch.Tensor

cached_compile = lru_cache(maxsize=512)(compile_candidate)


def candidate(spec: CheckSpec | FunctionCheckSpec, code: str) -> types.CodeType:
    """`code` compiled behind the guard: the worker's own compilation where `code` is the
    spec's candidate and the worker sent it along, else compiled here (once per process)."""
    if spec.compiled is not None and code == spec.code:
        return load(spec.compiled)
    return cached_compile(code)


@dataclass
class Replay:
    """One earlier step, replayed as in the notebook: the learner's accepted code, or ours."""

    step_id: str
    code: str | None
    solution: str
    stand_ins: dict[str, Tensor] = field(default_factory=dict)  # first branches (see engine)
    # Where the pack holds no solution (a student's build): what it would leave, from autograd.
    answers: dict[str, Tensor] = field(default_factory=dict)

    def stand_in_for_solution(self, ns: dict) -> None:
        """What the step's reference leaves, without it: autograd's gradients of its tensors."""
        for name, value in {**self.answers, **self.stand_ins}.items():
            ns[gradient(name)] = value.clone()


@dataclass
class BatchPlan:
    name: str  # "main" or "heldout"
    namespace: dict
    replays: list[Replay]
    notes: list[str] = field(default_factory=list)  # said when this namespace was first replayed
    known: bool = False  # the engine already has this namespace: no need to send it back
    mention: tuple[str, ...] = ()  # tensors whose stand-in first branch is worth a note here
    # A trace's: autograd's gradient of each forward tensor, which the program's `.grad` of
    # that tensor reads (`dstate = state.grad`, as a lesson that gives `dstate` means).
    autograd: dict = field(default_factory=dict)


@dataclass
class CheckSpec:
    step_id: str
    code: str
    graded: tuple[str, ...]  # the tensors whose gradients are graded (checks, then partials)
    batches: list[BatchPlan]
    timeout: float  # the learner's limit: CPU seconds of their code (tutor/core/clock.py)
    probe: ProbeSpec | None = None  # the rule probe, run on the first batch (tutor/core/probe.py)
    compiled: bytes | None = None  # the candidate as the worker compiled it (candidate.program)
    # Changed programs of the learner's code (tutor/core/smallest.py), compiled by the worker as it
    # compiles a candidate: when given, the child runs these instead of the check (`run_variants`).
    variants: tuple[bytes, ...] | None = None
    variant_seconds: float = 2.0  # CPU seconds they may take together: a backstop (smallest.py)
    # The tutor's own wall-clock budget for what follows the first batch (`run_check`).
    tutor_seconds: float = DEFAULT_TUTOR_SECONDS
    # When set, the child traces a whole program instead of checking (`run_trace`): its cells
    # in order, each with whether it is the exercise's own.
    trace_cells: tuple[tuple[bool, str], ...] | None = None
    # A notebook run in its own frame (its own data, parameters and forward pass, none of the
    # lesson's tensors): every value kept, a statement that fails lost alone (trace.py).
    trace_own: bool = False


# -- values as plain data --------------------------------------------------------------------
_PLAIN_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
                 torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def odd_kind(t: Tensor) -> str | None:
    """Why a tensor cannot be graded as a gradient, or None for an ordinary dense tensor."""
    if type(t) is not torch.Tensor:
        return (f"a {type(t).__name__}, a subclass of torch.Tensor; a gradient must be a plain "
                "tensor")
    if t.is_meta:
        return "a meta tensor, which has a shape but no values"
    if t.layout != torch.strided:
        return f"a {str(t.layout).replace('torch.', '')} tensor; use a dense tensor"
    if t.is_quantized:
        return "a quantized tensor; a gradient needs full float values"
    if t.is_complex():
        return "a complex tensor, but the gradient of a real tensor is real"
    if t.dtype not in _PLAIN_DTYPES:
        return f"a {str(t.dtype).replace('torch.', '')} tensor, too coarse to grade; use float32"
    return None


# No gradient of a lesson comes near this many entries; a tensor that does is not sent back.
MAX_ELEMENTS = 4_000_000


def encode_value(value: Any) -> tuple:
    if isinstance(value, Tensor):
        why = odd_kind(value)
        if why is None and value.numel() > MAX_ELEMENTS:
            why = (f"a tensor of {value.numel():,} entries with shape {list(value.shape)}, far "
                   "larger than any gradient here")
        if why is None:
            try:
                return encode_tensor(value.resolve_conj().resolve_neg())
            except (RuntimeError, NotImplementedError, TypeError) as exc:
                why = f"a tensor that cannot be read back ({str(exc).splitlines()[0][:100]})"
        return ("odd", why)
    if value is Ellipsis:
        return ("ellipsis",)
    return ("object", type(value).__name__)


def encode_namespace(ns: dict, names: set[str]) -> dict[str, tuple]:
    return {k: encode_value(v) for k, v in ns.items() if k in names}


# -- replay and run --------------------------------------------------------------------------
def _same_plain(a: object, b: object) -> bool:
    """Equal numbers or strings (`n = Xb.shape[0]` binds `n` to what it was)."""
    plain = (int, float, str, bool)
    return isinstance(a, plain) and isinstance(b, plain) and a == b


def _restored(lesson: dict, held: dict[str, int], before: dict, after: dict, step_id: str
              ) -> list[str]:
    """A replayed step's code that rebinds a name of the lesson (a forward tensor, a parameter,
    a size: `h = 0.5`) would hand that to every later step: each such name gets back what it was
    before the step, and the learner is told. Gradients are the step's to write. `held`: the
    identity of what each name held when the step's code started (on the copy it ran on)."""
    rebound = [k for k in lesson if tensor_of(k) is None and k in after and k in before
               and id(after[k]) != held.get(k) and not k.startswith("__")
               and not _same_plain(after[k], before[k])]
    for k in rebound:
        after[k] = before[k]
    if not rebound:
        return []
    names = ", ".join(f"`{k}`" for k in rebound[:4]) + (" ..." if len(rebound) > 4 else "")
    return [f"your saved code for {step_id} binds {names}, a name of the lesson's forward "
            "pass; later steps see the forward pass's own"]


def _replay(plan: BatchPlan, budget: Budget) -> tuple[dict, list[str]]:
    ns = copy_namespace(plan.namespace)
    notes = list(plan.notes)
    for r in plan.replays:
        if r.code is not None:
            trial = copy_namespace(ns)
            held = {k: id(v) for k, v in trial.items()}  # what each name held going in
            try:
                execute(cached_compile(r.code, earlier_file(r.step_id)), trial, Output(),
                        budget)
                notes += _restored(plan.namespace, held, ns, trial, r.step_id)
                ns = trial
                notes += _stand_in(r, ns, plan.mention)
                continue
            except CheckTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - the learner's saved code failed here
                what = exc.payload["message"] if isinstance(exc, CodeError) else (
                    f"{type(exc).__name__}: {str(exc)[:200]}")
                instead = ("its reference solution was" if r.solution.strip() else
                           "autograd's gradients were")
                notes.append(f"your saved code for {r.step_id} failed when replayed ({what}); "
                             f"{instead} used instead")
        if not r.solution.strip():
            r.stand_in_for_solution(ns)
            continue
        execute(cached_compile(r.solution, f"<the reference for {r.step_id}>"), ns, Output(),
                budget)
    return ns, notes


def _earlier(plan: BatchPlan) -> dict[str, str]:
    """The learner's own code of the steps replayed before the candidate, by step id."""
    return {r.step_id: r.code for r in plan.replays if r.code is not None}


def _stand_in(r: Replay, ns: dict, mention: tuple[str, ...]) -> list[str]:
    """A first branch the learner did not start is taken from autograd, so a later `+=` still
    works; their own second branch is what gets graded there. It is said where it matters: at the
    step that completes that gradient (`mention`), not in every step after."""
    notes = []
    for name, value in r.stand_ins.items():
        if not isinstance(ns.get(gradient(name)), Tensor):
            ns[gradient(name)] = value.clone()
            if name not in mention:
                continue
            notes.append(f"your code for {r.step_id} does not start {gradient(name)}, the first "
                         f"branch of "
                         f"{name}; autograd's first branch stands in for it")
    return notes


# Past this many entries in two views of one storage, they are taken to overlap without counting.
_OVERLAP_COUNT = 2**22


def overlaps(a: Tensor, b: Tensor) -> bool:
    """Whether two tensors cover some of the same bytes. One storage is not enough: the two
    halves of `(...).unbind(0)` share a storage and never a byte, and a later `+=` on one leaves
    the other alone."""
    try:
        if not shares_memory(a, b) or a.numel() == 0 or b.numel() == 0:
            return False
        size = a.element_size()

        def span(t: Tensor) -> tuple[int, int]:  # the first byte it reads and one past its last
            strides = zip(t.shape, t.stride(), strict=True)
            last = t.storage_offset() + sum((n - 1) * s for n, s in strides)
            return t.storage_offset() * t.element_size(), (last + 1) * t.element_size()

        (lo_a, hi_a), (lo_b, hi_b) = span(a), span(b)
        if hi_a <= lo_b or hi_b <= lo_a:
            return False
        if b.element_size() != size or a.numel() + b.numel() > _OVERLAP_COUNT:
            return True  # read as another dtype, or too many to count: said to overlap

        def offsets(t: Tensor) -> Tensor:
            out = torch.tensor(t.storage_offset(), dtype=torch.long)
            for n, s in zip(t.shape, t.stride(), strict=True):
                out = out.unsqueeze(-1) + torch.arange(n, dtype=torch.long) * s
            return out.reshape(-1)

        return bool(torch.isin(offsets(a), offsets(b)).any())
    except (RuntimeError, NotImplementedError, TypeError):
        return False


def _mutations(before: dict, after: dict, graded: tuple[str, ...]) -> dict:
    """Which earlier tensors the candidate changed, which of its gradients share memory, and
    which are views of a tensor that was there before it (`dh = dhs[:, t]`)."""
    grads = [gradient(t) for t in graded]
    changed = []
    for name, old in before.items():
        if not isinstance(old, Tensor) or name in grads:
            continue
        new = after.get(name)
        try:
            same = isinstance(new, Tensor) and new.shape == old.shape and torch.equal(new, old)
        except (RuntimeError, NotImplementedError, TypeError):
            same = False
        if same:
            continue
        culprit = next((g for g in grads if isinstance(after.get(g), Tensor)
                        and isinstance(new, Tensor) and overlaps(after[g], new)), None)
        changed.append({"name": name, "deleted": name not in after, "culprit": culprit})
    shared = {}
    for g in grads:
        value = after.get(g)
        if not isinstance(value, Tensor):
            continue
        other = next((n for n, o in after.items() if n != g and tensor_of(n) is not None
                      and isinstance(o, Tensor) and o.shape == value.shape
                      and overlaps(value, o)), None)
        if other:
            shared[g] = other
    views = {}
    for g in grads:
        value = after.get(g)
        if not isinstance(value, Tensor):
            continue
        # An earlier gradient first (dhs, dstate), else any tensor that was there before.
        earlier = sorted((n for n in before if n != g and n not in grads),
                         key=lambda n: tensor_of(n) is None)
        base = next((n for n in earlier if isinstance(after.get(n), Tensor)
                     and overlaps(value, after[n])), None)
        if base:
            views[g] = base
    return {"changed": changed, "shared": shared, "views": views}


def _is_scalar(value: Any) -> bool:
    return value is None or type(value) in (int, float, bool, str)


def _plain_before(base: dict, given: dict) -> tuple[dict[str, Tensor], bool]:
    """The tensors the candidate started from, and whether they (with the scalars) are all of it.

    When they are, the engine keeps them and later checks of this step start from them without
    replaying the earlier steps. A function or a list the learner defined in an earlier step
    cannot travel, so then every check replays.
    """
    plain = {k: v for k, v in base.items() if isinstance(v, Tensor) and odd_kind(v) is None}
    extra = [k for k, v in base.items()
             if k not in plain and not _is_scalar(v) and k not in given
             and k not in ("torch", "F", "math")]
    return plain, not extra and all(k in plain for k, v in base.items() if isinstance(v, Tensor))


# A scalar that travels back with the namespace: lesson sizes and short labels, not a learner's
# megabyte string (which stays in the child; the step is then replayed instead of cached).
_MAX_SCALAR_CHARS = 1_000


def _short_scalars(base: dict) -> tuple[dict, bool]:
    """The scalars the candidate started from, and whether that is all of them."""
    scalars = {k: v for k, v in base.items() if _is_scalar(v)}
    short = {k: v for k, v in scalars.items()
             if not (isinstance(v, str) and len(v) > _MAX_SCALAR_CHARS)
             and not (type(v) is int and v.bit_length() > 4 * _MAX_SCALAR_CHARS)}
    return short, len(short) == len(scalars)


def _encode_cmp(out: Output) -> list[tuple]:
    """The tensors handed to cmp(...), within MAX_KEPT together: the engine answers a name's
    first call only, and a call past the budget has nothing to compare."""
    calls, seen, room = [], set(), MAX_KEPT
    for pos, name, dt in out.cmp_calls:
        if not isinstance(dt, Tensor) or name in seen:
            continue
        seen.add(name)
        size = dt.numel() * dt.element_size()
        encoded = encode_value(dt) if size <= room else ("odd", "too large to compare")
        room -= size
        calls.append((pos, name, encoded))
    return calls


def run_batch(spec: CheckSpec, plan: BatchPlan, budget: Budget,
              bases: dict | None = None) -> dict:
    replayed, notes = _replay(plan, budget)
    # The tutor's own copy of where the candidate starts: what the earlier steps left can still
    # be reached by their code (a function's default argument, a closure, a container that is
    # not copied), and the candidate may change it through them. The probe, the diagnosis and
    # the later checks start from this copy, which no code of the learner's can reach.
    base = copy_namespace(replayed)
    if bases is not None:
        bases[plan.name] = base
    after = copy_namespace(base)
    out = Output()
    record: dict = {"error": None, "notes": notes}
    watch = quotient.Watch()
    try:
        with watch:
            execute(candidate(spec, spec.code), after, out, budget)
    except CheckTimeout:
        raise
    except CodeError as exc:
        record["error"] = exc.payload
    except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
        record["error"] = runtime_error(exc, spec.code, list(after),
                                        earlier=_earlier(plan)).payload
    record["stdout"] = out.text()
    record["cmp"] = _encode_cmp(out)
    record["estimates"] = watch.found  # a difference quotient, seen in the run (quotient.py)
    if record["error"]:
        return record
    try:
        # What this step leaves for the steps after it is measured here, in the step that keeps
        # it, at the size it can reach, before anything below compares or copies it.
        check_kept(kept_tensors(after))
        if not plan.known:
            plain, cacheable = _plain_before(base, plan.namespace)
            record["before"] = encode_shared(plain)
            record["scalars"], complete = _short_scalars(base)
            record["cacheable"] = cacheable and complete
    except TooLarge as exc:
        return {**_without_values(record), "error": CodeError("memory", str(exc)).payload}
    record["after"] = encode_namespace(after, {gradient(t) for t in spec.graded})
    record["mutations"] = _mutations(base, after, spec.graded)
    return record


def kept_tensors(ns: dict) -> dict[str, Tensor]:
    """The tensors a namespace keeps for the steps after it, each by its name."""
    return {k: v for k, v in ns.items() if isinstance(v, Tensor)}


def _without_values(record: dict) -> dict:
    return {k: v for k, v in record.items() if k in ("notes", "stdout", "error")}


# All that one check sends back: two batches' namespaces (each within MAX_KEPT), their gradients,
# cmp's tensors and the printed text, with room to spare under the pipe's own limit.
MAX_RESULT = MAX_MESSAGE - 4 * 2**20


def _size(value: Any) -> int:
    """About how many bytes `value` (plain data) takes on the pipe."""
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        return len(value) if value.isascii() else 4 * len(value)
    if isinstance(value, dict):
        return 8 + sum(_size(k) + _size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 8 + sum(_size(v) for v in value)
    if type(value) is int:
        return 8 + value.bit_length() // 8
    return 8


def _largest(record: dict) -> str:
    """The biggest value in a record, named for the learner."""
    named = [(_size(v), f"`{k}`") for k, v in (record.get("after") or {}).items()]
    named += [(_size(c[2]), f"the tensor given to cmp('{c[1]}', ...)")
              for c in record.get("cmp") or []]
    named.append((_size(record.get("before")), "the tensors the step starts from"))
    size, what = max(named)
    return f"{what} alone is {megabytes(size)}"


def _fit(records: dict[str, Any], name: str) -> None:
    """Keep the check's answer within MAX_RESULT: a batch that would pass it is replaced by an
    error that says what is so large (a message over the pipe's limit is no answer at all)."""
    total = sum(_size(r) for r in records.values())
    if total <= MAX_RESULT:
        return
    record = records[name]
    message = (f"what your code hands back to be graded comes to {megabytes(total)} "
               f"({_largest(record)}); the limit is {megabytes(MAX_RESULT)}. The gradients here "
               "are small tensors; check the sizes you are creating")
    records[name] = {**_without_values(record), "error": CodeError("memory", message).payload}


def run_check(spec: CheckSpec) -> dict:
    """Every batch of the plan, then the rule probe. Plain data only.

    The learner's code has its limit in CPU time for all its runs together (`spec.timeout`);
    everything after the first batch has the tutor's own wall-clock budget too
    (`spec.tutor_seconds`, tutor/core/clock.py): when that runs out, the answer keeps what
    finished and says in `short` what did not."""
    learner = Budget(spec.timeout, kill=True)
    records: dict[str, Any] = {}
    bases: dict[str, dict] = {}
    first = spec.batches[0]
    with watching():
        try:
            records[first.name] = run_batch(spec, first, learner, bases)
        except CheckTimeout:
            return {"timeout": True, "records": records}
        _fit(records, first.name)
        if records[first.name]["error"]:
            return {"timeout": False, "records": records}
        return _after_first_batch(spec, records, bases, learner)


def _after_first_batch(spec: CheckSpec, records: dict[str, Any], bases: dict[str, dict],
                       learner: Budget) -> dict:
    """The other batches and the rule probe, on the tutor's own budget."""
    answer: dict[str, Any] = {"timeout": False, "records": records}
    phase = Phase(spec.tutor_seconds, learner)
    doing = "heldout"
    try:
        with phase:
            for plan in spec.batches[1:]:
                records[plan.name] = run_batch(spec, plan, learner, bases)
                _fit(records, plan.name)
                if records[plan.name]["error"]:
                    break
            if spec.probe is not None:
                doing = "probe"
                first = spec.batches[0].name
                records[first]["probe"] = _bounded(records, run_probe(spec, spec.probe,
                                                                      bases[first], learner))
    except CheckTimeout:
        answer["timeout"] = True
    except TutorTimeout:
        answer.update(_ran_out(phase, doing))
    return answer


def _ran_out(phase: Phase, doing: str) -> dict:
    """The tutor's budget ran out while `doing` (a run the verdict reads): the learner's stop, as
    at their own limit, when their code is what used that time (`Phase.learners_fault`); else
    the tutor's (`short`), and the verdict stands on the runs that finished."""
    return {"timeout": True} if phase.learners_fault() else {"short": doing}


def run_probe(spec: CheckSpec, probe: ProbeSpec, base: dict, budget: Budget) -> dict:
    """The candidate once more, from the same namespace, with random arriving gradients (the
    line probe) and, for a step that completes a gradient started earlier, with random gradients
    where it was started and the steps in between replayed (the fork probe). See
    tutor/core/probe.py.

    Each probe's values, or None with what happened instead in `why`: a probe run that raises or
    runs out of time is an answer to "is it the line's rule?" (no), never a silence."""
    names = {gradient(t) for t in spec.graded}
    ns = copy_namespace(base)
    ns.update(cotangents(base, probe.upstream, probe.seed, spec.graded))
    out: dict = {"line": None, "fork": None, "why": {}}
    out["line"], out["why"]["line"] = _quiet(spec, ns, names, budget)
    fork = probe.fork
    if fork is not None and out["why"]["line"] != OUT_OF_TIME:
        ns = copy_namespace(base)
        cots = cotangents(base, fork.upstream, fork.seed, spec.graded)
        for r in fork.replays:
            for code in (r.code, r.solution):
                # What the steps in between compute is computed again, from the new gradients.
                for name in _names_or_none(code):
                    if tensor_of(name) is not None and name not in cots:
                        ns.pop(name, None)
        ns.update(cots)
        try:
            replayed, _ = _replay(BatchPlan("probe", ns, fork.replays), budget)
        except CheckTimeout:
            out["why"]["fork"] = OUT_OF_TIME
            return out
        except Exception:  # noqa: BLE001 - the steps in between do not run this way: no fork probe
            return out
        out["fork"], out["why"]["fork"] = _quiet(spec, replayed, names, budget)
    return out


OUT_OF_TIME = "it ran out of time"


def _bounded(records: dict[str, Any], probe: dict) -> dict:
    """The probe's record, unless with it the check's answer would pass MAX_RESULT: then the
    probe's values give way (and say why), never the real runs' verdict."""
    total = sum(_size(r) for r in records.values()) + _size(probe)
    if total <= MAX_RESULT:
        return probe
    why = (f"it handed back {megabytes(_size(probe))}, more than a check may send "
           f"({megabytes(MAX_RESULT)} in all)")
    return {"line": None, "fork": None,
            "why": {k: why for k in ("line", "fork") if probe.get(k) is not None}}


def _names_or_none(code: str | None) -> set[str]:
    return set(code_facts.of(code).bound) if code else set()


def _quiet(spec: CheckSpec, ns: dict, names: set[str], budget: Budget
           ) -> tuple[dict | None, str | None]:
    """Run the candidate for the probe: its values, or None and what happened instead. Its print
    output is not shown: the learner saw the real run's."""
    try:
        execute(candidate(spec, spec.code), ns, Output(), budget)
    except CheckTimeout:
        return None, OUT_OF_TIME
    except CodeError as exc:
        return None, f"it stopped: {_first_line(exc.error.message)}"
    except Exception as exc:  # noqa: BLE001 - any failure answers the probe's question
        return None, f"it raised {_raised(exc)}"
    try:
        return encode_namespace(ns, names), None
    except Exception as exc:  # noqa: BLE001 - what it left cannot travel back
        return None, f"what it left could not be sent back ({type(exc).__name__})"


def _raised(exc: BaseException) -> str:
    """"ValueError: its first line", from an exception whose class and text are the learner's."""
    try:
        name = type(exc).__name__
        text = str(exc)
    except Exception:  # noqa: BLE001 - a learner's __str__ may fail too
        return "an exception"
    if not isinstance(name, str) or not isinstance(text, str):
        return "an exception"
    return f"{name[:60]}: {_first_line(text)}" if text else name[:60]


def _first_line(text: str, limit: int = 160) -> str:
    line = (text.strip().splitlines() or [""])[0]
    return line if len(line) <= limit else line[:limit - 1] + "…"


def describe(value: Any) -> str:
    """What a name holds, in a few words: the notebook habit of printing `.shape`."""
    if isinstance(value, Tensor):
        why = odd_kind(value)
        if why:
            return why
        return f"tensor {list(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if _is_scalar(value):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return type(value).__name__


def run_scratch(spec: CheckSpec) -> dict:
    """Run the code on the main batch without grading: its output and what it defined."""
    with watching():
        return _scratch(spec, Budget(spec.timeout, kill=True))


def _scratch(spec: CheckSpec, learner: Budget) -> dict:
    """run_scratch on the learner's limit."""
    try:
        plan = spec.batches[0]
        base, _ = _replay(plan, learner)
        after = copy_namespace(base)
        out = Output()
        error = None
        try:
            execute(candidate(spec, spec.code), after, out, learner)
        except CheckTimeout:
            raise
        except CodeError as exc:
            error = exc.payload
        except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
            error = runtime_error(exc, spec.code, list(after), earlier=_earlier(plan)).payload
        assigned = code_facts.of(spec.code).bound
        # What the code made: what it assigns, and new names it brought in some other way. The
        # modules every run has in scope are not its own, whichever way the plan came (a plan
        # sent to a started child arrives without them, and running the code puts them back).
        defined = [{"name": k, "what": describe(v)} for k, v in after.items()
                   if k in assigned or (k not in base and not isinstance(v, types.ModuleType))]
        return {"timeout": False, "stdout": out.text(), "error": error, "defined": defined}
    except CheckTimeout:
        return {"timeout": True}


# -- function steps --------------------------------------------------------------------------
# The call is ours, not the learner's: compiled here without the policy, with names the policy
# keeps learner code from touching.
_ARGS, _RESULT = "__tutor_args__", "__tutor_result__"


@dataclass
class FunctionCheckSpec:
    step_id: str
    code: str
    function: str  # the name the learner's code must define
    call: str  # the call as the pack writes it, for messages
    arguments: tuple[str, ...]
    outputs: tuple[str, ...]  # what the call assigns; empty when the function updates in place
    graded: tuple[str, ...]  # the names graded: outputs, or arguments updated in place
    cases: list[tuple[str, dict]]  # (case name, the call's inputs)
    sizes: dict  # the lesson's sizes, in scope as in every step
    timeout: float  # the learner's limit: CPU seconds of their code (tutor/core/clock.py)
    compiled: bytes | None = None  # the candidate as the worker compiled it (candidate.program)
    variants: tuple[bytes, ...] | None = None  # as CheckSpec.variants, run on the first cases
    variant_seconds: float = 2.0
    # The picture's calls ([steps.picture]): (name, inputs) on the steps after each t, run once
    # the cases are done, within `picture_seconds` of CPU time; only `picture_output` of each
    # comes back.
    pictures: list[tuple[str, dict]] = field(default_factory=list)
    picture_output: str = ""
    picture_seconds: float = 1.5
    # The tutor's own wall-clock budget for what follows the lesson's case.
    tutor_seconds: float = DEFAULT_TUTOR_SECONDS
    # (step id, accepted code) of the other function steps whose functions the code calls
    # (exercise 3's lstm_step_backward in exercise 2's loop), defined before it as a training
    # run defines them all.
    helpers: tuple[tuple[str, str], ...] = ()
    # (function, step id) of those the code calls whose step has not passed yet: the scope's
    # words say where such a function comes from.
    waiting: tuple[tuple[str, str], ...] = ()


class CallError(Exception):
    """The learner's function could not be called the way the step calls it."""


def call_function(spec: FunctionCheckSpec, code: str, inputs: dict, out: Output,
                  budget: Budget | None, compiled: types.CodeType | None = None
                  ) -> tuple[dict, list[str]]:
    """Define the learner's function (`compiled`, else `code` compiled behind the guard), call
    it on copies of `inputs`: the graded values, and the arguments it changed in place that it
    was not meant to."""
    ns: dict = dict(spec.sizes)
    for step_id, text in spec.helpers:
        # Under its own step's name, so that a failure inside one names that step and line.
        execute(cached_compile(text, earlier_file(step_id)), ns, out, budget)
    execute(compiled or candidate(spec, code), ns, out, budget)
    fn = ns.get(spec.function)
    if not callable(fn):
        raise CallError(f"your code does not define the function {spec.function}: the step "
                        f"calls it as `{spec.call}`")
    args = copy_namespace(inputs)
    ns[_ARGS] = [args[a] for a in spec.arguments]
    execute(compile(f"{_RESULT} = {spec.function}(*{_ARGS})", "<the step's call>", "exec"),
            ns, out, budget)
    result = ns.pop(_RESULT, None)
    if spec.outputs:
        values = dict(zip(spec.outputs, _unpack(spec, result), strict=True))
    else:
        values = {name: args[name] for name in spec.graded}
    changed = []
    for name, before in inputs.items():
        after = args[name]
        if name in spec.graded or not isinstance(before, Tensor):
            continue
        if not (isinstance(after, Tensor) and after.shape == before.shape
                and torch.equal(after, before)):
            changed.append(name)
    return values, changed


def _unpack(spec: FunctionCheckSpec, result: Any) -> tuple:
    want = len(spec.outputs)
    if want == 1:
        return (result,)
    if isinstance(result, (tuple, list)) and len(result) == want:
        return tuple(result)
    got = (f"{len(result)} values" if isinstance(result, (tuple, list)) else
           "None (is a `return` missing?)" if result is None else f"one {type(result).__name__}")
    raise CallError(f"{spec.function} returned {got}, but the step unpacks {want}: "
                    f"`{spec.call}`. Return {', '.join(spec.outputs)}, in that order.")


def function_scope(spec: FunctionCheckSpec) -> str:
    ids = [step_id for step_id, _ in spec.helpers]
    yours = (f", and what your {' and '.join(ids)} define{'s' if len(ids) == 1 else ''}"
             if ids else "")
    waiting = "".join(f" {name} is defined here once {step_id} has passed (or define it in "
                      "this code too)." for name, step_id in spec.waiting)
    return (f"Inside {spec.function} only its own arguments ({', '.join(spec.arguments)}) and "
            f"what it computes from them are defined, with torch, F and math{yours}; the "
            f"lesson's tensors are not.{waiting}")


def _call_case(spec: FunctionCheckSpec, code: str, inputs: dict, out: Output,
               budget: Budget | None) -> tuple[dict, list[str], dict | None]:
    """call_function, with every failure of the learner's code turned into an error payload."""
    try:
        values, changed = call_function(spec, code, inputs, out, budget)
        return values, changed, None
    except CheckTimeout:
        raise
    except CodeError as exc:
        return {}, [], exc.payload
    except CallError as exc:
        return {}, [], {"kind": "runtime", "message": str(exc), "line": None, "col": None}
    except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
        error = runtime_error(exc, code, [*spec.sizes, *spec.arguments],
                              function_scope(spec), earlier=dict(spec.helpers)).payload
        if error["line"] is None:
            error["message"] = (f"calling `{spec.call}` failed: {error['message']} Keep the "
                                "template's signature.")
        return {}, [], error


def run_function_case(spec: FunctionCheckSpec, inputs: dict, budget: Budget | None) -> dict:
    out = Output()
    watch = quotient.Watch()
    with watch:
        values, changed, error = _call_case(spec, spec.code, inputs, out, budget)
    record: dict = {"error": error, "stdout": out.text(), "estimates": watch.found}
    if error is None:
        record["after"] = encode_namespace(values, set(spec.graded))
        record["changed"] = changed
    return record


def run_function_check(spec: FunctionCheckSpec) -> dict:
    """The learner's function on every case, then the picture's calls. Plain data only.

    As in `run_check`: the learner's limit (CPU time) covers every case; what follows the
    lesson's case has the tutor's own wall-clock budget too."""
    learner = Budget(spec.timeout, kill=True)
    records: dict[str, Any] = {}
    own, inputs = spec.cases[0]
    with watching():
        try:
            records[own] = run_function_case(spec, inputs, learner)
        except CheckTimeout:
            return {"timeout": True, "records": records}
        _fit(records, own)
        if records[own]["error"]:
            # The lesson's case is reported; the fresh ones have nothing to add.
            return {"timeout": False, "records": records}
        return _after_lesson_case(spec, records, learner)


def _after_lesson_case(spec: FunctionCheckSpec, records: dict[str, Any], learner: Budget
                       ) -> dict:
    """The fresh cases and the picture's calls, on the tutor's own budget."""
    answer: dict[str, Any] = {"timeout": False, "records": records}
    phase = Phase(spec.tutor_seconds, learner)
    doing = "fresh"
    try:
        with phase:
            for name, inputs in spec.cases[1:]:
                records[name] = run_function_case(spec, inputs, learner)
                _fit(records, name)
            doing = "pictures"
            run_pictures(spec, records)
    except CheckTimeout:
        answer["timeout"] = True
    except TutorTimeout:
        # The picture's calls never count against the check, whoever was slow.
        answer.update(_ran_out(phase, doing) if doing == "fresh" else {"short": doing})
    return answer


def run_pictures(spec: FunctionCheckSpec, records: dict[str, Any]) -> None:
    """The picture's calls, after the graded cases and on a CPU budget of their own (a cost
    limit): what does not fit is left out of the picture and never counts against the check.
    Each call's record (only the picture's output, `picture_output`, or the call's error) goes
    into `records` as it finishes, so that what finished is drawn when the tutor's own time
    runs out (TutorTimeout, which goes on to the caller)."""
    budget = Budget(spec.picture_seconds)
    try:
        for name, inputs in spec.pictures:
            out = Output()
            values, _, error = _call_case(spec, spec.code, inputs, out, budget)
            record: dict = {"error": error}
            if error is None:
                record["after"] = encode_namespace(values, {spec.picture_output})
            records[name] = record
            _fit(records, name)
    except CheckTimeout:
        pass  # the calls that finished are drawn; the rest are not


def run_function_scratch(spec: FunctionCheckSpec) -> dict:
    """The function on the lesson's case, without grading: its output and what it returned."""
    with watching():
        try:
            out = Output()
            values, _, error = _call_case(spec, spec.code, spec.cases[0][1], out,
                                          Budget(spec.timeout, kill=True))
            defined = [{"name": k, "what": describe(v)} for k, v in values.items()]
            return {"timeout": False, "stdout": out.text(), "error": error, "defined": defined}
        except CheckTimeout:
            return {"timeout": True}


# -- changed programs ------------------------------------------------------------------------
# At most this many changed programs in one run, and this long for all of them (the replay of
# the earlier steps aside): a refused answer's diagnosis must not hold its verdict back long.
MAX_VARIANTS = 200
# The batches (or cases) each changed program runs on: the main one, and the fresh one that
# confirms a change is not fitted to the main one's numbers.
VARIANT_BATCHES = 2


def run_variants(spec: CheckSpec | FunctionCheckSpec) -> dict:
    """Each changed program of `spec.variants` (compiled by the worker behind the policy and the
    guard) on a fresh copy of what the candidate started from, on the first batches (or cases):
    its graded values per batch as plain data, None where it failed, ran past the budget or would
    pass MAX_RESULT. The engine compares them with autograd's; nothing here sees an answer.
    A program that ends this process ends only the search: the check's verdict is already made.

    All of it is the tutor's own work, on its wall-clock budget (`spec.tutor_seconds`; `short`
    says when that ran out): the replay of the earlier steps on the learner's limit, the
    programs on `spec.variant_seconds` of CPU time, a cost limit that a busy machine does not
    shorten."""
    out: list[list[dict | None]] = []
    answer: dict[str, Any] = {"timeout": False, "variants": out}
    with watching():
        learner = Budget(spec.timeout, kill=True)
        try:
            with Phase(spec.tutor_seconds, learner):
                _run_programs(spec, out, learner)
        except CheckTimeout:
            answer["timeout"] = True
        except TutorTimeout:
            answer["short"] = "search"
    return answer


def _run_programs(spec: CheckSpec | FunctionCheckSpec, out: list[list[dict | None]],
                  learner: Budget) -> None:
    """Each program's values per batch into `out`, until the programs, their budget or
    MAX_RESULT run out."""
    if isinstance(spec, FunctionCheckSpec):
        bases = [inputs for _, inputs in spec.cases[:VARIANT_BATCHES]]
    else:
        bases = [_replay(plan, learner)[0] for plan in spec.batches[:VARIANT_BATCHES]]
    # A program that swallows the stop ends here; the simulated device's own cost is not
    # the search's (tutor/devices.py `cost`).
    budget = Budget(spec.variant_seconds * devices.cost(), kill=True)
    total = 0
    for compiled in list(spec.variants or ())[:MAX_VARIANTS]:
        code = load_program(compiled)
        values: list[dict | None] = []
        for base in bases:
            got = _variant(spec, code, base, budget) if code is not None else None
            if got is not None:
                total += _size(got)
                if total > MAX_RESULT:
                    return
            values.append(got)
            if got is None:
                break  # what fails on the main batch is no answer on the fresh one
        out.append(values)


def load_program(compiled: Any) -> types.CodeType | None:
    """A changed program as the worker compiled it; None for anything else."""
    try:
        return marshal.loads(compiled) if isinstance(compiled, bytes) else None
    except (ValueError, EOFError, TypeError):
        return None


def _variant(spec: CheckSpec | FunctionCheckSpec, code: types.CodeType, base: dict,
             budget: Budget) -> dict | None:
    """One changed program on one batch (or case): its graded values, or None."""
    try:
        if isinstance(spec, FunctionCheckSpec):
            values, _ = call_function(spec, "", base, Output(), budget, code)
            return encode_namespace(values, set(spec.graded))
        ns = copy_namespace(base)
        execute(code, ns, Output(), budget)
        return encode_namespace(ns, {gradient(t) for t in spec.graded})
    except CheckTimeout:
        raise
    except Exception:  # noqa: BLE001 - a change that cannot run matches nothing
        return None


# Where the random generators start in every check's child: code that draws random numbers
# draws the same ones in every check, on either path, whatever was checked before it (another
# student's submission in the same grading process, say), and never from the worker's state.
CHECK_SEED = 20_231_125


def run_spec(spec: CheckSpec | FunctionCheckSpec, scratch: bool) -> dict:
    """A check (or a scratch run, or a run of changed programs) of either kind of step, as the
    child runs it."""
    torch.manual_seed(CHECK_SEED)  # every device's generator, the simulated one's (the CPU's) too
    if spec.variants is not None:
        return run_variants(spec)
    if isinstance(spec, CheckSpec) and spec.trace_cells is not None:
        return run_trace(spec)
    if isinstance(spec, FunctionCheckSpec):
        return run_function_scratch(spec) if scratch else run_function_check(spec)
    return run_scratch(spec) if scratch else run_check(spec)


# -- a whole program, traced (tutor/core/trace.py) -------------------------------------------
# A notebook in its own frame builds its own data and parameters as well: more of the limit.
OWN_FRAME_TIME = 2.0


def run_trace(spec: CheckSpec) -> dict:
    """The program run once on each batch, as a kernel runs it (a part that fails stops there),
    every torch call it makes recorded: the traces, as plain data, for the engine to read."""
    with watching():
        if spec.trace_own:  # one run: the notebook's own batch, its data made too
            # On the CPU, as the notebook was written: its own generators are the CPU's (what
            # it computes is judged there anyway; the written code then runs on the lesson's
            # device, as any answer does).
            devices.use(torch.device("cpu"))
            return {"timeout": False, "traces": [
                _traced(spec, spec.batches[0], Budget(spec.timeout * OWN_FRAME_TIME, kill=True))]}
        # Each batch on half the limit: a runaway loop stops one batch's run there, and what
        # ran before it is still traced, on both batches alike.
        return {"timeout": False, "traces": [
            _traced(spec, plan, Budget(spec.timeout / 2, kill=True))
            for plan in spec.batches[:2]]}


def _traced(spec: CheckSpec, plan: BatchPlan, budget: Budget) -> dict:
    try:
        base, _ = _replay(plan, budget)
    except CheckTimeout:
        return {"ops": [], "leaves": {}, "values": {}}
    ns = copy_namespace(base)
    names = {id(v): k for k, v in ns.items() if isinstance(v, Tensor)}
    shapes = {tuple(v.shape) for v in ns.values()
              if isinstance(v, Tensor) and v.is_floating_point()}
    recorder = Recorder(names, shapes, keep_all=spec.trace_own)
    # `.grad` in a trace only: a check, where `.grad` is refused, never has it.
    ns[code_facts.AUTOGRAD_READ] = _autograd_reads(ns, plan.autograd,
                                                   recorder if spec.trace_own else None)
    for own, code in spec.trace_cells or ():
        recorder.own = own
        for compiled in _statements(_with_autograd_reads(code)):
            try:
                with recorder:
                    execute(compiled, ns, Output(), budget)
            except CheckTimeout:
                note_names(recorder, ns)
                return traced(recorder, encode_tensor)  # the limit ran out: what ran stands
            except NameError:
                # A name the notebook gave its own data or setup, whose lines the tutor's stand
                # in for (`bt = batch(32, 5, text)`): that statement alone is lost.
                continue
            except Exception:  # noqa: BLE001 - as in a kernel: what ran before the error stands
                if spec.trace_own:
                    continue  # its own checks (`.grad`, which its own frame has not) only
                break
        note_names(recorder, ns)
    return traced(recorder, encode_tensor)




def _autograd_reads(ns: dict, gradients: dict, recorder: Recorder | None = None) -> Any:
    """`t.grad` in a traced program: autograd's gradient where `t` is one of the lesson's
    forward tensors, made where the trace does not see it, so that it is never the learner's
    own work; its value may be a gradient a step is given, which the written-out code then
    starts from (tutor/core/trace.py). Anything else has no gradient here. In a notebook's own
    frame its tensors are known by the trace's numbers (`#12`: the twelfth object it saw), as
    the first run of that frame found them to be the lesson's (tutor/core/frame.py); each read
    that finds none is counted (`recorder.misses`), which asks for that second run."""
    by_id = {id(ns[k]): g for k, g in gradients.items() if isinstance(ns.get(k), Tensor)}
    by_number = {k: g for k, g in gradients.items() if isinstance(k, str) and k[:1] == "#"}

    def autograd_gradient_of(t: Any) -> Tensor:
        g = by_id.get(id(t))
        if g is None and recorder is not None:
            g = by_number.get(f"#{recorder._objects.get(id(t))}")
            if g is None:
                recorder.misses += 1
        if g is None:
            raise AttributeError("only the lesson's own tensors have a gradient here")
        with torch._C.DisableTorchFunction():
            return g.clone()

    return autograd_gradient_of


def _with_autograd_reads(code: str) -> str:
    """A traced cell with each `.grad` it reads as autograd's gradient (`_autograd_reads`)."""
    if ".grad" not in code:
        return code
    try:
        tree = code_facts.AutogradReads().visit(ast.parse(code))
        return ast.unparse(ast.fix_missing_locations(tree))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code


def _statements(code: str) -> list[types.CodeType]:
    """A traced cell's top-level statements, each compiled behind the policy (those it refuses
    left out), so that one that fails for a missing name leaves the rest to run."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in body:
        try:  # written out again: a decorated function's source starts at its decorator
            out.append(cached_compile(ast.unparse(node)))
        except (CodeError, ValueError, RecursionError):
            continue
    return out
