"""The instructor's view of a class: `report.html` (one self-contained page) and `grades.csv`.

Every submission is a row of both, in the order the submissions were given, named by its path
relative to the folder they all share (two students' `hw.ipynb` in two folders stay two names),
and, with a roster, by the student's id and name. The page shows the class first: the spread of
scores as an inline SVG histogram, and per step how many submissions passed it, the hardest
steps first, with the diagnoses seen most often there and how many times; then every row, with
its score and its mark for every step. Nothing in it is fetched from anywhere: no scripts, no
styles from outside. Every text that came from a submission or the roster is escaped on the page
and made inert in the CSV (a cell that starts like a formula is not one).
"""

from __future__ import annotations

import csv
import html
import io
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tutor.course.platforms import write_atomically
from tutor.course.scoring import Grade, Outcome, StepGrade
from tutor.pack.model import Pack
from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.values.results import Rule

TOP_DIAGNOSES = 5
BINS = 10
MAX_ROSTER_BYTES = 10 * 1024 * 1024
ROSTER_COLUMNS = ("submission", "student_id", "name")


# --- who handed in what ---------------------------------------------------------------------

class RosterError(ValueError):
    """The roster cannot be read: why, in one line."""


@dataclass(frozen=True)
class Entry:
    """One submission's row: its path relative to the submissions' common folder, whose it
    is (empty without a roster, or when the roster does not name it), and its grade."""

    file: str
    grade: Grade
    student_id: str = ""
    name: str = ""


@dataclass
class Roster:
    """Who handed in which file: by the submission's key (see `submission_keys`), the student's
    id and name; and the students the roster names whose file was not among those graded."""

    students: dict[str, tuple[str, str]] = field(default_factory=dict)
    absent: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, submission)


def submission_keys(paths: list[Path]) -> list[str]:
    """Each path relative to the folder all of them share, with `/` between its parts."""
    absolute = [os.path.abspath(p) for p in paths]
    try:
        common = os.path.commonpath([os.path.dirname(a) for a in absolute])
    except ValueError:  # on different drives: nothing shared, keep them as they were given
        return [p.as_posix() for p in paths]
    return [Path(os.path.relpath(a, common)).as_posix() for a in absolute]


def read_roster(path: Path, paths: list[Path]) -> Roster:
    """The roster in `path` (a CSV file: a header row naming `submission` and `student_id`
    and/or `name`, then a row per student) matched to the submissions given. A row's
    submission is found by its key (as grades.csv names it) or by its path as given on the
    command line; RosterError when the file cannot be read or a submission is named twice."""
    rows = _roster_rows(path)
    keys = submission_keys(paths)
    by_key = {k: k for k in keys}
    by_path = {os.path.abspath(p): k for p, k in zip(paths, keys, strict=True)}
    roster = Roster()
    for line, (submission, student_id, name) in rows:
        given = submission.replace("\\", "/").removeprefix("./")
        key = submission and (by_key.get(given) or by_path.get(os.path.abspath(submission)))
        if not key:
            roster.absent.append((student_id, name, submission))
            continue
        if key in roster.students:
            raise RosterError(f"{path}, line {line}: {submission} is named twice")
        roster.students[key] = (student_id, name)
    return roster


def _roster_rows(path: Path) -> list[tuple[int, tuple[str, str, str]]]:
    """(line, (submission, student_id, name)) for each row that is not blank."""
    try:
        if path.stat().st_size > MAX_ROSTER_BYTES:
            raise RosterError(f"{path} is over {MAX_ROSTER_BYTES // 2**20} MB: not a roster")
        text = path.read_text(encoding="utf-8-sig")  # a spreadsheet's export may start with a BOM
    except OSError as exc:
        raise RosterError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RosterError(f"the roster {path} is not UTF-8 text") from None
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    if "submission" not in header or not {"student_id", "name"} & set(header):
        raise RosterError(f"the roster {path} needs a header row with the columns submission "
                          "and student_id and/or name")
    where = {c: header.index(c) for c in ROSTER_COLUMNS if c in header}
    out = []
    for row in reader:
        cells = tuple(row[where[c]].strip() if c in where and where[c] < len(row) else ""
                      for c in ROSTER_COLUMNS)
        if any(cells):
            out.append((reader.line_num, cells))
    return out


def class_entries(paths: list[Path], grades: Mapping[Path, Grade],
                  roster: Roster | None = None) -> list[Entry]:
    """A row per submission, in the order given; `grades` holds each path's grade."""
    students = roster.students if roster else {}
    return [Entry(key, grades[path], *students.get(key, ("", "")))
            for path, key in zip(paths, submission_keys(paths), strict=True)]


# --- grades.csv -----------------------------------------------------------------------------

