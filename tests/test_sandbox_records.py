"""What a notebook builds its data and records with is open in the sandbox (random with a
generator of its own, collections' containers and named tuples with their own API, a class's
`_private` helpers, `id` as a dict's key, a word's checksum), and what libraries look up on an
object stays closed."""

from __future__ import annotations

import pytest

from tutor.core.clock import Budget
from tutor.core.execution import Output, cached_compile, copy_namespace, execute
from tutor.sandbox.guard import Refused


def _run(code: str) -> dict:
    from tutor.sandbox.modules import MODULES

    ns = copy_namespace(dict(MODULES))
    execute(cached_compile(code), ns, Output(), Budget(10))
    return ns


def test_a_class_keeps_private_helpers_of_its_own():
    ns = _run("class Model:\n"
              "    def _norm(self, x):\n        return x * 2\n"
              "    def forward(self, x):\n        return self._norm(x) + 1\n"
              "y = Model().forward(3)\n")
    assert ns["y"] == 7


def test_a_name_libraries_look_up_on_an_object_stays_closed():
    with pytest.raises(Refused):
        _run("class Fake:\n    _fields = ('a',)\n")


def test_random_and_collections_build_a_notebook_s_data():
    import ast

    from tutor.course.program import import_bindings

    binding = import_bindings(ast.parse("from collections import namedtuple").body[0])
    assert binding == "namedtuple = collections.namedtuple"
    ns = _run(f"{binding}\n"
              "words = ['ab', 'cd', 'ef']\nrandom.shuffle(words)\n"
              "window = collections.deque([0, 0], maxlen=2)\nwindow.append(5)\n"
              "Pair = namedtuple('Pair', 'x y')\np = Pair(1, 2)\n"
              "counts = collections.Counter('abca')\n")
    assert sorted(ns["words"]) == ["ab", "cd", "ef"] and list(ns["window"]) == [0, 5]
    assert ns["p"].y == 2 and ns["counts"]["a"] == 2


def test_random_gives_a_seeded_generator_but_not_its_class():
    # `rng = random.Random(7)`: a generator of the notebook's own, the same for the same seed
    ns = _run("a = random.Random(7)\nb = random.Random(7)\nx = [a.random(), b.random()]\n")
    assert ns["x"][0] == ns["x"][1]
    with pytest.raises(Exception):  # noqa: B017 - the class itself builds nothing here
        _run("g = random.Random(1)\nh = type(g)(2)\n")


def test_a_notebook_runs_the_fused_lstm_its_lesson_s_setup_runs():
    # The LSTM lesson's setup runs its steps before and after `t` through torch.lstm; a notebook
    # that copies the setup runs the same call.
    ns = _run("xs = torch.randn(2, 3, 4)\nh = torch.zeros(1, 2, 5)\nc = torch.zeros(1, 2, 5)\n"
              "Wx = torch.randn(4, 20)\nWh = torch.randn(5, 20)\nb = torch.zeros(20)\n"
              "hs, hn, cn = torch.lstm(xs, (h, c), (Wx.T, Wh.T, b, b * 0), True, 1, 0.0,"
              " False, False, True)\n")
    assert tuple(ns["hs"].shape) == (2, 3, 5)


def test_locals_in_a_function_are_its_own_names():
    # A notebook keeps a function's activations for its checks with `cache.update(locals())`.
    ns = _run("cache = {}\n"
              "def forward(x):\n    h = x * 2\n    _hidden = 1\n    cache.update(locals())\n"
              "    return h\n"
              "forward(3)\ntop = sorted(k for k in locals() if k in ('cache', 'forward'))\n")
    assert ns["cache"] == {"x": 3, "h": 6}
    assert ns["top"] == ["cache", "forward"]


def test_a_model_builds_on_nn_module_and_keeps_gradients_as_notes_on_tensors():
    # The style one course teaches: layers as nn.Module subclasses whose backward methods keep
    # each gradient on its tensor as `.g`.
    ns = _run("nn = torch.nn\n"
              "class Lin(nn.Module):\n"
              "    def __init__(self, i, o):\n        super().__init__()\n"
              "        self.w = nn.Parameter(torch.ones(i, o))\n"
              "    def forward(self, x):\n        self.x = x\n        return x @ self.w\n"
              "    def backward(self, dy):\n        self.w.g = self.x.T @ dy\n"
              "        self.x.g = dy @ self.w.T\n"
              "m = Lin(3, 2)\ny = m(torch.ones(4, 3))\nm.backward(torch.ones(4, 2))\n"
              "count = len(m.parameters())\ng = m.w.g\n")
    assert tuple(ns["y"].shape) == (4, 2) and ns["count"] == 1
    assert float(ns["g"].sum()) == 24.0


