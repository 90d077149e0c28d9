"""The backward pass cut into steps, as the hand-written lessons cut it.

One step per forward line, from the loss back to the parameters. A tensor read by one line is
graded where that line is differentiated. A tensor read by several is started at the last of
them (its first branch, graded as a partial: `dcounts = ...`), added to at any in between
(`dx += ...`, graded later) and completed, and graded in full, at the first (`dcounts += ...`).
A line whose every operand is such a middle branch grades nothing of its own, so it joins the
step after it (a fused step, as the GPT lesson's layernorm).

Here too the words of each step come from the derivative: the template, three hints (the idea,
the shapes, nearly the answer) and a one-line summary for the author to replace. Torch-free.
"""

from __future__ import annotations

import ast
import copy
import textwrap
from dataclasses import dataclass, field

from tutor.authoring.derivative import LineBackward, Part, scatter_statement
from tutor.pack.flow import gradient, tensor_of


@dataclass(frozen=True)
class LineInfo:
    index: int
    target: str
    source: str
    operands: tuple[str, ...]  # the names it reads whose gradients are wanted, in order


@dataclass
class StepPlan:
    lines: list[str]  # targets, in the order the gradient meets them
    checks: list[str] = field(default_factory=list)
    partials: list[str] = field(default_factory=list)
    # (line target, operand) -> "first" (`dx = ...`) or "add" (`dx += ...`)
    modes: dict[tuple[str, str], str] = field(default_factory=dict)


def plan(lines: list[LineInfo]) -> list[StepPlan]:
    """The steps for `lines` (those that reach the loss), from the loss back.

    A line is differentiated once every line that reads its output has been; of the lines that
    are ready, the latest in the forward pass goes first, unless it would grade nothing (each of
    its operands is still read by a line to come) and another ready line completes a gradient:
    that one goes first, so that the branches of a tensor end where a line has something of its
    own to grade."""
    uses: dict[str, set[int]] = {}
    for line in lines:
        for x in line.operands:
            uses.setdefault(x, set()).add(line.index)
    readers = {line.target: {other.index for other in lines if line.target in other.operands}
               for line in lines}
    left = {x: set(u) for x, u in uses.items()}
    done: set[int] = set()
    steps: list[StepPlan] = []
    while len(done) < len(lines):
        ready = [ln for ln in lines if ln.index not in done and readers[ln.target] <= done]
        completing = [ln for ln in ready if any(left[x] == {ln.index} for x in ln.operands)]
        line = max(completing or ready, key=lambda ln: ln.index)
        step = StepPlan([line.target])
        for x in line.operands:
            first = left[x] == uses[x]
            step.modes[(line.target, x)] = "first" if first else "add"
            if left[x] == {line.index}:
                step.checks.append(x)
            else:
                # Graded where it is written: the first branch, or the branches so far
                # (tutor/core/network.py `_branch_lines`).
                step.partials.append(x)
            left[x].discard(line.index)
        done.add(line.index)
        steps.append(step)
    return _merged(steps)


def _merged(steps: list[StepPlan]) -> list[StepPlan]:
    """A step that grades nothing joins the next one."""
    out: list[StepPlan] = []
    carry: StepPlan | None = None
    for step in steps:
        if carry is not None:
            step = StepPlan(carry.lines + step.lines, step.checks,
                            list(dict.fromkeys(p for p in carry.partials + step.partials
                                               if p not in step.checks)),
                            {**carry.modes, **step.modes})
            carry = None
        if not step.checks:
            carry = step
            continue
        out.append(step)
    if carry is not None and out:  # nothing after it: it joins the one before
        last = out.pop()
        out.append(StepPlan(last.lines + carry.lines, last.checks,
                            list(dict.fromkeys(last.partials + [p for p in carry.partials
                                                                if p not in last.checks])),
                            {**last.modes, **carry.modes}))
    # A first branch is graded as what reaches it through the lines of its step that read it
    # (tutor/core/network.py `_step_references`): in a fused step, a line may read it alone.
    return out


