"""What learner code can write and what a step can keep are bounded, on every path to a child.

Writing: what the code prints is kept as its first and last part with a note of what was cut,
and so is what reaches the child's own stdout and stderr without `print` (here: the traceback
Python prints for an exception raised while a generator is collected, which learner code can do
in a loop); the worker's stderr grows by a few kilobytes per child, however much it wrote, and
the check still gets its verdict. Text shown to the learner carries no terminal control.

Keeping: a tensor a step leaves for the steps after it counts at the size it can reach (an
expanded view is a few bytes that become gigabytes when copied), and is refused in that step.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.model import load_pack

PACK = load_pack()
TINY = Path(__file__).parent / "packs" / "tiny"
TINY_PACK = load_pack(TINY)
SOLUTION = PACK.step("atomic/probs").solution
LOGPROBS = PACK.step("atomic/logprobs").solution

# A child's output that reaches the worker's stderr: the first and last 16 kB, the note and the
# line that names the child, made inert.
LOG_CAP = 2 * 16 * 1024 + 1_000
# About 4 MB on the child's stderr, each exception carrying a terminal escape.
RAISES_WHILE_COLLECTED = """
def noisy():
    try:
        yield 1
    finally:
        raise ValueError("\\x1b]0;PWNED\\x07" + "y" * 10_000)
for i in range(400):
    g = noisy()
    next(g)
    g = None
