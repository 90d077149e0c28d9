"""Every lesson's free-form notebook is graded: a learner's own copy of the forward pass, their
backward code in plain cells with no `# Exercise` marks, their own comparison helper, a function
step as their definition of the function. Built here from each pack's own references, laid out
as a learner's notebook; one copy with a slip in one step, which only that step loses."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tutor.pack.model import find_pack, load_pack

ROOT = Path(__file__).resolve().parent.parent

CHECK = ("def check(label, mine, t):\n"
         "    print(label, torch.allclose(mine, t.grad, atol=1e-5))\n")


def _cell(source: str) -> dict:
    return {"cell_type": "code", "source": source, "metadata": {}, "outputs": [],
            "execution_count": None}


def _pack_of(lesson: str):
    return load_pack(Path(lesson) if "/" in lesson else find_pack(lesson))


def _notebook(lesson: str, slip: str | None = None) -> dict:
    """The lesson as a learner's notebook: data loading, the forward pass, every gradient step's
    code in order with a comparison after it, every function step's definition; `slip` names a
    step whose first gradient is negated."""
    pack = _pack_of(lesson)
    cells = ["import torch\nimport torch.nn.functional as F\n"
             "words = open('names.txt').read().splitlines()\n", CHECK,
             "# my copy of the forward pass\n" + pack.forward_code.strip() + "\n"]
    for step in pack.steps:
        if not step.kind.checked:
            continue
        code = step.solution.strip()
        if step.id == slip:
            grad = step.graded_names[0]
            code += f"\n{grad} = -{grad}"
        cells.append(code + "\n")
        if step.function is None:
            cells.append("".join(f"check('{t}', d{t}, {t})\n" for t in step.checks))
    return {"cells": [_cell(c) for c in cells], "metadata": {}, "nbformat": 4,
            "nbformat_minor": 5}


def _grade(tmp_path: Path, lesson: str, document: dict) -> dict[str, dict]:
    path = tmp_path / f"{Path(lesson).name}.ipynb"
    path.write_text(json.dumps(document))
    done = subprocess.run([sys.executable, "-m", "tutor", "--home", str(tmp_path / "home"),
                           "--device", "cpu", "--pack", lesson, "grade", "--json",
                           "--strict-rule", str(path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {s["id"]: s for s in json.loads(done.stdout)["steps"]}


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> str:
    """A lesson as `pack new` makes it, untouched: a causal attention head whose input is read
    by four lines (first, middle and closing branches)."""
    from tutor.authoring.new import make

    folder = tmp_path_factory.mktemp("generated") / "attention"
    assert make(ROOT / "tests" / "packs" / "forward" / "attention.py", folder).todo == []
    return str(folder)


def _lesson(lesson: str, request) -> str:
    return request.getfixturevalue("generated") if lesson == "generated" else lesson


@pytest.mark.parametrize("lesson", ["gpt", "lstm", "conv", "generated"])
def test_a_right_notebook_of_the_lesson_earns_every_step(tmp_path, lesson, request):
    lesson = _lesson(lesson, request)
    pack = _pack_of(lesson)
    steps = _grade(tmp_path, lesson, _notebook(lesson))
    for step in pack.gradient_steps:
        assert steps[step.id]["status"] == "passed", (step.id, steps[step.id]["message"])
        assert steps[step.id]["score"] == steps[step.id]["max_score"]


@pytest.mark.parametrize(("lesson", "slip"), [("gpt", "block/att"), ("lstm", "step/c"),
                                              ("conv", "conv/h2pre"),
                                              ("generated", "attention/Wk")])
def test_a_slip_costs_its_own_step_only(tmp_path, lesson, slip, request):
    lesson = _lesson(lesson, request)
    pack = _pack_of(lesson)
    steps = _grade(tmp_path, lesson, _notebook(lesson, slip))
    assert steps[slip]["status"] == "failed", steps[slip]
    for step in pack.gradient_steps:
        if step.id != slip:
            assert steps[step.id]["status"] == "passed", (step.id, steps[step.id]["message"])


def test_a_notebook_of_another_lesson_is_refused_naming_this_one(tmp_path):
    document = {"cells": [_cell("import torch\nx = torch.ones(3)\nprint(x.sum())\n")],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "other.ipynb"
    path.write_text(json.dumps(document))
    done = subprocess.run([sys.executable, "-m", "tutor", "--home", str(tmp_path / "home"),
                           "--pack", "conv", "grade", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2
    assert "code for this lesson (conv)" in done.stderr
    assert textwrap.dedent(done.stderr).count("\n") <= 2


def test_a_notebook_that_compares_inline_with_renamed_tensors_is_read(tmp_path):
    # No exercise marks, no helper, no gradient named as the lesson names it: the forward pass
    # copied under the learner's own names, each gradient compared inline with autograd's.
    pack = _pack_of("conv")
    from tutor.course.lecture import is_lesson_notebook

    forward = pack.forward_code.strip()
    renamed = {t: f"my_{t}" for t in ("h1", "h2", "h3", "h1pre", "h2pre", "h3pre", "last")}
    import re

    for old, new in renamed.items():
        forward = re.sub(rf"\b{old}\b", new, forward)
    check = "".join(f"print(torch.allclose(g_{t}, my_{t}.grad))\n" for t in renamed)
    assert is_lesson_notebook(pack, ["import torch\n", forward + "\n", check])
    # A makemore notebook read for the conv lesson shares a few tensors' names only.
    makemore = _pack_of("makemore")
    other = "".join(f"print({t}.grad.shape)\n" for t in sorted(
        {line.target for line in makemore.forward_lines}))
    assert not is_lesson_notebook(pack, ["import torch\n", other])


def test_a_slip_is_diagnosed_as_written_not_through_the_notebooks_own_data(tmp_path):
    # The notebook works out `vocab_size` from its own data; a slipped step that reads it is
    # graded on its own statements, with the tutor's data, and its slip is named.
    document = _notebook("gpt")
    for cell in document["cells"]:
        if cell["source"].startswith("import torch"):
            cell["source"] += ("itos = sorted(set(''.join(words)))\n"
                               "vocab_size = len(itos) + 1\n")
        if cell["source"].startswith("dlnf = "):
            first, rest = cell["source"].split("\n", 1)
            cell["source"] = f"{first} * 1.25\n{rest}"
            break
    else:
        raise AssertionError("no cell of the notebook starts the lnf step")
    steps = _grade(tmp_path, "gpt", document)
    assert steps["block/lnf"]["status"] == "failed"
    assert "1.25 times" in steps["block/lnf"]["message"], steps["block/lnf"]["message"]
