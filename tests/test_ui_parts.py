"""The TUI's small pure parts: active time, template blanks, inline Markdown, heatmap labels,
the fitted footer, the folded forward pass, tallies, the checks' runner. No app, no evaluator:
fast."""

from __future__ import annotations

import io
import threading
import time

from rich.console import Console

from tutor.pack.curriculum import tally
from tutor.pack.model import load_pack
from tutor.ui.activity import ActiveClock
from tutor.ui.placeholders import merge_typed_assignment, next_placeholder, placeholders
from tutor.ui.prose import prose
from tutor.ui.runner import Runner
from tutor.ui.screens.training import parse_steps
from tutor.ui.summary import hardest
from tutor.ui.widgets.feedback import result_view
from tutor.ui.widgets.footer import Key, fit
from tutor.ui.widgets.forward import forward_rows
from tutor.ui.widgets.heatmap import Heatmap
from tutor.values.durations import spoken as duration
from tutor.values.results import CheckResult

PACK = load_pack()


def plain(renderable, width: int = 100) -> str:
    console = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


# --- active time --------------------------------------------------------------------------------


def test_active_time_counts_gaps_between_actions_up_to_the_cap():
    clock = ActiveClock(idle_cap=300, now=0)
    clock.touch(now=100)  # 100 s of work
    clock.touch(now=1100)  # a 1000 s pause counts as 300
    assert clock.take(now=1100) == 400
    # After the last action, time counts until the cap, once.
    assert clock.take(now=1200) == 100
    assert clock.take(now=5000) == 200
    assert clock.take(now=6000) == 0


def test_a_paused_clock_counts_nothing_until_the_next_action():
    clock = ActiveClock(idle_cap=300, now=0)
    clock.pause(now=50)
    assert clock.take(now=250) == 50
    clock.touch(now=1000)
    assert clock.take(now=1010) == 10


# --- template blanks ----------------------------------------------------------------------------


def test_a_whole_line_typed_over_the_blank_keeps_the_learners_assignment():
    assert merge_typed_assignment("dprobs = dprobs = 1.0 / probs") == ("dprobs = 1.0 / probs", 9)
    assert merge_typed_assignment("dcounts += dcounts += x") == ("dcounts += x", 11)
    assert merge_typed_assignment("    dW1 = dW1 = h.T  # note") == ("    dW1 = h.T  # note", 6)
    # Still typing, a comparison, an ordinary use of the name: left alone.
    for line in ("dprobs = dprobs =", "dprobs = dprobs == x", "dx = dx * 2", "dprobs = ..."):
        assert merge_typed_assignment(line) is None


def test_placeholders_are_found_in_code_and_visited_in_turn():
    text = "# ... in a comment\ndh = ...\ndW2 = ...  # ...\ndb2 = ..."
    assert placeholders(text) == [(1, 5), (2, 6), (3, 6)]
    assert next_placeholder(text, (1, 8)) == (2, 6)
    assert next_placeholder(text, (3, 9)) == (1, 5)  # wraps round
    assert next_placeholder("dh = h", (0, 0)) is None


def test_second_branch_templates_add_to_the_first():
    for sid in ("atomic/counts", "atomic/logits", "atomic/bndiff", "atomic/hprebn"):
        step = PACK.step(sid)
        target = step.checks[0]
        assert f"d{target} += ..." in step.template
        assert step.solution.lstrip().startswith(f"d{target} += ")


# --- inline Markdown ----------------------------------------------------------------------------


def test_emphasis_is_rendered_and_arithmetic_is_left_alone():
    text = prose("`bnmeani` is *subtracted*, so it is a **mean** of n*(n-1)*x and a * b.")
    assert text.plain == "bnmeani is subtracted, so it is a mean of n*(n-1)*x and a * b."
    styles = {text.plain[s.start:s.end]: str(s.style) for s in text.spans}
    assert styles["subtracted"] == "italic" and styles["mean"] == "bold"
    assert "bnmeani" in styles  # code style


def test_the_rounding_sentence_is_said_once_per_check():
    rounding = ("correct: it differs from autograd only by float32 rounding (maxdiff 1.0e-09; "
                "both are that close to the float64 gradient)")
    checks = [{"tensor": t, "grad": f"d{t}", "exact": False, "approximate": True,
               "maxdiff": 1e-9, "verdict": "approximate", "diagnosis": None,
               "message": rounding, "heatmap": None, "note": None} for t in ("h", "W2", "b2")]
    result = CheckResult.from_dict({"passed": True, "checks": checks})
    text = " ".join(plain(result_view(result, None)).split())
    assert text.count("float32 rounding") == 1
    assert "dh, dW2 and db2 differ from autograd only by float32 rounding" in text


# --- heatmap ------------------------------------------------------------------------------------


def test_a_pooled_heatmap_says_how_it_was_pooled_and_what_the_colours_mean():
    values = [[0.001 * (r + c) for c in range(32)] for r in range(8)]
    text = plain(Heatmap(values, shape=[32, 64]), width=78)
    flat = " ".join(text.split())
    assert "row 0" in text and "63 ← column" in text
    assert "32 rows × 64 columns" in flat and "of 4 × 2 entries" in flat
    assert "two cell rows per line" in flat
    assert "colour: 0" in flat and "(largest)" in flat
    lines = text.splitlines()
    assert [line.split()[0] for line in lines[1:5]] == ["0", "8", "16", "24"]


# --- footer -------------------------------------------------------------------------------------


