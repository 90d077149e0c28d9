"""How fast the TUI feels: first frame after launch, and verdict after the run key, each
measured against a minimal Textual app in the same run.

    python benchmarks/startup.py [--runs N]

    python benchmarks/startup.py --first-frame [--runs N]   # the first frame only

First frame, as a learner waits for it: `backprop-tutor` with a fresh home is started in a
120×40 tmux window, and the clock stops when tmux's copy of the screen (read every 5 ms) shows
the chooser's question. A minimal Textual app (one Static showing the same words, in a file of
its own) is started and read the same way, alternating with the tutor, so the ratio says what
the tutor adds to Textual itself (target ≤ 1.3×). Both clocks include what the terminal adds
(tmux starting the program, drawing the screen, being asked for it), as a learner's do.

Verdict: with torch warm, the time from the run key's action until the screen that shows the
verdict has been composed. The same check called on the evaluator directly is what the check
costs; the rest is the UI's part (target ≤ 20 ms). A minimal Textual app that runs the same
check from a thread worker and shows its summary in a Static is timed the same way, so the
second ratio compares the tutor's UI work with the least a Textual app does. The clock is read
inside the apps (the key's action, the compositor's next pass after the result arrives), not
around Pilot's `press`, which also waits until the whole process looks idle in 20 ms slices.
Medians of several runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FIRST_FRAME_RATIO = 1.3  # the tutor's first frame against the minimal app's
UI_VERDICT_TARGET = 0.020  # seconds the UI adds to a check
PAUSE = 0.3  # seconds between checks, as a learner reads: every check finds its child forked
WIDTH, HEIGHT = 120, 40
POLL = 0.005  # seconds between two looks at the terminal's screen
TUTOR_MARK = "Which lesson?"  # the chooser's question, on the very first frame
CORRECT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
TUTOR = "import sys; from tutor.cli import main; sys.exit(main())"
MINIMAL = (
    "from textual.app import App\n"
    "from textual.widgets import Static\n"
    "class Minimal(App):\n"
    "    BINDINGS = [('ctrl+q', 'quit')]\n"
    "    def compose(self):\n"
    "        yield Static({mark!r})\n"
    "Minimal().run()\n"
)


class Terminal:
    """A 120×40 tmux window of our own (a private server socket), in which programs are launched
    the way a learner launches them from a shell, and read back as a learner sees them."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.socket = f"tutor-bench-{os.getpid()}"
        self.env = env
        # Programs start in a folder of their own: `python -c` puts the working folder first on
        # sys.path, which would otherwise decide which checkout's tutor runs.
        self.cwd = str(cwd)
        # The session's first program only holds the window open; each launch replaces it.
        self._tmux("new-session", "-d", "-x", str(WIDTH), "-y", str(HEIGHT), "-s", "bench",
                   "sleep 3600")
        self._tmux("set-option", "-g", "remain-on-exit", "on")

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], env=self.env, check=True,
                              capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "bench")

    def launch(self, command: str, mark: str, environ: dict[str, str],
               timeout: float = 30.0) -> float:
        """Seconds from starting `command` in the window until `mark` is on its screen."""
        extra = [arg for name, value in environ.items() for arg in ("-e", f"{name}={value}")]
        start = time.perf_counter()
        self._tmux("respawn-pane", "-k", "-t", "bench", "-c", self.cwd, *extra, command)
        elapsed = float("nan")
        while time.perf_counter() - start < timeout:
            if mark in self.screen():
                elapsed = time.perf_counter() - start
                break
            time.sleep(POLL)
        self._quit()
        return elapsed

    def _quit(self) -> None:
        # ctrl+q, as the learner leaves; the next launch would kill it, but a tutor that is
        # killed leaves no trace of how it shuts down, and may still hold a CPU.
        self._tmux("send-keys", "-t", "bench", "C-q")
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            if self._tmux("display-message", "-p", "-t", "bench", "#{pane_dead}").strip() == "1":
                return
            time.sleep(0.02)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], env=self.env,
                       capture_output=True)


