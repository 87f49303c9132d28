"""Empirical privacy auditing: canary experiments that lower-bound epsilon.

* ``stats``: Clopper-Pearson bounds and the epsilon lower bound of a threshold test.
* ``audit``: ``CanaryAudit`` (mechanism, neighbouring datasets, score, certificate,
  mutants) and ``run_audit`` (vmapped keyed runs, threshold chosen on a separate half).
* ``mechanisms``: the catalogue of dpjax's private mechanisms (``build_audit``); ``fedavg_ftrl``: its
  audits of DP-FedAvg (adaptive clipping) and DP-FTRL (tree aggregation) through the families' steps.
* ``exact``: exact hockey-stick divergences for computable output laws.
* ``report``: markdown and JSON reports; ``cli``: ``dpjax audit``.
"""

from dpjax.auditing.stats import (
    EpsilonLowerBound,
    clopper_pearson,
    clopper_pearson_upper,
    epsilon_from_rates,
    epsilon_lower_bound,
    select_and_bound,
    select_threshold,
)

__all__ = [
    "EpsilonLowerBound",
    "clopper_pearson",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lower_bound",
    "select_and_bound",
    "select_threshold",
]
