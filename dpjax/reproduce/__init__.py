"""Paper-figure reproductions: ``dpjax reproduce <figure-id>``.

Each paper module (listed in ``FIGURE_MODULES``) registers its figures with
``@register(...)``. A figure function has the signature::

    fn(out_dir: pathlib.Path, *, quick: bool, seed: int, data_dir=None) -> pathlib.Path

and writes into ``out_dir`` a tidy ``results.csv`` (one row per algorithm x epsilon x trial x metric, columns at least
``algorithm, epsilon, trial, metric, value, accountant``), a PNG figure and a markdown ``report.md`` comparing the
paper's claims with what dpjax measured; it returns the report path. Tables, ``results.csv``, ``report.md`` and
``meta.json`` are written with ``dpjax.reproduce.report``, figures with ``dpjax.sweep.plot``. ``quick=True`` must
finish in minutes on 2 CPU cores. ``data_dir`` is passed to the dataset loaders (``None``: ``$DPJAX_DATA_DIR``, then
the cache directory; see :mod:`dpjax.data.paths`).

A figure may also register ``report_only(out_dir, *, quick) -> pathlib.Path``: it rewrites the report (claims table,
verdicts, figure) of a kept run from the files in ``out_dir`` without re-running anything (``dpjax reproduce NAME
--report-only --out DIR``), so a change of the verdict rule or the report's wording reaches kept results.

The package exports its figure registry (below); ``dpjax reproduce`` is ``dpjax.reproduce.cli``. Everything a paper's
figures are built from stays in its module (``dpjax.reproduce.isrl.config``, ``dpjax.reproduce.diff2.authors_data``,
...), imported from there.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

__all__ = ["CONSTRUCTIONS", "FIGURE_MODULES", "Figure", "LISTING", "figures", "get", "is_known", "listing_lines", "register"]

# Modules that register figures; append yours (one line) when you add one.
FIGURE_MODULES: list[str] = ["dpjax.reproduce.diff2", "dpjax.reproduce.isrl", "dpjax.reproduce.user_level",
                              "dpjax.reproduce.shuffle_sco", "dpjax.reproduce.dpsgd_mnist",
                              "dpjax.reproduce.batch_clipping_privacy", "dpjax.reproduce.shuffling_gap",
                              "dpjax.reproduce.user_dpsgd", "dpjax.reproduce.correlated_noise"]


_ISRL = "ISRL-DP (Lowy & Razaviyayn, ICLR 2023)"
_DIFF2 = "DIFF2 (Murata & Suzuki, ICML 2023)"
_BC = "van Dijk et al., Generalizing DP-SGD with Shuffling and Batch Clipping"
_SCO = "Cheu, Joseph, Mao & Peng, Shuffle private stochastic convex optimization (ICLR 2022)"
_UL = "Ghazi et al., On User-Level Private Convex Optimization (ICML 2023)"
#: ``"paper"``: the construction the paper's text describes (dpjax's documented choices where it is
#: silent); ``"authors"``: what the authors' public scripts do.
CONSTRUCTIONS = ("paper", "authors")
_BOTH = CONSTRUCTIONS


def _figures(module: str, paper: str, constructions: tuple[str, ...], descriptions: dict[str, str]) -> dict:
    """``LISTING`` entries of one paper module: name -> (module, paper, description, constructions)."""
    return {name: (module, paper, description, constructions) for name, description in descriptions.items()}


#: name -> (module, paper, description, constructions) of every figure, read by ``dpjax reproduce --list``
#: and to import only the module a figure needs: the figure modules import jax, which costs seconds.
#: tests/cli/test_lazy_start.py checks it against what the modules register; add a line with your figure.
LISTING: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    **_figures("dpjax.reproduce.batch_clipping_privacy", _BC, ("paper",), {
        "batch-clipping-privacy": "accountant demonstrations N1-N8: sqrt(g) law, printed bounds, adversaries, Table "
                                  "1, audits",
    }),
    **_figures("dpjax.reproduce.correlated_noise", "Choquette-Choo et al., (Amplified) Banded Matrix Factorization "
               "(NeurIPS 2023); Chua et al., Balls-and-Bins Sampling for DP-SGD (AISTATS 2025)", ("paper",), {
        "correlated-noise": "MNIST test accuracy vs epsilon: DP-SGD Poisson / balls-in-bins, tree DP-FTRL, amplified "
                            "BandMF at equal epsilon and steps, with each strategy's RMSE",
    }),
    **_figures("dpjax.reproduce.correlated_noise", "Choquette-Choo et al., (Amplified) Banded Matrix Factorization "
               "(NeurIPS 2023); McMahan et al., DP-FedAvg (ICLR 2018)", ("paper",), {
        "correlated-noise-fedavg": "MNIST over 1,000 clients: DP-FedAvg with Poisson clients vs amplified BandMF "
                                   "(cyclic Poisson) vs BandMF under min-separation, at equal user-level epsilon "
                                   "and rounds, with RMSE",
    }),
    **_figures("dpjax.reproduce.diff2", _DIFF2, _BOTH, {
        "diff2-classification": "Fig. 3: DIFF2-GD vs DP-GD vs GD on KDD Cup 99 (10%) and a9a (stand-in for Cover "
                                "Type), eps 3",
        "diff2-regression": "Figs. 1-2: DIFF2-GD vs DP-GD vs GD on California housing, gas turbine, BlogFeedback "
                            "(eps 3, 5)",
    }),
    **_figures("dpjax.reproduce.dpsgd_mnist", _BC, _BOTH, {
        "dpsgd-mnist": "BC-SH vs IC-SS vs local SGD/momentum vs SGD on MNIST, sigma = 2",
    }),
    **_figures("dpjax.reproduce.isrl", _ISRL, _BOTH, {
        "isrl-insurance": "Fig. 5, 8, 9: insurance linear regression, relative RMSE vs ε over an (N, M) grid",
        "isrl-mnist": "Fig. 4 (M = 25, 12) & Fig. 7 (M = 18): MNIST even/odd logistic regression, test error vs ε "
                      "(the figure; `dpjax run isrl-mnist-trial` is one trial at one ε)",
        "isrl-obesity": "Fig. 6: obesity softmax regression (7 single-class silos, M = 3), test error vs ε",
    }),
    **_figures("dpjax.reproduce.shuffling_gap", "Chua et al., How Private are DP-SGD Implementations? (ICML 2024); "
               "Scalable DP-SGD (NeurIPS 2024)", ("paper",), {
        "shuffling-gap": "shuffled DP-SGD: Chua et al.'s lower bound vs the Poisson epsilon across sigma and epochs, "
                         "van Dijk et al.'s configurations on the same axes",
    }),
    **_figures("dpjax.reproduce.shuffle_sco", _SCO, ("paper",), {
        "shuffle-sco-protocols": "P_1D/P_vec: moments vs exact formulas, bit vs count level, exact hockey-stick, MC "
                                 "audit",
        "shuffle-sco-rates": "Table 1: excess population loss vs n and d for every protocol, fitted slopes, DP "
                             "baselines",
        "shuffle-sco-regimes": "Table 1 slopes in per-protocol regimes (eps, n-range, AC-SA schedule) where they are "
                               "measurable",
    }),
    **_figures("dpjax.reproduce.user_dpsgd", "Charles et al., Fine-Tuning Large Language Models with User-Level DP "
               "(2024)", ("paper",), {
        "user-level-dpsgd": "ELS vs ULS test error at equal user-level epsilon, MNIST dealt to power-law users",
    }),
    **_figures("dpjax.reproduce.user_level", _UL, ("paper",), {
        "user-level-audit": "D9: exact hockey-stick audit of Algorithm 1 on toy neighbours",
        "user-level-certificate": "D4: A2c certificate pass rate vs m, exchangeable vs heterogeneous users",
        "user-level-convex-erm": "D5: Theorem 4.1 Phased-ERM rate (rate-shape), Huber regression loss; slopes in m, "
                                 "n, d",
        "user-level-deletion": "D2: Theorem 3.6, deletion distance ~ 1/(n sqrt(m))",
        "user-level-lower-bound": "D7: Appendix D instance, A2 error vs d/(n^2 m), B1",
        "user-level-noise": "D3: sigma of A2/A2c/B1/B0 vs m, crossover m* ~ 1e9",
        "user-level-phased-sco": "D8: Phased-SCO as printed (A4) vs equal split (A4b)",
        "user-level-strongly-convex": "D6: Theorems 4.3/5.3, A5 ERM and A6 SCO rates (rate-shape)",
        "user-level-tail": "D1: Lemma 3.8 tail, exact hypergeometric and Monte Carlo",
    }),
}


def listing_lines() -> list[str]:
    """``dpjax reproduce --list``: one line per figure, from ``LISTING`` (no figure module, no jax imported)."""
    lines = []
    for name, (_, paper, description, constructions) in sorted(LISTING.items()):
        extra = f" (constructions: {', '.join(constructions)})" if len(constructions) > 1 else ""
        lines.append(f"{name:28s} [{paper}] {description}{extra}")
    return lines


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


def register(name: str, *, paper: str | None = None, description: str | None = None,
             constructions: tuple[str, ...] | None = None, report_only: Callable | None = None):
    """Decorator registering a figure reproduction under ``name``.

    ``paper``, ``description`` and ``constructions`` default to the figure's ``LISTING`` entry (the one place they are
    written); ``constructions``: the ``CONSTRUCTIONS`` the figure offers (its function then takes ``construction=`` and
    names it in its title, meta and report); ``report_only``: rewrites a kept run's report from its files (module
    docstring).
    """
    _, listed_paper, listed_description, listed_constructions = LISTING.get(name, (None, "", "", ("paper",)))

    def deco(fn):
        if name in _REGISTRY and _REGISTRY[name].fn is not fn:
            raise ValueError(f"figure name={name!r} is registered twice")
        _REGISTRY[name] = Figure(name, listed_paper if paper is None else paper,
                                 listed_description if description is None else description, fn,
                                 tuple(listed_constructions if constructions is None else constructions), report_only)
        return fn

    return deco


def is_known(name: str) -> bool:
    """Whether ``name`` is a figure, without importing any figure module: listed in ``LISTING`` (every figure of
    ``FIGURE_MODULES``) or registered already (``register`` called by other code)."""
    return name in LISTING or name in _REGISTRY


def figures() -> dict[str, Figure]:
    """All registered figures (imports the figure modules on first use)."""
    for module in FIGURE_MODULES:
        importlib.import_module(module)
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> Figure:
    """The figure ``name``; imports only its module when ``LISTING`` names it."""
    if name in LISTING:
        importlib.import_module(LISTING[name][0])
        if name in _REGISTRY:
            return _REGISTRY[name]
    available = figures()
    if name not in available:
        raise ValueError(f"figure={name!r} is unknown; `dpjax reproduce --list` shows {tuple(available)}")
    return available[name]
