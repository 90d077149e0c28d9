"""The lecture's own notebook, filled in: which of its code is the learner's answer to which step.

The lecture's notebook (makemore part 4) has its own forward pass and its own `cmp` helper; the
learner writes exercise 1's gradients in one cell (or one cell per line), exercise 2's `dlogits`,
exercise 3's `dhprebn` and exercise 4's training loop. None of the notebook's own code is graded
or run: what is kept of it is the learner's backward code, cut into the tutor's steps, with the
learner's names turned into the tutor's, so that each step runs on the tutor's forward pass.

How the cut is made, from the code alone (nothing here runs it):

- The notebook is split into regions at its `# Exercise N` comments; region N is exercise N.
- A learner's `cmp('logits', dlogits_fast, logits)` says that `dlogits_fast` is the gradient of
  `logits` (the third argument names the tensor): `dlogits_fast` is renamed `dlogits`. A name
  with no `cmp` call that is one typo away from a gradient the region needs and never writes
  (`dlogits_maxes`) is taken for it too.
- A statement that writes a gradient goes to the step where it can run: not before the step that
  starts that gradient (a first branch, `dcounts = ...`, starts where the pack's `partials` say)
  or completes it (`dcounts += ...`), and not before the steps that wrote the gradients it reads,
  as the learner's own order says. Helpers (`tmp = ...`) go with each step that reads them.
- Statements that only write the lesson's forward tensors (`loss_fast = ...`), print or plot are
  the notebook's, not answers; `dlogits = None # TODO` is no answer either.
- Exercise 4's answer is the body of the training loop; its backward statements are put after
  the tutor's forward pass and loss line, as the training step `train` runs.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import difflib
import io
import itertools
import re
import textwrap
import tokenize
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from tutor.code_facts import read, written
from tutor.course.program import (
    Line,
    Program,
    first_line,
    import_bindings,
    line_of,
    own_source,
    reads_autograd_only,
)
from tutor.course.vocabulary import (
    batch_sizes,
    comparers,
    comparisons,
    forward_names,
    gradient_names,
    is_comparison,
)
from tutor.pack.flow import Flow, gradient, gradients, tensor_of
from tutor.pack.model import Pack, Step
from tutor.sandbox.clean import whole_characters

if TYPE_CHECKING:
    from tutor.training.plan import TrainingSettings
from tutor.sandbox.policy import inspect

EXERCISE_MARK = re.compile(r"^\s*#\s*exercise\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)
_MAGIC = re.compile(r"^\s*[%!]")
_HEADING_MARK = re.compile(r"^\s*#+\s*exercise\s*(\d+)\b", re.IGNORECASE | re.MULTILINE)


class NotebookError(ValueError):
    """The notebook cannot be read as one: the reason, in one line."""


@dataclass
class Statement:
    """One top-level statement of the learner's code, with what it writes and reads."""

    source: str
    writes: set[str]
    reads: set[str]
    augmented: bool  # it changes a name that already holds something (`+=`, `x[i] = `, `x.add_()`)
    line: int  # its first line in its cell


@dataclass
class LectureAnswers:
    """What the notebook answers: code per step, the training step's code, and notes on how it
    was read (the names taken for the tutor's)."""

    code: dict[str, str] = field(default_factory=dict)
    training: str | None = None
    renamed: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    training_needs: list[str] = field(default_factory=list)  # see Submission.training_needs


def is_lesson_notebook(pack: Pack, cells: list[str]) -> bool:
    """Whether code cells are a learner's notebook of the lesson: its exercise markers, a call of
    a comparison helper (the lesson's, or one of theirs that reads `.grad`), a gradient of one
    of the lesson's tensors assigned, or one of the lesson's functions defined."""
    if any(EXERCISE_MARK.search(c) for c in cells):
        return True
    if _answers_the_lesson(pack, cells):
        return True
    # A forward pass copied under names of the learner's own, read as the lesson's.
    renamed, forward = translated(pack, cells)
    return bool(forward) and _answers_the_lesson(pack, renamed)


def _answers_the_lesson(pack: Pack, cells: list[str]) -> bool:
    """A call of a comparison helper, autograd's gradient of one of the lesson's tensors read
    (`torch.allclose(mine, h2.grad)`), a gradient of one of them assigned, or one of the
    lesson's functions defined."""
    trees = _trees(cells)
    helpers = comparers(trees, pack.notebook.compare)
    wanted = pack.flow.all | {s.function.name for s in pack.steps if s.function is not None}
    compared: set[str] = set()  # the tensors whose `.grad` the notebook reads
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in helpers:
                return True
            if isinstance(node, ast.Attribute) and node.attr == "grad" \
                    and isinstance(node.value, ast.Name):
                compared.add(node.value.id)
            if isinstance(node, ast.FunctionDef) and node.name in wanted:
                return True
            if isinstance(node, ast.stmt) and written(node) & wanted:
                return True
    # Compared with autograd's gradients of this lesson's tensors, more than with any other's:
    # lessons share a few names (`logits`, `C`), so a few of them say nothing.
    ours = compared & (lesson_names(pack) - {"Xb", "Yb", "n", "loss"})
    return len(ours) >= 3 and 2 * len(ours) >= len(compared)


def code_cells(document: dict) -> list[str]:
    """The sources of a notebook's code cells, in order."""
    cells = document.get("cells")
    if not isinstance(cells, list):
        raise NotebookError("it has no list of cells")
    out = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            # A heading that opens an exercise (`## Exercise 2`) marks the code cells after it
            # as a `# Exercise 2` comment would: a cell that runs nothing.
            text = cell.get("source", "")
            text = "".join(text) if isinstance(text, list) else text
            found = _HEADING_MARK.search(text) if isinstance(text, str) else None
            if found:
                out.append(f"# Exercise {int(found.group(1))}\n")
            continue
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            if not all(isinstance(s, str) for s in source):
                raise NotebookError("a cell's source is not text")
            source = "".join(source)
        if not isinstance(source, str):
            raise NotebookError("a cell's source is not text")
        out.append(whole_characters(source))
    return out


def regions(cells: list[str]) -> dict[int, list[str]]:
    """Code cells by the exercise they belong to (0: before the first `# Exercise N`)."""
    out: dict[int, list[str]] = {}
    current = 0
    for cell in cells:
        marks = EXERCISE_MARK.findall(cell)
        if marks:
            current = int(marks[0])
        out.setdefault(current, []).append(cell)
    if set(out) == {0}:  # no markers at all: every cell is exercise 1's, or the loop's
        return {1: out[0]}
    return out


def _without_magics(source: str) -> str:
    # IPython's `%timeit` and `!pip` lines are no Python; a blank line keeps the numbering.
    return "\n".join("" if _MAGIC.match(line) else line for line in source.split("\n"))


def _no_answer(node: ast.stmt) -> bool:
    """`dlogits = None # TODO`, `dx = ...`, `pass`: a placeholder, not an answer."""
    if isinstance(node, ast.Pass):
        return True
    if isinstance(node, ast.Assign):
        values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
        return all(isinstance(v, ast.Constant) and v.value in (None, Ellipsis) for v in values)
    return False


def _trees(cells: Iterable[str]) -> list[ast.Module]:
    """The cells that parse, parsed (a cell that does not is left to whoever reads it)."""
    out = []
    for cell in cells:
        try:
            out.append(ast.parse(_without_magics(cell)))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return out


def _used(trees: list[ast.Module], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for t in trees for n in ast.walk(t))


def translated(pack: Pack, cells: list[str]) -> tuple[list[str], dict[str, str]]:
    """The cells with the learner's names for the lesson's forward tensors (and their
    gradients) turned into the tutor's (tutor/course/vocabulary.py), and those names."""
    trees = _trees(cells)
    lesson = lesson_names(pack)
    try:
        forward = forward_names(pack, trees, lesson)
        ours = {**forward, **batch_sizes(pack, trees, lesson, setup_names(pack))}
    except (RecursionError, MemoryError):
        return cells, {}  # an expression too deep to compare: the names stay the learner's
    # The lesson's own names spelled as another gradient (`δlogits`, `grad_logits`) are its
    # gradients as the tutor spells them.
    same = {t: t for t in lesson if t.isidentifier()}
    spelled = {k: v for k, v in gradient_names(same).items() if k != v and _used(trees, k)}
    if not ours and not spelled:
        return cells, {}
    names = {**spelled, **gradient_names(forward), **ours}
    # A tensor of theirs is also what they key its gradient by (`grads['mlp_out']`).
    keys = {mine: t for mine, t in forward.items() if mine.isidentifier()}
    return [rename(_without_magics(c), names, keys) for c in cells], ours


def _statement(node: ast.stmt, text: str) -> Statement:
    line = line_of(node, text)
    return Statement(line.source, line.writes, line.reads, line.augmented, node.lineno)


# Context managers that only switch autograd's recording: what runs inside one is what runs
# without it, for hand-written gradients.
_GRAD_MODES = frozenset({"no_grad", "inference_mode", "enable_grad", "set_grad_enabled"})


def _unwrapped(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements, with a block under `with torch.no_grad():` (or another of _GRAD_MODES)
    read as its own statements: each line's gradient is found there as anywhere else."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.With) and node.items and all(
                _grad_mode(item) for item in node.items):
            out += _unwrapped(node.body)
        else:
            out.append(node)
    return out


