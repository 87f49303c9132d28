"""Empirical privacy auditing: canary experiments that lower-bound epsilon.

* ``stats``: Clopper-Pearson bounds and the epsilon lower bound of a threshold test.
* ``audit``: ``CanaryAudit`` (mechanism, neighbouring datasets, score, certificate, mutants) and ``run_audit`` (vmapped
  keyed runs, threshold chosen on a separate half).
* ``execute``: ``run_family``, the one way audits and privacy tests run a registered family (through
  ``dpjax.engine.run_many``), and the canary problems ``CanaryProbe`` / ``DifferenceProbe``.
* ``mechanisms``: the catalogue: one or more audits per registered private family, each running the family's own step
  (``build_audit``, ``FAMILY_AUDITS``); its builders, one module per paper (``isrl``, ``shuffle``, ``dpsgd``, ``diff2``,
  ``user_level``, ``fedavg_ftrl``), share the pieces of ``canaries`` (canary data, inputs, mutants, certificate, exact
  mixture epsilon).
* ``exact``: exact hockey-stick divergences for computable output laws (binomial counts, i.i.d. Gaussian-mixture
  releases, a canary in one of two releases).
* ``report``: markdown and JSON reports; ``cli``: ``dpjax audit``.
"""

from dpjax.auditing.stats import (EpsilonLowerBound, clopper_pearson, clopper_pearson_upper, epsilon_from_rates,
                                  epsilon_lower_bound, select_and_bound, select_threshold)

__all__ = ["EpsilonLowerBound", "clopper_pearson", "clopper_pearson_upper", "epsilon_from_rates", "epsilon_lower_bound",
           "select_and_bound", "select_threshold"]
