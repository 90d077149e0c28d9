"""A first branch is graded where the learner was asked to write it.

The check lets autograd's first branch stand in when a learner has not started it, so the closing
step's `+=` still works (and says so). In grading that would give points for work nobody wrote:
the step that asks for the first branch earns nothing unless the closing step writes the whole
gradient itself.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parent.parent
PACK = load_pack()
FIRSTS = {"atomic/counts_sum_inv": "dcounts", "atomic/logit_maxes": "dlogits",
          "atomic/bnvar_inv": "dbndiff", "atomic/bnmeani": "dhprebn"}


def _submission(without_first: bool, whole_at_closing: bool = False) -> str:
    cells = []
    for step in PACK.steps:
        if step.kind.trained:
            continue
        code = step.solution
        if without_first and step.id in FIRSTS:
            grad = FIRSTS[step.id]
            code = "\n".join(line for line in code.splitlines()
                             if not line.startswith(f"{grad} ="))
        if whole_at_closing and step.id == "atomic/counts":
            code = "dcounts = counts_sum_inv * dprobs + torch.ones_like(counts) * dcounts_sum\n"
        cells.append(f"# %% {step.id}\n{code}\n")
    return "\n".join(cells)


def _grade(tmp_path: Path, text: str, *flags: str) -> dict:
    import json

    path = tmp_path / "answers.py"
    path.write_text(text)
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", *flags, str(path)], capture_output=True,
                          text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {s["id"]: s for s in json.loads(done.stdout)["steps"]}


@pytest.mark.slow
def test_first_branches_nobody_wrote_earn_nothing_where_they_were_asked_for(tmp_path):
    steps = _grade(tmp_path, _submission(without_first=True), "--strict-rule")
    for sid, grad in FIRSTS.items():
        assert steps[sid]["score"] == 0 and steps[sid]["status"] == "failed", steps[sid]
        assert f"first branch of {grad}" in steps[sid]["message"]
    # the closing steps' own branches are right, and graded as such
    for sid in ("atomic/counts", "atomic/logits", "atomic/bndiff", "atomic/hprebn"):
        assert steps[sid]["score"] == 1, steps[sid]
    full = _grade(tmp_path, _submission(without_first=False), "--strict-rule")
    assert all(full[sid]["score"] == 1 for sid in FIRSTS)


@pytest.mark.slow
def test_the_whole_gradient_written_at_the_closing_step_earns_the_first_branch(tmp_path):
    steps = _grade(tmp_path, _submission(without_first=True, whole_at_closing=True))
    assert steps["atomic/counts_sum_inv"]["score"] == 1, steps["atomic/counts_sum_inv"]
    assert steps["atomic/counts"]["score"] == 1
    assert steps["atomic/logit_maxes"]["score"] == 0  # still nobody's


def test_the_check_says_when_a_branch_stands_in(engine):
    # The TUI and `check` tell the learner at both ends: where the branch was asked for, and
    # where autograd's stood in for it.
    first = engine.check("atomic/counts_sum_inv",
                         "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n")
    assert first.passed and any("stands in" in n for n in first.notes), first.notes
    prior = {"atomic/counts_sum_inv": "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"}
    closing = engine.check("atomic/counts", PACK.step("atomic/counts").solution, prior)
    assert any("autograd's first branch stands in" in n for n in closing.notes), closing.notes
