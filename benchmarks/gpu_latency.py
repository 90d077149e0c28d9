"""Latency of a check on a CUDA device, through the worker and its pipe (the spawn path, the only
one a GPU takes): the first check (a child started cold, CUDA initialised in it) and warm checks
while the learner reads (children started ahead of time). Run by benchmarks/gpu_check.sh; prints
one line per figure and a last line `latency: ...` for the summary. `--device simulated` runs the
same on the simulated accelerator (BACKPROP_TUTOR_SIMULATED_DEVICE=1), to try the script on a CPU.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")

from tutor.config import Settings  # noqa: E402
from tutor.evaluator.client import Evaluator  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402

STEPS = ["atomic/probs", "atomic/logits", "atomic/bndiff", "atomic/C", "fused/cross_entropy"]
RUNS = 15
PAUSE = 3.0  # a learner reads a result for a few seconds; the next child starts meanwhile


def main() -> int:
    import torch

    if sys.argv[1:] == ["--device", "simulated"]:
        os.environ["BACKPROP_TUTOR_SIMULATED_DEVICE"] = "1"
    elif not torch.cuda.is_available():
        print("latency: no CUDA device here")
        return 1
    pack = load_pack()
    with Evaluator(Settings(device="cuda")) as ev:
        started = time.perf_counter()
        info = ev.info()
        ready = time.perf_counter() - started
        print(f"device: {info.get('device') if isinstance(info, dict) else info}")
        started = time.perf_counter()
        first = ev.check(STEPS[0], pack.step(STEPS[0]).solution, {})
        cold = (time.perf_counter() - started) * 1000
        times, passed = [], first.passed
        for i in range(RUNS):
            step = STEPS[i % len(STEPS)]
            time.sleep(PAUSE)
            started = time.perf_counter()
            result = ev.check(step, pack.step(step).solution, {})
            times.append((time.perf_counter() - started) * 1000)
            passed = passed and result.passed
    times.sort()
    median = statistics.median(times)
    p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
    print(f"worker ready: {ready:.1f} s; first check: {cold:.0f} ms")
    print(f"warm checks: median {median:.0f} ms, p95 {p95:.0f} ms over {RUNS}")
    print(f"latency: first {cold:.0f} ms, median {median:.0f} ms, p95 {p95:.0f} ms, "
          f"every check {'passed' if passed else 'DID NOT pass'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
