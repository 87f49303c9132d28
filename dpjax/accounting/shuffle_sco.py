"""Parameter rules, bounds and transcript accounting of the shuffle-private SCO protocols (Cheu, Joseph, Mao & Peng,
ICLR 2022, Section 4 and Appendices B-C). Pure Python; the paper's units: ``n`` users, dimension ``d``, Lipschitz ``L``,
diameter ``D`` of Theta, smoothness ``beta``, strong convexity ``lam``; natural logarithms.

Plans (``ProtocolPlan``: one ``Phase`` per block of rounds sharing their parameters; round ``r`` of a phase uses rows
``[start + r * batch, start + (r + 1) * batch)`` (fresh users) or ``[start, start + batch)`` (fully interactive)):

* ``p_sgd_plan`` -- P_SGD, Algorithm 3 / Theorem 4.1: B = sqrt(d) ln(d/delta)/eps (the printed batch is unreadable; the
  proof's balance), T = floor(n/B), eta = D/(L_G sqrt T), L_G^2 = L^2 + V(B)/B^2.
* ``p_agd_plan`` -- P_AGD, Algorithm 4 / Theorem 4.3: B = n^{3/5} d^{1/5} (L ln(d/delta))^{2/5}/(eps beta D)^{2/5},
  sigma_or^2 = L^2/B + V(B)/B^2; AC-SA constant nu = max(2 beta, (T+2)^{3/2} sigma_or/(sqrt 6 D)) (Lan 2012's stepsize
  policy, alpha_1 = 1; the printed 2/(t+2) gives alpha_1 = 2/3), or with ``schedule="paper"`` Theorem 4.3's alpha_t =
  2/(t+2), L_t = ((T+2)^{3/2} sigma_or/D + beta)/(t+1) (``acsa_nu``). ``smoothed=True`` is Theorem 4.7: the
  beta_s-Moreau envelope, beta_s = (eps n)^{2/3} L/(d^{1/3} D ln^{2/3}(d/delta)), P_vec norm bound L (the unconstrained
  envelope) or 2L (``mode="paper"``, Lemma 4.6 as stated).
* ``phased_plan`` -- Theorem 4.8 / 4.9 (Lemma B.7): k = ceil(log2 log2 n) + 1 disjoint groups of floor(n/k) users; phase
  i runs the convex plan with distance D_{i-1}, D_i = min(D, sqrt(2 E_i/lam)) from its explicit bound E_i.
* ``p_gd_plan`` -- P_GD, Algorithm 5 / Lemma B.6 / Theorem 4.9: all n users every round, T = min(n, eps^2 n^2/(d
  ln^2(nd/delta))), eta = D/(L sqrt T); per-round budget (eps/(2 sqrt(2 T ln(1/delta))), delta/(T+1)) (paper) or the
  largest eps_r whose optimal T-fold composition (Kairouz, Oh & Viswanath 2015) meets eps (``composition="optimal"``).
  Non-smooth losses run on the envelope with beta = (L/D) min(sqrt n, eps n/(sqrt d ln^{3/2}(nd/delta))).
* ``pan_private_plan`` -- pan-private AC-SA, Appendix C, Algorithm 6 / Theorem C.3: zeta^2 = 8 L^2 ln(2/delta)/(B^2
  eps^2), batch formulas of Theorems 4.3/4.7 with ln^2(d/delta) -> ln(1/delta).
* ``local_sgd_plan`` -- the Gaussian reference baseline (not in the paper): one-pass SGD with per-user Gaussian noise
  (B = 1).

P_vec parameters come from ``dpjax.accounting.pvec.pvec_params`` (``"paper"``: Theorem 3.2's constants; ``"lemma_opt"``:
the same lemmas, optimised constants). ``V(B)``, the exact total variance of P_vec on B inputs with worst-case rounding,
is ``d (2L/g)^2 (B/4 + B b p (1-p))``.

Transcript accounting (``transcript_epsilon``): sequential plans use every user once (parallel composition: the largest
per-round eps), fully interactive phases compose their rounds (advanced composition, Dwork, Rothblum & Vadhan 2010 as in
Section 3.4, or the optimal composition theorem). Robust shuffle privacy (Appendix A.3, Claim A.8, Corollary A.9): with
only ``honest_frac`` of a round's users running the randomizer, ``pvec_round_epsilon`` certifies Lemma 3.1/3.3 at
ceil(honest_frac m) inputs (``composition="lemma"``) or the paper's eps/honest_frac (``"printed"``, needs honest_frac >=
1/3, eps <= 1, g >= 3). Communication (Corollaries B.8-B.11, computed exactly from (g, b); the printed corollaries are
garbled): d (g + b) one-bit messages per P_vec call a user takes part in.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy import stats

from dpjax import _validate as v
from dpjax.accounting import gdp
from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting.kov_composition import optimal_composition_delta

__all__ = [
    "Phase", "ProtocolPlan", "COMPOSITIONS", "PVEC_ACCOUNTANTS", "pvec_total_variance", "p_sgd_plan", "p_agd_plan",
    "phased_plan", "p_gd_plan", "pan_private_plan", "local_sgd_plan", "smoothing_beta",
    "pgd_rounds", "pgd_round_budget", "optimal_composition_delta", "compose_epsilon", "acsa_nu", "ACSA_SCHEDULES",
    "pvec_round_epsilon", "transcript_epsilon", "bits_per_user", "pan_private_epsilon",
    "gaussian_approx_transcript_epsilon", "REPORT_ONLY"
]

#: Across-round compositions for fully interactive phases.
COMPOSITIONS = ("advanced", "optimal")
#: P_vec accountants: name -> (pvec_epsilon composition, calculator mode, default across-round composition).
PVEC_ACCOUNTANTS = {"pvec-lemma": ("lemma", "lemma_opt", "optimal"),
                    "pvec-printed": ("printed", "paper", "advanced"),
                    "pvec-numerical": ("numerical", "lemma_opt", "pld")}
#: Accountants that only report (heuristic or diagnostic): calibration refuses them.
REPORT_ONLY = ("pvec-numerical",)


@dataclasses.dataclass(frozen=True)
class Phase:
    """Consecutive rounds sharing their parameters: ``step`` is eta (gradient-descent protocols) or the AC-SA constant
    nu; ``smoothing`` the Moreau parameter (0: the loss itself); ``pvec`` the calculator's parameters (None for
    Gaussian plans); ``noise_std`` the per-coordinate std of the Gaussian noise on the round's gradient SUM (Gaussian
    plans; 0 otherwise); ``bound`` the phase's explicit excess-loss bound with the exact P_vec variance.
    """

    rounds: int
    start: int
    batch: int
    fresh: bool
    step: float
    smoothing: float
    distance: float
    eps_round: float
    delta_round: float
    bound: float
    pvec: pvec_acc.PvecParams | None = None
    noise_std: float = 0.0

    @property
    def users(self) -> int:
        return self.rounds * self.batch if self.fresh else self.batch


@dataclasses.dataclass(frozen=True)
class ProtocolPlan:
    """A protocol's rounds: ``phases`` in order, plus the inputs that fixed them."""

    protocol: str
    mode: str
    n: int
    d: int
    epsilon: float
    delta: float
    lipschitz: float
    diameter: float
    smoothness: float | None
    strong_convexity: float | None
    phases: tuple[Phase, ...]
    composition: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def num_rounds(self) -> int:
        return sum(p.rounds for p in self.phases)

    @property
    def bound(self) -> float:
        """The explicit bound of the last phase (the protocol's output)."""
        return self.phases[-1].bound

    def bits_per_user(self) -> int:
        return bits_per_user(self)

    def round_arrays(self) -> dict[str, list]:
        """Per-round lists (length ``num_rounds``): start row, batch, restart flag, step,
        smoothing, (g, b, p), noise_std."""
        out = {k: [] for k in ("start", "batch", "restart", "step", "smoothing", "g", "b", "p", "noise_std")}
        for ph in self.phases:
            for r in range(ph.rounds):
                out["start"].append(ph.start + (r * ph.batch if ph.fresh else 0))
                out["batch"].append(ph.batch)
                out["restart"].append(r == 0)
                out["step"].append(ph.step)
                out["smoothing"].append(ph.smoothing)
                out["g"].append(ph.pvec.g if ph.pvec else 1)
                out["b"].append(ph.pvec.b if ph.pvec else 0)
                out["p"].append(ph.pvec.p if ph.pvec else 0.0)
                out["noise_std"].append(ph.noise_std)
        return out


