"""Paper-figure reproductions: ``dpjax reproduce <figure-id>``.

Each paper module (listed in ``FIGURE_MODULES``) registers its figures with
``@register(...)``. A figure function has the signature::

    fn(out_dir: pathlib.Path, *, quick: bool, seed: int, data_dir=None) -> pathlib.Path

and writes into ``out_dir`` a tidy ``results.csv`` (one row per algorithm x
epsilon x trial x metric, columns at least ``algorithm, epsilon, trial,
metric, value, accountant``), a PNG figure and a markdown ``report.md``
comparing the paper's claims with what dpjax measured; it returns the report
path. Tables, ``results.csv``, ``report.md`` and ``meta.json`` are written
with ``dpjax.reproduce.report``, figures with ``dpjax.sweep.plot``. ``quick=True`` must finish in minutes on 2 CPU cores. ``data_dir`` is
passed to the dataset loaders (``None``: ``$DPJAX_DATA_DIR``, then the cache
directory; see :mod:`dpjax.data.paths`).

A figure may also register ``report_only(out_dir, *, quick) -> pathlib.Path``: it
rewrites the report (claims table, verdicts, figure) of a kept run from the
files in ``out_dir`` without re-running anything (``dpjax reproduce NAME
--report-only --out DIR``), so a change of the verdict rule or the report's
wording reaches kept results.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

# Modules that register figures; append yours (one line) when you add one.
FIGURE_MODULES: list[str] = ["dpjax.reproduce.diff2", "dpjax.reproduce.isrl", "dpjax.reproduce.user_level",
                              "dpjax.reproduce.shuffle_sco", "dpjax.reproduce.dpsgd_mnist",
                              "dpjax.reproduce.batch_clipping_privacy"]


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str
    paper: str
    description: str
    fn: Callable
    constructions: tuple[str, ...] = ("paper",)
    report_only: Callable | None = None

    @property
    def reads_data(self) -> bool:
        """Whether the figure loads a dataset (its function takes ``data_dir``); synthetic ones do not."""
        import inspect

        return "data_dir" in inspect.signature(self.fn).parameters


_REGISTRY: dict[str, Figure] = {}


def register(name: str, *, paper: str, description: str, constructions: tuple[str, ...] = ("paper",),
             report_only: Callable | None = None):
    """Decorator registering a figure reproduction under ``name``.

    ``constructions``: the experimental constructions the figure offers
    (``"paper"``: what the paper's text describes; ``"authors"``: what the
    authors' public scripts do); the figure function then takes
    ``construction=`` and names it in its title, meta and report.
    ``report_only``: rewrites the report of a kept run from its files (see the
    module docstring).
    """

    def deco(fn):
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"figure name={name!r} is registered twice")
        _REGISTRY[name] = Figure(name, paper, description, fn, tuple(constructions), report_only)
        return fn

    return deco


def figures() -> dict[str, Figure]:
    """All registered figures (imports the figure modules on first use)."""
    for module in FIGURE_MODULES:
        importlib.import_module(module)
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Figure:
    available = figures()
    if name not in available:
        raise ValueError(f"figure={name!r} is unknown; `dpjax reproduce --list` shows {tuple(available)}")
    return available[name]
