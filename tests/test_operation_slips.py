"""Slips of operations named wherever the operation occurs (tutor/core/slips.py): a constant
factor inverted, a product's or a convolution's sum taken as a mean, a sum's gradient split
among its terms, an embedding's repeats averaged, a softmax's backward without its normaliser,
a max-pool's gradient sent to one fixed place of each window or read transposed, a dilated
convolution's gradient with the dilation given as a stride or its taps read at another dilation
from the same padding.

They are checked on lessons the slip corpora were not written on: the lessons `pack new` makes
of tests/packs/forward/attention.py and pool_relu.py, and the conv lesson's other layers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tutor.authoring.new import make
from tutor.config import Settings
from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "tests" / "packs" / "forward"


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from tutor.core.engine import Engine

    made: dict[str, Engine] = {}

    def get(name: str) -> Engine:
        if name not in made:
            if name == "conv":
                pack = load_pack(ROOT / "exercises" / "conv")
            else:
                folder = tmp_path_factory.mktemp(name) / name
                make(FORWARD / f"{name}.py", folder)
                pack = load_pack(folder)
            made[name] = Engine(Settings(device="cpu"), pack=pack)
        return made[name]

    yield get
    for engine in made.values():
        engine.close()


def _said(engine, step_id: str, code: str, tensor: str) -> str:
    result = engine.check(step_id, code)
    assert result.error is None, result.error
    assert not result.passed
    row = next(c for c in result.checks if c.tensor == tensor)
    assert row.diagnosis is not None, row.message
    return row.message


def _step(engine, line: str):
    pack = engine.pack
    return next(s for s in pack.gradient_steps if s.lines[0] == line)


def test_a_constant_factor_the_other_way_round_is_named(engines):
    engine = engines("attention")
    step = _step(engine, "scores")
    code = step.solution + "dq = dq * C\n"  # C ** 0.5 where C ** -0.5 belongs: C times off
    said = _said(engine, step.id, code, "q")
    assert "inverted" in said and "C ** (-0.5)" in said


def test_a_weight_s_gradient_divided_by_the_rows_is_named(engines):
    engine = engines("attention")
    step = _step(engine, "q")
    code = step.solution + "dWq = dWq / (x.shape[0] * x.shape[1])\n"
    said = _said(engine, step.id, code, "Wq")
    assert "every row of `x`" in said and "not a mean" in said


def test_a_sum_s_gradient_split_between_its_terms_is_named(engines):
    engine = engines("attention")
    step = _step(engine, "r")
    code = step.solution + "dy = dy / 2\n"
    said = _said(engine, step.id, code, "y")
    assert "half" in said and "`r = x + y`" in said


def test_an_embedding_s_repeats_averaged_is_named(engines):
    engine = engines("attention")
    step = _step(engine, "x")
    index = step.solution.split("index_add_(0, ")[1].split(".view")[0]
    code = step.solution + (f"dwte = dwte / torch.bincount({index}.flatten(), "
                            "minlength=wte.shape[0]).clamp(min=1)[:, None]\n")
    said = _said(engine, step.id, code, "wte")
    assert "how many times" in said and "not an average" in said


def test_a_softmax_s_backward_without_its_normaliser_is_named(engines):
    engine = engines("attention")
    step = _step(engine, "att")
    code = ("e = masked.exp()\n"
            "dmasked = e * (datt - (e * datt).sum(-1, keepdim=True))\n")
    said = _said(engine, step.id, code, "masked")
    assert "`exp(masked)`" in said


@pytest.mark.parametrize("rows, cols, words", [
    ("1::2", "1::2", "bottom-right"),
    ("1::2", "::2", "position (1, 0)"),
])
def test_a_pool_s_gradient_sent_to_one_place_of_every_window_is_named(engines, rows, cols,
                                                                       words):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = f"dh = torch.zeros_like(h)\ndh[:, :, {rows}, {cols}] = dpooled\n"
    said = _said(engine, step.id, code, "h")
    assert words in said and "same position in every window" in said


def test_a_pool_s_arriving_gradient_transposed_is_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = step.solution.replace("max_unpool2d(dpooled", "max_unpool2d(dpooled.transpose(2, 3)")
    assert code != step.solution
    said = _said(engine, step.id, code, "h")
    assert "window (j, i)" in said and "transposed" in said


def test_a_convolution_s_kernel_gradient_divided_by_the_batch_is_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "hpre")
    code = step.solution + "dK = dK / Xb.shape[0]\n"
    said = _said(engine, step.id, code, "K")
    assert "the batch" in said and "not a mean" in said


def test_a_dilation_given_as_a_stride_is_named(engines):
    engine = engines("conv")
    step = _step(engine, "h2pre")
    code = step.solution.replace(
        "F.conv1d(F.pad(dh2pre, (0, 2)), w2.transpose(0, 1).flip(2), dilation=2)",
        "F.conv_transpose1d(dh2pre, w2, stride=2)[:, :, :h1.shape[-1]]")
    assert code != step.solution
    said = _said(engine, step.id, code, "h1")
    assert "stride" in said and "dilation 2" in said


def test_taps_read_next_to_each_other_from_the_dilated_padding_are_named(engines):
    engine = engines("conv")
    step = _step(engine, "h2pre")
    code = step.solution.replace("unfold(2, 3, 1)[..., ::2]", "unfold(2, 2, 1)")
    code = code.replace("F.pad(h1, (2, 0))", "F.pad(h1, (2, 0))[:, :, :-1]")
    assert code != step.solution
    said = _said(engine, step.id, code, "w2")
    assert "next to each other (dilation 1)" in said and "for dilation 2" in said


def test_a_pool_s_windows_made_by_a_plain_reshape_are_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = ("rows = h.reshape(*h.shape[:2], -1, 4)\n"
            "dh = (F.one_hot(rows.argmax(-1), 4) * dpooled.reshape(*h.shape[:2], -1, 1))"
            ".reshape(h.shape)\n")
    said = _said(engine, step.id, code, "h")
    assert "4 entries in a row" in said and "2x2 squares" in said


def test_a_weight_s_gradient_from_one_example_only_is_named(engines):
    # The product sums every example's share into dWout; one example's share alone is what a
    # loop that assigns where it must add leaves.
    engine = engines("attention")
    step = _step(engine, "logits")
    code = step.solution + "dWout = pooled[-1:].T @ dlogits[-1:]\n"
    said = _said(engine, step.id, code, "Wout")
    assert "the last of the" in said and "examples of the batch" in said and "+=" in said


def test_a_bias_gradient_averaged_over_positions_is_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "hpre")
    code = step.solution + "dkb = dkb / (hpre.shape[2] * hpre.shape[3])\n"
    said = _said(engine, step.id, code, "kb")
    assert "divided by 64" in said and "positions along axis 2" in said and "not a mean" in said


def test_a_pool_s_window_gradients_tiled_are_named(engines):
    # `tile` repeats the whole map of window gradients; each belongs in its own 2x2 block.
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = ("_, idx = F.max_pool2d(h, 2, return_indices=True)\n"
            "hot = torch.zeros_like(h).flatten(2).scatter(2, idx.flatten(2), 1.0).view_as(h)\n"
            "dh = dpooled.tile((1, 1, 2, 2)) * hot\n")
    said = _said(engine, step.id, code, "h")
    assert "tile" in said and "repeat_interleave" in said


def test_a_pool_s_winner_with_row_and_column_swapped_is_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = ("H, W = h.shape[-2:]\n"
            "win = h.reshape(*h.shape[:2], H // 2, 2, W // 2, 2).permute(0, 1, 2, 4, 3, 5)\n"
            "k = win.reshape(*win.shape[:4], 4).argmax(-1)\n"
            "row = torch.arange(H // 2).view(-1, 1) * 2 + k % 2\n"
            "col = torch.arange(W // 2).view(1, -1) * 2 + k // 2\n"
            "dh = torch.zeros_like(h).flatten(2).scatter(2, (row * W + col).flatten(2),"
            " dpooled.flatten(2)).view_as(h)\n")
    said = _said(engine, step.id, code, "h")
    assert "row and column swapped" in said and "right window" in said


def test_a_pool_s_windows_spread_across_the_map_are_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = ("H, W = h.shape[-2:]\n"
            "_, idx = F.max_pool2d(h, 2, stride=1, dilation=(H // 2, W // 2),"
            " return_indices=True)\n"
            "dh = torch.zeros_like(h).flatten(2).scatter_add(2, idx.flatten(2),"
            " dpooled.flatten(2)).view_as(h)\n")
    said = _said(engine, step.id, code, "h")
    assert "dilated window" in said and "block of neighbours" in said


@pytest.mark.parametrize("lesson", ["pool_relu", "attention"])
def test_a_cross_entropy_s_softmax_along_another_dim_is_named(engines, lesson):
    # The rule (softmax less the one-hot target, over the count) with the softmax taken over
    # the batch: what a helper softmax with the wrong dim gives.
    engine = engines(lesson)
    step = _step(engine, "loss")
    code = ("p = F.softmax(logits, dim=0)\n"
            "p[range(p.shape[0]), Yb] -= 1\n"
            "dlogits = p / p.shape[0]\n")
    said = _said(engine, step.id, code, "logits")
    assert "softmax along dim 0" in said and "along the classes, dim 1" in said


def test_a_broadcast_tensor_summed_over_its_own_axis_too_is_named(engines):
    # The convolution's bias is copied over the batch and every position, not the channels.
    engine = engines("pool_relu")
    step = _step(engine, "hpre")
    code = step.solution + "dkb = dhpre.sum().expand_as(kb).clone()\n"
    said = _said(engine, step.id, code, "kb")
    assert "an axis `kb` has entries of its own" in said


def test_right_numbers_reversed_or_laid_out_by_a_reshape_are_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "flat")
    flipped = step.solution + "dpooled = dpooled.flip(1)\n"
    said = _said(engine, step.id, flipped, "pooled")
    assert "reversed along dim 1" in said
    mixed = step.solution + ("dpooled = dflat.reshape(pooled.shape[1], pooled.shape[0], "
                             "*pooled.shape[2:]).transpose(0, 1)\n")
    said = _said(engine, step.id, mixed, "pooled")
    assert "laid out as if" in said and "then permute or transpose" in said


@pytest.mark.slow
@pytest.mark.parametrize("line, weight, unpaired", [
    ("v", "Wv", "torch.einsum('btc,bse->ce', x, dv)"),  # positions given two letters
    ("y", "v", "torch.einsum('bts,bue->bse', att, dy)"),  # query positions two letters
])
def test_a_product_s_contraction_split_between_its_operands_is_named(engines, line, weight,
                                                                     unpaired):
    """An einsum that gives a contracted axis a letter on each operand adds each up apart and
    multiplies the sums: named on any product, weight or activation."""
    engine = engines("attention")
    step = _step(engine, line)
    said = _said(engine, step.id, step.solution + f"d{weight} = {unpaired}\n", weight)
    assert "each on its own" in said and "pairs with" in said


@pytest.mark.slow
def test_two_gradients_that_traded_places_are_named(engines):
    engine = engines("attention")
    step = _step(engine, "scores")
    said = _said(engine, step.id, step.solution + "dq, dk = dk, dq\n", "q")
    assert "traded places" in said and "`dk`" in said


@pytest.mark.slow
def test_a_cross_entropy_from_the_log_probabilities_is_named(engines):
    engine = engines("attention")
    step = next(s for s in engine.pack.gradient_steps if "logits" in s.checks)
    code = ("dlogits = F.log_softmax(logits, 1)\ndlogits[range(logits.shape[0]), Yb] -= 1\n"
            "dlogits /= logits.shape[0]\n")
    assert "log-probabilities" in _said(engine, step.id, code, "logits")


@pytest.mark.slow
@pytest.mark.parametrize("step_id, code", [
    ("conv/h2pre", "dh2pre = (1 - torch.tanh(h2pre - b2[:, None]) ** 2) * dh2\n"),
    ("conv/h3pre", "dh3pre = (1 - torch.tanh(h3pre - b3[:, None]) ** 2) * dh3\n"),
])
def test_a_slope_taken_without_the_layer_s_bias_is_named(engines, step_id, code):
    """The activation's input recomputed without the bias the layer before it adds: named on
    every layer of a lesson the slip corpora were not written on."""
    said = _said(engines("conv"), step_id, code, step_id.split("/")[1])
    assert "without `b" in said and "bias" in said


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ["conv", "attention"])
def test_a_one_hot_of_the_inputs_for_the_targets_is_named(engines, lesson):
    """The cross-entropy's one-hot built from the context's last character, taken for what
    comes next: named on any lesson whose loss reads targets beside a matrix of inputs."""
    engine = engines(lesson)
    step = next(s for s in engine.pack.gradient_steps if "logits" in s.checks)
    code = ("p = F.softmax(logits, dim=1)\n"
            "p[range(p.shape[0]), Xb[:, -1]] -= 1\n"
            "dlogits = p / p.shape[0]\n")
    said = _said(engine, step.id, code, "logits")
    assert "wrong indices" in said and "last column" in said


@pytest.mark.slow
def test_a_softmax_s_backward_fed_the_scores_under_its_mask_is_named(engines):
    """The masked input holds -inf, so the scores a line earlier are fed to the softmax's
    backward instead of its output."""
    engine = engines("attention")
    step = _step(engine, "att")
    code = "dmasked = scores * (datt - (scores * datt).sum(-1, keepdim=True))\n"
    said = _said(engine, step.id, code, "masked")
    assert "`scores`" in said and "softmax's output belongs" in said


@pytest.mark.slow
def test_a_kernel_flipped_over_its_channels_is_named_on_another_lesson_s_convolution(engines):
    """`.flip(0, 1)` on the kernel where no flip (a transposed convolution) or the taps' flip
    belongs: named on a 1-d dilated convolution, the slip corpora having met it on a 2-d one."""
    engine = engines("conv")
    step = engine.pack.step("conv/h2")
    code = step.solution + ("dh2 = F.conv_transpose1d(dh3pre, w3.flip(0, 1), dilation=4)"
                            "[:, :, 4:]\n")
    assert "channel axes" in _said(engine, step.id, code, "h2")


@pytest.mark.slow
@pytest.mark.parametrize("lesson", ["conv", "attention"])
def test_a_cross_entropy_from_unnormalised_exponentials_is_named(engines, lesson):
    engine = engines(lesson)
    step = next(s for s in engine.pack.gradient_steps if "logits" in s.checks)
    code = ("p = logits.exp()\n"
            "p[range(p.shape[0]), Yb] -= 1\n"
            "dlogits = p / p.shape[0]\n")
    assert "divides each row by its sum" in _said(engine, step.id, code, "logits")


@pytest.mark.slow
@pytest.mark.parametrize("lesson, line, code, tensor", [
    # a weight's gradient from the activations laid out by a reshape, not transposed
    ("attention", "v", "dWv = x.reshape(x.shape[-1], -1) @ dv.reshape(-1, dv.shape[-1])\n",
     "Wv"),
    # an activation's gradient through a weight viewed to the transposed shape
    ("pool_relu", "logits", "dflat = dlogits @ W.view(W.shape[1], W.shape[0])\n", "flat"),
])
def test_a_reshape_where_a_transpose_belongs_is_named_on_any_product(engines, lesson, line,
                                                                     code, tensor):
    engine = engines(lesson)
    step = _step(engine, line)
    said = _said(engine, step.id, step.solution + code, tensor)
    assert "reshape" in said and "scrambled" in said


@pytest.mark.slow
def test_a_gradient_of_nothing_but_zeros_and_ones_is_called_a_comparison(engines):
    # `dh * hpre > 0`: the comparison takes in the product (`*` binds first)
    engine = engines("pool_relu")
    step = _step(engine, "h")
    said = _said(engine, step.id, "dhpre = dh * hpre > 0\ndhpre = dhpre.float()\n", "hpre")
    # Named by the numbers (a gradient of 0s and 1s) or by the change that regroups the line.
    assert ("only 0s and 1s" in said or "compares the whole" in said) and "parentheses" in said


@pytest.mark.slow
def test_a_pool_s_gradient_at_the_whole_map_s_largest_entry_only_is_named(engines):
    engine = engines("pool_relu")
    step = _step(engine, "pooled")
    code = ("up = dpooled.repeat_interleave(2, 2).repeat_interleave(2, 3)\n"
            "pos = torch.arange(h.shape[2] * h.shape[3]).view(h.shape[2], h.shape[3])\n"
            "dh = up * (pos == h.flatten(2).argmax(-1, keepdim=True).unsqueeze(-1))\n")
    assert "whole map's largest" in _said(engine, step.id, code, "h")


def _by_id(engine, step_id: str):
    return next(s for s in engine.pack.gradient_steps if s.id.endswith("/" + step_id))


def test_a_weight_gradient_from_sums_is_named(engines):
    """The rows of both operands added up before one outer product: the product of sums."""
    engine = engines("pool_relu")
    step = _by_id(engine, "flat")
    code = step.solution + "dW = torch.outer(flat.sum(0), dlogits.sum(0))\n"
    said = _said(engine, step.id, code, "W")
    assert "outer product of two sums" in said and "not the product of sums" in said


def test_a_gradient_that_cancels_to_rounding_noise_is_said_as_seen(engines):
    """A key's gradient summed over positions adds up to nothing (each row of a softmax's
    input gradient does): the message says what it saw, not a cause it cannot tell apart."""
    engine = engines("attention")
    step = _by_id(engine, "Wk")
    code = "dx += dk @ Wk.T\ndWk = torch.outer(x.sum((0, 1)), dk.sum((0, 1)))\n"
    said = _said(engine, step.id, code, "Wk")
    assert "rounding noise" in said


@pytest.mark.parametrize("code, words", [
    ("s = att\n"
     "dmasked = s * datt - (s * s).sum(-1, keepdim=True) * datt.sum(-1, keepdim=True)\n",
     ["inner product", "outer product"]),
    ("dmasked = datt.clone()\n", ["handed straight through"]),
    ("dmasked = datt.masked_fill(torch.isinf(masked), 0.0)\n", ["handed straight through"]),
])
def test_a_softmax_s_jacobian_slips_are_named(engines, code, words):
    engine = engines("attention")
    said = _said(engine, _by_id(engine, "masked").id, code, "masked")
    for word in words:
        assert word in said, said


@pytest.mark.parametrize("lesson", ["attention", "pool_relu"])
@pytest.mark.parametrize("inner, words", [
    (False, ["with respect to the probabilities", "never taken"]),
    (True, ["inner product", "outer product"]),
])
def test_a_cross_entropy_stopped_at_its_probabilities_is_named(engines, lesson, inner, words):
    engine = engines(lesson)
    code = ("p = F.softmax(logits, 1)\n"
            "N = p.shape[0]\n"
            "g = torch.zeros_like(p)\n"
            "g[range(N), Yb] = -1 / (N * p[range(N), Yb])\n"
            + ("dlogits = p * g - (p * p).sum(1, keepdim=True) * g.sum(1, keepdim=True)\n"
               if inner else "dlogits = g\n"))
    said = _said(engine, _by_id(engine, "logits").id, code, "logits")
    for word in words:
        assert word in said, said


def test_a_tensor_s_branches_averaged_are_named(engines):
    engine = engines("attention")
    step = _by_id(engine, "x")
    said = _said(engine, step.id, step.solution + "dx = dx / 4\n", "x")
    assert "mean of its 4 branches" in said and "not an average" in said


def test_a_convolution_s_bias_given_half_is_named(engines):
    engine = engines("pool_relu")
    step = _by_id(engine, "K")
    said = _said(engine, step.id, step.solution + "dkb = dkb / 2\n", "kb")
    assert "half of what the bias" in said


@pytest.mark.parametrize("lesson", ["attention", "pool_relu"])
@pytest.mark.parametrize("line, words", [
    ("q = p.argmax(1)\np = F.softmax(logits, 1)\np[range(N), q] -= 1\n", ["own prediction"]),
    ("p = F.softmax(logits, 1)\np[:, Yb] -= 1\n", ["some row's target"]),
    ("p = F.softmax(logits, 1)\ng = torch.zeros_like(p)\ng[range(N), Yb] = -1 / (N * "
     "p[range(N), Yb])\np = p * (1 - p) * g * N\n", ["diagonal", "sigmoid"]),
    ("p = torch.sigmoid(logits)\np[range(N), Yb] -= 1\n", ["elementwise sigmoid"]),
    ("p = F.softmax(logits, 1)\np[range(N), Yb] = -1\n", ["`p - 1`, not `-1`"]),
    ("p = F.softmax(logits, 1)\np[Yb] -= 1\n", ["picks whole rows"]),
    ("s = F.softmax(logits, 1)\ng = torch.zeros_like(s)\ng[range(N), Yb] = -1 / (N * "
     "s[range(N), Yb])\np = (g - (s * g).sum(1, keepdim=True)) * N\n", ["without the probab"]),
    ("s = F.softmax(logits, 1)\ng = torch.zeros_like(s)\ng[range(N), Yb] = -s[range(N), Yb] "
     "/ N\np = s * (g - (s * g).sum(1, keepdim=True)) * N\n", ["as `-p`"]),
])
def test_a_cross_entropy_s_target_and_jacobian_slips_are_named(engines, lesson, line, words):
    engine = engines(lesson)
    code = "N = logits.shape[0]\np = logits\n" + line + "dlogits = p / N\n"
    said = _said(engine, _by_id(engine, "logits").id, code, "logits")
    for word in words:
        assert word in said, said


def test_a_weight_s_share_of_one_example_left_out_is_named(engines):
    """A loop over the batch that starts one late: every example's share but the first."""
    engine = engines("pool_relu")
    step = _by_id(engine, "flat")
    code = (step.solution + "dW = torch.zeros_like(W)\n"
            "for i in range(1, flat.shape[0]):\n"
            "    dW += torch.outer(flat[i], dlogits[i])\n")
    said = _said(engine, step.id, code, "W")
    assert "leaves out the share of the first" in said and "range(1, n)" in said


