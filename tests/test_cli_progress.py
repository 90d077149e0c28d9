"""progress, reset, export and watch through the real command line, on a temporary home."""

import json
import signal
import subprocess
import sys
import threading
import time

import pytest

from tutor.pack.model import load_pack
from tutor.session.store import Store
from tutor.values.results import CheckResult

PACK = load_pack()


def cli(home, *args, stdin=None, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "tutor", "--home", str(home), *args],
        capture_output=True, text=True, input=stdin, timeout=timeout,
    )


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


def solve(home, step_ids):
    """Mark steps solved with their reference code, as a learner's passing checks would."""
    with Store.open(home, PACK) as store:
        for sid in step_ids:
            result = CheckResult.from_dict({"passed": True, "checks": [
                {"verdict": "exact", "maxdiff": 0.0, "diagnosis": None}], "error": None})
            store.record_attempt(sid, PACK.step(sid).solution, result)


def test_check_records_progress_and_uses_accepted_code(home):
    # The learner's own dlogprobs (a one-hot form) is what the next step is checked against.
    assert cli(home, "check", "logprobs", "--code",
               "dlogprobs = -F.one_hot(Yb, 27).float() / n").returncode == 0
    out = json.loads(cli(home, "progress", "--json").stdout)
    first = out["steps"][0]
    assert first["status"] == "exact" and first["attempts"] == 1
    assert out["steps"][1]["status"] == "unlocked" and out["steps"][2]["status"] == "locked"
    assert out["total"]["done"] == 1
    assert cli(home, "check", "probs", "--code", "dprobs = probs").returncode == 1
    rows = json.loads(cli(home, "progress", "--json").stdout)["steps"]
    assert rows[1]["attempts"] == 1 and rows[1]["status"] == "unlocked"


def test_reset_says_what_it_will_do_and_needs_confirmation(home):
    solve(home, [s.id for s in PACK.gradient_steps[:4]])
    refused = cli(home, "reset", "atomic/probs")  # no terminal, no --yes
    assert refused.returncode == 1
    assert "atomic/counts_sum_inv" in refused.stdout and "Nothing was changed" in refused.stdout
    with Store.open(home, PACK) as store:
        assert store.status("atomic/counts_sum") == "exact"
    done = cli(home, "reset", "atomic/probs", "--yes")
    assert done.returncode == 0, done.stderr
    with Store.open(home, PACK) as store:
        assert store.status("atomic/logprobs") == "exact"
        assert store.status("atomic/probs") == "unlocked"
        assert store.status("atomic/counts_sum") == "locked"
    assert cli(home, "reset").returncode == 2
    assert cli(home, "reset", "--all", "--yes").returncode == 0


def test_export_round_trips_through_check_all_and_plain_python(home, tmp_path):
    solve(home, [s.id for s in PACK.gradient_steps])
    script = tmp_path / "backward.py"
    assert cli(home, "export", "--out", str(script)).returncode == 0
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120)
    assert plain.returncode == 0, plain.stderr
    rows = [line for line in plain.stdout.splitlines() if "approximate:" in line]
    assert len(rows) == 28  # 26 tensors of exercise 1, dlogits and dhprebn of exercises 2 and 3
    assert all("approximate: True" in row for row in rows)
    checked = cli(home, "check", "--all", str(script), "--json", "--no-record")
    assert checked.returncode == 0, checked.stdout[-2000:]
    assert len(json.loads(checked.stdout)) == len(PACK.gradient_steps)


def test_export_leaves_unsolved_steps_as_templates(home):
    out = cli(home, "export")
    assert out.returncode == 0
    assert "# %% atomic/probs\n" in out.stdout
    assert "dprobs = ..." in out.stdout


def test_corrupt_progress_is_moved_aside_and_reported(home):
    home.mkdir(parents=True)
    (home / "progress.sqlite3").write_bytes(b"this is not a database" * 100)
    out = cli(home, "progress")
    assert out.returncode == 0
    assert "corrupt" in out.stderr and str(home) in out.stderr


