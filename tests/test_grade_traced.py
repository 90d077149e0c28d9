"""A gradient is graded by what the notebook computes, wherever the notebook keeps it.

One right notebook and one with three wrong steps, each rewritten into structural styles that
keep no gradient under the lecture's name (a class, a dict, a list, functions that return
tuples or a dict, a closure, lambdas, `torch.no_grad()` blocks, a running variable copied into the
lecture's names): every style must score every step as its base does, by the line's rule (no
↷), so also under `--strict-rule`. The grader finds these answers by tracing the program
(tutor/core/trace.py), not by reading names."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import lecture_notebooks as L
import pytest

ROOT = Path(__file__).resolve().parent.parent

WRONG = {
    "probs": "dprobs = dlogprobs * probs",
    "bnvar": "dbnvar = 0.5 * (bnvar + 1e-5) ** -1.5 * dbnvar_inv",
    "emb": "demb = dembcat.view(emb.shape).flip(0)",
}
WRONG_STEPS = {"atomic/probs", "atomic/bnvar", "atomic/emb"}
_GRAD = re.compile(r"\bd(" + "|".join(sorted(L.CMP_ORDER, key=len, reverse=True)) + r")\b")


def _lines(wrong: bool) -> list[tuple[str, str]]:
    return [(t, WRONG.get(t, code) if wrong else code) for t, code in L.EX1_LINES]


def _in(store: str, code: str) -> str:
    """Every gradient of `code` kept in `store` under its tensor's name."""
    return _GRAD.sub(lambda m: f"{store}['{m.group(1)}']", code)


def _indent(code: str, by: str = "    ") -> str:
    return "\n".join(by + line for line in code.split("\n"))


def dict_style(lines):
    cells = [L.EX1_HEAD, "grads = {}", *(_in("grads", c) for _, c in lines),
             "for name in ['probs', 'logits', 'hprebn']:\n"
             "    cmp(name, grads[name], globals()[name])"]
    return cells, _in("grads", L.EX2_BACKWARD), _in("grads", L.EX3_BACKWARD)


def list_style(lines):
    # Each gradient appended where it is made; a dict of positions names them for comparison.
    names = list(dict.fromkeys(m for _, c in lines for m in _GRAD.findall(c)))
    at = {t: i for i, t in enumerate(names)}
    body = "\n".join(_GRAD.sub(lambda m: f"G[{at[m.group(1)]}]", c) for _, c in lines)
    return [L.EX1_HEAD, f"G = [None] * {len(names)}\n" + body], L.EX2_BACKWARD, L.EX3_BACKWARD


def tuple_function(lines):
    body = _indent("\n".join(c for _, c in lines))
    ret = ", ".join(f"d{t}" for t in L.CMP_ORDER)
    return [L.EX1_HEAD, f"def manual_backward(logprobs, probs):\n{body}\n    return {ret}\n",
            f"results = manual_backward(logprobs, probs)\n"
            f"for name, g in zip({L.CMP_ORDER!r}, results):\n"
            "    cmp(name, g, globals()[name])"], L.EX2_BACKWARD, L.EX3_BACKWARD


def dict_function(lines):
    body = _indent("\n".join(_in("out", c) for _, c in lines))
    ex2 = ("def ce_backward(logits, Yb):\n    g = F.softmax(logits, 1)\n"
           "    g[range(n), Yb] -= 1\n    return g / n\n\nmine = ce_backward(logits, Yb)")
    return [L.EX1_HEAD, f"def backward_all():\n    out = {{}}\n{body}\n    return out\n",
            "got = backward_all()"], ex2, L.EX3_BACKWARD


def closure(lines):
    body = _indent(_indent("\n".join(_in("store", c) for _, c in lines)))
    return [L.EX1_HEAD, "def make():\n    store = {}\n    def run():\n" + body
            + "\n        return store\n    return run\n\nfound = make()()"], \
        L.EX2_BACKWARD, L.EX3_BACKWARD


def lambdas(lines):
    swap = {"hpreact": "dhpreact = tanh_back(h, dh)",
            "counts_sum": "dcounts_sum = power_back(counts_sum, -1, "
                                         "dcounts_sum_inv)"}
    out = [L.EX1_HEAD, "tanh_back = lambda out, g: (1 - out**2) * g\n"
                       "power_back = lambda x, p, g: p * x**(p - 1) * g"]
    for t, code in lines:
        out.append(swap.get(t) or code)
    return out, L.EX2_BACKWARD, L.EX3_BACKWARD


def no_grad(lines):
    return [L.EX1_HEAD, *("with torch.no_grad():\n" + _indent(c) for _, c in lines)], \
        "with torch.no_grad():\n" + _indent(L.EX2_BACKWARD), L.EX3_BACKWARD


