"""The forward file, run where learner code runs, and its backward pass derived and checked.

`pack new` is meant for a grading server as much as a laptop, and the file is a stranger's code.
So nothing of it runs in the process that reads it: `run` forks the same confined child a check
uses (`tutor.process.isolate`: dies with its parent, CPU, memory and wall-clock limits, Landlock
and seccomp where the system has them), and in there the file runs as learner code does:
compiled behind the sandbox's syntax policy and with every attribute read through its run-time
guard, its `torch`, `F` and `math` the sandbox's own. The one thing it may do beyond learner code
is seed a generator (`forward_file.SEEDING`). What comes back is plain data (the child's
messages are read with an unpickler that accepts no classes): the lines' shapes, and the pack's
steps as text, which the parent writes and never runs.

In the child: `setup` and `batch` are called (the batch twice, at two sizes and seeds), the forward
lines run on both batches in float32 and float64 with autograd on, every node of every line is
evaluated for its shape, each line's backward pass is derived (`derivative`), and each step's
reference is held to autograd: each line's code against the line's vector-Jacobian product for a
random arriving gradient, on both batches, then all steps in a row against the full gradients.
A derivation that fails either is not written: its step gets a TODO. Catalogued mistakes are
the step's reference rewritten by the tutor's own machinery (`tutor.core.derived`), run on the
namespace each step starts from and kept where the tutor's grading refuses them and each is
told apart from the others.
"""

from __future__ import annotations

import ast
import math
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tutor.authoring import derivative, steps
from tutor.authoring.derivative import Fact, LineBackward, Namer, Style, Unsupported
from tutor.authoring.forward_file import BATCH_NAMES, SEEDING, ForwardFile, Unusable, renamed
from tutor.core import derived
from tutor.core import slips as slip_rules
from tutor.core.candidate import (
    CheckTimeout,
    CodeError,
    Output,
    arm,
    compile_candidate,
    copy_namespace,
    disarm,
    execute,
    sandbox_globals,
)
from tutor.core.diagnosis import close
from tutor.core.grading import grade
from tutor.core.network import at_precision
from tutor.core.quick import vjp
from tutor.pack.flow import gradient
from tutor.pack.kinds import LineGradient
from tutor.pack.model import Exercise, Pack, Step
from tutor.process import isolate
from tutor.sandbox import confine
from tutor.sandbox.guard import GUARD_NAME, rewrite
from tutor.sandbox.modules import GUARD, MODULES

Tensor = torch.Tensor

BUDGET = 60.0  # seconds, wall clock and CPU, for everything the child does, by default
MEMORY_GB = 4.0  # address space the child may add to what it holds when forked
TOLERANCE = 1e-6  # float64 agreement with autograd, relative to the gradient's size
MISTAKES = 3  # catalogued mistakes kept per step
CANDIDATES = 120  # rewrites of a reference tried per graded tensor


@dataclass(frozen=True)
class Request:
    file: ForwardFile
    text: str | None  # the DATA file's text
    prefix: str  # the steps' ids start with it
    batch_size: int
    heldout_batch_size: int
    seed: int = 1234
    budget: float = BUDGET  # seconds, wall clock and CPU, for everything the child does


def run(request: Request, progress: Callable[[str], None] = lambda _: None) -> dict:
    """Everything the pack needs from running the file, made in a confined child; Unusable with
    one line when the file cannot make a lesson."""
    if not isolate.can_fork(torch.device("cpu")):
        raise Unusable("pack new runs the file in a forked, confined process, which this system "
                       "does not offer")
    stage = {"doing": "reading the file"}
    confine.prepare()  # what confining needs, loaded while files can still be opened

    def heard(message: dict) -> None:
        if isinstance(message, dict) and isinstance(message.get("doing"), str):
            stage["doing"] = message["doing"][:200]
            progress(stage["doing"])

    outcome = isolate.run(lambda send, _cancel: _work(request, send), timeout=request.budget,
                          cpu_seconds=request.budget, memory_gb=MEMORY_GB, on_message=heard,
                          what="pack new's child")
    name = request.file.name
    if outcome.status == "timeout":
        raise Unusable(f"{name}: {stage['doing']} did not finish within {request.budget:g} s "
                       "(a loop that never ends?)")
    if outcome.status != "done" or not isinstance(outcome.result, dict):
        why = {"cpu": "it ran out of CPU time", "killed": "it was killed"}.get(
            outcome.why, outcome.why or "it ended without an answer")
        raise Unusable(f"{name}: the sandbox stopped it while {stage['doing']}: {why}")
    result = outcome.result
    if isinstance(result.get("unusable"), str):
        raise Unusable(result["unusable"])
    if isinstance(result.get("failed"), str):
        raise RuntimeError(result["failed"])
    if not _well_formed(result):
        raise Unusable(f"{name}: the sandbox sent back something that is not a lesson")
    return result


