"""The lstm pack (exercises/lstm): backprop through time in an LSTM reading names.

Every reference solution must pass, every catalogued mistake must be recognised as itself, the
time-step exercise must keep the two directions a recurrent gradient comes from, the function
steps must meet sequences of other lengths, `pack check` must be clean, and a short training run
on the reference must learn. Nothing in tutor/ knows this network: it is data.
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
    assert_passed,
    assert_reference_passes,
    assert_step_content,
    mistake_cases,
    reference_cases,
)

from tutor.config import Settings
from tutor.pack.kinds import Function
from tutor.pack.model import find_pack, load_pack

ROOT = Path(__file__).resolve().parent.parent
LSTM = ROOT / "exercises" / "lstm"
PACK = load_pack(LSTM)

REFERENCE_CASES = reference_cases(PACK)
MISTAKE_CASES = mistake_cases(PACK)

# Other right answers, as learners write them.
CORRECT = {
    "step/logits": """
p = F.softmax(logits, dim=2)
p[Yb >= 0] -= F.one_hot(Yb[Yb >= 0], vocab_size).float()
p[Yb < 0] = 0
dlogits = p / (Yb >= 0).sum()
""",
    "step/c": """
dc_prev, df = f * dc, c_prev * dc
di, dg = g * dc, i * dc
""",
    "step/gates": """