def running_variable(lines):
    """Each line's gradient built in one scratch variable `acc`, then copied into the
    lecture's name."""
    cells = [L.EX1_HEAD]
    for _, code in lines:
        out = []
        for stmt in code.split("\n"):
            m = re.match(r"(d\w+) (\+?=) (.+)$", stmt)
            if m and "for " not in code:
                out += [f"acc = {m.group(3)}", f"{m.group(1)} {m.group(2)} acc"]
            else:
                out.append(stmt)
        cells.append("\n".join(out))
    return cells, L.EX2_BACKWARD, L.EX3_BACKWARD


def class_style(lines):
    """A `Backward` class with one method per line storing `self.dX`, exercises 2 and 3 as a
    subclass, the exercise's code calling its methods."""
    methods = "\n".join(f"    def line_{i}(self):\n" + _indent(_GRAD.sub(
        lambda m: f"self.d{m.group(1)}", code), "        ") for i, (_, code) in enumerate(lines))
    calls = "\n".join(f"bw.line_{i}()" for i in range(len(lines)))
    fused = ("class Fused(Backward):\n    def cross_entropy(self):\n"
             "        self.dlogits = F.softmax(logits, 1)\n"
             "        self.dlogits[range(n), Yb] -= 1\n        self.dlogits /= n\n")
    return [L.EX1_HEAD, "class Backward:\n    def __init__(self):\n        self.done = 0\n\n"
            + methods, "bw = Backward()\n" + calls], \
        fused + "\nfb = Fused()\nfb.cross_entropy()", L.EX3_BACKWARD


def model_class(lines):
    """A model class whose `backward` method computes every gradient into a dict it returns,
    exercise 2 as a method of a subclass, the training loop calling `model.backward()`."""
    body = _indent(_in("g", "\n".join(c for _, c in lines)), "        ")
    cls = ("class MLP:\n    def __init__(self):\n        self.grads = {}\n\n"
           "    def forward(self):\n        return loss\n\n"
           "    def backward(self):\n        g = self.grads\n" + body + "\n        return g\n")
    ex2 = ("class FusedMLP(MLP):\n    def backward_logits(self):\n"
           "        d = F.softmax(logits, 1)\n        d[range(n), Yb] -= 1\n"
           "        return d / n\n\nmine = FusedMLP().backward_logits()\n"
           "cmp('logits', mine, logits)")
    return [L.EX1_HEAD, cls, "model = MLP()\nmodel.forward()\ngrads1 = model.backward()\n"
            "cmp('probs', grads1['probs'], probs)"], ex2, L.EX3_BACKWARD


def check_in_loop(lines):
    """Exercise 1 as the lecture's cell; the training loop checks its gradients against
    autograd for its first steps (`if i < 3: loss.backward(); assert_close(...)`)."""
    backward = L.TRAIN_BACKWARD + (
        "    if i < 3:\n      with torch.enable_grad():\n"
        "        for t in parameters:\n          t.grad = None\n"
        "        loss.backward()\n"
        "      for mine, t in zip(grads, parameters):\n"
        "        torch.testing.assert_close(mine, t.grad)\n")
    return [L.ex1_one_cell(lines)], L.EX2_BACKWARD, L.EX3_BACKWARD, backward


def slots_record(lines):
    """Every gradient an attribute of one record whose class lists them in `__slots__`."""
    names = tuple(dict.fromkeys(f"d{m}" for _, c in lines for m in _GRAD.findall(c)))
    body = "\n".join(_GRAD.sub(lambda m: f"G.d{m.group(1)}", c) for _, c in lines)
    return [L.EX1_HEAD, f"class Grads:\n    __slots__ = {names!r}\n\nG = Grads()\n" + body], \
        L.EX2_BACKWARD, L.EX3_BACKWARD


def decorated(lines):
    """Each line's backward a function of its own under a decorator of the learner's that
    counts its calls (`functools.wraps`, an attribute on the wrapper), called in order."""
    keep = ("import functools\n\ndef counted(fn):\n    @functools.wraps(fn)\n"
            "    def wrapper(*args):\n        wrapper.calls += 1\n        return fn(*args)\n"
            "    wrapper.calls = 0\n    return wrapper\n")
    out = [L.EX1_HEAD, keep, "grads = {}"]
    for i, (_, code) in enumerate(lines):
        out.append(f"@counted\ndef line_{i}():\n" + _indent(_in("grads", code))
                   + f"\n\nline_{i}()")
    return out, L.EX2_BACKWARD, L.EX3_BACKWARD


