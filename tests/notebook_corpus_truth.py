"""Ground truth for the notebook corpora, measured by running a notebook as a kernel would.

Never uses the tutor. A case's code cells run in order in one namespace, one top-level statement
at a time (an exception ends its cell, as in Jupyter, and the next cell runs): lines starting
with `%` or `!` are dropped, the string 'names.txt' becomes the real data/names.txt, and
matplotlib is a stub. Every call of `cmp` (or of a learner's own helper named in HELPERS, whose
arguments are told apart by type: the string is the label, the tensor holding a .grad is the
forward tensor, the other tensor the learner's gradient) records
`torch.allclose(dt, t.grad)` under the forward tensor's name (found by identity in the
namespace, not from the label, which learners mistype), then calls the learner's own function,
so that a comparison that raises (shapes that do not broadcast) ends its cell as it would.

Phases follow the lecture's cells: exercise 1 until the first cell calling `cross_entropy(`,
exercise 2 until the next cell with `.var(`, `.std(` or `unbiased` (exercise 3's forward
cell), exercise 3 until the cell holding the training loop (a `for ... in zip(...)` loop that
updates), exercise 4 after. A step is right when the last value the learner compared in its
phase for each of its gradients was allclose to autograd's, wrong when any was not, not
attempted when none was compared (a gradient assigned in its phase but never compared counts
with its value at the end of the phase). Exercise 2 is `dlogits` against `logits.grad`,
exercise 3 `dhprebn` against `hprebn.grad`.

Exercise 4: the loop's step count is cut to `train_steps`; before each update loop
`for p, grad in zip(PARAMS, GRADS)` the learner's gradients are checked against autograd on
the lecture's training forward (batchnorm with the unbiased variance, cross-entropy) at the
current parameters (the zip's first list, in the lecture's order C, W1, b1, W2, b2, bngain,
bnbias) and batch (`Xb`, `Yb`). Right when every checked step's gradients are allclose
(rtol 1e-4, atol 1e-6) and the loss fell by at least 0.1 over the run.

A learner who renamed the forward pass gives `aliases` (their name -> the lecture's name), as a
keyword or as a case's "aliases" entry; a corpus module may hold them in `ALIASES[case_name]`.

    .venv/bin/python tests/notebook_corpus_truth.py notebook_corpus_tune   # checks a corpus
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import re
import sys
import types
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

NAMES = Path(__file__).resolve().parents[1] / "data" / "names.txt"

STEPS: list[tuple[str, list[str]]] = [
    ("atomic/logprobs", ["logprobs"]), ("atomic/probs", ["probs"]),
    ("atomic/counts_sum_inv", ["counts_sum_inv"]), ("atomic/counts_sum", ["counts_sum"]),
    ("atomic/counts", ["counts"]), ("atomic/norm_logits", ["norm_logits"]),
    ("atomic/logit_maxes", ["logit_maxes"]), ("atomic/logits", ["logits"]),
    ("atomic/h", ["h", "W2", "b2"]), ("atomic/hpreact", ["hpreact"]),
    ("atomic/bngain", ["bngain", "bnraw", "bnbias"]), ("atomic/bnvar_inv", ["bnvar_inv"]),
    ("atomic/bnvar", ["bnvar"]), ("atomic/bndiff2", ["bndiff2"]), ("atomic/bndiff", ["bndiff"]),
    ("atomic/bnmeani", ["bnmeani"]), ("atomic/hprebn", ["hprebn"]),
    ("atomic/embcat", ["embcat", "W1", "b1"]), ("atomic/emb", ["emb"]), ("atomic/C", ["C"]),
    ("fused/cross_entropy", ["logits"]), ("fused/batchnorm", ["hprebn"]),
    ("train/loop", []),
]
STEP_IDS = [s for s, _ in STEPS]
CANON = sorted({g for _, gs in STEPS for g in gs} | {"Xb", "Yb"})
PHASE_OF_STEP = {s: ("ex2" if s == "fused/cross_entropy" else "ex3" if s == "fused/batchnorm"
                     else "ex4" if s == "train/loop" else "ex1") for s in STEP_IDS}
PHASE_GRADS = {"ex1": sorted({g for s, gs in STEPS if s.startswith("atomic/") for g in gs}),
               "ex2": ["logits"], "ex3": ["hprebn"]}
HELPERS = {"cmp", "compare", "check_grad", "cmp_grad", "grad_check", "check"}


class _Stub(types.ModuleType):
    """matplotlib and pyplot: every attribute is a callable that returns the stub."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs):
        return self

    def __iter__(self):
        return iter((self, self))


