"""dpjax: a JAX-compiled experiment engine for differentially private federated optimization.

Silos are a ``vmap`` axis, rounds a ``lax.scan`` and independent runs a second ``vmap`` axis, so a
whole grid compiles into one XLA program; every random draw derives from the run's key. A pure-Python
accounting layer certifies each run from the same configuration that drives it, naming the
accountant, sampling scheme and neighbouring relation.

Entry points:

* ``dpjax.primitives``: per-example clipping (``per_example_clipped_sum``, ghost norms), Gaussian
  noise, sampling, projection and the P_1D / P_vec shuffle protocols, usable in your own JAX code.
* ``dpjax.list_algorithms()``: every registered algorithm family by the name sweep configurations and
  the command line use, with a line each (e.g. ``isrl-mbsgd``, ``dp-sgd``, ``diff2-gd``).
* ``dpjax.algorithms``: one algorithm family per module (frozen config, pure ``init``/``step``,
  ``privacy(silo_sizes, hparams) -> PrivacySpec``); every family class and its hyperparameters
  (``NoisyMbSgd`` / ``MbSgdHParams``, ``DpSgdGeneral`` / ``DpSgdHParams``, ...) import from there.
* ``dpjax.engine``: ``SiloData`` (padded silos), ``run`` / ``run_many`` / ``run_grid`` (one compiled
  program per shape) and their ``RunResult`` (``.output`` the released parameters, ``.round_metrics``
  and ``.eval_metrics`` arrays, ``.diverged_round``; a leading runs axis with ``run_many``).
* ``dpjax.accounting``: ``compute_epsilon`` / ``calibrate_noise`` of a ``GaussianSchedule`` and the
  papers' accountants (never imports jax).
* ``dpjax.sweep``: ``run_grid`` and resumable sweep directories (``dpjax sweep CONFIG``).
* ``dpjax.problems``, ``dpjax.data``, ``dpjax.user_level``, ``dpjax.auditing``: losses, loaders and
  federated splits, user-level output perturbation, empirical privacy audits.
* The ``dpjax`` command: ``run``, ``sweep``, ``plot``, ``reproduce`` (paper figures with a claims
  report), ``account``, ``audit`` and ``docs build`` (the documentation site, ``dpjax.docs``).

Start with the README's quickstart (``dpjax run isrl-mnist-trial``), ``dpjax --help`` for the commands,
``dpjax reproduce --list`` / ``dpjax sweep --list`` for what ships, and the documentation site
(``dpjax docs build``) for the per-paper pages and the API reference.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["list_algorithms", "DESCRIPTIONS", "__version__"]


#: One line per registered family name (``list_algorithms`` adds the class); tests/test_api.py checks the
#: names against the registry, so a new family adds its line here.
DESCRIPTIONS = {
    "isrl-mbsgd": "ISRL-DP Noisy MB-SGD (Lowy & Razaviyayn, Algorithm 1): per-silo clipped, noised minibatch gradients",
    "mbsgd": "non-private MB-SGD, the twin of isrl-mbsgd",
    "isrl-accelerated": "accelerated ISRL-DP MB-SGD (one-pass Theorem 3.1, ERM Theorem 4.1, multi-stage)",
    "accelerated": "non-private accelerated MB-SGD, the twin of isrl-accelerated",
    "isrl-local-sgd": "ISRL-DP Local SGD: noisy local steps on each silo, averaged each round",
    "local-sgd": "non-private Local SGD, the twin of isrl-local-sgd",
    "fedavg": "non-private FedAvg (another name of local-sgd)",
    "isrl-shuffled": "shuffled ISRL-DP MB-SGD: silos' noisy updates through a shuffler (central shuffle-DP)",
    "shuffled": "non-private shuffled MB-SGD, the twin of isrl-shuffled",
    "sdp-accelerated": "SDP one-pass accelerated noisy MB-SGD (Lowy & Razaviyayn, Algorithm 6; P_vec sums)",
    "isrl-unbalanced": "ISRL-DP MB-SGD for unbalanced silos (Algorithm 7: per-silo K_i and noise z_i)",
    "unbalanced": "non-private MB-SGD on unbalanced silos, the twin of isrl-unbalanced",
    "shuffle-sgd": "P_SGD / P_GD / phased P_GD with shuffle-private P_vec sums (Cheu et al.), Gaussian baselines",
    "shuffle-acsa": "P_AGD, smoothed and phased P_AGD, pan-private AC-SA (Cheu et al.)",
    "diff2-gd": "DIFF2-GD (Murata & Suzuki): clipped, noised gradient differences with periodic restarts",
    "dp-gd": "DP-GD: DIFF2-GD restarting every round (a full clipped, noised gradient each round)",
    "gd": "non-private gradient descent, the twin of diff2-gd",
    "diff2-bvr": "DIFF2-BVR-L-SGD (Murata & Suzuki): DIFF2 with local variance-reduced SGD steps",
    "bvr-lsgd": "non-private BVR-L-SGD, the twin of diff2-bvr",
    "dp-sgd": "central DP-SGD (Abadi et al.) with any optax optimizer, Poisson or fixed-size batches",
    "sgd": "non-private SGD with the same optimizer, the twin of dp-sgd",
    "dpsgd-general": "DP-SGD-General (van Dijk et al., Algorithm 1): shuffling / subsampling, individual or "
                     "batch clipping",
    "sgd-general": "non-private SGD-General, the twin of dpsgd-general",
    "dp-fedavg": "DP-FedAvg with adaptive quantile clipping (Andrew et al.), user-level DP",
    "fedopt": "non-private FedOpt, the twin of dp-fedavg",
    "dp-ftrl": "DP-FTRL with tree aggregation, restarted every epoch (Kairouz et al.)",
    "ftrl": "non-private FTRL-order SGD, the twin of dp-ftrl",
}


def list_algorithms() -> dict[str, str]:
    """The registered algorithm families: ``{name: "Class: one-line description"}``, sorted by name.

    ``name`` is what a sweep config's ``algorithm =`` and ``dpjax sweep`` take; ``Class`` imports from
    ``dpjax.algorithms`` (its hyperparameters are ``Class.hparams_type``). Imports every family module
    (jax)::

        >>> import dpjax
        >>> dpjax.list_algorithms()["dp-sgd"]
        'DpSgd: central DP-SGD (Abadi et al.) with any optax optimizer, Poisson or fixed-size batches'
    """
    import inspect

    from dpjax.algorithms import load_families
    from dpjax.engine import registry

    load_families()
    out = {}
    for name, entry in sorted(registry.ALGORITHMS.items()):
        line = DESCRIPTIONS.get(name)
        if line is None:  # a family registered outside dpjax: its docstring's first sentence
            line = " ".join((inspect.getdoc(entry.cls) or "no description").split("\n\n")[0].split())
        out[name] = f"{entry.cls.__name__}: {line}"
    return out
