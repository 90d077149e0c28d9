"""Wrong answers, mostly ones the catalogue does not list: each fails with the diagnosis it earns.

Every answer here is wrong in one tensor only and the other gradients of its step are right. The
kinds come from the catalogue where it applies, from the generic diagnoses (sign, scale, partial,
shape, nan) and otherwise from `tutor.core.derived`, which compares the answer with rewrites of the
step's own solution ("derived"), and reads per-row factors ("scale") or missing entries
("partial") off the numbers.
"""

from __future__ import annotations

import re
import time

import pytest
import torch

from tutor.core import derived
from tutor.pack.model import load_pack

PACK = load_pack()

# (step, graded tensor or None for the step's first, code, expected diagnosis kind)
WRONG: dict[str, tuple[str, str | None, str, str]] = {
    # --- the loss --------------------------------------------------------------------------
    "logprobs-bessel-divisor": (
        "atomic/logprobs", None,
        "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0 / (n - 1)",
        "scale",
    ),
    "logprobs-loop-stops-early": (
        "atomic/logprobs", None,
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "for i in range(n - 1):\n    dlogprobs[i, Yb[i]] = -1.0 / n",
        "partial",
    ),
    "logprobs-divides-by-vocab": (
        "atomic/logprobs", None,
        "dlogprobs = torch.zeros((n, vocab_size))\ndlogprobs[range(n), Yb] = -1.0 / vocab_size",
        "scale",
    ),
    # --- probs, counts -----------------------------------------------------------------------
    "probs-log-in-place-of-input": (
        "atomic/probs", None, "dprobs = dlogprobs / logprobs", "derived",
    ),
    "probs-extra-row-factor": (
        "atomic/probs", None, "dprobs = (1.0 / probs) * dlogprobs * counts_sum", "scale",
    ),
    "probs-summed-over-batch": (
        "atomic/probs", None, "dprobs = (dlogprobs / probs).sum(0)", "shape",
    ),
    "counts-first-branch-own-factor": (
        "atomic/counts_sum_inv", "counts",
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\ndcounts = counts * dprobs",
        "derived",
    ),
    "counts_sum_inv-probs-for-counts": (
        "atomic/counts_sum_inv", None,
        "dcounts_sum_inv = (probs * dprobs).sum(1, keepdim=True)\n"
        "dcounts = counts_sum_inv * dprobs",
        "derived",
    ),
    "counts-first-branch-sum-not-inverse": (
        "atomic/counts_sum_inv", "counts",
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\ndcounts = counts_sum * dprobs",
        "derived",
    ),
    "counts_sum-times-n": (
        "atomic/counts_sum", None, "dcounts_sum = -counts_sum**-2 * dcounts_sum_inv * n", "scale",
    ),
    "counts_sum-inverse-for-input": (
        "atomic/counts_sum", None, "dcounts_sum = -counts_sum_inv**-2 * dcounts_sum_inv",
        "derived",
    ),
    "counts_sum-exponent-off": (
        "atomic/counts_sum", None, "dcounts_sum = -counts_sum**-3 * dcounts_sum_inv", "derived",
    ),
    "counts_sum-divides-by-zero": (
        "atomic/counts_sum", None,
        "dcounts_sum = dcounts_sum_inv / (counts_sum - counts_sum)", "nan",
    ),
    "counts-wrong-gradient-added": ("atomic/counts", None, "dcounts += dcounts_sum_inv", "derived"),
    "counts-branch-subtracted": ("atomic/counts", None, "dcounts -= dcounts_sum", "derived"),
    "counts-first-branch-overwritten": (
        "atomic/counts", None, "dcounts = dcounts_sum.repeat(1, vocab_size)", "partial",
    ),
    # --- exp, max ----------------------------------------------------------------------------
    "norm_logits-exp-twice": (
        "atomic/norm_logits", None, "dnorm_logits = counts.exp() * dcounts", "derived",
    ),
    "norm_logits-torch-exp-twice": (
        "atomic/norm_logits", None, "dnorm_logits = torch.exp(counts) * dcounts", "derived",
    ),
    "norm_logits-gradient-of-the-sum": (
        "atomic/norm_logits", None, "dnorm_logits = counts * dcounts_sum", "derived",
    ),
    "norm_logits-probs-for-counts": (
        "atomic/norm_logits", None, "dnorm_logits = probs * dcounts", "derived",
    ),
    "logits-first-branch-negated": (
        "atomic/logit_maxes", "logits",
        "dlogits = -dnorm_logits.clone()\ndlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
        "sign",
    ),
    "logits-first-branch-wrong-gradient": (
        "atomic/logit_maxes", "logits",
        "dlogits = dcounts.clone()\ndlogit_maxes = (-dnorm_logits).sum(1, keepdim=True)",
        "derived",
    ),
    "logits-tensor-for-its-gradient": (
        "atomic/logits", None,
        "dlogits += F.one_hot(logits.max(1).indices, 27) * logit_maxes", "derived",
    ),
    # --- the second linear layer -------------------------------------------------------------
    "W2-preactivation-for-h": (
        "atomic/h", "W2",
        "dh = dlogits @ W2.T\ndW2 = hpreact.T @ dlogits\ndb2 = dlogits.sum(0)", "derived",
    ),
    "b2-averaged": (
        "atomic/h", "b2", "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0) / n",
        "scale",
    ),
    "W2-times-n": (
        "atomic/h", "W2", "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits * n\ndb2 = dlogits.sum(0)",
        "scale",
    ),
    "b2-column": (
        "atomic/h", "b2",
        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0, keepdim=True).T",
        "shape",
    ),
    "h-from-dprobs": (
        "atomic/h", "h", "dh = dprobs @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)",
        "derived",
    ),
    # --- tanh --------------------------------------------------------------------------------
    "hpreact-tanh-twice": (
        "atomic/hpreact", None, "dhpreact = (1 - torch.tanh(h)**2) * dh", "derived",
    ),
    "hpreact-upstream-only": ("atomic/hpreact", None, "dhpreact = dh", "derived"),
    "hpreact-cube": ("atomic/hpreact", None, "dhpreact = (1 - h**3) * dh", "derived"),
    "hpreact-plus-square": ("atomic/hpreact", None, "dhpreact = (1 + h**2) * dh", "derived"),
    "hpreact-over-n": ("atomic/hpreact", None, "dhpreact = (1 - h**2) * dh / n", "scale"),
    "hpreact-extra-leading-dim": (
        "atomic/hpreact", None, "dhpreact = ((1 - h**2) * dh)[None]", "shape",
    ),
    # --- gain and bias -----------------------------------------------------------------------
    "bngain-preactivation-for-bnraw": (
        "atomic/bngain", "bngain",
        "dbngain = (hpreact * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)",
        "derived",
    ),
    "bnbias-averaged": (
        "atomic/bngain", "bnbias",
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.mean(0, keepdim=True)",
        "scale",
    ),
    "bnraw-gradient-of-h": (
        "atomic/bngain", "bnraw",
        "dbngain = (bnraw * dhpreact).sum(0, keepdim=True)\ndbnraw = bngain * dh\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)",
        "derived",
    ),
    "bngain-local-derivative-missing": (
        "atomic/bngain", "bngain",
        "dbngain = dhpreact.sum(0, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)",
        "derived",
    ),
    "bngain-summed-over-features": (
        "atomic/bngain", "bngain",
        "dbngain = (bnraw * dhpreact).sum(1, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0)",
        "shape",
    ),
    "bnraw-extra-column-factor": (
        "atomic/bngain", "bnraw",
        "dbngain = (bnraw * dhpreact).sum(0)\ndbnraw = bngain * dhpreact * bnvar_inv\n"
        "dbnbias = dhpreact.sum(0)",
        "scale",
    ),
    # --- normalisation -----------------------------------------------------------------------
    "bndiff-variance-for-its-inverse": (
        "atomic/bnvar_inv", "bndiff",
        "dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)\ndbndiff = bnvar * dbnraw",
        "derived",
    ),
    "bnvar_inv-bnraw-for-bndiff": (
        "atomic/bnvar_inv", None,
        "dbnvar_inv = (bnraw * dbnraw).sum(0, keepdim=True)\ndbndiff = bnvar_inv * dbnraw",
        "derived",
    ),
    "bnvar_inv-averaged": (
        "atomic/bnvar_inv", None,
        "dbnvar_inv = (bndiff * dbnraw).mean(0, keepdim=True)\ndbndiff = bnvar_inv * dbnraw",
        "scale",
    ),
    "bnvar_inv-sliced": (
        "atomic/bnvar_inv", None,
        "dbnvar_inv = (bndiff * dbnraw).sum(0)[:32]\ndbndiff = bnvar_inv * dbnraw", "shape",
    ),
    "bnvar-exponent-off": (
        "atomic/bnvar", None, "dbnvar = -0.5 * (bnvar + 1e-5)**-2.5 * dbnvar_inv", "derived",
    ),
    "bnvar-epsilon-dropped": (
        "atomic/bnvar", None, "dbnvar = -0.5 * bnvar**-1.5 * dbnvar_inv", "derived",
    ),
    "bnvar-inverse-for-variance": (
        "atomic/bnvar", None, "dbnvar = -0.5 * (bnvar_inv + 1e-5)**-1.5 * dbnvar_inv", "derived",
    ),
    "bnvar-exponent-as-factor": (
        "atomic/bnvar", None, "dbnvar = -1.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv", "scale",
    ),
    "bndiff2-wrong-gradient": (
        "atomic/bndiff2", None,
        "dbndiff2 = 1.0 / (n - 1) * torch.ones_like(bndiff2) * dbnvar_inv", "derived",
    ),
    "bndiff2-row-without-factor": ("atomic/bndiff2", None, "dbndiff2 = dbnvar", "shape"),
    "bndiff2-no-divisor": (
        "atomic/bndiff2", None, "dbndiff2 = torch.ones_like(bndiff2) * dbnvar", "scale",
    ),
    "bndiff-square-for-input": (
        "atomic/bndiff", None, "dbndiff += 2 * bndiff2 * dbndiff2", "derived",
    ),
    "bndiff-branch-subtracted": (
        "atomic/bndiff", None, "dbndiff -= 2 * bndiff * dbndiff2", "derived",
    ),
    "bndiff-bnraw-for-bndiff": (
        "atomic/bndiff", None, "dbndiff += 2 * bnraw * dbndiff2", "derived",
    ),
    # --- the mean ----------------------------------------------------------------------------
    "bnmeani-summed-over-features": (
        "atomic/bnmeani", None,
        "dhprebn = dbndiff.clone()\ndbnmeani = (-dbndiff).sum(1, keepdim=True)", "shape",
    ),
    "bnmeani-wrong-gradient": (
        "atomic/bnmeani", None,
        "dhprebn = dbndiff.clone()\ndbnmeani = (-dbnraw).sum(0, keepdim=True)", "derived",
    ),
    "hprebn-first-branch-negated": (
        "atomic/bnmeani", "hprebn",
        "dhprebn = -dbndiff.clone()\ndbnmeani = (-dbndiff).sum(0, keepdim=True)", "sign",
    ),
    "bnmeani-lecture-shape-divided": (
        "atomic/bnmeani", None,
        "dhprebn = dbndiff.clone()\ndbnmeani = (-dbndiff).sum(0) / n", "scale",
    ),
    "hprebn-mean-weight-missing": ("atomic/hprebn", None, "dhprebn += dbnmeani", "scale"),
    "hprebn-variance-gradient": ("atomic/hprebn", None, "dhprebn += dbnvar / n", "derived"),
    "hprebn-branch-subtracted": ("atomic/hprebn", None, "dhprebn -= dbnmeani / n", "derived"),
    "hprebn-first-branch-overwritten": (
        "atomic/hprebn", None, "dhprebn = dbnmeani.expand(n, -1) / n", "partial",
    ),
    # --- the first linear layer and the embedding ----------------------------------------------
    "W1-gradient-of-hpreact": (
        "atomic/embcat", "W1",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhpreact\ndb1 = dhprebn.sum(0)", "derived",
    ),
    "embcat-gradient-of-hpreact": (
        "atomic/embcat", "embcat",
        "dembcat = dhpreact @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)", "derived",
    ),
    "b1-summed-over-features": (
        "atomic/embcat", "b1",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(1)", "shape",
    ),
    "embcat-over-n": (
        "atomic/embcat", "embcat",
        "dembcat = dhprebn @ W1.T / n\ndW1 = embcat.T @ dhprebn\ndb1 = dhprebn.sum(0)", "scale",
    ),
    "W1-gradient-of-bndiff": (
        "atomic/embcat", "W1",
        "dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dbndiff\ndb1 = dhprebn.sum(0)", "derived",
    ),
    "emb-permuted-regrouping": (
        "atomic/emb", None, "demb = dembcat.view(n, n_embd, block_size).permute(0, 2, 1)",
        "known_mistake",
    ),
    "emb-times-context": (
        "atomic/emb", None, "demb = dembcat.view(n, block_size, n_embd) * 3", "scale",
    ),
    "C-loop-skips-last-example": (
        "atomic/C", None,
        "dC = torch.zeros_like(C)\nfor k in range(Xb.shape[0] - 1):\n"
        "    for j in range(Xb.shape[1]):\n        dC[Xb[k, j]] += demb[k, j]",
        "partial",
    ),
    "C-embedding-for-its-gradient": (
        "atomic/C", None,
        "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), emb.view(-1, n_embd))",
        "derived",
    ),
    "C-loop-assigns": (
        "atomic/C", None,
        "dC = torch.zeros_like(C)\nfor k in range(n):\n    for j in range(block_size):\n"
        "        dC[Xb[k, j]] = demb[k, j]",
        "known_mistake",
    ),
    "C-loop-skips-last-position": (
        "atomic/C", None,
        "dC = torch.zeros_like(C)\nfor k in range(n):\n    for j in range(block_size - 1):\n"
        "        dC[Xb[k, j]] += demb[k, j]",
        "partial",
    ),
    # --- cross-entropy in one go --------------------------------------------------------------
    "cross-entropy-probs-times-n": ("fused/cross_entropy", None, "dlogits = probs * n", "derived"),
    "cross-entropy-adds-one": (
        "fused/cross_entropy", None,
        "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] += 1\ndlogits /= n", "derived",
    ),
    "cross-entropy-bessel": (
        "fused/cross_entropy", None,
        "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= (n - 1)", "scale",
    ),
    "cross-entropy-first-row-cleared": (
        "fused/cross_entropy", None,
        "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"
        "dlogits[0] = 0",
        "partial",
    ),
    "cross-entropy-row-factor": (
        "fused/cross_entropy", None,
        "dlogits = (probs - F.one_hot(Yb, vocab_size)) / n * counts_sum", "scale",
    ),
    "cross-entropy-n-squared": (
        "fused/cross_entropy", None,
        "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, vocab_size)) * n", "scale",
    ),
    "cross-entropy-subtracts-two": (
        "fused/cross_entropy", None,
        "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 2\ndlogits /= n", "derived",
    ),
    # --- batchnorm in one go ------------------------------------------------------------------
    "batchnorm-bndiff-for-bnraw": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
        " - n / (n - 1) * bndiff * (dhpreact * bnraw).sum(0))",
        "derived",
    ),
    "batchnorm-fraction-upside-down": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
        " - (n - 1) / n * bnraw * (dhpreact * bnraw).sum(0))",
        "derived",
    ),
    "batchnorm-inverse-std-twice": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
        " - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0)) * bnvar_inv",
        "scale",
    ),
    "batchnorm-variance-for-inverse-std": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar / n * (n * dhpreact - dhpreact.sum(0)"
        " - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))",
        "derived",
    ),
    "batchnorm-mean-term-sign": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact + dhpreact.sum(0)"
        " - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0))",
        "derived",
    ),
    "batchnorm-bndiff-inside-sum": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
        " - n / (n - 1) * bnraw * (dhpreact * bndiff).sum(0))",
        "derived",
    ),
    "batchnorm-bnraw-missing-inside-sum": (
        "fused/batchnorm", None,
        "dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0)"
        " - n / (n - 1) * bnraw * dhpreact.sum(0))",
        "derived",
    ),
}

