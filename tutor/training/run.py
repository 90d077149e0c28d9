"""Exercise 4 as computation, in the evaluator process: the gradient check against autograd,
training on the learner's gradients alone, then calibration, split losses and samples.

torch is imported inside the functions, so importing this module stays cheap for the UI.
"""


from __future__ import annotations

import ast
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from typing import TYPE_CHECKING, Any

from tutor import code_facts
from tutor.config import DEFAULT_SEED
from tutor.pack.flow import gradient, tensor_of
from tutor.pack.model import Pack
from tutor.sandbox.clean import clean
from tutor.values.results import CheckError, ErrorKind, TensorCheck
from tutor.values.runs import (
    GradcheckFailure,
    GradientCheck,
    LossHistory,
    ParameterCheck,
    RunPhase,
    RunProgress,
    RunSettings,
    RunStatus,
    SplitLosses,
    TrainingRun,
)

if TYPE_CHECKING:
    import threading

    from torch import Tensor

    from tutor.core.engine import Engine

from tutor.training.picture import PICTURE_NAMES, PICTURES, RunPicture
from tutor.training.plan import (
    TrainingSettings,
    speed_notes,
    training_code,
    with_header,
)

REPORT_INTERVAL = 0.1  # seconds between progress messages: about ten a second, never more
BATCH_CHUNK = 1024  # batches drawn per call of the pack's sample_batch (same random stream)
SAMPLE_SEED_OFFSET = 10  # the lecture samples with a generator seeded 2147483647 + 10
# Inductor options for the --compile fast path, chosen by benchmarks/train_speed.py. By default
# inductor inlines batchnorm's (bnvar + 1e-5)**-0.5 into every one of the 32 x 200 elements that
# use it instead of computing it once per column; realizing every computed node stops that. The
# C++ wrapper removes most of the Python work around a few-microsecond kernel.
COMPILE_OPTIONS = {"realize_opcount_threshold": 1, "cpp_wrapper": True, "compile_threads": 1}
# Steps after the first checked ones whose gradients are compared with autograd again, one drawn
# at random in each of this many equal spans of the rest of the run. Each costs two autograd
# passes (float32 and float64), so a handful is nothing next to the run.
RANDOM_CHECKS = 4


