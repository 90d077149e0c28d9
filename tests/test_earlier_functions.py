"""A function written in an accepted step and called in a later one behaves there as it did in
its own step: behind the same guard, printing into the later step's output, and failing with
the step and line where it was written. On the fork path and on the spawn path alike.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tutor.config import Settings
from tutor.core.candidate import (
    CodeError,
    Output,
    compile_candidate,
    copy_namespace,
    earlier_file,
    execute,
    runtime_error,
)
from tutor.sandbox.guard import Refused

# The step that writes the helper, accepted on its own; the next step calls it.
HELPER = ("def helper(x):\n"
          "    print('helper sees', list(x.shape))\n"
          "    return torch.zeros_like(x)\n"
          "\n"
          "dlogprobs = helper(logprobs)\n"
          "dlogprobs[range(n), Yb] = -1.0 / n\n")
USES_HELPER = "\ndprobs = helper(probs) + (1.0 / probs) * dlogprobs\n"
# A helper that passes the syntax check and asks the guard, at run time, for raw memory.
PEEK = ("def peek(x):\n"
        "    y = x + 1\n"
        "    return y.untyped_storage()\n"
        "\n"
        "dlogprobs = torch.zeros_like(logprobs)\n"
        "dlogprobs[range(n), Yb] = -1.0 / n\n")
USES_PEEK = "dprobs = (1.0 / probs) * dlogprobs\n\nraw = peek(probs)\n"
PATHS = ["fork", "spawn"]


@pytest.fixture(scope="module")
def engines():
    from tutor.core.engine import Engine

    made = {path: Engine(Settings(device="cpu", isolation=path)) for path in PATHS}
    for engine in made.values():
        engine.prepare()
    yield made
    for engine in made.values():
        engine.close()


@pytest.mark.parametrize("path", PATHS)
def test_a_helper_from_an_accepted_step_works_in_the_next_one(engines, path):
    engine = engines[path]
    own = engine.check("atomic/logprobs", HELPER).to_dict()
    assert own["passed"], own
    assert own["stdout"] == "helper sees [32, 27]\n"
    later = engine.check("atomic/probs", USES_HELPER, {"atomic/logprobs": HELPER}).to_dict()
    assert later["passed"] and later["error"] is None, later
    # its print goes to the step that calls it (the replay's own print is not this step's)
    assert later["stdout"] == "helper sees [32, 27]\n"


@pytest.mark.parametrize("path", PATHS)
def test_a_helper_from_an_earlier_step_is_still_behind_the_guard(engines, path):
    result = engines[path].check("atomic/probs", USES_PEEK, {"atomic/logprobs": PEEK}).to_dict()
    error = result["error"]
    assert not result["passed"] and error["kind"] == "forbidden", result
    assert "untyped_storage is not available in the sandbox" in error["message"]
    # the line in this step that called it, and where inside the earlier step it stopped
    assert error["line"] == 3
    assert error["message"].startswith(
        "line 3: `raw = peek(probs)`\n(in peek, line 3 of your code for atomic/logprobs: "
        "`return y.untyped_storage()`)\n")


def test_the_command_line_checks_a_file_whose_later_cell_calls_an_earlier_helper(tmp_path):
    work = tmp_path / "work.py"
    work.write_text(f"# %% atomic/logprobs\n{HELPER}# %% atomic/probs\n{USES_HELPER}")
    out = subprocess.run([sys.executable, "-m", "tutor", "check", "--all", str(work)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 of 2 cells passed" in out.stdout


# -- in one process, run by run, as the child runs them ---------------------------------------

def _define(code: str, step: str = "atomic/logprobs") -> dict:
    """`code` run as an earlier step's replay; the namespace the next run starts from."""
    ns = {"x": torch.ones(2, 3)}
    execute(compile_candidate(code, earlier_file(step)), ns, Output())
    return copy_namespace(ns)


def test_a_helper_prints_warns_and_compares_into_the_run_that_calls_it():
    ns = _define("def helper(v):\n    print('sum', v.sum().item())\n"
                 "    cmp('v', v, v)\n    return F.softmax(v)\n")
    out = Output()
    execute(compile_candidate("y = helper(x)\n"), ns, out)
    assert torch.allclose(ns["y"], torch.full((2, 3), 1 / 3))
    text = out.text()
    assert text.startswith("sum 6.0\n")
    assert "warning (line 4 of your code for atomic/logprobs): Implicit dimension" in text
    assert [(name, dt.shape) for _, name, dt in out.cmp_calls] == [("v", (2, 3))]


@pytest.mark.parametrize("body", [
    "    return ascii",  # the builtins it was made with, not the interpreter's
    "    f = lambda: ascii\n    return f()",  # nor those of a function it makes when called
])
def test_a_helper_called_later_has_only_the_sandboxs_builtins(body):
    ns = _define(f"def helper():\n{body}\n")
    with pytest.raises(NameError, match="'ascii'"):
        execute(compile_candidate("y = helper()\n"), ns, Output())


def test_a_refusal_inside_an_earlier_helper_is_told_at_both_lines():
    earlier = "def peek(v):\n\n    return v.data_ptr()\n"
    ns = _define(earlier, "fused/h")
    code = "a = 1\nb = peek(x)\n"
    with pytest.raises(Refused) as caught:
        execute(compile_candidate(code), ns, Output())
    error = runtime_error(caught.value, code, list(ns), earlier={"fused/h": earlier})
    assert isinstance(error, CodeError) and error.payload["line"] == 2
    assert error.payload["message"].startswith(
        "line 2: `b = peek(x)`\n(in peek, line 3 of your code for fused/h: "
        "`return v.data_ptr()`)\nthe tensor attribute .data_ptr is not available")
