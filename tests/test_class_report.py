"""The instructor's report of a class: a row per submission in the order given, named by its path
relative to the submissions' common folder or by a roster, with every step's mark; the text that
came from submissions escaped on the page and inert in the CSV."""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tutor.course.classreport import (
    Roster,
    RosterError,
    class_entries,
    grades_csv,
    read_roster,
    report_html,
    step_labels,
    submission_keys,
)
from tutor.course.scoring import Grade, Outcome, StepGrade, unreadable
from tutor.pack.model import find_pack, load_pack
from tutor.values.results import Rule

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack(find_pack("makemore"))


def made_grade(name: str, outcomes: dict[str, tuple[Outcome, Rule | None]],
               message: str = "a verdict") -> Grade:
    """A grade as scoring makes one: a step per pack step, missing unless `outcomes` says."""
    steps = []
    for s in PACK.steps:
        status, rule = outcomes.get(s.id, (Outcome.MISSING, None))
        score = s.points if status is Outcome.PASSED else 0
        steps.append(StepGrade(s.id, s.title, s.exercise, status, rule, score, s.points,
                               message))
    return Grade(PACK.id, name, steps)


FIRST, SECOND, THIRD = (s.id for s in PACK.steps[:3])


# --- naming and ordering ------------------------------------------------------------------------

def test_keys_are_paths_relative_to_the_common_folder(tmp_path, monkeypatch):
    paths = [tmp_path / "class" / "bob" / "hw.ipynb", tmp_path / "class" / "alice" / "hw.ipynb",
             tmp_path / "class" / "late" / "x" / "hw.ipynb"]
    assert submission_keys(paths) == ["bob/hw.ipynb", "alice/hw.ipynb", "late/x/hw.ipynb"]
    assert submission_keys([tmp_path / "a" / "hw.py"]) == ["hw.py"]
    # Relative paths as typed on a command line name the same files.
    monkeypatch.chdir(tmp_path)
    assert submission_keys([Path("class/b/hw.py"), Path("class/a/hw.py")]) == ["b/hw.py",
                                                                             "a/hw.py"]


def test_rows_keep_the_order_given_and_two_same_names_stay_two(tmp_path):
    paths = [tmp_path / "zed" / "hw.py", tmp_path / "amy" / "hw.py"]
    grades = {paths[0]: made_grade("hw.py", {FIRST: (Outcome.PASSED, Rule.FOLLOWED)}),
              paths[1]: made_grade("hw.py", {})}
    entries = class_entries(paths, grades)
    rows = list(csv.reader(io.StringIO(grades_csv(PACK, entries))))
    assert rows[0][:3] == ["file", "score", "max_score"]
    assert [r[0] for r in rows[1:]] == ["zed/hw.py", "amy/hw.py"]
    assert [float(r[1]) for r in rows[1:]] == [1, 0]
    page = report_html(PACK, entries)
    assert page.index("zed/hw.py") < page.index("amy/hw.py")


def marks(row: str) -> list[str]:
    return [m for m in ("✓", "↷", "✗", "–") for _ in range(row.count(f">{m}<"))]


def test_every_student_has_a_row_of_marks(tmp_path):
    paths = [tmp_path / f"s{i}" / "hw.py" for i in range(3)]
    grades = {
        paths[0]: made_grade("hw.py", {FIRST: (Outcome.PASSED, Rule.FOLLOWED),
                                       SECOND: (Outcome.PASSED, Rule.SKIPPED),
                                       THIRD: (Outcome.FAILED, Rule.FOLLOWED)}),
        paths[1]: made_grade("hw.py", {FIRST: (Outcome.FAILED, None)}),
        paths[2]: unreadable(PACK, "hw.py", "not a notebook"),
    }
    page = report_html(PACK, class_entries(paths, grades))
    rows = page.split("<h2>Students, in the order given</h2>")[1].split("</table>")[0]
    body = rows.split("<tr>")[2:]  # past the heading row
    assert len(body) == 3
    first, second, third = body
    assert "s0/hw.py" in first and "s1/hw.py" in second and "s2/hw.py" in third
    assert sorted(marks(first)) == sorted(["✓", "↷", "✗"] + ["–"] * (len(PACK.steps) - 3))
    assert marks(second).count("✗") == 1 and marks(second).count("–") == len(PACK.steps) - 1
    assert "2 / 23" in first and "0 / 23" in second
    assert "not graded: not a notebook" in third
    # The page's mean is the table's: an unread file counts 0, as it does in grades.csv.
    assert "mean score\n0.67 of 23" in page and "count 0, as in grades.csv" in page
    # The step headings are short labels, each naming its step on hover.
    assert step_labels(PACK)[:2] == ["1.1", "1.2"] and step_labels(PACK)[-1] == "4.1"
    assert f'title="{FIRST}:' in page


