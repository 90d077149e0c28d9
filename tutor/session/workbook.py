"""A lesson as a Jupyter workbook: an introduction, the `%load_ext tutor` cell, and per step
its forward lines, their shapes and the question, followed by a `%%check` cell with the step's
template (never its solution).

Written as nbformat 4 JSON with the standard library, so that writing one needs nothing the
tutor does not already have; the notebook front end (`tutor.notebook`) runs it.
"""

from __future__ import annotations

import json

from tutor.config import Settings
from tutor.pack.flow import gradient
from tutor.pack.model import Pack, Step, unwrap
from tutor.version import __version__

NBFORMAT_MINOR = 5  # cells carry an `id` from 4.5 on
# The file `python -m build` (or `pip wheel . --no-deps`) makes from the repository.
WHEEL = f"backprop_tutor-{__version__}-py3-none-any.whl"

_INTRO = """\
# {title}

{description}

## How this workbook works

Run the next cell first: it loads the tutor into this notebook. Then, for each step, read the
forward line and its shapes, replace the `...` in the cell under it with your backward code, and
run the cell.

**Your code never runs in this kernel.** A cell that starts with `%%check STEP_ID` is sent to
the tutor, which runs it in its own sandboxed process next to PyTorch's autograd, on the same
batch, and shows what came back: exact / approximate / maxdiff for each gradient, the verdict, a
diagnosis of a known mistake, the re-check on a fresh batch, your `print` output, and where the
numbers are off when the shape is right. The variables of the lesson (`logprobs`, `Yb`, `n`, ...)
live there, not here.

- `%hint STEP_ID` shows the step's next hint (idea, then shapes, then nearly the answer); the
  tutor counts the hints you use.
- `%progress` shows your progress. It is the same progress as in the terminal tutor
  (`backprop-tutor`): a step solved here is solved there, and the other way round.
- `%tutor` shows the lesson, the device and where progress is kept; `%tutor pack ID` switches
  the lesson.

On a hosted notebook, install the tutor first. It is on no package index: upload its wheel
(the README says how to build one) and run `%pip install '{wheel}[notebook]'`.
"""


def _cell(kind: str, cell_id: str, source: str) -> dict:
    cell = {"cell_type": kind, "id": cell_id, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def _cell_id(step: Step) -> str:
    # nbformat allows letters, digits, "-" and "_" in ids, at most 64 of them.
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in step.id)[:58]


def step_markdown(pack: Pack, step: Step, shapes: dict[str, dict]) -> str:
    """The step as the tutor shows it: the forward lines with their shapes, then the question."""
    number = pack.index(step.id) + 1
    lines = [f"### {number}. {step.title}", "",
             f"`{step.id}` · exercise {step.exercise}, step {number} of {len(pack.steps)}", ""]
    forward = pack.shown_forward(step)
    if forward:
        lines += ["```python", *forward, "```", ""]
    # A function step's own forward code (a loop through time) has no lesson lines to measure.
    targets = () if step.function is not None and step.function.forward else step.lines
    for target in targets:
        shape = shapes.get(target)
        if shape and shape.get("annotation"):
            note = (f" (broadcast: {shape['broadcast_note']})"
                    if shape.get("broadcast_note") else "")
            lines.append(f"- `{target}`: `{shape['annotation']}`{note}")
    if any(shapes.get(t, {}).get("annotation") for t in targets):
        lines.append("")
    lines += [question(step, shapes), "", "<details><summary>Explanation</summary>", "",
              unwrap(step.explanation).strip(), "", "</details>"]
    return "\n".join(lines)


def question(step: Step, shapes: dict[str, dict]) -> str:
    """What the step asks for, in one sentence, with the shapes of the answers when known."""
    if step.function:
        return (f"**Write `{step.function.name}`.** The tutor calls it as "
                f"`{step.function.call}`: first on the lesson's own tensors, then on inputs of "
                "freshly drawn sizes.")
    if step.kind.trained:
        return f"**{step.title}.**"
    wanted = []
    for tensor in step.checks:
        shape = shapes.get(tensor, {}).get("shape")
        shown = f" (shape `{list(shape)}`)" if shape is not None else ""
        wanted.append(f"`{gradient(tensor)}`{shown}")
    given = (f" Given: {', '.join(f'`{gradient(g)}`' for g in step.given)}." if step.given else "")
    return (f"**Write {_listed(wanted)}**, the gradient of `{step.target}` with respect to "
            f"{_listed([f'`{t}`' for t in step.checks])}.{given}")


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def workbook(pack: Pack, settings: Settings, shapes: dict[str, dict] | None = None) -> dict:
    """The workbook as an nbformat 4 document. `shapes` are the evaluator's annotations of the
    forward lines by target (`Evaluator.info()["lines"]`); without them the cells show none."""
    shapes = shapes or {}
    cells = [
        _cell("markdown", "introduction", _INTRO.format(
            title=pack.title, description=unwrap(pack.description).strip(), wheel=WHEEL)),
        _cell("code", "load-the-tutor", f"%load_ext tutor\n%tutor pack {settings.pack}"),
    ]
    for exercise in pack.exercises:
        intro = unwrap(exercise.intro).strip()
        cells.append(_cell("markdown", f"exercise-{exercise.number}",
                           f"## Exercise {exercise.number}: {exercise.title}\n\n{intro}"))
        for step in exercise.steps:
            cid = _cell_id(step)
            if step.kind.trained:
                cells.append(_cell("markdown", f"{cid}-train", step_markdown(pack, step, shapes)
                                   + "\n\nThis one trains the network on your gradients: run it in "
                                   "the tutor (`backprop-tutor`) or with `backprop-tutor train`."))
                continue
            cells.append(_cell("markdown", f"{cid}-md", step_markdown(pack, step, shapes)))
            cells.append(_cell("code", cid, f"%%check {step.id}\n{step.template.strip()}\n"))
    cells.append(_cell("code", "progress", "%progress"))
    return {
        "nbformat": 4,
        "nbformat_minor": NBFORMAT_MINOR,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": cells,
    }


def dumps(document: dict) -> str:
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"
