"""`check --json` is a contract (docs/json.md): the keys of a result, a row and an error are
pinned here, so a change to them is a decision, not an accident."""

import json
import subprocess
import sys

RESULT_KEYS = {"step", "passed", "checks", "heldout", "error", "stdout", "notes", "figure",
               "device", "numeric"}
ROW_KEYS = {"tensor", "grad", "shape", "expected_shape", "exact", "approximate", "maxdiff",
            "verdict", "diagnosis", "message", "partial", "heatmap", "note"}
VERDICTS = {"exact", "approximate", "wrong", "shape", "missing"}
ERROR_KINDS = {"syntax", "forbidden", "runtime", "timeout", "memory", "usage", "internal"}


def check_json(code: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "tutor", "check", "atomic/probs", "--code", code, "--json",
         "--no-record"], capture_output=True, text=True, timeout=120)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def _assert_row(row: dict) -> None:
    assert set(row) >= ROW_KEYS
    assert row["verdict"] in VERDICTS
    assert isinstance(row["exact"], bool) and isinstance(row["approximate"], bool)
    assert isinstance(row["message"], str) and isinstance(row["partial"], bool)
    assert row["diagnosis"] is None or {"kind", "message"} <= set(row["diagnosis"])


def test_a_passing_check_has_the_pinned_keys():
    result = check_json("dprobs = (1.0 / probs) * dlogprobs")
    assert set(result) >= RESULT_KEYS
    assert result["passed"] is True and result["error"] is None
    assert [row["grad"] for row in result["checks"]] == ["dprobs"]
    for row in result["checks"]:
        _assert_row(row)
    assert result["checks"][0]["shape"] == result["checks"][0]["expected_shape"] == [32, 27]
    assert set(result["heldout"]) >= {"passed", "batch_size", "message"}


def test_a_wrong_check_has_a_row_with_a_heatmap():
    result = check_json("dprobs = probs")
    assert result["passed"] is False
    row = result["checks"][0]
    _assert_row(row)
    assert row["verdict"] == "wrong" and isinstance(row["maxdiff"], float)
    assert isinstance(row["heatmap"], list) and isinstance(row["heatmap"][0], list)


def test_an_error_has_a_kind_a_message_and_a_place():
    result = check_json("dprobs = (")
    assert set(result) >= RESULT_KEYS
    assert result["checks"] == [] and result["passed"] is False
    assert set(result["error"]) == {"kind", "message", "line", "col"}
    assert result["error"]["kind"] in ERROR_KINDS
    assert (result["error"]["line"], result["error"]["col"]) == (1, 10)


# --- a training run (`train --json`, docs/json.md "A training run") ----------------------------

# The run's keys in the order they are printed; `run_id` follows when the run was handed to the
# progress store.
RUN_KEYS = ["status", "error", "step", "settings", "gradcheck", "steps_done", "history",
            "train_loss", "val_loss", "samples", "notes", "last_loss", "steps_per_s",
            "gradcheck_s", "train_s", "compile_s", "results_s", "wall_s", "stdout", "lecture",
            "reference_train_loss", "pictures", "exercise"]
# The run's own settings, after those of the training plan (which depend on the pack).
RUN_SETTINGS_KEYS = ["device", "reference", "compile", "compiled", "torch_version", "threads",
                     "parameters_count", "broken"]
GRADCHECK_KEYS = ["steps", "passed", "failure", "checks", "random_steps"]
PARAMETER_KEYS = ["tensor", "grad", "shape", "expected_shape", "exact", "approximate", "maxdiff",
                  "verdict", "steps", "exact_steps", "approximate_steps"]
FAILURE_KEYS = ["step", "tensor", "grad", "wrong", "maxdiff", "verdict", "cause", "line",
                "diagnosis", "message"]
SHORT = ("--steps", "3", "--gradcheck-steps", "2", "--device", "cpu", "--json")


def train_json(home, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "train", *args],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    run = json.loads(out.stdout)
    assert out.stdout == json.dumps(run, indent=2) + "\n"  # the printed form, byte for byte
    return run


def _code_with(old: str, new: str) -> str:
    from tutor.pack.model import load_pack
    from tutor.training import training_code

    code = training_code(load_pack(), None, 3)
    assert old in code
    return code.replace(old, new)