# -- code ----------------------------------------------------------------------------------------
_VIEWS = {"view", "reshape", "transpose", "permute", "T", "mT", "squeeze", "unsqueeze",
          "expand", "expand_as", "view_as", "reshape_as", "flatten", "unflatten", "t",
          "contiguous", "narrow", "select"}


def _is_view(expr: ast.expr) -> bool:
    """Could `expr` share memory with a gradient it reads (then `+=` on it would change that
    gradient too)?"""
    if isinstance(expr, ast.Name):
        return True
    if isinstance(expr, ast.Subscript):
        return _is_view(expr.value)
    if isinstance(expr, ast.Attribute):
        return expr.attr in _VIEWS and _is_view(expr.value)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        return expr.func.attr in _VIEWS and _is_view(expr.func.value)
    return False


def statements(x: str, parts: list[Part], mode: str, fresh: bool) -> list[str]:
    """The statements that put one line's contributions into `d{x}`. `fresh`: `d{x}` will be
    added to later, so it must own its memory."""
    grad = gradient(x)
    exprs = [p.expr for p in parts if p.expr is not None]
    scatters = [p.scatter for p in parts if p.scatter is not None]
    out: list[str] = []
    if exprs:
        total = exprs[0]
        for e in exprs[1:]:
            # `a + -(b)` is written `a - b`, as a person would
            if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
                total = ast.BinOp(total, ast.Sub(), e.operand)
            else:
                total = ast.BinOp(total, ast.Add(), e)
        if mode == "first":
            if fresh and _is_view(total):
                total = ast.Call(ast.Attribute(total, "clone", ast.Load()), [], [])
            out.append(f"{grad} = {ast.unparse(total)}")
        elif isinstance(total, ast.UnaryOp) and isinstance(total.op, ast.USub):
            out.append(f"{grad} -= {ast.unparse(total.operand)}")
        else:
            out.append(f"{grad} += {ast.unparse(total)}")
    for i, item in enumerate(scatters):
        if mode == "first" and not exprs and i == 0:
            out.append(f"{grad} = torch.zeros_like({x})")
            out.append(scatter_statement(grad, item, first=True))
        else:
            out.append(scatter_statement(grad, item, first=False))
    return out


def solution(step: StepPlan, backward: dict[str, LineBackward],
             operands: dict[str, tuple[str, ...]]) -> str:
    """The step's reference: each line's temporaries, then its contributions, in order."""
    out: list[str] = []
    later = set(step.partials)
    for target in step.lines:
        lb = backward[target]
        out += lb.prelude
        for x in operands[target]:
            parts = lb.parts.get(x)
            if not parts:
                continue
            mode = step.modes[(target, x)]
            fresh = x in later or any(step.modes.get((t, x)) == "add"
                                      for t in step.lines[step.lines.index(target) + 1:])
            out += statements(x, parts, mode, fresh)
    return "\n".join(out) + "\n"


def todo(reason: str) -> str:
    """What a step gets where no derivative could be made: a line `pack check` names."""
    text = f"TODO (pack new): {reason}; write this step's gradients by hand"
    return f"raise NotImplementedError({text!r})\n"


TEMPLATE_WIDTH = 72  # columns: the editor's narrowest (an 80x24 terminal) shows 73 unwrapped


def forward_comment(source: str) -> list[str]:
    """The forward line as a comment, folded at spaces to the editor's width: a line too long
    for one comment continues, indented, on the next."""
    head, more = "# forward: ", "#     "
    if len(head + source) <= TEMPLATE_WIDTH:
        return [head + source]
    pieces = textwrap.wrap(source, TEMPLATE_WIDTH - len(head), break_long_words=False,
                           break_on_hyphens=False)
    rest = textwrap.wrap(" ".join(pieces[1:]), TEMPLATE_WIDTH - len(more),
                         break_long_words=False, break_on_hyphens=False)
    return [head + pieces[0], *(more + p for p in rest)]