def grades_csv(pack: Pack, entries: list[Entry], roster: Roster | None = None) -> str:
    """A row per submission: (with a roster, the student's id and name), file, score, max
    score, then the points of every step; with a roster, a row for each student it names
    whose submission was not given, with no score."""
    out = io.StringIO()
    writer = csv.writer(out)
    who = ["student_id", "name"] if roster else []
    writer.writerow([*who, "file", "score", "max_score", *[s.id for s in pack.steps]])
    for e in entries:
        points = {s.id: s.score for s in e.grade.steps}
        names = [_cell(e.student_id), _cell(e.name)] if roster else []
        writer.writerow([*names, _cell(e.file), f"{e.grade.score:g}", f"{e.grade.max_score:g}",
                         *[f"{points.get(s.id, 0):g}" for s in pack.steps]])
    for student_id, name, _submission in roster.absent if roster else []:
        writer.writerow([_cell(student_id), _cell(name), "", "", "", *[""] * len(pack.steps)])
    return out.getvalue()


def _cell(text: str) -> str:
    # A cell that starts like a formula would be run by a spreadsheet; one that holds a
    # terminal's escape sequence would be obeyed by `cat grades.csv`.
    if text[:1] in ("=", "+", "-", "@", "\t", "\r"):
        text = "'" + text
    return clean(text, MAX_MESSAGE)


# --- report.html ----------------------------------------------------------------------------

def histogram_svg(scores: list[float], top: float, width: int = 480, height: int = 160) -> str:
    """Scores in BINS equal bins from 0 to `top`, as bars with their counts."""
    counts = [0] * BINS
    for s in scores:
        i = min(BINS - 1, int(BINS * s / top)) if top else 0
        counts[max(0, i)] += 1
    most = max(counts) or 1
    bar = width / BINS
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 30}" '
             f'role="img" aria-label="histogram of scores">']
    for i, c in enumerate(counts):
        h = (height - 14) * c / most
        x, y = i * bar, height - h
        lo, hi = top * i / BINS, top * (i + 1) / BINS
        parts.append(f'<rect x="{x + 2:.1f}" y="{y:.1f}" width="{bar - 4:.1f}" height="{h:.1f}" '
                     f'fill="#4a7ab5"><title>{lo:g}–{hi:g}: {c}</title></rect>')
        if c:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{y - 3:.1f}" font-size="11" '
                         f'text-anchor="middle">{c}</text>')
        parts.append(f'<text x="{x + bar / 2:.1f}" y="{height + 14}" font-size="10" '
                     f'text-anchor="middle">{lo:.3g}</text>')
    parts.append(f'<text x="{width - 2}" y="{height + 28}" font-size="10" text-anchor="end">'
                 f'score (out of {top:g})</text></svg>')
    return "".join(parts)


def step_table(pack: Pack, grades: list[Grade]) -> list[dict]:
    """Per step: pass rate, counts by outcome, the commonest messages of those that did not
    pass; the hardest steps (lowest pass rate) first, the lesson's order breaking ties."""
    graded = [g for g in grades if not g.unreadable]
    rows = []
    for index, step in enumerate(pack.steps):
        outcomes: Counter[str] = Counter()
        messages: Counter[str] = Counter()
        for g in graded:
            sg = next((s for s in g.steps if s.id == step.id), None)
            if sg is None:
                continue
            outcomes[sg.status.value] += 1
            if sg.status is Outcome.FAILED:
                messages[sg.message] += 1
        total = sum(outcomes.values())
        rows.append({"id": step.id, "title": step.title, "index": index, "total": total,
                     "passed": outcomes["passed"], "outcomes": outcomes,
                     "rate": outcomes["passed"] / total if total else 0.0,
                     "diagnoses": messages.most_common(TOP_DIAGNOSES)})
    rows.sort(key=lambda r: (r["rate"], r["index"]))
    return rows


def step_labels(pack: Pack) -> list[str]:
    """A short label per step for the students' table's columns: exercise.number (1.1, 1.2,
    ..., 2.1), since 23 step ids side by side would not fit a page."""
    seen: Counter[int] = Counter()
    labels = []
    for step in pack.steps:
        seen[step.exercise] += 1
        labels.append(f"{step.exercise}.{seen[step.exercise]}")
    return labels


def mark(step: StepGrade) -> str:
    """✓ passed, ↷ passed but not by the line's rule, ✗ failed, – no code, ! the grader's own
    failure."""
    if step.status is Outcome.PASSED and step.rule is Rule.SKIPPED:
        return "↷"
    return step.status.mark


_MARK_CLASS = {"✓": "ok", "↷": "skip", "✗": "bad", "–": "none", "!": "err"}


