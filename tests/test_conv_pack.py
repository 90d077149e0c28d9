"""The conv pack (exercises/conv): causal, dilated convolutions over a name, made with
`backprop-tutor pack new` from exercises/conv/forward.py and written over by hand.

Every reference solution passes with the line's rule followed, every catalogued mistake (the
hand-written ones on the convolutions included) is recognised as itself, the pack is what
forward.py makes (its forward pass, templates and references), `pack check` is clean, the lesson
is offered by the chooser, and a short training run on the reference learns.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pack_cases import (
    assert_mistake_recognised,
    assert_reference_passes,
    assert_step_content,
    mistake_cases,
    reference_cases,
)

from tutor.config import Settings
from tutor.pack.model import find_pack, installed_packs, load_pack

ROOT = Path(__file__).resolve().parent.parent
CONV = ROOT / "exercises" / "conv"
PACK = load_pack(CONV)


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cpu", pack=str(CONV)))
    yield engine
    engine.close()


def test_the_pack_is_installed_and_offered():
    from tutor.session.packchoice import offered_packs

    assert find_pack("conv") == CONV and "conv" in installed_packs()
    assert PACK.data_file is not None and PACK.data_file.name == "names.txt"
    assert "conv" in offered_packs(Settings(), environ={}, config=CONV / "no-config.toml")


@pytest.mark.parametrize("step_id", reference_cases(PACK))
def test_reference_solution_passes_with_the_rule_followed(engine, step_id):
    assert_reference_passes(engine, PACK, step_id, heldout_batch=17)
    result = engine.check(step_id, PACK.step(step_id).solution)
    for row in result.checks:
        assert row.rule is None or row.rule.value == "followed", row.note
        assert row.rule is not None or step_id == "conv/logits"


@pytest.mark.parametrize("step_id, index", mistake_cases(PACK))
def test_mistake_is_recognised_as_itself(engine, step_id, index):
    assert_mistake_recognised(engine, PACK, step_id, index)


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in PACK.steps])
def test_step_content_rules(step):
    assert_step_content(PACK, step)


def test_the_convolutions_gradients_look_forward_in_time(engine):
    """A causal convolution's input gradient comes from later outputs: the gradient arriving
    only at the last position reaches, in h2, that position and the one 4 back, no other."""
    code = """
dh2 = F.conv1d(F.pad(dh3pre, (0, 4)), w3.transpose(0, 1).flip(2), dilation=4)
dw3 = torch.einsum('bot,bitk->oik', dh3pre, F.pad(h2, (4, 0)).unfold(2, 5, 1)[..., ::4])
db3 = dh3pre.sum((0, 2))
print((dh2.abs().sum((0, 1)) > 0).int().tolist())
"""
    result = engine.check("conv/h2", code).to_dict()
    assert result["passed"]
    assert result["stdout"].strip() == "[0, 0, 0, 1, 0, 0, 0, 1]"


def test_another_correct_form_passes(engine):
    # the input gradient by the transposed convolution, the weight gradient tap by tap
    code = """
dh2 = F.conv_transpose1d(dh3pre, w3, dilation=4)[..., 4:]
p = F.pad(h2, (4, 0))
dw3 = torch.stack([torch.einsum('bot,bit->oi', dh3pre, p[:, :, 4 * k:4 * k + 8])
                   for k in range(2)], 2)
db3 = dh3pre.sum(0).sum(1)
"""
    result = engine.check("conv/h2", code).to_dict()
    assert result["passed"], result


def test_the_pack_is_what_its_forward_file_makes(tmp_path):
    """pack new on forward.py makes this pack's forward pass, steps, templates and references;
    only the words and some mistakes were written over."""
    from tutor.authoring.new import make

    made = make(CONV / "forward.py", tmp_path / "conv", pack_id="conv")
    assert made.todo == []
    fresh = load_pack(tmp_path / "conv")
    assert fresh.forward_code == PACK.forward_code
    assert fresh.setup_code == PACK.setup_code
    assert {k: v for k, v in fresh.lesson.items()} == PACK.lesson
    for ours, theirs in zip(PACK.steps, fresh.steps, strict=True):
        assert (ours.id, ours.lines, ours.checks, ours.partials) == \
            (theirs.id, theirs.lines, theirs.checks, theirs.partials)
        assert (ours.template, ours.solution) == (theirs.template, theirs.solution)


def _cli(*args: str, home: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.slow
def test_pack_check_is_clean(tmp_path):
    out = _cli("pack", "check", str(CONV), home=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_a_short_training_run_on_the_reference_learns(engine):
    from tutor.training import run_training

    result = run_training(engine, {"steps": 300, "gradcheck_steps": 5}, lambda _: None,
                          threading.Event())
    assert result["status"] == "finished", result["error"]
    assert result["gradcheck"]["passed"]
    # Chance is log(27) = 3.30 per character; 300 steps of the reference get well below it.
    assert result["val_loss"] < 0.8 * math.log(27), result["val_loss"]


@pytest.mark.slow
def test_train_reference_from_the_command_line(tmp_path):
    out = _cli("--pack", str(CONV), "train", "--reference", "--steps", "300", home=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "every gradient matches autograd" in out.stdout
    assert "makemore's MLP" in out.stdout


@pytest.mark.slow
def test_the_tutor_opens_the_lesson_and_checks_a_convolution(tmp_path):
    """The TUI, on the conv pack: the first step opens, a right answer passes and opens the
    next, where a catalogued mistake is named in the feedback."""
    import asyncio

    from pilot_lesson import check, feedback, wait_until

    from tutor.evaluator.client import Evaluator
    from tutor.ui.app import TutorApp

    settings = Settings(device="cpu", home=tmp_path / "home", pack=str(CONV))

    async def scenario(evaluator) -> None:
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: pilot.app.info is not None)
            await pilot.pause()
            assert app.lesson.step.id == "conv/logits"
            assert (await check(pilot, PACK.step("conv/logits").solution))["passed"]
            assert "✓ Correct" in feedback(app)
            assert app.lesson.goto_step("conv/last")
            await pilot.pause()
            mistake = PACK.step("conv/last").mistakes[0]
            result = await check(pilot, mistake.code)
            assert not result["passed"]
            # the feedback renders the Markdown of the message: its code marks are gone
            assert " ".join(mistake.message.replace("`", "").split())[:60] in feedback(app)

    with Evaluator(settings) as evaluator:
        asyncio.run(scenario(evaluator))
