"""`train --compile` with a short time limit: setting torch.compile up is not a step.

The last checked step's alarm must be off before torch.compile starts importing and tracing,
which takes longer than one step may; otherwise the alarm fired inside the setup and the run
ended as an internal error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.serial  # a one-second limit: timed, so it runs alone after the parallel part
def test_compiling_after_a_checked_step_outlasts_its_limit_without_an_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tutor", "--device", "cpu", "--home",
                           str(tmp_path), "--timeout", "1", "train", "--reference", "--steps",
                           "2", "--gradcheck-steps", "1", "--compile", "--no-record"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    said = done.stdout + done.stderr
    assert "internal error" not in said and "CheckTimeout" not in said, said[-2000:]
    assert "Trained 2 of 2 steps" in said, said[-2000:]
