"""A derivative estimated from the function's values (central or one-sided differences) is right
for this network and answers no part of the exercise. The check passes it with a note that says
so; a course may refuse it (`grade --refuse-numeric`, `autograder --refuse-numeric`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tutor.core.quotient import Watch

ROOT = Path(__file__).resolve().parent.parent
CENTRAL = ("eps = 1e-6\n"
           "p = probs.double()\n"
           "dprobs = ((torch.log(p + eps) - torch.log(p - eps)) / (2 * eps)).float() * dlogprobs\n")



def _watched(code: str, **tensors) -> bool:
    """Whether the watch sees a difference quotient in `code`, run on `tensors`."""
    ns = {"torch": torch, **tensors}
    with Watch() as watch:
        exec(code, ns)  # noqa: S102 - the test's own code
    return watch.found


@pytest.mark.parametrize("code, estimated", [
    ("d = (torch.tanh(x + 1e-5) - torch.tanh(x - 1e-5)) / 2e-5", True),
    ("f = lambda z: z.exp()\nd = (f(x + 1e-6) - f(x)) * 1e6", True),
    ("up = (x + 1e-4).sin()\nd = torch.sub(up, x.sin()).div(1e-4)", True),
    ("d = torch.zeros(8)\nfor i in range(8):\n    p, m = x.clone(), x.clone()\n"
     "    p[i] += 1e-6\n    m[i] -= 1e-6\n"
     "    d[i] = (p.exp().sum().item() - m.exp().sum().item()) / 2e-6", True),
    ("d = (1 - torch.tanh(x) ** 2) * 32", False),  # scaled by a size, nothing cancels
    ("d = (torch.exp(x) - torch.exp(-x)) / 2", False),  # one function twice, far apart
    ("d = (x.softmax(0) - torch.ones(8) / 8) / 8", False),
    ("d = (torch.tanh(x) - torch.tanh(x)) / 1e-6", False),  # nothing left to scale
])
def test_a_difference_quotient_is_recognised_by_what_the_code_does(code, estimated):
    x = torch.linspace(-2, 2, 8, dtype=torch.float64)
    assert _watched(code, x=x) is estimated


@pytest.mark.parametrize("half", ["tune"])
def test_the_corpus_written_apart_from_the_watch(engine, half):
    """Every difference quotient of the corpus is passed and marked; no worked-out answer is."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import corpora

    corpus = corpora.load(f"numeric_corpus_{half}")
    for name, (step, code) in {**corpus.NUMERIC, **corpus.ANALYTIC}.items():
        result = engine.check(step, code)
        assert result.passed, (name, result.checks[0].message if result.checks else result)
        assert result.numeric is (name in corpus.NUMERIC), name


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