def _strings(value, count: int | None = None) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value) \
        and (count is None or len(value) == count)


def _well_formed(result: dict) -> bool:
    """What came back from the child has the shape the writer reads, and nothing else: plain
    strings where the pack holds text (a child that escaped its guards could send anything)."""
    try:
        steps_ok = all(
            all(isinstance(s[k], str) for k in ("id", "title", "template", "solution",
                                                "explanation"))
            and all(_strings(s[k]) for k in ("lines", "checks", "partials", "hints"))
            and (s["todo"] is None or isinstance(s["todo"], str))
            and all(isinstance(m, dict) and all(isinstance(m[k], str) for k in
                                                ("code", "kind", "message", "tensor"))
                    for m in s["mistakes"])
            for s in result["steps"])
        return (steps_ok and _strings(result["keys"], 2) and _strings(result["params"])
                and _strings(result["tensors"])
                and all(isinstance(ln["target"], str) and isinstance(ln["source"], str)
                        for ln in result["lines"]))
    except (KeyError, TypeError):
        return False


def _work(request: Request, send: Callable[[dict], None]) -> dict:
    """The child's whole job; plain data back."""
    torch.set_num_threads(1)
    # The file's warnings would reach the terminal through the child's stderr: a refusal is one
    # line, and a made pack says what it made.
    warnings.simplefilter("ignore")
    trial = Trial(request, send)
    try:
        # the child's own alarm comes first, so that it can say what it was doing
        armed = arm(max(0.5, request.budget * 0.8))
        try:
            return trial.result()
        finally:
            if armed:
                disarm()
    except Unusable as exc:
        return {"unusable": str(exc)}
    except CheckTimeout:
        return {"unusable": f"{request.file.name}: {trial.stage} did not finish within "
                            f"{request.budget:g} s (a loop that never ends?)"}
    except Exception as exc:  # noqa: BLE001 - the tutor's own failure, said in a line
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {"failed": f"pack new failed: {type(exc).__name__}: {exc} "
                          f"({Path(where.filename).name}:{where.lineno})"}


def _author_guard(obj, name):
    """The sandbox's guard, letting the file seed a generator (and nothing else more)."""
    if name == SEEDING:
        if type(obj) is torch.Generator:
            return obj.manual_seed
        if obj is MODULES["torch"]:
            return torch.manual_seed
    return GUARD(obj, name)


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    return text[:240]


