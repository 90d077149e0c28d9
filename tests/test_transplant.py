"""A slip named on one layer is named on every layer (tutor/core/slips.py, tutor/authoring/
transplant.py).

Two sources of slips are carried to every step that does the same thing: every mistake a pack
catalogues (tests/transplanted.py), and the slips below, each written once, on one step of one
lesson, as a change to that step's solution. Wherever a carried slip runs and is refused, its
diagnosis must name something: never only "d… is wrong".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from transplanted import transplants

from tutor.config import Settings
from tutor.core.engine import Engine
from tutor.pack.transplant import counterpart, transplant

ROOT = Path(__file__).resolve().parent.parent
LESSONS = {"makemore": "makemore", "gpt": str(ROOT / "exercises" / "gpt"),
           "lstm": str(ROOT / "exercises" / "lstm"), "conv": str(ROOT / "exercises" / "conv"),
           # lessons `pack new` makes, as a course would (tests/packs/forward/)
           "cnn2d (generated)": "slips_cnn2d.py", "attention (generated)": "slips_attention.py"}

# Slips written once, on one step: (lesson, step, tensor, code, words the diagnosis must hold
# there and on every step it is carried to).
WRITTEN_ONCE = {
    "conv-taps-not-flipped": (
        "conv", "conv/h1", "h1",
        "dh1 = F.conv1d(F.pad(dh2pre, (0, 2)), w2.transpose(0, 1), dilation=2)\n"
        "dw2 = torch.einsum('bot,bitk->oik', dh2pre, F.pad(h1, (2, 0)).unfold(2, 3, 1)[..., ::2])\n"
        "db2 = dh2pre.sum((0, 2))", ["taps"]),
    "conv-channels-not-swapped": (
        "conv", "conv/h2", "h2",
        "dh2 = F.conv1d(F.pad(dh3pre, (0, 4)), w3.flip(2), dilation=4)\n"
        "dw3 = torch.einsum('bot,bitk->oik', dh3pre, F.pad(h2, (4, 0)).unfold(2, 5, 1)[..., ::4])\n"
        "db3 = dh3pre.sum((0, 2))", ["channels"]),
    "conv-weight-taps-reversed": (
        "conv", "conv/h1", "w2",
        "dh1 = F.conv1d(F.pad(dh2pre, (0, 2)), w2.transpose(0, 1).flip(2), dilation=2)\n"
        "dw2 = torch.einsum('bot,bitk->oik', dh2pre, "
        "F.pad(h1, (2, 0)).unfold(2, 3, 1)[..., ::2]).flip(2)\n"
        "db2 = dh2pre.sum((0, 2))", ["taps"]),
    "conv-weight-in-out-swapped": (
        "conv", "conv/h2", "w3",
        "dh2 = F.conv1d(F.pad(dh3pre, (0, 4)), w3.transpose(0, 1).flip(2), dilation=4)\n"
        "dw3 = torch.einsum('bot,bitk->iok', dh3pre, F.pad(h2, (4, 0)).unfold(2, 5, 1)[..., ::4])\n"
        "db3 = dh3pre.sum((0, 2))", ["channels"]),
    "conv-forward-run-on-gradient": (
        "conv", "conv/h2", "h2",
        "dh2 = F.conv1d(F.pad(dh3pre, (4, 0)), w3.transpose(0, 1), dilation=4)\n"
        "dw3 = torch.einsum('bot,bitk->oik', dh3pre, F.pad(h2, (4, 0)).unfold(2, 5, 1)[..., ::4])\n"
        "db3 = dh3pre.sum((0, 2))", ["forward"]),
    "tanh-slope-at-input": (
        "conv", "conv/h2pre", "h2pre", "dh2pre = (1 - h2pre ** 2) * dh2", ["input"]),
    "tanh-slope-twice": (
        "conv", "conv/h3pre", "h3pre", "dh3pre = (1 - h3 ** 2) ** 2 * dh3", ["twice"]),
    "tanh-slope-missing": ("conv", "conv/h1pre", "h1pre", "dh1pre = dh1", ["slope"]),
    "tanh-slope-of-sigmoid": (
        "conv", "conv/h2pre", "h2pre", "dh2pre = h2 * (1 - h2) * dh2", ["sigmoid"]),
    "conv-kernel-positions-unpaired": (
        "conv", "conv/h1", "w2",
        "dh1 = F.conv1d(F.pad(dh2pre, (0, 2)), w2.transpose(0, 1).flip(2), dilation=2)\n"
        "dw2 = torch.einsum('bot,bisk->oik', dh2pre, F.pad(h1, (2, 0)).unfold(2, 3, 1)[..., ::2])\n"
        "db2 = dh2pre.sum((0, 2))", ["each on its own"]),
}


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    made: dict[str, Engine] = {}

    def get(lesson: str) -> Engine:
        if lesson not in made:
            pack = LESSONS[lesson]
            if pack.endswith(".py"):
                from tutor.authoring.new import make

                out = tmp_path_factory.mktemp("generated") / Path(pack).stem
                make(ROOT / "tests" / "packs" / "forward" / pack, out)
                pack = str(out)
            made[lesson] = Engine(Settings(device="cpu", pack=pack))
        return made[lesson]

    yield get
    for engine in made.values():
        engine.close()


def _row(result, tensor: str):
    return next((c for c in result.checks if c.tensor == tensor), None)


def test_a_slip_is_carried_with_the_layer_s_own_names_and_numbers():
    h2 = ("dh2 = F.conv1d(F.pad(dh3pre, (0, 4)), w3.transpose(0, 1).flip(2), dilation=4)\n"
          "db3 = dh3pre.sum((0, 2))")
    h1 = ("dh1 = F.conv1d(F.pad(dh2pre, (0, 2)), w2.transpose(0, 1).flip(2), dilation=2)\n"
          "db2 = dh2pre.sum((0, 2))")
    slip = h2.replace("(0, 4)", "(4, 0)")
    assert transplant(h2, slip, h1) == (
        "dh1 = F.conv1d(F.pad(dh2pre, (2, 0)), w2.transpose(0, 1).flip(2), dilation=2)\n"
        "db2 = dh2pre.sum((0, 2))\n")
    assert counterpart(h2, h1, "dh3pre") == "dh2pre"
    # A number the change only moves stands for the other layer's; one it brings in keeps its
    # meaning where the two layers use it for two things.
    assert transplant(h1, h1.replace("flip(2)", "flip(2).flip(2)"), h2).count("flip(2)") == 2
    # A change made in a part the other layer lacks cannot be carried.
    bare = ("dx = F.conv1d(F.pad(dh1pre, (0, 1)), w1.transpose(0, 1).flip(2))\n"
            "db1 = dh1pre.sum((0, 2))")
    assert transplant(h2, h2.replace("dilation=4", "dilation=2"), bare) is None
    # Code that computes something else is not the same code.
    assert transplant(h2, slip, "dlogits = F.softmax(logits, 1) - F.one_hot(Yb, 27)") is None


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(LESSONS))
def test_every_catalogued_slip_is_named_on_every_step_it_is_carried_to(engines, lesson):
    engine = engines(lesson)
    generic = []
    for case in transplants(engine.pack):
        result = engine.check(case.step, case.code)
        row = _row(result, case.tensor)
        if result.error or result.passed or row is None or row.accepted:
            continue  # the same change is no slip there
        if row.diagnosis is None:
            generic.append(f"{case.origin} -> {case.step}: {row.message}")
    assert not generic, "\n".join(generic)


def _carried(lesson: str, step_id: str, tensor: str, code: str, engine: Engine):
    pack = engine.pack
    source = pack.step(step_id)
    yield step_id, tensor, code
    for target in pack.gradient_steps:
        if target is source or target.kind != source.kind:
            continue
        lines = ("\n".join(pack.line_for(t).source for t in source.lines),
                 "\n".join(pack.line_for(t).source for t in target.lines))
        moved = transplant(source.solution, code, target.solution, lines)
        if moved is not None:
            yield target.id, counterpart(source.solution, target.solution, tensor, lines), moved


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRITTEN_ONCE))
def test_a_slip_written_on_one_layer_is_named_on_every_layer(engines, name):
    lesson, step_id, tensor, code, words = WRITTEN_ONCE[name]
    engine = engines(lesson)
    places = 0
    for where, there, moved in _carried(lesson, step_id, tensor, code, engine):
        result = engine.check(where, moved)
        row = _row(result, there)
        if result.error is not None or row is None or row.accepted:
            continue
        places += 1
        assert row.diagnosis is not None, (where, moved, row.message)
        said = row.message.lower()
        assert all(w.lower() in said for w in words), (where, moved, row.message)
    assert places >= 2, f"{name} was carried to no other step"


@pytest.mark.slow
@pytest.mark.parametrize("code, words", [
    ("dhpre = dh * (hpre <= 0)", ["other way round"]),
    ("dhpre = dh * (1 - h ** 2)", ["tanh"]),
    ("dhpre = dh * torch.sigmoid(hpre) * (1 - torch.sigmoid(hpre))", ["sigmoid"]),
])
def test_any_activation_s_slope_slips_are_named_on_a_relu(engines, code, words):
    """The slips of an activation's slope belong to every activation, not only to those whose
    slope is written with their output: here on a ReLU of a lesson `pack new` made."""
    result = engines("cnn2d (generated)").check("slips_cnn2d/hpre", code)
    row = _row(result, "hpre")
    assert not result.passed and row is not None and row.diagnosis is not None, result
    assert all(w in row.message.lower() for w in words), row.message


@pytest.mark.slow
@pytest.mark.parametrize("lesson, step, tensor, code, words", [
    ("cnn2d (generated)", "slips_cnn2d/h", "h",
     "idx = h.flatten(2).argmax(-1, keepdim=True)\ndh = torch.zeros_like(h).flatten(2)\n"
     "dh.scatter_(2, idx, dpooled.flatten(2).sum(-1, keepdim=True))\ndh = dh.view_as(h)",
     ["whole map"]),
    ("attention (generated)", "slips_attention/masked", "masked",
     "dmasked = datt - att * datt.sum(-1, keepdim=True)", ["log-softmax"]),
])
def test_an_operation_s_slips_are_named_in_a_made_lesson(engines, lesson, step, tensor, code,
                                                          words):
    """A max-pool's gradient sent to the whole map's largest entry; a softmax given the
    log-softmax's backward: slips of the operation, found wherever it stands."""
    result = engines(lesson).check(step, code)
    row = _row(result, tensor)
    assert not result.passed and row is not None and row.diagnosis is not None, result
    assert all(w in row.message.lower() for w in words), row.message
