"""PrairieLearn's image recipe and question, and the grading rules both platforms carry: the files
`autograder --prairielearn DIR` writes, the entrypoint they name run in PrairieLearn's documented
/grade layout (laid out in a temporary folder, found through AUTOGRADER_ROOT), and the training
run's length and loss target read from grading.json by PrairieLearn's and Gradescope's runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from tutor.course.bundle import TORCH_INDEX, TORCH_VERSION
from tutor.course.prairielearn import MAX_TIMEOUT, PACK_HOME, timeout_for
from tutor.course.rules import (
    CONFIG_NAME,
    GRADESCOPE_BUDGET,
    PLATFORM_MARGIN,
    RulesError,
    default_train_steps,
    make_rules,
    read_rules,
    rules_json,
)
from tutor.course.scoring import TRAIN_STEPS
from tutor.pack.model import find_pack, load_pack
from tutor.training.plan import training_code, training_step

ROOT = Path(__file__).resolve().parents[1]
PACK = load_pack(find_pack("makemore"))
TRAIN = training_step(PACK)
STEPS = 30
# externalGradingOptions as PrairieLearn's external grading docs list them
PL_OPTIONS = {"enabled", "image", "entrypoint", "serverFilesCourse", "timeout",
              "enableNetworking", "environment"}


def tutor(*args: str, env: dict | None = None, cwd: Path | None = None
          ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", *args], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
                          cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A stand-in wheel: the recipe copies it; nothing here installs it."""
    path = tmp_path_factory.mktemp("wheel") / "backprop_tutor-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tutor/__init__.py", "")
    return path


def recipe(out: Path, wheel: Path, *options: str, pack: str = "makemore") -> dict:
    done = tutor("--pack", pack, "autograder", "--prairielearn", str(out), "--wheel", str(wheel),
                 *options)
    assert done.returncode == 0, done.stderr
    return json.loads((out / "questions" / "backprop" / "info.json").read_text())


def submission(training: bool = True) -> str:
    """One step solved and, when asked, the training cell with the reference's backward pass."""
    first = PACK.steps[0]
    text = f"# %% {first.id}\n{first.solution}\n"
    return text + (f"# %% {TRAIN.id}\n{training_code(PACK)}" if training else "")


# --- the rules ----------------------------------------------------------------------------------

def test_default_training_is_short_and_per_pack():
    assert default_train_steps(PACK) == TRAIN_STEPS
    tiny = load_pack(ROOT / "tests" / "packs" / "tiny")
    assert default_train_steps(tiny) == 400  # its whole run is shorter than TRAIN_STEPS
    assert make_rules(tiny).train_steps == 400 and make_rules(tiny, 50).train_steps == 50


@pytest.mark.parametrize("content, why", [
    ('{"train_steps": 10, "train_los": 2.0}', "unknown keys train_los"),
    ('{"train_steps": "ten"}', "whole number"),
    ('{"train_steps": 0}', "at least 1 step"),
    ('{"train_loss": -1}', "positive number"),
    ('{"strict_rule": "yes"}', "true or false"),
    ("[1, 2]", "one JSON object"),
    ("{", "not JSON"),
])
def test_rules_that_cannot_be_followed_say_why(tmp_path, content, why):
    path = tmp_path / CONFIG_NAME
    path.write_text(content)
    with pytest.raises(RulesError, match=why):
        read_rules(path, PACK)


def test_rules_round_trip(tmp_path):
    rules = make_rules(PACK, 70, 2.25, True)
    path = tmp_path / CONFIG_NAME
    path.write_text(rules_json(rules, PACK))
    assert read_rules(path, PACK) == rules
    assert json.loads(path.read_text())["pack"] == "makemore"


def test_a_bad_loss_target_is_a_usage_error(tmp_path, wheel):
    for value in ("-1", "0", "nan", "inf"):
        done = tutor("autograder", "--out", str(tmp_path / "a.zip"), "--wheel", str(wheel),
                     "--train-loss", value)
        assert done.returncode == 2 and "--train-loss" in done.stderr, value
        assert not (tmp_path / "a.zip").exists()


# --- the recipe ---------------------------------------------------------------------------------

