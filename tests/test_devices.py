"""Where tensors live (tutor/devices.py), and the simulated accelerator that shows on a CPU what
would go wrong on a GPU.

The simulated device must behave as CUDA does about devices, or a test that passes under it
proves nothing: the first tests hold it to that, inside a `Simulated` mode of their own (never
installed in this process, so the rest of the suite runs as it always did). The rest run the
tutor's front ends in processes of their own with BACKPROP_TUTOR_SIMULATED_DEVICE=1: the check,
training, grading, the notebook, the CUDA-marked tests, and the parity benchmark against the CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tutor import devices
from tutor.devices import ACCELERATOR, Simulated, on_accelerator

ROOT = Path(__file__).resolve().parent.parent
MIXED = "Expected all tensors to be on the same device"
SIMULATED = {"BACKPROP_TUTOR_SIMULATED_DEVICE": "1"}


@pytest.fixture
def sim():
    with Simulated() as mode:
        yield mode


def test_a_tensor_moved_to_the_accelerator_says_so_and_a_cpu_one_does_not(sim):
    x = torch.randn(3, 4).to(ACCELERATOR)
    y = torch.randn(3, 4)
    assert x.device == torch.device("cuda:0") and x.is_cuda and x.get_device() == 0
    assert y.device.type == "cpu" and not y.is_cuda
    assert "device='cuda:0'" in repr(x)
    # what an operation makes follows its inputs
    assert (x * 2).exp().sum(1).device.type == "cuda"
    assert torch.max(x, 1).values.is_cuda and x.T.is_cuda and x[0].is_cuda
    assert x.to(torch.float64).is_cuda and x.double().is_cuda


@pytest.mark.parametrize("mix", [
    lambda x, c: x @ c.T,
    lambda x, c: x + c,
    lambda x, c: torch.cat([x, c]),
    lambda x, c: torch.where(c > 0, x, x),
    lambda x, c: F.cross_entropy(x, torch.tensor([0, 1, 2])),
    lambda x, c: x.index_select(0, torch.tensor([0, 1])),
    lambda x, c: x.scatter_add(1, torch.zeros(3, 1, dtype=torch.long), c[:, :1]),
    lambda x, c: torch.autograd.grad(x * 1, x, torch.ones(3, 4)),
], ids=["matmul", "add", "cat", "where", "cross_entropy", "index_select", "scatter_add",
        "grad_outputs"])
def test_mixing_the_accelerator_with_cpu_tensors_fails_as_on_cuda(sim, mix):
    x = torch.randn(3, 4).to(ACCELERATOR).requires_grad_()
    c = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match=MIXED):
        mix(x, c)


def test_what_cuda_allows_is_allowed(sim):
    x = torch.randn(5, 4).to(ACCELERATOR)
    # a 0-dim CPU tensor is a scalar anywhere
    assert (x * torch.tensor(2.0)).is_cuda and (torch.tensor(2.0) * x).is_cuda
    # CPU index tensors and masks in indexing, and CPU values set through it
    idx = torch.tensor([0, 2])
    assert x[idx].is_cuda and x[torch.tensor([True, False, True, False, True])].is_cuda
    x[idx] = torch.zeros(2, 4)
    assert x.is_cuda and float(x[0].abs().sum()) == 0.0
    x.copy_(torch.ones(5, 4))
    assert x.is_cuda


def test_numpy_fails_and_cpu_and_to_copy_across(sim):
    x = torch.randn(2, 3).to(ACCELERATOR)
    with pytest.raises(TypeError, match="cuda:0 device type tensor to numpy"):
        x.numpy()
    back = x.cpu()
    assert back.device.type == "cpu" and not on_accelerator(back)
    back += 1  # a copy, as on a GPU: the accelerator's tensor is untouched
    assert not torch.equal(back, x.cpu())
    assert x.to("cpu").device.type == "cpu" and x.to("cpu", torch.float64).dtype == torch.float64
    assert torch.ones(2).cuda().is_cuda and torch.ones(2).to("cuda").is_cuda
    assert torch.ones(2).to(x).is_cuda and x.to(torch.ones(1)).device.type == "cpu"
    assert x.cpu().tolist() == x.tolist() and isinstance(x.sum().item(), float)


def test_autograd_on_the_accelerator_leaves_its_gradients_there(sim):
    w = torch.randn(4, 3).to(ACCELERATOR).requires_grad_()
    (w.tanh() @ torch.ones(3).cuda()).sum().backward()
    assert w.grad is not None and w.grad.is_cuda
    with pytest.raises(RuntimeError, match="different device"):
        w.grad = torch.zeros(4, 3)


def test_a_cpu_generator_for_an_accelerator_tensor_fails_as_on_cuda(sim):
    g = torch.Generator().manual_seed(1)
    with pytest.raises(RuntimeError, match="'cuda' device type for generator"):
        torch.randn(3, generator=g, device="cuda")
    assert torch.randn(3, generator=g).device.type == "cpu"


def test_inside_the_learners_code_tensors_made_without_a_device_land_beside_the_network(sim):
    dlogits = torch.randn(32, 27).to(ACCELERATOR)
    before = torch.zeros(3)
    with devices.learner_default(ACCELERATOR):
        made = [torch.ones(32), torch.zeros(2, 2), torch.arange(5), torch.eye(3),
                torch.full((2,), 1.5), torch.empty(4), torch.tensor([1.0, 2.0]),
                torch.linspace(0, 1, 4), torch.zeros_like(before)]
        assert all(t.is_cuda for t in made), [t.device for t in made]
        assert (torch.ones(32) @ dlogits).is_cuda
        assert torch.zeros(2, device="cpu").device.type == "cpu"  # asked for: kept
    assert torch.ones(2).device.type == "cpu"  # the tutor's own code keeps the default


def test_the_boundary_brings_everything_judged_to_the_cpu(sim):
    x = torch.randn(2).to(ACCELERATOR)
    out = devices.judged({"a": x, "b": [x, 3], "c": torch.ones(1)})
    assert out["a"].device.type == "cpu" and out["b"][0].device.type == "cpu"
    assert out["b"][1] == 3 and torch.equal(out["a"], x.cpu())


def test_the_simulated_device_is_what_auto_and_cuda_mean_only_when_asked_for(monkeypatch):
    from tutor.config import simulated, unavailable_device

    monkeypatch.delenv("BACKPROP_TUTOR_SIMULATED_DEVICE", raising=False)
    assert not simulated() and devices.describe("cpu") == "cpu"
    if not torch.cuda.is_available():
        assert unavailable_device("cuda") is not None
    monkeypatch.setenv("BACKPROP_TUTOR_SIMULATED_DEVICE", "1")
    assert simulated() and unavailable_device("cuda") is None
    assert devices.describe("cuda:0") == "cuda:0 (simulated on the CPU)"
    monkeypatch.setenv("BACKPROP_TUTOR_SIMULATED_DEVICE", "0")
    assert not simulated()


# --- the front ends on the simulated device, each in processes of its own ----------------------

def _run(*args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **SIMULATED, "PYTHONWARNINGS": "ignore", **env})


def _tutor(*args: str) -> subprocess.CompletedProcess:
    return _run(sys.executable, "-m", "tutor", *args)


RIGHT_WITHOUT_A_DEVICE = ("dh = dlogits @ W2.T\ndW2 = h.T @ dlogits\n"
                          "db2 = (torch.ones(1, n) @ dlogits).view(-1)\n")


def test_the_command_line_checks_on_the_simulated_device_and_says_so():
    right = _tutor("check", "atomic/h", "--code", RIGHT_WITHOUT_A_DEVICE)
    assert right.returncode == 0, right.stdout + right.stderr
    assert "· on cuda:0 (simulated on the CPU)" in right.stdout and "\n  PASSED" in right.stdout
    wrong = _tutor("check", "atomic/probs", "--code", "dprobs = dlogprobs * probs")
    assert wrong.returncode == 1 and "internal" not in wrong.stdout
    assert "[known_mistake]" in wrong.stdout and "NOT PASSED" in wrong.stdout
    cpu = _tutor("--device", "cpu", "check", "atomic/probs", "--code",
                 "dprobs = dlogprobs * probs")
    assert cpu.stdout.replace("· on cpu", "") == wrong.stdout.replace(
        "· on cuda:0 (simulated on the CPU)", "")


@pytest.mark.slow
def test_training_and_grading_run_on_the_simulated_device(tmp_path):
    run = _tutor("--pack", "exercises/lstm", "train", "--reference", "--steps", "40",
                 "--no-record")
    assert run.returncode == 0 and "on cuda:0 (simulated on the CPU)" in run.stdout, run.stdout
    assert "internal error" not in run.stdout
    sys.path.insert(0, str(ROOT / "tests"))
    import lecture_notebooks as L

    notebook = L.write(tmp_path / "nb.ipynb", L.notebook([L.ex1_one_cell()]))
    graded = _tutor("grade", "--train-steps", "40", str(notebook))
    assert "23 passed" in graded.stdout, graded.stdout + graded.stderr


@pytest.mark.slow
def test_the_notebook_checks_on_the_simulated_device(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    for key, value in SIMULATED.items():
        monkeypatch.setenv(key, value)  # the kernel, and the evaluator it starts, inherit it
    cells = ["%load_ext tutor", f"%%check atomic/h\n{RIGHT_WITHOUT_A_DEVICE}",
             "%%check atomic/probs\ndprobs = dlogprobs * probs", "%tutor"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = ["\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "")
                      for o in cell.outputs) for cell in nb.cells]
    assert "on cuda:0 (simulated on the CPU)" in text[1] and "\n  PASSED" in text[1], text[1]
    assert "NOT PASSED" in text[2] and "internal" not in text[2]
    assert "device: auto (checks run on cuda:0 (simulated on the CPU))" in text[3], text[3]
    images = [o for o in nb.cells[2].outputs if "image/png" in o.get("data", {})]
    assert images, "the heatmap of a wrong answer is drawn from the simulated device's check"


@pytest.mark.slow
def test_the_gpu_suite_holds_on_the_simulated_device():
    """tests/test_cuda.py, which a GPU machine runs (benchmarks/gpu_check.sh), here too."""
    out = _run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
               "tests/test_cuda.py", timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "skipped" not in out.stdout.splitlines()[-1]


def _parity(*flags: str) -> tuple[str, str]:
    """The benchmark's last line, and all it printed (its first differences among it)."""
    out = _run(sys.executable, "benchmarks/device_parity.py", "--device", "simulated", *flags,
               timeout=3000)
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr
    return last, out.stdout[-4000:] + out.stderr[-2000:]


def test_a_sample_of_every_corpus_gets_the_same_verdict_on_the_simulated_device():
    last, said = _parity("--sample", "12", "--no-runs")
    counts = last.removeprefix("parity: ").split(" ")[0].split("/")
    assert last.startswith("parity:") and counts[0] == counts[1] and int(counts[1]) >= 50, said


@pytest.mark.slow
def test_every_corpus_gets_the_same_verdict_on_the_simulated_device():
    last, said = _parity()
    counts = last.removeprefix("parity: ").split(" ")[0].split("/")
    assert last.startswith("parity:") and counts[0] == counts[1] and int(counts[1]) >= 500, said


def test_the_meta_device_works_as_in_pytorch(sim):
    # Shapes without values (what some diagnoses record) are neither device here.
    x = torch.ones(3, 2).to(ACCELERATOR)
    shape_only = x.to("meta")
    assert shape_only.is_meta and shape_only.device.type == "meta" and shape_only.shape == (3, 2)
    assert torch.zeros(2, device="meta").is_meta
