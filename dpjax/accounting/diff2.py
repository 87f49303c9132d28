"""Rényi-DP accounting for DIFF2 (Murata & Suzuki, ICML 2023, Section 4 / Appendices B, C, E), pure Python.

Everything is with respect to one client's data set under **replace-one** adjacency inside the silo; the binding
client is the smallest one, so all calibration uses ``n_min`` (Props. 4.1/E.2 state n_p but calibrate with n_min).

* A DIFF2 round (restart or difference) is a Gaussian mechanism with noise std ``sigma x radius`` and sensitivity
  ``2 radius/(n P)``: the radius cancels and the round is ``(alpha, 2 alpha/(n^2 P^2 sigma^2))``-RDP (Lemma B.6).
  Composing ``m = ceil(R/T)`` restart and ``R - m`` difference rounds gives ``diff2_rdp``; Mironov's conversion
  (Lemma B.4) gives ``epsilon_at_alpha``.
* **paper** mode (Prop. 4.1, the experiments' calibration): ``alpha_0 = 1 + ceil(2 log(1/delta)/eps)``,
  ``sigma1^2 = 4 u alpha_0 m/(n^2 P^2 eps)``, ``sigma2^2 = (4u/(u-1)) alpha_0 (R-m)/(n^2 P^2 eps)``, ``u = 1.25``;
  DP-GD uses the ``u -> 1``, ``T = 1`` closed form ``4 alpha_0 R/(n^2 P^2 eps)``.
* **tight** mode (labelled; not the paper's): the optimal real ``alpha`` in Lemma B.4 in closed form
  (``tight_epsilon_from_slope``) and its inverse (``tight_slope``), same ``u`` split.
* DIFF2-BVR-L-SGD (Prop. E.2): local steps are without-replacement subsampled Gaussian mechanisms, amplified with
  Lemma B.7 (log space, integer ``alpha``), counted ``K ceil(R/P)`` times; ``sigma3`` by bisection on the
  local-step budget (or the closed form at the end of Appendix E, only where its batch-size condition holds).

``compose_epsilon`` evaluates the same quantities through the accounting layer (``GaussianSchedule.to_dp_event``
composed in ``dp_accounting``'s RDP accountant), an independent cross-check. Not accounted (as in the paper):
hyper-parameter tuning on the private data, the evaluation curves, normalisation statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from dpjax import _validate as v
from dpjax.accounting.schedules import GaussianSchedule

__all__ = [
    "MODES", "alpha0", "count_restarts", "rdp_gaussian", "rdp_diff2_round", "diff2_rdp", "epsilon_at_alpha",
    "tight_epsilon_from_slope", "tight_slope", "diff2_epsilon", "diff2_gd_sigmas", "dpgd_sigma",
    "rdp_subsampled_wor_gaussian", "lemma_b8_conditions", "lemma_b8_bound", "bvr_local_rdp", "diff2_bvr_rdp",
    "diff2_bvr_epsilon", "diff2_bvr_sigmas", "bvr_sigma3_closed_form", "compose_epsilon"
]

MODES = ("paper", "tight")


# ----------------------------------------------------------------------------- basics
def alpha0(eps: float, delta: float) -> int:
    """The paper's fixed Rényi order ``1 + ceil(2 log(1/delta)/eps)``."""
    eps = v.check_positive("eps", eps)
    delta = v.check_open_unit("delta", delta)
    return 1 + math.ceil(2.0 * math.log(1.0 / delta) / eps)