@pytest.mark.parametrize("code", ["x = torch.ones(2)\nx.data = x * 2\n",
                                  "x = torch.ones(2)\nx._hidden = 1\n",
                                  "x = torch.ones(2)\ny = x.nothing_set\n"])
def test_a_tensor_keeps_no_note_that_reaches_what_a_tensor_has(code):
    with pytest.raises(Refused):
        _run(code)


def test_a_dataclass_of_the_learner_s_keeps_a_layer_s_tensors():
    ns = _run("class Acts:\n    h: torch.Tensor\n    n: int = 3\n    xs: list = None\n"
              "Acts = dataclasses.dataclass(Acts)\n"
              "@dataclasses.dataclass\nclass Grads:\n    dW: torch.Tensor\n"
              "    seen: list = dataclasses.field(default_factory=list)\n"
              "a = Acts(torch.ones(2), n=4)\ng = Grads(torch.zeros(3))\ng.seen.append(1)\n"
              "names = [f.name for f in dataclasses.fields(a)]\n"
              "d = dataclasses.asdict(g)\nb = dataclasses.replace(a, n=5)\n")
    assert ns["names"] == ["h", "n", "xs"] and ns["a"].n == 4 and ns["b"].n == 5
    assert ns["d"]["seen"] == [1] and "Grads(dW=" in repr(ns["g"])
    with pytest.raises(TypeError):
        _run("@dataclasses.dataclass\nclass R:\n    x: int\nr = R()\n")  # a field left out


def test_a_record_is_made_only_of_the_learner_s_own_classes():
    with pytest.raises(Refused):
        _run("d = dataclasses.dataclass(collections.Counter)\n")


def test_an_import_the_sandbox_does_not_hold_fails_only_where_it_is_used():
    from tutor.core.candidate import Output as CheckOutput
    from tutor.core.candidate import compile_candidate, sandbox_globals
    from tutor.core.candidate import execute as run
    from tutor.course.program import own_source

    code = own_source("from typing import Dict, Optional\nimport numpy as np\n"
                      "import matplotlib.pyplot as plt\nfrom tqdm import tqdm\n"
                      "def f(x: Dict[str, int], y: Optional[int] = None) -> int | None:\n"
                      "    return len(x)\n"
                      "n = f({'a': 1})\nplt.plot([1, 2])\nplt.show()\n"
                      "total = sum(i for i in tqdm(range(4)))\n"
                      "letters = [ord(c) - 96 for c in 'abc'] + [hasattr(n, 'real')]\n")
    out = CheckOutput()
    ns = sandbox_globals(out)
    run(compile_candidate(code), ns, out)
    assert ns["n"] == 1 and ns["total"] == 6 and ns["letters"] == [1, 2, 3, True]
    with pytest.raises(Refused, match="numpy.zeros is not available"):
        run(compile_candidate("np.zeros(3)"), ns, out)


def test_as_strided_reads_a_tensor_s_own_entries_only():
    ns = _run("x = torch.arange(10.)\nw = x.as_strided((4, 3), (2, 1))\n"
              "v = torch.as_strided(x, (2, 2), (1, 1), 3)\n")
    assert ns["w"][3].tolist() == [6.0, 7.0, 8.0] and ns["v"].tolist() == [[3.0, 4.0], [4.0, 5.0]]
    for code in ("x = torch.arange(10.)\nw = x.as_strided((5, 3), (2, 1))\n",
                 "x = torch.arange(10.)[2:5]\nw = x.as_strided((10,), (1,), 0)\n",
                 "x = torch.arange(6.).view(2, 3).t()\nw = x.as_strided((2,), (1,))\n"):
        with pytest.raises(Refused):
            _run(code)


def test_torch_s_layers_are_modules_of_the_sandbox_s():
    ns = _run("class Net(torch.nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.emb = torch.nn.Embedding(5, 3)\n"
              "        self.body = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())\n"
              "        self.norm = torch.nn.LayerNorm(4)\n"
              "        torch.nn.init.zeros_(self.body[0].bias)\n"
              "    def forward(self, i):\n        return self.norm(self.body(self.emb(i)))\n"
              "net = Net()\ny = net(torch.tensor([0, 4]))\nn = len(net.parameters())\n"
              "w = net.body[0].weight\nw.g = torch.ones_like(w)\n")
    assert tuple(ns["y"].shape) == (2, 4) and ns["n"] == 5
    assert tuple(ns["w"].shape) == (4, 3) and not bool(ns["net"].body[0].bias.any())