def namespace_record(lines):
    """Every gradient an attribute of a `types.SimpleNamespace`, imported by name, with
    `from math import sqrt` beside it (imports bind what the sandbox has)."""
    body = "\n".join(_GRAD.sub(lambda m: f"g.{m.group(1)}", c) for _, c in lines)
    return [L.EX1_HEAD, "from types import SimpleNamespace\nfrom math import sqrt\n"
            "g = SimpleNamespace(scale=sqrt(4.0))\n" + body], L.EX2_BACKWARD, L.EX3_BACKWARD


STYLES = {f.__name__: f for f in (class_style, dict_style, list_style, tuple_function,
                                  dict_function, closure, lambdas, no_grad, running_variable,
                                  model_class, check_in_loop, slots_record, decorated,
                                  namespace_record)}


def _grade(path: Path, wrong: bool, style: str) -> dict:
    cells, ex2, ex3, *backward = STYLES[style](_lines(wrong))
    L.write(path, L.notebook(cells, ex2, ex3, *backward))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return {s["id"]: s for s in json.loads(done.stdout)["steps"] if s["id"] != "train/loop"}


@pytest.mark.slow
@pytest.mark.parametrize("wrong", [False, True], ids=["right", "three-wrong"])
@pytest.mark.parametrize("style", list(STYLES))
def test_every_style_is_graded_as_its_base(tmp_path, style, wrong):
    steps = _grade(tmp_path / f"{style}.ipynb", wrong, style)
    expected_wrong = WRONG_STEPS if wrong else set()
    failed = {sid for sid, s in steps.items() if s["score"] == 0}
    assert failed == expected_wrong, {sid: steps[sid]["message"] for sid in
                                      failed ^ expected_wrong}
    # By the line's rule: the same points under --strict-rule.
    skipped = {sid for sid, s in steps.items() if s["rule"] == "skipped"}
    assert not skipped, {sid: steps[sid]["message"] for sid in skipped}


@pytest.mark.slow
def test_a_runaway_loop_keeps_what_ran_before_it_and_autograds_answer_earns_nothing(tmp_path):
    """A cell that never ends stops the traced run there (the steps before it are still
    found); a gradient copied from `.grad` after a `backward()` is never written back; a cell
    that tries to leave the sandbox runs nothing."""
    marker = tmp_path / "escaped"
    cells = [L.EX1_HEAD, "grads = {}", f"import os\nos.system('touch {marker}')",
             _in("grads", L.EX1_LINES[0][1]),
             "while True:\n    x = logits * 2",
             "lp = logits.detach().clone().requires_grad_(True)\n"
             "F.cross_entropy(lp, Yb).backward()\ngrads['logits'] = lp.grad * 1"]
    path = L.write(tmp_path / "hostile.ipynb", L.notebook(cells))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    steps = {s["id"]: s for s in json.loads(done.stdout)["steps"]}
    assert steps["atomic/logprobs"]["score"] == steps["atomic/logprobs"]["max_score"]
    assert steps["atomic/logits"]["score"] == 0
    assert not marker.exists()


@pytest.mark.slow
def test_a_gradient_read_from_autograd_starts_what_follows_and_earns_nothing_itself(tmp_path):
    """A learner who takes a gradient from autograd (`grads['h'] = h.grad.clone()`, as a
    lesson that gives `dstate` from autograd means) is graded on the steps built from it, by
    their rules; the step whose gradient was read, or built from it, earns nothing."""
    lines = [(t, "dh = h.grad.clone()\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)"
              if t == "h" else code) for t, code in L.EX1_LINES]
    lines = [(t, "dhprebn = (hpreact.grad * 1.0) @ torch.eye(hprebn.shape[1])"
              if t == "hprebn" else code) for t, code in lines]
    cells = [L.EX1_HEAD, "grads = {}\n" + "\n".join(_in("grads", c) for _, c in lines)]
    path = L.write(tmp_path / "autograd.ipynb", L.notebook(cells))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--strict-rule", "--train-steps", "5", str(path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    steps = {s["id"]: s for s in json.loads(done.stdout)["steps"]}
    failed = {sid for sid, s in steps.items() if s["score"] == 0}
    assert failed == {"atomic/h", "atomic/hprebn"}, {sid: steps[sid]["message"]
                                                     for sid in failed}


