"""Cheu et al. shuffle protocols P_1D / P_vec: parameter calculators (Cheu et al., ICLR 2022, Algorithms 1-2, Lemma 3.1,
Theorem 3.2).

Inputs are l2-bounded vectors (||x|| <= Delta_2) shifted into [0, 2 Delta_2] per coordinate; each coordinate runs P_1D
with range 2 Delta_2, precision g, b binomial trials with success probability p. Guarantee: (eps, delta)-shuffle DP for
eps <= 15, delta < 1/2 (Thm 3.2 via Lemma 3.1 per coordinate and the heterogeneous advanced composition Lemma 3.3).
Calculator modes (the optional ``numerical`` and ``gaussian_approx`` accounts are at the end):

* ``paper``: eps_hat = eps/(18 sqrt(ln(1/gamma))), gamma = delta/(d+1), g = max(ceil(sqrt n), ceil(sqrt d), 4)
  (normalised inputs), b = floor(180 g^2 ln(2/delta_hat)/(eps_hat^2 n)) + 1, p = 90 g^2 ln(2/delta_hat)/(b eps_hat^2 n).
* ``lemma_opt``: g = max(ceil(sqrt n), ceil(10 sqrt d), 4), S = 4d/g^2 + 4 sqrt(d)/g + 1, eps_hat solves sqrt(2
  ln(1/gamma) S) eps_hat + c_e S eps_hat^2 = eps with c_e = (e^{eps_max} - 1)/eps_max, eps_max = eps_hat (2/g + 1)
  (still proven by the paper's lemmas).

The inverse, ``pvec_epsilon``: which (eps, delta) do given (g, b, p) certify for n summed d-dimensional vectors? Lemma
A.1 with m = b n trials and t = g fixes alpha = sqrt(10 ln(2/delta_hat)/(b n p)) (so that 2 exp(-alpha^2 b n p/10) =
delta_hat) and Lemma 3.1's eps_hat = 3 g alpha = g sqrt(90 ln(2/delta_hat)/(b n p)) -- the calculator's relation read
backwards. The coordinates are composed with Lemma 3.3 at gamma = delta_hat = delta/(d + 1):

* ``composition="lemma"`` (default; Lemma 3.3 with the Hoeffding constant its proof invokes (the printed one is looser)
  and the exact sum bound S of ``lemma_opt``): eps = sqrt(2 ln(1/gamma) S) eps_hat + c_e S eps_hat^2;
* ``composition="printed"``: Lemma 3.3 as printed (2 sqrt(ln(1/gamma) sum eps_j^2)) with the proof's Sum eps_j^2 <= 9
  eps_hat^2 (needs g >= sqrt d) and e^x - 1 <= 2x (needs eps_j <= 1): eps = 18 eps_hat^2 + 6 eps_hat sqrt(ln(1/gamma)).

``pvec_epsilon`` of ``pvec_params(eps, ..., "lemma_opt")`` returns eps; ``"paper"`` parameters certify much less than
their nominal eps (e.g. eps = 1, delta = 1e-5, d = 10, n = 1000: 0.094 with "lemma", 0.337 with "printed"). The
protocol's per-coordinate std is ~350-530x (paper) / ~45-55x (lemma_opt) that of a Gaussian mechanism with the same l2
sensitivity.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, Callable

from dpjax import _validate as v
from dpjax.accounting.gdp import gaussian_mechanism_sigma

__all__ = [
    "PvecParams", "PvecCertificate", "COMPOSITIONS", "p1d_params", "pvec_params", "pvec_epsilon", "PvecAccountant",
    "PvecEvent", "pvec_privacy", "pvec_report", "pvec_sum_std", "pvec_gaussian_ratio", "NumericalCertificate",
    "spread_shift", "pvec_numerical_epsilon", "pvec_gaussian_approx_epsilon"
]

#: Lemma 3.3 forms accepted by `pvec_epsilon` (see module docstring).
COMPOSITIONS = ("lemma", "printed")


@dataclass(frozen=True)
class _PvecNumbers:
    """The numbers of one P_vec invocation that its parameters and its certificate share: the (epsilon, delta) guarantee
    on ``n`` vectors of dimension ``d``, the protocol's g, b, p and Lemma 3.1's per-coordinate eps_hat, delta_hat."""

    epsilon: float
    delta: float
    n: int
    d: int
    g: int
    b: int
    p: float
    eps_hat: float
    delta_hat: float


@dataclass(frozen=True)
class PvecParams(_PvecNumbers):
    """Parameters of P_vec (or P_1D when d = 1): g, b, p, eps_hat, delta_hat (per coordinate) and the mode."""

    mode: str


def _check(epsilon, delta, n, d):
    eps = v.check_positive("epsilon", epsilon)
    if eps > 15:
        raise ValueError(f"epsilon={epsilon!r} must be <= 15 for P_1D/P_vec (Lemma 3.1)")
    dl = v.check_open_unit("delta", delta)
    if dl >= 0.5:
        raise ValueError(f"delta={delta!r} must be < 1/2 for P_1D/P_vec (Lemma 3.1)")
    return eps, dl, v.check_int("n", n, min_value=1), v.check_int("d", d, min_value=1)


def _b_p(g: int, eps_hat: float, delta_hat: float, n: int) -> tuple[int, float]:
    x = g * g * math.log(2 / delta_hat) / (eps_hat**2 * n)
    b = math.floor(180 * x) + 1
    return b, 90 * x / b


def p1d_params(epsilon: float, delta: float, n: int) -> PvecParams:
    """Lemma 3.1 for one scalar sum (normalised inputs): g = max(ceil(sqrt n), 4), b, p as in the lemma."""
    eps, dl, n, _ = _check(epsilon, delta, n, 1)
    g = max(math.ceil(math.sqrt(n)), 4)
    b, p = _b_p(g, eps, dl, n)
    return PvecParams(eps, dl, n, 1, g, b, p, eps, dl, "paper")


def pvec_params(epsilon: float, delta: float, n: int, d: int, mode: str = "paper") -> PvecParams:
    """P_vec parameters (see module docstring); `n` = number of summed vectors."""
    eps, dl, n, d = _check(epsilon, delta, n, d)
    v.check_choice("mode", mode, ("paper", "lemma_opt"))
    gamma = dl / (d + 1)
    if mode == "paper":
        eps_hat = eps / (18 * math.sqrt(math.log(1 / gamma)))
        g = max(math.ceil(math.sqrt(n)), math.ceil(math.sqrt(d)), 4)
    else:
        g = max(math.ceil(math.sqrt(n)), math.ceil(10 * math.sqrt(d)), 4)
        s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
        lin = math.sqrt(2 * math.log(1 / gamma) * s)

        def total(e: float) -> float:
            em = e * (2 / g + 1)
            ce = math.expm1(em) / em
            return lin * e + ce * s * e * e

        lo, hi = 0.0, eps / lin
        for _ in range(200):  # total() is increasing; the returned eps_hat satisfies total <= eps
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if total(mid) <= eps else (lo, mid)
        eps_hat = lo
    b, p = _b_p(g, eps_hat, gamma, n)
    return PvecParams(eps, dl, n, d, g, b, p, eps_hat, gamma, mode)


def pvec_sum_std(params: PvecParams, delta2: float = 1.0) -> float:
    """Per-coordinate std of the sum estimate with worst-case rounding: (Delta/g) sqrt(n/4 + n b p (1 - p)),
    Delta = 2 Delta_2."""
    n, b, p = params.n, params.b, params.p
    return (2 * v.check_positive("delta2", delta2) / params.g) * math.sqrt(n / 4 + n * b * p * (1 - p))


def pvec_gaussian_ratio(params: PvecParams, delta2: float = 1.0) -> float:
    """Protocol std / exact analytic-Gaussian sigma for l2 sensitivity 2 Delta_2 at the same (eps, delta)."""
    return pvec_sum_std(params, delta2) / gaussian_mechanism_sigma(params.epsilon, params.delta, 2 * delta2)


@dataclass(frozen=True)
class PvecCertificate(_PvecNumbers):
    """What `pvec_epsilon` certifies: ``epsilon``/``delta`` the (eps, delta)-shuffle-DP guarantee of one P_vec
    invocation on ``n`` vectors of dimension ``d`` (delta = d delta_hat + gamma); ``eps_hat``/``delta_hat``: Lemma
    3.1's per-coordinate parameters; ``alpha``: Lemma A.1's alpha = eps_hat/(3g); ``composition``: the Lemma 3.3 form.
    """

    gamma: float
    alpha: float
    composition: str


def _check_protocol(granularity, trials, probability, n, d):
    """(g, b, p, n, d) of a P_vec run: positive integers and p in (0, 1/2) (Lemma 3.1)."""
    g = v.check_int("granularity", granularity, min_value=1)
    b = v.check_int("trials", trials, min_value=1)
    p = v.check_real("probability", probability)
    if not 0 < p < 0.5:
        raise ValueError(f"probability={probability!r} must be in (0, 1/2) (Lemma 3.1)")
    return g, b, p, v.check_int("n", n, min_value=1), v.check_int("d", d, min_value=1)


def pvec_epsilon(granularity: int, trials: int, probability: float, n: int, d: int, delta: float,
                 composition: str = "lemma") -> PvecCertificate:
    """(eps, delta) certified for P_vec with parameters (g, b, p) on n vectors in R^d (Cheu et al. 2022, Thm 3.2).

    Inverse of `pvec_params` (module docstring). Fewer vectors mean less binomial noise (Bin(n b, p)), so pass the
    smallest ``n`` any invocation can have. ``delta`` is split as gamma = delta_hat = delta/(d + 1).

    Raises:
      ValueError: naming the argument, when an input is invalid or a hypothesis of Lemma 3.1 / A.1 / 3.3 fails:
        p < 1/2 and delta < 1/2; alpha = eps_hat/(3g) <= 0.79 (so that ln((1+alpha)/(1-alpha)) <= 3 alpha);
        alpha b n p >= 2g (Lemma A.1, i.e. eps_hat <= 15 ln(2/delta_hat)); eps_hat <= 15; and for
        ``composition="printed"`` g >= sqrt(d) and eps_hat (2/g + 1) <= 1.
    """
    g, b, p, n, d = _check_protocol(granularity, trials, probability, n, d)
    dl = v.check_open_unit("delta", delta)
    if dl >= 0.5:
        raise ValueError(f"delta={delta!r} must be < 1/2 for P_1D/P_vec (Lemma 3.1)")
    v.check_choice("composition", composition, COMPOSITIONS)
    gamma = dl / (d + 1)
    bnp = b * n * p
    alpha = math.sqrt(10 * math.log(2 / gamma) / bnp)
    eps_hat = 3 * g * alpha
    if alpha > 0.79:
        raise ValueError(f"trials={b}, probability={p!r}: alpha = eps_hat/(3g) = {alpha:.4g} > 0.79 for n={n}, so "
                         "ln((1+alpha)/(1-alpha)) <= 3 alpha fails (Lemma 3.1's proof needs alpha small); more "
                         "trials or a larger probability needed")
    if alpha * bnp < 2 * g or eps_hat > 15:
        raise ValueError(f"trials={b}, probability={p!r}: per-coordinate eps_hat = {eps_hat:.4g} for n={n} is outside "
                         "Lemma 3.1 (needs eps_hat <= 15 and alpha b n p >= 2g)")
    em = eps_hat * (2 / g + 1)  # largest per-coordinate eps_j
    log_g = math.log(1 / gamma)
    if composition == "lemma":
        s = 4 * d / g**2 + 4 * math.sqrt(d) / g + 1
        eps = math.sqrt(2 * log_g * s) * eps_hat + math.expm1(em) / em * s * eps_hat**2
    else:
        if g * g < d:
            raise ValueError(f"granularity={g} must be >= sqrt(d) = {math.sqrt(d):.4g} for the printed composition "
                             "(Thm 3.2 proof)")
        if em > 1:
            raise ValueError(f"granularity={g}: eps_j <= eps_hat (2/g + 1) = {em:.4g} must be <= 1 for the printed "
                             "composition (e^x - 1 <= 2x)")
        eps = 18 * eps_hat**2 + 6 * eps_hat * math.sqrt(log_g)
    return PvecCertificate(eps, d * gamma + gamma, n, d, g, b, p, eps_hat, gamma, gamma, alpha, composition)


# -- P_vec as an event of a DP plan (ISRL-DP Algorithm 6: each silo's clipped vectors, one shuffled call per round) --
class PvecAccountant(str, enum.Enum):
    """Accountants of a P_vec run: the Lemma 3.3 form `pvec_epsilon` certifies with, and the
    calculator mode calibration searches over."""

    LEMMA = "pvec-lemma"  # corrected Hoeffding constant; calibration over the lemma_opt calculator
    PRINTED = "pvec-printed"  # the paper's printed constants; calibration over Theorem 3.2's choice


_PVEC_FORMS = {PvecAccountant.LEMMA: ("lemma", "lemma_opt"), PvecAccountant.PRINTED: ("printed", "paper")}


@dataclass(frozen=True)
class PvecEvent:
    """What a P_vec local randomizer releases (the privatizer's event).

    Attributes:
      field: the hparams field holding the parameters (what calibration returns).
      granularity, trials, probability: the (g, b, p) the run holds.
      dim: d, the dimension of every input vector.
      max_granularity: the static bound on g of the compiled run (None: none).
      make_params: ``make_params(calculator_result) -> hparams value`` (the run's parameter type, whose
        ``numbers()`` are the (g, b, p) it holds; accounting stays free of jax).
    """

    field: str
    granularity: int
    trials: int
    probability: float
    dim: int
    max_granularity: int | None = None
    make_params: Callable[[Any], Any] = lambda calc: calc

    def spec(self, plan):
        return pvec_privacy(plan, self)


def _pvec_setting(plan, event: PvecEvent) -> tuple[int, int]:
    """``(m, n)``: the fewest P_vec inputs of a round (min M_r x K) and the smallest silo; checks that the plan is
    one pass over disjoint blocks behind a shuffler, replace-one."""
    from dpjax.accounting.schedules import Sampling

    shuffle = plan.aggregation
    if shuffle is None or not hasattr(shuffle, "min_reports"):
        raise ValueError(f"{plan.label}: P_vec needs a shuffler between the silos and the analyzer")
    if plan.clip.neighboring.value != "replace-one":
        raise ValueError(f"neighboring={plan.clip.neighboring.value!r}: the P_vec analysis is replace-one")
    sel = plan.selection
    ks = set(sel.batch_sizes)
    if sel.sampling is not Sampling.ONE_PASS or len(ks) != 1:
        raise ValueError(f"sampling={sel.sampling.value!r}: the P_vec run is one pass over disjoint blocks "
                         "of one batch size K (parallel composition over rounds)")
    k, n = int(ks.pop()), min(sel.dataset_sizes)
    if plan.num_rounds * k > n:
        raise ValueError(f"num_rounds={plan.num_rounds} x batch_size={k} > n={n}: one pass needs R K <= n")
    return shuffle.min_reports * k, n


def pvec_privacy(plan, event: PvecEvent):
    """The run's shuffle-DP guarantee as a ``ReportPrivacy`` (accountants ``PvecAccountant``).

    ``epsilon`` certifies the (g, b, p) the run holds (`pvec_report`). Calibration is the one routine over the
    calculator's parameters at ``1 / scale`` (``pvec_params`` in the accountant's calculator mode): the largest
    calculator epsilon whose parameters are certified at the target; it returns ``{field: make_params(...)}``.
    """
    from types import SimpleNamespace

    from dpjax.accounting.privacy_spec import ReportPrivacy

    m, _ = _pvec_setting(plan, event)

    def calculator(scale: float, delta: float, accountant: str) -> PvecParams:
        calc = pvec_params(1.0 / scale, delta, m, event.dim, _PVEC_FORMS[PvecAccountant(accountant)][1])
        if event.max_granularity is not None and calc.g > event.max_granularity:
            raise ValueError(f"max_granularity={event.max_granularity} is below the calculator's g={calc.g}")
        return calc

    def search(delta: float, accountant: str, scale: float):
        try:
            calc = calculator(scale, delta, accountant)
            value = event.make_params(calc)  # certified as the run would hold it (e.g. p stored in float32)
            g, b, p = value.numbers() if hasattr(value, "numbers") else (calc.g, calc.b, calc.p)
            return pvec_epsilon(g, b, p, m, event.dim, delta, _PVEC_FORMS[PvecAccountant(accountant)][0])
        except ValueError:  # outside the calculator's or the lemmas' range: not a usable noise level
            return SimpleNamespace(epsilon=math.inf)

    return ReportPrivacy(
        epsilon_fn=lambda delta, accountant, scale: pvec_report(plan, event, delta, accountant),
        values_fn=lambda scale, delta, acc: {event.field: event.make_params(calculator(scale, delta, acc))},
        accountants=tuple(a.value for a in PvecAccountant), neighboring="replace-one", privacy_unit="record",
        rtol=1e-8, search_fn=search)  # the calculator's parameters are cheap; lemma_opt's certify its eps to ~1e-9


def pvec_report(plan, event: PvecEvent, delta: float, accountant: str = "pvec-lemma"):
    """``SdpReport``: the (eps, delta)-shuffle DP of the whole run from the (g, b, p) it holds.

    Each round's P_vec call on its ``M_r K >= m`` inputs is (eps, delta)-SDP with eps from `pvec_epsilon` (Lemma 3.1
    per coordinate, Lemma 3.3 across coordinates in the accountant's form); records are used once (one pass,
    R K <= n), so the run is (eps, delta)-SDP (parallel composition; Lowy & Razaviyayn 2023, Thm 5.2/G.2). The silo
    messages have no local guarantee: ``local`` is None. ``central.noise_std``: the per-coordinate std of the
    privacy noise in the averaged gradient of the smallest round in units of the clip norm L, (2/g) sqrt(m b p (1-p))/m.
    """
    from dpjax.accounting.schedules import PrivacyReport, SdpReport

    form = PvecAccountant(v.check_choice("accountant", accountant, tuple(a.value for a in PvecAccountant)))
    composition = _PVEC_FORMS[form][0]
    m, _ = _pvec_setting(plan, event)
    g, b, p = event.granularity, event.trials, event.probability
    if event.max_granularity is not None and g > event.max_granularity:
        raise ValueError(f"hparams.{event.field}.granularity={g} exceeds max_granularity={event.max_granularity}")
    if b == 0 or p == 0.0:
        raise ValueError(f"hparams.{event.field} has trials={b}, probability={p}: no privacy noise, epsilon = inf")
    cert = pvec_epsilon(g, b, p, m, event.dim, delta, composition)
    std = (2.0 / g) * math.sqrt(m * b * p * (1 - p)) / m
    notes = (
        f"P_vec (Cheu et al. 2022, Thm 3.2; Lemma 3.1 per coordinate, Lemma 3.3 "
        f"{'with the corrected Hoeffding constant' if composition == 'lemma' else 'as printed'}) at the "
        f"smallest round, M_r K = {m} inputs of dimension d = {event.dim}",
        "one pass over disjoint blocks: parallel composition over rounds (Lowy & Razaviyayn 2023, Thm 5.2/G.2); "
        "no amplification by silo sampling is claimed",
    )
    central = PrivacyReport(cert.epsilon, cert.delta, form.value, "one-pass", "replace-one", "record", std, notes)
    details = {"eps_hat": cert.eps_hat, "delta_hat": cert.delta_hat, "gamma": cert.gamma, "alpha": cert.alpha,
               "min_vectors": m, "dim": event.dim, "granularity": g, "trials": b, "probability": p,
               "bits_per_vector": event.dim * (g + b)}
    return SdpReport(central, None, details)


# -- Optional modes beyond the paper's lemmas: numerical PLD (heuristic worst case), Gaussian approx (diagnostic) --
#: Tail mass of the centred binomial left out of the numerical account (added to delta).
NUMERICAL_TAIL = 1e-18


@dataclass(frozen=True)
class NumericalCertificate:
    """What ``pvec_numerical_epsilon`` computes: ``epsilon`` at ``delta`` for ``calls`` P_vec calls, every
    coordinate's count shifted by ``shift`` (the spread worst case), ``tail_delta`` of delta spent on the truncated
    binomial tails; ``heuristic``: always True (the spread case is the worst case only under a Gaussian approx)."""

    epsilon: float
    delta: float
    shift: int
    calls: int
    tail_delta: float
    heuristic: bool = True


def spread_shift(g: int, d: int) -> int:
    """Worst-case per-coordinate count shift when the l2 change is spread evenly: a_j = 2 Delta_2/sqrt(d)
    and |xhat - xhat'| <= g a_j/Delta + 2 (rounding slack, Lemma 3.1's proof) give ceil(2 + g/sqrt d)."""
    return math.ceil(2 + g / math.sqrt(d))


def _binomial_log_pmfs(m: int, p: float, shift: int):
    """log pmfs of Bin(m, p) and shift + Bin(m, p) (dicts outcome -> log mass) on a window holding all but
    NUMERICAL_TAIL of each, and the left-out mass."""
    import numpy as np
    from scipy import stats

    # window mp +- 12 sd (ppf/isf are unreliable at 1e-18 for m ~ 1e8); its exact tail is checked
    sd = math.sqrt(m * p * (1 - p))
    lo, hi = max(0, math.floor(m * p - 12 * sd - 12)), min(m, math.ceil(m * p + 12 * sd + 12))
    tail = float(stats.binom.cdf(lo - 1, m, p) + stats.binom.sf(hi, m, p))
    if tail > NUMERICAL_TAIL:
        raise ValueError(f"trials={m}, probability={p!r}: binomial tail {tail:.3g} outside the window")
    z = np.arange(lo, hi + 1)
    logpmf = stats.binom.logpmf(z, m, p).tolist()
    return dict(zip(z.tolist(), logpmf)), dict(zip((z + shift).tolist(), logpmf)), tail


def pvec_numerical_epsilon(granularity: int, trials: int, probability: float, n: int, d: int, delta: float, *,
                           calls: int = 1, shift: int | None = None, discretization: float = 1e-4,
                           ) -> NumericalCertificate:
    """``numerical`` mode of the P_vec accounting (optional, not from the paper).

    Per coordinate the analyzer sees ``c + Bin(n b, p)``; on neighbours the rounded sum moves by at most ``k``
    (coupled randomized rounding: joint convexity bounds the mixture by the largest shift). The privacy-loss
    distribution of ``k + Bin(n b, p)`` against ``Bin(n b, p)`` (both orders, pessimistic discretisation,
    ``dp_accounting``) is composed over the d coordinates and ``calls`` P_vec calls (a fully interactive phase), at
    ``k = spread_shift(g, d)`` unless ``shift`` is given; the binomial tails beyond ``NUMERICAL_TAIL`` are added to
    delta. Heuristic: the spread shift is the worst case under a Gaussian approximation only. Cost grows with the
    binomial's sd sqrt(n b p (1-p)) (seconds for n b ~ 1e8, minutes for ~1e11)."""
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    g, b, p, n, d = _check_protocol(granularity, trials, probability, n, d)
    calls = v.check_int("calls", calls, min_value=1)
    dl = v.check_open_unit("delta", delta)
    k = spread_shift(g, d) if shift is None else v.check_int("shift", shift, min_value=0)
    base, shifted, tail = _binomial_log_pmfs(n * b, p, k)
    # each composed mechanism may lose its tail mass (union bound over d * calls coordinates)
    tail_delta = d * calls * tail
    if tail_delta >= dl:
        raise ValueError(f"delta={delta!r} is below the truncated binomial mass {tail_delta:.3g}")
    pld = pld_lib.from_two_probability_mass_functions(base, shifted, pessimistic_estimate=True, symmetric=False,
                                                      value_discretization_interval=discretization)
    eps = pld.self_compose(d * calls).get_epsilon_for_delta(dl - tail_delta)
    return NumericalCertificate(float(eps), dl, k, calls, tail_delta)


def pvec_gaussian_approx_epsilon(granularity: int, trials: int, probability: float, n: int, d: int,
                                 delta: float) -> float:
    """``gaussian_approx`` diagnostic (never a guarantee): the centred count noise treated as N(0, n b p (1-p)) per
    coordinate and the worst-case integer shift vector of l2 norm g + 2 sqrt(d) (|xhat - xhat'| <= g a_j/Delta + 2,
    ||a|| <= Delta); eps of that Gaussian mechanism (analytic Gaussian, Balle & Wang 2018)."""
    from dpjax.accounting.gdp import gaussian_mechanism_epsilon

    g, b, p, n, d = _check_protocol(granularity, trials, probability, n, d)
    sigma = math.sqrt(n * b * p * (1 - p))
    return gaussian_mechanism_epsilon(sigma, g + 2 * math.sqrt(d), v.check_open_unit("delta", delta))