def _check_problem(n, d, epsilon, delta, lipschitz, diameter):
    return (v.check_int("n", n, min_value=1), v.check_int("d", d, min_value=1),
            v.check_positive("epsilon", epsilon), v.check_open_unit("delta", delta),
            v.check_positive("lipschitz", lipschitz), v.check_positive("diameter", diameter))


def pvec_total_variance(params: pvec_acc.PvecParams, norm_bound: float, m: int | None = None) -> float:
    """E||P_vec - sum||^2 on m inputs with worst-case rounding: d (2 Delta_2/g)^2 (m/4 + m b p (1-p))."""
    m = params.n if m is None else m
    return params.d * (2 * norm_bound / params.g) ** 2 * (m / 4 + m * params.b * params.p * (1 - params.p))


def _clip_batch(x: float, n: int, rounding) -> int:
    return int(min(max(rounding(x), 1), n))


# -- Sequentially interactive protocols (Section 4.1) ----------------------------------------------
def p_sgd_plan(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, *, mode="lemma_opt", start=0,
               batch=None) -> ProtocolPlan:
    """P_SGD (Theorem 4.1; batch B = sqrt(d) ln(d/delta)/eps from its proof, rounded to the nearest integer)."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    B = _clip_batch(math.sqrt(d) * math.log(d / dl) / eps, n, round) if batch is None else \
        v.check_int("batch", batch, min_value=1, max_value=n)
    T = n // B
    pv = pvec_acc.pvec_params(eps, dl, B, d, mode)
    lg = math.sqrt(L * L + pvec_total_variance(pv, L) / B**2)
    eta = D / (lg * math.sqrt(T))
    phase = Phase(T, start, B, True, eta, 0.0, D, eps, dl, D * lg / math.sqrt(T), pv)
    return ProtocolPlan("p_sgd", mode, n, d, eps, dl, L, D, None, None, (phase,),
                        notes=(f"{n - T * B} leftover users unused (T = floor(n/B))",))


def _agd_batch(n, d, L, D, beta, eps, log_term):
    return n ** 0.6 * d ** 0.2 * (L * log_term) ** 0.4 / (eps * beta * D) ** 0.4


def smoothing_beta(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, *, log_term=None) -> float:
    """Theorem 4.7: beta_s = (eps n)^{2/3} L/(d^{1/3} D ln^{2/3}(d/delta))."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    lt = math.log(d / dl) if log_term is None else log_term
    return (eps * n) ** (2 / 3) * L / (d ** (1 / 3) * D * lt ** (2 / 3))


