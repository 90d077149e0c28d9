"""Bad input gives one clear line, and a verdict once reached is never lost.

Text that is not UTF-8, code too big to be a gradient, settings of the wrong type or range, a
device that is not there, and a progress store that cannot be written: each is refused with one
line (exit 2), or, once the code has been checked, costs only the record and never the verdict.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest
from rich.console import Console

from tutor import cli as tutor_cli
from tutor.config import ConfigError, resolve
from tutor.pack.model import load_pack
from tutor.session import store as progress
from tutor.session.cells import parse_cells
from tutor.session.report import format_result, format_table
from tutor.session.store import Store, StoreError
from tutor.source import MAX_CODE_BYTES, SourceError, decode, from_argument, size_problem
from tutor.values.results import CheckResult, TensorCheck

PACK = load_pack()
CORRECT = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(n), Yb] = -1.0/n\n"
WRONG = "dlogprobs = torch.zeros_like(logprobs)\n"
# Right on the batch of 32, wrong on the fresh batch of 17.
FIXED_BATCH = "dlogprobs = torch.zeros_like(logprobs)\ndlogprobs[range(32), Yb] = -1.0/32\n"


def cli(home, *args, stdin: bytes | None = None, timeout: float = 180):
    """Run the real program; arguments may be bytes, as a shell can pass any bytes."""
    out = subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), *args],
        capture_output=True, input=stdin, timeout=timeout,
    )
    out.stdout = out.stdout.decode("utf-8", "replace")
    out.stderr = out.stderr.decode("utf-8", "replace")
    return out


def one_line(out) -> str:
    """The whole of stderr, which must be exactly one line and no traceback."""
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def attempts(home, step: str = "atomic/logprobs") -> list[dict]:
    if not (home / progress.FILENAME).exists():
        return []
    with Store.open(home, PACK) as store:
        return store.attempts(step)


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def make_store(home) -> None:
    with Store.open(home, PACK):
        pass


def drop_table(home, table: str) -> None:
    make_store(home)
    db = sqlite3.connect(home / progress.FILENAME)
    db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()


# -- 1. text that is not UTF-8 ----------------------------------------------------------------


def test_decode_names_the_byte_and_drops_a_bom():
    assert decode("\ufeffx = 1\n".encode(), "f.py") == "x = 1\n"
    with pytest.raises(SourceError, match=r"f\.py is not UTF-8 text: byte 0xff at offset 6 "
                                          r"\(line 2\)"):
        decode(b"x = 1\n\xff\n", "f.py")
    # Undecodable bytes on the command line arrive as lone surrogates; the byte is still named.
    with pytest.raises(SourceError, match="byte 0xfe at offset 4"):
        from_argument("x = \udcfe", "--code")
    with pytest.raises(SourceError, match="--code is not UTF-8"):
        from_argument("x = \ud800", "--code")  # a surrogate no byte stands for
    assert from_argument("x = 'é'", "--code") == "x = 'é'"


def test_undecodable_code_is_refused_and_nothing_is_stored(home, tmp_path):
    code = b"dlogprobs = torch.zeros_like(logprobs)  # \xff\n"
    by_argument = cli(home, "check", "logprobs", "--code", code)
    assert by_argument.returncode == 2
    assert "--code is not UTF-8" in one_line(by_argument)
    assert "0xff" in by_argument.stderr and "offset 42" in by_argument.stderr
    by_stdin = cli(home, "check", "logprobs", "-", stdin=b"x = 1\n" + code)
    assert by_stdin.returncode == 2
    assert "standard input" in one_line(by_stdin) and "offset 48 (line 2)" in by_stdin.stderr
    path = tmp_path / "latin1.py"
    path.write_bytes("dlogprobs = 0 * logprobs  # é\n".encode("latin-1"))
    by_file = cli(home, "check", "logprobs", "--file", str(path))
    assert by_file.returncode == 2
    assert str(path) in one_line(by_file) and "0xe9" in by_file.stderr
    whole = cli(home, "check", "--all", "-", stdin=b"# %% atomic/logprobs\n" + code)
    assert whole.returncode == 2
    assert "standard input is not UTF-8" in one_line(whole)
    assert attempts(home) == []


def test_a_file_with_a_byte_order_mark_is_accepted(home, tmp_path):
    path = tmp_path / "bom.py"
    path.write_bytes(b"\xef\xbb\xbf" + CORRECT.encode())
    out = cli(home, "check", "logprobs", "--file", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert attempts(home)[0]["code"] == CORRECT  # stored without the mark
    # In a percent-format file the mark would otherwise hide the first cell's header.
    cells = tmp_path / "cells.py"
    cells.write_bytes(b"\xef\xbb\xbf# %% atomic/logprobs\n" + CORRECT.encode())
    out = cli(home, "check", "--all", str(cells), "--no-record")
    assert out.returncode == 0 and "1 of 1 cells passed" in out.stdout


def test_watch_reports_an_undecodable_save_and_keeps_watching(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{WRONG}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(home), "watch", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen: list[str] = []
    threading.Thread(target=lambda: seen.extend(iter(proc.stdout.readline, "")),
                     daemon=True).start()

    def shown(text: str) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if text in "".join(seen):
                return True
            time.sleep(0.1)
        return False

    try:
        assert shown("0 of 1 cells passed")
        work.write_bytes(b"# %% atomic/logprobs\ndlogprobs = 0  # \xff\n")
        assert shown("is not UTF-8 text: byte 0xff")
        work.write_text(f"# %% atomic/logprobs\n{CORRECT}")
        assert shown("1 of 1 cells passed")
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


# -- 2. the verdict first, then the record ----------------------------------------------------


def test_a_missing_attempts_table_costs_the_record_not_the_verdict(home):
    drop_table(home, "attempts")
    right = cli(home, "check", "logprobs", "--code", CORRECT)
    assert right.returncode == 0
    assert "PASSED" in right.stdout
    warning = one_line(right)
    assert "warning" in warning and "not saved" in warning and "no such table" in warning
    wrong = cli(home, "check", "logprobs", "--code", WRONG, "--json")
    assert wrong.returncode == 1
    assert json.loads(wrong.stdout)["passed"] is False
    assert "not saved" in one_line(wrong)


def test_unreadable_progress_still_gives_the_verdict_of_every_cell(home, tmp_path):
    drop_table(home, "steps")  # accepted code cannot be read, nor anything saved
    path = tmp_path / "work.py"
    path.write_text(f"# %% atomic/logprobs\n{CORRECT}# %% atomic/probs\ndprobs = probs\n")
    out = cli(home, "check", "--all", str(path))
    assert out.returncode == 1
    assert "1 of 2 cells passed" in out.stdout
    assert "not saved" in one_line(out) and "reference solutions" in out.stderr


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="needs file permissions that apply (not root)")
def test_read_only_progress_costs_the_record_not_the_verdict(home):
    make_store(home)
    for name in os.listdir(home):
        os.chmod(home / name, 0o444)
    os.chmod(home, 0o555)
    try:
        out = cli(home, "check", "logprobs", "--code", CORRECT)
    finally:
        os.chmod(home, 0o755)
    assert out.returncode == 0 and "PASSED" in out.stdout
    assert "not saved" in one_line(out)


def test_the_verdict_is_printed_before_recording_and_a_locked_store_is_retried(
    home, monkeypatch, capsys
):
    make_store(home)
    monkeypatch.setattr(progress, "BUSY_TIMEOUT", 0.05)
    holder = sqlite3.connect(home / progress.FILENAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process writing, for longer than we wait
    printed_before: list[str] = []
    record = Store.record_attempt

    def watched_record(self, *args):
        printed_before.append(capsys.readouterr().out)
        return record(self, *args)

    monkeypatch.setattr(Store, "record_attempt", watched_record)
    try:
        code = tutor_cli.main(["--home", str(home), "--device", "cpu", "check", "logprobs",
                               "--code", CORRECT])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    assert code == 0
    assert len(printed_before) == 2  # tried, then tried once more
    assert "PASSED" in printed_before[0]
    assert "not saved" in err and "locked" in err and len(err.strip().splitlines()) == 1
    assert attempts(home) == []


# -- 3. settings of the wrong type or out of range --------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--timeout", "inf"), "--timeout"),
        (("--timeout", "nan"), "--timeout"),
        (("--timeout", "1e300"), "--timeout"),
        (("--timeout", "0"), "--timeout"),
        (("--timeout", "-1"), "--timeout"),
        (("--timeout", "fast"), "--timeout"),
        (("--seed", str(2**63)), "--seed"),
        (("--seed", "-1"), "--seed"),
        (("--seed", "abc"), "--seed"),
        (("--home", "~nosuchuser/x"), "--home"),
        (("--home", ""), "--home"),
        (("--device", "tpu"), "--device"),
    ],
)
def test_a_wrong_flag_is_one_line_naming_it(home, args, named):
    out = cli(home, *args, "list")
    assert out.returncode == 2
    line = one_line(out)
    assert line.startswith("backprop-tutor: error: ") and named in line
    assert repr(args[1]) in line  # the value as it was given


def test_the_timeout_message_reads_well(home):
    out = cli(home, "--timeout", "inf", "progress")
    assert one_line(out) == ("backprop-tutor: error: --timeout must be a finite number of "
                             "seconds between 0.1 and 600, not 'inf'")


def config_path() -> str:
    return os.path.join(os.environ["XDG_CONFIG_HOME"], "backprop-tutor", "config.toml")


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b'seed = "abc"\n', "seed in "),
        (b'timeout = "fast"\n', "timeout in "),
        (b"timeout = true\n", "timeout in "),
        (b"home = 5\n", "home in "),
        (b'device = "quantum"\n', "device in "),
        (b'seed = 1\n# caf\xe9\n', "not UTF-8"),
        (b"seed = \n", "cannot read"),
    ],
)
def test_a_wrong_config_file_is_one_line_naming_the_setting(monkeypatch, content, named):
    os.makedirs(os.path.dirname(config_path()))
    with open(config_path(), "wb") as fh:
        fh.write(content)
    monkeypatch.delenv("BACKPROP_TUTOR_HOME")  # nothing may stand in for the config's home
    out = subprocess.run([sys.executable, "-m", "tutor", "list"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    line = one_line(out)
    assert named in line and "config.toml" in line


def test_settings_take_their_whole_range_and_flags_win(tmp_path, monkeypatch):
    monkeypatch.setenv("BACKPROP_TUTOR_HOME", "")  # empty means unset, as shells export it
    path = tmp_path / "config.toml"
    path.write_text('seed = 7\ntimeout = 600\nhome = "~/tutor"\n')
    s = resolve(config_path=path)
    assert (s.seed, s.timeout, s.home.name) == (7, 600.0, "tutor")
    s = resolve(seed=str(2**63 - 1), timeout="0.1", home="elsewhere", config_path=path)
    assert (s.seed, s.timeout, str(s.home)) == (2**63 - 1, 0.1, "elsewhere")
    assert resolve(seed="0", config_path=path).seed == 0
    with pytest.raises(ConfigError, match="seed in .* not 1.5"):
        resolve(config_path=_write(tmp_path, "seed = 1.5\n"))


def _write(tmp_path, text: str):
    path = tmp_path / "other.toml"
    path.write_text(text)
    return path


def test_export_to_a_path_that_cannot_be_written_is_one_line(home, tmp_path):
    undecodable = cli(home, "export", "--out", os.fsencode(tmp_path) + b"/work\xff.py")
    assert undecodable.returncode == 2
    assert "--out" in one_line(undecodable) and "0xff" in undecodable.stderr
    missing = cli(home, "export", "--out", str(tmp_path / "no" / "such" / "folder.py"))
    assert missing.returncode == 2
    assert "--out" in one_line(missing) and "No such file" in missing.stderr
    folder = cli(home, "export", "--out", str(tmp_path))
    assert folder.returncode == 2
    assert "--out" in one_line(folder) and "folder" in folder.stderr


# -- 4. code too big to be a gradient ---------------------------------------------------------


def test_size_problem_counts_bytes():
    assert size_problem("x = 1\n") is None
    assert size_problem("x" * MAX_CODE_BYTES) is None
    assert "256 KB" in size_problem("é" * (MAX_CODE_BYTES // 2 + 1))


def test_a_huge_file_is_refused_by_its_size_and_not_stored(home, tmp_path):
    path = tmp_path / "huge.py"
    with open(path, "wb") as fh:
        fh.truncate(50 * 2**20)  # 50 MB, sparse: nothing is really written
    for args in (("check", "logprobs", "--file", str(path)), ("check", "--all", str(path))):
        out = cli(home, *args)
        assert out.returncode == 2
        line = one_line(out)
        assert "50.0 MB" in line and "loop" not in line
    big = f"# %% atomic/logprobs\n{CORRECT}# {'x' * MAX_CODE_BYTES}\n".encode()
    piped = cli(home, "check", "logprobs", "-", stdin=big)
    assert piped.returncode == 2 and "256 KB" in one_line(piped)
    cell = cli(home, "check", "--all", "-", stdin=big)
    assert cell.returncode == 2
    assert "the cell for atomic/logprobs on line 1" in one_line(cell)
    assert attempts(home) == []


class FakeEvaluator:
    """Enough of the evaluator for the TUI to start; a check must never reach it."""

    def __init__(self) -> None:
        self.checked: list[str] = []

    def start(self) -> None:
        pass

    def info(self, timeout: float | None = None) -> dict:
        return {"device": "cpu", "lines": []}

    def check(self, step_id: str, code: str, prior=None) -> dict:
        self.checked.append(code)
        raise AssertionError("oversized code reached the evaluator")

    def close(self) -> None:
        pass


def test_the_tui_refuses_oversized_code_without_checking_or_recording(tmp_path):
    from tutor.config import Settings
    from tutor.ui.app import TutorApp
    from tutor.ui.widgets.editor import CodeEditor

    evaluator = FakeEvaluator()

    async def scenario() -> None:
        app = TutorApp(Settings(device="cpu", home=tmp_path / "home"), evaluator=evaluator,
                       greet=False)
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 30
            while app.info is None:
                assert time.monotonic() < deadline, "the app never saw the evaluator ready"
                await pilot.pause(0.05)
            app.query_one(CodeEditor).load_text(CORRECT + "#" * MAX_CODE_BYTES)
            await pilot.press("ctrl+j")
            await pilot.pause()
            assert not app.checking
            assert any("256 KB" in str(n.message) for n in app._notifications)
            assert app.store.attempts("atomic/logprobs") == []

    asyncio.run(scenario())
    assert evaluator.checked == []


# -- 5. line numbers of a percent-format file -------------------------------------------------


def test_cells_know_where_their_code_starts():
    cells = parse_cells("intro\n# %% a\n\n\nfirst\nsecond\n# %% b\nonly\n")
    assert [(c.line, c.code_line) for c in cells] == [(2, 5), (7, 8)]


def test_check_all_reports_errors_at_their_line_in_the_file(home, tmp_path):
    path = tmp_path / "work.py"
    path.write_text(
        "# my backward pass\n"                   # 1
        "# %% atomic/logprobs\n"                 # 2
        "\n"                                     # 3
        f"{CORRECT}"                             # 4, 5
        "# %% atomic/probs\n"                    # 6
        "dprobs = (1.0 / probs) *\n"             # 7: a syntax error
        "# %% atomic/counts_sum_inv\n"           # 8
        "x = 1\n"                                # 9
        "dcounts_sum_inv = no_such_name\n"       # 10: a runtime error
        "dcounts = counts_sum_inv * dprobs\n"
    )
    out = cli(home, "check", "--all", str(path), "--json", "--no-record")
    results = json.loads(out.stdout)
    syntax, runtime = results[1]["error"], results[2]["error"]
    assert syntax["line"] == 7 and syntax["message"].startswith("line 7, column")
    assert runtime["line"] == 10 and runtime["message"].startswith("line 10: `dcounts_sum_inv")
    table = cli(home, "check", "--all", str(path), "--no-record").stdout
    assert "atomic/probs: line 7, column" in table
    assert "atomic/counts_sum_inv: line 10:" in table


# -- 6. a device that is not there ------------------------------------------------------------


@pytest.fixture
def no_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("show", "atomic/probs"),
        ("check", "atomic/probs", "--code", "dprobs = probs"),
        ("progress",),
        ("reset", "--all", "--yes"),
        ("export",),
        ("watch", "work.py"),
        ("train", "--steps", "1"),
        (),  # the TUI
    ],
)
def test_an_unavailable_device_is_one_line_from_every_command(home, tmp_path, no_cuda, args):
    (tmp_path / "work.py").write_text(f"# %% atomic/logprobs\n{CORRECT}")
    out = subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), "--device", "cuda", *args],
        capture_output=True, text=True, timeout=180, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2
    line = one_line(out)
    assert "'cuda'" in line and "CUDA" in line
    assert not home.exists()  # refused before anything was opened or written


def test_a_device_from_the_config_file_is_checked_too(home, no_cuda):
    os.makedirs(os.path.dirname(config_path()))
    with open(config_path(), "w") as fh:
        fh.write('device = "cuda"\n')
    out = cli(home, "progress")
    assert out.returncode == 2 and "CUDA" in one_line(out)


# -- 7. rendering that agrees with the verdict ------------------------------------------------

HELDOUT = ("right for this batch of 32, but on a fresh batch of 17 it fails: line 2: "
           "IndexError: shape mismatch. Is a batch size written in as a number?")
ALIASING = ("your code also changed dlogprobs, which an earlier step already checked: dprobs "
            "and dlogprobs are the same tensor in memory.")


def _check(tensor: str, verdict: str = "exact", diagnosis: dict | None = None,
           message: str = "") -> dict:
    right = verdict in ("exact", "approximate")
    return {"tensor": tensor, "grad": f"d{tensor}", "exact": verdict == "exact",
            "approximate": right, "maxdiff": 0.0 if right else 0.5, "verdict": verdict,
            "diagnosis": diagnosis, "message": message or (diagnosis or {}).get("message", ""),
            "partial": False, "heatmap": None, "shape": [32, 27], "expected_shape": [32, 27]}


def _result(checks: list[dict], passed: bool, heldout: dict | None = None) -> CheckResult:
    return CheckResult.from_dict(
        {"step": "atomic/logprobs", "passed": passed, "device": "cpu", "checks": checks,
         "heldout": heldout, "error": None, "stdout": "", "notes": [], "figure": None})


HELDOUT_RESULT = _result(
    [_check("logprobs", diagnosis={"kind": "heldout", "message": HELDOUT})], False,
    {"passed": False, "batch_size": 17, "message": HELDOUT},
)
ALIASING_RESULT = _result([_check("probs", diagnosis={"kind": "aliasing", "message": ALIASING})],
                          False)
MIXED_RESULT = _result([_check("h"), _check("W2", "wrong", message="dW2 is off")], False)


def test_cli_rows_agree_with_the_verdict():
    held = format_result(HELDOUT_RESULT, width=100)
    assert "✓" not in held and "! logprobs" in held
    assert "exact here, but see below" in held
    assert held.count("fresh batch of 17 it fails") == 1
    aliased = format_result(ALIASING_RESULT, width=100)
    assert "✓" not in aliased and "! probs" in aliased and "[aliasing] your code" in aliased
    mixed = format_result(MIXED_RESULT, width=100)
    assert "✓" not in mixed and "! h " in mixed and "✗ W2" in mixed
    # What is said below is about W2 alone: h is not sent to read it.
    assert "see below" not in mixed
    passed = format_result(_result([_check("logprobs")], True,
                                   {"passed": True, "batch_size": 17, "message": None}))
    assert "✓ logprobs" in passed and "see below" not in passed
    table = format_table([HELDOUT_RESULT, ALIASING_RESULT])
    assert "✓" not in table and table.count("fresh batch of 17 it fails") == 1


def _feedback_text(result: CheckResult) -> str:
    from tutor.ui.widgets.feedback import result_view

    console = Console(width=110, file=io.StringIO(), record=True, color_system=None)
    console.print(result_view(result, None))
    return " ".join(console.export_text().split())


def test_tui_rows_agree_with_the_verdict():
    from tutor.ui.widgets.feedback import GOOD, checks_table

    held = _feedback_text(HELDOUT_RESULT)
    assert "✗ Not yet." in held and "✓" not in held
    assert "exact here, but see below" in held
    assert held.count("fresh batch of 17 it fails") == 1
    aliased = _feedback_text(ALIASING_RESULT)
    assert "✓" not in aliased and "exact here, but see below" in aliased
    assert aliased.count("same tensor in memory") == 1
    # Nothing in a row under "Not yet" is styled as a success.
    table = checks_table(MIXED_RESULT.checks, passed=False)
    for column in table.columns:
        for cell in column._cells:
            assert getattr(cell, "style", "") != GOOD
    mixed = _feedback_text(MIXED_RESULT)
    assert "see below" not in mixed and "dW2 is off" in mixed
    passed = checks_table([TensorCheck.from_dict(_check("logprobs"))], passed=True)
    assert passed.columns[4]._cells[0].plain == "exact"


def test_a_batch_size_written_as_a_number_is_reported_once(home):
    out = cli(home, "check", "logprobs", "--code", FIXED_BATCH, "--no-record")
    assert out.returncode == 1
    assert "✓" not in out.stdout and "exact here, but see below" in out.stdout
    assert out.stdout.count("on a fresh batch of 17") == 1


def test_a_store_error_raised_mid_command_is_one_line(home, monkeypatch, capsys):
    make_store(home)

    def broken(self):
        raise StoreError("Could not read progress from here: disk I/O error.")

    monkeypatch.setattr(Store, "summary", broken)
    assert tutor_cli.main(["--home", str(home), "progress"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == ("backprop-tutor progress: Could not read progress from here: disk "
                           "I/O error.")


def test_a_forward_name_rebound_in_one_step_does_not_break_the_later_ones(tmp_path):
    """`h = 0.5` in an earlier step's saved code: later steps see the forward pass's `h` (and
    the learner is told), never an internal error of the tutor's."""
    import subprocess
    import sys

    from tutor.pack.model import load_pack

    pack = load_pack(None)
    cells = [f"# %% {s.id}\n{s.solution}" + ("\nh = 0.5\n" if i == 0 else "")
             for i, s in enumerate(s for s in pack.gradient_steps if s.exercise == 1)]
    path = tmp_path / "work.py"
    path.write_text("\n".join(cells))
    done = subprocess.run([sys.executable, "-m", "tutor", "--home", str(tmp_path / "h"), "check",
                           "--all", str(path), "--no-record"], capture_output=True, text=True,
                          timeout=600)
    said = done.stdout + done.stderr
    assert "internal" not in said and "sandbox stopped" not in said, said[-2000:]
    assert done.returncode == 0, said[-2000:]


def test_control_sequences_typed_on_the_command_line_never_reach_the_terminal(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tutor", "--home", str(tmp_path), "check",
                           "atomic/\x1b[2Jlogp\u202erobs", "--code", "x = 1", "--no-record"],
                          capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 2 and "\x1b" not in said and "\u202e" not in said, said
    assert "\\x1b[2J" in said  # shown as an escape, not as another step's id


def test_a_product_whose_inner_sizes_differ_says_which_operand_transposed_fits():
    from tutor.core.candidate import runtime_error

    def said(a: int, b: int, c: int, d: int) -> str:
        exc = RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({a}x{b} and {c}x{d})")
        return runtime_error(exc, "dh = dlogits @ W2\n").payload["message"]

    assert "right operand transposed, [27, 64], would fit" in said(32, 27, 64, 27)
    assert "left operand transposed, [64, 32], would fit" in said(32, 64, 32, 27)
    assert "other order" in said(27, 64, 32, 27)
