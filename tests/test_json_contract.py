"""`check --json` is a contract (docs/json.md): the keys of a result, a row and an error are
pinned here, so a change to them is a decision, not an accident."""

import json
import subprocess
import sys

RESULT_KEYS = {"step", "passed", "checks", "heldout", "error", "stdout", "notes", "figure",
               "device"}
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
