"""The gpt pack (exercises/gpt): one transformer block in llm.c's layout, character level.

Every reference solution must pass, every catalogued mistake must be recognised as itself, code
with the batch size written in must fail the fresh batch, `pack check` must be clean, and a
short training run on the reference backward pass must learn. Nothing in tutor/ knows this
network: it is data, like tests/packs/tiny.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pack_cases import (
    assert_mistake_recognised,
    assert_passed,
    assert_reference_passes,
    assert_step_content,
    mistake_cases,
    reference_cases,
)

from tutor.config import Settings
from tutor.pack.kinds import Function, LineGradient
from tutor.pack.model import find_pack, load_pack

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "exercises" / "gpt"
PACK = load_pack(GPT)

REFERENCE_CASES = reference_cases(PACK)
MISTAKE_CASES = mistake_cases(PACK)

# Other right answers, as learners write them.
CORRECT = {
    "block/logits": """
onehot = F.one_hot(targets, num_classes=logits.shape[-1]).float()
dlogits = (F.softmax(logits, dim=2) - onehot) / targets.numel()
""",
    "block/lnf": """
dlnf = dlogits @ wte
dwte = torch.einsum('ntv,ntc->vc', dlogits, lnf)
""",
    "block/x1": """
xhat = ln2_norm
g = dln2_norm
dx1 += ln2_rstd / n_embd * (n_embd * g - g.sum(-1, keepdim=True)
                            - xhat * (g * xhat).sum(-1, keepdim=True))
""",
    "block/x0": """
dxc = ln1_rstd * dln1_norm
drstd = (ln1_xc * dln1_norm).sum(-1, keepdim=True)
dvar = -0.5 * ln1_rstd**3 * drstd
dxc = dxc + 2 * ln1_xc * dvar / n_embd
dx0 = dx0 + dxc - dxc.mean(-1, keepdim=True)
""",
    "block/lnf_xc": """
dlnf_xc = dlnf_xc + 2.0 * lnf_xc * dlnf_var.expand_as(lnf_xc) / lnf_xc.shape[-1]
""",
    "block/fch": """
s = math.sqrt(2 / math.pi)
u = s * (fch + 0.044715 * fch**3)
th = torch.tanh(u)
dfch = dfch_gelu * (0.5 * (1 + th) + 0.5 * fch * (1 - th**2) * s * (1 + 0.134145 * fch**2))
""",
    "block/preatt_masked": """
dpreatt_masked = att * datt - att * (att * datt).sum(dim=-1, keepdim=True)
""",
    "block/qkv": """
merged = [t.transpose(1, 2).contiguous().view(n, block_size, n_embd) for t in (dq, dk, dv)]
dqkv = torch.cat(merged, dim=2)
""",
    "block/wte": """
for i in range(Xb.shape[0]):
    for t in range(Xb.shape[1]):
        dwte[Xb[i, t]] += dtok[i, t]
""",
    "block/atty": """
