"""Latency of a warm check (held-out re-check included), and what isolation costs.

Prints median and p95 in milliseconds for a few representative steps, three ways: the engine
running learner code in its own process (no fork: the cuda/mps path), the engine forking a
confined child per check (the CPU path), and the whole route through the worker and its pipe.
Target: median <= 25 ms through the worker.
"""

from __future__ import annotations

import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")

from tutor.config import Settings  # noqa: E402
from tutor.engine import Engine  # noqa: E402
from tutor.packs import load_pack  # noqa: E402
from tutor.sandbox.client import Evaluator  # noqa: E402

STEPS = ["atomic/probs", "atomic/logits", "atomic/bndiff", "atomic/C", "fused/cross_entropy"]
RUNS = 60


def measure(check) -> list[float]:
    pack = load_pack()
    times = []
    for step in STEPS:
        code = pack.step(step).solution
        check(step, code)  # warm: replay cached, allocator primed
        for _ in range(RUNS):
            started = time.perf_counter()
            result = check(step, code)
            times.append((time.perf_counter() - started) * 1000)
            assert result["passed"], result
    return times


def summary(label: str, times: list[float]) -> float:
    times = sorted(times)
    median = statistics.median(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"{label:<28} median {median:6.2f} ms   p95 {p95:6.2f} ms   ({len(times)} checks)")
    return median


def main() -> None:
    settings = Settings(device="cpu")
    engine = Engine(settings)
    forked = engine.isolated
    engine.isolated = False
    same = summary("engine, same process", measure(engine.check))
    engine.isolated = forked
    child = summary("engine, child per check", measure(engine.check))
    with Evaluator(settings) as ev:
        ev.info()
        through_worker = summary("worker + pipe + child", measure(ev.check))
    print(f"isolation costs {child - same:+.2f} ms per check (median, fork + confinement + "
          f"moving tensors), a ratio of {child / same:.2f}")
    print(f"target: median <= 25 ms through the worker -> "
          f"{'met' if through_worker <= 25 else 'MISSED'}")


if __name__ == "__main__":
    main()
