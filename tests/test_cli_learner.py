"""The command line through a learner's hour (issue #10): messages that read as prose at any
width, `train` running what the exercise-4 screen shows, `list`, `check --all`, `watch` and the
step count as promised, and `hint`. Real processes on a temporary home, as a learner runs them."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tutor import source
from tutor.commands import COMMANDS
from tutor.pack.model import load_pack, unwrap
from tutor.session.store import Store
from tutor.training.plan import training_code, training_step

PACK = load_pack()
README = Path(__file__).resolve().parent.parent / "README.md"
WIDTH = 40  # the narrowest the CLI wraps to: even a short diagnosis has to wrap here
KNOWN_MISTAKE = "dprobs = probs * dlogprobs"  # catalogued: "The derivative of `log(x)` is not `x`"
WRONG = "dprobs = dlogprobs / probs + 1"  # no catalogued mistake: derived from the code itself
ROW = re.compile(r"^[✓✗!] \S.* \| exact: ")  # a cmp row of a `check --all` table


def cli(home: Path, *args: str, stdin: str | None = None, columns: int = WIDTH,
        timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu", *args],
        capture_output=True, text=True, input=stdin, timeout=timeout, env=env,
    )


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- 1. pack text as prose, wrapped with a hanging indent ----------------------------------------


def test_unwrap_joins_lines_of_a_paragraph_and_keeps_blocks():
    text = ("A sentence broken\nacross two lines.\n\n- an item that\n  goes on\n- another\n\n"
            "```python\nx = 1\ny = 2\n```\n\n    indented = code\n    more = code\n")
    assert unwrap(text) == (
        "A sentence broken across two lines.\n\n- an item that goes on\n- another\n\n"
        "```python\nx = 1\ny = 2\n```\n\n    indented = code\n    more = code"
    )


def test_pack_prose_has_no_hard_line_breaks():
    # Two non-blank lines in a row would be a sentence broken where the pack file wrapped it.
    texts = [ex.intro for ex in PACK.exercises]
    texts += [t for s in PACK.steps for t in (*s.hints, *(m.message for m in s.mistakes))]
    for text in texts:
        filled = [bool(line.strip()) for line in text.splitlines()]
        assert not any(a and b for a, b in zip(filled, filled[1:], strict=False)), text


def _no_message_line_at_column_0(out: str, header_lines: int) -> None:
    """Past the header, only table rows and the closing count may start at column 0, and no
    wrapped line may be wider than the terminal."""
    for line in out.splitlines()[header_lines:]:
        if " | exact: " in line or re.match(r"\d+ of \d+ cells passed", line) or not line:
            continue
        assert line.startswith(" "), f"starts at column 0: {line!r}\n{out}"
        assert len(line) <= WIDTH, f"wider than {WIDTH}: {line!r}"


@pytest.mark.parametrize("code", [KNOWN_MISTAKE, WRONG], ids=["known_mistake", "wrong"])
def test_check_wraps_the_diagnosis_under_its_row(home, code):
    out = cli(home, "check", "probs", "--code", code, "--no-record")
    assert out.returncode == 1
    _no_message_line_at_column_0(out.stdout, header_lines=1)
    as_json = json.loads(cli(home, "check", "probs", "--code", code, "--json",
                             "--no-record").stdout)
    message = as_json["checks"][0]["message"]
    assert "\n" not in message
    assert _flat(message) in _flat(out.stdout)  # all of it, only rewrapped


@pytest.mark.parametrize("code", [KNOWN_MISTAKE, WRONG], ids=["known_mistake", "wrong"])
def test_check_all_wraps_the_diagnosis_under_its_row(home, tmp_path, code):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{PACK.step('logprobs').solution}\n"
                    f"# %% atomic/probs\n{code}\n")
    out = cli(home, "check", "--all", str(work), "--no-record")
    assert out.returncode == 1
    assert "[known_mistake]" in out.stdout if code == KNOWN_MISTAKE else "[derived]" in out.stdout
    _no_message_line_at_column_0(out.stdout, header_lines=0)


def test_the_terminal_width_decides_the_wrapping(home):
    wide = cli(home, "check", "probs", "--code", KNOWN_MISTAKE, "--no-record", columns=200)
    narrow = cli(home, "check", "probs", "--code", KNOWN_MISTAKE, "--no-record", columns=50)
    assert len(wide.stdout.splitlines()) < len(narrow.stdout.splitlines())
    assert _flat(wide.stdout) == _flat(narrow.stdout)


# -- 2. train runs the exercise-4 draft --------------------------------------------------------


def _save_training_draft(home: Path, code: str) -> None:
    with Store.open(home, PACK) as store:
        store.save_draft(training_step(PACK).id, code)


def test_print_code_shows_the_draft_and_says_so(home):
    assembled = training_code(PACK, {})
    plain = cli(home, "train", "--print-code")
    assert plain.returncode == 0 and plain.stdout == assembled
    assert "draft" not in plain.stderr
    draft = "# edited on the exercise-4 screen\n" + assembled
    _save_training_draft(home, draft)
    shown = cli(home, "train", "--print-code")
    assert shown.returncode == 0 and shown.stdout == draft
    assert "draft" in shown.stderr and "--from-exercises" in _flat(shown.stderr)
    bypassed = cli(home, "train", "--print-code", "--from-exercises")
    assert bypassed.returncode == 0 and bypassed.stdout == assembled


def test_train_runs_the_draft_not_the_assembled_step(home):
    # A draft whose dW2 is twice too big: only a run of the draft can fail the gradient check.
    assembled = training_code(PACK, None)
    line = next(s for s in assembled.splitlines() if s.startswith("dW2 ="))
    _save_training_draft(home, assembled.replace(line, line.replace("=", "= 2 *", 1)))
    short = ("train", "--steps", "2", "--gradcheck-steps", "1", "--no-record", "--json")
    from_draft = cli(home, *short)
    assert from_draft.returncode == 1, from_draft.stderr
    assert "W2" in json.loads(from_draft.stdout)["gradcheck"]["failure"]["message"]
    assembled_run = cli(home, *short, "--from-exercises")
    assert assembled_run.returncode == 0, assembled_run.stdout[-2000:]


def test_the_assembled_code_is_no_draft_whatever_step_count_its_header_says(home):
    """The training screen saves what is on it; the loop assembled from the solved steps (a run
    started with only the step count changed) is not the learner's own, so it is kept as no
    draft and a step fixed later still reaches `train`; an edit is kept."""
    from tutor.session.controller import Lesson

    with Store.open(home, PACK) as store:
        lesson = Lesson(PACK, store, None)
        lesson.save_training_draft(training_code(PACK, {}, 5000))
        assert not lesson.training_source().draft
        edited = training_code(PACK, {}) + "print('my own line')\n"
        lesson.save_training_draft(edited)
        source = lesson.training_source()
        assert source.draft and source.code == edited


def test_from_exercises_does_not_mix_with_file_or_reference(home, tmp_path):
    step = tmp_path / "step.py"
    step.write_text("x = 1\n")
    for extra in (("--file", str(step)), ("--reference",)):
        out = cli(home, "train", "--from-exercises", *extra)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1


# -- 3. list, check --all, watch, the step count -----------------------------------------------


def test_plain_list_gives_each_step_with_its_forward_lines(home):
    out = cli(home, "list")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    for number, step in enumerate(PACK.steps, start=1):
        at = next(i for i, line in enumerate(lines) if re.match(rf"\s*{number}\. {step.id} ", line))
        below = lines[at + 1:at + 1 + len(step.lines)]
        assert [line.strip() for line in below] == [PACK.line_for(t).source for t in step.lines]


def test_check_all_labels_the_fused_rows_with_their_step(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text("".join(f"# %% {sid}\n{PACK.step(sid).solution}\n"
                            for sid in ("atomic/logits", "fused/cross_entropy")))
    out = cli(home, "check", "--all", str(work), "--no-record", columns=100)
    assert out.returncode == 0, out.stdout
    labels = [line.split("|")[0][2:].strip() for line in out.stdout.splitlines()
              if ROW.match(line)]
    assert labels == ["logits", "logits (fused/cross_entropy)"]


def test_check_all_names_the_cells_that_did_not_pass(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{PACK.step('logprobs').solution}\n"
                    f"# %% atomic/probs\n{WRONG}\n")
    line = work.read_text().splitlines().index("# %% atomic/probs") + 1
    out = cli(home, "check", "--all", str(work), "--no-record", columns=100)
    assert f"1 of 2 cells passed; not passed: atomic/probs (work.py, line {line})" in out.stdout


def test_every_command_counts_the_steps_the_same_way(home):
    step, number, total = PACK.step("probs"), 2, len(PACK.steps)
    where = f"exercise 1, step {number} of {total}"
    assert re.search(rf"^\s*{number}\. {step.id} ", cli(home, "list").stdout, re.M)
    assert f"{step.id} ({where})" in cli(home, "show", str(number), "--no-shapes").stdout
    assert cli(home, "check", str(number), "--code", WRONG).stdout.startswith(
        f"{step.id} ({where})")
    assert f"{step.id} ({where})" in cli(home, "hint", str(number)).stdout
    progress = cli(home, "progress").stdout
    assert re.search(rf"^\S*\s+{number}\. {step.id} ", progress, re.M)
    assert f"of {total} steps done" in progress


def _read_into(fd: int, seen: list[bytes]) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # the terminal's other end closed
            return
        if not data:
            return
        seen.append(data)


def _wait_until(seen: list[bytes], text: str, count: int = 1, timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if b"".join(seen).decode(errors="replace").count(text) >= count:
            return True
        time.sleep(0.1)
    return False


def _watch(home: Path, work: Path, stdout, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu", "watch",
         str(work)], stdout=stdout, stderr=subprocess.PIPE, **popen,
    )


def _as_background_job() -> None:
    """What a shell does to a job started with `&`: SIGINT ignored, inherited across exec."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_watch_started_in_the_background_still_stops_on_sigint(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{PACK.step('logprobs').solution}")
    proc = _watch(home, work, subprocess.PIPE, preexec_fn=_as_background_job)
    seen: list[bytes] = []
    threading.Thread(target=_read_into, args=(proc.stdout.fileno(), seen), daemon=True).start()
    try:
        assert _wait_until(seen, "watching")
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # SIGINT did not stop it: fail, leaving nothing behind
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0 and "stopped watching" in err.decode()