#: AC-SA step-size schedules (``dpjax.algorithms.accelerated.ACSA_SCHEDULES``).
ACSA_SCHEDULES = ("lan", "paper")
_SCHEDULE_NOTE = {"lan": "AC-SA stepsize policy of Lan (2012), alpha_t = 2/(t+1) (the printed 2/(t+2) gives alpha_1 = 2/3)",
                  "paper": "AC-SA schedule of Theorem 4.3 as printed: alpha_t = 2/(t+2), "
                           "L_t = ((T+2)^{3/2} sigma/D + beta)/(t+1)"}


def acsa_nu(rounds: int, sigma: float, diameter: float, beta: float, schedule: str = "lan") -> float:
    """The AC-SA constant nu a phase stores as its ``step``: ``"lan"``: nu = max(2 beta, (T+2)^{3/2} sigma/(sqrt 6 D)),
    prox step 1/L_t = t/(2 nu) (Lan 2012's stepsize policy, alpha_t = 2/(t+1)); ``"paper"``: Theorem 4.3's
    nu = (T+2)^{3/2} sigma/D + beta with L_t = nu/(t+1), alpha_t = 2/(t+2)."""
    v.check_choice("schedule", schedule, ACSA_SCHEDULES)
    if schedule == "paper":
        return (rounds + 2) ** 1.5 * sigma / diameter + beta
    return max(2 * beta, (rounds + 2) ** 1.5 * sigma / (math.sqrt(6) * diameter))


