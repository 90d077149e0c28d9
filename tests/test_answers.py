"""The exercise pack's content against the engine: right answers pass, catalogued mistakes don't.

For every gradient step a few different ways a learner might write the right answer must pass,
and every entry of the mistake catalogue must fail with the diagnosis kind it declares. A small
set of content rules (no placeholders, enough hints, no hint that gives the solution away) is
checked on the pack itself.
"""

from __future__ import annotations

import re

import pytest
from pack_cases import assert_mistake_recognised, mistake_cases, reference_cases

from tutor.config import Settings
from tutor.pack.model import load_pack

PACK = load_pack()
KINDS = {"shape", "sign", "scale", "transpose", "partial", "known_mistake"}

# Right answers, in the many forms people write them. Earlier steps come from the reference
# solutions, so at a step that completes a tensor used twice (`+=`), the first branch is there.
CORRECT: dict[str, dict[str, str]] = {
    "atomic/logprobs": {
        "index-then-divide": """
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1 / n
""",
        "times-one-over-n": """
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[torch.arange(n), Yb] = -1.0 * (1.0 / n)
""",
        "one-hot": """
dlogprobs = -F.one_hot(Yb, 27).float() / n
""",
        "one-hot-shape-from-tensor": """
dlogprobs = -F.one_hot(Yb, num_classes=logprobs.shape[1]).float() * (1.0 / n)
""",
        "subtract-in-place": """
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] -= 1.0 / n
""",
    },
    "atomic/probs": {
        "divide": "dprobs = dlogprobs / probs\n",
        "power": "dprobs = probs**-1 * dlogprobs\n",
        "reciprocal": "dprobs = torch.reciprocal(probs) * dlogprobs\n",
        "one-over": "dprobs = 1 / probs * dlogprobs\n",
    },
    "atomic/counts_sum_inv": {
        "torch-sum": """
dcounts_sum_inv = torch.sum(counts * dprobs, dim=1, keepdim=True)
dcounts = dprobs * counts_sum_inv
""",
        "last-dim": """
dcounts_sum_inv = (dprobs * counts).sum(-1, keepdim=True)
dcounts = counts_sum_inv * dprobs
""",
        "view-back": """
dcounts_sum_inv = (counts * dprobs).sum(1).view(n, 1)
dcounts = dprobs / counts_sum
""",
        "keepdims-spelling": """
dcounts = counts_sum_inv * dprobs
dcounts_sum_inv = (counts * dprobs).sum(1, keepdims=True)
""",
    },
    "atomic/counts_sum": {
        "one-over-square": "dcounts_sum = -1.0 / counts_sum**2 * dcounts_sum_inv\n",
        "from-inverse": "dcounts_sum = -(counts_sum_inv**2) * dcounts_sum_inv\n",
        "product": "dcounts_sum = -dcounts_sum_inv / (counts_sum * counts_sum)\n",
        "power-minus-two": "dcounts_sum = (-1) * counts_sum**(-2) * dcounts_sum_inv\n",
    },
    "atomic/counts": {
        "broadcast": "dcounts += dcounts_sum\n",
        "out-of-place": "dcounts = dcounts + torch.ones_like(counts) * dcounts_sum\n",
        "expand": "dcounts += dcounts_sum.expand_as(counts)\n",
        "repeat": "dcounts = dcounts + dcounts_sum.repeat(1, counts.shape[1])\n",
    },
    "atomic/norm_logits": {
        "exp-again": "dnorm_logits = norm_logits.exp() * dcounts\n",
        "torch-exp": "dnorm_logits = torch.exp(norm_logits) * dcounts\n",
        "swapped": "dnorm_logits = dcounts * counts\n",
    },
    "atomic/logit_maxes": {
        "minus-outside": """
dlogits = dnorm_logits.clone()
dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)
""",
        "torch-sum": """
dlogit_maxes = -torch.sum(dnorm_logits, 1, keepdim=True)
dlogits = dnorm_logits.clone()
""",
        "times-minus-one": """
dlogit_maxes = (-1.0 * dnorm_logits).sum(1, keepdims=True)
dlogits = dnorm_logits * 1.0
""",
        "one-hot-free-copy": """
dlogits = dnorm_logits + 0
dlogit_maxes = -dnorm_logits.sum(dim=1).view(-1, 1)
""",
    },
    "atomic/logits": {
        "argmax": "dlogits += F.one_hot(logits.argmax(1), num_classes=27) * dlogit_maxes\n",
        "equality-mask": "dlogits = dlogits + (logits == logit_maxes).float() * dlogit_maxes\n",
        "scatter": """
dlogits += torch.zeros_like(logits).scatter(1, logits.argmax(1, keepdim=True), dlogit_maxes)
""",
        "max-indices-float": """
dlogits += F.one_hot(logits.max(1).indices, logits.shape[1]).float() * dlogit_maxes
""",
    },
    "atomic/h": {
        "matmul-t": """
dh = torch.matmul(dlogits, W2.t())
dW2 = torch.matmul(h.t(), dlogits)
db2 = torch.sum(dlogits, dim=0)
""",
        "transposed-product": """
dh = (W2 @ dlogits.T).T
dW2 = (dlogits.T @ h).T
db2 = dlogits.sum(0, keepdim=True).squeeze(0)
""",
        "einsum": """
dh = torch.einsum('nj,kj->nk', dlogits, W2)
dW2 = torch.einsum('nk,nj->kj', h, dlogits)
db2 = dlogits.sum(0).view(-1)
""",
        "transpose-method": """
dh = dlogits @ W2.transpose(0, 1)
dW2 = h.transpose(0, 1) @ dlogits
db2 = dlogits.sum(dim=0, keepdim=False)
""",
    },
    "atomic/hpreact": {
        "tanh-again": "dhpreact = (1 - torch.tanh(hpreact)**2) * dh\n",
        "sech-squared": "dhpreact = 1 / torch.cosh(hpreact)**2 * dh\n",
        "h-times-h": "dhpreact = dh * (1 - h * h)\n",
        "expanded": "dhpreact = dh - h**2 * dh\n",
    },
    "atomic/bngain": {
        "torch-sum": """
dbngain = torch.sum(bnraw * dhpreact, 0, keepdim=True)
dbnraw = dhpreact * bngain
dbnbias = torch.sum(dhpreact, 0, keepdim=True)
""",
        "reshape-after-sum": """
dbngain = (dhpreact * bnraw).sum(0).view(1, -1)
dbnraw = bngain.expand_as(bnraw) * dhpreact
dbnbias = dhpreact.sum(0).unsqueeze(0)
""",
        "keepdims-spelling": """
dbnbias = dhpreact.sum(0, keepdims=True)
dbngain = (bnraw * dhpreact).sum(0, keepdims=True)
dbnraw = bngain * dhpreact
""",
    },
    "atomic/bnvar_inv": {
        "torch-sum": """
dbnvar_inv = torch.sum(bndiff * dbnraw, 0, keepdim=True)
dbndiff = dbnraw * bnvar_inv
""",
        "unsqueeze": """
dbnvar_inv = (bndiff * dbnraw).sum(0).unsqueeze(0)
dbndiff = bnvar_inv.expand(n, -1) * dbnraw
""",
        "einsum": """
dbnvar_inv = torch.einsum('ij,ij->j', bndiff, dbnraw).view(1, -1)
dbndiff = dbnraw * bnvar_inv
""",
    },
    "atomic/bnvar": {
        "from-inverse-cubed": "dbnvar = -0.5 * bnvar_inv**3 * dbnvar_inv\n",
        "divide": "dbnvar = -0.5 / (bnvar + 1e-5)**1.5 * dbnvar_inv\n",
        "fraction-exponent": "dbnvar = -0.5 * (bnvar + 1e-5)**(-3 / 2) * dbnvar_inv\n",
        "sqrt": "dbnvar = -dbnvar_inv / (2 * (bnvar + 1e-5) * torch.sqrt(bnvar + 1e-5))\n",
    },
    "atomic/bndiff2": {
        "expand": "dbndiff2 = dbnvar.expand_as(bndiff2) / (n - 1)\n",
        "ones-then-divide": "dbndiff2 = torch.ones_like(bndiff2) * dbnvar / (n - 1)\n",
        "repeat": "dbndiff2 = dbnvar.repeat(n, 1) * (1.0 / (n - 1))\n",
        "lecture": "dbndiff2 = (1.0 / (n - 1)) * torch.ones_like(bndiff2) * dbnvar\n",
    },
    "atomic/bndiff": {
        "float-two": "dbndiff += 2.0 * bndiff * dbndiff2\n",
        "out-of-place": "dbndiff = dbndiff + 2 * bndiff * dbndiff2\n",
        "reordered": "dbndiff += dbndiff2 * bndiff * 2\n",
    },
    "atomic/bnmeani": {
        "minus-outside": """
dhprebn = dbndiff.clone()
dbnmeani = -dbndiff.sum(0, keepdim=True)
""",
        "torch-sum": """
dbnmeani = -torch.sum(dbndiff, dim=0, keepdim=True)
dhprebn = dbndiff * 1.0
""",
        "view-back": """
dbnmeani = (-1 * dbndiff).sum(0).view(1, -1)
dhprebn = dbndiff.clone()
""",
    },
    "atomic/hprebn": {
        "broadcast": "dhprebn += dbnmeani / n\n",
        "expand": "dhprebn = dhprebn + (1.0 / n) * dbnmeani.expand(n, -1)\n",
        "ones-times-one-over-n": "dhprebn += torch.ones_like(hprebn) * dbnmeani * (1.0 / n)\n",
    },
    "atomic/embcat": {
        "matmul-t": """
dembcat = torch.matmul(dhprebn, W1.t())
dW1 = torch.matmul(embcat.t(), dhprebn)
db1 = torch.sum(dhprebn, 0)
""",
        "transposed-product": """
dembcat = (W1 @ dhprebn.T).T
dW1 = (dhprebn.T @ embcat).T
db1 = dhprebn.sum(0, keepdim=True).squeeze(0)
""",
        "einsum": """
dembcat = torch.einsum('nh,ih->ni', dhprebn, W1)
dW1 = torch.einsum('ni,nh->ih', embcat, dhprebn)
db1 = dhprebn.sum(dim=0)
""",
    },
    "atomic/emb": {
        "literal-shape": "demb = dembcat.view(n, 3, 10)\n",
        "reshape": "demb = dembcat.reshape(emb.shape)\n",
        "view-as": "demb = dembcat.view_as(emb)\n",
        "minus-one": "demb = dembcat.view(-1, 3, 10)\n",
    },
    "atomic/C": {
        "lecture-loop": """
dC = torch.zeros_like(C)
for k in range(Xb.shape[0]):
    for j in range(Xb.shape[1]):
        ix = Xb[k, j]
        dC[ix] += demb[k, j]
""",
        "one-hot-matmul": """
dC = F.one_hot(Xb.view(-1), num_classes=27).float().T @ demb.view(-1, 10)
""",
        "index-add": """
dC = torch.zeros_like(C)
dC.index_add_(0, Xb.flatten(), demb.reshape(-1, 10))
""",
        "index-put-accumulate": """
dC = torch.zeros_like(C).index_put((Xb.view(-1),), demb.view(-1, 10), accumulate=True)
""",
    },
    "fused/cross_entropy": {
        "one-hot": """
dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, 27).float()) / n
""",
        "from-probs": """
dlogits = probs.clone()
dlogits[range(n), Yb] -= 1
dlogits /= n
""",
        "times-one-over-n": """
dlogits = F.softmax(logits, dim=1)
dlogits[range(n), Yb] -= 1
dlogits = dlogits * (1.0 / n)
""",
        "softmax-by-hand": """
e = (logits - logits.max(1, keepdim=True).values).exp()
dlogits = e / e.sum(1, keepdim=True)
dlogits[torch.arange(n), Yb] -= 1.0
dlogits = dlogits / n
""",
    },
    "fused/batchnorm": {
        "keepdim-sums": """
dhprebn = bngain * bnvar_inv / n * (n * dhpreact - dhpreact.sum(0, keepdim=True)
    - n / (n - 1) * bnraw * (dhpreact * bnraw).sum(0, keepdim=True))
""",
        "through-dbnraw": """
dbnraw = bngain * dhpreact
dhprebn = bnvar_inv / n * (n * dbnraw - dbnraw.sum(0)
    - n / (n - 1) * bnraw * (dbnraw * bnraw).sum(0))
""",
        "from-scratch": """
mu = hprebn.mean(0, keepdim=True)
var = hprebn.var(0, keepdim=True)
inv = (var + 1e-5)**-0.5
xhat = (hprebn - mu) * inv
dxhat = bngain * dhpreact
dhprebn = inv / n * (n * dxhat - dxhat.sum(0) - n / (n - 1) * xhat * (dxhat * xhat).sum(0))
""",
        "atoms-in-one-go": """
dbnraw = bngain * dhpreact
dbnvar_inv = (bndiff * dbnraw).sum(0, keepdim=True)
dbnvar = -0.5 * (bnvar + 1e-5)**-1.5 * dbnvar_inv
dbndiff = bnvar_inv * dbnraw + 2 * bndiff * (1.0 / (n - 1)) * dbnvar
dbnmeani = -dbndiff.sum(0, keepdim=True)
dhprebn = dbndiff + dbnmeani / n
""",
    },
}

