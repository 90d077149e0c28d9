"""dh_t seen, not told: the lstm lesson's picture through time ([steps.picture], `[training]
picture`; docs/packs.md).

The check of `lstm_backward` draws dh_t at every step from the learner's own function (called on
the steps after each t) beside autograd's, on the lesson's batch and on demos with the forget
gate pinned; a training run draws it at a few steps on the longest validation names.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from rich.console import Console

from tutor.config import Settings
from tutor.notebook.render import heatmap_bundles, run_bundles
from tutor.pack.model import PackError, load_pack
from tutor.session.runtext import format_run
from tutor.ui.widgets.feedback import result_view
from tutor.ui.widgets.timebars import run_picture

LSTM = Path(__file__).resolve().parent.parent / "exercises" / "lstm"
PACK = load_pack(LSTM)
STEP = PACK.step("bptt/lstm_backward")
DEMOS = list(STEP.function.picture.demos)


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu", pack=str(LSTM)))


@pytest.fixture(scope="module")
def right(engine):
    return engine.check(STEP.id, STEP.solution)


def _mistake(start: str) -> str:
    return next(m.code for m in STEP.mistakes if m.message.startswith(start))


def _panels(result) -> dict[str, dict]:
    return {p["case"]: p for p in result.figure["panels"]}


def _text(renderable) -> str:
    console = Console(width=110, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_reference_draws_dh_t_beside_autograds_on_the_batch_and_every_demo(right):
    assert right.passed
    panels = _panels(right)
    assert list(panels) == ["lesson", *DEMOS]
    for panel in panels.values():
        assert panel["title"] == "dh_t" and not any(panel["wrong"])
        assert None not in panel["yours"]
        assert panel["yours"] == pytest.approx(panel["autograd"], rel=1e-3)
    assert len(panels["lesson"]["yours"]) == len(right.figure["yours"])  # one bar a time step
    assert right.figure["about"]


def test_the_demos_show_vanishing_and_exploding_gradients(right):
    """One gradient at the last step: shut, almost nothing reaches the start; open, it falls
    over the last two steps and then holds its size to the start, as the demos' words say;
    with large recurrent weights it grows on the way back."""
    panels = _panels(right)
    shut, drawn, open_, large = (panels[d]["autograd"] for d in DEMOS)
    assert shut[0] < 1e-8 * shut[-1]
    assert drawn[0] < 0.01 * drawn[-1]
    assert 0.02 * open_[-1] < open_[0] < 10 * open_[-1]
    held = open_[:-2]
    assert open_[-3] < 0.2 * open_[-1] and max(held) < 4 * min(held)
    assert "falls over the last two steps" in right.figure["about"]
    assert large[0] > 3 * large[-1]


def test_a_dropped_carry_parts_from_autograd_going_back(engine):
    result = engine.check(STEP.id, _mistake("The cell state's gradient is not carried"))
    assert not result.passed
    lesson = _panels(result)["lesson"]
    T = len(lesson["wrong"])
    # nothing comes after the last step, and one step alone has nothing to drop
    assert lesson["wrong"][T - 2:] == [False, False]
    assert all(lesson["wrong"][:T - 2])
    # every step is held to its own size: on the shut gate's demo the steps far back are
    # around 1e-13, and they are marked wrong there too
    shut = _panels(result)[DEMOS[0]]
    assert shut["autograd"][0] < 1e-10 and all(shut["wrong"][:len(shut["wrong"]) - 2])


def test_a_function_that_fails_on_short_sequences_still_passes_with_gaps_in_the_picture(engine):
    """The picture's calls never count against the check: a function that refuses sequences
    of one step (the lesson's and fresh cases are all longer) passes, and its picture has no
    bar where it failed."""
    code = STEP.solution.replace("    B, T, H = hs.shape\n",
                                 "    B, T, H = hs.shape\n    assert T > 1, 'too short'\n")
    assert code != STEP.solution
    result = engine.check(STEP.id, code)
    assert result.passed, result.checks
    lesson = _panels(result)["lesson"]
    T = len(lesson["yours"])
    assert lesson["yours"][T - 2] is None and None not in lesson["yours"][:T - 2]
    assert not lesson["wrong"][T - 2]
    assert "No bar of yours at t = " in _text(result_view(result, None))


def test_a_function_that_never_ends_on_short_sequences_passes_without_those_bars(engine):
    code = STEP.solution.replace("    B, T, H = hs.shape\n",
                                 "    B, T, H = hs.shape\n    while T < 2:\n        pass\n")
    result = engine.check(STEP.id, code)  # the fresh cases have two steps or more
    assert result.passed and result.error is None
    lesson = _panels(result)["lesson"]
    assert lesson["yours"][-2] is None


def test_the_tui_and_the_notebook_draw_every_panel(right):
    text = _text(result_view(right, None))
    assert "the size of dh_t at each time step t" in text
    for demo in DEMOS:
        assert f"{demo}:" in text
    assert right.figure["about"].split()[0] in text
    bundles = heatmap_bundles(right)
    pictures = [b for b in bundles if "dh_t" in b["text/plain"]]
    assert len(pictures) == 1 + len(DEMOS)
    for bundle in pictures:
        assert "<figcaption" in bundle["text/html"] and bundle["image/png"]
    assert "log scale" in pictures[1]["text/plain"]  # the shut gate spans many powers of ten


def test_a_picture_needs_its_time_axis_and_a_real_carry(tmp_path):
    import shutil

    folder = tmp_path / "lstm"
    shutil.copytree(LSTM, folder)
    exercise = folder / "02_through_time.toml"
    text = exercise.read_text()
    exercise.write_text(text.replace('carry = "dh0"', 'carry = "dh"'))
    with pytest.raises(PackError, match="'carry' names dh, which is not one of the call's"):
        load_pack(folder)
    exercise.write_text(text.replace('time = "dxs[:, t]"', ""))
    with pytest.raises(PackError, match=r"a \[steps.picture\] needs the step's 'time'"):
        load_pack(folder)


# -- during training ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(engine):
    from tutor.training.run import Trainer

    trainer = Trainer(engine, {"steps": 60, "gradcheck_steps": 2}, lambda _p: None,
                      threading.Event())
    return trainer.execute()


def test_a_run_draws_dh_t_through_the_run_beside_autograds(run):
    assert run.status.value == "finished"
    steps = [p["step"] for p in run.pictures]
    assert steps[0] == 2 and steps[-1] == 60 and steps == sorted(set(steps))
    assert len(steps) >= 8
    for snap in run.pictures:
        panel = snap["panel"]
        assert panel["case"] == "8 longest validation names" and not any(panel["wrong"])
        assert panel["yours"] == pytest.approx(panel["autograd"], rel=1e-3)
    assert len({len(p["panel"]["yours"]) for p in run.pictures}) == 1  # the same batch
    assert run.pictures[0]["panel"]["autograd"] != run.pictures[-1]["panel"]["autograd"]


def test_the_run_shows_its_pictures_in_every_front_end(run):
    text = format_run(run)
    assert "|dh_t| on the 8 longest validation names" in text
    assert f"yours matches autograd's at every time step, in all {len(run.pictures)}" in text
    images = [b for b in run_bundles(run) if "dh_t at step" in b["text/plain"]]
    assert len(images) == 2
    drawn = _text(run_picture(run.pictures[-1], run.pictures[0]))
    assert "dh_t at training step 60" in drawn and "At training step 2 it ran from" in drawn
    # the run's steps and the names' time steps are told apart
    assert "at each time step t of the 8 longest validation names" in drawn


def test_a_pack_without_a_picture_draws_none():
    from tutor.training.picture import RunPicture

    assert RunPicture.of(PACK, "", "dxs = lstm_backward(a)") is None
    # the driver does not call the function with plain names: nothing to read its inputs from
    assert RunPicture.of(PACK, STEP.id, "out = lstm_backward(*args)") is None
    makemore = load_pack(LSTM.parent / "makemore")
    from tutor.training.plan import TrainingSettings

    assert TrainingSettings.from_pack(makemore).picture == ""


def test_drawing_changes_nothing_in_the_run(engine, run, monkeypatch):
    """The same run without its pictures: the same losses at every step, the same results."""
    from tutor.training import run as training_run
    from tutor.training.run import Trainer

    monkeypatch.setattr(training_run.RunPicture, "of", classmethod(lambda *_a: None))
    plain = Trainer(engine, {"steps": 60, "gradcheck_steps": 2}, lambda _p: None,
                    threading.Event()).execute()
    assert plain.pictures == []
    assert plain.history.log10_loss == run.history.log10_loss
    assert (plain.train_loss, plain.val_loss, plain.samples) == \
        (run.train_loss, run.val_loss, run.samples)


def test_a_broken_run_says_where_its_carried_gradient_parts_from_autograds(run):
    from tutor.session.controller import BrokenComparison
    from tutor.session.report import steps_text
    from tutor.session.runtext import format_comparison
    from tutor.values.runs import BrokenStep, TrainingRun

    assert steps_text([0, 1, 2, 3, 5, 7, 8]) == "t = 0 to 3, 5, 7, 8"
    plain = run.to_dict()
    last = run.pictures[-1]
    wrong = {**last, "panel": {**last["panel"], "wrong": [True] * 5 + [False] * (
        len(last["panel"]["wrong"]) - 5)}}
    broken = TrainingRun.from_dict({**plain, "pictures": [wrong]})
    step = BrokenStep(STEP.id, 3, "mistake 3 of 7", "the carried dc is dropped", "code")
    text = format_comparison(BrokenComparison(step, run, broken, fresh=True))
    assert (f"the broken run's dh_t, at training step {last['step']}, differs from autograd's "
            "at t = 0 to 4 of") in text.replace("\n  ", " ")
    same = format_comparison(BrokenComparison(step, run, run, fresh=True))
    assert "matches autograd's at every time step" in same


@pytest.mark.slow
def test_a_picture_whose_code_fails_leaves_the_check_alone_and_pack_check_says_why(tmp_path):
    import shutil

    from tutor.core.engine import Engine
    from tutor.evaluator.packcheck import check_pack

    folder = tmp_path / "lstm"
    shutil.copytree(LSTM, folder)
    exercise = folder / "02_through_time.toml"
    exercise.write_text(exercise.read_text().replace(
        "h0, c0 = hs[:, t], cs[:, t]\n", "h0, c0 = hs[:, t], cells[:, t]\n", 1))
    engine = Engine(Settings(device="cpu", pack=str(folder)))
    result = engine.check(STEP.id, STEP.solution)
    assert result.passed and result.figure["panels"] == []
    assert any("the picture through time could not be drawn" in n and "cells" in n
               for n in result.notes)
    said = []
    problems = check_pack(folder, Settings(device="cpu"), progress=said.append, families=False)
    assert any("the picture has 0 panels" in str(p) and "cells" in str(p) for p in problems)


def test_the_command_line_gives_each_panel_in_words(engine, right):
    from tutor.session.report import format_result

    text = format_result(right, width=100)
    assert "|dh_t| at the first and the last time step" in text
    for case in ["lesson", *DEMOS]:
        assert any(line.strip().startswith(case) for line in text.splitlines()), case
    wrong = format_result(engine.check(STEP.id, _mistake("The cell state's gradient is not")),
                          width=100)
    lesson = next(line for line in wrong.splitlines() if line.strip().startswith("lesson "))
    assert "differs at t = 0 to " in lesson