def test_the_footer_leaves_out_whole_keys_least_needed_first():
    keys = [Key(k, k, d, a, True, "") for a, k, d in [
        ("check", "^j", "Check"), ("hint", "f1", "Hint"), ("reveal", "f2", "Solution"),
        ("scratch", "^r", "Run"), ("explain", "f3", "Explain"), ("next_step", "^n", "Next"),
        ("previous_step", "^↑", "Prev"), ("help", "f9", "Keys")]]
    everything = sum(len(k.display) + len(k.description) + 2 for k in keys)
    assert fit(keys, everything) == keys
    narrower = [k.action for k in fit(keys, everything - 1)]
    assert "previous_step" not in narrower and narrower[0] == "check"
    tiny = [k.action for k in fit(keys, 30)]
    assert tiny[:2] == ["check", "hint"]
    assert sum(len(k.display) + len(k.description) + 2 for k in fit(keys, 30)) <= 30


# --- forward pass -------------------------------------------------------------------------------


def test_a_long_forward_line_breaks_between_words():
    lines = [line for line in PACK.forward_lines if line.exercise == 3]
    rows, _, owners = forward_rows(lines, {}, set(), set(), 60)
    body = [r.plain for r in rows[1:]]
    assert len(body) > 1 and all(len(r) <= 60 for r in body)
    joined = "".join(r.strip() for r in body)
    assert joined.replace(" ", "") == lines[0].source.replace(" ", "")
    for row in body:  # no name cut in two
        assert not row.rstrip().endswith((".va", "hprebn.v"))
    assert set(owners[1:]) == {0} and owners[0] == -1


# --- tallies and settings -----------------------------------------------------------------------


def test_tallies_and_durations():
    rows = [{"id": s.id, "exercise": s.exercise, "status": st, "attempts": a, "hints": h,
             "best_maxdiff": None, "seconds": sec}
            for s, st, a, h, sec in zip(PACK.exercise(1).steps[:3],
                                        ("exact", "passed", "revealed"), (1, 4, 2), (0, 2, 3),
                                        (30, 95.4, 600), strict=True)]
    t = tally(rows)
    assert (t.steps, t.done, t.exact, t.passed, t.revealed, t.attempts, t.hints) == \
        (3, 3, 1, 1, 1, 7, 5)
    assert t.parts == "1 exact, 1 passed, 1 revealed"
    assert duration(t.seconds) == "12 min 05 s" and duration(3725) == "1 h 02 min"
    assert hardest(rows, PACK) == [("dprobs", 4), ("dcounts_sum_inv", 2)]


def test_step_counts_are_read_as_learners_type_them():
    assert parse_steps("200 000") == 200_000 and parse_steps("20k") == 20_000
    assert parse_steps("5_000") == 5000 and parse_steps("1,000") == 1000
    assert parse_steps("0") is None and parse_steps("") is None and parse_steps("ten") is None


# --- the thread that runs checks ----------------------------------------------------------------


def test_the_runner_takes_each_job_before_submit_returns_and_runs_them_in_order_on_one_thread():
    runner = Runner("test-runner")
    taken: list[tuple[int, str]] = []
    release = threading.Event()

    def job(number: int):
        def run() -> None:
            taken.append((number, threading.current_thread().name))
            if number == 1:
                release.wait(5)  # a long check: the next job waits its turn
        return run

    runner.submit(job(1))
    assert taken == [(1, "test-runner")]  # already running when submit returned
    started = time.monotonic()
    runner.submit(job(2))  # the runner is busy: submit waits a moment at most, then returns
    assert time.monotonic() - started < 1 and taken == [(1, "test-runner")]
    release.set()
    deadline = time.monotonic() + 5
    while len(taken) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert taken == [(1, "test-runner"), (2, "test-runner")]
    thread = next(t for t in threading.enumerate() if t.name == "test-runner")
    runner.close()
    thread.join(5)
    assert not thread.is_alive()


def test_the_welcome_speaks_of_no_notebook_a_lesson_does_not_have():
    # Only makemore follows a lecture notebook with its `cmp`; the welcome is the same words
    # for every lesson, so it names neither.
    from pathlib import Path

    from tutor.pack.model import find_pack
    from tutor.ui.screens.welcome import welcome_markdown

    for name in ("makemore", "lstm", "gpt"):
        text = welcome_markdown(Path("progress.db"), load_pack(find_pack(name)))
        general = text.split("## The keys that matter")[0]
        assert "cmp" not in general and "notebook" not in general
        assert "*exact*" in general and "*approximate*" in general


def test_an_explanation_s_wide_code_scrolls_sideways_at_80_columns():
    """conv's third convolution written out per position is wider than an 80-column dialog:
    → brings its last term into view (the formula is never clipped out of reach)."""
    import asyncio
    from pathlib import Path

    from textual.app import App
    from textual.widgets.markdown import MarkdownFence

    from tutor.pack.model import load_pack
    from tutor.ui.screens.explain import ExplainScreen

    pack = load_pack(Path(__file__).resolve().parents[1] / "exercises" / "conv")
    step = pack.step("conv/h2")
    exercise = next(e for e in pack.exercises if e.number == step.exercise)

    class Host(App):
        def on_mount(self) -> None:
            self.push_screen(ExplainScreen(exercise, step))

    async def scenario() -> None:
        app = Host()
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            fences = list(app.screen.query(MarkdownFence))
            assert fences and max(f.max_scroll_x for f in fences) > 0  # wider than the dialog
            await pilot.press("right", "right")
            await pilot.pause()
            assert max(f.scroll_x for f in fences) > 0

    asyncio.run(scenario())
