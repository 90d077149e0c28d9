"""A training run, typed (tutor/values/runs.py): the plain data of docs/json.md
("A training run") reads
into types and back without losing a key or changing its order, runs kept by earlier versions
read back from the progress store, and the shapes a failed request comes back in read as runs
that ended with an error. No torch: the runs here are plain data, as the pipe carries them."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tutor.commands.train import progress_line
from tutor.evaluator.worker import stopped
from tutor.pack.model import load_pack
from tutor.session.controller import Lesson
from tutor.session.store import Store
from tutor.values.results import CheckError, ErrorKind, TensorCheck, Verdict
from tutor.values.runs import (
    LOSS_MARGIN,
    GradientCheck,
    ParameterCheck,
    RunPhase,
    RunProgress,
    RunStatus,
    TrainingRun,
)

PACK = load_pack()


def a_run(**changes) -> dict:
    """A run as the child sends it today (a diverged one: every nested object is filled in)."""
    run = {
        "status": "diverged", "error": None, "step": None,
        "settings": {"steps": 3, "lr": 0.1, "gradcheck_steps": 2, "seed": 2147483647,
                     "device": "cpu", "reference": False, "compile": False, "compiled": False,
                     "torch_version": "2.13.0", "threads": 1, "parameters_count": 12297,
                     "broken": None},
        "gradcheck": {"steps": 1, "passed": False, "failure": {
            "step": 0, "tensor": "b2", "grad": "db2", "wrong": ["db2"],
            "maxdiff": 0.2144065946340561, "verdict": "wrong", "cause": "db2", "line": 30,
            "diagnosis": {"kind": "scale", "message": "db2 is 2 times autograd's gradient."},
            "message": "At step 0, db2 differs from autograd."}, "checks": [
            {"tensor": "W2", "grad": "dW2", "shape": [200, 27], "expected_shape": [200, 27],
             "exact": False, "approximate": True, "maxdiff": 2.2351741790771484e-08,
             "verdict": "approximate", "steps": 1, "exact_steps": 0, "approximate_steps": 1},
            {"tensor": "b2", "grad": "db2", "shape": [27], "expected_shape": [27],
             "exact": False, "approximate": False, "maxdiff": 0.2144065946340561,
             "verdict": "wrong", "steps": 1, "exact_steps": 0, "approximate_steps": 0}],
            "random_steps": []},
        "steps_done": 0, "history": {"every": 1, "log10_loss": [0.54, 0.53]},
        "train_loss": None, "val_loss": None, "samples": [], "notes": ["a note"],
        "last_loss": None, "steps_per_s": None, "gradcheck_s": 0.0228, "train_s": None,
        "compile_s": None, "results_s": None, "wall_s": 0.031, "stdout": "printed\n",
        "lecture": {"train_loss": 2.0705, "val_loss": 2.1099}, "reference_train_loss": None,
        "pictures": [],
        "exercise": {"passed": False, "reason": "your gradients differed from autograd's at "
                     "step 0"},
    }
    return {**run, **changes}


PICTURE = {"step": 5, "panel": {"title": "dh_t", "case": "8 longest validation names",
                                 "yours": [0.03, None], "autograd": [0.03, 0.01],
                                 "wrong": [False, False]}}


def test_the_plain_data_reads_into_types_and_back_unchanged():
    unchecked = {"passed": False, "reason": "the gradient check did not run"}
    for plain in (a_run(), a_run(run_id=4), a_run(run_id=None), a_run(status="finished",
                  error=None, gradcheck=None, samples=["mora"], train_loss=2.2, val_loss=2.3,
                  exercise=unchecked), a_run(pictures=[PICTURE])):
        run = TrainingRun.from_dict(plain)
        assert json.dumps(run.to_dict()) == json.dumps(plain)  # keys, order and values


def test_the_types_say_what_the_data_said():
    run = TrainingRun.from_dict(a_run(run_id=4))
    assert run.status is RunStatus.DIVERGED and run.saved and run.run_id == 4
    assert run.planned_steps == 3 and run.settings.device == "cpu"
    assert run.settings.plan["lr"] == 0.1 and not run.settings.reference
    failure = run.gradcheck.failure
    assert (failure.grad, failure.cause, failure.line, failure.verdict) == (
        "db2", "db2", 30, Verdict.WRONG)
    assert failure.diagnosis.kind == "scale" and run.error_line == 30
    w2, b2 = run.gradcheck.checks
    assert w2.accepted and not b2.accepted and b2.verdict.mark == "✗"
    assert run.history.every == 1 and run.lecture.val_loss == 2.1099


def test_a_run_kept_today_reads_back_typed_from_the_store(tmp_path):
    kept = {k: v for k, v in a_run(status="finished").items() if k != "stdout"}
    with Store.open(tmp_path, PACK) as store:
        # The row exactly as the store kept runs before it had types: the run and its code.
        run_id = store.record_training_run({**kept, "code": "dW2 = h.T @ dlogits\n"})
        (run,) = Lesson(PACK, store, None).training_runs()
    assert run.run_id == run_id and run.at and run.code == "dW2 = h.T @ dlogits\n"
    assert run.status is RunStatus.FINISHED and not run.saved  # nothing said "just kept"
    assert [c.grad for c in run.gradcheck.checks] == ["dW2", "db2"]
    assert run.history.log10_loss == [0.54, 0.53] and run.notes == ["a note"]


def test_a_run_kept_by_an_early_version_still_loads(tmp_path):
    early = {"settings": {"n_hidden": 200, "steps": 1000, "lr": 0.1}, "status": "finished",
             "losses": [3.3, 2.9], "final": {"train": 2.07, "val": 2.11},
             "samples": ["mora", "kayah"], "steps_done": 1000,
             "gradcheck": {"passed": True, "steps": 100, "checks": [
                 {"tensor": "C", "exact": True, "approximate": True, "maxdiff": 0.0,
                  "verdict": "exact", "steps": 100}]}}
    with Store.open(tmp_path, PACK) as store:
        store.record_training_run(early)
        (run,) = Lesson(PACK, store, None).training_runs()
    assert run.status is RunStatus.FINISHED and run.planned_steps == 1000
    assert run.history is None and run.train_loss is None and run.samples == ["mora", "kayah"]
    (row,) = run.gradcheck.checks
    assert row.grad == "dC" and row.approximate_steps == 100 and not row.approximate_on_some_steps
    assert run.extra == {"losses": [3.3, 2.9], "final": {"train": 2.07, "val": 2.11}}


def test_keeping_a_run_gives_it_its_number_and_only_a_kept_run_prints_one(tmp_path):
    with Store.open(tmp_path, PACK) as store:
        lesson = Lesson(PACK, store, None)
        run = TrainingRun.from_dict(a_run(status="finished"))
        assert "run_id" not in run.to_dict()
        assert lesson.keep_run("code", run) is None
        assert run.saved and run.to_dict()["run_id"] == run.run_id == store.training_runs()[0]["id"]
        assert "stdout" not in store.training_runs()[0]  # print output is not kept
        failed = TrainingRun.from_dict(a_run(status="error"))
        assert lesson.keep_run("code", failed) is None and failed.to_dict()["run_id"] is None
        assert len(store.training_runs()) == 1  # a run that never started is not kept


def test_a_request_that_failed_reads_as_a_run_that_ended_with_an_error():
    outside = TrainingRun.from_dict(stopped(SimpleNamespace(status="timeout", why="quiet"),
                                            "step", 120, 5.0))
    assert outside.status is RunStatus.ERROR and outside.error.kind is ErrorKind.TIMEOUT
    assert outside.step == 120 and outside.gradcheck is None
    gone = TrainingRun.from_dict({"error": CheckError.internal("the evaluator was closed")
                                  .to_dict()})
    assert gone.status is RunStatus.ERROR and gone.error.kind is ErrorKind.INTERNAL
    assert gone.to_dict()["status"] == "error" and gone.settings.steps is None


def test_a_training_run_has_error_kinds_of_its_own():
    for kind in ("nan", "shape"):
        error = CheckError.from_dict({"kind": kind, "message": "m", "line": 3, "col": None})
        assert error.kind.value == kind and error.to_dict()["kind"] == kind
        assert TrainingRun.from_dict(a_run(status="error", error=error.to_dict())).error == error


def test_a_parameter_check_keeps_the_worst_step():
    row = ParameterCheck("b2", "db2")
    steps = [TensorCheck("b2", "db2", [27], Verdict.EXACT, [27], True, True, 0.0),
             TensorCheck("b2", "db2", [27], Verdict.APPROXIMATE, [27], False, False, 3e-8),
             TensorCheck("b2", "db2", [27], Verdict.EXACT, [27], True, True, 0.0)]
    for g in steps:
        row.add(g)
    assert row.verdict is Verdict.APPROXIMATE and row.maxdiff == 3e-8
    assert (row.steps, row.exact_steps, row.approximate_steps) == (3, 2, 2)
    assert not row.exact and not row.approximate and row.approximate_on_some_steps
    assert ParameterCheck.from_dict(row.to_dict()) == row
    check = GradientCheck(3, True, checks=[row])
    assert GradientCheck.from_dict(check.to_dict()) == check and check.approximate_on_some_steps


def test_progress_messages_read_into_types_and_back():
    sent = [
        {"phase": "gradcheck", "step": 2, "of": 100,
         "checks": [ParameterCheck("C", "dC", steps=2).to_dict()]},
        {"phase": "train", "step": 150, "steps": 200, "every": 1, "points": [0.5, 0.49],
         "steps_per_s": 1200.5, "eta_s": 0.04, "loss": 3.1, "lr": 0.1, "picture": None},
        {"phase": "results", "step": 200, "steps": 200, "doing": "the losses"},
    ]
    typed = [RunProgress.from_dict(p) for p in sent]
    assert [p.phase for p in typed] == [RunPhase.GRADCHECK, RunPhase.TRAIN, RunPhase.RESULTS]
    assert typed[0].checks[0].grad == "dC" and typed[1].steps_per_s == 1200.5
    assert [p.to_dict() for p in typed] == sent
    # Phase 3 says what it does, as the run sent it; without that, words true of any pack.
    assert progress_line(typed[2]) == "the losses"
    plain = RunProgress.from_dict({"phase": "results", "step": 200, "steps": 200})
    assert progress_line(plain) == "evaluating the network"


# --- does it pass the exercise? (runs.exercise_verdict, the one rule) ---------------------------


def a_finished_run(**changes) -> TrainingRun:
    """A checked run of the learner's own code that passes, with `changes` made to it."""
    plain = a_run(status="finished", steps_done=3, train_loss=2.2, val_loss=2.3,
                  reference_train_loss=2.15)
    plain["gradcheck"] = {**plain["gradcheck"], "steps": 2, "passed": True, "failure": None,
                          "random_steps": [2]}
    for key, value in changes.items():
        target, _, leaf = key.rpartition(".")
        (plain[target] if target else plain)[leaf] = value
    return TrainingRun.from_dict(plain)


