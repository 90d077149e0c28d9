"""The same notebook gets the same grade however its cells are cut: split into a cell per
statement, merged into one, its comparisons gathered at the end, its exercise comment moved or
removed, its statements joined on one line with `;` or a gradient's two branches written as one
line late. Grading follows what the notebook computes, not where its code sits.

The base notebook has right steps and three wrong ones, so that a change of layout can neither
lose a right step nor credit a wrong one without this test seeing it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import lecture_notebooks as L
import pytest

ROOT = Path(__file__).resolve().parent.parent

WRONG = {
    "probs": "dprobs = dlogprobs * probs",  # multiplies where the line divides
    "bnvar": "dbnvar = 0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv",  # the sign
    "emb": "demb = dembcat.view(emb.shape).flip(0)",  # rows of the wrong examples
}
LINES = [(t, WRONG.get(t, code)) for t, code in L.EX1_LINES]
WRONG_STEPS = {"atomic/probs", "atomic/bnvar", "atomic/emb"}
CMPS = [f"cmp('{t}', d{t}, {t})" for t in L.CMP_ORDER]


def _cmps_for(tensor: str) -> list[str]:
    # The comparisons of a line's gradients: the line's tensor and the parameters beside it.
    extra = {"h": ["W2", "b2"], "bngain": ["bnbias", "bnraw"], "embcat": ["W1", "b1"],
             "bnvar_inv": ["bndiff"], "logit_maxes": [], "bnmeani": []}
    return [f"cmp('{t}', d{t}, {t})" for t in [tensor, *extra.get(tensor, [])]]


def base() -> list[str]:
    return [L.EX1_HEAD, *(code + "\n" + "\n".join(_cmps_for(t)) for t, code in LINES)]


def split() -> list[str]:
    """A cell per statement, each comparison in a cell of its own."""
    cells = [L.EX1_HEAD]
    for t, code in LINES:
        statements = [code] if code.startswith("dC = torch.zeros_like") else code.split("\n")
        cells += statements + _cmps_for(t)
    return cells


def merged() -> list[str]:
    return [L.EX1_HEAD + "\n".join(code + "\n" + "\n".join(_cmps_for(t)) for t, code in LINES)]


def gathered() -> list[str]:
    """Every answer first, then every comparison in one cell."""
    return [L.EX1_HEAD, *(code for _, code in LINES), "\n".join(CMPS)]


def header_below() -> list[str]:
    return [*base()[1:], L.EX1_HEAD]


def header_removed() -> list[str]:
    return base()[1:]


def joined() -> list[str]:
    """Statements of a line joined by `;` where Python allows it (not the loop)."""
    cells = [L.EX1_HEAD]
    for t, code in LINES:
        if "for " in code:
            cells.append(code + "\n" + "\n".join(_cmps_for(t)))
        else:
            cells.append("; ".join(code.split("\n")) + "; " + "; ".join(_cmps_for(t)))
    return cells


def one_line_late() -> list[str]:
    """dcounts's two branches as one statement, written after dcounts_sum."""
    cells = []
    for t, code in LINES:
        if t == "counts_sum_inv":
            code = "dcounts_sum_inv = (dprobs * counts).sum(1, keepdim=True)"
        if t == "counts":
            code = "dcounts = dprobs * counts_sum_inv + dcounts_sum.expand_as(counts)"
        cells.append(code + "\n" + "\n".join(_cmps_for(t)))
    return [L.EX1_HEAD, *cells]


def reordered() -> list[str]:
    """Statements that do not depend on each other written in the other order (a line's weight,
    bias and input gradients)."""
    independent = {"h", "bngain", "embcat"}
    return [L.EX1_HEAD, *("\n".join(reversed(code.split("\n")) if t in independent
                                     else code.split("\n")) + "\n" + "\n".join(_cmps_for(t))
                          for t, code in LINES)]


def running() -> list[str]:
    """One running gradient `g` walked back line by line, each value copied into the lecture's
    name for the comparison (`g = g / probs` then `dprobs = g`): every plain one-gradient
    statement goes through `g`, reading `g` where it reads the gradient `g` holds. Loops and
    tuple assignments read the names, which hold the same tensors."""
    cells = [L.EX1_HEAD]
    holds = None  # the gradient `g` holds
    for t, code in LINES:
        out = []
        for tree in ast.parse(code).body:
            statement = ast.unparse(tree)
            targets = tree.targets if isinstance(tree, ast.Assign) else [
                getattr(tree, "target", None)]
            plain = isinstance(tree, (ast.Assign, ast.AugAssign)) and len(targets) == 1 \
                and not isinstance(targets[0], ast.Tuple)
            if not plain:
                out.append(statement)
                continue
            for n in ast.walk(tree):
                if isinstance(n, ast.Name) and n.id == holds and isinstance(n.ctx, ast.Load):
                    n.id = "g"
            target = targets[0]
            if isinstance(tree, ast.Assign) and isinstance(target, ast.Name):
                name, target.id = target.id, "g"
                out += [ast.unparse(tree), f"{name} = g"]
                holds = name
            else:  # `dx += ...`, `g[i] = ...`: changes the tensor in place, as written
                out.append(ast.unparse(tree))
        cells.append("\n".join(out) + "\n" + "\n".join(_cmps_for(t)))
    return cells


def slotted() -> list[str]:
    """Every gradient an attribute of one record whose class lists them in `__slots__`
    (`G.dprobs = G.dlogprobs / probs`), compared from there."""
    grads = {f"d{t}" for t in L.CMP_ORDER}

    class _ToRecord(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id in grads:
                return ast.copy_location(ast.Attribute(ast.Name("G", ast.Load()), node.id,
                                                       node.ctx), node)
            return node

    def record(code: str) -> str:
        return ast.unparse(_ToRecord().visit(ast.parse(code)))

    head = (f"class Grads:\n    __slots__ = {tuple(sorted(grads))!r}\n\nG = Grads()\n")
    return [L.EX1_HEAD, head, *(record(code) + "\n" + "\n".join(
        record(c) for c in _cmps_for(t)) for t, code in LINES)]


VARIANTS = {f.__name__: f for f in (split, merged, gathered, header_below, header_removed, joined,
                                    one_line_late, reordered, running, slotted)}


def _grade(tmp_path: Path, cells: list[str], name: str) -> dict:
    path = L.write(tmp_path / f"{name}.ipynb", L.notebook(cells))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {s["id"]: s for s in json.loads(done.stdout)["steps"]}


@pytest.fixture(scope="module")
def graded_base(tmp_path_factory) -> dict:
    return _grade(tmp_path_factory.mktemp("base"), base(), "base")


@pytest.mark.slow
def test_the_base_notebook_is_graded_as_its_learner_wrote_it(graded_base):
    wrong = {sid for sid, s in graded_base.items() if s["score"] == 0}
    assert wrong == WRONG_STEPS, {sid: graded_base[sid]["message"] for sid in wrong}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_same_notebook_cut_otherwise_gets_the_same_grade(tmp_path, graded_base, variant):
    grade = _grade(tmp_path, VARIANTS[variant](), variant)
    changed = {sid: (graded_base[sid]["score"], s["score"], s["message"][:120])
               for sid, s in grade.items() if s["score"] != graded_base[sid]["score"]}
    assert not changed, changed
