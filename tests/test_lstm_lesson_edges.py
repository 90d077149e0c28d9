"""The LSTM lesson as a new learner walks it: the views its templates lead into are said where
they are made and named where they bite, exercise 2's loop may call exercise 3's function, the
commands describe the loop and the LSTM's own run, the sidebar counts every step training waits
for, and the messages and progress lines a learner reads are whole."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tutor.config import Settings
from tutor.core.execution import overlaps
from tutor.pack import curriculum
from tutor.pack.model import load_pack
from tutor.session.controller import Lesson
from tutor.session.report import shortened
from tutor.session.store import Store
from tutor.training.plan import TrainingSettings
from tutor.values.results import CheckResult
from tutor.values.runs import LossHistory, checkpoints

ROOT = Path(__file__).resolve().parent.parent
LSTM = ROOT / "exercises" / "lstm"
PACK = load_pack(LSTM)

H_OUT_VIEW = "dhs_before = dhs[:, :t]\ndhs_after = dhs[:, t+1:]\ndh = dhs[:, t]\n"
STATE_VIEW = "dh += dstate[0]\ndc = dstate[1]\n"


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    made = Engine(Settings(device="cpu", pack=str(LSTM)))
    yield made
    made.close()


def _solution(step_id: str) -> str:
    return PACK.step(step_id).solution


# --- which bytes a view covers -----------------------------------------------------------------


def test_views_overlap_only_where_they_share_bytes():
    stacked = torch.randn(2, 4, 3)
    di, dg = stacked.unbind(0)
    assert not overlaps(di, dg)  # one storage, two halves: a += on one leaves the other alone
    assert overlaps(stacked[:, 1], stacked) and overlaps(di, stacked)
    grid = torch.randn(5, 4)
    # Interleaved columns span the same range of bytes and share none of them.
    assert not overlaps(grid[:, 0], grid[:, 1])
    assert overlaps(grid[:, 1], grid[2])
    assert overlaps(grid, grid.view(torch.int32))  # the same bytes read as another dtype
    assert not overlaps(grid, grid.clone())


# --- the views the templates lead into ---------------------------------------------------------


def test_a_first_branch_made_as_a_view_passes_with_the_expression_to_copy(engine):
    prior = {"step/logits": _solution("step/logits"), "step/hs": _solution("step/hs")}
    result = engine.check("step/h_out", H_OUT_VIEW, prior).to_dict()
    assert result["passed"]
    assert any("`dh = dhs[:, t]` is a view of dhs" in n and "`dhs[:, t].clone()`" in n
               for n in result["notes"]), result["notes"]
    # dhs_before is a view too, but nothing adds to it: no note for it.
    assert not any("dhs_before" in n for n in result["notes"])
    copied = engine.check("step/h_out", _solution("step/h_out"), prior).to_dict()
    assert copied["passed"] and not any("view" in n for n in copied["notes"])


def test_the_refusal_names_the_expression_and_the_step_that_made_the_view(engine):
    prior = {"step/logits": _solution("step/logits"), "step/hs": _solution("step/hs"),
             "step/h_out": H_OUT_VIEW}
    result = engine.check("step/state", _solution("step/state"), prior).to_dict()
    assert not result["passed"]
    row = next(c for c in result["checks"] if c["tensor"] == "h")
    assert row["diagnosis"]["kind"] == "aliasing"
    message = row["diagnosis"]["message"]
    assert "`dh = dhs[:, t]` in step/h_out" in message
    assert "`dh = dhs[:, t].clone()`" in message


def test_a_view_of_a_given_gradient_is_said_and_named_where_it_bites(engine):
    prior = {s: _solution(s) for s in ("step/logits", "step/hs", "step/h_out")}
    made = engine.check("step/state", STATE_VIEW, prior).to_dict()
    assert made["passed"]
    assert any("`dc = dstate[1]` is a view of dstate" in n and "`dstate[1].clone()`" in n
               for n in made["notes"]), made["notes"]
    bites = engine.check("step/h", _solution("step/h"), {**prior, "step/state": STATE_VIEW})
    row = next(c for c in bites.to_dict()["checks"] if c["tensor"] == "c")
    message = row["diagnosis"]["message"]
    assert "which autograd gave step/state" in message
    assert "`dc = dstate[1].clone()`" in message


def test_disjoint_views_of_one_storage_get_no_note(engine):
    code = "df = dc * c_prev\ndc_prev = dc * f\ndi, dg = (dc * torch.stack([g, i])).unbind(0)\n"
    result = engine.check("step/c", code).to_dict()
    assert result["passed"]
    assert not any("share memory" in n for n in result["notes"]), result["notes"]


# --- exercise 2's loop calling exercise 3's step -----------------------------------------------

LOOP = '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    dxs = torch.zeros_like(xs)
    dWx, dWh, db = torch.zeros_like(Wx), torch.zeros_like(Wh), Wx.new_zeros(Wx.shape[1])
    dh, dc = torch.zeros_like(h0), torch.zeros_like(c0)
    for s in reversed(range(T)):
        h_prev = hs[:, s - 1] if s else h0
        c_prev = cs[:, s - 1] if s else c0
        dxs[:, s], dh, dc, dwx, dwh, dbb = lstm_step_backward(
            dhs[:, s] + dh, dc, xs[:, s], h_prev, c_prev, cs[:, s], gates[:, s], Wx, Wh)
        dWx, dWh, db = dWx + dwx, dWh + dwh, db + dbb
    return dxs, dh, dc, dWx, dWh, db
'''


def test_the_loop_sees_the_step_function_a_later_step_accepted(engine):
    step = "fused/lstm_step_backward"
    result = engine.check("bptt/lstm_backward", LOOP, {step: _solution(step)}).to_dict()
    assert result["passed"], result


def test_until_that_step_passes_the_error_names_it(engine):
    result = engine.check("bptt/lstm_backward", LOOP, {}).to_dict()
    assert not result["passed"]
    assert "NameError" in result["error"]["message"]
    assert ("lstm_step_backward is defined here once fused/lstm_step_backward has passed"
            in result["error"]["message"])


def test_a_failure_inside_the_later_steps_function_names_that_step(engine):
    step = "fused/lstm_step_backward"
    broken = _solution(step).replace("    return", "    1 / 0\n    return", 1)
    result = engine.check("bptt/lstm_backward", LOOP, {step: broken}).to_dict()
    assert "of your code for fused/lstm_step_backward" in result["error"]["message"]


# --- list, show and train --json ---------------------------------------------------------------


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu", "--pack", "lstm",
         *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "100"})


def test_list_and_show_give_the_loop_for_the_loop(tmp_path):
    listed = json.loads(_cli(tmp_path, "list", "--json").stdout)
    loop = next(e for e in listed if e["id"] == "bptt/lstm_backward")
    assert loop["forward"][1] == "for s in range(T):"
    assert not any("x_t" in line for line in loop["forward"])
    shown = _cli(tmp_path, "show", "bptt/lstm_backward", "--no-shapes").stdout
    assert "for s in range(T):" in shown and "Wx_t" not in shown


def test_the_lessons_scope_holds_no_unexplained_width(engine):
    assert "block_size" not in engine.network.sizes
    assert engine.network.sizes["vocab_size"] == 27


def test_the_runs_settings_are_the_lstms_own():
    s = TrainingSettings.from_pack(PACK)
    assert (s.n_embd, s.n_hidden, s.block_size) == (16, 128, None)
    assert "ignore_index=-1" in s.loss_line and s.loss_line.startswith("loss = ")


# --- the sidebar, the footer, --break, progress and messages -----------------------------------


def test_training_waits_for_every_step_before_it_transitively():
    training = next(s for s in PACK.steps if s.kind.trained)
    assert len(curriculum.blockers(PACK, training.id, set())) == 13
    ex1 = {s.id for s in PACK.exercise(1).steps}
    # Exercise 1 done: what is left is exercises 2 and 3, as before.
    assert len(curriculum.blockers(PACK, training.id, ex1)) == 3


def _passed(step_id: str) -> CheckResult:
    return CheckResult.from_dict({"step": step_id, "passed": True, "device": "cpu",
                                  "heldout": None, "error": None, "stdout": "", "notes": [],
                                  "figure": None, "checks": []})


def test_leaving_from_the_training_screen_reopens_it(tmp_path):
    training = next(s for s in PACK.steps if s.kind.trained)
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        for step in PACK.gradient_steps:
            store.record_attempt(step.id, step.solution, _passed(step.id))
        lesson.open_step(training.id)
        assert lesson.reopens_training() == training
        assert not lesson.opening_step().kind.trained
        lesson.open_step("bptt/lstm_backward")
        assert lesson.reopens_training() is None
        assert lesson.opening_step().id == "bptt/lstm_backward"


def test_the_training_footer_keeps_code_run_at_80_columns():
    from tutor.ui.screens.training import TrainingScreen
    from tutor.ui.widgets.footer import PALETTE_WIDTH, Key, fit

    shown = {"ctrl+j": "^j", "ctrl+t": "^t", "escape": "esc"}
    keys = [Key(b.key, shown.get(b.key.split(",")[0], b.key.split(",")[0]), b.description,
                b.action, True, "") for b in TrainingScreen.BINDINGS if b.show]
    keys.append(Key("f9", "f9", "Keys", "help", True, ""))
    assert "toggle_view" in {k.action for k in fit(keys, 80 - PALETTE_WIDTH)}


def test_a_comparison_of_5000_steps_ends_at_step_5000():
    # makemore's 400 points over 5 000 steps: spans of 13, the last one shorter.
    every = 13
    points = -(-5000 // every)
    curve = LossHistory(every, [0.3] * points)
    rows = checkpoints(curve, curve, 6, 5000)
    assert rows[-1][0] == 5000 and all(step <= 5000 for step, _, _ in rows)


def test_the_progress_line_fits_one_row(monkeypatch):
    from tutor.commands.train import Progress

    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    show = Progress(out)
    show.write("█" * 24 + " 12 345/20 000 · 164 steps/s · 0:45 left · loss 2.1234")
    assert all(len(part) <= 39 for part in out.getvalue().split("\r"))


def test_a_long_message_is_cut_where_a_sentence_ends():
    text = ("your code also changed dhs: dh was made as `dh = dhs[:, t]`, which copies no "
            "data. Write `dh = dhs[:, t].clone()` there, or update it out of place.")
    assert shortened(text, 500) == text
    cut = shortened(text, 110)
    assert cut.endswith("copies no data. …") and len(cut) <= 110
    assert shortened("a" * 50 + " `b c d e`", 56).count("`") % 2 == 0
