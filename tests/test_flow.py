"""The lesson's backward graph has one owner (tutor/pack/flow.py): what each step is given,
starts, adds to and completes, and the one spelling of a gradient's name."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

from tutor.pack.flow import Flow, gradient, gradients, tensor_of
from tutor.pack.model import find_pack, load_pack

TUTOR = Path(__file__).resolve().parents[1] / "tutor"
OWNERS = {TUTOR / "pack" / "flow.py", TUTOR / "values" / "gradnames.py"}


def test_spelling_round_trips():
    assert gradient("logits") == "dlogits"
    assert gradients(["probs", "h"]) == {"dprobs", "dh"}
    assert tensor_of("dlogits") == "logits"
    assert tensor_of("d") is None and tensor_of("logits") is None


@pytest.mark.parametrize("lesson", ["makemore", "gpt", "lstm", "conv"])
def test_every_branch_started_in_an_exercise_is_completed_later_in_it(lesson):
    pack = load_pack(find_pack(lesson))
    flow = pack.flow
    for step in pack.gradient_steps:
        for name in flow.starts(step):
            closer = flow.completer(name, step.exercise)
            assert closer is not None and pack.index(closer) > pack.index(step.id)
            assert name in flow.adds(closer)
            assert name in flow.given(closer)  # the first branch arrives as given
        assert flow.adds(step) <= flow.completes(step)
        assert not flow.later(step) & flow.completes(step)


def test_makemore_counts_is_started_by_one_step_and_completed_by_the_next():
    pack = load_pack(find_pack("makemore"))
    flow = pack.flow
    assert flow.starts("atomic/counts_sum_inv") == {"dcounts"}
    assert flow.adds("atomic/counts") == {"dcounts"}
    exercise = pack.step("atomic/counts").exercise
    assert flow.starter("dcounts", exercise) == "atomic/counts_sum_inv"
    assert flow.given("atomic/counts") == {"dcounts", "dcounts_sum"}
    assert "dlogits" in flow.later("atomic/counts")


def test_a_flow_of_some_steps_knows_only_theirs():
    pack = load_pack(find_pack("makemore"))
    ce = [s for s in pack.steps if s.id == "fused/cross_entropy"]
    flow = Flow(ce)
    assert flow.all == {"dlogits"}
    assert flow.adds(ce[0]) == frozenset()


def _hand_spellings(path: Path) -> list[str]:
    """Places in a module's code (not its prose) that spell a gradient's name by hand: `d` glued
    to a formatted field (`f"d{x}"`, `rf"\\bd{x}"`), `"d" + x`, or `x.startswith("d")`."""
    found = []
    glued = re.compile(r"(?<![A-Za-z0-9_])d\{(?!\{)")
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
              if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT)]
    for i, tok in enumerate(tokens):
        text, kind = tok.string, tokenize.tok_name[tok.type]
        after = [t.string for t in tokens[i + 1:i + 2]]
        before = [t.string for t in tokens[max(0, i - 2):i]]
        formatted = kind == "STRING" and "f" in text[:3].lower() and text[:1].lower() in "rf"
        if formatted or kind.startswith("FSTRING"):
            hand = bool(glued.search(text.replace("\\b", " ")))
        else:
            hand = kind == "STRING" and text in ('"d"', "'d'") and (
                after == ["+"] or before == [".", "startswith"] or before[-1:] == ["("]
                and tokens[i - 2].string == "startswith")
        if hand:
            found.append(f"{path.name}:{tok.start[0]}: {text[:60]}")
    return found


def test_no_module_but_the_flow_spells_a_gradient_name_by_hand():
    found = [hit for path in sorted(TUTOR.rglob("*.py")) if path not in OWNERS
             for hit in _hand_spellings(path)]
    assert not found, ("spell a gradient's name with tutor.pack.flow.gradient (or ask the pack's "
                       "Flow), not by hand:\n" + "\n".join(found))


def test_the_ratchet_sees_a_hand_spelling(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('a = f"d{x}"\nb = rf"\\bd{x}\\b"\nc = "d" + x\nd = x.startswith("d")\n'
                      'e = f"{gradient(x)}"\n')
    assert len(_hand_spellings(module)) == 4