def _grad_mode(item: ast.withitem) -> bool:
    if item.optional_vars is not None:
        return False
    call = item.context_expr
    func = call.func if isinstance(call, ast.Call) else call
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return name in _GRAD_MODES


def parse_cell(source: str) -> tuple[list[ast.stmt], str]:
    """A cell's statements; NotebookError naming the line when it is not Python."""
    text = _without_magics(source)
    try:
        return _unwrapped(ast.parse(text).body), text
    except SyntaxError as exc:
        raise SyntaxError(exc.msg, (exc.filename, exc.lineno, exc.offset, exc.text)) from None
    except (RecursionError, MemoryError):
        # Python's parser gives up on an expression nested thousands deep: as for any code
        # that is not Python, the cell is the learner's and the check says so.
        raise SyntaxError("an expression nested too deeply for Python to read",
                          (None, 1, 1, None)) from None
    except ValueError as exc:  # a null byte
        raise SyntaxError(str(exc), (None, 1, 1, None)) from None


def renames_from_cmp(nodes: Iterable[ast.stmt], tensors: set[str], helpers: set[str]
                     ) -> dict[str, str]:
    """{learner's name: tutor's gradient name} from their comparisons (`cmp(label, dvar,
    tensor)`, a helper of their own, `allclose(dvar, tensor.grad)`: tutor/course/vocabulary.py)."""
    out: dict[str, str] = {}
    for node in nodes:
        for grad, tensor in comparisons(node, tensors, helpers):
            if tensor in tensors and grad != gradient(tensor) and grad not in tensors:
                out[grad] = gradient(tensor)
    return out


def rename(source: str, names: Mapping[str, str], keys: Mapping[str, str] | None = None) -> str:
    """`source` with each plain name in `names` replaced, comments and layout kept (attribute
    names and keyword arguments are not plain names); with `keys`, also each string that is
    exactly one of its names (`grads['mlp_out']`, a key the learner named after a tensor)."""
    keys = keys or {}
    if not names and not keys:
        return source
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    lines = source.split("\n")
    edits = []
    depth = 0  # inside brackets, `name=` is a keyword argument; outside, an assignment
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth = max(0, depth - 1)
        if tok.type == tokenize.STRING and len(tok.string) > 2 and tok.string[0] in "'\"" \
                and tok.string[-1] == tok.string[0] and tok.string[1:-1] in keys:
            quote = tok.string[0]
            edits.append((tok.start, tok.end, quote + keys[tok.string[1:-1]] + quote))
            continue
        if tok.type != tokenize.NAME or tok.string not in names:
            continue
        before = tokens[i - 1] if i else None
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        if before is not None and before.string == ".":
            continue
        if after is not None and after.string == "=" and before is not None and \
                before.string in ("(", ",") and depth > 0:
            continue  # a keyword argument's name
        edits.append((tok.start, tok.end, names[tok.string]))
    for (row, col), (_erow, ecol), new in reversed(edits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[ecol:]
    return "\n".join(lines)


@dataclass
class _Region:
    statements: list[Statement]
    renamed: dict[str, str]


def _region_statements(cells: list[str], tensors: set[str], loop: bool
                       ) -> tuple[list[ast.stmt], list[tuple[ast.stmt, str]]]:
    """All statements of a region's cells (for the training region: the loop's body)."""
    nodes: list[tuple[ast.stmt, str]] = []
    for cell in cells:
        body, text = parse_cell(cell)
        nodes += [(n, text) for n in body]
    flat = [n for n, _ in nodes]
    if loop:
        body_nodes = _loop_body(nodes, tensors)
        return flat, body_nodes
    return flat, nodes


def _loop_body(nodes: list[tuple[ast.stmt, str]], tensors: set[str]
               ) -> list[tuple[ast.stmt, str]]:
    """The statements of the innermost loop that writes gradients (inside `with` blocks too)."""
    grads = set(gradients(tensors))
    best: list[tuple[ast.stmt, str]] = []
    for node, text in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, (ast.For, ast.While)):
                body = [(s, text) for s in sub.body]
                if any(written(s) & grads for s, _ in body) and len(body) > len(best):
                    best = body
    return best


def _typo_renames(statements: list[Statement], wanted: set[str], known: set[str]
                  ) -> dict[str, str]:
    """Gradient names the region needs and never writes, matched to the learner's names that
    are one slip away from them (`dlogits_maxes` for `dlogit_maxes`)."""
    written_names = set().union(*(s.writes for s in statements)) if statements else set()
    missing = sorted(wanted - written_names)
    strays = sorted(n for n in written_names - known if tensor_of(n) is not None)
    out: dict[str, str] = {}
    for name in missing:
        close = difflib.get_close_matches(name, [s for s in strays if s not in out], 1, 0.85)
        if close:
            out[close[0]] = name
    return out


def _running(statements: list[_S], grads: set[str], forward: set[str],
             remake: Callable[[_S, ast.stmt], _S] | None = None) -> list[_S]:
    """One running gradient walked back line by line (`g = g / probs`, then `dprobs = g` so
    that a comparison can read it), written with each value under the gradient name it was
    copied into: `dprobs = dlogprobs / probs`. A copy is the same tensor, so this is the same
    program; the cut then finds each step's own line. Values never copied keep a name of their
    own per assignment (`g_v3`). Only a name assigned in plain statements is rewritten, and only
    where no gradient it was copied into is assigned again while the name still holds it.

    `statements` are Statements, or the program's Lines with `remake` (an item and its new
    tree -> the item rewritten)."""
    remake = remake or _remade_statement
    out = statements
    # Only a name some statement copies into a gradient (`dprobs = g`) can be one: found in one
    # pass, so that reading stays linear in the submission's size.
    copied = set()
    for st in statements:
        if len(st.writes) == 1 and len(st.reads) == 1 and st.writes <= grads \
                and not st.augmented and st.source.count("=") == 1:
            copied |= st.reads
    for v in sorted(copied - grads - forward):
        rewritten = _one_running(out, v, grads, remake)
        if rewritten is not None:
            out = rewritten
    return out


def _remade_statement(s: Statement, node: ast.stmt) -> Statement:
    return Statement(ast.unparse(node), written(node), read(node), s.augmented, s.line)


def _one_running(statements: list[_S], v: str, grads: set[str],
                 remake: Callable[[_S, ast.stmt], _S]) -> list[_S] | None:
    trees: list[ast.stmt | None] = []
    for s in statements:
        if v not in s.reads and v not in s.writes:
            trees.append(None)  # not parsed: only what touches v is rewritten
            continue
        try:
            body = ast.parse(s.source).body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if len(body) != 1:
            return None
        trees.append(body[0])
    version = 0
    alias: dict[int, str] = {}  # a version of v -> the gradient it was first copied into
    bound_at: dict[str, list[int]] = {}  # a gradient -> the statements that assign it
    uses: dict[int, list[int]] = {}  # a version -> the statements that read or change it
    copies: set[int] = set()  # statements `dX = v` whose copy becomes the version's name
    touched = False
    for i, (s, node) in enumerate(zip(statements, trees, strict=True)):
        if node is not None:
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)):
                return None  # a loop, a branch, a function: not straight-line
            touched = True
        if v in s.reads or (v in s.writes and s.augmented):
            uses.setdefault(version, []).append(i)
        for name in s.writes & grads:
            bound_at.setdefault(name, []).append(i)
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in grads
                and _is_name(node.value, v) and version and version not in alias):
            # `dprobs = g`: this version of g is dprobs from here on, and from where it was made
            alias[version] = node.targets[0].id
            copies.add(i)
        elif v in s.writes and not s.augmented and isinstance(node, ast.Assign):
            if not all(isinstance(t, ast.Name) for t in node.targets):
                return None
            version += 1
            uses.setdefault(version, []).append(i)
    if not touched or not alias:
        return None
    for k, name in alias.items():
        # Renaming is the same program only while the gradient still holds this version.
        last = max(uses.get(k, [0]))
        first = min(uses.get(k, [0]))
        if any(first < j <= last and j not in copies for j in bound_at.get(name, [])):
            return None
    # Version 0 is what the name held before this code assigned it (a setup's generator
    # called `g`, or a value from an earlier exercise): read under its own name.
    names = {0: v, **{k: alias.get(k, f"{v}_v{k}") for k in range(1, version + 1)}}
    taken = set().union(*(s.reads | s.writes for s in statements))
    if any(n in taken for k, n in names.items() if k and k not in alias):
        return None
    out: list[_S] = []
    version = 0
    for i, (s, node) in enumerate(zip(statements, trees, strict=True)):
        if i in copies:
            continue  # `dprobs = g`: g's value is now written as dprobs
        if node is None:
            out.append(s)
            continue
        reading = names[version]
        if v in s.writes and not s.augmented and isinstance(node, ast.Assign):
            version += 1
        out.append(remake(s, _with_name(node, v, reading, names[version])))
    return out


def _with_name(node: ast.stmt, v: str, reading: str, writing: str) -> ast.stmt:
    """`node` with loads of `v` as `reading` and stores of it as `writing`."""
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id == v:
            n.id = writing if isinstance(n.ctx, ast.Store) else reading
    if isinstance(node, ast.AugAssign) and _is_name(node.target, writing):
        node.target.id = reading  # type: ignore[attr-defined]  # changed in place: same version
    return node


_S = TypeVar("_S")  # a Statement, or a program's line (`_Tagged`)