def random_checks(first: int, total: int, seed: int | None, count: int = RANDOM_CHECKS
                  ) -> list[int]:
    """Steps in first..total-1 to check again: one in each of `count` equal spans, so the whole
    run is covered. `seed` is a secret the worker draws for each run (None: one drawn here);
    nothing the learner's code can reach holds it or the steps."""
    import random
    import secrets

    span = total - first
    count = min(count, max(0, span))
    if count == 0:
        return []
    rng = random.Random(seed if seed is not None else secrets.randbits(64))
    bounds = [first + span * k // count for k in range(count + 1)]
    return [rng.randrange(bounds[k], bounds[k + 1]) for k in range(count)]


class Batches:
    """The lecture's batches from one seeded generator, drawn BATCH_CHUNK steps at a time.

    One call of randint for k*n indices consumes the generator exactly as k calls for n indices
    do, so chunking changes nothing about which examples each step sees; it only saves the
    per-step cost of sampling and indexing.
    """

    def __init__(self, sample_batch: Callable, X: Tensor, Y: Tensor, batch_size: int,
                 generator: Any, device: Any) -> None:
        self.sample_batch, self.X, self.Y = sample_batch, X, Y
        self.batch_size, self.generator, self.device = batch_size, generator, device
        self._Xc = self._Yc = None
        self._next = BATCH_CHUNK

    def __next__(self) -> tuple[Tensor, Tensor]:
        if self._next == BATCH_CHUNK:
            size = BATCH_CHUNK * self.batch_size
            Xc, Yc = self.sample_batch(self.X, self.Y, size, self.generator)
            self._Xc = Xc.view(BATCH_CHUNK, self.batch_size, *Xc.shape[1:]).to(self.device)
            self._Yc = Yc.view(BATCH_CHUNK, self.batch_size, *Yc.shape[1:]).to(self.device)
            self._next = 0
        j = self._next
        self._next += 1
        return self._Xc[j], self._Yc[j]

    def __iter__(self) -> Batches:
        return self


def training_sizes(pack: Pack, lesson_sizes: dict, fns: dict | None = None,
                   text: str | None = None) -> dict:
    """The lesson's sizes with the training exercise's own in place (a wider hidden layer, more
    layers). Sizes the data derives from the others (the GPT's head_size) are derived again."""
    from tutor.training.plan import training_exercise

    cfg = training_exercise(pack).settings
    sizes = {k: type(v)(cfg.get(k, v)) for k, v in lesson_sizes.items()}
    extra = cfg.get("sizes") or {}
    if extra:
        sizes.update(extra)
        if fns is not None:
            from tutor.core.network import Dataset

            derived = Dataset.build(pack, fns, sizes, text).derived_sizes
            sizes.update({k: v for k, v in derived.items() if k not in extra})
    return sizes


def init_network(fns: dict, sizes: dict, seed: int, device: Any) -> tuple[dict[str, Tensor], Any]:
    """Fresh seeded parameters, and the generator the batches continue from (as the lecture)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    params = fns["init_params"](g, sizes)
    return {k: v.to(device) for k, v in params.items()}, g


def evaluation_namespace(pack: Pack, fns: dict, sizes: dict | None = None) -> dict:
    """The pack's [training.eval] functions (calibrate, evaluate, sample), with the setup's and
    the run's sizes (as `sizes`)."""
    from tutor.training.plan import training_exercise

    code = (training_exercise(pack).settings.get("eval") or {}).get("code", "")
    from tutor.core import packcode
    from tutor.core.network import setup_functions

    run_sizes = dict(sizes or {})
    forward = pack.forward_code
    helpers = setup_functions(fns)  # once, not per chunk

    def forward_loss(params: dict, Xb: Tensor, Yb: Tensor) -> Tensor:
        """The pack's forward lines on a batch, as the lesson runs them: its loss."""
        n = int(Xb.shape[0])
        ns = packcode.scope(**helpers, **run_sizes, **params, Xb=Xb, Yb=Yb, n=n,
                            batch_size=n)
        packcode.run(forward, ns, f"<{pack.id} forward>")
        return ns[pack.loss]

    # the setup's namespace (made by packcode.scope), with the run's sizes and the forward pass
    ns = {**fns, "sizes": run_sizes, "forward_loss": forward_loss}
    packcode.run(code, ns, f"<{pack.id} training eval>")
    return ns


def results_doing(calibrates: bool, samples: bool) -> str:
    """What phase 3 does, as its progress says it: only what the pack's [training.eval]
    defines (a pack without `calibrate` calibrates nothing; what it calibrates, batchnorm's
    statistics for makemore, is the pack's own text to explain)."""
    if calibrates:
        rest = "the losses and the samples" if samples else "the losses"
        return f"calibrating the network over the training set, then {rest}"
    losses = "the losses on the training and the validation split"
    return f"{losses}, then the samples" if samples else losses


# What phase 3 goes on to do when the reference must be trained to compare the run with.
REPLAY_DOING = "training the reference solutions for as many steps, to compare your loss with"


def training_namespace(params: dict[str, Tensor], n: int, out: Any = None,
                       sizes: dict[str, int] | None = None) -> dict:
    """The learner's namespace: parameters, n, torch/F/math and the sandbox's builtins.

    `out` is a candidate.Output that collects prints; None discards them. `sizes` are the
    lecture's names (vocab_size, n_embd, ...), which accepted code from the checks may use.
    """
    from tutor.core.candidate import Output, sandbox_globals

    return {**sandbox_globals(out if out is not None else Output()), **(sizes or {}),
            "n": n, "batch_size": n, **params}


def eager_step(code: Any, ns: dict, params: dict[str, Tensor], grad_names: tuple[str, ...]
               ) -> Callable[[Tensor, Tensor], tuple[Tensor, list[Tensor]]]:
    """One training step as the learner wrote it: exec their code object in their namespace."""
    from tutor import devices

    # The parameters are put back each step: code that rebinds a name (W1 = W1.T) must not
    # silently swap the network's tensor for another.
    def step(Xb: Tensor, Yb: Tensor) -> tuple[Tensor, list[Tensor]]:
        ns.update(params)
        ns["Xb"], ns["Yb"] = Xb, Yb
        with devices.learner():
            exec(code, ns)
        return ns["loss"], [ns[g] for g in grad_names]

    return step


def step_function(code_text: str, ns: dict, params: tuple[str, ...], grad_names: tuple[str, ...]
                  ) -> Callable:
    """The learner's code as a function of the parameters and the batch, for torch.compile.

    Built from the syntax tree, so line numbers stay those of the editor; the body is the
    learner's statements unchanged, followed by returning the loss and the gradients.
    """
    from tutor.core.candidate import CODE_FILE
    from tutor.sandbox.guard import rewrite

    tree = rewrite(ast.parse(code_text, CODE_FILE))
    args = ", ".join((*params, "Xb", "Yb"))
    shell = ast.parse(f"def training_step({args}):\n    return loss, {', '.join(grad_names)}\n")
    fn = shell.body[0]
    fn.body = tree.body + fn.body  # type: ignore[attr-defined]
    ast.fix_missing_locations(shell)
    exec(compile(shell, CODE_FILE, "exec"), ns)
    return ns.pop("training_step")


Update = Callable[[list, int], None]  # (gradients, step index) -> parameters moved in place


def sgd(params: list[Tensor], lr_at: Callable[[int], float]) -> Update:
    """The lecture's `p.data += -lr * grad` for every parameter, in one fused call."""
    import torch

    def update(grads: list[Tensor], i: int) -> None:
        torch._foreach_add_(params, grads, alpha=-lr_at(i))

    return update


def learner_update(fn: Callable, params: list[Tensor], lr_at: Callable[[int], float],
                   args: tuple) -> Update:
    """The learner's own optimiser step (AdamW), called per parameter with its moment buffers,
    which start at zero; t counts steps from 1, as bias correction expects."""
    import torch

    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]

    def update(grads: list[Tensor], i: int) -> None:
        lr = lr_at(i)
        for p, g, mp, vp in zip(params, grads, m, v, strict=True):
            fn(p, g, mp, vp, i + 1, lr, *args)

    return update


def clipped(update: Update, max_norm: float) -> Update:
    """`update` on the gradients scaled together to a total norm of at most `max_norm`."""
    import torch

    def step(grads: list[Tensor], i: int) -> None:
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
        # new tensors: the learner's own gradients stay as their code left them
        update(torch._foreach_mul(grads, scale), i)

    return step


def train_steps(step: Callable, update: Update, batches: Iterator, start: int, stop: int,
                losses: list, keep_going: Callable[[int], bool]) -> int:
    """The hot loop: run steps start..stop-1, update in place, keep each loss tensor.

    `keep_going(i)` is asked every step (cancel, progress messages); returns the steps done.
    Nothing here synchronises with the device: losses stay tensors until they are reported.
    """
    for i in range(start, stop):
        if not keep_going(i):
            return i
        Xb, Yb = next(batches)
        loss, grads = step(Xb, Yb)
        update(grads, i)
        losses.append(loss)
    return stop


