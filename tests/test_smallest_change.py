"""Wrong answers written as learners write them, named by the smallest change to their own code
(tutor/core/smallest.py) or by a sum over the wrong dims, and messages that are true of the code.

For each family, examples from both lessons: a constant inside one term, a function or an axis
of a fused formula, an operand of a run of in-place updates, a wrong-axis sum that only shows as
a shape. Every message must name the mistake and leave the answer out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from tutor.config import Settings
from tutor.core import smallest
from tutor.core.diagnosis import wrong_axis
from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parent.parent
GPT = load_pack(ROOT / "exercises" / "gpt")
MAKEMORE = load_pack()
ADAMW = "functions/adamw_update"

ADAMW_V_FROM_M = """def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param *= 1 - lr * weight_decay
    m *= beta1
    m += (1 - beta1) * grad
    v *= beta2
    v += (1 - beta2) * m**2
    mhat = m / (1 - beta1**t)
    vhat = v / (1 - beta2**t)
    param -= lr * mhat / (vhat.sqrt() + eps)
"""
ADAMW_MHAT_FROM_V = """def adamw_update(param, grad, m, v, t, lr, beta1, beta2, eps, weight_decay):
    param.mul_(1 - lr * weight_decay)
    m.mul_(beta1).add_((1 - beta1) * grad)
    v.mul_(beta2).add_((1 - beta2) * grad * grad)
    mhat = v / (1 - beta1**t)
    vhat = v / (1 - beta2**t)
    param -= lr * mhat / (vhat.sqrt() + eps)