class _Cutter:
    """Cuts one exercise's statements into its steps (see the module's docstring)."""

    def __init__(self, pack: Pack, steps: list[Step], forward: set[str]):
        self.pack = pack
        self.steps = steps
        self.order = {s.id: i for i, s in enumerate(steps)}
        self.forward = forward
        self.setup = setup_names(pack)
        flow = Flow(steps)  # these steps alone: an exercise's, or the whole training step
        self.grads = set(flow.all)
        self.checked = {s.id: flow.completes(s) for s in steps}
        # Where each gradient is first written (started or completed) and where it is complete.
        self.first: dict[str, str] = {}
        self.final: dict[str, str] = {}
        for s in steps:
            for name in sorted(flow.touched(s)):
                self.first.setdefault(name, s.id)
            for name in flow.completes(s):
                self.final[name] = s.id

    def latest(self, ids: Iterable[str]) -> str | None:
        ids = [i for i in ids if i is not None]
        return max(ids, key=self.order.__getitem__) if ids else None

    def cut(self, statements: list[Statement]) -> dict[str, list[str]]:
        kept = [s for s in statements if s.writes & self.grads]
        helpers = self._helpers(statements, kept)
        placed: dict[int, str] = {}
        last_written: dict[str, str] = {}
        for i, s in enumerate(statements):
            if i in helpers or s not in kept:
                continue
            candidates = []
            for name in s.writes & self.grads:
                fresh = name not in last_written and not s.augmented
                start = self.first[name]
                if fresh and s.reads & self.checked[start] - {name}:
                    # Both branches at once (`dlogits = dnorm_logits.clone() + ... *
                    # dlogit_maxes`): it reads what its first branch's step grades.
                    fresh = False
                candidates.append(start if fresh else self.final.get(name, start))
            step = self.latest(candidates)
            after = self.latest(last_written.get(r) for r in s.reads & self.grads
                                if r in last_written)
            if after is not None and self.order[after] > self.order[step]:
                # A gradient computed in full at once, past where its first branch starts.
                step = self.latest([after, *(self.final.get(n, after)
                                             for n in s.writes & self.grads)])
            placed[i] = step
            for name in s.writes:
                last_written[name] = step
        out: dict[str, list[tuple[int, str]]] = {}
        for i, step in placed.items():
            out.setdefault(step, []).append((i, statements[i].source))
        for i, consumers in helpers.items():
            for step in {placed[c] for c in consumers if c in placed}:
                out.setdefault(step, []).append((i, statements[i].source))
        return {step: [src for _, src in sorted(items)] for step, items in out.items()}

    def _helpers(self, statements: list[Statement], kept: list[Statement]
                 ) -> dict[int, set[int]]:
        """Statements that compute something a later kept statement reads (not a gradient, not
        the lesson's forward tensors): index -> the kept statements that need it."""
        kept_ids = {i for i, s in enumerate(statements) if s in kept}
        consumers: dict[int, set[int]] = {i: {i} for i in kept_ids}
        for i in range(len(statements) - 1, -1, -1):
            if i in kept_ids:
                continue
            # Not the lesson's tensors, nor the notebook's own data and setup (`vocab_size` from
            # `words = open(...)`): the tutor's stand in for those.
            own = statements[i].writes - self.grads - self.forward - self.setup
            if not own:
                continue
            needs = set()
            for j in range(i + 1, len(statements)):
                if j in consumers and own & statements[j].reads:
                    needs |= consumers[j]
            if needs:
                consumers[i] = needs
        return {i: c for i, c in consumers.items() if i not in kept_ids}


def lesson_names(pack: Pack) -> set[str]:
    """Names the tutor's namespace already holds for a step: forward tensors, parameters, the
    batch; a learner's statement that only writes these is the notebook's own, not an answer."""
    names = {line.target for line in pack.forward_lines} | {"Xb", "Yb", "n", "loss"}
    for step in pack.steps:
        if step.kind.of_forward_tensors or step.kind.trained:  # not a function's own outputs
            names |= set(step.checks)
    return names


def read_lecture(pack: Pack, cells: list[str]) -> LectureAnswers:
    """The learner's answers in the lecture's notebook, as the tutor's steps and training step.
    A cell that is not Python (a SyntaxError) gives its exercise's steps that cell as their code,
    so that each says so, with the line."""
    answers = LectureAnswers()
    forward = lesson_names(pack)
    by_region = regions(cells)
    helpers = comparers(_trees(cells), pack.notebook.compare)
    renames_all: dict[str, str] = {}
    defs: dict[str, str] | None = None
    for exercise in pack.exercises:
        region = by_region.get(exercise.number, [])
        if exercise.kind.trained:
            continue
        steps = list(exercise.steps)
        for step in steps:
            if step.function is not None:
                defs = _definitions(cells, setup_names(pack) | forward) if defs is None \
                    else defs  # read once
                code = _function_answer(step.function.name, defs)
                if code is not None:
                    answers.code[step.id] = code
        steps = [s for s in steps if s.function is None]
        if not steps:
            continue
        tensors = {t for s in steps for t in (*s.checks, *s.partials, *s.given)}
        try:
            flat, nodes = _region_statements(region, tensors, loop=False)
        except SyntaxError as exc:
            broken = next((c for c in region if _syntax_error(c)), "")
            for step in steps:
                if any(re.search(rf"\b{gradient(t)}\b", broken) for t in step.checks):
                    answers.code[step.id] = _without_magics(broken)
            answers.notes.append(f"exercise {exercise.number}'s code is not Python "
                                 f"(line {exc.lineno}: {exc.msg})")
            continue
        renamed = renames_from_cmp(flat, tensors, helpers)
        statements = [_statement(n, text) for n, text in nodes
                      if not is_comparison(n, forward, helpers) and not _no_answer(n)]
        statements = _renamed(statements, renamed)
        cutter = _Cutter(pack, steps, forward)
        typos = _typo_renames(statements, cutter.grads, cutter.grads | forward)
        statements = _running(_renamed(statements, typos), cutter.grads, forward)
        renamed.update(typos)
        renames_all.update({k: v for k, v in renamed.items() if k not in renames_all})
        answers.renamed.update(renamed)
        for sid, sources in cutter.cut(statements).items():
            answers.code[sid] = "\n".join(sources) + "\n"
    training = next((e for e in pack.exercises if e.kind.trained), None)
    if training is not None:
        loop = by_region.get(training.number) or _training_cells(pack, cells)
        answers.training = _training_answer(pack, loop, renames_all, forward, answers, helpers,
                                            cells)
    return answers


