"""A learner's submission, read: which code answers which step, whatever form it came in.

Three forms: a percent-format `.py` file of `# %% STEP_ID` cells (as `check --all` reads it; a
`# %% train/loop` cell is the training step), the tutor's own workbook `.ipynb` (`%%check STEP_ID`
cells), and the lecture's notebook filled in (tutor.course.lecture). Nothing is run here.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tutor import code_facts, source
from tutor.course.lecture import (
    NotebookError,
    code_cells,
    is_lesson_notebook,
    notebook_program,
    read_lecture,
    translated,
)
from tutor.course.program import Line, Program, line_of
from tutor.pack.model import Pack
from tutor.sandbox.clean import clean
from tutor.sandbox.policy import inspect
from tutor.session.cells import parse_cells

# A notebook keeps its outputs (plots, printed losses): more than a code file may hold.
MAX_NOTEBOOK_BYTES = 16 * 1024 * 1024


class Unreadable(ValueError):
    """The submission cannot be graded at all: why, in one line (shown to the student)."""


@dataclass
class Submission:
    """The code per step (only steps that have some) and the training step's code."""

    name: str
    form: str  # "percent", "workbook" or "lecture"
    code: dict[str, str] = field(default_factory=dict)
    training: str | None = None
    notes: list[str] = field(default_factory=list)  # how it was read, for the student
    unknown: list[str] = field(default_factory=list)  # cells naming no step of the pack
    # exercise -> the submission's code up to it as one program, as a kernel runs it: what the
    # grade falls back on where a step's own code cannot be told (tutor/course/scoring.py)
    programs: dict[int, Program] = field(default_factory=dict)
    # Steps whose gradients the training step computes as the notebook's own loop does, not
    # through the learner's functions (lecture._assembled_training): where the notebook's
    # answer to one of them is wrong, its loop trained on that wrong gradient.
    training_needs: list[str] = field(default_factory=list)
    # A notebook's cells (as its names were read): its training loop is read again where its
    # own frame finds its names for the lesson's parameters (scoring, lecture.own_training).
    cells: list[str] = field(default_factory=list)


def read_submission(path: Path, pack: Pack) -> Submission:
    """Read `path` as one of the three forms; Unreadable when it is none of them."""
    suffix = path.suffix.lower()
    if suffix not in (".py", ".ipynb"):
        raise Unreadable(f"{path.name}: a submission is a .py file of `# %% STEP_ID` cells or "
                         "a .ipynb notebook")
    limit = MAX_NOTEBOOK_BYTES if suffix == ".ipynb" else source.MAX_FILE_BYTES
    try:
        text = source.read(str(path), limit)
    except FileNotFoundError:
        raise Unreadable(f"no such file: {path.name}") from None
    except source.SourceError as exc:
        raise Unreadable(str(exc).replace(str(path), path.name)) from None
    except OSError as exc:
        raise Unreadable(f"cannot read {path.name}: {exc.strerror or exc}") from None
    if suffix == ".py":
        return _percent(path.name, text, pack)
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise Unreadable(f"{path.name} is not a notebook (not JSON: {exc})") from None
    if not isinstance(document, dict):
        raise Unreadable(f"{path.name} is not a notebook (no cells)")
    try:
        cells = code_cells(document)
    except NotebookError as exc:
        raise Unreadable(f"{path.name} is not a notebook ({exc})") from None
    checks = [c for c in cells if c.lstrip().startswith("%%check")]
    if checks:
        return _workbook(path.name, checks, pack)
    if is_lesson_notebook(pack, cells):
        return _lecture(path.name, cells, pack)
    if _checks_its_own_gradients(cells):
        # Its forward pass and names are its own: what it computes is found by its values,
        # in its own frame (tutor/core/frame.py), where it is this lesson's network.
        sub = _lecture(path.name, cells, pack)
        sub.notes.append(OWN_NOTEBOOK)
        return sub
    example = next(iter(sorted(pack.flow.all)), "dlogits")
    raise Unreadable(f"{path.name} has neither `%%check STEP_ID` cells nor code for this "
                     f"lesson ({pack.id}): no `# Exercise N` marks, no comparison with "
                     f"autograd, no gradient such as `{example}` and none of its functions")


OWN_NOTEBOOK = ("read as a notebook of your own: its forward pass and its names are yours, so "
                "each step is graded on what your code computes, found among its values by "
                "running the lesson's forward pass on your parameters and batch")
# Autograd asked, or its answer compared: a notebook that checks gradients it computed.
_OWN_CHECKS = re.compile(r"\.backward\(|autograd\.grad\(|\.grad\b|allclose\(|assert_close\(")


def _checks_its_own_gradients(cells: list[str]) -> bool:
    return any(_OWN_CHECKS.search(c) for c in cells)


def _step_of(pack: Pack, given: str) -> str | None:
    try:
        return pack.step(given).id
    except KeyError:
        return None


# A cell's start in a notebook saved as a script: jupytext's and VS Code's `# %%` (with an
# optional title, `# %% Exercise 1`, or a cell type, `# %% [markdown]`), nbconvert's `# In[3]:`.
_SCRIPT_CELL = re.compile(r"^#\s*(?:%%(?P<title>.*)|In\[[ 0-9]*\]:\s*)$")


