"""The learner's progress: accepted code, drafts, attempts, hints and training runs, in SQLite.

One small database per home folder (`progress.sqlite3`), shared by every process that uses that
home: the TUI, a second TUI, a `check` from the shell. So the store caches nothing: every call
reads or writes the database in one short transaction, and writes take the write lock up front
(BEGIN IMMEDIATE) so a read-modify-write can never overwrite what another process just committed.
WAL mode lets readers and the one writer proceed side by side.

Only achievements are stored ("passed", "exact", "revealed"); "locked" and "unlocked" are derived
from them and the pack's order each time, so they can never go stale.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tutor.pack import curriculum
from tutor.pack.model import DEFAULT_PACK, Pack, Step
from tutor.session.errors import StoreError
from tutor.training.plan import training_step
from tutor.values.results import CheckResult, Status
from tutor.values.runs import RunStatus, TrainingRun

FILENAME = "progress.sqlite3"


def store_filename(pack: Pack) -> str:
    """Each pack keeps its own progress; the first pack keeps the original file name."""
    return FILENAME if pack.id == DEFAULT_PACK else f"progress-{pack.id}.sqlite3"
BUSY_TIMEOUT = 5.0  # seconds to wait for another process's write before giving up
ELSEWHERE = "Use another folder with --home or BACKPROP_TUTOR_HOME."

# Schema migrations, oldest first. Migration i takes the schema from user_version i to i + 1.
# Append to this list; never edit a migration that has shipped.
MIGRATIONS: list[tuple[str, ...]] = [
    (
        """CREATE TABLE steps (
            step_id TEXT PRIMARY KEY,
            status TEXT CHECK (status IN ('passed', 'exact', 'revealed')),
            accepted_code TEXT,
            hints INTEGER NOT NULL DEFAULT 0,
            seconds REAL NOT NULL DEFAULT 0
        )""",
        # Drafts are written every half second while typing: a table of their own keeps that
        # write a one-row upsert that touches nothing else.
        """CREATE TABLE drafts (
            step_id TEXT PRIMARY KEY,
            code TEXT NOT NULL,
            saved_at TEXT NOT NULL
        )""",
        """CREATE TABLE attempts (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            step_id TEXT NOT NULL,
            code TEXT NOT NULL,
            passed INTEGER NOT NULL,
            verdict TEXT NOT NULL,
            maxdiff REAL,
            diagnosis TEXT,
            at TEXT NOT NULL
        )""",
        "CREATE INDEX attempts_by_step ON attempts (step_id, id)",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        # The run is kept whole as JSON (docs/json.md, "A training run"); its types read it.
        """CREATE TABLE training_runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            at TEXT NOT NULL,
            run TEXT NOT NULL
        )""",
    ),
    (
        # A step may pass without the line's own rule ("skipped", results.Rule): its status
        # needs a word of its own. SQLite cannot change a CHECK in place: the table is rebuilt.
        """CREATE TABLE steps_v2 (
            step_id TEXT PRIMARY KEY,
            status TEXT CHECK (status IN ('skipped', 'passed', 'exact', 'revealed')),
            accepted_code TEXT,
            hints INTEGER NOT NULL DEFAULT 0,
            seconds REAL NOT NULL DEFAULT 0
        )""",
        """INSERT INTO steps_v2 (step_id, status, accepted_code, hints, seconds)
            SELECT step_id, status, accepted_code, hints, seconds FROM steps""",
        "DROP TABLE steps",
        "ALTER TABLE steps_v2 RENAME TO steps",
    ),
]

# Weakest first; "revealed" is never left.
ACHIEVEMENTS = ("revealed", "skipped", "passed", "exact")
FAILING_VERDICTS = ("missing", "shape", "wrong")  # most telling first


class _Unreadable(Exception):
    """The database file is damaged or not a database at all: move it aside and start afresh."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _is_corruption(exc: sqlite3.Error) -> bool:
    # sqlite3 raises the bare DatabaseError class only for SQLITE_CORRUPT and SQLITE_NOTADB;
    # "locked", "cannot open", "read-only" and "disk full" are OperationalError and must never
    # cause a healthy database to be moved aside.
    return type(exc) is sqlite3.DatabaseError