def first_frame(runs: int, baseline: Path | None = None
                ) -> tuple[list[float], list[float], list[float]]:
    """The tutor's and the minimal app's first frames, launched in turn in the same window
    (and, given `baseline`, another checkout's tutor's too, in the same turns).

    The tutor runs as `backprop-tutor` runs with a fresh home: its console script's one line
    (`from tutor.cli import main`), no arguments, so it shows the chooser when several packs are
    installed. Both run as a learner's Python runs them, with compiled bytecode: into a folder
    of its own (so the checkout gets no __pycache__), filled by one launch of each that is not
    timed. PYTHONDONTWRITEBYTECODE, when set here, would otherwise have the tutor's own modules
    compiled from source at every launch, which no learner sees.
    """
    if shutil.which("tmux") is None:
        raise SystemExit("the first frame is measured in tmux, which is not installed here")
    app_times: list[float] = []
    minimal_times: list[float] = []
    base_times: list[float] = []
    with tempfile.TemporaryDirectory() as scratch:
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONDONTWRITEBYTECODE", "TMUX", "BACKPROP_TUTOR_HOME", "PYTHONPATH")}
        env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        minimal_file = Path(scratch) / "minimal.py"
        minimal_file.write_text(MINIMAL.format(mark=TUTOR_MARK))
        tutor = shlex.join([sys.executable, "-c", TUTOR])
        minimal = shlex.join([sys.executable, str(minimal_file)])
        terminal = Terminal(env, Path(scratch))
        try:
            for run in range(runs + 1):
                home = Path(scratch) / f"home{run}"  # fresh each time: nothing chosen yet
                app = terminal.launch(tutor, TUTOR_MARK, {"BACKPROP_TUTOR_HOME": str(home),
                                                          "PYTHONPATH": str(ROOT)})
                least = terminal.launch(minimal, TUTOR_MARK, {})
                base = float("nan")
                if baseline is not None:
                    base = terminal.launch(tutor, TUTOR_MARK,
                                           {"BACKPROP_TUTOR_HOME": str(home) + "-baseline",
                                            "PYTHONPATH": str(baseline)})
                if run:  # the first of each only compiled the bytecode
                    app_times.append(app)
                    minimal_times.append(least)
                    base_times.append(base)
        finally:
            terminal.close()
    return app_times, minimal_times, base_times


def _minimal_checker(evaluator):
    """The least a Textual app does for a check: a key, a thread worker, a Static updated."""
    from textual import work
    from textual.app import App
    from textual.widgets import Static

    from tutor.values.results import CheckResult

    class MinimalChecker(App):
        BINDINGS = [("ctrl+j", "check")]

        def __init__(self) -> None:
            super().__init__()
            self.marks: dict = {}
            self.result: dict | None = None

        def compose(self):
            yield Static("Forward pass", id="out")

        def action_check(self) -> None:
            self.marks["key"] = time.perf_counter()
            self._check()

        @work(thread=True)
        def _check(self) -> None:
            result = evaluator.check("atomic/logprobs", CORRECT, {})
            self.call_from_thread(self._show, result)

        def _show(self, result: CheckResult) -> None:
            self.query_one("#out", Static).update(result.summary())
            self.result = result

    return MinimalChecker()


async def _minimal_verdicts(evaluator, runs: int) -> list[float]:
    app = _minimal_checker(evaluator)
    times = []
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        compose = screen._compositor_refresh

        def compositor_refresh() -> None:
            compose()
            if app.result is not None and "painted" not in app.marks:
                app.marks["painted"] = time.perf_counter()

        screen._compositor_refresh = compositor_refresh
        for _ in range(runs):
            await pilot.pause(PAUSE)
            app.marks.clear()
            app.result = None
            await pilot.press("ctrl+j")
            deadline = time.perf_counter() + 30
            while "painted" not in app.marks:
                if time.perf_counter() > deadline:
                    raise SystemExit("the minimal app's verdict never arrived")
                await pilot.pause(0.005)
            times.append(app.marks["painted"] - app.marks["key"])
    return times


