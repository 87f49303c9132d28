"""Loads a script of experiments/benchmarks/ as a module (the scripts are not a package)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "experiments" / "benchmarks"


def load_bench(script: str, module_name: str | None = None):
    """``experiments/benchmarks/<script>.py`` imported under ``module_name`` (default: the script's name)."""
    spec = importlib.util.spec_from_file_location(module_name or script, BENCHMARKS / f"{script}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
