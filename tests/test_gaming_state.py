"""No check starts from state an earlier cell of the learner can still reach, and a probe that
cannot run is never a plain pass.

An earlier step's accepted code keeps a reference to a tensor the next check starts from (a
function's default argument, a closure, a list that also holds a generator and so is shared as it
is) and the next step's code changes that tensor in place through it. The rule probe must still
start from the tutor's own copy; and whatever stops a probe from running, a step that has one
either follows the line's rule or does not (↷): `rule` is None only for steps without a probe.
"""

from __future__ import annotations

import pytest

from tutor.config import Settings
from tutor.pack.model import load_pack
from tutor.values.results import Rule

PACK = load_pack()
LOGPROBS = PACK.step("atomic/logprobs").solution
# The loss's derivative worked out by hand: right values for this network, not the line's rule.
BY_HAND = ("dprobs = torch.zeros_like(probs)\n"
           "dprobs[range(n), Yb] = -1.0 / (n * probs[range(n), Yb])\n")

KEEPERS = {
    "default argument": "def keep(t=dlogprobs):\n    return t\n",
    "closure": "def make(t):\n    def keep():\n        return t\n    return keep\n"
               "keep = make(dlogprobs)\n",
    "list with a generator": "held = [dlogprobs, (i for i in range(3))]\n"
                             "def keep():\n    return held[0]\n",
}
CHANGES = {
    "unsqueeze_": "keep().unsqueeze_(0)\n",
    "t_": "keep().t_()\n",
    "zero_": "keep().zero_()\n",
    "mul_": "keep().mul_(-3.0)\n",
}


@pytest.fixture(scope="module", params=["fork", "spawn"])
def engine(request):
    from tutor.core.engine import Engine

    engine = Engine(Settings(device="cpu", isolation=request.param, timeout=5.0))
    yield engine
    engine.close()


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("keeper", list(KEEPERS))
def test_a_tensor_changed_through_an_earlier_reference_does_not_silence_the_probe(
        engine, keeper, change):
    prior = {"atomic/logprobs": LOGPROBS + KEEPERS[keeper]}
    result = engine.check("atomic/probs", CHANGES[change] + BY_HAND, prior)
    assert result.error is None, result.error
    assert result.passed, [c.message for c in result.checks]
    assert result.rule is Rule.SKIPPED, (result.rule, [c.note for c in result.checks])
    (row,) = result.checks
    assert row.rule is Rule.SKIPPED and row.mark == "↷"


@pytest.mark.parametrize("keeper", list(KEEPERS))
def test_the_lines_rule_still_passes_with_an_earlier_reference_changed(engine, keeper):
    prior = {"atomic/logprobs": LOGPROBS + KEEPERS[keeper]}
    right = "keep().unsqueeze_(0)\ndprobs = (1.0 / probs) * dlogprobs\n"
    result = engine.check("atomic/probs", right, prior)
    assert result.passed and result.rule is Rule.FOLLOWED, [c.note for c in result.checks]


@pytest.mark.parametrize("lesson", ["makemore", "gpt", "lstm"])
def test_rule_none_only_where_the_step_has_no_probe(lesson):
    from pathlib import Path

    from tutor.core.engine import Engine
    from tutor.core.probe import spec_for

    root = Path(__file__).resolve().parent.parent
    pack = "makemore" if lesson == "makemore" else str(root / "exercises" / lesson)
    engine = Engine(Settings(device="cpu", pack=pack, timeout=10.0))
    try:
        for step in engine.pack.gradient_steps:
            earlier = engine.kinds.of(step).earlier(step) if hasattr(
                engine.kinds.of(step), "earlier") else []
            has_probe = spec_for(engine.pack, step, earlier, 0, code=step.solution) is not None
            result = engine.check(step.id, step.solution)
            assert result.passed, step.id
            assert (result.rule is not None) == has_probe, (step.id, result.rule)
    finally:
        engine.close()
