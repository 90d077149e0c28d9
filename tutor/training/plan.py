"""Exercise 4 as text: the settings, the training step assembled from the learner's accepted
code, notes about that code, and keeping a finished run. Used by the UI and the CLI, so nothing
here imports torch.
"""


from __future__ import annotations

import ast
import math
import textwrap
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, field

from tutor.code_facts import carried, read, written
from tutor.config import DEFAULT_SEED
from tutor.pack.flow import gradient, tensor_of
from tutor.pack.model import Exercise, Pack, Step
from tutor.values.durations import spaced

# --- settings ------------------------------------------------------------------------------


def training_exercise(pack: Pack) -> Exercise:
    for ex in pack.exercises:
        if ex.kind.trained:
            return ex
    raise KeyError("this pack has no training exercise")


def training_step(pack: Pack) -> Step:
    return training_exercise(pack).steps[0]


def _decay_step(value: int | float, total: int) -> int:
    """Where the rate drops: a step number, or a fraction of the run (0.75: the last quarter at
    the lower rate), which then follows `--steps`."""
    if isinstance(value, float) and 0 < value < 1:
        return int(value * total)
    return int(value)


def _size(cfg: dict, lesson: dict, name: str) -> int | None:
    """A size of the training run: [training.sizes], then [training], then the lesson's."""
    for table in (cfg.get("sizes") or {}, cfg, lesson):
        value = table.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _loss_line(pack: Pack, cfg: dict) -> str:
    """The line that computes the run's loss: the pack's `loss`, else the line of its own
    forward pass (a pack whose driver calls the learner's functions), else the plain one."""
    if isinstance(cfg.get("loss"), str):
        return cfg["loss"]
    forward = str(cfg.get("forward", ""))
    try:
        body = ast.parse(forward).body
    except SyntaxError:
        body = []
    mine = [ast.get_source_segment(forward, stmt) or "" for stmt in body
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == pack.loss]
    # One line, as the setting is written: a statement the pack wraps is joined again.
    return (" ".join(part.strip() for part in mine[-1].splitlines()) if mine else
            f"{pack.loss} = F.cross_entropy(logits, Yb)")


