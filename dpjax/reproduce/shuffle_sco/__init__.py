"""Validation figures for shuffle-private SCO (Cheu, Joseph, Mao & Peng, ICLR 2022).

The paper has no experiments; Table 1 is its only table. Two figures check its claims on the engine:

* ``shuffle-sco-protocols``: P_1D / P_vec (Algorithms 1-2, Lemma 3.1, Theorem 3.2) as simulated by
  ``dpjax.algorithms.shuffle_sco``: empirical mean and variance against the exact formulas (z-scores, chi^2 intervals),
  bit-level vs count-level simulators (KS test and the exact count pmf), the exact hockey-stick privacy profile of P_1D
  on small inputs against the claimed (eps (2/g + 1), delta), and a Monte-Carlo distinguishing audit (threshold test on
  the analyzer's output, Clopper-Pearson) whose eps lower bound must stay below the claim.
* ``shuffle-sco-rates``: excess population loss against n and d on synthetic SCO instances with known optimum
  (non-smooth absolute regression, smooth logistic regression, strongly convex squared distance), for every protocol,
  with fitted log-log slopes compared with Table 1's exponents (+-0.15) by the verdict rule of
  ``dpjax.sweep.select.slope_verdict`` (>= 4 points over >= 1 decade, 90 % bootstrap interval over seeds; every point
  keeps its seeds' values in results.csv, and ``--report-only`` re-judges a kept run). The n-range of each protocol is
  chosen from its explicit bound (``dpjax.accounting.shuffle_sco`` plans): the n where the bound lies in [0.01, 0.3] L D
  (private term neither negligible nor saturated), in lemma_opt mode. P_vec is replaced by its variance-matched Gaussian
  surrogate for the sweeps (``aggregator="matched-gaussian"``: same mean and per-coordinate variance as the count-level
  protocol, whose binomial noise has 1e5-1e11 trials) and one configuration per protocol is re-run with the count-level
  P_vec to check that the two agree. Central-DP (noisy GD, Gaussian mechanism) and local-DP (per-user Gaussian SGD)
  baselines share the axes.
* ``shuffle-sco-regimes``: the rows of ``shuffle-sco-rates`` whose slopes are not measurable at its common eps = 0.9 and
  n <= 3e5, re-run with eps, n-range and AC-SA schedule (Lan's or Theorem 4.3's) chosen per protocol (``REGIMES``), with
  the saturation level taken from the instance (0.3 x the excess loss of theta_0) instead of 0.3 L D; plus the two rows
  with their own instances: strongly convex non-smooth (phased smoothed P_AGD, Theorem 4.8, on ridge + noiseless
  absolute regression, closed-form optimum) and fully interactive convex (smoothed P_GD, Theorem 4.9, T = n rounds of
  all n users, on axis-aligned features whose full-batch gradient is a function of d counts, ``pgd_axis_run``).

The package keeps each part in its own module: ``config`` (privacy parameters, instances, protocols, regimes),
``measure`` (one point of one protocol), ``claims`` (slope claims), ``outputs`` (results files, plots, the rates report)
and one module per figure: ``protocols``, ``rates``, ``regimes``. Importing the package registers the three figures.
"""

from dpjax.reproduce.shuffle_sco import claims, config, measure, outputs, protocols, rates, regimes  # noqa: F401

__all__: list[str] = []
