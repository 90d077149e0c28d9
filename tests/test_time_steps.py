"""An output with a time axis, compared one step at a time (tutor/core/timesteps.py).

The lstm lesson's `lstm_backward` declares `time = "dxs[:, t]"`: a wrong loop through time is
told at which step it first leaves autograd's, going back from the last, and the check carries
the per-step sizes as a figure, drawn in the TUI and as a PNG in the notebook.
"""

from __future__ import annotations

import base64
import io
import struct
from pathlib import Path

import pytest
import torch
from rich.console import Console

from tutor.config import Settings
from tutor.core.timesteps import by_time
from tutor.notebook.render import heatmap_bundles
from tutor.pack.model import PackError, _time_axis, load_pack
from tutor.ui.widgets.feedback import result_view
from tutor.ui.widgets.timebars import TimeBars, heights
from tutor.values.results import CheckResult

LSTM = Path(__file__).resolve().parent.parent / "exercises" / "lstm"
PACK = load_pack(LSTM)
STEP = PACK.step("bptt/lstm_backward")


@pytest.fixture(scope="module")
def engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu", pack=str(LSTM)))


@pytest.fixture(scope="module")
def steps(engine) -> int:
    """T of the lesson's case: the batch's length."""
    return engine.kinds.of(STEP).cases(STEP)[0].inputs["xs"].shape[1]


def _mistake(start: str) -> str:
    """The catalogued mistake whose message starts so."""
    return next(m.code for m in STEP.mistakes if m.message.startswith(start))


def _figure_is_well_formed(figure: dict, T: int) -> None:
    assert figure["kind"] == "time" and figure["title"] == "dxs[:, t]"
    assert figure["name"] == "dxs" and figure["axis"] == 1
    for key in ("yours", "autograd", "maxdiff", "wrong"):
        assert len(figure[key]) == T, key
    assert all(isinstance(v, float) and v >= 0 for v in figure["yours"] + figure["autograd"])
    assert all(isinstance(w, bool) for w in figure["wrong"])
    CheckResult.from_dict(CheckResult(STEP.id, False, figure=figure).to_dict())  # round trip


# (the mistake, the first wrong step as an offset back from the last, what the row says)
LOOP_MISTAKES = [
    ("The last step is right", 1, "one step before the last (t = {last} is right), and at "
                                  "every step before it"),
    ("The cell state's gradient is not carried", 1, "one step before the last"),
    ("The cell's gradient goes back a step unchanged", 1, "one step before the last"),
    ("The loop runs forwards in time", 0, "the last step, where the backward loop starts; it is "
                                          "wrong at every step"),
    ("The cell state is squashed by a tanh", 0, "the last step"),
]


@pytest.mark.parametrize("start, back, says", LOOP_MISTAKES, ids=[m[0][:24] for m in LOOP_MISTAKES])
def test_a_wrong_loop_is_told_its_first_wrong_step(engine, steps, start, back, says):
    result = engine.check(STEP.id, _mistake(start))
    assert not result.passed
    row = next(c for c in result.checks if c.tensor == "dxs")
    first = steps - 1 - back
    assert (f"going back from the last (t = {steps - 1}): dxs[:, t] first differs from "
            f"autograd's at t = {first}, {says.format(last=steps - 1)}") in row.message
    # Localise, then explain: where the loop first goes wrong comes first, then the why.
    assert row.diagnosis is not None and row.message.startswith("Step by step")
    assert row.diagnosis.message in row.message
    _figure_is_well_formed(result.figure, steps)
    assert result.figure["first_wrong"] == first
    assert result.figure["wrong"][first + 1:] == [False] * back
    assert result.figure["wrong"][:first + 1] == [True] * (first + 1)


def test_a_wrong_first_step_is_named_as_the_first(engine, steps):
    """`c_prev` read as `cs[:, s - 1]` at s = 0 too (the last step's, by wrapping): only the
    first step is wrong."""
    code = STEP.solution.replace("c_prev = cs[:, s - 1] if s > 0 else c0", "c_prev = cs[:, s - 1]")
    assert code != STEP.solution
    result = engine.check(STEP.id, code)
    row = next(c for c in result.checks if c.tensor == "dxs")
    assert (f"first differs from autograd's at t = 0, the first step, {steps - 1} steps before "
            f"the last (t = {steps - 1} down to 1 are right).") in row.message
    assert result.figure["wrong"] == [True] + [False] * (steps - 1)