dai = di * torch.sigmoid(ai) * (1 - torch.sigmoid(ai))
daf = df * f * (1 - f)
dao = do * (o - o**2)
""",
    "bptt/lstm_backward": '''
def lstm_backward(dhs, xs, h0, c0, hs, cs, gates, Wx, Wh):
    T = xs.shape[1]
    H = h0.shape[1]
    h_prevs = torch.cat([h0[:, None], hs[:, :-1]], 1)
    c_prevs = torch.cat([c0[:, None], cs[:, :-1]], 1)
    difgos = []
    dh = torch.zeros_like(h0)
    dc = torch.zeros_like(c0)
    for s in range(T - 1, -1, -1):
        i, f, g, o = (gates[:, s, k * H:(k + 1) * H] for k in range(4))
        dh = dh + dhs[:, s]
        dc = dc + dh * o * (1 - torch.tanh(cs[:, s]) ** 2)
        difgo = torch.cat([dc * g * i * (1 - i), dc * c_prevs[:, s] * f * (1 - f),
                           dc * i * (1 - g * g), dh * torch.tanh(cs[:, s]) * o * (1 - o)], 1)
        difgos.insert(0, difgo)
        dh = difgo @ Wh.T
        dc = dc * f
    d = torch.stack(difgos, 1)
    dWx = torch.einsum("bti,btj->ij", xs, d)
    dWh = torch.einsum("bti,btj->ij", h_prevs, d)
    return d @ Wx.T, dh, dc, dWx, dWh, d.sum((0, 1))
''',
}


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu", pack=str(LSTM)))


def test_the_pack_is_installed_by_id():
    assert find_pack("lstm") == LSTM
    assert PACK.id == "lstm" and PACK.data_file is not None and PACK.data_file.is_file()


def test_the_splits_are_makemores(engine):
    """The same names in the same three splits as the MLP lesson, each name one padded row."""
    mlp = load_pack(find_pack("makemore"))
    from tutor.core.network import Dataset

    ours, theirs = engine.network.dataset.splits, Dataset.build(mlp).splits
    for split in ("train", "val", "test"):
        X, Y = ours[split]
        # one row per name here, one row per character (and closing ".") there
        assert int((Y >= 0).sum()) == theirs[split][1].shape[0]
        assert X.shape[0] == int((theirs[split][1] == 0).sum())
    assert ours["vocab_size"] == 27


def test_a_batch_is_as_long_as_its_longest_name(engine):
    main = engine.network.main
    Yb = main.values["Yb"]
    assert Yb.shape[1] == int((Yb >= 0).sum(1).max())
    assert main.values["mask"].sum() == (Yb >= 0).sum()
    assert engine.network.heldout.values["Yb"].shape[0] == 17


def test_the_sizes_are_in_scope_by_their_names(engine):
    code = "print(vocab_size, n_embd, n_hidden, t, n, tuple(h.shape), tuple(ifgo.shape))"
    result = engine.check("step/logits", code).to_dict()
    assert result["stdout"].strip() == "27 10 32 3 32 (32, 32) (32, 128)"


def test_the_steps_around_t_read_as_one_call_each(engine):
    # The steps before and after t are the setup's run_lstm, called from the forward pass;
    # what they hand back is read by name, and each of their lines reads at a glance.
    around = ["before", "hs_before", "h_prev", "c_prev", "after", "hs_after"]
    assert all(len(PACK.line_for(name).source) <= 64 for name in around)
    assert [line.target for line in PACK.forward_lines if "run_lstm" in line.operands] == [
        "before", "after"]
    assert [PACK.line_for(name).source.split(" = ")[1]
            for name in ("hs_before", "h_prev", "c_prev", "hs_after")] == [
        "before.hs", "before.h", "before.c", "after.hs"]
    # The forward panel shows what such a line holds, by its names.
    shown = {line["target"]: line["annotation"] for line in engine.network.main.lines}
    assert shown["before"].startswith("(hs [32, 3, 32], h [32, 32], c [32, 32]) ← ")
    assert shown["after"].startswith(f"(hs [32, {engine.network.main.shapes['hs'][1] - 4}, 32], ")
    # The learner's namespace holds tensors only: the helper is the pack's, not theirs to call.
    assert "run_lstm" not in engine.network.main.namespace()


@pytest.mark.parametrize("step_id", REFERENCE_CASES)
def test_reference_solution_passes(engine, step_id):
    assert_reference_passes(engine, PACK, step_id, 17)


@pytest.mark.parametrize("step_id", list(CORRECT))
def test_another_correct_form_passes(engine, step_id):
    assert_passed(engine.check(step_id, CORRECT[step_id].lstrip("\n")).to_dict())


@pytest.mark.parametrize("step_id, index", MISTAKE_CASES)
def test_mistake_is_recognised_as_itself(engine, step_id, index):
    assert_mistake_recognised(engine, PACK, step_id, index)


def test_the_traps_of_bptt_are_catalogued():
    """The mistakes the lesson is about, each somewhere in the catalogue."""
    codes = {s.id: " ".join(m.code for m in s.mistakes) for s in PACK.gradient_steps}
    bptt = codes["bptt/lstm_backward"]
    assert "h_prev = hs[:, s]\n" in bptt                  # off by one in time
    assert "dh = dhs[:, s]\n" in bptt                     # the carried dh dropped
    assert "dc = dh * o" in bptt                          # the carried dc dropped
    assert "dWx = xs[:, s].T @ difgo" in bptt             # one step's share of the weights kept
    assert "dc_next = dc.clone()" in bptt                 # the forget gate forgotten
    assert "for s in range(T):" in bptt                   # the loop the wrong way in time
    assert "dc = dh * o" in codes["step/h"]               # = instead of += on the cell
    assert "dh = dstate[0].clone()" in codes["step/state"]  # the output's branch of h lost


@pytest.mark.parametrize(("step_id", "code", "slips"), [
    ("step/gates", "dai = di * ai * (1 - ai)\ndaf = df * af * (1 - af)\ndao = do * ao * (1 - ao)",
     {"ai": "`i`, not `ai`", "af": "`f`, not `af`", "ao": "`o`, not `ao`"}),
    ("step/gates", "dai = di * (1 - i**2)\ndaf = df * (1 - f**2)\ndao = do * (1 - o**2)",
     {"ai": "derivative of a tanh", "af": "forget gate `f` is a sigmoid",
      "ao": "output gate `o` is a sigmoid"}),
    ("step/g", "dag = dg * (1 - ag**2)", {"ag": "`g`, not `ag`"}),
])
def test_a_slip_made_on_every_gate_is_named_on_each(engine, step_id, code, slips):
    """The derivative written with each gate's pre-activation (or a tanh's derivative for each
    sigmoid) is one slip repeated: every gate's row says what it is, not just the first."""
    checks = {c["tensor"]: c for c in engine.check(step_id, code).to_dict()["checks"]}
    for tensor, words in slips.items():
        diagnosis = checks[tensor]["diagnosis"]
        assert diagnosis is not None, checks[tensor]["message"]
        assert diagnosis["kind"] == "known_mistake" and words in diagnosis["message"]


def test_a_gradient_from_the_future_is_needed_at_step_t(engine):
    """The step's h and c are read by the steps after t: without that branch dh is wrong, which
    is what makes the exercise about time and not about one feed-forward cell."""
    code = "dh += 0 * dstate[0]\ndc = dstate[1].clone()\n"
    result = engine.check("step/state", code).to_dict()
    assert not result["passed"]
    assert next(c for c in result["checks"] if c["tensor"] == "h")["verdict"] == "wrong"


def test_a_hard_coded_batch_size_fails_the_fresh_batch(engine):
    code = ("dlogits = F.softmax(logits, -1) - F.one_hot(Yb.clamp(min=0), vocab_size)\n"
            "dlogits = dlogits * mask.view(32, -1, 1) / mask.sum()\n")
    result = engine.check("step/logits", code).to_dict()
    assert not result["passed"]
    assert result["heldout"]["passed"] is False and result["heldout"]["batch_size"] == 17


# --- function steps ---------------------------------------------------------------------------

FUNCTION_STEPS = [s for s in PACK.steps if isinstance(s.kind, Function)]

