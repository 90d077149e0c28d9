"""Slips a rule names in the learner's own code, wherever they occur (tutor/core/smallest.py):
operators grouped otherwise than the formula, a second name taken for a copy, a tensor tiled
where each entry was to be repeated in place (or the other way), `=` where `+=` belongs (or the
other way), a product's operand that needed a transpose or the operands in the other order, and
two reshapes that each needed a transpose, windows walked one entry apart where they lie a
window apart, a gradient read where its own tensor belongs.

Each is searched as the engine searches it, with a runner that plays the confined child: it runs
every changed program on the same inputs and hands back the graded tensor.
"""

from __future__ import annotations

import ast

import pytest
import torch

from tutor.core import smallest

torch.manual_seed(0)
A, B = torch.randn(4, 6), torch.randn(6, 5)
INPUTS = {"a": A, "b": B, "h": torch.randn(4, 6), "dh": torch.randn(4, 6),
          "t": torch.randn(2, 3, 2, 2), "u": torch.randn(2, 3, 4, 4), "q": torch.randn(3, 4, 5),
          "dz": torch.randn(4, 5), "s": torch.randn(5, 5), "e": torch.randn(5, 5), "n": 4, "m": 3}


def _runner(grad: str):
    def run(sources: list[str]):
        out = []
        for source in sources:
            scope = {"torch": torch, **{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                        for k, v in INPUTS.items()}}
            try:
                exec(compile(source, "<changed>", "exec"), scope)  # noqa: S102 - test code
            except Exception:  # noqa: BLE001 - a change that cannot run matches nothing
                out.append([None])
                continue
            out.append([scope.get(grad)])
        return out
    return run


def _named(code: str, right: str, grad: str = "d", shapes: dict | None = None) -> str:
    """The message of the change the search finds in `code`, whose right version is `right`."""
    ref = _runner(grad)([right])[0][0]
    value = _runner(grad)([code])[0][0]
    assert isinstance(ref, torch.Tensor) and isinstance(value, torch.Tensor)
    assert smallest.searchable(ast.parse(code)), code
    edit = smallest.search_edit(code, _runner(grad), value, [ref], {"n": 4, "m": 3},
                                shapes or {})
    assert edit is not None, code
    return edit.message


def test_operators_python_groups_otherwise_are_named_with_their_grouping():
    said = _named("d = (a - h) / n * m", "d = (a - h) / (n * m)")
    assert "`((a - h) / n) * m`" in said and "parentheses" in said
    said = _named("d = dh * 1 - h ** 2", "d = dh * (1 - h ** 2)")
    assert "`(dh * 1) - (h ** 2)`" in said


def test_a_comparison_that_swallows_a_product_is_named():
    said = _named("d = dh * h > 0", "d = dh * (h > 0)")
    assert "compares the whole `dh * h`" in said


def test_parentheses_the_learner_wrote_are_never_regrouped():
    for code in ("d = a / (n * m)", "d = a - (h - dh)", "d = (dh * h) > 0"):
        assert not list(smallest.grouping_edits(ast.parse(code), code)), code


def test_a_second_name_changed_in_place_is_named():
    said = _named("g = h\ng *= dh\nd = g - h * g.sum(-1, keepdim=True)",
                  "g = h.clone()\ng *= dh\nd = g - h * g.sum(-1, keepdim=True)")
    assert "a second name, not a copy" in said and "in-place `g *= dh`" in said


def test_tiled_for_repeated_in_place_and_back_are_named():
    said = _named("d = t.repeat(1, 1, 2, 2)",
                  "d = t.repeat_interleave(2, dim=2).repeat_interleave(2, dim=3)")
    assert "tiles it" in said
    said = _named("d = t.repeat_interleave(2, dim=-1)", "d = torch.cat([t, t], dim=-1)")
    assert "repeats each entry next to itself" in said


def test_an_assignment_where_the_gradient_adds_up_is_named_and_back():
    said = _named("d = a @ b\nd = dz * 2", "d = a @ b\nd += dz * 2")
    assert "replaces what line 1 put in `d`" in said
    INPUTS["d"] = torch.ones(4, 5)
    try:
        said = _named("d += dz * 2", "d = dz * 2")
    finally:
        del INPUTS["d"]
    assert "adds onto what `d` held before your code ran" in said


def test_a_product_s_untransposed_operand_and_its_order_are_named():
    said = _named("d = dz @ s", "d = dz @ s.T")
    assert "`s` is taken as it is" in said and "transpose" in said
    said = _named("d = dz @ s.T.T", "d = dz @ s.T")
    assert "one too many" in said
    said = _named("d = s @ e", "d = e @ s")
    assert "wrong order" in said


def test_two_reshapes_that_each_needed_a_transpose_are_named_together():
    code = "w = q.reshape(3, 5, 4)\nd = w.reshape(3, 4, 5) * 2"
    right = "w = q.transpose(1, 2)\nd = w.transpose(1, 2) * 2"
    said = _named(code, right)
    assert "line 1 and line 2" in said and "swapped first in both" in said


@pytest.mark.parametrize("code", [
    "up = lambda x: x.repeat_interleave(2, dim=2)\n_, idx = t.max(0)\nd = up(t)",
    "where = torch.arange(block_size * n_embd).view(block_size, n_embd)",
    "cols = F.unfold(img, 3, padding=1)\nd = F.fold(cols, (8, 8), 3, padding=1)",
])
def test_helpers_convolutions_and_index_grids_are_searched(code):
    assert smallest.searchable(ast.parse(code))


@pytest.mark.parametrize("code", [
    "d = t.repeat(1, 1, 100, 100)",
    "up = lambda x: x\nup = lambda x: x * 2\nd = up(t)",  # a name bound twice is no helper
    "d = torch.arange(n * n * n)",
])
def test_copies_and_sizes_that_grow_stay_outside_the_search(code):
    assert not smallest.searchable(ast.parse(code))


def test_windows_walked_one_entry_apart_are_named_with_their_stride():
    # A 2x2 pool's gradient written window by window, the windows started at `i` and `j`.
    right = ("d = torch.zeros_like(u)\n"
             "for i in range(2):\n"
             "    for j in range(2):\n"
             "        d[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2] = t[:, :, i:i + 1, j:j + 1]\n")
    wrong = right.replace("2 * i:2 * i + 2", "i:i + 2").replace("2 * j:2 * j + 2", "j:j + 2")
    said = _named(wrong, right)
    assert "`i:i + 2` starts a window of 2 at every entry" in said and "`2 * i`" in said


def test_a_gradient_read_where_its_tensor_belongs_is_named():
    # `dz` made on the first line, then read where `b` itself belongs.
    right = "db = a.T @ dz\nd = dz @ b.T"
    said = _named("db = a.T @ dz\nd = dz @ db.T", right, shapes={"b": (6, 5), "a": (4, 6)})
    assert "reads `db`, a gradient, where the forward tensor `b` belongs" in said