def _student_rows(pack: Pack, entries: list[Entry], roster: bool) -> str:
    e = html.escape
    labels = step_labels(pack)
    head = "".join(f'<th class=m><abbr title="{e(s.id)}: {e(s.title)}">{lab}</abbr></th>'
                   for s, lab in zip(pack.steps, labels, strict=True))
    rows = [f"<tr>{'<th>student</th>' if roster else ''}<th>file</th><th>score</th>{head}</tr>"]
    for entry in entries:
        g = entry.grade
        who = (f"<td>{e(entry.name)}<br><small>{e(entry.student_id)}</small></td>"
               if roster else "")
        start = f"<tr>{who}<td><code>{e(entry.file)}</code></td>"
        if g.unreadable:
            rows.append(f"{start}<td class=r>–</td><td colspan={len(pack.steps)} class=skipped>"
                        f"not graded: {e(g.unreadable)}</td></tr>")
            continue
        by_id = {s.id: s for s in g.steps}
        cells = []
        for step in pack.steps:
            sg = by_id.get(step.id)
            if sg is None:
                cells.append("<td class=m></td>")
                continue
            m = mark(sg)
            tip = f"{sg.id}: {sg.status.value}, {sg.score:g} of {sg.max_score:g}. {sg.message}"
            cells.append(f'<td class="m {_MARK_CLASS[m]}" title="{e(tip)}">{m}</td>')
        rows.append(f"{start}<td class=r>{g.score:g} / {g.max_score:g}</td>{''.join(cells)}"
                    "</tr>")
    return "\n".join(rows)


def _step_rows(pack: Pack, grades: list[Grade]) -> str:
    e = html.escape
    rows = []
    for r in step_table(pack, grades):
        diag = "".join(f"<li><span class=n>{n}×</span> {e(m)}</li>" for m, n in r["diagnoses"])
        counts = ", ".join(f"{n} {k}" for k, n in sorted(r["outcomes"].items()))
        rows.append(
            f"<tr><td><code>{e(r['id'])}</code><br><small>{e(r['title'])}</small></td>"
            f"<td class=r>{r['rate']:.0%}<div class=bar><div style=\"width:{r['rate']:.0%}\">"
            f"</div></div></td><td><small>{e(counts)}</small></td>"
            f"<td>{'<ul>' + diag + '</ul>' if diag else ''}</td></tr>")
    return "\n".join(rows)


def report_html(pack: Pack, entries: list[Entry], roster: Roster | None = None) -> str:
    e = html.escape
    grades = [entry.grade for entry in entries]
    scores = [g.score for g in grades if not g.unreadable]
    top = max((g.max_score for g in grades), default=0) or 1
    unreadable = [entry for entry in entries if entry.grade.unreadable]
    # The mean of every submission, one that could not be read counting 0 as in grades.csv.
    mean = sum(scores) / len(grades) if grades else 0
    skipped = "".join(f"<li><code>{e(x.file)}</code>: {e(x.grade.unreadable or '')}</li>"
                      for x in unreadable)
    absent = "".join(f"<li>{e(name)} <small>{e(sid)}</small>: <code>{e(sub)}</code></li>"
                     for sid, name, sub in (roster.absent if roster else []))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{e(pack.title)}: grades</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2em auto; max-width: 90em; color: #222; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .4em .6em; vertical-align: top;
  text-align: left; }}
td.r {{ width: 8em; white-space: nowrap; }}
th.m, td.m {{ padding: .4em .15em; text-align: center; width: 1.6em; }}
td.ok {{ color: #1d7a3e; }} td.skip {{ color: #8a6d00; }} td.bad {{ color: #b22; }}
td.none {{ color: #999; }} td.err {{ color: #a0a; }} td.skipped {{ color: #a33; }}
.bar {{ background: #eee; height: 6px; margin-top: 3px; }}
.bar div {{ background: #3a9a5b; height: 6px; }}
ul {{ margin: 0; padding-left: 1.2em; }}
.n {{ color: #a33; font-weight: bold; }}
</style></head><body>
<h1>{e(pack.title)}</h1>
<p>{len(entries)} submissions ({len(unreadable)} could not be read) · mean score
{mean:.2f} of {top:g}{" (those count 0, as in grades.csv)" if unreadable else ""}</p>
<h2>Scores</h2>
{histogram_svg(scores, top)}
<h2>Steps, hardest first</h2>
<table><tr><th>step</th><th>passed</th><th>outcomes</th><th>most common diagnoses</th></tr>
{_step_rows(pack, grades)}
</table>
<h2>Students, in the order given</h2>
<p><small>✓ passed · ↷ passed, right for this network but not by the line's rule · ✗ failed ·
– no code for it · ! the grader's own failure. A column's heading is exercise.step: point at it
for the step, at a mark for the verdict.</small></p>
<table>
{_student_rows(pack, entries, roster is not None)}
</table>
{'<h2>Not graded</h2><ul>' + skipped + '</ul>' if skipped else ''}
{'<h2>On the roster, no submission given</h2><ul>' + absent + '</ul>' if absent else ''}
</body></html>
"""


def write_report(folder: Path, pack: Pack, entries: list[Entry],
                 roster: Roster | None = None) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    page, table = folder / "report.html", folder / "grades.csv"
    # A file name that is not UTF-8 reaches here with lone surrogates: they become "?".
    write_atomically(page, report_html(pack, entries, roster).encode(errors="replace"))
    write_atomically(table, grades_csv(pack, entries, roster).encode(errors="replace"))
    return page, table
