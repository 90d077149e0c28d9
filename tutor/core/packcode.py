"""A pack's own code runs under the learner's rules: a lesson is data, whoever wrote it.

The setup (`make_data`, `init_params`, `sample_batch`, ...), the forward lines, a function
step's cases and picture, and the training exercise's evaluation are code that comes with a
pack, and a pack may come from anywhere (a course's folder, `pack new`, a download). So each is
read by the sandbox's syntax policy and runs behind its attribute guard and builtins, exactly as
a learner's code does (docs/packs.md, "A pack's code"), with three things a lesson needs and
learner code may not do:

- import `torch`, `torch.nn.functional`, `math`, `random` and `collections.namedtuple` (and
  nothing else), each handed over as the sandbox's own version: `random` is a private generator
  of the namespace, so a pack's shuffling touches no one else's random state;
- seed a generator (`g.manual_seed(...)`, `random.seed(...)`): the lesson's data and parameters
  are drawn from seeds;
- print nowhere (what a pack prints is dropped).

A pack that asks for anything else is refused when its code is first compiled, with the line
and what to change. Nothing else is needed for correctness; it is what makes opening a pack
from an untrusted source as safe as checking a learner's code.
"""

from __future__ import annotations

import ast
import copy
import random
import types
from collections import namedtuple
from functools import lru_cache
from typing import Any

import torch

from tutor.core.candidate import Output, sandbox_globals
from tutor.pack.model import PackError
from tutor.sandbox import objects
from tutor.sandbox.guard import GUARD_NAME, rewrite
from tutor.sandbox.modules import GUARD, MODULES
from tutor.sandbox.policy import inspect

_IMPORT = "__tutor_pack_import__"
_SEEDS = {"manual_seed": "seeded_generator", "seed": "seeded_state"}  # as the policy reads them
# Autograd, closed to a learner because it would give the answer, is how a lesson computes its
# expectations (a function step's `expect`): open to a pack's code, on tensors and torch only.
_AUTOGRAD = {"grad", "backward", "grad_fn", "retain_grad", "retains_grad", "requires_grad",
             "requires_grad_", "autograd", "enable_grad", "set_grad_enabled"}
_OPENED = {**_SEEDS, **{name: f"pack_{name}" for name in _AUTOGRAD}}


class _Random:
    """`random` in a pack: the module's functions a lesson uses, on a generator of its own."""

    def __init__(self) -> None:
        self.state = random.Random()
        for name in ("seed", "shuffle", "random", "randint", "randrange", "choice", "choices",
                     "sample", "uniform", "gauss"):
            setattr(self, name, getattr(self.state, name))
        self.Random = random.Random


def _modules() -> dict[str, Any]:
    return {"torch": MODULES["torch"], "torch.nn.functional": MODULES["F"],
            "math": MODULES["math"], "random": _Random(), "collections": types.SimpleNamespace(
                namedtuple=namedtuple)}


# What a lesson's code may use of torch beyond a learner's allow list: its random state, to draw
# a batch and put the state back, and the fused recurrent cells a forward line may call. Each is
# tensor math or the generator's state; nothing that reads, writes or loads.
_TORCH_EXTRA = {
    "random": types.SimpleNamespace(get_rng_state=torch.random.get_rng_state,
                                    set_rng_state=torch.random.set_rng_state,
                                    manual_seed=torch.random.manual_seed),
    "get_rng_state": torch.get_rng_state,
    "set_rng_state": torch.set_rng_state,
    "lstm_cell": torch.lstm_cell,
    "gru_cell": torch.gru_cell,
    "rnn_tanh_cell": torch.rnn_tanh_cell,
    "lstm": torch.lstm,
    "gru": torch.gru,
    # torch's own optimizer, what a lesson's expectation of an update step is measured by
    "optim": types.SimpleNamespace(AdamW=torch.optim.AdamW, SGD=torch.optim.SGD,
                                   Adam=torch.optim.Adam),
}


def _set_attribute(obj: Any, name: str, value: Any) -> None:
    """`obj.name = value` in a pack's code: a tensor's `.grad` too, to hand torch's optimizer
    its gradient; everything else as for a learner."""
    if name == "grad" and isinstance(obj, torch.Tensor):
        obj.grad = value
        return
    objects.set_attribute(obj, name, value)


def _seeding(obj: Any, name: str) -> Any:
    """The guard of a pack's code: the sandbox's, seeding a generator or the state above, and
    torch's few extras for lessons."""
    if obj is MODULES["torch"] and name in _TORCH_EXTRA:
        return _TORCH_EXTRA[name]
    if name in _AUTOGRAD:
        if isinstance(obj, torch.Tensor) or obj is torch.autograd:
            return getattr(obj, name)
        if obj is MODULES["torch"]:
            return getattr(torch, name)
    if (obj is _TORCH_EXTRA["random"] or obj is _TORCH_EXTRA["optim"]) \
            and not name.startswith("_"):
        return getattr(obj, name)
    if name in _SEEDS:
        if type(obj) is torch.Generator:
            return getattr(obj, name) if name == "manual_seed" else obj.seed
        if obj is MODULES["torch"]:
            return torch.manual_seed if name == "manual_seed" else torch.seed
        if isinstance(obj, (_Random, random.Random)) and name == "seed":
            return obj.seed
    return GUARD(obj, name)


