"""The instructor's forward file, read without running any of it.

A lesson can be made from an ordinary Python file with three functions:

    def setup(seed):            # -> dict: the parameters (and other fixed tensors), seeded
    def batch(n, seed):         # -> dict: one batch, inputs then targets, seeded
    def forward(X, Y, W1, ...): # one assignment a line; the last name assigned is the loss

and, at the top level, imports of torch, F and math, and constants: numbers (the lesson's sizes,
by their names), `DATA` (a data file whose text `batch` takes as `text`), `FIXED` (tensors of
`setup` that are not parameters). Everything the file says is read here from its syntax tree;
what cannot make a lesson is an `Unusable` whose message is one line that says why.

The file is a stranger's code. It is held to the rules learner code is held to (the sandbox's
syntax policy, `tutor.sandbox.policy`) before anything of it runs, with one allowance: seeding
a generator (`torch.manual_seed(seed)`, `g.manual_seed(seed)`), which `setup` and `batch` need
and which changes nothing outside the confined child they run in (`trial`). The forward lines are
held to the policy without that allowance: the training run executes them as learner code.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

from tutor import source
from tutor.sandbox.policy import inspect

MAX_FILE_BYTES = 512 * 1024
# Names the lesson binds itself in every forward namespace: a file may not use them for its own.
RESERVED = frozenset({"n", "batch_size", "heldout_batch_size", "torch", "F", "math", "cmp"})
BATCH_NAMES = ("Xb", "Yb")  # what the lesson calls a batch's inputs and targets
# Builtins a forward line may call (the sandbox offers these to learner code too).
LINE_BUILTINS = frozenset({"range", "len", "int", "float", "min", "max", "abs", "sum", "tuple",
                           "list", "slice", "round", "bool", "True", "False", "None",
                           "Ellipsis"})
# The seeding the file's own functions may do, and nothing else beyond learner code's rules.
SEEDING = "manual_seed"
_SEEDING_STAND_IN = "seeded_generator"
_IMPORTS = {("import", "torch", None), ("import", "math", None),
            ("import", "torch.nn.functional", "F"), ("from torch.nn", "functional", "F")}


class Unusable(ValueError):
    """The file cannot make a lesson; the message is one line that says why."""


@dataclass(frozen=True)
class Line:
    """One line of `forward`: the name it assigns, its source on one line, where it was."""

    target: str
    source: str
    lineno: int


@dataclass(frozen=True)
class ForwardFile:
    name: str  # the file's name, for messages
    text: str  # as written: the pack keeps it as its setup code
    runnable: str  # the same text with its imports blanked, for the sandbox (same line numbers)
    args: tuple[str, ...]  # forward's parameters, in order
    lines: tuple[Line, ...]
    loss: str
    constants: dict[str, int | float] = field(default_factory=dict)  # numbers: the sizes
    data: str | None = None  # DATA: a data file's name
    fixed: tuple[str, ...] = ()  # FIXED: setup's tensors that are not parameters
    batch_takes: tuple[str, ...] = ("n", "seed")  # batch's parameters
    doc: str = ""  # the file's docstring
    eval_size: int | None = None  # EVAL_SIZE: examples in each split a trained network is
    # evaluated on


LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def read(path: Path) -> ForwardFile:
    """The forward file at `path`, or Unusable."""
    name = path.name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Unusable(f"no such file: {path}") from None
    except OSError as exc:
        raise Unusable(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise Unusable(f"{name} is {len(data) // 1024} KB; a forward file is a few hundred "
                       "lines at most")
    try:
        text = source.decode(data, name)
    except source.SourceError as exc:
        raise Unusable(str(exc)) from None
    return parse(text, name)


def parse(text: str, name: str = "forward.py") -> ForwardFile:
    """What the file's text says, or Unusable."""
    try:
        tree = ast.parse(text, name)
    except SyntaxError as exc:
        raise Unusable(f"{name} line {exc.lineno}: {exc.msg}") from None
    except (ValueError, RecursionError, MemoryError):
        raise Unusable(f"{name} cannot be read as Python") from None
    _ascii_names(tree, name)
    # Python's own line breaks only: `splitlines` also breaks at characters that Python
    # reads inside a line (NEL, a line separator in a string), and the lines would no longer
    # be the file's.
    runnable = LINE_BREAKS.split(text)
    functions: dict[str, ast.FunctionDef] = {}
    constants: dict[str, object] = {}
    for i, stmt in enumerate(tree.body):
        if i == 0 and _docstring(stmt):
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            _allowed_import(stmt, name)
            for k in range(stmt.lineno - 1, (stmt.end_lineno or stmt.lineno)):
                runnable[k] = ""
        elif isinstance(stmt, ast.FunctionDef):
            functions[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name):
            constants[stmt.targets[0].id] = _constant(stmt.value, constants, name)
        elif not _docstring(stmt):
            raise Unusable(f"{name} line {stmt.lineno}: only imports, functions and constants "
                           "may stand at the top level; put this inside `setup` or `batch`")
    _policy(tree, name)
    for needed in ("forward", "setup", "batch"):
        if needed not in functions:
            raise Unusable(f"{name} has no function `{needed}`: a lesson needs setup(seed), "
                           "batch(n, seed) and forward(...)")
    batch_takes = _parameters(functions["batch"], name)
    if len(_parameters(functions["setup"], name)) != 1:
        raise Unusable(f"{name} line {functions['setup'].lineno}: `setup` takes one argument, "
                       "the seed")
    if len(batch_takes) < 2 or not set(batch_takes[2:]) <= {"text", "split"}:
        raise Unusable(f"{name} line {functions['batch'].lineno}: `batch` takes (n, seed), "
                       "then optionally `text` (the DATA file's text) and `split`")
    data = constants.pop("DATA", None)
    if data is not None and not isinstance(data, str):
        raise Unusable(f"{name}: DATA must be the name of a data file, as a string")
    if data is not None and "text" not in batch_takes:
        raise Unusable(f"{name}: DATA names a file, but `batch` takes no `text` to read it from")
    fixed = constants.pop("FIXED", ())
    if not isinstance(fixed, (tuple, list)) or not all(isinstance(f, str) for f in fixed):
        raise Unusable(f"{name}: FIXED must list the names of setup's tensors that are not "
                       "parameters")
    eval_size = constants.pop("EVAL_SIZE", None)
    if eval_size is not None and (type(eval_size) is not int or not 64 <= eval_size <= 10**6):
        raise Unusable(f"{name}: EVAL_SIZE must be a whole number of examples, 64 or more")
    numbers = {k: v for k, v in constants.items()
               if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for k in numbers:
        if (k in RESERVED and k not in ("batch_size", "heldout_batch_size")) \
                or k in BATCH_NAMES:
            raise Unusable(f"{name}: the constant `{k}` is a name the lesson binds itself; call "
                           "it something else")
    args = _parameters(functions["forward"], name)
    for arg in args:
        if arg in RESERVED:
            raise Unusable(f"{name}: forward's argument `{arg}` is a name the lesson binds "
                           "itself; call it something else")
    lines, loss = _forward_lines(functions["forward"], text, name, args, numbers)
    doc = ast.get_docstring(tree) or ""
    return ForwardFile(name, text, "\n".join(runnable) + "\n", args, lines, loss, numbers,
                       data, tuple(fixed), batch_takes, doc, eval_size)


def _ascii_names(tree: ast.Module, name: str) -> None:
    """Names become keys of the lesson's files and names in learners' code: ASCII only."""
    for node in ast.walk(tree):
        found = (node.id if isinstance(node, ast.Name) else node.arg if isinstance(node, ast.arg)
                 else node.name if isinstance(node, ast.FunctionDef) else "")
        if found and not found.isascii():
            raise Unusable(f"{name} line {getattr(node, 'lineno', 1)}: the name "
                           f"`{ascii(found)[1:-1]}` is not ASCII; a lesson's names are written "
                           "in ASCII letters (they become keys of its files and names in "
                           "learners' code)")


def _docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _allowed_import(stmt: ast.Import | ast.ImportFrom, name: str) -> None:
    if isinstance(stmt, ast.Import):
        found = [("import", a.name, a.asname) for a in stmt.names]
    else:
        found = [(f"from {stmt.module}", a.name, a.asname) for a in stmt.names]
    for item in found:
        if item not in _IMPORTS:
            raise Unusable(f"{name} line {stmt.lineno}: only `import torch`, `import math` and "
                           "`import torch.nn.functional as F` are allowed: the sandbox runs "
                           "the file with nothing else")


def _constant(node: ast.expr, known: dict[str, object], name: str) -> object:
    """A top-level constant's value: a literal, or arithmetic on earlier numbers."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
           ast.Pow: lambda a, b: a ** b}

    def value(e: ast.expr) -> int | float:
        if isinstance(e, ast.Constant) and isinstance(e.value, (int, float)) \
                and not isinstance(e.value, bool):
            return e.value
        if isinstance(e, ast.Name) and isinstance(known.get(e.id), (int, float)):
            return known[e.id]  # type: ignore[return-value]
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            return -value(e.operand)
        if isinstance(e, ast.BinOp) and type(e.op) in ops:
            left, right = value(e.left), value(e.right)
            if isinstance(e.op, ast.Pow) and abs(right) > 64:
                raise ValueError("too large")
            return ops[type(e.op)](left, right)
        raise ValueError("not a number")

    try:
        return value(node)
    except (ValueError, ZeroDivisionError, OverflowError):
        raise Unusable(f"{name} line {node.lineno}: a top-level constant must be a literal or "
                       "arithmetic on the numbers above it") from None


def _policy(tree: ast.Module, name: str) -> None:
    """The sandbox's syntax policy for learner code, seeding a generator allowed."""
    refusal = inspect(allow_seeding(tree))
    if refusal:
        raise Unusable(f"{name} line {refusal.line}: {refusal.construct} is not allowed here: "
                       f"{refusal.why}")


def allow_seeding(tree: ast.Module) -> ast.Module:
    """A copy of the tree in which `.manual_seed` reads as a name the policy lets through: the
    one thing a forward file may do that learner code may not (the guard in `trial` lets it
    through at run time only on a generator and on torch)."""
    tree = copy.deepcopy(tree)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    tree.body = [n for n in tree.body if n not in imports]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == SEEDING:
            node.attr = _SEEDING_STAND_IN
    return tree


def _parameters(fn: ast.FunctionDef, name: str) -> tuple[str, ...]:
    a = fn.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise Unusable(f"{name} line {fn.lineno}: `{fn.name}` must take plain arguments (no *, "
                       "** or keyword-only ones)")
    return tuple(arg.arg for arg in a.args)


def _forward_lines(fn: ast.FunctionDef, text: str, name: str, args: tuple[str, ...],
                   numbers: dict[str, int | float]) -> tuple[tuple[Line, ...], str]:
    body = list(fn.body)
    if body and _docstring(body[0]):
        body = body[1:]
    returned: ast.expr | None = None
    if body and isinstance(body[-1], ast.Return):
        returned = body.pop().value
    lines: list[Line] = []
    known = set(args) | set(numbers)
    for stmt in body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            what = ast.get_source_segment(text, stmt) or type(stmt).__name__
            raise Unusable(f"{name} line {stmt.lineno}: every line of `forward` must assign one "
                           f"name (`x = ...`), and `{what.splitlines()[0].strip()}` does not")
        target = stmt.targets[0].id
        lines.append(_line(target, stmt.value, stmt.lineno, text, name, known))
        known.add(target)
    loss = lines[-1].target if lines else ""
    if isinstance(returned, ast.Tuple) and returned.elts and isinstance(returned.elts[0],
                                                                       ast.Name):
        returned = returned.elts[0]  # `return loss, logits`: the loss comes first
    if returned is not None:
        if isinstance(returned, ast.Name):
            if returned.id != loss:
                raise Unusable(f"{name} line {fn.lineno}: `forward` must return the name its "
                               f"last line assigns (the loss), not `{returned.id}`")
        else:
            if "loss" in known:
                raise Unusable(f"{name} line {returned.lineno}: return the loss by a name "
                               "(`loss = ...`, then `return loss`)")
            lines.append(_line("loss", returned, returned.lineno, text, name, known))
            loss = "loss"
    if not lines:
        raise Unusable(f"{name} line {fn.lineno}: `forward` has no lines")
    return tuple(lines), loss


def _line(target: str, value: ast.expr, lineno: int, text: str, name: str,
          known: set[str]) -> Line:
    where = f"{name} line {lineno}"
    if target in RESERVED or target in BATCH_NAMES:
        raise Unusable(f"{where}: `{target}` is a name the lesson binds itself; call it "
                       "something else")
    if target in known:
        raise Unusable(f"{where}: `{target}` is assigned twice; each line of `forward` names a "
                       "new tensor (its gradient is d{target})".replace("{target}", target))
    segment = ast.get_source_segment(text, value) or ""
    expression = segment if segment and "\n" not in segment else ast.unparse(value)
    line_source = f"{target} = {expression}"
    refusal = inspect(ast.parse(line_source))
    if refusal:
        raise Unusable(f"{where}: {refusal.construct} is not allowed in a forward line: "
                       f"{refusal.why}")
    for node in ast.walk(value):
        called = node.func.attr if isinstance(node, ast.Call) and isinstance(
            node.func, ast.Attribute) else node.func.id if isinstance(node, ast.Call) and \
            isinstance(node.func, ast.Name) else ""
        if called in RANDOM:
            raise Unusable(f"{where}: `{called}` draws random numbers, so the line would give "
                           "other numbers at every check; draw them once in `setup` (it is "
                           "seeded), list the name in FIXED and pass it to `forward`, or leave "
                           "it out")
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                and node.id not in known and node.id not in RESERVED \
                and node.id not in LINE_BUILTINS:
            why = ("a builtin a line may not call" if hasattr(builtins, node.id) else
                   "defined outside `forward`")
            raise Unusable(f"{where}: the line reads `{node.id}` ({why}); a forward line sees "
                           "only torch, F, math, forward's arguments, earlier lines and the "
                           "file's numbers")
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.GeneratorExp, ast.DictComp,
                             ast.SetComp, ast.NamedExpr)):
            raise Unusable(f"{where}: a forward line is one expression of tensors, without "
                           "lambdas, comprehensions or `:=`")
    return Line(target, line_source, lineno)


# Operations that draw random numbers: a forward line must give the same numbers every run.
RANDOM = frozenset({
    "dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm",
    "bernoulli", "multinomial", "normal", "poisson", "uniform_", "normal_", "exponential_",
    "bernoulli_", "random_", "gumbel_softmax", "rrelu"})


def renamed(line_source: str, names: dict[str, str]) -> str:
    """The line with every read of a name in `names` renamed (`X` -> `Xb`), nothing else
    touched: positions come from the syntax tree, so attributes and keywords stay as written."""
    tree = ast.parse(line_source)
    spots = sorted(((n.lineno, n.col_offset, n.end_col_offset, names[n.id])
                    for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in names
                    and isinstance(n.ctx, ast.Load)), reverse=True)
    text = line_source
    for _line_no, start, end, new in spots:
        text = text[:start] + new + text[end:]
    return text
