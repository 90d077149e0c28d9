"""Credit follows the work, not the layout: the lecture's notebook filled in the ordinary ways
learners fill it in gets its right steps credited, by the cut into steps where that works and
else by what the notebook computes (graded by values, ↷: its own lines cannot be told apart).

Each layout below is the same right answers rearranged; none may lose more than a step, and none
may get a diagnosis where its answer is right."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import lecture_notebooks as L
import pytest

ROOT = Path(__file__).resolve().parent.parent
BODY = [code for _, code in L.EX1_LINES]
CMPS = [f"cmp('{t}', d{t}, {t})" for t in L.CMP_ORDER]


def _with_ex1(cells: list[str]) -> dict:
    return L.notebook(cells)


def _moved_above(doc: dict) -> dict:
    """The gradient cell above the `# Exercise 1` comment, which is a cell of its own."""
    body = "\n".join(BODY) + "\n\n" + "\n".join(CMPS)
    return L.notebook([body, L.EX1_HEAD])


LAYOUTS = {
    "answers above the exercise comment": lambda: _moved_above({}),
    "no exercise comments at all": lambda: L.notebook(["\n".join(BODY) + "\n" + "\n".join(CMPS)]),
    "a statement per cell, cmp in the next": lambda: L.notebook(
        [L.EX1_HEAD, *[c for pair in zip(BODY, [f"cmp('{t}', d{t}, {t})" for t, _ in
                                                 L.EX1_LINES], strict=True) for c in pair]]),
    "many cells, then all the cmp calls": lambda: L.notebook(
        [L.EX1_HEAD, *BODY, "\n".join(CMPS)]),
    "two attempts in one cell": lambda: L.notebook([L.ex1_one_cell().replace(
        "dprobs = dlogprobs / probs",
        "dprobs = dlogprobs * probs\ncmp('probs', dprobs, probs)\ndprobs = dlogprobs / probs")]),
    "the learner's own constant": lambda: L.notebook([
        "BATCH_SIZE = 32\n" + L.ex1_one_cell().replace("-1.0 / n", "-1.0 / BATCH_SIZE")]),
    "a helper of their own instead of cmp": lambda: L.notebook([
        "def compare(s, dt, t):\n  print(s, torch.allclose(dt, t.grad))\n"
        + L.ex1_one_cell().replace("cmp(", "compare(")]),
    "a gradient complete in one line, after the one it needs": lambda: L.notebook([
        L.ex1_one_cell().replace("\ndcounts = dprobs * counts_sum_inv", "").replace(
            "dcounts += dcounts_sum.expand_as(counts)",
            "dcounts = dprobs * counts_sum_inv + dcounts_sum.expand_as(counts)")]),
    "other code beside the answers": lambda: L.notebook([
        "torch.manual_seed(42)\nwith open('notes.txt', 'w') as f:\n  f.write('x')\n"
        + L.ex1_one_cell() + "\nplt.plot([1, 2, 3])"]),
}


def _grade(tmp_path: Path, doc: dict) -> dict:
    path = L.write(tmp_path / "nb.ipynb", doc)
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_right_steps_are_credited_whatever_the_layout(tmp_path, layout):
    grade = _grade(tmp_path, LAYOUTS[layout]())
    exercise_1 = [s for s in grade["steps"] if s["id"].startswith("atomic/")]
    lost = [(s["id"], s["message"]) for s in exercise_1 if s["score"] < s["max_score"]]
    assert len(lost) <= 1, lost
    wrongly = [s for s in exercise_1 if s["status"] == "failed" and "Your" in s["message"]]
    assert not wrongly, wrongly  # no diagnosis of code that is right


@pytest.mark.slow
def test_a_wrong_answer_stays_wrong_by_the_notebooks_values(tmp_path):
    wrong = L.ex1_one_cell().replace("dprobs = dlogprobs / probs", "dprobs = dlogprobs * probs")
    grade = _grade(tmp_path, L.notebook([L.EX1_HEAD, wrong.replace(L.EX1_HEAD, "")]))
    probs = next(s for s in grade["steps"] if s["id"] == "atomic/probs")
    assert probs["score"] == 0 and probs["status"] == "failed", probs


@pytest.mark.slow
@pytest.mark.parametrize("per_line", [False, True], ids=["one-cell", "cell-per-line"])
def test_an_equals_for_plus_equals_costs_the_closing_step_only(tmp_path, per_line):
    """`dcounts = ...` where `dcounts += ...` belonged overwrites the first branch an earlier
    step wrote: the slip is the closing step's, and only it loses its point."""
    lines = [(t, c.replace("dcounts += dcounts_sum", "dcounts = dcounts_sum"))
             for t, c in L.EX1_LINES]
    cells = L.ex1_cell_per_line(lines) if per_line else [L.ex1_one_cell(lines)]
    grade = _grade(tmp_path, L.notebook(cells))
    lost = {s["id"] for s in grade["steps"] if s["id"].startswith("atomic/") and s["score"] == 0}
    assert lost == {"atomic/counts"}, lost


@pytest.mark.slow
def test_answers_under_no_grad_are_read_line_by_line(tmp_path):
    """A `with torch.no_grad():` block (or inference_mode) changes nothing for hand-written
    gradients: each line in it is its step's own, and earns its point under --strict-rule."""
    indented = "\n".join("    " + line for line in "\n".join(BODY).splitlines())
    doc = L.notebook([f"{L.EX1_HEAD}\nwith torch.no_grad():\n{indented}\n\n" + "\n".join(CMPS)],
                     ex2="with torch.inference_mode():\n" + textwrap.indent(L.EX2_BACKWARD,
                                                                           "    "))
    path = L.write(tmp_path / "nb.ipynb", doc)
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--strict-rule", "--train-steps", "5", str(path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    grade = json.loads(done.stdout)
    lost = [(s["id"], s["message"][:120]) for s in grade["steps"] if s["id"] != "train"
            and s["score"] < s["max_score"]]
    assert not lost, lost