@dataclass(frozen=True)
class TrainingSettings:
    """Everything that decides a run's numbers; stored with the run so it can be repeated."""

    parameters: tuple[str, ...]  # in the order the pack's training step checks them
    # The run's sizes by these names where the pack has them (its [training.sizes] first), else
    # None: the GPT has no n_hidden, and an LSTM's batch is as long as its longest name.
    n_embd: int | None
    n_hidden: int | None
    block_size: int | None
    batch_size: int
    steps: int
    lr: float
    lr_decay_step: int
    lr_after_decay: float
    gradcheck_steps: int
    samples: int
    seed: int
    history_points: int
    cpu_threads: int
    backward: tuple[str, ...]
    loss_line: str
    lecture_train_loss: float | None
    lecture_val_loss: float | None
    # The reference solutions' calibrated training loss after the pack's own full run, at the
    # default seed: the bar such a run must reach (runs.exercise_verdict). Other runs train the
    # reference for their own steps instead.
    reference_train_loss: float | None = None
    # A pack whose network is assembled from function steps (the GPT's n layers) gives its own
    # forward pass and a backward driver that calls the learner's functions, instead of a list
    # of steps whose code is pasted in order.
    functions: tuple[str, ...] = ()
    forward_code: str = ""
    driver: str = ""
    # The update: plain gradient descent, or the learner's own function (a function step) with
    # the pack's hyper-parameters, called as f(p, dp, m, v, t, lr, *optimizer_args.values()).
    optimizer: str = ""
    optimizer_args: dict = field(default_factory=dict)
    # Gradient-norm clipping before each update (0: none): all gradients scaled together so
    # that their total norm is at most this. Applied to what the update receives, after the
    # gradient check has compared the learner's gradients as they were computed.
    clip_norm: float = 0.0
    # A function step whose [steps.picture] is drawn during the run (tutor/training/picture.py)
    picture: str = ""
    sizes: dict = field(default_factory=dict)  # sizes the training run changes from the lesson
    # The steps of the pack's full run, the one the lecture's losses come from: a shorter run
    # is shown beside them with that count, so that nobody reads them as its own bar.
    lecture_steps: int = 0

    @classmethod
    def from_pack(
        cls,
        pack: Pack,
        seed: int = DEFAULT_SEED,
        steps: int | None = None,
        gradcheck_steps: int | None = None,
    ) -> TrainingSettings:
        ex = training_exercise(pack)
        cfg, lesson = ex.settings, pack.lesson
        total = int(steps if steps is not None else cfg.get("steps", 200_000))
        if total < 1:
            raise ValueError("a training run needs at least one step")
        if gradcheck_steps is None:
            gradcheck_steps = int(cfg.get("gradcheck_steps", 100))
        for key, value in (cfg.get("sizes") or {}).items():
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"[training.sizes] {key} must be a whole number, not "
                                 f"{type(value).__name__}")
        return cls(
            parameters=tuple(ex.steps[0].checks),
            n_embd=_size(cfg, lesson, "n_embd"),
            n_hidden=_size(cfg, lesson, "n_hidden"),
            block_size=_size(cfg, lesson, "block_size"),
            batch_size=int(cfg.get("batch_size", lesson.get("batch_size", 32))),
            steps=total,
            lr=float(cfg.get("lr", 0.1)),
            lr_decay_step=_decay_step(cfg.get("lr_decay_step", total), total),
            lr_after_decay=float(cfg.get("lr_after_decay", cfg.get("lr", 0.1))),
            gradcheck_steps=max(0, min(gradcheck_steps, total)),
            samples=int(cfg.get("samples", 20)),
            seed=int(seed),
            history_points=int(cfg.get("history_points", 400)),
            cpu_threads=int(cfg.get("cpu_threads", 0)),
            backward=tuple(b for b in cfg.get("backward", []) if isinstance(b, str))
            if not isinstance(cfg.get("backward"), str) else (),
            loss_line=_loss_line(pack, cfg),
            lecture_train_loss=cfg.get("lecture_train_loss"),
            lecture_val_loss=cfg.get("lecture_val_loss"),
            reference_train_loss=cfg.get("reference_train_loss"),
            lecture_steps=int(cfg.get("steps", 200_000)),
            functions=tuple(cfg.get("functions", [])),
            forward_code=str(cfg.get("forward", "")).strip("\n"),
            driver=str(cfg["backward"]).strip("\n") if isinstance(cfg.get("backward"), str)
            else "",
            optimizer=str(cfg.get("optimizer", "")),
            optimizer_args=dict(cfg.get(str(cfg.get("optimizer", "")).removesuffix("_update"),
                                        {})) if cfg.get("optimizer") else {},
            clip_norm=float(cfg.get("clip_norm", 0.0)),
            picture=str(cfg.get("picture", "")),
            sizes={**{k: cfg[k] for k in lesson if k in cfg and not isinstance(cfg[k], dict)
                      and k not in ("batch_size", "heldout_batch_size")},
                   **cfg.get("sizes", {})},
        )

    def lr_at(self, step: int) -> float:
        return self.lr if step < self.lr_decay_step else self.lr_after_decay

    @property
    def grad_names(self) -> tuple[str, ...]:
        return tuple(gradient(p) for p in self.parameters)

    @property
    def history_every(self) -> int:
        """Steps averaged into one point of the stored loss curve."""
        return max(1, math.ceil(self.steps / max(1, self.history_points)))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["parameters"], d["backward"] = list(self.parameters), list(self.backward)
        d["functions"] = list(self.functions)
        return d

    @property
    def assembled(self) -> bool:
        """Whether the backward pass is the pack's driver calling the learner's functions."""
        return bool(self.driver)


# --- the editor's code ---------------------------------------------------------------------


