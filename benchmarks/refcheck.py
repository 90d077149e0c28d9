#!/usr/bin/env python3
"""Independent check of the reference solutions of a pack written by `pack new`.

Uses only torch, tomllib and the pack's own files (pack.toml, the exercise TOMLs, forward.py):
nothing of the tutor's code.

For a pack folder, at two batch sizes (32 and 5 by default):

1. imports the pack's forward.py as a module, builds the parameters with setup(seed=7) and a batch
   with batch(n, seed, text); parameters (the float tensors of setup that forward takes, less
   FIXED) become float64 leaves that require grad, FIXED tensors and float targets become float64;
2. runs the pack's [forward] code line by line (float64 default dtype) in a namespace of torch, F,
   math, the file's globals, the lesson's sizes, n/batch_size, Xb/Yb and the parameters, calling
   retain_grad() on each line's output, and backward() from the loss; the loss is also compared
   with the module's own forward(X, Y, ...) as a sanity check of the pack's [forward] code;
3. computes, for every forward line and every tensor it reads, that line's own vector-Jacobian
   product (the line re-run on detached copies of what it reads, with autograd's gradient of its
   output arriving): this is what a partial (first-branch / `+=`) gradient must hold after the
   lines a step has covered so far;
4. runs each gradient step's `solution` in order in a namespace holding the forward tensors
   (detached), Xb, Yb, n, batch_size, the sizes, torch, F, math and the d<name> left by earlier
   steps' solutions, and compares every d<name> the solution assigns (name a forward tensor or
   parameter) with autograd: a tensor in the step's `checks` against its full gradient, any other
   (a partial or a `+=` in between) against the sum of the line-VJPs of the lines covered so far.
   float64, rtol 1e-6 (atol 1e-9 times the reference's largest entry).

A TODO step (its solution raises NotImplementedError) and a solution that raises are reported;
their gradients (and a wrong step's) are then replaced by autograd's so that the later steps are
judged on their own. Steps with `target`/`upstream`/`given`, and function or training steps, are
not checked (reported as skipped).

Usage: refcheck.py PACK_DIR [PACK_DIR ...] [--sizes 32,5] [--json OUT.json]
"""
import ast
import importlib.util
import inspect
import json
import math
import os
import sys
import tomllib
import traceback

import torch
import torch.nn.functional as F

DATA_DIRS = ["/work/main/data", "/work/shared/data"]
RTOL = 1e-6


