"""The layers written in pyproject.toml ([tool.importlinter]) hold: front ends above progress,
the evaluator above the engine, the engine above the sandbox, everything above the pack."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint, "import-linter is a dev dependency: pip install -e '.[dev]'"
    out = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def _modules() -> dict[str, Path]:
    package = ROOT / "tutor"
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in package.rglob("*.py")}


def test_no_module_takes_another_modules_private_names():
    # A name with a leading underscore is its module's own; another module that needs it
    # needs a public name (one place frames the pipes' messages, say, not three).
    import ast

    offences = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tutor"):
                offences += [f"{name}: from {node.module} import {a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert not offences, offences


def test_the_top_level_holds_few_modules_and_every_package_says_what_it_holds():
    top = [p.name for p in (ROOT / "tutor").glob("*.py")
           if p.name not in ("__init__.py", "__main__.py", "cli.py")]
    assert len(top) <= 6, top
    for init in (ROOT / "tutor").glob("*/__init__.py"):
        doc = (init.read_text().lstrip().startswith('"""'))
        assert doc, f"{init.relative_to(ROOT)} does not say what lives there"