@pytest.mark.parametrize("start, wrong", [("Off by one in time", "dWh"),
                                          ("Your weight gradients are one step's", "dWx")])
def test_a_loop_right_at_every_step_blames_the_sums(engine, steps, start, wrong):
    result = engine.check(STEP.id, _mistake(start))
    assert not result.passed
    note = next(n for n in result.notes if "right at every time step" in n)
    assert f"(t = 0 to {steps - 1})" in note and wrong in note
    assert "dxs" not in note.split("error is in")[1]
    _figure_is_well_formed(result.figure, steps)
    assert result.figure["first_wrong"] is None and not any(result.figure["wrong"])


def test_the_reference_passes_with_the_figure(engine, steps):
    result = engine.check(STEP.id, STEP.solution)
    assert result.passed
    _figure_is_well_formed(result.figure, steps)
    assert result.figure["first_wrong"] is None
    assert result.figure["yours"] == pytest.approx(result.figure["autograd"], rel=1e-4)
    assert not any("right at every time step" in n for n in result.notes)


# -- the comparison itself ---------------------------------------------------------------------


def test_by_time_finds_the_steps_and_keeps_rounding_right():
    g = torch.Generator().manual_seed(0)
    ref64 = torch.randn(3, 5, 4, generator=g, dtype=torch.float64)
    ref32 = ref64.float()
    value = ref32.clone()
    value[:, 1] += 0.5
    value[:, 3] *= 2
    steps = by_time("dxs", 1, value, ref32, ref64)
    assert steps is not None and steps.wrong == [False, True, False, True, False]
    assert steps.first_wrong == 3
    assert "first differs from autograd's at t = 3, one step before the last (t = 4 is right); " \
           "it is wrong at 2 of 5 steps: t = 3, 1." in steps.message()
    right = by_time("dxs", 1, ref32.clone(), ref32, ref64)
    assert right is not None and not any(right.wrong) and right.message() == ""
    assert right.yours == pytest.approx(right.autograd, rel=1e-3)
    # what cannot be sliced like autograd's is not compared
    assert by_time("dxs", 1, value[:, :4], ref32, ref64) is None
    assert by_time("dxs", 3, value, ref32, ref64) is None
    assert by_time("dxs", 1, value * float("nan"), ref32, ref64) is None


@pytest.mark.parametrize("text, expected", [("dxs[:, t]", ("dxs", 1)), ("dxs[t]", ("dxs", 0)),
                                            ("dxs[:, :, t]", ("dxs", 2))])
def test_the_time_field_reads_the_axis(text, expected):
    assert _time_axis({"time": text}, ("dxs", "dh0"), "here") == expected


@pytest.mark.parametrize("text", ["dxs", "dxs[:, 1]", "dxs[t, t]", "dxs[0:2, t]", "dq[:, t]",
                                  "dxs[:, t", "f(dxs)[:, t]"])
def test_a_time_field_that_is_not_an_outputs_slice_is_refused(text):
    with pytest.raises(PackError, match="'time'"):
        _time_axis({"time": text}, ("dxs", "dh0"), "here")


def test_the_lesson_declares_its_time_axis():
    assert STEP.function.time == ("dxs", 1)


# -- drawn -------------------------------------------------------------------------------------

FIGURE = {"kind": "time", "title": "dxs[:, t]", "name": "dxs", "axis": 1,
          "yours": [0.03, 0.025, 0.02, 0.01], "autograd": [0.02, 0.02, 0.015, 0.01],
          "maxdiff": [0.01, 0.004, 0.003, 0.0], "wrong": [True, True, True, False],
          "first_wrong": 2}


def _plain(renderable, width: int = 100) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_the_tui_draws_the_figure_with_the_wrong_steps_marked():
    result = CheckResult.from_dict({"step": STEP.id, "passed": False, "figure": FIGURE})
    text = _plain(result_view(result, None))
    assert "the size of dxs[:, t] at each time step t" in text
    assert "yours first leaves autograd's at t = 2" in text
    axis = next(line for line in text.splitlines() if "└" in line)
    assert axis.count("✗") == 3
    # the marks sit under steps 0, 1 and 2, three columns a step
    start = axis.index("└") + 1
    assert [axis[start + 3 * t] for t in range(4)] == ["✗", "✗", "✗", "─"]
    labels = next(line for line in text.splitlines() if "← t" in line)
    assert labels.split()[:4] == ["0", "1", "2", "3"]
    assert "█ yours" in text and "where they differ" in text
    # the tallest bar fills the top row; a bar of a third of it stays low
    bars = [line for line in text.splitlines() if "│" in line]
    assert len(bars) == 6 and bars[0].split("│")[1][0] == "█"


