"""Whether two tensors are the same to rounding, as the diagnoses compare a learner's value with
what a slip or a formula gives: a nan or an inf in either is an answer too, never a crash."""

from __future__ import annotations

import torch

from tutor.core.diagnosis import close


def test_values_close_to_rounding_are_the_same():
    a = torch.tensor([1.0, 2.0, -3.0])
    assert close(a, a * (1 + 1e-6)) and not close(a, a * 1.01)
    assert not close(a, a[:2])


def test_a_nan_or_an_inf_in_either_value_is_compared_not_raised():
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([1.0, 2.0])
    assert not close(a, torch.tensor([1.0, nan])) and not close(torch.tensor([1.0, nan]), a)
    assert not close(torch.tensor([nan, nan]), torch.tensor([nan, nan]))
    masked = torch.tensor([1.0, -inf])
    assert close(masked, masked.clone()) and not close(torch.tensor([1.0, 5.0]), masked)
    assert not close(torch.tensor([2.0, -inf]), masked)
