"""How fast the TUI feels: first frame after launch, and verdict after the run key.

    python benchmarks/startup.py [--runs N]

First frame: the app is launched in a pseudo-terminal (120×40) exactly as `backprop-tutor`
would run it, and the clock stops when the screen shows the forward-pass panel. A bare
`python -c pass` is timed side by side, so the ratio says what the app adds to the interpreter.

Verdict: with torch warm, the time from the app handling the run key until the screen that
shows the verdict has been composed, next to the time of the same check called on the evaluator
directly (the UI's overhead is the difference). The clock is read inside the app (the key's
action, the compositor's next pass after the result arrives), not around Pilot's `press`, which
also waits until the whole process looks idle in 20 ms slices. Medians of several runs; targets
from the issue are printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import pty
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST_FRAME_TARGET = 0.6
VERDICT_TARGET = 0.100
FIRST_FRAME_MARK = b"Forward pass"  # a panel title that is on the very first frame
CORRECT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
LAUNCH = (
    "from tutor.config import resolve; from tutor.ui.app import run_app; "
    "raise SystemExit(run_app(resolve(home={home!r}, device='cpu'), packs=[]))"
)


def time_in_terminal(argv: list[str], mark: bytes | None, timeout: float = 30.0) -> float:
    """Seconds from spawning `argv` on a 120×40 pty until `mark` appears (or the process ends)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS="120", LINES="40")
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env,
                            cwd=ROOT, start_new_session=True)
    os.close(slave)
    seen = b""
    elapsed = float("nan")
    try:
        while time.perf_counter() - start < timeout:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the child closed the terminal: it has exited
                    if mark is None:
                        elapsed = time.perf_counter() - start
                    break
                if mark is not None and mark in seen:
                    elapsed = time.perf_counter() - start
                    break
            if proc.poll() is not None and mark is None:
                elapsed = time.perf_counter() - start
                break
    finally:
        if proc.poll() is None:
            os.write(master, b"\x11")  # ctrl+q: let the app shut its evaluator down
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        os.close(master)
    return elapsed


def first_frame(runs: int) -> tuple[list[float], list[float]]:
    app_times, bare_times = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as home:
            launch = [sys.executable, "-c", LAUNCH.format(home=home)]
            app_times.append(time_in_terminal(launch, FIRST_FRAME_MARK))
        bare_times.append(time_in_terminal([sys.executable, "-c", "pass"], None))
    return app_times, bare_times


async def _verdicts(runs: int) -> tuple[list[float], list[float]]:
    from tutor.config import Settings
    from tutor.sandbox.client import Evaluator
    from tutor.ui.app import TutorApp

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(device="cpu", home=Path(home))
        evaluator = Evaluator(settings)
        evaluator.start()
        evaluator.info()
        direct = []
        for _ in range(runs):
            t0 = time.perf_counter()
            evaluator.check("atomic/logprobs", CORRECT, {})
            direct.append(time.perf_counter() - t0)
        app = TutorApp(settings, evaluator=evaluator, greet=False, packs=[])
        in_app = []
        async with app.run_test(size=(120, 40)) as pilot:
            while app.info is None:
                await pilot.pause(0.01)
            lesson = app.lesson
            app.query_one("#editor").load_text(CORRECT)
            await pilot.pause()
            marks = _clock(lesson)
            for _ in range(runs):
                before = lesson.results.get(lesson.step.id)
                marks.clear()
                await pilot.press("ctrl+j")
                deadline = time.perf_counter() + 30
                while lesson.results.get(lesson.step.id) is before or "painted" not in marks:
                    if time.perf_counter() > deadline:
                        raise SystemExit("the verdict never arrived")
                    await pilot.pause(0.005)
                in_app.append(marks["painted"] - marks["key"])
        evaluator.close()
    return in_app, direct


def _clock(lesson) -> dict:
    """Timestamps read inside the app: the run key's action, and the end of the first
    compositor pass after the verdict reached the lesson's results."""
    marks: dict = {}
    check, compose = lesson.action_check, lesson._compositor_refresh

    def action_check() -> None:
        marks["key"] = time.perf_counter()
        marks["before"] = lesson.results.get(lesson.step.id)
        check()

    def compositor_refresh() -> None:
        compose()
        arrived = "key" in marks and lesson.results.get(lesson.step.id) is not marks["before"]
        if arrived and "painted" not in marks:
            marks["painted"] = time.perf_counter()

    lesson.action_check = action_check
    lesson._compositor_refresh = compositor_refresh
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    app_times, bare_times = first_frame(args.runs)
    frame, bare = statistics.median(app_times), statistics.median(bare_times)
    print(f"first frame      median {frame:6.3f} s over {args.runs} launches "
          f"(target ≤ {FIRST_FRAME_TARGET} s: {'ok' if frame <= FIRST_FRAME_TARGET else 'MISSED'})")
    print(f"  bare python    median {bare:6.3f} s  → the app adds {frame - bare:.3f} s, "
          f"{frame / bare:.1f}× the interpreter alone")

    in_app, direct = asyncio.run(_verdicts(max(args.runs, 5)))
    verdict, raw = statistics.median(in_app), statistics.median(direct)
    print(f"verdict composed median {verdict * 1000:6.1f} ms after the run key, torch warm "
          f"(target ≤ {VERDICT_TARGET * 1000:.0f} ms: "
          f"{'ok' if verdict <= VERDICT_TARGET else 'MISSED'})")
    print(f"  evaluator only median {raw * 1000:6.1f} ms → the UI adds "
          f"{(verdict - raw) * 1000:.1f} ms ({verdict / raw:.2f}× the bare check)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
