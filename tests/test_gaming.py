"""A verdict no one can game: code that behaves one way when it is graded and another when the
rule probe asks (tutor/core/probe.py) never gets the plain ✓, on either way of isolating
learner code.

Each attempt below writes a right answer (or the loss's derivative worked out by hand) for the
real runs, and does something else only when the arriving gradient looks unlike the one this
network sends, which is exactly when the probe is asking. Whatever it does there (raise, loop,
delete the answer, hand back a non-tensor, another shape, dtype or NaN), the answer to "is it the
line's rule?" is no: the step passes as right for this network, with the rule skipped and a note
naming what happened in the probe. Never an internal error, never the plain ✓.
"""

from __future__ import annotations

import pytest

from tutor.config import Settings
from tutor.values.results import Rule, Status

PATHS = ["fork", "spawn"]
RIGHT = "dprobs = (1.0 / probs) * dlogprobs\n"
# The real gradient at `probs` is 0 off the labels; the probe's is random everywhere.
PROBED = "if bool((dlogprobs != 0).sum() > n):\n"

ATTEMPTS = {
    "raises": (PROBED + "    raise ValueError('not now')\n", "raised ValueError: not now"),
    "loops until the time limit": (PROBED + "    while True:\n        pass\n",
                                   "ran out of time"),
    "deletes the graded name": (PROBED + "    del dprobs\n", "left no `dprobs`"),
    "returns a non-tensor": (PROBED + "    dprobs = 'later'\n", "not a tensor"),
    "returns another shape": (PROBED + "    dprobs = torch.zeros(3, 4)\n", "had shape [3, 4]"),
    "returns another size": (PROBED + "    dprobs = dprobs[:-1]\n", "had shape [31, 27]"),
    "returns another dtype": (PROBED + "    dprobs = dprobs.double()\n", "float64"),
    "returns NaN": (PROBED + "    dprobs = dprobs * float('nan')\n", "NaN"),
    "returns an odd tensor": (PROBED + "    dprobs = dprobs + 0j\n", "complex"),
    "returns the unchanged real answer": (
        PROBED + "    dprobs = torch.zeros_like(probs)\n"
        "    dprobs[range(n), Yb] = -1.0 / (n * probs[range(n), Yb])\n", None),
}


@pytest.fixture(scope="module", params=PATHS)
def gamed(request):
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cpu", isolation=request.param, timeout=4.0))
    engine.prepare()
    yield engine
    engine.close()


@pytest.mark.parametrize("attempt", list(ATTEMPTS))
def test_code_that_behaves_differently_when_probed_skips_the_rule(gamed, attempt):
    code, said = ATTEMPTS[attempt]
    result = gamed.check("atomic/probs", RIGHT + code)
    assert result.error is None, result.error
    assert result.passed, [c.message for c in result.checks]
    assert result.rule is Rule.SKIPPED and result.achievement is Status.SKIPPED
    (row,) = result.checks
    assert row.rule is Rule.SKIPPED and row.mark == "↷"
    assert row.note and "numbers only" not in row.note
    if said is not None:
        assert said in row.note, row.note
        assert "rule probe" in row.note


def test_the_same_code_without_the_switch_follows_the_rule(gamed):
    result = gamed.check("atomic/probs", RIGHT)
    assert result.passed and result.rule is Rule.FOLLOWED
    assert result.achievement in (Status.PASSED, Status.EXACT)
    assert result.checks[0].mark == "✓"


def test_the_loss_derivative_written_in_passes_as_skipped(gamed):
    # Right for every batch this network sees, since the loss sends exactly this gradient; not
    # the chain rule. Never "right for this batch's numbers only".
    code = ("dprobs = torch.zeros_like(probs)\n"
            "dprobs[range(n), Yb] = -1.0 / (n * probs[range(n), Yb])\n")
    result = gamed.check("atomic/probs", code)
    assert result.passed and result.rule is Rule.SKIPPED
    note = result.checks[0].note or ""
    assert "never reads `dlogprobs`" in note and "numbers only" not in note


def test_a_real_run_that_misbehaves_is_wrong(gamed):
    # The same tricks in the real run are ✗: only the probe's answer may be missing.
    for code in ("del dprobs", "dprobs = 'later'", "dprobs = torch.zeros(3, 4)",
                 "dprobs = (1.0 / probs) * dlogprobs\ndprobs = dprobs + 0j"):
        result = gamed.check("atomic/probs", "dprobs = (1.0 / probs) * dlogprobs\n" + code
                             if not code.startswith("dprobs = (") else code)
        assert not result.passed and result.rule is None, code
        assert result.error is None or result.error.kind.value != "internal", code
