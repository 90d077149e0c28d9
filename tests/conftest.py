import warnings

import pytest

warnings.filterwarnings("ignore", message=".*NumPy.*")


@pytest.fixture(scope="session")
def engine():
    """One in-process engine for the whole run: building the lesson is the slow part."""
    from tutor.config import Settings
    from tutor.engine import Engine

    return Engine(Settings(device="cpu"))


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    # No test may touch the real progress folder or config.
    monkeypatch.setenv("BACKPROP_TUTOR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("BACKPROP_TUTOR_CACHE", str(tmp_path / "cache"))