def test_a_gradient_right_but_at_one_end_of_an_axis_is_said_as_seen(engines):
    engine = engines("pool_relu")
    step = _by_id(engine, "pooled")
    code = step.solution + "dpooled = dpooled.clone()\ndpooled[:, -1] = 0\n"
    said = _said(engine, step.id, code, "pooled")
    assert "right everywhere but at the last" in said and "holds nothing" in said


def test_a_floor_division_is_named(engines):
    engine = engines("pool_relu")
    code = ("N = logits.shape[0]\n"
            "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, logits.shape[1])) // N\n")
    said = _said(engine, _by_id(engine, "logits").id, code, "logits")
    assert "floor division" in said


@pytest.mark.parametrize("mode", ["replicate", "reflect"])
def test_a_convolution_s_padding_taken_in_another_mode_is_named(engines, mode):
    engine = engines("pool_relu")
    step = _by_id(engine, "K")
    # The kernel's gradient as the input's windows against the arriving gradient, the input
    # padded in another mode.
    code = (f"padded = F.pad(Xb, (1, 1, 1, 1), mode={mode!r})\n"
            "dK = F.conv2d(padded.transpose(0, 1), dhpre.transpose(0, 1)).transpose(0, 1)\n"
            "dkb = dhpre.sum((0, 2, 3))\n")
    said = _said(engine, step.id, code, "K")
    assert f"{mode} padding" in said and "zeros" in said


