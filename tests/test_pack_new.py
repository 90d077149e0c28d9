"""`backprop-tutor pack new FORWARD.py --out DIR`: a lesson made from a forward pass.

Packs made from four forward files (an MLP, a layernorm net written out, an attention block with
a softmax, a mask, a residual and F.layer_norm, and the conv lesson's WaveNet-style model) are
ready for `pack check`, their every reference passes its own check with the line's rule
followed, and their catalogued mistakes are refused, each with its own message. A file that
cannot make a lesson is refused in one line with exit code 2; a hostile one is refused or stopped
in its confined child, and never runs in the process that reads it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tutor.authoring import forward_file
from tutor.authoring.forward_file import Unusable
from tutor.authoring.new import make
from tutor.config import Settings
from tutor.pack.model import load_pack

ROOT = Path(__file__).resolve().parent.parent
FORWARD = Path(__file__).parent / "packs" / "forward"
FILES = {"mlp": FORWARD / "mlp.py", "layernorm": FORWARD / "layernorm.py",
         "attention": FORWARD / "attention.py", "conv": ROOT / "exercises" / "conv" / "forward.py"}
# every rule of the derivative, a line each (their packs are held to the engine, not pack check)
OPS = {"many_ops": FORWARD / "many_ops.py", "more_ops": FORWARD / "more_ops.py"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, path in {**FILES, **OPS}.items():
        folder = tmp_path_factory.mktemp("made") / name
        result = make(path, folder)
        assert result.todo == [], result.todo
        assert result.training and result.mistakes >= result.steps
        out[name] = folder
    return out


def _tutor(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("name", list(FILES))
def test_pack_check_accepts_the_made_pack(made, name):
    from tutor.evaluator.packcheck import check_pack

    problems = check_pack(made[name], Settings(device="cpu"), progress=lambda _: None)
    assert problems == []


@pytest.mark.parametrize("name", [*FILES, *OPS])
def test_every_reference_follows_the_rule_and_every_mistake_is_refused(made, name):
    from tutor.core.engine import Engine

    pack = load_pack(made[name])
    engine = Engine(Settings(device="cpu", pack=str(made[name])), pack=pack)
    try:
        for step in pack.gradient_steps:
            result = engine.check(step.id, step.solution)
            assert result.passed, (step.id, result.to_dict())
            assert result.heldout is not None and result.heldout.passed
            for row in result.checks:
                # the loss's own line has no gradient arriving, so no rule to probe
                assert row.rule is not None or step.lines == (pack.loss,), (step.id, row.grad)
                assert row.rule is None or row.rule.value == "followed", (step.id, row.note)
            for mistake in step.mistakes:
                checked = engine.check(step.id, mistake.code)
                assert not checked.passed and checked.error is None, (step.id, mistake.code)
                row = next(c for c in checked.checks if c.tensor == mistake.tensor)
                assert row.diagnosis is not None, (step.id, mistake.code)
                assert row.diagnosis.message == mistake.message
    finally:
        engine.close()


def test_the_steps_read_as_a_learner_writes_them(made):
    pack = load_pack(made["mlp"])
    solutions = {s.id: s.solution.strip() for s in pack.gradient_steps}
    assert solutions == {
        "mlp/logits": "dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, n_classes)) / n",
        "mlp/h": "dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)",
        "mlp/hpre": "dhpre = (1 - h ** 2) * dh",
        "mlp/W1": "dW1 = Xb.T @ dhpre\ndb1 = dhpre.sum(0)",
    }
    # the batch's names are the lesson's; the sizes are the file's own
    assert "hpre = Xb @ W1 + b1" in pack.forward_code
    assert pack.lesson["n_hidden"] == 16 and pack.lesson["batch_size"] == 32
    step = pack.step("mlp/W1")
    assert len(set(step.hints)) == 3 and step.hints[2].startswith("Nearly there")
    assert "dW1 = ... @ dhpre" in step.hints[2]
    assert "`b1` is [16] but the line broadcasts it" in step.hints[1]
    assert (made["mlp"] / "forward.py").read_text() == FILES["mlp"].read_text()


@pytest.mark.parametrize("solution, hint", [
    ("dW2 = h.T @ dlogits\ndb2 = dlogits.sum(0)\n", "dW2 = ... @ dlogits\ndb2 = dlogits.sum(...)"),
    ("drstd = (xc * dxn).sum(1, keepdim=True)\n", "drstd = (... * dxn).sum(1, keepdim=True)"),
    ("dlogits = (F.softmax(logits, 1) - F.one_hot(Yb, 27)) / n\n",
     "dlogits = (F.softmax(logits, 1) - ...) / n"),
    ("demb = dx.transpose(1, 2)\n", "demb = dx.transpose(...)"),
    ("dhprebn = dbndiff.clone()\n", "dhprebn = ..."),
])
def test_the_last_hint_leaves_the_local_derivative_out(solution, hint):
    from tutor.authoring.steps import nearly

    assert hint in nearly(solution)


def test_a_tensor_used_twice_is_started_then_completed(made):
    pack = load_pack(made["layernorm"])
    started = pack.step("layernorm/rstd")
    assert started.partials == ("xc",)
    assert "dxc = ...  # first branch of xc" in started.template
    closing = pack.step("layernorm/xc")
    assert closing.solution.startswith("dxc += ")
    assert "dxc += ..." in closing.template
    # the attention block's x is read four times: three branches are added on the way
    attention = load_pack(made["attention"])
    assert attention.step("attention/y").partials == ("x",)
    assert attention.step("attention/Wv").solution.startswith("dx += ")
    assert attention.step("attention/x").checks == ("x", "Wq")
    # a FIXED tensor reaches the forward pass, and no step grades it nor training moves it
    assert "masked = scores.masked_fill(causal == 0" in attention.forward_code
    assert not any("causal" in s.checks for s in attention.steps)


def test_makemores_forward_pass_is_cut_as_the_lesson_cuts_it_by_hand(tmp_path):
    """pack new on the lecture's forward pass: the hand-written exercise 1 of exercises/makemore,
    step for step (its lines, its checks, its first branches), with the lecture's answers."""
    result = make(FORWARD / "makemore.py", tmp_path / "mm")
    assert result.todo == []
    made, hand = load_pack(tmp_path / "mm"), load_pack(ROOT / "exercises" / "makemore")
    assert made.forward_code.strip() == hand.forward_code.strip()
    atomic = [s for s in hand.gradient_steps if s.exercise == 1]
    assert [(s.lines, s.checks, s.partials) for s in made.gradient_steps] == \
        [(s.lines, s.checks, s.partials) for s in atomic]
    solutions = {s.checks[0]: s.solution.strip() for s in made.gradient_steps}
    assert solutions["logprobs"] == ("dlogprobs = torch.zeros_like(logprobs)\n"
                                     "dlogprobs[range(n), Yb] = -1 / n")
    assert solutions["counts_sum_inv"] == ("dcounts = counts_sum_inv * dprobs\n"
                                           "dcounts_sum_inv = (counts * dprobs).sum(1, "
                                           "keepdim=True)")
    assert solutions["logits"] == ("dlogits += F.one_hot(logits.max(1).indices, vocab_size) "
                                   "* dlogit_maxes")
    assert solutions["embcat"] == ("dembcat = dhprebn @ W1.T\ndW1 = embcat.T @ dhprebn\n"
                                   "db1 = dhprebn.sum(0)")
    assert solutions["C"] == ("dC = torch.zeros_like(C)\n"
                              "dC.index_add_(0, Xb.view(-1), demb.view(-1, n_embd))")


