"""The package's layering, read statically from its import graph (``ast``, no import of dpjax).

``LAYERS`` below is the one definition of the layer order, lowest first. A module may import
modules of its own layer or of lower layers, never of a higher one; no two modules import each
other in a loop (module-level and function-level imports both count, and importing
``dpjax.a.b`` also runs ``dpjax/a/__init__.py``); the accounting layer never imports jax, not
even through another dpjax module; no module uses another module's private (``_``-prefixed)
names. The same parse checks the size rules: no module over ``MAX_MODULE_LINES`` lines and no
function over ``MAX_FUNCTION_LINES`` lines unless ``LONG_FUNCTIONS`` gives the reason.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dpjax"

#: Layer order, lowest first: (layer name, module-name prefixes). A module belongs to the layer of its
#: longest matching prefix; a subcommand module ``dpjax.<package>.cli`` belongs to the command line
#: (it parses arguments and prints, above everything its package offers).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("dpjax._validate", "dpjax.outputs", "dpjax.progress")),  # pure Python helpers every layer uses
    ("accounting", ("dpjax.accounting",)),  # pure Python: never imports jax
    ("primitives", ("dpjax.keys", "dpjax.primitives")),  # jax building blocks: keys, clipping, noise, sampling
    ("problems-data", ("dpjax.problems", "dpjax.data")),  # losses/models and loaders
    ("engine", ("dpjax.engine",)),  # the contract, roles, family registry and the one executor
    ("parts", ("dpjax.parts",)),  # implementations of the roles
    ("algorithms", ("dpjax.algorithms", "dpjax.user_level")),  # families (user-level: its own solvers)
    ("drivers", ("dpjax.sweep", "dpjax.auditing", "dpjax.tasks")),  # drive families: sweeps, audits, tasks
    ("reproduce", ("dpjax.reproduce",)),  # the papers' figures and claims
    ("cli", ("dpjax", "dpjax.cli", "dpjax.docs", "dpjax.__main__")),  # the dpjax command and its site
)
CLI_SUBMODULE = "cli"  # dpjax.<package>.cli -> the "cli" layer

MAX_MODULE_LINES = 600
_PORT = ("a verbatim port of dp_accounting's random_allocation (google/differential-privacy PR #414, 125d46c8), kept "
         "as upstream wrote it so that it diffs against its source")
#: Modules allowed over MAX_MODULE_LINES, with the reason.
LONG_MODULES: dict[str, str] = {
    f"dpjax.accounting.ra_upstream.{m}": _PORT for m in ("convolution", "core", "distributions")}
MAX_FUNCTION_LINES = 80
#: Functions allowed over MAX_FUNCTION_LINES (docstring included), with the reason.
LONG_FUNCTIONS: dict[str, str] = {
    "dpjax.reproduce.dpsgd_mnist:run_protocol": "the protocol in the order it runs (load, variants x constructions "
                                                "grids, edge extensions, privacy tables), each step a call",
    "dpjax.reproduce.dpsgd_mnist_report:write_report": "the report's sections in reading order, one block each",
    "dpjax.docs.build:stage": "the site's staging steps in build order (pages, API stubs, figures, notebooks, "
                              "config); each is a few lines",
    "dpjax.reproduce.batch_clipping_privacy:write_report": "being edited on another branch (dl); one report, "
                                                          "section by section",
    "dpjax.reproduce.diff2.driver:run_dataset": "one dataset's run as one compiled program: data, configs, grid, "
                                                "traces in order",
    "dpjax.reproduce.diff2.figures:write_outputs": "the report's sections in the order they are printed",
    "dpjax.reproduce.isrl.outputs:write_outputs": "the report's sections in the order they are printed",
    **{f"dpjax.accounting.ra_upstream.{f}": _PORT for f in (
        "convolution:fft_convolve", "convolution:_fft_self_convolve_direct", "convolution:_compute_geometric_convolution",
        "convolution:geometric_convolve", "core:geometric_allocation_pld_base_remove",
        "distributions:discretize_aligned_grid", "distributions:rediscretize_dist")},
}
#: Private names still used across modules: "importer -> target.name": reason.
PRIVATE_ALLOWED: dict[str, str] = {}
#: Modules of the accounting layer's closure allowed to import jax, with the reason.
JAX_ALLOWED: dict[str, str] = {
    "dpjax._validate": "imports jax only inside checks of traced values (a tracer exists only once jax is "
                       "imported) and inside ``checked``, the jax debugging mode; the accounting layer calls neither",
}


def _module_files() -> dict[str, tuple[pathlib.Path, bool]]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        mods[".".join(parts)] = (path, is_package)
    return mods


MODULES = _module_files()


@functools.lru_cache(maxsize=None)
def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module][0].read_text(encoding="utf-8"))


def _longest_module(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if MODULES[module][1] else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str):
    """(target module, line, bound alias) of every dpjax import in ``module``, at any depth."""
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "dpjax" or a.name.startswith("dpjax."):
                    target = _longest_module(a.name)
                    yield target, node.lineno, (a.asname, a.name if a.asname else None)
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if not (source == "dpjax" or source.startswith("dpjax.")):
                continue
            for a in node.names:
                full = f"{source}.{a.name}"
                if full in MODULES:
                    yield full, node.lineno, (a.asname or a.name, full)
                else:
                    yield _longest_module(source), node.lineno, None


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


@functools.lru_cache(maxsize=None)
def graph() -> dict[str, dict[str, int]]:
    """module -> {imported module: first line}; importing ``dpjax.a.b`` also runs ``dpjax.a``'s
    ``__init__`` (an edge to it unless it is a package the importer itself lives in; the root
    ``dpjax`` package imports nothing at import time)."""
    edges: dict[str, dict[str, int]] = {m: {} for m in MODULES}
    for m in MODULES:
        for target, line, _ in _imports(m):
            if target is None or target == m:
                continue
            for t in [*_ancestors(target), target]:
                if t != "dpjax" and t != m and t not in _ancestors(m):
                    edges[m].setdefault(t, line)
    return edges


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) >= 3 and parts[-1] == CLI_SUBMODULE:
        return len(LAYERS) - 1
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    assert best is not None, f"{module} is in no layer of LAYERS"
    return best


def _cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(edges.get(w, ()))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_every_module_has_a_layer():
    for m in MODULES:
        layer_of(m)


def test_no_import_cycles():
    cycles = _cycles(graph())
    detail = ["; ".join(f"{a} -> {b} (line {graph()[a][b]})" for a in c for b in graph()[a] if b in c)
              for c in cycles]
    assert not cycles, "modules importing each other in a loop:\n" + "\n".join(detail)


def test_no_package_cycles():
    """Nor do the top-level packages (``dpjax.sweep``, ``dpjax.engine``, ...) import each other in a loop."""
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    edges: dict[str, dict[str, int]] = {top(m): {} for m in MODULES}
    for m, targets in graph().items():
        for t, line in targets.items():
            if top(t) != top(m):
                edges[top(m)].setdefault(top(t), line)
    assert not _cycles(edges), f"packages importing each other in a loop: {_cycles(edges)}"


def test_no_upward_imports():
    upward = [f"{m} ({LAYERS[layer_of(m)][0]}) imports {t} ({LAYERS[layer_of(t)][0]}) at line {line}"
              for m, targets in graph().items() for t, line in targets.items() if layer_of(t) > layer_of(m)]
    assert not upward, "lower layers importing higher ones:\n" + "\n".join(upward)


def test_accounting_never_imports_jax():
    """Every module the accounting layer reaches (transitively, at any depth) imports no jax."""
    accounting = [m for m in MODULES if m == "dpjax.accounting" or m.startswith("dpjax.accounting.")]
    reached, todo = set(), list(accounting)
    while todo:
        m = todo.pop()
        if m in reached:
            continue
        reached.add(m)
        todo.extend(graph()[m])
    offenders = []
    for m in sorted(reached - set(JAX_ALLOWED)):
        for node in ast.walk(_tree(m)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{m}:{node.lineno} imports {n}" for n in names
                          if n.split(".")[0] in ("jax", "jaxlib", "flax", "optax", "chex")]
    assert not offenders, "the accounting layer reaches jax:\n" + "\n".join(offenders)


def _private_uses(module: str):
    aliases = {}
    for target, _, bound in _imports(module):
        if bound and bound[1]:
            aliases[bound[0]] = bound[1]
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            if source.startswith("dpjax") and source in MODULES and source != module:
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and f"{source}.{a.name}" not in MODULES:
                        yield node.lineno, f"{source}.{a.name}"
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                target = ".".join([aliases[value.id], *reversed(chain)])
                if target in MODULES and target != module:
                    yield node.lineno, f"{target}.{node.attr}"


def test_no_module_uses_another_modules_private_names():
    found = [f"{m}:{line} uses {name}" for m in MODULES for line, name in _private_uses(m)
             if f"{m} -> {name}" not in PRIVATE_ALLOWED]
    assert not found, "private names used across modules (make them public or move them):\n" + "\n".join(found)


def test_private_allow_list_is_current():
    used = {f"{m} -> {name}" for m in MODULES for _, name in _private_uses(m)}
    assert set(PRIVATE_ALLOWED) <= used, f"stale PRIVATE_ALLOWED entries: {sorted(set(PRIVATE_ALLOWED) - used)}"


def test_no_module_over_the_line_limit():
    long = {m: n for m, (path, _) in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    unexplained = {m: n for m, n in long.items() if m not in LONG_MODULES}
    assert not unexplained, f"modules over {MAX_MODULE_LINES} lines (split them by topic): {unexplained}"
    assert not set(LONG_MODULES) - set(long), f"LONG_MODULES entries no longer needed: {set(LONG_MODULES) - set(long)}"


def _functions(module: str):
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield f"{module}:{prefix}{child.name}", child.end_lineno - child.lineno + 1
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(_tree(module), "")


def test_no_function_over_the_line_limit_without_a_reason():
    long = {name: n for m in MODULES for name, n in _functions(m) if n > MAX_FUNCTION_LINES}
    unexplained = {name: n for name, n in long.items() if name not in LONG_FUNCTIONS}
    assert not unexplained, (f"functions over {MAX_FUNCTION_LINES} lines (split them, or give the reason in "
                             f"LONG_FUNCTIONS): {unexplained}")
    stale = set(LONG_FUNCTIONS) - set(long)
    assert not stale, f"LONG_FUNCTIONS entries no longer needed: {sorted(stale)}"
    assert all(reason.strip() for reason in LONG_FUNCTIONS.values())


@pytest.mark.parametrize("source, expected", [
    ("from dpjax.x import _y\n", ["dpjax.x._y"]),
    ("from dpjax import x\nx._y\n", ["dpjax.x._y"]),
    ("import dpjax.x as x\nx._y\n", ["dpjax.x._y"]),
    ("from dpjax.x import y\ny._z\n", []),  # y is not a module: an object's attribute, not a module's name
])
def test_private_name_detector(monkeypatch, source, expected):
    """The checker can fail: a fake module using a private name of ``dpjax.x`` is caught."""
    monkeypatch.setitem(MODULES, "dpjax.x", (PACKAGE / "x.py", False))
    monkeypatch.setitem(MODULES, "dpjax.fake", (PACKAGE / "fake.py", False))
    _tree.cache_clear()
    monkeypatch.setattr(pathlib.Path, "read_text", lambda self, encoding=None: source)
    try:
        assert [name for _, name in _private_uses("dpjax.fake")] == expected
    finally:
        _tree.cache_clear()


def test_layer_order():
    """The registry sits below the families, the sweep above them, subcommand modules at the top."""
    names = [name for name, _ in LAYERS]
    assert names.index("accounting") < names.index("primitives") < names.index("engine") < names.index("algorithms")
    assert layer_of("dpjax.engine.registry") < layer_of("dpjax.algorithms.isrl_mbsgd") < layer_of("dpjax.sweep.driver")
    assert layer_of("dpjax.accounting.cli") == layer_of("dpjax.cli") == len(LAYERS) - 1
    assert layer_of("dpjax.accounting.events") == 1


def test_cycle_detector_finds_a_loop():
    assert _cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []
