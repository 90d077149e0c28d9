"""The test suite's corpora of answers, loaded as modules for the benchmarks that measure on them
(`headroom.py`, `diagnoses.py`): the tests and the figures then come from the same answers."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def load(name: str):
    """`tests/<name>.py` as a module (its import runs nothing but definitions)."""
    spec = importlib.util.spec_from_file_location(name, TESTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module