def own_training(pack: Pack, cells: list[str], names: Mapping[str, str]) -> str | None:
    """The training step of a notebook whose loop reads the parameters by names of its own,
    as its own frame found them (`K1` is `w1`, tutor/core/frame.py): its cells read again with
    those names, and their gradients', as the tutor's. A name the notebook also loops over
    (`for p in params`) is no parameter's."""
    looped = {n.id for tree in _trees(cells) for node in ast.walk(tree)
              if isinstance(node, (ast.For, ast.comprehension))
              for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    names = {mine: ours for mine, ours in names.items() if mine not in looped}
    if not names:
        return None
    every = {**gradient_names(names), **names}
    return read_lecture(pack, [rename(c, every, names) for c in cells]).training


def _training_cells(pack: Pack, cells: list[str]) -> list[str]:
    """Without an `# Exercise 4` comment: the cells holding a loop that writes most of the
    trained parameters' gradients (exercise 1's `dC` loop writes one)."""
    step = next(s for s in pack.steps if s.kind.trained)
    wanted = pack.flow.completes(step)
    parsed = [(c, t) for c in cells for t in _trees([c])]
    # Or the cell whose loop moves the parameters (`for k in P: P[k] -= lr * grads[k]`).
    update = _update([t for _, t in parsed], set(step.checks), {})
    out = []
    for cell, tree in parsed:
        for node in ast.walk(tree):
            if node is (update.node if update else None) or isinstance(
                    node, (ast.For, ast.While)) and len(set().union(
                        *(written(s) for s in node.body)) & wanted) > len(wanted) // 2:
                out.append(cell)
                break
    return out


def _syntax_error(cell: str) -> bool:
    try:
        parse_cell(cell)
    except SyntaxError:
        return True
    return False


def _renamed(statements: list[Statement], names: dict[str, str]) -> list[Statement]:
    if not names:
        return statements
    # A learner's own name that a rename would take over keeps its value under another name.
    used = set().union(*(s.writes | s.reads for s in statements)) if statements else set()
    names = dict(names)
    for target in list(names.values()):
        if target in used and target not in names:
            names[target] = f"{target}_yours"
    out = []
    for s in statements:
        out.append(Statement(rename(s.source, names), {names.get(n, n) for n in s.writes},
                             {names.get(n, n) for n in s.reads}, s.augmented, s.line))
    return out


def _training_answer(pack: Pack, cells: list[str], renames: dict[str, str], forward: set[str],
                     answers: LectureAnswers, helpers: set[str], everything: list[str]
                     ) -> str | None:
    """The training step (the tutor's forward pass, its loss line, the learner's backward pass
    from the loop's body), or None when the loop has no backward code."""
    from tutor.training.plan import TrainingSettings, forward_for

    settings = TrainingSettings.from_pack(pack)
    step = next(s for s in pack.steps if s.kind.trained)
    if settings.assembled:
        return _assembled_training(pack, settings, cells, everything, answers)
    tensors = {t for s in pack.steps for t in (*s.checks, *s.partials)}
    grads = set(gradients(tensors))
    try:
        _flat, nodes = _region_statements(cells, tensors, loop=True)
    except SyntaxError as exc:
        answers.notes.append(f"the training loop's code is not Python (line {exc.lineno}: "
                             f"{exc.msg})")
        return "\n".join(_without_magics(c) for c in cells) if cells else None
    # The loop's batch, drawn from data of the notebook's own made outside the loop: the
    # tutor's batch stands in (`xb, yb = Xtr[ix], Ytr[ix]`).
    inside = set().union(*(written(n) for n, _ in nodes)) if nodes else set()
    data = forward | setup_names(pack) | (_assigned(_trees(everything)) - inside)
    statements = [_batch_statement(n, data) or _statement(n, text) for n, text in nodes
                  if not is_comparison(n, forward, helpers) and not _no_answer(n)]
    statements = _renamed(statements, {**renames, **pack.notebook.aliases})
    wanted = pack.flow.completes(step)
    typos = _typo_renames(statements, wanted, grads | forward)
    statements = _renamed(statements, typos)
    cutter = _Cutter(pack, [_whole_step(step, tensors)], forward)
    cut = cutter.cut(statements)
    backward = "\n".join(cut.get(step.id, []))
    names = {**renames, **pack.notebook.aliases, **typos}
    trees = _trees(cells)
    update = _update(trees, set(step.checks), names, _trees(everything))
    if update is not None and update.listed is None:
        # The update reads its gradients through an expression (a dict's values, a list of an
        # object's attributes, what a function returned): the statements it needs, as run.
        every = _trees(everything)
        backward = _needed_by(update, trees, forward | setup_names(pack), names,
                              _methods(every), _assigned(every))
        if backward.strip():
            backward = "\n".join([*update.prelude(), backward])
        applied = update.applied()
    else:
        applied = update.applied() if update is not None else []
    # The update may read its gradients straight from a function or class of the notebook's
    # (`zip(parameters, TrainGrads.as_list(Xb, Yb, n))`): then that is the backward pass.
    reserved = setup_names(pack) | forward
    defined = _with_functions(everything, "\n".join(applied), reserved=reserved) \
        if applied else ""
    if not backward.strip() and defined == "\n".join(applied):
        return None
    lines = forward_for(pack, "\n".join([backward, defined]), settings.loss_line)
    backward = _with_functions(everything, "\n".join([backward, *applied]), reserved=reserved)
    return "\n".join(["# forward pass (the tutor's)", *lines, settings.loss_line, "",
                      "# backward pass (yours, from the training loop)", backward]) + "\n"


def _assembled_training(pack: Pack, settings: TrainingSettings, loop: list[str],
                        everything: list[str], answers: LectureAnswers) -> str | None:
    """The training step of a lesson that trains its own network with the learner's functions
    (the GPT's n layers, the LSTM through time): those functions as the notebook defines them,
    in the lesson's forward pass and driver, as the tutor's exercise assembles them. The
    notebook's own loop trains a model of its own layout, which the lesson's network is not;
    what it shows is that the learner trained with their functions. So a loop must call them
    (directly or through functions of theirs), most of them, and move something: None
    where no loop does."""
    from tutor.training.plan import training_code

    names = {pack.step(sid).function.name: sid for sid in settings.functions
             if pack.step(sid).function is not None}
    defs = _definitions(everything)
    trees = _trees(loop or everything)
    updaters = _updaters(_trees(everything))
    called = max((_calls(node, defs) & set(names) for node in _run_loops(trees, defs)
                  if _descends_somewhere(node, defs, updaters)),
                 key=len, default=set())
    if len(called) * 2 < len(names) or not called:
        return None
    accepted = {sid: answers.code[sid] for sid in settings.functions if sid in answers.code}
    missing = [name for name, sid in names.items() if sid not in accepted]
    for name in missing:
        accepted[names[name]] = (f"def {name}(*args, **kwargs):\n"
                                 f"    raise NameError('your notebook does not define {name}, "
                                 "which the lesson\\'s training calls')")
        answers.notes.append(f"the training step calls {name}, which the notebook does not "
                             "define")
    answers.training_needs = _driver_own(pack, settings, set(names))
    return training_code(pack, accepted)


def _driver_own(pack: Pack, settings: TrainingSettings, functions: set[str]) -> list[str]:
    """The steps whose gradients the lesson's driver computes itself, not as what one of the
    learner's functions returns (LSTM's masked cross-entropy, GPT's residual sums): a
    notebook's loop computes those in its own code too."""
    try:
        tree = ast.parse(settings.driver)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    own: set[str] = set()
    lesson = lesson_names(pack)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) \
                and node.value.func.id in functions:
            continue
        targets = {n for t in node.targets for n in _unpacked_names(t)}
        reads = read(node.value)
        others = {n for n in reads - targets if tensor_of(n) is not None}
        # Arithmetic on other gradients, or the loss's own gradient made from the lesson's
        # tensors; not a gradient rearranged (stacked, rescaled for padding) or a list begun.
        if others or (not {n for n in reads if tensor_of(n) is not None}
                      and reads & lesson):
            own |= {t for n in targets if (t := tensor_of(n)) is not None}
    return [s.id for s in pack.steps if s.kind.of_forward_tensors and not s.kind.trained
            and own & set(s.checks)]


def _unpacked_names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _unpacked_names(e)]
    return []


def _calls(node: ast.AST, defs: Mapping[str, str]) -> set[str]:
    """The names `node` calls, and those the learner's own functions (and the methods of their
    classes it calls, by name) call in turn."""
    methods: dict[str, list[ast.AST]] = {}  # `model.backward()`: each class's `backward`
    for source in defs.values():
        with contextlib.suppress(SyntaxError, ValueError, RecursionError):
            for cls in ast.parse(source).body:
                if isinstance(cls, ast.ClassDef):
                    for f in cls.body:
                        if isinstance(f, ast.FunctionDef):
                            methods.setdefault(f.name, []).append(f)
    seen: set[str] = set()
    followed: set[str] = set()
    todo = [node]
    while todo:
        for n in ast.walk(todo.pop()):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) \
                    and n.func.id not in seen:
                seen.add(n.func.id)
                if n.func.id in defs:
                    with contextlib.suppress(SyntaxError, ValueError, RecursionError):
                        todo.append(ast.parse(defs[n.func.id]))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr in methods and n.func.attr not in followed:
                followed.add(n.func.attr)
                todo.extend(methods[n.func.attr])
    return seen


def _run_loops(trees: list[ast.Module], defs: Mapping[str, str]
               ) -> Iterator[ast.For | ast.While]:
    """The loops the notebook runs: at the top of its cells (inside `with` or `if` too), and
    inside a function of its own that its top-level code calls (`train()`); not a loop of a
    function it only defines (a BPTT loop inside `lstm_backward`)."""
    called: set[str] = set()
    for tree in trees:
        for node in _outside_defs(tree):
            if isinstance(node, (ast.For, ast.While)):
                yield node
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                called.add(node.func.id)
    for name in sorted(called & set(defs)):
        with contextlib.suppress(SyntaxError, ValueError, RecursionError):
            for node in ast.walk(ast.parse(defs[name])):
                if isinstance(node, (ast.For, ast.While)):
                    yield node


def _outside_defs(tree: ast.AST) -> Iterator[ast.AST]:
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if node is tree or not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                 ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def _descends_somewhere(loop: ast.For | ast.While, defs: Mapping[str, str],
                        updaters: frozenset[str]) -> bool:
    """Whether a loop takes a step downhill somewhere (`p -= lr * g`, `p += -lr * g`,
    `p.data.sub_(...)`, `opt.step()`, or an update function of the learner's), directly or in
    a function of theirs it calls; a sum that collects (`dW += ...`) is no step."""
    todo: list[ast.AST] = [loop]
    seen: set[str] = set()
    while todo:
        for n in ast.walk(todo.pop()):
            if isinstance(n, ast.AugAssign) and (
                    isinstance(n.op, ast.Sub) or isinstance(n.op, ast.Add)
                    and _factor_sign(n.value) < 0):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and (
                    n.func.attr in ("step", "sub_") or n.func.attr == "add_" and any(
                        k.arg == "alpha" and _factor_sign(k.value) < 0 for k in n.keywords)):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                if n.func.id in updaters:
                    return True
                if n.func.id in defs and n.func.id not in seen:
                    seen.add(n.func.id)
                    with contextlib.suppress(SyntaxError, ValueError, RecursionError):
                        todo.append(ast.parse(defs[n.func.id]))
    return False


