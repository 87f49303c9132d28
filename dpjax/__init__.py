"""dpjax: a JAX-compiled experiment engine for differentially private federated optimization.

Silos are a ``vmap`` axis, rounds a ``lax.scan`` and independent runs a second ``vmap`` axis, so a
whole grid compiles into one XLA program; every random draw derives from the run's key. A pure-Python
accounting layer certifies each run from the same configuration that drives it, naming the
accountant, sampling scheme and neighbouring relation.

Entry points:

* ``dpjax.primitives``: per-example clipping (``per_example_clipped_sum``, ghost norms), Gaussian
  noise, sampling, projection and the P_1D / P_vec shuffle protocols, usable in your own JAX code.
* ``dpjax.algorithms``: one algorithm family per module (frozen config, pure ``init``/``step``,
  ``privacy(silo_sizes, hparams) -> PrivacySpec``); ``dpjax.sweep.ALGORITHMS`` lists every family by
  the name configurations and the command line use.
* ``dpjax.engine``: ``SiloData`` (padded silos), ``run`` / ``run_many`` (one compiled program per
  shape) and their ``RunResult``.
* ``dpjax.accounting``: ``compute_epsilon`` / ``calibrate_noise`` of a ``GaussianSchedule`` and the
  papers' accountants (never imports jax).
* ``dpjax.sweep``: ``run_grid`` and resumable sweep directories (``dpjax sweep CONFIG``).
* ``dpjax.problems``, ``dpjax.data``, ``dpjax.user_level``, ``dpjax.auditing``: losses, loaders and
  federated splits, user-level output perturbation, empirical privacy audits.
* The ``dpjax`` command: ``run``, ``sweep``, ``plot``, ``reproduce`` (paper figures with a claims
  report), ``account``, ``audit`` and ``docs build`` (the documentation site, ``dpjax.docs``).
"""

__version__ = "0.1.0"
