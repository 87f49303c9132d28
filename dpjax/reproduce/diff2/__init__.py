"""DIFF2 (Murata & Suzuki, ICML 2023) reproductions: Figs. 1-2 (regression) and Fig. 3 (classification).

``dpjax reproduce diff2-regression`` / ``diff2-classification`` (the paper's Section 6 and Appendix A).

Protocol (full mode, the paper's): P = 10 round-robin i.i.d. clients (``dpjax.data.diff2``), one-hidden-layer MLP with
10 softplus units (``U[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` init; the printed U[-sqrt(w_in), sqrt(w_in)] would be far
too wide), squared loss ``(pred - y)^2`` for regression (PyTorch's MSELoss) and softmax cross-entropy for
classification (the paper names no loss); R = 2000 rounds, delta = 1e-5, eps in {3, 5} (regression) / {3}
(classification); DP-GD: C1 in {1, 3, 10, 30, 100}; DIFF2-GD: (C1, C2) in {1, 3, 10, 30, 100}^2 and T in {0.003R,
0.01R, 0.03R, 0.1R}; step sizes 0.5^i, i = 0..9, with the patience rule (Appendix A): train loss evaluated every 20
rounds, a step size fails on NaN/inf or after 5 evaluations above 1.05 x best; the largest surviving one is kept; per
panel the configuration minimising that panel's criterion (min over checkpoints) is chosen (test-loss and accuracy
panels use the train-loss choice); 5 seeds (the seed controls split, partition, init, noise); one-sided paired t-test
(df = 4) on the per-seed minima, DIFF2-GD < DP-GD.

Noise: Prop. 4.1 "paper" calibration (u = 1.25; DP-GD the u -> 1, T = 1 closed form), noise multipliers from
``dpjax.accounting.diff2``; every configuration's epsilon is re-checked with ``compose_epsilon`` through the
algorithm's ``privacy``.

Implementation: one compiled program per dataset. All configurations of all algorithms (DIFF2-GD, DP-GD = T 1, GD = T
1 with C = inf and sigma = 0; both identities are tested bit-for-bit) and both epsilons are rows of one
``Diff2HParams`` batch, run by the executor ``dpjax.engine.run_grid`` in fixed-size chunks; the patience rule is
applied post hoc to the recorded traces (the same selection as stopping early, Appendix A).

Not accounted for in epsilon (as in the paper): the hyper-parameter search on private data, the evaluation curves, the
normalisation statistics. Forest Cover Type is not available offline; a9a (binary, 123 features) is the stand-in for
Fig. 3, next to KDD Cup 99 (10 %, 23 classes, one-hot symbolic columns). BlogFeedback uses the UCI training file only
(52,397 rows; the paper pooled the test files too, 60,021 rows).

Constructions (``--construction``): ``paper`` (default) is the above; ``authors`` is what the authors' public scripts
do (data and noise: ``dpjax.reproduce.diff2.authors_data``: ``load_authors_raw`` / ``authors_diff2_silos``,
``diff2_gd_sigmas_script``; step-size search: ``claims.authors_step_size_search``); experiments/diff2/README.md lists
every difference.

Quick mode: the same pipeline on subsampled datasets, fewer rounds and a reduced grid (``QUICK`` below); it is a
smoke-scale reproduction, not the paper's protocol, and its report says so.

The package keeps each part in its own module: ``config`` (protocols and per-run configurations), ``model`` (the MLP,
diagnostics, data splits), ``claims`` (selection and statistics), ``driver`` (one dataset's run), ``figures`` (outputs
and the registered figures) and ``authors_data`` (the authors' scripts' data and noise). Importing the package
registers both figures.
"""

from dpjax.reproduce.diff2 import claims, config, driver, figures, model  # noqa: F401

__all__: list[str] = []
