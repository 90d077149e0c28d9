"""The learner's names for the lesson's tensors, read off their notebook.

A learner may rename the forward pass itself (`log_probs = probs_.log()`), keep a gradient under
a name of their own (`grad_h`, `dlogits_fast`) or compare gradients with a helper of their own
instead of `cmp`. Before anything is cut or run, their names are turned into the tutor's, so that
their code runs on the tutor's forward pass:

- A forward statement of theirs is the lesson's forward line when the two expressions have the
  same shape (calls, operators, numbers, keywords) and their names agree wherever they are
  already known: a lesson name they kept, or a name matched before. At least one operand must be
  known, so that `x = y[z]` is never taken for `emb = C[Xb]` on its shape alone. The gradient of
  a renamed tensor follows it (`dlog_probs` for `dlogprobs`).
- A comparison is any call that receives a gradient and its tensor: `cmp(label, dX, X)`, a
  helper of their own whose body reads `.grad` (its arguments in any order), or any expression
  that puts a name beside `X.grad` (`torch.allclose(dX, X.grad)`). The compared name is the
  gradient of that tensor.

Nothing here runs code; no torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping

from tutor.code_facts import read
from tutor.pack.flow import gradient, spellings, tensor_of
from tutor.pack.model import Pack

# Names that are never a tensor of the lesson's, whatever shape they sit in.
_MODULES = frozenset({"torch", "F", "nn", "np", "math", "range", "len", "print", "abs", "max",
                      "min", "sum", "float", "int", "True", "False", "None"})
_KEYWORDS = {"keepdims": "keepdim", "dims": "dim", "axis": "dim"}


def forward_names(pack: Pack, trees: Iterable[ast.AST], lesson: set[str]) -> dict[str, str]:
    """{learner's name: tutor's name} for the forward tensors (and parameters) a learner
    renamed, matched line by line against the pack's forward pass (see the module's
    docstring). `lesson` holds the names the tutor's namespace already has."""
    lines = []
    for line in pack.forward_lines:
        try:
            node = ast.parse(line.source).body[0]
        except (SyntaxError, IndexError):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            lines.append((node.targets[0].id, node.value))
    # The notebook's own statements, not a function's locals (`lg = ft @ P['W']` inside a
    # training function is no name of the notebook's).
    theirs = [pair for tree in trees for node in _outside_functions(tree)
              if isinstance(node, ast.Assign) for pair in _pairs(node)]
    assigned = {target for target, _ in theirs}
    known = assigned | lesson

    def gradient_of_theirs(name: str) -> bool:  # `dbnraw`, `dlog_probs`, `d_log_probs`
        t = tensor_of(name)
        return t is not None and (t in known or t[:1] == "_" and t[1:] in assigned)

    # A gradient is never a forward tensor, however alike the code; nor is what is computed
    # from one (`acc = dprobs * counts_sum_inv` is backward code shaped like a forward line).
    # Nor is a name that is assigned from itself (`g = g / probs`: a running gradient); the
    # forward pass gives each of its tensors one value.
    running = {t for t, v in theirs if any(isinstance(n, ast.Name) and n.id == t
                                           for n in ast.walk(v))}
    theirs = [(t, v) for t, v in theirs if not gradient_of_theirs(t) and t not in running
              and not any(isinstance(n, ast.Name) and gradient_of_theirs(n.id)
                          for n in ast.walk(v))]
    # A lesson name the learner's own backward code reads is theirs too: nothing of theirs
    # stands for it.
    kept = {n.id for tree in trees for node in _outside_functions(tree)
            if isinstance(node, ast.Assign)
            and any(tensor_of(w) is not None for t in node.targets for w in _names(t))
            for n in ast.walk(node.value) if isinstance(n, ast.Name)} & lesson
    # Only what could have a forward line's skeleton is blanked out and compared: a long
    # notebook's other statements are passed over at the cost of one walk each.
    shapes = {_shape(value) for _, value in lines}
    theirs = [(t, v) for t, v in theirs if _shape(v) in shapes]
    skeletons = {id(value): _skeleton(value) for _, value in [*lines, *theirs]}
    losses = {s.target for s in pack.steps}
    names: dict[str, str] = _parameter_names(pack, trees, lesson)
    for _ in range(4):  # a few passes: a later line may anchor an earlier one
        before = len(names)
        for target, value in theirs:
            candidates = []
            for ours, line_value in lines:
                if target in lesson and target != ours:
                    continue  # a name the lesson has stays the lesson's
                if target in names and names[target] != ours:
                    continue  # known: its line may still name what it reads (`xe = Emb[xb]`)
                matched = _match(skeletons[id(value)], skeletons[id(line_value)], names, lesson,
                                 anchored=names.get(target) == ours)
                if matched is None or (ours in names.values() and names.get(target) != ours
                                       and target != ours):
                    continue
                candidates.append((ours, *matched))
            # Anchored by nothing but the function both call (`run_lstm(...)`): only a line
            # that no other line of the lesson's is like.
            if not all(strong for _, _, strong in candidates) and len(candidates) > 1:
                candidates = [c for c in candidates if c[2]]
            for ours, bound, _ in candidates:
                if bound and target == ours and ours not in losses:
                    # A lesson name of theirs on other inputs is their own code (evaluating on
                    # the training set); only their loss line names the batch they renamed.
                    continue
                found = {m: t for m, t in {**bound, target: ours}.items() if m != t}
                if set(found.values()) & kept:
                    continue
                names.update(found)
                break
        if len(names) == before:
            break
    _by_data_flow(pack, trees, lesson, names, kept)
    return names