def test_a_module_keeps_buffers_and_names_its_parameters():
    ns = _run("class Block(torch.nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.fc = torch.nn.Linear(3, 3)\n"
              "        self.register_buffer('mask', torch.ones(3, 3).tril())\n"
              "class Net(torch.nn.Module):\n"
              "    def __init__(self):\n        super().__init__()\n"
              "        self.blocks = torch.nn.ModuleList([Block(), Block()])\n"
              "net = Net().to('cpu')\n"
              "names = [k for k, _ in net.named_parameters()]\nm = net.blocks[1].mask\n")
    assert ns["names"] == ["blocks.0.fc.weight", "blocks.0.fc.bias", "blocks.1.fc.weight",
                           "blocks.1.fc.bias"]
    assert float(ns["m"].sum()) == 6.0


def test_a_model_s_forward_hooks_see_each_layer_s_input_and_output():
    ns = _run("net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())\n"
              "seen = {}\n"
              "def keep(name):\n"
              "    def hook(mod, args, out):\n        seen[name] = (args[0], out)\n"
              "    return hook\n"
              "handles = [m.register_forward_hook(keep(n)) for n, m in net.named_modules() if n]\n"
              "with torch.no_grad():\n"
              "    for p in net.parameters():\n        torch.nn.init.normal_(p, 0, 0.1)\n"
              "y = net(torch.ones(2, 3))\n"
              "names = [n for n, _ in net.named_modules()]\n"
              "for h in handles:\n    h.remove()\n"
              "seen_before = len(seen)\nseen.clear()\nnet(torch.ones(2, 3))\n")
    assert ns["names"] == ["", "0", "1"] and ns["seen_before"] == 2 and not ns["seen"]


def test_the_sandbox_s_own_classes_take_no_method_of_the_learner_s():
    for code in ("def fake(self, x):\n    return x\ntorch.nn.Linear.forward = fake\n",
                 "def fake(self, x):\n    return x\n"
                 "torch.nn.Module.register_buffer(torch.nn.Linear, 'forward', fake)\n",
                 "dataclasses.dataclass(torch.nn.Tanh)\n"):
        with pytest.raises(Refused):
            _run(code)
    assert repr(_run("m = torch.nn.Linear(2, 2)\n")["m"]) == "Linear()"


def test_a_parameter_dict_and_list_hold_a_model_s_parameters():
    ns = _run("pd = torch.nn.ParameterDict({'E': torch.nn.Parameter(torch.ones(2, 3))})\n"
              "pl = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(3))])\n"
              "class Net(torch.nn.Module):\n"
              "    def __init__(self):\n"
              "        super().__init__()\n"
              "        self.pd, self.pl = pd, pl\n"
              "names = [n for n, _ in Net().named_parameters()]\n"
              "has = 'E' in pd and pd.get('F') is None\n"
              "total = sum(p.numel() for p in pd.values())\n")
    assert ns["names"] == ["pd.E", "pl.0"] and ns["has"] and ns["total"] == 6


def test_a_named_tuple_s_own_api_is_open_on_it_alone():
    ns = _run("from_ = collections.namedtuple('Acts', 'x h')\n"
              "a = from_(1, 2)\n"
              "names = from_._fields\n"
              "d = a._asdict()\n"
              "b = a._replace(h=5)\n")
    assert ns["names"] == ("x", "h") and ns["d"] == {"x": 1, "h": 2} and ns["b"].h == 5
    # A tuple or an object that is no named tuple of the sandbox's keeps them closed.
    with pytest.raises(Refused):
        _run("x = (1, 2)._asdict()\n")


def test_id_keys_a_dict_by_tensor_without_giving_an_address():
    ns = _run("t = torch.zeros(2)\nu = torch.zeros(2)\ngrads = {id(t): 1, id(u): 2}\n"
              "same = id(t) == id(t)\nk = id(t)\n")
    assert len(ns["grads"]) == 2 and ns["same"]
    assert ns["k"] != id(ns["t"])  # masked: the number is no memory address


def test_a_word_s_checksum_splits_a_notebook_s_data():
    ns = _run("keep = [w for w in ['ab', 'cd'] if zlib.crc32(w.encode()) % 10 < 8]\n")
    import zlib
    assert ns["keep"] == [w for w in ["ab", "cd"] if zlib.crc32(w.encode()) % 10 < 8]
