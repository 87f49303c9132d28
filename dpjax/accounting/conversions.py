"""Conversions between privacy notions (ISRL-DP paper Section 1 and Appendix C).

* ISRL-DP (eps0, delta0) => central DP (eps0, delta0) (post-processing + conditioning).
* ISRL-DP (eps0, delta0) => user-level DP with the silo as the user, by group
  privacy over the n records: (n eps0, n e^{(n-1) eps0} delta0) (paper's form),
  or the tighter delta0 (e^{n eps0} - 1)/(e^{eps0} - 1) (induction; `form="tight"`).
* Hybrid design (Appendix D.3.5): eps0 = eps/n, delta0 = delta/(4n).
* Central DP / user-level DP imply NO ISRL-DP guarantee (not offered).
"""

from __future__ import annotations

import math

from dpjax import _validate as v

__all__ = ["group_privacy", "isrl_to_central", "isrl_to_user_level", "hybrid_isrl_budget"]


def group_privacy(epsilon: float, delta: float, group_size: int, form: str = "paper") -> tuple[float, float]:
    """(eps, delta)-DP => (g eps, delta')-DP for groups of g; delta' = g e^{(g-1)eps} delta ("paper")
    or delta (e^{g eps} - 1)/(e^eps - 1) ("tight"; equals g delta at eps = 0). delta' is capped at 1."""
    eps = v.check_nonnegative("epsilon", epsilon)
    d = v.check_probability("delta", delta)
    g = v.check_int("group_size", group_size, min_value=1)
    v.check_choice("form", form, ("paper", "tight"))
    if d == 0:
        return g * eps, 0.0
    if form == "paper":
        log_d = math.log(g) + (g - 1) * eps + math.log(d)
    else:
        log_factor = math.log(g) if eps == 0 else (g * eps + math.log1p(-math.exp(-g * eps)) - eps - math.log1p(-math.exp(-eps)))
        log_d = log_factor + math.log(d)
    return g * eps, 1.0 if log_d >= 0 else math.exp(log_d)


def isrl_to_central(eps0: float, delta0: float) -> tuple[float, float]:
    """ISRL-DP (eps0, delta0) => central DP (eps0, delta0)."""
    return v.check_nonnegative("eps0", eps0), v.check_probability("delta0", delta0)


def isrl_to_user_level(eps0: float, delta0: float, n: int, form: str = "paper") -> tuple[float, float]:
    """ISRL-DP (eps0, delta0) with n records per silo => user-level (silo-level) DP by group privacy."""
    return group_privacy(eps0, delta0, v.check_int("n", n, min_value=1), form)


def hybrid_isrl_budget(epsilon: float, delta: float, n: int) -> tuple[float, float]:
    """Appendix D.3.5 hybrid ISRL-DP + user-level design: eps0 = eps/n, delta0 = delta/(4n)."""
    eps = v.check_positive("epsilon", epsilon)
    d = v.check_open_unit("delta", delta)
    n = v.check_int("n", n, min_value=1)
    return eps / n, d / (4 * n)