def _definitions(cells: list[str], reserved: frozenset[str] | set[str] = frozenset()
                 ) -> dict[str, str]:
    """The source of each function, class, lambda (`onehot = lambda y: ...`) and list of
    constants (`order = ['C', 'W1', ...]`) the notebook defines at the top of a cell, by name,
    the last definition of a name kept. `reserved`: the names the tutor's namespace sets (the
    lesson's sizes), which a line of the notebook's own sizes must not set again."""
    defs: dict[str, str] = {}
    classes: set[str] = set()
    made: dict[str, frozenset[str]] = {}  # name -> the classes it holds objects of
    for cell in cells:
        try:
            body, text = parse_cell(cell)
        except SyntaxError:
            continue
        for node in body:
            instance = None
            binding = import_bindings(node)
            if binding is not None:  # what it binds, as the sandbox has it
                for bound in written(ast.parse(binding).body[0]):
                    defs.pop(bound, None)
                    made.pop(bound, None)
                    defs[bound] = binding
                continue
            patched = _patched_class(node, classes)
            if patched is not None and patched in defs:
                # `Grads.ce_fused = ce_fused`: it goes wherever the class goes, in its place.
                key = f"{patched}.{node.targets[0].attr}"  # type: ignore[attr-defined]
                defs.pop(key, None)
                defs[key] = _source(node, text)
                continue
            if isinstance(node, ast.ClassDef):
                name = node.name
                classes.add(name)
            elif isinstance(node, ast.FunctionDef):
                name = node.name
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name) and _objects_made(node.value):
                # `model = Model()`, `layers = [Embedding(C), Tanh()]`: objects of the learner's
                # own classes (checked below, once every class is known).
                name = node.targets[0].id
                instance = _objects_made(node.value)
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Name) and _definable(node.value):
                name = node.targets[0].id
            elif isinstance(node, ast.Assign) and len(node.targets) == 1 \
                    and isinstance(node.targets[0], ast.Tuple) \
                    and isinstance(node.value, ast.Tuple) \
                    and len(node.targets[0].elts) == len(node.value.elts) \
                    and all(isinstance(t, ast.Name) for t in node.targets[0].elts) \
                    and all(_constants(v) or isinstance(v, ast.Constant)
                            and type(v.value) in (int, float) for v in node.value.elts) \
                    and not {t.id for t in node.targets[0].elts} & reserved:  # type: ignore[attr-defined]
                # `V, nE, nH = 27, 10, 64`: the notebook's own sizes, as it unpacks them (a
                # lesson's size it names so has the lesson's value); each name's definition is
                # the whole line.
                for target in node.targets[0].elts:
                    defs.pop(target.id, None)  # type: ignore[attr-defined]
                    made.pop(target.id, None)  # type: ignore[attr-defined]
                    defs[target.id] = _source(node, text)  # type: ignore[attr-defined]
                continue
            else:
                continue
            # In the order of the last definitions, as the notebook ran them: a class's base
            # was defined before it.
            made.pop(name, None)
            if instance is not None:
                made[name] = instance
            defs.pop(name, None)
            defs[name] = _source(node, text)
    for name, needs in made.items():
        if not needs <= classes:
            del defs[name]
    return defs


def _patched_class(node: ast.stmt, classes: set[str]) -> str | None:
    """The class of the learner's that `node` gives an attribute (`Grads.f = f`), or None."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                and target.value.id in classes:
            return target.value.id
    return None


def _objects_made(value: ast.expr) -> frozenset[str]:
    """The classes `value` makes objects of (`Model()`, `Linear(W1, b1, 2)`, or a list or
    tuple of such calls), called with constants and names only; empty where it is anything
    else."""
    calls = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    out = set()
    for call in calls:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and all(_plain(a) for a in call.args)
                and all(k.arg is not None and _plain(k.value) for k in call.keywords)):
            return frozenset()
        out.add(call.func.id)
    return frozenset(out)


def _plain(arg: ast.expr) -> bool:
    return isinstance(arg, ast.Name) or _constants_or_key(arg)


def _definable(value: ast.expr) -> bool:
    """Whether `value` defines rather than computes: a lambda, constants, or a dict, list or
    tuple of those (`local = {'tanh': lambda out, up: (1 - out**2) * up}`)."""
    if isinstance(value, ast.Lambda) or _constants(value):
        return True
    if isinstance(value, ast.Dict):
        return all(k is not None and _constants_or_key(k) for k in value.keys) \
            and bool(value.values) and all(_definable(v) for v in value.values)
    if isinstance(value, (ast.List, ast.Tuple)):
        return bool(value.elts) and all(_definable(v) for v in value.elts)
    return False


def _constants_or_key(key: ast.expr) -> bool:
    return isinstance(key, ast.Constant) or _constants(key)


def _constants(value: ast.expr) -> bool:
    """Whether `value` is a list, tuple or dict written out of constants only, or a number
    computed from numbers and `math` (`GELU_C = math.sqrt(2 / math.pi)`)."""
    if isinstance(value, (ast.List, ast.Tuple, ast.Dict)):
        try:
            ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return False
        return True
    if isinstance(value, ast.Constant):
        return False  # a plain number may be one of the lesson's sizes, which the tutor sets
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator,
                              ast.unaryop, ast.Call, ast.Load))
               or isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
               and n.value.id == "math"
               or isinstance(n, ast.Name) and n.id == "math" for n in ast.walk(value))


def _function_answer(name: str, defs: dict[str, str]) -> str | None:
    """A function step's answer: the learner's last definition of the function the step calls,
    wherever in the notebook it is, after the definitions of their own helpers it calls; None
    when they never defined it."""
    defined = defs.get(name)
    return _with_functions(defs, defined, itself=name) + "\n" if defined else None


def _with_functions(cells: list[str] | dict[str, str], code: str, itself: str | None = None,
                    reserved: frozenset[str] | set[str] = frozenset()) -> str:
    """`code` after the definitions of the learner's own functions, classes, lambdas and lists
    of constants it uses (`ce_backward`, `Grads`, `onehot`), wherever in the notebook they were
    defined, last definition first found from the end, and those those use in turn."""
    defs = cells if isinstance(cells, dict) else _definitions(cells, reserved)  # or read
    wanted: list[str] = []
    todo = [code]
    while todo:
        try:
            tree = ast.parse(todo.pop())
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        bound = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef,
                                                                 ast.ClassDef))}
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in defs \
                    and n.id not in wanted and n.id != itself and n.id not in bound:
                wanted.append(n.id)
                todo.append(defs[n.id])
                for key in defs:  # and what the notebook gave that class afterwards
                    if key.startswith(n.id + ".") and key not in wanted:
                        wanted.append(key)
                        todo.append(defs[key])
    if not wanted:
        return code
    # In the notebook's order, which ran: a class's base and a decorator come before their use
    # (a line that defines several names, once).
    sources = list(dict.fromkeys(defs[name] for name in defs if name in wanted))
    return "\n\n".join([*sources, code])


@dataclass
class _Update:
    """The learner's update loop, `for p, grad in zip(parameters, grads): p.data += -lr * grad`:
    which parameter it moves by which gradient, and in which direction."""

    node: ast.For
    params: list[str]  # the parameters, in the learner's list's order
    source: ast.expr  # what the loop pairs them with
    listed: list[str] | None  # the gradients' names, where `source` is a list of names
    descends: bool
    # `for k in P: P[k] -= lr * grads[k]`: the dict of parameters by the lesson's names (`P`);
    # `source` is then the dict of gradients by the same names.
    keyed: str | None = None

    def prelude(self) -> list[str]:
        """What the learner's code reads of the parameters under their own name: their dict
        of them, here the tutor's, by the lesson's names."""
        if self.keyed is None:
            return []
        held = ", ".join(f"{p!r}: {p}" for p in self.params)
        return [f"{self.keyed} = {{{held}}}  # your parameters by name: the tutor's"]

    def applied(self) -> list[str]:
        """The update as the tutor's gradients: each `d<param>` is what the learner's loop
        moves that parameter by. Two entries swapped, or an update that climbs, is what their
        notebook trains with, so it is what is graded. Nothing where it moves every parameter
        by its own gradient."""
        minus = "" if self.descends else "-"
        if self.keyed is not None:
            source = ast.unparse(self.source)
            picks = [f"{minus}grads_applied[{p!r}]" for p in self.params]
            return ["", "# what your update applies to each parameter (your dict, by name)",
                    f"grads_applied = {source}",
                    f"{', '.join(gradient(p) for p in self.params)} = {', '.join(picks)}"]
        if self.listed is None:
            source = ast.unparse(self.source)
            picks = [f"{minus}grads_applied[{i}]" for i in range(len(self.params))]
            return ["", "# what your update applies to each parameter (your list, in its order)",
                    f"grads_applied = {source}",
                    "grads_applied = list(grads_applied.values() if isinstance(grads_applied, "
                    "dict) else grads_applied)",
                    f"{', '.join(gradient(p) for p in self.params)} = {', '.join(picks)}"]
        # zip stops at the shorter list: a parameter past the end of the gradients never moves.
        moved = {param: grad for param, grad in zip(self.params, self.listed)}  # noqa: B905
        still = [param for param in self.params if param not in moved]
        if self.descends and not still and all(grad == gradient(param)
                                               for param, grad in moved.items()):
            return []
        targets = ", ".join(gradient(param) for param in moved)
        values = ", ".join(f"{minus}{grad}" for grad in moved.values())
        return ["", "# what your update applies to each parameter (your lists, in their order)",
                f"{targets} = {values}",
                *(f"{gradient(param)} = torch.zeros_like({param})  # past the end of your "
                  "list" for param in still)]


def _update(trees: list[ast.Module], parameters: set[str], names: Mapping[str, str],
            context: list[ast.Module] | None = None) -> _Update | None:
    """The loop that moves the parameters (`for p, grad in zip(parameters, grads)` or the pair
    the other way round, whose body steps `p` along `grad`, hands the pair to an update of the
    learner's or sets `p.grad` for an optimizer), or None. `context`: the notebook's other
    cells, where its list of parameters may have been made."""
    lists: dict[str, list[str]] = {}
    keys: dict[str, list[str]] = {}
    updaters = _updaters(trees)
    found = None
    for tree in [*(context or []), *trees]:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                elts = node.value.elts
                if all(isinstance(e, ast.Name) for e in elts):
                    lists[node.targets[0].id] = [names.get(e.id, e.id) for e in elts]  # type: ignore[attr-defined]
                elif all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in elts):
                    keys[node.targets[0].id] = [e.value for e in elts]  # type: ignore[attr-defined]
            if not any(tree is t for t in trees):
                continue  # only a list of names read there
            keyed = (_keyed_update(node, parameters, keys, updaters)
                     if isinstance(node, ast.For) else None)
            if keyed is not None:
                found = keyed
                continue
            if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                    and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "zip"
                    and len(node.iter.args) >= 2 and isinstance(node.target, ast.Tuple)
                    and len(node.target.elts) == len(node.iter.args)
                    and all(isinstance(e, ast.Name) for e in node.target.elts)):
                continue
            # Each list beside the parameters may be their gradients (a third, an optimizer's
            # state: `for p, g, m in zip(params, grads, buf)`).
            named = list(zip(node.iter.args, (e.id for e in node.target.elts), strict=True))  # type: ignore[attr-defined]
            for (held, pv), (given, gv) in itertools.permutations(named, 2):
                if len(named) > 2 and _state(node.body, gv):
                    # What the loop builds up from the gradient (a gradient clipped in place
                    # in a loop of two lists is still the gradient).
                    continue
                params = lists.get(held.id) if isinstance(held, ast.Name) else None
                if params is None or not set(params) <= parameters:
                    continue
                moves = _descends(node.body, lambda e, pv=pv: _is_name(e, pv),
                                  lambda e, gv=gv: _is_name(e, gv), updaters)
                if moves is None:
                    continue
                listed = lists.get(given.id) if isinstance(given, ast.Name) else None
                found = _Update(node, params, given, listed, moves[0])
    return found


def _updaters(trees: list[ast.Module]) -> frozenset[str]:
    """The learner's functions that change their first argument in place, as an optimizer's
    step does (`def adamw_update(p, g, ...): p -= ...` or `p.data.add_(...)`)."""
    out = set()
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or not node.args.args:
                continue
            first = node.args.args[0].arg
            for n in ast.walk(node):
                changed = (n.target if isinstance(n, ast.AugAssign) else n.func.value
                           if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                           and n.func.attr.endswith("_") and not n.func.attr.startswith("_")
                           else n.targets[0] if isinstance(n, ast.Assign)
                           and isinstance(n.targets[0], (ast.Attribute, ast.Subscript))
                           else None)
                while isinstance(changed, (ast.Attribute, ast.Subscript)):
                    changed = changed.value
                if _is_name(changed, first):  # type: ignore[arg-type]
                    out.add(node.name)
                    break
    return frozenset(out)


def _is_name(expr: ast.expr, name: str) -> bool:
    return isinstance(expr, ast.Name) and expr.id == name


def _momentum_source(body: list[ast.stmt], grad: ast.expr, key: str) -> ast.expr | None:
    """Where the update moves a parameter by an optimizer's state (`P[k] -= lr * mom[k]`, with
    `mom[k] = 0.9 * mom[k] + 0.1 * g[k]` above it): the gradient that state is built from."""
    state = grad.value.id if isinstance(grad, ast.Subscript) and isinstance(
        grad.value, ast.Name) else None
    for stmt in body:
        if not (state and isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Subscript)
                and _is_name(stmt.targets[0].value, state)
                and _is_name(stmt.targets[0].slice, key)):
            continue
        for e in ast.walk(stmt.value):
            if isinstance(e, ast.Subscript) and _is_name(e.slice, key) \
                    and isinstance(e.value, ast.Name) and e.value.id != state:
                return e
    return None


def _keyed_update(node: ast.For, parameters: set[str], keys: Mapping[str, list[str]],
                  updaters: frozenset[str]) -> _Update | None:
    """`for k in P: P[k] -= lr * grads[k]` (or `for k, p in P.items(): p -= lr * grads[k]`, or
    `for k in names:` over a list of the lesson's names): the parameters in a dict by the
    lesson's names, moved by a dict of gradients by the same."""
    it = node.iter
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) \
            and it.func.attr in ("items", "keys") and not it.args:
        it = it.func.value
    if not isinstance(it, ast.Name):
        return None
    target = node.target
    key = target.id if isinstance(target, ast.Name) else (
        target.elts[0].id if isinstance(target, ast.Tuple) and len(target.elts) == 2
        and all(isinstance(e, ast.Name) for e in target.elts) else None)  # type: ignore[attr-defined]
    if key is None:
        return None
    item = target.elts[1].id if isinstance(target, ast.Tuple) else None  # type: ignore[attr-defined]
    listed = keys.get(it.id)
    if listed is not None and not set(listed) <= parameters:
        return None
    held: list[str] = []  # the dict the parameters are kept in, by the key

    def on_param(e: ast.expr) -> bool:
        held.clear()
        if _is_name(e, item or ""):
            return True
        if (isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name)
                and _is_name(e.slice, key) and (listed is not None or e.value.id == it.id)):
            held.append(e.value.id)
            return True
        return False

    def by_key(e: ast.expr) -> bool:  # a gradient: another dict's entry for the same key
        return (isinstance(e, ast.Subscript) and _is_name(e.slice, key)
                and not (isinstance(e.value, ast.Name) and e.value.id in held))

    moves = _descends(node.body, on_param, by_key, updaters)
    if moves is None or not held and item is None:
        return None
    descends, grad = moves
    grad = _momentum_source(node.body, grad, key) or grad
    order = listed or sorted(parameters)  # each is taken by its name
    return _Update(node, order, grad.value, None, descends,  # type: ignore[attr-defined]
                   keyed=held[0] if held else it.id)


