"""The pack on disk: `pack.toml`, the exercise of every line, the training exercise.

The setup code is the forward file as written, then the few functions the engine calls
(`make_data`, `init_params`, `sample_batch`), written here around the file's `setup` and
`batch`: a batch is drawn by the file's own `batch` from a seed the lesson's generator gives, so
the lesson's main batch, its fresh batch and the training run's batches are all the file's. The
training run's splits are large batches of the file's, drawn once (`EVAL_SIZE` examples each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tutor.authoring.forward_file import ForwardFile

EVAL_SIZE = 4096  # examples in each split the trained network is evaluated on
# Names the written setup code defines around the file's: the file may not use them.
GLUE_NAMES = frozenset({"make_data", "init_params", "sample_batch", "lesson_draw",
                        "LESSON_DATA", "LESSON_EVAL_SIZE", "LESSON_TENSORS"})
TRAINING = {"steps": 1000, "lr": 0.1, "lr_decay_step": 0.75, "lr_after_decay": 0.01,
            "gradcheck_steps": 10, "samples": 0, "cpu_threads": 1}
_TRAINING_KEYS = frozenset({"steps", "lr", "lr_decay_step", "lr_after_decay", "batch_size",
                            "gradcheck_steps", "clip_norm", "cpu_threads"})


@dataclass(frozen=True)
class Lesson:
    """What the pack says of itself."""

    id: str
    title: str
    description: str
    batch_size: int
    heldout_batch_size: int
    training: dict


def text(value: str) -> str:
    """A TOML string holding `value` exactly: a multi-line literal where it can be one."""
    if "'''" not in value and all(c in "\t\n" or c >= " " for c in value) \
            and "\x7f" not in value and not value.endswith("'"):
        return "'''\n" + value + "'''"
    return json.dumps(value, ensure_ascii=False)


def _prose(value: str) -> str:
    if '"""' not in value and "\\" not in value and all(c in "\t\n" or c >= " "
                                                       for c in value):
        return '"""\n' + value.strip() + '\n"""'
    return json.dumps(value.strip(), ensure_ascii=False)


def _strings(values) -> str:
    items = [json.dumps(v, ensure_ascii=False) for v in values]
    flat = "[" + ", ".join(items) + "]"
    if len(flat) <= 90:
        return flat
    return "[\n" + "".join(f"    {i},\n" for i in items) + "]"


