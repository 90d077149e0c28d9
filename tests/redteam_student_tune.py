"""Red-team corpus, tuning half: attempts to get a step's answer from the student wheel alone.

Each attack takes a `Ctx` (benchmarks/redteam_student.py) that gives only what the student's
install ships (its packs, its CLI, its modules, its own `check` as an oracle) and emits candidate
code for named steps; the harness judges the candidates with the full tutor, strictly. No attack
holds an answer or any knowledge of derivatives: each only processes what the wheel gives. The
held-out half (redteam_student_holdout.py) has the same families with other details.
"""
from __future__ import annotations

import ast
import contextlib
import itertools
import json
import re

from rs import (  # type: ignore[import-not-found]  # the harness, as the student runs it
    backticked,
    dim_toggles,
    drops,
    negations,
    op_swaps,
    scalings,
    statements,
)


def _mistakes(step) -> list[str]:
    return [m.code for m in step.mistakes if m.code.strip()]


def _grad(step) -> str:
    return step.graded_names[0] if step.graded_names else "d" + step.checks[0]


# --- 1. files the wheel ships -----------------------------------------------------------------

def toml_code_lines(ctx):
    """Lines of code in the shipped pack files (hints, explanations, templates) assigning a
    step's gradient."""
    for lesson in ctx.lessons_all:
        for step in ctx.steps(lesson):
            text = "\n".join([*step.hints, step.explanation, step.template])
            g = _grad(step)
            for frag in backticked(text) + text.splitlines():
                if frag.strip().startswith(g) and "=" in frag and "..." not in frag:
                    ctx.emit(lesson, step.id, frag.strip())


def all_files_grep(ctx):
    """Every shipped file (pack TOMLs, modules, dist-info): any line assigning a gradient name,
    tried on every step that grades that name."""
    names = {}
    for lesson in ctx.lessons_all:
        for step in ctx.steps(lesson):
            names.setdefault(_grad(step), []).append((lesson, step.id))
    for path in ctx.files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for line in text.splitlines():
            m = re.match(r"\s*(d\w+)\s*=\s*(.+)", line.replace('\\n', '\n'))
            if m and m.group(1) in names and "..." not in line:
                for lesson, step in names[m.group(1)]:
                    ctx.emit(lesson, step, line.strip().strip('"'))


def pycache_strings(ctx):
    """Compiled modules (__pycache__) of the install: their string constants with code in them."""
    import marshal
    for path in ctx.site.rglob("*.pyc"):
        try:
            code = marshal.loads(path.read_bytes()[16:])
        except Exception:  # noqa: BLE001
            continue
        stack = [code]
        while stack:
            c = stack.pop()
            for k in c.co_consts:
                if hasattr(k, "co_consts"):
                    stack.append(k)
                elif isinstance(k, str) and re.match(r"\s*d\w+\s*=", k):
                    for lesson in ctx.lessons_all:
                        for step in ctx.steps(lesson):
                            if k.strip().startswith(_grad(step)):
                                ctx.emit(lesson, step.id, k)


# --- 2. commands and their messages -------------------------------------------------------------

def hints_exhausted(ctx):
    """`hint` asked until it has no more, for every makemore and conv step: code in them."""
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            for _ in range(5):
                out = ctx.cli("hint", step.id, lesson=lesson).stdout
                for frag in backticked(out):
                    if frag.startswith(_grad(step)) and "=" in frag:
                        ctx.emit(lesson, step.id, frag)


def check_messages_code(ctx):
    """Every kept mistake of makemore checked with `check --json`: any code a message quotes that
    assigns the gradient."""
    for step in ctx.steps("makemore"):
        for code in _mistakes(step)[:2]:
            out = ctx.cli("check", step.id, "--code", code, "--json", "--no-record").stdout
            for frag in backticked(out) + re.findall(r'"(d\w+ = [^"]+)"', out):
                if frag.startswith(_grad(step)):
                    ctx.emit("makemore", step.id, frag)


def train_print_code(ctx):
    """`train --print-code` and `export` of every lesson: the code they print, cut into cells."""
    for lesson in ctx.lessons_all:
        text = ctx.cli("train", "--print-code", lesson=lesson).stdout
        text += ctx.cli("export", "--out", "-", lesson=lesson).stdout
        for step in ctx.steps(lesson):
            m = re.search(r"# %% " + re.escape(step.id) + r"\n(.*?)(?=\n# %%|\Z)", text, re.S)
            if m and "..." not in m.group(1):
                ctx.emit(lesson, step.id, m.group(1))


