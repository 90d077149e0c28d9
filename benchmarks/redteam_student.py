#!/usr/bin/env python3
"""Red-team harness for the student wheel: can a step's answer be had from what it ships?

    python benchmarks/redteam_student.py tune|holdout [--only NAME ...] [--venv DIR] [--build]

The student's side: a virtual environment holding the student wheel (`autograder
--student-wheel`) and torch, $REDTEAM_STUDENT_VENV or /tmp/student-venv. `--build` makes the
student wheel from this tree and installs it there (the venv must exist with torch: `python3 -m
venv DIR && DIR/bin/pip install -c constraints.txt torch==2.13.0`).

Each attack of tests/redteam_student_<which>.py (ATTACKS: name -> function) runs with that
venv's Python, isolated (`-I`: no PYTHONPATH, no user site, so `tutor` is the student's), in a
fresh folder <tmp>/redteam-student/<which>-<stamp>/<name>/ with its own $HOME and progress home.
It gets a `Ctx` (below): the student's packs, its CLI, an oracle that is the student's own
`check` (what any student may run as often as they like), and AST mutations written here, in
the attack's process. It hands back candidate code per (lesson, step); it must not hold an
answer itself, only process what the wheel gives.

Each candidate is then judged by the FULL tutor from this tree (reference solutions and all), in
process, under the strictest rules `grade` has: the check passes, the line's rule is followed
(`--strict-rule`) and the derivative is not estimated from values (`--refuse-numeric`). Prints

    HELD  name: why (no candidate / none passed / crashed / timed out)
    BROKE name: lesson step: the candidate that passed

and a summary line. An attack that crashes or runs past its time counts as HELD, and says so.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNS = Path(tempfile.gettempdir()) / "redteam-student"
VENV = Path(os.environ.get("REDTEAM_STUDENT_VENV", "/tmp/student-venv"))
ATTACK_SECONDS = 100  # one attack, in the student's venv (its own budget is 30 s less)
MAX_CANDIDATES = 400  # per attack
ORACLE_CALLS = 300  # the student's own checks, per attack
LESSONS = ("makemore", "gpt", "lstm", "conv")


# -- the student's side (runs in the student venv) ---------------------------------------------

class Stop(Exception):
    """The attack's budget (time or oracle calls) is spent."""


