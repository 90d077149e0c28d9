"""Exercise 4: the training step's code, the three phases, cancel, devices and the `train` command.

Runs are short (a few hundred steps); the full 200 000-step run is checked by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tutor.pack.model import load_pack
from tutor.session.store import Store, record_run
from tutor.training import (
    TrainingSettings,
    backward_sections,
    python_loops,
    run_training,
    speed_notes,
    training_code,
)
from tutor.values.runs import TrainingRun

PACK = load_pack()
STEPS = 300
LOOP_DC = (
    "dC = torch.zeros_like(C)\n"
    "for k in range(Xb.shape[0]):\n"
    "    for j in range(Xb.shape[1]):\n"
    "        ix = Xb[k, j]\n"
    "        dC[ix] += demb[k, j]"
)


def train(engine, code: str | None = None, steps: int = STEPS, cancel=None, progress=None,
          **request) -> dict:
    request = {"code": code or training_code(PACK), "steps": steps, **request}
    return run_training(engine, request, progress or (lambda p: None),
                        cancel or threading.Event())


def with_change(old: str, new: str) -> str:
    code = training_code(PACK)
    assert old in code, old
    return code.replace(old, new)


# --- the code in the editor (no torch needed) ---------------------------------------------------


def test_code_is_assembled_from_accepted_code_with_references_for_the_rest():
    mine = "dhpreact = (1 - h**2) * dh  # mine"
    code = training_code(PACK, {"atomic/hpreact": mine})
    assert mine in code
    assert "(exercise 1, your code)" in code
    assert PACK.step("fused/cross_entropy").solution.strip() in code
    sections = backward_sections(PACK, {"atomic/hpreact": mine})
    assert [s.yours for s in sections if s.step.id == "atomic/hpreact"] == [True]
    assert not any(s.yours for s in backward_sections(PACK, None))


def test_forward_keeps_only_the_lines_the_backward_pass_reads():
    code = training_code(PACK)
    assert "loss = F.cross_entropy(logits, Yb)" in code
    assert "counts" not in code and "logprobs" not in code  # dlogits is fused
    assert "bnvar_inv = (bnvar + 1e-5)**-0.5" in code
    # A backward pass that still reads `probs` gets the lines that compute it.
    code = training_code(PACK, {"fused/cross_entropy": "dlogits = probs.clone()\n"
                                "dlogits[range(n), Yb] -= 1\ndlogits /= n"})
    assert "probs = counts * counts_sum_inv" in code


def test_a_python_loop_for_dC_is_noticed_and_not_rewritten():
    code = training_code(PACK, {"atomic/C": LOOP_DC})
    assert LOOP_DC in code
    (loop,) = python_loops(code)
    assert loop["gradients"] == ["dC"]
    (note,) = speed_notes(code)
    assert "dC" in note and "Bonus challenge" in note
    assert speed_notes(training_code(PACK)) == []



RECURRENCE = """
def run(xs, h, W):
    out = []
    for s in range(xs.shape[1]):
        h = torch.tanh(xs[:, s] + h @ W)
        out.append(h)
    return out