def test_the_made_pack_runs_in_the_front_ends(made, tmp_path):
    folder = str(made["mlp"])
    listed = _tutor("--home", str(tmp_path), "--pack", folder, "list")
    assert listed.returncode == 0 and "mlp/W1" in listed.stdout
    shown = _tutor("--home", str(tmp_path), "--pack", folder, "show", "mlp/h")
    assert shown.returncode == 0 and "logits = h @ W2 + b2" in shown.stdout
    checked = _tutor("--home", str(tmp_path), "--pack", folder, "check", "mlp/hpre", "--code",
                     "dhpre = (1 - h ** 2) * dh")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    trained = _tutor("--home", str(tmp_path), "--pack", folder, "train", "--reference",
                     "--steps", "60")
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "every gradient matches autograd" in trained.stdout


# -- what cannot make a lesson ---------------------------------------------------------------------
BASE = FILES["mlp"].read_text().split("def forward")[0]
GOOD = '''def forward(X, Y, W1, b1, W2, b2):
    h = torch.tanh(X @ W1 + b1)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Y)
    return loss
'''


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "forward.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, says", [
    (BASE.replace("def batch", "def batches") + GOOD, "has no function `batch`"),
    (BASE + GOOD.replace("def forward", "def forwards"), "has no function `forward`"),
    (BASE + GOOD.replace("    logits = h @ W2 + b2\n",
                         "    for i in range(2):\n        h = h + 1\n    logits = h @ W2 + b2\n"),
     "every line of `forward` must assign one name"),
    (BASE + GOOD.replace("X @ W1", "X @ W2"), "fails on a batch of 32"),
    (BASE + GOOD.replace("F.cross_entropy(logits, Y)",
                         "F.cross_entropy(logits, Y, reduction='none')"),
     "has shape [32], not a scalar"),
    (BASE.replace('return {"X": X, "Y": (X @ teacher).argmax(1)}',
                  'return {"X": X, "Y": (X @ teacher).argmax(1), "eps": torch.randn(n, 2)}')
     + GOOD, "can be drawn once in `setup` and listed in FIXED"),
], ids=["no batch", "no forward", "not an assignment", "a failing shape", "not a scalar",
        "a third batch tensor"])
