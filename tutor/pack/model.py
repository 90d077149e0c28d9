"""Exercise packs: the lesson as data (TOML), loaded and validated without importing torch.

A pack is a folder with `pack.toml` (setup code, the forward pass, lesson sizes) and one TOML file
per exercise. The format is documented in `docs/packs.md`.
"""

from __future__ import annotations

import ast
import math
import re
import sys
import textwrap
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

from tutor.pack import cache as packcache
from tutor.pack import kinds as stepkinds
from tutor.pack import schema
from tutor.pack.flow import Flow
from tutor.pack.kinds import LineGradient, StepKind
from tutor.values.records import FrozenRecord

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the tutor package
# Installed wheels carry the content inside the package; a checkout has it at the top level.
_BUNDLED = PACKAGE_DIR / "_bundled"
_CHECKOUT = PACKAGE_DIR.parent


def exercises_dir() -> Path:
    bundled = _BUNDLED / "exercises"
    return bundled if bundled.is_dir() else _CHECKOUT / "exercises"


def data_dir() -> Path:
    bundled = _BUNDLED / "data"
    return bundled if bundled.is_dir() else _CHECKOUT / "data"


# Entries of [lesson] that size the batches; every other number there sizes the network.
DEFAULT_PACK = "makemore"  # the lesson that opens when the learner names none

BATCH_KEYS = ("batch_size", "heldout_batch_size")
# What a run's losses are shown beside when the pack's [training] names no `baseline`.
DEFAULT_BASELINE = "lecture"


class PackError(ValueError):
    """A pack file is missing, malformed or inconsistent."""


@dataclass(repr=False, eq=False)
class Mistake(FrozenRecord):
    """A common wrong answer, recognised by comparing the learner's values with its values."""

    code: str
    message: str
    kind: str = "known_mistake"
    tensor: str | None = None  # which checked tensor it concerns; None means the first


@dataclass(repr=False, eq=False)
class ForwardLine(FrozenRecord):
    """One line of forward code, with the name it assigns and the names it reads."""

    index: int
    source: str
    target: str
    operands: tuple[str, ...]
    exercise: int  # 0 for the pack's own forward pass, else the exercise that adds it


@dataclass(repr=False, eq=False)
class Step(FrozenRecord):
    id: str
    exercise: int
    title: str
    lines: tuple[str, ...]  # targets of the forward lines this step differentiates
    checks: tuple[str, ...]  # tensors whose gradients are graded here
    partials: tuple[str, ...]  # tensors whose first branch is started here, graded later
    template: str
    solution: str
    explanation: str
    hints: tuple[str, ...]
    mistakes: tuple[Mistake, ...] = ()
    target: str = "loss"
    upstream: str | None = None
    given: tuple[str, ...] = ()
    replay: bool = True
    kind: StepKind = field(default_factory=LineGradient)  # read from the pack's word once
    figure: str | None = None  # a gradient worth showing as a picture once the step is solved
    function: FunctionSpec | None = None  # for a function step: how it is called and graded
    points: float = 1  # what the step is worth when a course grades it (`grade`)

    @property
    def has_solution(self) -> bool:
        """False in a student's copy of the pack, which holds no answers."""
        return bool(self.solution.strip())

    @property
    def graded_names(self) -> tuple[str, ...]:
        """The names a check grades, as the learner writes them: `d<tensor>` for a gradient
        step, the call's own outputs (`dinp`, or `param` updated in place) for a function."""
        return self.kind.graded_names(self)