def script_cells(text: str) -> list[str]:
    """A notebook saved as a `.py` script, as its code cells: a cell's title stays as a comment
    at its top (so `# %% Exercise 2` marks the exercise as the comment would), markdown cells
    are left out."""
    cells: list[list[str]] = [[]]
    for line in text.splitlines():
        match = _SCRIPT_CELL.match(line)
        if match is None:
            cells[-1].append(line)
            continue
        title = (match["title"] or "").strip()
        cells.append(["# markdown"] if title.startswith("[markdown]") else
                     [f"# {title}"] if title and not title.startswith("[") else [])
    return ["\n".join(c) + "\n" for c in cells
            if c[:1] != ["# markdown"] and "\n".join(c).strip()]


def _percent(name: str, text: str, pack: Pack) -> Submission:
    cells = parse_cells(text)
    # A header that holds a step's id among other characters (escapes hiding it) was meant as a
    # step's cell: that file is read as cells, to say what the header hides.
    meant = any(_step_of(pack, c.step) for c in cells) or any(
        s.id in c.step for c in cells for s in pack.steps)
    if not meant:
        # No cell names a step: a notebook saved as a script (jupytext, VS Code, nbconvert).
        notebook = script_cells(text)
        if is_lesson_notebook(pack, notebook):
            return _lecture(name, notebook, pack)
    if not cells:
        raise Unreadable(f"{name} has no `# %% STEP_ID` cells")
    sub = Submission(name, "percent")
    sub.programs = _programs(pack, [(_step_of(pack, c.step), c.code) for c in cells])
    for cell in cells:
        sid = _step_of(pack, cell.step)
        if sid is None:
            hidden = (" (its header holds characters a terminal does not show)"
                      if clean(cell.step) != cell.step else "")
            sub.unknown.append(f"line {cell.line}: no step '{cell.step}'{hidden}")
            continue
        if pack.step(sid).kind.trained:
            sub.training = cell.code if has_code(cell.code) else None
        elif has_code(cell.code, pack.step(sid).template):
            sub.code[sid] = cell.code  # a later cell for the same step replaces an earlier one
    return sub


def _workbook(name: str, cells: list[str], pack: Pack) -> Submission:
    sub = Submission(name, "workbook")
    sub.programs = _programs(pack, [(_step_of(pack, c.lstrip().partition("\n")[0][
        len("%%check"):].strip()), c.lstrip().partition("\n")[2]) for c in cells])
    for cell in cells:
        header, _, code = cell.lstrip().partition("\n")
        given = header[len("%%check"):].strip()
        sid = _step_of(pack, given)
        if sid is None:
            sub.unknown.append(f"%%check {given}: no such step")
            continue
        if has_code(code, pack.step(sid).template):
            sub.code[sid] = code
    return sub


def _lecture(name: str, cells: list[str], pack: Pack) -> Submission:
    written = cells
    cells, forward = translated(pack, cells)
    originals = {id(t): o for t, o in zip(cells, written, strict=True)}
    answers = read_lecture(pack, cells)
    sub = Submission(name, "lecture", training=answers.training,
                     training_needs=answers.training_needs, cells=cells)
    if forward:
        sub.notes.append("your names for the lesson's tensors read as the tutor's: " + ", ".join(
            f"{yours} as {ours}" for yours, ours in sorted(forward.items())))
    memo: dict = {}  # what is read of each cell once, for every exercise's program
    sub.programs = {e.number: program for e in pack.exercises if not e.kind.trained
                    and (program := notebook_program(pack, cells, e.number, memo,
                                                     originals)) is not None}
    sub.code = {sid: code for sid, code in answers.code.items() if has_code(code)}
    if answers.renamed:
        sub.notes.append("read as the tutor's names: " + ", ".join(
            f"{yours} as {ours}" for yours, ours in sorted(answers.renamed.items())))
    sub.notes += answers.notes
    return sub


def _programs(pack: Pack, cells: list[tuple[str | None, str]]) -> dict[int, Program]:
    """exercise -> the cells up to it, in the file's order, as one program (a cell naming no
    step goes with the exercise of the cell before it). A cell that fails stops there and the
    next runs, as in a kernel; a cell the sandbox would refuse, or that is not Python, is left
    out (its step's own check says why)."""
    blocks: list[tuple[int, list[Line]]] = []
    exercise = 1
    for sid, code in cells:
        step = pack.step(sid) if sid else None
        if step is not None:
            if step.kind.trained:
                continue
            exercise = step.exercise
        try:
            tree = ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        if inspect(tree) is None and has_code(code):
            blocks.append((exercise, [line_of(node, code) for node in tree.body]))
    out = {}
    for e in sorted({e.number for e in pack.exercises if not e.kind.trained}):
        chosen = [(at, lines) for at, lines in blocks if at <= e]
        if chosen:
            out[e] = Program([lines for _, lines in chosen],
                             {w for at, lines in blocks if at == e for line in lines
                              for w in line.writes}, [at == e for at, _ in chosen])
    return out


def has_code(code: str, template: str | None = None) -> bool:
    """Whether a cell holds an answer: not blank, not the untouched template, not only
    placeholders (`dx = ...`, `dx += ...`, `dlogits = None`, `pass`). Code that does not parse
    is an answer (a wrong one: the check says where)."""
    if template is not None and code.strip() == template.strip():
        return False
    return not code_facts.only_placeholders(code)
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # Not Python, or nested past what the parser takes: an answer all the same, and the
        # check says what is wrong with it.
        return bool(code.strip())
    for node in body:
        if isinstance(node, ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring or a bare `...`
        if isinstance(node, ast.Assign):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if all(isinstance(v, ast.Constant) and v.value in (None, Ellipsis) for v in values):
                continue
        return True
    return False