CASES = [pytest.param(*case, id=name) for name, case in WRONG.items()]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _graded(result: dict, step_id: str, tensor: str | None) -> dict:
    assert result["error"] is None, result["error"]
    name = tensor or PACK.step(step_id).checks[0]
    return next(c for c in result["checks"] if c["tensor"] == name)


def test_the_corpus_is_big_enough():
    assert len(WRONG) >= 60
    assert {s for s, *_ in WRONG.values()} >= {
        s.id for s in PACK.gradient_steps if s.exercise in (1, 2, 3)
    }


@pytest.mark.parametrize("step_id, tensor, code, kind", CASES)
def test_wrong_answer_is_refused_and_diagnosed(engine, step_id, tensor, code, kind):
    result = engine.check(step_id, code).to_dict()
    check = _graded(result, step_id, tensor)
    assert not result["passed"]
    assert check["verdict"] in ("wrong", "shape"), check
    assert check["diagnosis"] is not None, check["message"]
    assert check["diagnosis"]["kind"] == kind, check["diagnosis"]
    # The mistake is in one tensor: the rest of the step is right.
    others = [c for c in result["checks"] if c is not check]
    assert all(c["verdict"] in ("exact", "approximate") for c in others), others
    # A diagnosis teaches; it does not hand over the step's solution.
    assert _squash(PACK.step(step_id).solution) not in _squash(check["diagnosis"]["message"])