def test_a_relu_s_step_taken_as_the_input_clamped_is_named(engines):
    engine = engines("pool_relu")
    step = _by_id(engine, "hpre")
    said = _said(engine, step.id, "dhpre = dh * hpre.clamp(0, 1)\n", "hpre")
    assert "clamped into [0, 1]" in said


def test_a_gradient_kept_in_whole_numbers_is_named(engines):
    engine = engines("pool_relu")
    step = _by_id(engine, "flat")
    code = step.solution + "db = torch.tensor([0] * db.shape[0])\nfor i in range(db.shape[0]):\n" \
                           "    db[i] = dlogits[:, i].sum()\n"
    said = _said(engine, step.id, code, "b")
    assert "whole numbers (torch.int64)" in said


def test_a_cross_entropy_s_row_term_unweighted_is_named(engines):
    engine = engines("pool_relu")
    code = ("p = F.softmax(logits, 1)\nN = p.shape[0]\ng = torch.zeros_like(p)\n"
            "g[range(N), Yb] = -1 / (N * p[range(N), Yb])\n"
            "dlogits = p * (g - g.sum(1, keepdim=True))\n")
    said = _said(engine, _by_id(engine, "logits").id, code, "logits")
    assert "weighted by the probabilities" in said


@pytest.mark.parametrize("code, words", [
    ("dwte = torch.zeros_like(wte)\n"
     "dwte.index_add_(0, torch.arange(X.shape[1]).repeat(X.shape[0]), dx.reshape(-1, C))\n",
     ["numbered by the position"]),
    ("dwte = dx.sum((0, 1)).expand_as(wte).clone()\n", ["same total"]),
])
def test_an_embedding_s_rows_by_position_or_one_total_are_named(engines, code, words):
    engine = engines("attention")
    step = _by_id(engine, "wte")
    said = _said(engine, step.id, code.replace("X.", "Xb."), "wte")
    for word in words:
        assert word in said, said