def _acsa_phase(n, d, eps, dl, L, D, beta, mode, start, smoothing, batch=None, log_term=None,
                variance=None, schedule="lan") -> Phase:
    """One AC-SA phase (P_AGD or pan-private) on n users: batch rule of Theorem 4.3, ``step`` = ``acsa_nu``."""
    lt = math.log(d / dl) if log_term is None else log_term
    B = _clip_batch(_agd_batch(n, d, L, D, beta, eps, lt), n, round) if batch is None else batch
    T = n // B
    pv = pvec_acc.pvec_params(eps, dl, B, d, mode) if variance is None else None
    sigma = math.sqrt(L * L / B + (pvec_total_variance(pv, L) / B**2 if variance is None else variance(B)))
    nu = acsa_nu(T, sigma, D, beta, schedule)
    bound = beta * D * D / T**2 + sigma * D / math.sqrt(T)
    if smoothing:
        bound += L * L / (2 * smoothing)
    return Phase(T, start, B, True, nu, smoothing, D, eps, dl, bound, pv)


def p_agd_plan(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, smoothness=None, *, smoothed=False,
               mode="lemma_opt", start=0, batch=None, schedule="lan") -> ProtocolPlan:
    """P_AGD (Theorem 4.3) on a beta-smooth loss, or (``smoothed=True``, Theorem 4.7) on the beta_s-Moreau envelope
    of a non-smooth one; in paper mode the envelope's P_vec norm bound is 2L (Lemma 4.6 as stated), else L."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    if smoothed:
        beta = smoothing_beta(n, d, eps, dl, L, D)
        L_in, s = (2 * L if mode == "paper" else L), beta
    else:
        beta = v.check_positive("smoothness", smoothness)
        L_in, s = L, 0.0
    phase = _acsa_phase(n, d, eps, dl, L_in, D, beta, mode, start, s, batch, schedule=schedule)
    return ProtocolPlan("p_agd_smoothed" if smoothed else "p_agd", mode, n, d, eps, dl, L_in, D, beta, None,
                        (phase,), notes=(_SCHEDULE_NOTE[schedule],))


def pan_private_plan(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, smoothness=None, *, smoothed=False,
                     start=0, batch=None, schedule="lan") -> ProtocolPlan:
    """Pan-private AC-SA (Algorithm 6, Theorem C.3): Gaussian noise zeta^2 = 8 L^2 ln(2/delta)/(B^2 eps^2)
    drawn twice per batch; 0 < eps, delta < 1 (Lemma C.5)."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    if eps >= 1:
        raise ValueError(f"epsilon={epsilon!r} must be < 1 for the pan-private protocol (Lemma C.5)")
    lt = math.sqrt(math.log(1 / dl))  # ln^2(d/delta) -> ln(1/delta) in the rates: ln term sqrt(ln(1/delta))
    if smoothed:
        beta = smoothing_beta(n, d, eps, dl, L, D, log_term=lt)
        s = beta
    else:
        beta, s = v.check_positive("smoothness", smoothness), 0.0

    def zeta2(B):
        return 8 * L * L * math.log(2 / dl) / (B * B * eps * eps)

    ph = _acsa_phase(n, d, eps, dl, L, D, beta, "n/a", start, s, batch, log_term=lt,
                     variance=lambda B: 2 * d * zeta2(B), schedule=schedule)
    ph = dataclasses.replace(ph, noise_std=ph.batch * math.sqrt(zeta2(ph.batch)))
    return ProtocolPlan("pan_private_smoothed" if smoothed else "pan_private", "gaussian", n, d, eps, dl, L, D,
                        beta, None, (ph,), notes=("noise_std = B zeta: the std of each of the two draws Z_1, Z_2 on the batch SUM",
                                                  _SCHEDULE_NOTE[schedule]))