class _Imports(ast.NodeTransformer):
    """`import x as y` becomes `y = __tutor_pack_import__("x")`, for the modules above only."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _refuse(self, node: ast.stmt, what: str) -> PackError:
        return PackError(f"{self.where} line {node.lineno}: `{what}` is not allowed in a "
                         "pack's code, which runs under the learner's rules: only torch, "
                         "torch.nn.functional, math, random and collections.namedtuple can be "
                         "imported")

    def visit_Import(self, node: ast.Import) -> Any:
        out = []
        for alias in node.names:
            if alias.name not in ("torch", "torch.nn.functional", "math", "random"):
                raise self._refuse(node, f"import {alias.name}")
            if "." in alias.name and not alias.asname:
                bound = alias.name.split(".")[0]  # `import torch.nn.functional` binds torch
                value: ast.expr = ast.Call(ast.Name(_IMPORT, ast.Load()),
                                           [ast.Constant(bound)], [])
            else:
                bound = alias.asname or alias.name
                value = ast.Call(ast.Name(_IMPORT, ast.Load()), [ast.Constant(alias.name)], [])
            out.append(ast.copy_location(ast.Assign([ast.Name(bound, ast.Store())], value),
                                         node))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        names = [(a.name, a.asname) for a in node.names]
        allowed = {("torch.nn", "functional"), ("collections", "namedtuple"),
                   ("torch", "nn")}
        if node.level or any((node.module, n) not in allowed for n, _ in names):
            what = f"from {'.' * node.level}{node.module or ''} import " + ", ".join(
                n for n, _ in names)
            raise self._refuse(node, what)
        module = "torch.nn.functional" if node.module == "torch.nn" else node.module
        out = []
        for name, asname in names:
            source: ast.expr = ast.Call(ast.Name(_IMPORT, ast.Load()), [ast.Constant(module)], [])
            if module == "collections":
                source = ast.Attribute(source, name, ast.Load())
            out.append(ast.copy_location(
                ast.Assign([ast.Name(asname or name, ast.Store())], source), node))
        return out


def _for_the_policy(tree: ast.Module) -> ast.Module:
    """A copy the policy reads: imports (handled above) left out, seeding under names it lets
    through; the guard decides at run time on what seeding is allowed."""
    tree = copy.deepcopy(tree)

    class _Strip(ast.NodeTransformer):
        def visit_Import(self, node: ast.AST) -> Any:
            return ast.Pass()

        visit_ImportFrom = visit_Import

        def visit_Attribute(self, node: ast.Attribute) -> Any:
            self.generic_visit(node)
            if node.attr in _OPENED:
                node.attr = _OPENED[node.attr]
            return node

    return ast.fix_missing_locations(_Strip().visit(tree))


@lru_cache(maxsize=256)
def compiled(code: str, where: str, mode: str = "exec") -> types.CodeType:
    """A pack's code behind the policy and the guard; PackError, naming the line, otherwise."""
    try:
        tree: ast.AST = ast.parse(code, where, mode)
    except SyntaxError as exc:
        raise PackError(f"{where} line {exc.lineno}: {exc.msg}") from None
    body = tree if isinstance(tree, ast.Module) else ast.Module([ast.Expr(tree.body)], [])
    refusal = inspect(_for_the_policy(body))
    if refusal:
        raise PackError(f"{where} line {refusal.line}: {refusal.construct} is not allowed in a "
                        f"pack's code, which runs under the learner's rules: {refusal.why}")
    if isinstance(tree, ast.Module):
        tree = ast.fix_missing_locations(_Imports(where).visit(tree))
        return compile(rewrite(tree), where, "exec")
    expression = rewrite(ast.Module([ast.Expr(tree.body)], [])).body[0]
    return compile(ast.Expression(expression.value), where, "eval")  # type: ignore[attr-defined]


def scope(**names: Any) -> dict:
    """A fresh namespace for a pack's code: the sandbox's modules, guard and builtins (prints
    dropped), the imports above, and `names`."""
    ns = sandbox_globals(Output())
    builtins = dict(ns["__builtins__"])
    builtins[GUARD_NAME] = _seeding
    modules = _modules()
    builtins[_IMPORT] = modules.__getitem__
    builtins[objects.SET_NAME] = _set_attribute
    ns.update({"__builtins__": builtins, GUARD_NAME: _seeding, _IMPORT: modules.__getitem__})
    ns.update(names)
    return ns


def check(pack: Any) -> None:
    """Every piece of the pack's code compiled behind the policy: PackError, naming the first
    piece and line that is refused, before any of it runs."""
    pieces = [(pack.setup_code, f"<{pack.id} setup>"), (pack.forward_code, f"<{pack.id} forward>")]
    for step in pack.steps:
        pieces.append((step.solution, f"<{step.id} solution>"))
        spec = step.function
        if spec is not None:
            for part in ("lesson", "draw", "expect", "forward"):
                pieces.append((getattr(spec, part) or "", f"<{step.id} {part}>"))
            if spec.picture is not None:
                pieces += [(spec.picture.later or "", f"<{step.id} picture later>"),
                           (spec.picture.demo or "", f"<{step.id} picture demo>")]
    for exercise in pack.exercises:
        code = (exercise.settings.get("eval") or {}).get("code", "")
        pieces.append((code, f"<{pack.id} training eval>"))
    for code, where in pieces:
        if code.strip():
            compiled(code, where)


def run(code: str, ns: dict, where: str) -> None:
    """Run a pack's statements in `ns` (made by `scope`)."""
    exec(compiled(code, where), ns)  # noqa: S102 - behind the policy and the guard


def evaluate(expression: str, ns: dict, where: str) -> Any:
    """A pack's expression, evaluated in `ns` (made by `scope`)."""
    return eval(compiled(expression, where, "eval"), ns)  # noqa: S307 - behind the guard
