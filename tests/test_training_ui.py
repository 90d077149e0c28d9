"""The exercise-4 screen, mounted alone in a tiny app: Pilot for behaviour, one snapshot for layout.

Most tests use a stand-in evaluator that streams made-up progress (so they are fast and the
snapshot is stable); two drive the real evaluator process.
"""

from __future__ import annotations

import asyncio
import functools
import io
import math
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console
from textual.app import App

from tutor.config import Settings
from tutor.pack.model import load_pack
from tutor.session.controller import Lesson
from tutor.session.store import Store
from tutor.training import training_code
from tutor.ui.screens.training import (
    DRAFT_DELAY,
    LossPlot,
    TrainingProgress,
    TrainingScreen,
    braille_curve,
)
from tutor.ui.widgets.editor import CodeEditor
from tutor.values.runs import RunPhase, RunProgress, RunStatus, TrainingRun

PACK = load_pack()
STEPS = 2000
CODE = training_code(PACK, steps=STEPS)
EVERY = 5


def made_up_run(status: str = "finished", steps_done: int = STEPS) -> dict:
    """A result shaped like the evaluator's, with invented numbers (this is a layout fixture)."""
    checks = [{"tensor": t, "grad": f"d{t}", "shape": None, "expected_shape": None,
               "exact": False, "approximate": t != "C", "maxdiff": 2e-8, "verdict": "approximate",
               "steps": 100, "exact_steps": 0, "approximate_steps": 97 if t == "C" else 100}
              for t in ("C", "W1", "b1", "W2", "b2", "bngain", "bnbias")]
    curve = [0.2 + 0.3 * math.exp(-k / 40) for k in range(steps_done // EVERY)]
    return {
        "status": status, "error": None, "step": None,
        "settings": {"device": "cpu", "steps": STEPS, "gradcheck_steps": 100,
                     "compiled": False},
        "gradcheck": {"steps": 100, "passed": True, "failure": None, "checks": checks,
                      "random_steps": [STEPS // 8, STEPS // 3, STEPS // 2, STEPS - 5]},
        "steps_done": steps_done, "history": {"every": EVERY, "log10_loss": curve},
        "train_loss": 2.25, "val_loss": 2.5, "samples": [f"name{k}" for k in range(20)],
        "notes": [], "steps_per_s": 1000.0, "train_s": 2.0, "wall_s": 3.0, "stdout": "",
        "lecture": {"train_loss": 2.0705, "val_loss": 2.1099}, "reference_train_loss": 2.2,
    }


class MadeUpEvaluator:
    """Streams progress like the worker does and honours cancel(); never imports torch."""

    def __init__(self, delay: float = 0.0, until_cancelled: bool = False) -> None:
        self.delay = delay
        self.until_cancelled = until_cancelled  # keep streaming the last step until cancel()
        self.cancelled = threading.Event()
        self.payloads: list[dict] = []

    def train(self, code, steps, *, progress, **options) -> TrainingRun:
        """As the evaluator's client does: typed progress as it comes, then the typed run."""
        plain = self.stream({"code": code, "steps": steps, **options},
                            lambda p: progress(RunProgress.from_dict(p)))
        return TrainingRun.from_dict(plain)

    def stream(self, payload, on_progress) -> dict:
        """Progress and the result as the worker sends them (plain data)."""
        self.payloads.append(payload)
        run = made_up_run()
        on_progress({"phase": "gradcheck", "step": 100, "of": 100,
                     "checks": run["gradcheck"]["checks"]})
        curve = run["history"]["log10_loss"]
        done = 0
        spans = list(range(0, len(curve), 40))
        if self.until_cancelled:
            spans = spans[:1] + [spans[1]] * 10_000
        for k in spans:
            if self.cancelled.is_set():
                time.sleep(4 * self.delay)  # the worker finishes its step and the results
                return made_up_run("cancelled", done)
            done = min(STEPS, (k + 40) * EVERY)
            on_progress({"phase": "train", "step": done, "steps": STEPS, "every": EVERY,
                         "points": curve[k:k + 40], "steps_per_s": 1000.0,
                         "eta_s": (STEPS - done) / 1000, "loss": 10 ** curve[k], "lr": 0.1})
            time.sleep(self.delay)
        on_progress({"phase": "results", "step": STEPS, "steps": STEPS})
        return run

    def cancel(self) -> None:
        self.cancelled.set()


class Host(App):
    def __init__(self, screen: TrainingScreen) -> None:
        super().__init__()
        self.training = screen
        self.closed_with = "open"

    def on_mount(self) -> None:
        self.push_screen(self.training, self.remember)

    def remember(self, result) -> None:
        self.closed_with = result


def sync(test):
    """Run an async Pilot test with asyncio.run (fixtures pass through functools.wraps)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        return asyncio.run(test(*args, **kwargs))

    return run


def plain(widget) -> str:
    console = Console(width=200, file=io.StringIO(), record=True)
    console.print(widget.content)
    return console.export_text()


async def until(pilot, condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the screen did not get there in time"
        await pilot.pause(0.05)


def screen_for(evaluator, store=None, code: str = CODE, steps: int = STEPS) -> TrainingScreen:
    return TrainingScreen(Lesson(PACK, store, evaluator), code, steps=steps)


# --- with the stand-in evaluator ------------------------------------------------------------------


@sync
async def test_run_streams_progress_then_shows_results():
    ev = MadeUpEvaluator(delay=0.02)
    screen = screen_for(ev)
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.press("f5")
        await until(pilot, lambda: not screen.running)
        assert ev.payloads[0]["code"] == CODE and ev.payloads[0]["steps"] == STEPS
        assert "Finished: 2 000 steps" in str(screen.query_one("#train-phase").content)
        results = plain(screen.query_one("#train-results"))
        assert "2.0705" in results and "2.1099" in results and "name19" in results
        assert "97/100" in plain(screen.query_one("#train-gradcheck"))
        assert len(screen.query_one(LossPlot).points) == STEPS // EVERY



@sync
async def test_phase_3_says_what_the_run_says_it_does():
    # What phase 3 does is the pack's (a calibration only where its evaluation defines one):
    # the screen shows the run's words and adds none of its own.
    screen = screen_for(MadeUpEvaluator())
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        screen.post_message(TrainingProgress(RunProgress(
            RunPhase.RESULTS, STEPS, steps=STEPS, doing="the losses, then the samples")))
        await pilot.pause()
        phase = str(screen.query_one("#train-phase").content)
        assert phase == "Phase 3 · the losses, then the samples…"

@sync
async def test_a_run_stopped_from_outside_says_why():
    from types import SimpleNamespace

    from tutor.evaluator.worker import stopped

    class Stopping(MadeUpEvaluator):
        def stream(self, payload, on_progress) -> dict:
            return stopped(SimpleNamespace(status="timeout", why="quiet"), "step", 120, 5.0)

    screen = screen_for(Stopping())
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.press("f5")
        await until(pilot, lambda: not screen.running)
        phase = str(screen.query_one("#train-phase").content)
        assert phase.startswith("timeout: a training step ran past the time limit of 5 s")
        assert "stopped from outside" in phase and "at step 120" in phase


@sync
async def test_cancel_key_stops_the_run_and_keeps_it():
    ev = MadeUpEvaluator(delay=0.05, until_cancelled=True)
    screen = screen_for(ev)
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.press("ctrl+j")
        await until(pilot, lambda: len(screen.query_one(LossPlot).points) > 0)
        await pilot.press("f8")
        # Until the run has stopped it says it is stopping; the stand-in may already have
        # stopped by the time the key's handling is done, on a busy machine.
        phase = str(screen.query_one("#train-phase").content)
        assert "Stopping" in phase or not screen.running, phase
        await until(pilot, lambda: not screen.running)
        assert ev.cancelled.is_set()
        assert "Stopped after" in str(screen.query_one("#train-phase").content)
        assert screen.result.status is RunStatus.CANCELLED


@sync
async def test_escape_cancels_a_run_then_leaves():
    ev = MadeUpEvaluator(delay=0.05, until_cancelled=True)
    screen = screen_for(ev)
    host = Host(screen)
    async with host.run_test(size=(140, 45)) as pilot:
        await pilot.press("f5")
        await until(pilot, lambda: len(screen.query_one(LossPlot).points) > 0)
        await pilot.press("escape")
        await until(pilot, lambda: not screen.running)
        assert ev.cancelled.is_set() and host.screen is screen
        await pilot.press("escape")
        await pilot.pause()
        assert host.closed_with.status is RunStatus.CANCELLED


@sync
async def test_edits_are_saved_as_a_draft_and_reset_restores(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        screen = screen_for(MadeUpEvaluator(), store)
        async with Host(screen).run_test(size=(140, 45)) as pilot:
            editor = screen.query_one(CodeEditor)
            editor.insert("# my note\n", (0, 0))
            await pilot.pause(DRAFT_DELAY + 0.3)
            assert store.draft("train/loop").startswith("# my note\n")
            await pilot.press("ctrl+t")  # the same key as the main screen's template
            assert editor.text == CODE
            await pilot.press("ctrl+z")  # one edit: undo brings the learner's code back
            assert editor.text.startswith("# my note\n")


@sync
async def test_a_python_loop_is_noted_before_running():
    code = CODE.replace("dC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))",
                        "for k in range(n):\n    dC[Xb[k]] += demb[k]")
    screen = screen_for(MadeUpEvaluator(), code=code)
    async with Host(screen).run_test(size=(140, 45)):
        notes = str(screen.query_one("#train-notes").content)
        assert "dC" in notes and "Bonus challenge" in notes


@sync
async def test_the_screen_says_whether_the_run_passes_the_exercise():
    class Unchecked(MadeUpEvaluator):
        def stream(self, payload, on_progress) -> dict:
            run = super().stream(payload, on_progress)
            return {**run, "settings": {**run["settings"], "gradcheck_steps": 0},
                    "gradcheck": None}

    for evaluator, said in ((MadeUpEvaluator(), "✓ This run passes the exercise."),
                            (Unchecked(), "✗ This run does not pass the exercise: gradient "
                                          "check off")):
        screen = screen_for(evaluator)
        async with Host(screen).run_test(size=(140, 45)) as pilot:
            await pilot.press("f5")
            await until(pilot, lambda s=screen: s.result is not None)
            assert said in str(screen.query_one("#train-phase").content)


def test_braille_curve_draws_a_connected_line():
    cells = braille_curve([1.0, 0.0], slots=2, width=2, height=1, lo=0.0, hi=1.0)
    # First point top-left, second bottom of the next cell's left column; the jump is filled.
    assert cells[0][0] == 0x01 and cells[0][1] == 0x01 | 0x02 | 0x04 | 0x40


def test_snapshot_after_a_run(snap_compare):
    screen = screen_for(MadeUpEvaluator())

    async def run_before(pilot) -> None:
        screen.query_one(CodeEditor).cursor_blink = False
        await pilot.press("f5")
        await until(pilot, lambda: screen.result is not None)
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(140, 45), run_before=run_before)


def test_the_screen_does_not_import_torch():
    code = ("import sys, tutor.ui.screens.training; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "[]"


# --- with the real evaluator ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    from tutor.evaluator.client import Evaluator

    ev = Evaluator(Settings(device="cpu", home=tmp_path_factory.mktemp("ev")))
    ev.start()
    yield ev
    ev.close()


@pytest.mark.slow
@sync
async def test_real_run_is_cancelled_and_kept(evaluator, tmp_path):
    with Store.open(tmp_path, PACK) as store:
        screen = screen_for(evaluator, store, steps=200_000)
        async with Host(screen).run_test(size=(140, 45)) as pilot:
            await pilot.press("f5")
            await until(pilot, lambda: len(screen.query_one(LossPlot).points) > 0, timeout=120)
            await pilot.press("f8")
            await until(pilot, lambda: not screen.running, timeout=120)
            r = screen.result
            assert r.status is RunStatus.CANCELLED and 0 < r.steps_done < 200_000
            assert r.val_loss is not None
            (kept,) = store.training_runs()
            assert kept["id"] == r.run_id and kept["status"] == "cancelled"


@pytest.mark.slow
@sync
async def test_real_wrong_gradient_marks_its_line(evaluator):
    code = CODE.replace("db2 = dlogits.sum(0)", "db2 = dlogits.sum(0) * 2")
    screen = screen_for(evaluator, code=code, steps=300)
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.press("f5")
        await until(pilot, lambda: screen.result is not None, timeout=120)
        assert screen.result.status is RunStatus.DIVERGED
        assert "db2" in str(screen.query_one("#train-phase").content)
        row = screen.query_one(CodeEditor).error_row
        assert code.splitlines()[row].startswith("db2 =")


# --- runs kept from earlier sessions --------------------------------------------------------


class KeptRuns:
    """A store holding two earlier runs, at fixed times, so the history draws the same each time."""

    def __init__(self) -> None:
        first = made_up_run("finished")
        first.update(id=1, at="2025-03-01T09:15:00+00:00", train_loss=2.31, val_loss=2.35)
        first["settings"] = {"device": "cpu", "steps": STEPS, "compiled": False}
        second = made_up_run("cancelled", steps_done=1000)
        second["history"]["log10_loss"] = [0.25 + 0.3 * math.exp(-k / 25) for k in range(200)]
        second.update(id=2, at="2025-03-01T10:40:00+00:00", train_loss=2.42, val_loss=2.47,
                      train_s=1.0)
        second["settings"] = {"device": "cpu", "steps": STEPS, "compiled": False}
        self.runs = [first, second]
        self.values: dict[str, str] = {}
        self.drafts: dict[str, str] = {}

    def training_runs(self) -> list[dict]:
        return self.runs

    def remembered(self, key: str) -> str | None:
        return self.values.get(key)

    def remember(self, key: str, value: str) -> None:
        self.values[key] = value

    def revealed(self) -> set[str]:
        return set()

    def accepted_codes(self) -> dict[str, str]:
        return {}

    def save_draft(self, step_id: str, code: str) -> None:
        self.drafts[step_id] = code


@pytest.fixture
def utc(monkeypatch):
    """Run times are shown in local time: pin it, so the pictures match on any machine."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@sync
async def test_reopening_shows_earlier_runs_and_compares_them(utc):
    screen = screen_for(MadeUpEvaluator(), KeptRuns())
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        phase = plain(screen.query_one("#train-phase"))
        assert "Your last run, #2" in phase and "Stopped after 1 000 of 2 000 steps" in phase
        table = screen.query_one("#train-runs")
        assert table.row_count == 2
        plot = screen.query_one(LossPlot)
        assert len(plot.points) == 200 and plot.others == []
        table.focus()
        table.move_cursor(row=1)  # newest first: row 1 is run #1
        await pilot.press("enter")
        assert [s.label for s in plot.others] == ["#1"]
        await pilot.press("enter")
        assert plot.others == []


@sync
async def test_the_number_of_steps_is_the_learners_choice():
    ev = MadeUpEvaluator()
    store = KeptRuns()
    screen = screen_for(ev, store)
    async with Host(screen).run_test(size=(140, 45)) as pilot:
        await pilot.press("f6")
        assert screen.focused is screen.query_one("#train-steps")
        await pilot.press(*"500")
        await pilot.press("enter")
        assert screen.settings.steps == 500
        assert "500 steps" in plain(screen.query_one("#train-title"))
        assert store.values["train.steps"] == "500"
        await pilot.press("f5")
        await until(pilot, lambda: not screen.running)
        assert ev.payloads[0]["steps"] == 500
        # Nonsense is refused and the last good value stays.
        await pilot.press("f6", *"abc", "0", "enter")
        assert screen.settings.steps == 500


def test_snapshot_of_the_runs_kept(snap_compare, utc):
    screen = screen_for(MadeUpEvaluator(), KeptRuns())

    async def run_before(pilot) -> None:
        screen.query_one(CodeEditor).cursor_blink = False
        table = screen.query_one("#train-runs")
        table.focus()
        table.move_cursor(row=1)
        await pilot.press("enter")  # compare with run #1
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(140, 45), run_before=run_before)


def test_snapshot_small_terminal_after_a_run(snap_compare):
    """80×24: the code and the run take turns; a run shows the run, F4 goes back to the code."""
    screen = screen_for(MadeUpEvaluator())

    async def run_before(pilot) -> None:
        screen.query_one(CodeEditor).cursor_blink = False
        await pilot.press("f5")
        await until(pilot, lambda: screen.result is not None)
        await pilot.pause()

    assert snap_compare(Host(screen), terminal_size=(80, 24), run_before=run_before)


def _screen_text(app) -> str:
    """Every line of the screen as shown, from the compositor."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@sync
async def test_the_title_and_the_hints_are_whole_at_80_and_120_columns():
    for size in ((120, 40), (80, 24)):
        screen = screen_for(MadeUpEvaluator(), steps=20_000)
        app = Host(screen)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            if size == (80, 24):
                await pilot.press("f4")  # the run side
                await pilot.pause()
            shown = " ".join(_screen_text(app).split())
            assert "20 000 steps" in shown  # the title's end, on a second line if need be
            assert "F8 stops a run" in shown


@sync
async def test_changing_the_step_count_rewrites_the_code_header():
    screen = screen_for(MadeUpEvaluator(), steps=STEPS)
    async with Host(screen).run_test(size=(120, 40)) as pilot:
        editor = screen.query_one(CodeEditor)
        assert editor.text.startswith("# One training step, run 2 000 times")
        await pilot.press("f6", *"20k", "enter")
        await pilot.pause()
        assert editor.text.startswith("# One training step, run 20 000 times")
        await pilot.press("ctrl+z")  # one edit: the old count comes back
        assert "run 2 000 times" in editor.text.splitlines()[0]


def test_the_completion_screen_tells_the_run_that_finished_exercise_4():
    from tutor.ui.screens.completion import run_lines

    console = Console(width=200, file=io.StringIO(), record=True)
    for line in run_lines(TrainingRun.from_dict(made_up_run())):
        console.print(line)
    text = console.export_text()
    assert "Your gradients trained the network for 2 000 steps in 0 min 02 s." in text
    assert "train loss 2.2500, val loss 2.5000 (lecture: 2.0705, 2.1099)" in text
    assert "name0  name1" in text and "name8" not in text
    assert run_lines(None) == []


def test_the_losses_a_run_is_shown_beside_are_labelled_as_the_pack_says():
    """Where the reference losses are not a lecture's (the LSTM and the GPT compare with
    makemore's MLP), every place that shows them says so; makemore keeps `lecture`."""
    from tutor.pack.model import find_pack
    from tutor.session.runtext import format_run
    from tutor.ui.screens.completion import run_lines
    from tutor.ui.screens.training import results_view

    lstm, gpt = (load_pack(find_pack(name)) for name in ("lstm", "gpt"))
    assert PACK.baseline == "lecture"
    assert lstm.baseline == gpt.baseline == "makemore's MLP"
    run = TrainingRun.from_dict(made_up_run())

    lines = format_run(run, lstm.baseline).splitlines()
    head = next(line for line in lines if "yours" in line)
    assert "makemore's MLP" in head and "lecture" not in head
    train = next(line for line in lines if line.lstrip().startswith("train loss"))
    # each number ends under the end of its column's head
    assert train.index("2.2500") + 6 == head.index("yours") + 5
    assert train.index("2.0705") + 6 == head.index("makemore's MLP") + len("makemore's MLP")
    assert "lecture" in format_run(run)

    console = Console(width=200, file=io.StringIO(), record=True)
    for line in run_lines(run, lstm.baseline):
        console.print(line)
    console.print(results_view(run, lstm.baseline))
    text = console.export_text()
    assert "(makemore's MLP: 2.0705, 2.1099)" in text
    assert "makemore's MLP" in next(line for line in text.splitlines() if "yours" in line)
    assert "lecture" not in text