def test_a_file_that_cannot_make_a_lesson_is_refused_in_one_line(tmp_path, text, says):
    out = _tutor("pack", "new", str(_file(tmp_path, text)), "--out", str(tmp_path / "pack"))
    assert out.returncode == 2
    assert out.stdout == ""
    assert "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("backprop-tutor pack: error: forward.py") and says in line, line
    assert not (tmp_path / "pack" / "pack.toml").exists()


@pytest.mark.parametrize("text, says", [
    ("def forward(X):\n    h = X\n    h = h * 2\n", "`h` is assigned twice"),
    ("def forward(X, n):\n    h = X\n", "`n` is a name the lesson binds itself"),
    ("def helper(x):\n    return x\n\n\ndef forward(X):\n    h = helper(X)\n",
     "the line reads `helper`"),
    ("print('hi')\n", "only imports, functions and constants"),
    ("import numpy as np\n", "only `import torch`"),
], ids=["assigned twice", "a reserved name", "a helper", "top-level code", "an import"])
def test_the_file_is_read_before_anything_runs(text, says):
    with pytest.raises(Unusable) as refused:
        forward_file.parse(text + "\ndef setup(seed):\n    pass\n\n\ndef batch(n, seed):\n    "
                           "pass\n", "forward.py")
    assert says in str(refused.value)


# -- a hostile file ------------------------------------------------------------------------------
@pytest.mark.parametrize("where, code, says", [
    ("def batch(n, seed):\n", "    secret = open('/etc/passwd').read()\n",
     "open() is not allowed here"),
    ("def setup(seed):\n", "    shell = torch.os.system('true')\n",
     "torch.os is not available in the sandbox"),
    ("def batch(n, seed):\n", "    leak = '{0.__class__}'.format(seed)\n",
     "str.format is not available in the sandbox"),
], ids=["open", "torch.os", "a format string"])
def test_a_hostile_file_is_refused_in_one_line(tmp_path, where, code, says):
    text = BASE.replace(where, where + code) + GOOD
    out = _tutor("pack", "new", str(_file(tmp_path, text)), "--out", str(tmp_path / "pack"))
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert says in line, line


def test_an_import_is_refused_before_anything_runs(tmp_path):
    out = _tutor("pack", "new", str(_file(tmp_path, "import os\n" + BASE + GOOD)),
                 "--out", str(tmp_path / "pack"))
    assert out.returncode == 2
    assert "line 1: only `import torch`" in out.stderr


def test_a_loop_that_never_ends_is_stopped(tmp_path):
    text = BASE.replace("def setup(seed):\n", "def setup(seed):\n    while True:\n"
                                              "        seed = seed + 1\n") + GOOD
    with pytest.raises(Unusable, match="calling setup did not finish within 3 s"):
        make(_file(tmp_path, text), tmp_path / "pack", budget=3)


def test_the_file_runs_in_a_child_not_in_the_process_that_reads_it(tmp_path):
    import torch

    # Seeding the global generator is the one thing the file may do beyond learner code: if the
    # file ran here, this process's random state would change.
    text = BASE.replace("def setup(seed):\n", "def setup(seed):\n    torch.manual_seed(7)\n") + GOOD
    before = torch.random.get_rng_state().clone()
    make(_file(tmp_path, text), tmp_path / "pack")
    assert torch.equal(torch.random.get_rng_state(), before)


# -- a line with no rule ---------------------------------------------------------------------------
def test_a_line_with_no_rule_gets_a_todo_that_pack_check_names(tmp_path):
    from tutor.evaluator.packcheck import check_pack

    result = make(FORWARD / "todo.py", tmp_path / "todo")
    assert result.todo == ["todo/h: pack new has no derivative for `cumsum`"]
    pack = load_pack(tmp_path / "todo")
    step = pack.step("todo/h")
    assert "TODO" in step.solution and "cumsum" in step.solution
    assert "dh =" not in step.solution  # no guess where no derivative was made
    assert "dh = ..." in step.template
    problems = [str(p) for p in check_pack(tmp_path / "todo", Settings(device="cpu"),
                                           progress=lambda _: None, families=False)]
    # Said once, where it is, with what it stops: not once for every check that runs past it.
    todos = [p for p in problems if "TODO" in p]
    assert len(todos) == 1 and todos[0].startswith("todo/h: TODO (pack new)"), problems
    assert "cumsum" in todos[0] and "by hand" in todos[0] and "more check" in todos[0]


