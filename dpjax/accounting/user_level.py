"""User-level DP output perturbation (Ghazi et al., ICML 2023, Section 3).

Algorithm 1 (DelOutputPert) at (eps, delta) with target deletion sensitivity Delta: eps' = eps/2, delta' = delta/(e^eps
+ 2), kappa = ceil(1 + ln(1/delta')/eps') (rounded up: the paper's kappa need not be an integer), TDLap(eps', delta') on
{0..2 kappa} with pmf proportional to exp(-eps'|r - kappa|), Gaussian std sigma = sqrt(2 ln(2/delta')) 8 kappa
Delta/eps'. Guarantee: (eps, delta) user-level DP (replace-one-user; also add/remove-one-user, Section 2), including the
failure output. Schedules compose by basic composition over calls on the same users and parallel composition (max) over
disjoint user groups (the proofs of Theorems 4.1/5.1).

``privacy(mechanism, epsilon, delta, n=, m=, mode=)`` returns the ``PrivacySpec`` (``UserLevelPrivacy``) of one run of
Algorithm 1/2, A2c (Appendix C), Phased-ERM (Algorithm 3, Theorem 4.1), Phased-SCO (Algorithm 4 and the equal split A4b,
Theorem 5.1), Algorithms 5/6 (Theorems 4.3/5.3) and the baselines B1/B2; ``min_users`` the smallest n for which its
constants are defined.

Algorithm 1's stable set is computed exactly (every deletion set of <= 4 kappa + 1 users) or, in the polynomial-time
version of Appendix C, skipped when the Lemma C.1 certificate shows that S = {} is stable (the exact algorithm would
then release the same f(x) + N(0, sigma^2 I) for every R1: the same output law); when the certificate fails the paper
falls back to the exact algorithm. ``exact_feasible(n, kappa)`` decides from public quantities only whether that
fallback can run; where it cannot, the mechanisms refuse before reading the data (``exact_fallback_check``). Stopping as
"not releasable" on a failed certificate instead makes the stop a deterministic function of the data (an unbounded
privacy loss); it survives only as the explicit, NOT private ``mode='certificate-stop'`` (issue 23).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dpjax import _validate as v
from dpjax.accounting.schedules import PrivacyReport
from dpjax.accounting.gdp import gdp_delta
from dpjax.accounting.privacy_spec import PrivacySpec, StatedRelation

__all__ = [
    "UserLevelParams", "user_level_params", "tdlap_pmf", "user_level_audit", "phased_erm_params",
    "compose_user_level", "A1Params", "a1_params", "a1_test_params", "log_pair_count", "deletion_sensitivity_bound",
    "gamma_target", "certificate_sensitivity", "noise_multiplier", "b1_sigma", "crossover_m", "phased_sco_groups",
    "MAX_EXACT_USERS", "MAX_EXACT_EVALUATIONS", "exact_evaluations", "exact_feasible", "exact_fallback_check",
    "UserLevelPrivacy", "MECHANISMS", "privacy", "min_users"
]


@dataclass(frozen=True)
class UserLevelParams:
    epsilon: float
    delta: float
    eps_prime: float
    delta_prime: float
    kappa_raw: float
    kappa: int
    sigma_over_delta: float  # sigma / Delta
    n_min: int  # 8 kappa + 2 (Theorem 3.1's n >= C log(1/delta)/eps with C made explicit)

    @property
    def radius(self) -> int:
        """Robustness radius 4 kappa."""
        return 4 * self.kappa


def user_level_params(epsilon: float, delta: float) -> UserLevelParams:
    """kappa, sigma/Delta, eps', delta' of Algorithm 1; requires eps in (0, 1], delta in (0, 1/2]."""
    eps = v.check_positive("epsilon", epsilon)
    if eps > 1:
        raise ValueError(f"epsilon={epsilon!r} must be <= 1 (the paper's standing range)")
    d = v.check_open_unit("delta", delta)
    if d > 0.5:
        raise ValueError(f"delta={delta!r} must be <= 1/2")
    ep, dp = eps / 2, d / (math.exp(eps) + 2)
    raw = 1 + math.log(1 / dp) / ep
    kappa = math.ceil(raw - 1e-12)
    sigma = math.sqrt(2 * math.log(2 / dp)) * 8 * kappa / ep
    return UserLevelParams(eps, d, ep, dp, raw, kappa, sigma, 8 * kappa + 2)


def tdlap_pmf(eps: float, kappa: int) -> np.ndarray:
    """TDLap pmf on {0, ..., 2 kappa}: p(r) proportional to exp(-eps |r - kappa|)."""
    eps = v.check_positive("eps", eps)
    kappa = v.check_int("kappa", kappa, min_value=1)
    w = np.exp(-eps * np.abs(np.arange(2 * kappa + 1) - kappa))
    return w / w.sum()


def user_level_audit(params: UserLevelParams) -> tuple[float, float]:
    """Certified (2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G) with delta_G the exact Gaussian delta
    at eps' for mu = 8 kappa Delta / sigma (Theorem 3.3's proof); must be <= (eps, delta)."""
    pmf = tdlap_pmf(params.eps_prime, params.kappa)
    dg = gdp_delta(8 * params.kappa / params.sigma_over_delta, params.eps_prime)
    return 2 * params.eps_prime, float(pmf[0] + pmf[-1] + math.exp(params.eps_prime) * dg)


def phased_erm_params(epsilon: float, delta: float, n: int, m: int) -> dict:
    """Phased-ERM (A3): T = ceil(log2(n m)) phases at (eps/T, delta/T) each (basic composition)."""
    n, m = v.check_int("n", n, min_value=1), v.check_int("m", m, min_value=1)
    t = max(1, math.ceil(math.log2(n * m) - 1e-12))
    p = user_level_params(epsilon / t, delta / t)
    return {"phases": t, "phase_epsilon": epsilon / t, "phase_delta": delta / t, "kappa": p.kappa,
            "radius": 4 * p.kappa, "n_min": p.n_min, "sigma_over_delta": p.sigma_over_delta, "feasible": n >= p.n_min}


def compose_user_level(calls: Iterable[tuple[float, float, object]]) -> tuple[float, float]:
    """(eps, delta) of a schedule of calls (eps_i, delta_i, user_group_id): basic composition within a group,
    max over disjoint groups (parallel composition)."""
    sums: dict = defaultdict(lambda: [0.0, 0.0])
    for i, call in enumerate(calls):
        try:
            e, d, group = call
        except (TypeError, ValueError):
            raise ValueError(f"calls[{i}]={call!r} must be a (epsilon, delta, group) triple") from None
        sums[group][0] += v.check_nonnegative(f"calls[{i}].epsilon", e)
        sums[group][1] += v.check_probability(f"calls[{i}].delta", d)
    if not sums:
        raise ValueError("calls=[] must contain at least one call")
    return max(s[0] for s in sums.values()), min(1.0, max(s[1] for s in sums.values()))


# -- Where Algorithm 1's exact stable set can be computed (public quantities only) -----------------
MAX_EXACT_USERS = 20
MAX_EXACT_EVALUATIONS = 300_000  # n = 18 users with kappa = 4: all 2^18 deletion sets


def exact_evaluations(n: int, kappa: int) -> int:
    """Number of oracle calls of the exact enumeration: sum_{u <= 4 kappa + 1} C(n, u)."""
    n, kappa = v.check_int("n", n, min_value=1), v.check_int("kappa", kappa, min_value=1)
    return sum(math.comb(n, u) for u in range(min(4 * kappa + 1, n) + 1))


def exact_feasible(n: int, kappa: int) -> bool:
    """Whether Algorithm 1's exact stable-set enumeration runs at n users and this kappa (a decision from
    public quantities only: it never depends on the data)."""
    return n <= MAX_EXACT_USERS and exact_evaluations(n, kappa) <= MAX_EXACT_EVALUATIONS


def fallback_cost(n: int, kappa: int) -> str:
    """Why the exact enumeration is (in)feasible, in words (no huge integers)."""
    if n > MAX_EXACT_USERS:
        return f"n = {n} > {MAX_EXACT_USERS} users: at least C({n}, {min(4 * kappa + 1, n)}) oracle calls"
    return f"{exact_evaluations(n, kappa)} oracle calls; limit {MAX_EXACT_EVALUATIONS}"


def exact_fallback_check(n: int, kappa: int, what: str = "Algorithm 1") -> None:
    """Refuse (``ValueError`` naming n and kappa) where the exact fallback cannot run: called before any data is
    read, the refusal depends only on (n, kappa). The Appendix C certificate alone is not a private mechanism
    (whether it passes depends on the data), so without a feasible fallback there is nothing private to run."""
    if not exact_feasible(n, kappa):
        raise ValueError(
            f"n={n}, kappa={kappa}: {what} needs Algorithm 1's exact stable-set enumeration as the fallback of "
            f"the Appendix C certificate ({fallback_cost(n, kappa)}); refused before reading the data -- a stop on a "
            "failed certificate would be a data-dependent output (not private); fallback='stop' (phased and "
            "privacy(): mode='certificate-stop') runs it anyway as a NOT private diagnostic")


# -- Algorithm 1 parameters as one object (the mechanisms in dpjax.user_level take it) -------------
@dataclass(frozen=True)
class A1Params:
    """Everything Algorithm 1 (DelOutputPert) needs: TDLap(eps', kappa), target Delta, Gaussian sigma.

    ``test_mode`` marks parameters given directly (kappa, sigma) rather than derived from (eps, delta);
    their guarantee is then the audit formula of ``a1_certified`` (Theorem 3.3's proof), not (eps, delta).
    """

    eps_prime: float
    delta_prime: float
    kappa: int
    sensitivity: float  # Delta (target local deletion sensitivity, data-independent)
    sigma: float
    test_mode: bool = False

    @property
    def radius(self) -> int:
        return 4 * self.kappa


def a1_params(epsilon: float, delta: float, sensitivity: float, *, gaussian: str = "paper") -> A1Params:
    """Algorithm 1 line 3 (garbled in print; read consistently with the proof's final inequality): eps'=eps/2,
    delta'=delta/(e^eps+2), kappa, sigma. ``gaussian='paper'``: sigma = sqrt(2 ln(2/delta')) 8 kappa Delta / eps';
    ``'analytic'``: the smallest sigma whose exact Gaussian delta at eps' for shift 8 kappa Delta is <= delta'
    (keeps Theorem 3.3's proof valid)."""
    p = user_level_params(epsilon, delta)
    sens = v.check_positive("sensitivity", sensitivity)
    v.check_choice("gaussian", gaussian, ("paper", "analytic"))
    sigma = p.sigma_over_delta * sens
    if gaussian == "analytic":
        from dpjax.accounting.gdp import gdp_mu

        sigma = 8 * p.kappa * sens / gdp_mu(p.eps_prime, p.delta_prime)
    return A1Params(p.eps_prime, p.delta_prime, p.kappa, sens, sigma)


def a1_test_params(eps_prime: float, kappa: int, sensitivity: float, sigma: float) -> A1Params:
    """Test mode: kappa and sigma given directly; privacy from ``a1_certified``."""
    return A1Params(v.check_positive("eps_prime", eps_prime), math.nan, v.check_int("kappa", kappa, min_value=1),
                    v.check_positive("sensitivity", sensitivity), v.check_positive("sigma", sigma), True)


def a1_certified(params: A1Params) -> tuple[float, float]:
    """(2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G(eps', 8 kappa Delta / sigma)): the proof of Theorem 3.3."""
    pmf = tdlap_pmf(params.eps_prime, params.kappa)
    dg = gdp_delta(8 * params.kappa * params.sensitivity / params.sigma, params.eps_prime)
    return 2 * params.eps_prime, float(min(1.0, pmf[0] + pmf[-1] + math.exp(params.eps_prime) * dg))


# -- Deletion-sensitivity targets (Corollary 3.7, Lemma C.1) and noise scales (Section 3.2, Appendix C) --
def log_pair_count(n: int, r: int) -> float:
    """ln P_r, P_r = sum_{s=0}^{r} C(n, s)(n - s): the number of (deleted set, extra user) pairs of Corollary 3.7."""
    n = v.check_int("n", n, min_value=2)
    r = v.check_int("r", r, min_value=0)
    terms = [math.lgamma(n + 1) - math.lgamma(s + 1) - math.lgamma(n - s + 1) + math.log(n - s)
             for s in range(min(r, n - 1) + 1)]
    top = max(terms)
    return top + math.log(math.fsum(math.exp(t - top) for t in terms))


def _check_sc(n, m, r, fail_prob, lipschitz, strong_convexity, c_k):
    n = v.check_int("n", n, min_value=2)
    m = v.check_int("m", m, min_value=1)
    r = v.check_int("r", r, min_value=0)
    if n < r + 2:
        raise ValueError(f"n={n} must be >= r + 2 = {r + 2} (deletion chains of length r need r + 2 users)")
    beta = v.check_open_unit("fail_prob", fail_prob)
    g = v.check_positive("lipschitz", lipschitz)
    mu = v.check_positive("strong_convexity", strong_convexity)
    v.check_choice("c_k", c_k, (1, 2))
    return n, m, r, beta, g, mu


def deletion_sensitivity_bound(n: int, m: int, r: int, fail_prob: float, lipschitz: float,
                               strong_convexity: float, c_k: int = 2) -> float:
    """Delta_expl = 5 c_K G sqrt(ln P_r + ln(1/beta)) / (mu (n - r - 1) sqrt(m)): Corollary 3.7 with the union
    bound over the P_r pairs made explicit (Theorem 3.6 per pair; c_K = 2 for a possibly binding K)."""
    n, m, r, beta, g, mu = _check_sc(n, m, r, fail_prob, lipschitz, strong_convexity, c_k)
    return 5 * c_k * g * math.sqrt(log_pair_count(n, r) + math.log(1 / beta)) / (mu * (n - r - 1) * math.sqrt(m))


def gamma_target(n: int, m: int, fail_prob: float, lipschitz: float, c_k: int = 2) -> float:
    """gamma_target = 5 c_K G sqrt((ln n + ln(1/beta))/m): Lemma 3.8 with a union bound over the n users
    (Appendix C; the w.h.p. size of the largest centred per-user mean gradient on exchangeable data)."""
    n = v.check_int("n", n, min_value=2)
    m = v.check_int("m", m, min_value=1)
    beta = v.check_open_unit("fail_prob", fail_prob)
    v.check_choice("c_k", c_k, (1, 2))
    return 5 * c_k * v.check_positive("lipschitz", lipschitz) * math.sqrt((math.log(n) + math.log(1 / beta)) / m)


def certificate_sensitivity(n: int, m: int, r: int, fail_prob: float, lipschitz: float,
                            strong_convexity: float, c_k: int = 2) -> float:
    """Delta_C = (2r + 1) gamma_target / (mu (n - r - 1)): Lemma C.1 at gamma = gamma_target (Appendix C)."""
    n, m, r, beta, g, mu = _check_sc(n, m, r, fail_prob, lipschitz, strong_convexity, c_k)
    return (2 * r + 1) * gamma_target(n, m, beta, g, c_k) / (mu * (n - r - 1))


def noise_multiplier(epsilon: float, delta: float, fail_prob: float, n: int, m: int, c_k: int = 1,
                     variant: str = "A2") -> float:
    """A = sigma mu n sqrt(m) / G, the phase-independent noise multiplier of Algorithm 2
    (``variant='A2'``, Delta_expl) or of its certified version (``'A2c'``, Delta_C)."""
    p = user_level_params(epsilon, delta)
    v.check_choice("variant", variant, ("A2", "A2c"))
    bound = deletion_sensitivity_bound if variant == "A2" else certificate_sensitivity
    return p.sigma_over_delta * bound(n, m, 4 * p.kappa, fail_prob, 1.0, 1.0, c_k) * n * math.sqrt(m)


def b1_sigma(epsilon: float, delta: float, n: int, lipschitz: float, strong_convexity: float) -> float:
    """Baseline B1: sigma = (2G/(mu n)) sqrt(2 ln(1.25/delta))/eps (replace-one-user sensitivity of theta*)."""
    eps = v.check_positive("epsilon", epsilon)
    d = v.check_open_unit("delta", delta)
    n = v.check_int("n", n, min_value=1)
    sens = 2 * v.check_positive("lipschitz", lipschitz) / (v.check_positive("strong_convexity", strong_convexity) * n)
    return sens * math.sqrt(2 * math.log(1.25 / d)) / eps


def crossover_m(epsilon: float, delta: float, fail_prob: float, n: int, c_k: int = 1) -> float:
    """m* = (A / (2 sqrt(2 ln(1.25/delta))/eps))^2: Algorithm 2 beats B1 iff m > m*."""
    a = noise_multiplier(epsilon, delta, fail_prob, n, 1, c_k)
    return (a / (2 * math.sqrt(2 * math.log(1.25 / delta)) / epsilon)) ** 2


def phased_sco_groups(n: int, m: int, epsilon: float, delta: float, variant: str = "A4b") -> list[tuple[int, int]]:
    """Disjoint user ranges [start, stop) of Phased-SCO's phases.

    ``'A4'`` (Algorithm 4 as printed): T = floor(log2(n/N0)), phase i gets users (n/2^i, n/2^{i-1}] (half-open so
    that the groups are disjoint; the paper prints closed intervals), listed largest group first.
    ``'A4b'`` (this package's corrected equal split): T = ceil(log2(n m)) groups of floor(n/T) users.
    N0 = 8 kappa + 2 with kappa = kappa(eps/2, delta/(e^eps+2)).
    """
    n = v.check_int("n", n, min_value=2)
    m = v.check_int("m", m, min_value=1)
    v.check_choice("variant", variant, ("A4", "A4b"))
    n0 = user_level_params(epsilon, delta).n_min
    if variant == "A4":
        t = int(math.floor(math.log2(n / n0))) if n >= n0 else 0
        if t < 1:
            raise ValueError(f"n={n} must be >= 2 N0 = {2 * n0} for Phased-SCO (Algorithm 4)")
        return [(n // 2**i, n // 2 ** (i - 1)) for i in range(1, t + 1)]
    t = max(1, math.ceil(math.log2(n * m) - 1e-12))
    size = n // t
    if size < n0:
        raise ValueError(f"n={n} must be >= T N0 = {t * n0} for the equal-split Phased-SCO (T={t}, N0={n0})")
    return [(i * size, (i + 1) * size) for i in range(t)]


# -- The privacy contract (dpjax.accounting.privacy_spec.PrivacySpec) for every mechanism and schedule --
# Mechanism names, by the paper's numbering (Ghazi et al. 2023):
#   A1  Algorithm 1, DelOutputPert (generic deletion-sensitivity output perturbation)
#   A2  Algorithm 2, SCOutputPert (A1 on a strongly convex ERM minimiser; Theorem 3.1)
#   A2c A2 with the polynomial-time certificate of Appendix C instead of A1's subset enumeration
#   A3  Algorithm 3, Phased-ERM (Theorem 4.1)
#   A4  Algorithm 4, Phased-SCO with halving phases, as printed (Theorem 5.1)
#   A4b Phased-SCO with equal phases of ceil(log2(n m)) disjoint user groups (the split Theorem 5.1 needs)
#   A5  Algorithm 5, strongly convex ERM (Theorem 4.3); A6 Algorithm 6, strongly convex SCO (Theorem 5.3)
#   B1  baseline: standard user-level output perturbation with replace sensitivity 2G/(mu n)
#   B2  the idealised M' of Theorem 4.1's proof (exact minimiser plus noise, no stability test): NOT private
MECHANISMS = ("A1", "A2", "A2c", "A3", "A4", "A4b", "A5", "A6", "B1", "B2")
MODES = ("certified", "certificate-stop", "rate-shape")
# mechanisms whose release goes through the Appendix C certificate / the exact stable set
_STABLE_SET = ("A1", "A2", "A2c", "A3", "A4", "A4b", "A5", "A6")


@dataclass(frozen=True)
class UserLevelPrivacy(StatedRelation, PrivacySpec):
    """User-level (replace-one-user) guarantee of a schedule of output-perturbation calls.

    ``calls`` are ``(eps_i, delta_i, user_group)``: basic composition within a group, maximum over disjoint groups
    (parallel composition, Theorems 4.1/5.1). The schedule is scale-free in (eps, delta), so ``calibrate`` returns
    the mechanism's ``epsilon``/``delta`` arguments. ``mode='rate-shape'`` (idealised noise, no stability test) and
    ``mode='certificate-stop'`` (stop on a failed certificate: a data-dependent output) are NOT private: ``epsilon``
    reports infinity with that reason and ``calibrate`` refuses. ``releasable`` is False where the certified run
    refuses before reading the data (the guarantee then holds vacuously: no output exists).
    """

    mechanism: str
    calls: tuple[tuple[float, float, str], ...]
    mode: str = "certified"
    notes: tuple[str, ...] = ()
    noise_std: float = 0.0
    budget: tuple[float, float] = (math.nan, math.nan)  # the mechanism's (epsilon, delta) arguments
    privacy_unit: str = "user"
    neighboring: str = "replace-one"
    releasable: bool = True

    def __post_init__(self):
        v.check_choice("mechanism", self.mechanism, MECHANISMS)
        v.check_choice("mode", self.mode, MODES)
        object.__setattr__(self, "calls", tuple(tuple(c) for c in self.calls))
        if self.mode == "certified":
            compose_user_level(self.calls)

    @property
    def private(self) -> bool:  # type: ignore[override]
        return self.mode == "certified" and self.mechanism != "B2"

    def certified(self) -> tuple[float, float]:
        """(eps_total, delta_total) of the schedule (basic within groups, max across disjoint groups)."""
        if not self.private:
            return math.inf, 1.0
        return compose_user_level(self.calls)

    def epsilon(self, delta: float, accountant: str = "basic") -> PrivacyReport:
        delta = v.check_open_unit("delta", delta)
        v.check_choice("accountant", accountant, ("basic",))
        if not self.private:
            reason = {"rate-shape": "rate-shape mode: idealised noise sigma_i = rho 2G/(lambda_i n sqrt(m)) "
                                    "without the stability test -- NOT private",
                      "certificate-stop": "certificate-stop mode: when the Appendix C certificate fails and the "
                                          "exact stable-set enumeration is infeasible the run stops as not "
                                          "releasable, a deterministic function of the data outside Algorithm 1 "
                                          "-- NOT private (issue 23)"}.get(
                self.mode, "B2 is the idealised mechanism M' of Theorem 4.1's proof -- NOT private")
            return PrivacyReport(math.inf, delta, "none", "full", self.neighboring, self.privacy_unit, self.noise_std,
                                 (reason,) + self.notes)
        eps, dlt = self.certified()
        if delta < dlt * (1 - 1e-12):
            raise ValueError(f"delta={delta!r} is below the schedule's certified delta {dlt!r}; this accountant "
                             "certifies only delta >= that value")
        return PrivacyReport(eps, delta, "basic", "full", self.neighboring, self.privacy_unit, self.noise_std,
                             (f"{len(self.calls)} call(s) of {self.mechanism}; basic composition within user "
                              "groups, parallel composition across disjoint groups",) + self.notes)

    def calibrate(self, target_epsilon: float, delta: float, accountant: str = "basic") -> dict:
        """The mechanism's ``epsilon``/``delta`` arguments whose schedule totals exactly (target_epsilon, delta)."""
        target = v.check_positive("target_epsilon", target_epsilon)
        delta = v.check_open_unit("delta", delta)
        v.check_choice("accountant", accountant, ("basic",))
        if not self.private:
            raise ValueError(f"target_epsilon={target_epsilon!r} cannot be met: {self.mechanism} in {self.mode} "
                             "mode is not private")
        eps, dlt = self.certified()
        # (1 - 1e-12): the composed float sums must not overshoot the target by rounding
        out = {"epsilon": target * self.budget[0] / eps * (1 - 1e-12), "delta": delta * self.budget[1] / dlt * (1 - 1e-12)}
        user_level_params(out["epsilon"], out["delta"])  # the paper's standing range eps <= 1, delta <= 1/2
        return out


def min_users(mechanism: str, epsilon: float, delta: float, m: int = 1, n: int | None = None) -> int:
    """Smallest number of users for which the mechanism's constants are defined.

    A1/A2/A2c: n >= 8 kappa + 2 (Corollary 3.7 with r = 4 kappa <= n/2); A3: the same with the per-phase kappa at
    (eps/T, delta/T), T = ceil(log2(n m)) (the smallest such n found by iteration); A4: 2 N0; A4b: T N0; A5/A6: the
    requirement of their second stage at (eps/2, delta/2) (A6 with its user split: twice that); B1, B2: 1.
    """
    v.check_choice("mechanism", mechanism, MECHANISMS)
    m = v.check_int("m", m, min_value=1)
    if mechanism in ("A1", "A2", "A2c"):
        return user_level_params(epsilon, delta).n_min
    if mechanism in ("B1", "B2"):
        return 1
    if mechanism == "A4":
        return 2 * user_level_params(epsilon, delta).n_min
    if mechanism == "A5":
        return max(min_users("A2", epsilon / 2, delta / 2), min_users("A3", epsilon / 2, delta / 2, m))
    if mechanism == "A6":
        return 2 * max(min_users("A2", epsilon / 2, delta / 2), min_users("A4b", epsilon / 2, delta / 2, m))
    # A3 and A4b: T = ceil(log2(n m)) grows with n; smallest fixed point
    n_guess = 2
    for _ in range(64):
        t = max(1, math.ceil(math.log2(n_guess * m) - 1e-12))
        if mechanism == "A3":
            need = user_level_params(epsilon / t, delta / t).n_min
        else:
            need = t * user_level_params(epsilon, delta).n_min
        if need <= n_guess:
            return n_guess
        n_guess = need
    raise ValueError(f"mechanism={mechanism!r}: no finite minimum number of users found")


def privacy(mechanism: str, epsilon: float, delta: float, *, n: int, m: int, mode: str = "certified",
            split_users: bool = True, noise_std: float = 0.0) -> UserLevelPrivacy:
    """The ``PrivacySpec`` of one run of a mechanism of the paper.

    A1/A2/A2c: one call (Theorem 3.3 / 3.1). A3 Phased-ERM: T = ceil(log2(n m)) calls at (eps/T, delta/T) on the
    same users (basic composition, Theorem 4.1). A4/A4b Phased-SCO: one (eps, delta) call per disjoint user group
    (parallel composition, Theorem 5.1). A5: A2 then A3, each at (eps/2, delta/2) (Theorem 4.3). A6: A2 then
    Phased-SCO at (eps/2, delta/2) (Theorem 5.3); with ``split_users`` the stages see disjoint halves of the users,
    so the total is (eps/2, delta/2). B1: the Gaussian mechanism at (eps, delta), replace-one-user sensitivity
    2G/(mu n). B2 and ``mode='rate-shape'``: not private. Raises when n < ``min_users``.

    Certified mode: every call releases Algorithm 1's output, through the Appendix C certificate when it passes or
    the exact enumeration when it fails; where that enumeration is infeasible at a call's (users, kappa) the run
    refuses before reading any data (``exact_fallback_check``): ``releasable`` is False and the (eps, delta) holds
    vacuously. ``mode='certificate-stop'`` (A2, A2c, A3-A6): the superseded data-dependent stop, NOT private.
    """
    v.check_choice("mechanism", mechanism, MECHANISMS)
    v.check_choice("mode", mode, MODES)
    n, m = v.check_int("n", n, min_value=1), v.check_int("m", m, min_value=1)
    user_level_params(epsilon, delta)
    if mechanism == "B2" or mode == "rate-shape":
        return UserLevelPrivacy(mechanism, (), "rate-shape", noise_std=noise_std, budget=(epsilon, delta))
    if mode == "certificate-stop" and mechanism in ("A1", "B1"):
        raise ValueError(f"mode='certificate-stop' applies to the mechanisms released through the Appendix C "
                         f"certificate (A2, A2c, A3-A6), not mechanism={mechanism!r}")
    need = min_users(mechanism, epsilon, delta, m)
    if n < need:
        raise ValueError(f"n={n} must be >= {need} users for {mechanism} at epsilon={epsilon}, delta={delta} "
                         f"(m={m}); see min_users")
    t = max(1, math.ceil(math.log2(n * m) - 1e-12))
    notes: tuple[str, ...] = ()
    users: list[int] = []  # users seen by each output-perturbation call (the exact fallback's size)
    if mechanism in ("A1", "A2", "A2c", "B1"):
        calls, users = [(epsilon, delta, "all")], [n]
        if mechanism == "B1":
            notes = ("classical Gaussian mechanism (Dwork-Roth Thm A.1), sensitivity 2G/(mu n)",)
    elif mechanism == "A3":
        calls, users = [(epsilon / t, delta / t, "all")] * t, [n] * t
    elif mechanism in ("A4", "A4b"):
        groups = phased_sco_groups(n, m, epsilon, delta, mechanism)
        calls = [(epsilon, delta, f"group{i}") for i, _ in enumerate(groups)]
        users = [hi - lo for lo, hi in groups]
    elif mechanism == "A5":
        calls = [(epsilon / 2, delta / 2, "all")] + [(epsilon / (2 * t), delta / (2 * t), "all")] * t
        users = [n] * (t + 1)
    else:  # A6
        if split_users:
            groups = phased_sco_groups(n - n // 2, m, epsilon / 2, delta / 2, "A4b")
            calls = [(epsilon / 2, delta / 2, "first-half")] + [(epsilon / 2, delta / 2, f"second-half-group{i}")
                                                                  for i in range(len(groups))]
            users = [n // 2] + [hi - lo for lo, hi in groups]
            notes = ("users split in halves: centring step and Phased-SCO see disjoint users, so the total is "
                     "(eps/2, delta/2)",)
        else:
            groups = phased_sco_groups(n, m, epsilon / 2, delta / 2, "A4b")
            calls = [c for i in range(len(groups)) for c in ((epsilon / 2, delta / 2, f"group{i}"),) * 2]
            # the centring call sees all n users (and so counts in every group), then one call per group
            users = [n] + [hi - lo for lo, hi in groups]
    releasable = True
    if mechanism in _STABLE_SET:
        budgets = [(e, d) for e, d, _ in calls] if mechanism != "A6" or split_users else \
            [(epsilon / 2, delta / 2)] * len(users)
        sizes = sorted({(u, user_level_params(e, d).kappa) for (e, d), u in zip(budgets, users)})
        blocked = [(u, k) for u, k in sizes if not exact_feasible(u, k)]
        releasable = not blocked
        if blocked and mode == "certified":
            u, k = blocked[0]
            notes += (f"not releasable at this size: the exact fallback of a call on {u} users at kappa={k} is "
                      f"infeasible ({fallback_cost(u, k)}); the run refuses before reading the data, so no output "
                      "exists and the guarantee holds vacuously",)
    return UserLevelPrivacy(mechanism, tuple(calls), mode, notes, noise_std, (epsilon, delta), releasable=releasable)
