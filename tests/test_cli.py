"""The command line as a script or a learner uses it: real processes, real exit codes."""

import json
import subprocess
import sys

import pytest

from tutor.pack.model import load_pack

PACK = load_pack()


def cli(*args, stdin=None):
    return subprocess.run(
        [sys.executable, "-m", "tutor", *args], capture_output=True, text=True, input=stdin,
        timeout=120,
    )


def test_list_json_gives_ordered_steps():
    out = cli("list", "--json")
    assert out.returncode == 0
    steps = json.loads(out.stdout)
    assert [s["id"] for s in steps] == [s.id for s in PACK.steps]
    first = steps[0]
    assert set(first) >= {"id", "exercise", "title", "checks", "forward"}
    assert first["checks"] == ["logprobs"]
    h = next(s for s in steps if s["checks"] == ["h", "W2", "b2"])
    assert h["forward"] == ["logits = h @ W2 + b2"]
    assert {s["exercise"] for s in steps} == {1, 2, 3, 4}


def test_every_subcommand_has_help():
    for command in ("list", "show", "check"):
        assert cli(command, "--help").returncode == 0


def test_check_json_contract_and_exit_codes():
    ok = cli("check", "atomic/probs", "--code", "dprobs = (1.0 / probs) * dlogprobs", "--json")
    assert ok.returncode == 0, ok.stderr
    result = json.loads(ok.stdout)
    assert result["passed"] and result["device"] == "cpu"
    assert result["checks"][0]["verdict"] == "exact"
    assert result["heldout"]["batch_size"] == 17
    bad = cli("check", "atomic/probs", "--code", "dprobs = probs", "--json")
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["checks"][0]["verdict"] == "wrong"


def test_check_reads_stdin_and_files(tmp_path):
    assert cli("check", "atomic/probs", "-", stdin="dprobs = dlogprobs / probs\n").returncode == 0
    path = tmp_path / "answer.py"
    path.write_text("dprobs = dlogprobs / probs\n")
    assert cli("check", "2", "--file", str(path)).returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        ("check", "no/such/step", "--code", "x = 1"),
        ("check", "atomic/probs"),
        ("check", "atomic/probs", "--code", "x", "--file", "y"),
        ("check", "atomic/probs", "--file", "/no/such/file.py"),
        ("check", "--all", "/no/such/file.py"),
        ("--device", "tpu", "list"),
        ("frobnicate",),
    ],
)
def test_usage_errors_exit_2_with_a_message(args):
    out = cli(*args)
    assert out.returncode == 2
    assert out.stderr.strip() and "Traceback" not in out.stderr


def test_unavailable_device_is_an_error_not_a_fallback():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = cli("--device", "cuda", "check", "atomic/probs", "--code", "dprobs = probs")
    assert out.returncode == 2 and "CUDA" in out.stderr and "Traceback" not in out.stderr


def test_check_all_replaces_a_failing_cell_by_the_reference(tmp_path):
    path = tmp_path / "work.py"
    path.write_text(
        "# my backward pass\n"
        "# %% atomic/logprobs\n"
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0 / n\n"
        "# %% atomic/probs\n"
        "dprobs = probs\n"  # wrong
        "# %% atomic/counts_sum_inv\n"
        "dcounts_sum_inv = (counts * dprobs).sum(1, keepdim=True)\n"
        "dcounts = counts_sum_inv * dprobs\n"
    )
    out = cli("check", "--all", str(path), "--json")
    assert out.returncode == 1
    results = json.loads(out.stdout)
    assert [r["passed"] for r in results] == [True, False, True]
    table = cli("check", "--all", str(path))
    assert "exact: True" in table.stdout and "2 of 3 cells passed" in table.stdout


def test_config_file_sets_the_device_and_the_flag_wins(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    config = tmp_path / "config" / "backprop-tutor" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('device = "cuda"\n')
    code = ("--code", "dprobs = dlogprobs / probs", "--json", "--no-record")
    from_config = cli("check", "probs", *code)
    assert from_config.returncode == 2 and "CUDA" in from_config.stderr
    flag = cli("--device", "cpu", "check", "probs", *code)
    assert flag.returncode == 0 and json.loads(flag.stdout)["device"] == "cpu"
    config.write_text('device = "quantum"\n')
    assert cli("list").returncode == 2


@pytest.mark.parametrize("command", ["check", "watch", "grade"])
def test_help_names_the_cell_marker_as_it_is_typed(command):
    # argparse reads help as a %-format: the marker is `# %%`, never `# %`.
    out = cli(command, "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "`# %% STEP_ID`" in text and "`# % STEP_ID`" not in text


def test_the_seed_help_gives_the_default_itself():
    # Every lesson starts from the same seed, the LSTM's and the GPT's too, which have no
    # lecture: the help says the number rather than whose it is.
    from tutor.config import DEFAULT_SEED

    out = " ".join(cli("--help").stdout.split())
    assert f"seed of the parameters and the batches (default {DEFAULT_SEED})" in out