def test_a_pack_is_not_written_over_without_force(made):
    with pytest.raises(Unusable, match="holds a pack already"):
        make(FILES["mlp"], made["mlp"])


# --- lessons a course would ship ----------------------------------------------------------------

def test_a_weight_penalty_on_the_loss_line_builds_and_its_lesson_is_ready(tmp_path):
    """A parameter the loss line reads again (`+ reg * (W * W).sum()`): its first branch is the
    loss line's, whose own gradient is one; `return loss, logits` hands back the loss first."""
    from tutor.evaluator.packcheck import check_pack

    result = make(FORWARD / "loss_penalty.py", tmp_path / "penalty")
    assert result.todo == []
    pack = load_pack(tmp_path / "penalty")
    first = pack.gradient_steps[0]
    assert "2 * W * reg" in first.solution  # a square's derivative, as a person writes it
    problems = check_pack(tmp_path / "penalty", Settings(device="cpu"),
                          progress=lambda _: None, families=False)
    assert problems == [], [str(p) for p in problems]


def test_operations_courses_use_are_derived_not_left_as_todos(tmp_path):
    """gather, index_select, logsigmoid, BCE with logits, einsum, normalize and a reduction of
    a reduction on the loss line: every reference right (pack check runs each against
    autograd), no TODO."""
    from tutor.evaluator.packcheck import check_pack

    result = make(FORWARD / "course_ops.py", tmp_path / "ops")
    assert result.todo == []
    solutions = "\n".join(s.solution for s in load_pack(tmp_path / "ops").gradient_steps)
    for used in ("scatter_add", "index_add", "torch.einsum", "torch.sigmoid"):
        assert used in solutions, used
    problems = check_pack(tmp_path / "ops", Settings(device="cpu"), progress=lambda _: None,
                          families=False)
    assert problems == [], [str(p) for p in problems]


def test_a_line_that_draws_random_numbers_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(Unusable) as refused:
        make(FORWARD / "random_line.py", tmp_path / "random")
    said = str(refused.value)
    assert said.startswith("random_line.py line ") and "`dropout` draws random numbers" in said
    assert "FIXED" in said and "\n" not in said


def test_a_max_pool_s_reference_is_the_textbook_unpool(tmp_path):
    result = make(ROOT / "tests" / "packs" / "forward" / "slips_cnn2d.py", tmp_path / "cnn")
    assert result.todo == []
    pool = next(s for s in load_pack(tmp_path / "cnn").gradient_steps
                if "max_pool2d" in "".join(load_pack(tmp_path / "cnn").line_for(t).source
                                           for t in s.lines))
    assert "F.max_unpool2d(" in pool.solution and "scatter_add" not in pool.solution


