"""A pack is data that runs under the learner's rules: a hostile pack's setup, forward lines,
training evaluation or solutions are refused before they run, on every path that builds the
lesson (pack check, a learner's check, the engine itself), and nothing they ask for happens."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tutor.authoring.new import make
from tutor.config import Settings
from tutor.pack.model import PackError, load_pack

ROOT = Path(__file__).resolve().parent.parent
FORWARD = ROOT / "tests" / "packs" / "forward" / "mlp.py"

# Each opens a file the test then looks for: what an escape would do first.
HOSTILE = {
    "an import": "import os\nos.system('touch {marker}')\n",
    "open": "open('{marker}', 'w').write('x')\n",
    "a class walk": "().__class__.__base__.__subclasses__()\n",
    "getattr on builtins": "getattr(__builtins__, 'open')('{marker}', 'w')\n",
    "a real module": "import subprocess\nsubprocess.run(['touch', '{marker}'])\n",
}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("confined") / "mlp"
    assert make(FORWARD, folder).todo == []
    return folder


def _hostile(made: Path, tmp_path: Path, where: str, code: str) -> Path:
    folder = tmp_path / "hostile"
    shutil.copytree(made, folder)
    if where == "setup":
        path = folder / "pack.toml"
        text = path.read_text()
        text = text.replace("[setup]\n# The forward file as written, then what the engine calls "
                            "around it.\ncode = '''\n", "[setup]\ncode = '''\n" + code, 1)
    elif where == "training":
        path = folder / "02_training.toml"
        text = path.read_text().replace("[training.eval]\ncode = '''\n",
                                        "[training.eval]\ncode = '''\n" + code, 1)
    else:  # a solution: the engine runs it to make its diagnoses
        path = folder / "01_lines.toml"
        text = path.read_text().replace("solution = '''\n", "solution = '''\n" + code, 1)
    path.write_text(text)
    return folder


@pytest.mark.parametrize("where", ["setup", "training", "solution"])
@pytest.mark.parametrize("attack", list(HOSTILE))
def test_a_hostile_pack_is_refused_before_its_code_runs(made, tmp_path, where, attack):
    marker = tmp_path / "escaped"
    folder = _hostile(made, tmp_path, where, HOSTILE[attack].format(marker=marker))
    home = tmp_path / "home"
    checked = subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device",
                              "cpu", "pack", "check", str(folder)],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert checked.returncode != 0
    said = checked.stdout + checked.stderr
    assert "Traceback" not in said
    assert not marker.exists(), (attack, where, said)
    pack = load_pack(folder)
    step = pack.gradient_steps[-1]
    learner = subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device",
                              "cpu", "--pack", str(folder), "check", step.id, "--code",
                              "dW1 = Xb.T @ dhpre"],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert "Traceback" not in learner.stdout + learner.stderr
    assert not marker.exists(), (attack, where, learner.stdout + learner.stderr)


def test_a_refused_setup_says_the_line_and_the_rule(made, tmp_path):
    from tutor.core.engine import Engine

    folder = _hostile(made, tmp_path, "setup", "import os\n")
    with pytest.raises(PackError) as refused:
        Engine(Settings(device="cpu"), pack=load_pack(folder))
    said = str(refused.value)
    assert "line 1" in said and "import os" in said and "learner's rules" in said


def test_a_lessons_own_imports_and_seeds_still_work_and_leave_the_global_state_alone():
    """random in a pack is a generator of its own: building makemore's data shuffles the words
    as the lecture does without moving Python's global random state."""
    import random

    from tutor.core import packcode

    random.seed(5)
    expected = random.random()
    random.seed(5)
    ns = packcode.scope()
    packcode.run("import random\nrandom.seed(42)\nwords = list(range(10))\n"
                 "random.shuffle(words)\nimport torch\ng = torch.Generator().manual_seed(1)\n"
                 "from collections import namedtuple\nPair = namedtuple('Pair', ['a', 'b'])\n",
                 ns, "<test>")
    assert random.random() == expected
    lecture = list(range(10))
    random.Random(42).shuffle(lecture)
    assert ns["words"] == lecture and ns["Pair"](1, 2).b == 2


def _edited(made: Path, tmp_path: Path, name: str, old: str, new: str) -> Path:
    folder = tmp_path / "edited"
    shutil.copytree(made, folder)
    path = folder / name
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))
    return folder