@dataclass(repr=False, eq=False)
class Picture(FrozenRecord):
    """A function step's picture through time ([steps.picture], docs/packs.md): a gradient the
    learner's loop carries from step to step (`dh_t`) is no output of the function, so it is
    read off the function as the loop uses it: called on the steps after `t` alone, the
    function's `carry` output is what those steps send back, and `shown` adds the step's own
    share. `demos` are inputs drawn to show what the carried gradient does (a forget gate
    pinned shut or open)."""

    title: str  # `dh_t`
    carry: str  # the output carrying the gradient back to the starting state: `dh0`
    later: str  # code: the inputs narrowed to the steps after `t`
    shown: str  # an expression: what is drawn at step `t`
    demos: tuple[str, ...] = ()
    demo: str = ""  # code: one demo's inputs, drawn from `g`, its name in `demo`
    about: str = ""  # what the demos show, said above them


@dataclass(repr=False, eq=False)
class FunctionSpec(FrozenRecord):
    """A function step: the learner writes a whole function (llm.c's `layernorm_backward`), and
    it is called on the lesson's tensors and then on inputs of freshly drawn sizes.

    `lesson`, `draw` and `expect` are the pack's trusted code: the first builds the call's inputs
    from the lesson's batch, the second draws inputs at new sizes from a generator `g`, the third
    computes the expected outputs from any inputs (with autograd, or torch.optim).
    """

    name: str  # the function the learner defines
    call: str  # how it is called: `dinp, dweight, dbias = layernorm_backward(dout, inp, ...)`
    arguments: tuple[str, ...]
    outputs: tuple[str, ...]  # the names the call assigns; empty for an in-place update
    lesson: str
    draw: str
    expect: str
    # An output with a time axis and which axis that is (`dxs[:, t]`: dxs, 1): a wrong one is
    # compared one time step at a time, to show where a loop through time goes wrong.
    time: tuple[str, int] | None = None
    picture: Picture | None = None
    # The forward code the function differentiates as `list` and `show` give it, where the
    # lesson's lines are not it (a loop through time); empty: the step's lines.
    forward: str = ""


@dataclass(repr=False, eq=False)
class Exercise(FrozenRecord):
    number: int
    title: str
    intro: str
    forward: str
    kind: StepKind  # its steps' kind unless a step names its own
    steps: tuple[Step, ...]
    settings: dict = field(default_factory=dict)
    # The exercises whose every step must be done before this one's first step opens; by
    # default every earlier exercise (docs/packs.md).
    requires: tuple[int, ...] = ()


@dataclass(repr=False, eq=False)
class NotebookReading(FrozenRecord):
    """How a learner's own notebook of the lesson reads, as far as the pack's code does not say
    it (pack.toml [notebook], docs/packs.md): the names of the notebook's own data and setup,
    which the tutor's stand in for; names notebooks commonly give the lesson's tensors; and the
    comparison helpers they call."""

    setup: frozenset[str] = frozenset()
    aliases: dict = field(default_factory=dict)
    compare: tuple[str, ...] = ("cmp",)