def _clean(source: str) -> str:
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    text = "\n".join(lines)
    text = re.sub(r"(['\"])names\.txt\1", repr(str(NAMES)), text)
    return text


def _cut_steps(text: str, steps: int) -> str:
    text = re.sub(r"\bmax_steps\s*=\s*[\d_]+", f"max_steps = {steps}", text)
    return re.sub(r"range\(\s*(\d[\d_]{3,})\s*\)", f"range({steps})", text)


def _update_loops(tree: ast.AST) -> list[ast.For]:
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                and isinstance(node.iter.func, ast.Name) and node.iter.func.id == "zip"
                and len(node.iter.args) >= 2
                and any(isinstance(b, (ast.AugAssign, ast.Assign)) for b in ast.walk(node))):
            found.append(node)
    return found


class _InsertCheck(ast.NodeTransformer):
    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            out = []
            for stmt in block:
                if stmt in self.loops:
                    call = ast.Expr(ast.Call(ast.Name("__truth_train_check__", ast.Load()),
                                             [stmt.iter.args[0], stmt.iter.args[1]], []))
                    out.append(call)
                out.append(stmt)
            setattr(node, field, out)
        return node


def _assigned(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name):
                    names.add(sub.id)
    return names


def _close(dt, t) -> bool:
    try:
        return bool(torch.allclose(dt, t.grad))
    except Exception:
        return False


def _margin(dt, t) -> float:
    """How far inside (<1) or outside (>1) allclose's tolerance: max |dt-g| / (1e-8 + 1e-5|g|)."""
    try:
        g = t.grad
        return float(((dt - g).abs() / (1e-8 + 1e-5 * g.abs())).max())
    except Exception:
        return float("inf")


class StopTraining(Exception):
    pass