def _needed_by(update: _Update, trees: list[ast.Module], theirs: set[str],
               names: Mapping[str, str], own: frozenset[str], made: frozenset[str]) -> str:
    """The statements of the training loop's body that what the update reads needs, in order:
    those that assign it, and calls on it (`G.linear(...)` fills `G`), back through what they
    read; not the notebook's forward pass or setup (the tutor's stands in), nor its checks.
    `own`: the functions the notebook defines (a `backward` of theirs is no autograd call);
    `made`: the names it assigns (`model = Model()`), not the modules it imports."""
    loops = [n for tree in trees for n in ast.walk(tree)
             if isinstance(n, (ast.For, ast.While)) and n is not update.node
             and any(sub is update.node for sub in ast.walk(n))]
    if not loops:
        return ""
    loop = max(loops, key=lambda n: n.lineno)
    body = [n for n in loop.body if not any(sub is update.node for sub in ast.walk(n))]
    needed = read(update.source)
    assigned_here = set().union(*(written(n) for n in body)) if body else set()
    kept: list[ast.stmt] = []
    # Its data, drawn from outside the loop (its own `Xtr`, where the lecture's are the tutor's).
    data = theirs | (made - assigned_here)
    for node in reversed(body):
        writes = written(node)
        # `G.linear(...)` fills `G`, and so does `loss = model.backward(...)`: a method called
        # on what the update reads, whatever the call's result is kept as. Where the update
        # reads objects the loop never assigns (`layers`, filled by `back(dl)`), a call of a
        # function of the learner's is what fills them.
        mutates = isinstance(node, ast.Expr) and bool(read(node) & needed) \
            or _calls_on(node, (needed & made) - theirs) \
            or isinstance(node, ast.Expr) and _calls_own(node, own) \
            and bool((needed & made) - theirs - assigned_here)
        if not (writes & needed or mutates) or _has_side_effects(node, theirs, own):
            continue
        if writes & needed <= theirs and not mutates and not _calls_own(node, own):
            continue  # the loop's own batch (`Xb, Yb = Xtr[ix], Ytr[ix]`): the tutor's stands in
        kept.append(node)
        if _batch_alias(node, data) is None:  # the tutor's batch reads none of its names
            needed |= read(node) - theirs
    sources = [_batch_alias(n, data) or ast.unparse(n) for n in reversed(kept)]
    return rename("\n".join(sources), names) + "\n" if sources else ""


def _batch_statement(node: ast.stmt, data: set[str]) -> Statement | None:
    """`_batch_alias` as a statement of the loop: it reads the tutor's batch only."""
    alias = _batch_alias(node, data)
    if alias is None:
        return None
    return Statement(alias, written(node), {"Xb", "Yb"}, False, node.lineno)