"""

# name -> (lesson, step, graded tensor or output, code, words the message must hold)
WRONG = {
    # a constant inside one term or branch
    "mm-second-branch-over-27": (
        "makemore", "atomic/counts", "counts",
        "dcounts += torch.ones_like(counts) * dcounts_sum / 27", ["27", "is a sum"]),
    "mm-cross-entropy-minus-two": (
        "makemore", "fused/cross_entropy", "logits",
        "p = F.softmax(logits, 1)\np[range(n), Yb] -= 2\ndlogits = p / n",
        ["constant factor", "2 where 1 is needed"]),
    "gpt-layernorm-over-n-times-t": (
        "gpt", "block/x1", "x1",
        "g = dln2_norm\nproj = (g * ln2_norm).mean(-1, keepdim=True)\n"
        "dx1 += ln2_rstd * (g - g.sum(-1, keepdim=True) / (n * block_size) - ln2_norm * proj)",
        ["constant factor", "64 where 32"]),
    "gpt-gelu-root-of-two-pi": (
        "gpt", "block/fch", "fch",
        "k = math.sqrt(2 * math.pi)\nu = k * (fch + 0.044715 * fch**3)\nth = torch.tanh(u)\n"
        "dfch = (0.5 * (1 + th) + 0.5 * fch * (1 - th**2) * k * (1 + 3 * 0.044715 * fch**2))"
        " * dfch_gelu",
        ["`math.sqrt(2 * math.pi)`", "2.507 where 0.7979"]),
    # a function or an axis inside a fused formula
    "mm-cross-entropy-log-softmax": (
        "makemore", "fused/cross_entropy", "logits",
        "dlogits = F.log_softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n",
        ["`log_softmax`", "wrong function"]),
    "mm-cross-entropy-softmax-over-the-batch": (
        "makemore", "fused/cross_entropy", "logits",
        "probs_again = F.softmax(logits, dim=0)\nprobs_again[range(n), Yb] -= 1\n"
        "dlogits = probs_again / n",
        ["dimension"]),
    "gpt-logits-log-softmax": (
        "gpt", "block/logits", "logits",
        "dlogits = (F.log_softmax(logits, -1) - F.one_hot(targets, vocab_size).float())"
        " / (n * block_size)",
        ["`log_softmax`", "wrong function"]),
    "gpt-layernorm-projection-summed": (
        "gpt", "block/x0", "x0",
        "dx0 += ln1_rstd * (dln1_norm - dln1_norm.mean(-1, keepdim=True) - ln1_norm * "
        "(dln1_norm * ln1_norm).sum(-1, keepdim=True))",
        ["`sum`"]),
    # an operand of a run of in-place updates
    "gpt-adamw-v-from-new-m": ("gpt", ADAMW, "v", ADAMW_V_FROM_M, ["`m`", "line 6"]),
    "gpt-adamw-mhat-from-v": ("gpt", ADAMW, "param", ADAMW_MHAT_FROM_V, ["`v`", "line 5"]),
    "mm-bn-gain-reads-the-wrong-gradient": (
        "makemore", "fused/batchnorm", "hprebn",
        "g = dhpreact\nsx = g.sum(0)\n"
        "dhprebn = bngain * bnvar_inv / n * (n * g - sx - n / (n - 1) * bnraw * "
        "(hpreact * bnraw).sum(0))",
        ["`hpreact`"]),
    "gpt-centred-input-read-from-the-residual": (
        "gpt", "block/lnf_xc", "lnf_xc", "dlnf_xc += 2 * x2 / n_embd * dlnf_var", ["`x2`"]),
    # a sum over the wrong axis that only shows as a shape
    "mm-bngain-summed-over-features": (
        "makemore", "atomic/bngain", "bngain",
        "dbngain = (bnraw * dhpreact).sum(1, keepdim=True)\ndbnraw = bngain * dhpreact\n"
        "dbnbias = dhpreact.sum(0, keepdim=True)", ["dim 1", "wrong axis"]),
    "mm-b2-summed-over-classes": (
        "makemore", "atomic/h", "b2",
        "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(1)", ["27 classes"]),
    "gpt-layernorm-bias-over-channels": (
        "gpt", "block/ln1_affine", "ln1b",
        "dln1_norm = dln1 * ln1w\ndln1w = (dln1 * ln1_norm).sum((0, 1))\ndln1b = dln1.sum(-1)",
        ["dim -1"]),
    "gpt-position-embedding-over-time": (
        "gpt", "block/wpe", "wpe", "dtok = dx0.clone()\ndwpe = dx0.sum(1)", ["dim 1"]),
}


@pytest.fixture(scope="module")
def engines(engine):
    from tutor.core.engine import Engine

    gpt = Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / "gpt")))
    yield {"makemore": engine, "gpt": gpt}
    gpt.close()


def _row(result, tensor: str):
    return next(c for c in result.checks if tensor in (c.tensor, c.grad))


def _answer_lines(lesson: str, step: str) -> list[str]:
    pack = GPT if lesson == "gpt" else MAKEMORE
    return [ln.strip() for ln in pack.step(step).solution.splitlines()
            if len(ln.strip()) > 12 and not ln.strip().startswith(("#", "def "))]


@pytest.mark.parametrize("lesson, step, tensor, code, words",
                         [pytest.param(*v, id=k) for k, v in WRONG.items()])
def test_the_mistake_is_named_without_the_answer(engines, lesson, step, tensor, code, words):
    result = engines[lesson].check(step, code)
    assert result.error is None and not result.passed
    row = _row(result, tensor)
    assert row.diagnosis is not None, row.message
    for word in words:
        assert word in row.message, row.message
    for line in _answer_lines(lesson, step):
        assert line not in row.message


# --- messages that said what the code does not do ------------------------------------------------


def test_a_residual_set_to_zeros_is_not_told_to_reach_a_buffer(engines):
    code = "dfcproj = dx2.clone()\ndx1 = torch.zeros_like(x1)"
    row = _row(engines["gpt"].check("block/x2_residual", code), "x1")
    assert "every assignment reaches" not in row.message
    assert "sets it to zeros and adds nothing" in row.message
    times_zero = _row(engines["gpt"].check("block/x2_residual",
                                           "dfcproj = dx2.clone()\ndx1 = dx2 * 0"), "x1")
    assert "buffer" not in times_zero.message and "zero everywhere" in times_zero.message


def test_a_buffer_filled_by_a_loop_that_reaches_nothing_keeps_its_message(engines):
    code = ("dprobs = torch.zeros_like(probs)\n"
            "for i in range(0):\n    dprobs[i] = dlogprobs[i] / probs[i]\n")
    row = _row(engines["makemore"].check("atomic/probs", code), "probs")
    assert "every assignment reaches" in row.message


def test_a_factor_of_a_local_is_no_constant(engines):
    code = ("t = torch.tanh(math.sqrt(2 / math.pi) * (fch + 0.044715 * fch**3))\n"
            "dfch = (0.5 * (1 + t) + 0.5 * fch * math.sqrt(2 / math.pi) * "
            "(1 + 3 * 0.044715 * fch**2)) * dfch_gelu")
    row = _row(engines["gpt"].check("block/fch", code), "fch")
    assert row.diagnosis is not None
    assert "a constant" not in row.message and "`fch`" in row.message


def test_rows_are_blamed_on_a_loop_only_in_code_that_walks_rows():
    from tutor.core.derived import _subset

    torch.manual_seed(0)
    ref = torch.randn(6, 5)
    value = ref.clone()
    value[:2] += 1.0  # right in 4 rows, as where the arriving gradient is zero
    plain = "dlogits += F.one_hot(logits.argmin(1), num_classes=5) * dlogit_maxes"
    assert _subset(MAKEMORE, "dlogits", value, ref, {}, plain) is None
    looped = "for i in range(2, n):\n    dlogits[i] += 1"
    found = _subset(MAKEMORE, "dlogits", value, ref, {}, looped)
    assert found is not None and "loop" in found.message


def test_a_left_out_gradient_is_not_claimed_of_code_that_reads_it(engines):
    # The local derivative on its own, with the gradient from above read but thrown away.
    row = _row(engines["makemore"].check("atomic/hpreact", "dhpreact = (1.0 - h**2) * dh**0"),
               "hpreact")
    assert row.diagnosis is None or "`dh`" not in row.message or "left" not in row.message
    row = _row(engines["makemore"].check("atomic/hpreact", "dhpreact = 1.0 - h**2"), "hpreact")
    assert row.diagnosis is not None and "`dh`" in row.message


# --- the pieces ------------------------------------------------------------------------------


def test_a_sum_over_the_wrong_dims_is_named_from_the_shapes_alone():
    said = wrong_axis("wpe", [4, 32], [16, 32], [(4, 16, 32)])
    assert said is not None and "dim 1 (size 16)" in said and "dim 0 (size 4)" in said
    said = wrong_axis("bngain", [32, 1], [1, 64], [(32, 64)])
    assert said is not None and "dim 1 (size 64)" in said and "dim 0 (size 32)" in said
    # Shapes that no single gradient explains say nothing.
    assert wrong_axis("x", [3, 5], [7], [(4, 16, 32)]) is None


@pytest.mark.parametrize("code", [
    "for r in x:\n    dx = r",
    "while True:\n    dx = x",
    "dx = [x for _ in range(10)]",
    "dx = x.__class__",
    "import os\ndx = x",
    "dx = (lambda: x)()",
    "dx = n ** n ** n",
    "dx = 10 ** 100",
    "dx = torch.zeros(10**9)",
    "dx = torch.zeros(k)\nk = 5",
    "dx = x.repeat(1000, 1000)",
    "dx = 'a' * 100",
    "dx = getattr(x, 'T')",
    "def f():\n    return x\ndx = f()",
    "dx = torch.ones(x.shape[0] * 1000000, 1000)",
])
def test_code_outside_the_subset_is_never_run_here(code):
    assert not smallest.searchable(ast.parse(code))


@pytest.mark.parametrize("code", [
    "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n",
    "dC = torch.zeros_like(C)\ndC.index_add_(0, Xb.view(-1), demb.view(-1, C.shape[1]))",
    "dx = torch.zeros(n, 27)\ndx = dx + x ** -0.5 * math.sqrt(2 / math.pi)",
    # A line step's loop over a range (a pool's windows): its runs are bounded by the budget.
    "dx = torch.zeros_like(x)\nfor i in range(4):\n    dx[:, i:i + 2] += x[:, i:i + 2]",
])
def test_plain_tensor_code_is_searched(code):
    assert smallest.searchable(ast.parse(code))


def test_a_search_only_asks_for_changed_programs_to_be_run():
    # The search makes sources and compares values; every run is the runner's (a confined
    # child in the engine): all changes in one call, then the scaled terms in a second at most.
    calls: list[list[str]] = []

    def run(sources: list[str]):
        calls.append(list(sources))
        return [[] for _ in sources]

    ref = torch.ones(3)
    found = smallest.search("dx = x.sum(0) + 2 * y", run, torch.zeros(3), [ref], {},
                            {"x": (3,)})
    assert found is None
    assert 1 <= len(calls) <= 2
    assert sum(map(len, calls)) <= smallest.MAX_EDITS
    assert all(isinstance(s, str) and ast.parse(s) for c in calls for s in c)


def test_a_change_right_on_the_main_batch_only_is_not_named():
    # The fresh batch confirms a change: one that fits only the main batch's numbers is no
    # answer, and the message says nothing of it.
    ref, fresh = torch.ones(3), torch.full((3,), 2.0)

    def run(sources: list[str]):
        return [[ref.clone(), ref.clone()] for _ in sources]  # right on main, wrong on fresh

    code = "dx = x.mean(0)"
    assert smallest.search(code, run, torch.zeros(3), [ref, fresh], {}, {}) is None
    assert smallest.search(code, run, torch.zeros(3), [ref], {}, {}) is not None


def test_a_constant_is_read_off_its_syntax_never_run():
    code = "dx = x * (9 ** 9 ** 9 ** 9) + y * math.sqrt(2 * math.pi) / n"
    # The tower overflows as a float at once instead of growing as an integer without bound.
    edits = list(smallest.constant_edits(ast.parse(code), code, {"n": 4}))
    assert edits and all("9 ** 9" not in e.message for e in edits)


def test_the_entries_a_forward_pass_singles_out_come_from_the_packs_own_code():
    # No lesson's tensor names in the core: they are read off each pack's forward lines.
    from tutor.core.derived import _singled_out

    sources = tuple(line.source for line in MAKEMORE.forward_lines)
    assert set(_singled_out(sources)) >= {("index", "Yb"), ("max", "logits")}
    assert _singled_out(("out = scores[torch.arange(B), labels]", "m = z.argmax(1)")) == (
        ("index", "labels"), ("max", "z"))
