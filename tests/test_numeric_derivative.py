"""A derivative estimated from the function's values (central or one-sided differences) is right
for this network and answers no part of the exercise. The check passes it with a note that says
so; a course may refuse it (`grade --refuse-numeric`, `autograder --refuse-numeric`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tutor.code_facts import estimates_derivative

ROOT = Path(__file__).resolve().parent.parent
CENTRAL = ("eps = 1e-6\n"
           "p = probs.double()\n"
           "dprobs = ((torch.log(p + eps) - torch.log(p - eps)) / (2 * eps)).float() * dlogprobs\n")
HELPER = ("def numgrad(f, x, d, h=1e-4):\n"
          "    up = f(x + h)\n"
          "    down = f(x - h)\n"
          "    return (up - down) / (2 * h) * d\n")


@pytest.mark.parametrize("code, earlier, estimated", [
    (CENTRAL, (), True),
    ("dprobs = (probs.log() - logprobs) / n", (), False),  # one call, one tensor
    ("dh = numgrad(torch.tanh, hpreact, dh)", (HELPER,), True),
    ("dlogits = (F.softmax(logits, 1) - y) / n", (), False),
    ("d = ((x + e).exp().sum() - (x - e).exp().sum()) / (2 * e)", (), True),
    ("dx = (x.exp() - 1) / n", (), False),
])
def test_a_difference_quotient_is_recognised_in_any_form(code, earlier, estimated):
    assert estimates_derivative(code, earlier) is estimated


def test_the_check_passes_it_with_a_note(engine):
    result = engine.check("atomic/probs", CENTRAL)
    assert result.passed and result.numeric
    assert any("difference quotient" in n for n in result.notes)
    plain = engine.check("atomic/probs", "dprobs = (1.0 / probs) * dlogprobs\n")
    assert plain.passed and not plain.numeric


@pytest.mark.slow
def test_a_course_may_refuse_it(tmp_path):
    path = tmp_path / "answers.py"
    path.write_text(f"# %% atomic/probs\n{CENTRAL}")

    def graded(*flags: str) -> dict:
        done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade",
                               "--json", "--train-steps", "5", *flags, str(path)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        return {s["id"]: s for s in json.loads(done.stdout)["steps"]}["atomic/probs"]

    assert graded()["score"] == 1
    refused = graded("--refuse-numeric")
    assert refused["score"] == 0 and "difference quotient" in refused["message"]