def test_the_recipe_and_the_question(tmp_path, wheel):
    out = tmp_path / "pl"
    info = recipe(out, wheel, "--train-steps", "3000", "--train-loss", "2.4",
                  "--image", "course/backprop-grader:1")
    # The question's info.json, as PrairieLearn's docs describe an externally graded question.
    assert uuid.UUID(info["uuid"]) and info["title"] and info["topic"]
    assert info["type"] == "v3" and info["gradingMethod"] == "External"
    options = info["externalGradingOptions"]
    assert set(options) <= PL_OPTIONS, set(options) - PL_OPTIONS
    assert options["enabled"] is True and options["image"] == "course/backprop-grader:1"
    assert isinstance(options["timeout"], int) and 0 < options["timeout"] <= MAX_TIMEOUT
    assert options["timeout"] == timeout_for(3000) > timeout_for(TRAIN_STEPS)
    command = options["entrypoint"]
    assert command[0].startswith("/") and command[1:] == [
        "--pack", "makemore", "autograder", "--run", "prairielearn"]
    question = out / "questions" / "backprop"
    html = (question / "question.html").read_text()
    assert "<pl-file-upload" in html and "<pl-external-grader-results>" in html
    assert json.loads((question / "tests" / CONFIG_NAME).read_text()) == {
        "pack": "makemore", "train_steps": 3000, "train_loss": 2.4, "strict_rule": False,
        # the question's timeout, less the margin that leaves time to write the results
        "time_budget": timeout_for(3000) - PLATFORM_MARGIN, "refuse_numeric": False}
    # The image: Python, the CPU build of torch pinned, the wheel copied in and installed.
    docker = (out / "image" / "Dockerfile").read_text()
    lines = [line for line in docker.splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("FROM python:3.")
    assert f"--index-url {TORCH_INDEX}" in docker and f'"torch=={TORCH_VERSION}"' in docker
    assert f"COPY {wheel.name} " in docker and f"install --quiet /opt/backprop-tutor/{wheel.name}"\
        in docker
    assert "@" not in docker.replace("course/backprop-grader:1", "")  # every blank filled
    assert (out / "image" / wheel.name).read_bytes() == wheel.read_bytes()
    # Written again, the question keeps its uuid: PrairieLearn knows it by that.
    again = recipe(out, wheel)
    assert again["uuid"] == info["uuid"]
    assert again["externalGradingOptions"]["timeout"] == timeout_for(TRAIN_STEPS)


def test_a_folder_pack_goes_into_the_image(tmp_path, wheel):
    out = tmp_path / "pl"
    info = recipe(out, wheel, pack=str(ROOT / "tests" / "packs" / "tiny"))
    assert info["externalGradingOptions"]["entrypoint"][1:3] == ["--pack", PACK_HOME]
    assert f"COPY pack {PACK_HOME}" in (out / "image" / "Dockerfile").read_text()
    assert (out / "image" / "pack" / "pack.toml").is_file()


def test_timeouts_stay_within_prairielearns_limit():
    assert timeout_for(1) == timeout_for(TRAIN_STEPS) <= MAX_TIMEOUT
    assert timeout_for(10**7) == MAX_TIMEOUT


# --- the entrypoint, in PrairieLearn's /grade layout ---------------------------------------------

def lay_out_grade(root: Path, question: Path, files: dict[str, str]) -> None:
    """/grade as PrairieLearn's external grading docs draw it: data/data.json, the student's
    files in student/, the question's tests/ folder; results/ is left for the grader to make."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "data.json").write_text(json.dumps(
        {"params": {}, "correct_answers": {}, "submitted_answers": {
            "_files": [{"name": n, "contents": ""} for n in files]}}))
    (root / "student").mkdir()
    for name, text in files.items():
        (root / "student" / name).write_text(text)
    shutil.copytree(question / "tests", root / "tests")


def run_entrypoint(info: dict, root: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """The question's entrypoint, its first word (the tutor's command in the image) standing
    for this tutor, with AUTOGRADER_ROOT standing for /grade."""
    command = info["externalGradingOptions"]["entrypoint"]
    assert command[0].endswith("/backprop-tutor")
    done = subprocess.run([sys.executable, "-m", "tutor", *command[1:]], capture_output=True,
                          text=True, timeout=600, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "AUTOGRADER_ROOT": str(root)})
    results = root / "results" / "results.json"
    assert results.is_file(), done.stderr
    assert [p.name for p in (root / "results").iterdir()] == ["results.json"]
    return done, valid_results(results.read_bytes())


def valid_results(data: bytes) -> dict:
    """results.json as PrairieLearn's docs specify it."""
    assert len(data) < 1_000_000
    d = json.loads(data)
    assert isinstance(d.get("gradable", True), bool)
    if d.get("gradable", True):
        assert isinstance(d["score"], float | int) and 0 <= d["score"] <= 1
        for t in d["tests"]:
            assert isinstance(t["name"], str) and isinstance(t["message"], str)
            assert 0 <= t["points"] <= t["max_points"]
    return d