@dataclass(repr=False, eq=False)
class Pack(FrozenRecord):
    id: str
    title: str
    root: Path
    data_file: Path | None
    lesson: dict
    setup_code: str
    forward_code: str
    loss: str
    exercises: tuple[Exercise, ...]
    description: str = ""  # what the learner will do, for the welcome page (Markdown)
    notebook: NotebookReading = field(default_factory=NotebookReading)

    @cached_property  # made once: every lookup of a step goes through it
    def steps(self) -> tuple[Step, ...]:
        return tuple(s for ex in self.exercises for s in ex.steps)

    @cached_property  # made once: cutting, checking and training all ask it
    def flow(self) -> Flow:
        """Who starts, adds to and completes each gradient, step by step (tutor/pack/flow.py)."""
        return Flow(self.steps)

    @property
    def sizes(self) -> dict[str, int | float]:
        """The network's sizes by the pack's names: [lesson] without the batch sizes."""
        return {k: v for k, v in self.lesson.items()
                if k not in BATCH_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)}

    @property
    def folders(self) -> tuple[str, ...]:
        """Where the lesson's files are: all a process that runs its code needs to read
        (tutor/sandbox/confine.py, `confine_lesson`)."""
        found = [self.root, data_dir()]
        if self.data_file is not None:
            found.append(self.data_file.parent)
        return tuple(dict.fromkeys(str(p.resolve()) for p in found if p.exists()))

    @property
    def gradient_steps(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.kind.checked)

    def step(self, step_id: str) -> Step:
        return self.steps[self.index(step_id)]

    def index(self, step_id: str) -> int:
        """Position of a step, by id, by 1-based number or by an unambiguous id suffix."""
        ids = [s.id for s in self.steps]
        if step_id in ids:
            return ids.index(step_id)
        if step_id.isdigit() and 1 <= int(step_id) <= len(ids):
            return int(step_id) - 1
        matches = [i for i, sid in enumerate(ids) if sid.split("/", 1)[-1] == step_id]
        if len(matches) == 1:
            return matches[0]
        raise KeyError(step_id)

    @property
    def baseline(self) -> str:
        """What the training exercise's reference losses (`lecture_train_loss`, ...) are, as
        the label they are shown under: the lecture's own run by default, or what the pack
        says they come from (another lesson's network, when this one has no lecture)."""
        for ex in self.exercises:
            if ex.kind.trained:
                return str(ex.settings.get("baseline") or DEFAULT_BASELINE)
        return DEFAULT_BASELINE

    def exercise(self, number: int) -> Exercise:
        for ex in self.exercises:
            if ex.number == number:
                return ex
        raise KeyError(number)

    @cached_property  # parsed once: the screens ask for it on every refresh
    def forward_lines(self) -> tuple[ForwardLine, ...]:
        """The pack's forward pass followed by each exercise's extra lines, as executed."""
        lines: list[ForwardLine] = []
        for number, code in [(0, self.forward_code)] + [
            (ex.number, ex.forward) for ex in self.exercises if ex.forward.strip()
        ]:
            for src in code.strip().splitlines():
                if src.strip() and not src.strip().startswith("#"):
                    lines.append(_parse_line(len(lines), src, number))
        return tuple(lines)

    def shown_forward(self, step: Step) -> list[str]:
        """The forward code a step differentiates, as the lesson shows it: a function step's own
        `forward` where it has one (a loop through time), else its lines' sources."""
        if step.function is not None and step.function.forward:
            return step.function.forward.splitlines()
        return [self.line_for(t).source for t in step.lines]

    def line_for(self, target: str) -> ForwardLine:
        for line in self.forward_lines:
            if line.target == target:
                return line
        raise KeyError(target)


def _parse_line(index: int, source: str, exercise: int) -> ForwardLine:
    try:
        tree = ast.parse(source.strip())
    except SyntaxError as exc:
        raise PackError(f"forward line {source!r} is not valid Python: {exc.msg}") from exc
    stmt = tree.body[0] if tree.body else None
    if not isinstance(stmt, ast.Assign) or not isinstance(stmt.targets[0], ast.Name):
        raise PackError(f"forward line {source!r} must assign one name")
    target = stmt.targets[0].id
    names: list[str] = []
    for node in ast.walk(stmt.value):
        if isinstance(node, ast.Name) and node.id not in names:
            names.append(node.id)
    return ForwardLine(index, source.strip(), target, tuple(names), exercise)


# Lines that start a block of their own in Markdown, so they never continue the line above.
_BLOCK_START = re.compile(r"\s*(?:[-*+]\s|\d+[.)]\s|#{1,6}\s|>|\|)")
_FENCE = re.compile(r"\s*(```|~~~)")
# Lines that are whole on their own: a heading, a table row.
_SINGLE = re.compile(r"\s*(?:#{1,6}\s|\|)")


