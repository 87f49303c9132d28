"""Demonstrations D1-D9 of Ghazi et al., "On User-Level Private Convex Optimization" (ICML 2023).

The paper has no experiments; these are numerical checks of its theorems on synthetic data (``dpjax reproduce
user-level-<name> [--quick]``):

==========================  ==========================================================================
figure                      checks
==========================  ==========================================================================
user-level-tail (D1)        Lemma 3.8's tail: exact hypergeometric tails (+-G e_1) and Monte Carlo (sphere)
user-level-deletion (D2)    Theorem 3.6: ||theta*(x) - theta*(x_{-n})|| ~ 1/(n sqrt(m)), bound holds w.p. 1-beta
user-level-noise (D3)       sigma of Algorithm 2, A2c, B1, B0 against m; crossover m* ~ 1e9
user-level-certificate (D4) Appendix C certificate pass rate, exchangeable vs heterogeneous users
user-level-convex-erm (D5)  Theorem 4.1 rate of Phased-ERM (rate-shape M'): slopes -1/2 in m, -1 in n, +1/2 in d
user-level-strongly-convex  Theorems 4.3/5.3 (A5, A6, rate-shape): ERM slopes -1 in m, -2 in n; SCO 1/(nm) term
(D6)
user-level-lower-bound (D7) Appendix D instance: A2 (rate-shape) error tracks d/(n^2 m); B1 flat in m
user-level-phased-sco (D8)  Algorithm 4 as printed plateaus (~R G N0/n); the equal split A4b keeps decreasing
user-level-audit (D9)       exact hockey-stick divergences of Algorithm 1 on neighbouring toy datasets <= delta
==========================  ==========================================================================

"Rate-shape" runs use the idealised mechanism M' of Theorem 4.1's proof (Gaussian noise of the theorem's shape sigma_i
= rho 2G/(lambda_i n sqrt(m)), no stability test). They are NOT private; with the certified constants the noise
multiplier is ~1e5-1e6 (D3), so the rates only show at m ~ 1e9. Every report says which. Slopes are least-squares fits
of log(metric) on log(parameter), compared with the theorem's exponent +-0.15 by the verdict rule of
``dpjax.sweep.select.slope_verdict`` (>= 4 points over >= 1 decade, 90 % bootstrap interval over the runs of each
cell; holds / differs / inconclusive). D1-D9 number these demonstrations; the mechanism names (A1-A6, A2c, A4b, B1,
B2) are listed with the paper's algorithm and theorem numbers at ``dpjax.accounting.user_level.MECHANISMS``. B0 is the
item-level output perturbation (sensitivity 2G/(mu n m)), shown for scale only: it is not user-level private.

The package keeps each part in its own module: ``config`` (constants), ``claims`` (slope claims), ``outputs``
(results, report and figures), and the demonstrations by topic: ``stability`` (D1-D4), ``rates`` (D5-D6),
``lower_bound`` (D7-D9). Importing the package registers every figure.
"""

from dpjax.reproduce.user_level import claims, config, lower_bound, outputs, rates, stability  # noqa: F401

__all__: list[str] = []