def test_a_kernel_transposed_where_it_is_flipped_is_named(engines):
    engine = engines("slips_cnn2d")
    step = _by_id(engine, "img")
    code = ("dimg = F.conv_transpose2d(dhpre, K.transpose(-2, -1).flip(-2, -1), padding=1)\n"
            "dK = torch.zeros_like(K)\ndkb = torch.zeros_like(kb)\n")
    said = _said(engine, step.id, code, "img")
    assert "tap axes swapped" in said


def test_a_factor_that_is_one_of_the_lesson_s_sizes_is_named_by_it(engines):
    # n_chan is 4 in this lesson: a gradient divided by it once too often says which count.
    engine = engines("pool_relu")
    step = _step(engine, "loss")
    said = _said(engine, step.id, step.solution + "dlogits = dlogits / n_chan\n", "logits")
    assert "1/4, the size `n_chan`" in said and "too many" in said
    said = _said(engine, step.id, step.solution + "dlogits = dlogits * n_chan\n", "logits")
    assert "that is 4, the size `n_chan`" in said


def test_a_loop_over_flattened_rows_one_short_is_named(engines):
    # The rows of `x` flattened over batch and time, a loop that stops before the last one.
    engine = engines("attention")
    step = _step(engine, "q")
    code = step.solution + (
        "xs, gs = x.reshape(-1, C), dq.reshape(-1, C)\n"
        "dWq = torch.zeros_like(Wq)\n"
        "for r in range(xs.shape[0] - 1):\n"
        "    dWq += xs[r:r + 1].T @ gs[r:r + 1]\n")
    said = _said(engine, step.id, code, "Wq")
    assert "leaves out the share of the last of the" in said and "leading axes flattened" in said


def test_a_pool_s_gradient_given_to_every_tied_entry_is_named(engines):
    # Windows whose four entries tie at 1: a mask that compares each entry with its window's
    # max marks all four, and each gets the window's whole gradient.
    import torch

    from tutor.core import slips

    pack = engines("pool_relu").pack
    h = torch.rand(2, 1, 4, 4)
    h[:, :, :2, :2] = 1.0
    h.requires_grad_()
    up = torch.randn(2, 1, 2, 2)
    (ref,) = torch.autograd.grad(torch.nn.functional.max_pool2d(h, 2), h, up)
    mask = h == torch.nn.functional.max_pool2d(h, 2).repeat_interleave(2, -2).repeat_interleave(
        2, -1)
    value = mask.float() * up.repeat_interleave(2, -2).repeat_interleave(2, -1)
    prepared = slips._Prepared([], {}, {}, [pack.line_for("pooled")], loss=pack.loss)
    found = slips._ties(prepared, "h", value, ref, {"h": h.detach(), "dpooled": up})
    assert found is not None and "tied for the largest" in found.message
    assert "every one of the tied entries" in found.message