"""


@pytest.mark.parametrize("code, carried", [
    (RECURRENCE, ["h"]),
    # read, then bound later in the same pass: the next pass reads this one's value
    ("for s in range(T):\n    dh = dhs[:, s] + dh_next\n    dh_next = dh @ W.T", ["dh_next"]),
    # an unpacked target and a recurrence in an inner loop are recurrences too
    ("for s in range(T):\n    a, h = f(h)", ["h"]),
    ("for k in range(n):\n    for s in range(T):\n        h = g(h)", ["h"]),
    # bound in one branch only, so the read after it may see the pass before
    ("for s in range(T):\n    if s:\n        h = g(s)\n    y = h", ["h"]),
    # bound before it is read in every pass: nothing crosses to the next one
    ("for s in range(T):\n    h = hs[:, s]\n    y = h @ W", []),
    ("for s in range(T):\n    if s:\n        h = g(s)\n    else:\n        h = h0\n    y = h",
     []),
    # accumulators sum their passes in any order
    ("for s in range(T):\n    dW += xs[:, s].T @ d[:, s]\n    dC[Xb[s]] += demb[s]", []),
    (LOOP_DC, []),
])
def test_a_loop_whose_passes_need_each_other_is_a_recurrence(code, carried):
    (loop,) = python_loops(code)
    assert loop["carried"] == carried
    notes = speed_notes(code)
    assert (notes == []) if carried else ("Bonus challenge" in notes[0])

def test_settings_follow_the_lecture():
    s = TrainingSettings.from_pack(PACK)
    assert (s.n_embd, s.n_hidden, s.batch_size, s.steps) == (10, 200, 32, 200_000)
    assert (s.lr_at(99_999), s.lr_at(100_000)) == (0.1, 0.01)
    assert s.gradcheck_steps == 100
    assert TrainingSettings.from_pack(PACK, steps=50).gradcheck_steps == 50


# --- the three phases ---------------------------------------------------------------------------


def test_reference_run_matches_autograd_then_lowers_the_loss(engine):
    updates: list[dict] = []
    r = train(engine, progress=updates.append)
    assert r["status"] == "finished", r["error"]
    assert r["steps_done"] == STEPS
    assert r["settings"]["parameters_count"] == 12_297
    gc = r["gradcheck"]
    assert gc["passed"] and gc["steps"] == 100
    assert [c["tensor"] for c in gc["checks"]] == ["C", "W1", "b1", "W2", "b2", "bngain", "bnbias"]
    for c in gc["checks"]:
        assert c["verdict"] in ("exact", "approximate") and c["maxdiff"] < 1e-6
    curve = r["history"]["log10_loss"]
    assert len(curve) == STEPS  # one point per step for a run this short
    assert sum(curve[-50:]) / 50 < sum(curve[:10]) / 10 - 0.05
    assert r["train_loss"] < 3.0 and r["val_loss"] < 3.0  # log(27) = 3.3 at the start
    assert len(r["samples"]) == 20 and all(isinstance(s, str) for s in r["samples"])
    assert r["steps_per_s"] > 0 and r["wall_s"] > 0
    phases = [u["phase"] for u in updates]
    assert phases[0] == "gradcheck" and "train" in phases and phases[-1] == "results"
    # makemore's [training.eval] defines calibrate (batchnorm's statistics), so phase 3 says so
    assert updates[-1]["doing"] == ("calibrating the network over the training set, then the "
                                    "losses and the samples")
    json.dumps(r)  # plain data only


def test_runs_are_reproducible(engine):
    a, b = train(engine, steps=150), train(engine, steps=150)
    assert a["history"] == b["history"] and a["samples"] == b["samples"]


@pytest.mark.parametrize(
    ("old", "new", "tensor", "cause"),
    [
        ("db2 = dlogits.sum(0)", "db2 = 2 * dlogits.sum(0)", "b2", "db2"),
        ("dbnbias = dhpreact.sum(0, keepdim=True)", "dbnbias = -dhpreact.sum(0, keepdim=True)",
         "bnbias", "dbnbias"),
        ("dW1 = embcat.T @ dhprebn", "dW1 = (embcat.T @ dhprebn).T", "W1", "dW1"),
        # A wrong intermediate: every parameter below it is wrong, and it is named as the cause.
        ("dhpreact = (1.0 - h**2) * dh", "dhpreact = (1.0 - h) * dh", "bngain", "dhpreact"),
    ],
)
def test_a_wrong_gradient_is_stopped_in_phase_1(engine, old, new, tensor, cause):
    code = with_change(old, new)
    r = train(engine, code)
    assert r["status"] == "diverged"
    assert r["steps_done"] == 0 and r["train_loss"] is None
    failure = r["gradcheck"]["failure"]
    assert failure["tensor"] == tensor and failure["step"] == 0
    assert failure["cause"] == cause
    assert code.splitlines()[failure["line"] - 1].lstrip().startswith(cause)
    assert f"d{tensor}" in failure["message"]
    assert not r["gradcheck"]["passed"]


def test_a_missing_gradient_is_named(engine):
    r = train(engine, with_change("db1 = dhprebn.sum(0)", "pass"))
    assert r["status"] == "diverged"
    assert r["gradcheck"]["failure"]["tensor"] == "b1"
    assert "does not define db1" in r["gradcheck"]["failure"]["message"]


def test_a_python_loop_trains_as_written_with_a_note(engine):
    code = with_change("dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), "
                       "demb.view(-1, C.shape[1]))", LOOP_DC)
    r = train(engine, code, steps=150)
    assert r["status"] == "finished" and r["gradcheck"]["passed"]
    assert any("dC" in n and "loop" in n for n in r["notes"])


def test_runtime_errors_name_the_line(engine):
    code = with_change("dh = dlogits @ W2.T", "dh = dlogits @ W2")
    r = train(engine, code)
    assert r["status"] == "error"
    assert r["error"]["kind"] == "runtime"
    assert code.splitlines()[r["error"]["line"] - 1] == "dh = dlogits @ W2"


def test_refused_code_does_not_run(engine):
    r = train(engine, training_code(PACK) + "loss.backward()\n")
    assert r["status"] == "error" and r["error"]["kind"] == "forbidden"
    assert r["steps_done"] == 0


def test_a_step_that_never_ends_is_stopped(engine, monkeypatch):
    monkeypatch.setattr(engine, "settings", replace(engine.settings, timeout=0.3))
    r = train(engine, with_change("dh = dlogits @ W2.T", "dh = dlogits @ W2.T\nwhile True:\n"
                                  "    pass"))
    assert r["status"] == "error" and r["error"]["kind"] == "timeout"


def test_a_loss_that_blows_up_stops_the_run(engine):
    # Unchecked (no phase 1), a gradient divided by zero poisons W2 on the first update.
    code = with_change("dW2 = h.T @ dlogits", "dW2 = h.T @ dlogits / 0.0")
    r = train(engine, code, gradcheck_steps=0)
    assert r["status"] == "error" and r["error"]["kind"] == "nan"
    assert r["step"] is not None and r["step"] < STEPS


def test_cancel_keeps_the_partial_run(engine):
    cancel = threading.Event()

    def progress(p: dict) -> None:
        if p["phase"] == "train" and p["step"] >= 150:
            cancel.set()

    r = train(engine, steps=200_000, cancel=cancel, progress=progress)
    assert r["status"] == "cancelled"
    assert 150 <= r["steps_done"] < 200_000
    assert r["history"]["log10_loss"]
    assert r["train_loss"] is not None and len(r["samples"]) == 20


def test_cancel_during_the_gradient_check(engine):
    cancel = threading.Event()
    cancel.set()
    r = train(engine, cancel=cancel)
    assert r["status"] == "cancelled" and r["steps_done"] == 0
    assert r["train_loss"] is None


def test_compile_falls_back_to_eager_with_a_note(engine, monkeypatch):
    import torch

    def broken(*args, **kwargs):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(torch, "compile", broken)
    r = train(engine, steps=150, compile=True)
    assert r["status"] == "finished"
    assert r["settings"]["compiled"] is False
    assert any("no compiler here" in n and "eagerly" in n for n in r["notes"])


@pytest.mark.cuda
def test_cuda_run_when_available():
    from tutor.config import Settings
    from tutor.core.engine import Engine

    r = train(Engine(Settings(device="cuda")), steps=200)
    assert r["status"] == "finished" and r["settings"]["device"].startswith("cuda")
    assert r["gradcheck"]["passed"]


# --- keeping runs -----------------------------------------------------------------------------


def test_a_finished_run_is_kept_and_passes_exercise_4(engine, tmp_path):
    code = training_code(PACK)
    r = train(engine, code, steps=120)
    with Store.open(tmp_path, PACK) as store:
        run_id = record_run(store, PACK, code, TrainingRun.from_dict(r))
        (kept,) = store.training_runs()
        assert kept["id"] == run_id and kept["code"] == code
        assert kept["history"] == r["history"] and kept["val_loss"] == r["val_loss"]
        assert store.status("train/loop") in ("passed", "exact")


# --- the command --------------------------------------------------------------------------------


def cli(*args: str, home) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300)


def test_train_json_reference(tmp_path):
    out = cli("train", "--reference", "--steps", "200", "--device", "cpu", "--json",
              home=tmp_path)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["status"] == "finished" and r["settings"]["reference"] is True
    assert r["settings"]["steps"] == 200 and r["settings"]["device"] == "cpu"
    assert {c["tensor"]: c["maxdiff"] for c in r["gradcheck"]["checks"]}.keys() == {
        "C", "W1", "b1", "W2", "b2", "bngain", "bnbias"}
    for key in ("train_loss", "val_loss", "samples", "steps_per_s", "wall_s", "run_id"):
        assert r[key] is not None, key
    with Store.open(tmp_path, PACK) as store:
        assert [run["id"] for run in store.training_runs()] == [r["run_id"]]
        assert store.status("train/loop") != "passed"  # the references are not the learner's


def test_train_file_and_text_output(tmp_path):
    wrong = tmp_path / "step.py"
    wrong.write_text(with_change("db2 = dlogits.sum(0)", "db2 = dlogits.sum(0) / 2"))
    out = cli("train", "--file", str(wrong), "--steps", "200", "--device", "cpu",
              home=tmp_path / "home")
    assert out.returncode == 1
    assert "db2" in out.stdout and "Training stopped" in out.stdout


def test_train_print_code_and_usage_errors(tmp_path):
    out = cli("train", "--print-code", "--steps", "1000", home=tmp_path)
    assert out.returncode == 0
    assert out.stdout.startswith("# One training step, run 1 000 times")
    assert cli("train", "--steps", "0", home=tmp_path).returncode == 2


def test_ctrl_c_cancels_and_prints_the_partial_run(tmp_path):
    """Progress goes to a terminal (a pty here); the first Ctrl+C stops the run, not the program."""
    import os
    import pty
    import select
    import signal

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(tmp_path), "train", "--reference",
         "--device", "cpu", "--json"],
        stdout=subprocess.PIPE, stderr=slave, text=True)
    os.close(slave)
    seen = b""
    try:
        while b"steps/s" not in seen:
            ready, _, _ = select.select([master], [], [], 120)
            assert ready, "no progress on the terminal"
            seen += os.read(master, 4096)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        os.close(master)
    assert proc.returncode == 130
    r = json.loads(out)
    assert r["status"] == "cancelled" and 0 < r["steps_done"] < r["settings"]["steps"]
    assert r["val_loss"] is not None


# --- passing the exercise: only the learner's own code, checked, at steps it cannot know --------

TINY = Path(__file__).parent / "packs" / "tiny"
TINY_PACK = load_pack(TINY)
TINY_CODE = training_code(TINY_PACK)
TINY_FIRST = TrainingSettings.from_pack(TINY_PACK).gradcheck_steps  # 20
ZEROED = TINY_CODE + "".join(f"{g} = {g} * 0\n"
                             for g in TrainingSettings.from_pack(TINY_PACK).grad_names)
# Right while the first steps are checked, then quietly wrong: it counts its own calls in the
# namespace its steps share.
COUNTED = TINY_CODE + ("try:\n    calls = calls + 1\nexcept Exception:\n    calls = 1\n"
                       f"if calls > {TINY_FIRST}:\n    dW2 = dW2 * 0\n")


@pytest.fixture(scope="module", params=["fork", "spawn"])
def tiny_evaluator(request):
    from tutor.config import Settings
    from tutor.evaluator.client import Evaluator

    ev = Evaluator(Settings(device="cpu", pack=str(TINY), isolation=request.param))
    assert ev.info()["isolation"] == request.param
    yield ev
    ev.close()


def _train_and_keep(ev, tmp_path, code: str, **options) -> tuple[TrainingRun, str]:
    from tutor.session.controller import Lesson

    with Store.open(tmp_path, TINY_PACK) as store:
        lesson = Lesson(TINY_PACK, store, ev)
        run = lesson.train(code, 400, **options)
        assert lesson.keep_run(code, run) is None
        assert [r.run_id for r in lesson.training_runs()] == [run.run_id]
        return run, store.status("tiny/train")


def test_an_honest_run_passes_checked_at_steps_drawn_at_random(tiny_evaluator, tmp_path):
    assert "db2 = dlogits.sum(0)\n" in TINY_CODE
    # Right, in words of its own: not the reference's text, so the reference is replayed.
    mine = TINY_CODE.replace("db2 = dlogits.sum(0)\n", "db2 = dlogits.sum(dim=0)\n")
    run, status = _train_and_keep(tiny_evaluator, tmp_path, mine)
    assert run.status.value == "finished" and run.exercise.passed, run.exercise.reason
    assert status in ("passed", "exact")
    drawn = run.gradcheck.random_steps
    assert len(drawn) == 4 and drawn == sorted(drawn)
    assert all(TINY_FIRST <= s < 400 for s in drawn)
    assert run.gradcheck.checks[0].steps == TINY_FIRST + 4  # the tally counts every check
    # The reference replayed for the same 400 steps: right gradients land where it does.
    assert run.reference_train_loss is not None
    assert run.train_loss == pytest.approx(run.reference_train_loss, rel=0.01)


def test_zero_gradients_without_a_gradient_check_are_kept_and_do_not_pass(tiny_evaluator,
                                                                          tmp_path):
    run, status = _train_and_keep(tiny_evaluator, tmp_path, ZEROED, gradcheck_steps=0)
    assert run.status.value == "finished" and run.gradcheck is None
    assert not run.exercise.passed and "gradient check off" in run.exercise.reason
    assert status not in ("passed", "exact")


def test_gradients_that_go_wrong_after_the_checked_steps_are_caught(tiny_evaluator, tmp_path):
    run, status = _train_and_keep(tiny_evaluator, tmp_path, COUNTED)
    assert run.status.value == "diverged"
    failure = run.gradcheck.failure
    assert failure.tensor == "W2" and failure.step in run.gradcheck.random_steps
    assert failure.step >= TINY_FIRST and "drawn at random" in failure.message
    assert run.steps_done == failure.step  # the wrong step moved nothing
    assert not run.exercise.passed
    assert f"differed from autograd's at step {failure.step}" in run.exercise.reason
    assert status not in ("passed", "exact")


def test_a_reference_run_is_kept_and_does_not_pass(tiny_evaluator, tmp_path):
    run, status = _train_and_keep(tiny_evaluator, tmp_path, TINY_CODE, reference=True)
    assert run.status.value == "finished" and run.gradcheck.passed
    assert not run.exercise.passed and "reference solutions" in run.exercise.reason
    assert status not in ("passed", "exact")


def test_the_worker_draws_the_steps_whatever_the_request_says(tiny_evaluator):
    drawn = [tiny_evaluator.request("train", {"code": TINY_CODE, "steps": 400,
                                              "check_seed": 1}, None)["gradcheck"]["random_steps"]
             for _ in range(2)]
    assert len(drawn[0]) == 4 and drawn[0] != drawn[1]


def test_train_file_without_a_gradient_check_is_kept_and_says_it_does_not_count(tmp_path):
    step = tmp_path / "step.py"
    step.write_text(ZEROED)
    home = tmp_path / "home"
    common = ("--pack", str(TINY), "train", "--file", str(step), "--gradcheck-steps", "0",
              "--device", "cpu")
    out = cli(*common, "--json", home=home)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["exercise"]["passed"] is False and "gradient check off" in r["exercise"]["reason"]
    text = cli(*common, home=home)
    assert "does not pass the exercise: gradient check off" in text.stdout
    with Store.open(home, TINY_PACK) as store:
        assert len(store.training_runs()) == 2
        assert store.status("tiny/train") not in ("passed", "exact")