@pytest.mark.parametrize(
    "name, words",
    [
        pytest.param("hpreact-tanh-twice", ["`h`", "torch.tanh(h)", "already"], id="tanh-twice"),
        pytest.param("bndiff-variance-for-its-inverse", ["`bnvar`", "`bnvar_inv`"],
                     id="wrong-operand"),
        pytest.param("batchnorm-bndiff-for-bnraw", ["`bndiff`", "`bnraw`"],
                     id="wrong-three-term-batchnorm"),
        pytest.param("cross-entropy-probs-times-n", ["`Yb`", "n²"], id="probs-times-n"),
        pytest.param("hpreact-upstream-only", ["local derivative", "`dh`"], id="no-local"),
        pytest.param("probs-extra-row-factor", ["row", "`counts_sum`"], id="row-factor"),
        pytest.param("cross-entropy-subtracts-two", ["Yb", "2 where 1 is needed"],
                     id="subset-of-entries"),
    ],
)
def test_derived_messages_say_what_matches(engine, name, words):
    step_id, tensor, code, _ = WRONG[name]
    message = _graded(engine.check(step_id,
                                   code).to_dict(), step_id, tensor)["diagnosis"]["message"]
    for word in words:
        assert word in message, (word, message)


def test_catalogue_first_then_derived(engine):
    # Catalogued at atomic/bndiff (written out of place there): the catalogue's message wins.
    check = _graded(engine.check("atomic/bndiff",
                                 "dbndiff += 2 * bndiff").to_dict(), "atomic/bndiff", None)
    assert check["diagnosis"]["kind"] == "known_mistake"
    # Not catalogued at atomic/bnvar_inv: the local derivative without dbnraw is derived.
    check = _graded(
        engine.check("atomic/bnvar_inv",
                     "dbnvar_inv = bndiff.sum(0, keepdim=True)\ndbndiff = bnvar_inv * dbnraw"
                     ).to_dict(),
        "atomic/bnvar_inv", None,
    )
    assert check["diagnosis"]["kind"] == "derived"
    assert "local derivative" in check["diagnosis"]["message"]
    assert "`dbnraw`" in check["diagnosis"]["message"]