def unwrap(text: str) -> str:
    """Prose with its hard line breaks joined: one line per paragraph and per list item.

    Pack files wrap their prose at a hundred columns so they read well in an editor; shown
    anywhere else those breaks land mid-sentence. Blank lines, list items, headings, quotes,
    tables, fenced code and indented code (after a blank line, as in Markdown) stay as written.
    """
    out: list[str] = []
    fence: str | None = None  # the marker of the fenced code block we are in, if any
    joinable = False  # whether the last line kept is prose that the next line may continue
    for line in text.splitlines():
        stripped = line.strip()
        opening = _FENCE.match(line)
        if fence or opening:
            if fence is None:
                fence = opening[1]
            elif stripped.startswith(fence):
                fence = None
            out.append(line.rstrip())
            joinable = False
        elif not stripped:
            out.append("")
            joinable = False
        elif joinable and not _BLOCK_START.match(line):
            out[-1] += " " + stripped
        else:
            code = not joinable and line.startswith("    ")  # Markdown's indented code
            out.append(line.rstrip())
            joinable = not (code or _SINGLE.match(line))
    return "\n".join(out).strip("\n")


def _text(table: dict, key: str, where: str, default: str | None = None) -> str:
    value = table.get(key, default)
    if not isinstance(value, str):
        raise PackError(f"{where}: '{key}' must be a string")
    return value.strip("\n")


def _names(table: dict, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PackError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _schema(check, *args) -> None:
    """Run one of schema's checks; what it refuses is a PackError with the same words."""
    try:
        check(*args)
    except schema.SchemaError as exc:
        raise PackError(str(exc)) from None


# A pack file is a few tens of KB; a file far past this is not one (a device, a dump).
MAX_PACK_FILE = 4 * 2**20
# Characters a terminal obeys rather than shows (C0 but tab and newline, DEL, C1, bidi
# controls): a pack's text is printed by every command, so none may hold them.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                       "\u2066-\u2069]")


def _inside(root: Path, name: object, what: str) -> Path:
    """The file a pack names (`exercises`, `data`), which must be a plain relative path to a
    file inside the pack's own folder: a pack from elsewhere never reads this computer's other
    files (`../../.ssh/id_rsa`, `/dev/zero`)."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise PackError(f"pack.toml: {what} must name a file in the pack's folder")
    path = Path(name)
    full = root / path
    if path.is_absolute() or ".." in path.parts or (
            full.exists() and not full.resolve().is_relative_to(root.resolve())):
        # A link counts where it leads.
        raise PackError(f"pack.toml: {what} {name!r} is outside the pack's folder; a pack "
                        "names only files in its own folder")
    return full


def _read_pack_file(path: Path) -> bytes:
    """A pack file's bytes, from a regular file within MAX_PACK_FILE; a link out of the pack's
    folder, a device or a pipe is refused before anything is read."""
    import os
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError as exc:
        raise PackError(f"missing pack file: {path}") from exc
    except OSError as exc:
        raise PackError(f"cannot read pack file {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PackError(f"{path.name} is not a regular file (a device, a pipe?)")
        if st.st_size > MAX_PACK_FILE:
            raise PackError(f"{path.name} is {st.st_size // 2**20} MB; a pack file is far "
                            "smaller")
        return fh.read(MAX_PACK_FILE + 1)


def _plain_text(tables: object, where: str) -> None:
    """Refuse a pack whose text holds a character a terminal would obey (an escape sequence
    in a title, a hint or a mistake's message would reach every learner's screen)."""
    stack = [tables]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and (found := _CONTROLS.search(value)):
            raise PackError(f"{where}: the text {value[:40]!r} holds a control character "
                            f"(U+{ord(found.group()):04X}) that a terminal would obey; a "
                            "pack's text is shown to learners as it is")


def _load_toml(path: Path) -> dict:
    content = _read_pack_file(path)
    tables = packcache.recall(content)
    if tables is not None:
        return tables
    if sys.version_info >= (3, 11):  # imported only when a file has to be parsed
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    try:
        tables = tomllib.loads(content.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PackError(f"{path.name}: {exc}") from exc
    _plain_text(tables, path.name)
    packcache.keep(content, tables)
    return tables


def _kind(word: object, where: str, lines: tuple[str, ...] = (),
          added: frozenset[str] = frozenset()) -> StepKind:
    """A pack's `kind` word as the kind it names (tutor/pack/kinds.py)."""
    try:
        return stepkinds.parse(word, lines, added)
    except ValueError as exc:
        raise PackError(f"{where}: {exc}") from None


def _load_step(raw: dict, exercise: int, where: str, kind: object,
               added: frozenset[str]) -> Step:
    sid = _text(raw, "id", where)
    where = f"{where} step {sid}"
    owned = stepkinds.KINDS.get(raw.get("kind", kind), stepkinds.LineGradient).fields
    _schema(schema.check_step, raw, owned, where)
    mistakes = tuple(
        Mistake(
            code=_text(m, "code", f"{where} mistake"),
            message=unwrap(_text(m, "message", f"{where} mistake")),
            kind=m.get("kind", "known_mistake"),
            tensor=m.get("tensor"),
        )
        for m in raw.get("mistakes", [])
    )
    hints = _names(raw, "hints", where)
    lines = _names(raw, "lines", where)
    step_kind = _kind(raw.get("kind", kind), where, lines, added)
    return Step(
        id=sid,
        exercise=exercise,
        title=_text(raw, "title", where),
        lines=lines,
        checks=_names(raw, "checks", where),
        partials=_names(raw, "partials", where),
        template=_text(raw, "template", where, "").strip() + "\n",
        solution=_text(raw, "solution", where, "").strip() + "\n",
        # Kept as written: it is Markdown, which joins its own lines wherever it is rendered,
        # and the pack's content rules measure it in those lines. `show` unwraps it.
        explanation=_text(raw, "explanation", where, "").strip(),
        hints=tuple(unwrap(h) for h in hints),
        mistakes=mistakes,
        target=raw.get("target", "loss"),
        upstream=raw.get("upstream"),
        given=_names(raw, "given", where),
        replay=bool(raw.get("replay", True)),
        kind=step_kind,
        figure=raw.get("figure"),
        function=_function_spec(raw, where) if isinstance(step_kind, stepkinds.Function)
        else None,
        points=_points(raw, where),
    )


def _points(raw: dict, where: str) -> float:
    """A step's `points` (default 1): a positive, finite number."""
    value = raw.get("points", 1)
    # bool is an int to Python, but `points = true` is a slip, not a weight.
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value <= 0):
        raise PackError(f"{where}: 'points' must be a positive number")
    return value


