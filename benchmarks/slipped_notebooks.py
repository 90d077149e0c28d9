"""Does `grade` ever credit a step whose code is wrong, in layouts nobody wrote a slip into?
Every right notebook of a lesson corpus, with one slip put into one step's code at a time:
the statement that assigns the learner's value of the step's gradient (the corpus's own
`where` says which expression holds it) is given a constant factor or a flipped sign. The
slipped notebook is run as a kernel runs it (tests/lesson_corpus_truth.py) to confirm that
the step is now wrong (a slip in code that a later line overwrites changes nothing and is
skipped), then graded; the slipped step must earn nothing. Other steps are not counted: the
steps after it are right by their own lines on a wrong upstream gradient, which the tutor
credits (one mistake costs one step).

    .venv/bin/python benchmarks/slipped_notebooks.py [--corpus notebook_corpus_lessons_tune ...]
                                                    [--case NAME] [--slip factor|sign]

It prints each slipped step's verdict and the number of slips credited; a tune half is what
to run it on (the held-out halves are measured only by grade_corpus.py).
"""

from __future__ import annotations

import argparse
import ast
import copy
import importlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from grade_corpus import _write, grade  # noqa: E402

SLIPS = {"factor": "({}) * 1.25", "sign": "-({})"}


def _sources(notebook: dict) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in notebook["cells"]]


def _slipped(notebook: dict, held: str, slip: str) -> dict | None:
    """The notebook with the last statement outside any function that assigns `held` (the
    expression a learner's value sits in: `dlogits`, `d['h']`, `g.res2`) given the slip;
    None when no statement assigns it so."""
    cells = _sources(notebook)
    where = None
    for k, src in enumerate(cells):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        todo = list(tree.body)
        while todo:
            node = todo.pop(0)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and ast.unparse(node.targets[0]) == held:
                where = (k, node)
            for field in ("body", "orelse"):
                todo.extend(getattr(node, field, []) if isinstance(
                    node, (ast.With, ast.For, ast.If, ast.While)) else [])
    if where is None:
        return None
    k, node = where
    src = cells[k]
    lines = src.splitlines(True)
    start = sum(len(x) for x in lines[:node.value.lineno - 1]) + node.value.col_offset
    end = sum(len(x) for x in lines[:node.value.end_lineno - 1]) + node.value.end_col_offset
    value = src[start:end]
    out = copy.deepcopy(notebook)
    out["cells"][k]["source"] = src[:start] + SLIPS[slip].format(value) + src[end:]
    return out


def _untrained(notebook: dict, loop: str | None) -> dict:
    """The notebook without its training loop (the statement containing `loop`): the slipped
    step is a gradient step, and the loop only makes each run longer."""
    if not loop:
        return notebook
    out = copy.deepcopy(notebook)
    for cell, src in zip(out["cells"], _sources(notebook), strict=True):
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in tree.body:
            text = ast.get_source_segment(src, node) or ""
            if loop in text:
                lines = src.splitlines(True)
                cell["source"] = "".join(lines[:node.lineno - 1] + lines[node.end_lineno:])
                return out
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", nargs="+", default=["notebook_corpus_lessons_tune",
                                                        "notebook_corpus_lessons_tune3"])
    parser.add_argument("--case")
    parser.add_argument("--slip", choices=sorted(SLIPS), default="factor")
    parser.add_argument("--train-steps", type=int, default=20)
    parser.add_argument("--per-case", type=int, default=0,
                        help="slip at most this many steps of each notebook, spread over it")
    args = parser.parse_args(argv)
    import lesson_corpus_truth as truth

    truth._matplotlib_stub()
    tried = credited = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.corpus:
            corpus = importlib.import_module(name)
            for case in corpus.CASES:
                if args.case and case["name"] != args.case:
                    continue
                right = set(case["right"]) - set(case.get("wrong") or ())
                steps = [(s, specs) for s, specs in (case.get("where") or {}).items()
                         if s in right]
                if args.per_case and len(steps) > args.per_case:
                    every = len(steps) / args.per_case
                    steps = [steps[int(k * every)] for k in range(args.per_case)]
                for step, specs in steps:
                    # One of the step's gradients slipped is the step slipped.
                    base = _untrained(case["notebook"], (case.get("train") or {}).get("cell"))
                    notebook = next((nb for spec in specs if (nb := _slipped(
                        base, spec[0], args.slip)) is not None), None)
                    if notebook is None:
                        continue
                    slipped = {**case, "notebook": notebook, "train": None,
                               "name": f"{case['name']}__{step.replace('/', '_')}"}
                    try:
                        _, wrong = truth.Run(slipped, notebook).run()
                    except Exception as exc:  # noqa: BLE001 - a slip the notebook cannot run
                        print(f"  {slipped['name']}: does not run ({type(exc).__name__})")
                        continue
                    if step not in wrong:
                        continue  # overwritten later: the step is still right
                    result = grade(_write(corpus, slipped, Path(tmp)), args.train_steps,
                                   case.get("lesson", "makemore"))
                    if result is None:
                        print(f"  {slipped['name']}: no result")
                        continue
                    mark = next(s for s in result["steps"] if s["id"] == step)
                    tried += 1
                    bad = mark["score"] > 0
                    credited += bad
                    print(f"{'CREDITED' if bad else 'refused '} {slipped['name']:60s} "
                          f"{mark['message'][:100]}", flush=True)
    print(f"slipped steps credited: {credited} of {tried}")
    return 1 if credited else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
