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


# --- Textual's public API only ---------------------------------------------------------------

# Textual's private names the UI once used, forbidden wherever they appear, even where a name of
# ours is spelt the same. The one exception is the lesson screen's paint of a verdict the moment
# it arrives: Textual has no public way to paint now rather than on its frame timer's next tick
# (up to two frames later), so `LessonScreen._paint_now` is the one place that reaches in, and
# falls back to a plain refresh if a Textual upgrade takes either name away.
KNOWN_PRIVATE = {"_dirty_widgets", "_on_timer_update", "_bindings_ready", "_replace_via_keyboard",
                 "_build_highlight_map", "_line_cache", "_highlights", "_compositor",
                 "_compositor_refresh", "_on_key", "_theme", "_themes", "_set_theme"}
PAINT_NOW = {("tutor/ui/screens/lesson.py", "_dirty_widgets"),
             ("tutor/ui/screens/lesson.py", "_on_timer_update")}


def _textual_private_names() -> set[str]:
    """Every private method or attribute name Textual's own source defines."""
    import ast

    import textual

    names = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _our_names() -> set[str]:
    """The private names the tutor defines itself (so a use of one may be ours)."""
    import ast

    names = set()
    for path in _modules().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def test_the_tutor_uses_no_private_textual_module_or_name():
    import ast

    private = (_textual_private_names() - _our_names()) | KNOWN_PRIVATE
    offences = []
    for path in _modules().values():
        where = str(path.relative_to(ROOT))
        tree = ast.parse(path.read_text())
        # Names are looked at where Textual is (`os._exit` is no business of this test).
        uses_textual = any(
            isinstance(n, (ast.Import, ast.ImportFrom))
            and any(m.split(".")[0] == "textual" for m in
                    ([a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]))
            for n in ast.walk(tree))
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
                if (node.module or "").startswith("textual"):
                    offences += [f"{where}: from {node.module} import {a.name}"
                                 for a in node.names if a.name.startswith("_")]
            offences += [f"{where}: imports {m}" for m in modules
                         if m.split(".")[0] == "textual"
                         and any(part.startswith("_") for part in m.split("."))]
            if uses_textual and isinstance(node, ast.Attribute) and node.attr in private \
                    and (where, node.attr) not in PAINT_NOW:
                offences.append(f"{where}:{node.lineno}: .{node.attr}")
    assert not offences, offences


def test_no_ui_class_overrides_a_private_textual_method():
    # Overriding one (TextArea._on_key, say) is a private use too, and breaks silently when
    # Textual renames it.
    import ast
    import importlib
    import inspect

    offences = []
    for name, path in _modules().items():
        if not name.startswith("tutor.ui"):
            continue
        module = importlib.import_module(name)
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            textual = [k for k in inspect.getmro(getattr(module, node.name))
                       if k.__module__.startswith("textual")]
            theirs = {n for k in textual for n, v in vars(k).items()
                      if n.startswith("_") and not n.startswith("__")
                      and (callable(v) or isinstance(v, property))}
            ours = {f.name for f in node.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
            offences += [f"{name}.{node.name}.{n}" for n in sorted(ours & theirs)]
    assert not offences, offences
