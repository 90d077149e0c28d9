"""Grading whole submissions for a course: reading them (percent files, the tutor's workbook, the
lecture's notebook filled in), scoring them by `check`'s rules, the platforms' results files, the
Gradescope bundle's `run_autograder` in a temporary root, and the instructor's report."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import lecture_notebooks as L
import pytest

from tutor.course.lecture import code_cells, read_lecture, rename
from tutor.course.platforms import MAX_RESULTS_BYTES, gradescope, prairielearn, results
from tutor.course.scoring import Outcome
from tutor.course.submission import Unreadable, has_code, read_submission
from tutor.pack.model import PackError, find_pack, load_pack

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack(find_pack("makemore"))
EX1 = [s for s in PACK.steps if s.exercise == 1]
TRAIN_STEPS = 200  # enough to see the loss fall; the full lesson is 200 000


# --- submissions, written as learners write them ------------------------------------------------

def percent(codes: dict[str, str], training: str | None = None) -> str:
    cells = [f"# %% {sid}\n{code.strip()}\n" for sid, code in codes.items()]
    if training is not None:
        cells.append(f"# %% train/loop\n{training}")
    return "# my answers\n\n" + "\n".join(cells)


def solutions() -> dict[str, str]:
    return {s.id: s.solution for s in PACK.steps if not s.kind.trained}


def reference_training() -> str:
    from tutor.training.plan import training_code

    return training_code(PACK)


WRONG = {
    "atomic/probs": "dprobs = dlogprobs * probs\n",
    "fused/cross_entropy": "dlogits = F.softmax(logits, 1)\n",
}

# --- the schemas the platforms document -------------------------------------------------------

GS_TOP = {"score", "execution_time", "output", "output_format", "test_output_format",
          "test_name_format", "visibility", "stdout_visibility", "extra_data", "tests",
          "leaderboard"}
GS_TEST = {"score", "max_score", "status", "name", "name_format", "number", "output",
           "output_format", "tags", "visibility", "extra_data"}
VISIBILITY = {"hidden", "after_due_date", "after_published", "visible"}
FORMATS = {"text", "html", "simple_format", "md", "ansi"}
PL_TOP = {"gradable", "score", "message", "output", "format_errors", "images", "tests"}
PL_TEST = {"name", "description", "points", "max_points", "message", "output", "images"}


def number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_gradescope(data: bytes) -> dict:
    assert len(data) < MAX_RESULTS_BYTES
    d = json.loads(data)
    assert set(d) <= GS_TOP, set(d) - GS_TOP
    assert number(d["score"]) and number(d["execution_time"])
    assert isinstance(d["output"], str)
    assert d.get("output_format", "text") in FORMATS
    assert d.get("visibility", "visible") in VISIBILITY
    for t in d["tests"]:
        assert set(t) <= GS_TEST, set(t) - GS_TEST
        assert number(t["score"]) and number(t["max_score"]) and 0 <= t["score"] <= t["max_score"]
        assert t["status"] in ("passed", "failed")
        assert isinstance(t["name"], str) and isinstance(t["output"], str)
        assert t["output_format"] in FORMATS and t["visibility"] in VISIBILITY
        major, minor = t["number"].split(".")
        assert major.isdigit() and minor.isdigit()
    return d


def check_prairielearn(data: bytes) -> dict:
    assert len(data) < MAX_RESULTS_BYTES
    d = json.loads(data)
    assert set(d) <= PL_TOP, set(d) - PL_TOP
    assert isinstance(d["gradable"], bool)
    assert number(d["score"]) and 0 <= d["score"] <= 1
    if not d["gradable"]:
        assert d["format_errors"] and all(isinstance(v, str) for v in d["format_errors"].values())
    for t in d["tests"]:
        assert set(t) <= PL_TEST, set(t) - PL_TEST
        assert isinstance(t["name"], str)
        assert number(t["points"]) and number(t["max_points"])
        assert 0 <= t["points"] <= t["max_points"]
    return d


# --- points in the pack ---------------------------------------------------------------------

def _tiny_with(tmp_path: Path, line: str) -> Path:
    pack = tmp_path / "tiny"
    shutil.copytree(ROOT / "tests" / "packs" / "tiny", pack)
    first = sorted(pack.glob("0*.toml"))[0]
    text = first.read_text()
    at = text.index("[[steps]]") + len("[[steps]]\n")
    first.write_text(text[:at] + line + "\n" + text[at:])
    return pack


def test_points_default_to_one_and_are_read(tmp_path):
    assert {s.points for s in PACK.steps} == {1}
    pack = load_pack(_tiny_with(tmp_path, "points = 2.5"))
    assert pack.steps[0].points == 2.5


@pytest.mark.parametrize("value", ["0", "-1", '"two"', "true", "nan"])
def test_points_must_be_a_positive_number(tmp_path, value):
    with pytest.raises(PackError, match="'points' must be a positive number"):
        load_pack(_tiny_with(tmp_path, f"points = {value}"))


# --- reading the lecture's notebook -----------------------------------------------------------

def _read(document: dict):
    return read_lecture(PACK, code_cells(document))


def test_one_cell_for_exercise_one_becomes_every_step():
    answers = _read(L.notebook([L.ex1_one_cell()]))
    assert set(answers.code) == {s.id for s in PACK.steps if not s.kind.trained}
    # The first branch of dcounts starts where the pack starts it; `+=` completes it.
    assert "dcounts = dprobs * counts_sum_inv" in answers.code["atomic/counts_sum_inv"]
    assert answers.code["atomic/counts"].strip() == "dcounts += dcounts_sum.expand_as(counts)"
    assert "for k in range" in answers.code["atomic/C"]
    # The notebook's forward pass and cmp calls are not anybody's answer.
    assert not any("cmp(" in c or "retain_grad" in c for c in answers.code.values())
    assert "F.softmax" in answers.code["fused/cross_entropy"]
    assert "loss_fast" not in answers.code["fused/cross_entropy"]
    assert answers.code["fused/batchnorm"].startswith("dhprebn = bngain")


def test_training_loop_runs_on_the_tutors_forward_pass():
    answers = _read(L.notebook([L.ex1_one_cell()]))
    code = answers.training
    assert code is not None
    assert "bnmeani = 1/n*hprebn.sum(0, keepdim=True)" in code  # the tutor's line, not the loop's
    assert "loss = F.cross_entropy(logits, Yb)" in code
    assert "dC.index_add_(" in code and "grads = [" not in code
    assert "Xtr" not in code and "p.data" not in code and "max_steps" not in code


def test_one_cell_per_line_reads_the_same():
    one = _read(L.notebook([L.ex1_one_cell()])).code
    per = _read(L.notebook(L.ex1_cell_per_line())).code
    assert {k: v.strip() for k, v in per.items()} == {k: v.strip() for k, v in one.items()}


def test_renamed_gradients_are_read_through_their_cmp_calls():
    lines = [(t, code.replace("dlogprobs", "dL_dlp")) for t, code in L.EX1_LINES]
    cell = L.ex1_one_cell(lines).replace("cmp('logprobs', dlogprobs, logprobs)",
                                         "cmp('logprobs', dL_dlp, logprobs)")
    ex2 = L.EX2_BACKWARD.replace("dlogits", "dlogits_fast")
    answers = _read(L.notebook([cell], ex2=ex2))
    assert answers.renamed == {"dL_dlp": "dlogprobs", "dlogits_fast": "dlogits"}
    assert answers.code["atomic/logprobs"].startswith("dlogprobs = torch.zeros_like(logprobs)")
    assert "dlogprobs" in answers.code["atomic/probs"]
    assert answers.code["fused/cross_entropy"].startswith("dlogits = F.softmax")


def test_a_typo_with_no_cmp_call_is_taken_for_the_gradient_it_misses():
    lines = [(t, code.replace("dlogit_maxes", "dlogits_maxes")) for t, code in L.EX1_LINES]
    answers = _read(L.notebook([L.ex1_one_cell(lines, cmps=False)]))
    assert answers.renamed == {"dlogits_maxes": "dlogit_maxes"}
    assert "dlogit_maxes = -dnorm_logits" in answers.code["atomic/logit_maxes"]
    assert "* dlogit_maxes" in answers.code["atomic/logits"]


def test_the_blank_notebook_answers_nothing():
    answers = _read(L.blank())
    assert answers.code == {} and answers.training is None


def test_a_gradient_written_in_one_go_goes_where_it_completes():
    lines = dict(L.EX1_LINES)
    lines["counts_sum_inv"] = "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)"
    lines["counts"] = "dcounts = dprobs * counts_sum_inv + dcounts_sum"
    answers = _read(L.notebook([L.ex1_one_cell(list(lines.items()))]))
    assert "dcounts" not in answers.code["atomic/counts_sum_inv"].replace("dcounts_sum_inv", "")
    assert answers.code["atomic/counts"].startswith("dcounts = dprobs")


def test_both_branches_at_once_go_to_the_step_that_completes_them():
    lines = dict(L.EX1_LINES)
    lines["logit_maxes"] = "dlogit_maxes = -dnorm_logits.sum(1, keepdim=True)"
    lines["logits"] = ("dlogits = dnorm_logits.clone() + F.one_hot(logits.argmax(1), "
                       "num_classes=logits.shape[1]) * dlogit_maxes")
    answers = _read(L.notebook([L.ex1_one_cell(list(lines.items()))]))
    assert answers.code["atomic/logit_maxes"].strip() == lines["logit_maxes"]
    assert answers.code["atomic/logits"].strip() == lines["logits"]


def test_helpers_travel_with_the_steps_that_read_them():
    lines = dict(L.EX1_LINES)
    lines["h"] = "W2T = W2.T\ndh = dlogits @ W2T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)"
    answers = _read(L.notebook([L.ex1_one_cell(list(lines.items()))]))
    assert answers.code["atomic/h"].startswith("W2T = W2.T\ndh = dlogits @ W2T")


def test_rename_keeps_attributes_keywords_and_comments():
    code = "dx = f(dx, dx=1).dx  # dx stays here\n"
    assert rename(code, {"dx": "dy"}) == "dy = f(dy, dx=1).dx  # dx stays here\n"


def test_placeholders_are_not_code():
    assert not has_code("dlogits = None # TODO\n")
    assert not has_code("dx = ...\ndy = ...\n")
    assert not has_code("dC, dW1 = None, None\n")
    assert has_code("dx = (\n")  # wrong, and the check will say so
    assert has_code("dx = x * 2\n")


# --- reading any submission -------------------------------------------------------------------

def test_unreadable_submissions_say_why(tmp_path):
    cases = {
        "a.txt": "hello",
        "b.ipynb": "{not json",
        "c.ipynb": json.dumps({"cells": [{"cell_type": "code", "source": "print(1)"}]}),
        "d.py": "print('no cells here')\n",
        "e.ipynb": json.dumps([1, 2]),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(Unreadable) as info:
            read_submission(tmp_path / name, PACK)
        assert name in str(info.value) and "\n" not in str(info.value)
    (tmp_path / "f.py").write_bytes(b"# %% atomic/probs\n\xff\xfe\n")
    with pytest.raises(Unreadable):
        read_submission(tmp_path / "f.py", PACK)


def test_the_tutors_workbook_is_read(tmp_path):
    from tutor.config import Settings
    from tutor.session.workbook import workbook

    document = workbook(PACK, Settings(device="cpu"))
    for cell in document["cells"]:
        if cell["cell_type"] == "code" and cell["source"].startswith("%%check atomic/probs"):
            cell["source"] = "%%check atomic/probs\ndprobs = dlogprobs / probs\n"
    path = tmp_path / "wb.ipynb"
    path.write_text(json.dumps(document))
    sub = read_submission(path, PACK)
    assert sub.form == "workbook"
    assert sub.code == {"atomic/probs": "dprobs = dlogprobs / probs\n"}  # templates are no code


# --- grading, in one evaluator ------------------------------------------------------------------

@pytest.fixture(scope="module")
def evaluator():
    from tutor.config import Settings
    from tutor.evaluator.client import Evaluator

    with Evaluator(Settings(device="cpu")) as ev:
        yield ev


def _grade(evaluator, path: Path, **options):
    from tutor.course.scoring import GradingRules
    from tutor.course.session import grade_file

    return grade_file(path, PACK, evaluator, GradingRules(train_steps=TRAIN_STEPS, **options))


def _statuses(grade) -> dict[str, str]:
    return {s.id: s.status.value for s in grade.steps}


def test_a_filled_in_lecture_notebook_passes_every_step(evaluator, tmp_path):
    grade = _grade(evaluator, L.write(tmp_path / "nb.ipynb", L.notebook([L.ex1_one_cell()])))
    assert set(_statuses(grade).values()) == {"passed"}, [s.message for s in grade.steps]
    assert grade.score == grade.max_score == len(PACK.steps)


def test_renamed_and_split_notebooks_pass_exercise_one(evaluator, tmp_path):
    lines = [(t, code.replace("dlogprobs", "dL_dlp").replace("dlogit_maxes", "dlogits_maxes"))
             for t, code in L.EX1_LINES]
    cells = [c.replace("cmp('logprobs', dlogprobs,", "cmp('logprobs', dL_dlp,")
             .replace("cmp('logit_maxes', dlogit_maxes,", "#")
             for c in L.ex1_cell_per_line(lines)]
    grade = _grade(evaluator, L.write(tmp_path / "nb.ipynb", L.notebook(cells, backward="")))
    statuses = _statuses(grade)
    assert all(statuses[s.id] == "passed" for s in EX1), statuses
    assert statuses["train/loop"] == "missing"


def test_wrong_steps_fail_and_only_they(evaluator, tmp_path):
    lines = dict(L.EX1_LINES)
    lines["probs"] = "dprobs = dlogprobs * probs"  # the derivative of log is not the value
    lines["hpreact"] = "dhpreact = (1 - h) * dh"
    ex2 = L.EX2_BACKWARD.replace("dlogits /= n", "")
    path = L.write(tmp_path / "nb.ipynb",
                   L.notebook([L.ex1_one_cell(list(lines.items()))], ex2=ex2, backward=""))
    grade = _grade(evaluator, path)
    failed = {sid for sid, st in _statuses(grade).items() if st == "failed"}
    assert failed == {"atomic/probs", "atomic/hpreact", "fused/cross_entropy"}
    wrong = next(s for s in grade.steps if s.id == "atomic/probs")
    assert wrong.score == 0 and wrong.message.startswith("dprobs")


def test_the_blank_notebook_is_graded_zero(evaluator, tmp_path):
    grade = _grade(evaluator, L.write(tmp_path / "blank.ipynb", L.blank()))
    assert set(_statuses(grade).values()) == {"missing"}
    assert grade.score == 0 and grade.max_score == len(PACK.steps)


def test_a_skipped_rule_passes_and_earns_nothing_when_the_rule_is_required(evaluator, tmp_path):
    codes = {s.id: s.solution for s in EX1[:7]}
    codes["atomic/logit_maxes"] = ("dlogits = dnorm_logits.clone()\n"
                                   "dlogit_maxes = torch.zeros_like(logit_maxes)\n")
    path = tmp_path / "a.py"
    path.write_text(percent(codes))
    for strict, points in ((False, 1), (True, 0)):
        grade = _grade(evaluator, path, strict_rule=strict)
        step = next(s for s in grade.steps if s.id == "atomic/logit_maxes")
        assert step.status is Outcome.PASSED and step.rule is not None
        assert step.rule.value == "skipped" and step.score == points
        assert "rule" in step.message


def test_the_same_submission_gets_the_same_score(evaluator, tmp_path):
    path = tmp_path / "a.py"
    path.write_text(percent({**solutions(), **WRONG}))
    first, second = _grade(evaluator, path), _grade(evaluator, path)
    assert [s.to_dict() for s in first.steps] == [s.to_dict() for s in second.steps]


def test_results_files_stay_small_whatever_was_printed(evaluator, tmp_path):
    from tutor.course.scoring import StepGrade

    path = tmp_path / "a.py"
    path.write_text(percent({"atomic/logprobs": PACK.step("atomic/logprobs").solution}))
    grade = _grade(evaluator, path)
    # As if every step had printed as much as it may keep, and the notes were long as well.
    grade.steps = [StepGrade(s.id, s.title, s.exercise, s.status, s.rule, s.score,
                             s.max_score, "x" * 300, "y" * 200_000) for s in grade.steps]
    for form, check in (("gradescope", check_gradescope), ("prairielearn", check_prairielearn)):
        data = results(grade, form)
        d = check(data)
        assert len(d["tests"]) == len(PACK.steps)
    assert gradescope(grade)["score"] == 1
    assert prairielearn(grade)["score"] == pytest.approx(1 / len(PACK.steps), abs=1e-6)


# --- the command line ---------------------------------------------------------------------------

def tutor(*args: str, env: dict | None = None, cwd: Path | None = None
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", *args], capture_output=True,
                          text=True, env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


def test_grade_cli_json_and_exit_codes(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(percent({**{s.id: s.solution for s in EX1[:3]},
                             "atomic/counts_sum": WRONG["atomic/probs"].replace("dprobs",
                                                                                "dcounts_sum")}))
    done = tutor("grade", str(path), "--json", "--train-steps", "50")
    assert done.returncode == 0, done.stderr
    d = json.loads(done.stdout)
    assert set(d) == {"pack", "score", "max_score", "steps"} and d["pack"] == "makemore"
    assert d["score"] == 3 and d["max_score"] == len(PACK.steps)
    assert set(d["steps"][0]) == {"id", "status", "rule", "score", "max_score", "message"}
    assert [s["status"] for s in d["steps"][:5]] == ["passed"] * 3 + ["failed", "missing"]
    table = tutor("grade", str(path), "--train-steps", "50")
    assert "score 3 / 23" in table.stdout and "✗ atomic/counts_sum" in table.stdout

    junk = tmp_path / "junk.ipynb"
    junk.write_text("{")
    out = tmp_path / "res.json"
    bad = tutor("grade", str(junk), "--format", "prairielearn", "--out", str(out))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "junk.ipynb" in bad.stderr
    d = check_prairielearn(out.read_bytes())
    assert d["gradable"] is False and "junk.ipynb" in d["format_errors"]["submission"]
    bad = tutor("grade", str(junk), "--format", "gradescope", "--out", str(out))
    assert bad.returncode == 2
    d = check_gradescope(out.read_bytes())
    assert d["score"] == 0 and "junk.ipynb" in d["output"]
    for argv in (["--format", "gradescope"], ["--out", str(out)], ["--train-steps", "0"]):
        usage = tutor("grade", str(path), *argv)
        assert usage.returncode == 2 and usage.stderr.count("\n") == 1


def test_class_report(tmp_path):
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "alice.py").write_text(percent(solutions()))
    (subs / "bob.py").write_text(percent({**solutions(), **WRONG}))
    (subs / "carol.ipynb").write_text("not a notebook")
    out = tmp_path / "report"
    done = tutor("grade", "--report", str(out), "--jobs", "2", "--train-steps", "20",
                 *map(str, sorted(subs.iterdir())))
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader((out / "grades.csv").open()))
    assert rows[0][:3] == ["file", "score", "max_score"] and len(rows[0]) == 3 + len(PACK.steps)
    scores = {r[0]: float(r[1]) for r in rows[1:]}
    # No training cell: 22 checked steps; bob loses the two he got wrong.
    assert scores == {"alice.py": 22, "bob.py": 20, "carol.ipynb": 0}
    page = (out / "report.html").read_text()
    assert "<svg" in page and "<script" not in page and "src=" not in page
    hardest = page.index("fused/cross_entropy")
    assert hardest < page.index("atomic/logprobs")  # the hardest steps come first
    assert "Not graded" in page and "carol.ipynb" in page


# --- the Gradescope bundle, run in a temporary root -------------------------------------------

@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The bundle, unpacked as Gradescope lays it out: the zip's files in source/, and
    run_autograder beside it. The wheel is not installed here (setup.sh is not run): the tutor
    under test is the one on PYTHONPATH."""
    tmp = tmp_path_factory.mktemp("bundle")
    wheel = tmp / "backprop_tutor-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("tutor/__init__.py", "")
    zpath = tmp / "autograder.zip"
    done = tutor("--pack", "makemore", "autograder", "--out", str(zpath), "--wheel", str(wheel),
                 "--train-steps", str(TRAIN_STEPS))
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(zpath) as zf:
        names = zf.namelist()
        assert names[:2] == ["setup.sh", "run_autograder"] and wheel.name in names
        for name in ("setup.sh", "run_autograder"):
            assert (zf.getinfo(name).external_attr >> 16) & 0o111
        setup = zf.read("setup.sh").decode()
        assert "torch==" in setup and wheel.name in setup
        zf.extractall(tmp / "source")
    return tmp / "source"


