"""The rule probe: a step's code graded on its rule, not only on the numbers it happened to give.

A backward step maps the gradient arriving at its line(s) to the gradients of the line's inputs,
and that map is linear. Where the arriving gradient is nearly zero (the softmax's `dlogit_maxes`),
zero on part of its entries, or symmetric, a wrong map can give the right numbers: `pass` at the
second branch of `dlogits` is "equal to autograd". So the step's code runs a second time, in the
same child and within the same time budget, from the same namespace, with the arriving gradients
replaced by random tensors of the same shapes (seeded, so a verdict never changes between runs).
The answer's change between the two runs must equal autograd's vector-Jacobian product of the
step's line(s) for the change of cotangent. Linearity is what makes this exact: a first branch
started earlier, a stand-in, a learner's own prior code all cancel out of the difference.

Two probes, because a learner may compute the arriving gradient's effect from further up:

- the *line* probe replaces only the gradients arriving at this step's lines;
- the *fork* probe, for a step that completes a gradient started at an earlier step (the second
  branch of `dlogits`, of `dx1`), replaces the gradients arriving where that first branch began
  and replays the steps in between, so both branches see the same random cotangent, whatever
  the learner's earlier code did (both branches typed at once there, nothing left to add here).

An answer is refused only if every probe that applies refuses it: a right rule passes at least
one of them, while a missing or broken branch passes neither (docs/architecture.md, the rule
probe).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import torch

from tutor import code_facts
from tutor.core import slips
from tutor.core.grading import PROBE_HEADROOM, as_graded, grade
from tutor.core.quick import vjp
from tutor.devices import judged
from tutor.pack.flow import gradient
from tutor.pack.model import Pack, Step
from tutor.values.results import Diagnosis, Rule, Verdict

Tensor = torch.Tensor

NEARLY_ZERO = 1e-4  # an arriving gradient this small next to the answer's size tells no rule apart


@dataclass(frozen=True)
class Fork:
    """Further up than this step's lines: the gradients varied there, as (gradient name,
    forward tensor) pairs, and the steps (learner's code or ours) that lead from there to this
    step, replayed on them."""

    pairs: tuple[tuple[str, str], ...]
    replays: list = field(default_factory=list)  # execution.Replay, from there up to this step
    seed: int = 0

    @property
    def upstream(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.pairs)


@dataclass(frozen=True)
class ProbeSpec:
    upstream: tuple[str, ...]  # the gradient names replaced by random cotangents
    seed: int
    fork: Fork | None = None


def arriving(step: Step) -> list[tuple[str, str]]:
    """(gradient name in the namespace, forward tensor it is the gradient of) for every gradient
    arriving at the step's lines from above."""
    # The scalar the gradients are of has no gradient arriving: there is nothing to vary.
    pairs = [(gradient(t), t) for t in step.lines if t not in step.checks and t != step.target]
    if step.upstream:
        pairs.append((gradient(step.upstream), step.target or step.upstream))
    return pairs


def spec_for(pack: Pack, step: Step, earlier: list[Step], seed: int, replay=None,
             code: str = "") -> ProbeSpec | None:
    """The probes of a per-line step, or None for a step without arriving gradients.

    The fork starts at the earliest of: the step where a gradient this step completes was
    started (its arriving gradients are varied), and the step after the one that produced a
    gradient from further up that the code reads instead of this line's (that gradient is
    varied), so that everything the code reads changes together.
    """
    if not step.kind.checked or not step.kind.of_forward_tensors:
        return None  # a function's outputs, or the training run: no lines to probe
    upstream = tuple(name for name, _ in arriving(step))
    if not upstream:
        return None
    base = seed * 1_000_003 + pack.index(step.id) * 7919
    starts: list[tuple[int, list[tuple[str, str]]]] = []
    starters = {pack.flow.starter(g, step.exercise) for g in pack.flow.adds(step)}
    started = [s for s in earlier if s.id in starters]
    if started:
        starts.append((earlier.index(started[0]), arriving(started[0])))
    reads = code_facts.of(code).names
    for i, s in enumerate(earlier):
        for t in s.checks:
            if gradient(t) in reads and gradient(t) not in upstream and t not in step.checks:
                starts.append((i + 1, [(gradient(t), t)]))
    fork = None
    if starts:
        at = min(i for i, _ in starts)
        pairs = tuple(dict.fromkeys(p for i, ps in starts if i == at for p in ps))
        fork = Fork(pairs, [replay(s) for s in earlier[at:]] if replay else [], base + 1)
    return ProbeSpec(upstream, base, fork)


def cotangents(namespace: dict, names: tuple[str, ...], seed: int,
               graded: tuple[str, ...] = ()) -> dict[str, Tensor]:
    """Random stand-ins for the arriving gradients: the same shapes, random in every entry (the
    zeros too: an answer that leans on where this network always sends 0, a causal mask or the
    classes a loss does not pick, is not the line's rule), and of the size of the gradients
    around them, so that a branch that adds nearly nothing with the real values adds something
    now."""
    present = [(n, namespace[n]) for n in names
               if isinstance(namespace.get(n), Tensor) and namespace[n].is_floating_point()]
    sizes = [_rms(t) for _, t in present]
    sizes += [_rms(namespace[gradient(g)]) for g in graded
              if isinstance(namespace.get(gradient(g)), Tensor)
              and namespace[gradient(g)].is_floating_point()]
    scale = max([s for s in sizes if math.isfinite(s)] or [1.0]) or 1.0
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, real in present:
        r = torch.randn(tuple(real.shape), generator=g, dtype=torch.float32, device="cpu") * scale
        out[name] = r.to(device=real.device, dtype=real.dtype)
    return out


def _rms(t: Tensor) -> float:
    return float(t.detach().double().pow(2).mean().sqrt()) if t.numel() else 0.0


# --- the engine's side: what the change must be -----------------------------------------------


class Graph:
    """The lesson's forward pass with autograd on, in float32 and float64, for VJPs of any line."""

    def __init__(self, ns32: dict, ns64: dict):
        self.ns = {torch.float32: ns32, torch.float64: ns64}

    @classmethod
    def of(cls, network, batch) -> Graph:
        from tutor.core.network import forward_namespace

        sources = [line.source for line in network.pack.forward_lines]
        Xb, Yb = batch.values["Xb"], batch.values["Yb"]
        # The batch's own parameters: a notebook's, in its own frame (tutor/core/frame.py).
        params = {k: batch.values.get(k, p) for k, p in network.params.items()}
        return cls(*(forward_namespace(network.pack, params, Xb, Yb, dtype, device,
                                       sources, network.sizes, fns=network.fns)
                     for dtype, device in ((torch.float32, network.device),
                                           (torch.float64, torch.device("cpu")))))

    def vjp(self, outputs: list[str], cots: list[Tensor], tensor: str, dtype: torch.dtype,
            local: bool = False, sources: dict[str, str] | None = None) -> Tensor | None:
        ns = self.ns[dtype]
        target = ns.get(tensor)
        if not isinstance(target, Tensor):
            return None
        device = target.device
        cots = [c.detach().to(device=device, dtype=dtype) for c in cots]
        with torch.enable_grad():
            if local:
                # What reaches the tensor through these lines alone (a first branch): the lines
                # re-run with every other operand detached.
                leaf = target.detach().requires_grad_(True)
                scope = {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in ns.items()}
                scope[tensor] = leaf
                outs = [eval(compile(ast.Expression(_value(sources[o])), "<probe>", "eval"),
                             scope) for o in outputs]  # trusted pack code
                wrt = leaf
            else:
                outs = [ns[o] for o in outputs]
                wrt = target
            keep = [(o, c) for o, c in zip(outs, cots, strict=True)
                    if isinstance(o, Tensor) and o.requires_grad]
            try:
                # A gradient of a shape that broadcasts ([64] for [1, 64]) stands for its
                # broadcast, as where it was accepted.
                keep = [(o, c if c.shape == o.shape else c.broadcast_to(o.shape))
                        for o, c in keep]
            except RuntimeError:
                return None
            if not keep or not wrt.requires_grad:
                return judged(torch.zeros_like(target.detach()))
            (grad,) = vjp([o for o, _ in keep], [wrt], [c for _, c in keep],
                          retain_graph=True, allow_unused=True)
        # Made on the lesson's device, judged on the CPU (tutor/devices.py).
        return judged(torch.zeros_like(target.detach()) if grad is None else grad.detach())


def _value(source: str) -> ast.expr:
    return ast.parse(source).body[0].value  # type: ignore[attr-defined]


@dataclass
class Outcome:
    """One tensor's probe: the rule followed or not, and what to tell the learner."""

    tensor: str
    passed: bool
    added_nothing: bool = False
    value: Tensor | None = None  # the learner's answer in the line probe
    expected: Tensor | None = None  # what it should have been there
    failed: str | None = None  # the probe's run gave no gradient to judge: what happened


def unfit(grad: str, real: Tensor, value: object) -> str | None:
    """Why the probe's value for `grad` cannot stand for a rule's answer, or None when it is a
    tensor like the real run's (same shape and dtype, finite)."""
    if value is None:
        return f"it left no `{grad}`"
    if not isinstance(value, Tensor):
        what = getattr(value, "why", None) or f"a {getattr(value, 'type_name', 'value')}"
        return f"its `{grad}` was {what}, not a tensor"
    if tuple(value.shape) != tuple(real.shape):
        return (f"its `{grad}` had shape {list(value.shape)} (in the real run "
                f"{list(real.shape)})")
    if value.dtype != real.dtype:
        return (f"its `{grad}` was {str(value.dtype)[6:]} (in the real run "
                f"{str(real.dtype)[6:]})")
    if value.numel() and not bool(torch.isfinite(value).all()):
        return f"its `{grad}` held NaN or infinite values"
    return None


def _names(names: list[str]) -> str:
    return " and ".join(f"`{n}`" for n in names) or "the arriving gradient"


def judge(pack: Pack, step: Step, graph: Graph, before: dict, real: dict, probe: dict | None,
          spec: ProbeSpec, tensor: str, partial: bool, closing: bool, fork: bool = False,
          why: str | None = None) -> Outcome | None:
    """Whether the answer's change under the probe is the line's VJP of the cotangents' change.

    `real` and `probe` map gradient names to the learner's values in the real and the probe run
    (`probe` None when that run gave nothing, `why` saying what happened). A probe that cannot
    be run or judged, for whatever reason, is an Outcome that did not pass, with `failed`
    saying why: a step with a probe follows the line's rule or does not, never neither.
    """
    grad = gradient(tensor)
    ours_real = real.get(grad)
    if not isinstance(ours_real, Tensor):
        return Outcome(tensor, False, failed=f"its `{grad}` was not a tensor")
    if fork:
        assert spec.fork is not None
        pairs, names, seed = list(spec.fork.pairs), spec.fork.upstream, spec.fork.seed
    else:
        pairs, names, seed = arriving(step), spec.upstream, spec.seed
    cots = cotangents(before, names, seed, step.checks + step.partials)
    missing = [n for n, _ in pairs if n not in cots]
    pairs = [(n, o) for n, o in pairs if n in cots]
    if not pairs:
        return Outcome(tensor, False, failed=f"{_names(missing)} was not there as a float "
                       "tensor to vary when the step began")
    if probe is None:
        return Outcome(tensor, False, failed=why or "it gave no answer")
    ours_probe = probe.get(grad)
    problem = unfit(grad, ours_real, ours_probe)
    if problem:
        return Outcome(tensor, False, failed=problem)
    assert isinstance(ours_probe, Tensor)
    outputs = [o for _, o in pairs]
    sources = {line.target: line.source for line in pack.forward_lines}
    local = partial and not closing
    d32 = [cots[n].float() - before[n].float() for n, _ in pairs]
    d64 = [cots[n].double().cpu() - before[n].double().cpu() for n, _ in pairs]
    want32 = graph.vjp(outputs, d32, tensor, torch.float32, local, sources)
    want64 = graph.vjp(outputs, d64, tensor, torch.float64, local, sources)
    if want32 is None or want64 is None:
        shapes = ", ".join(f"`{n}` of shape {list(before[n].shape)}" for n, _ in pairs)
        return Outcome(tensor, False, failed=f"the gradient arriving at the line ({shapes}) "
                       "no longer fits the line's output, so nothing could be sent through it")
    change = ours_probe.detach().double() - ours_real.detach().double()
    # A shape that fits is graded as it fits.
    g = grade(tensor, change, want32.float(), want64, headroom=PROBE_HEADROOM)
    if g.verdict is Verdict.WRONG and slips.tie_equivalent(pack, step, tensor, change, want64,
                                                            before):
        g.verdict = Verdict.APPROXIMATE  # another split of a max-pool's ties (tutor/core/slips.py)
    scale = float(want64.abs().max()) or 1.0
    nothing = float(change.abs().max()) <= 1e-6 * scale if change.numel() else True
    if fork or not g.accepted and g.verdict is Verdict.SHAPE:
        return Outcome(tensor, g.accepted, nothing)
    value = as_graded(ours_probe.detach().float(), want32)
    expected = as_graded(ours_real.detach().float(), want32) + want32
    return Outcome(tensor, g.accepted, nothing, value, expected)


def why_it_looked_right(step: Step, before: dict, tensor_value: Tensor) -> str:
    """What made the real arriving gradient unable to tell the rules apart, in a few words."""
    parts = []
    size = float(tensor_value.detach().abs().max()) or 1.0
    for name, _ in arriving(step):
        u = before.get(name)
        if not isinstance(u, Tensor) or not u.is_floating_point() or not u.numel():
            continue
        top = float(u.detach().abs().max())
        zero = float((u == 0).double().mean())
        if top <= NEARLY_ZERO * size:
            parts.append(f"`{name}`, which is nearly 0 (at most {top:.1e})")
        elif zero > 0:
            parts.append(f"`{name}`, which is 0 at {zero:.0%} of its entries")
        else:
            parts.append(f"`{name}`")
    return " and ".join(parts) or "the real upstream gradient"


def message(step: Step, grad: str, before: dict, value: Tensor, detail: str) -> str:
    lines = ", ".join(f"`{t}`" for t in step.lines)
    return (f"Right for this network: with the real {why_it_looked_right(step, before, value)}, "
            f"your {grad} matches autograd's on this batch and on a fresh one. But with any other "
            f"gradient arriving at {lines} it does not, so it is not the line's rule. "
            f"{detail}").strip()


def _route(out: Outcome) -> str:
    """Where the line sends a gradient, when that is a telling few entries (a max: one per
    row), as the end of a sentence."""
    if out.value is None or out.expected is None:
        return ""
    change = (out.expected - out.value).detach().abs().cpu()
    if change.dim() != 2 or not change.numel():
        return ""
    live = change > 1e-6 * float(change.max())
    rows = live.any(1)
    if bool(rows.any()) and bool((live.sum(1)[rows] == 1).all()):
        return ": the line sends the gradient to one entry per row"
    return ""


def _explained(pack: Pack, step: Step, tensor: str, value: Tensor, expected: Tensor,
               scope: dict, n: int) -> Diagnosis | None:
    """The catalogued mistake or derived rewrite the answer matches under the probe, if any."""
    from tutor.core import derived
    from tutor.core.candidate import Output, compile_candidate, copy_namespace, execute
    from tutor.core.diagnosis import close

    for m in step.mistakes:
        if (m.tensor or step.checks[0]) != tensor:
            continue
        ns = copy_namespace(scope)
        try:
            execute(compile_candidate(m.code), ns, Output())  # our code, on plain tensors
        except Exception:  # noqa: BLE001 - a mistake that cannot run matches nothing
            continue
        produced = ns.get(gradient(tensor))
        if isinstance(produced, Tensor) and produced.shape == value.shape and close(value,
                                                                                     produced):
            return Diagnosis(m.kind, m.message.strip())
    if value.shape != expected.shape or not torch.isfinite(value).all():
        return None
    return derived.explain(pack, step, tensor, value, expected, scope, n)


def apply(pack: Pack, step: Step, graph: Graph, spec: ProbeSpec, before: dict, real: dict,
          line: dict | None, fork: dict | None, grades: list, n: int, code: str = "",
          why: dict | None = None) -> None:
    """Answer "is it the line's rule?" for every row whose values are right (TensorCheck.rule):
    followed when any probe that applies sees the line's VJP, skipped (with a note that says
    what was skipped and why the values still match) when none does. A probe never turns right
    values into ✗: that is the values' and the fresh batch's to say. `why` says, per probe,
    what happened when its run gave no values."""
    why = why or {}
    unread = [u for u in spec.upstream if u in before and u not in code_facts.of(code).names]
    for g in grades:
        if not g.accepted:
            continue
        closing = g.reference_step is not None
        tries = [judge(pack, step, graph, before, real, line, spec, g.tensor, g.partial,
                       closing, why=why.get("line"))]
        out = tries[0]
        if out is not None and not out.passed and out.failed is None \
                and g.partial and not closing:
            # Both branches typed at the first one: the complete gradient's rule is right too.
            tries.append(judge(pack, step, graph, before, real, line, spec, g.tensor, True,
                               True))
        if spec.fork is not None and not g.partial and (fork is not None or why.get("fork")):
            # Right from where the branch began: the rule holds.
            tries.append(judge(pack, step, graph, before, real, fork, spec, g.tensor, False,
                               False, fork=True, why=why.get("fork")))
        applied = [t for t in tries if t is not None] or [
            Outcome(g.tensor, False, failed="it gave no answer")]
        if any(t.passed for t in applied):
            g.rule = Rule.FOLLOWED
            continue
        g.rule = Rule.SKIPPED
        note = _skipped(pack, step, spec, before, real, g, out, applied, unread, n)
        g.note = f"{g.note} {note}" if g.note else note


def _skipped(pack: Pack, step: Step, spec: ProbeSpec, before: dict, real: dict, g, out,
             applied: list[Outcome], unread: list[str], n: int) -> str:
    """What a row that skipped the line's rule skipped, and why its values still match."""
    lines = ", ".join(f"`{t}`" for t in step.lines)
    failures = [t.failed for t in applied if t.failed]
    if (out is None or out.failed) and failures:
        which = "the rule probe" if len(failures) == 1 else "the rule probes"
        return (f"Your {g.grad} matches autograd's on this batch and on a fresh one, but when "
                f"a random gradient arrived at {lines} ({which}) {'; '.join(failures)}. Code "
                f"that applies the line's derivative runs the same whatever arrives, so this "
                f"answer counts as right for this network only, not as the line's rule.")
    value = real[g.grad]
    looked = why_it_looked_right(step, before, value)
    started = isinstance(before.get(g.grad), Tensor)  # a branch to add to was there
    if out.added_nothing and started:
        return (f"Your code adds nothing to {g.grad} for {lines}: that branch is skipped. "
                f"The values still match because of the real {looked}: the branch carries "
                f"(nearly) nothing for any gradient this network sends{_route(out)}. The "
                f"line's rule adds it, and stays right if the lines around it change.")
    if unread and len(unread) == len([u for u in spec.upstream if u in before]):
        names = " and ".join(f"`{u}`" for u in unread)
        return (f"Your code never reads {names}, the gradient arriving at {lines}: it writes "
                f"in what this network always sends there (the loss's own derivative, worked "
                f"out by hand) instead of applying the line's derivative to it. That is why "
                f"the values match on every batch, and why the step is marked as passed "
                f"without the line's rule: the chain rule takes the gradient from above.")
    if out is None or out.failed:
        return message(step, g.grad, before, value, "")
    if out.added_nothing:
        return (f"Your {g.grad} does not change when the gradient arriving at {lines} does: "
                f"it is written in as a value. It matches because of the real {looked}: for "
                f"any gradient this network sends, {g.grad} is that value up to rounding. The "
                f"line's rule gives it too, and stays right if the lines around it change.")
    detail = ""
    if out.value is not None and out.expected is not None:
        from tutor.core.diagnosis import where_wrong

        scope = {**before, **cotangents(before, spec.upstream, spec.seed,
                                        step.checks + step.partials)}
        found = _explained(pack, step, g.tensor, out.value, out.expected, scope, n)
        detail = (found.message + " ") if found else ""
        # Where a random arriving gradient shows the difference: one entry per row for a max,
        # the kept positions of a mask, ...
        detail += f"With a random one, {where_wrong(out.value, out.expected)}."
    return message(step, g.grad, before, value, detail)