HARD_CODED = [
    ("bptt/lstm_backward", "B, T, H = hs.shape", "B, T, H = hs.shape[0], hs.shape[1], n_hidden"),
    ("fused/lstm_step_backward", "H = h_prev.shape[1]", "H = n_hidden"),
]


@pytest.mark.parametrize("step_id, old, new", [pytest.param(*h, id=f"{h[0]}:{h[2]}")
                                               for h in HARD_CODED])
def test_a_size_read_off_the_lesson_fails_the_fresh_sizes(engine, step_id, old, new):
    solution = PACK.step(step_id).solution
    assert old in solution
    result = engine.check(step_id, solution.replace(old, new, 1)).to_dict()
    assert result["passed"] is False
    assert result["heldout"]["passed"] is False, result["heldout"]


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in FUNCTION_STEPS])
def test_every_function_step_has_fresh_sizes_unlike_the_lesson(engine, step):
    lesson, *fresh = engine.function_cases(step)
    assert lesson.sizes and fresh
    for case in fresh:
        assert {k for k in case.sizes if case.sizes[k] != lesson.sizes.get(k)}
    if step.id == "bptt/lstm_backward":
        # sequences of other lengths: the loop must not know T
        assert all(case.sizes["T"] != lesson.sizes["T"] for case in fresh)


def test_the_step_function_serves_the_loop(engine):
    """lstm_backward written with the learner's lstm_step_backward passes: exercise 3's function
    is the body of exercise 2's loop."""
    step_fn = PACK.step("fused/lstm_step_backward").solution
    loop = step_fn + '''
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
    assert_passed(engine.check("bptt/lstm_backward", loop).to_dict())


# --- content ----------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in PACK.steps])
def test_step_content_rules(step):
    assert_step_content(PACK, step)


# --- the pack as a whole ---------------------------------------------------------------------


def _cli(*args: str, home: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_pack_check_is_clean(tmp_path):
    out = _cli("pack", "check", str(LSTM), home=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_the_command_line_lists_the_lesson(tmp_path):
    listed = _cli("--pack", "lstm", "list", home=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "bptt/lstm_backward" in listed.stdout and "step/state" in listed.stdout


def test_training_on_the_reference_bptt_learns(engine):
    from tutor.training import TrainingSettings, run_training

    s = TrainingSettings.from_pack(PACK)
    assert s.assembled and s.clip_norm > 0
    updates: list[dict] = []
    result = run_training(engine, {"steps": 60, "gradcheck_steps": 3}, updates.append,
                          threading.Event())
    assert result["status"] == "finished", result["error"]
    # Its evaluation calibrates nothing, and phase 3 says only what it does.
    assert updates[-1]["phase"] == "results"
    assert updates[-1]["doing"] == ("the losses on the training and the validation split, "
                                    "then the samples")
    assert result["gradcheck"]["passed"]
    # Chance is log(27) = 3.30 per character; 60 clipped steps already get below it.
    assert result["val_loss"] < 0.95 * math.log(27), result["val_loss"]
    assert len(result["samples"]) == 20 and all(isinstance(x, str) for x in result["samples"])



def test_the_loops_through_time_get_no_challenge_to_remove_them():
    from tutor.training import python_loops, speed_notes, training_code

    # The reference's lstm_backward and the forward pass both loop over time, each pass
    # needing the one after or before: no tensor operation replaces such a loop.
    code = training_code(PACK)
    assert [loop["carried"] for loop in python_loops(code)] == [["dc_next", "dh_next"], ["c", "h"]]
    assert speed_notes(code) == []
    assert speed_notes(training_code(PACK, {"bptt/lstm_backward": CORRECT["bptt/lstm_backward"]}))\
        == []
    # A loop of the learner's that only gathers what the recurrence left still gets the note.
    gathered = CORRECT["bptt/lstm_backward"].replace(
        "    return d @ Wx.T,",
        "    dxs = torch.zeros_like(xs)\n    for s in range(T):\n"
        "        dxs[:, s] = d[:, s] @ Wx.T\n    return dxs,")
    (note,) = speed_notes(training_code(PACK, {"bptt/lstm_backward": gathered}))
    assert "dxs is computed in a Python for loop" in note and "Bonus challenge" in note

def test_clipping_bounds_the_update_and_leaves_the_gradients_alone():
    import torch

    from tutor.training.run import clipped

    seen: list = []
    grads = [torch.full((3,), 4.0), torch.full((4,), 3.0)]
    clipped(lambda g, i: seen.extend(g), 1.0)(grads, 0)
    total = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in seen]))
    assert abs(float(total) - 1.0) < 1e-4
    assert float(grads[0][0]) == 4.0   # the learner's tensors are not changed
    seen.clear()
    small = [torch.full((2,), 0.1)]
    clipped(lambda g, i: seen.extend(g), 1.0)(small, 0)
    assert torch.allclose(seen[0], small[0])