def load_module(path):
    spec = importlib.util.spec_from_file_location("packforward_" + str(abs(hash(path))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def read_text(pack_dir, mod, pack):
    name = getattr(mod, "DATA", None) or pack["pack"].get("data")
    if not name:
        return None
    for d in [pack_dir] + DATA_DIRS:
        p = os.path.join(d, name)
        if os.path.exists(p):
            with open(p) as f:
                return f.read()
    raise FileNotFoundError(name)


def names_read(expr_src):
    tree = ast.parse(expr_src)
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def assigned_names(code):
    """Names a solution assigns: x = ..., x += ..., x[...] = ..., x.index_add_(...) (in place)."""
    out = []
    for node in ast.walk(ast.parse(code)):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Name) and sub.id not in out:
                    out.append(sub.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_") \
                and isinstance(node.func.value, ast.Name) and node.func.value.id not in out:
            out.append(node.func.value.id)
    return out


class _Float64(ast.NodeTransformer):
    """`.float()` in a forward line means float64 in this check's float64 pass."""

    def visit_Call(self, node):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "float" and not node.args:
            f.attr = "double"
        return node


def forward_lines(code):
    lines = []
    for stmt in _Float64().visit(ast.parse(code)).body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            raise ValueError("forward line is not one assignment to a name: " + ast.unparse(stmt))
        lines.append((stmt.targets[0].id, ast.unparse(stmt), ast.unparse(stmt.value)))
    return lines


def is_float_tensor(v):
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def close(got, ref):
    if not isinstance(got, torch.Tensor):
        return False, f"not a tensor ({type(got).__name__})"
    if tuple(got.shape) != tuple(ref.shape):
        return False, f"shape {tuple(got.shape)} != {tuple(ref.shape)}"
    got = got.detach().to(torch.float64)
    scale = float(ref.abs().max()) if ref.numel() else 1.0
    atol = max(1e-9 * scale, 1e-13)  # floor: a gradient that is exactly zero in exact arithmetic (b1 before batchnorm)
    if torch.allclose(got, ref, rtol=RTOL, atol=atol):
        return True, ""
    err = (got - ref).abs().max().item()
    return False, f"max abs diff {err:.3g} (ref max {scale:.3g})"


def check_pack(pack_dir, sizes_to_try=(32, 5)):
    with open(os.path.join(pack_dir, "pack.toml"), "rb") as f:
        pack = tomllib.load(f)
    mod = load_module(os.path.join(pack_dir, "forward.py"))
    text = read_text(pack_dir, mod, pack)
    lesson = dict(pack.get("lesson", {}))
    fwd = pack["forward"]
    loss_name = fwd.get("loss", "loss")
    lines = forward_lines(fwd["code"])

    steps = []
    for ex_file in pack["pack"]["exercises"]:
        with open(os.path.join(pack_dir, ex_file), "rb") as f:
            ex = tomllib.load(f)
        ex_kind = ex.get("exercise", {}).get("kind", "gradient")
        for st in ex.get("steps", []):
            steps.append((ex_file, st.get("kind", ex_kind), st))

    sig = list(inspect.signature(mod.forward).parameters)
    fixed = set(getattr(mod, "FIXED", []) or [])
    module_numbers = {k: v for k, v in vars(mod).items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("_") and k.isidentifier()}

    result = {"pack": pack_dir, "steps": 0, "right": [], "wrong": [], "todo": [], "errors": [], "skipped": [],
              "notes": []}
    per_size = {}
    for n in sizes_to_try:
        torch.set_default_dtype(torch.float32)
        params = mod.setup(7)
        b = mod.batch(n, 1234 + n, text) if text is not None else mod.batch(n, 1234 + n)
        bvals = list(b.values())
        Xb, Yb = bvals[0], bvals[1]
        if is_float_tensor(Xb):
            Xb = Xb.double()
        if is_float_tensor(Yb):
            Yb = Yb.double()
        leaves = {}
        for name in sig[2:]:
            v = params[name]
            if is_float_tensor(v) and name not in fixed:
                leaves[name] = v.detach().double().requires_grad_()
            elif is_float_tensor(v):
                leaves[name] = v.detach().double()
            else:
                leaves[name] = v
        sizes = {**module_numbers, **{k: v for k, v in lesson.items()}}
        sizes["batch_size"] = n
        sizes.pop("heldout_batch_size", None)
        base = {k: v for k, v in vars(mod).items() if not k.startswith("__")}
        torch.set_default_dtype(torch.float64)
        try:
            ns = {**base, "torch": torch, "F": F, "math": math, **sizes, "n": n, "Xb": Xb, "Yb": Yb, **leaves}
            outputs = {}
            for t, src, _ in lines:
                exec(src, ns)
                v = ns[t]
                if isinstance(v, torch.Tensor) and v.requires_grad and not v.is_leaf:
                    v.retain_grad()
                outputs[t] = v
            loss = ns[loss_name]
            # sanity: the pack's [forward] code is the module's forward
            mod.n = n
            mod.batch_size = n
            margs = [Xb, Yb] + [leaves[k].detach() if isinstance(leaves[k], torch.Tensor) else leaves[k] for k in sig[2:]]
            try:
                mloss = mod.forward(*margs)
                if not torch.allclose(mloss.double(), loss.detach(), rtol=1e-9, atol=1e-12):
                    result["notes"].append(f"n={n}: pack [forward] loss {loss.item()} != forward.py's {mloss.item()}")
            except Exception as e:  # noqa: BLE001
                result["notes"].append(f"n={n}: forward.py's forward() failed in refcheck: {e!r}")
            loss.backward()
            tensors = {**leaves, **outputs}
            grads = {}
            for name, v in tensors.items():
                if isinstance(v, torch.Tensor) and v.requires_grad:
                    grads[name] = v.grad.detach().clone() if v.grad is not None else torch.zeros_like(v.detach())
            # each line's own VJP for each tensor it reads
            contrib = {}
            for t, src, value_src in lines:
                out_grad = grads.get(t)
                if out_grad is None:
                    continue
                reads = [r for r in names_read(value_src) if r in grads and r != t]
                if not reads:
                    continue
                ns2 = dict(ns)
                copies = {r: tensors[r].detach().clone().requires_grad_() for r in reads}
                ns2.update(copies)
                exec(src, ns2)
                out = ns2[t]
                gs = torch.autograd.grad(out, [copies[r] for r in reads], grad_outputs=out_grad, allow_unused=True)
                contrib[t] = {r: (g if g is not None else torch.zeros_like(copies[r])) for r, g in zip(reads, gs)}
            # run the steps' solutions
            S = {"torch": torch, "F": F, "math": math, **sizes, "n": n, "batch_size": n, "Xb": Xb, "Yb": Yb}
            for name, v in tensors.items():
                S[name] = v.detach() if isinstance(v, torch.Tensor) else v
            covered = []
            rows = []
            for ex_file, kind, st in steps:
                sid = st["id"]
                if kind != "gradient":
                    rows.append((sid, "skipped", f"kind {kind}"))
                    continue
                if any(k in st for k in ("target", "upstream", "given")):
                    rows.append((sid, "skipped", "target/upstream/given not checked"))
                    continue
                step_lines = st.get("lines", [])
                for ln in step_lines:
                    if ln not in covered:
                        covered.append(ln)
                checks = st.get("checks", [])
                partials = st.get("partials", [])
                sol = st.get("solution", "")

                def expected(name):
                    if name in checks:
                        return grads[name]
                    tot = torch.zeros_like(grads[name])
                    for ln in covered:
                        if ln in contrib and name in contrib[ln]:
                            tot = tot + contrib[ln][name]
                    return tot

                def fill(names):
                    for nm in names:
                        if nm in grads:
                            S["d" + nm] = expected(nm).clone()

                if "NotImplementedError" in sol or "TODO (pack new)" in sol:
                    msg = ""
                    for line in sol.splitlines():
                        if "TODO" in line:
                            msg = line.strip()
                            break
                    rows.append((sid, "todo", msg))
                    fill(checks + partials)
                    continue
                assigned = [a for a in assigned_names(sol) if a.startswith("d") and a[1:] in grads]
                try:
                    exec(sol, S)
                except Exception as e:  # noqa: BLE001
                    rows.append((sid, "error", f"{type(e).__name__}: {e}"))
                    fill(checks + partials + [a[1:] for a in assigned])
                    continue
                bad = []
                for nm in checks + partials:
                    if ("d" + nm) not in [a for a in assigned] and nm in grads:
                        bad.append(f"d{nm}: not assigned by the solution")
                for a in assigned:
                    nm = a[1:]
                    ok, why = close(S.get(a), expected(nm))
                    if not ok:
                        which = "full" if nm in checks else "partial"
                        bad.append(f"{a} ({which}): {why}")
                        S[a] = expected(nm).clone()
                rows.append((sid, "wrong" if bad else "right", "; ".join(bad)))
            per_size[n] = rows
        except Exception as e:  # noqa: BLE001
            result["errors"].append(f"n={n}: refcheck could not run the forward pass: {e!r}")
            per_size[n] = None
        finally:
            torch.set_default_dtype(torch.float32)

    # merge the sizes: a step is right only if right at every size
    ref_rows = next((r for r in per_size.values() if r is not None), None)
    if ref_rows is None:
        return result
    grad_steps = [r for r in ref_rows if r[1] != "skipped"]
    result["steps"] = len(grad_steps)
    for i, (sid, status, why) in enumerate(ref_rows):
        statuses = {n: (rows[i] if rows is not None else (sid, "error", "no run")) for n, rows in per_size.items()}
        kinds = {s[1] for s in statuses.values()}
        if kinds == {"skipped"}:
            result["skipped"].append(f"{sid} ({why})")
        elif "todo" in kinds:
            result["todo"].append(f"{sid}: {why}")
        elif kinds == {"right"}:
            result["right"].append(sid)
        elif "error" in kinds:
            detail = "; ".join(f"n={n}: {s[2]}" for n, s in statuses.items() if s[1] != "right")
            result["wrong"].append(f"{sid} [raises] {detail}")
        else:
            detail = "; ".join(f"n={n}: {s[2]}" for n, s in statuses.items() if s[1] != "right")
            result["wrong"].append(f"{sid} {detail}")
    return result


def main(argv):
    sizes = (32, 5)
    out_json = None
    dirs = []
    i = 0
    while i < len(argv):
        if argv[i] == "--sizes":
            sizes = tuple(int(s) for s in argv[i + 1].split(","))
            i += 2
        elif argv[i] == "--json":
            out_json = argv[i + 1]
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    results = []
    for d in dirs:
        if not os.path.exists(os.path.join(d, "pack.toml")):
            r = {"pack": d, "missing": True}
            print(f"{d}: no pack.toml (pack new wrote no pack)")
            results.append(r)
            continue
        try:
            r = check_pack(d, sizes)
        except Exception as e:  # noqa: BLE001
            r = {"pack": d, "errors": [f"refcheck failed: {e!r}"], "steps": 0, "right": [], "wrong": [], "todo": [],
                 "skipped": [], "notes": []}
        results.append(r)
        print(f"{d}: steps {r['steps']}, references right {len(r['right'])}, wrong {len(r['wrong'])}, "
              f"TODO {len(r['todo'])}" + (f", skipped {len(r['skipped'])}" if r["skipped"] else ""))
        for w in r["wrong"]:
            print("  WRONG", w)
        for t in r["todo"]:
            print("  TODO ", t)
        for e in r["errors"]:
            print("  ERROR", e)
        for nt in r["notes"]:
            print("  NOTE ", nt)
    if out_json:
        with open(out_json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