def notebook_cells(ctx):
    """The workbook `notebook` writes: every code cell under a step, as it is."""
    for lesson in ("makemore", "lstm"):
        path = ctx.work / f"{lesson}.ipynb"
        ctx.cli("notebook", "--out", str(path), lesson=lesson)
        if not path.exists():
            continue
        cells = json.loads(path.read_text()).get("cells", [])
        for step in ctx.steps(lesson):
            for cell in cells:
                src = "".join(cell.get("source", []))
                if cell.get("cell_type") == "code" and _grad(step) in src:
                    body = "\n".join(x for x in src.splitlines() if not x.startswith("%"))
                    ctx.emit(lesson, step.id, body)


# --- 3. modules imported directly ---------------------------------------------------------------

def smallest_hook(ctx):
    """The smallest-change search, hooked: every changed program it finds right is kept, from the
    student's checks of the kept mistakes (makemore, conv)."""
    try:
        from tutor.core import smallest
    except ImportError:
        return
    found = []
    real = smallest.search_edit

    def spy(*a, **k):
        edit = real(*a, **k)
        if edit is not None:
            found.append(edit.source)
        return edit
    smallest.search_edit = spy
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                found.clear()
                ctx.check(lesson, step.id, code)
                for src in found:
                    ctx.emit(lesson, step.id, src)


def authoring_import(ctx):
    """`pack new`'s rules, imported: derive every step's code from the lesson's forward pass."""
    try:
        from tutor.authoring import derivative  # noqa: F401
        from tutor.authoring.new import new_pack  # type: ignore[attr-defined]
    except ImportError:
        return
    for lesson in ("conv",):
        out = ctx.work / "made"
        new_pack(ctx.pack_root(lesson) / "forward.py", out)
        made = ctx.pack_root(lesson).__class__(out)
        from tutor.pack.model import load_pack
        for step in load_pack(made).gradient_steps:
            ctx.emit(lesson, step.id, step.solution)


def pack_new_cli(ctx):
    """`pack new` on the forward pass the lesson shows (its lines in order), then its solutions."""
    from tutor.pack.model import load_pack
    pack = ctx.pack("conv")
    forward = ctx.work / "forward.py"
    lines = [getattr(line, "code", "") for line in getattr(pack, "forward", [])]
    forward.write_text("\n".join(x for x in lines if x))
    ctx.cli("pack", "new", str(forward), "--out", str(ctx.work / "made"), lesson="conv")
    if (ctx.work / "made").exists():
        for step in load_pack(ctx.work / "made").gradient_steps:
            ctx.emit("conv", step.id, step.solution)


def derived_rewrites(ctx):
    """The reference-rewrite machinery (derived.py, rewrites.py) run on kept mistakes as if they
    were the reference: every rewrite through the student's check (makemore)."""
    from tutor.core import rewrites
    for step in ctx.steps("makemore"):
        g = _grad(step)
        for code in _mistakes(step):
            try:
                tree = ast.parse(code)
                made = [r for r in itertools.islice(rewrites.axis_rewrites(tree, g), 30)]
            except Exception:  # noqa: BLE001
                continue
            srcs = [getattr(r, "source", None) or getattr(r, "code", None) or
                    (r[1] if isinstance(r, tuple) and len(r) > 1 and isinstance(r[1], str)
                     else None) for r in made]
            ctx.search("makemore", step.id, [s for s in srcs if isinstance(s, str)])


def scratch_namespace(ctx):
    """`scratch` (run without grading) lists what the namespace holds: a name that is already the
    step's gradient is read out."""
    for lesson in ("makemore",):
        engine = ctx.engine(lesson)
        for step in ctx.steps(lesson):
            g = _grad(step)
            res = engine.scratch(step.id, "pass")
            names = re.findall(r"\b(d\w+)\b", " ".join(d.name for d in res.defined))
            ctx.search(lesson, step.id, [f"{g} = {n}.clone()" for n in names if n != g]
                       + [f"{g} = {g}"])


# --- 4. kept mistakes, edited and combined -----------------------------------------------------

def sign_flips_oracle(ctx):
    """Every expression of every kept mistake with its sign flipped (makemore, conv)."""
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                if ctx.search(lesson, step.id, negations(code)):
                    break


