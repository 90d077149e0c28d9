"""How long an author waits: `pack new` then `pack check` on a small forward file, on one core.

    python benchmarks/pack_new_speed.py [--runs N] [--file FORWARD.py]

Each run makes a fresh pack from the file (default: tests/packs/forward/mlp.py, a 10-line
forward pass) and checks it, both as the installed command, pinned to one core where the
system allows (`os.sched_setaffinity`). The tutor's modules are compiled first, as an installed
copy's are. Beside them, `python -c "import torch"` is timed the same way: the floor any
command that computes a gradient stands on. Medians of the runs; the target is ≤ 5 s for the
two commands together.
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
TARGET = 5.0  # seconds, pack new + pack check


def _timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv[1:])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--file", default=str(ROOT / "tests/packs/forward/mlp.py"))
    args = parser.parse_args()
    compileall.compile_dir(ROOT / "tutor", quiet=1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # children inherit it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    tutor = [sys.executable, "-m", "tutor"]
    new, check, torch_only = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        env["BACKPROP_TUTOR_HOME"] = str(Path(tmp) / "home")
        for i in range(args.runs):
            out = Path(tmp) / f"pack{i}"
            torch_only.append(_timed([sys.executable, "-W", "ignore", "-c", "import torch"], env))
            new.append(_timed([*tutor, "pack", "new", args.file, "--out", str(out)], env))
            check.append(_timed([*tutor, "pack", "check", str(out)], env))
    both = [a + b for a, b in zip(new, check, strict=True)]
    med = statistics.median
    print(f"{Path(args.file).name}, {args.runs} runs, one core, medians:")
    print(f"  pack new          {med(new):5.2f} s")
    print(f"  pack check        {med(check):5.2f} s")
    print(f"  together          {med(both):5.2f} s   (target ≤ {TARGET:.0f} s: "
          f"{'met' if med(both) <= TARGET else 'not met'})")
    print(f"  import torch      {med(torch_only):5.2f} s   (each command pays it once)")


if __name__ == "__main__":
    main()
