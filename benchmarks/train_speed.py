"""Steps per second of a pack's training loop: the manual backward pass against autograd.

Both variants train the same network (makemore: n_hidden 200, batch 32; `--pack gpt`: the
n-layer GPT with AdamW) from the same seeded parameters on the same batches, in one process, with
the same loop and the same parameter update; they differ only in where the gradients come from:

    autograd   the training forward pass, then loss.backward()
    manual     the training step of exercise 4 with the reference solutions, in inference mode
               as exercise 4 runs it (autograd switched off entirely)
    compiled   (with --compile) the same manual step through torch.compile; the time to compile
               is reported on its own line and not counted in steps per second

Rounds alternate between the variants so that a busy machine slows them alike; the best round of
each is reported. Run from the repository root:

    .venv/bin/python benchmarks/train_speed.py [--pack gpt] [--steps 2000] [--rounds 3]
        [--compile [--cold]]

The last line is the eager ratio, `manual/autograd steps-per-second ratio: X.XX`.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

warnings.filterwarnings("ignore", message=".*NumPy.*")
warnings.filterwarnings("ignore", message=".*force_disable_caches.*")  # --cold says so itself
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from tutor.core.candidate import compile_candidate  # noqa: E402
from tutor.core.network import Dataset, resolve_device, setup_namespace  # noqa: E402
from tutor.pack.model import find_pack, load_pack  # noqa: E402
from tutor.training import (  # noqa: E402
    COMPILE_OPTIONS,
    Batches,
    TrainingSettings,
    eager_step,
    forward_for,
    init_network,
    learner_update,
    sgd,
    step_function,
    train_steps,
    training_code,
    training_namespace,
    training_sizes,
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pack", default="makemore", help="installed pack id or folder")
    p.add_argument("--steps", type=int, default=None,
                   help="timed steps per round (default 2000; 200 for an assembled network)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps before each round (default a tenth of --steps)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per variant; the best counts")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads (default: the pack's cpu_threads setting)")
    p.add_argument("--device", default="cpu", help="cpu, cuda or mps (default cpu)")
    p.add_argument("--compile", action="store_true",
                   help="also time the manual step under torch.compile")
    p.add_argument("--cold", action="store_true",
                   help="with --compile: bypass inductor's on-disk cache, so the compile time "
                   "is what a first run pays")
    return p.parse_args()


class Setup:
    """The network, its batches and the code of exercise 4, built once."""

    def __init__(self, device: torch.device, pack: str) -> None:
        self.pack = load_pack(find_pack(pack))
        self.s = TrainingSettings.from_pack(self.pack)
        self.fns = setup_namespace(self.pack)
        dataset = Dataset.build(self.pack, self.fns)
        self.sizes = training_sizes(self.pack, {**self.pack.sizes,
                                                **dataset.derived_sizes}, self.fns)
        self.X, self.Y = dataset.splits["train"]
        self.device = device
        self.code = training_code(self.pack)
        if self.s.assembled:
            self.forward = self.s.forward_code
        else:
            backward = self.code.split("# backward pass", 1)[1]
            self.forward = "\n".join([*forward_for(self.pack, backward, self.s.loss_line),
                                      self.s.loss_line])

    def update(self, params: dict) -> Callable:
        """The run's update, the same for every variant: gradient descent, or the reference
        solution of the pack's optimiser step (AdamW), as the tutor calls it."""
        leaves = [params[k] for k in self.s.parameters]
        if not self.s.optimizer:
            return sgd(leaves, self.s.lr_at)
        step = next(s for s in self.pack.steps
                    if s.function and s.function.name == self.s.optimizer)
        ns = training_namespace(params, self.s.batch_size, None, self.sizes)
        exec(compile_candidate(step.solution), ns)
        return learner_update(ns[self.s.optimizer], leaves, self.s.lr_at,
                              tuple(self.s.optimizer_args.values()))

    def network(self) -> tuple[dict[str, torch.Tensor], Batches]:
        params, g = init_network(self.fns, self.sizes, self.s.seed, self.device)
        batches = Batches(self.fns["sample_batch"], self.X, self.Y, self.s.batch_size, g,
                          self.device)
        return params, batches


def manual(setup: Setup, params: dict) -> Callable:
    # Compiled as the tutor compiles it: behind the syntax check and the run-time guard.
    ns = training_namespace(params, setup.s.batch_size, None, setup.sizes)
    return eager_step(compile_candidate(setup.code), ns, params, setup.s.grad_names)


