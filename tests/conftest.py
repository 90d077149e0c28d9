import os
import warnings

import pytest

# The suite runs on several processes at once (pytest-xdist). Torch gives each process a thread
# per core for its own operations, so three processes on two cores would run six busy threads
# that wait on each other: one thread each keeps every core busy without that. It is set before
# torch is first imported, and the processes the tests start inherit it.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")

warnings.filterwarnings("ignore", message=".*NumPy.*")


@pytest.fixture(scope="session")
def engine():
    """One in-process engine for the whole run: building the lesson is the slow part. Its
    children are forked, or started where BACKPROP_TUTOR_ISOLATION says so (spawn), so the
    check tests run on either path."""
    from tutor.config import Settings
    from tutor.core.engine import Engine

    isolation = os.environ.get("BACKPROP_TUTOR_ISOLATION") or "auto"
    return Engine(Settings(device="cpu", isolation=isolation))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    # No test may touch the real progress folder or config.
    monkeypatch.setenv("BACKPROP_TUTOR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("BACKPROP_TUTOR_CACHE", str(tmp_path / "cache"))


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` need a CUDA device: skipped without one (benchmarks/gpu_check.sh runs
    them where there is one), run on the simulated one under BACKPROP_TUTOR_SIMULATED_DEVICE=1
    (tests/test_devices.py does)."""
    marked = [item for item in items if item.get_closest_marker("cuda")]
    if not marked:
        return
    import torch

    from tutor.config import simulated

    if simulated():
        return
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.sh)")
    for item in marked:
        item.add_marker(skip)