async def _verdicts(runs: int) -> tuple[list[float], list[float], list[float]]:
    from tutor.config import Settings
    from tutor.evaluator.client import Evaluator
    from tutor.ui.app import TutorApp

    with tempfile.TemporaryDirectory() as home:
        settings = Settings(device="cpu", home=Path(home))
        evaluator = Evaluator(settings)
        evaluator.start()
        evaluator.info()
        direct = []
        for _ in range(runs):
            time.sleep(PAUSE)  # the worker forks the next check's child while nothing runs
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
                await pilot.pause(PAUSE)
                before = lesson.results.get(lesson.step.id)
                marks.clear()
                await pilot.press("ctrl+j")
                deadline = time.perf_counter() + 30
                while lesson.results.get(lesson.step.id) is before or "painted" not in marks:
                    if time.perf_counter() > deadline:
                        raise SystemExit("the verdict never arrived")
                    await pilot.pause(0.005)
                in_app.append(marks["painted"] - marks["key"])
        minimal = await _minimal_verdicts(evaluator, runs)
        evaluator.close()
    return in_app, direct, minimal


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
    parser.add_argument("--first-frame", action="store_true",
                        help="measure the first frame only (no torch needed)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout of the tutor whose first frame is timed in the "
                        "same turns (before and after a change, on the same machine and load)")
    args = parser.parse_args()

    app_times, minimal_times, base_times = first_frame(args.runs, args.baseline)
    frame, minimal = statistics.median(app_times), statistics.median(minimal_times)
    ratio = frame / minimal
    print(f"first frame      median {frame:6.3f} s over {args.runs} launches; a minimal Textual "
          f"app {minimal:6.3f} s, in a {WIDTH}×{HEIGHT} tmux window")
    print(f"  ratio {ratio:.2f}× the minimal app (target ≤ {FIRST_FRAME_RATIO}×: "
          f"{'ok' if ratio <= FIRST_FRAME_RATIO else 'MISSED'})")
    print(f"  each launch: tutor {_spread(app_times, 1)} s; minimal {_spread(minimal_times, 1)} s")
    if args.baseline is not None:
        base = statistics.median(base_times)
        print(f"  baseline {args.baseline}: median {base:6.3f} s, {base / minimal:.2f}× the "
              f"minimal app; each launch {_spread(base_times, 1)} s")
    if args.first_frame:
        return 0

    in_app, direct, bare = asyncio.run(_verdicts(max(args.runs, 5)))
    verdict, raw, least = (statistics.median(x) for x in (in_app, direct, bare))
    ui = verdict - raw
    print(f"verdict composed median {verdict * 1000:6.1f} ms after the run key, torch warm; "
          f"the check alone {raw * 1000:.1f} ms")
    print(f"  the UI's part  {ui * 1000:6.1f} ms (target ≤ {UI_VERDICT_TARGET * 1000:.0f} ms: "
          f"{'ok' if ui <= UI_VERDICT_TARGET else 'MISSED'})")
    print(f"  minimal app    {least * 1000:6.1f} ms for the same check → the tutor takes "
          f"{verdict / least:.2f}× the minimal app, its UI part {(least - raw) * 1000:.1f} ms")
    # On a shared machine single runs stray far from the medians: the spread shows how far.
    print(f"  each check, ms: tutor {_spread(in_app, 1000)}; check alone {_spread(direct, 1000)}; "
          f"minimal app {_spread(bare, 1000)}")
    return 0


def _spread(times: list[float], scale: float) -> str:
    """The runs in order, scaled (1000 for milliseconds)."""
    return " ".join(f"{t * scale:.3g}" for t in times)


if __name__ == "__main__":
    raise SystemExit(main())
