"""The trace's two halves on their own: what a program computes, recorded op by op, and the
computation of one value written back as code that reproduces it on either batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tutor.core.trace import Recorder, Traces, Wanted, written_out


def _trace(code: str, n: int, seed: int = 0) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, 5, generator=g)
    Yb = torch.randint(0, 5, (n,), generator=g)
    ns = {"logits": logits, "Yb": Yb, "n": n, "torch": torch, "F": F}
    rec = Recorder({id(v): k for k, v in ns.items() if isinstance(v, torch.Tensor)},
                   {(n, 5), (n,)})
    rec.own = True
    with rec:
        exec(code, ns)  # the test's own code, not a learner's: no sandbox needed
    trace = {"ops": rec.ops, "leaves": rec.leaves, "hints": rec.hints,
             "values": {f"{o}:{v}": t for (o, v), t in rec.values.items()}}
    return trace, {"logits": logits, "Yb": Yb, "n": n}


def _reference(values: dict) -> torch.Tensor:
    logits = values["logits"].clone().requires_grad_(True)
    F.cross_entropy(logits, values["Yb"]).backward()
    return logits.grad


def _run(code: str, values: dict) -> torch.Tensor:
    ns = {**values, "torch": torch, "F": F}
    exec(code, ns)
    return ns["dlogits"]


DICT_KEPT = """
grads = {}
p = F.softmax(logits, 1)
grads['logits'] = p.clone()
grads['logits'][range(n), Yb] -= 1
grads['logits'] /= n
"""


def test_a_gradient_kept_in_a_dict_is_found_and_written_out_for_any_batch():
    (a, va), (b, vb) = _trace(DICT_KEPT, 8), _trace(DICT_KEPT, 5, seed=1)
    codes = written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": _reference(va)}, {}),
                        Wanted({"logits": _reference(vb)}, {}))
    assert codes, "the dict's gradient was not found"
    code = codes[0]
    assert "range(0, n, 1)" in code and "32" not in code and "8" not in code.replace(
        "t8", ""), code
    for values in (va, vb):
        torch.testing.assert_close(_run(code, values), _reference(values))


def test_a_literal_that_follows_the_batch_is_written_as_the_batch_size():
    code = "d = torch.zeros_like(logits)\nd[range(n), Yb] = -1.0 / (n - 1)\n"
    (a, va), (b, vb) = _trace(code, 8), _trace(code, 5, seed=1)

    def want(v):
        d = torch.zeros_like(v["logits"])
        d[range(v["n"]), v["Yb"]] = -1.0 / (v["n"] - 1)
        return Wanted({"logits": d}, {})

    out = written_out(Traces.of(a, b, (8, 5)), want(va), want(vb))
    assert out and "/ (n - 1)" in out[0], out


def test_what_autograd_computed_is_never_written_back():
    code = ("x = logits.clone().requires_grad_(True)\n"
            "F.cross_entropy(x, Yb).backward()\nstolen = x.grad * 1\n")
    (a, va), (b, vb) = _trace(code, 8), _trace(code, 5, seed=1)
    assert written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": _reference(va)}, {}),
                       Wanted({"logits": _reference(vb)}, {})) == []


def test_a_value_nothing_of_the_exercise_made_answers_nothing():
    (a, va), (b, vb) = _trace(DICT_KEPT, 8), _trace(DICT_KEPT, 5, seed=1)
    for op in a["ops"]:
        op["own"] = False  # as if an earlier exercise's cells had made it
    assert written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": _reference(va)}, {}),
                       Wanted({"logits": _reference(vb)}, {})) == []


def test_a_program_past_the_op_budget_stops_being_recorded_and_answers_nothing(monkeypatch):
    import tutor.core.trace as trace

    monkeypatch.setattr(trace, "MAX_OPS", 3)
    (a, va), (b, vb) = _trace(DICT_KEPT, 8), _trace(DICT_KEPT, 5, seed=1)
    assert len(a["ops"]) == 3
    assert written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": _reference(va)}, {}),
                       Wanted({"logits": _reference(vb)}, {})) == []


def test_a_script_s_cells_keep_their_titles_and_leave_markdown_out():
    from tutor.course.submission import script_cells

    text = ("# %% [markdown]\n# # A title\n\n# %% Exercise 2\nx = 1\n\n# In[3]:\ny = 2\n"
            "# %%\n\n")
    assert script_cells(text) == ["# Exercise 2\nx = 1\n\n", "y = 2\n"]
