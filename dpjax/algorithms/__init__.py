"""Algorithms: one family per module, each a frozen config with pure ``init``/``step`` and
``privacy(silo_sizes, hparams) -> PrivacySpec``, run by ``dpjax.engine.run`` / ``run_many`` / ``run_grid``.

Every family class and its hyperparameter class (``Family.hparams_type``, built with
``HParams.create(...)``) is importable from here; ``dpjax.list_algorithms()`` names the registered
families (the names sweep configs and ``dpjax sweep`` use) with a line each.

* ``NoisyMbSgd`` (``MbSgdHParams``): ISRL-DP Noisy MB-SGD (Lowy & Razaviyayn, Algorithm 1)
* ``AcceleratedMbSgd`` (``AcceleratedHParams``): accelerated, one-pass, multi-stage and ERM variants
* ``LocalSgd`` (``MbSgdHParams``): ISRL-DP Local SGD; the FedAvg baseline
* ``ShuffledNoisyMbSgd`` (``MbSgdHParams``): shuffled ISRL-DP MB-SGD
* ``SdpOnePassAccelerated`` (``SdpHParams``): SDP one-pass accelerated MB-SGD (Algorithm 6)
* ``UnbalancedNoisyMbSgd`` (``UnbalancedHParams``): unbalanced silos (Algorithm 7)
* ``ShuffleSgd`` / ``ShuffleAcsa`` (``ScoHParams``): P_SGD, P_GD, P_AGD, AC-SA (Cheu et al.)
* ``Diff2GD`` / ``Diff2BvrLSgd`` (``Diff2HParams``): DIFF2-GD, DP-GD, GD, DIFF2-BVR-L-SGD (Murata & Suzuki)
* ``DpSgd`` (``DpSgdHParams``): central DP-SGD with an optax optimizer
* ``DpSgdGeneral`` (``DpSgdHParams``): DP-SGD-General (van Dijk et al., Algorithm 1)
* ``DpFedAvg`` (``FedAvgHParams``): DP-FedAvg with adaptive clipping (Andrew et al.)
* ``DpFedAvgBandMf`` (``BandMfFedAvgHParams``): DP-FedAvg with BandMF noise, cyclic Poisson client groups
* ``DpFtrl`` (``FtrlHParams``): DP-FTRL with tree aggregation (Kairouz et al.)
* ``UserLevelDpSgd`` (``DpSgdHParams``): user-level DP-SGD on record data, ULS or ELS (Charles et al.)

The names are imported on first use (the family modules import jax).
"""

from __future__ import annotations

import importlib

#: public name -> module defining it
_EXPORTS = {
    "NoisyMbSgd": "isrl_mbsgd", "MbSgdHParams": "isrl_mbsgd",
    "AcceleratedMbSgd": "accelerated", "AcceleratedHParams": "accelerated",
    "LocalSgd": "local_sgd",
    "ShuffledNoisyMbSgd": "shuffled", "SdpOnePassAccelerated": "shuffled", "SdpHParams": "shuffled",
    "UnbalancedNoisyMbSgd": "unbalanced", "UnbalancedHParams": "unbalanced",
    "ShuffleSgd": "shuffle_sco", "ShuffleAcsa": "shuffle_sco", "ScoHParams": "shuffle_sco",
    "Diff2GD": "diff2", "Diff2BvrLSgd": "diff2", "Diff2HParams": "diff2",
    "DpSgd": "dp_sgd", "DpSgdGeneral": "dpsgd_general", "DpSgdHParams": "dpsgd_general",
    "DpFedAvg": "dp_fedavg", "FedAvgHParams": "dp_fedavg",
    "DpFedAvgBandMf": "band_mf_fedavg", "BandMfFedAvgHParams": "band_mf_fedavg",
    "DpScaffold": "dp_scaffold", "ScaffoldHParams": "dp_scaffold",
    "DpFtrl": "dp_ftrl", "FtrlHParams": "dp_ftrl",
    "UserLevelDpSgd": "user_level_dpsgd",
}

__all__ = [*_EXPORTS, "algorithm_entry", "load_families"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'dpjax.algorithms' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))


def load_families() -> None:
    """Imports every module of ``dpjax.algorithms``: each registers its families in
    ``dpjax.engine.registry.ALGORITHMS`` (``register_family`` at the end of the module)."""
    import pkgutil

    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")


def declared_families() -> dict[str, tuple[str, str]] | None:
    """``{name: (class name, description)}`` of every family (and twin) this package registers, read
    from the ``register_family(NAME, CLASS, DESCRIPTION, twin={TWIN: DESCRIPTION})`` lines at the end
    of its modules without importing them (no jax): the literals the registry entries are built from.
    ``None`` when a registration is not of that literal form (then list the imported registry)."""
    import ast
    import pathlib

    out = {}
    for path in sorted(pathlib.Path(__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        called = lambda n: getattr(n.func, "id", getattr(n.func, "attr", None))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and called(n) in ("register_family", "register_algorithm")]
        top = [n.value for n in tree.body if isinstance(n, ast.Expr) and n.value in calls]
        if len(top) != len(calls):  # a decorator, a call inside a function, ...
            return None
        for call in top:
            twin = [k.value for k in call.keywords if k.arg == "twin"]
            try:
                name, cls, description = call.args
                name, description = ast.literal_eval(name), ast.literal_eval(description)
                twins = ast.literal_eval(twin[0]) if twin else {}
            except (ValueError, TypeError):  # not three positional arguments, or not literals
                return None
            if called(call) != "register_family" or not isinstance(cls, ast.Name) or not isinstance(twins, dict):
                return None
            out[name] = (cls.id, description)
            out.update({t: (cls.id, line) for t, line in twins.items()})
    return out


def algorithm_entry(name):
    """The registry entry of the algorithm ``name`` (``dpjax.engine.registry.AlgorithmEntry``), after
    ``load_families()``: the engine's registry only looks names up (it sits below the families)."""
    from dpjax.engine import registry

    load_families()
    return registry.get_algorithm(name)
