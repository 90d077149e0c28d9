"""Wrong answers by family, in both lessons: each is refused and named by its mistake.

The families: a wrong index or a permutation of an axis; a reduction over the wrong axis; a
constant or an exponent off; state updated in place that should not be; the order of an
update's operations. Most of these are in no catalogue: their diagnosis is derived from the
step's own solution (tutor/core/derived.py, tutor/core/rewrites.py) or from the state's patterns.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parent.parent
GPT = load_pack(ROOT / "exercises" / "gpt")
MAKEMORE = load_pack()
SPECIFIC = {"derived", "known_mistake", "partial", "scale", "sign", "transpose", "shape"}


def _fn(step: str, old: str, new: str, count: int = 1) -> str:
    source = GPT.step(step).solution
    assert old in source, (step, old)
    return source.replace(old, new, count)


def _sol(pack, step: str, old: str, new: str) -> str:
    source = pack.step(step).solution
    assert old in source, (step, old)
    return source.replace(old, new)


ADAMW = "functions/adamw_update"

# name -> (lesson, step, graded output or tensor (None: the first), code, family, kind)
WRONG = {
    # --- an index or the permutation of an axis ------------------------------------------
    "gpt-loss-wrong-target-index": (
        "gpt", "block/logits", None,
        _sol(GPT, "block/logits", "F.one_hot(targets", "F.one_hot(Xb"), "index", "derived"),
    "gpt-qkv-head-channels-order": (
        "gpt", "block/qkv", None,
        _sol(GPT, "block/qkv", "dq.transpose(1, 2).reshape", "dq.reshape"), "axis", "derived"),
    "gpt-qk-q-for-k": (
        "gpt", "block/qk", "q",
        "dq = dpreatt @ q * head_size**-0.5\ndk = dpreatt.transpose(-2, -1) @ q * head_size**-0.5",
        "index", "derived"),
    "gpt-attention-q-and-k-swapped": (
        "gpt", "functions/attention_backward", "dqkv",
        _fn("functions/attention_backward", "dq[:] = dpreatt @ k", "dq[:] = dpreatt @ q"), "index",
        "derived"),
    "gpt-unmasked-softmax": (
        "gpt", "block/preatt_masked", None,
        "s = F.softmax(preatt, dim=-1)\n"
        "dpreatt_masked = s * (datt - (s * datt).sum(-1, keepdim=True))", "index", "derived"),
    "gpt-preatt-mask-dropped-on-random-upstream": (
        "gpt", "block/preatt", None,
        "dpreatt = dpreatt_masked.masked_fill(causal == 1, 0.0)", "index", "known_mistake"),
    "makemore-embedding-indices-transposed": (
        "makemore", "atomic/C", None,
        "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.T.reshape(-1), demb.view(-1, C.shape[1]))",
        "index", "derived"),
    # --- a reduction over the wrong axis -------------------------------------------------
    "gpt-layernorm-reduced-over-batch": (
        "gpt", "functions/layernorm_backward", "dinp",
        _fn("functions/layernorm_backward", "dnorm.mean(-1, keepdim=True)",
            "dnorm.mean(0, keepdim=True)"), "axis", "derived"),
    "gpt-dwpe-one-batch-row": (
        "gpt", "functions/encoder_backward", "dwpe",
        _fn("functions/encoder_backward", "dwpe = dout.sum(0)", "dwpe = dout[0]"), "axis",
        "derived"),
    "gpt-block-dwpe-one-batch-row": (
        "gpt", "block/wpe", "wpe", "dtok = dx0.clone()\ndwpe = dx0[0]", "axis", "derived"),
    "gpt-x1-mean-over-time": (
        "gpt", "block/x1", None,
        _sol(GPT, "block/x1", "dln2_norm.mean(-1, keepdim=True)",
             "dln2_norm.mean(1, keepdim=True)"),
        "axis", "derived"),
    "gpt-lnfb-summed-over-batch-only": (
        "gpt", "block/lnf_affine", "lnfb",
        "dlnf_norm = dlnf * lnfw\ndlnfw = (dlnf * lnf_norm).sum((0, 1))\ndlnfb = dlnf.sum(0)",
        "axis", "shape"),
    "makemore-batchnorm-sum-over-features": (
        "makemore", "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0) - n / (n - 1) * bnraw"
        " * (dhpreact * bnraw).sum(1, keepdim=True))", "axis", "derived"),
    "makemore-bias-mean-for-sum": (
        "makemore", "atomic/bngain", "bnbias",
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.mean(0, keepdim=True)", "axis", "scale"),
    # --- a constant or an exponent off ---------------------------------------------------
    "gpt-eps-left-out": (
        "gpt", "block/lnf_var", None, "dlnf_var = -0.5 * lnf_var**-1.5 * dlnf_rstd", "constant",
        "derived"),
    "gpt-eps-outside-the-power": (
        "gpt", "block/lnf_var", None, "dlnf_var = -0.5 * (lnf_var**-1.5 + 1e-5) * dlnf_rstd",
        "constant", "derived"),
    "gpt-another-eps": (
        "gpt", "block/lnf_var", None, "dlnf_var = -0.5 * (lnf_var + 1e-8)**-1.5 * dlnf_rstd",
        "constant", "derived"),
    "gpt-unbiased-variance": (
        "gpt", "block/lnf_xc", None, "dlnf_xc += 2 * lnf_xc / (n_embd - 1) * dlnf_var",
        "constant", "known_mistake"),
    "gpt-gelu-near-miss-constant": (
        "gpt", "block/fch", None, GPT.step("block/fch").solution.replace("0.044715", "0.04472"),
        "constant", "derived"),
    "gpt-adamw-t-plus-one": (
        "gpt", ADAMW, "param", _fn(ADAMW, "**t", "**(t + 1)", 2), "constant", "derived"),
    "gpt-adamw-eps-inside-sqrt": (
        "gpt", ADAMW, "param", _fn(ADAMW, "(vhat.sqrt() + eps)", "(vhat + eps).sqrt()"),
        "constant", "derived"),
    "gpt-adamw-one-minus-beta-to-the-t": (
        "gpt", ADAMW, "param",
        _fn(ADAMW, "(1 - beta1**t)", "(1 - beta1)**t").replace("(1 - beta2**t)", "(1 - beta2)**t"),
        "constant", "derived"),
    "gpt-adamw-bias-correction-on-sqrt": (
        "gpt", ADAMW, "param",
        _fn(ADAMW, "vhat = v / (1 - beta2**t)", "vhat = v").replace(
            "vhat.sqrt()", "(vhat.sqrt() / (1 - beta2**t))"), "constant", "derived"),
    "gpt-crossentropy-mean-over-classes": (
        "gpt", "functions/crossentropy_softmax_backward", "dlogits",
        _fn("functions/crossentropy_softmax_backward", "return dlogits / N",
            "return dlogits / V"), "constant", "derived"),
    "makemore-bnvar-other-eps": (
        "makemore", "atomic/bnvar", None, "dbnvar = -0.5 * (bnvar + 1e-4)**-1.5 * dbnvar_inv",
        "constant", "derived"),
    "makemore-counts_sum-twice": (
        "makemore", "atomic/counts_sum", None,
        "dcounts_sum = -2 * counts_sum**-2 * dcounts_sum_inv", "constant", "scale"),
    # --- state updated in place that should not be ---------------------------------------
    "gpt-adamw-v-sqrt-in-place": (
        "gpt", ADAMW, "v",
        _fn(ADAMW, "vhat = v / (1 - beta2**t)", "vhat = v.sqrt_() / (1 - beta2**t)**0.5").replace(
            "vhat.sqrt()", "vhat"), "state", "derived"),
    "gpt-adamw-m-corrected-in-place": (
        "gpt", ADAMW, "m",
        _fn(ADAMW, "mhat = m / (1 - beta1**t)", "m /= 1 - beta1**t\n    mhat = m"),
        "state", "known_mistake"),
    "gpt-adamw-v-scaled-in-place": (
        "gpt", ADAMW, "v",
        _fn(ADAMW, "vhat = v / (1 - beta2**t)", "v /= 1 - beta2**t\n    vhat = v"),
        "state", "derived"),
    # --- the order of an update's operations ---------------------------------------------
    "gpt-adamw-v-decayed-after-the-gradient": (
        "gpt", ADAMW, "v",
        _fn(ADAMW, "    v *= beta2\n    v += (1 - beta2) * grad**2\n",
            "    v += (1 - beta2) * grad**2\n    v *= beta2\n"), "order", "derived"),
    "gpt-adamw-m-decayed-after-the-gradient": (
        "gpt", ADAMW, "m",
        _fn(ADAMW, "    m *= beta1\n    m += (1 - beta1) * grad\n",
            "    m += (1 - beta1) * grad\n    m *= beta1\n"), "order", "derived"),
}

CASES = [pytest.param(*v, id=k) for k, v in WRONG.items()]


@pytest.fixture(scope="module")
def engines(engine):
    from tutor.core.engine import Engine

    gpt = Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / "gpt")))
    yield {"makemore": engine, "gpt": gpt}
    gpt.close()


def _graded(result: dict, tensor: str | None) -> dict:
    checks = result["checks"]
    if tensor is None:
        return checks[0]
    return next(c for c in checks if tensor in (c["tensor"], c["grad"]))


@pytest.mark.parametrize("lesson, step_id, tensor, code, family, kind", CASES)
def test_a_wrong_answer_is_named(engines, lesson, step_id, tensor, code, family, kind):
    result = engines[lesson].check(step_id, code).to_dict()
    assert result["error"] is None, result["error"]
    assert not result["passed"]
    check = _graded(result, tensor)
    assert check["diagnosis"] is not None, check["message"]
    assert check["diagnosis"]["kind"] == kind, check["diagnosis"]


def test_every_family_is_covered():
    assert {v[4] for v in WRONG.values()} == {"index", "axis", "constant", "state", "order"}
    assert {v[0] for v in WRONG.values()} == {"gpt", "makemore"}


# --- messages that used to mislead ------------------------------------------------------------


def test_a_tenth_of_the_step_is_not_an_unchanged_param(engines):
    code = WRONG["gpt-adamw-bias-correction-on-sqrt"][3]
    message = _graded(engines["gpt"].check(ADAMW, code).to_dict(), "param")["message"]
    assert "exactly as it was passed in" not in message
    assert "square root" in message


def test_weight_decay_after_the_step_blames_no_size(engines):
    code = _fn(ADAMW, "    param *= 1 - lr * weight_decay\n", "") + \
        "    param *= 1 - lr * weight_decay\n"
    result = engines["gpt"].check(ADAMW, code).to_dict()
    assert not result["passed"]
    message = result["heldout"]["message"]
    assert "no size is to blame" in message
    assert "use a size of the lesson" not in message
    assert "order" in message


def test_a_hard_coded_size_is_still_blamed_on_the_size(engines):
    code = _fn("functions/crossentropy_softmax_backward", "return dlogits / N",
               "return dlogits / 64")
    result = engines["gpt"].check("functions/crossentropy_softmax_backward", code).to_dict()
    assert not result["passed"]
    assert "size of the lesson" in result["heldout"]["message"]


def test_bias_summed_over_batch_only_names_what_is_left(engines):
    code = WRONG["gpt-lnfb-summed-over-batch-only"][3]
    message = _graded(engines["gpt"].check("block/lnf_affine", code).to_dict(), "lnfb")["message"]
    assert "[16]" in message and "every dimension" in message
    assert "(the batch) in the forward pass: sum over it" not in message


def test_a_factor_two_without_a_square_says_nothing_of_squares(engines):
    code = WRONG["makemore-counts_sum-twice"][3]
    message = _graded(engines["makemore"].check("atomic/counts_sum",
                                                code).to_dict(), None)["message"]
    assert "2 times" in message
    assert "square" not in message


def test_a_catalogued_mistake_that_is_nan_is_recognised(engines):
    # Catalogued at atomic/counts_sum (its value is NaN: a power of a negative number).
    from tutor.core import diagnosis as dx
    from tutor.pack.model import Mistake

    nan = float("nan")
    import torch

    value = torch.tensor([[1.0, nan], [2.0, 3.0]])
    mistake = Mistake(code="", kind="known_mistake", message="catalogued", tensor=None)
    found = dx.value_diagnosis("x", value, torch.ones(2, 2), 2, None,
                               [(mistake, lambda: value.clone())])
    assert found is not None
    assert found.to_dict() == {"kind": "known_mistake", "message": "catalogued"}
    other = torch.tensor([[nan, 1.0], [2.0, 3.0]])
    found = dx.value_diagnosis("x", value, torch.ones(2, 2), 2, None,
                               [(mistake, lambda: other)])
    assert found is not None and found.kind == "nan"


def test_an_approximate_false_row_under_a_pass_says_why(engines):
    code = "dh = dlogits @ W2.T\ndW2 = (dlogits.T @ h).T\ndb2 = dlogits.sum(0)\ncmp('dW2', dW2, W2)"
    result = engines["makemore"].check("atomic/h", code).to_dict()
    assert result["passed"]
    w2 = _graded(result, "W2")
    if not w2["approximate"]:
        assert "tighter than float32 rounding" in w2["note"]
        assert "tighter than float32 rounding" in result["stdout"]


def test_every_accepted_row_with_approximate_false_carries_its_why():
    import torch

    from tutor.core.grading import grade

    # autograd's float32 result is 1.5e-8 off the float64 gradient, the answer as much on the
    # other side: as close as autograd, yet 3e-8 from its result, outside allclose's 2e-8.
    ref64 = torch.full((3, 3), 1e-3, dtype=torch.float64)
    g = grade("x", (ref64 - 1.5e-8).float(), (ref64 + 1.5e-8).float(), ref64)
    assert g.accepted and not g.approximate
    assert "tighter than float32 rounding" in g.note


def test_a_fresh_batch_blames_the_size_only_where_one_is_written(engines):
    engine = engines["makemore"]
    sized = engine.check("atomic/probs", "dprobs = (1.0 / probs) * dlogprobs * 32 / n").to_dict()
    assert "batch size written in" in sized["heldout"]["message"]
    from tutor.core.kinds.lines import writes_the_batch_size as _writes_the_batch_size

    assert _writes_the_batch_size("x = 1 / 32", 32, {})
    assert _writes_the_batch_size("x = y * 31", 32, {})
    assert not _writes_the_batch_size("x = y / n + 0.5", 32, {"n_hidden": 64})