# -- the run ---------------------------------------------------------------------------------


@dataclass
class Gradients:
    """Where each gradient of the code is assigned and which other gradients it is computed from
    (read off the syntax tree), so a wrong parameter gradient can be traced to its first cause."""

    line: dict[str, int] = field(default_factory=dict)  # the first line that writes it
    inputs: dict[str, set[str]] = field(default_factory=dict)
    lines: dict[str, list[int]] = field(default_factory=dict)  # every line that writes it
    # A gradient a function of the code returns -> that function's name
    made_by: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, code: str) -> Gradients:
        g = cls()
        tree = ast.parse(code)
        defined = {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}
        for stmt in _statements(tree.body):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) \
                    and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id in defined:
                for name in code_facts.written(stmt):
                    g.made_by.setdefault(name, stmt.value.func.id)
            written = {n for n in code_facts.written(stmt) if tensor_of(n) is not None}
            read = {n for n in code_facts.read(stmt) if tensor_of(n) is not None}
            for name in sorted(written):
                g.line.setdefault(name, stmt.lineno)
                if stmt.lineno not in g.lines.setdefault(name, []):
                    g.lines[name].append(stmt.lineno)
                g.inputs.setdefault(name, set()).update(read - {name})
        return g

    def where(self, grad: str) -> str:
        """The line (or lines) that write a gradient, as a message says it."""
        found = self.lines.get(grad) or ([self.line[grad]] if grad in self.line else [])
        if not found:
            return "line ?"
        if len(found) == 1:
            return f"line {found[0]}"
        return f"lines {', '.join(str(k) for k in found[:-1])} and {found[-1]}"

    def first_cause(self, grad: str, wrong: set[str]) -> str:
        """Follow wrong inputs upstream until reaching a wrong gradient whose inputs are right.
        Two at the same line are taken in the order of their names: the same code names the
        same cause on every run."""
        seen = {grad}
        while True:
            upstream = sorted((d for d in self.inputs.get(grad, ()) if d in wrong - seen),
                              key=lambda d: (self.line.get(d, 0), d))
            if not upstream:
                return grad
            grad = upstream[0]
            seen.add(grad)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The simple statements of the code, those inside its loops and branches too, in order.
    A function's or a class's body is left out: the names it assigns are its own locals, not
    the step's gradients (a `dWx` inside `def lstm_backward` is not the `dWx` the step
    leaves), and the line that calls it is the one that writes them."""
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        nested = [b for name in ("body", "orelse", "finalbody") for b in getattr(stmt, name, [])
                  if isinstance(b, ast.stmt)]
        handlers = [b for h in getattr(stmt, "handlers", []) for b in h.body]
        if nested or handlers:
            # The loop's or branch's own head (a `for g in (dC, dWx)`) reads, and writes its
            # target; its body's statements are taken one by one.
            yield from _statements([*nested, *handlers])
        else:
            yield stmt


class CodeFailure(Exception):
    """The learner's code stopped the run: why, and at which step."""

    def __init__(self, error: CheckError, step: int) -> None:
        super().__init__(error.message)
        self.error, self.step = error, step


NOT_A_LOSS = "loss must be a single number (a 0-dimensional tensor)"