@pytest.mark.parametrize("old, new, said", [
    ('exercises = ["', 'exercises = ["../../outside.toml", "', "outside the pack's folder"),
    ('exercises = ["', 'exercises = ["/dev/zero", "', "outside the pack's folder"),
    ('[pack]\n', '[pack]\ndata = "../../../etc/passwd"\n', "outside the pack's folder"),
    ('title = "', 'title = "\\u001b]0;owned\\u0007', "control character"),
    ('title = "', 'title = "\\u202e', "control character"),
])
def test_a_pack_reads_only_its_own_files_and_shows_only_plain_text(made, tmp_path, old, new,
                                                                     said):
    folder = _edited(made, tmp_path, "pack.toml", old, new)
    with pytest.raises(PackError, match=said):
        load_pack.__wrapped__(folder)
    shown = subprocess.run([sys.executable, "-m", "tutor", "--pack", str(folder), "list"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert shown.returncode != 0 and "Traceback" not in shown.stderr
    assert "\x1b" not in shown.stdout + shown.stderr


def test_a_pack_file_that_is_a_device_or_a_link_out_is_refused(made, tmp_path):
    folder = tmp_path / "linked"
    shutil.copytree(made, folder)
    (tmp_path / "secret.toml").write_text("[exercise]\ntitle = 'x'\n")
    (folder / "01_lines.toml").unlink()
    (folder / "01_lines.toml").symlink_to(tmp_path / "secret.toml")
    with pytest.raises(PackError, match="outside the pack's folder"):
        load_pack.__wrapped__(folder)


def test_pack_new_that_fails_leaves_out_as_it_was(made, tmp_path):
    source = tmp_path / "surrogate.py"
    source.write_text('"""A lesson \\ud800 with a lone surrogate."""\n'
                      + FORWARD.read_text().split('"""', 2)[-1])
    out = tmp_path / "out"
    shutil.copytree(made, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    done = subprocess.run([sys.executable, "-m", "tutor", "pack", "new", str(source), "--out",
                           str(out), "--force"], capture_output=True, text=True, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "surrogate" in done.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


# What a pack's code would do if it got past the syntax check and the guard, run in a process
# under `confine_lesson` (the worker's and `pack check`'s layers): each line prints what happened.
_BEHIND_THE_GUARD = '''
import os, subprocess, sys
from tutor.sandbox.confine import confine_lesson
report = confine_lesson("cpu", ({pack!r},), {workshop!r})
print("applied", report.applied)
def tried(what, fn):
    try:
        fn()
        print(what, "done")
    except OSError as exc:
        print(what, "refused", exc.errno)
os.system("touch {marker}")
print("shell wrote", os.path.exists({marker!r}))
tried("write", lambda: open({marker!r}, "w").write("x"))
tried("read outside", lambda: open({secret!r}).read())
tried("read the pack", lambda: open(os.path.join({pack!r}, "pack.toml")).read())
tried("write the workshop", lambda: open(os.path.join({workshop!r}, "cache"), "w").write("x"))
done = subprocess.run([sys.executable, "-c", "import torch; print(torch.ones(2).sum().item())"],
                      capture_output=True, text=True)
print("python starts", done.stdout.strip())
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
'''


def test_the_process_that_runs_a_lessons_code_is_confined_by_the_os(made, tmp_path):
    """The OS layer behind the guard: a pack's code that got past it could still start a
    shell, but neither it nor the shell writes or reads outside the lesson; Python and its
    children start as the worker needs them to."""
    marker, secret = tmp_path / "escaped", tmp_path / "secret"
    secret.write_text("the answer key")
    workshop = tmp_path / "workshop"
    workshop.mkdir()
    code = _BEHIND_THE_GUARD.format(pack=str(made), workshop=str(workshop), marker=str(marker),
                                    secret=str(secret))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    said = done.stdout
    if not _landlock_here():
        pytest.skip("this kernel offers no Landlock")
    assert "Landlock" in said, said + done.stderr
    assert "shell wrote False" in said and not marker.exists(), said + done.stderr
    assert "write refused" in said and "read outside refused" in said, said
    assert "read the pack done" in said and "write the workshop done" in said, said
    assert "python starts 2.0" in said and "fork 7" in said, said + done.stderr


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize("device", [
    "cpu", "simulated cuda",
    pytest.param("cuda", marks=[pytest.mark.cuda,
                                pytest.mark.skipif(not _cuda(), reason="no CUDA device")])])
def test_the_worker_builds_the_lesson_under_the_os_layers(made, device, monkeypatch):
    """On every device: an accelerator keeps its driver's files open to the worker and its
    children (which start the device before they confine themselves further), and nothing
    else; the simulated one takes that path on a CPU."""
    from tutor.config import SIMULATED_DEVICE
    from tutor.evaluator.client import Evaluator

    if device == "simulated cuda":
        monkeypatch.setenv(SIMULATED_DEVICE, "1")
    with Evaluator(Settings(device=device.split()[-1], pack=str(made))) as evaluator:
        applied = evaluator.info(timeout=300)["lesson_confined"]
        if device != "cpu":  # a check's child still starts and answers under those layers
            result = evaluator.check("1", "x = 1")
            assert result.error is None or result.error.kind.value != "internal", result.error
    if not _landlock_here():
        pytest.skip("this kernel offers no Landlock")
    assert any(layer.startswith("Landlock") for layer in applied) and "seccomp" in applied


def _landlock_here() -> bool:
    """Whether this kernel offers Landlock, asked apart from the code under test."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return sys.platform.startswith("linux") and libc.syscall(444, None, ctypes.c_size_t(0),
                                                            ctypes.c_uint32(1)) >= 1


_DEVICE_FILE = """
import os, sys
from tutor.sandbox import confine
print(confine.landlock(confine._libc(), devices=("/dev/zero",)))
for path in ("/dev/zero", "/dev/full"):
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "opened")
    except OSError:
        print(path, "refused")
"""


def test_a_driver_file_stays_open_for_reading_and_writing():
    """A GPU's device files (`confine.device_files`) are granted as `/dev/zero` is here: opened
    for reading and writing, while another device file stays shut."""
    done = subprocess.run([sys.executable, "-c", _DEVICE_FILE], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    if not _landlock_here():
        pytest.skip("this kernel offers no Landlock")
    assert "/dev/zero opened" in done.stdout and "/dev/full refused" in done.stdout, (
        done.stdout + done.stderr)
