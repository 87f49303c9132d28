"""dpjax: a JAX-compiled experiment engine for differentially private federated optimization.

Silos are a ``vmap`` axis, rounds a ``lax.scan`` and independent runs a second ``vmap`` axis, so a whole grid compiles
into one XLA program; every random draw derives from the run's key. A pure-Python accounting layer certifies each run
from the same configuration that drives it, naming the accountant, sampling scheme and neighbouring relation.

Entry points:

* ``dpjax.primitives``: per-example clipping (``per_example_clipped_sum``, ghost norms), Gaussian noise, sampling,
  projection and the P_1D / P_vec shuffle protocols, usable in your own JAX code.
* ``dpjax.list_algorithms()``: every registered algorithm family by the name sweep configurations and the command line
  use, with a line each (e.g. ``isrl-mbsgd``, ``dp-sgd``, ``diff2-gd``).
* ``dpjax.algorithms``: one algorithm family per module (frozen config, pure ``init``/``step``,
  ``privacy(silo_sizes, hparams) -> PrivacySpec``); every family class and its hyperparameters (``NoisyMbSgd`` /
  ``MbSgdHParams``, ``DpSgdGeneral`` / ``DpSgdHParams``, ...) import from there.
* ``dpjax.engine``: ``SiloData`` (padded silos), ``run`` / ``run_many`` / ``run_grid`` (one compiled program per shape)
  and their ``RunResult`` (``.output`` the released parameters, ``.round_metrics`` and ``.eval_metrics`` arrays,
  ``.diverged_round``; a leading runs axis with ``run_many``).
* ``dpjax.accounting``: ``compute_epsilon`` / ``calibrate_noise`` of a ``GaussianSchedule`` and the papers' accountants
  (never imports jax).
* ``dpjax.sweep``: ``run_grid`` and resumable sweep directories (``dpjax sweep CONFIG``).
* ``dpjax.problems``, ``dpjax.data``, ``dpjax.user_level``, ``dpjax.auditing``: losses, loaders and federated splits,
  user-level output perturbation, empirical privacy audits.
* The ``dpjax`` command: ``run``, ``sweep``, ``plot``, ``reproduce`` (paper figures with a claims report), ``account``,
  ``audit`` and ``docs build`` (the documentation site, ``dpjax.docs``).

Start with the README's quickstart (``dpjax run isrl-mnist-trial``), ``dpjax --help`` for the commands,
``dpjax reproduce --list`` / ``dpjax sweep --list`` for what ships, and the documentation site (``dpjax docs build``)
for the per-paper pages and the API reference.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["list_algorithms", "__version__"]


def list_algorithms() -> dict[str, str]:
    """The registered algorithm families: ``{name: "Class: one-line description"}``, sorted by name.

    ``name`` is what a sweep config's ``algorithm =`` and ``dpjax sweep`` take; ``Class`` imports from
    ``dpjax.algorithms`` (its hyperparameters are ``Class.hparams_type``); the line is the registry
    entry's ``description`` (``dpjax.engine.registry.register_family``). dpjax's own families are read
    from their ``register_family`` lines without importing them (no jax); families registered at run
    time (outside dpjax) are listed from the registry::

        >>> import dpjax
        >>> dpjax.list_algorithms()["dp-sgd"]
        'DpSgd: central DP-SGD (Abadi et al.) with any optax optimizer, Poisson or fixed-size batches'
    """
    import sys

    from dpjax import algorithms

    declared = algorithms.declared_families()
    if declared is None:  # a registration the static reader cannot read: import the families
        algorithms.load_families()
        declared = {}
    out = {name: f"{cls}: {line}" for name, (cls, line) in declared.items()}
    registry = sys.modules.get("dpjax.engine.registry")  # imported iff anything is registered at run time
    if registry is not None:
        out.update({name: f"{e.cls.__name__}: {e.description}" for name, e in registry.ALGORITHMS.items()})
    return dict(sorted(out.items()))
