"""The progress store: unlock rules, achievements, reset, and that nothing committed is lost."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from contextlib import closing
from itertools import pairwise
from pathlib import Path

import pytest

import tutor
from tutor.pack.model import Pack, load_pack
from tutor.session import store as progress
from tutor.session.store import FILENAME, Store, StoreError
from tutor.values.results import CheckResult

REPO = Path(tutor.__file__).resolve().parent.parent
typed = CheckResult.from_dict  # the store takes the typed result

EXACT = typed({"passed": True, "checks": [{"verdict": "exact", "maxdiff": 0.0, "diagnosis": None}]})
APPROX = typed({
    "passed": True,
    "checks": [
        {"verdict": "exact", "maxdiff": 0.0, "diagnosis": None},
        {"verdict": "approximate", "maxdiff": 4e-9, "diagnosis": None},
    ],
    "error": None,
})
WRONG = typed({
    "passed": False,
    "checks": [
        {"verdict": "exact", "maxdiff": 0.0, "diagnosis": None},
        {"verdict": "wrong", "maxdiff": 0.75, "diagnosis": {"kind": "sign", "message": "..."}},
    ],
    "error": None,
})
SYNTAX = typed({"passed": False, "checks": [], "error": {"kind": "syntax", "message": "..."}})


@pytest.fixture(scope="module")
def pack() -> Pack:
    return load_pack()


@pytest.fixture
def store(tmp_path: Path, pack: Pack):
    with Store.open(tmp_path, pack) as s:
        yield s


def ids(pack: Pack, exercise: int) -> list[str]:
    return [s.id for s in pack.steps if s.exercise == exercise]


def solve(store: Store, step_ids: list[str], result: CheckResult = EXACT) -> None:
    for sid in step_ids:
        store.record_attempt(sid, f"# code for {sid}\n", result)


def python(script: str, *args: str) -> subprocess.Popen:
    """Start a Python child that can import tutor, with its stdout piped back line by line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


# -- behaviour ------------------------------------------------------------------------------