class _Run:
    def __init__(self, aliases: dict[str, str], train_steps: int):
        self.aliases = dict(aliases)
        self.inverse = {v: k for k, v in self.aliases.items()}
        self.train_steps = train_steps
        self.ns: dict = {"__name__": "__main__"}
        self.phase = "ex1"
        self.assigned: set[str] = set()
        self.last: dict[tuple[str, str], bool] = {}
        self.records: list[tuple] = []
        self.errors: list[str] = []
        self.train_checks: list[bool] = []
        self.train_losses: list[float] = []
        self.train_errors = 0
        self.train_placeholder = False

    # names
    def canon(self, name: str) -> str | None:
        name = self.aliases.get(name, name)
        return name if name in CANON else None

    def learner(self, canon: str) -> str:
        return self.inverse.get(canon, canon)

    def name_of(self, t) -> str | None:
        for k, v in list(self.ns.items()):
            if v is t and not k.startswith("_"):
                c = self.canon(k)
                if c:
                    return c
        return None

    # recording helpers
    def recorder(self, fn_name: str, original=None):
        def record(*args, **kwargs):
            vals = list(args) + list(kwargs.values())
            label = next((v for v in vals if isinstance(v, str)), None)
            tensors = [v for v in vals if isinstance(v, torch.Tensor)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t = next((v for v in tensors if v.grad is not None), None)
            dt = next((v for v in tensors if v is not t), None)
            name = self.name_of(t) if t is not None else None
            ok = dt is not None and t is not None and _close(dt, t)
            margin = _margin(dt, t) if dt is not None and t is not None else float("inf")
            self.records.append((self.phase, fn_name, label, name, ok, margin))
            if name:
                self.last[(self.phase, name)] = ok
            if original is not None:  # the learner's own helper runs, and fails, as it would
                return original(*args, **kwargs)
            return None
        record.__truth_recorder__ = True
        return record

    def install(self):
        for h in HELPERS:
            f = self.ns.get(h)
            if h == "cmp" and f is None:
                self.ns["cmp"] = self.recorder("cmp")
            elif callable(f) and not getattr(f, "__truth_recorder__", False):
                self.ns[h] = self.recorder(h, f)

    # phases
    def end_phase(self):
        if self.phase in PHASE_GRADS:
            for g in PHASE_GRADS[self.phase]:
                dname = "d" + self.learner(g)
                if (self.phase, g) not in self.last and dname in self.assigned:
                    t = self.ns.get(self.learner(g))
                    dt = self.ns.get(dname)
                    if not isinstance(dt, torch.Tensor):
                        continue  # a placeholder (`dlogits = None # TODO`): not attempted
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        ok = isinstance(t, torch.Tensor) and t.grad is not None and _close(dt, t)
                    self.last[(self.phase, g)] = ok
                    self.records.append((self.phase, "<assigned>", dname, g, ok,
                                         _margin(dt, t) if ok else float("inf")))
        self.assigned = set()

    def next_phase(self, text: str, tree: ast.AST) -> str:
        if _update_loops(tree):
            return "ex4"
        if self.phase == "ex1" and "cross_entropy(" in text:
            return "ex2"
        if self.phase == "ex2" and re.search(r"\.var\(|\.std\(|unbiased", text):
            return "ex3"
        if self.phase == "ex4":
            return "after"
        return self.phase

    # exercise 4
    def train_check(self, params, grads):
        step = len(self.train_losses)
        if step >= self.train_steps:
            return
        if all(g is None for g in grads):
            self.train_placeholder = True  # the starter's `None` gradients: not attempted
            raise StopTraining
        try:
            xb = self.ns[self.learner("Xb")]
            yb = self.ns[self.learner("Yb")]
            with torch.enable_grad():
                P = [p.detach().clone().requires_grad_(True) for p in params]
                C, W1, b1, W2, b2, bngain, bnbias = P
                emb = C[xb]
                hprebn = emb.view(emb.shape[0], -1) @ W1 + b1
                mean = hprebn.mean(0, keepdim=True)
                var = hprebn.var(0, keepdim=True, unbiased=True)
                hpreact = bngain * (hprebn - mean) * (var + 1e-5) ** -0.5 + bnbias
                logits = torch.tanh(hpreact) @ W2 + b2
                loss = F.cross_entropy(logits, yb)
                loss.backward()
            grads = list(grads)
            ok = len(grads) == len(P) and all(
                isinstance(g, torch.Tensor) and torch.allclose(g, p.grad, rtol=1e-4, atol=1e-6)
                for g, p in zip(grads, P, strict=False))
            self.train_checks.append(ok)
            self.train_losses.append(loss.item())
        except Exception as e:  # noqa: BLE001
            self.train_errors += 1
            self.errors.append(f"train check: {type(e).__name__}: {e}")
            self.train_losses.append(float("nan"))

    # running
    def run_cell(self, source: str):
        text = _cut_steps(_clean(source), self.train_steps)
        try:
            tree = ast.parse(text)
        except SyntaxError as e:
            self.errors.append(f"syntax: {e}")
            return
        phase = self.next_phase(text, tree)
        if phase != self.phase:
            self.end_phase()
            self.phase = phase
        loops = _update_loops(tree)
        if loops:
            ins = _InsertCheck()
            ins.loops = loops
            tree = ins.visit(tree)
            ast.fix_missing_locations(tree)
        self.assigned |= _assigned(tree)
        self.ns["__truth_train_check__"] = self.train_check
        for stmt in tree.body:
            self.install()
            code = compile(ast.Module([stmt], []), "<cell>", "exec")
            try:
                exec(code, self.ns)
            except StopTraining:
                break
            except Exception as e:  # noqa: BLE001
                self.errors.append(f"{self.phase}: {type(e).__name__}: {e}")
                if self.phase == "ex4":
                    self.train_errors += 1
                break
        self.install()

    def verdict(self) -> dict:
        right, wrong, partial = set(), set(), set()
        for step, grads in STEPS:
            if step == "train/loop":
                if not self.train_losses or self.train_placeholder:
                    continue
                losses = [x for x in self.train_losses if x == x]
                fell = len(losses) >= 2 and (sum(losses[-10:]) / len(losses[-10:])
                                             < losses[0] - 0.1)
                ok = (self.train_errors == 0 and bool(self.train_checks)
                      and all(self.train_checks) and fell)
                (right if ok else wrong).add(step)
                continue
            phase = PHASE_OF_STEP[step]
            vals = [self.last.get((phase, g)) for g in grads]
            if all(v is None for v in vals):
                continue
            if any(v is None for v in vals):
                partial.add(step)
                continue
            (right if all(vals) else wrong).add(step)
        return {"right": right, "wrong": wrong, "partial": partial, "errors": self.errors,
                "records": self.records,  # (phase, helper, label, tensor, allclose, margin)
                "train": {"checks": len(self.train_checks),
                          "bad_checks": self.train_checks.count(False),
                          "first_loss": self.train_losses[0] if self.train_losses else None,
                          "last_loss": self.train_losses[-1] if self.train_losses else None}}


def measure(case: dict, aliases: dict[str, str] | None = None, train_steps: int = 200,
            seed: int = 67280421310721) -> dict:
    """Run a case's notebook; returns {"right", "wrong", "partial", "errors", "records", ...}.
    `seed` seeds torch's default generator first (a fresh kernel's by default); other seeds
    show whether a verdict hangs on rounding."""
    run = _Run(aliases if aliases is not None else case.get("aliases", {}), train_steps)
    torch.manual_seed(seed)
    stub = _Stub("matplotlib")
    saved = {k: sys.modules.get(k) for k in ("matplotlib", "matplotlib.pyplot")}
    sys.modules["matplotlib"] = stub
    sys.modules["matplotlib.pyplot"] = stub
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for cell in case["notebook"]["cells"]:
                if cell.get("cell_type") != "code":
                    continue
                src = cell["source"]
                run.run_cell(src if isinstance(src, str) else "".join(src))
            run.end_phase()
    finally:
        torch.set_num_threads(threads)
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return run.verdict()


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    module = importlib.import_module(argv[1] if len(argv) > 1 else "notebook_corpus_tune")
    only = set(argv[2:])
    aliases = getattr(module, "ALIASES", {})
    bad = 0
    for case in module.CASES:
        if only and case["name"] not in only:
            continue
        got = measure(case, aliases.get(case["name"]))
        agree = (got["right"] == set(case["right"]) and got["wrong"] == set(case["wrong"])
                 and not got["partial"])
        bad += not agree
        print(f"{'ok ' if agree else 'BAD'} {case['name']:32s} right {len(got['right']):2d} "
              f"wrong {len(got['wrong']):2d} partial {len(got['partial'])} "
              f"train {got['train']}")
        if not agree:
            print("   measured right-only:", sorted(got["right"] - set(case["right"])))
            print("   measured wrong-only:", sorted(got["wrong"] - set(case["wrong"])))
            print("   labelled right, not measured right:",
                  sorted(set(case["right"]) - got["right"]))
            print("   labelled wrong, not measured wrong:",
                  sorted(set(case["wrong"]) - got["wrong"]))
            print("   partial:", sorted(got["partial"]), "errors:", got["errors"][:5])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