def test_a_checked_run_of_your_code_that_reached_the_reference_passes():
    verdict = a_finished_run().exercise
    assert verdict.passed and verdict.reason is None
    # Within the margin of the reference's loss still counts.
    assert a_finished_run(train_loss=2.15 * (1 + LOSS_MARGIN) - 1e-9).exercise.passed


def test_each_reason_a_run_does_not_pass():
    cases = {
        "settings.reference": (True, "reference solutions"),
        "settings.gradcheck_steps": (0, "gradient check off"),
        "gradcheck.random_steps": ([], "no step after the first ones"),
        "train_loss": (2.9, "the loss did not fall as the reference's does: 2.9 vs 2.15"),
        "reference_train_loss": (None, "no reference loss"),
        "status": ("cancelled", "only a finished run counts"),
    }
    for key, (value, reason) in cases.items():
        verdict = a_finished_run(**{key: value}).exercise
        assert not verdict.passed and reason in verdict.reason, (key, verdict.reason)
    # A nan loss fell nowhere.
    assert not a_finished_run(train_loss=float("nan")).exercise.passed


def test_a_wrong_gradient_at_a_step_drawn_at_random_is_named():
    run = TrainingRun.from_dict(a_run())
    run.gradcheck.failure.step = 8417
    run.gradcheck.random_steps = [8417]
    assert run.exercise.reason == ("your gradients differed from autograd's at step 8417 (a step "
                                   "chosen at random)")


def test_a_picture_that_is_not_well_formed_is_dropped_when_read_back():
    odd = [{"step": 1, "panel": {**PICTURE["panel"], "wrong": [False]}},  # lengths differ
           {"step": "5", "panel": PICTURE["panel"]},
           {"step": 2, "panel": {**PICTURE["panel"], "autograd": ["big", 0.1]}},
           "a picture", PICTURE]
    assert TrainingRun.from_dict(a_run(pictures=odd)).pictures == [PICTURE]
    progress = RunProgress.from_dict({"phase": "train", "step": 9, "picture": PICTURE})
    assert progress.picture == PICTURE and progress.to_dict()["picture"] == PICTURE
    assert RunProgress.from_dict({"phase": "train", "picture": {"step": 1}}).picture is None