def _batch_alias(node: ast.stmt, theirs: set[str]) -> str | None:
    """`xb_, yb_ = Xtr[ix], Ytr[ix]`: the loop's batch under names of the learner's, drawn from
    the notebook's own data: the tutor's batch (`xb_, yb_ = Xb, Yb`) stands in."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple)
            and len(node.targets[0].elts) == len(node.value.elts) == 2
            and all(isinstance(t, ast.Name) for t in node.targets[0].elts)
            and all(isinstance(v, ast.Subscript) and isinstance(v.value, ast.Name)
                    and v.value.id in theirs for v in node.value.elts)
            # the same rows of both (`Xtr[ix], Ytr[ix]`), not two entries of one tensor
            and len({ast.dump(v.slice) for v in node.value.elts}) == 1):  # type: ignore[attr-defined]
        return None
    a, b = (t.id for t in node.targets[0].elts)  # type: ignore[attr-defined]
    return f"{a}, {b} = Xb, Yb  # your batch: the tutor's"


def _assigned(trees: list[ast.Module]) -> frozenset[str]:
    return frozenset().union(*(written(n) for tree in trees for n in ast.walk(tree)
                               if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))))


def _calls_own(node: ast.stmt, own: frozenset[str]) -> bool:
    """Whether `node` calls a function or method the notebook defines (`fwd_bwd(P, Xb, Yb)`)."""
    return any(isinstance(c, ast.Call) and (
        isinstance(c.func, ast.Name) and c.func.id in own
        or isinstance(c.func, ast.Attribute) and c.func.attr in own) for c in ast.walk(node))


def _calls_on(node: ast.stmt, names: set[str]) -> bool:
    """Whether `node` calls a method of an object kept under one of `names`."""
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
               and isinstance(c.func.value, ast.Name) and c.func.value.id in names
               for c in ast.walk(node))


def _descends(body: list[ast.stmt], is_param: Callable[[ast.expr], bool],
              is_grad: Callable[[ast.expr], bool], updaters: frozenset[str] = frozenset()
              ) -> tuple[bool, ast.expr] | None:
    """How the loop's body moves the parameter, and by which of its gradients: against it
    (True: `p.data += -lr * g`, `p -= lr * g`, `adamw_update(p, g, ...)` as an optimizer does,
    or `p.grad = g` for an optimizer's step), or along it (False); None when the body is no
    such update. `is_grad` is asked only after `is_param` has said yes to that statement's
    parameter; `updaters` are the learner's functions that change their first argument in
    place (`_updaters`)."""
    for stmt in body:
        if isinstance(stmt, ast.AugAssign):
            target = stmt.target
            moved = target.value if isinstance(target, ast.Attribute) else target
            if not is_param(moved):
                continue
            found = _sign_found(stmt.value, is_grad)
            if found is None:
                return None
            step, grad = found
            return (step < 0 if isinstance(stmt.op, ast.Add) else step > 0), grad
        moved = _moved_in_place(stmt)
        if moved is not None and is_param(moved[0]):
            found = _sign_found(moved[2], is_grad)
            if found is None:
                return None
            step, grad = found
            return (step < 0 if moved[1] else step > 0), grad
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Attribute) and stmt.targets[0].attr == "grad"
                and is_param(stmt.targets[0].value)):
            found = _sign_found(stmt.value, is_grad)
            return None if found is None else (found[0] > 0, found[1])
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and (
                isinstance(stmt.value.func, ast.Name) and stmt.value.func.id in updaters):
            args = stmt.value.args
            if len(args) >= 2 and is_param(args[0]):
                grads = [a for a in args[1:] if is_grad(a)]
                if grads:  # the first after the parameter, as an update function takes them
                    return True, grads[0]
    return None


def _state(body: list[ast.stmt], name: str) -> bool:
    """Whether the loop's body changes `name` in place (`m.mul_(0.9).add_(g)`, `v += g * g`):
    an optimizer's state, which the parameter's step reads beside its gradient."""
    for stmt in body:
        for n in ast.walk(stmt):
            if isinstance(n, ast.AugAssign) and _is_name(n.target, name):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) \
                    and n.func.attr.endswith("_") and _is_name(n.func.value, name):
                return True
    return False


def _moved_in_place(stmt: ast.stmt) -> tuple[ast.expr, bool, ast.expr] | None:
    """`p.sub_(step)`, `p.data.add_(step)`, `p.add_(g, alpha=-lr)`: the tensor moved, whether
    the step is added, and the step (its `alpha` a factor of it)."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr in ("add_", "sub_") and len(stmt.value.args) == 1):
        return None
    call = stmt.value
    moved = call.func.value
    if isinstance(moved, ast.Attribute) and moved.attr == "data":
        moved = moved.value
    step = call.args[0]
    alpha = next((k.value for k in call.keywords if k.arg == "alpha"), None)
    if alpha is not None:
        step = ast.BinOp(alpha, ast.Mult(), step)
    elif call.keywords:
        return None
    return moved, call.func.attr == "add_", step


def _sign_found(expr: ast.expr, is_grad: Callable[[ast.expr], bool]
                ) -> tuple[int, ast.expr] | None:
    """The sign with which `expr` holds its one gradient, and that gradient; None where it
    holds none or more, or not as a product (`_sign_of`)."""
    found = [n for n in ast.walk(expr) if is_grad(n)]
    if len(found) > 1:
        # Adam's `m / (v.sqrt() + eps)`: a second moment under a root scales the step, and
        # is positive; the gradient is the one outside it.
        rooted = {id(n) for r in ast.walk(expr) if _is_root(r) for n in ast.walk(r)}
        found = [n for n in found if id(n) not in rooted]
    if len(found) != 1:
        return None
    marked = ast.parse(ast.unparse(expr).replace(ast.unparse(found[0]), GRAD_MARK),
                       mode="eval").body
    step = _sign_of(marked, GRAD_MARK)
    return None if step is None else (step, found[0])


GRAD_MARK = "grad_of_param"  # the gradient, marked for `_sign_of`


def _is_root(e: ast.expr) -> bool:
    """`x.sqrt()`, `torch.sqrt(x)`, `math.sqrt(x)`, `x ** 0.5`."""
    if isinstance(e, ast.Call):
        f = e.func
        return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) == "sqrt"
    return isinstance(e, ast.BinOp) and isinstance(e.op, ast.Pow) \
        and isinstance(e.right, ast.Constant) and e.right.value == 0.5


def _sign_of(expr: ast.expr, g: str) -> int | None:
    """The sign with which `expr` holds `g` (a product or quotient of it with positive numbers
    and names, and minus signs), or None."""
    if isinstance(expr, ast.Name):
        return 1 if expr.id == g else None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        inner = _sign_of(expr.operand, g)
        return None if inner is None else -inner
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)):
        left, right = _sign_of(expr.left, g), _sign_of(expr.right, g)
        other = expr.right if left is not None else expr.left
        found = left if left is not None else right
        if found is None:
            return None
        return found * _factor_sign(other)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub)):
        # Nesterov's `g + 0.9 * m`: the gradient as one term of the step, the rest its
        # optimizer's state.
        left, right = _sign_of(expr.left, g), _sign_of(expr.right, g)
        if left is not None and right is None:
            return left
        if right is not None and left is None:
            return right if isinstance(expr.op, ast.Add) else -right
    return None


def _factor_sign(expr: ast.expr) -> int:
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
        return -_factor_sign(expr.operand)
    if isinstance(expr, ast.Constant) and isinstance(expr.value, (int, float)):
        return -1 if expr.value < 0 else 1
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)):
        return _factor_sign(expr.left) * _factor_sign(expr.right)
    return 1  # a learning rate, a name: taken as positive


def _whole_step(step: Step, tensors: set[str]) -> Step:
    """The training step as one step that writes every gradient of the lesson."""
    from dataclasses import replace

    return replace(step, checks=tuple(sorted(tensors)), partials=())


# --- the notebook as a program ------------------------------------------------------------------

# Calls that touch files, plot, reseed or run the notebook's own autograd: the tutor's forward
# pass and its references stand in for all of it, and no gradient the learner writes depends on it.
_SIDE = frozenset({"open", "plt", "display", "random", "manual_seed", "backward", "retain_grad",
                   "requires_grad", "zero_grad", "savefig", "imshow", "hist", "plot"})


