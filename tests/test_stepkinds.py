"""Step kinds are types (tutor/pack/kinds.py, tutor/core/kinds/): a pack's `kind` word is read once
into a kind, every kind has the engine's check, and a check compiles its candidate once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tutor.commands.steps import step_entry
from tutor.pack import kinds as stepkinds
from tutor.pack.kinds import Function, Fused, LineGradient, StepKind, Training
from tutor.pack.model import PackError, load_pack

ROOT = Path(__file__).resolve().parent.parent
MAKEMORE = load_pack()
GPT = load_pack(ROOT / "exercises" / "gpt")
TINY = ROOT / "tests" / "packs" / "tiny"


def test_each_step_reads_as_its_kind():
    kinds = {s.id: type(s.kind) for s in MAKEMORE.steps}
    assert kinds["atomic/logprobs"] is LineGradient
    # One line the exercise adds (F.cross_entropy, the batchnorm in one expression): fused.
    assert kinds["fused/cross_entropy"] is Fused
    assert kinds[MAKEMORE.exercise(3).steps[0].id] is Fused
    assert kinds[MAKEMORE.exercise(4).steps[0].id] is Training
    gpt = {s.id: type(s.kind) for s in GPT.steps}
    assert gpt["block/qkv"] is Fused and gpt["block/x1"] is Fused  # several lines at once
    assert gpt["block/lnf"] is LineGradient
    assert gpt["functions/layernorm_backward"] is Function
    assert isinstance(GPT.exercise(2).kind, Function) and GPT.exercise(3).kind.trained


def test_what_each_kind_answers():
    step = MAKEMORE.step("atomic/logits")
    assert step.graded_names == tuple(f"d{t}" for t in step.checks)
    assert step.kind.replays_earlier(step) and step.kind.checked and not step.kind.trained
    fn = GPT.step("functions/layernorm_backward")
    assert fn.graded_names == fn.checks and not fn.kind.of_forward_tensors
    assert not fn.kind.replays_earlier(fn)
    assert fn.kind.how_checked(fn).startswith(
        f"The tutor calls your function as `{fn.function.call}`")
    train = MAKEMORE.exercise(4).steps[0]
    assert train.graded_names == () and not train.kind.checked
    fused = MAKEMORE.step("fused/cross_entropy")
    assert fused.kind.describe(fused).startswith("dlogits")


def test_the_json_kind_is_the_word_the_pack_writes():
    words = {s.id: step_entry(MAKEMORE, s)["kind"] for s in MAKEMORE.steps}
    assert words["atomic/logprobs"] == words["fused/cross_entropy"] == "gradient"
    assert words[MAKEMORE.exercise(4).steps[0].id] == "training"
    assert step_entry(GPT, GPT.step("functions/layernorm_backward"))["kind"] == "function"


def test_an_unknown_kind_is_refused_naming_the_file_and_the_known_kinds(tmp_path):
    shutil.copytree(TINY, tmp_path / "tiny")
    layers = tmp_path / "tiny" / "01_layers.toml"
    layers.write_text(layers.read_text().replace("number = 1\n", 'number = 1\nkind = "fusion"\n',
                                                 1))
    with pytest.raises(PackError) as info:
        load_pack(tmp_path / "tiny")
    message = str(info.value)
    assert "01_layers.toml" in message and "'fusion'" in message
    assert all(f'"{word}"' in message for word in ("gradient", "function", "training"))


def _kinds(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _kinds(sub)
    return found


def test_every_kind_has_the_engines_check():
    from tutor.core.kinds import CHECKS

    assert set(CHECKS) == _kinds(StepKind)
    assert set(stepkinds.KINDS.values()) | {Fused} == _kinds(StepKind)


def test_a_training_step_is_not_checked(engine):
    step = MAKEMORE.exercise(4).steps[0]
    result = engine.check(step.id, "this is not even Python (")
    assert result.error is not None and result.error.kind.value == "usage"


def test_the_child_runs_the_candidate_the_worker_compiled(engine, monkeypatch):
    """The forked child loads the worker's compilation: compiling the candidate again there
    would fail this check."""
    from tutor.core import execution

    code = MAKEMORE.step("atomic/probs").solution
    compile_again = execution.cached_compile

    def refuse_the_candidate(source: str, *filename: str):
        assert source != code, "the candidate was compiled a second time"
        return compile_again(source, *filename)

    monkeypatch.setattr(execution, "cached_compile", refuse_the_candidate)
    engine.close()  # the next child is forked with the stand-in in place
    try:
        result = engine.check("atomic/probs", code)
    finally:
        engine.close()
    assert result.passed, result