def _function_spec(raw: dict, where: str) -> FunctionSpec:
    call = _text(raw, "call", where)
    try:
        stmt = ast.parse(call.strip()).body[0]
    except (SyntaxError, IndexError) as exc:
        raise PackError(f"{where}: 'call' is not one Python statement") from exc
    value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
            and all(isinstance(a, ast.Name) for a in value.args) and not value.keywords):
        raise PackError(f"{where}: 'call' must call one function with plain names as "
                        "arguments, like `dx = f(dout, x)`")
    outputs: tuple[str, ...] = ()
    if isinstance(stmt, ast.Assign):
        target = stmt.targets[0]
        items = target.elts if isinstance(target, ast.Tuple) else [target]
        if len(stmt.targets) != 1 or not all(isinstance(t, ast.Name) for t in items):
            raise PackError(f"{where}: 'call' must assign plain names")
        outputs = tuple(t.id for t in items)  # type: ignore[attr-defined]
    return FunctionSpec(
        name=value.func.id,
        call=call.strip(),
        arguments=tuple(a.id for a in value.args),  # type: ignore[attr-defined]
        outputs=outputs,
        lesson=_text(raw, "lesson", where),
        draw=_text(raw, "draw", where),
        expect=_text(raw, "expect", where),
        time=_time_axis(raw, outputs, where),
        picture=_picture(raw, outputs, where) if raw.get("time") else _no_picture(raw, where),
        forward=_shown_forward(raw, where),
    )