def _fused_batchnorm_namespace(engine) -> tuple:
    """What learner code sees at fused/batchnorm: the forward pass and the given dhpreact."""
    step = PACK.step("fused/batchnorm")
    batch = engine.network.main
    before = {**batch.namespace(), "dhpreact": batch.given[(step.id, "hpreact")]}
    return step, batch, before


def test_a_right_answer_is_never_explained_away(engine):
    # derived.explain only speaks when a rewrite fits the answer much better than the truth.
    step, batch, before = _fused_batchnorm_namespace(engine)
    ref = batch.reference[(step.id, "hprebn")]
    assert derived.explain(PACK, step, "hprebn", ref.clone(), ref, before, batch.n) is None
    assert derived.explain(PACK, step, "hprebn", ref * (1 + 1e-6), ref, before, batch.n) is None


@pytest.mark.serial
def test_derived_is_quick(engine):
    # Only wrong answers pay for it, and not much: the biggest step, with nothing cached.
    step, batch, before = _fused_batchnorm_namespace(engine)
    ref = batch.reference[(step.id, "hprebn")]
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(0))
    derived._VALUES.clear()
    started = time.perf_counter()
    assert derived.explain(PACK, step, "hprebn", noise, ref, before, batch.n) is None
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize(
    "first_step, first_code, step_id, code",
    [
        pytest.param(
            "atomic/counts_sum_inv",
            "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
            "dcounts = counts_sum_inv * dprobs - counts_sum**-2 * dcounts_sum_inv",
            "atomic/counts", "dcounts += torch.ones_like(counts) * dcounts_sum",
            id="dcounts",
        ),
        pytest.param(
            "atomic/bnmeani",
            "dbnmeani = (-dbndiff).sum(0, keepdim=True)\ndhprebn = dbndiff + dbnmeani / n",
            "atomic/hprebn", "dhprebn += dbnmeani / n",
            id="dhprebn",
        ),
    ],
)
def test_a_branch_added_to_an_already_complete_gradient(engine, first_step, first_code,
                                                         step_id, code):
    # Both branches typed at the first step are accepted there; adding the second branch again
    # at the closing step counts it twice, and the diagnosis says so.
    check = _graded(engine.check(step_id, code, {first_step: first_code}).to_dict(), step_id, None)
    assert check["verdict"] == "wrong"
    assert check["diagnosis"]["kind"] == "derived"
    assert "twice" in check["diagnosis"]["message"]


