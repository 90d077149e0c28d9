"""`backprop-tutor pack check DIR`: a valid pack passes, and each kind of broken pack is named."""

import shutil
import subprocess
import sys
from pathlib import Path

TINY = Path(__file__).parent / "packs" / "tiny"


def _run(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "pack", "check",
                           str(folder)], capture_output=True, text=True, timeout=300)


def _broken(tmp_path: Path, old: str, new: str, file: str = "01_layers.toml") -> Path:
    folder = tmp_path / "pack"
    shutil.copytree(TINY, folder)
    text = (folder / file).read_text()
    assert old in text
    (folder / file).write_text(text.replace(old, new, 1))
    return folder


def test_a_valid_pack_passes():
    out = _run(TINY)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ready" in out.stdout


def test_a_wrong_reference_solution_is_named(tmp_path):
    out = _run(_broken(tmp_path, "db2 = dlogits.sum(0)", "db2 = 2 * dlogits.sum(0)"))
    assert out.returncode == 1
    assert "tiny/h: reference solution disagrees with autograd: db2 (wrong)" in out.stdout


def test_a_mistake_that_is_correct_is_named(tmp_path):
    wrong = 'dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\n"""'
    right = 'dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= n\n"""'
    out = _run(_broken(tmp_path, wrong, right))
    assert out.returncode == 1
    assert "tiny/logits mistake 1: passes" in out.stdout


def test_too_few_hints_and_a_broken_template_are_named(tmp_path):
    repeated = '"`dW1 = Xb.T @ dhpre`, `db1 = dhpre.sum(0)`."'
    folder = _broken(tmp_path, '"The same rule as for `W2`."', repeated)
    text = (folder / "01_layers.toml").read_text().replace("dhpre = ...", "dhpre = (...", 1)
    (folder / "01_layers.toml").write_text(text)
    out = _run(folder)
    assert out.returncode == 1
    assert "tiny/W1: has 2 different hints" in out.stdout
    assert "tiny/hpre: template is not valid Python" in out.stdout


def test_a_pack_that_does_not_load_is_one_problem(tmp_path):
    out = _run(_broken(tmp_path, 'lines = ["logits"]', 'lines = ["nothing"]'))
    assert out.returncode == 1
    assert "does not load" in out.stdout and "nothing" in out.stdout


def test_a_folder_without_a_pack_is_a_usage_error(tmp_path):
    assert _run(tmp_path).returncode == 2