def run_autograder(bundle: Path, root: Path, files: dict[str, str | bytes],
                   platform: str = "gradescope", env: dict | None = None) -> dict:
    student = root / ("submission" if platform == "gradescope" else "student")
    student.mkdir(parents=True)
    shutil.copytree(bundle, root / "source")
    (root / "results").mkdir()
    for name, text in files.items():
        (student / name).write_bytes(text.encode() if isinstance(text, str) else text)
    environment = {**os.environ, "AUTOGRADER_ROOT": str(root),
                   "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                   "PYTHONPATH": str(ROOT), **(env or {})}
    if platform == "gradescope":
        command = ["bash", str(root / "source" / "run_autograder")]
    else:
        command = [sys.executable, "-m", "tutor", "autograder", "--run", "prairielearn",
                   "--train-steps", str(TRAIN_STEPS)]
    done = subprocess.run(command, capture_output=True, text=True, env=environment,
                          timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr
    out = root / "results" / "results.json"
    assert [p.name for p in (root / "results").iterdir()] == ["results.json"]
    check = check_gradescope if platform == "gradescope" else check_prairielearn
    return check(out.read_bytes())


def test_autograder_grades_a_correct_submission(bundle, tmp_path):
    d = run_autograder(bundle, tmp_path / "ag",
                       {"answers.py": percent(solutions(), reference_training())})
    assert d["score"] == len(PACK.steps)
    assert all(t["status"] == "passed" for t in d["tests"])
    assert any("train/loop" in t["name"] for t in d["tests"])
    # The feedback is the tutor's, never the answer.
    text = " ".join(t["output"] for t in d["tests"])
    assert PACK.step("fused/batchnorm").solution.strip() not in text


def test_autograder_grades_a_partly_wrong_submission(bundle, tmp_path):
    d = run_autograder(bundle, tmp_path / "ag", {"answers.py": percent({**solutions(),
                                                                        **WRONG})})
    failed = {t["name"].split(":")[0] for t in d["tests"] if t["status"] == "failed"}
    assert failed == {*WRONG, "train/loop"}  # no training cell: missing, and so not passed
    assert d["score"] == len(PACK.steps) - 3


def test_autograder_grades_a_partial_submission(bundle, tmp_path):
    codes = {s.id: s.solution for s in EX1[:4]}
    d = run_autograder(bundle, tmp_path / "ag", {"partial.py": percent(codes)})
    assert d["score"] == 4
    missing = [t for t in d["tests"] if "missing" in t["output"]]
    assert len(missing) == len(PACK.steps) - 4


@pytest.mark.parametrize("files", [
    {"answers.ipynb": b"\x00\x01 not a notebook"},
    {},
    {"a.py": "# %% atomic/probs\n", "b.py": "# %% atomic/probs\n"},
])
def test_autograder_on_an_unreadable_submission(bundle, tmp_path, files):
    d = run_autograder(bundle, tmp_path / "ag", files)
    assert d["score"] == 0 and "could not be graded" in d["output"]
    pl = run_autograder(bundle, tmp_path / "pl", files, platform="prairielearn")
    assert pl["gradable"] is False and pl["score"] == 0


def test_autograder_for_prairielearn(bundle, tmp_path):
    codes = {s.id: s.solution for s in EX1[:2]}
    d = run_autograder(bundle, tmp_path / "pl", {"mine.py": percent(codes)},
                       platform="prairielearn")
    assert d["gradable"] is True and d["score"] == pytest.approx(2 / len(PACK.steps), abs=1e-6)


HOSTILE = """\
# %% atomic/logprobs
dlogprobs = torch.zeros_like(logprobs)
dlogprobs[range(n), Yb] = -1.0 / n
for i in range(200000):
    print("x" * 80)
# %% atomic/probs
open({results!r}, "w").write('{{"score": 1000}}')
dprobs = dlogprobs / probs
# %% atomic/counts_sum_inv
secret = open({secret!r}).read()
dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)
# %% atomic/counts_sum
torch.save(counts, {leftover!r})
dcounts_sum = -counts_sum**-2 * dcounts_sum_inv
# %% atomic/counts
with open({run!r}, "a") as fh:
    fh.write("echo pwned")
# %% atomic/norm_logits
print(torch.load({secret!r}))
dnorm_logits = counts * dcounts
"""


@pytest.mark.parametrize("isolation", ["fork", "spawn"])
def test_a_hostile_submission_forges_nothing(bundle, tmp_path, isolation):
    root = tmp_path / "ag"
    secret_text = "the instructor's secret 31337"
    names = {"results": str(root / "results" / "results.json"),
             "secret": str(root / "source" / "secret.txt"),
             "leftover": str(root / "results" / "extra.pt"),
             "run": str(root / "source" / "run_autograder")}
    (bundle / "secret.txt").write_text(secret_text)
    try:
        d = run_autograder(bundle, root, {"evil.py": HOSTILE.format(**names)},
                           env={"BACKPROP_TUTOR_ISOLATION": isolation})
    finally:
        (bundle / "secret.txt").unlink()
    by_step = {t["name"].split(":")[0]: t for t in d["tests"]}
    assert by_step["atomic/logprobs"]["status"] == "passed"  # printing is allowed, just cut
    for sid in ("atomic/probs", "atomic/counts_sum_inv", "atomic/counts_sum", "atomic/counts",
                "atomic/norm_logits"):
        assert by_step[sid]["status"] == "failed", by_step[sid]["output"]
    assert d["score"] == 1
    assert secret_text not in json.dumps(d)
    assert "pwned" not in (root / "source" / "run_autograder").read_text()


def test_a_file_without_cells_is_refused_once(tmp_path):
    bare = tmp_path / "backward.py"
    bare.write_text("x = 1\n")
    done = tutor("--home", str(tmp_path / "home"), "grade", str(bare))
    said = done.stdout + done.stderr
    assert done.returncode == 2 and said.count("has no `# %% STEP_ID` cells") == 1, said


def test_a_class_s_files_are_told_apart_by_their_folders(tmp_path):
    from tutor.commands.grade import _shown

    paths = [tmp_path / who / "backward.py" for who in ("ana", "ben")]
    assert [_shown(p, paths) for p in paths] == ["ana/backward.py", "ben/backward.py"]
    assert _shown(tmp_path / "one.py", [tmp_path / "one.py"]) == "one.py"


def test_a_markdown_heading_opens_an_exercise_as_a_comment_would():
    from tutor.course.lecture import regions

    document = {"cells": [
        {"cell_type": "code", "source": "dlogits = F.softmax(logits, 1)\n"},
        {"cell_type": "markdown", "source": ["## Exercise 2 (the loss in one line)\n", "text"]},
        {"cell_type": "code", "source": "dlogits_fast = F.softmax(logits, 1)\n"},
        {"cell_type": "markdown", "source": "Some notes on exercise 3, later.\n"},
    ]}
    cells = code_cells(document)
    assert cells[1] == "# Exercise 2\n" and len(cells) == 3
    by = regions(cells)
    assert by[0] == [cells[0]] and by[2] == cells[1:]
