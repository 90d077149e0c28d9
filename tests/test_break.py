"""What a wrong gradient does: training once more with one step of the training code swapped
for a catalogued mistake or the learner's own first refused attempt, next to a good run, in the
command line, the notebook and the training screen (the tiny pack: a run takes a second)."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from textual.app import App

from tutor.config import Settings
from tutor.pack.model import load_pack
from tutor.session.controller import BreakError, Lesson
from tutor.session.store import Store
from tutor.values.runs import (
    BrokenStep,
    LossHistory,
    RunSettings,
    RunStatus,
    TrainingRun,
    checkpoints,
)

TINY = Path(__file__).parent / "packs" / "tiny"
PACK = load_pack(TINY)
GPT = load_pack(Path(__file__).parent.parent / "exercises" / "gpt")
WRONG_SCALE = "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= 2 * n\n"


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu",
                           "--pack", str(TINY), *args], capture_output=True, text=True,
                          timeout=180)


def _runs(home: Path) -> list[TrainingRun]:
    with Store.open(home, PACK) as store:
        return Lesson(PACK, store, None).training_runs()


# --- the rule and the table, without a run -----------------------------------------------------


def test_a_broken_run_never_passes_and_is_never_kept(tmp_path):
    broken = BrokenStep("tiny/logits", 1, "mistake 1 of 1", "no 1/n", "dlogits = 0")
    run = TrainingRun(RunStatus.FINISHED, settings=RunSettings(
        {"steps": 10, "gradcheck_steps": 5}, broken=broken), train_loss=0.1,
        reference_train_loss=1.0)
    assert not run.exercise.passed and "broken on purpose" in run.exercise.reason
    back = TrainingRun.from_dict(json.loads(json.dumps(run.to_dict())))
    assert back.settings.broken.step == "tiny/logits" and back.settings.broken.mistake == 1
    assert not back.exercise.passed
    with Store.open(tmp_path, PACK) as store:
        reason = Lesson(PACK, store, None).keep_run("code", run)
        assert reason and "never kept" in reason
        assert store.training_runs() == []


def test_checkpoints_put_two_curves_side_by_side_and_stop_where_a_run_blew_up():
    good = LossHistory(10, [0.0, -0.5, -1.0, -1.5])
    broken = LossHistory(10, [0.0, 0.5, float("inf")])
    rows = checkpoints(good, broken, count=4)
    assert [r[0] for r in rows] == [10, 20, 30, 40]
    assert rows[1] == (20, pytest.approx(10 ** -0.5), pytest.approx(10 ** 0.5))
    assert rows[2][2] is None and rows[3][2] is None  # not finite, then no point at all
    assert checkpoints(None, None) == []


def test_choosing_what_breaks_a_step(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        assert [s.id for s in lesson.breakable_steps()] == [
            "tiny/logits", "tiny/h", "tiny/ln", "tiny/hpre", "tiny/W1"]
        first = lesson.breakage("tiny/logits")
        assert first.mistake == 1 and first.code == PACK.step("tiny/logits").mistakes[0].code
        for ask, words in ((("tiny/nope",), "no step 'tiny/nope'"),
                           (("tiny/h",), "no catalogued mistakes"),
                           (("tiny/logits", 2), "from 1 to 1"),
                           (("tiny/train",), "not part of the training step")):
            with pytest.raises(BreakError, match=words):
                lesson.breakage(*ask)
        with pytest.raises(BreakError, match="no refused attempt"):
            lesson.breakage("tiny/logits", mine=True)
        # An attempt that stopped with an error never trains; the first refused one that ran does.
        from tutor.values.results import CheckError, CheckResult, ErrorKind

        store.record_attempt("tiny/logits", "dlogits = (", CheckResult.failure(
            "tiny/logits", CheckError(ErrorKind.SYNTAX, "bad")))
        wrong = CheckResult("tiny/logits", passed=False)
        store.record_attempt("tiny/logits", WRONG_SCALE, wrong)
        store.record_attempt("tiny/logits", "dlogits = 2 * logits", wrong)
        mine = lesson.breakage("tiny/logits", mine=True)
        assert mine.mistake is None and mine.code == WRONG_SCALE
        assert lesson.breakages("tiny/logits")[-1].code == WRONG_SCALE
        code = lesson.assembled_code(50, mine)
        assert "# dlogits (exercise 1, your first refused attempt, broken on purpose)" in code
        assert WRONG_SCALE.strip() in code


def test_a_function_step_of_an_assembled_network_is_swapped_whole(tmp_path):
    with Store.open(tmp_path, GPT) as store:
        lesson = Lesson(GPT, store, None)
        assert "functions/gelu_backward" in [s.id for s in lesson.breakable_steps()]
        way = lesson.breakage("functions/gelu_backward", 2)
        code = lesson.assembled_code(100, way)
        reference = GPT.step("functions/gelu_backward").solution.strip()
        assert way.code.strip() in code and reference not in code
        assert "mistake 2 of" in code and "broken on purpose" in code
        assert GPT.step("functions/matmul_backward").solution.strip() in code


def test_a_function_the_training_code_never_calls_cannot_be_broken(tmp_path):
    # The reference `lstm_backward` does the step itself: a broken `lstm_step_backward` would
    # train exactly as the good run. Once the learner's own `lstm_backward` calls it, it can be.
    from tutor.values.results import CheckResult

    lstm = load_pack(Path(__file__).parent.parent / "exercises" / "lstm")
    with Store.open(tmp_path, lstm) as store:
        lesson = Lesson(lstm, store, None)
        with pytest.raises(BreakError, match="never calls lstm_step_backward"):
            lesson.breakage("fused/lstm_step_backward")
        assert lesson.breakage("bptt/lstm_backward").mistake == 1
        calling = """
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    B, T, H = hs.shape
    dxs = torch.zeros_like(xs)
    dWx, dWh, db = torch.zeros_like(Wx), torch.zeros_like(Wh), Wx.new_zeros(4 * H)
    dh_next, dc_next = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in reversed(range(T)):
        h_prev = hs[:, s - 1] if s > 0 else h0
        c_prev = cs[:, s - 1] if s > 0 else c0
        dx, dh_next, dc_next, gx, gh, gb = lstm_step_backward(
            dhs[:, s] + dh_next, dc_next, xs[:, s], h_prev, c_prev, cs[:, s], gates[:, s], Wx, Wh)
        dxs[:, s] = dx
        dWx += gx
        dWh += gh
        db += gb
    return dxs, dh_next, dc_next, dWx, dWh, db