class Ctx:
    """What an attack may use: only the student's install, and mechanical processing."""

    def __init__(self, work: Path, home: Path, seconds: float) -> None:
        import tutor

        self.work, self.home = work, home
        self.site = Path(tutor.__file__).resolve().parent  # the student's installed tutor
        self.deadline = time.monotonic() + seconds
        self.candidates: list[tuple[str, str, str]] = []
        self.calls = 0
        self._engines: dict[str, object] = {}
        self._packs: dict[str, object] = {}
        self.lessons_all = LESSONS

    # the lessons as shipped
    def pack_root(self, lesson: str) -> Path:
        return self.site / "_bundled" / "exercises" / lesson

    def pack(self, lesson: str):
        if lesson not in self._packs:
            from tutor.pack.model import load_pack
            self._packs[lesson] = load_pack(self.pack_root(lesson))
        return self._packs[lesson]

    def steps(self, lesson: str) -> list:
        return list(self.pack(lesson).gradient_steps)

    def files(self) -> list[Path]:
        """Every file of the student's install: the package and its dist-info."""
        out = [p for p in self.site.rglob("*") if p.is_file()]
        out += [p for d in self.site.parent.glob("backprop_tutor-*.dist-info")
                for p in d.rglob("*") if p.is_file()]
        return out

    # the student's commands
    def cli(self, *args: str, lesson: str = "makemore", stdin: str | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
        self.tick()
        try:
            return subprocess.run([sys.executable, "-I", "-m", "tutor", "--device", "cpu",
                                   "--home", str(self.home), "--pack", lesson, *args],
                                  input=stdin, capture_output=True, text=True, cwd=self.work,
                                  timeout=min(timeout, max(1.0,
                                                           self.deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            raise Stop("time (a command ran past the attack's budget)") from None

    def engine(self, lesson: str):
        if lesson not in self._engines:
            from tutor.config import Settings
            from tutor.core.engine import Engine
            self._engines[lesson] = Engine(Settings(device="cpu", pack=lesson,
                                                    home=self.home / "engine"))
        return self._engines[lesson]

    def check(self, lesson: str, step: str, code: str):
        """The student's own check (counted against the budget); its result."""
        self.tick()
        if self.calls >= ORACLE_CALLS:
            raise Stop("oracle budget")
        self.calls += 1
        return self.engine(lesson).check(step, code)

    def oracle(self, lesson: str, step: str, code: str) -> bool:
        try:
            return bool(self.check(lesson, step, code).passed)
        except Stop:
            raise
        except Exception:  # noqa: BLE001 - a candidate that breaks the check is no answer
            return False

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise Stop("time")

    def emit(self, lesson: str, step: str, code: str) -> None:
        item = (lesson, step, code)
        if item not in self.candidates and len(self.candidates) < MAX_CANDIDATES:
            self.candidates.append(item)

    def search(self, lesson: str, step: str, codes, stop_first: bool = True) -> bool:
        """Each code through the student's check; the ones that pass are emitted."""
        found = False
        for code in dict.fromkeys(codes):
            if self.oracle(lesson, step, code):
                self.emit(lesson, step, code)
                found = True
                if stop_first:
                    return True
        return found

    def close(self) -> None:
        for e in self._engines.values():
            with contextlib.suppress(Exception):
                e.close()


# -- mechanical edits of code (plain syntax work, no knowledge of derivatives) ----------------

def statements(code: str) -> list[str]:
    import ast
    try:
        return [ast.unparse(s) for s in ast.parse(code).body]
    except (SyntaxError, ValueError, RecursionError):
        return [line for line in code.splitlines() if line.strip()]


def _each_node(code: str, want, make):
    """For every node `want` accepts, the code with that one node replaced by make(node)."""
    import ast
    import copy
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return
    count = sum(1 for n in ast.walk(tree) if want(n))
    for i in range(min(count, 60)):
        t = copy.deepcopy(tree)
        nodes = [n for n in ast.walk(t) if want(n)]
        target = nodes[i]
        for new in make(target):
            t2 = copy.deepcopy(t)
            nodes2 = [n for n in ast.walk(t2) if want(n)]
            old = nodes2[i]
            replaced = _replace(t2, old, new)
            text = None
            if replaced:
                with contextlib.suppress(Exception):
                    text = ast.unparse(ast.fix_missing_locations(t2))
            if text is not None:
                yield text
            del t2


def _replace(tree, old, new) -> bool:
    import ast
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, new)
                return True
            if isinstance(value, list):
                for k, v in enumerate(value):
                    if v is old:
                        value[k] = new
                        return True
    return False


def negations(code: str):
    """Each expression (a right-hand side or an operand) with its sign flipped."""
    import ast

    def want(n):
        return isinstance(n, (ast.BinOp, ast.Call, ast.Name, ast.Subscript, ast.UnaryOp,
                              ast.Attribute)) and not isinstance(getattr(n, "ctx", None),
                                                                 ast.Store)

    def make(n):
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            yield n.operand
        else:
            yield ast.UnaryOp(ast.USub(), n)
    yield from _each_node(code, want, make)


def op_swaps(code: str):
    import ast

    swaps = {ast.Mult: [ast.Div, ast.MatMult, ast.Add, ast.Sub], ast.Div: [ast.Mult],
             ast.Add: [ast.Sub, ast.Mult], ast.Sub: [ast.Add], ast.MatMult: [ast.Mult],
             ast.Pow: [ast.Mult]}

    def want(n):
        return isinstance(n, ast.BinOp)

    def make(n):
        for op in swaps.get(type(n.op), []):
            yield ast.BinOp(n.left, op(), n.right)
        yield ast.BinOp(n.right, n.op, n.left)
    yield from _each_node(code, want, make)


def scalings(code: str, factors=("n", "1.0 / n", "2", "0.5", "n / (n - 1)", "(n - 1) / n",
                                  "-1")):
    """Each assignment's value times a factor."""
    import ast

    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError):
        return
    for i, s in enumerate(tree.body):
        if isinstance(s, (ast.Assign, ast.AugAssign)):
            for f in factors:
                body = [ast.unparse(x) for x in tree.body]
                value = ast.unparse(s.value)
                body[i] = (ast.unparse(s).split("=", 1)[0] + f"= ({value}) * ({f})"
                           if isinstance(s, ast.Assign)
                           else ast.unparse(s)[:-len(value)] + f"({value}) * ({f})")
                yield "\n".join(body)


def dim_toggles(code: str):
    """Each dim argument the other way (0 <-> 1, -1), each keepdim flipped, each .T dropped or
    added on a name."""
    import ast

    def want(n):
        return isinstance(n, ast.Call) or (isinstance(n, ast.Attribute) and n.attr == "T") \
            or (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))

    def make(n):
        import copy
        if isinstance(n, ast.Attribute):
            yield n.value
            return
        if isinstance(n, ast.Name):
            yield ast.Attribute(n, "T", ast.Load())
            return
        for k, a in enumerate(n.args):
            if isinstance(a, ast.Constant) and isinstance(a.value, int):
                for v in {0, 1, -1, 2} - {a.value}:
                    c = copy.deepcopy(n)
                    c.args[k] = ast.Constant(v)
                    yield c
        for k, kw in enumerate(n.keywords):
            if kw.arg == "keepdim" and isinstance(kw.value, ast.Constant):
                c = copy.deepcopy(n)
                c.keywords[k].value = ast.Constant(not kw.value.value)
                yield c
            if kw.arg == "dim" and isinstance(kw.value, ast.Constant):
                for v in {0, 1, -1} - {kw.value.value}:
                    c = copy.deepcopy(n)
                    c.keywords[k].value = ast.Constant(v)
                    yield c
        if n.args or n.keywords:
            c = copy.deepcopy(n)
            c.keywords.append(ast.keyword("keepdim", ast.Constant(True)))
            yield c
    yield from _each_node(code, want, make)


def drops(code: str):
    """The code with one statement dropped, and with one term of a sum dropped."""
    import ast
    body = statements(code)
    for i in range(len(body)):
        if len(body) > 1:
            yield "\n".join(body[:i] + body[i + 1:])

    def want(n):
        return isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub))

    def make(n):
        yield n.left
        yield n.right if isinstance(n.op, ast.Add) else ast.UnaryOp(ast.USub(), n.right)
    yield from _each_node(code, want, make)