class Trainer:
    """One run of exercise 4 inside the evaluator: the three phases, streaming progress, and
    the typed `TrainingRun` it comes to."""

    def __init__(self, engine: Engine, request: dict, progress: Callable[[dict], None],
                 cancel: threading.Event, window: Callable[[str], None] | None = None) -> None:
        import torch

        self.engine, self.cancel = engine, cancel
        # Progress leaves the child as plain data (docs/json.md), like the result.
        self.progress: Callable[[RunProgress], None] = lambda p: progress(p.to_dict())
        # Tells whoever watches the clock from outside what comes next ("step", "compile",
        # "results"), so that it can allow that much silence (see evaluator/worker.py).
        self.window = window or (lambda _what: None)
        self.pack = engine.pack
        self.s = TrainingSettings.from_pack(self.pack, engine.settings.seed, request.get("steps"),
                                            request.get("gradcheck_steps"))
        self.code_text = request.get("code") or training_code(self.pack)
        self.compile = bool(request.get("compile"))
        self.device = engine.device
        from tutor.core.candidate import Output

        self.out = Output()
        self.losses: list = []  # loss tensors not yet turned into numbers
        self.log10_loss: list[float] = []  # per step
        self.points: list[float] = []  # mean log10(loss) of each complete span of history_every
        self.sent_points = 0
        self.blew_up = False
        self.steps_done = 0
        self.notes = speed_notes(self.code_text)
        self.picture_s = 0.0  # seconds spent drawing the picture through time
        self.phase2_rate: float | None = None
        self.tallies: dict[str, ParameterCheck] = {}
        # The steps checked again at random, on the Trainer only: the learner's code runs in a
        # namespace of its own and cannot reach this object (the guard refuses frames and
        # underscores), so it cannot know which of its steps are watched.
        self._random_checks = random_checks(self.s.gradcheck_steps, self.s.steps,
                                            request.get("check_seed")) \
            if self.s.gradcheck_steps > 0 else []
        from tutor.devices import describe

        self.result = TrainingRun(
            RunStatus.ERROR, notes=self.notes,
            settings=RunSettings(self.s.to_dict(), device=describe(self.device),
                                 reference=bool(request.get("reference")),
                                 compile=self.compile,
                                 torch_version=torch.__version__.split("+")[0]))

    # -- entry -------------------------------------------------------------------------------
    def execute(self) -> TrainingRun:
        import torch

        from tutor.core.candidate import CodeError, compile_candidate

        started = time.monotonic()
        try:
            self.code = compile_candidate(self.code_text)
        except CodeError as exc:
            self.result.error = exc.error
            return self._finish(started)
        self.gradients = Gradients.of(self.code_text)
        self._setup()
        self.window("step")
        threads = torch.get_num_threads()
        if self.device.type == "cpu" and self.s.cpu_threads > 0:
            torch.set_num_threads(self.s.cpu_threads)
        self.result.settings.threads = torch.get_num_threads()
        try:
            with torch.no_grad():
                status = self._gradcheck()
            if status is None:
                # Nothing in phase 2 may reach autograd, so inference mode can drop even the
                # bookkeeping no_grad keeps: about a tenth of a step at this size.
                with torch.inference_mode():
                    status = self._train()
            self.result.status = status
        except CodeFailure as exc:
            self.result.status, self.result.error = RunStatus.ERROR, exc.error
            self.result.step = exc.step
        finally:
            self._disarm()
            torch.set_num_threads(threads)
        self._flush()
        if self.result.status in (RunStatus.FINISHED, RunStatus.CANCELLED) and self.steps_done > 0:
            self._results()
        if self._may_pass():
            self.result.reference_train_loss = self._reference_loss()
        return self._finish(started)

    def _setup(self) -> None:
        network = self.engine.network
        splits = network.dataset.splits
        self.sizes = training_sizes(self.pack, network.sizes, network.fns, network.dataset.text)
        self.params, generator = init_network(network.fns, self.sizes, self.s.seed, self.device)
        self.param_list = [self.params[k] for k in self.s.parameters]
        self.result.settings.parameters_count = sum(p.numel() for p in self.param_list)
        Xtr, Ytr = splits["train"]
        self.batches = Batches(network.fns["sample_batch"], Xtr, Ytr, self.s.batch_size,
                               generator, self.device)
        self.ns = training_namespace(self.params, self.s.batch_size, self.out, self.sizes)
        self.step = eager_step(self.code, self.ns, self.params, self.s.grad_names)
        # Autograd's reference runs the lesson's forward pass with the training loss line, so it
        # rounds as the learner's forward does and the cmp columns mean what they did in the
        # notebook (maxdiff ~1e-9, not the larger gap between two ways of computing the loss).
        self.forward = [ln.source for ln in self.pack.forward_lines
                        if ln.exercise == 0 and ln.target != self.pack.loss] + [self.s.loss_line]
        if self.s.assembled:
            self.forward = [self.s.forward_code]
        self.update = self._update()
        self.picture = RunPicture.of(self.pack, self.s.picture, self.code_text)
        self.next_picture = 0
        if self.picture is not None:
            # The picture's batch: the longest validation names, where a gradient has the
            # most steps to travel back through (Y marks each position that is a character).
            Xva, Yva = splits["val"]
            lengths = (Yva >= 0).reshape(len(Yva), -1).sum(1)
            longest = lengths.argsort(descending=True, stable=True)[:PICTURE_NAMES]
            self.picture_batch = (Xva[longest].to(self.device), Yva[longest].to(self.device))

    def _update(self) -> Update:
        update = self._optimizer()
        return clipped(update, self.s.clip_norm) if self.s.clip_norm > 0 else update

    def _optimizer(self) -> Update:
        if not self.s.optimizer:
            return sgd(self.param_list, self.s.lr_at)
        ns, name, run = self.ns, self.s.optimizer, self

        def fn(*args: Any) -> None:
            # Looked up at each call: the learner's code defines it when it first runs.
            update = ns.get(name)
            if not callable(update):
                raise CodeFailure(CheckError(
                    ErrorKind.RUNTIME, f"the training code does not define {name}, which "
                    "updates the parameters"), run.steps_done)
            run._call_learner(update, *args)

        return learner_update(fn, self.param_list, self.s.lr_at,
                              tuple(self.s.optimizer_args.values()))

    def _call_learner(self, fn: Callable, *args: Any) -> None:
        """A learner's function called from outside their code, with their code's globals."""
        from tutor.core.candidate import CheckTimeout, runtime_error

        try:
            fn(*args)  # its globals are the training namespace, sandbox and all
        except CodeFailure:
            raise
        except CheckTimeout:
            raise CodeFailure(CheckError(
                ErrorKind.TIMEOUT, f"{self.s.optimizer} ran past the time limit of one step "
                "and was stopped. Is there a loop that never ends?"), self.steps_done) from None
        except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
            error = runtime_error(exc, self.code_text, list(self.ns)).error
            error.message = f"at step {self.steps_done}, in {self.s.optimizer}: {error.message}"
            raise CodeFailure(error, self.steps_done) from None

    def _finish(self, started: float) -> TrainingRun:
        r = self.result
        r.steps_done = self.steps_done
        every = self.s.history_every
        tail = self.log10_loss[len(self.points) * every:]
        points = self.points + ([sum(tail) / len(tail)] if tail else [])
        r.history = LossHistory(every, points)
        r.last_loss = 10 ** self.log10_loss[-1] if self.log10_loss else None
        r.steps_per_s = self.phase2_rate
        r.wall_s = time.monotonic() - started
        r.stdout = clean(self.out.text())
        r.lecture = SplitLosses(self.s.lecture_train_loss, self.s.lecture_val_loss,
                                self.s.lecture_steps or None)
        return r

    # -- the time limit per step -------------------------------------------------------------
    def _arm(self) -> None:
        from tutor.core.candidate import arm

        self.can_alarm = arm(self.engine.settings.timeout)

    def _disarm(self) -> None:
        from tutor.core.candidate import disarm

        disarm()

    def _guarded(self, step: Callable) -> Callable:
        """The step with the sandbox's time limit, and its errors told in the learner's terms."""
        from tutor.core.candidate import CheckTimeout, runtime_error

        arm, timeout = self._arm, self.engine.settings.timeout
        code, run = self.code_text, self

        def guarded(Xb: Tensor, Yb: Tensor) -> tuple[Tensor, list[Tensor]]:
            arm()  # re-armed every step, disarmed once at the end: one system call per step
            try:
                return step(Xb, Yb)
            except CheckTimeout:
                raise CodeFailure(CheckError(
                    ErrorKind.TIMEOUT, f"one training step ran for more than {timeout:g} s and "
                    "was stopped. Is there a loop that never ends?"), run.steps_done) from None
            except CodeFailure:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of learner code is reported
                error = runtime_error(exc, code, list(run.ns)).error
                error.message = f"at step {run.steps_done}: {error.message}"
                raise CodeFailure(error, run.steps_done) from None

        return guarded

    # -- phase 1 -----------------------------------------------------------------------------
    def _autograd(self, Xb: Tensor, Yb: Tensor, dtype: Any, device: Any, names: list[str]
                  ) -> dict[str, Tensor]:
        """Autograd's gradients for this batch through the pack's own forward pass."""
        import torch

        from tutor.core.network import forward_namespace

        ns = forward_namespace(self.pack, self.params, Xb, Yb, dtype, device, self.forward,
                               self.sizes, fns=self.engine.network.fns)
        with torch.enable_grad():
            wanted = [k for k in names if isinstance(ns.get(k), torch.Tensor)]
            grads = torch.autograd.grad(ns[self.pack.loss], [ns[k] for k in wanted])
        return dict(zip(wanted, grads, strict=True))

    def _run_code(self, Xb: Tensor, Yb: Tensor) -> tuple[Any, None]:
        """The learner's code on one batch, leaving its gradients in the namespace."""
        from tutor import devices

        self.ns.update(self.params)
        self.ns["Xb"], self.ns["Yb"] = Xb, Yb
        with devices.learner():
            exec(self.code, self.ns)
        return self.ns.get("loss"), None

    def _checked(self) -> list[str]:
        """Parameters, plus every forward tensor whose gradient the code assigns (for tracing)."""
        if self.s.assembled:
            return list(self.s.parameters)  # the n-layer pass has its own names per layer
        targets = {line.target for line in self.pack.forward_lines}
        inner = [tensor_of(g) for g in self.gradients.line if tensor_of(g) in targets]
        return list(self.s.parameters) + [t for t in inner if t not in self.s.parameters]

    def _gradcheck(self) -> RunStatus | None:
        """Phase 1. Returns a final status (diverged, cancelled) or None to go on."""
        import torch

        from tutor.core.grading import grade

        if self.s.gradcheck_steps == 0:
            return None
        started = time.monotonic()
        names = self._checked()
        tallies = self.tallies = {p: ParameterCheck(p, gradient(p)) for p in self.s.parameters}
        step = self._guarded(self._run_code)
        cpu = torch.device("cpu")
        report_at = 0.0
        status = None
        for i in range(self.s.gradcheck_steps):
            if self.cancel.is_set():
                status = RunStatus.CANCELLED
                break
            Xb, Yb = next(self.batches)
            ref32 = self._autograd(Xb, Yb, torch.float32, self.device, names)
            ref64 = self._autograd(Xb, Yb, torch.float64, cpu, names)
            loss, _ = step(Xb, Yb)
            grades = {k: grade(k, self.ns.get(gradient(k)), ref32[k], ref64[k],
                               parameter=k in self.s.parameters) for k in ref32}
            for p in self.s.parameters:
                tallies[p].add(grades[p])
            wrong = [p for p in self.s.parameters if not grades[p].accepted]
            if wrong:
                self.result.gradcheck = GradientCheck(
                    i + 1, False, self._failure(i, wrong, grades, ref32), list(tallies.values()))
                status = RunStatus.DIVERGED
                break
            if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
                raise CodeFailure(CheckError(ErrorKind.RUNTIME, NOT_A_LOSS), i)
            self.update([self.ns[g] for g in self.s.grad_names], i)
            self.losses.append(loss)
            self.steps_done = i + 1
            if time.monotonic() >= report_at or i + 1 == self.s.gradcheck_steps:
                self.progress(RunProgress(RunPhase.GRADCHECK, i + 1, of=self.s.gradcheck_steps,
                                          checks=list(tallies.values())))
                report_at = time.monotonic() + REPORT_INTERVAL
        if status is not RunStatus.DIVERGED:
            self.result.gradcheck = GradientCheck(self.steps_done, status is None,
                                                  checks=list(tallies.values()))
        self.result.gradcheck_s = time.monotonic() - started
        return status

    def _check_at(self, step: Callable, i: int) -> bool:
        """Step `i`, one of those drawn at random: the learner's step as training runs it,
        its gradients compared with autograd's on the same batch before they move anything.
        False (and the failure recorded) when one differs."""
        import torch

        from tutor.core.grading import grade

        Xb, Yb = next(self.batches)
        cpu = torch.device("cpu")
        params = list(self.s.parameters)
        # Phase 2 runs in inference mode, whose tensors autograd refuses: the reference works
        # on copies made outside it (the parameters themselves were made outside it).
        with torch.inference_mode(False):
            Xa, Ya = Xb.clone(), Yb.clone()
            ref32 = self._autograd(Xa, Ya, torch.float32, self.device, params)
            ref64 = self._autograd(Xa, Ya, torch.float64, cpu, params)
        loss, grads = step(Xb, Yb)
        values = dict(zip(self.s.grad_names, grads, strict=True))
        grades = {p: grade(p, values[gradient(p)], ref32[p], ref64[p], parameter=True)
                  for p in params}
        for p in params:
            self.tallies[p].add(grades[p])
        gradcheck = self.result.gradcheck
        assert gradcheck is not None  # phase 1 ran, or there would be no steps to check
        gradcheck.random_steps.append(i)
        wrong = [p for p in params if not grades[p].accepted]
        if wrong:
            gradcheck.passed = False
            gradcheck.failure = self._failure(i, wrong, grades, ref32, values, at_random=True)
            return False
        self.update(grads, i)
        self.losses.append(loss)
        return True

    def _failure(self, i: int, wrong: list[str], grades: dict[str, TensorCheck],
                 ref32: dict, values: dict | None = None, at_random: bool = False
                 ) -> GradcheckFailure:
        """Which parameter diverged, by how much, and the first wrong gradient behind it."""
        from tutor.core import diagnosis as dx

        line = self.gradients.line
        wrong.sort(key=lambda p: line.get(gradient(p), 10**9))  # in backward-pass order
        first = wrong[0]
        g = grades[first]
        bad = {gradient(k) for k, gr in grades.items() if not gr.accepted}
        cause = tensor_of(self.gradients.first_cause(gradient(first), bad)) or first
        value, ref = (self.ns if values is None else values).get(gradient(cause)), ref32[cause]
        c = grades[cause]
        diag = None
        together = self._scaled_together(wrong, grades, ref32, values)
        at = line.get(gradient(cause))
        if together is not None:
            # No one gradient is the cause: something after them all.
            (diag, at), cause = together, first
        elif c.verdict == "shape":
            diag = dx.shape_diagnosis(cause, value, ref)
        elif c.verdict == "wrong":
            diag = dx.value_diagnosis(cause, value, ref, self.s.batch_size, None, [])
        size = float(ref32[first].abs().max())
        listed = ", ".join(gradient(p) for p in wrong)
        if g.verdict == "missing":
            how = g.message
        elif g.verdict == "shape":
            how = f"{gradient(first)} has shape {g.shape}, but {first} has shape {g.expected_shape}"
        else:
            how = (f"{gradient(first)} is off by up to {g.maxdiff:.3g}"
                   + (f" ({g.maxdiff / size:.0%} of its largest entry)" if size > 0 else ""))
        where = (f"At step {i}, one of the steps drawn at random after the first "
                 f"{self.s.gradcheck_steps} to be checked again," if at_random else f"At step {i},")
        message = f"{where} {listed} {'differs' if len(wrong) == 1 else 'differ'} " \
                  f"from autograd: {how}."
        if cause != first:
            message += (f" It comes from {gradient(cause)} "
                        f"({self.gradients.where(gradient(cause))}), the "
                        "first gradient along the backward pass that differs; those it is "
                        "computed from match autograd.")
        maker = self.gradients.made_by.get(gradient(cause))
        if maker and together is None:
            message += (f" {gradient(cause)} is what your `{maker}` returns "
                        f"({self.gradients.where(gradient(cause))}), from gradients that match "
                        f"autograd: look inside `{maker}`.")
        if diag:
            message += f" {diag.message}"
        if at_random:
            message += (" They matched autograd on the first steps, so look for code that does "
                        "not do the same on every step (a counter, state kept between steps). "
                        "Training stopped there; the run does not count.")
        else:
            message += " Training stopped before a wrong gradient could change the network."
        return GradcheckFailure(i, first, gradient(first), [gradient(p) for p in wrong], g.maxdiff,
                                g.verdict, gradient(cause), at, diag, message)

    def _scaled_together(self, wrong: list[str], grades: dict[str, TensorCheck],
                         ref32: dict, values: dict | None) -> Any:
        """Where every parameter's gradient is wrong by one and the same factor (a clipping, a
        learning rate folded in, at the end of the code): a diagnosis saying so, and where the
        code last writes them all (its line); None otherwise."""
        import torch

        from tutor.core import diagnosis as dx

        params = list(self.s.parameters)
        if len(params) < 2 or sorted(wrong) != sorted(params) \
                or any(grades[p].verdict != "wrong" for p in params):
            return None
        source = self.ns if values is None else values
        factors = []
        for p in params:
            v, r = source.get(gradient(p)), ref32[p]
            if not isinstance(v, torch.Tensor) or v.shape != r.shape:
                return None
            v64, r64 = v.detach().double().cpu().flatten(), r.detach().double().cpu().flatten()
            denom = float(r64 @ r64)
            if denom == 0:
                return None
            factor = float(v64 @ r64) / denom
            if not dx.close(v64, factor * r64):
                return None
            factors.append(factor)
        low, high = min(factors), max(factors)
        if abs(high - low) > 1e-3 * max(abs(high), 1e-12) or abs(high - 1) < 1e-3:
            return None
        common = set.intersection(*(set(self.gradients.lines.get(gradient(p), []))
                                    for p in params))
        at = f", at line {max(common)}, the last line that writes them all" if common else ""
        clip = (" The run clips the gradients itself, after they are checked: leave that to it."
                if self.s.clip_norm > 0 else "")
        return dx.diagnosis(
            "scale",
            f"Every gradient is autograd's times the same number, {high:.4g}: they were all "
            f"scaled together after they were computed{at}. A check compares the gradients as "
            f"your code leaves them.{clip}"), (max(common) if common else None)

    # -- phase 2 -----------------------------------------------------------------------------
    def _train(self) -> RunStatus:
        start = self.steps_done
        step = self._guarded(self.step)
        if self.compile:
            step = self._compiled(step)
        if self.s.gradcheck_steps == 0:
            self._validate(step)
        started = time.monotonic()
        report_at = started  # report at once, so the screen switches to the training phase
        cancelled = False

        def keep_going(i: int) -> bool:
            nonlocal report_at, cancelled
            self.steps_done = i
            if self.cancel.is_set():
                cancelled = True
                return False
            if self.picture is not None and i >= self.next_picture:
                self._draw(i)
            now = time.monotonic()
            if now >= report_at:
                if not self._flush():
                    return False
                self._report(start, started, now)
                report_at = time.monotonic() + REPORT_INTERVAL
            return True

        done, diverged = start, False
        # The hot loop runs untouched between the steps drawn for a check; each of those runs
        # the same step, checked (see _check_at).
        for at in [*(i for i in self._random_checks if i >= start), self.s.steps]:
            done = train_steps(step, self.update, self.batches, done, at, self.losses,
                               keep_going)
            if done < at or at == self.s.steps or not keep_going(at):
                break
            if not self._check_at(step, at):
                diverged = True
                break
            done = at + 1
        self.steps_done = done
        elapsed = time.monotonic() - started - self.picture_s
        if (not diverged and not self.blew_up and self.result.pictures
                and self.result.pictures[-1]["step"] != done):
            self._draw(done)  # the network as it ends the run
        self.result.train_s = elapsed
        if done > start and elapsed > 0:
            self.phase2_rate = (done - start) / elapsed
        if not self._flush() or self.blew_up:
            return RunStatus.ERROR
        self._report(start, started, time.monotonic())
        if diverged:
            return RunStatus.DIVERGED
        if cancelled:
            return RunStatus.CANCELLED
        return RunStatus.FINISHED

    def _validate(self, step: Callable) -> None:
        """Without a gradient check, at least the loss and the gradients' shapes are checked
        once, on a batch of its own (the run's batches are left untouched)."""
        import torch

        from tutor.core.grading import fits

        Xb, Yb = self.batches.X[: self.s.batch_size], self.batches.Y[: self.s.batch_size]
        loss, grads = step(Xb.to(self.device), Yb.to(self.device))
        if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
            raise CodeFailure(CheckError(ErrorKind.RUNTIME, NOT_A_LOSS), 0)
        for name, p, g in zip(self.s.grad_names, self.param_list, grads, strict=True):
            # The shape rule of the checks: the update may broadcast into p, never reshape it.
            if not isinstance(g, torch.Tensor) or not fits(g.shape, p.shape, parameter=True):
                got = list(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
                raise CodeFailure(CheckError(
                    ErrorKind.SHAPE, f"{name} is {got}, but the parameter has shape "
                    f"{list(p.shape)}", self.gradients.line.get(name)), self.steps_done)

    def _compiled(self, eager: Callable) -> Callable:
        """torch.compile of the learner's step; on any failure, the eager step and a note."""
        import torch

        from tutor import devices

        # Setting torch.compile up (importing its compiler, tracing) takes far longer than one
        # step may: the last checked step's alarm is off before any of it starts.
        self._disarm()
        self.window("compile")  # before torch.compile is first named: naming it imports it
        # torch.compile's own guards look builtins up by name in the function's globals; the
        # learner's code still cannot name getattr (the syntax check refuses it).
        ns = {**self.ns, "__builtins__": {**self.ns["__builtins__"], "getattr": getattr}}
        fn = step_function(self.code_text, ns, self.s.parameters, self.s.grad_names)
        params = self.param_list
        try:
            compiled = torch.compile(fn, dynamic=False, options=COMPILE_OPTIONS)
            Xb = self.batches.X[: self.s.batch_size].to(self.device)
            Yb = self.batches.Y[: self.s.batch_size].to(self.device)
            started = time.monotonic()
            with devices.learner():
                compiled(*params, Xb, Yb)  # a pure function of its inputs: nothing changes here
            self.result.compile_s = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - the fast path is optional
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            self.notes.append(f"torch.compile could not compile the training step ({reason}); "
                              "it ran eagerly instead.")
            return eager
        finally:
            self.window("step")
        self.result.settings.compiled = True

        def step(Xb: Tensor, Yb: Tensor) -> tuple[Tensor, list[Tensor]]:
            with devices.learner():
                loss, *grads = compiled(*params, Xb, Yb)
            return loss, grads

        return self._guarded(step)

    # -- the picture through time ------------------------------------------------------------
    def _draw(self, i: int) -> None:
        """One picture (tutor/training/picture.py) at step `i`, and when the next is due. The
        driver runs once more on the picture's names, outside inference mode (autograd's side
        needs it); a failure of the learner's function there draws nothing and stops nothing."""
        import torch

        from tutor.core.candidate import CheckTimeout

        if self.picture is None:
            return
        every = max(1, (self.s.steps - self.s.gradcheck_steps) // PICTURES)
        self.next_picture = i + every
        fn = self.picture.step.function
        assert fn is not None

        def call(inputs: dict) -> dict | None:
            function = self.ns.get(fn.name)
            if not callable(function):
                return None
            self._arm()
            try:
                out = function(*[inputs[a] for a in fn.arguments])
            except CheckTimeout:
                raise
            except Exception:  # noqa: BLE001 - the picture shows nothing there, that is all
                return None
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return dict(zip(fn.outputs, outs, strict=False))

        started = time.monotonic()
        try:
            with torch.inference_mode(False), torch.no_grad():
                Xb, Yb = (t.clone() for t in self.picture_batch)
                n, self.ns["n"] = self.ns.get("n"), len(Xb)  # the code reads the batch's size
                try:
                    self._arm()
                    self._run_code(Xb, Yb)
                    panel = self.picture.draw(self.ns, call,
                                              f"{len(Xb)} longest validation names")
                finally:
                    self.ns["n"] = n
        except CheckTimeout:
            panel = None
        except Exception:  # noqa: BLE001 - the step itself ran; only the picture is lost
            panel = None
        finally:
            self.picture_s += time.monotonic() - started
        if panel is not None:
            self.result.pictures.append({"step": i, "panel": panel})

    # -- progress ----------------------------------------------------------------------------
    def _flush(self) -> bool:
        """Turn the pending loss tensors into log10 numbers; False once one is not finite."""
        import torch

        if not self.losses:
            return True
        stacked = torch.stack(self.losses).float()
        self.losses.clear()
        finite = torch.isfinite(stacked)
        self.log10_loss += stacked.log10().tolist()
        every, values = self.s.history_every, self.log10_loss
        while len(values) >= (len(self.points) + 1) * every:
            k = len(self.points) * every
            self.points.append(sum(values[k:k + every]) / every)
        if bool(finite.all()):
            return True
        self.blew_up = True
        at = len(self.log10_loss) - len(finite) + int((~finite).nonzero()[0, 0])
        checked = self.result.gradcheck and self.result.gradcheck.passed
        hint = ("Your gradients matched autograd while they were checked, so look for something "
                "that overflows as the weights grow, such as exp() of large logits." if checked
                else "Run with the gradient check on to see whether a gradient is wrong.")
        kind = "nan" if bool(stacked.isnan().any()) else "infinite"
        self.result.error = CheckError(ErrorKind.NAN,
                                       f"the loss became {kind} at step {at}. {hint}")
        self.result.step = at
        return False

    def _report(self, start: int, started: float, now: float) -> None:
        every = self.s.history_every
        new = self.points[self.sent_points:]
        self.sent_points = len(self.points)
        done = self.steps_done
        # The first half second says little about the pace (caches, the first chunk of
        # batches), so no rate and no time left are claimed before it.
        rate = (done - start) / (now - started) if now - started > 0.5 and done > start else None
        self.progress(RunProgress(
            RunPhase.TRAIN, done, steps=self.s.steps, every=every, points=new,
            steps_per_s=rate, eta_s=(self.s.steps - done) / rate if rate else None,
            loss=10 ** self.log10_loss[-1] if self.log10_loss else None,
            lr=self.s.lr_at(max(0, done - 1)),
            picture=self.result.pictures[-1] if self.result.pictures else None))

    # -- phase 3 -----------------------------------------------------------------------------
    def _may_pass(self) -> bool:
        """Whether this run can still pass the exercise, so that the reference's loss is worth
        working out (see runs.exercise_verdict, the rule itself)."""
        gradcheck = self.result.gradcheck
        return (self.result.status is RunStatus.FINISHED and not self.result.settings.reference
                and gradcheck is not None and gradcheck.passed
                and self.result.train_loss is not None)

    def _reference_loss(self) -> float | None:
        """What the reference solutions reach on the training split after the same steps: the
        pack's figure for its own full run (`reference_train_loss` in [training], at the default
        seed), else the reference trained here for the same steps, from the same seed and
        batches (which costs as much again as this run's training)."""
        full = TrainingSettings.from_pack(self.pack)
        if (self.s.reference_train_loss is not None and self.s.steps == full.steps
                and self.s.seed == DEFAULT_SEED):
            return float(self.s.reference_train_loss)
        steps = self.s.steps
        if with_header(self.code_text, self.s) == training_code(self.pack, None, steps):
            # The reference's own text: replaying it would retrace this run's path exactly.
            return self.result.train_loss

        def progress(_p: dict) -> None:
            # Heard by the worker's clock; the learner sees the results phase go on.
            self.progress(RunProgress(RunPhase.RESULTS, self.steps_done, steps=steps,
                                      doing=REPLAY_DOING))

        replay = Trainer(self.engine, {"steps": steps, "gradcheck_steps": 0, "reference": True},
                         progress, self.cancel, self.window)
        replay.s = _replace(replay.s, samples=0)
        run = replay.execute()
        return run.train_loss if run.status is RunStatus.FINISHED else None

    def _results(self) -> None:
        import torch

        started = time.monotonic()
        self.window("results")
        # The pack says how its network is evaluated after training (see its [training.eval]).
        fns = evaluation_namespace(self.pack, self.engine.network.fns, self.sizes)
        self.progress(RunProgress(
            RunPhase.RESULTS, self.steps_done, steps=self.s.steps,
            doing=results_doing("calibrate" in fns, "sample" in fns and self.s.samples > 0)))
        splits = self.engine.network.dataset.splits
        Xtr, Ytr = (t.to(self.device) for t in splits["train"])
        Xva, Yva = (t.to(self.device) for t in splits["val"])
        with torch.no_grad():
            state = fns["calibrate"](self.params, Xtr) if "calibrate" in fns else None
            self.result.train_loss = fns["evaluate"](self.params, state, Xtr, Ytr)
            self.result.val_loss = fns["evaluate"](self.params, state, Xva, Yva)
            if "sample" in fns and self.s.samples > 0:
                g = torch.Generator().manual_seed(self.s.seed + SAMPLE_SEED_OFFSET)
                try:
                    self.result.samples = fns["sample"](self.params, state, splits,
                                                           self.sizes, g, self.s.samples)
                except RuntimeError as exc:  # probabilities with nan cannot be sampled
                    self.notes.append(f"no samples could be drawn: {exc}")
        self.result.results_s = time.monotonic() - started


def run_training(engine: Engine, request: dict, progress: Callable[[dict], None],
                 cancel: threading.Event, window: Callable[[str], None] | None = None) -> dict:
    """The evaluator's `train` request: run exercise 4 in the child and return the run as plain
    data (docs/json.md, "A training run"), the only thing that crosses back to the worker."""
    return Trainer(engine, request, progress, cancel, window).execute().to_dict()
