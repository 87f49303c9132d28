"""List module-level definitions in ``dpjax/`` that nothing uses (a planning aid for issue #37, not a test).

For every module-level function, class and constant, and every private (``_name``) method, of ``dpjax/**.py`` it counts the places that *use* the name:
a ``Name`` / ``Attribute`` load in any other Python file of ``dpjax/``, ``experiments/``, ``tests/`` and the notebooks'
code cells, a string constant equal to the name (or ending in ``.name`` / ``:name``: registries and ``getattr``), or a
whole-word mention in the hand-written docs pages, the README or a notebook's text. Imports, ``__all__`` entries,
docstrings and the definition itself do not count as uses; decorated functions (registrations) are not listed. It prints
two lists:

* ``DEAD``: used nowhere at all;
* ``TEST-ONLY``: used only under ``tests/``.

Names are matched by spelling, not resolved, so a common name (``run``, ``update``) used anywhere hides a dead one:
the lists are where to look, never a verdict.  Usage: ``python experiments/tools/dead_code.py [--under dpjax/sub]``.
"""

from __future__ import annotations

import argparse
import ast
import collections
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _docstring_ids(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _all_ids(tree: ast.AST) -> set[int]:
    """ids of the string constants inside ``__all__ = [...]`` (a re-export, not a use)."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                ids.update(id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return ids


def uses_in_python(source: str) -> collections.Counter:
    """Names used (loaded, attribute-accessed or named by a string) in one Python source."""
    tree = ast.parse(source)
    skip = _docstring_ids(tree) | _all_ids(tree)
    used = collections.Counter()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            used[node.id] += 1
        elif isinstance(node, ast.Attribute):
            used[node.attr] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value.strip()
            if re.fullmatch(r"[\w.:]+", text):
                used[re.split(r"[.:]", text)[-1]] += 1
    return used


def definitions(path: pathlib.Path) -> list[tuple[str, int, str]]:
    """(name, line, kind) of the module-level definitions of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.decorator_list:  # a decorated function is registered (``@register``, ...): used by name
                out.append((node.name, node.lineno, "def"))
        elif isinstance(node, ast.ClassDef):
            out.append((node.name, node.lineno, "class"))
            out += [(f"{m.name}", m.lineno, f"method of {node.name}") for m in node.body
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name.startswith("_")
                    and not m.name.startswith("__")]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Name) and not t.id.startswith("__"):
                    out.append((t.id, node.lineno, "const"))
    return out


def _notebook_parts(path: pathlib.Path) -> tuple[str, str]:
    cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
    code = "\n".join("".join(c["source"]) for c in cells if c.get("cell_type") == "code")
    text = "\n".join("".join(c["source"]) for c in cells if c.get("cell_type") != "code")
    return code, text


def collect(under: str):
    py_files = [p for d in ("dpjax", "experiments", "tests", "notebooks") for p in (ROOT / d).rglob("*.py")]
    uses = {}  # path -> Counter
    for p in py_files:
        try:
            uses[p] = uses_in_python(p.read_text(encoding="utf-8"))
        except SyntaxError:
            continue
    prose = [(ROOT / "README.md").read_text(encoding="utf-8")]
    prose += [p.read_text(encoding="utf-8") for p in (ROOT / "dpjax/docs/pages").rglob("*.md")]
    prose += [p.read_text(encoding="utf-8") for p in ROOT.glob("pyproject.toml")]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        code, text = _notebook_parts(nb)
        try:
            uses[nb] = uses_in_python(code.replace("%", "#").replace("!", "#"))
        except SyntaxError:
            prose.append(code)
        prose.append(text)
    prose_text = "\n".join(prose)

    dead, test_only = [], []
    for path in sorted((ROOT / under).rglob("*.py")):
        for name, line, kind in definitions(path):
            if name in ("main",) or (name.startswith("__") and name.endswith("__")):
                continue
            where = [p for p, c in uses.items() if c.get(name)]
            # a module's own uses count (a helper called in its own module is alive)
            in_tests = [p for p in where if "tests" in p.relative_to(ROOT).parts]
            others = [p for p in where if p not in in_tests]
            in_prose = re.search(rf"\b{re.escape(name)}\b", prose_text) is not None
            rel = f"{path.relative_to(ROOT)}:{line} {kind} {name}"
            if not others and not in_prose:
                (test_only if in_tests else dead).append(rel)
    return dead, test_only


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--under", default="dpjax", help="folder whose definitions are listed (default: dpjax)")
    args = parser.parse_args()
    dead, test_only = collect(args.under)
    print(f"DEAD ({len(dead)})")
    print("\n".join(f"  {r}" for r in dead))
    print(f"TEST-ONLY ({len(test_only)})")
    print("\n".join(f"  {r}" for r in test_only))


if __name__ == "__main__":
    main()
