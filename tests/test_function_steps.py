"""Function steps: a whole function, graded on the lesson's tensors and then at freshly drawn
sizes. tests/packs/fn holds two: a layernorm backward (returns a gradient) and a momentum update
(changes its arguments in place), and a training run assembled from them."""

import subprocess
import sys
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.model import PackError, load_pack

FN = Path(__file__).parent / "packs" / "fn"
PACK = load_pack(FN)
LN = "fn/layernorm_backward"
SGD = "fn/momentum_update"

HARD_CODED = '''
def layernorm_backward(dout, inp, rstd):
    C = 16  # the lesson's width, written in
    norm = (inp - inp.mean(1, keepdim=True)) * rstd
    return rstd / C * (C * dout - dout.sum(1, keepdim=True)
                       - norm * (dout * norm).sum(1, keepdim=True))
'''

GLOBAL_SIZE = HARD_CODED.replace("C = 16  # the lesson's width, written in", "C = n_hidden")


@pytest.fixture(scope="module")
def fn_engine():
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cpu", pack=str(FN)))
    yield engine
    engine.close()


def test_the_pack_reads_the_call():
    fn = PACK.step(LN).function
    assert fn.name == "layernorm_backward"
    assert fn.arguments == ("dout", "inp", "rstd")
    assert fn.outputs == ("dinp",)
    assert PACK.step(SGD).function.outputs == ()
    assert PACK.step(LN).graded_names == ("dinp",)


@pytest.mark.parametrize("step_id", [LN, SGD])
def test_the_reference_passes_on_the_lesson_and_on_fresh_sizes(fn_engine, step_id):
    result = fn_engine.check(step_id, PACK.step(step_id).solution).to_dict()
    assert result["passed"], result
    held = result["heldout"]
    assert held["passed"] and held["what"].startswith("fresh sizes (")


def test_the_fresh_cases_have_other_sizes_than_the_lesson(fn_engine):
    lesson, *fresh = fn_engine.function_cases(PACK.step(LN))
    assert lesson.sizes == {"N": 24, "C": 16}
    assert len(fresh) == 2
    assert all(case.sizes != lesson.sizes for case in fresh)
    # Seeded: the same sizes for every check of a session.
    again = [c.sizes for c in fn_engine.function_cases(PACK.step(LN))[1:]]
    assert again == [c.sizes for c in fresh]


@pytest.mark.parametrize("code", [HARD_CODED, GLOBAL_SIZE], ids=["literal", "lesson-size"])
def test_a_hard_coded_dimension_passes_the_lesson_and_fails_the_fresh_sizes(fn_engine, code):
    result = fn_engine.check(LN, code).to_dict()
    assert not result["passed"]
    assert result["checks"][0]["verdict"] in ("exact", "approximate")
    held = result["heldout"]
    assert held["passed"] is False
    assert "right on the lesson's tensors (N=24, C=16)" in held["message"]
    assert result["checks"][0]["diagnosis"]["kind"] == "heldout"


def test_a_catalogued_mistake_is_recognised_on_the_lesson_case(fn_engine):
    step = PACK.step(LN)
    check = fn_engine.check(LN, step.mistakes[0].code).to_dict()["checks"][0]
    assert check["grad"] == "dinp" and check["verdict"] == "wrong"
    assert check["diagnosis"]["message"] == step.mistakes[0].message


def test_an_uncatalogued_scale_mistake_is_named(fn_engine):
    code = PACK.step(LN).solution.replace("return dinp", "return 2 * dinp")
    check = fn_engine.check(LN, code).to_dict()["checks"][0]
    assert check["diagnosis"]["kind"] == "scale"
    assert check["message"].startswith("dinp is 2 times")


def test_an_update_that_does_not_happen_in_place_is_explained(fn_engine):
    code = ("def momentum_update(param, grad, m, v, t, lr, beta):\n"
            "    m = beta * m + grad\n    param = param - lr * m\n")
    check = fn_engine.check(SGD, code).to_dict()["checks"][0]
    assert check["grad"] == "param"
    assert check["diagnosis"]["kind"] == "unchanged"
    assert "in place" in check["message"]


def test_a_changed_argument_is_noted(fn_engine):
    code = PACK.step(LN).solution.replace("    C = inp.shape[1]", "    C = inp.shape[1]\n"
                                          "    dout = dout.mul_(2.0) / 2")
    result = fn_engine.check(LN, code).to_dict()
    assert result["passed"]
    assert any("changed its argument dout in place" in n for n in result["notes"])


@pytest.mark.parametrize("code, words", [
    ("def layernorm_backward(dout, inp):\n    return dout\n",
     "takes 2 positional arguments but 3 were given"),
    ("x = 1\n", "does not define the function layernorm_backward"),
    ("def layernorm_backward(dout, inp, rstd):\n    return dout.nope()\n", "line 2"),
    ("def layernorm_backward(dout, inp, rstd):\n    return dout[:, :3] @ dout\n", "line 2"),
])
def test_calling_errors_are_told_in_the_learners_terms(fn_engine, code, words):
    result = fn_engine.check(LN, code).to_dict()
    assert not result["passed"]
    assert words in result["error"]["message"], result["error"]