def autograd(setup: Setup, params: dict) -> Callable:
    """The same forward lines, differentiated by loss.backward()."""
    code = compile(setup.forward, "<training forward>", "exec")
    ns = training_namespace(params, setup.s.batch_size, None, setup.sizes)
    leaves = [params[k] for k in setup.s.parameters]
    for p in leaves:
        p.requires_grad_(True)

    def step(Xb: torch.Tensor, Yb: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        ns["Xb"], ns["Yb"] = Xb, Yb
        with torch.enable_grad():
            exec(code, ns)
            for p in leaves:
                p.grad = None
            ns["loss"].backward()
        return ns["loss"].detach(), [p.grad for p in leaves]

    return step


def compiled(setup: Setup) -> tuple[Callable, float]:
    """Compile the manual step once (timed apart); the result makes a step for any parameters."""
    params, _ = setup.network()
    ns = training_namespace(params, setup.s.batch_size, None, setup.sizes)
    # torch.compile's guards look builtins up by name (see Trainer._compiled).
    ns["__builtins__"] = {**ns["__builtins__"], "getattr": getattr}
    fn = torch.compile(step_function(setup.code, ns, setup.s.parameters, setup.s.grad_names),
                       dynamic=False, options=COMPILE_OPTIONS)
    Xb = setup.X[: setup.s.batch_size].to(setup.device)
    Yb = setup.Y[: setup.s.batch_size].to(setup.device)
    started = time.perf_counter()
    with torch.inference_mode():  # as it will run: a change of grad mode would recompile
        fn(*[params[k] for k in setup.s.parameters], Xb, Yb)
    compile_s = time.perf_counter() - started

    def make(setup: Setup, params: dict) -> Callable:
        args = [params[k] for k in setup.s.parameters]

        def step(Xb: torch.Tensor, Yb: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
            loss, *grads = fn(*args, Xb, Yb)
            return loss, grads

        return step

    return make, compile_s


def timed(setup: Setup, step: Callable, params: dict, batches: Batches, steps: int,
          warmup: int, manual: bool) -> tuple[float, float]:
    """Steps per second of the product's own loop, and the mean loss of the timed steps.

    The manual variants run in inference mode as exercise 4 does; autograd cannot.
    """
    update = setup.update(params)
    losses: list = []
    with torch.inference_mode() if manual else torch.no_grad():
        train_steps(step, update, batches, 0, warmup, losses, lambda i: True)
        losses.clear()
        sync(setup.device)
        started = time.perf_counter()
        train_steps(step, update, batches, 0, steps, losses, lambda i: True)
        sync(setup.device)
        elapsed = time.perf_counter() - started
    return steps / elapsed, float(torch.stack(losses).mean())


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    args = parse_args()
    device = resolve_device(args.device)
    setup = Setup(device, args.pack)
    if args.steps is None:
        args.steps = 200 if setup.s.assembled else 2000
    if args.warmup is None:
        args.warmup = max(1, args.steps // 10)
    threads = args.threads if args.threads is not None else setup.s.cpu_threads
    if device.type == "cpu" and threads > 0:
        torch.set_num_threads(threads)
    variants: dict[str, Callable] = {"autograd": autograd, "manual": manual}
    compile_s = None
    if args.compile:
        if args.cold:
            import torch._inductor.config as inductor

            inductor.force_disable_caches = True
        try:
            variants["compiled"], compile_s = compiled(setup)
        except Exception as exc:  # noqa: BLE001 - reported, and the eager comparison goes on
            print(f"torch.compile failed, timing eager only: {str(exc).splitlines()[0][:200]}")
    print(f"torch {torch.__version__} · device {device} · {torch.get_num_threads()} thread(s) · "
          f"pack {setup.pack.id} · batch {setup.s.batch_size} · "
          + "".join(f"{k} {v} · " for k, v in setup.s.sizes.items()) +
          f"{args.rounds} rounds of {args.steps} steps (+{args.warmup} warm-up)")
    if compile_s is not None:
        print(f"torch.compile of the manual step: {compile_s:.1f} s (not counted below)")
    best: dict[str, float] = {}
    for r in range(args.rounds):
        for name, make in variants.items():
            params, batches = setup.network()
            rate, loss = timed(setup, make(setup, params), params, batches, args.steps,
                               args.warmup, manual=name != "autograd")
            best[name] = max(best.get(name, 0.0), rate)
            print(f"  round {r + 1}  {name:<9} {rate:8.1f} steps/s   mean loss {loss:.4f}")
    for name, rate in best.items():
        print(f"{name:<9} best {rate:8.1f} steps/s  ({1e6 / rate:6.0f} µs per step)")
    if "compiled" in best:
        print(f"compiled manual/autograd steps-per-second ratio: "
              f"{best['compiled'] / best['autograd']:.2f}")
    print(f"manual/autograd steps-per-second ratio: {best['manual'] / best['autograd']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