def test_a_finished_training_run_has_the_pinned_keys_and_values(tmp_path):
    run = train_json(tmp_path, "--reference", *SHORT)
    assert list(run) == [*RUN_KEYS, "run_id"]
    assert run["status"] == "finished" and run["error"] is None and run["step"] is None
    assert isinstance(run["run_id"], int) and run["steps_done"] == 3
    settings = run["settings"]
    assert list(settings)[-len(RUN_SETTINGS_KEYS):] == RUN_SETTINGS_KEYS
    assert (settings["steps"], settings["gradcheck_steps"], settings["device"]) == (3, 2, "cpu")
    assert settings["reference"] is True and settings["compile"] is settings["compiled"] is False
    assert isinstance(settings["threads"], int) and isinstance(settings["parameters_count"], int)
    assert settings["broken"] is None
    gradcheck = run["gradcheck"]
    assert list(gradcheck) == GRADCHECK_KEYS
    assert (gradcheck["steps"], gradcheck["passed"], gradcheck["failure"]) == (2, True, None)
    assert gradcheck["random_steps"] == [2]  # the one step left after the first two
    assert [c["tensor"] for c in gradcheck["checks"]] == ["C", "W1", "b1", "W2", "b2", "bngain",
                                                           "bnbias"]
    for row in gradcheck["checks"]:
        assert list(row) == PARAMETER_KEYS
        assert row["grad"] == "d" + row["tensor"] and row["steps"] == 3
        assert row["verdict"] in ("exact", "approximate") and row["shape"] == row["expected_shape"]
        assert isinstance(row["maxdiff"], float) and 0 <= row["exact_steps"] <= 3
    assert list(run["history"]) == ["every", "log10_loss"] and run["history"]["log10_loss"]
    assert all(isinstance(run[k], float) for k in ("train_loss", "val_loss", "last_loss",
                                                    "steps_per_s", "gradcheck_s", "train_s",
                                                    "results_s", "wall_s"))
    assert run["compile_s"] is None and run["stdout"] == "" and run["notes"] == []
    assert len(run["samples"]) == 20 and all(isinstance(s, str) for s in run["samples"])
    assert list(run["lecture"]) == ["train_loss", "val_loss", "steps"]
    assert run["lecture"]["steps"] == 200_000  # the run they come from, beside a shorter one
    # The references never pass the exercise, so their bar is not worked out.
    assert run["reference_train_loss"] is None
    assert list(run["exercise"]) == ["passed", "reason"] and run["exercise"]["passed"] is False
    assert "reference solutions" in run["exercise"]["reason"]


def test_a_diverged_training_run_names_the_first_wrong_gradient(tmp_path):
    code = _code_with("db2 = dlogits.sum(0)", "db2 = dlogits.sum(0) * 2")
    (tmp_path / "step.py").write_text(code)
    run = train_json(tmp_path / "home", "--file", str(tmp_path / "step.py"), "--no-record",
                     *SHORT)
    assert list(run) == RUN_KEYS  # not kept: no run_id
    assert run["status"] == "diverged" and run["error"] is None and run["steps_done"] == 0
    assert run["train_loss"] is None and run["samples"] == [] and run["steps_per_s"] is None
    gradcheck = run["gradcheck"]
    assert list(gradcheck) == GRADCHECK_KEYS and gradcheck["passed"] is False
    failure = gradcheck["failure"]
    assert list(failure) == FAILURE_KEYS
    assert (failure["step"], failure["tensor"], failure["grad"], failure["cause"]) == (
        0, "b2", "db2", "db2")
    assert failure["wrong"] == ["db2"] and failure["verdict"] == "wrong"
    assert code.splitlines()[failure["line"] - 1].startswith("db2 =")
    assert set(failure["diagnosis"]) == {"kind", "message"} and "db2" in failure["message"]
    assert next(c for c in gradcheck["checks"] if c["tensor"] == "b2")["verdict"] == "wrong"


def test_a_training_run_whose_code_fails_has_an_error(tmp_path):
    (tmp_path / "step.py").write_text("dC = (\n")
    run = train_json(tmp_path / "home", "--file", str(tmp_path / "step.py"), *SHORT)
    assert list(run) == [*RUN_KEYS, "run_id"]
    assert run["run_id"] is None  # handed to the store, which keeps only runs that started
    assert run["status"] == "error" and run["gradcheck"] is None and run["steps_done"] == 0
    assert run["error"] == {"kind": "syntax", "message": "line 1, column 6: '(' was never closed",
                            "line": 1, "col": 6}
    assert run["history"]["log10_loss"] == [] and run["last_loss"] is None