datty = dy.reshape(n, block_size, n_head, head_size).permute(0, 2, 1, 3)
""",
}


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu", pack=str(GPT)))


def test_the_pack_is_installed_by_id():
    assert find_pack("gpt") == GPT
    assert PACK.id == "gpt" and PACK.data_file is not None and PACK.data_file.is_file()


def test_the_sizes_are_in_scope_by_their_names(engine):
    code = "print(vocab_size, block_size, n_embd, n_head, head_size, n, tuple(Xb.shape))"
    result = engine.check("block/logits", code).to_dict()
    assert result["stdout"].strip() == "27 16 32 4 8 4 (4, 16)"


@pytest.mark.parametrize("step_id", REFERENCE_CASES)
def test_reference_solution_passes(engine, step_id):
    assert_reference_passes(engine, PACK, step_id, 7)


@pytest.mark.parametrize("step_id", list(CORRECT))
def test_another_correct_form_passes(engine, step_id):
    assert_passed(engine.check(step_id, CORRECT[step_id].lstrip("\n")).to_dict())


@pytest.mark.parametrize("step_id, index", MISTAKE_CASES)
def test_mistake_is_recognised_as_itself(engine, step_id, index):
    result = assert_mistake_recognised(engine, PACK, step_id, index)
    step = PACK.step(step_id)
    mistake = step.mistakes[index]
    # The other gradients of the step are right, unless the same code is catalogued for them
    # too (halving a residual's gradient halves both branches). An update's outputs are one
    # computation (param moves by what m and v hold), so a mistake there reaches all three.
    if isinstance(step.kind, Function) and not step.function.outputs:
        return
    also = {m.tensor or step.checks[0] for m in step.mistakes if m.code == mistake.code}
    others = [c for c in result["checks"] if c["tensor"] not in also]
    assert all(c["verdict"] in ("exact", "approximate") for c in others), others


def test_the_traps_are_catalogued():
    """The mistakes the lesson is about, each somewhere in the catalogue."""
    codes = {s.id: " ".join(m.code for m in s.mistakes) for s in PACK.gradient_steps}
    assert "dx1 += ln2_rstd * dln2_norm" in codes["block/x1"]      # statistics as constants
    assert ".mean(0, keepdim=True)" in codes["block/x1"]           # batchnorm habit
    assert ".sum(0, keepdim=True)" in codes["block/lnf_rstd"]      # batchnorm habit, atomic
    assert "(n_embd - 1)" in codes["block/lnf_xc"]                 # Bessel's correction
    assert "n_embd / (n_embd - 1)" in codes["block/x0"]            # Bessel's, in one go
    assert "att * (1 - att) * datt" in codes["block/preatt_masked"]  # diagonal-only softmax
    assert "head_size" not in codes["block/qk"].split("\n")[0]      # the dropped scale
    assert "torch.erf" in codes["block/fch"]                       # the exact GELU
    assert "dwte[Xb] += dtok" in codes["block/wte"]                # lost repeats
    assert "torch.zeros_like(wte)" in codes["block/wte"]           # the tied head forgotten
    assert any(m.kind == "partial" and m.code.strip().startswith("dx1 =")
               for m in PACK.step("block/x1").mistakes)            # = instead of +=
    assert any(m.kind == "transpose" and m.tensor == "attprojw"
               for m in PACK.step("block/attproj").mistakes)       # llm.c's (OC, C) layout


@pytest.mark.parametrize("step_id, code", [
    ("block/logits", "dlogits = F.softmax(logits, -1)\n"
                     "dlogits -= F.one_hot(targets, vocab_size).float()\n"
                     "dlogits /= 4 * block_size\n"),
    ("block/atty", "datty = dy.view(4, block_size, n_head, head_size).transpose(1, 2)\n"),
    ("block/qkv", "dqkv = torch.cat([t.transpose(1, 2).reshape(4, 16, 32)\n"
                  "                  for t in (dq, dk, dv)], -1)\n"),
])
def test_a_hard_coded_batch_size_fails_the_fresh_batch(engine, step_id, code):
    result = engine.check(step_id, code).to_dict()
    assert not result["passed"]
    assert result["heldout"]["passed"] is False and result["heldout"]["batch_size"] == 7


# --- function steps ---------------------------------------------------------------------------

FUNCTION_STEPS = [s for s in PACK.steps if isinstance(s.kind, Function)]

# Each function's reference with one size read off the lesson instead of off the arguments:
# (what the reference says, what a learner wrote instead). Every one is right on the lesson's
# tensors and must fail at the fresh sizes.
HARD_CODED = [
    ("functions/encoder_backward", "dout.new_zeros(vocab_size, C)", "dout.new_zeros(27, C)"),
    ("functions/encoder_backward", "dout.reshape(-1, C)", "dout.reshape(-1, n_embd)"),
    ("functions/layernorm_backward", "dnorm.mean(-1, keepdim=True)",
     "dnorm.sum(-1, keepdim=True) / n_embd"),
    ("functions/matmul_backward", "inp.reshape(-1, C)", "inp.reshape(-1, 32)"),
    ("functions/attention_backward", "hs = C // n_head", "hs = head_size"),
    ("functions/attention_backward", "hs = C // n_head", "hs = C // 4"),
    ("functions/gelu_backward", "return slope.add_(1).mul_(sig).mul_(dout)",
     "return slope.add_(1).mul_(sig).mul_(dout).view(-1, block_size, 4 * n_embd)"),
    ("functions/crossentropy_softmax_backward", "return dlogits / N",
     "return dlogits / (4 * block_size)"),
    ("functions/adamw_update", "1 - beta1**t", "1 - beta1**3"),
]


def test_the_functions_are_llm_cs():
    names = [s.function.name for s in FUNCTION_STEPS]
    assert names == ["encoder_backward", "layernorm_backward", "matmul_backward",
                     "attention_backward", "gelu_backward", "crossentropy_softmax_backward",
                     "adamw_update"]
    assert PACK.step("functions/adamw_update").function.outputs == ()


@pytest.mark.parametrize("step_id, old, new", [pytest.param(*h, id=f"{h[0]}:{h[2]}")
                                               for h in HARD_CODED])
def test_a_hard_coded_dimension_fails_the_fresh_sizes(engine, step_id, old, new):
    solution = PACK.step(step_id).solution
    assert old in solution
    result = engine.check(step_id, solution.replace(old, new, 1)).to_dict()
    assert all(c["verdict"] in ("exact", "approximate") for c in result["checks"]), result
    assert result["heldout"]["passed"] is False, result["heldout"]
    assert "right on the lesson's tensors" in result["heldout"]["message"]


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in FUNCTION_STEPS])
def test_every_function_step_has_fresh_sizes_unlike_the_lesson(engine, step):
    lesson, *fresh = engine.function_cases(step)
    assert lesson.sizes and fresh
    for case in fresh:
        differ = {k for k in case.sizes if case.sizes[k] != lesson.sizes.get(k)}
        assert differ, (case.sizes, lesson.sizes)


def test_the_template_of_a_function_runs_and_says_what_is_missing(engine):
    step = PACK.step("functions/layernorm_backward")
    result = engine.check(step.id, step.template).to_dict()
    assert not result["passed"]
    assert result["error"] is not None or result["checks"][0]["verdict"] != "exact"


# --- content ----------------------------------------------------------------------------------


@pytest.mark.parametrize("step", [pytest.param(s, id=s.id) for s in PACK.steps])
def test_step_content_rules(step):
    lines = [line for line in step.explanation.splitlines() if line.strip()]
    # A whole function or the training run takes a little more to explain than one line.
    assert 4 <= len(lines) <= (12 if isinstance(step.kind, LineGradient) else 16), len(lines)
    assert_step_content(PACK, step)


# --- the pack as a whole ---------------------------------------------------------------------


def _cli(*args: str, home: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=timeout)


def test_pack_check_is_clean(tmp_path):
    out = _cli("pack", "check", str(GPT), home=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_the_command_line_teaches_the_pack(tmp_path):
    listed = _cli("--pack", "gpt", "list", home=tmp_path)
    assert listed.returncode == 0 and "block/preatt_masked" in listed.stdout
    checked = _cli("--pack", "gpt", "check", "block/logits", "--code",
                   PACK.step("block/logits").solution, home=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (tmp_path / "progress-gpt.sqlite3").is_file()


def test_training_on_the_reference_backward_pass_learns(engine):
    from tutor.training import run_training

    result = run_training(engine, {"steps": 200, "gradcheck_steps": 5}, lambda _: None,
                          threading.Event())
    assert result["status"] == "finished", result["error"]
    assert result["gradcheck"]["passed"]
    assert result["settings"]["optimizer"] == "adamw_update"
    # Chance is log(27) = 3.30 per character; 200 steps of AdamW get well below it.
    assert result["val_loss"] < 0.75 * math.log(27), result["val_loss"]
    assert len(result["samples"]) == 20 and all(isinstance(s, str) for s in result["samples"])


def test_the_training_run_is_an_n_layer_gpt_with_the_learners_update(engine):
    from tutor.training import TrainingSettings, training_code

    s = TrainingSettings.from_pack(PACK)
    assert s.assembled and s.optimizer == "adamw_update"
    assert s.sizes["n_layer"] >= 2
    code = training_code(PACK)
    for step in FUNCTION_STEPS:
        assert f"def {step.function.name}(" in code
    # The loss is per character: the padding after a name is masked out.
    assert "mask" in s.forward_code


def test_a_wrong_update_is_caught_by_the_run(engine, tmp_path):
    """The run moves the weights with the learner's own update: AdamW without its bias
    correction trains too, but not the same way."""
    from tutor.training import run_training, training_code

    step = PACK.step("functions/adamw_update")
    right = training_code(PACK)
    wrong = right.replace(step.solution.strip(), step.mistakes[0].code.strip())
    assert wrong != right
    results = [run_training(engine, {"steps": 30, "gradcheck_steps": 2, "code": code},
                            lambda _: None, threading.Event()) for code in (right, wrong)]
    assert all(r["status"] == "finished" for r in results), [r["error"] for r in results]
    assert results[0]["last_loss"] != results[1]["last_loss"]