def count_restarts(num_rounds: int, restart_interval: int) -> int:
    """``m = ceil(R/T)``: rounds ``r`` in ``1..R`` with ``(r-1) mod T == 0``."""
    r = v.check_int("num_rounds", num_rounds, min_value=1)
    t = v.check_int("restart_interval", restart_interval, min_value=1)
    return -(-r // t)


def rdp_gaussian(alpha: float, noise_multiplier: float) -> float:
    """``alpha/(2 z^2)``, z = noise std / l2 sensitivity (Lemma B.6)."""
    if alpha <= 1:
        raise ValueError(f"alpha={alpha!r} must be > 1")
    z = v.check_nonnegative("noise_multiplier", noise_multiplier, allow_inf=True)
    if z == 0:
        return math.inf
    return alpha / (2.0 * z * z)


def rdp_diff2_round(alpha: float, sigma: float, n: int, num_silos: int) -> float:
    """RDP of one DIFF2 round: ``2 alpha/(n^2 P^2 sigma^2)`` (independent of C)."""
    n = v.check_int("n", n, min_value=1)
    p = v.check_int("num_silos", num_silos, min_value=1)
    sigma = v.check_nonnegative("sigma", sigma, allow_inf=True)
    return rdp_gaussian(alpha, sigma * n * p / 2.0)


def _check_common(num_rounds, restart_interval, n, num_silos):
    m = count_restarts(num_rounds, restart_interval)
    v.check_int("n", n, min_value=1), v.check_int("num_silos", num_silos, min_value=1)
    return m


def diff2_rdp(alpha: float, num_rounds: int, restart_interval: int, n: int, num_silos: int,
              sigma_restart: float, sigma_diff: float | None) -> float:
    """RDP of ``m`` restart and ``R - m`` rounds: ``2 alpha m/(n^2P^2 sigma1^2) + 2 alpha (R-m)/(n^2P^2 sigma2^2)``."""
    m = _check_common(num_rounds, restart_interval, n, num_silos)
    total = m * rdp_diff2_round(alpha, sigma_restart, n, num_silos)
    if num_rounds > m:
        if sigma_diff is None:
            raise ValueError(f"sigma_diff=None but there are {num_rounds - m} difference rounds")
        total += (num_rounds - m) * rdp_diff2_round(alpha, sigma_diff, n, num_silos)
    return total


def epsilon_at_alpha(rdp: float, alpha: float, delta: float) -> float:
    """Lemma B.4 (Mironov): ``rdp + log(1/delta)/(alpha - 1)``."""
    if alpha <= 1:
        raise ValueError(f"alpha={alpha!r} must be > 1")
    delta = v.check_open_unit("delta", delta)
    return rdp + math.log(1.0 / delta) / (alpha - 1.0)


def tight_epsilon_from_slope(slope: float, delta: float) -> float:
    """Min over real alpha > 1 of ``A alpha + log(1/delta)/(alpha-1)`` = ``A + 2 sqrt(A log(1/delta))``."""
    a = v.check_nonnegative("slope", slope, allow_inf=True)
    lg = math.log(1.0 / v.check_open_unit("delta", delta))
    return a + 2.0 * math.sqrt(a * lg)


def tight_slope(eps: float, delta: float) -> float:
    """The inverse of ``tight_epsilon_from_slope``: ``(sqrt(log(1/delta) + eps) - sqrt(log(1/delta)))^2``."""
    eps = v.check_positive("eps", eps)
    lg = math.log(1.0 / v.check_open_unit("delta", delta))
    return (math.sqrt(lg + eps) - math.sqrt(lg)) ** 2


def diff2_epsilon(num_rounds: int, restart_interval: int, n: int, num_silos: int, sigma_restart: float,
                  sigma_diff: float | None, delta: float, mode: str = "paper", eps_target: float | None = None,
                  ) -> float:
    """Epsilon of DIFF2-GD / DP-GD (``restart_interval = 1``): ``mode="paper"``: Lemma B.4 at the fixed order
    ``alpha_0(eps_target, delta)`` (Prop. 4.1); ``mode="tight"``: the optimal real order
    (``tight_epsilon_from_slope``)."""
    v.check_choice("mode", mode, MODES)
    slope = diff2_rdp(1.0 + 1.0, num_rounds, restart_interval, n, num_silos, sigma_restart, sigma_diff) / 2.0
    if mode == "tight":
        return tight_epsilon_from_slope(slope, delta)
    if eps_target is None:
        raise ValueError("eps_target=None: mode='paper' evaluates Lemma B.4 at alpha_0(eps_target, delta)")
    a0 = alpha0(eps_target, delta)
    return epsilon_at_alpha(slope * a0, a0, delta)


def diff2_gd_sigmas(eps: float, delta: float, num_rounds: int, restart_interval: int, n_min: int,
                    num_silos: int, u: float = 1.25, mode: str = "paper") -> tuple[float, float | None]:
    """Noise multipliers ``(sigma1, sigma2)`` of DIFF2-GD for target (eps, delta).

    Paper (Prop. 4.1): ``sigma1^2 = 4 u alpha_0 m/(n^2P^2 eps)``, ``sigma2^2 = (4u/(u-1)) alpha_0 (R-m)/(n^2P^2 eps)``.
    Tight (``tight_slope``): ``sigma1^2 = 2 u m/(n^2P^2 A*)``, ``sigma2^2 = (2u/(u-1))(R-m)/(n^2P^2 A*)``.
    ``restart_interval = 1`` returns DP-GD's ``(sigma, None)`` (u -> 1); ``sigma2`` is None without difference rounds.
    """
    v.check_choice("mode", mode, MODES)
    m = _check_common(num_rounds, restart_interval, n_min, num_silos)
    if restart_interval == 1:
        return dpgd_sigma(eps, delta, num_rounds, n_min, num_silos, mode), None
    u = v.check_real("u", u)
    if not u > 1:
        raise ValueError(f"u={u!r} must be > 1 (budget split 1/u : (u-1)/u)")
    npsq = (n_min * num_silos) ** 2
    scale = 4.0 * alpha0(eps, delta) / (npsq * eps) if mode == "paper" else 2.0 / (npsq * tight_slope(eps, delta))
    return math.sqrt(u * m * scale), math.sqrt(u / (u - 1.0) * (num_rounds - m) * scale) if num_rounds > m else None


def dpgd_sigma(eps: float, delta: float, num_rounds: int, n_min: int, num_silos: int, mode: str = "paper") -> float:
    """DP-GD: ``sigma^2 = 4 alpha_0 R/(n^2P^2 eps)`` (paper) or ``2R/(n^2P^2 A*)`` (tight)."""
    v.check_choice("mode", mode, MODES)
    r = v.check_int("num_rounds", num_rounds, min_value=1)
    npsq = (v.check_int("n_min", n_min, min_value=1) * v.check_int("num_silos", num_silos, min_value=1)) ** 2
    if mode == "paper":
        return math.sqrt(4.0 * alpha0(eps, delta) * r / (npsq * eps))
    return math.sqrt(2.0 * r / (npsq * tight_slope(eps, delta)))


# ----------------------------------------------------------------------------- Lemma B.7
def _log_binom(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _log_expm1(x: float) -> float:
    """log(e^x - 1) without overflow (x > 0)."""
    return x + math.log1p(-math.exp(-x)) if x > 0 else -math.inf


def _logsumexp(xs: Sequence[float]) -> float:
    m = max(xs)
    return -math.inf if m == -math.inf else m + math.log(sum(math.exp(x - m) for x in xs))


def rdp_subsampled_wor_gaussian(alpha: int, gamma: float, base_rdp: Callable[[int], float]) -> float:
    """Lemma B.7 (Wang, Balle & Kasiviswanathan 2019, Thm 9) for a Gaussian base mechanism (``eps(inf) = inf``,
    so every ``min{2, .}`` is 2), in log space: ``eps'(alpha) = 1/(alpha-1) log(1 + gamma^2 C(alpha,2)
    min{4(e^{eps(2)}-1), 2 e^{eps(2)}} + 2 sum_{j=3}^alpha gamma^j C(alpha,j) e^{(j-1) eps(j)})``, then
    ``min(eps'(alpha), eps(alpha))`` (subsampling never hurts under replace-one)."""
    a = v.check_int("alpha", alpha, min_value=2)
    g = v.check_probability("gamma", gamma)
    if g == 0:
        return 0.0
    e2 = base_rdp(2)
    if math.isinf(e2):
        return math.inf
    lg = math.log(g)
    second = min(math.log(4.0) + _log_expm1(e2), math.log(2.0) + e2)
    terms = [0.0, 2 * lg + _log_binom(a, 2) + second]
    for j in range(3, a + 1):
        terms.append(j * lg + _log_binom(a, j) + (j - 1) * base_rdp(j) + math.log(2.0))
    return min(_logsumexp(terms) / (a - 1), base_rdp(a))


def lemma_b8_conditions(alpha: int, gamma: float, base_rdp: Callable[[float], float], c: float = 1.0) -> bool:
    """Whether Lemma B.8 applies: ``eps(alpha) <= 1/3 and <= log(1/(2 gamma alpha))``, ``gamma <= eps(2)/(c alpha)``."""
    ea = base_rdp(alpha)
    return (ea <= 1.0 / 3.0 and 2 * gamma * alpha < 1 and ea <= math.log(1.0 / (2 * gamma * alpha))
            and gamma <= base_rdp(2) / (c * alpha))


def lemma_b8_bound(alpha: int, gamma: float, base_rdp: Callable[[float], float], c: float = 1.0) -> float:
    """Lemma B.8's ``(2/3)(4 + e/c) gamma^2 alpha^2 eps(2)/(alpha-1)`` (a bound only if ``lemma_b8_conditions``)."""
    return (2.0 / 3.0) * (4.0 + math.e / c) * gamma**2 * alpha**2 * base_rdp(2) / (alpha - 1)


def bvr_local_rdp(alpha: int, sigma_local: float, batch_size: int, n: int) -> float:
    """Amplified RDP of one BVR local step: Lemma B.7 with ``eps(j) = 2 j/(b^2 sigma3^2)``, gamma = b/n."""
    b = v.check_int("batch_size", batch_size, min_value=1)
    n = v.check_int("n", n, min_value=b)
    s = v.check_nonnegative("sigma_local", sigma_local, allow_inf=True)
    return math.inf if s == 0 else rdp_subsampled_wor_gaussian(alpha, b / n, lambda j: 2.0 * j / (b * b * s * s))


def _local_count(num_rounds, num_silos, local_steps):
    return local_steps * math.ceil(num_rounds / num_silos)


def diff2_bvr_rdp(alpha: int, num_rounds: int, restart_interval: int, local_steps: int, batch_size: int,
                  n: int, num_silos: int, sigma_restart: float, sigma_diff: float | None, sigma_local: float) -> float:
    """RDP of DIFF2-BVR-L-SGD (Prop. E.2): the DIFF2 rounds (``diff2_rdp``) + ``K ceil(R/P)`` amplified local steps."""
    k = v.check_int("local_steps", local_steps, min_value=1)
    base = diff2_rdp(alpha, num_rounds, restart_interval, n, num_silos, sigma_restart, sigma_diff)
    return base + _local_count(num_rounds, num_silos, k) * bvr_local_rdp(alpha, sigma_local, batch_size, n)


def diff2_bvr_epsilon(num_rounds, restart_interval, local_steps, batch_size, n, num_silos, sigma_restart, sigma_diff,
                      sigma_local, delta, mode="paper", eps_target=None, max_order: int = 256) -> float:
    """Epsilon of DIFF2-BVR-L-SGD: at ``alpha_0`` (paper) or min over integer orders 2..max_order (tight)."""
    v.check_choice("mode", mode, MODES)
    f = lambda a: diff2_bvr_rdp(a, num_rounds, restart_interval, local_steps, batch_size, n,  # noqa: E731
                                num_silos, sigma_restart, sigma_diff, sigma_local)
    if mode == "paper":
        if eps_target is None:
            raise ValueError("eps_target=None: mode='paper' evaluates at alpha_0(eps_target, delta)")
        a0 = alpha0(eps_target, delta)
        return epsilon_at_alpha(f(a0), a0, delta)
    return min(epsilon_at_alpha(f(a), a, delta) for a in range(2, max_order + 1))


def bvr_sigma3_closed_form(eps: float, delta: float, num_rounds: int, local_steps: int, batch_size: int,
                           n_min: int, num_silos: int) -> tuple[float, bool]:
    """The closed-form ``sigma3`` at the end of Appendix E (Lemma B.8 with c = 1, u1 = u2 = 3) and whether its
    batch-size condition holds: ``sigma3^2 = max{(8/3)(4+e) alpha_0^2/(alpha_0-1) 6 K ceil(R/P)/(n^2 eps),
    6 alpha_0/b^2}``, valid only if ``b <= min{n/(2 e alpha_0), (4 n/(alpha_0 sigma3^2))^{1/3}}``."""
    a0 = alpha0(eps, delta)
    kc = _local_count(num_rounds, num_silos, local_steps)
    s2 = max((8.0 / 3.0) * (4 + math.e) * a0**2 / (a0 - 1) * 6 * kc / (n_min**2 * eps), 6.0 * a0 / batch_size**2)
    ok = batch_size <= min(n_min / (2 * math.e * a0), (4.0 * n_min / (a0 * s2)) ** (1.0 / 3.0))
    return math.sqrt(s2), ok


def diff2_bvr_sigmas(eps: float, delta: float, num_rounds: int, restart_interval: int, local_steps: int,
                     batch_size: int, n_min: int, num_silos: int, u1: float = 3.0, u2: float = 3.0,
                     method: str = "bisection", rtol: float = 1e-9) -> tuple[float, float | None, float]:
    """``(sigma1, sigma2, sigma3)`` of Prop. E.2 (paper mode, fixed alpha_0).

    ``sigma1^2 = 4 u1 alpha_0 m/(n^2P^2 eps)``, ``sigma2^2 = 4 u2 alpha_0 (R-m)/(n^2P^2 eps)``, and the smallest
    ``sigma3`` with ``2 K ceil(R/P) eps'_3(alpha_0) <= (1 - 1/u1 - 1/u2) eps`` (bisection on the exact Lemma B.7
    bound; ``method="closed-form"``: ``bvr_sigma3_closed_form``, refused where its batch-size condition fails).
    """
    v.check_choice("method", method, ("bisection", "closed-form"))
    if not (u1 > 1 and u2 > 1 and 1 / u1 + 1 / u2 < 1):
        raise ValueError(f"u1={u1!r}, u2={u2!r} must be > 1 with 1/u1 + 1/u2 < 1")
    m = _check_common(num_rounds, restart_interval, n_min, num_silos)
    a0 = alpha0(eps, delta)
    npsq = (n_min * num_silos) ** 2
    s1 = math.sqrt(4 * u1 * a0 * m / (npsq * eps))
    s2 = math.sqrt(4 * u2 * a0 * (num_rounds - m) / (npsq * eps)) if num_rounds > m else None
    if method == "closed-form":
        s3, ok = bvr_sigma3_closed_form(eps, delta, num_rounds, local_steps, batch_size, n_min, num_silos)
        if not ok:
            raise ValueError(f"batch_size={batch_size} exceeds min{{n/(2 e alpha_0), (4 n/(alpha_0 sigma3^2))^(1/3)}}: "
                             "the closed-form sigma3 of Appendix E is not valid")
        return s1, s2, s3
    budget = (1 - 1 / u1 - 1 / u2) * eps
    kc = _local_count(num_rounds, num_silos, local_steps)
    ok = lambda s: 2 * kc * bvr_local_rdp(a0, s, batch_size, n_min) <= budget  # noqa: E731
    lo, hi = 1e-6, 1.0
    while not ok(hi):
        hi *= 2
        if hi > 1e12:
            raise ValueError("no sigma3 meets the local budget")
    while ok(lo):
        lo /= 2
    while hi / lo > 1 + rtol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return s1, s2, hi


# ----------------------------------------------------------------------------- via the accounting layer
def compose_epsilon(schedules: Sequence[GaussianSchedule], delta: float, orders: Sequence[float] | None = None,
                    conversion: str = "mironov") -> float:
    """Epsilon of a composition of ``GaussianSchedule``s (e.g. a DIFF2 algorithm's
    ``privacy(silo_sizes, hparams).schedules``) by RDP: their RDP curves (as ``compute_epsilon(..., "rdp")``
    computes them) are added at each order (Lemma B.3). ``conversion="mironov"`` (Lemma B.4, the paper's)
    minimises ``rdp(alpha) + log(1/delta)/(alpha-1)`` over the orders; ``"best"`` also tries ``dp_accounting``'s
    improved conversion and returns the smaller (both valid). The general form (PLD too) is
    ``dpjax.accounting.compute_epsilon(schedules, delta, accountant)``; both refuse mixed relations, units or groups.
    """
    from dp_accounting.rdp import rdp_privacy_accountant as rpa

    from dpjax.accounting import tight

    delta = v.check_open_unit("delta", delta)
    v.check_choice("conversion", conversion, ("mironov", "best"))
    scheds = tight.check_composable(schedules)
    if scheds[0].group_size != 1:
        raise ValueError(f"group_size={scheds[0].group_size} has no RDP curve; use "
                         "dpjax.accounting.compute_epsilon(schedules, delta) (group conversion)")
    orders = [float(a) for a in (rpa.DEFAULT_RDP_ORDERS if orders is None else orders)]
    orders, rdp, _ = tight.rdp_curve(scheds, orders)
    eps = min(float(r) + math.log(1 / delta) / (a - 1) for a, r in zip(orders, rdp))
    if conversion == "best":
        eps = min(eps, float(rpa.compute_epsilon(orders, rdp, delta)[0]))
    return eps