class Trial:
    def __init__(self, request: Request, send: Callable[[dict], None]):
        self.r = request
        self.file = request.file
        self.send = send
        self.out = Output()
        self.stage = "reading the file"

    def doing(self, what: str) -> None:
        self.stage = what
        self.send({"doing": what})

    # -- the file's own functions ----------------------------------------------------------------
    def result(self) -> dict:
        self.doing("running the file's top level")
        self.author = self.module()
        self.doing("calling setup")
        made = self.call("setup", self.r.seed)
        self.setup_values = self.check_setup(made)
        self.doing("calling batch")
        main = self.batch(self.r.batch_size, self.r.seed + 1)
        held = self.batch(self.r.heldout_batch_size, self.r.seed + 2)
        self.keys = list(main)
        self.lines = self.rename()
        self.doing("running forward")
        self.values = {
            (kind, dtype): self.forward(data, dtype)
            for kind, data in (("main", main), ("held", held))
            for dtype in (torch.float32, torch.float64)}
        self.check_loss()
        self.doing("deriving the backward pass")
        self.exprs = {ln.target: ast.parse(ln.source).body[0].value for ln in self.lines}
        self.facts = {k: self.node_facts(k) for k in ("main", "held")}
        self.full = {dtype: self.gradients(self.values[("main", dtype)])
                     for dtype in (torch.float32, torch.float64)}
        live = [ln for ln in self.lines if ln.target in self.full[torch.float64]
                or ln.target == self.file.loss]
        backward, why = self.derive_all(live)
        infos = [steps.LineInfo(i, ln.target, ln.source, self.operands(ln.target, backward))
                 for i, ln in enumerate(live)]
        operands = {info.target: info.operands for info in infos}
        plans = steps.plan([i for i in infos if i.operands])
        self.doing("checking the backward pass against autograd")
        made_steps = self.assemble(plans, backward, why, operands)
        self.doing("cataloguing mistakes")
        self.catalogue(made_steps, plans, operands)
        return self.answer(made_steps, plans, operands)

    def module(self) -> dict:
        tree = ast.parse(self.file.runnable, self.file.name)
        code = compile(rewrite(tree), self.file.name, "exec")
        ns = sandbox_globals(self.out)
        ns[GUARD_NAME] = _author_guard
        ns["__name__"] = "forward_file"
        self.guarded(lambda: exec(code, ns), "its top level")  # noqa: S102 - guarded code
        return ns

    def guarded(self, fn: Callable, what: str):
        """Run the file's code; its failure is the file's, told in one line."""
        try:
            with torch.no_grad():
                return fn()
        except CheckTimeout:
            raise
        except Exception as exc:  # noqa: BLE001 - the file's own failure
            line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__))
                         if f.filename == self.file.name), None)
            where = f"{self.file.name} line {line}" if line else self.file.name
            raise Unusable(f"{where}: {what} fails: {type(exc).__name__}: "
                           f"{_first_line(exc)}") from None

    def call(self, name: str, *args, **kw):
        fn = self.author.get(name)
        if not callable(fn):
            raise Unusable(f"{self.file.name}: `{name}` is not a function")
        return self.guarded(lambda: fn(*args, **kw), f"`{name}`")

    def check_setup(self, made) -> dict[str, Tensor]:
        name = self.file.name
        if not isinstance(made, dict) or not made:
            raise Unusable(f"{name}: setup(seed) must return a dict of tensors, not "
                           f"{type(made).__name__}")
        out = {}
        for k, v in made.items():
            if not isinstance(k, str) or not k.isidentifier():
                raise Unusable(f"{name}: setup's dict has the key {k!r}, which is not a name")
            if not isinstance(v, Tensor):
                raise Unusable(f"{name}: setup's `{k}` is a {type(v).__name__}, not a tensor")
            if k in self.file.args and not v.is_floating_point():
                raise Unusable(f"{name}: setup's `{k}` is a {str(v.dtype)[6:]} tensor; what "
                               "setup makes is float (build integer or boolean tensors in "
                               "forward or in batch)")
            out[k] = v.detach()
        for fixed in self.file.fixed:
            if fixed not in out:
                raise Unusable(f"{name}: FIXED names `{fixed}`, which setup does not return")
        return out

    def batch(self, n: int, seed: int) -> dict[str, Tensor]:
        kw = {}
        if "text" in self.file.batch_takes:
            kw["text"] = self.r.text
        if "split" in self.file.batch_takes:
            kw["split"] = "train"
        made = self.call("batch", n, seed, **kw)
        name = self.file.name
        if isinstance(made, (tuple, list)) and len(made) == 2:
            wanted = [a for a in self.file.args if a not in self.setup_values
                      and a not in self.file.constants]
            if len(wanted) != 2:
                raise Unusable(f"{name}: batch returns two tensors, but forward takes "
                               f"{len(wanted)} arguments that setup does not make")
            made = dict(zip(wanted, made, strict=True))
        if not isinstance(made, dict) or len(made) != 2 or not all(
                isinstance(v, Tensor) for v in made.values()):
            more = (" (a third tensor, such as noise or a mask, can be drawn once in `setup` "
                    "and listed in FIXED)" if isinstance(made, dict) and len(made) > 2 else "")
            raise Unusable(f"{name}: batch(n, seed) must return a dict of two tensors, the "
                           f"inputs and then the targets{more}")
        for k, v in made.items():
            if v.dim() == 0 or v.shape[0] != n:
                raise Unusable(f"{name}: batch({n}, seed) returned `{k}` of shape "
                               f"{list(v.shape)}: both tensors must have the batch's {n} "
                               "examples first")
        return {k: v.detach() for k, v in made.items()}

    def rename(self) -> list:
        """The forward lines with the batch's names as the lesson's (`X` -> `Xb`)."""
        names = dict(zip(self.keys, BATCH_NAMES, strict=True))
        for arg in self.file.args:
            if arg not in self.setup_values and arg not in names \
                    and arg not in self.file.constants:
                raise Unusable(f"{self.file.name}: forward's argument `{arg}` is made by "
                               "neither setup nor batch")
        for taken in BATCH_NAMES:
            if taken in self.setup_values or any(ln.target == taken for ln in self.file.lines):
                raise Unusable(f"{self.file.name}: `{taken}` is the lesson's name for a "
                               "batch's tensor; call yours something else")
        mapping = {k: v for k, v in names.items() if k != v}
        return [type(ln)(ln.target, renamed(ln.source, mapping), ln.lineno)
                for ln in self.file.lines]

    @property
    def params(self) -> list[str]:
        return [k for k in self.setup_values if k in self.file.args
                and k not in self.file.fixed]

    def sizes(self, n: int) -> dict:
        return {**self.file.constants, "n": n, "batch_size": n}

    def forward(self, data: dict[str, Tensor], dtype: torch.dtype) -> dict:
        ns = sandbox_globals(Output())
        n = int(next(iter(data.values())).shape[0])
        ns.update(self.sizes(n))
        for k, v in self.setup_values.items():
            if k in self.file.args:
                ns[k] = v.to(dtype).clone().requires_grad_(k in self.params)
        for v, name in zip(data.values(), BATCH_NAMES, strict=True):
            ns[name] = v.to(dtype) if v.is_floating_point() else v
        for line in self.lines:
            code = self.compiled(line.source)
            try:
                with torch.enable_grad(), at_precision(dtype):
                    exec(code, ns)  # noqa: S102 - compiled behind the sandbox's guard
            except CheckTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - the file's own failure
                written = next(ln.source for ln in self.file.lines if ln.target == line.target)
                how = " in float64, the lesson's yardstick" if dtype == torch.float64 else ""
                raise Unusable(f"{self.file.name} line {line.lineno}: `{written}` fails on a "
                               f"batch of {n}{how}: {type(exc).__name__}: "
                               f"{_first_line(exc)}") from None
        return ns

    def compiled(self, source: str):
        try:
            return compile_candidate(source, f"<{self.file.name}>")
        except CodeError as exc:
            raise Unusable(f"{self.file.name}: `{source}`: {exc}") from None

    def check_loss(self) -> None:
        loss = self.values[("main", torch.float32)][self.file.loss]
        name = self.file.name
        if not isinstance(loss, Tensor):
            raise Unusable(f"{name}: the loss `{self.file.loss}` is a {type(loss).__name__}, "
                           "not a tensor")
        if loss.numel() != 1 or loss.dim() != 0:
            raise Unusable(f"{name}: the loss `{self.file.loss}` has shape {list(loss.shape)}, "
                           "not a scalar: forward's last line must make one number (a mean "
                           "over the batch)")
        if not loss.requires_grad:
            raise Unusable(f"{name}: no parameter of setup reaches the loss "
                           f"`{self.file.loss}`")
        if not math.isfinite(float(loss.detach())):
            raise Unusable(f"{name}: the loss `{self.file.loss}` is {float(loss.detach())}")

    # -- facts about every node --------------------------------------------------------------------
    def node_facts(self, kind: str) -> dict[int, tuple]:
        ns = self.values[(kind, torch.float32)]
        out: dict[int, tuple] = {}
        for expr in self.exprs.values():
            for node in ast.walk(expr):
                if not isinstance(node, ast.expr) or isinstance(node, (ast.Slice, ast.Starred)):
                    continue
                source = f"node_value = {ast.unparse(node)}"
                try:
                    code = compile_candidate(source, "<node>")
                    scope = dict(ns)
                    with torch.enable_grad():
                        exec(code, scope)  # noqa: S102 - behind the guard
                    value = scope.get("node_value")
                except CheckTimeout:
                    raise
                except Exception:  # noqa: BLE001 - a node that is no value of its own
                    continue
                if isinstance(value, Tensor):
                    out[id(node)] = (tuple(value.shape), bool(value.requires_grad), None)
                else:
                    out[id(node)] = (None, False, value)
        return out

    def fact(self, node: ast.AST) -> Fact:
        main = self.facts["main"].get(id(node))
        held = self.facts["held"].get(id(node))
        if main is None:
            return Fact(None, None)
        return Fact(main[0], held[0] if held else main[0], main[1], main[2])

    def gradients(self, ns: dict) -> dict[str, Tensor]:
        """Autograd's gradient of the loss for every parameter and every line that reaches it."""
        names = [k for k in [*self.params, *(ln.target for ln in self.lines)]
                 if isinstance(ns.get(k), Tensor) and ns[k].requires_grad
                 and k != self.file.loss]
        grads = torch.autograd.grad(ns[self.file.loss], [ns[k] for k in names],
                                    retain_graph=True, allow_unused=True)
        return {k: g.detach() for k, g in zip(names, grads, strict=True) if g is not None}

    # -- the derivative ------------------------------------------------------------------------
    def taken(self) -> set[str]:
        names = {*self.setup_values, *BATCH_NAMES, *(ln.target for ln in self.lines),
                 *self.file.constants, "n", "batch_size"}
        return names | {gradient(k) for k in names} | {"torch", "F", "math"}

    def derive_all(self, live) -> tuple[dict[str, dict[Style, LineBackward]], dict[str, str]]:
        """Each line's backward pass in every style that holds against autograd, the plain one
        first; for a line with none, why."""
        n, n_held = self.r.batch_size, self.r.heldout_batch_size
        self.namer = Namer({k: v for k, v in self.file.constants.items()
                            if k not in ("batch_size", "heldout_batch_size")}, n, n_held)
        out: dict[str, dict[Style, LineBackward]] = {}
        why: dict[str, str] = {}
        self.names_taken = self.taken()
        for line in live:
            out[line.target] = {}
            for style in (Style(), Style(safe=True)):
                try:
                    lb = self.derive(line.target, self.namer, self.names_taken, style)
                except Unsupported as exc:
                    why[line.target] = f"pack new has no derivative for {exc}"
                    break
                problem = self.verify_line(line.target, lb)
                if problem is None:
                    out[line.target][style] = lb
                    self.names_taken |= {s.split(" =")[0] for s in lb.prelude}
                elif not out[line.target]:
                    why[line.target] = problem
        return out, why

    def derive(self, target: str, namer: Namer, taken: set[str], style: Style) -> LineBackward:
        expr = self.exprs[target]
        if target == self.file.loss:
            return derivative.derive_loss(target, expr, self.fact, namer, taken, style)
        return derivative.derive(target, expr, self.fact, namer, taken, style)

    def operands(self, target: str, backward: dict[str, dict[Style, LineBackward]]
                 ) -> tuple[str, ...]:
        """The names the line sends a gradient to, in the order it reads them."""
        wanted = set(self.full[torch.float64]) | set(self.params)
        lb = next(iter(backward.get(target, {}).values()), None)
        order = [n.id for n in _preorder(self.exprs[target]) if isinstance(n, ast.Name)]
        names = [x for x in dict.fromkeys(order) if x in wanted and x != target
                 and self.fact_of_name(target, x)]
        if lb is not None:
            names = [x for x in names if x in lb.parts]
        return tuple(names)

    def fact_of_name(self, target: str, name: str) -> bool:
        return any(isinstance(n, ast.Name) and n.id == name and self.fact(n).grad
                   for n in ast.walk(self.exprs[target]))

    # -- held to autograd ---------------------------------------------------------------------
    def line_code(self, target: str, lb: LineBackward, modes: dict[str, str]) -> str:
        out = list(lb.prelude)
        for x, parts in lb.parts.items():
            out += steps.statements(x, parts, modes.get(x, "first"), fresh=False)
        return "\n".join(out) + "\n"

    def vjp(self, ns: dict, lines: list[str], names: list[str], cots: dict[str, Tensor | None]
            ) -> dict[str, Tensor]:
        """What reaches each of `names` through `lines` alone, every other tensor held fixed."""
        scope = sandbox_globals(Output())
        for k, v in ns.items():
            if isinstance(v, Tensor):
                scope[k] = v.detach()
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                scope[k] = v
        leaves = {x: scope[x].clone().requires_grad_(True) for x in names}
        outs, grads_out = [], []
        for target in lines:
            local = dict(scope)
            local.update(leaves)
            with torch.enable_grad():
                exec(self.compiled(f"{target} = {ast.unparse(self.exprs[target])}"), local)  # noqa: S102
            value = local[target]
            if isinstance(value, Tensor) and value.requires_grad:
                outs.append(value)
                grads_out.append(cots.get(target))
        if not outs:
            return {x: torch.zeros_like(v) for x, v in leaves.items()}
        got = vjp(outs, list(leaves.values()), grads_out, allow_unused=True)
        return {x: (torch.zeros_like(leaves[x]) if g is None else g.detach())
                for x, g in zip(leaves, got, strict=True)}

    def plain(self, ns: dict, n: int) -> dict:
        out = {k: v.detach() for k, v in ns.items() if isinstance(v, Tensor)}
        out.update(self.sizes(n))
        return out

    def verify_line(self, target: str, lb: LineBackward) -> str | None:
        """None when the line's code gives autograd's VJP on both batches, else why not."""
        for kind, seed in (("main", 7), ("held", 8)):
            ns = self.values[(kind, torch.float64)]
            n = self.r.batch_size if kind == "main" else self.r.heldout_batch_size
            base = self.plain(ns, n)
            cots: dict[str, Tensor | None] = {target: None}
            if target != self.file.loss:
                g = torch.Generator().manual_seed(seed)
                cot = torch.randn(ns[target].shape, generator=g, dtype=torch.float64)
                base[gradient(target)] = cot
                cots[target] = cot
            # every tensor the line reads whose gradient is wanted, not only those the
            # derivative sent one to: one it left out must get nothing from autograd either
            wanted = [n.id for n in _preorder(self.exprs[target]) if isinstance(n, ast.Name)
                      and self.fact(n).grad and n.id != target and n.id in ns]
            names = list(dict.fromkeys([*lb.parts, *wanted]))
            expected = self.vjp(ns, [target], names, cots)
            run = dict(base)
            try:
                execute(compile_candidate(self.line_code(target, lb, {}), "<derived>"), run,
                        Output())
            except CheckTimeout:
                raise
            except Exception as exc:  # noqa: BLE001 - a derivation that does not run
                return f"the derived code fails ({type(exc).__name__}: {_first_line(exc)})"
            for x in names:
                if x not in lb.parts:
                    if bool(expected[x].any()):
                        return f"the derivative sends no gradient to `{x}`"
                elif not _agrees(run.get(gradient(x)), expected[x]):
                    return f"the derived {gradient(x)} disagrees with autograd"
        return None

    def assemble(self, plans: list[steps.StepPlan], backward, why, operands) -> list[dict]:
        sources = {ln.target: ln.source for ln in self.lines}
        graded_at = {}
        ids = []
        for plan in plans:
            sid = f"{self.r.prefix}/{plan.checks[0]}"
            ids.append(sid)
            for x in plan.checks:
                graded_at[x] = sid
        made = []
        ns = self.plain(self.values[("main", torch.float64)], self.r.batch_size)
        full = self.full[torch.float64]
        for plan, sid in zip(plans, ids, strict=True):
            missing = [why.get(t, "no derivative") for t in plan.lines if not backward.get(t)]
            code, chosen = None, {}
            for style in ([] if missing else [Style(), Style(safe=True)]):
                # each line in this style where it holds, else in the one that does
                chosen = {t: backward[t].get(style) or next(iter(backward[t].values()))
                          for t in plan.lines}
                code = steps.solution(plan, chosen, operands)
                problem = self.replayed(ns, code, plan, full)
                if problem is None:
                    break
                code, missing = None, [problem]
            if code is None:
                code = steps.todo(missing[0])
                self.stand_in(ns, plan, operands)
            else:
                missing = []
            made.append({
                "id": sid,
                "title": steps.title(plan),
                "lines": plan.lines,
                "checks": plan.checks,
                "partials": plan.partials,
                "template": steps.template(plan, sources, operands, graded_at),
                "solution": code,
                "todo": missing[0] if missing else None,
                "explanation": steps.summary(plan, sources, chosen),
                "hints": (steps.hints(plan, chosen, self.shapes(), code, operands)
                          if not missing else _todo_hints(plan)),
            })
        return made

    def replayed(self, ns: dict, code: str, plan: steps.StepPlan, full: dict) -> str | None:
        """Run the step's code after the steps before it (in `ns`, which it changes); None when
        every gradient it completes is autograd's."""
        run = dict(ns)
        try:
            execute(compile_candidate(code, "<derived>"), run, Output())
        except CheckTimeout:
            raise
        except Exception as exc:  # noqa: BLE001 - the assembled step does not run
            return f"the derived step fails after the steps before it ({_first_line(exc)})"
        # A gradient that is (nearly) zero for this network, as makemore's b1 under batchnorm,
        # is compared at the size of the gradient that arrived, not at its own.
        arriving = max((float(run[gradient(t)].abs().max()) for t in plan.lines
                        if isinstance(run.get(gradient(t)), Tensor) and run[gradient(t)].numel()),
                       default=0.0)
        for x in plan.checks:
            if not _agrees(run.get(gradient(x)), full[x], floor=arriving):
                return (f"the derived {gradient(x)} disagrees with autograd after the steps "
                        "before it")
        ns.clear()
        ns.update(run)
        return None

    def stand_in(self, ns: dict, plan: steps.StepPlan, operands: dict,
                 dtype: torch.dtype = torch.float64) -> None:
        """A step with no reference: autograd's branches take its place for the steps after."""
        full = self.full[dtype]
        for target in plan.lines:
            cot = None if target == self.file.loss else full.get(target)
            if target != self.file.loss and cot is None:
                continue
            local = self.vjp(self.values[("main", dtype)], [target],
                             list(operands[target]), {target: cot})
            for x, value in local.items():
                if plan.modes.get((target, x)) == "add" and isinstance(ns.get(gradient(x)), Tensor):
                    ns[gradient(x)] = ns[gradient(x)] + value
                else:
                    ns[gradient(x)] = value.clone()

    def shapes(self) -> dict[str, list[int]]:
        ns = self.values[("main", torch.float32)]
        return {k: list(v.shape) for k, v in ns.items() if isinstance(v, Tensor)}

    # -- catalogued mistakes ---------------------------------------------------------------------
    def catalogue(self, made: list[dict], plans: list[steps.StepPlan], operands) -> None:
        n = self.r.batch_size
        ns = self.plain(self.values[("main", torch.float32)], n)
        pack = self.pack_record(made)
        earlier: list[str] = []
        for step, plan in zip(made, plans, strict=True):
            before = copy_namespace(ns)
            step["mistakes"] = []
            if step["todo"] is None:
                found = self.mistakes_of(step, plan, operands, pack, before, n, earlier)
                # one of each graded tensor in turn, so that each has its own
                limit = min(MISTAKES + 2, max(MISTAKES, len(found)))
                codes: set[str] = set()  # one code wrong in two tensors is one mistake
                while any(found.values()) and len(step["mistakes"]) < limit:
                    for tensor in list(found):
                        if found[tensor] and len(step["mistakes"]) < limit:
                            mistake = found[tensor].pop(0)
                            # the chain rule forgotten (the upstream as all ones) once a step:
                            # it is one slip, however many tensors it could be made on
                            kind = "ones" if "ones_like(" in mistake["code"] else \
                                mistake["code"].strip()
                            if kind not in codes:
                                codes.add(kind)
                                step["mistakes"].append(mistake)
                execute(compile_candidate(step["solution"], "<derived>"), ns, Output())
            else:
                self.stand_in(ns, plan, operands, torch.float32)
            earlier += plan.lines

    def mistakes_of(self, step: dict, plan: steps.StepPlan, operands, pack: Pack, before: dict,
                    n: int, earlier: list[str]) -> dict[str, list[dict]]:
        """For each tensor the step grades, the wrong answers the tutor refuses, each told
        apart from the ones before it."""
        refs = self.references(plan, earlier)
        record = pack.step(step["id"])
        record_pack = pack
        scope = {"torch": torch, "F": F, "math": math, "n": n, **{
            k: v for k, v in before.items()
            if isinstance(v, Tensor) or (isinstance(v, int) and not isinstance(v, bool))}}
        found: dict[str, list[dict]] = {}
        for tensor in plan.checks + plan.partials:
            ref32, ref64 = refs[tensor]
            kept: list[Tensor] = []
            found[tensor] = []
            for tried, (source, kind, message) in enumerate(
                    self.slips(plan, step, tensor, operands, pack, record, scope,
                                       earlier)):
                if tried >= CANDIDATES or len(kept) >= 3 * MISTAKES:
                    break
                value = self.value_of(source, before, tensor)
                if value is None or not bool(torch.isfinite(value).all()):
                    continue
                g = grade(tensor, value, ref32, ref64, tensor in plan.partials,
                          tensor in self.params)
                if g.accepted or any(close(value, other) for other in kept):
                    continue
                # A slip of the line's operation is said in the words the tutor will say
                # when a learner makes it; one written for the operation is kept only then.
                said = slip_rules.explain(record_pack, record, tensor, value, ref32,
                                          before) if value.shape == ref32.shape else None
                if said is not None:
                    kind, message = "known_mistake", said.message
                elif message is None:
                    continue
                kept.append(value)
                found[tensor].append({"code": source, "kind": kind, "message": message,
                                      "tensor": tensor, "named": said is not None})
            # The slips of the line's own operations first, then the tutor's other rewrites.
            found[tensor] = sorted(found[tensor], key=lambda m: not m.pop("named"))[:MISTAKES]
        return found

    def value_of(self, source: str, before: dict, tensor: str) -> Tensor | None:
        run = copy_namespace(before)
        try:
            execute(compile_candidate(source, "<mistake>"), run, Output())
        except CheckTimeout:
            raise
        except Exception:  # noqa: BLE001 - a rewrite that does not run is no mistake
            return None
        value = run.get(gradient(tensor))
        return value if isinstance(value, Tensor) else None

    def references(self, plan: steps.StepPlan, earlier: list[str]
                   ) -> dict[str, tuple[Tensor, Tensor]]:
        """Autograd's answer for each tensor the step grades, in float32 and float64: the whole
        gradient, or (a partial) what reaches it through the step's lines and the `earlier`
        steps' lines: its first branch, or the branches so far (tutor/core/network.py)."""
        out = {}
        for x in plan.checks:
            out[x] = (self.full[torch.float32][x], self.full[torch.float64][x])
        if plan.partials:
            pair = []
            for dtype in (torch.float32, torch.float64):
                full = self.full[dtype]
                lines = [*earlier, *plan.lines]
                cots = {t: (None if t == self.file.loss else full.get(t)) for t in lines}
                pair.append(self.vjp(self.values[("main", dtype)], lines,
                                     list(plan.partials), cots))
            for x in plan.partials:
                out[x] = (pair[0][x], pair[1][x])
        return out

    def slips(self, plan, step, tensor, operands, pack, record, scope, earlier):
        """Wrong answers for `d{tensor}`, the telling ones first: `=` where the branch must be
        added, then the tutor's own rewrites of the reference (tutor/core/derived.py)."""
        solution = step["solution"]
        closing = [t for t in plan.lines if plan.modes.get((t, tensor)) == "add"]
        if closing:
            replaced = solution.replace(f"{gradient(tensor)} += ", f"{gradient(tensor)} = ", 1)
            if replaced != solution:
                # the branches the gradient already held: those of the steps before
                others = [ln.source for ln in self.lines if tensor in operands.get(ln.target, ())
                          and ln.target in earlier]
                quoted = ", ".join(f"`{o}`" for o in others)
                where = f" ({quoted})" if others and len(quoted) <= 90 else (
                        f" ({len(others)} of them)" if others else "")
                lines = "a later line" if len(others) <= 1 else "later lines"
                yield (replaced, "partial",
                       f"This is the branch through this line alone. `{tensor}` is also used "
                       f"in {lines}{where}, and `{gradient(tensor)}` already held "
                       f"{'that branch' if len(others) <= 1 else 'their branches'} when "
                       f"this step began: add this one to it with `+=` instead of replacing it "
                       f"with `=`.")
        # The slips of the line's own operations first (a kernel not flipped, a pool spread
        # over its window): the mistakes learners make here, named as the tutor names them.
        for source in slip_rules.written_slips(pack, record):
            yield source, "known_mistake", None
        yield from steps.structural_slips(solution, tensor, self.shapes(),
                                          self.shapes().get(plan.lines[-1], []))
        for candidate in derived.candidates(pack, record, tensor, scope):
            if candidate.target != gradient(tensor):
                continue
            kind = "partial" if candidate.kind == "partial" else "known_mistake"
            yield candidate.source, kind, candidate.message

    def pack_record(self, made: list[dict]) -> Pack:
        """The steps as the pack model holds them, for the tutor's rewrites of a reference."""
        records = tuple(Step(id=s["id"], exercise=1, title=s["title"], lines=tuple(s["lines"]),
                             checks=tuple(s["checks"]), partials=tuple(s["partials"]),
                             template=s["template"], solution=s["solution"],
                             explanation=s["explanation"], hints=tuple(s["hints"]),
                             target=self.file.loss)
                        for s in made)
        exercise = Exercise(1, "lines", "", "", LineGradient(), records)
        return Pack(id=self.r.prefix, title="", root=Path("."), data_file=None, lesson={},
                    setup_code="", forward_code="\n".join(ln.source for ln in self.lines),
                    loss=self.file.loss, exercises=(exercise,))

    # -- what goes back ------------------------------------------------------------------------
    def answer(self, made: list[dict], plans, operands) -> dict:
        ns = self.values[("main", torch.float32)]
        return {
            "keys": list(self.keys),
            "lines": [{"target": ln.target, "source": ln.source} for ln in self.lines],
            "params": self.params,
            "tensors": [k for k in self.setup_values if k in self.file.args],
            "shapes": self.shapes(),
            "loss": float(ns[self.file.loss].detach()),
            "steps": made,
            "printed": self.out.text()[-2000:],
        }


def _agrees(value, expected: Tensor, floor: float = 0.0) -> bool:
    """`value` is autograd's `expected`, to float64 rounding of the larger of its size and
    `floor`."""
    if not isinstance(value, Tensor) or tuple(value.shape) != tuple(expected.shape):
        return False
    a, b = value.detach().double(), expected.detach().double()
    if not bool(torch.isfinite(a).all()):
        return False
    scale = max(float(b.abs().max()) if b.numel() else 0.0, floor)
    return bool(torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE * max(scale, 1e-12)))


def _todo_hints(plan: steps.StepPlan) -> list[str]:
    names = ", ".join(f"`{gradient(x)}`" for x in plan.checks)
    return [f"TODO: the idea behind {names}.", "TODO: the shapes involved.",
            "TODO: nearly the answer."]


def _preorder(node: ast.AST):
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _preorder(child)