def test_returning_the_wrong_number_of_values_is_explained(fn_engine):
    from dataclasses import replace

    from tutor.core.execution import CallError, _unpack

    spec = replace(fn_engine._spec(PACK.step(LN), "", {}), outputs=("dinp", "dother"))
    with pytest.raises(CallError, match="returned None"):
        _unpack(spec, None)
    with pytest.raises(CallError, match="returned 3 values"):
        _unpack(spec, (1, 2, 3))


def test_a_scratch_run_calls_the_function_on_the_lesson_case(fn_engine):
    result = fn_engine.scratch(LN, PACK.step(LN).solution + "print('hello')\n").to_dict()
    assert result["error"] is None
    assert result["defined"] == [{"name": "dinp", "what": "tensor [24, 16] float32"}]


def test_the_function_cannot_read_the_answers(fn_engine):
    code = ("def layernorm_backward(dout, inp, rstd):\n"
            "    return reference\n")
    result = fn_engine.check(LN, code).to_dict()
    assert not result["passed"]
    assert "NameError" in result["error"]["message"]


def test_pack_check_passes_and_finds_a_case_without_new_sizes(tmp_path):
    from tutor.evaluator.packcheck import check_pack

    assert check_pack(FN, Settings(device="cpu"), progress=lambda _: None) == []
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "pack.toml").write_text((FN / "pack.toml").read_text())
    (bad / "02_training.toml").write_text((FN / "02_training.toml").read_text())
    text = (FN / "01_functions.toml").read_text().replace(
        "N = int(torch.randint(3, 9, (1,), generator=g))\nC = int(torch.randint(5, 12, (1,), "
        "generator=g))", "N, C = 24, 16")
    (bad / "01_functions.toml").write_text(text)
    problems = [str(p) for p in check_pack(bad, Settings(device="cpu"),
                                           progress=lambda _: None)]
    assert any("has the lesson's own sizes" in p for p in problems), problems


def test_a_call_that_is_not_a_plain_call_is_a_pack_error(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "pack.toml").write_text((FN / "pack.toml").read_text())
    (bad / "02_training.toml").write_text((FN / "02_training.toml").read_text())
    text = (FN / "01_functions.toml").read_text().replace(
        'call = "dinp = layernorm_backward(dout, inp, rstd)"',
        'call = "dinp = layernorm_backward(dout, inp, rstd=rstd)"')
    (bad / "01_functions.toml").write_text(text)
    with pytest.raises(PackError, match="plain names"):
        load_pack(bad)


def test_the_cli_checks_a_function_step_through_the_worker(tmp_path):
    path = tmp_path / "answer.py"
    path.write_text(HARD_CODED)
    proc = subprocess.run(
        [sys.executable, "-m", "tutor", "--pack", str(FN), "check", LN, "--file", str(path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "right on the lesson's tensors" in proc.stdout
    path.write_text(PACK.step(LN).solution)
    proc = subprocess.run(
        [sys.executable, "-m", "tutor", "--pack", str(FN), "check", LN, "--file", str(path)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fresh sizes (" in proc.stdout


def test_training_assembles_the_functions_and_uses_the_learners_update(fn_engine):
    import threading

    from tutor.training import TrainingSettings, run_training, training_code

    s = TrainingSettings.from_pack(PACK)
    assert s.assembled and s.optimizer == "momentum_update"
    assert s.optimizer_args == {"beta": 0.9}
    code = training_code(PACK)
    assert "def layernorm_backward(" in code and "def momentum_update(" in code
    result = run_training(fn_engine, {"steps": 120, "gradcheck_steps": 5}, lambda _: None,
                          threading.Event())
    assert result["status"] == "finished", result["error"]
    assert result["gradcheck"]["passed"]
    assert result["val_loss"] < 0.8, result["val_loss"]  # chance is log(5) = 1.61
    # Without its decay the momentum runs away: the learner's update is what moves the weights.
    step = PACK.step(SGD)
    broken = code.replace(step.solution.strip(), step.mistakes[0].code.strip())
    assert broken != code
    other = run_training(fn_engine, {"steps": 120, "gradcheck_steps": 5, "code": broken},
                         lambda _: None, threading.Event())
    assert other["last_loss"] != result["last_loss"]


def test_a_failing_update_stops_the_run_with_its_line(fn_engine):
    import threading

    from tutor.training import run_training, training_code

    code = training_code(PACK).replace("    param -= lr * m", "    param -= lr * m.nope()")
    result = run_training(fn_engine, {"steps": 20, "gradcheck_steps": 2, "code": code},
                          lambda _: None, threading.Event())
    assert result["status"] == "error"
    assert "momentum_update" in result["error"]["message"]
    assert result["error"]["line"] is not None