def backticked(text: str) -> list[str]:
    import re
    return [m for m in re.findall(r"`([^`\n]{1,200})`", text)]


# -- running one attack in the student venv ---------------------------------------------------

def _attack_main(corpus: str, name: str, out: str, seconds: float) -> None:
    work = Path.cwd()
    import tutor
    site = Path(tutor.__file__).resolve()
    if str(REPO) in str(site):
        raise SystemExit(f"tutor resolves to the tree ({site}), not the student's venv")
    spec = importlib.util.spec_from_file_location("corpus", corpus)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["redteam_student"] = sys.modules[__name__]
    spec.loader.exec_module(mod)
    ctx = Ctx(work, work / "home", seconds)
    note = ""
    try:
        mod.ATTACKS[name](ctx)
    except Stop as exc:
        note = f"stopped ({exc})"
    except Exception as exc:  # noqa: BLE001 - what it emitted before is judged all the same
        note = f"crashed ({type(exc).__name__}: {str(exc)[:120]})"
    finally:
        ctx.close()
    Path(out).write_text(json.dumps({"candidates": ctx.candidates, "note": note,
                                     "calls": ctx.calls}))


def run_attack(which: str, name: str, base: Path, venv: Path) -> dict:
    work = base / name
    (work / "home").mkdir(parents=True)
    out = work / "candidates.json"
    corpus = REPO / "tests" / f"redteam_student_{which}.py"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(work / "home"),
           "BACKPROP_TUTOR_HOME": str(work / "home" / "tutor"), "LANG": "C.UTF-8",
           "TMPDIR": str(work)}
    code = (f"import importlib.util,sys;s=importlib.util.spec_from_file_location('rs',"
            f"{str(Path(__file__).resolve())!r});m=importlib.util.module_from_spec(s);"
            f"sys.modules['rs']=m;s.loader.exec_module(m);"
            f"m._attack_main({str(corpus)!r},{name!r},{str(out)!r},{ATTACK_SECONDS - 30})")
    try:
        done = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", code], cwd=work,
                              env=env, capture_output=True, text=True, timeout=ATTACK_SECONDS)
    except subprocess.TimeoutExpired:
        return {"error": "timed out"}
    if done.returncode != 0 or not out.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"crashed: {last[:200]}"}
    return json.loads(out.read_text())


