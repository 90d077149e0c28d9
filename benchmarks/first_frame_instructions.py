"""The first frame counted in instructions: the tutor against a minimal Textual app.

    python benchmarks/first_frame_instructions.py [--runs N]

Wall-clock times on a shared machine stray by tens of percent from one launch to the next;
instructions counted under valgrind stay within a fraction of a percent, so a change to the
first frame is best judged here (`startup.py` gives the times a learner sees). Both apps are
launched as `startup.py` launches them, in a 120×40 pseudo-terminal with compiled bytecode, and
each process ends right after its first frame is painted. Needs valgrind (`apt-get install
valgrind`); each launch takes 10 to 30 s under it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from startup import FIRST_FRAME_RATIO, LAUNCH, MINIMAL, time_in_terminal  # noqa: E402

# Run before either app: the process ends once the first frame has been painted.
STOP_AFTER_FIRST_FRAME = (
    "import os, sys\n"
    "from textual.screen import Screen\n"
    "_paint = Screen._compositor_refresh\n"
    "def _paint_then_stop(screen):\n"
    "    _paint(screen)\n"
    "    sys.stdout.flush()\n"
    "    os._exit(0)\n"
    "Screen._compositor_refresh = _paint_then_stop\n"
)


def count(code: str, env: dict[str, str]) -> int:
    """Instructions the process running `code` executes until its first frame."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "callgrind.out"
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, "-c", STOP_AFTER_FIRST_FRAME + code]
        time_in_terminal(argv, None, timeout=300, env=env)
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise SystemExit("valgrind wrote no count: did the app start?")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)")
        return 1
    tutor, minimal = [], []
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        for timed in [False] + [True] * args.runs:  # the first launch fills the bytecode cache
            with tempfile.TemporaryDirectory() as home:
                app = count(LAUNCH.format(home=home) + "\n", env)
            least = count(MINIMAL, env)
            if timed:
                tutor.append(app)
                minimal.append(least)
    app, least = statistics.median(tutor), statistics.median(minimal)
    ratio = app / least
    print(f"first frame      {app / 1e6:7.1f} M instructions; a minimal Textual app "
          f"{least / 1e6:7.1f} M")
    print(f"  ratio {ratio:.3f}× the minimal app (target ≤ {FIRST_FRAME_RATIO}×: "
          f"{'ok' if ratio <= FIRST_FRAME_RATIO else 'MISSED'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
