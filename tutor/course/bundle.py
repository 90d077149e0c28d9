"""The Gradescope autograder bundle: a zip with `setup.sh` and `run_autograder` at its root.

Gradescope runs `setup.sh` once, as root, when it builds the assignment's image (Ubuntu, Python
3.10): it installs the pinned CPU build of torch and the tutor from the wheel inside the zip.
It runs `run_autograder` for each submission, which grades the one `.py` or `.ipynb` in
`submission/` and writes `results/results.json`, all under `$AUTOGRADER_ROOT` (`/autograder`
unless set, so that tests can run it in a temporary folder). The other files of the zip land in
`source/`: the wheel, the grading rules (`grading.json`: the training run's length, its loss
target, whether the rule is required; `autograder --run` reads them there), and a folder pack
(an instructor's own lesson) when there is one.
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tutor.course.rules import CONFIG_NAME, GradingRules, rules_json
from tutor.pack.model import Pack

TORCH_VERSION = "2.13.0"  # the build the tutor is tested with (constraints.txt)
# Gradescope's images have no GPU: the CPU wheels are a fraction of the size of the default ones.
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
PACK_FOLDER = "pack"  # where a folder pack goes, under source/

SETUP = """\
#!/usr/bin/env bash
# Run once by Gradescope, as root, when it builds the autograder's image.
set -euo pipefail
cd "$(dirname "$0")"
apt-get update -qq
apt-get install -y -qq python3 python3-pip > /dev/null
python3 -m pip install --quiet --upgrade pip
# The CPU build of torch (no GPU in the container, and a tenth of the download).
python3 -m pip install --quiet --index-url "${{TORCH_INDEX:-{index}}}" "torch=={torch}"
python3 -m pip install --quiet ./{wheel}
python3 -m tutor --version
"""

RUN = """\
#!/usr/bin/env bash
# Run by Gradescope for each submission: grades the one .py or .ipynb in submission/ by the rules
# in source/grading.json and writes results/results.json, all under $AUTOGRADER_ROOT (default
# /autograder).
export AUTOGRADER_ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
cd "$AUTOGRADER_ROOT"
exec python3 -m tutor --pack {pack} autograder --run gradescope
"""


class BundleError(ValueError):
    """The bundle cannot be made: why, in one line."""


def source_tree() -> Path | None:
    """The repository this tutor runs from, when it runs from one (not from an installed wheel)."""
    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    if project.is_file() and 'name = "backprop-tutor"' in project.read_text(errors="replace"):
        return root
    return None


def build_wheel(into: Path) -> Path:
    """A wheel of the tutor, built from its repository with pip (which fetches the build
    backend); BundleError when there is no repository to build from or the build fails."""
    tree = source_tree()
    if tree is None:
        raise BundleError("this tutor is not running from its repository: give the wheel with "
                          "--wheel FILE (`python -m build` or `pip wheel . --no-deps` in the "
                          "repository makes one)")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "-w", str(into), str(tree)], capture_output=True, text=True)
    wheels = sorted(into.glob("backprop_tutor-*.whl"))
    if done.returncode != 0 or not wheels:
        last = (done.stderr.strip().splitlines() or ["no wheel was made"])[-1]
        raise BundleError(f"building the wheel failed: {last}")
    return wheels[-1]


def _add(zf: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # the same bytes every time
    info.compress_type = zipfile.ZIP_DEFLATED
    mode = 0o755 if executable else 0o644
    info.external_attr = (stat.S_IFREG | mode) << 16
    zf.writestr(info, data)


def pack_files(pack_arg: str) -> list[tuple[str, Path]]:
    """A folder pack's files, each with its name under PACK_FOLDER; none for an installed pack
    (its id is named again where the grading runs)."""
    folder = Path(pack_arg)
    if not folder.is_dir():
        return []
    return [(f"{PACK_FOLDER}/{path.relative_to(folder).as_posix()}", path)
            for path in sorted(folder.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts]


def checked_wheel(wheel: Path | None, into: Path) -> Path:
    """The wheel given, or one built into `into`; BundleError when it is not a wheel."""
    wheel = wheel or build_wheel(into)
    if not wheel.is_file() or not wheel.name.endswith(".whl"):
        raise BundleError(f"{wheel} is not a wheel (a .whl file)")
    return wheel


def make_bundle(out: Path, pack: Pack, pack_arg: str, wheel: Path | None,
                rules: GradingRules) -> list[str]:
    """Write the zip to `out` (atomically); the names it holds. `pack_arg` is what `--pack`
    was given: an installed pack's id is named again at run time, a folder pack is copied in."""
    extra = pack_files(pack_arg)
    with tempfile.TemporaryDirectory() as tmp:
        wheel = checked_wheel(wheel, Path(tmp))
        run_pack = f'"$AUTOGRADER_ROOT/source/{PACK_FOLDER}"' if extra else shlex.quote(pack.id)
        names = []
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, partial = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
        os.close(fd)
        try:
            with zipfile.ZipFile(partial, "w") as zf:
                _add(zf, "setup.sh", SETUP.format(index=TORCH_INDEX, torch=TORCH_VERSION,
                                                  wheel=shlex.quote(wheel.name)).encode(), True)
                _add(zf, "run_autograder", RUN.format(pack=run_pack).encode(), True)
                _add(zf, wheel.name, wheel.read_bytes())
                _add(zf, CONFIG_NAME, rules_json(rules, pack).encode())
                names += ["setup.sh", "run_autograder", wheel.name, CONFIG_NAME]
                for name, path in extra:
                    _add(zf, name, path.read_bytes())
                    names.append(name)
            os.replace(partial, out)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
    return names