def test_a_non_ascii_name_is_refused_and_a_failed_run_leaves_no_folder(tmp_path):
    source = tmp_path / "names.py"
    source.write_text((FORWARD / "mlp.py").read_text().replace("n_hidden", "n_h\u00efdden"))
    with pytest.raises(Unusable, match="is not ASCII"):
        make(source, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_middle_branch_is_graded_where_it_is_written(made):
    """x is read four times: the steps between its first and its last branch add to dx, and
    each is graded there as the branches so far. `=` for `+=` at such a step is refused where
    it is typed, named as such, whichever earlier code the check replays; the right code then
    passes at the closing step."""
    from tutor.core.engine import Engine

    pack = load_pack(made["attention"])
    middle = pack.step("attention/Wv")
    assert "x" in middle.partials and middle.solution.startswith("dx += ")
    wrong = middle.solution.replace("dx += ", "dx = ", 1)
    engine = Engine(Settings(device="cpu"), pack=pack)
    try:
        right = engine.check(middle.id, middle.solution)
        assert right.passed, right
        for prior in ({}, {s.id: s.solution for s in pack.gradient_steps
                           if pack.index(s.id) < pack.index(middle.id)}):
            refused = engine.check(middle.id, wrong, prior)
            assert not refused.passed
            row = next(c for c in refused.checks if c.tensor == "x")
            assert row.diagnosis is not None and row.diagnosis.kind == "partial"
            assert "`+=`" in row.diagnosis.message
        closing = pack.step("attention/x")
        assert engine.check(closing.id, closing.solution).passed
    finally:
        engine.close()


def test_a_long_forward_line_is_folded_into_the_template_not_left_out():
    from tutor.authoring.steps import TEMPLATE_WIDTH, forward_comment

    source = ("masked = att.masked_fill(torch.tril(torch.ones(block_size, block_size)) == 0, "
              "float('-inf'))")
    lines = forward_comment(source)
    assert len(lines) > 1 and all(len(ln) <= TEMPLATE_WIDTH for ln in lines)
    assert all(ln.startswith("#") for ln in lines)
    assert " ".join(ln.removeprefix("# forward:").removeprefix("#").strip()
                    for ln in lines) == source
    assert forward_comment("h = torch.tanh(hpre)") == ["# forward: h = torch.tanh(hpre)"]


def test_silu_s_reference_computes_its_input_and_sigmoid_once(tmp_path):
    source = tmp_path / "swiglu.py"
    source.write_text(BASE + '''def forward(X, Y, W1, b1, W2, b2):
    h = F.silu(X @ W1 + b1)
    logits = h @ W2 + b2
    loss = F.cross_entropy(logits, Y)
    return loss
''')
    result = make(source, tmp_path / "swiglu")
    assert result.todo == []
    step = next(s for s in load_pack(tmp_path / "swiglu").gradient_steps if "W1" in s.checks)
    assert step.solution.count("@ W1") == 1 and step.solution.count("torch.sigmoid(") == 1


def test_the_tui_teaches_a_made_lesson_branch_by_branch(made, tmp_path):
    """The TUI on a lesson as `pack new` made it: each step opens after the one before passes,
    and at a step that adds a middle branch, `=` for `+=` is refused there with the words for
    it, then the right code passes."""
    import asyncio

    from pilot_lesson import check, feedback, wait_until

    from tutor.evaluator.client import Evaluator
    from tutor.ui.app import TutorApp

    pack = load_pack(made["attention"])
    settings = Settings(device="cpu", home=tmp_path / "home", pack=str(made["attention"]))
    middle = pack.step("attention/Wv")

    async def scenario(evaluator) -> None:
        app = TutorApp(settings, evaluator=evaluator, greet=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: pilot.app.info is not None)
            await pilot.pause()
            for step in pack.gradient_steps[: pack.index(middle.id)]:
                assert app.lesson.goto_step(step.id), step.id
                await pilot.pause()
                assert (await check(pilot, step.solution))["passed"], step.id
            assert app.lesson.goto_step(middle.id)
            await pilot.pause()
            wrong = await check(pilot, middle.solution.replace("dx += ", "dx = ", 1))
            assert not wrong["passed"]
            shown = feedback(app)
            assert "add this one to it with += instead of replacing it with =" in shown, shown
            assert (await check(pilot, middle.solution))["passed"]
            assert "✓ Correct" in feedback(app)

    with Evaluator(settings) as evaluator:
        asyncio.run(scenario(evaluator))


def test_a_max_pools_mask_of_the_max_after_a_relu_is_as_right_as_autograds(tmp_path):
    """Windows of ReLU zeros tie for the largest: autograd sends the window's gradient to the
    first, a mask of the max to every one. The gradient that flows on through the ReLU is the
    same, so the mask passes, rule and fresh batch included, with a note that says why; a
    number at the ties that no max would send is still refused."""
    from tutor.core.engine import Engine
    from tutor.values.results import Rule

    make(FORWARD / "pool_relu.py", tmp_path / "pool")
    pack = load_pack(tmp_path / "pool")
    step = next(s for s in pack.gradient_steps
                if "max_pool2d" in pack.line_for(s.lines[0]).source)
    tensor = step.checks[0]
    mask = (f"mx = F.max_pool2d({tensor}, 2)\n"
            "up = lambda t: t.repeat_interleave(2, 2).repeat_interleave(2, 3)\n"
            f"mask = ({tensor} == up(mx)).float()\n")
    engine = Engine(Settings(device="cpu"), pack=pack)
    try:
        right = engine.check(step.id, mask + f"d{tensor} = mask * up(dpooled)\n")
        assert right.passed, right
        row = right.checks[0]
        assert row.rule is Rule.FOLLOWED and "tie for the largest" in (row.note or "")
        halved = engine.check(step.id, mask + f"d{tensor} = 0.5 * mask * up(dpooled)\n")
        assert not halved.passed
        junk = engine.check(step.id, mask + f"d{tensor} = mask * up(dpooled)\n"
                            f"d{tensor} = torch.where(({tensor} == 0) & (up(mx) == 0), 7.0, "
                            f"d{tensor})\n")
        assert not junk.passed
    finally:
        engine.close()
