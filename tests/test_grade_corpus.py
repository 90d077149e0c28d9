"""Learners' notebooks graded as they wrote them: the tune half of the corpus
(tests/notebook_corpus_tune.py, each step's truth measured by running the notebook as a kernel
runs it) must lose at most two right steps, credit no wrong one and give no right step a
diagnosis. The held-out half is only measured, by benchmarks/grade_corpus.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import notebook_corpus_tune as corpus
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_tune_corpus_is_graded_as_its_learners_wrote_it(tmp_path):
    lost, credited, blamed = [], [], []
    for case in corpus.CASES:
        path = corpus.write(case, tmp_path)
        done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade",
                               "--json", "--train-steps", "100", str(path)], capture_output=True,
                              text=True, timeout=900, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        steps = {s["id"]: s for s in json.loads(done.stdout)["steps"]}
        lost += [(case["name"], s) for s in case["right"]
                 if steps[s]["score"] < steps[s]["max_score"]]
        credited += [(case["name"], s, steps[s]["message"]) for s in case["wrong"]
                     if steps[s]["score"] > 0]
        blamed += [(case["name"], s, steps[s]["message"]) for s in case["right"]
                   if steps[s]["status"] == "failed"]
    assert not credited, credited
    assert not blamed, blamed
    assert len(lost) <= 2, lost
