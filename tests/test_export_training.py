"""`export` hands in exercise 4 too: a learner who solved every step and kept a training run
exports a file that `grade` scores full marks, that `check --all` checks and plain Python runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tutor.pack.model import load_pack
from tutor.session.store import Store
from tutor.training.plan import training_code, training_step
from tutor.values.results import CheckResult

PACK = load_pack()
STEP = training_step(PACK)
STEPS = 30  # every step of so short a run is checked against autograd: it passes or it does not


def cli(home, *args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=600, cwd=cwd)


def solve_every_gradient_step(home) -> None:
    """The reference solutions stand in for the learner's passing code."""
    passed = CheckResult.from_dict({"passed": True, "checks": [
        {"verdict": "exact", "maxdiff": 0.0, "diagnosis": None}], "error": None})
    with Store.open(home, PACK) as store:
        for step in PACK.gradient_steps:
            store.record_attempt(step.id, step.solution, passed)


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def test_a_learner_who_finished_everything_exports_full_marks(home, tmp_path):
    solve_every_gradient_step(home)
    trained = cli(home, "train", "--steps", str(STEPS))
    assert trained.returncode == 0, trained.stderr
    assert "passes the exercise" in trained.stdout
    script = tmp_path / "backward.py"
    done = cli(home, "export", "--out", str(script))
    assert done.returncode == 0, done.stderr
    assert "exercise 4's training step (passed" in done.stderr  # makemore's is exercise 4
    text = script.read_text()
    assert f"\n# %% {STEP.id}\n" in text

    graded = cli(home, "grade", str(script), "--json", "--train-steps", str(STEPS))
    assert graded.returncode == 0, graded.stderr
    grade = json.loads(graded.stdout)
    assert grade["score"] == grade["max_score"] == len(PACK.steps), [
        (s["id"], s["message"]) for s in grade["steps"] if s["status"] != "passed"]

    # The script still runs with plain Python (stopping before the training step) and checks.
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert f"{STEP.id} is trained by" in plain.stdout
    checked = cli(home, "check", "--all", str(script), "--json", "--no-record")
    assert checked.returncode == 0, checked.stdout[-2000:]
    assert len(json.loads(checked.stdout)) == len(PACK.gradient_steps)


def test_before_any_training_there_is_no_training_cell(home):
    solve_every_gradient_step(home)
    out = cli(home, "export")
    assert out.returncode == 0, out.stderr
    assert f"# %% {STEP.id}" not in out.stdout
    assert f"Exercise 4 ({STEP.id}) is not here yet" in out.stdout
    assert "no training step yet" not in out.stderr  # only --out says what it wrote


def test_a_draft_is_exported_when_nothing_was_trained(home):
    solve_every_gradient_step(home)
    draft = training_code(PACK, {s.id: s.solution for s in PACK.gradient_steps})
    draft += "\n# my own note\n"
    with Store.open(home, PACK) as store:
        store.save_draft(STEP.id, draft)
    out = cli(home, "export")
    assert out.returncode == 0, out.stderr
    cell = out.stdout.split(f"\n# %% {STEP.id}\n", 1)[1]
    assert "your training-screen draft" in cell and "# my own note" in cell


def test_each_lesson_names_its_own_training_exercise(home):
    from tutor.pack.model import find_pack

    gpt = load_pack(find_pack("gpt"))
    step = training_step(gpt)
    out = cli(home, "--pack", "gpt", "export")
    assert out.returncode == 0, out.stderr
    assert f"Exercise {step.exercise} ({step.id}) is not here yet" in out.stdout
    assert step.exercise != 4 and "Exercise 4" not in out.stdout
