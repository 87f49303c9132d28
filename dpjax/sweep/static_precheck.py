"""The static table of a sweep config checked before jax loads (``dpjax.sweep.config.precheck``), from the family's
source and its jax-free rule: the choices its class declares (``declared_choices``) and its rule in
``dpjax.algorithms.static_rules`` (the same function the family calls when it is built), with the class's literal
defaults (``declared_defaults``) for the fields a config leaves unset. Nothing here imports jax or a family module:
a bad static value (``bands = 0``, ``sampling_rate = 1.5``) is refused in a fraction of a second with the message
``SweepConfig`` gives after building the family (issue #39).
"""

from __future__ import annotations

import pathlib
from typing import Any

from dpjax import _validate


def registry_literal(name: str, default):
    """The literal value of ``dpjax.engine.registry.<name>`` (``RETIRED``, ``CARRIED_STATIC``), read from the module's
    source: the registry imports jax, and ``precheck`` must not."""
    import ast

    path = pathlib.Path(__file__).resolve().parents[1] / "engine" / "registry.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                return default
    return default


def family_class(class_name: str):
    """``(module tree, class node)`` of a family class, parsed from ``dpjax.algorithms``' sources (no import, no jax);
    ``None`` when no module defines it."""
    import ast

    from dpjax import algorithms

    for path in sorted(pathlib.Path(algorithms.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if f"class {class_name}" not in text:
            continue
        tree = ast.parse(text)
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name), None)
        if cls is not None:
            return tree, cls
    return None


def declared_choices(class_name: str) -> dict[str, tuple]:
    """``{field: choices}`` of a family class's ``_validate.check_choice("field", self.field, NAME)`` checks, read
    from its module's source (``NAME`` a module-level tuple of literals) without importing it (no jax): ``precheck``
    refuses a static value outside them in a fraction of a second (dp-fedavg's ``sampling``). A family's other static
    rules are ``dpjax.algorithms.static_rules``' (``check_rule``)."""
    import ast

    found = family_class(class_name)
    if found is None:
        return {}
    tree, cls = found
    consts = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                value = ast.literal_eval(n.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, tuple) and all(isinstance(x, str) for x in value):
                consts[n.targets[0].id] = value
    out = {}
    for n in ast.walk(cls):
        if (isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "check_choice"
                and len(n.args) == 3 and isinstance(n.args[0], ast.Constant) and isinstance(n.args[2], ast.Name)
                and isinstance(n.args[1], ast.Attribute) and n.args[1].attr == n.args[0].value
                and n.args[2].id in consts):
            out[n.args[0].value] = consts[n.args[2].id]
    return out


def declared_defaults(class_name: str) -> dict[str, Any]:
    """``{field: default}`` of a family class's own fields whose default is a literal (``sampling: str =
    "poisson"``), read from its source without importing it: the values a static rule sees for the fields a config
    leaves unset."""
    import ast

    found = family_class(class_name)
    out = {}
    for n in found[1].body if found else ():
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.value is not None:
            try:
                out[n.target.id] = ast.literal_eval(n.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
    return out


def check_static(d: dict, problems: list) -> None:
    """``dpjax.sweep.config.precheck``'s part of the static table (``d`` the raw config): values outside a family's
    declared choices (``declared_choices``), then the family's jax-free static rule (``check_rule``); each problem
    is appended to ``problems``."""
    from dpjax import algorithms

    static, name = d.get("static"), d.get("algorithm")
    declared = algorithms.declared_families()
    if not isinstance(static, dict) or not isinstance(name, str) or not declared or name not in declared:
        return
    choices = declared_choices(declared[name][0])
    before = len(problems)
    for k, value in static.items():
        if k in choices and isinstance(value, str) and value not in choices[k]:
            problems.append(f"static.{k}={value!r}: {k}={value!r} must be one of {choices[k]}")
    try:
        rounds = _validate.check_rounds("num_rounds", d.get("num_rounds"))
    except ValueError:
        return  # precheck names num_rounds itself
    if len(problems) == before:
        check_rule(declared[name][0], static, d.get("grid"), rounds, problems)


def check_rule(class_name: str, static: dict, grid, num_rounds: int, problems: list) -> None:
    """The family's rule (``dpjax.algorithms.static_rules``) on the static values, as ``AlgorithmEntry.check_static``
    builds the family: each value with the carried fields (``registry.CARRIED_STATIC``) and the others at their
    defaults, the error naming ``static.<field>=<value>``; then all first values together. A static field may be a
    grid axis (each of its values is checked)."""
    from dpjax.algorithms import static_rules

    params = static_rules.parameters(class_name)
    base = {**declared_defaults(class_name), "num_rounds": num_rounds}
    merged = {k: [v] for k, v in static.items() if k in params}
    for k, spec in (grid if isinstance(grid, dict) else {}).items():
        if k in params and k not in static:
            values = list(spec) if isinstance(spec, list) else [spec]
            if values and not isinstance(spec, dict):  # an empty axis or a range table: SweepConfig refuses it
                merged[k] = values
    if not params or any(p not in base and p not in merged for p in params):
        return  # no rule, or a field without a default left unset: SweepConfig names it
    def built(values: dict) -> dict:  # AlgorithmEntry.build passes a list as a tuple
        return {kk: tuple(vv) if isinstance(vv, list) else vv for kk, vv in values.items()}

    first = {k: v[0] for k, v in merged.items()}
    carried = [k for k in registry_literal("CARRIED_STATIC", ()) if k in merged]
    for k, vals in merged.items():
        for v in vals:
            default = base.get(k)
            if isinstance(default, (bool, str)) and type(v) is not type(default):
                problems.append(f"static.{k}={v!r} must be a {type(default).__name__}")
                return
            trial = {**base, **{c: first[c] for c in carried}, k: v}
            try:
                static_rules.check(class_name, built(trial))
            except (ValueError, TypeError) as err:
                culprit = next((c for c in carried if c != k and str(err).startswith(f"{c}=")), k)
                problems.append(f"static.{culprit}={trial[culprit]!r}: {err}")
                return
    try:
        static_rules.check(class_name, built({**base, **first}))
    except (ValueError, TypeError) as err:
        problems.append(str(err))