"""
        store.record_attempt("bptt/lstm_backward", calling,
                             CheckResult("bptt/lstm_backward", passed=True))
        way = lesson.breakage("fused/lstm_step_backward")
        assert way.mistake == 1 and way.code.strip() in lesson.assembled_code(50, way)


# --- the command line ----------------------------------------------------------------------------


def test_train_break_prints_both_runs_and_keeps_only_the_good_one(tmp_path):
    out = _cli("train", "--break", "tiny/logits", home=tmp_path)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "tiny/logits broken with mistake 1 of 1" in text
    assert "next to a good run trained just now, 400 steps each" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith("step ")]
    assert len(rows) == 6 and rows[-1][1] == "400"
    train = next(line for line in text.splitlines() if "train loss" in line).split()
    good, broken = float(train[2]), float(train[3])
    assert broken > 2 * good  # a gradient n times too large does not train this network
    runs = _runs(tmp_path)
    assert len(runs) == 1 and runs[0].settings.broken is None and runs[0].exercise.passed
    # The second time, the kept run is the one to compare with: no good run is trained again.
    again = _cli("train", "--break", "tiny/logits", "--json", home=tmp_path)
    assert again.returncode == 0, again.stderr
    d = json.loads(again.stdout)
    assert d["fresh_good_run"] is False and len(d["checkpoints"]) == 6
    assert d["broken"]["settings"]["broken"]["step"] == "tiny/logits"
    assert d["broken"]["settings"]["gradcheck_steps"] == 0
    assert d["broken"]["exercise"]["passed"] is False
    assert d["good"]["history"] == runs[0].history.to_dict()
    assert d["broken_step"]["label"] == "mistake 1 of 1"
    assert len(_runs(tmp_path)) == 1


@pytest.mark.parametrize(("args", "words"), [
    (("--break", "tiny/nope"), "no step 'tiny/nope'"),
    (("--break", "tiny/h"), "tiny/h has no catalogued mistakes"),
    (("--break", "tiny/logits", "--mine"), "no refused attempt at tiny/logits"),
    (("--break", "tiny/logits", "--mistake", "4"), "from 1 to 1"),
    (("--break", "tiny/logits", "--reference"), "--reference does not go with --break"),
    (("--mine",), "--mistake and --mine choose how --break STEP"),
])
def test_train_break_usage_errors_are_one_line_and_exit_2(tmp_path, args, words):
    out = _cli("train", *args, home=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and words in out.stderr
    assert out.stdout == ""


def test_train_break_mine_trains_the_learners_own_refused_attempt(tmp_path):
    checked = _cli("check", "tiny/logits", "--code", WRONG_SCALE, home=tmp_path)
    assert checked.returncode == 1
    out = _cli("train", "--break", "tiny/logits", "--mine", "--steps", "60", "--print-code",
               home=tmp_path)
    assert out.returncode == 0 and "dlogits /= 2 * n" in out.stdout
    assert "One training step, run 60 times" in out.stdout


# --- the notebook --------------------------------------------------------------------------------


def test_the_train_magic_shows_both_curves(tmp_path, capsys, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    from tutor.notebook import magics

    shown = []
    monkeypatch.setattr(magics, "show", shown.append)
    shell = InteractiveShell.instance()
    shell.run_cell(f"%load_ext tutor\n%tutor home {tmp_path}\n%tutor pack {TINY}")
    try:
        shown.clear()
        capsys.readouterr()
        shell.run_cell("%train --break tiny/logits --steps 120")
        err = capsys.readouterr().err
        assert err == "", err
        text, image = shown
        assert "tiny/logits broken with mistake 1 of 1" in text["text/plain"]
        assert "<pre" in text["text/html"]
        assert image["text/plain"].startswith("log10(loss)")
        import base64

        assert base64.b64decode(image["image/png"]).startswith(b"\x89PNG")
        for line in ("%train --break", "%train --mine", "%train --steps none", "%train --fast"):
            shell.run_cell(line)
            said = capsys.readouterr().err.strip()
            assert said.startswith("backprop-tutor: ") and said.count("\n") == 0, (line, said)
    finally:
        shell.run_cell("%unload_ext tutor")


# --- the training screen -------------------------------------------------------------------------


class Host(App):
    def __init__(self, screen) -> None:
        super().__init__()
        self.training = screen

    def on_mount(self) -> None:
        self.push_screen(self.training)


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        yield store


def test_the_training_screen_breaks_a_step_and_draws_both_curves(tmp_path, store):
    from tutor.evaluator.client import Evaluator
    from tutor.ui.screens.breaking import BreakChooser
    from tutor.ui.screens.training import LossPlot, TrainingScreen

    settings = Settings(device="cpu", home=tmp_path, pack=str(TINY))

    async def scenario() -> None:
        with Evaluator(settings) as ev:
            lesson = Lesson(PACK, store, ev)
            screen = TrainingScreen(lesson, lesson.training_code(), steps=200)
            host = Host(screen)
            async with host.run_test(size=(140, 45)) as pilot:
                await pilot.pause()
                # In the footer: an active binding that shows.
                shown = [b.binding for b in host.active_bindings.values() if b.binding.show]
                assert "train.break" in [b.id for b in shown]
                await pilot.press("f3")
                await pilot.pause()
                assert isinstance(host.screen, BreakChooser)
                await pilot.press("enter")  # the first way: tiny/logits' mistake 1
                deadline = time.monotonic() + 120
                await pilot.pause(0.1)
                while screen.running:
                    assert time.monotonic() < deadline
                    await pilot.pause(0.1)
                console = Console(width=200, file=io.StringIO(), record=True)
                console.print(screen.query_one("#train-phase").content)
                phase = console.export_text()
                plot = screen.query_one(LossPlot)
                assert plot.live.label == "tiny/logits broken" and len(plot.live.points) > 0
                assert len(plot.others) == 1 and plot.others[0].label.startswith("run #")
                screen.app.save_screenshot("break.svg", str(tmp_path))
                return phase

    phase = asyncio.run(scenario())
    runs = Lesson(PACK, store, None).training_runs()
    assert len(runs) == 1 and runs[0].settings.broken is None  # the good run only
    assert "tiny/logits broken with mistake 1 of 1" in phase
    assert "next to a good run trained just now" in phase
    assert "train loss" in phase and "never counts for the exercise" in phase


def test_the_break_action_is_in_the_help_and_the_palette(tmp_path, store):
    from tutor.ui.screens.training import TrainingScreen

    lesson = Lesson(PACK, store, None)
    screen = TrainingScreen(lesson, lesson.training_code(), steps=200)
    keys = {b.id: b for b in TrainingScreen.BINDINGS}
    assert keys["train.break"].key == "f3" and keys["train.break"].show is not False
    titles = [title for title, _, _ in screen.system_commands()]
    assert "Break a gradient" in titles
