"""`list` and `show`: the lesson's steps, without running anything but the forward pass."""

from __future__ import annotations

import argparse
import json

from tutor.commands.base import Command, UsageError, lesson_pack, position, step_id
from tutor.config import Settings
from tutor.pack.model import unwrap
from tutor.session.report import terminal_width, wrap


def step_entry(pack, step) -> dict:
    return {
        "id": step.id,
        "exercise": step.exercise,
        "title": step.title,
        "kind": step.kind.name,
        "checks": list(step.checks),
        "forward": pack.shown_forward(step),
        **({"call": step.function.call} if step.function else {}),
    }


def _list_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print a JSON list")


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    entries = [step_entry(pack, s) for s in pack.steps]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    for ex in pack.exercises:
        print(f"Exercise {ex.number}: {ex.title}")
        for step in ex.steps:
            print(f"  {pack.index(step.id) + 1:>2}. {step.id:<24} {step.kind.describe(step)}")
            # Code, so never wrapped: it reads as the forward pass does in the tutor.
            for source in step_entry(pack, step)["forward"]:
                print(f"        {source}")
    return 0


def _show_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("step", metavar="STEP_ID", help="step id, number or name (see `list`)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.add_argument("--no-shapes", action="store_true",
                   help="skip the shapes (they need PyTorch to start, about two seconds)")


def run_show(args: argparse.Namespace, settings: Settings) -> int:
    pack = lesson_pack(settings)
    step = pack.step(step_id(pack, args.step))
    annotations: dict[str, dict] = {}
    if not args.no_shapes:
        from tutor.evaluator import warm
        from tutor.evaluator.client import Evaluator, EvaluatorError

        try:
            # A warm worker with these settings knows the shapes already (evaluator/warm.py).
            found = warm.connect(settings)
            if found is not None:
                info = found.info()
            else:
                with Evaluator(settings) as ev:
                    info = ev.info()
            annotations = {line["target"]: line for line in info["lines"]}
        except EvaluatorError as exc:
            raise UsageError(str(exc)) from None
    # A function step's own forward code (a loop through time) is shown as written, without
    # the shapes of the lesson's lines.
    own = step.function is not None and bool(step.function.forward)
    forward = [{"source": source} for source in pack.shown_forward(step)] if own else [
        {"source": pack.line_for(t).source, **{k: annotations[t][k] for k in
         ("shape", "annotation", "broadcast_note") if t in annotations}}
        for t in step.lines
    ]
    if args.json:
        # The explanation as prose, without the pack file's line breaks, like every message.
        print(json.dumps({**step_entry(pack, step), "forward": forward,
                          "explanation": unwrap(step.explanation), "template": step.template,
                          "hints": len(step.hints)}, indent=2))
        return 0
    width = terminal_width()
    print(f"{step.id} ({position(pack, step.id)}): {step.title}\n")
    for line in forward:
        print(f"    {line['source']}")
        if "annotation" in line:
            flag = f"   (broadcast: {line['broadcast_note']})" if line.get("broadcast_note") else ""
            print(f"      shapes: {line['annotation']}{flag}")
    print()
    print("\n".join(wrap(unwrap(step.explanation), "", "", width)))
    if step.kind.trained:  # its template is the training step, which depends on your progress
        print()
        print("\n".join(wrap("Its code: `backprop-tutor train --print-code` prints the training "
                             "step that `train` runs (your training-screen draft, if there is "
                             "one).",
                             "", "", width)))
    else:
        if how := step.kind.how_checked(step):
            print()
            print("\n".join(wrap(how, "", "", width)))
        print("\nTemplate:\n")
        print("    " + step.template.rstrip().replace("\n", "\n    "))
    if step.hints:
        print()
        print("\n".join(wrap(f"Stuck? `backprop-tutor hint {step.id}` shows the next of its "
                             f"{len(step.hints)} hints (the tutor counts the hints you use).",
                             "", "", width)))
    return 0


LIST = Command("list", "list the steps in order", _list_args, run_list)
SHOW = Command("show", "show a step: its forward line with shapes, explanation, template",
               _show_args, run_show)
