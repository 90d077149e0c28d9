"""A pack's schema: every table and key a pack may write, its type, whether it is required, and
what it means, in one place. Loading refuses what the schema does not allow (an unknown key, a
missing field, a wrong type), naming the file, the step and the key; `docs/packs.md` shows the
same declarations (`describe`, held to the page by tests/test_pack_check.py).

A step kind adds the fields it owns (`StepKind.fields`, tutor/pack/kinds.py): a function step's
`call`, `lesson`, `draw` and `expect` are the function kind's, and no other step may write them.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

VERSION = 1  # `[pack] schema`; a pack written for a later version is refused, not half-read


class SchemaError(ValueError):
    """What the schema refuses, said with where it is (the pack turns it into a PackError)."""


@dataclass(frozen=True)
class Field:
    """One key of a table: its name, its type's word, whether a table must have it, and a few
    words on what it means."""

    name: str
    type: str  # a word of TYPES
    doc: str
    required: bool = False


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return (_is_int(v) or isinstance(v, float)) and math.isfinite(v)  # type: ignore[arg-type]


TYPES = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": _is_int,
    "number": _is_number,
    "positive number": lambda v: _is_number(v) and v > 0,  # type: ignore[operator]
    "list of strings": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "string or list of strings": lambda v: isinstance(v, str) or (
        isinstance(v, list) and all(isinstance(x, str) for x in v)),
    "list of integers": lambda v: isinstance(v, list) and all(_is_int(x) for x in v),
    "table of numbers": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
    "table": lambda v: isinstance(v, dict),
    "table of strings": lambda v: isinstance(v, dict) and all(isinstance(x, str)
                                                              for x in v.values()),
    "list of tables": lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v),
}

PACK_TOML: dict[str, tuple[Field, ...]] = {
    "pack": (
        Field("schema", "integer", f"the schema version the pack is written for ({VERSION})",
              required=True),
        Field("id", "string", "the pack's id (`--pack ID`); by default its folder's name"),
        Field("title", "string", "the lesson's title"),
        Field("description", "string", "Markdown shown when the lesson is chosen"),
        Field("data", "string", "a data file beside the pack or in the tutor's data folder"),
        Field("exercises", "list of strings", "the exercise files, in order", required=True),
    ),
    "lesson": (),  # sizes by name: checked as a table of numbers
    "setup": (Field("code", "string", "defines make_data, init_params, sample_batch",
                    required=True),),
    "forward": (
        Field("code", "string", "the forward pass, one assignment a line", required=True),
        Field("loss", "string", "the scalar every gradient is of (default `loss`)"),
    ),
    # How a learner's own notebook of the lesson reads (`grade` on a free-form notebook): only
    # what the pack itself does not already say (its setup's names, its parameters, its sizes).
    "notebook": (
        Field("setup", "list of strings", "names a learner's notebook gives its own data and "
              "setup (`words`, `stoi`, `Xtr`), for which the tutor's stand in"),
        Field("aliases", "table of strings", "names a notebook commonly uses for the lesson's "
              "tensors, as `theirs = \"ours\"`"),
        Field("compare", "list of strings", "the comparison helpers a notebook calls, besides "
              "any function of the learner's that reads `.grad` (default `cmp`)"),
    ),
}

EXERCISE: tuple[Field, ...] = (
    Field("number", "integer", "the exercise's number (by default its place in the pack)"),
    Field("title", "string", "the exercise's title", required=True),
    Field("kind", "string", "the kind of its steps, unless a step says otherwise"),
    Field("requires", "list of integers", "exercises that must be done before this one opens"),
    Field("forward", "string", "extra forward lines, run after the pack's forward pass"),
    Field("intro", "string", "Markdown shown when the exercise opens"),
)

STEP: tuple[Field, ...] = (
    Field("id", "string", "the step's id, unique in the pack", required=True),
    Field("title", "string", "the step's title", required=True),
    Field("kind", "string", "the step's kind, if not its exercise's"),
    Field("lines", "list of strings", "targets of the forward lines this step differentiates"),
    Field("checks", "list of strings", "tensors whose gradients d<name> are graded"),
    Field("partials", "list of strings",
          "tensors whose gradient is started or added to here, graded as what has arrived so far"),
    Field("target", "string", "the tensor gradients are of (default: the pack's loss)"),
    Field("upstream", "string", "autograd's gradient of this tensor is fed into `target`"),
    Field("given", "list of strings", "d<name> handed to the learner, exact from autograd"),
    Field("replay", "boolean", "false: no earlier steps' gradients in the namespace"),
    Field("figure", "string", "d<name> shown as a picture once solved"),
    Field("points", "positive number", "what the step is worth to `grade` (default 1)"),
    Field("template", "string", "what the editor opens with"),
    Field("solution", "string", "the reference answer, replayed for steps not yet solved"),
    Field("explanation", "string", "Markdown shown on F3"),
    Field("hints", "list of strings", "at least three for a checked step, in order"),
    Field("mistakes", "list of tables", "catalogued mistakes ([[steps.mistakes]])"),
)

MISTAKE: tuple[Field, ...] = (
    Field("code", "string", "the wrong answer, as a learner writes it", required=True),
    Field("message", "string", "what is wrong, said without the answer", required=True),
    Field("kind", "string", "the diagnosis's kind (default `known_mistake`)"),
    Field("tensor", "string", "the graded tensor it is a mistake of (default the first)"),
)

TRAINING: tuple[Field, ...] = (
    Field("steps", "integer", "the full run's steps"),
    Field("batch_size", "integer", "examples a step"),
    Field("lr", "number", "the learning rate"),
    Field("lr_after_decay", "number", "the learning rate after `lr_decay_step`"),
    Field("lr_decay_step", "number", "the step the learning rate drops at (a fraction of the "
          "run when below 1)"),
    Field("optimizer", "string", "the function step that updates the parameters"),
    Field("clip_norm", "number", "the gradients' total norm is scaled down to this before "
          "each update (after the gradient check)"),
    Field("n_hidden", "integer", "the hidden layer's size for training"),
    Field("gradcheck_steps", "integer", "the first steps checked against autograd"),
    Field("history_points", "integer", "points of the loss curve kept"),
    Field("samples", "integer", "names sampled after the run"),
    Field("cpu_threads", "integer", "torch threads for the run"),
    Field("forward", "string", "the training forward pass"),
    Field("backward", "string or list of strings", "the earlier steps whose code is the "
          "backward pass, in order, or a driver that calls the learner's functions"),
    Field("loss", "string", "the loss line"),
    Field("functions", "list of strings", "the function steps the driver calls"),
    Field("lecture_train_loss", "number", "the train loss a run is shown beside (the lecture's "
          "published one, or `baseline`'s)"),
    Field("lecture_val_loss", "number", "the validation loss a run is shown beside"),
    Field("baseline", "string", "what those two losses are, the label they are shown under "
          "(default `lecture`)"),
    Field("reference_train_loss", "number", "the reference's train loss for the full run"),
    Field("eval", "table", "[training.eval]: `code` defining evaluate (and calibrate, sample)"),
    Field("picture", "string", "a function step with a [steps.picture], drawn during the run "
          "on the arguments the driver passes it"),
    Field("sizes", "table of numbers", "[training.sizes]: sizes for the training network"),
    Field("adamw", "table of numbers", "[training.adamw]: the adamw optimizer's settings"),
    Field("momentum", "table of numbers", "[training.momentum]: the momentum optimizer's "
          "settings"),
)

# A function step's picture through time ([steps.picture]): a gradient the function carries from
# step to step, which is not one of its outputs, read off the function by calling it on the
# steps after each t alone (tutor/core/functions.py).
PICTURE: tuple[Field, ...] = (
    Field("title", "string", "what is shown at each step, e.g. `dh_t`", required=True),
    Field("carry", "string", "the output that is the gradient of the state the sequence starts "
          "from (`dh0`)", required=True),
    Field("later", "string", "narrows a case's inputs to the steps after `t`, starting from the "
          "state step `t` left", required=True),
    Field("shown", "string", "what is drawn at step `t`, from the case's inputs and `carry` "
          "from the later steps (zeros after the last), e.g. `dhs[:, t] + dh0`", required=True),
    Field("demos", "list of strings", "named variants of the inputs, each drawn by `demo`"),
    Field("demo", "string", "draws one demo's inputs from a generator `g`, its name in `demo`"),
    Field("about", "string", "what the demos show, said above them"),
)

TRAINING_EVAL: tuple[Field, ...] = (
    Field("code", "string", "defines evaluate (and optionally calibrate and sample)",
          required=True),
)


def check(table: object, fields: tuple[Field, ...], where: str) -> None:
    """Refuse a key `fields` does not declare, a required one missing, a value of another type."""
    if not isinstance(table, dict):
        raise SchemaError(f"{where}: must be a table")
    known = {f.name: f for f in fields}
    for key, value in table.items():
        field = known.get(key)
        if field is None:
            close = difflib.get_close_matches(str(key), list(known), n=1)
            guess = f"; did you mean '{close[0]}'?" if close else ""
            allowed = ", ".join(sorted(known)) or "none"
            raise SchemaError(f"{where}: unknown key '{key}'{guess} (allowed: {allowed})")
        if not TYPES[field.type](value):
            raise SchemaError(f"{where}: '{key}' must be a {field.type}")
    for field in fields:
        if field.required and field.name not in table:
            raise SchemaError(f"{where}: missing '{field.name}' ({field.doc})")


def check_pack_toml(meta: dict, where: str = "pack.toml") -> None:
    for key, value in meta.items():
        if key not in PACK_TOML:
            raise SchemaError(f"{where}: unknown table [{key}] (allowed: "
                              f"{', '.join(f'[{k}]' for k in PACK_TOML)})")
        if key == "lesson":
            if not TYPES["table of numbers"](value):
                raise SchemaError(f"{where} [lesson]: every size must be a number")
            continue
        check(value, PACK_TOML[key], f"{where} [{key}]")
    check(meta.get("pack", {}), PACK_TOML["pack"], f"{where} [pack]")
    version = meta["pack"]["schema"]
    if version != VERSION:
        raise SchemaError(f"{where} [pack]: schema {version} is not one this tutor reads "
                          f"(it reads schema {VERSION})")


def check_exercise_file(raw: dict, where: str) -> None:
    for key in raw:
        if key not in ("exercise", "steps", "training"):
            raise SchemaError(f"{where}: unknown table [{key}] (allowed: [exercise], "
                              "[[steps]], [training])")
    check(raw.get("exercise", {}), EXERCISE, f"{where} [exercise]")
    if "steps" in raw and not TYPES["list of tables"](raw["steps"]):
        raise SchemaError(f"{where}: 'steps' must be [[steps]] tables")
    if "training" in raw:
        check(raw["training"], TRAINING, f"{where} [training]")
        if "eval" in raw["training"]:
            check(raw["training"]["eval"], TRAINING_EVAL, f"{where} [training.eval]")


def check_step(raw: dict, kind_fields: tuple[Field, ...], where: str) -> None:
    check(raw, STEP + kind_fields, where)
    if "picture" in raw:
        check(raw["picture"], PICTURE, f"{where} [steps.picture]")
    for i, mistake in enumerate(raw.get("mistakes", []), 1):
        check(mistake, MISTAKE, f"{where} mistake {i}")


def describe(kinds: dict[str, tuple[Field, ...]]) -> str:
    """The schema as Markdown tables, for docs/packs.md; `kinds` maps each kind's word to the
    fields it owns."""
    def table(title: str, fields: tuple[Field, ...]) -> list[str]:
        rows = [f"### {title}", "", "| key | type | required | meaning |", "|---|---|---|---|"]
        rows += [f"| `{f.name}` | {f.type} | {'yes' if f.required else ''} | {f.doc} |"
                 for f in fields]
        return rows + [""]

    out = [f"Schema version {VERSION}. Generated from `tutor/pack/schema.py` and the step kinds' "
           "own fields; loading and `pack check` refuse anything else.", ""]
    for name, fields in PACK_TOML.items():
        if name == "lesson":
            out += ["### `pack.toml` [lesson]", "", "Sizes by name, each a number.", ""]
        else:
            out += table(f"`pack.toml` [{name}]", fields)
    out += table("Exercise file [exercise]", EXERCISE)
    out += table("[[steps]] (every kind)", STEP)
    for word, fields in kinds.items():
        if fields:
            out += table(f"[[steps]] of kind `{word}` (its own fields)", fields)
    out += table("[[steps.mistakes]]", MISTAKE)
    out += table("[steps.picture] (a function step's, optional)", PICTURE)
    out += table("[training]", TRAINING)
    out += table("[training.eval]", TRAINING_EVAL)
    return "\n".join(out).rstrip() + "\n"
