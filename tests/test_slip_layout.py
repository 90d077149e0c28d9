"""A reshape's gradient put back in another order of axes is named as that, on any lesson
whose line reshapes a tensor (tutor/core/slips.py, `_unflattened_in_another_order`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tutor.authoring.new import make
from tutor.config import Settings
from tutor.pack.model import load_pack

FORWARD = Path(__file__).parent / "packs" / "forward" / "slips_cnn2d.py"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from tutor.core.engine import Engine

    folder = tmp_path_factory.mktemp("layout") / "cnn"
    make(FORWARD, folder)
    engine = Engine(Settings(device="cpu"), pack=load_pack(folder))
    yield engine
    engine.close()


def _step(engine, op: str):
    pack = engine.pack
    return next(s for s in pack.gradient_steps if op in pack.line_for(s.lines[0]).source)


@pytest.mark.parametrize("order", ["0, 2, 3, 1", "0, 3, 1, 2"])
def test_a_flatten_undone_in_another_order_is_named(engine, order):
    step = _step(engine, ".flatten(1)")
    x = step.checks[0]
    shape = list(engine.network.main.values[x].shape)
    axes = [int(i) for i in order.split(", ")]
    seen = [shape[i] for i in axes]
    back = [axes.index(i) for i in range(len(shape))]  # puts each axis back where it was
    code = (f"d{x} = d{step.lines[0]}.view({', '.join(map(str, seen))})"
            f".permute({', '.join(map(str, back))})\n")
    result = engine.check(step.id, code)
    assert not result.passed
    message = result.checks[0].diagnosis.message
    assert "laid out as if" in message and "no axis moved" in message


def test_the_right_reshape_back_passes(engine):
    step = _step(engine, ".flatten(1)")
    x = step.checks[0]
    assert engine.check(step.id, f"d{x} = d{step.lines[0]}.view({x}.shape)\n").passed


def test_a_row_sum_put_back_on_the_wrong_axis_is_named(tmp_path):
    """A softmax's row sums restored with `.unsqueeze(1)` where `keepdim=True` keeps them: the
    same shape on a square attention map, the wrong broadcast."""
    from tutor.core.engine import Engine

    make(FORWARD.parent / "attention.py", tmp_path / "att")
    pack = load_pack(tmp_path / "att")
    step = next(s for s in pack.gradient_steps if "F.softmax" in pack.line_for(s.lines[0]).source)
    assert ".sum(-1, keepdim=True)" in step.solution
    wrong = step.solution.replace(".sum(-1, keepdim=True)", ".sum(-1).unsqueeze(1)")
    engine = Engine(Settings(device="cpu"), pack=pack)
    try:
        result = engine.check(step.id, wrong)
    finally:
        engine.close()
    assert not result.passed
    assert "put back with `.unsqueeze(1)`" in result.checks[0].diagnosis.message


def test_sizes_in_another_order_are_not_called_a_missing_dimension():
    # [1, 8, 3, 3] for [8, 1, 3, 3]: the same sizes, moved; no dimension is missing.
    import torch

    from tutor.core.diagnosis import explain_shape, guessed, permuted

    said = explain_shape("K", [1, 8, 3, 3], [8, 1, 3, 3])
    assert "another order (dims 0, 1)" in said and "missing" not in said
    assert guessed(said)  # the shapes alone: a layout found from the values may say more
    ref = torch.randn(8, 2, 3)
    assert permuted(ref.permute(2, 0, 1), ref) == (2, 0, 1)
    assert permuted(ref.permute(2, 0, 1).contiguous().view(2, 3, 8), ref) is None
