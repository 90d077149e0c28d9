"""`pack new FORWARD.py --out DIR`: a whole pack from a forward pass, in seconds.

Reads the file (`forward_file`, which refuses what cannot make a lesson in one line), runs it in
the confined child (`trial`), and writes the pack (`writer`) with the file copied beside it, so
that it can be made again. The pack is then loaded as every front end loads it; `pack check
DIR` runs it through the engine.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tutor.authoring import forward_file, trial, writer
from tutor.authoring.forward_file import Unusable
from tutor.pack.model import PackError, data_dir, load_pack

MAX_DATA_BYTES = 64 * 2**20
DEFAULT_BATCH = 32


@dataclass(frozen=True)
class Made:
    """What `make` wrote and how it went."""

    folder: Path
    steps: int
    todo: list[str]  # steps whose reference is a TODO, with why
    mistakes: int
    seconds: float
    training: bool


def make(source: Path, out: Path, *, pack_id: str | None = None, title: str | None = None,
         batch_size: int | None = None, force: bool = False, budget: float = trial.BUDGET,
         progress: Callable[[str], None] = lambda _: None) -> Made:
    """Make the pack in `out` from the forward file `source`; Unusable with one line when the
    file cannot make a lesson (or `out` holds a pack already and `force` is not given)."""
    started = time.monotonic()
    file = forward_file.read(source)
    _no_glue_names(file)
    if (out / "pack.toml").exists() and not force:
        raise Unusable(f"{out} holds a pack already; give --force to make it again there")
    pack_id = pack_id or _identifier(out.resolve().name)
    sizes = _batch_sizes(file, batch_size)
    text = _data_text(file, source, out)
    progress("running the file in the sandbox")
    result = trial.run(trial.Request(file, text, pack_id, *sizes, budget=budget), progress)
    training = dict(file_training(file))
    lesson = writer.Lesson(pack_id, _writable(title or _title(file), file.name),
                           _writable(_description(file), file.name), *sizes, training)
    _staged(out, lambda stage: _write(stage, source, file, lesson, result))
    todo = [f"{s['id']}: {s['todo']}" for s in result["steps"] if s["todo"]]
    return Made(out, len(result["steps"]), todo,
                sum(len(s.get("mistakes", [])) for s in result["steps"]),
                time.monotonic() - started, bool(result["params"]))


def _write(stage: Path, source: Path, file: forward_file.ForwardFile, lesson: writer.Lesson,
           result: dict) -> list[str]:
    """The pack's files in `stage`, loaded as the front ends will load them; their names."""
    try:
        written = [p.name for p in writer.write(stage, file, lesson, result)]
        shutil.copyfile(source, stage / "forward.py")
    except OSError as exc:
        raise Unusable(f"cannot write the pack: {exc.strerror or exc}") from None
    try:
        load_pack.__wrapped__(stage)  # the pack as the front ends will read it
    except (PackError, OSError, ValueError) as exc:
        raise RuntimeError(f"pack new wrote a pack that does not load: {exc}") from exc
    return [*written, "forward.py"]


def _staged(out: Path, make_files: Callable[[Path], list[str]]) -> None:
    """Make the pack's files in a folder beside `out`, and only once all are written and the
    pack loads, move them into `out`: a run that fails anywhere leaves `out` as it was."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise Unusable(f"cannot write the pack in {out}: {exc.strerror or exc}") from None
    try:
        names = make_files(stage)
        try:
            out.mkdir(exist_ok=True)
            for name in names:
                os.replace(stage / name, out / name)
            if "02_training.toml" not in names:
                (out / "02_training.toml").unlink(missing_ok=True)  # from an earlier run
        except OSError as exc:
            raise Unusable(f"cannot write the pack in {out}: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def _writable(text: str, name: str) -> str:
    """A title or description from the file's docstring, as the pack's TOML can hold it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Unusable(f"{name}: its docstring holds a character that cannot be written as "
                       "UTF-8 (a lone surrogate, `\\ud800`)") from None
    if any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in text):
        raise Unusable(f"{name}: its docstring holds a control character, which a terminal "
                       "would obey; the pack's title and description are shown to learners")
    return text


def _no_glue_names(file: forward_file.ForwardFile) -> None:
    tree = ast.parse(file.text)
    for node in tree.body:
        names = []
        if isinstance(node, ast.FunctionDef):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        for name in names:
            if name in writer.GLUE_NAMES:
                raise Unusable(f"{file.name} line {node.lineno}: `{name}` is a name the "
                               "lesson's own setup code uses; call yours something else")


def _identifier(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")
    return cleaned or "lesson"


def _batch_sizes(file: forward_file.ForwardFile, batch_size: int | None) -> tuple[int, int]:
    n = batch_size or int(file.constants.get("batch_size", DEFAULT_BATCH))
    if n < 2:
        raise Unusable(f"a batch of {n} example{'s' if n != 1 else ''} is too small to teach "
                       "from: give two or more")
    held = int(file.constants.get("heldout_batch_size", 17 if n != 17 else 13))
    if held == n:
        raise Unusable("the fresh batch must have another size than the lesson's batch")
    return n, held


def _data_text(file: forward_file.ForwardFile, source: Path, out: Path) -> str | None:
    if not file.data:
        return None
    name = Path(file.data)
    if name.is_absolute() or ".." in name.parts:
        raise Unusable(f"{file.name}: DATA names a file by its name alone (found beside the "
                       "forward file or in the tutor's data folder)")
    for folder in (source.parent, out, data_dir()):
        path = folder / name
        if path.is_file():
            if path.stat().st_size > MAX_DATA_BYTES:
                raise Unusable(f"{file.name}: {file.data} is larger than "
                               f"{MAX_DATA_BYTES // 2**20} MB")
            try:
                return path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise Unusable(f"{file.name}: {file.data} cannot be read as UTF-8 text "
                               f"({exc})") from None
    raise Unusable(f"{file.name}: DATA names {file.data}, which is neither beside the file nor "
                   "in the tutor's data folder")


def file_training(file: forward_file.ForwardFile) -> dict:
    """The file's TRAINING settings (steps, lr, ...), read from its syntax tree."""
    for node in ast.parse(file.text).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TRAINING"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                raise Unusable(f"{file.name} line {node.lineno}: TRAINING must be a dict of "
                               "numbers") from None
            if not isinstance(value, dict) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool)
                    for v in value.values()):
                raise Unusable(f"{file.name} line {node.lineno}: TRAINING must be a dict of "
                               "numbers")
            return value
    return {}


def _title(file: forward_file.ForwardFile) -> str:
    first = file.doc.strip().splitlines()[0].strip().rstrip(".") if file.doc.strip() else ""
    return first or f"Backprop through {Path(file.name).stem}"


def _description(file: forward_file.ForwardFile) -> str:
    rest = file.doc.strip().split("\n\n", 1)
    if len(rest) == 2 and rest[1].strip():
        return rest[1].strip()
    return (f"You will write the backward pass of the network in {file.name} by hand, one "
            "forward line at a time.")
