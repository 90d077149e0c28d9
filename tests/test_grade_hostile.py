"""Every file gets a result, and one file never touches another.

Submissions built to break the grader: a lone surrogate (in code, in a `%%check` line, in the
lecture's notebook), expressions nested thousands deep, terminal escape sequences in a cell's
header and in a file's name, a training loop that wastes its time. Each must be graded (or
refused with a reason) with a results file written, nothing raw reaching the terminal, and a
class report that goes on past them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lecture_notebooks as L
import pytest

ROOT = Path(__file__).resolve().parent.parent
DEEP = "1+(" * 3000 + "1" + ")" * 3000
NEGATED = "-(" * 3000 + "1" + ")" * 3000
UNARY = "-" * 100_000 + "1"
ESCAPES = ("\x1b[2J", "\x1b[H", "\x1b]0;", "\x07", "\x1b[31m", "\r")


def _notebook(cells: list[str]) -> dict:
    return {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [],
                       "execution_count": None, "source": c} for c in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 4}


def _lecture_with(cell: int, source: str) -> dict:
    doc = L.notebook([L.ex1_one_cell()])
    doc["cells"][cell]["source"] = [source]
    return doc


def hostile(folder: Path) -> dict[str, Path]:
    """name -> a file in `folder` that once broke the grader."""
    files: dict[str, str | dict] = {
        "surrogate-in-code.ipynb": _notebook(
            ["%load_ext tutor", "%%check atomic/logprobs\ndlogprobs = 1  # \ud800"]),
        "surrogate-in-check-line.ipynb": _notebook(
            ["%load_ext tutor", "%%check atomic/log\ud800probs\ndlogprobs = 1"]),
        "surrogate-in-lecture.ipynb": _lecture_with(3, "x = '\ud800'\n"),
        "deep.py": f"# %% atomic/logprobs\ndlogprobs = {DEEP}\n",
        "negated.py": f"# %% atomic/logprobs\ndlogprobs = {NEGATED}\n",
        "unary.py": f"# %% atomic/logprobs\ndlogprobs = {UNARY}\n",
        "deep-workbook.ipynb": _notebook(
            ["%load_ext tutor", f"%%check atomic/logprobs\ndlogprobs = {UNARY}"]),
        "escapes-in-header.py": "# %% atomic/logprobs\x1b[2J\x1b[H score 23/23\ndlogprobs = 1\n"
                                "# %% \x1b]0;owned\x07atomic/probs\ndprobs = 2\n",
        "escapes\x1b[31m-in-name.py": "# %% atomic/logprobs\ndlogprobs = 1\n",
    }
    out = {}
    for name, content in files.items():
        path = folder / name
        if isinstance(content, dict):
            # json.dumps writes a lone surrogate as the escape `\ud800`, as a notebook would
            path.write_text(json.dumps(content), encoding="utf-8")
        else:
            path.write_text(content, encoding="utf-8")
        out[name] = path
    if hasattr(os, "mkfifo"):
        # A pipe among the submissions: opening it to read would wait for a writer forever.
        os.mkfifo(folder / "pipe.py")
        out["pipe.py"] = folder / "pipe.py"
    return out


def tutor(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          errors="replace")


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    return hostile(tmp_path_factory.mktemp("hostile"))


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "surrogate-in-code.ipynb", "surrogate-in-check-line.ipynb", "surrogate-in-lecture.ipynb",
    "deep.py", "negated.py", "unary.py", "deep-workbook.ipynb", "escapes-in-header.py",
    "escapes\x1b[31m-in-name.py"], ids=lambda n: n.split("\x1b")[0])
def test_every_hostile_file_gets_a_results_file_and_a_clean_table(files, tmp_path, name):
    path = files[name]
    out = tmp_path / "results.json"
    written = tutor("grade", "--train-steps", "5", "--format", "gradescope", "--out", str(out),
                    str(path))
    assert written.returncode in (0, 2), written.stderr
    assert "Traceback" not in written.stderr
    results = json.loads(out.read_text(encoding="utf-8"))
    assert isinstance(results["score"], (int, float)) and results["tests"]
    table = tutor("grade", "--train-steps", "5", str(path))
    assert "Traceback" not in table.stderr, table.stderr
    assert not any(e in table.stdout + table.stderr for e in ESCAPES), repr(table.stdout)
    graded = tutor("grade", "--train-steps", "5", "--json", str(path))
    if graded.returncode == 0:
        assert json.loads(graded.stdout)["max_score"] == 23
    else:
        assert graded.returncode == 2 and "Traceback" not in graded.stderr


@pytest.mark.slow
def test_a_header_with_escapes_names_what_it_hides(files):
    table = tutor("grade", "--train-steps", "5", str(files["escapes-in-header.py"]))
    assert "score 0 / 23" in table.stdout and "score 23/23" not in table.stdout
    assert "characters a terminal does not show" in table.stdout


@pytest.mark.slow
def test_the_class_report_goes_on_past_every_hostile_file(files, tmp_path):
    good = L.write(tmp_path / "good.ipynb", L.notebook([L.ex1_one_cell()]))
    report = tmp_path / "report"
    done = tutor("grade", "--train-steps", "5", "--jobs", "2", "--report", str(report),
                 str(good), *(str(p) for p in files.values()), timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    assert (report / "report.html").is_file() and (report / "grades.csv").is_file()
    rows = (report / "grades.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == 1 + 1 + len(files)
    assert not any(e in "".join(rows) for e in ESCAPES)
    assert any(",22," in row or ",23," in row for row in rows)  # the good one still scores


@pytest.mark.slow
def test_the_platforms_entrypoint_writes_results_for_a_surrogate(files, tmp_path):
    for platform, student in (("gradescope", "submission"), ("prairielearn", "student")):
        root = tmp_path / platform
        (root / student).mkdir(parents=True)
        (root / student / "nb.ipynb").write_bytes(
            files["surrogate-in-lecture.ipynb"].read_bytes())
        env = {**os.environ, "AUTOGRADER_ROOT": str(root)}
        done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "autograder",
                               "--run", platform, "--train-steps", "5"], capture_output=True,
                              text=True, timeout=600, env=env, cwd=ROOT)
        assert done.returncode == 0, done.stderr
        results = json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))
        assert results["score"] > 0, results


@pytest.mark.slow
def test_a_time_budget_stops_a_long_training_run_and_the_other_steps_stand(tmp_path):
    # A right training loop asked for far more steps than the course allows time for: each step
    # is quick, the whole is not.
    nb = L.write(tmp_path / "slow.ipynb", L.notebook([L.ex1_one_cell()]))
    out = tmp_path / "results.json"
    done = tutor("grade", "--train-steps", "10000000", "--time-budget", "30", "--format",
                 "prairielearn", "--out", str(out), str(nb), timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text(encoding="utf-8"))
    tests = {t["name"].split(":")[0]: t for t in results["tests"]}
    assert tests["atomic/logprobs"]["points"] == 1
    training = tests["train/loop"]
    assert training["points"] == 0 and "time set for grading" in training["message"], training


def test_a_time_budget_must_be_positive():
    done = tutor("grade", "--time-budget", "0", "x.py")
    assert done.returncode == 2 and "--time-budget" in done.stderr


def _padded(kb: int) -> dict:
    """The lecture notebook with exercise 1 answered, and `kb` KB of cells of no use."""
    doc = L.notebook([L.ex1_one_cell()])
    filler = "".join(f"spare_{j} = {j} * 2 + 1\n" for j in range(20))
    count = kb * 1024 // (len(filler) + 120)
    cells = [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
              "source": filler.replace("spare_", f"spare{i}_")} for i in range(count)]
    doc["cells"] = doc["cells"][:3] + cells + doc["cells"][3:]
    return doc


def test_the_time_budget_holds_from_the_first_byte_read(tmp_path):
    path = L.write(tmp_path / "long.ipynb", _padded(600))
    out = tmp_path / "results.json"
    done = tutor("grade", "--train-steps", "5", "--time-budget", "1", "--format", "gradescope",
                 "--out", str(out), str(path))
    assert "Traceback" not in done.stderr, done.stderr
    results = json.loads(out.read_text(encoding="utf-8"))
    assert results["score"] == 0
    assert any("reading it took longer than the 1 s" in t.get("output", "")
               for t in results["tests"]), results["tests"][:2]