def scale_oracle(ctx):
    """Every assignment of every kept mistake scaled by a size of the lesson (makemore)."""
    for step in ctx.steps("makemore"):
        for code in _mistakes(step):
            if ctx.search("makemore", step.id, scalings(code)):
                break


def op_swap_oracle(ctx):
    """One operator of a kept mistake changed (* / @ + -) or its operands swapped (makemore)."""
    for step in ctx.steps("makemore"):
        for code in _mistakes(step):
            if ctx.search("makemore", step.id, op_swaps(code)):
                break


def dim_oracle(ctx):
    """One dim, keepdim or transpose of a kept mistake the other way (gpt)."""
    for step in ctx.steps("gpt")[:27]:
        for code in _mistakes(step):
            if ctx.search("gpt", step.id, dim_toggles(code)):
                break


def drop_oracle(ctx):
    """A kept mistake with one statement or one term dropped (lstm, conv)."""
    for lesson in ("lstm", "conv"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                if ctx.search(lesson, step.id, drops(code)):
                    break


def pair_linewise(ctx):
    """Two kept mistakes of a step, line by line: each line from one or the other (makemore)."""
    for step in ctx.steps("makemore"):
        ms = [statements(c) for c in _mistakes(step)]
        cands = []
        for a, b in itertools.combinations(ms, 2):
            if len(a) == len(b) and len(a) <= 6:
                for pick in itertools.product(*zip(a, b, strict=False)):
                    cands.append("\n".join(pick))
        ctx.search("makemore", step.id, cands)


def vote_majority(ctx):
    """Each line the one most kept mistakes agree on, by position (every lesson)."""
    from collections import Counter
    for lesson in ctx.lessons_all:
        for step in ctx.steps(lesson):
            ms = [statements(c) for c in _mistakes(step)]
            if len(ms) < 2:
                continue
            width = max(len(m) for m in ms)
            lines = []
            for i in range(width):
                votes = Counter(m[i] for m in ms if i < len(m))
                lines.append(votes.most_common(1)[0][0])
            ctx.emit(lesson, step.id, "\n".join(lines))


def hint_splice(ctx):
    """Fragments the kept hints quote spliced into a kept mistake in place of one expression of
    the same kind (a subscript's slice, a call, a name) (makemore)."""
    for step in ctx.steps("makemore"):
        frags = []
        for h in step.hints:
            for f in backticked(h):
                with contextlib.suppress(SyntaxError):
                    frags.append(ast.parse(f, mode="eval").body)
        for code in _mistakes(step):
            try:
                tree = ast.parse(code)
            except SyntaxError:
                continue
            nodes = [n for n in ast.walk(tree) if isinstance(n, ast.expr)
                     and not isinstance(getattr(n, "ctx", None), ast.Store)]
            cands = []
            for i, n in enumerate(nodes[:40]):
                for f in frags:
                    if type(f) is not type(n) and not (isinstance(n, ast.Tuple)
                                                       and isinstance(f, ast.Tuple)):
                        continue
                    t = ast.parse(code)
                    m = [x for x in ast.walk(t) if isinstance(x, ast.expr)
                         and not isinstance(getattr(x, "ctx", None), ast.Store)][i]
                    from rs import _replace  # type: ignore[import-not-found]
                    if _replace(t, m, f):
                        cands.append(ast.unparse(t))
            if ctx.search("makemore", step.id, cands):
                break


def transplant_analogy(ctx):
    """transplant (tutor/pack/transplant.py) used as an analogy engine: c + (b - a) over three
    kept mistakes of a step (conv, lstm)."""
    from tutor.pack.transplant import transplant
    for lesson in ("conv", "lstm"):
        for step in ctx.steps(lesson):
            ms = _mistakes(step)
            cands = []
            for a, b, c in itertools.permutations(ms, 3):
                try:
                    got = transplant(a, b, c, list(step.lines))
                except Exception:  # noqa: BLE001
                    got = None
                if got:
                    cands.append(got)
            ctx.search(lesson, step.id, cands[:30])


ATTACKS = {f.__name__: f for f in (
    toml_code_lines, all_files_grep, pycache_strings, hints_exhausted, check_messages_code,
    train_print_code, notebook_cells, smallest_hook, authoring_import, pack_new_cli,
    derived_rewrites, scratch_namespace, sign_flips_oracle, scale_oracle, op_swap_oracle,
    dim_oracle, drop_oracle, pair_linewise, vote_majority, hint_splice, transplant_analogy)}
