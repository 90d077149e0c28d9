"""What students install holds no answer key, and everything else still works.

A course's grader keeps the reference solutions; the wheel students get (`autograder
--student-wheel`) and a pack's student copy (tutor/pack/student.py) have none, nor the last hint,
nor a catalogued mistake that would hand the answer over. The checks still compare with
autograd: right answers pass with the rule followed, wrong ones are refused, earlier steps the
learner has not solved are stood in for by autograd's gradients. What needs a reference says so.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.model import load_pack
from tutor.pack.student import student_copy
from tutor.values.results import Rule

ROOT = Path(__file__).resolve().parent.parent
LESSONS = ("makemore", "gpt", "lstm")


def tutor(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def _answers_in(text: str, lesson: str) -> list[str]:
    """The steps of `lesson` whose whole reference solution appears in `text`."""
    full = load_pack(ROOT / "exercises" / lesson)
    squash = " ".join(text.split())
    return [s.id for s in full.gradient_steps
            if s.has_solution and " ".join(s.solution.split()) in squash]


@pytest.fixture(scope="module")
def copies(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for lesson in LESSONS:
        out[lesson] = tmp_path_factory.mktemp("student") / lesson
        student_copy(ROOT / "exercises" / lesson, out[lesson])
    return out


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_student_copy_has_the_lesson_but_not_its_answers(copies, lesson):
    full, copy = load_pack(ROOT / "exercises" / lesson), load_pack(copies[lesson])
    assert [s.id for s in copy.steps] == [s.id for s in full.steps]
    for a, b in zip(full.steps, copy.steps, strict=True):
        assert not b.has_solution
        assert (a.template, a.explanation, a.title) == (b.template, b.explanation, b.title)
        if a.kind.checked:
            assert b.hints == a.hints[:-1]
    text = "\n".join(p.read_text(encoding="utf-8") for p in copies[lesson].rglob("*.toml"))
    assert _answers_in(text, lesson) == []


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_the_checks_work_on_a_student_copy(copies, lesson):
    from tutor.core.engine import Engine

    full = load_pack(ROOT / "exercises" / lesson)
    engine = Engine(Settings(device="cpu", pack=str(copies[lesson]), timeout=20.0))
    reference = Engine(Settings(device="cpu", pack=str(ROOT / "exercises" / lesson),
                                timeout=20.0))
    try:
        for step in full.gradient_steps:
            # with no earlier step solved: autograd stands in for them, as the reference did
            mine, theirs = (e.check(step.id, step.solution) for e in (engine, reference))
            assert mine.passed, (step.id, mine.error, [c.message for c in mine.checks])
            assert mine.rule == theirs.rule, step.id
            for mistake in step.mistakes[:1]:
                assert not engine.check(step.id, mistake.code).passed, step.id
    finally:
        engine.close()
        reference.close()


def test_what_needs_a_reference_says_so(copies, tmp_path):
    pack = str(copies["makemore"])
    home = ["--home", str(tmp_path / "home"), "--pack", pack]
    reference = tutor(*home, "train", "--reference", "--steps", "5")
    assert reference.returncode == 2 and "no reference solutions" in reference.stderr
    unsolved = tutor(*home, "train", "--steps", "5")
    assert unsolved.returncode == 2 and "solve these steps first" in unsolved.stderr
    printed = tutor(*home, "train", "--print-code")
    assert printed.returncode == 0 and "this copy of the lesson has no reference" in printed.stdout
    assert _answers_in(printed.stdout, "makemore") == []
    checked = tutor("pack", "check", pack)
    assert checked.returncode != 0 and "student's copy" in checked.stdout + checked.stderr


# A module whose docstring and comment show a step's answer, and whose code must stay.
LECTURE = '''"""Copied into a gradient: `dprobs = dlogprobs / probs`.

Two lines more.
"""
NAME = "é"  # é: dprobs = g


def f(x):
    """Doubles (no gradient code here)."""
    return x * 2  # dlogits += 1 in a comment
'''


def _fake_wheel(path: Path) -> Path:
    """A wheel laid out as the real one: the packs under tutor/_bundled, and a RECORD."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tutor/__init__.py", "")
        zf.writestr("tutor/authoring/derivative.py", "RULES = 'the rules that write code'\n")
        zf.writestr("tutor/core/smallest.py", "def search_edit(*a):\n    return 'the fix'\n")
        zf.writestr("tutor/course/lecture.py", LECTURE)
        zf.writestr("backprop_tutor-0.1.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: backprop-tutor\n"
                    "Description-Content-Type: text/markdown\n\n# README\n"
                    "backprop-tutor check atomic/probs --code 'dprobs = dlogprobs / probs'\n")
        zf.write(ROOT / "exercises" / "conv" / "forward.py",
                 "tutor/_bundled/exercises/conv/forward.py")
        for toml in sorted((ROOT / "exercises").rglob("*.toml")):
            zf.write(toml, f"tutor/_bundled/exercises/{toml.relative_to(ROOT / 'exercises')}")
        zf.writestr("backprop_tutor-0.1.0.dist-info/RECORD", "")
    return path


