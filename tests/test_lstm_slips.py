"""A slip named once is named everywhere: the LSTM lesson's wrong answers of
tests/lstm_slips_tune.py must each be refused with a diagnosis that names the slip, in a line
step, a fused step, `lstm_step_backward` and inside the loop of `lstm_backward` alike (where the
loop is first told where it goes wrong, then what the numbers match there); every answer of
tests/lstm_slips_holdout.py must be refused without an internal error; the same code gets the
same words every time; and a training run names a cause that is true of the code.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from lstm_slips_holdout import BASES
from lstm_slips_holdout import WRONG as HOLDOUT
from lstm_slips_tune import WRONG as TUNE

from tutor.config import Settings
from tutor.pack.model import load_pack

LSTM = Path(__file__).resolve().parent.parent / "exercises" / "lstm"
PACK = load_pack(LSTM)


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    isolation = os.environ.get("BACKPROP_TUTOR_ISOLATION") or "auto"
    return Engine(Settings(device="cpu", pack=str(LSTM), isolation=isolation))


def _squash(text: str) -> str:
    return "".join(text.split())


def _said(result: dict, step_id: str, tensor: str | None) -> str:
    """What the check says of the graded tensor: its diagnosis where its row is refused, else
    (right on the lesson's case, wrong on fresh data) the fresh data's verdict."""
    name = tensor or PACK.step(step_id).checks[0]
    check = next(c for c in result["checks"] if c["tensor"] == name)
    if check["verdict"] in ("wrong", "shape"):
        assert check["diagnosis"] is not None, check["message"]
        assert check["diagnosis"]["kind"] in {"shape", "sign", "scale", "transpose", "partial",
                                              "known_mistake", "derived", "nan"}
        return check["diagnosis"]["message"]
    assert result["heldout"] and result["heldout"]["passed"] is False, result["heldout"]
    return result["heldout"]["message"]


@pytest.mark.parametrize("step_id, tensor, code, words",
                         [pytest.param(*case, id=name) for name, case in TUNE.items()])
def test_a_slip_is_refused_and_named(engine, step_id, tensor, code, words):
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]
    message = _said(result, step_id, tensor)
    for word in words:
        assert word in message, (word, message)
    # A diagnosis names the slip; it does not hand over the step's solution.
    assert _squash(PACK.step(step_id).solution) not in _squash(message)


@pytest.mark.parametrize("step_id, tensor, code, words",
                         [pytest.param(*case, id=name) for name, case in HOLDOUT.items()])
def test_a_held_out_slip_is_refused(engine, step_id, tensor, code, words):
    # The held-out half is measured, never tuned on: only the verdict is held here.
    result = engine.check(step_id, code.lstrip("\n")).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]


@pytest.mark.parametrize("name", sorted(BASES))
def test_the_held_out_styles_are_right_before_their_slips(engine, name):
    result = engine.check("bptt/lstm_backward", BASES[name].lstrip("\n")).to_dict()
    assert result["error"] is None and result["passed"], result


# One of each way a slip is named: a rewrite inside the loop, a line step's rewrite, the
# learner's own code changed, a shape, a count typed in, a start state of zeros.
SAME_TWICE = ["loop-tanh-slope-at-c_prev", "line-do-times-sigmoid-slope",
              "loop-input-gate-pre-activation", "step-fn-bias-summed-over-the-gates",
              "logits-count-typed-in", "loop-zeros-for-c0"]


@pytest.mark.parametrize("name", SAME_TWICE)
def test_the_same_code_gets_the_same_words_twice(engine, name):
    step_id, tensor, code, _ = TUNE[name]
    first = engine.check(step_id, code.lstrip("\n")).to_dict()
    again = engine.check(step_id, code.lstrip("\n")).to_dict()
    assert _said(first, step_id, tensor) == _said(again, step_id, tensor)
    assert [c["message"] for c in first["checks"]] == [c["message"] for c in again["checks"]]


_ANOTHER_PROCESS = """
import sys, json
sys.path.insert(0, {tests!r})
from lstm_slips_tune import WRONG
from tutor.config import Settings
from tutor.core.engine import Engine
engine = Engine(Settings(device="cpu", pack={pack!r}))
out = {{}}
for name in {names!r}:
    step_id, tensor, code, _ = WRONG[name]
    result = engine.check(step_id, code.lstrip("\\n")).to_dict()
    out[name] = [c["message"] for c in result["checks"]]
engine.close()
print(json.dumps(out))
"""


@pytest.mark.slow
def test_the_words_do_not_depend_on_the_process():
    # Set and dict orders of strings change from one process to the next: no diagnosis may
    # hang on them.
    names = ["loop-dao-times-gate", "line-dh_prev-plus-dh"]
    script = _ANOTHER_PROCESS.format(tests=str(Path(__file__).parent), pack=str(LSTM),
                                     names=names)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300, check=True
                           ).stdout.strip().splitlines()[-1] for seed in ("1", "2")]
    assert runs[0] == runs[1]


# --- a training run: the cause it names is where the code writes it ------------------------

def test_a_functions_own_names_are_not_the_steps_gradients():
    from tutor.training.run import Gradients

    code = ("def back(dy, x):\n"
            "    dx = dy * 2\n"
            "    dW = x.T @ dy\n"
            "    return dx, dW\n"
            "dlogits = logits - 1\n"
            "dx, dW = back(dlogits, x)\n"
            "for g in (dx, dW):\n"
            "    pass\n"
            "dW = dW * 0.5\n")
    g = Gradients.of(code)
    assert g.line["dx"] == 6 and g.line["dW"] == 6  # the call, not the `def`
    assert g.lines["dW"] == [6, 9]
    assert g.made_by["dW"] == "back"
    assert g.where("dW") == "lines 6 and 9"


def test_a_tie_of_causes_is_broken_the_same_way_every_time():
    from tutor.training.run import Gradients

    g = Gradients.of("da = x\ndb = y\ndc = da + db\n")
    g.line["db"] = g.line["da"]  # two causes on one line
    assert g.first_cause("dc", {"da", "db", "dc"}) == "da"


def test_gradients_scaled_together_at_the_end_are_named_so():
    from tutor.core.engine import Engine
    from tutor.training import run_training, training_code

    code = training_code(PACK) + (
        "norm = torch.sqrt(sum((g ** 2).sum() for g in (dC, dWx, dWh, db, dWy, dby)))\n"
        "dC, dWx, dWh, db, dWy, dby = (g * (0.5 / norm) for g in (dC, dWx, dWh, db, dWy, dby))\n")
    last = len(code.splitlines())
    engine = Engine(Settings(device="cpu", pack=str(LSTM)))
    try:
        run = run_training(engine, {"code": code, "steps": 2, "gradcheck_steps": 1},
                           lambda p: None, threading.Event())
    finally:
        engine.close()
    failure = run["gradcheck"]["failure"]
    assert failure["line"] == last
    message = failure["message"]
    assert "scaled together" in message and f"line {last}" in message
    assert "local derivative" not in message


def test_a_slip_inside_the_function_points_into_it():
    from tutor.core.engine import Engine
    from tutor.training import run_training, training_code

    code = training_code(PACK).replace("dc_next = dc * f", "dc_next = dc", 1)
    call = next(n.lineno for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name)
                and n.value.func.id == "lstm_backward")
    engine = Engine(Settings(device="cpu", pack=str(LSTM)))
    try:
        run = run_training(engine, {"code": code, "steps": 2, "gradcheck_steps": 1},
                           lambda p: None, threading.Event())
    finally:
        engine.close()
    failure = run["gradcheck"]["failure"]
    assert failure["line"] == call  # the line that calls it, not its `def`
    assert "`lstm_backward`" in failure["message"]