@dataclass(frozen=True)
class Section:
    """One earlier step's backward code, as it goes into the training step."""

    step: Step
    code: str
    yours: bool  # the learner's accepted code, or else the pack's reference solution


def backward_sections(pack: Pack, accepted: Mapping[str, str] | None) -> list[Section]:
    """The backward pass, step by step: accepted code where there is some, else the reference.

    `accepted` is the store's step id -> code map (revealed steps already map to the solution);
    None means "all references" (the --reference run).
    """
    sections = []
    s = TrainingSettings.from_pack(pack)
    for sid in s.functions if s.assembled else s.backward:
        step = pack.step(sid)
        code = (accepted or {}).get(step.id)
        yours = code is not None and accepted is not None
        if yours or step.has_solution:
            text = (code if yours else step.solution).strip()
        else:  # a student's copy of the pack has no reference to stand in (pack/student.py)
            text = f"# {step.id}: not solved yet, and this copy of the lesson has no reference"
        sections.append(Section(step, text, yours))
    return sections


def without_reference(pack: Pack, accepted: Mapping[str, str] | None) -> list[str]:
    """The steps the training code needs that neither the learner solved nor the pack can stand
    in for (a student's copy has no references): what must be solved before training."""
    return [sec.step.id for sec in backward_sections(pack, accepted)
            if not sec.yours and not sec.step.has_solution]


def names_read(code: str) -> set[str]:
    """Every plain name the code loads (so a forward tensor it needs must be computed first)."""
    return read(ast.parse(code))


def forward_for(pack: Pack, backward: str, loss_line: str) -> list[str]:
    """The pack's forward lines that the backward pass and the loss line read, in order.

    Everything between logits and the loss (counts, probs, logprobs ...) only matters to a
    backward pass that goes through it; with dlogits fused none does, so those lines are left
    out and the loss comes from `loss_line`. A learner whose code still reads one of them gets it.
    """
    needed = names_read(backward) | names_read(loss_line)
    lines = [line for line in pack.forward_lines if line.target != pack.loss]
    kept = []
    for line in reversed(lines):
        if line.target in needed:
            kept.append(line)
            needed |= set(line.operands)
    return [line.source for line in reversed(kept)]


HEADER_START = "# One training step, run "


def with_header(code: str, s: TrainingSettings) -> str:
    """`code` with its opening comment (the header `training_code` writes) saying the run `s`
    describes, so the comment never names another step count than the run will train. Code
    that does not open with that header is left as it is."""
    if not code.startswith(HEADER_START):
        return code
    lines = code.split("\n")
    end = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    return "\n".join([_header(s), *lines[end:]])


def _header(s: TrainingSettings) -> str:
    if s.optimizer:
        args = ", ".join(f"{k}={v:g}" for k, v in s.optimizer_args.items())
        update = [f"# After it: {s.optimizer}(p, dp, m, v, t, lr, {args})",
                  "#   updates each parameter p (m and v start at zero, t counts from 1),"]
    else:
        update = ["# After it: each parameter p moves by -lr * dp,"]
    if s.clip_norm:
        update.insert(0, f"# The gradients are first scaled down together to a total norm of at "
                         f"most {s.clip_norm:g}.")
    grads = ", ".join(s.grad_names)
    return "\n".join([
        f"{HEADER_START}{spaced(s.steps)} times, with no autograd anywhere.",
        f"# Before it: a seeded batch Xb, Yb of n = {s.batch_size} examples.",
        *update,
        f"#   lr = {s.lr:g}, then {s.lr_after_decay:g} from step {spaced(s.lr_decay_step)}.",
        *textwrap.wrap(f"Leave loss and {grads} defined.", 96, initial_indent="# ",
                       subsequent_indent="#   "),
    ])