# -- judging with the full tutor (this tree) ---------------------------------------------------

class Judge:
    def __init__(self, home: Path) -> None:
        sys.path.insert(0, str(REPO))
        from tutor.config import Settings
        from tutor.core.engine import Engine
        self._make = lambda lesson: Engine(Settings(device="cpu", pack=str(
            REPO / "exercises" / lesson), home=home / lesson))
        self._engines: dict[str, object] = {}

    def passes(self, lesson: str, step: str, code: str) -> bool:
        from tutor.values.results import Rule
        if lesson not in LESSONS:
            return False
        if lesson not in self._engines:
            self._engines[lesson] = self._make(lesson)
        engine = self._engines[lesson]
        try:
            step_id = engine.pack.step(step).id
            r = engine.check(step_id, code)
        except Exception:  # noqa: BLE001 - no such step, or code the check cannot take
            return False
        return bool(r.passed) and r.rule is Rule.FOLLOWED and not r.numeric

    def close(self) -> None:
        for e in self._engines.values():
            e.close()


def build(venv: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "tutor", "autograder", "--student-wheel", tmp],
                       cwd=REPO, check=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        wheel = next(Path(tmp).glob("*.whl"))
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                        "--force-reinstall", "--no-deps", str(wheel)], check=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("which", choices=["tune", "holdout"])
    p.add_argument("--only", nargs="*")
    p.add_argument("--venv", default=str(VENV))
    p.add_argument("--build", action="store_true")
    args = p.parse_args()
    venv = Path(args.venv)
    if args.build:
        build(venv)
    spec = importlib.util.spec_from_file_location(
        "corpus", REPO / "tests" / f"redteam_student_{args.which}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["rs"] = sys.modules[__name__]
    spec.loader.exec_module(mod)
    names = [n for n in mod.ATTACKS if not args.only or n in args.only]
    base = RUNS / f"{args.which}-{time.strftime('%Y%m%d-%H%M%S')}"
    judge = Judge(base / "judge")
    held, broke = [], []
    try:
        for name in names:
            got = run_attack(args.which, name, base, venv)
            if "error" in got:
                held.append(name)
                print(f"HELD  {name}: {got['error']} (counts as held)", flush=True)
                continue
            hit = next(((lesson, step, code) for lesson, step, code in got["candidates"]
                        if judge.passes(lesson, step, code)), None)
            if hit:
                broke.append(name)
                print(f"BROKE {name}: {hit[0]} {hit[1]}: {hit[2]!r}", flush=True)
            else:
                held.append(name)
                why = (f"{len(got['candidates'])} candidate(s), none passes the full tutor"
                       if got["candidates"] else "no candidate")
                print(f"HELD  {name}: {why}; {got['calls']} student checks"
                      + (f"; {got['note']}" if got["note"] else ""), flush=True)
    finally:
        judge.close()
    print(f"SUMMARY {args.which}: {len(held)} held, {len(broke)} broke"
          + (f" ({', '.join(broke)})" if broke else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
