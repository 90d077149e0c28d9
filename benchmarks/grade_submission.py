"""Does grading one complete submission fit a grading platform's container?

Gradescope's default container has about half a CPU and 768 MB of memory; the target is a
complete makemore submission (the lecture's notebook filled in: exercises 1 to 4, the training
graded by a short run) graded in at most 3 minutes on one core, within 768 MB for the whole
process tree. This runs `backprop-tutor grade NOTEBOOK --format gradescope` pinned to one core
(os.sched_setaffinity, which every process it starts inherits), samples the proportional set size
(Pss, /proc/PID/smaps_rollup) of every process in its tree ten times a second and sums it (forked
processes share pages: Pss counts a shared page once across them, where RSS would count it in
each), and prints the wall time, the peak, and each as a ratio to its target (at most 1 meets
it). Run from the repository root:

    .venv/bin/python benchmarks/grade_submission.py [--train-steps N] [--file SUBMISSION]

The last two lines are `time ratio: X.XX` and `memory ratio: X.XX`. Linux only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

TIME_TARGET_S = 180.0
MEMORY_TARGET_MB = 768.0


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc/*/stat."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: the ppid follows the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def _tree(pid: int) -> list[int]:
    children, found, todo = _children(), [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass  # gone, or not ours to read
    return 0


def tree_pss_mb(pid: int) -> float:
    return sum(_pss_kb(p) for p in _tree(pid)) / 1024


def complete_submission(folder: Path) -> Path:
    import lecture_notebooks as notebooks

    return notebooks.write(folder / "makemore_part4_backprop.ipynb",
                           notebooks.notebook([notebooks.ex1_one_cell()]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-steps", type=int, help="steps of the graded training run "
                        "(default: grade's own)")
    parser.add_argument("--file", help="grade this submission instead of a complete notebook")
    args = parser.parse_args()
    core = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {core})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.file) if args.file else complete_submission(Path(tmp))
        out = Path(tmp) / "results.json"
        command = [sys.executable, "-m", "tutor", "--device", "cpu", "grade", str(path),
                   "--format", "gradescope", "--out", str(out)]
        if args.train_steps:
            command += ["--train-steps", str(args.train_steps)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BACKPROP_TUTOR_HOME": tmp}
        started = time.monotonic()
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        peak = 0.0
        while proc.poll() is None:
            peak = max(peak, tree_pss_mb(proc.pid))
            time.sleep(0.1)
        wall = time.monotonic() - started
        stdout, stderr = proc.communicate()
        if proc.returncode != 0 or not out.exists():
            print(f"grade failed ({proc.returncode}): {stderr.strip()[-2000:]}", file=sys.stderr)
            return 1
        results = json.loads(out.read_text())
    passed = sum(t["status"] == "passed" for t in results["tests"])
    print(f"graded {path.name} on core {core}: score {results['score']:g}, "
          f"{passed}/{len(results['tests'])} steps passed")
    print(f"wall time: {wall:.1f} s (target {TIME_TARGET_S:.0f} s)")
    print(f"peak proportional set size of the process tree: {peak:.0f} MB "
          f"(target {MEMORY_TARGET_MB:.0f} MB)")
    print(f"time ratio: {wall / TIME_TARGET_S:.2f}")
    print(f"memory ratio: {peak / MEMORY_TARGET_MB:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
