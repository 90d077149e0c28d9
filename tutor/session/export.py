"""The learner's work as a standalone percent-format script that runs with plain torch.

The script rebuilds the same dataset, parameters and batch as the tutor, runs the forward pass,
lets autograd compute its gradients for comparison, then has one `# %% STEP_ID` cell per step
with the learner's accepted code (or the template where the step is not solved yet) followed by a
`# %% [check]` cell with cmp calls. `check --all` reads the step cells and skips the rest.

Last comes exercise 4's training step, once the learner has one (`TrainingCell`): a cell named
by the training step's id (`# %% train/loop`), which `grade` trains as the graded run (a plain
`python` run stops just before it). So the exported file is a whole submission.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tutor.config import Settings
from tutor.pack.flow import gradient
from tutor.pack.model import Pack

# How an exported cell's code came about, by the step's status.
_STATE = {"exact": "exact: your code", "passed": "passed: your code",
          "revealed": "revealed: the reference solution"}

_PRELUDE = '''\
# Backward pass exported from backprop-tutor ({pack_title}).
# Run it with plain PyTorch: `python {filename}`. Check it again with
# `backprop-tutor check --all {filename}`.
# %% [setup]
import math
import random  # noqa: F401 (used by the setup code)
import sys
import warnings
from pathlib import Path

# PyTorch warns when NumPy is not installed; nothing here needs NumPy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

# The data file beside this script, or the one named on the command line.
DATA = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name({data_file!r})
{data_check}
SEED = {seed}
SIZES = {sizes!r}

{setup_code}

data = make_data(DATA.read_text(encoding="utf-8") if DATA.is_file() else None, SIZES)
# The sizes by their lecture names (vocab_size, ...), in scope as in the tutor.
found = {{k: v for k, v in data.items() if k.endswith("_size") and isinstance(v, int)}}
sizes = {{**SIZES, **found}}
globals().update(sizes)
g = torch.Generator().manual_seed(SEED)
params = init_params(g, sizes)
Xb, Yb = sample_batch(*data["train"], {batch_size}, g)
n = batch_size = Xb.shape[0]
for p in params.values():
    p.requires_grad = True
globals().update(params)

# %% [forward]
{forward_code}

# Keep every intermediate gradient so each step can be compared with autograd's.
for name, t in list(globals().items()):
    if isinstance(t, torch.Tensor) and t.requires_grad and not t.is_leaf:
        t.retain_grad()
{loss}.backward()
{forward_extra}

def cmp(label, dt, t):
    """Compare a hand-written gradient with autograd's, as the lecture's notebook does."""
    if not isinstance(dt, torch.Tensor):
        print(f"{{label:15s}} | not done yet")
        return
    if dt.shape != t.grad.shape:
        print(f"{{label:15s}} | shape {{list(dt.shape)}}, expected {{list(t.grad.shape)}}")
        return
    ex = torch.all(dt == t.grad).item()
    app = torch.allclose(dt, t.grad)
    maxdiff = (dt - t.grad).abs().max().item()
    print(f"{{label:15s}} | exact: {{str(ex):5s}} | approximate: {{str(app):5s}} | "
          f"maxdiff: {{maxdiff}}")


# From here on gradients are computed by hand: autograd is not needed.
torch.set_grad_enabled(False)
'''


@dataclass(frozen=True)
class TrainingCell:
    """Exercise 4's code for the script, and where it came from (for the cell's comment)."""

    step_id: str
    code: str
    origin: str


_DATA_CHECK = """if not DATA.is_file():
    sys.exit(f"{DATA.name} is not beside this script: run it as "
             f"`python {Path(__file__).name} path/to/{DATA.name}`")"""


def export_script(pack: Pack, settings: Settings, accepted: dict[str, str],
                  filename: str = "backward.py",
                  statuses: Mapping[str, str] | None = None,
                  training: TrainingCell | None = None) -> str:
    """The script; `statuses` (the store's, by step id) label each cell with how it was done;
    `training` is the training step's cell, when the learner has one."""
    statuses = statuses or {}
    lesson = pack.lesson
    extra = "\n".join(ex.forward.strip() for ex in pack.exercises if ex.forward.strip())
    parts = [
        _PRELUDE.format(
            pack_title=pack.title,
            filename=filename,
            data_file=Path(pack.data_file).name if pack.data_file else "",
            data_check=_DATA_CHECK if pack.data_file else "",
            seed=settings.seed,
            setup_code=pack.setup_code.strip(),
            sizes=pack.sizes,
            batch_size=lesson.get("batch_size", 32),
            forward_code=pack.forward_code.strip(),
            loss=pack.loss,
            forward_extra="# Extra forward lines of the one-expression exercises.\n" + extra
            if extra else "",
        )
    ]
    for step in pack.gradient_steps:
        code = accepted.get(step.id) or _unfinished(step.template)
        code = code.strip("\n")
        state = _STATE.get(statuses.get(step.id, ""), "done") if step.id in accepted \
            else "not done yet: the template"
        given = "".join(
            f"{gradient(name)} = {name}.grad.clone()  # given\n" for name in step.given
        )
        checks = "\n".join(f"cmp({t!r}, {gradient(t)}, {t})" for t in step.checks)
        if step.function:
            checks = (f"# The tutor calls it as `{step.function.call}`, on the lesson's "
                      "tensors and at fresh sizes.")
        parts.append(
            (f"\n# %% [given] {step.id}\n{given}" if given else "")
            + f"\n# %% {step.id}\n# {step.title} ({state})\n{code}\n"
            + f"\n# %% [check] {step.id}\n{checks}\n"
        )
    parts.append(_training_cell(pack, training))
    return "".join(parts)


# A template's line that adds to a gradient with nothing written yet (`dlogits += ...`).
_ADD_NOTHING = re.compile(r"^(\s*)([A-Za-z_]\w*)\s*([-+*/@]=)\s*\.\.\.\s*(#.*)?$")


def _unfinished(template: str) -> str:
    """A step's template as the script runs it: `x += ...` cannot run (Ellipsis does not add),
    so it becomes `x = ...`, which the cell's `cmp` reports as not done yet."""
    return "\n".join(
        _ADD_NOTHING.sub(lambda m: f"{m[1]}{m[2]} = ...  # {m[2]} {m[3]} ...: not done yet",
                         line) for line in template.split("\n"))


def _training_cell(pack: Pack, training: TrainingCell | None) -> str:
    step = next((s for s in pack.steps if s.kind.trained), None)
    if step is None:
        return ""
    if training is None:
        return (f"\n# Exercise {step.exercise} ({step.id}) is not here yet: train on your "
                "backward pass with `backprop-tutor train`\n# (or on the tutor's training "
                "screen), then export again.\n")
    # A plain run stops before the training step: its code reads the training run's own sizes
    # and state (a GPT's layers, say), which only `train` and `grade` set up.
    stop = (f"\n# %% [stop] {training.step_id}\n"
            f"print('{training.step_id} is trained by `backprop-tutor train` and `grade`, not "
            "by this script')\nsys.exit(0)\n")
    return (f"{stop}\n# %% {training.step_id}\n# {step.title} ({training.origin})\n"
            f"{training.code.strip(chr(10))}\n")
