"""The trace's two halves on their own: what a program computes, recorded op by op, and the
computation of one value written back as code that reproduces it on either batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tutor.core.trace import Recorder, Traces, Wanted, learner_upstream, note_names, written_out


def _trace(code: str, n: int, seed: int = 0, names: bool = False, keep_all: bool = False
           ) -> tuple[dict, dict]:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, 5, generator=g)
    Yb = torch.randint(0, 5, (n,), generator=g)
    ns = {"logits": logits, "Yb": Yb, "n": n, "torch": torch, "F": F}
    rec = Recorder({id(v): k for k, v in ns.items() if isinstance(v, torch.Tensor)},
                   {(n, 5), (n,)}, keep_all=keep_all)
    rec.own = True
    with rec:
        exec(code, ns)  # the test's own code, not a learner's: no sandbox needed
    if names:  # what the program holds after its cell, as the child notes it
        note_names(rec, ns)
    trace = {"ops": rec.ops, "leaves": rec.leaves, "hints": rec.hints, "held": sorted(rec.held),
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


def test_a_value_the_code_went_on_to_change_is_not_its_answer():
    # The product equals the gradient for a moment, but what the program keeps is flipped.
    code = "kept = [(logits * 2).flip(0)]\n"
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)
    assert not written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": 2 * va["logits"]}, {}),
                           Wanted({"logits": 2 * vb["logits"]}, {}))
    kept = "kept = [logits * 2]\n"
    (a, va), (b, vb) = _trace(kept, 8, names=True), _trace(kept, 5, seed=1, names=True)
    assert written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": 2 * va["logits"]}, {}),
                       Wanted({"logits": 2 * vb["logits"]}, {}))


# A step given `dup` (whose right value is `3 * logits`) answers `dx = 2 * dup`. The learner's
# own `dup` was wrong, nothing names it, and their `dx` is right for that `dup`.
CASCADE = "store = [logits * 0.5]\nstore.append(store[0] * 2)\n"


def test_a_step_built_on_a_wrong_upstream_of_the_learner_is_found_from_it():
    (a, va), (b, vb) = _trace(CASCADE, 8, names=True), _trace(CASCADE, 5, seed=1, names=True)
    read = Traces.of(a, b, (8, 5))
    wanted = [Wanted({"x": 6 * v["logits"]}, {"dup": 3 * v["logits"]}) for v in (va, vb)]
    for w, side in zip(wanted, (read.first, read.second), strict=True):
        def rule(shift, w=w):
            return {"x": w.answers["x"] + 2 * shift["dup"]}
        w.theirs = learner_upstream(side, w, rule)
        assert w.theirs is not None
        torch.testing.assert_close(w.theirs["x"], w.answers["x"] / 6)
    codes = written_out(read, *wanted)
    assert codes and codes[0].startswith("t"), codes
    ns = {"ddup": 3 * va["logits"], "torch": torch}
    exec(codes[0], ns)  # from the right upstream, their code gives the right answer
    torch.testing.assert_close(ns["dx"], 6 * va["logits"])


def test_a_wrong_step_on_a_wrong_upstream_is_not_found():
    code = "store = [logits * 0.5]\nstore.append(store[0] * 3)\n"
    (a, va), (b, _) = _trace(code, 8), _trace(code, 5, seed=1)
    read = Traces.of(a, b, (8, 5))
    w = Wanted({"x": 6 * va["logits"]}, {"dup": 3 * va["logits"]})
    assert learner_upstream(read.first, w,
                            lambda shift: {"x": w.answers["x"] + 2 * shift["dup"]}) is None


def test_two_answers_of_the_same_value_are_both_written_out():
    # A residual's two branches are both the gradient as it arrives: the trace may take one
    # version for both, and each must still be assigned.
    code = ("a = F.softmax(logits, 1)\na[range(n), Yb] -= 1\na /= n\n"
            "grads = {'out': a.clone(), 'skip': a.clone()}\n")
    (a, va), (b, vb) = _trace(code, 8), _trace(code, 5, seed=1)
    codes = written_out(Traces.of(a, b, (8, 5)),
                        Wanted({"logits": _reference(va), "probs": _reference(va)}, {}),
                        Wanted({"logits": _reference(vb), "probs": _reference(vb)}, {}))
    assert codes and "dlogits = " in codes[0] and "dprobs = " in codes[0], codes
    ns = {**va, "torch": torch, "F": F}
    exec(codes[0], ns)
    torch.testing.assert_close(ns["dprobs"], _reference(va))


def test_a_step_that_only_passes_on_what_it_is_given_needs_the_programs_own_copy():
    # An identity step (a residual's branch) answers the gradient as it arrives: any version of
    # that value is the rule, whoever made it. A program that never wrote the step, holding the
    # value only as what it computed for the step before, earns nothing.
    code = "a = F.softmax(logits, 1)\na[range(n), Yb] -= 1\na /= n\nmine = a\n"
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)

    def want(v):
        ref = _reference(v)
        return Wanted({"probs": ref}, {"logits": ref})

    # (What made the value, from the lesson's tensors, may be written out: it does not read
    # the given gradient, so the check's rule probe refuses it.)
    codes = written_out(Traces.of(a, b, (8, 5)), want(va), want(vb))
    assert not any("dlogits" in c for c in codes), codes
    # Kept under the step's own name, the copy is the learner's.
    code += "dprobs = a.clone()\n"
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)
    codes = written_out(Traces.of(a, b, (8, 5)), want(va), want(vb))
    assert any("dlogits" in c for c in codes), codes


def test_a_forward_value_kept_under_the_gradients_key_is_not_taken_for_it():
    # One dict keeps values by forward name and another gradients by the same names: the key
    # is a hint only where no value is the gradient the step is given.
    code = ("vals = {'logits': logits * 1.0}\n"
            "a = F.softmax(logits, 1)\na[range(n), Yb] -= 1\na /= n\n"
            "grads = {'logits': a}\n"
            "grads['probs'] = grads['logits'] * vals['logits']\n")
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)

    def want(v):
        ref = _reference(v)
        return Wanted({"probs": ref * v["logits"]}, {"logits": ref})

    codes = written_out(Traces.of(a, b, (8, 5)), want(va), want(vb))
    assert codes, "the step's answer was not found"
    ns = {**va, "torch": torch, "F": F, "dlogits": _reference(va)}
    exec(codes[0], ns)
    torch.testing.assert_close(ns["dprobs"], _reference(va) * va["logits"])


def test_a_value_that_only_passed_by_is_not_the_answer_the_program_keeps_under_its_name():
    # The right gradient exists only as a function's local; the program keeps a wrong one under
    # the gradient's own name: that is its answer, and no right one is found for it.
    code = ("def total():\n    a = F.softmax(logits, 1)\n    a[range(n), Yb] -= 1\n"
            "    a = a / n\n    return a.sum()\n"
            "s = total()\ndlogits = F.softmax(logits, 1) / n\n")
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)
    codes = written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": _reference(va)}, {}),
                        Wanted({"logits": _reference(vb)}, {}))
    assert not any("a[range" in c or "sub" in c for c in codes), codes


def test_a_gradient_completed_in_place_with_another_s_branch_answers_as_it_was_before():
    # The forward pass read a state out of `logits` (an LSTM's last hidden state out of the
    # stacked early ones): the program adds that state's gradient into its slice, later. What it
    # held before that is its answer; a constant added the same way is a slip of its own.
    base = "grads = {}\ngrads['h_in'] = logits[:, -1] * 3\ngrads['logits'] = (logits * 2).clone()\n"
    for completion, found in (("grads['logits'][:, -1] += grads['h_in']\n", True),
                              ("grads['logits'][:, -1] += 1.0\n", False)):
        code = base + completion
        (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)
        codes = written_out(Traces.of(a, b, (8, 5)), Wanted({"logits": 2 * va["logits"]}, {}),
                            Wanted({"logits": 2 * vb["logits"]}, {}))
        ns = {**va, "torch": torch, "F": F}
        exec(codes[0], ns)
        assert torch.allclose(ns["dlogits"], 2 * va["logits"]) == found, (completion, codes)


def test_a_gradient_kept_in_pieces_is_put_together_from_them():
    # One piece per column (a list of per-head gradients): no single tensor the program made
    # is the gradient, the pieces stacked are.
    code = "parts = [logits[:, i] * 2 for i in range(5)]\n"
    (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 6, seed=1, names=True)
    traces = Traces.of(a, b, (8, 6))
    wanted = [Wanted({"logits": 2 * v["logits"]}, {}) for v in (va, vb)]
    assert not written_out(traces, *wanted)  # by value alone, nothing
    traces.first.assembles = traces.second.assembles = True
    codes = written_out(traces, *wanted)
    assert codes and "torch.stack" in codes[0], codes
    for values in (va, vb):
        ns = {**values, "torch": torch, "F": F}
        exec(codes[0], ns)
        torch.testing.assert_close(ns["dlogits"], 2 * values["logits"])


def test_a_residuals_right_value_under_other_gradients_names_is_not_this_ones_answer():
    # A residual: the step is given `dlogits` and answers `dprobs` and a first branch of
    # `dcounts`, all three one value. The program keeps a wrong value under the answer's own
    # key (a slip), while the given gradient and the other branch hold the right one: those are
    # other gradients', and the answer is what the program keeps for this one.
    code = ("a = F.softmax(logits, 1)\na[range(n), Yb] -= 1\na /= n\n"
            "grads = {'logits': a}\n"
            "grads['probs'] = grads['logits'].clone() * 1.25\n"
            "grads['counts'] = grads['logits'].clone()\n")

    def want(v):
        ref = _reference(v)
        return Wanted({"probs": ref}, {"logits": ref}, {"counts": ref})

    def found(code: str) -> list[str]:
        (a, va), (b, vb) = _trace(code, 8, names=True), _trace(code, 5, seed=1, names=True)
        return written_out(Traces.of(a, b, (8, 5)), want(va), want(vb))

    slipped = found(code)
    assert slipped and all("1.25" in c for c in slipped), slipped
    # Without the slip, the program's own copy is found and is right.
    right = found(code.replace(" * 1.25", ""))
    assert right and not any("1.25" in c for c in right), right


def test_a_fused_step_is_given_only_what_arrives_at_its_lines():
    # The LSTM's fused gates step holds the lines `ai = ...` and `i = torch.sigmoid(ai)`: `di`
    # arrives from outside, `dai` is the step's own work and never a place its code starts.
    from pathlib import Path

    from tutor.config import Settings
    from tutor.core.engine import Engine

    root = Path(__file__).resolve().parent.parent / "exercises" / "lstm"
    engine = Engine(Settings(device="cpu", pack=str(root)))
    try:
        wanted = engine._wanted(engine.pack.step("fused/gates"), engine.network.main)
    finally:
        engine.close()
    assert set(wanted.given) == {"i", "f", "g", "o"} and set(wanted.answers) == {"ifgo"}


def test_a_gradient_kept_inside_a_larger_value_is_cut_out_of_it():
    # The gradient beside another in one tensor, one column of zeros above it (a bias row):
    # the answer is that part of it, at whatever offset.
    code = "both = torch.cat([torch.zeros(n, 1), logits, 2 * logits], 1) * 3\n"
    (a, va), (b, vb) = _trace(code, 8, keep_all=True), _trace(code, 6, seed=1, keep_all=True)
    traces = Traces.of(a, b, (8, 6))
    wanted = [Wanted({"logits": 3 * v["logits"]}, {}) for v in (va, vb)]
    codes = written_out(traces, *wanted)
    assert codes and ".narrow(1, 1, 5)" in codes[0], codes
    for values in (va, vb):
        ns = {**values, "torch": torch, "F": F}
        exec(codes[0], ns)
        torch.testing.assert_close(ns["dlogits"], 3 * values["logits"])


def test_a_step_worked_inside_a_larger_formula_starts_from_the_earlier_gradient():
    # `dprobs` never made: the code goes from `dlogits` (an earlier step's answer) straight to
    # the one this step answers, and is cut there.
    code = "d = 2 * logits\nout = d * logits.exp()\n"
    (a, va), (b, vb) = _trace(code, 8), _trace(code, 6, seed=1)
    traces = Traces.of(a, b, (8, 6))
    wanted = [Wanted({"probs": 2 * v["logits"] * v["logits"].exp()}, {},
                     earlier={"logits": 2 * v["logits"]}) for v in (va, vb)]
    codes = written_out(traces, *wanted)
    # after the code from what the step is given (here nothing: from the lesson's tensors)
    assert len(codes) >= 2 and "dlogits.clone()" not in codes[0], codes
    assert any(c.startswith("t") and "dlogits.clone()" in c for c in codes[1:]), codes


def test_a_gradient_kept_under_its_own_name_is_its_answer_whatever_a_larger_value_holds():
    # `grads['logits']` is wrong (twice too big), while a later value holds the right numbers
    # beside others (a fused form of the same step): the kept one is the answer.
    code = ("grads = {}\ngrads['logits'] = 6 * logits\n"
            "both = torch.cat([torch.zeros(n, 1), logits, 2 * logits], 1) * 3\n")
    (a, va), (b, vb) = (_trace(code, 8, names=True, keep_all=True),
                        _trace(code, 6, seed=1, names=True, keep_all=True))
    traces = Traces.of(a, b, (8, 6))
    wanted = [Wanted({"logits": 3 * v["logits"]}, {}) for v in (va, vb)]
    codes = written_out(traces, *wanted)
    assert codes and all(".narrow(" not in c for c in codes), codes
    ns = {**va, "torch": torch, "F": F}
    exec(codes[0], ns)
    torch.testing.assert_close(ns["dlogits"], 6 * va["logits"])


def test_a_gradient_kept_with_its_axes_merged_is_laid_out_again():
    # Kept as rows of another grouping (`[n*5]` for `[n, 5]`): the same entries in order.
    code = "flat = (3 * logits).reshape(-1)\n"
    (a, va), (b, vb) = _trace(code, 8, keep_all=True), _trace(code, 6, seed=1, keep_all=True)
    traces = Traces.of(a, b, (8, 6))
    wanted = [Wanted({"logits": 3 * v["logits"]}, {}) for v in (va, vb)]
    codes = written_out(traces, *wanted)
    assert codes, codes
    for values in (va, vb):
        ns = {**values, "torch": torch, "F": F}
        exec(codes[0], ns)
        torch.testing.assert_close(ns["dlogits"], 3 * values["logits"])


def test_merged_and_split_axes_are_laid_out_for_any_batch():
    from tutor.core.trace import regroup_code, regrouped

    assert regrouped((80, 27), (5, 16, 27)) and regrouped((20, 16, 8), (5, 4, 16, 8))
    assert not regrouped((27, 80), (5, 16, 27)) and not regrouped((5, 16), (5, 16))
    # each with the same tensor on a batch of 3 in place of 5
    for source, target, other in [((5, 16, 27), (80, 27), (3, 16, 27)),
                                  ((80, 27), (5, 16, 27), (48, 27)),
                                  ((5, 4, 16, 8), (20, 16, 8), (3, 4, 16, 8)),
                                  ((5, 16, 4, 8), (5, 16, 32), (3, 16, 4, 8)),
                                  ((5, 16, 32), (5, 16, 4, 8), (3, 16, 32))]:
        for shape in (source, other):
            t = torch.arange(torch.Size(shape).numel()).reshape(shape)
            laid = eval("t" + regroup_code(source, target))  # the test's own expression
            assert tuple(laid.shape[1:]) == target[1:] and torch.equal(laid.flatten(),
                                                                         t.flatten())


def test_a_tensor_drawn_again_in_place_is_read_as_its_new_value():
    # `p.normal_()` cannot be written back, but what is read of `p` after it is its new value.
    p = torch.zeros(4)
    rec = Recorder({}, {(4,)}, keep_all=True)
    with rec:
        q = p * 1.0
        q.normal_(generator=torch.Generator().manual_seed(0))
        r = q * 2.0
    read_of_q = [tuple(x) for op in rec.ops if op.get("call") == ("method", "mul")
                 for x in op["reads"]][-1]
    torch.testing.assert_close(rec.values[read_of_q] * 2.0, r)


def test_axes_in_another_order_are_laid_out_by_their_sizes():
    from tutor.core.trace import axis_order, laid_out, layout_code

    assert axis_order((8, 24, 64), (24, 64, 8)) == (1, 2, 0)
    assert axis_order((8, 8, 64), (8, 64, 8)) is None  # two sizes alike: the sizes cannot tell
    assert laid_out((8, 24, 64), (24, 64, 8)) and laid_out((80, 27), (5, 16, 27))
    t = torch.randn(8, 24, 64)
    assert torch.equal(eval("t" + layout_code((8, 24, 64), (24, 64, 8))), t.permute(1, 2, 0))


def test_a_gradient_kept_as_matrices_the_other_way_round_is_put_together():
    # One matrix per tap, each kept as (in, out): the kernel's gradient, (out, in, taps), is
    # their stack, each laid back.
    code = "a = 2 * logits.T\nb = 3 * logits.T\n"
    (x, vx), (y, vy) = _trace(code, 8, keep_all=True), _trace(code, 6, seed=1, keep_all=True)
    traces = Traces.of(x, y, (8, 6))
    wanted = [Wanted({"logits": torch.stack([2 * v["logits"], 3 * v["logits"]], 2)}, {})
              for v in (vx, vy)]
    traces.first.assembles = traces.second.assembles = True
    codes = written_out(traces, *wanted)
    assert codes and ".T" in codes[0] and "torch.stack" in codes[0], codes
    ns = {**vx, "torch": torch, "F": F}
    exec(codes[0], ns)
    torch.testing.assert_close(ns["dlogits"], torch.stack([2 * vx["logits"], 3 * vx["logits"]],
                                                          2))


def test_a_parameter_kept_in_pieces_is_put_together_from_them_in_any_order():
    from tutor.core.frame import _pieced

    old, new = torch.randn(10, 64), torch.randn(10, 64)
    kernel = torch.stack([old.T, new.T], 2)  # (64, 10, 2): tap 0 the one read later
    made = _pieced((64, 10, 2), [((3, 0), new), ((7, 0), old)])
    match = [parts for t, parts in made if torch.equal(t, kernel)]
    assert match and dict(match[0]) == {(7, 0): "{}.select(2, 0).T", (3, 0): "{}.select(2, 1).T"}
