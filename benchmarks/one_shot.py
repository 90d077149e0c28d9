"""How long a one-shot `check` takes from the command line, beside the floor under it.

    python benchmarks/one_shot.py [--runs N]

Timed in one run, alternating, on one core where the system allows (children inherit it), the
tutor's modules compiled first as an installed copy's are:

- `python -c pass`: the interpreter alone;
- `python -c "import torch"`: what any command that computes a gradient pays first;
- `check` of code the syntax policy refuses (`import os`): refused before torch is imported;
- `check` of a right answer: a worker started for it, the verdict, the worker gone;
- `check` of the same answer with a warm worker (`backprop-tutor warm`) already running.

Medians; the ratios say what the tutor adds to each floor. Targets: a refusal ≤ 0.5 s wall; a
right check with a warm worker ≤ 0.3 s wall, and without one no slower than before.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RIGHT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
REFUSAL_TARGET = 0.5  # seconds
WARM_TARGET = 0.3


def _timed(argv: list[str], env: dict, ok: tuple[int, ...]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - start
    if done.returncode not in ok:
        sys.exit(f"{' '.join(argv[1:])} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "tutor", quiet=1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cold = dict(env, BACKPROP_TUTOR_NO_WARM="1")  # never the warm worker
    py = sys.executable
    times: dict[str, list[float]] = {k: [] for k in ("pass", "torch", "refused", "right",
                                                     "warm")}
    with tempfile.TemporaryDirectory() as home:
        tutor = [py, "-m", "tutor", "--home", home, "--device", "cpu"]
        check = [*tutor, "check", "logprobs", "--no-record", "--code"]
        _timed([*tutor, "warm", "--idle", "30"], env, (0,))
        try:
            for _ in range(args.runs):
                times["pass"].append(_timed([py, "-c", "pass"], env, (0,)))
                times["torch"].append(_timed([py, "-W", "ignore", "-c", "import torch"], env,
                                             (0,)))
                times["refused"].append(_timed([*check, "import os"], cold, (1,)))
                times["right"].append(_timed([*check, RIGHT], cold, (0,)))
                times["warm"].append(_timed([*check, RIGHT], env, (0,)))
        finally:
            _timed([*tutor, "warm", "--stop"], env, (0,))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.runs} runs, one core, medians:")
    print(f"  python -c pass          {med['pass']:5.2f} s")
    print(f"  python -c import torch  {med['torch']:5.2f} s")
    ratio = med["refused"] / med["pass"]
    print(f"  check, refused          {med['refused']:5.2f} s   {ratio:4.1f}x "
          f"the interpreter   (target ≤ {REFUSAL_TARGET} s: "
          f"{'met' if med['refused'] <= REFUSAL_TARGET else 'not met'})")
    print(f"  check, right            {med['right']:5.2f} s   {med['right'] / med['torch']:4.1f}x "
          "importing torch")
    print(f"  check, right, warm      {med['warm']:5.2f} s   {med['warm'] / med['pass']:4.1f}x "
          f"the interpreter   (target ≤ {WARM_TARGET} s: "
          f"{'met' if med['warm'] <= WARM_TARGET else 'not met'})")


if __name__ == "__main__":
    main()