def _pairs(node: ast.Assign) -> list[tuple[str, ast.expr]]:
    """(name, value) for each name `node` gives a value of its own: `a = x`, and each side of
    `a, b = x, y` (a forward pass written two tensors to a line), never a name that unpacks
    one value (`a, b = f(x)`)."""
    if len(node.targets) != 1:
        return []
    target = node.targets[0]
    if isinstance(target, ast.Name):
        return [(target.id, node.value)]
    if (isinstance(target, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List))
            and len(target.elts) == len(node.value.elts)
            and all(isinstance(e, ast.Name) for e in target.elts)):
        return [(e.id, v) for e, v in zip(target.elts, node.value.elts, strict=True)]  # type: ignore[attr-defined]
    return []


# Marks a called function's name among a skeleton's names.
_CALLEE = "()"


def _outside_functions(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` but those inside a function, lambda or class body."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                 ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _by_data_flow(pack: Pack, trees: Iterable[ast.AST], lesson: set[str], names: dict[str, str],
                  kept: set[str]) -> None:
    """A forward statement written otherwise than the lesson's line (`mean = pre.mean(0,
    keepdim=True)` for `bnmeani = 1/n*hprebn.sum(0, keepdim=True)`) is that line when it reads
    exactly the tensors the line reads, as names already known, and no other line does. Only
    the forward pass itself is read so (a cell that calls `backward()`), every name it reads
    must be known (a tensor, a size, a module), and a statement of the backward pass (which
    reads a gradient, never known here) is left alone."""
    tensors = {line.target for line in pack.forward_lines} | {
        t for s in pack.steps for t in s.checks} | {"Xb", "Yb"}
    plain = lesson - tensors | set(pack.sizes) | {"n", "batch_size", "vocab_size"} | _MODULES
    reads_of = {line.target: set(line.operands) & tensors for line in pack.forward_lines}
    cells = [tree for tree in trees if any(
        isinstance(n, ast.Attribute) and n.attr == "backward" for n in ast.walk(tree))]
    statements = [(node.targets[0].id, read(node.value)) for tree in cells
                  for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)]
    for _ in range(len(statements)):
        before = len(names)
        for target, reads in statements:
            if target in names or target in lesson or tensor_of(target) in tensors:
                continue  # known already, or a gradient (`dlogits = F.softmax(logits, 1)`)
            mapped = {names.get(r, r) for r in reads}
            if mapped - tensors - plain or not mapped & tensors:
                continue
            lines = [t for t, ops in reads_of.items() if ops == mapped & tensors
                     and t not in names.values() and t not in kept]
            if len(lines) == 1:
                names[target] = lines[0]
        if len(names) == before:
            break


def _parameter_names(pack: Pack, trees: Iterable[ast.AST], lesson: set[str]) -> dict[str, str]:
    """The learner's names for the parameters, from their `parameters = [...]` list: the
    lesson's parameters in the lesson's order (the trained step's), so a list of the same
    length names them one for one."""
    trained = next((s for s in pack.steps if s.kind.trained), None)
    if trained is None:
        return {}
    # A list the notebook walks to set `requires_grad`, clear `.grad` or update `.data`.
    walked = {node.iter.id for tree in trees for node in ast.walk(tree)
              if isinstance(node, ast.For) and isinstance(node.iter, ast.Name) and any(
                  isinstance(n, ast.Attribute) and n.attr in ("requires_grad", "grad", "data")
                  for n in ast.walk(node))}
    for tree in trees:
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in walked | {"parameters"}
                    and isinstance(node.value, (ast.List, ast.Tuple))
                    and len(node.value.elts) == len(trained.checks)
                    and all(isinstance(e, ast.Name) for e in node.value.elts)):
                mine = [e.id for e in node.value.elts]  # type: ignore[attr-defined]
                if set(mine) & lesson and mine != list(trained.checks):
                    continue  # their own list of the lesson's names, in another order
                return {m: t for m, t in zip(mine, trained.checks, strict=True) if m != t}
    return {}


def _names(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _shape(node: ast.AST) -> tuple[str, int, int]:
    """What two expressions with one skeleton share (its kind, its size, how many names it
    reads), found in one walk: a test that rules most statements out before `_skeleton`."""
    nodes = list(ast.walk(node))
    return type(node).__name__, len(nodes), sum(isinstance(n, ast.Name) for n in nodes)


def _skeleton(node: ast.AST) -> tuple[str, list[str]]:
    """The expression with every plain name blanked out (and keyword spellings made one), and
    the names in the order they appear."""
    found: list[str] = []

    class Blank(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:
            if n.id in _MODULES:
                return n
            found.append(n.id)
            return ast.copy_location(ast.Name("_", n.ctx), n)

        def visit_Call(self, n: ast.Call) -> ast.AST:
            if isinstance(n.func, ast.Name) and n.func.id not in _MODULES:
                # The function called is kept as itself: the same function on both sides is
                # evidence, never a name to rename.
                found.append(_CALLEE + n.func.id)
                n.func = ast.copy_location(ast.Constant(_CALLEE), n.func)
            self.generic_visit(n)
            return n

        def visit_keyword(self, k: ast.keyword) -> ast.AST:
            self.generic_visit(k)
            if k.arg in _KEYWORDS:
                k.arg = _KEYWORDS[k.arg]
            return k

    import copy

    blank = Blank().visit(copy.deepcopy(node))
    return ast.dump(blank), found


def _match(mine: tuple[str, list[str]], ours: tuple[str, list[str]], names: Mapping[str, str],
           lesson: set[str], anchored: bool = False) -> tuple[dict[str, str], bool] | None:
    """The names a learner's expression binds when it is the lesson's line (same skeleton,
    names agreeing where known, at least one known, or only the function both call), and
    whether a known name anchored it (`anchored`: the target is known to be the line's); else
    None."""
    if mine[0] != ours[0] or len(mine[1]) != len(ours[1]):
        return None
    bound: dict[str, str] = {}
    callee = False
    for a, b in zip(mine[1], ours[1], strict=True):
        if a.startswith(_CALLEE) or b.startswith(_CALLEE):
            if a != b:
                return None
            callee = True
            continue
        known = names.get(a, a if a in lesson else None)
        if known is not None:
            if known != b:
                return None
            anchored = True
            continue
        if bound.setdefault(a, b) != b:
            return None
    if anchored or callee and bound:
        return bound, anchored
    return None


def batch_sizes(pack: Pack, trees: Iterable[ast.Module], lesson: set[str],
                data: set[str]) -> dict[str, str]:
    """{learner's constant: "n"} for a number of their own that is the batch's size
    (`BATCH_SIZE = 32`, `B = Xb.shape[0]`, never given anything else): it stands for `n`, so that
    code using it is right on the fresh batch too, as it was right in their notebook."""
    size = pack.lesson.get("batch_size")
    if not isinstance(size, int):
        return {}
    # A number that is also one of the network's sizes (the GPT's `n_head = 4` beside a batch of
    # 4) says nothing about which it is: only a length read off the batch does then.
    plain = size not in pack.sizes.values()
    other: set[str] = set()  # names also given something else than the batch's size
    constant: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.stmt):
                continue
            names = written_names(node)
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and (plain and isinstance(node.value, ast.Constant)
                         and type(node.value.value) is int and node.value.value == size
                         or _is_batch_length(node.value))):
                constant |= names
            else:
                other |= names
    return {name: "n" for name in sorted(constant - other)
            if name not in lesson and name not in data}


def _is_batch_length(value: ast.expr) -> bool:
    """`Xb.shape[0]`, `Yb.shape[0]`, `Xb.size(0)`, `len(Xb)`: the batch's size, as computed."""
    text = ast.unparse(value).replace(" ", "")
    return text in {f"{b}.shape[0]" for b in ("Xb", "Yb")} | {f"{b}.size(0)" for b in (
        "Xb", "Yb")} | {f"len({b})" for b in ("Xb", "Yb")}


def written_names(node: ast.stmt) -> set[str]:
    """The plain names a statement itself assigns (not those of the statements inside it)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)}


def gradient_names(forward: Mapping[str, str]) -> dict[str, str]:
    """The gradient names a renamed tensor's gradient goes by (`dlog_probs`, `d_log_probs`,
    `log_probs_grad`, `grad_log_probs`, `δlog_probs`), as the tutor's."""
    out = {}
    for mine, ours in forward.items():
        for spelling in spellings(mine):
            out[spelling] = gradient(ours)
    return out


def comparers(trees: Iterable[ast.AST], named: Iterable[str] = ("cmp",)) -> set[str]:
    """The notebook's comparison helpers: those the lesson names (`named`, pack.toml
    [notebook] compare) and functions of the learner's that read the `.grad` of what they are
    given or name themselves (`t.grad`, `fwd[name].grad`, a loop's `t.grad`). A function that
    reads a global tensor's `.grad` (`acc('h', state.grad[0])` in a tape's closure) uses the
    gradient, it compares nothing."""
    out = set(named)
    for tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            # What it is given, and what it names itself (`for name, t in [...]: t.grad`).
            given = {a.arg for a in [*node.args.posonlyargs, *node.args.args,
                                     *node.args.kwonlyargs]} | {
                n.id for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            if any(isinstance(n, ast.Attribute) and n.attr == "grad" and any(
                    isinstance(m, ast.Name) and m.id in given for m in ast.walk(n.value))
                   for n in ast.walk(node)):
                out.add(node.name)
    return out


def comparisons(node: ast.stmt, tensors: set[str], helpers: set[str]) -> list[tuple[str, str]]:
    """(gradient name, tensor) for each comparison in a statement (see the module's
    docstring); [] when the statement compares nothing.

    Kept on the statement itself for the names it was asked with: a submission is read for
    each exercise, and each reading asks this of every statement again."""
    key = (frozenset(tensors), frozenset(helpers))
    kept = getattr(node, "_tutor_compared", None)
    if kept is not None and kept[0] == key:
        return list(kept[1])
    found = _comparisons(node, tensors, helpers)
    node._tutor_compared = (key, tuple(found))  # type: ignore[attr-defined]
    return found


def _comparisons(node: ast.stmt, tensors: set[str], helpers: set[str]
                 ) -> list[tuple[str, str]]:
    if isinstance(node, ast.For):
        return _loop_comparisons(node, tensors, helpers)
    if not isinstance(node, (ast.Expr, ast.Assign)):
        return []
    out = []
    for call in ast.walk(node.value):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id in helpers):
            continue
        args = [*call.args, *(k.value for k in call.keywords)]
        plain = [a.id for a in args if isinstance(a, ast.Name) and a.id not in _MODULES]
        tensor = [a for a in plain if a in tensors]
        other = [a for a in plain if a not in tensors]
        if len(tensor) == 1 and len(other) == 1:
            out.append((other[0], tensor[0]))
        elif len(tensor) == 2 and not other:
            # `cmp('logits', dlogits, logits)` with both names the lesson's: the last names the
            # tensor, the one before it is its gradient.
            out.append((plain[0], plain[1]))
    if out:
        return out
    graded = {n.value.id for n in ast.walk(node.value) if isinstance(n, ast.Attribute)
              and n.attr == "grad" and isinstance(n.value, ast.Name) and n.value.id in tensors}
    if len(graded) != 1:
        return []
    (tensor,) = graded
    callees = {id(n.func) for n in ast.walk(node.value) if isinstance(n, ast.Call)}
    others = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)
              and n.id not in _MODULES and n.id != tensor and id(n) not in callees}
    return [(others.pop(), tensor)] if len(others) == 1 else []


def _loop_comparisons(node: ast.For, tensors: set[str], helpers: set[str]
                      ) -> list[tuple[str, str]]:
    """A loop that compares each entry of a list: `for name in ['probs', ...]: cmp(name,
    globals()['d' + name], ...)`, or `for label, mine, ref in [('probs', dprobs, probs), ...]:
    cmp(label, mine, ref)`: each entry is a comparison."""
    compares = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                   and n.func.id in helpers for n in ast.walk(node)) or any(
        isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(node))
    if not compares or not isinstance(node.iter, (ast.List, ast.Tuple)):
        return []
    out = []
    for entry in node.iter.elts:
        if isinstance(entry, ast.Constant) and isinstance(entry.value, str) \
                and entry.value in tensors:
            out.append((gradient(entry.value), entry.value))
        elif isinstance(entry, (ast.Tuple, ast.List)):
            plain = [e.id for e in entry.elts if isinstance(e, ast.Name)]
            tensor = [a for a in plain if a in tensors]
            other = [a for a in plain if a not in tensors]
            if len(tensor) == 1 and len(other) == 1:
                out.append((other[0], tensor[0]))
            elif len(tensor) == 2 and not other:
                out.append((plain[0], plain[1]))
    return out


def is_comparison(node: ast.stmt, tensors: set[str], helpers: set[str]) -> bool:
    """Whether a statement only compares (a `cmp` line, a print of a comparison), or reads the
    notebook's own autograd gradients, which the tutor's namespace does not hold."""
    if comparisons(node, tensors, helpers):
        return True
    if not isinstance(node, ast.Expr):
        return False
    return any(isinstance(n, ast.Attribute) and n.attr == "grad" for n in ast.walk(node))