def phased_plan(convex_plan, n, lam, *, phases=None, constant=1.0, **kwargs) -> ProtocolPlan:
    """The strongly convex reduction (Theorem 4.8; Theorem 4.9 with P_GD): ``convex_plan(n_i,
    diameter=D_i, start=..., **kwargs)`` on k disjoint groups of floor(n/k) users."""
    n = v.check_int("n", n, min_value=4)
    lam = v.check_positive("lam", lam)
    k = phases if phases is not None else max(1, math.ceil(math.log2(math.log2(n))) + 1)
    k = v.check_int("phases", k, min_value=1, max_value=n)
    size = n // k
    D = float(kwargs.pop("diameter", 1.0))
    dist, out = D, []
    for i in range(k):
        plan = convex_plan(size, diameter=dist, start=i * size, **kwargs)
        out.extend(plan.phases)
        dist = min(D, constant * math.sqrt(2 * plan.bound / lam))
    return dataclasses.replace(plan, protocol=f"{plan.protocol}_phased", n=n, diameter=D, strong_convexity=lam,
                               phases=tuple(out), notes=plan.notes + (
                                   f"{k} phases of {size} users (k = ceil(log2 log2 n) + 1), "
                                   f"D_i = min(D, {constant:g} sqrt(2 E_i/lam))",))


# -- Fully interactive P_GD (Section 4.2) and composition ------------------------------------------
def pgd_rounds(n, d, epsilon, delta) -> int:
    """Lemma B.6: T = min(n, eps^2 n^2/(d ln^2(nd/delta))), at least 1."""
    return max(1, min(n, math.floor((epsilon * n) ** 2 / (d * math.log(n * d / delta) ** 2))))


def compose_epsilon(eps0: float, delta0: float, k: int, delta: float, composition: str) -> float:
    """eps of k rounds of (eps0, delta0): ``"advanced"`` (Dwork-Rothblum-Vadhan, delta' = delta - k delta0; Section
    3.4's form) or ``"optimal"`` (bisection on ``optimal_composition_delta``)."""
    v.check_choice("composition", composition, COMPOSITIONS)
    k = v.check_int("k", k, min_value=1)
    if k == 1:
        if delta0 > delta:
            raise ValueError(f"delta={delta!r} is below the round's delta0={delta0!r}")
        return eps0
    if composition == "advanced":
        slack = delta - k * delta0
        if slack <= 0:
            raise ValueError(f"delta={delta!r} must exceed k delta0 = {k * delta0!r}")
        return math.sqrt(2 * k * math.log(1 / slack)) * eps0 + k * eps0 * math.expm1(eps0)
    hi = k * eps0
    if optimal_composition_delta(eps0, delta0, k, hi) > delta:
        raise ValueError(f"delta={delta!r} is below the composed delta floor {1 - (1 - delta0) ** k!r}")
    lo = 0.0
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if optimal_composition_delta(eps0, delta0, k, mid) <= delta else (mid, hi)
    return hi


