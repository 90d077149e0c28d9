"""The LSTM lesson walked through as a learner does it on the command line: every step checked
with the pack's own solution typed into a file, in order, each opening the next, then a tiny
training run of the learner's own backprop through time that finishes and is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tutor.pack.model import load_pack

LSTM = load_pack(Path(__file__).parent.parent / "exercises" / "lstm")


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu", "--pack", "lstm",
         *args], capture_output=True, text=True, timeout=180,
        env={**os.environ, "COLUMNS": "100"})


def _statuses(home: Path) -> dict[str, str]:
    done = _cli(home, "progress", "--json")
    assert done.returncode == 0, done.stderr
    return {row["id"]: row["status"] for row in json.loads(done.stdout)["steps"]}


@pytest.mark.slow
def test_the_lstm_lesson_from_the_first_step_to_a_finished_training_run(tmp_path):
    home = tmp_path / "home"
    checked = [s for s in LSTM.steps if not s.kind.trained]
    trained = [s for s in LSTM.steps if s.kind.trained]
    assert len(checked) == 13 and len(trained) == 1
    statuses = _statuses(home)
    assert statuses[checked[0].id] == "unlocked"
    assert all(statuses[s.id] == "locked" for s in LSTM.steps[1:])
    for k, step in enumerate(checked):
        answer = tmp_path / f"{step.id.replace('/', '_')}.py"
        answer.write_text(step.solution)
        done = _cli(home, "check", step.id, "--file", str(answer))
        assert done.returncode == 0 and "PASSED" in done.stdout, (step.id, done.stdout,
                                                                   done.stderr)
        statuses = _statuses(home)
        assert statuses[step.id] in ("passed", "exact"), (step.id, statuses[step.id])
        after = (checked + trained)[k + 1]
        assert statuses[after.id] != "locked", f"{step.id} passed but {after.id} is still locked"
    # Every step checked right: the training step is open, and a short run of the learner's
    # own functions finishes and is kept as the exercise's attempt.
    assert statuses[trained[0].id] == "unlocked"
    code = _cli(home, "train", "--print-code", "--steps", "30")
    assert code.returncode == 0 and "def lstm_backward" in code.stdout
    run = _cli(home, "train", "--steps", "30", "--gradcheck-steps", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Trained 30 of 30 steps" in run.stdout and "run #1 saved" in run.stdout
    assert "every gradient matches autograd" in run.stdout
    runs = json.loads(_cli(home, "progress", "--json").stdout)
    assert runs["steps"][-1]["attempts"] == 1