"""
PRINTS = "for i in range(100_000):\n    print(i)\n"
WARNS = "for i in range(5_000):\n    t = torch.tensor(probs)\n"  # torch warns at each copy
CONTROLS = ("\x1b", "\x07", "\x9b", "\r", "\b", "\u202e", "\u2066")


# --- the pieces ------------------------------------------------------------------------------
def test_clean_makes_every_kind_of_terminal_control_inert():
    from tutor.sandbox.clean import clean

    text = ("a\x1b[2Jb\x1b]0;title\x07c\x1b]8;;http://x\x1b\\d\x9b31me\x9d0;t\x9cf\rg\bh"
            "\u202ei\u2066j\u2069k\x00l\x7fm\x85n\tok\n")
    assert clean(text) == "abcdefghijklmn\tok\n"


def test_clean_keeps_the_first_and_last_part_of_long_text_with_what_was_cut():
    from tutor.sandbox.clean import clean

    text = "start " + "x" * 10**7 + "\x1b[31m end"
    cleaned = clean(text, 2_000)
    assert len(cleaned) <= 2_000
    assert cleaned.startswith("start xxx") and cleaned.endswith("xxx end")
    cut = int(re.search(r"… ([\d,]+) characters cut …", cleaned)[1].replace(",", ""))
    assert cut == len("start " + "x" * 10**7 + " end") - len(cleaned.replace(
        re.search(r"\n… [\d,]+ characters cut …\n", cleaned)[0], ""))


def test_printed_output_keeps_its_first_and_last_part_and_cmp_calls_their_place():
    from tutor.core.candidate import MAX_STDOUT, Output

    out = Output()
    out.print("first")
    out.cmp("dprobs", None)
    for i in range(10**5):
        out.print(i)
    out.cmp("dlogits", None)
    out.print("last")
    text = out.text()
    assert len(text) <= MAX_STDOUT
    assert text.startswith("first\n0\n1\n") and text.endswith("99998\n99999\nlast\n")
    assert re.search(r"\n… [\d,]+ characters cut …\n", text)
    (early, *_), (late, *_) = out.cmp_calls
    assert text[:early] == "first\n"
    assert text[late:] == "last\n"


# --- checks, on each path to a child ------------------------------------------------------------
PATHS = ["fork", "spawn", "started"]  # forked per check, forked by the fork server, started


def _engine(path: str, monkeypatch: pytest.MonkeyPatch):
    from tutor.core.engine import Engine

    if path == "started":
        monkeypatch.setenv("BACKPROP_TUTOR_FORK_SERVER", "0")
    engine = Engine(Settings(device="cpu", isolation="fork" if path == "fork" else "spawn"))
    engine.prepare()
    return engine


@pytest.fixture(scope="module", params=PATHS)
def engine(request):
    with pytest.MonkeyPatch.context() as mp:
        made = _engine(request.param, mp)
        yield made
    made.close()


def _logged(capfd: pytest.CaptureFixture, until: str, seconds: float = 30.0) -> str:
    """What reached this process's stderr, read until `until` shows (a started child's is
    written by a thread when the child ends) or `seconds` pass."""
    seen = ""
    deadline = time.monotonic() + seconds
    while until not in seen and time.monotonic() < deadline:
        seen += capfd.readouterr().err
        time.sleep(0.05)
    return seen + capfd.readouterr().err


def test_a_child_that_writes_to_its_stderr_in_a_loop_costs_the_log_its_first_and_last_part(
        engine, capfd):
    capfd.readouterr()
    result = engine.check("atomic/probs", RAISES_WHILE_COLLECTED + SOLUTION).to_dict()
    assert result["passed"], result["error"]
    logged = _logged(capfd, "cut …")
    assert "cut …" in logged, logged[-500:]
    assert "wrote:\nException ignored in" in logged and "ValueError: yyy" in logged
    assert "PWNED" not in logged  # a window title, dropped with the sequence that sets it
    assert len(logged) < 3 * LOG_CAP, len(logged)  # this child's, and any spare's that ended
    assert not any(c in logged for c in CONTROLS), repr(logged[:300])


@pytest.mark.parametrize("loop", [PRINTS, WARNS], ids=["prints", "warns"])
def test_printing_or_warning_in_a_loop_keeps_both_ends_of_the_output_and_the_verdict(
        engine, loop):
    from tutor.sandbox.clean import MAX_TEXT

    result = engine.check("atomic/probs", loop + SOLUTION).to_dict()
    assert result["passed"], result["error"]
    stdout = result["stdout"]
    assert len(stdout) <= MAX_TEXT
    assert re.search(r"\n… [\d,]+ characters cut …\n", stdout)
    if loop == PRINTS:
        assert stdout.startswith("0\n1\n2\n") and stdout.endswith("\n99998\n99999\n")
    else:
        assert stdout.startswith("warning (line 2): To copy construct from a tensor")
        assert stdout.rstrip().endswith("rather than torch.tensor(sourceTensor).")


def test_terminal_controls_in_print_output_are_removed(engine):
    code = 'print("a\\x1b[2Jb\\x9b2Jc\\rd\\be\\u202ef\\x1b]0;PASSED\\x07g")\n' + SOLUTION
    result = engine.check("atomic/probs", code).to_dict()
    assert result["passed"], result["error"]
    assert result["stdout"] == "abcdefg\n"


# --- what a step keeps --------------------------------------------------------------------------
EXPANDED = "\nbig = torch.zeros(1).expand(2**31)  # 4 bytes of memory that read as 8 GB\n"
VIEWED_AS = "\nbig = logprobs.view(torch.int32).flatten()[:1].expand(2**31)\n"
AS_BYTES = "\nraw = logprobs.view(torch.uint8)  # the same memory read as bytes: small\n"


@pytest.mark.parametrize("keeps", [EXPANDED, VIEWED_AS], ids=["expand", "dtype-view"])
def test_a_kept_view_is_refused_in_the_step_that_keeps_it_at_the_size_it_reaches(engine, keeps):
    code = LOGPROBS + keeps
    result = engine.check("atomic/logprobs", code).to_dict()
    error = result["error"] or {}
    assert not result["passed"] and error.get("kind") == "memory", error
    assert re.search(r"keeps `big` between steps, a view that reads 8192 MB from "
                     r"[\d.]+ (bytes|kB) of memory .*the limit is 16 MB.*`del big`",
                     error["message"]), error
    # The next step, after the code that was accepted, is graded as ever.
    after = engine.check("atomic/probs", SOLUTION, {"atomic/logprobs": LOGPROBS}).to_dict()
    assert after["passed"], after["error"]
    # Were the refused code replayed (a file of cells), the next step says the same, at once.
    replayed = engine.check("atomic/probs", SOLUTION, {"atomic/logprobs": code}).to_dict()
    assert (replayed["error"] or {}).get("kind") == "memory", replayed["error"]
    assert "`big`" in replayed["error"]["message"]


def test_a_kept_dtype_view_of_an_ordinary_tensor_still_works(engine):
    code = LOGPROBS + AS_BYTES
    assert engine.check("atomic/logprobs", code).to_dict()["passed"]
    after = engine.check("atomic/probs", SOLUTION, {"atomic/logprobs": code}).to_dict()
    assert after["passed"], after["error"]
    shown = engine.scratch("atomic/probs", "print(raw.dtype, raw.shape)",
                           {"atomic/logprobs": code})
    assert shown.stdout == "torch.uint8 torch.Size([32, 108])\n", shown


def test_encoding_a_tensor_refuses_more_than_a_message_before_copying_it():
    import torch

    from tutor.process.isolate import TooLarge, encode_tensor

    with pytest.raises(TooLarge, match="a tensor of 8192 MB"):
        encode_tensor(torch.zeros(1).expand(2**31))


# --- through the worker: its stderr file, checks and a training run -----------------------------
@pytest.fixture(scope="module", params=["fork", "spawn"])
def tiny_evaluator(request):
    from tutor.evaluator.client import Evaluator

    with Evaluator(Settings(device="cpu", pack=str(TINY), isolation=request.param)) as ev:
        assert ev.info()["isolation"] == request.param
        yield ev


def _log_size(ev) -> int:
    ev._stderr.seek(0, 2)
    return ev._stderr.tell()


def _log_grows_by(ev, before: int, until: str, seconds: float = 30.0) -> tuple[int, str]:
    """How much the worker's stderr grew since `before`, read once `until` is in it (a started
    child's part is written when it ends) or `seconds` passed; and what was added."""
    deadline = time.monotonic() + seconds
    while True:
        ev._stderr.seek(before)
        added = ev._stderr.read().decode(errors="replace")
        if until in added or time.monotonic() >= deadline:
            return len(added.encode()), added
        time.sleep(0.05)