def template(step: StepPlan, sources: dict[str, str], operands: dict[str, tuple[str, ...]],
             graded_at: dict[str, str]) -> str:
    """What the editor opens with: each line as a comment, then a `...` for each gradient the
    step writes, with what is special about it. A comment too wide for the editor at 80
    columns is shortened (the forward pass is on screen beside it) or left out."""
    out: list[str] = []
    for target in step.lines:
        out += forward_comment(sources[target])
        for x in operands[target]:
            mode = step.modes[(target, x)]
            if x in step.partials and mode == "first":
                code, note = f"{gradient(x)} = ...", f"first branch of {x}; the rest arrives later"
            elif x in step.checks and mode == "add":
                code, note = f"{gradient(x)} += ...", "add this line's branch"
            elif mode == "add":
                code, note = f"{gradient(x)} += ...", (f"another branch of {x}; graded in full at "
                                              f"{graded_at.get(x, 'a later step')}")
            else:
                code, note = f"{gradient(x)} = ...", ""
            for text in (note, note.split(";")[0]):
                if text and len(f"{code}  # {text}") <= TEMPLATE_WIDTH:
                    code = f"{code}  # {text}"
                    break
            out.append(code)
    return "\n".join(out) + "\n"


# -- words -----------------------------------------------------------------------------------------
def _shape(shape: tuple[int, ...] | list[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def hints(step: StepPlan, backward: dict[str, LineBackward], shapes: dict[str, list[int]],
          solution_text: str, operands: dict[str, tuple[str, ...]]) -> list[str]:
    """Three hints: the idea, the shapes, nearly the answer."""
    ideas: list[str] = []
    for target in step.lines:
        ideas += [i for i in backward[target].ideas if i not in ideas]
    idea = " ".join(ideas[:2]) or "Apply the chain rule to the line: local derivative times " \
                                  "the gradient arriving at its output."
    arriving = [t for t in step.lines if shapes.get(t) and t not in step.checks]
    parts = [f"The gradient arriving, `{gradient(t)}`, is "
             f"{_shape(shapes[t])}." for t in arriving[:1]]
    named = step.checks + step.partials
    parts.append(" ".join(f"`{gradient(x)}` is {_shape(shapes[x])}, like `{x}`." for x in named
                          if x in shapes))
    for target in step.lines:
        for x, dims in backward[target].sums.items():
            if x in shapes and dims and x in operands[target]:
                which = ", ".join(str(d) for d in sorted(set(dims)))
                parts.append(f"`{x}` is {_shape(shapes[x])} but the line broadcasts it: sum "
                             f"its gradient over dim{'s' if len(set(dims)) > 1 else ''} "
                             f"{which} of the line's output {_shape(shapes[target])}.")
    return [idea, " ".join(p for p in parts if p), nearly(solution_text)]


def nearly(solution_text: str) -> str:
    """The solution with each statement's local derivative left as `...`: the part that reads
    no gradient (`dW2 = ... @ dlogits`); in a statement that reads none, its last call."""
    lines = []
    for src in solution_text.strip().splitlines():
        try:
            stmt = ast.parse(src).body[0]
        except (SyntaxError, IndexError):
            lines.append(src)
            continue
        value = getattr(stmt, "value", None)
        blanked = _blank(stmt, value) if isinstance(value, ast.expr) else None
        lines.append(blanked or src)
    if not any("..." in line for line in lines):
        last = lines[-1]
        lines[-1] = last.split(" = ")[0] + " = ..." if " = " in last else last
    text = "\n".join(lines)
    return f"Nearly there: `{text}`" if len(lines) == 1 else \
        "Nearly there:\n```\n" + text + "\n```"


def _reads_gradient(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and tensor_of(n.id) is not None
               for n in ast.walk(node))


def _slots(value: ast.expr):
    """(parent, field, index) of every sub-expression that may be left blank, outermost first:
    never a function's name, an index or a number."""
    queue = [value]
    while queue:
        node = queue.pop(0)
        for name, child in ast.iter_fields(node):
            parent = node
            if name == "func" and isinstance(child, ast.Attribute):
                # a method's name stays; what it is called on may be blank
                parent, name, child = child, "value", child.value
            elif name in ("func", "slice", "ctx", "op"):
                continue
            items = child if isinstance(child, list) else [child]
            for k, item in enumerate(items):
                if isinstance(item, ast.keyword):
                    item = item.value
                if isinstance(item, ast.expr):
                    queue.append(item)
                    if not isinstance(item, ast.Constant):
                        yield parent, name, (k if isinstance(child, list) else None), item


def _blank(stmt: ast.stmt, value: ast.expr) -> str | None:
    if _is_zeros(value):
        return None
    slots = list(_slots(value))
    if _reads_gradient(value):
        pick = next((s for s in slots if not _reads_gradient(s[3])), None)
    else:
        calls = [s for s in slots if isinstance(s[3], ast.Call)]
        pick = calls[-1] if calls else None
        if pick is None:
            new = copy.deepcopy(stmt)
            new.value = ast.Constant(...)  # type: ignore[attr-defined]
            return ast.unparse(new)
    if pick is None:
        call = next((n for n in ast.walk(value) if isinstance(n, ast.Call) and n.args), None)
        if call is None:
            return None
        saved = call.args, call.keywords
        call.args, call.keywords = [ast.Constant(...)], []
        text = ast.unparse(stmt)
        call.args, call.keywords = saved
        return text
    parent, name, k, item = pick
    field = getattr(parent, name)
    if isinstance(field, list):
        old = field[k]
        field[k] = ast.keyword(old.arg, ast.Constant(...)) if isinstance(old, ast.keyword) \
            else ast.Constant(...)
        text = ast.unparse(stmt)
        field[k] = old
    else:
        setattr(parent, name, ast.Constant(...))
        text = ast.unparse(stmt)
        setattr(parent, name, item)
    return text


def _is_zeros(value: ast.expr) -> bool:
    return isinstance(value, ast.Call) and ast.unparse(value.func) == "torch.zeros_like"


def summary(step: StepPlan, sources: dict[str, str], backward: dict[str, LineBackward]) -> str:
    """The one-line explanation the author replaces with their own."""
    ideas = [i for t in step.lines for i in backward[t].ideas] if backward else []
    lines = " and ".join(f"`{sources[t]}`" for t in step.lines)
    return f"The backward pass of {lines}. " + (ideas[0] if ideas else "")


def title(step: StepPlan) -> str:
    return ", ".join(gradient(x) for x in step.checks)


# -- slips that come from the derivative's own structure --------------------------------------
def structural_slips(solution_text: str, tensor: str, shapes: dict[str, list[int]],
                     line_shape: list[int]) -> list[tuple[str, str, str]]:
    """(code, kind, message) for the slips the derivative has a place for: the sum that undoes
    a broadcast left out, a matrix product's operands in the wrong order."""
    grad = gradient(tensor)
    tree = ast.parse(solution_text)
    out = []
    for k, stmt in enumerate(tree.body):
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == grad):
            continue
        value = stmt.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and value.func.attr == "sum" and _reads_gradient(value.func.value):
            shape = shapes.get(tensor, [])
            out.append((_with(tree, k, value.func.value), "shape",
                        f"Your {grad} has the shape of what the line made, "
                        f"{_shape(line_shape)}, but `{tensor}` is {_shape(shape)}: the line "
                        f"broadcast it, and each copy sent back its own gradient. They add up: "
                        f"sum over the dimensions `{tensor}` was copied along."))
        if isinstance(value, ast.BinOp) and isinstance(value.op, ast.MatMult) \
                and isinstance(value.left, ast.Attribute) and value.left.attr == "T":
            swapped = ast.BinOp(ast.Attribute(value.right, "T", ast.Load()), ast.MatMult(),
                                value.left.value)
            out.append((_with(tree, k, swapped), "transpose",
                        f"Your {grad} is the transpose of what `{tensor}` needs: a gradient has "
                        f"the shape of its tensor, {_shape(shapes.get(tensor, []))}. The order "
                        "of a matrix product decides the shape of its result."))
    return out


def _with(tree: ast.Module, k: int, value: ast.expr) -> str:
    """The solution with statement `k`'s value replaced."""
    new = copy.deepcopy(tree)
    new.body[k].value = copy.deepcopy(value)  # type: ignore[attr-defined]
    return ast.unparse(new) + "\n"