def pgd_round_budget(epsilon, delta, rounds, composition="advanced") -> tuple[float, float]:
    """Per-round (eps_r, delta_r) with delta_r = delta/(T+1). ``"advanced"``: the paper's eps_r = eps/(2 sqrt(2 T
    ln(1/delta))); ``"optimal"``: the largest eps_r (bisection) whose optimal T-fold composition is (eps, delta)."""
    eps, dl = v.check_positive("epsilon", epsilon), v.check_open_unit("delta", delta)
    T = v.check_int("rounds", rounds, min_value=1)
    dr = dl / (T + 1)
    if composition == "advanced":
        return eps / (2 * math.sqrt(2 * T * math.log(1 / dl))), dr
    v.check_choice("composition", composition, COMPOSITIONS)
    lo, hi = 0.0, min(eps, 15.0)
    while hi - lo > 1e-6 * hi:
        mid = 0.5 * (lo + hi)
        ok = T == 1 and mid <= eps or T > 1 and optimal_composition_delta(mid, dr, T, eps) <= dl
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo, dr


def _gd_bound(T, eta, L, D, var_mean, n, smoothing):
    out = D * D / (2 * eta * T) + eta * (L * L + var_mean) / 2 + L * L * T * eta / n
    return out + (L * L / (2 * smoothing) if smoothing else 0.0)