def _shown_forward(raw: dict, where: str) -> str:
    text = textwrap.dedent(_text(raw, "forward", where, "")).strip("\n")
    try:
        compile(text, f"<{where} forward>", "exec")
    except SyntaxError as exc:
        raise PackError(f"{where}: 'forward' is not valid Python: {exc.msg}") from None
    return text


def _no_picture(raw: dict, where: str) -> None:
    if "picture" in raw:
        raise PackError(f"{where}: a [steps.picture] needs the step's 'time' (the output with "
                        "a time axis that says how many steps there are)")


def _picture(raw: dict, outputs: tuple[str, ...], where: str) -> Picture | None:
    table = raw.get("picture")
    if table is None:
        return None
    where = f"{where} [steps.picture]"
    carry = _text(table, "carry", where)
    if carry not in outputs:
        raise PackError(f"{where}: 'carry' names {carry}, which is not one of the call's "
                        f"outputs ({', '.join(outputs) or 'none'})")
    demos = _names(table, "demos", where)
    if demos and not table.get("demo"):
        raise PackError(f"{where}: 'demos' needs the 'demo' code that draws them")
    for key in ("later", "demo"):
        try:
            compile(table.get(key, ""), f"<{where} {key}>", "exec")
        except SyntaxError as exc:
            raise PackError(f"{where}: '{key}' is not valid Python: {exc.msg}") from None
    try:
        compile(_text(table, "shown", where), f"<{where} shown>", "eval")
    except SyntaxError:
        raise PackError(f"{where}: 'shown' must be one expression") from None
    return Picture(title=_text(table, "title", where), carry=carry,
                   later=_text(table, "later", where), shown=_text(table, "shown", where).strip(),
                   demos=demos, demo=_text(table, "demo", where, ""),
                   about=unwrap(_text(table, "about", where, "").strip()))


def _time_axis(raw: dict, outputs: tuple[str, ...], where: str) -> tuple[str, int] | None:
    """A function step's `time`: an output's slice at one time step, `dxs[:, t]`, read as the
    output and the position of `t` among its axes (every other axis a plain `:`)."""
    text = raw.get("time")
    if text is None:
        return None
    shape = (f"{where}: 'time' must be one of the call's outputs sliced at `t` on one axis and "
             f"`:` on the axes before it, like `dxs[:, t]`")
    try:
        node = ast.parse(str(text).strip(), mode="eval").body
    except SyntaxError:
        raise PackError(shape) from None
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
        raise PackError(shape)
    axes = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    ts = [k for k, a in enumerate(axes) if isinstance(a, ast.Name) and a.id == "t"]
    plain = all(isinstance(a, ast.Slice) and a.lower is None and a.upper is None
                and a.step is None for k, a in enumerate(axes) if k not in ts)
    if len(ts) != 1 or not plain:
        raise PackError(shape)
    if node.value.id not in outputs:
        raise PackError(f"{where}: 'time' slices {node.value.id}, which is not one of the "
                        f"call's outputs ({', '.join(outputs) or 'none'})")
    return node.value.id, ts[0]


def _notebook(raw: dict) -> NotebookReading:
    return NotebookReading(setup=frozenset(raw.get("setup", ())),
                           aliases=dict(raw.get("aliases", {})),
                           compare=tuple(raw.get("compare", ("cmp",))))


def _validate(pack: Pack) -> None:
    targets = {line.target for line in pack.forward_lines}
    seen: set[str] = set()
    for step in pack.steps:
        if step.id in seen:
            raise PackError(f"duplicate step id {step.id}")
        seen.add(step.id)
        for name in step.lines:
            if name not in targets:
                raise PackError(f"step {step.id}: no forward line assigns '{name}'")
        if step.kind.checked:
            if not step.checks:
                raise PackError(f"step {step.id}: 'checks' is empty")
            # A student's copy keeps all but the last (tutor/pack/student.py).
            needed = 3 if step.has_solution else 2
            if len(step.hints) < needed:
                raise PackError(f"step {step.id}: needs at least {needed} hints")
        fn = step.function
        if fn is not None:
            known = set(fn.outputs) if fn.outputs else set(fn.arguments)
            for name in step.checks:
                if name not in known:
                    raise PackError(f"step {step.id}: checks '{name}', which the call neither "
                                    "assigns nor passes in to be updated")