def test_train_into_a_file_writes_progress_as_it_goes_and_stops_on_sigint(home):
    """`train > log` from a background job: progress lines arrive while the run goes on, and
    SIGINT (ignored by the shell for background jobs) still cancels it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu", "train",
         "--reference", "--steps", "200000", "--no-record"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_as_background_job)
    seen: list[bytes] = []
    threading.Thread(target=_read_into, args=(proc.stdout.fileno(), seen), daemon=True).start()
    try:
        assert _wait_until(seen, "/200 000 ·", timeout=120)
        assert proc.poll() is None  # the line came while the run was still going
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 130 and "cancelling" in err.decode()


def test_watch_redraws_on_a_terminal_names_the_failing_cell_and_stops_quietly(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text("# %% atomic/logprobs\ndlogprobs = torch.zeros_like(logprobs)\n")
    leader, follower = pty.openpty()
    proc = _watch(home, work, follower)
    os.close(follower)
    seen: list[bytes] = []
    threading.Thread(target=_read_into, args=(leader, seen), daemon=True).start()
    try:
        assert _wait_until(seen, "not passed: atomic/logprobs (work.py, line 1)")
        work.write_text(f"# %% atomic/logprobs\n{PACK.step('logprobs').solution}")
        assert _wait_until(seen, "1 of 1 cells passed")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        os.close(leader)
    screen = b"".join(seen).decode(errors="replace")
    # Each run starts from a cleared screen, so the terminal shows only the latest table.
    assert screen.count("\x1b[2J") >= 2
    latest = screen.rsplit("\x1b[2J", 1)[1]
    assert "1 of 1 cells passed" in latest and "not passed" not in latest
    assert proc.returncode == 0
    assert "KeyboardInterrupt" not in err.decode() and "Traceback" not in err.decode()


def test_watch_appends_to_a_pipe_without_escape_codes(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{PACK.step('logprobs').solution}")
    proc = _watch(home, work, subprocess.PIPE)
    seen: list[bytes] = []
    threading.Thread(target=_read_into, args=(proc.stdout.fileno(), seen), daemon=True).start()
    try:
        assert _wait_until(seen, "1 of 1 cells passed")
        work.write_text(work.read_text() + "\n")
        assert _wait_until(seen, "1 of 1 cells passed", count=2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert "\x1b" not in b"".join(seen).decode()


# -- 4. hint ------------------------------------------------------------------------------------


def _hints_used(home: Path, sid: str) -> int:
    with Store.open(home, PACK) as store:
        return store.hints_shown(sid)


def test_hint_shows_the_next_hint_and_counts_it(home):
    step = PACK.step("probs")
    first = cli(home, "hint", "probs")
    assert first.returncode == 0
    assert "hint 1 of 3" in first.stdout and _flat(step.hints[0]) in _flat(first.stdout)
    assert _hints_used(home, step.id) == 1
    second = cli(home, "hint", "probs")
    assert _flat(step.hints[1]) in _flat(second.stdout)
    assert _flat(step.hints[0]) not in _flat(second.stdout)
    assert json.loads(cli(home, "progress", "--json").stdout)["steps"][1]["hints"] == 2


def test_hint_all_shows_the_hints_so_far_without_a_new_one(home):
    step = PACK.step("probs")
    assert "no hints shown yet" in cli(home, "hint", "probs", "--all").stdout
    cli(home, "hint", "probs")
    cli(home, "hint", "probs")
    every = cli(home, "hint", "probs", "--all")
    assert all(_flat(h) in _flat(every.stdout) for h in step.hints[:2])
    assert _flat(step.hints[2]) not in _flat(every.stdout)
    assert _hints_used(home, step.id) == 2
    as_json = json.loads(cli(home, "hint", "probs", "--all", "--json").stdout)
    assert as_json["hints"] == list(step.hints[:2]) and as_json["new"] is False


def test_hint_stops_at_the_last_one(home):
    step = PACK.step("probs")
    for _ in range(len(step.hints) + 1):
        last = cli(home, "hint", "probs")
    assert _hints_used(home, step.id) == len(step.hints)
    assert "last hint" in last.stdout and _flat(step.hints[-1]) in _flat(last.stdout)


def test_hint_lines_hang_under_their_number(home):
    out = cli(home, "hint", "probs", columns=WIDTH)
    for line in out.stdout.splitlines()[1:]:
        assert line.startswith("  ") and len(line) <= WIDTH, line


def test_show_points_to_hint(home):
    out = cli(home, "show", "probs", "--no-shapes")
    assert "backprop-tutor hint atomic/probs" in _flat(out.stdout)


# -- 5. the README --------------------------------------------------------------------------------


def test_readme_documents_hint_draft_and_the_limits():
    text = README.read_text(encoding="utf-8")
    hint = next(c for c in COMMANDS if c.name == "hint")
    assert f"backprop-tutor {hint.name} atomic/probs " in text
    assert f"backprop-tutor {hint.name} atomic/probs --all" in text
    assert f"{source.MAX_CODE_BYTES // 1024} KB" in text
    assert f"{source.MAX_FILE_BYTES // 2**20} MB" in text
    assert "--from-exercises" in text


def test_a_bad_setting_exits_2_with_one_line(home):
    out = cli(home, "--timeout", "soon", "list")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "--timeout" in out.stderr


def test_a_shape_that_broadcasts_passes_with_its_note_shown(home):
    code = ("dbngain = (bnraw * dhpreact).sum(0)\ndbnraw = bngain * dhpreact\n"
            "dbnbias = dhpreact.sum(0, keepdim=True)")
    out = cli(home, "check", "atomic/bngain", "--code", code, columns=100)
    assert out.returncode == 0, out.stdout
    assert "note: dbngain is [64] where bngain is [1, 64]" in _flat(out.stdout)


def test_wrapping_never_cuts_a_code_span_that_fits_on_a_line():
    from tutor.session.report import wrap

    text = ("`h_prev` and `c_prev` are step `s - 1`'s, or `h0` and `c0` at the first step, and "
            "the long one is `dx, dh_prev, dc_prev, dWx, dWh, db = f(dh, dc, x, h_prev, c_prev)`.")
    for width in range(40, 90):
        lines = wrap(text, "", "", width)
        assert " ".join(lines) == text
        # only the span wider than a whole line, the last, may break (at its spaces)
        whole = lines[:next(k for k, line in enumerate(lines) if "`dx," in line)]
        for line in whole:
            assert line.count("`") % 2 == 0, (width, lines)
            assert len(line) <= width, (width, lines)


def test_show_wraps_every_paragraph_alike_and_keeps_code_spans_whole(home):
    # The LSTM's step through time: `s - 1` must not be cut after its minus sign, and the
    # sentence on how the function is called hangs no indent the explanation does not.
    for columns in (70, 80, 90):
        out = cli(home, "--pack", "lstm", "show", "bptt/lstm_backward", "--no-shapes",
                  columns=columns)
        assert out.returncode == 0, out.stderr
        prose = out.stdout.split("\n\n", 2)[2].split("\nTemplate:")[0]
        explanation = prose.split("The tutor calls your function as")[0]
        for line in explanation.splitlines():
            assert line.count("`") % 2 == 0, f"a code span cut at {line!r}\n{out.stdout}"
        for line in prose.splitlines():
            assert not line.startswith(" "), f"indented unlike the rest: {line!r}\n{out.stdout}"


def test_a_locked_step_is_checked_and_says_it_is_locked(home):
    """The tutor opens steps in order; the command line checks any of them, records the
    attempt, and says which steps come first."""
    out = cli(home, "check", "atomic/counts", "--code", "dcounts = counts_sum_inv * dprobs")
    assert out.returncode == 1
    said = _flat(out.stdout)
    assert "note: dcounts is locked: finish dlogprobs and 3 more first." in said
    assert "This attempt is recorded" in said
    progress = cli(home, "progress", "--json")
    assert any(s["id"] == "atomic/counts" and s["attempts"] == 1
               for s in json.loads(progress.stdout)["steps"]), progress.stdout
    opened = cli(home, "check", "atomic/logprobs", "--code",
                 "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n")
    assert "is locked" not in opened.stdout