def p_gd_plan(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, smoothness=None, *, mode="lemma_opt",
              composition=None, start=0, rounds=None) -> ProtocolPlan:
    """P_GD (Algorithm 5; Lemma B.6 smooth, Theorem 4.9 non-smooth via the envelope when ``smoothness`` is None);
    ``composition`` defaults to ``"advanced"`` in paper mode and ``"optimal"`` in lemma_opt mode."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    comp = composition or ("advanced" if mode == "paper" else "optimal")
    T = pgd_rounds(n, d, eps, dl) if rounds is None else v.check_int("rounds", rounds, min_value=1)
    eps_r, dr = pgd_round_budget(eps, dl, T, comp)
    pv = pvec_acc.pvec_params(eps_r, dr, n, d, mode)
    if smoothness is None:
        s = (L / D) * min(math.sqrt(n), eps * n / (math.sqrt(d) * math.log(n * d / dl) ** 1.5))
    else:
        s = 0.0
    eta = D / (L * math.sqrt(T))
    if smoothness is not None:
        eta = min(eta, 2 / smoothness)  # uniform stability needs eta <= 2/beta (Lemma B.5)
    elif s:
        eta = min(eta, 2 / s)
    var_mean = pvec_total_variance(pv, L) / n**2
    phase = Phase(T, start, n, False, eta, s, D, eps_r, dr, _gd_bound(T, eta, L, D, var_mean, n, s), pv)
    return ProtocolPlan("p_gd", mode, n, d, eps, dl, L, D, smoothness if smoothness else s, None, (phase,),
                        composition=comp)


def local_sgd_plan(n, d, epsilon, delta, lipschitz=1.0, diameter=1.0, *, start=0, batch=1) -> ProtocolPlan:
    """Local-DP baseline: one-pass projected SGD, every user adds N(0, sigma_l^2 I) for sensitivity 2L
    to its own gradient (the sum of B users gets std sqrt(B) sigma_l)."""
    n, d, eps, dl, L, D = _check_problem(n, d, epsilon, delta, lipschitz, diameter)
    B = v.check_int("batch", batch, min_value=1, max_value=n)
    T = n // B
    sig = gdp.gaussian_mechanism_sigma(eps, dl, 2 * L)
    lg = math.sqrt(L * L + d * sig**2 / B)
    eta = D / (lg * math.sqrt(T))
    phase = Phase(T, start, B, True, eta, 0.0, D, eps, dl, D * lg / math.sqrt(T), None, math.sqrt(B) * sig)
    return ProtocolPlan("local_sgd", "gaussian", n, d, eps, dl, L, D, None, None, (phase,))


# -- Transcript accounting -------------------------------------------------------------------------
def pvec_round_epsilon(g, b, p, m, d, delta, composition="lemma", honest_frac=1.0) -> float:
    """eps of one P_vec call on m inputs with (g, b, p) (Theorem 3.2, inverted by ``pvec.pvec_epsilon``), with only
    ``honest_frac`` of the users honest (Claim A.8 / Corollary A.9, see module docstring)."""
    h = v.check_real("honest_frac", honest_frac)
    if not 0 < h <= 1:
        raise ValueError(f"honest_frac={honest_frac!r} must be in (0, 1]")
    if composition == "lemma":
        return pvec_acc.pvec_epsilon(g, b, p, max(1, math.ceil(h * m)), d, delta, "lemma").epsilon
    eps = pvec_acc.pvec_epsilon(g, b, p, m, d, delta, "printed").epsilon
    if h < 1:
        if h < 1 / 3 or eps > 1 or g < 3:
            raise ValueError(f"honest_frac={honest_frac!r}: Claim A.8 needs honest_frac >= 1/3, eps <= 1 (got "
                             f"{eps:.4g}) and g >= 3 (got {g})")
        eps /= h
    return eps


def transcript_epsilon(rounds: list[tuple[int, int, float, int, bool]], d: int, delta: float, accountant: str,
                       composition: str | None = None, honest_frac: float = 1.0):
    """``(epsilon, details)`` of a whole transcript of P_vec rounds; ``rounds``: per phase ``(g, b, p, m, fresh, T,
    delta_round)``: fresh phases use each user in one round (parallel composition), interactive phases compose their
    T rounds; phases use disjoint users. ``"pvec-numerical"`` composes privacy-loss distributions numerically at the
    spread worst-case shift (``pvec.pvec_numerical_epsilon``; heuristic, never a guarantee)."""
    comp_name, _, default_comp = PVEC_ACCOUNTANTS[v.check_choice("accountant", accountant, tuple(PVEC_ACCOUNTANTS))]
    comp = composition or default_comp
    worst, details = 0.0, []
    for g, b, p, m, fresh, T, dr in rounds:
        if comp_name == "numerical":
            calls = 1 if fresh else T
            h = v.check_real("honest_frac", honest_frac)
            cert = pvec_acc.pvec_numerical_epsilon(g, b, p, max(1, math.ceil(h * m)), d, delta, calls=calls)
            e, how = cert.epsilon, (f"numerical PLD of {d * calls} coordinate releases at the spread shift "
                                    f"k={cert.shift} (heuristic worst case)")
        elif fresh or T == 1:
            e = pvec_round_epsilon(g, b, p, m, d, delta, comp_name, honest_frac)
            how = "one call per user (parallel composition over disjoint rounds)"
        else:
            e0 = pvec_round_epsilon(g, b, p, m, d, dr, comp_name, honest_frac)
            e = compose_epsilon(e0, dr, T, delta, comp)
            how = f"{T} rounds at ({e0:.4g}, {dr:.3g}) composed ({comp})"
        details.append((e, how))
        worst = max(worst, e)
    return worst, details


def gaussian_approx_transcript_epsilon(rounds, d: int, delta: float) -> float:
    """``gaussian_approx`` diagnostic (never a guarantee) of ``transcript_epsilon``'s rows: each call's count noise as a
    Gaussian, worst-case shift of norm g + 2 sqrt(d) (``pvec.pvec_gaussian_approx_epsilon``), T calls composed (GDP)."""
    return max([0.0] + [gdp.gaussian_mechanism_epsilon(math.sqrt(m * b * p * (1 - p)), g + 2 * math.sqrt(d), delta,
                                                       count=1 if fresh else T) for g, b, p, m, fresh, T, _ in rounds])


def pan_private_epsilon(noise_std_sum: float, lipschitz: float, delta: float, accountant: str) -> float:
    """Pan-privacy of Algorithm 6 for one intrusion (Lemma C.4): before or after the changed user's contribution, one
    of the two draws (``noise_std_sum`` = B zeta on the sum, sensitivity 2L) is independent of the rest of the view.
    ``"pan-analytic"``: exact analytic Gaussian; ``"pan-paper"``: Lemma C.5's eps = Delta sqrt(2 ln(2/delta))/zeta
    (valid for eps < 1)."""
    v.check_choice("accountant", accountant, ("pan-analytic", "pan-paper"))
    zeta = v.check_positive("noise_std_sum", noise_std_sum)
    sens = 2 * v.check_positive("lipschitz", lipschitz)
    if accountant == "pan-analytic":
        return gdp.gaussian_mechanism_epsilon(zeta, sens, delta)
    eps = sens * math.sqrt(2 * math.log(2 / delta)) / zeta
    if eps >= 1:
        raise ValueError(f"noise_std_sum={noise_std_sum!r}: Lemma C.5 needs eps < 1 (got {eps:.4g}); "
                         "use accountant='pan-analytic'")
    return eps


def bits_per_user(plan: ProtocolPlan) -> int:
    """One-bit messages a user sends over the whole protocol (Corollaries B.8-B.11, exact in (g, b))."""
    return max([0] + [(1 if ph.fresh else ph.rounds) * plan.d * (ph.pvec.g + ph.pvec.b)
                      for ph in plan.phases if ph.pvec is not None])


# -- Exact P_1D output distributions and empirical audits (validation suite) -----------------------
def p1d_count_pmf(x, g: int, b: int, p: float, scalar_range: float = 1.0):
    """``(support_start, pmf)``: the exact pmf of P_1D's count Z = sum_i xhat_i + Bin(n b, p) for inputs ``x`` in
    [0, Delta] (the analyzer outputs (Delta/g)(Z - p b n)); xhat_i = floor(x_i g/Delta) + Bernoulli(frac), so the
    rounded sum is a fixed integer plus a Poisson-binomial, convolved with the binomial (numpy, float64)."""
    x = np.asarray(x, np.float64)
    scaled = np.clip(x * g / scalar_range, 0, g)
    low = np.floor(scaled)
    frac = scaled - low
    pmf = np.array([1.0])
    for f in frac[frac > 0]:
        pmf = np.convolve(pmf, [1 - f, f])
    pmf = np.convolve(pmf, stats.binom.pmf(np.arange(len(x) * b + 1), len(x) * b, p))
    return int(low.sum()), pmf


def hockey_stick(P, Q, epsilon: float) -> float:
    """delta(eps) = sum_z (P(z) - e^eps Q(z))_+ for two pmfs on aligned supports ``(start, pmf)``."""
    (sp_, p_), (sq, q_) = P, Q
    lo, hi = min(sp_, sq), max(sp_ + len(p_), sq + len(q_))
    a, c = np.zeros(hi - lo), np.zeros(hi - lo)
    a[sp_ - lo:sp_ - lo + len(p_)] = p_
    c[sq - lo:sq - lo + len(q_)] = q_
    return float(np.clip(a - math.exp(epsilon) * c, 0, None).sum())


def audit_lower_bound(tp: int, fp: int, trials: int, delta: float, confidence: float = 0.95) -> float:
    """Empirical lower bound on eps from a distinguishing test run ``trials`` times on each of two neighbours: with
    Clopper-Pearson bounds TPR >= t_lo and FPR <= f_hi (each at (1+confidence)/2), any (eps, delta)-DP mechanism has
    t_lo <= e^eps f_hi + delta, so eps >= ln((t_lo - delta)/f_hi)."""
    alpha = (1 - confidence) / 2
    t_lo = stats.beta.ppf(alpha, tp, trials - tp + 1) if tp > 0 else 0.0
    f_hi = stats.beta.ppf(1 - alpha, fp + 1, trials - fp) if fp < trials else 1.0
    if t_lo - delta <= 0:
        return 0.0
    return max(0.0, math.log((t_lo - delta) / f_hi))
