"""The learner's names for a lesson's tensors, read off a forward pass renamed throughout
(tutor/course/vocabulary.py): no code runs, so these are quick."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tutor.course.lecture import lesson_names
from tutor.course.vocabulary import comparers, forward_names
from tutor.pack.model import load_pack

EXERCISES = Path(__file__).resolve().parent.parent / "exercises"

# The LSTM lesson's forward pass with every tensor, parameter and size renamed, several
# tensors to a line, the gates unpacked from a tuple, and the step's state read off the
# run's fields two at a time.
LSTM_RENAMED = '''
xe = Emb[xb]
h_zero = xe.new_zeros(B, HID)
c_zero = xe.new_zeros(B, HID)
pre = run_lstm(xe[:, :T0], h_zero, c_zero, W_in, W_rec, bias)
H_pre, h_last, c_last = pre.hs, pre.h, pre.c
x_now = xe[:, T0]
W_in_now, W_rec_now, bias_now = W_in.clone(), W_rec.clone(), bias.clone()
z = x_now @ W_in_now + h_last @ W_rec_now + bias_now
z_i, z_f, z_g, z_o = z[:, :HID], z[:, HID:2*HID], z[:, 2*HID:3*HID], z[:, 3*HID:]
gi, gf, gg, go = torch.sigmoid(z_i), torch.sigmoid(z_f), torch.tanh(z_g), torch.sigmoid(z_o)
cell = gf * c_last + gi * gg
hid = go * torch.tanh(cell)
carry = torch.stack([hid, cell])
post = run_lstm(xe[:, T0+1:], carry[0], carry[1], W_in, W_rec, bias)
H_post = post.hs
H = torch.cat([H_pre, hid[:, None], H_post], 1)
out = H @ W_out + b_out
loss = F.cross_entropy(out.view(-1, V), yb.view(-1), ignore_index=-1)
'''


@pytest.fixture(scope="module")
def lstm():
    return load_pack(EXERCISES / "lstm")


def _names(pack, source: str) -> dict[str, str]:
    trees = [ast.parse(textwrap.dedent(source))]
    return forward_names(pack, trees, lesson_names(pack))


def test_a_forward_pass_renamed_throughout_is_read_from_the_function_it_calls(lstm):
    names = _names(lstm, LSTM_RENAMED)
    expected = {"xe": "emb", "Emb": "C", "xb": "Xb", "W_in": "Wx", "W_rec": "Wh", "bias": "b",
                "pre": "before", "H_pre": "hs_before", "h_last": "h_prev", "c_last": "c_prev",
                "W_in_now": "Wx_t", "bias_now": "b_t", "z": "ifgo", "z_f": "af", "gi": "i",
                "gg": "g", "go": "o", "cell": "c", "hid": "h", "carry": "state", "H": "hs",
                "out": "logits", "W_out": "Wy", "b_out": "by", "yb": "Yb"}
    assert {k: names.get(k) for k in expected} == expected


def test_a_call_alike_with_several_lines_anchors_nothing(lstm):
    # `torch.sigmoid(...)` is three lines of the lesson: with nothing else known, no name is
    # taken from it.
    names = _names(lstm, "p = torch.sigmoid(q)\nr = torch.sigmoid(s)\n")
    assert names == {}


def test_one_unpacked_value_is_never_split(lstm):
    # `a, b = f(x)` gives two names one value: neither is a forward line of its own.
    names = _names(lstm, "hs_x, hh = run_lstm(xe[:, :T0], h_zero, c_zero, W_in, W_rec, bias)\n")
    assert "hs_x" not in names and "hh" not in names


def test_a_helper_compares_what_it_is_given_a_closure_uses_a_gradient():
    tree = ast.parse(textwrap.dedent('''
        def diff(tag, mine, t):
            print(tag, (mine - t.grad).abs().max())

        def check(name):
            print((grads[name] - fwd[name].grad).abs().max())

        def _state():
            acc('h', state.grad[0])
    '''))
    assert comparers([tree]) == {"cmp", "diff", "check"}


def test_a_helper_may_walk_its_own_list_of_tensors():
    tree = ast.parse(textwrap.dedent('''
        def report(bw):
            for name, t in [('logits', logits), ('h', h)]:
                print(name, (getattr(bw, 'd' + name) - t.grad).abs().max())
    '''))
    assert "report" in comparers([tree])


def test_a_gradient_spelled_as_a_mathematician_writes_it_is_the_tutor_s():
    from tutor.course.vocabulary import gradient_names

    names = gradient_names({"fg": "f"})
    for spelling in ("dfg", "d_fg", "grad_fg", "fg_grad", "δfg", "Δfg", "∂fg", "delta_fg"):
        assert names[spelling] == "df"
