"""`backprop-tutor pack check DIR`: a valid pack passes, and each kind of broken pack is named."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# --- the schema ----------------------------------------------------------------------------------


def test_an_unknown_key_is_refused_naming_the_file_the_step_and_the_key(tmp_path):
    out = _run(_broken(tmp_path, 'lines = ["logits"]', 'lines = ["logits"]\nhint = "typo"'))
    assert out.returncode == 1
    assert "does not load" in out.stdout
    assert "01_layers.toml step tiny/h: unknown key 'hint'; did you mean 'hints'?" in out.stdout


@pytest.mark.parametrize("old, new, said", [
    ('lines = ["logits"]', 'lines = "logits"', "'lines' must be a list of strings"),
    ('lines = ["logits"]', 'lines = ["logits"]\npoints = 0', "'points' must be a positive number"),
    ('lines = ["logits"]', 'lines = ["logits"]\ncall = "dx = f(x)"', "unknown key 'call'"),
])
def test_a_wrong_type_or_another_kinds_field_is_refused(tmp_path, old, new, said):
    out = _run(_broken(tmp_path, old, new))
    assert out.returncode == 1 and said in out.stdout, out.stdout


def test_the_schema_version_is_required_and_checked(tmp_path):
    from tutor.pack.model import PackError, load_pack

    folder = _broken(tmp_path, "schema = 1", "schema = 2", file="pack.toml")
    with pytest.raises(PackError, match="schema 2 is not one this tutor reads"):
        load_pack(folder)
    text = (folder / "pack.toml").read_text().replace("schema = 2\n", "")
    (folder / "pack.toml").write_text(text)
    with pytest.raises(PackError, match="missing 'schema'"):
        load_pack(folder)


def test_the_docs_show_the_schema_the_code_declares():
    from tutor.pack import schema
    from tutor.pack.kinds import KINDS

    docs = (Path(__file__).parents[1] / "docs" / "packs.md").read_text()
    assert schema.describe({w: k.fields for w, k in KINDS.items()}) in docs
