"""tutor/core/quick.py: torch's vector-Jacobian product and broadcasting rule, without the
import that slows every one-shot command, and the same to the bit."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tutor.core.quick import broadcast_shape, vjp


def _graph(seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 7, generator=g, dtype=torch.float64).requires_grad_()
    w = torch.randn(7, 3, generator=g, dtype=torch.float64).requires_grad_()
    h = torch.tanh(x @ w)
    s = (x * x).sum(1, keepdim=True)
    return x, w, h, s, g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vjp_equals_autograd_to_the_bit(seed):
    x, w, h, s, g = _graph(seed)
    ch = torch.randn(h.shape, generator=g, dtype=torch.float64)
    cs = torch.randn(s.shape, generator=g, dtype=torch.float64)
    ours = vjp([h, s], [x, w], [ch, cs], retain_graph=True)
    theirs = torch.autograd.grad([h, s], [x, w], [ch, cs], retain_graph=True)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    # a scalar output needs no cotangent; an unused input comes back as None when allowed
    unused = torch.zeros(2, requires_grad=True)
    expected = torch.autograd.grad(h.sum(), x, retain_graph=True)[0]
    got = vjp(h.sum(), [x, unused], allow_unused=True)
    assert torch.equal(got[0], expected)
    assert got[1] is None


def test_vjp_refuses_a_cotangent_of_another_shape_as_autograd_does():
    x, w, h, *_ = _graph(0)
    with pytest.raises(RuntimeError):
        vjp(h, x, torch.ones(3, 5, dtype=torch.float64))
    with pytest.raises(RuntimeError):
        vjp(h, x)  # more than one entry and no cotangent


@pytest.mark.parametrize("shapes", [((3, 1), (1, 4)), ((4,), (3, 4)), ((2, 3), (3, 2)),
                                    ((), (2,)), ((1,), (0,)), ((5, 0), (1, 1)),
                                    ((2, 1, 3), (4, 1)), ((2, 3), (2,))])
def test_broadcast_shape_is_torchs_rule(shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        expected = None
    try:
        got = broadcast_shape(*shapes)
    except RuntimeError:
        got = None
    assert got == expected


def test_a_one_shot_command_imports_only_its_own_module_and_no_sympy(tmp_path):
    """`list` runs without the other commands' modules (a web server's, a grader's) and a
    check's references without torch's symbolic shapes."""
    probe = (
        "import sys\n"
        "from tutor.cli import main\n"
        f"code = main(['--home', {str(tmp_path)!r}, '--device', 'cpu', 'check', 'logprobs',\n"
        "             '--no-record', '--code',\n"
        "             'dlogprobs = torch.zeros_like(logprobs)\\n'\n"
        "             'dlogprobs[range(n), Yb] = -1.0/n'])\n"
        "loaded = set(sys.modules)\n"
        "print(code, 'tutor.commands.serve' in loaded, 'tutor.commands.autograder' in loaded,\n"
        "      'sympy' in loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "0 False False False", done.stdout + done.stderr


REFUSED = ["import os", "x = (", "dlogprobs = logprobs.grad", "return 1",
           "def cmp(a, b, c):\n    return a.grad\nx = ().__class__"]


@pytest.mark.parametrize("code", REFUSED)
def test_a_check_refused_at_parse_time_needs_no_torch_and_says_what_the_engine_says(tmp_path,
                                                                                     code):
    """`check` refuses code the policy refuses before it imports torch or starts a worker, with
    the engine's own error (kind, message, place)."""
    import json

    from tutor.config import Settings
    from tutor.core.engine import Engine
    from tutor.pack.model import find_pack, load_pack

    probe = (
        "import sys\n"
        "from tutor.cli import main\n"
        f"code = main(['--home', {str(tmp_path)!r}, 'check', 'logprobs', '--json',\n"
        f"             '--code', {code!r}])\n"
        "print('torch' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr
    early = json.loads(done.stdout)
    engine = Engine(Settings(device="cpu"), pack=load_pack(find_pack("makemore")))
    try:
        late = engine.check("atomic/logprobs", code).to_dict()
    finally:
        engine.close()
    assert early["error"] == late["error"] and early["passed"] is late["passed"] is False


def test_an_untouched_add_template_says_what_an_untouched_assignment_says():
    """`dcounts += ...` as the template left it is the template's `...`, not a TypeError about
    `ellipsis`."""
    from tutor.config import Settings
    from tutor.core.engine import Engine
    from tutor.pack.model import find_pack, load_pack

    engine = Engine(Settings(device="cpu"), pack=load_pack(find_pack("makemore")))
    try:
        result = engine.check("atomic/counts", "dcounts = counts_sum_inv * dprobs\n"
                                               "dcounts += ...\n")
    finally:
        engine.close()
    assert not result.passed and result.error is not None
    assert "template's `...`" in result.error.message and "ellipsis" not in result.error.message