def _number(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(int(value))


def glue(file: ForwardFile, keys: list[str], tensors: list[str]) -> str:
    """The functions the engine calls, around the file's `setup` and `batch`. `tensors` are what
    `init_params` hands the lesson: the parameters, and the fixed tensors `forward` reads (the
    engine differentiates them too, but no step grades them and training moves none)."""
    takes = []
    if "text" in file.batch_takes:
        takes.append("text=LESSON_DATA.get('text')")
    if "split" in file.batch_takes:
        takes.append("split=split")
    call = ", ".join(["count", "seed", *takes])
    return f'''

# -- what the lesson calls, written by `backprop-tutor pack new` around the functions above ------
LESSON_DATA = {{}}  # the data file's text, kept by make_data for the batches
LESSON_EVAL_SIZE = {file.eval_size or EVAL_SIZE}  # examples of each split a run is evaluated on
LESSON_TENSORS = {tensors!r}


def lesson_draw(count, seed, split):
    """One batch of the file's `batch`, as (inputs, targets); torch's global random state is
    left as it was."""
    state = torch.random.get_rng_state()
    try:
        made = batch({call})
    finally:
        torch.random.set_rng_state(state)
    if isinstance(made, dict):
        return made[{keys[0]!r}], made[{keys[1]!r}]
    return made[0], made[1]


def make_data(text, sizes):
    LESSON_DATA["text"] = text
    return {{split: lesson_draw(LESSON_EVAL_SIZE, 1_000_003 + k, split)
            for k, split in enumerate(("train", "val", "test"))}}


def init_params(g, sizes):
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
    state = torch.random.get_rng_state()
    try:
        made = setup(seed)
    finally:
        torch.random.set_rng_state(state)
    return {{k: made[k].detach().float().clone() for k in made if k in LESSON_TENSORS}}


def sample_batch(X, Y, batch_size, g):
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=g))
    return lesson_draw(batch_size, seed, "train")
'''


def pack_toml(file: ForwardFile, lesson: Lesson, result: dict, exercises: list[str]) -> str:
    lines = result["lines"]
    out = [f"# Made by `backprop-tutor pack new {file.name}` from {file.name}, kept beside it:",
           "# edit the forward file and make the pack again, or edit this pack by hand.", "",
           "[pack]", "schema = 1", f"id = {json.dumps(lesson.id)}",
           f"title = {json.dumps(lesson.title, ensure_ascii=False)}",
           f"description = {_prose(lesson.description)}"]
    if file.data:
        out.append(f"data = {json.dumps(file.data)}")
    out += [f"exercises = {_strings(exercises)}", "", "[lesson]"]
    for k, v in file.constants.items():
        if k not in ("batch_size", "heldout_batch_size"):
            out.append(f"{k} = {_number(v)}")
    out += [f"batch_size = {lesson.batch_size}",
            f"heldout_batch_size = {lesson.heldout_batch_size}   # the fresh batch's size", "",
            "[setup]", "# The forward file as written, then what the engine calls around it.",
            "code = " + text(file.text.rstrip() + "\n" + glue(file, result["keys"],
                                                              result["tensors"])), "",
            "[forward]", f"loss = {json.dumps(file.loss)}",
            "code = " + text("\n".join(ln["source"] for ln in lines) + "\n"), ""]
    return "\n".join(out)


def steps_toml(result: dict, title: str, intro: str) -> str:
    out = ["[exercise]", "number = 1", f"title = {json.dumps(title)}",
           f"intro = {_prose(intro)}", ""]
    for step in result["steps"]:
        out += ["[[steps]]", f"id = {json.dumps(step['id'])}",
                f"title = {json.dumps(step['title'])}",
                f"lines = {_strings(step['lines'])}", f"checks = {_strings(step['checks'])}"]
        if step["partials"]:
            out.append(f"partials = {_strings(step['partials'])}")
        out += [f"template = {text(step['template'])}",
                f"solution = {text(step['solution'])}"]
        if step["todo"]:
            out.append(f"# TODO: {step['todo']}")
        out += ["# A one-line summary made by pack new: say here what the step teaches.",
                f"explanation = {_prose(step['explanation'])}",
                f"hints = {_strings(step['hints'])}", ""]
        for m in step.get("mistakes", []):
            out += ["[[steps.mistakes]]", f"code = {text(m['code'].rstrip() + chr(10))}",
                    f"kind = {json.dumps(m['kind'])}", f"tensor = {json.dumps(m['tensor'])}",
                    f"message = {_prose(m['message'])}", ""]
    return "\n".join(out)


def training_toml(file: ForwardFile, lesson: Lesson, result: dict, prefix: str) -> str:
    ids = [s["id"] for s in result["steps"]]
    graded = [p for p in result["params"] if any(p in s["checks"] for s in result["steps"])]
    settings = {**TRAINING, "batch_size": lesson.batch_size,
                **{k: v for k, v in lesson.training.items() if k in _TRAINING_KEYS}}
    loss_line = result["lines"][-1]["source"]
    evaluate = '''CHUNK = 1024


def evaluate(params, state, X, Y):
    """The loss over a split, in chunks, as the forward lines compute it."""
    total, count = 0.0, 0
    for i in range(0, X.shape[0], CHUNK):
        Xb, Yb = X[i:i + CHUNK], Y[i:i + CHUNK]
        total += float(forward_loss(params, Xb, Yb)) * Xb.shape[0]
        count += Xb.shape[0]
    return total / count
'''
    out = ["[exercise]", "number = 2", 'title = "Train it on your gradients"',
           'kind = "training"',
           'intro = "Your backward pass, every step of it, drives gradient descent."', "",
           "[training]"]
    for k, v in settings.items():
        out.append(f"{k} = {_number(v)}")
    out += [f"backward = {_strings(ids)}", f"loss = {json.dumps(loss_line)}", "",
            "[training.eval]", f"code = {text(evaluate)}", "",
            "[[steps]]", f'id = "{prefix}/train"', 'title = "Training loop"',
            f"lines = {_strings([file.loss])}", f"checks = {_strings(graded)}",
            'explanation = """\nEach step runs your backward pass and moves every parameter '
            'against its gradient.\n"""',
            "hints = " + _strings(["Nothing new to derive: your earlier steps are the backward "
                                   "pass.", "Every gradient must have its parameter's shape.",
                                   "If the gradient check fails, go back to the step that "
                                   "computes that parameter's gradient."]), ""]
    return "\n".join(out)


def write(out: Path, file: ForwardFile, lesson: Lesson, result: dict) -> list[Path]:
    """Write the pack into `out`; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    exercises = ["01_lines.toml"]
    trains = bool(result["params"])
    if trains:
        exercises.append("02_training.toml")
    intro = ("One step per line of the forward pass, from the loss back to the parameters. "
             "Each step gives you the gradient arriving at the line's output; you write the "
             "gradients of what the line reads.")
    files = {
        "pack.toml": pack_toml(file, lesson, result, exercises),
        "01_lines.toml": steps_toml(result, "Backprop through every line", intro),
    }
    if trains:
        files["02_training.toml"] = training_toml(file, lesson, result, lesson.id)
    written = []
    for name, content in files.items():
        path = out / name
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written