def _has_side_effects(node: ast.stmt, lesson: set[str], methods: frozenset[str]) -> bool:
    """Whether a statement's code (not its comments or strings) names one of `_SIDE`; a method
    of the learner's own classes (`model.backward()`) is theirs, unless called on one of the
    lesson's tensors (`loss.backward()`)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id in _SIDE and n.id not in methods:
            return True
        if isinstance(n, ast.Attribute) and n.attr in _SIDE and not (
                n.attr in methods and not (isinstance(n.value, ast.Name)
                                           and n.value.id in lesson)):
            return True
    return False


def _methods(trees: Iterable[ast.AST]) -> frozenset[str]:
    """The names of the functions and classes the notebook defines, its classes' methods
    included (a `backward` of theirs is theirs to call)."""
    return frozenset(f.name for tree in trees for f in ast.walk(tree)
                     if isinstance(f, (ast.FunctionDef, ast.ClassDef)))


def setup_names(pack: Pack) -> frozenset[str]:
    """Names a learner's notebook of the lesson gives its own data and setup, for which the
    tutor's stand in: the lesson's sizes, what the pack's setup code defines at its top level,
    the parameters its training step trains, the list that holds them, and what the pack's
    [notebook] table adds (a names.txt notebook's `words`, `stoi`, `Xtr`, ...)."""
    names = set(pack.lesson) | set(pack.notebook.setup) | {"parameters"}
    try:
        tree = ast.parse(pack.setup_code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = ast.Module([], [])
    for node in tree.body:  # its constants and tables, not its functions' or loops' names
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            names |= written(node)
    names |= {t for s in pack.steps if s.kind.trained for t in s.checks}
    return frozenset(names)


def notebook_program(pack: Pack, cells: list[str], exercise: int,
                     memo: dict | None = None, originals: dict[int, str] | None = None
                     ) -> Program | None:
    """The learner's code up to `exercise`, as the kernel ran it, for the tutor's namespace:
    every code cell in order (those above the first `# Exercise` mark too), less what the
    tutor's forward pass stands in for (statements that write the lesson's tensors, its data,
    its parameters or the notebook's own setup; imports; files, plots, reseeding, the notebook's
    own `backward()`), the learner's names turned into the tutor's as their comparisons say (a
    comparison is kept as a mark of what they stood behind: tutor/course/program.py). None when
    nothing is left.

    `memo`, one dict for all the exercises of one submission, keeps what is read of each cell
    and statement from one exercise's program to the next: reading stays linear in the
    submission's size, each statement read once.

    `originals`: each cell as the learner wrote it, by the id of its renamed text, for the
    notebook's own frame, which runs its own names (a namedtuple's fields, `locals()` keys and
    `getattr` strings spell them too)."""
    memo = {} if memo is None else memo
    lesson = lesson_names(pack)
    trained = {e.number for e in pack.exercises if e.kind.trained}
    by_region = regions(cells)
    chosen = [c for r, cs in sorted(by_region.items()) if r <= exercise and r not in trained
              for c in cs]
    first = min(e.number for e in pack.exercises)
    marked = any(EXERCISE_MARK.search(c) for c in cells)
    own = {id(c) for r, cs in by_region.items() if r == exercise or not marked or (
        exercise == first and r < exercise) for c in cs}  # cells above the first mark too;
    # every cell, where no cell says which exercise it is
    if not any(r in trained for r in by_region):
        loops = _training_cells(pack, cells)  # the training loop is no exercise's answer
        chosen = [c for c in chosen if c not in loops]
    if "trees" not in memo:
        trees = _trees(cells)
        memo["trees"] = (comparers(trees, pack.notebook.compare), _methods(trees))
    helpers, methods = memo["trees"]
    setup = setup_names(pack)
    parsed: list[list[tuple[ast.stmt, str]]] = []
    here: list[bool] = []
    for cell in chosen:
        key = ("cell", cell)
        if key not in memo:
            try:
                body, text = parse_cell(cell)
                memo[key] = [(n, text) for n in body]
            except SyntaxError:
                memo[key] = None  # a cell that is not Python ran nothing in the kernel either
        if memo[key] is None:
            continue
        parsed.append(memo[key])
        here.append(id(cell) in own)
    parsed = _inlined(parsed, set(gradients(lesson)))
    names = renames_from_cmp([n for cell in parsed for n, _ in cell], lesson, helpers)
    out: list[list[Line]] = []
    owned: list[bool] = []
    written_here: set[str] = set()
    taken: set[str] = set()  # setup names the backward code gave a value of its own
    for cell, is_here in zip(parsed, here, strict=True):
        lines = []
        for node, text in cell:
            seen = memo.get(id(node))
            if seen is None or seen[0] is not node:
                # The node itself is kept with what was read of it: its id is never reused.
                seen = memo[id(node)] = (node, list(comparisons(node, lesson, helpers)), None, None)
            compared = {names.get(g, g) for g, t in seen[1] if names.get(g, g) == gradient(t)}
            if compared:
                lines.append(Line("", set(), set(), False, compared))
                continue
            if seen[2] is None:
                # The same for every exercise's program: each reads the same cells before it.
                binding = import_bindings(node)
                if binding is not None:  # `from math import sqrt`: the sandbox's own
                    seen = memo[id(node)] = (node, seen[1], True,
                                             line_of(ast.parse(binding).body[0], binding))
                else:
                    runs = _runs_in_program(node, lesson, helpers, setup, methods, taken)
                    seen = memo[id(node)] = (node, seen[1], runs, line_of(node, text) if runs
                                             else False)
            if seen[2]:
                line = seen[3]
                taken |= line.writes & setup
                if names:
                    line = Line(rename(line.source, names), {names.get(w, w) for w in line.writes},
                                {names.get(r, r) for r in line.reads}, line.augmented)
                lines.append(line)
        if lines:
            out.append(lines)
            owned.append(is_here)
    out = _running_cells(out, set(gradients(lesson)), lesson)
    for lines, is_here in zip(out, owned, strict=True):
        if is_here:
            written_here |= set().union(*(line.writes for line in lines))
    whole = own_cells(chosen, own, memo, originals or {})
    return Program(out, written_here, owned, whole) if out or whole else None


def own_cells(chosen: list[str], own: set[int], memo: dict,
              originals: dict[int, str]) -> list[tuple[bool, str]]:
    """The cells as the notebook's own frame runs them (program.own_source), in the learner's
    own names, each with whether it is the exercise's own; read once per cell for all of a
    submission's exercises."""
    out = []
    for cell in chosen:
        key = ("own", cell)
        if key not in memo:
            memo[key] = own_source(_without_magics(originals.get(id(cell), cell)))
        if memo[key].strip():
            out.append((id(cell) in own, memo[key] + "\n"))
    return out


def _running_cells(cells: list[list[Line]], grads: set[str], forward: set[str]
                   ) -> list[list[Line]]:
    """`_running` over a program's lines, cell by cell as they were."""
    flat = [(k, line) for k, lines in enumerate(cells) for line in lines]
    # Each line carries its cell's number through the rewrite; a copy it drops leaves its
    # cell one line shorter.
    tagged = [_Tagged(line, k) for k, line in flat]
    rewritten = _running(tagged, grads, forward, lambda t, node: _Tagged(
        _remade_line(node, t.line.compares), t.cell))
    out: list[list[Line]] = [[] for _ in cells]
    for t in rewritten:
        out[t.cell].append(t.line)
    return out


@dataclass
class _Tagged:
    """A program's line with the cell it is in, read as `_running` reads a statement."""

    line: Line
    cell: int

    @property
    def source(self) -> str:
        return self.line.source

    @property
    def reads(self) -> set[str]:
        return self.line.reads

    @property
    def writes(self) -> set[str]:
        return self.line.writes

    @property
    def augmented(self) -> bool:
        return self.line.augmented


def _remade_line(node: ast.stmt, compares: set[str]) -> Line:
    text = ast.unparse(node)
    line = line_of(ast.parse(text).body[0], text)
    return Line(line.source, line.writes, line.reads, line.augmented, compares)


def _inlined(cells: list[list[tuple[ast.stmt, str]]], grads: set[str]
             ) -> list[list[tuple[ast.stmt, str]]]:
    """A function of the learner's that takes no arguments and computes gradients
    (`def manual_backward(): dlogprobs = ...`), called as a statement, run in place: its body's
    statements are the program's there (its `return` left out), so that each gradient it computes
    is found like any other."""
    defs = {n.name: (n, text) for cell in cells for n, text in cell
            if isinstance(n, ast.FunctionDef) and not (n.args.args or n.args.posonlyargs
                                                       or n.args.kwonlyargs or n.args.vararg)
            and any(written(s) & grads for s in n.body)}
    if not defs:
        return cells
    out = []
    for cell in cells:
        flat: list[tuple[ast.stmt, str]] = []
        for node, text in cell:
            call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) \
                    and call.func.id in defs and not call.args and not call.keywords:
                fn, fn_text = defs[call.func.id]
                flat += [(s, fn_text) for s in fn.body if not isinstance(s, ast.Return)]
            else:
                flat.append((node, text))
        out.append(flat)
    return out


def _source(node: ast.stmt, text: str) -> str:
    lines = text.split("\n")
    return textwrap.dedent("\n".join(lines[first_line(node) - 1:node.end_lineno]))


def _new_record(node: ast.stmt, methods: frozenset[str]) -> bool:
    """`g = {}`, `g = SimpleNamespace()`, `g = Grads()`: a fresh record of the learner's, under
    a name the lesson's setup also has (its generator is `g`): backward code from here on."""
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)):
        return False
    value = node.value
    if isinstance(value, (ast.Dict, ast.List)):
        return not (value.keys if isinstance(value, ast.Dict) else value.elts)
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name in ("SimpleNamespace", "dict", "list") and not value.args \
            or name in methods and name[:1].isupper()
    return False


def _runs_in_program(node: ast.stmt, lesson: set[str], helpers: set[str],
                     setup: frozenset[str], methods: frozenset[str],
                     taken: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether a statement of the notebook is the learner's backward code, which the program
    runs. `taken`: setup names the program's own backward code has already given a value
    (a running gradient called `g`, like the lesson's generator): what reads them is backward
    code too."""
    if isinstance(node, (ast.Import, ast.ImportFrom)) or _no_answer(node):
        return False
    if isinstance(node, ast.FunctionDef) and node.name in helpers:
        return False  # a comparison helper: comparisons mark values, they run nothing
    if is_comparison(node, lesson, helpers):
        return False
    # What a function's body assigns stays inside it (a local `g` is not the generator).
    writes = {node.name} if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else written(node)
    gradient_writes = any(tensor_of(n) is not None for n in writes - lesson)
    if writes & lesson and not gradient_writes:
        return False  # the notebook's forward pass or parameters: the tutor's stand in
    reads = read(node)
    if writes & setup and not gradient_writes and not (reads & lesson - setup) \
            and not (reads | writes) & taken and not _new_record(node, methods) \
            and not any(tensor_of(n) is not None for n in reads - lesson):
        # The notebook's data and setup: the tutor's stand in. A setup name given the lesson's
        # tensors (`g = F.softmax(logits, 1)`, a running gradient called `g`) is backward code.
        return False
    if _has_side_effects(node, lesson, methods):
        return False
    return inspect(node) is None or reads_autograd_only(node)
