"""The search for the smallest change to a learner's code (tutor/core/smallest.py) runs each changed
program in a confined child, on the fork path and the spawn path alike: the worker only makes the
changed sources. A changed program that runs away or takes all memory ends its child, never the
worker, and the verdict still comes, with the plain message."""

from __future__ import annotations

import builtins
import os

import pytest

from tutor.config import Settings
from tutor.core import smallest

PATHS = ["fork", "spawn"]
# A name only the learner's code holds: any code that names it is the learner's, changed or not.
MARK = "mark_of_the_learner"
# Wrong by one function: the search finds `log_softmax` for `softmax`.
LOG_SOFTMAX = (f"{MARK} = 1.0\ndlogits = F.log_softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n"
               "dlogits /= n")
# Harmless as written (the log of 1 is 0); each program the search makes with `exp` for `log`
# runs away, catching the alarm meant to stop it, or asks for terabytes.
RUNS_AWAY = ("while math.log(1.0) > 0:\n    try:\n        x = 1\n    except:\n        pass\n"
             "dlogits = torch.sin(logits) / n\n")
TAKES_ALL_MEMORY = ("junk = torch.ones(int(math.log(1.0)) * 10**12)\n"
                    "dlogits = torch.sin(logits) / n\n")


@pytest.fixture(scope="module")
def engines():
    from tutor.core.engine import Engine

    made = {path: Engine(Settings(device="cpu", isolation=path, timeout=2.0)) for path in PATHS}
    for engine in made.values():
        engine.prepare()
    yield made
    for engine in made.values():
        engine.close()


def _row(result, grad: str):
    return next(c for c in result.checks if c.grad == grad)


@pytest.mark.parametrize("path", PATHS)
def test_changed_programs_never_run_in_the_worker(engines, path, monkeypatch):
    worker = os.getpid()
    seen: list[str] = []
    real_exec, real_eval = builtins.exec, builtins.eval

    def names(code) -> str:
        if isinstance(code, str):
            return code
        found, todo = [], [code]
        while todo:
            c = todo.pop()
            found += [*c.co_names, *c.co_varnames]
            todo += [k for k in c.co_consts if hasattr(k, "co_names")]
        return " ".join(found)

    def watched(real):
        def run(code, *args, **kwargs):
            if os.getpid() == worker and hasattr(code, "co_names") | isinstance(code, str) \
                    and MARK in names(code):
                seen.append(names(code))
            return real(code, *args, **kwargs)
        return run

    # Every way this process could run code: learner code in the worker would pass here.
    monkeypatch.setattr(builtins, "exec", watched(real_exec))
    monkeypatch.setattr(builtins, "eval", watched(real_eval))
    result = engines[path].check("fused/cross_entropy", LOG_SOFTMAX)
    assert result.error is None and not result.passed
    row = _row(result, "dlogits")
    # The search ran (and found the change), in a child: nothing of the learner's ran here.
    assert "`log_softmax`" in row.message, row.message
    assert seen == []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("code", [RUNS_AWAY, TAKES_ALL_MEMORY], ids=["runs-away", "memory"])
def test_a_changed_program_that_runs_away_only_ends_its_child(engines, path, code,
                                                              monkeypatch):
    # Outside the searched subset (a loop, a huge size): searched here all the same, to show
    # that the child, not the subset, is what keeps a changed program from doing harm.
    monkeypatch.setattr(smallest, "searchable", lambda *_a, **_k: True)
    engine = engines[path]
    answers: list[dict] = []
    for kind in engine.kinds.each():
        def recorded(*args, _run=kind.run_variants):
            answers.append(_run(*args))
            return answers[-1]
        monkeypatch.setattr(kind, "run_variants", recorded)
    result = engine.check("fused/cross_entropy", code)
    assert result.error is None and not result.passed
    row = _row(result, "dlogits")
    assert row.message.startswith("dlogits is wrong"), row.message
    # The changed programs did run, in a child that ran out of time (its cost limit, or the
    # tutor's own budget: `short`), ended, or gave nothing for the ones that could not run.
    assert answers
    assert all(a.get("timeout") or a.get("short") or a.get("crashed") is not None
               or any(None in per or not per for per in a.get("variants", []))
               for a in answers), answers
    if code == RUNS_AWAY:
        assert all(a.get("timeout") or a.get("short") or a.get("crashed") is not None
                   for a in answers)
    # The worker goes on: the next check is answered as before.
    right = engine.check("fused/cross_entropy", engine.pack.step("fused/cross_entropy").solution)
    assert right.passed, right