def installed_packs() -> list[str]:
    """The ids of the packs that come with the tutor, makemore first."""
    found = sorted(p.name for p in exercises_dir().iterdir() if (p / "pack.toml").is_file())
    return sorted(found, key=lambda name: name != DEFAULT_PACK)


def find_pack(name: str) -> Path:
    """The folder of a pack given by installed id or by path."""
    path = Path(name).expanduser()
    if (path / "pack.toml").is_file():
        return path.resolve()
    if "/" not in name and (exercises_dir() / name / "pack.toml").is_file():
        return exercises_dir() / name
    known = ", ".join(installed_packs()) or "none"
    raise PackError(f"no pack '{name}': give an installed pack ({known}) or a pack's folder")


@cache
def load_pack(root: Path | None = None) -> Pack:
    """Load a pack folder (the bundled makemore pack by default)."""
    root = Path(root) if root else exercises_dir() / DEFAULT_PACK
    meta = _load_toml(root / "pack.toml")
    _schema(schema.check_pack_toml, meta)
    head = meta.get("pack", {})
    exercises = []
    for name in head.get("exercises", []):
        raw = _load_toml(_inside(root, name, "an exercise file"))
        _schema(schema.check_exercise_file, raw, name)
        ex = raw.get("exercise", {})
        number = int(ex.get("number", len(exercises) + 1))
        where = f"{name}"
        word = ex.get("kind", LineGradient.name)
        forward = _text(ex, "forward", where, "")
        # The lines this exercise adds to the forward pass: a step through one is fused.
        added = frozenset(_parse_line(0, src, number).target for src in forward.splitlines()
                          if src.strip() and not src.strip().startswith("#"))
        steps = tuple(_load_step(s, number, where, word, added) for s in raw.get("steps", []))
        earlier = tuple(e.number for e in exercises)
        requires = ex.get("requires", list(earlier))
        if not isinstance(requires, list) or not all(
                isinstance(n, int) and not isinstance(n, bool) for n in requires):
            raise PackError(f"{where}: 'requires' must be a list of exercise numbers")
        if unknown := [n for n in requires if n not in earlier]:
            raise PackError(f"{where}: 'requires' names exercise {unknown[0]}, which is not an "
                            "earlier exercise of the pack")
        exercises.append(
            Exercise(
                number=number,
                title=_text(ex, "title", where),
                intro=unwrap(_text(ex, "intro", where, "")),
                forward=forward,
                kind=_kind(word, where),
                steps=steps,
                settings=raw.get("training", {}),
                requires=tuple(requires),
            )
        )
    # A data file lives beside the pack or in the shared data folder; a pack without one makes
    # its own data in make_data.
    data_name = head.get("data")
    data_file = None
    if data_name:
        own = _inside(root, data_name, "the data file")
        data_file = own if own.is_file() else data_dir() / own.name
    pack = Pack(
        id=head.get("id", root.name),
        title=head.get("title", root.name),
        root=root,
        data_file=data_file,
        lesson=dict(meta.get("lesson", {})),
        setup_code=_text(meta.get("setup", {}), "code", "pack.toml [setup]"),
        forward_code=_text(meta.get("forward", {}), "code", "pack.toml [forward]"),
        loss=meta.get("forward", {}).get("loss", "loss"),
        exercises=tuple(exercises),
        description=unwrap(_text(head, "description", "pack.toml [pack]", "")),
        notebook=_notebook(meta.get("notebook", {})),
    )
    _validate(pack)
    return pack