def test_watch_rechecks_on_save_and_stops_cleanly(home, tmp_path):
    work = tmp_path / "work.py"
    work.write_text("# %% atomic/logprobs\ndlogprobs = torch.zeros_like(logprobs)\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tutor", "--home", str(home), "watch", str(work)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert _wait_for(proc, "0 of 1 cells passed")
        work.write_text("# %% atomic/logprobs\ndlogprobs = -F.one_hot(Yb, 27).float() / n\n")
        assert _wait_for(proc, "1 of 1 cells passed")
        # The verdict is printed before it is recorded: give the record a moment to land.
        deadline = time.monotonic() + 20
        with Store.open(home, PACK) as store:
            while store.status("atomic/logprobs") != "exact" and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.status("atomic/logprobs") == "exact"
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert "Traceback" not in err


def _wait_for(proc, text, timeout=60.0):
    """Read the watcher's output until `text` appears (a thread, so a silent process can't hang)."""
    if not hasattr(proc, "seen"):
        proc.seen = []
        threading.Thread(target=lambda: proc.seen.extend(iter(proc.stdout.readline, "")),
                         daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in "".join(proc.seen):
            proc.seen.clear()
            return True
        time.sleep(0.1)
    return False


def test_progress_export_and_the_json_count_the_same_way(home, tmp_path):
    """One vocabulary, one count: exact + passed + revealed = done, in progress, its JSON and
    export's summary alike."""
    exact = CheckResult.from_dict(
        {"passed": True, "checks": [{"verdict": "exact", "maxdiff": 0.0}], "error": None})
    approx = CheckResult.from_dict(
        {"passed": True, "checks": [{"verdict": "approximate", "maxdiff": 4e-9}], "error": None})
    steps = [s.id for s in PACK.gradient_steps]
    with Store.open(home, PACK) as store:
        for sid in steps[:3]:
            store.record_attempt(sid, PACK.step(sid).solution, exact)
        for sid in steps[3:5]:
            store.record_attempt(sid, PACK.step(sid).solution, approx)
        for sid in steps[5:]:
            store.reveal(sid)
    revealed = len(steps) - 5
    out = cli(home, "progress")
    assert (f"{len(steps)} of {len(PACK.steps)} steps done (3 exact, 2 passed, "
            f"{revealed} revealed)") in out.stdout
    total = json.loads(cli(home, "progress", "--json").stdout)["total"]
    assert (total["exact"], total["passed"], total["revealed"]) == (3, 2, revealed)
    assert total["done"] == total["exact"] + total["passed"] + total["revealed"]
    script = tmp_path / "backward.py"
    export = cli(home, "export", "--out", str(script))
    assert export.returncode == 0
    # The exported cells are the gradient steps; training is not one of them.
    assert (f"{len(steps)} of {len(steps)} steps done (3 exact, 2 passed, {revealed} "
            "revealed)") in export.stderr
    assert "the rest as templates" not in export.stderr
    text = script.read_text()
    # Each cell says how it was done, not just "solved".
    assert "(revealed: the reference solution)" in text and "(exact: your code)" in text
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0 and "NumPy" not in ran.stderr


def test_a_partly_done_export_runs_checks_and_keeps_edits(home, tmp_path):
    """An export made halfway runs to its end (an unfinished `+=` template is `cmp`'s "not done
    yet", not a TypeError); checking it counts no untouched template as an attempt; exporting
    again does not write over the learner's edits without --force."""
    solve(home, [s.id for s in PACK.gradient_steps[:6]])
    script = tmp_path / "backward.py"
    assert cli(home, "export", "--out", str(script)).returncode == 0
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr[-800:]
    assert "not done yet" in plain.stdout
    before = {s.id: 0 for s in PACK.gradient_steps[6:]}
    cli(home, "check", "--all", str(script))
    with Store.open(home, PACK) as store:
        assert {sid: len(store.attempts(sid)) for sid in before} == before
    script.write_text(script.read_text() + "\n# my own note\n")
    again = cli(home, "export", "--out", str(script))
    assert again.returncode == 2 and "--force" in again.stderr
    assert "# my own note" in script.read_text()
    assert cli(home, "export", "--out", str(script), "--force").returncode == 0
    assert "# my own note" not in script.read_text()
