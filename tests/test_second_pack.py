"""A second lesson, as data only: tests/packs/tiny is a two-layer classifier with layernorm on
synthetic data. Nothing in tutor/ knows it; these tests run it through the engine, the worker and
training as the makemore pack runs."""

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tutor.config import Settings
from tutor.pack.model import find_pack, load_pack

TINY = Path(__file__).parent / "packs" / "tiny"
PACK = load_pack(TINY)


@pytest.fixture(scope="module")
def tiny_engine():
    from tutor.core.engine import Engine

    return Engine(Settings(device="cpu", pack=str(TINY)))


def test_a_pack_is_found_by_folder_or_by_installed_id():
    assert find_pack(str(TINY)) == TINY.resolve()
    assert find_pack("makemore").name == "makemore"


@pytest.mark.parametrize("step_id", [s.id for s in PACK.gradient_steps])
def test_every_reference_solution_passes(tiny_engine, step_id):
    result = tiny_engine.check(step_id, PACK.step(step_id).solution).to_dict()
    assert result["passed"], result
    assert result["heldout"]["batch_size"] == 13


def test_the_sizes_are_in_scope_by_the_packs_names(tiny_engine):
    result = tiny_engine.check("tiny/logits",
                               "print(n_in, n_hidden, n_classes, batch_size)").to_dict()
    assert result["stdout"].strip() == "6 16 5 24"


def test_a_catalogued_mistake_is_recognised(tiny_engine):
    code = "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1"
    check = tiny_engine.check("tiny/logits", code).to_dict()["checks"][0]
    assert check["diagnosis"]["kind"] == "scale"


def test_an_uncatalogued_mistake_gets_a_diagnosis_from_the_step(tiny_engine):
    code = "dhpre = rstd * (dxn - dxn.mean(1, keepdim=True))"
    check = tiny_engine.check("tiny/hpre", code).to_dict()["checks"][0]
    assert check["verdict"] == "wrong"
    assert check["diagnosis"] is not None and check["diagnosis"]["kind"] == "partial"


def test_a_hard_coded_batch_size_fails_the_fresh_batch(tiny_engine):
    code = "dlogits = F.softmax(logits, 1)\ndlogits[range(n), Yb] -= 1\ndlogits /= 24"
    result = tiny_engine.check("tiny/logits", code).to_dict()
    assert not result["passed"] and result["heldout"]["passed"] is False


def test_training_runs_on_the_learners_gradients_and_learns(tiny_engine):
    from tutor.training import run_training

    result = run_training(tiny_engine, {"steps": 300}, lambda _: None, threading.Event())
    assert result["status"] == "finished", result["error"]
    assert result["gradcheck"]["passed"]
    # Five classes: chance is log(5) = 1.61; the reference backward pass learns far below it.
    assert result["val_loss"] < 0.5


def test_the_worker_serves_a_pack_given_by_folder():
    from tutor.evaluator.client import Evaluator

    with Evaluator(Settings(device="cpu", pack=str(TINY))) as ev:
        assert ev.info()["parameters"] == sum(
            a * b for a, b in ((6, 16), (16, 5))) + 16 * 3 + 5
        assert ev.check("tiny/W1", PACK.step("tiny/W1").solution).to_dict()["passed"]


def test_each_pack_keeps_its_own_progress(tmp_path):
    from tutor.session.store import Store

    makemore = Store.open(tmp_path, load_pack())
    tiny = Store.open(tmp_path, PACK)
    assert makemore.path != tiny.path and tiny.path.name == "progress-tiny.sqlite3"


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tutor", "--home", str(home), "--device", "cpu",
                           *args], capture_output=True, text=True, timeout=120)


def test_the_command_line_takes_the_pack(tmp_path):
    listed = _cli("--pack", str(TINY), "list", home=tmp_path)
    assert listed.returncode == 0 and "tiny/hpre" in listed.stdout
    checked = _cli("--pack", str(TINY), "check", "tiny/W1", "--code",
                   PACK.step("tiny/W1").solution, home=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert (tmp_path / "progress-tiny.sqlite3").is_file()
    assert not (tmp_path / "progress.sqlite3").exists()


def test_an_unknown_pack_is_one_line_and_exit_2(tmp_path):
    out = _cli("--pack", "no-such-pack", "list", home=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no-such-pack" in out.stderr


def test_the_tui_teaches_the_pack(tmp_path):
    import asyncio
    import time

    from tutor.evaluator.client import Evaluator
    from tutor.session.store import Store
    from tutor.ui.app import TutorApp
    from tutor.ui.widgets.editor import CodeEditor

    settings = Settings(device="cpu", home=tmp_path, pack=str(TINY))
    store = Store.open(tmp_path, PACK)

    async def scenario() -> None:
        with Evaluator(settings) as ev:
            app = TutorApp(settings, store=store, evaluator=ev, greet=False)
            async with app.run_test(size=(120, 40)) as pilot:
                deadline = time.monotonic() + 60
                while app.info is None or app.checking:
                    assert time.monotonic() < deadline
                    await pilot.pause(0.05)
                assert app.step.id == "tiny/logits"
                app.query_one(CodeEditor).load_text(PACK.step("tiny/logits").solution)
                await pilot.press("ctrl+j")
                while app.checking or store.status("tiny/logits") == "unlocked":
                    assert time.monotonic() < deadline
                    await pilot.pause(0.05)
                assert store.status("tiny/logits") in ("passed", "exact")
                assert store.status("tiny/h") == "unlocked"

    asyncio.run(scenario())
    store.close()
