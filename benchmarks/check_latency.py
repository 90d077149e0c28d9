"""Latency of a warm check (held-out re-check included), on both ways of isolating learner code.

Prints median and p95 in milliseconds for a few representative steps: the engine forking a
confined child per check (the CPU path), the engine handing the plan to a child started ahead of
time (the path of a GPU, of Windows, of BACKPROP_TUTOR_ISOLATION=spawn), and the whole route
through the worker and its pipe for each. A started child is used once, so between two checks
the benchmark waits as a learner reading the result would, until the next child is ready; it
also reports what starting one costs (cold: a fresh interpreter loading torch, then a check
that had to wait for it).
On Linux with a CPU the spawn path's children come from a fork server (one interpreter that
loaded torch once): the benchmark reports the CPU each check's child costs with it and without
it (BACKPROP_TUTOR_FORK_SERVER=0, the path of a GPU, macOS and Windows), and how long a forked
child takes to be ready.
Targets: median <= 25 ms through the worker on the fork path, <= 30 ms on the spawn path.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
import warnings

warnings.filterwarnings("ignore", message=".*NumPy.*")

from tutor.config import Settings  # noqa: E402
from tutor.core.engine import Engine  # noqa: E402
from tutor.evaluator.client import Evaluator  # noqa: E402
from tutor.pack.model import load_pack  # noqa: E402
from tutor.process import forkserver, spawn  # noqa: E402

STEPS = ["atomic/probs", "atomic/logits", "atomic/bndiff", "atomic/C", "fused/cross_entropy"]
RUNS = 60
SPAWN_RUNS = 12  # each waits for a child to start: fewer, or the benchmark takes many minutes


def measure(check, runs: int = RUNS, between=lambda: None) -> list[float]:
    pack = load_pack()
    times = []
    for step in STEPS:
        code = pack.step(step).solution
        check(step, code)  # warm: replay cached, allocator primed
        for _ in range(runs):
            between()
            started = time.perf_counter()
            result = check(step, code)
            times.append((time.perf_counter() - started) * 1000)
            assert result.passed, result
    return times


def summary(label: str, times: list[float]) -> float:
    times = sorted(times)
    median = statistics.median(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"{label:<32} median {median:7.2f} ms   p95 {p95:7.2f} ms   ({len(times)} checks)")
    return median


def children_ready(engine: Engine) -> None:
    """Wait as the learner reads: until the engine's started children are all ready."""
    engine.prepare()
    while not engine.ready():
        time.sleep(0.01)


def cold_start() -> tuple[list[float], list[float]]:
    """Seconds from starting a child to its being ready; milliseconds of a check that finds no
    child ready and starts its own."""
    starts, checks = [], []
    for _ in range(3):
        started = time.perf_counter()
        child = spawn.Spawned("check", {"device": "cpu", "cpu_seconds": 10, "memory_gb": 2.0})
        while not child.ready():
            time.sleep(0.005)
        starts.append(time.perf_counter() - started)
        child.discard()
    engine = Engine(Settings(device="cpu", isolation="spawn"))
    code = load_pack().step("atomic/probs").solution
    for _ in range(3):
        engine.close()
        started = time.perf_counter()
        assert engine.check("atomic/probs", code).passed
        checks.append((time.perf_counter() - started) * 1000)
    engine.close()
    return starts, checks


def cpu_per_check(server: bool, runs: int = 12) -> float:
    """Seconds of CPU the spawn path's children (and their server) spend per check, counted
    once every child has ended and been collected."""
    os.environ["BACKPROP_TUTOR_FORK_SERVER"] = "1" if server else "0"
    try:
        def spent() -> float:
            r = resource.getrusage(resource.RUSAGE_CHILDREN)
            return r.ru_utime + r.ru_stime

        before = spent()
        engine = Engine(Settings(device="cpu", isolation="spawn"))
        code = load_pack().step("atomic/probs").solution
        for _ in range(runs):
            children_ready(engine)
            assert engine.check("atomic/probs", code).passed
        engine.close()
        time.sleep(2.0)  # the children (and the server) are collected in the background
        return (spent() - before) / runs
    finally:
        del os.environ["BACKPROP_TUTOR_FORK_SERVER"]


def forked_start() -> list[float]:
    """Seconds from asking a warm fork server for a child to the child's being ready."""
    server = forkserver.ForkServer({"device": "cpu", "cpu_seconds": 10, "memory_gb": 2.0},
                                   spawn.START_LIMIT)
    starts = []
    for _ in range(6):
        started = time.perf_counter()
        child = spawn.Spawned("check", {}, launch=server.fork)
        while not child.ready():
            time.sleep(0.002)
        starts.append(time.perf_counter() - started)
        child.discard()
    server.close()
    return starts[1:]  # the first waited for the server itself


def main() -> None:
    forked = Engine(Settings(device="cpu", isolation="fork"))
    fork_engine = summary("fork: engine, child per check", measure(forked.check))
    forked.close()
    started = Engine(Settings(device="cpu", isolation="spawn"))
    spawn_engine = summary("spawn: engine, started child",
                           measure(started.check, SPAWN_RUNS, lambda: children_ready(started)))
    started.close()
    with Evaluator(Settings(device="cpu", isolation="fork")) as ev:
        ev.info()
        fork_worker = summary("fork: worker + pipe + child", measure(ev.check))
    starts, checks = cold_start()
    # A learner reads a result for a few seconds at least; by then two children are ready.
    pause = max(2.0, 2 * max(starts))
    with Evaluator(Settings(device="cpu", isolation="spawn")) as ev:
        ev.info()
        spawn_worker = summary("spawn: worker + pipe + child",
                               measure(ev.check, SPAWN_RUNS, lambda: time.sleep(pause)))
    print(f"starting a child cold: {statistics.median(starts):.2f} s to ready (median of 3); a "
          f"check that waits for one: {statistics.median(checks):.0f} ms")
    if forkserver.unavailable("cpu") is None:
        print(f"a child forked by a warm fork server: "
              f"{statistics.median(forked_start()) * 1000:.0f} ms to ready (median of 5)")
        served, alone = cpu_per_check(True), cpu_per_check(False)
        print(f"spawn path, CPU per check: {served:.3f} s with the fork server (its start "
              f"shared by 12 checks), {alone:.3f} s with a started interpreter per check")
    print(f"in the engine a started child answers in {spawn_engine / fork_engine:.2f} of the "
          f"time a forked one does ({spawn_engine:.2f} vs {fork_engine:.2f} ms median): it is "
          "running already, where a fork copies the worker's page tables; the started child's "
          "cost is paid while the learner reads")
    print(f"target: fork median <= 25 ms through the worker -> "
          f"{'met' if fork_worker <= 25 else 'MISSED'} ({fork_worker:.2f} ms)")
    print(f"target: spawn median <= 30 ms through the worker -> "
          f"{'met' if spawn_worker <= 30 else 'MISSED'} ({spawn_worker:.2f} ms)")


if __name__ == "__main__":
    main()