def test_fresh_store_is_versioned_wal_and_only_first_steps_are_open(store, pack):
    statuses = store.statuses()
    assert list(statuses) == [s.id for s in pack.steps]
    # Each exercise that requires nothing opens its first step (exercises 1, 2 and 3).
    opened = [sid for sid, st in statuses.items() if st == "unlocked"]
    assert opened == ["atomic/logprobs", "fused/cross_entropy", "fused/batchnorm"]
    assert store.notices == []
    assert store.path.name == FILENAME
    with closing(sqlite3.connect(store.path)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(progress.MIGRATIONS)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_steps_unlock_in_pack_order_and_training_waits_for_exercises_1_to_3(store, pack):
    atomic, fused = ids(pack, 1), ids(pack, 2) + ids(pack, 3)
    # Exercises 2 and 3 require nothing, so they are open from the start.
    assert [store.status(sid) for sid in fused] == ["unlocked", "unlocked"]
    solve(store, atomic[:3])
    assert store.status(atomic[3]) == "unlocked"
    assert store.status(atomic[4]) == "locked"
    solve(store, atomic[3:])
    assert store.status("train/loop") == "locked"
    solve(store, fused[:1])
    assert store.status("train/loop") == "locked"
    solve(store, fused[1:])
    assert store.status("train/loop") == "unlocked"


def test_a_pass_is_exact_only_when_every_check_is_exact_and_never_goes_down(store):
    assert store.record_attempt("atomic/logprobs", "approx", APPROX) == "passed"
    assert store.status("atomic/probs") == "unlocked"
    assert store.record_attempt("atomic/logprobs", "exact", EXACT) == "exact"
    assert store.record_attempt("atomic/logprobs", "approx again", APPROX) == "exact"
    assert store.record_attempt("atomic/logprobs", "wrong", WRONG) == "exact"
    # The accepted code is the one that earned the status, so replaying it is exact too.
    assert store.accepted_codes() == {"atomic/logprobs": "exact"}


def test_a_failed_attempt_is_recorded_but_changes_no_status(store):
    assert store.record_attempt("atomic/logprobs", "dlogprobs = 1", WRONG) == "unlocked"
    assert store.record_attempt("atomic/logprobs", "dlogprobs = (", SYNTAX) == "unlocked"
    store.record_attempt("atomic/logprobs", "ok", APPROX)
    attempts = store.attempts("atomic/logprobs")
    assert [a["code"] for a in attempts] == ["dlogprobs = 1", "dlogprobs = (", "ok"]
    assert [a["verdict"] for a in attempts] == ["wrong", "error", "passed"]
    assert [a["maxdiff"] for a in attempts] == [0.75, None, 4e-9]
    assert [a["diagnosis"] for a in attempts] == ["sign", "syntax", None]
    assert [a["passed"] for a in attempts] == [False, False, True]
    assert all(re.match(r"\d{4}-\d\d-\d\dT", a["at"]) for a in attempts)
    assert store.attempts("atomic/probs") == []


def test_reveal_unlocks_the_next_step_and_replays_the_packs_solution(store, pack):
    store.reveal("atomic/logprobs")
    assert store.status("atomic/logprobs") == "revealed"
    assert store.status("atomic/probs") == "unlocked"
    assert store.accepted_codes() == {"atomic/logprobs": pack.step("atomic/logprobs").solution}
    # A later pass is recorded as an attempt and its code is replayed, but the step stays
    # revealed: typing in the solution one was shown is not solving it.
    assert store.record_attempt("atomic/logprobs", "mine", APPROX) == "revealed"
    assert store.accepted_codes() == {"atomic/logprobs": "mine"}
    assert store.attempts("atomic/logprobs")[-1]["passed"]
    assert store.summary()[0]["status"] == "revealed"
    store.reveal("atomic/logprobs")
    assert store.status("atomic/logprobs") == "revealed"


def test_a_pass_before_the_reveal_is_kept(store):
    assert store.record_attempt("atomic/logprobs", "mine", APPROX) == "passed"
    store.reveal("atomic/logprobs")  # comparing with the reference after solving costs nothing
    assert store.status("atomic/logprobs") == "passed"


def test_ui_values_are_remembered(tmp_path, pack):
    with Store.open(tmp_path, pack) as store:
        assert store.remembered("welcomed") is None
        store.remember("welcomed", "1")
        store.remember("cursor:atomic/probs", "1,4")
    with Store.open(tmp_path, pack) as store:
        assert store.remembered("welcomed") == "1"
        assert store.remembered("cursor:atomic/probs") == "1,4"
        assert store.current_step() == "atomic/logprobs"  # not confused with the store's keys


def test_hints_are_counted_per_step_up_to_the_last_hint(store, pack):
    n = len(pack.step("atomic/probs").hints)
    assert store.hints_shown("atomic/probs") == 0
    assert [store.show_hint("atomic/probs") for _ in range(n + 2)] == [*range(1, n + 1), n, n]
    assert store.hints_shown("atomic/probs") == n
    assert store.hints_shown("atomic/logprobs") == 0
    # Hints never change a status: a hint is not an achievement.
    assert store.status("atomic/probs") == "locked"


def test_drafts_are_kept_per_step_and_survive_reopening(tmp_path, pack):
    with Store.open(tmp_path, pack) as store:
        assert store.draft("atomic/probs") is None
        for text in ("d", "dp", "dprobs = "):
            store.save_draft("atomic/probs", text)
    with Store.open(tmp_path, pack) as store:
        assert store.draft("atomic/probs") == "dprobs = "
        assert store.draft("atomic/logprobs") is None


def test_current_step_is_where_the_learner_was_else_the_first_open_step(tmp_path, pack):
    with Store.open(tmp_path, pack) as store:
        assert store.current_step() == "atomic/logprobs"
        solve(store, ids(pack, 1)[:2])
        assert store.current_step() == "atomic/counts_sum_inv"
        store.set_current_step("atomic/logprobs")
    with Store.open(tmp_path, pack) as store:
        assert store.current_step() == "atomic/logprobs"


def test_unknown_steps_are_refused(store):
    with pytest.raises(KeyError):
        store.record_attempt("atomic/nope", "x", EXACT)
    with pytest.raises(KeyError):
        store.set_current_step("atomic/nope")


def test_time_accumulates_and_the_summary_reports_every_step(store, pack):
    store.add_time("atomic/logprobs", 30.0)
    store.add_time("atomic/logprobs", 12.5)
    store.add_time("atomic/logprobs", -100.0)  # a clock that jumped back
    store.show_hint("atomic/logprobs")
    store.record_attempt("atomic/logprobs", "a", WRONG)
    store.record_attempt("atomic/logprobs", "b", APPROX)
    store.record_attempt("atomic/logprobs", "c", EXACT)
    summary = store.summary()
    assert [row["id"] for row in summary] == [s.id for s in pack.steps]
    assert summary[0] == {
        "id": "atomic/logprobs",
        "exercise": 1,
        "status": "exact",
        "attempts": 3,
        "hints": 1,
        "best_maxdiff": 0.0,
        "seconds": 42.5,
    }
    assert summary[1] == {
        "id": "atomic/probs",
        "exercise": 1,
        "status": "unlocked",
        "attempts": 0,
        "hints": 0,
        "best_maxdiff": None,
        "seconds": 0.0,
    }


def test_dependents_are_later_replaying_steps_and_the_training_step(store, pack):
    atomic = ids(pack, 1)
    assert store.dependents("atomic/probs") == [*atomic[2:], "train/loop"]
    assert store.dependents("atomic/C") == ["train/loop"]
    assert store.dependents("fused/cross_entropy") == ["train/loop"]
    assert store.dependents("fused/batchnorm") == ["train/loop"]
    assert store.dependents("train/loop") == []


def test_reset_of_an_exercise_2_step_leaves_exercise_3_alone(store, pack):
    solve(store, ids(pack, 1) + ids(pack, 2) + ids(pack, 3) + ids(pack, 4))
    changed = store.reset("fused/cross_entropy")
    assert changed == ["fused/cross_entropy", "train/loop"]
    assert store.status("fused/cross_entropy") == "unlocked"
    assert store.status("fused/batchnorm") == "exact"
    assert store.status("atomic/C") == "exact"
    assert store.status("train/loop") == "locked"


def test_reset_of_an_atom_relocks_the_later_atoms_that_replay_it(store, pack):
    atomic = ids(pack, 1)
    solve(store, atomic + ids(pack, 2))
    store.save_draft("atomic/probs", "half typed")
    store.save_draft("atomic/h", "h draft")
    store.show_hint("atomic/probs")
    changed = store.reset("atomic/probs")
    # probs itself and every later atom; batchnorm was open all along.
    assert changed == atomic[1:]
    statuses = store.statuses()
    assert statuses["atomic/logprobs"] == "exact"
    assert statuses["atomic/probs"] == "unlocked"
    assert {statuses[sid] for sid in atomic[2:]} == {"locked"}
    assert statuses["fused/cross_entropy"] == "exact"  # it does not replay exercise 1
    assert store.hints_shown("atomic/probs") == 0
    assert store.draft("atomic/probs") is None
    assert len(store.attempts("atomic/probs")) == 1  # history is kept
    # A relocked step's accepted code comes back as its draft, unless it had one.
    assert store.draft("atomic/counts") == "# code for atomic/counts\n"
    assert store.draft("atomic/h") == "h draft"
    assert set(store.accepted_codes()) == {"atomic/logprobs", *ids(pack, 2)}


def test_reset_all_starts_over_but_keeps_the_history(store, pack):
    solve(store, ids(pack, 1))
    store.save_draft("fused/cross_entropy", "x")
    store.show_hint("fused/cross_entropy")
    store.set_current_step("atomic/h")
    store.reset_all()
    opened = [sid for sid, st in store.statuses().items() if st == "unlocked"]
    assert opened == ["atomic/logprobs", *ids(pack, 2), *ids(pack, 3)]
    assert store.accepted_codes() == {}
    assert store.draft("fused/cross_entropy") is None
    assert store.hints_shown("fused/cross_entropy") == 0
    assert store.current_step() == "atomic/logprobs"
    assert len(store.attempts("atomic/h")) == 1


def test_training_runs_round_trip(store):
    run = {
        "settings": {"n_hidden": 200, "steps": 1000, "lr": 0.1},
        "losses": [3.3, 2.9, 2.5],
        "final": {"train": 2.07, "val": 2.11},
        "samples": ["mora", "kayah"],
    }
    first = store.record_training_run(run)
    second = store.record_training_run({**run, "losses": []})
    runs = store.training_runs()
    assert [r["id"] for r in runs] == [first, second]
    assert {k: runs[0][k] for k in run} == run
    assert runs[1]["losses"] == []
    assert "at" in runs[0]


def test_two_stores_on_one_home_see_each_others_writes(tmp_path, pack):
    with Store.open(tmp_path, pack) as one, Store.open(tmp_path, pack) as two:
        one.record_attempt("atomic/logprobs", "one's", EXACT)
        assert two.status("atomic/probs") == "unlocked"
        two.record_attempt("atomic/probs", "two's", APPROX)
        # two passes logprobs only approximately: one's exact pass must survive.
        assert two.record_attempt("atomic/logprobs", "two's", APPROX) == "exact"
        one.show_hint("atomic/counts_sum_inv")
        two.show_hint("atomic/counts_sum_inv")
        assert one.hints_shown("atomic/counts_sum_inv") == 2
        assert one.accepted_codes() == {"atomic/logprobs": "one's", "atomic/probs": "two's"}
        assert one.statuses() == two.statuses()


# -- durability -----------------------------------------------------------------------------

RECORD_FOREVER = """
    import sys
    from tutor.pack.model import load_pack
    from tutor.session.store import Store
    store = Store.open(sys.argv[1], load_pack())
    i = int(sys.argv[2])
    from tutor.values.results import CheckResult
    result = CheckResult.from_dict(
        {"passed": True, "checks": [{"verdict": "exact", "maxdiff": 0.0}], "error": None})
    while True:
        store.record_attempt("atomic/logprobs", f"attempt {i}", result)
        store.save_draft("atomic/probs", f"draft {i}")
        print(i, flush=True)
        i += 1
"""


def test_sigkill_while_saving_loses_nothing_committed(tmp_path, pack):
    printed: list[int] = []
    for wait_for in (40, 7, 123):  # kill at a few different moments
        child = python(RECORD_FOREVER, str(tmp_path), str(len(printed)))
        lines = []
        while len(lines) < wait_for:
            line = child.stdout.readline()
            assert line, "the recording child died on its own"
            lines.append(line)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        # Read through the same file object: readline may already hold the next lines in its
        # buffer, which communicate() (reading the pipe itself) would never see.
        rest = child.stdout.read()
        child.stdout.close()
        assert child.returncode == -signal.SIGKILL
        printed += [int(n) for n in "".join(lines).split() + rest.split()]
        # What was committed is there; at most the one attempt after the last print was too.
        with Store.open(tmp_path, pack) as store:
            assert store.notices == []
            codes = [a["code"] for a in store.attempts("atomic/logprobs")]
            assert codes[: len(printed)] == [f"attempt {i}" for i in printed]
            assert len(codes) - len(printed) in (0, 1)
            last_draft = store.draft("atomic/probs")
            assert last_draft in (f"draft {printed[-1]}", f"draft {len(codes) - 1}")
            printed = list(range(len(codes)))
    with closing(sqlite3.connect(tmp_path / FILENAME)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


SOLVE_MY_SHARE = """
    import os, sys, time
    from tutor.pack.model import load_pack
    from tutor.session.store import Store
    home, tag, go = sys.argv[1], sys.argv[2], sys.argv[3]
    pack = load_pack()
    share = [s.id for i, s in enumerate(pack.steps) if i % 2 == (tag == "B")]
    from tutor.values.results import CheckResult
    exact, approx, wrong = (CheckResult.from_dict(d) for d in (
        {"passed": True, "checks": [{"verdict": "exact", "maxdiff": 0.0}], "error": None},
        {"passed": True, "checks": [{"verdict": "approximate", "maxdiff": 1e-9}]},
        {"passed": False, "checks": [{"verdict": "wrong", "maxdiff": 1.0}]}))
    store = Store.open(home, pack)
    print("ready", flush=True)
    while not os.path.exists(go):
        time.sleep(0.001)
    other = "B" if tag == "A" else "A"
    turns = (len(pack.steps) + 1) // 2
    for round in range(3):
        for turn in range(turns):
            if turn < len(share):
                sid = share[turn]
                store.record_attempt(sid, f"{tag} wrong", wrong)
                store.record_attempt(sid, f"{tag} {sid}", exact)
                store.save_draft(sid, f"{tag} draft {round}")
                # Both fight over the first step: A's exact pass must survive B's approximate
                # ones.
                store.record_attempt("atomic/logprobs", f"{tag} first",
                                     exact if tag == "A" else approx)
            # Each turn ends when both have written theirs: however busy the machine, the two
            # writers take turns, so their writes meet and interleave on every turn.
            open(f"{go}-{tag}-{round}-{turn}", "w").close()
            while not os.path.exists(f"{go}-{other}-{round}-{turn}"):
                time.sleep(0.001)
    print("done", flush=True)
"""


def test_two_processes_never_lose_each_others_accepted_steps(tmp_path, pack):
    go = tmp_path / "go"
    home = tmp_path / "home"
    children = {tag: python(SOLVE_MY_SHARE, str(home), tag, str(go)) for tag in "AB"}
    for child in children.values():
        assert child.stdout.readline() == "ready\n"
    go.touch()
    for child in children.values():
        out, _ = child.communicate(timeout=120)
        assert child.returncode == 0
        assert out == "done\n"
    with Store.open(home, pack) as store:
        statuses = store.statuses()
        assert set(statuses.values()) == {"exact"}
        codes = store.accepted_codes()
        for i, s in enumerate(pack.steps[1:], start=1):
            assert codes[s.id] == f"{'AB'[i % 2]} {s.id}"
        assert codes["atomic/logprobs"] == "A first"
        tags = [a["code"][0] for a in store.attempts("atomic/logprobs")]
        assert sum(a != b for a, b in pairwise(tags)) > 2, "the two did not interleave"
        rounds = 3
        assert len(store.attempts("atomic/probs")) == 2 * rounds
        # Its own wrong + exact from A, and one fight per step from each of them, every round.
        assert len(store.attempts("atomic/logprobs")) == rounds * (2 + len(pack.steps))


def test_opening_waits_for_another_process_that_is_creating_the_database(tmp_path, pack):
    """Switching to WAL needs the file to itself and SQLite does not wait for it: the store must."""
    other = sqlite3.connect(tmp_path / FILENAME, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # as another tutor does while it creates the schema
    other.execute("CREATE TABLE elsewhere (x)")
    release = threading.Timer(0.3, other.execute, ("COMMIT",))
    release.start()
    try:
        with Store.open(tmp_path, pack) as store:
            assert store.record_attempt("atomic/logprobs", "x", EXACT) == "exact"
    finally:
        release.join()
        other.close()


def test_a_corrupt_database_is_moved_aside_with_a_notice(tmp_path, pack):
    garbage = b"this is not a database, it is a shopping list\n" * 200
    (tmp_path / FILENAME).write_bytes(garbage)
    with Store.open(tmp_path, pack) as store:
        (moved,) = tmp_path.glob(f"{FILENAME}.corrupt-*[0-9]")
        assert re.fullmatch(rf"{re.escape(FILENAME)}\.corrupt-\d{{8}}-\d{{6}}", moved.name)
        assert moved.read_bytes() == garbage
        assert len(store.notices) == 1
        assert f"moved to {moved} " in store.notices[0]
        assert "a fresh one was started" in store.notices[0]
        assert store.record_attempt("atomic/logprobs", "x", EXACT) == "exact"
    with Store.open(tmp_path, pack) as store:
        assert store.notices == []
        assert store.status("atomic/logprobs") == "exact"


def test_a_database_with_damaged_pages_is_moved_aside(tmp_path, pack):
    with Store.open(tmp_path, pack) as store:
        solve(store, ids(pack, 1))
    path = tmp_path / FILENAME
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[page:] = b"\xa5" * (len(data) - page)  # keep the header, ruin every table
    path.write_bytes(bytes(data))
    with Store.open(tmp_path, pack) as store:
        assert len(store.notices) == 1
        assert "unreadable" in store.notices[0]
        assert store.status("atomic/logprobs") == "unlocked"
    assert len(list(tmp_path.glob(f"{FILENAME}.corrupt-*"))) == 1


def test_a_database_from_a_newer_version_is_refused_and_left_untouched(tmp_path, pack):
    with Store.open(tmp_path, pack) as store:
        solve(store, ids(pack, 1)[:3])
    path = tmp_path / FILENAME
    newer = len(progress.MIGRATIONS) + 1
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {newer}")
    before = path.read_bytes()
    with pytest.raises(StoreError) as err:
        Store.open(tmp_path, pack)
    message = str(err.value)
    assert str(path) in message
    assert "newer version" in message
    assert f"schema version {newer}" in message
    assert path.read_bytes() == before
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_a_home_under_a_regular_file_is_refused_with_the_path(tmp_path, pack):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("I am a file")
    for home in (blocker / "home", blocker):
        with pytest.raises(StoreError) as err:
            Store.open(home, pack)
        assert str(home) in str(err.value)
        assert "--home" in str(err.value)
    assert blocker.read_text() == "I am a file"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
def test_a_read_only_home_is_refused_with_the_path(tmp_path, pack):
    home = tmp_path / "home"
    home.mkdir(mode=0o500)
    try:
        with pytest.raises(StoreError) as err:
            Store.open(home, pack)
        assert str(home) in str(err.value)
        assert "--home" in str(err.value)
    finally:
        home.chmod(0o700)


def test_migrations_run_forward_from_version_1_and_keep_the_data(tmp_path, pack, monkeypatch):
    with Store.open(tmp_path, pack) as store:
        solve(store, ["atomic/logprobs"])
    later = ("ALTER TABLE steps ADD COLUMN note TEXT", "UPDATE steps SET note = 'migrated'")
    monkeypatch.setattr(progress, "MIGRATIONS", [*progress.MIGRATIONS, later])
    with Store.open(tmp_path, pack) as store:
        assert store.status("atomic/logprobs") == "exact"
    with closing(sqlite3.connect(tmp_path / FILENAME)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(progress.MIGRATIONS)
        assert db.execute("SELECT note FROM steps").fetchall() == [("migrated",)]


def test_a_version_1_file_learns_the_skipped_status_and_keeps_its_steps(tmp_path, pack,
                                                                        monkeypatch):
    # A file written before a step could pass without the line's rule.
    monkeypatch.setattr(progress, "MIGRATIONS", progress.MIGRATIONS[:1])
    with Store.open(tmp_path, pack) as store:
        solve(store, ["atomic/logprobs"])
        store.show_hint("atomic/logprobs")
    monkeypatch.undo()
    with Store.open(tmp_path, pack) as store:
        assert store.status("atomic/logprobs") == "exact"
        with store._write() as db:
            db.execute("UPDATE steps SET status = 'skipped' WHERE step_id = 'atomic/logprobs'")
        assert store.status("atomic/logprobs") == "skipped"
    with closing(sqlite3.connect(tmp_path / FILENAME)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(progress.MIGRATIONS)
        assert db.execute("SELECT hints FROM steps").fetchall() == [(1,)]


def test_a_failing_migration_changes_nothing(tmp_path, pack, monkeypatch):
    with Store.open(tmp_path, pack) as store:
        solve(store, ["atomic/logprobs"])
    broken = ("ALTER TABLE steps ADD COLUMN note TEXT", "THIS IS NOT SQL")
    monkeypatch.setattr(progress, "MIGRATIONS", [*progress.MIGRATIONS, broken])
    with pytest.raises(StoreError):
        Store.open(tmp_path, pack)
    monkeypatch.undo()
    with Store.open(tmp_path, pack) as store:
        assert store.notices == []
        assert store.status("atomic/logprobs") == "exact"
    with closing(sqlite3.connect(tmp_path / FILENAME)) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(progress.MIGRATIONS)
        columns = [row[1] for row in db.execute("PRAGMA table_info(steps)")]
        assert "note" not in columns


def test_writes_do_not_hold_the_database_between_calls(tmp_path, pack):
    """A second process must be able to write right after any call: no transaction is left open."""
    with Store.open(tmp_path, pack) as store:
        store.record_attempt("atomic/logprobs", "x", EXACT)
        store.statuses()
        store.save_draft("atomic/probs", "y")
        with closing(sqlite3.connect(tmp_path / FILENAME, timeout=0)) as other:
            other.execute("BEGIN IMMEDIATE")  # raises "database is locked" at once if held
            other.execute("ROLLBACK")


def test_the_total_line_counts_one_hint_and_one_attempt_in_the_singular(store):
    from tutor.session.report import summary_line

    store.show_hint("atomic/logprobs")
    store.record_attempt("atomic/logprobs", "a", WRONG)
    assert ", 1 attempt, 1 hint, " in summary_line(store.summary())
    store.show_hint("atomic/logprobs")
    store.record_attempt("atomic/logprobs", "b", EXACT)
    assert ", 2 attempts, 2 hints, " in summary_line(store.summary())