def test_bars_switch_to_a_log_scale_when_sizes_span_orders_of_magnitude():
    linear, log = heights([1.0, 0.5, 0.25], 4)
    assert not log and linear == [32, 16, 8]
    spread, log = heights([1.0, 1e-3, 1e-6, 0.0], 4)
    assert log and spread[0] == 32 and spread[2] == 1 and spread[3] == 0 and spread[0] > spread[1]
    text = _plain(TimeBars([1.0, 1e-6], [1.0, 1e-6]))
    assert "log scale" in text and "1.0e-06" in text


def test_a_narrow_legend_puts_its_scale_on_a_line_of_its_own():
    """24 steps at two columns a step fit in 60 columns; the legend does not, and its scale
    goes under it whole rather than wrapping between "log" and "scale"."""
    sizes = [10.0 ** -k for k in range(24)]
    wrong = [t % 2 == 0 for t in range(24)]
    text = _plain(TimeBars(sizes, sizes, wrong, label="|dh_t|"), width=60)
    lines = text.splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert lines[-2].strip().endswith("where they differ")
    assert lines[-1].strip() == "(|dh_t|, log scale)"
    wide = _plain(TimeBars(sizes, sizes, wrong, label="|dh_t|"), width=120).splitlines()
    assert wide[-1].strip().endswith("where they differ  (|dh_t|, log scale)")


def test_the_notebook_renders_the_figure_as_a_png():
    result = CheckResult.from_dict({"step": STEP.id, "passed": False, "figure": FIGURE})
    (bundle,) = heatmap_bundles(result)
    png = base64.b64decode(bundle["image/png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    assert width == 2 + 4 * 24 and height == 160
    assert "first leaves autograd's at t = 2" in bundle["text/plain"]
    right = CheckResult.from_dict({"step": STEP.id, "passed": True, "figure": {
        **FIGURE, "yours": FIGURE["autograd"], "wrong": [False] * 4, "first_wrong": None}})
    assert "agree at every step" in heatmap_bundles(right)[0]["text/plain"]


def test_the_reference_rewrites_run_once_per_case_not_once_per_output_or_check(engine,
                                                                                 monkeypatch):
    """A wrong lstm_backward has up to six wrong outputs, each matched against the same rewrites
    of the reference: a rewrite runs once on a case, and a later check reads what it gave."""
    from tutor.core import derived

    runs = []
    real = derived.call_function
    # A rewrite that fits the lesson's case runs on the first fresh case too, to confirm it:
    # a run is a rewrite on a case.
    monkeypatch.setattr(derived, "call_function", lambda step, source, inputs, *a: runs.append(
        (source, id(inputs))) or real(step, source, inputs, *a))
    code = _mistake("The cell state's gradient is not carried")
    first = engine.check(STEP.id, code)
    assert len(runs) == len(set(runs))  # never the same rewrite twice on a case
    runs.clear()
    again = engine.check(STEP.id, code)
    assert runs == []
    assert [c.message for c in again.checks] == [c.message for c in first.checks]


def test_outputs_moved_by_the_same_catalogued_slip_point_to_its_row(engine):
    """The dropped carry is catalogued on dxs; it moves every output, and each of the others
    says so in a line instead of "is wrong" (the whole message is said once)."""
    result = engine.check(STEP.id, _mistake("The cell state's gradient is not carried"))
    rows = {c.tensor: c for c in result.checks}
    assert rows["dxs"].diagnosis.message.startswith("The cell state's gradient is not carried")
    for name in ("dh0", "dc0", "dWx", "dWh", "db"):
        assert rows[name].message.startswith("wrong for the same reason as dxs (above)"), name
        assert rows[name].diagnosis.kind == "known_mistake"
    # a slip on the weights alone leaves the rows it does not move alone
    weights = engine.check(STEP.id, _mistake("Off by one in time"))
    assert all(c.accepted for c in weights.checks if c.tensor in ("dxs", "dh0", "dc0"))