def _connect(path: Path) -> sqlite3.Connection:
    """Open, check and migrate the database; raise _Unreadable if it is damaged."""
    try:
        db = sqlite3.connect(
            path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise StoreError(f"Cannot open the progress database {path}: {exc}. {ELSEWHERE}") from exc
    try:
        # Read the version before anything writes: a newer program's file must stay untouched.
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StoreError(
                f"The progress database {path} was written by a newer version of backprop-tutor "
                f"(schema version {version}; this version knows up to {len(MIGRATIONS)}). "
                f"It was left unchanged: upgrade backprop-tutor to use it. {ELSEWHERE}"
            )
        check = db.execute("PRAGMA quick_check").fetchone()[0]
        if check != "ok":
            raise _Unreadable(check)
        if version == 0:
            # A new database holds nothing to lose: creating it (the switch to WAL and the
            # tables) need not wait for the disk, which costs the first launch tens of ms.
            # Every later write says how durable it must be (see Store._write).
            db.execute("PRAGMA synchronous = OFF")
        _use_wal(db)
        if version < len(MIGRATIONS):
            _migrate(db)
        return db
    except sqlite3.Error as exc:
        db.close()
        if _is_corruption(exc):
            raise _Unreadable(str(exc)) from exc
        raise StoreError(f"Cannot use the progress database {path}: {exc}. {ELSEWHERE}") from exc
    except BaseException:
        db.close()
        raise


def _use_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL, retrying while another process holds the file.

    SQLite answers "database is locked" to a journal-mode change at once, without waiting on the
    busy timeout, so two processes creating the same new database need this loop.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _migrate(db: sqlite3.Connection) -> None:
    """Bring the schema up to date in one transaction (all of it or none of it)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        # Re-read under the write lock: another process may have migrated in the meantime.
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for migration in MIGRATIONS[version:]:
            for statement in migration:
                db.execute(statement)
        if version < len(MIGRATIONS):
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _move_aside(path: Path) -> Path:
    """Rename a damaged database (and its WAL files) to a timestamped name next to it."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    # The WAL files belong to the damaged file: a fresh database must not pick them up.
    for suffix in ("-wal", "-shm", ""):
        side = Path(f"{path}{suffix}")
        if side.exists():
            side.rename(f"{target}{suffix}")
    return target


def _summarize(typed: CheckResult) -> tuple[bool, str, float | None, str | None]:
    """Reduce a check to (passed, verdict, max maxdiff, diagnosis kind) for the attempts table.

    The verdict of a passing attempt is the status it earns ("exact" or "passed"); of a failing
    one, the error ("error"), the most telling failing check verdict, or "failed" (e.g. every
    check was close but the held-out batch was not).
    """
    verdicts = [c.verdict.value for c in typed.checks]
    if typed.error:
        verdict = "error"
    elif typed.achievement is not None:
        verdict = typed.achievement.value
    else:
        verdict = next((v for v in FAILING_VERDICTS if v in verdicts), "failed")
    diffs = [c.maxdiff for c in typed.checks if c.maxdiff is not None]
    kinds = [c.diagnosis.kind for c in typed.checks if c.diagnosis]
    if typed.error:
        kinds.append(typed.error.kind.value)
    return typed.passed, verdict, max(diffs, default=None), kinds[0] if kinds else None


class Store:
    """Progress of one learner (one home folder) through one pack. Safe to share across threads."""

    def __init__(self, db: sqlite3.Connection, path: Path, pack: Pack, notices: list[str]):
        self._db = db
        self._lock = threading.RLock()  # one connection: keep threads out of each other's BEGIN
        self.path = path
        self.pack = pack
        self.notices = notices
        self._steps = pack.steps
        self._training = {s.id for s in self._steps if s.kind.trained}

    @classmethod
    def open(cls, home: Path, pack: Pack) -> Store:
        """Open (creating if needed) the store in `home`; a damaged database is moved aside."""
        home = Path(home)
        try:
            home.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"Cannot create the progress folder {home}: {exc.strerror or exc}. {ELSEWHERE}"
            ) from exc
        path = home / store_filename(pack)
        notices: list[str] = []
        try:
            db = _connect(path)
        except _Unreadable as exc:
            try:
                moved = _move_aside(path)
            except OSError as move_exc:
                raise StoreError(
                    f"The progress database {path} is unreadable ({exc}) and could not be "
                    f"moved aside: {move_exc.strerror or move_exc}."
                ) from move_exc
            notices.append(
                f"Your progress database was unreadable ({exc}); it was moved to {moved} "
                "and a fresh one was started."
            )
            db = _connect(path)
        return cls(db, path, pack, notices)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _write(self, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One short write transaction, holding the write lock from its first statement.

        Durable writes wait for the disk (synchronous=FULL), so an accepted step survives a power
        cut; drafts are saved twice a second and only need to survive a crash of this process,
        which WAL guarantees at synchronous=NORMAL without waiting for the disk.
        """
        with self._lock:
            db = self._db
            try:
                db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"Could not save progress to {self.path}: {exc}.") from exc

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"Could not read progress from {self.path}: {exc}.") from exc

    def _step(self, step_id: str) -> Step:
        """The pack's step (accepting the pack's short forms); KeyError for an unknown id."""
        return self.pack.step(step_id)

    # -- status -----------------------------------------------------------------------------

    def statuses(self) -> dict[str, Status]:
        """Status of every step of the pack, in order (the rules are in curriculum)."""
        achieved = dict(self._read("SELECT step_id, status FROM steps WHERE status IS NOT NULL"))
        return curriculum.statuses(self.pack, achieved)

    def revealed(self) -> set[str]:
        """The steps whose solution was revealed before they were passed."""
        return {sid for sid, st in self.statuses().items() if st is Status.REVEALED}

    def status(self, step_id: str) -> str:
        return self.statuses()[self._step(step_id).id]

    def current_step(self) -> str:
        """The step the learner was last on, else the first unlocked step, else the last step."""
        rows = self._read("SELECT value FROM meta WHERE key = 'current_step'")
        statuses = self.statuses()
        if rows and rows[0][0] in statuses:
            return rows[0][0]
        return next((sid for sid, st in statuses.items() if st == "unlocked"), self._steps[-1].id)

    def set_current_step(self, step_id: str) -> None:
        sid = self._step(step_id).id
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES ('current_step', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (sid,),
            )

    def remembered(self, key: str) -> str | None:
        """A small value a front end keeps between sessions (a cursor, a dialog seen), or None."""
        rows = self._read("SELECT value FROM meta WHERE key = ?", (f"ui.{key}",))
        return rows[0][0] if rows else None

    def remember(self, key: str, value: str) -> None:
        # Prefixed, so a front end's keys can never clash with the store's own (current_step).
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (f"ui.{key}", value),
            )

    def accepted_codes(self) -> dict[str, str]:
        """Code to replay for each done step: the learner's passing code, or for a step revealed
        before the learner passed it, the pack's solution."""
        rows = {
            sid: (status, code)
            for sid, status, code in self._read(
                "SELECT step_id, status, accepted_code FROM steps WHERE status IS NOT NULL"
            )
        }
        out: dict[str, str] = {}
        for s in self._steps:
            if s.id in rows:
                status, code = rows[s.id]
                out[s.id] = code if code is not None else s.solution
        return out

    # -- attempts ---------------------------------------------------------------------------

    def record_attempt(self, step_id: str, code: str, result: CheckResult) -> str:
        """Store an attempt; a pass records the code as accepted. Returns the step's new status.

        An achievement only ever goes up (passed < exact), and the accepted code is the code that
        earned the current one, so replaying it reproduces what the status claims. A revealed step
        stays revealed: typing in the solution you were shown is not solving it. Its later passing
        code is still kept, and replayed, since it is proven correct.
        """
        sid = self._step(step_id).id
        passed, verdict, maxdiff, diagnosis = _summarize(result)
        with self._write() as db:
            db.execute(
                "INSERT INTO attempts (step_id, code, passed, verdict, maxdiff, diagnosis, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sid, code, passed, verdict, maxdiff, diagnosis, _now()),
            )
            if passed:
                row = db.execute("SELECT status FROM steps WHERE step_id = ?", (sid,)).fetchone()
                old = row[0] if row else None
                if old == "revealed":
                    db.execute("UPDATE steps SET accepted_code = ? WHERE step_id = ?", (code, sid))
                elif old is None or ACHIEVEMENTS.index(verdict) >= ACHIEVEMENTS.index(old):
                    db.execute(
                        "INSERT INTO steps (step_id, status, accepted_code) VALUES (?, ?, ?) "
                        "ON CONFLICT (step_id) DO UPDATE "
                        "SET status = excluded.status, accepted_code = excluded.accepted_code",
                        (sid, verdict, code),
                    )
            return self.statuses()[sid]

    def attempts(self, step_id: str) -> list[dict[str, Any]]:
        """Attempts at a step, oldest first."""
        rows = self._read(
            "SELECT code, verdict, maxdiff, diagnosis, at, passed FROM attempts "
            "WHERE step_id = ? ORDER BY id",
            (self._step(step_id).id,),
        )
        return [
            {"code": c, "verdict": v, "maxdiff": m, "diagnosis": d, "at": at, "passed": bool(p)}
            for c, v, m, d, at, p in rows
        ]

    # -- drafts, hints, reveal, time --------------------------------------------------------

    def save_draft(self, step_id: str, code: str) -> None:
        sid = self._step(step_id).id
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO drafts (step_id, code, saved_at) VALUES (?, ?, ?) "
                "ON CONFLICT (step_id) DO UPDATE "
                "SET code = excluded.code, saved_at = excluded.saved_at",
                (sid, code, _now()),
            )

    def draft(self, step_id: str) -> str | None:
        rows = self._read("SELECT code FROM drafts WHERE step_id = ?", (self._step(step_id).id,))
        return rows[0][0] if rows else None

    def hints_shown(self, step_id: str) -> int:
        rows = self._read("SELECT hints FROM steps WHERE step_id = ?", (self._step(step_id).id,))
        return rows[0][0] if rows else 0

    def show_hint(self, step_id: str) -> int:
        """Count one more hint shown; returns the new count, which stops at the step's last hint."""
        step = self._step(step_id)
        with self._write() as db:
            db.execute(
                "INSERT INTO steps (step_id, hints) VALUES (?, min(1, ?)) "
                "ON CONFLICT (step_id) DO UPDATE SET hints = min(hints + 1, ?)",
                (step.id, len(step.hints), len(step.hints)),
            )
            return db.execute("SELECT hints FROM steps WHERE step_id = ?", (step.id,)).fetchone()[0]

    def reveal(self, step_id: str) -> None:
        """Mark the step revealed (the pack's solution will be replayed) unless already passed."""
        sid = self._step(step_id).id
        with self._write() as db:
            db.execute(
                "INSERT INTO steps (step_id, status) VALUES (?, 'revealed') "
                "ON CONFLICT (step_id) DO UPDATE SET status = 'revealed' WHERE status IS NULL",
                (sid,),
            )

    def add_time(self, step_id: str, seconds: float) -> None:
        if not seconds > 0:  # also drops NaN; a clock that jumped back must not subtract time
            return
        sid = self._step(step_id).id
        with self._write(durable=False) as db:
            db.execute(
                "INSERT INTO steps (step_id, seconds) VALUES (?, ?) "
                "ON CONFLICT (step_id) DO UPDATE SET seconds = seconds + excluded.seconds",
                (sid, seconds),
            )

    def summary(self) -> list[dict[str, Any]]:
        """Per step, in order: status, attempts, hints, best passing maxdiff, time spent."""
        statuses = self.statuses()
        steps = {
            sid: (h, sec) for sid, h, sec in self._read("SELECT step_id, hints, seconds FROM steps")
        }
        tries = {
            sid: (n, best)
            for sid, n, best in self._read(
                "SELECT step_id, count(*), min(CASE WHEN passed THEN maxdiff END) "
                "FROM attempts GROUP BY step_id"
            )
        }
        return [
            {
                "id": s.id,
                "exercise": s.exercise,
                "status": statuses[s.id],
                "attempts": tries.get(s.id, (0, None))[0],
                "hints": steps.get(s.id, (0, 0.0))[0],
                "best_maxdiff": tries.get(s.id, (0, None))[1],
                "seconds": steps.get(s.id, (0, 0.0))[1],
            }
            for s in self._steps
        ]

    # -- reset ------------------------------------------------------------------------------

    def dependents(self, step_id: str) -> list[str]:
        """Steps whose accepted work builds on this one (see curriculum.dependents)."""
        return curriculum.dependents(self.pack, self._step(step_id).id)

    def reset(self, step_id: str) -> list[str]:
        """Start a step over; its dependents lose their achievement. Returns changed step ids.

        Attempt history and time spent are kept. A dependent's accepted code becomes its draft
        (unless it has one), so the learner can resubmit it once the step is solved again.
        """
        sid = self._step(step_id).id
        dependents = self.dependents(sid)
        with self._write() as db:
            before = self.statuses()
            db.execute(
                "UPDATE steps SET status = NULL, accepted_code = NULL, hints = 0 WHERE step_id = ?",
                (sid,),
            )
            db.execute("DELETE FROM drafts WHERE step_id = ?", (sid,))
            for dep in dependents:
                db.execute(
                    "INSERT INTO drafts (step_id, code, saved_at) "
                    "SELECT step_id, accepted_code, ? FROM steps "
                    "WHERE step_id = ? AND accepted_code IS NOT NULL "
                    "ON CONFLICT (step_id) DO NOTHING",
                    (_now(), dep),
                )
                db.execute(
                    "UPDATE steps SET status = NULL, accepted_code = NULL WHERE step_id = ?",
                    (dep,),
                )
            after = self.statuses()
        return [s for s in after if after[s] != before[s]]

    def reset_all(self) -> None:
        """Start everything over: statuses, accepted code, hints, drafts and the current step go;
        attempt history, time spent and training runs stay."""
        with self._write() as db:
            db.execute("UPDATE steps SET status = NULL, accepted_code = NULL, hints = 0")
            db.execute("DELETE FROM drafts")
            db.execute("DELETE FROM meta WHERE key = 'current_step'")

    # -- training runs ----------------------------------------------------------------------

    def record_training_run(self, run: dict) -> int:
        """Keep a training run (settings, loss history, final losses, samples); returns its id."""
        with self._write() as db:
            cur = db.execute(
                "INSERT INTO training_runs (at, run) VALUES (?, ?)", (_now(), json.dumps(run))
            )
            return int(cur.lastrowid)

    def training_runs(self) -> list[dict[str, Any]]:
        """Every recorded run, oldest first: the run's own dict plus "id" and "at"."""
        return [
            {**json.loads(run), "id": rid, "at": at}
            for rid, at, run in self._read("SELECT id, at, run FROM training_runs ORDER BY id")
        ]


# --- the training exercise's draft and runs ----------------------------------------------


def training_draft(store: Store, pack: Pack) -> str | None:
    """The exercise-4 editor's saved text, or None when there is none to reopen.

    The tutor saves what the learner types on the exercise-4 screen as the training step's
    draft and reopens that screen with it; an empty draft counts as none, as it does there.
    `train` runs what this returns, so the screen and the command line run the same code.
    """
    return store.draft(training_step(pack).id) or None


def record_run(store: Store, pack: Pack, code: str, run: TrainingRun) -> int | None:
    """Keep the run with its loss history; a finished run of the learner's own code is also an
    attempt at the training exercise, which passes it only as `run.exercise` (the rule,
    runs.exercise_verdict) says. Returns the run's id, or None for a run that never started."""
    if not run.status.kept:
        return None
    run_id = store.record_training_run(run.stored(code))
    if run.status is RunStatus.FINISHED and not run.settings.reference:
        verdict, gradcheck = run.exercise, run.gradcheck
        step = training_step(pack).id
        store.record_attempt(step, code, CheckResult(
            step, passed=verdict.passed, checks=list(gradcheck.checks) if gradcheck else [],
            notes=[verdict.reason] if verdict.reason else []))
    return run_id
