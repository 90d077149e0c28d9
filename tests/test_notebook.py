"""The notebook front end: the workbook `backprop-tutor notebook` writes, run on a real kernel."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import zlib

import pytest

from tutor.cli import main
from tutor.notebook.png import heatmap_png
from tutor.pack.model import find_pack, load_pack, unwrap

nbformat = pytest.importorskip("nbformat", reason="needs the notebook extra")


def _write(tmp_path, pack: str, *flags: str):
    out = tmp_path / f"{pack}.ipynb"
    assert main(["notebook", "--pack", pack, "--out", str(out), *flags]) == 0
    return out


@pytest.mark.parametrize("pack_id", ["makemore", "gpt"])
def test_the_workbook_is_valid_nbformat_4_with_a_check_cell_per_step_and_no_solution(
        tmp_path, pack_id):
    nb = nbformat.read(_write(tmp_path, pack_id, "--no-shapes"), as_version=4)
    nbformat.validate(nb)
    pack = load_pack(find_pack(pack_id))
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert code[0] == f"%load_ext tutor\n%tutor pack {pack_id}"
    checks = [c for c in code if c.startswith("%%check ")]
    assert [c.split("\n", 1)[0].split()[1] for c in checks] == [s.id for s in pack.gradient_steps]
    for cell, step in zip(checks, pack.gradient_steps, strict=True):
        assert cell.split("\n", 1)[1].strip() == step.template.strip()
        assert step.solution.strip() not in nb_text(nb)
    intro = nb.cells[0].source
    assert "never runs in this kernel" in intro
    assert "%pip install 'backprop_tutor-" in intro and "-py3-none-any.whl[notebook]'" in intro


def nb_text(nb) -> str:
    return "\n".join(c.source for c in nb.cells)


def test_the_workbook_shows_the_shapes_of_the_forward_lines(tmp_path):
    nb = nbformat.read(_write(tmp_path, "makemore"), as_version=4)
    first = next(c.source for c in nb.cells if "`atomic/logprobs`" in c.source)
    assert "loss = -logprobs[range(n), Yb].mean()" in first
    assert "`[] ← [32, 27], [32]`" in first
    assert "**Write `dlogprobs` (shape `[32, 27]`)**" in first


def test_an_existing_workbook_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "mine.ipynb"
    out.write_text("my work")
    assert main(["notebook", "--no-shapes", "--out", str(out)]) == 2
    assert "may hold your work" in capsys.readouterr().err
    assert out.read_text() == "my work"


def test_import_tutor_loads_neither_ipython_nor_torch():
    probe = ("import sys, tutor; assert callable(tutor.load_ipython_extension); "
             "print(sorted(m for m in ('IPython', 'torch', 'tutor.notebook') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_heatmap_png_is_a_well_formed_image_of_its_values():
    png = heatmap_png([[0.0, 1.0], [0.5, 0.0], [0.25]], cell=2)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        kind, body = png[at + 4:at + 8], png[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc
        chunks[kind] = body
        at += 12 + length
    width, height = struct.unpack(">II", chunks[b"IHDR"][:8])
    assert (width, height) == (4, 6)
    raw = zlib.decompress(chunks[b"IDAT"])
    rows = [raw[r * 13:(r + 1) * 13] for r in range(6)]
    assert all(row[0] == 0 for row in rows)
    pixel = lambda r, c: tuple(rows[r][1 + 3 * c:4 + 3 * c])  # noqa: E731
    assert pixel(0, 0) == (40, 44, 52)  # zero is the background
    assert pixel(0, 2) == (224, 108, 117)  # the largest is the hot end
    assert pixel(4, 2) == pixel(0, 0)  # a short row is padded with the background
    assert pixel(2, 0) != pixel(0, 0) and pixel(2, 0) != pixel(0, 2)


# -- on a real kernel -------------------------------------------------------------------------

def _outputs(cell) -> tuple[str, str]:
    """A cell's plain text (display data and streams) and its HTML."""
    text, page = [], []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            text.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            text.append(out.data.get("text/plain", ""))
            page.append(out.data.get("text/html", ""))
        elif out.output_type == "error":
            text.append(f"{out.ename}: {out.evalue}")
    return "\n".join(text), "\n".join(page)


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
@pytest.mark.parametrize("pack_id", ["makemore", "gpt", "lstm"])
def test_the_workbook_runs_on_a_kernel_passes_with_the_reference_and_records_progress(
        tmp_path, pack_id):
    from nbclient import NotebookClient

    pack = load_pack(find_pack(pack_id))
    nb = nbformat.read(_write(tmp_path, pack_id, "--no-shapes"), as_version=4)
    solved = []
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.source.startswith("%%check "):
            step = pack.step(cell.source.split("\n", 1)[0].split()[1])
            cell.source = f"%%check {step.id}\n{step.solution}"
            solved.append(cell)
    step, mistake = next((s, s.mistakes[0]) for s in pack.gradient_steps if s.mistakes)
    extra = [f"%%check {step.id}\n{mistake.code}", f"%hint {step.id}",
             "%%check no_such_step\nx = 1", f"%%check {step.id}\nd = (", "%progress"]
    cells = [nbformat.v4.new_code_cell(source) for source in extra]
    nb.cells += cells
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()

    for cell in solved:
        text, page = _outputs(cell)
        assert "Traceback" not in text
        assert "\n  PASSED" in text, text
        # the notebook's cmp row (an accepted row may say approximate: False, with its note)
        assert "| exact: " in text or "function" in text, text
        assert ">PASSED<" in page
    mistaken, hint, unknown, broken, progress = (_outputs(c)[0] for c in cells)
    assert "NOT PASSED" in mistaken
    assert _words(unwrap(mistake.message))[:60] in _words(mistaken)
    assert f"[{mistake.kind}]" in mistaken
    # the shape is right and the numbers are not: where they are off, as an image
    images = [o for o in cells[0].outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1 and images[0].data["text/plain"].startswith("|yours − autograd|")
    assert _words(unwrap(step.hints[0]))[:60] in _words(hint)
    assert unknown.strip().startswith("backprop-tutor: no step 'no_such_step'")
    assert "syntax error" in broken and "Traceback" not in broken
    assert f"{len(solved)} of {len(pack.steps)} steps done" in progress
    for cell in nb.cells:
        assert all(out.output_type != "error" for out in cell.get("outputs", []))

    out = subprocess.run([sys.executable, "-m", "tutor", "--pack", pack_id, "progress", "--json"],
                         capture_output=True, text=True, check=True)
    rows = {r["id"]: r for r in json.loads(out.stdout)["steps"]}
    assert {sid for sid, r in rows.items() if r["status"] in ("passed", "exact")} == {
        s.id for s in pack.gradient_steps}
    assert rows[step.id]["attempts"] == 3  # the reference, the mistake, the syntax error
    assert rows[step.id]["hints"] == 1


@pytest.mark.slow
def test_an_interrupted_check_and_a_restarted_kernel_lose_nothing_recorded(tmp_path):
    from jupyter_client.manager import start_new_kernel

    # A time limit long enough that only the interrupt can stop the endless loop.
    config = tmp_path / "config" / "backprop-tutor"
    config.mkdir(parents=True)
    (config / "config.toml").write_text("timeout = 120\n")
    pack = load_pack(find_pack("makemore"))
    first, second = pack.steps[0], pack.steps[1]
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        def run(code: str, timeout: float = 120) -> str:
            text = []

            def keep(msg):
                content = msg["content"]
                if msg["msg_type"] == "stream":
                    text.append(content["text"])
                elif msg["msg_type"] in ("display_data", "execute_result"):
                    text.append(content["data"].get("text/plain", ""))
                elif msg["msg_type"] == "error":
                    text.append("\n".join(content["traceback"]))

            client.execute_interactive(code, timeout=timeout, output_hook=keep)
            return "\n".join(text)

        run("%load_ext tutor")
        assert "\n  PASSED" in run(f"%%check {first.id}\n{first.solution}")
        client.execute(f"%%check {second.id}\nwhile True:\n    pass\n")
        time.sleep(3)  # the loop is running in the sandbox, the kernel waits for its verdict
        manager.interrupt_kernel()
        interrupted = []
        while not any("interrupted" in t for t in interrupted):
            msg = client.get_iopub_msg(timeout=60)
            if msg["msg_type"] == "stream":
                interrupted.append(msg["content"]["text"])
            assert msg["msg_type"] != "error", msg["content"]
        assert interrupted[-1].startswith("backprop-tutor: interrupted.")
        # The next check runs at once, in a fresh sandbox.
        assert "\n  PASSED" in run(f"%%check {second.id}\n{second.solution}", timeout=60)
        manager.restart_kernel(now=True)
        client.wait_for_ready(timeout=60)
        run("%load_ext tutor")
        table = run("%progress")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    assert "2 of 23 steps done" in table
    assert "Traceback" not in table


def test_the_magics_answer_wrong_input_with_one_line(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext tutor")
    try:
        capsys.readouterr()
        said = {}
        for cell in ["%%check\nx = 1", "%%check no_such_step\nx = 1", "%%check train/loop\nx = 1",
                     "%hint", "%progress now", "%tutor pack no_such_pack", "%tutor colour blue"]:
            shell.run_cell(cell)
            out = capsys.readouterr()
            said[cell.split("\n")[0]] = out.err.strip()
            assert out.out == "" and len(out.err.strip().splitlines()) == 1, (cell, out)
            assert out.err.startswith("backprop-tutor: ") and "Traceback" not in out.err
    finally:
        shell.run_cell("%unload_ext tutor")
    assert "%%check STEP_ID" in said["%%check"]
    assert "no step 'no_such_step'" in said["%%check no_such_step"]
    assert "backprop-tutor train" in said["%%check train/loop"]
    assert "%tutor pack: no pack 'no_such_pack'" in said["%tutor pack no_such_pack"]
    assert "%tutor pack ID" in said["%tutor colour blue"]


def test_the_workbooks_first_cell_starts_one_evaluator_for_its_own_lesson(capsys, monkeypatch):
    """`%load_ext tutor` and `%tutor pack gpt` in one cell: the lesson is chosen before any
    evaluator starts, so PyTorch loads the gpt lesson only and the cell says so once."""
    from IPython.core.interactiveshell import InteractiveShell

    from tutor.notebook import magics

    started = []
    monkeypatch.setattr(magics.Evaluator, "start", lambda self: started.append(self.settings.pack))
    monkeypatch.setattr(magics.Evaluator, "close", lambda self: None)
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext tutor\n%tutor pack gpt")
    try:
        out = capsys.readouterr().out
        assert started == ["gpt"]
        assert out.count("lesson:") == 1 and "(gpt)" in out
        shell.run_cell("%unload_ext tutor")
        shell.run_cell("%load_ext tutor")  # alone in its cell, it starts the evaluator at its end
        assert len(started) == 2 and "lesson:" in capsys.readouterr().out
    finally:
        shell.run_cell("%unload_ext tutor")


def test_a_magics_line_is_taken_as_written_never_run_in_the_kernel(tmp_path, capsys, monkeypatch):
    """IPython expands `{expr}` and `$name` in a magic's line unless the magic opts out: each
    of the tutor's magics sees its line literally, so nothing in it runs in the kernel."""
    from IPython.core.interactiveshell import InteractiveShell

    from tutor.notebook import magics

    monkeypatch.setattr(magics.Evaluator, "start", lambda self: None)
    monkeypatch.setattr(magics.Evaluator, "close", lambda self: None)
    marker = tmp_path / "MARKER"
    touch = f"{{__import__('pathlib').Path({str(marker)!r}).touch()}}"
    shell = InteractiveShell.instance()
    shell.run_cell("%load_ext tutor")
    shell.user_ns["target"] = "atomic/logprobs"  # a real step: `$target` must not become it
    try:
        capsys.readouterr()
        said = {}
        for cell in [f"%%check {touch}\nx = 1", "%%check $target\nx = 1", "%%check {x}\nx = 1",
                     f"%hint {touch}", f"%progress {touch}", f"%tutor {touch}"]:
            shell.run_cell(cell)
            said[cell.split("\n")[0]] = capsys.readouterr().err.strip()
            assert not marker.exists(), cell
    finally:
        shell.run_cell("%unload_ext tutor")
        shell.user_ns.pop("target", None)
    assert said[f"%%check {touch}"].startswith(f"backprop-tutor: no step '{touch}'")
    assert said["%%check $target"].startswith("backprop-tutor: no step '$target'")
    assert said["%%check {x}"].startswith("backprop-tutor: no step '{x}'")
    assert said[f"%hint {touch}"].startswith(f"backprop-tutor: no step '{touch}'")
    assert "takes no arguments" in said[f"%progress {touch}"]
    assert "%tutor pack ID" in said[f"%tutor {touch}"]


def test_a_locked_step_s_check_says_when_it_opens_and_never_that_it_unlocked_itself():
    from tutor.notebook.render import _after
    from tutor.session.controller import CheckOutcome
    from tutor.values.results import CheckResult, Status

    failed = CheckOutcome(CheckResult(step="atomic/probs", passed=False), Status.LOCKED)
    assert _after(failed, True) == ["atomic/probs: not open yet; it opens once the steps "
                                    "before it are done"]
    passed = CheckOutcome(CheckResult(step="atomic/probs", passed=True), Status.EXACT,
                          unlocked=["atomic/probs", "atomic/counts_sum_inv"])
    assert _after(passed, True)[-1] == "unlocked: atomic/counts_sum_inv"