def training_code(pack: Pack, accepted: Mapping[str, str] | None = None,
                  steps: int | None = None, revealed: Collection[str] = (),
                  origins: Mapping[str, str] | None = None) -> str:
    """The text of the exercise-4 editor: forward lines, then the learner's backward pass.

    `accepted` maps step ids to accepted code (the store's accepted_codes()); None assembles
    the reference solutions. `steps` only changes the count the header mentions; `revealed`
    names the steps whose accepted code is the reference solution the learner was shown;
    `origins` says where other steps' code comes from, in its comment (a step broken on purpose).
    """
    s = TrainingSettings.from_pack(pack, steps=steps)
    sections = backward_sections(pack, accepted)

    def origin(sec: Section) -> str:
        if origins and sec.step.id in origins:
            return origins[sec.step.id]
        if not sec.yours:
            return "reference solution"
        return "revealed solution" if sec.step.id in revealed else "your code"

    if s.assembled:
        parts = [_header(s), "", "# your functions"]
        for sec in sections:
            parts += [f"# {sec.step.title} (exercise {sec.step.exercise}, {origin(sec)})",
                      sec.code, ""]
        parts += ["# forward pass", s.forward_code, "", "# backward pass, from your functions",
                  s.driver]
        return "\n".join(parts) + "\n"
    backward = "\n".join(sec.code for sec in sections)
    forward = forward_for(pack, backward, s.loss_line)
    parts = [_header(s), "", "# forward pass", *forward, s.loss_line, "", "# backward pass"]
    for sec in sections:
        parts.append(f"# {sec.step.title} (exercise {sec.step.exercise}, {origin(sec)})")
        parts.append(sec.code)
    return "\n".join(parts) + "\n"


# --- notes about the code ------------------------------------------------------------------


# A loop over these sizes is the network's structure (one pass per layer), not a loop that one
# tensor operation could replace.
STRUCTURAL_SIZES = {"n_layer"}


def _structural(loop: ast.For | ast.While) -> bool:
    return isinstance(loop, ast.For) and any(
        isinstance(n, ast.Name) and n.id in STRUCTURAL_SIZES for n in ast.walk(loop.iter))


def _loops(body: list[ast.stmt]) -> Iterator[ast.For | ast.While]:
    """The outermost loops of a block (a loop inside a loop is reported with its parent); a loop
    over the layers is looked into, not reported."""
    for stmt in body:
        if isinstance(stmt, (ast.For, ast.While)) and _structural(stmt):
            yield from _loops(stmt.body)
        elif isinstance(stmt, (ast.For, ast.While)):
            yield stmt
        else:
            for child in ast.iter_child_nodes(stmt):
                if isinstance(child, ast.stmt):
                    yield from _loops([child])


def python_loops(code: str) -> list[dict]:
    """Each outermost Python loop: its line, the gradients it computes and what each pass hands
    to the next (`carried`: empty unless the loop is a recurrence)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    return [
        {"line": loop.lineno, "kind": "for" if isinstance(loop, ast.For) else "while",
         "gradients": sorted(n for n in written(loop) if tensor_of(n) is not None),
         "carried": sorted(carried(loop))}
        for loop in _loops(tree.body)
    ]


def speed_notes(code: str) -> list[str]:
    """What in the code will make training slow, said without rewriting it.

    A recurrence (a loop whose every pass needs the one before, as through time) is left
    without a note: it cannot be done without the loop, so the note's challenge would be wrong.
    """
    notes = []
    for loop in python_loops(code):
        if loop["carried"]:
            continue
        what = (f"{', '.join(loop['gradients'])} is computed in a Python {loop['kind']} loop"
                if loop["gradients"] else f"a Python {loop['kind']} loop runs on every step")
        notes.append(
            f"line {loop['line']}: {what}. It runs as written, but every pass through the loop "
            "is a separate small tensor operation, and they add up over every training step. "
            "Bonus challenge: compute it without a loop, in one or two tensor operations."
        )
    try:
        calls = [n for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name) and n.func.id == "print"]
    except SyntaxError:
        calls = []
    if calls:
        notes.append(
            f"line {calls[0].lineno}: print() runs on every training step; only the start of "
            "its output is kept."
        )
    return notes