def test_the_student_wheel_holds_no_answers_and_a_true_record(tmp_path):
    wheel = _fake_wheel(tmp_path / "backprop_tutor-0.1.0-py3-none-any.whl")
    done = tutor("autograder", "--student-wheel", str(tmp_path / "students"), "--wheel",
                 str(wheel))
    assert done.returncode == 0, done.stderr
    made = tmp_path / "students" / "backprop_tutor-0.1.0-1student-py3-none-any.whl"
    assert [p.name for p in (tmp_path / "students").iterdir()] == [made.name]
    with zipfile.ZipFile(made) as zf:
        names = zf.namelist()
        record = zf.read("backprop_tutor-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.rsplit(",", 2)
            if not digest:
                continue
            data = zf.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert digest == f"sha256={expected.decode()}" and int(size) == len(data)
        for lesson in LESSONS:
            text = "\n".join(zf.read(n).decode() for n in names
                             if n.startswith(f"tutor/_bundled/exercises/{lesson}/"))
            assert text and _answers_in(text, lesson) == []
    assert {n for n in names} >= {f"tutor/_bundled/exercises/{p.relative_to(ROOT / 'exercises')}"
                                  for p in (ROOT / "exercises").rglob("*.toml")}
    # Nothing that derives a step's code: no `pack new`, no rules, no forward file to run it on,
    # no search for the smallest change that makes a wrong answer right.
    assert not [n for n in names if n.startswith("tutor/authoring/") or n.endswith("forward.py")
                or n == "tutor/core/smallest.py"]
    with zipfile.ZipFile(made) as zf:
        lecture = zf.read("tutor/course/lecture.py").decode()
        metadata = zf.read("backprop_tutor-0.1.0.dist-info/METADATA").decode()
    # No docstring or comment that shows gradient code, no README in the metadata; the code stays.
    assert "dprobs =" not in lecture and "dlogits +=" not in lecture and "dprobs" not in metadata
    assert "Name: backprop-tutor" in metadata
    assert len(lecture.splitlines()) == len(LECTURE.splitlines())
    space: dict = {}
    exec(compile(lecture, "lecture.py", "exec"), space)
    assert space["NAME"] == "é" and space["f"](3) == 6 and "Doubles" in space["f"].__doc__


def test_pack_new_without_its_rules_refuses_in_one_line(tmp_path, monkeypatch):
    """In the student build `tutor.authoring` is not there: `pack new` says so and stops."""
    import builtins

    from tutor.cli import main

    real = builtins.__import__

    def without(name, *args, **kwargs):
        if name.startswith("tutor.authoring"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    for name in [n for n in sys.modules if n.startswith("tutor.authoring")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(builtins, "__import__", without)
    forward = ROOT / "tests" / "packs" / "forward" / "mlp.py"
    assert main(["pack", "new", str(forward), "--out", str(tmp_path / "made")]) == 2
    assert not (tmp_path / "made").exists()


def test_a_student_copy_passes_right_answers_with_the_rule_in_one_check(copies):
    # The quick form of the slow test above, for the fast part of the suite.
    from tutor.core.engine import Engine

    full = load_pack(ROOT / "exercises" / "makemore")
    engine = Engine(Settings(device="cpu", pack=str(copies["makemore"])))
    try:
        step = full.step("atomic/bndiff")  # eleven earlier steps stood in for by autograd
        result = engine.check(step.id, step.solution)
        assert result.passed and result.rule is Rule.FOLLOWED
    finally:
        engine.close()


@pytest.mark.parametrize("lesson", [*LESSONS, "conv"])
def test_a_student_copy_keeps_no_catalogued_mistake_and_the_rules_still_name_slips(tmp_path,
                                                                                  lesson):
    """Every step of every lesson: the student's copy holds no catalogued mistake (each is the
    answer with one slip, one edit, vote or splice away from it); a sign slip of its first
    checked step is still named there, by the rules, from the values."""
    from tutor.core.engine import Engine

    full = load_pack(ROOT / "exercises" / lesson)
    student_copy(ROOT / "exercises" / lesson, tmp_path / lesson)
    copy = load_pack(tmp_path / lesson)
    assert full.gradient_steps and any(s.mistakes for s in full.gradient_steps)
    for step in full.gradient_steps:
        assert not copy.step(step.id).mistakes, step.id
    step = next(s for s in full.gradient_steps if s.function is None
                and "\n" not in s.solution.strip() and " = " in s.solution)
    target, _, value = step.solution.strip().partition(" = ")
    engine = Engine(Settings(device="cpu", pack=str(tmp_path / lesson)))
    try:
        result = engine.check(step.id, f"{target} = -({value})")
        wrong = next(c for c in result.checks if not c.accepted)
        assert not result.passed and wrong.diagnosis is not None, wrong.message
        assert "sign" in wrong.message.lower(), wrong.message
    finally:
        engine.close()


def test_the_checks_explain_without_the_smallest_change_search(copies, monkeypatch):
    """The student's wheel has no tutor/core/smallest.py: a wrong answer nobody catalogued is
    refused with a message all the same, and a right one passes."""
    import builtins

    from tutor.core.engine import Engine

    real = builtins.__import__

    def without(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "tutor.core.smallest" or (name == "tutor.core" and fromlist
                                             and "smallest" in fromlist):
            raise ImportError(name)
        return real(name, globals, locals, fromlist, level)

    monkeypatch.delitem(sys.modules, "tutor.core.smallest", raising=False)
    monkeypatch.setattr(builtins, "__import__", without)
    engine = Engine(Settings(device="cpu", pack=str(copies["makemore"])))
    try:
        # What only the search explains (a term too many): refused, the fix not named.
        wrong = engine.check("atomic/probs", "dprobs = dlogprobs / probs + dlogprobs")
        assert not wrong.passed and wrong.checks and wrong.checks[0].message
        assert "one too many" not in wrong.checks[0].message
        right = engine.check("atomic/probs", "dprobs = dlogprobs / probs")
        assert right.passed
    finally:
        engine.close()