def training_test(d: dict) -> dict:
    return next(t for t in d["tests"] if t["name"].startswith(TRAIN.id))


def test_the_entrypoint_grades_by_the_questions_rules(tmp_path, wheel):
    out = tmp_path / "pl"
    info = recipe(out, wheel, "--train-steps", str(STEPS), "--train-loss", "0.5")
    question = out / "questions" / "backprop"
    root = tmp_path / "grade"
    lay_out_grade(root, question, {"backward.py": submission()})
    done, d = run_entrypoint(info, root)
    assert done.returncode == 0, done.stderr
    assert d["gradable"] is True
    total = len(PACK.steps)
    assert d["score"] == pytest.approx(1 / total, abs=1e-6)  # the first step; training short
    train = training_test(d)
    assert train["points"] == 0
    assert f"after {STEPS} steps" in train["message"] and "asks for 0.5 or lower" in \
        train["message"]

    # The same question with no target, edited in its tests/ folder: the same run passes.
    rules = json.loads((question / "tests" / CONFIG_NAME).read_text())
    (question / "tests" / CONFIG_NAME).write_text(json.dumps({**rules, "train_loss": None}))
    shutil.rmtree(root)
    lay_out_grade(root, question, {"backward.py": submission()})
    done, d = run_entrypoint(info, root)
    assert done.returncode == 0, done.stderr
    assert d["score"] == pytest.approx(2 / total, abs=1e-6)
    assert training_test(d)["points"] == 1 and f"trained {STEPS} steps" in training_test(d)[
        "message"]


def test_rules_the_grader_cannot_follow_cost_no_attempt(tmp_path, wheel):
    out = tmp_path / "pl"
    info = recipe(out, wheel)
    question = out / "questions" / "backprop"
    (question / "tests" / CONFIG_NAME).write_text('{"train_stpes": 10}')
    root = tmp_path / "grade"
    lay_out_grade(root, question, {"backward.py": submission(training=False)})
    done, d = run_entrypoint(info, root)
    assert done.returncode == 1
    assert d["gradable"] is False and "not your code" in json.dumps(d["format_errors"])


# --- the Gradescope bundle carries the same rules -----------------------------------------------

def test_the_gradescope_bundle_grades_by_its_rules(tmp_path, wheel):
    bundle = tmp_path / "autograder.zip"
    done = tutor("--pack", "makemore", "autograder", "--out", str(bundle), "--wheel", str(wheel),
                 "--train-steps", str(STEPS), "--train-loss", "0.5", "--strict-rule")
    assert done.returncode == 0, done.stderr
    root = tmp_path / "autograder"
    with zipfile.ZipFile(bundle) as zf:
        assert json.loads(zf.read(CONFIG_NAME)) == {
            "pack": "makemore", "train_steps": STEPS, "train_loss": 0.5, "strict_rule": True,
            "time_budget": GRADESCOPE_BUDGET, "refuse_numeric": False}
        run = zf.read("run_autograder").decode()
        assert "--train-steps" not in run and "--strict-rule" not in run  # grading.json says
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    (root / "submission" / "answers.py").write_text(submission())
    ran = subprocess.run(["bash", str(root / "source" / "run_autograder")], capture_output=True,
                         text=True, timeout=600, cwd=root,
                         env={**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHONPATH": str(ROOT),
                              "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert ran.returncode == 0, ran.stderr
    d = json.loads((root / "results" / "results.json").read_text())
    assert d["score"] == 1
    train = next(t for t in d["tests"] if t["name"].startswith(TRAIN.id))
    assert train["status"] == "failed" and "asks for 0.5 or lower" in train["output"]
