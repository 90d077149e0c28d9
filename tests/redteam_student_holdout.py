"""Red-team corpus, held-out half: attempts to get a step's answer from the student wheel alone.

Measured before and after the fixes, never tuned on. Same rules as the tuning half
(redteam_student_tune.py): each attack uses only what the student's install ships, through the
`Ctx` of benchmarks/redteam_student.py, and emits candidate code that the harness judges with
the full tutor; no attack holds an answer or any knowledge of derivatives.
"""
from __future__ import annotations

import ast
import itertools
import json
import re
import zipfile

from rs import (  # type: ignore[import-not-found]  # the harness, as the student runs it
    _replace,
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


def _by_name(ctx) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for lesson in ctx.lessons_all:
        for step in ctx.steps(lesson):
            out.setdefault(_grad(step), []).append((lesson, step.id))
    return out


# --- 1. files the wheel ships -----------------------------------------------------------------

def readme_blocks(ctx):
    """The README inside the wheel's METADATA: each fenced block, and each run of lines assigning
    gradients, tried on the steps grading those names."""
    names = _by_name(ctx)
    for path in ctx.files():
        if path.name != "METADATA":
            continue
        text = path.read_text(encoding="utf-8")
        blocks = re.findall(r"```(?:python)?\n(.*?)```", text, re.S)
        for block in blocks:
            for line in block.splitlines():
                m = re.match(r"\s*(d\w+)\s*[+\-*]?=", line)
                if m and m.group(1) in names:
                    for lesson, step in names[m.group(1)]:
                        ctx.emit(lesson, step, block)
                        ctx.emit(lesson, step, line.strip())


def module_docstrings(ctx):
    """String constants of every shipped module (docstrings, messages, tables) that look like
    gradient code, tried on the steps grading the name."""
    names = _by_name(ctx)
    for path in ctx.site.rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for frag in backticked(node.value) + node.value.splitlines():
                    m = re.match(r"\s*(d\w+)\s*=", frag)
                    if m and m.group(1) in names and "..." not in frag:
                        for lesson, step in names[m.group(1)]:
                            ctx.emit(lesson, step, frag.strip())


def wheel_zip_and_caches(ctx):
    """Files the tutor leaves after use (its home: caches, progress, pickles) and any zip in the
    install, after `list`, `show` and a check of every lesson: code in them."""
    names = _by_name(ctx)
    for lesson in ctx.lessons_all:
        ctx.cli("list", lesson=lesson)
        ctx.cli("show", ctx.steps(lesson)[0].id, lesson=lesson)
    paths = [p for p in ctx.home.rglob("*") if p.is_file()] + ctx.files()
    for path in paths:
        data = path.read_bytes()
        if data[:2] == b"PK":
            try:
                with zipfile.ZipFile(path) as zf:
                    data = b"\n".join(zf.read(n) for n in zf.namelist())
            except zipfile.BadZipFile:
                pass
        text = data.decode("utf-8", "replace")
        for m in re.finditer(r"(d\w+) = [^\n\"]{3,200}", text):
            for lesson, step in names.get(m.group(1), []):
                if "..." not in m.group(0):
                    ctx.emit(lesson, step, m.group(0))


# --- 2. commands and their messages -------------------------------------------------------------

def show_and_hint_json(ctx):
    """`show` and every `hint` of gpt and lstm steps: the code lines they print."""
    for lesson in ("gpt", "lstm"):
        for step in ctx.steps(lesson)[:14]:
            out = ctx.cli("show", step.id, lesson=lesson).stdout
            for _ in range(4):
                out += ctx.cli("hint", step.id, lesson=lesson).stdout
            for line in out.splitlines() + backticked(out):
                if line.strip().startswith(_grad(step)) and "..." not in line:
                    ctx.emit(lesson, step.id, line.strip())


def grade_feedback(ctx):
    """A submission of every kept mistake (conv, lstm) graded with `grade --json`: code quoted in
    its feedback."""
    for lesson in ("conv", "lstm"):
        cells = []
        for step in ctx.steps(lesson):
            ms = _mistakes(step)
            if ms:
                cells.append(f"# %% {step.id}\n{ms[-1]}")
        path = ctx.work / f"{lesson}.py"
        path.write_text("\n\n".join(cells) + "\n")
        out = ctx.cli("grade", str(path), "--json", "--train-steps", "1", lesson=lesson,
                      timeout=200).stdout
        for step in ctx.steps(lesson):
            for frag in backticked(out):
                if frag.startswith(_grad(step)) and "=" in frag:
                    ctx.emit(lesson, step.id, frag)


def check_json_fields(ctx):
    """Slightly changed kept mistakes checked (gpt): every string field of the result, and every
    code-looking part of it."""
    for step in ctx.steps("gpt")[:20]:
        for code in _mistakes(step)[:2]:
            for variant in itertools.islice(negations(code), 3):
                r = ctx.check("gpt", step.id, variant)
                blob = json.dumps(r.to_dict() if hasattr(r, "to_dict") else str(r))
                for frag in backticked(blob) + re.findall(r"(d\w+ = [^\"\\]+)", blob):
                    if frag.startswith(_grad(step)):
                        ctx.emit("gpt", step.id, frag)


def progress_after_checks(ctx):
    """Check kept mistakes (recorded), then `progress` and `export`: code they hand back."""
    for step in ctx.steps("makemore")[:10]:
        for code in _mistakes(step)[:1]:
            ctx.cli("check", step.id, "--code", code, lesson="makemore")
    out = ctx.cli("progress", lesson="makemore").stdout
    out += ctx.cli("export", "--out", "-", lesson="makemore").stdout
    for step in ctx.steps("makemore"):
        m = re.search(r"# %% " + re.escape(step.id) + r"\n(.*?)(?=\n# %%|\Z)", out, re.S)
        if m:
            ctx.emit("makemore", step.id, m.group(1))


def pack_check_cli(ctx):
    """`pack check` of the shipped lessons: code in what it prints."""
    for lesson in ctx.lessons_all:
        out = ctx.cli("pack", "check", str(ctx.pack_root(lesson)), lesson=lesson,
                      timeout=150)
        for step in ctx.steps(lesson):
            for frag in backticked(out.stdout + out.stderr):
                if frag.startswith(_grad(step)):
                    ctx.emit(lesson, step.id, frag)


# --- 3. modules imported directly ---------------------------------------------------------------

def smallest_right_spy(ctx):
    """The smallest-change search's own test of a changed program (Search.right), spied on: every
    program it finds right, from checks of kept mistakes and their sign flips (lstm, gpt)."""
    try:
        from tutor.core import smallest
    except ImportError:
        return
    right = []
    real = smallest.Search.right

    def spy(self, source):
        ok = real(self, source)
        if ok:
            right.append(source)
        return ok
    smallest.Search.right = spy
    for lesson in ("lstm", "gpt"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                right.clear()
                ctx.check(lesson, step.id, code)
                for src in right:
                    ctx.emit(lesson, step.id, src)


def smallest_edits_enumerated(ctx):
    """smallest.py's own edit generators (constants, axes, sources, comparisons) run on kept
    mistakes; every edited program through the student's check (makemore, conv)."""
    try:
        from tutor.core import smallest
    except ImportError:
        return
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                try:
                    tree = ast.parse(code)
                    edits = list(itertools.islice(smallest.axis_edits(tree, code), 30))
                    edits += list(itertools.islice(smallest.source_edits(tree, code), 30))
                    edits += list(itertools.islice(smallest.factor_edits(tree, code), 30))
                except Exception:  # noqa: BLE001
                    continue
                if ctx.search(lesson, step.id, [e.source for e in edits]):
                    break


def authoring_cli_module(ctx):
    """`python -m tutor.authoring`, and the derivative rules' module run as a script."""
    for mod in ("tutor.authoring", "tutor.authoring.new", "tutor.authoring.derivative"):
        ctx.tick()
        import subprocess
        import sys
        done = subprocess.run([sys.executable, "-I", "-m", mod], capture_output=True, text=True,
                              cwd=ctx.work, timeout=60)
        for lesson in ctx.lessons_all:
            for step in ctx.steps(lesson):
                for line in done.stdout.splitlines():
                    if line.startswith(_grad(step)):
                        ctx.emit(lesson, step.id, line)


def slips_and_quotient(ctx):
    """The slip engine and the quotient reader imported: every expression they make for a step,
    written as the step's gradient (makemore)."""
    from tutor.core import slips
    for step in ctx.steps("makemore"):
        g = _grad(step)
        made = []
        for fn in (getattr(slips, n) for n in dir(slips)):
            if not callable(fn) or getattr(fn, "__module__", "") != slips.__name__:
                continue
            try:
                got = fn(ctx.pack("makemore"), step)
            except Exception:  # noqa: BLE001
                continue
            for item in (got if isinstance(got, (list, tuple)) else [got]):
                expr = getattr(item, "expr", None)
                if isinstance(expr, ast.AST):
                    made.append(f"{g} = {ast.unparse(expr)}")
        ctx.search("makemore", step.id, made[:20])


def rewrites_constant_swap(ctx):
    """rewrites.py's constant and swap rewrites applied to kept mistakes (gpt, conv)."""
    from tutor.core import rewrites
    for lesson in ("gpt", "conv"):
        for step in ctx.steps(lesson)[:15]:
            g = _grad(step)
            for code in _mistakes(step):
                cands = []
                for fn in (rewrites.constant_rewrites, rewrites.swap_rewrites):
                    try:
                        for r in itertools.islice(fn(ast.parse(code), g, {}), 30):
                            src = getattr(r, "source", None) or getattr(r, "code", None)
                            if isinstance(src, str):
                                cands.append(src)
                    except Exception:  # noqa: BLE001
                        pass
                if ctx.search(lesson, step.id, cands):
                    break


def namespace_reads(ctx):
    """For each step, the gradient set to another gradient the namespace may already hold
    (autograd's stand-ins for earlier steps), through the check (conv, lstm)."""
    for lesson in ("conv", "lstm"):
        names = [_grad(s) for s in ctx.steps(lesson)]
        for step in ctx.steps(lesson):
            g = _grad(step)
            ctx.search(lesson, step.id, [f"{g} = {n}" for n in names if n != g][:12]
                       + [f"{g} = globals().get({g!r})"])


# --- 4. kept mistakes, edited and combined -----------------------------------------------------

def negate_oracle_gpt_lstm(ctx):
    """Every expression of every kept mistake with its sign flipped (gpt, lstm)."""
    for lesson in ("gpt", "lstm"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                if ctx.search(lesson, step.id, negations(code)):
                    break


def scale_reciprocal_oracle(ctx):
    """Kept mistakes scaled by 2, 1/2 or -1, and with one * and / swapped (conv, lstm)."""
    for lesson in ("conv", "lstm"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                cands = list(scalings(code, ("2", "0.5", "-1")))
                cands += [c for c in op_swaps(code)]
                if ctx.search(lesson, step.id, cands):
                    break


def dims_oracle_makemore(ctx):
    """One dim, keepdim or transpose of a kept mistake the other way (makemore, conv)."""
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                if ctx.search(lesson, step.id, dim_toggles(code)):
                    break


def drop_term_oracle(ctx):
    """A kept mistake with one statement or one term dropped (makemore, gpt)."""
    for lesson in ("makemore", "gpt"):
        for step in ctx.steps(lesson):
            for code in _mistakes(step):
                if ctx.search(lesson, step.id, drops(code)):
                    break


def pair_by_target(ctx):
    """Two kept mistakes, statement by statement keyed on what each assigns: every choice of one
    or the other per target (gpt, lstm, conv)."""
    for lesson in ("gpt", "lstm", "conv"):
        for step in ctx.steps(lesson):
            ms = [statements(c) for c in _mistakes(step)]
            cands = []
            for a, b in itertools.combinations(ms, 2):
                if len(a) != len(b) or len(a) > 8:
                    continue
                diff = [i for i in range(len(a)) if a[i] != b[i]]
                if len(diff) > 6:
                    continue
                for pick in itertools.product((0, 1), repeat=len(diff)):
                    lines = list(a)
                    for i, p in zip(diff, pick, strict=False):
                        lines[i] = (a, b)[p][i]
                    cands.append("\n".join(lines))
            ctx.search(lesson, step.id, cands[:40])


def vote_three(ctx):
    """Three kept mistakes of a step, line by line: every line at least two of them agree on, the
    rest from any of the three (makemore, gpt, lstm, conv)."""
    for lesson in ctx.lessons_all:
        for step in ctx.steps(lesson):
            ms = [statements(c) for c in _mistakes(step)]
            cands = []
            for trio in itertools.combinations(ms, 3):
                if len({len(m) for m in trio}) != 1:
                    continue
                for pick in itertools.islice(itertools.product(*zip(*trio, strict=False)), 27):
                    cands.append("\n".join(pick))
            ctx.search(lesson, step.id, cands[:20])


def template_fill_from_mistakes(ctx):
    """The template with each `...` filled by the matching right-hand side of any kept mistake,
    the other lines as the template has them (lstm, gpt)."""
    for lesson in ("lstm", "gpt"):
        for step in ctx.steps(lesson):
            rhs = {}
            for code in _mistakes(step):
                for s in statements(code):
                    if "=" in s:
                        left, right = s.split("=", 1)
                        rhs.setdefault(left.strip(), []).append(right.strip())
            slots = [line for line in step.template.splitlines() if "..." in line]
            if not slots:
                continue
            options = []
            for line in slots:
                left = line.split("=", 1)[0].strip()
                options.append(rhs.get(left, ["..."]))
            cands = []
            for pick in itertools.islice(itertools.product(*options), 20):
                text = step.template
                for line, right in zip(slots, pick, strict=False):
                    text = text.replace(line, line.split("=", 1)[0] + "= " + right, 1)
                cands.append(text)
            ctx.search(lesson, step.id, cands)


def mistake_node_splice(ctx):
    """One expression of a kept mistake replaced by the same-position expression of another kept
    mistake of the step (makemore, conv)."""
    for lesson in ("makemore", "conv"):
        for step in ctx.steps(lesson):
            ms = _mistakes(step)
            cands = []
            for a, b in itertools.permutations(ms, 2):
                try:
                    ta, tb = ast.parse(a), ast.parse(b)
                except SyntaxError:
                    continue
                na = [n for n in ast.walk(ta) if isinstance(n, ast.expr)
                      and not isinstance(getattr(n, "ctx", None), ast.Store)]
                nb = [n for n in ast.walk(tb) if isinstance(n, ast.expr)
                      and not isinstance(getattr(n, "ctx", None), ast.Store)]
                for i in range(min(len(na), len(nb), 12)):
                    t = ast.parse(a)
                    nodes = [n for n in ast.walk(t) if isinstance(n, ast.expr)
                             and not isinstance(getattr(n, "ctx", None), ast.Store)]
                    if ast.dump(nodes[i]) != ast.dump(nb[i]) and _replace(t, nodes[i], nb[i]):
                        cands.append(ast.unparse(t))
            ctx.search(lesson, step.id, cands[:40])


ATTACKS = {f.__name__: f for f in (
    readme_blocks, module_docstrings, wheel_zip_and_caches, show_and_hint_json, grade_feedback,
    check_json_fields, progress_after_checks, pack_check_cli, smallest_right_spy,
    smallest_edits_enumerated, authoring_cli_module, slips_and_quotient, rewrites_constant_swap,
    namespace_reads, negate_oracle_gpt_lstm, scale_reciprocal_oracle, dims_oracle_makemore,
    drop_term_oracle, pair_by_target, vote_three, template_fill_from_mistakes,
    mistake_node_splice)}