def _as_script(document: dict, titled: bool) -> str:
    """A notebook saved as jupytext or VS Code save it: `# %%` cells, the exercise's comment
    as the cell's title where `titled`, markdown cells commented out."""
    out = ["# ---\n# jupyter:\n#   kernelspec:\n#     name: python3\n# ---\n"]
    for cell in document["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            out.append("# %% [markdown]\n" + "\n".join(f"# {x}" for x in source.splitlines()))
        elif titled and source.startswith("# Exercise"):
            first, _, rest = source.partition("\n")
            out.append(f"# %% {first[2:]}\n{rest}")
        else:
            out.append("# %%\n" + source)
    return "\n\n".join(out) + "\n"


@pytest.mark.slow
@pytest.mark.parametrize("titled", [False, True], ids=["jupytext", "vscode-titles"])
@pytest.mark.parametrize("wrong", [False, True], ids=["right", "three-wrong"])
def test_a_notebook_saved_as_a_script_is_graded_as_the_notebook(tmp_path, titled, wrong):
    cells, ex2, ex3 = dict_style(_lines(wrong))
    path = tmp_path / "hw.py"
    path.write_text(_as_script(L.notebook(cells, ex2, ex3), titled))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "5", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    steps = {s["id"]: s for s in json.loads(done.stdout)["steps"] if s["id"] != "train/loop"}
    failed = {sid for sid, s in steps.items() if s["score"] == 0}
    assert failed == (WRONG_STEPS if wrong else set()), failed


FUNCTION_RETURNING_A_DICT = """\
def train_backward(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb):
    out = {}
    d = F.softmax(logits, 1)
    d[range(n), Yb] -= 1
    d = d / n
    out['W2'], out['b2'] = h.T @ d, d.sum(0)
    dhpre = (1.0 - h**2) * (d @ W2.T)
    out['bngain'] = (bnraw * dhpre).sum(0, keepdim=True)
    out['bnbias'] = dhpre.sum(0, keepdim=True)
    dpre = bngain*bnvar_inv/n * (n*dhpre - dhpre.sum(0) - n/(n-1)*bnraw*(dhpre*bnraw).sum(0))
    out['W1'], out['b1'] = embcat.T @ dpre, dpre.sum(0)
    out['C'] = torch.zeros_like(C).index_add_(0, Xb.view(-1), (dpre @ W1.T).view(-1, 10))
    return out
"""
ORDER = "['C', 'W1', 'b1', 'W2', 'b2', 'bngain', 'bnbias']"
TRAINING_LOOPS = {
    "a function returning a dict": (
        FUNCTION_RETURNING_A_DICT,
        "    got = train_backward(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb)\n"
        f"    grads = [got[k] for k in {ORDER}]\n"),
    "a class whose method fills a dict": (
        "class Grads:\n    def __init__(self):\n        self.g = {}\n\n"
        "    def run(self, logits, h, bnraw, bnvar_inv, embcat, Xb, Yb):\n"
        "        self.g = train_backward(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb)\n\n"
        "    def __getitem__(self, k):\n        return self.g[k]\n\n"
        + FUNCTION_RETURNING_A_DICT,
        "    G = Grads()\n    G.run(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb)\n"
        f"    grads = [G[k] for k in {ORDER}]\n"),
    "a model made once, whose backward fills it": (
        "class Model:\n    def __init__(self):\n        self.g = {}\n\n"
        "    def backward(self, logits, h, bnraw, bnvar_inv, embcat, Xb, Yb):\n"
        "        self.g = train_backward(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb)\n"
        "        return 0.0\n\n"
        f"    def grad_list(self):\n        return [self.g[k] for k in {ORDER}]\n\n"
        + FUNCTION_RETURNING_A_DICT + "\nmodel = Model()\n",
        "    my_loss = model.backward(logits, h, bnraw, bnvar_inv, embcat, Xb, Yb)\n"
        "    grads = model.grad_list()\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("loop", list(TRAINING_LOOPS))
def test_a_training_loop_whose_gradients_reach_the_update_through_an_expression(tmp_path,
                                                                                   loop):
    defs, backward = TRAINING_LOOPS[loop]
    path = tmp_path / "loop.ipynb"
    document = L.notebook([L.ex1_one_cell(), defs], backward=backward)
    L.write(path, document)
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "50", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    train = next(s for s in json.loads(done.stdout)["steps"] if s["id"] == "train/loop")
    assert train["status"] == "passed", train["message"]


@pytest.mark.slow
def test_a_wrong_gradient_returned_in_a_dict_fails_the_training_loop(tmp_path):
    defs, backward = TRAINING_LOOPS["a function returning a dict"]
    defs = defs.replace("out['bngain'] = (bnraw * dhpre)", "out['bngain'] = -(bnraw * dhpre)")
    path = tmp_path / "loop.ipynb"
    L.write(path, L.notebook([L.ex1_one_cell(), defs], backward=backward))
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "grade", "--json",
                           "--train-steps", "50", str(path)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    train = next(s for s in json.loads(done.stdout)["steps"] if s["id"] == "train/loop")
    assert train["score"] == 0, train
    assert "differed from autograd" in train["message"], train["message"]