def test_the_workers_stderr_stays_small_when_a_check_writes_to_its_own_in_a_loop(
        tiny_evaluator):
    before = _log_size(tiny_evaluator)
    code = RAISES_WHILE_COLLECTED + TINY_PACK.step("tiny/logits").solution
    result = tiny_evaluator.check("tiny/logits", code).to_dict()
    assert result["passed"], result["error"]
    grew, added = _log_grows_by(tiny_evaluator, before, "cut …")
    assert "cut …" in added and grew < 2 * LOG_CAP, (grew, added[-300:])
    assert not any(c in added for c in CONTROLS)


def test_a_training_run_that_prints_and_writes_in_a_loop_is_capped_and_finishes(tiny_evaluator):
    from tutor.sandbox.clean import MAX_TEXT
    from tutor.training import training_code

    before = _log_size(tiny_evaluator)
    code = (RAISES_WHILE_COLLECTED.replace("range(400)", "range(20)")
            + "for i in range(2_000):\n    print('\\x1b[2J', i)\n" + training_code(TINY_PACK))
    run = tiny_evaluator.train(code, 30).to_dict()
    assert run["status"] == "finished", run["error"]
    assert len(run["stdout"]) <= MAX_TEXT
    assert run["stdout"].startswith(" 0\n 1\n") and run["stdout"].endswith(" 1999\n")
    assert re.search(r"\n… [\d,]+ characters cut …\n", run["stdout"])
    assert not any(c in run["stdout"] for c in CONTROLS)
    grew, added = _log_grows_by(tiny_evaluator, before, "cut …")
    assert "a training run's child" in added and "cut …" in added, added[-300:]
    assert grew < 2 * LOG_CAP, grew
