"""Each check starts from the same state, whatever was checked before it: a submission graded
after another student's gets the verdict it gets graded alone, on either path."""

import pytest
import torch

from tutor.config import Settings
from tutor.core.engine import Engine

# A slip whose size is drawn at random: its maxdiff shows which numbers it drew.
NOISY = "dprobs = dlogprobs / probs * (1 + 1e-3 * torch.randn(()))\n"
RIGHT = "dprobs = dlogprobs / probs\n"


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_random_draws_do_not_depend_on_what_was_checked_before(isolation):
    engine = Engine(Settings(device="cpu", isolation=isolation))
    try:
        alone = engine.check("atomic/probs", NOISY)
        # Another student's checks, and whatever the worker itself drew in between.
        for code in (RIGHT, NOISY, "dprobs = torch.randn_like(probs)\n"):
            engine.check("atomic/probs", code)
        torch.randn(1000)
        after = engine.check("atomic/probs", NOISY)
    finally:
        engine.close()
    assert not alone.passed and alone.checks[0].maxdiff > 0
    assert after.checks[0].maxdiff == alone.checks[0].maxdiff
    assert after.checks[0].message == alone.checks[0].message
