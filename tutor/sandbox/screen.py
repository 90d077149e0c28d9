"""What is refused before anything runs: code that does not parse, or that the syntax policy
refuses. Nothing here needs torch, so a one-shot `check` can refuse such code before it pays
for importing torch (tutor/commands/check.py), with the same verdict the engine gives."""

from __future__ import annotations

import ast
import warnings

from tutor.sandbox.clean import MAX_MESSAGE, clean
from tutor.sandbox.policy import inspect

CODE_FILE = "<your code>"  # the name tracebacks and warnings give the learner's code


def without_cmp_definition(tree: ast.Module) -> ast.Module:
    """A notebook's own `def cmp(...)` pasted along with a cell is dropped: it reads `.grad`,
    which the sandbox refuses, and the tutor's cmp answers the same calls."""
    tree.body = [node for node in tree.body
                 if not (isinstance(node, ast.FunctionDef) and node.name == "cmp")]
    return tree


def screen(code: str, filename: str = CODE_FILE) -> tuple[ast.Module | None, dict | None]:
    """(the parsed tree, None), or (None, the error: its kind, message, line and column)."""
    try:
        tree = without_cmp_definition(ast.parse(code, filename))
        refusal = inspect(tree)
        if refusal:
            return None, {"kind": "forbidden", "message": refusal.message,
                          "line": refusal.line, "col": refusal.col}
        # Some errors (a starred expression alone, `return` outside a function) only show when
        # compiling. Compile-time warnings ("perhaps you missed a comma?") would go to the
        # terminal.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(tree, filename, "exec", dont_inherit=True)
        return tree, None
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        lineno, offset = getattr(exc, "lineno", None), getattr(exc, "offset", None)
        where = f"line {lineno}, column {offset}" if lineno else "your code"
        message = getattr(exc, "msg", None) or str(exc) or "too deeply nested to read"
        return None, {"kind": "syntax", "message": clean(f"{where}: {message}", MAX_MESSAGE),
                      "line": lineno, "col": offset}