def test_text_from_submissions_is_escaped_and_csv_safe(tmp_path):
    evil = "<script>alert(1)</script>.py"
    formula = "=HYPERLINK(\"x\",\"y\").py"
    paths = [tmp_path / "a" / evil, tmp_path / "b" / formula]
    grades = {paths[0]: made_grade(evil, {FIRST: (Outcome.FAILED, None)},
                                   message="dx: <img src=x onerror=alert(1)> & \"quotes\""),
              paths[1]: unreadable(PACK, formula, "<b>bad</b>")}
    entries = class_entries(paths, grades)
    page = report_html(PACK, entries)
    assert "<script" not in page and "<img" not in page and "<b>bad" not in page
    assert "&lt;script&gt;" in page and "&lt;img src=x" in page
    rows = list(csv.reader(io.StringIO(grades_csv(PACK, entries))))
    assert rows[2][0] == "b/" + formula  # it starts with its folder: no formula
    # Alone in its folder, the name itself starts the cell, and is neutralised.
    bare = class_entries([tmp_path / "c" / formula], {tmp_path / "c" / formula: grades[paths[1]]})
    cell = list(csv.reader(io.StringIO(grades_csv(PACK, bare))))[1][0]
    assert cell == "'" + formula


def test_a_roster_names_the_students_and_the_absent(tmp_path):
    subs = [tmp_path / "class" / "alice" / "hw.py", tmp_path / "class" / "bob" / "hw.py"]
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text("\ufeffSubmission,Student_ID,Name,email\n"
                           "bob/hw.py,s2,=Bob,b@x\n"
                           f"{subs[0]},s1,Alice,a@x\n"
                           ",s3,Carol,c@x\n"
                           "dave/hw.py,s4,Dave,d@x\n", encoding="utf-8")
    roster = read_roster(roster_file, subs)
    assert roster.students == {"alice/hw.py": ("s1", "Alice"), "bob/hw.py": ("s2", "=Bob")}
    assert [a[:2] for a in roster.absent] == [("s3", "Carol"), ("s4", "Dave")]
    grades = {subs[0]: made_grade("hw.py", {FIRST: (Outcome.PASSED, Rule.FOLLOWED)}),
              subs[1]: made_grade("hw.py", {})}
    entries = class_entries(subs, grades, roster)
    rows = list(csv.reader(io.StringIO(grades_csv(PACK, entries, roster))))
    assert rows[0][:5] == ["student_id", "name", "file", "score", "max_score"]
    assert rows[1][:4] == ["s1", "Alice", "alice/hw.py", "1"]
    assert rows[2][:4] == ["s2", "'=Bob", "bob/hw.py", "0"]  # a formula is not run
    assert rows[3][:4] == ["s3", "Carol", "", ""] and rows[4][:2] == ["s4", "Dave"]
    assert all(len(r) == len(rows[0]) for r in rows)
    page = report_html(PACK, entries, roster)
    assert "Alice" in page and "On the roster, no submission given" in page and "Carol" in page


@pytest.mark.parametrize("text, why", [
    ("file,who\na.py,x\n", "header row"),
    ("submission,name\nhw.py,A\nhw.py,B\n", "named twice"),
])
def test_a_roster_that_cannot_be_used_says_why(tmp_path, text, why):
    roster_file = tmp_path / "roster.csv"
    roster_file.write_text(text)
    with pytest.raises(RosterError, match=why):
        read_roster(roster_file, [tmp_path / "hw.py"])
    with pytest.raises(RosterError, match="cannot read"):
        read_roster(tmp_path / "missing.csv", [tmp_path / "hw.py"])


def test_without_a_roster_nobody_is_named():
    assert Roster().students == {}


# --- through the command line -------------------------------------------------------------------

def tutor(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=cwd, timeout=600)


def test_grade_report_with_a_roster(tmp_path):
    first = PACK.steps[0]
    subs = tmp_path / "subs"
    for who, cells in (("zoe", f"# %% {first.id}\n{first.solution}\n"),
                       ("adam", f"# %% {first.id}\ndlogprobs = probs\n")):
        (subs / who).mkdir(parents=True)
        (subs / who / "hw.py").write_text(cells)
    (tmp_path / "roster.csv").write_text("submission,student_id,name\n"
                                         "subs/adam/hw.py,a1,Adam\nzoe/hw.py,z9,Zoe\n")
    out = tmp_path / "report"
    done = tutor("grade", "--report", str(out), "--roster", "roster.csv", "--jobs", "2",
                 "--train-steps", "5", "subs/zoe/hw.py", "subs/adam/hw.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader((out / "grades.csv").open(encoding="utf-8")))
    assert [r[:4] for r in rows[1:]] == [["z9", "Zoe", "zoe/hw.py", "1"],
                                         ["a1", "Adam", "adam/hw.py", "0"]]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.index("zoe/hw.py") < page.index("adam/hw.py")
    bad = tutor("grade", "--report", str(out), "--roster", "nothing.csv", "subs/zoe/hw.py",
                cwd=tmp_path)
    assert bad.returncode == 2 and "nothing.csv" in bad.stderr