CORRECT_CASES = [
    pytest.param(step_id, code, id=f"{step_id}-{name}")
    for step_id, forms in CORRECT.items()
    for name, code in forms.items()
]
REFERENCE_CASES = reference_cases(PACK)
MISTAKE_CASES = mistake_cases(PACK)


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu"))


def _assert_passed(result: dict) -> None:
    assert result["error"] is None, result["error"]
    failing = [
        (c["grad"], c["verdict"], c["diagnosis"])
        for c in result["checks"]
        if c["verdict"] not in ("exact", "approximate") or c["diagnosis"]
    ]
    assert result["passed"], failing or result.get("heldout")


@pytest.mark.parametrize("step_id", REFERENCE_CASES)
def test_reference_solution_passes(engine, step_id):
    _assert_passed(engine.check(step_id, PACK.step(step_id).solution).to_dict())


@pytest.mark.parametrize("step_id, code", CORRECT_CASES)
def test_correct_form_passes(engine, step_id, code):
    _assert_passed(engine.check(step_id, code.lstrip("\n")).to_dict())


def test_every_step_has_three_correct_forms():
    ids = {s.id for s in PACK.gradient_steps}
    assert set(CORRECT) == ids
    assert all(len(forms) >= 3 for forms in CORRECT.values())


@pytest.mark.parametrize("step_id, index", MISTAKE_CASES)
def test_mistake_is_recognised(engine, step_id, index):
    result = assert_mistake_recognised(engine, PACK, step_id, index)
    step = PACK.step(step_id)
    tensor = step.mistakes[index].tensor or step.checks[0]
    # The other gradients of the step are written correctly: the mistake is about one tensor.
    others = [c for c in result["checks"] if c["tensor"] != tensor]
    assert all(c["verdict"] in ("exact", "approximate") for c in others), others


# --- the content itself -----------------------------------------------------------------------


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_no_placeholders_left():
    for ex in PACK.exercises:
        assert ex.intro and "TODO" not in ex.intro, ex.number
        for step in ex.steps:
            texts = [step.explanation, *step.hints] + [m.message for m in step.mistakes]
            assert all(t and "TODO" not in t for t in texts), step.id


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in PACK.steps])
def test_step_content_rules(step):
    assert len(step.hints) >= 3
    lines = [line for line in step.explanation.splitlines() if line.strip()]
    assert 4 <= len(lines) <= 12, len(lines)
    solution = _squash(step.solution)
    for hint in step.hints:
        assert not solution or solution not in _squash(hint), hint
    for m in step.mistakes:
        assert m.kind in KINDS
        assert (m.tensor or step.checks[0]) in step.checks + step.partials
        assert _squash(m.code) != solution
    codes = [(m.tensor or step.checks[0], _squash(m.code)) for m in step.mistakes]
    assert len(codes) == len(set(codes)), "duplicate mistake"