def _namespace_before(engine, step_id: str) -> dict:
    """The forward pass plus the reference gradients of the earlier steps, as plain tensors."""
    import math

    import torch.nn.functional as F

    step = PACK.step(step_id)
    batch = engine.network.main
    ns = {**batch.namespace(), "torch": torch, "F": F, "math": math}
    for name in step.given:
        ns[f"d{name}"] = batch.given[(step.id, name)].clone()
    if step.replay:
        for earlier in PACK.gradient_steps:
            if earlier.id == step.id:
                break
            if earlier.exercise == step.exercise:
                exec(earlier.solution, ns)  # trusted pack code
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in ns.items()
            if isinstance(v, (torch.Tensor, int))}


@pytest.mark.parametrize("step_id", ["atomic/counts", "atomic/C", "atomic/logits",
                                     "fused/cross_entropy", "atomic/bndiff"])
def test_derived_leaves_the_namespace_alone(engine, step_id):
    # Rewrites of solutions that update in place (`+=`, `[...] -= 1`, `index_add_`) run on
    # copies: the learner's tensors must come out exactly as they went in.
    step = PACK.step(step_id)
    before = _namespace_before(engine, step_id)
    kept = {k: v.clone() for k, v in before.items() if isinstance(v, torch.Tensor)}
    ref = engine.network.main.reference[(step_id, step.checks[0])]
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    derived._VALUES.clear()
    derived.explain(PACK, step, step.checks[0], noise, ref, before, engine.network.main.n)
    for name, value in kept.items():
        assert torch.equal(before[name], value), name
