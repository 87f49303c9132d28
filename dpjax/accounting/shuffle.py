"""Amplification by shuffling and the shuffle-model chains.

* `fmt_closed_form_epsilon`: Feldman, McMillan & Talwar (2021), "Hiding among the clones", Thm 3.1: n shuffled eps0-DP
  local reports are (eps, delta)-DP with eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta)) /sqrt(n) + 8
  e^eps0/n)) when eps0 <= ln(n/(16 ln(2/delta))) (ValueError otherwise).
* `fmt_numerical_delta` / `fmt_numerical_epsilon`: the same paper's dominating pair (Thm 3.2), evaluated exactly: C ~
  Bin(n-1, e^{-eps0}) clones, A ~ Bin(C, 1/2), D ~ Bern(e^eps0/(e^eps0+1)); P = (A + D, C - A + 1 - D) vs Q = (A + 1 -
  D, C - A + D); delta(eps) = E_C sum_k (P - e^eps Q)_+, both orders; the truncated binomial mass is charged to delta.
* `approx_dp_shuffle_delta`: the approximate-DP extension used for ISRL-DP's Theorem G.1 (delta = delta_s + (e^eps +
  1)(1 + e^{-eps0}/2) n delta0, reconstructed; <= 9 n delta0 in the paper's regime).
* `isrl_shuffle_chain`: ISRL-DP shuffled Noisy MB-SGD (Section 5), Theorem G.1's structure with explicit constants
  (neither mode is exact: the chain stacks closed-form bounds).
* `ShuffleEvent`: the shuffler as an event of a family's DP plan; `shuffled_gaussian_privacy` /
  `shuffled_gaussian_report`: the chain and the silos' own ISRL-DP guarantee of its Gaussian silo reports.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from functools import lru_cache
from types import SimpleNamespace

import numpy as np
from scipy import stats

from dpjax import _validate as v
from dpjax.accounting.gdp import gaussian_mechanism_epsilon

__all__ = [
    "fmt_closed_form_epsilon", "fmt_numerical_delta", "fmt_numerical_epsilon", "approx_dp_shuffle_delta",
    "subsampled_epsilon", "advanced_composition", "record_inclusion_probability", "isrl_shuffle_chain", "CHAIN_MODES",
    "PARTICIPATION", "ShuffleAccountant", "ShuffleEvent", "shuffled_gaussian_privacy", "shuffled_gaussian_report"
]


def fmt_closed_form_epsilon(eps0: float, n: int, delta: float) -> float:
    """FMT 2021 Thm 3.1 closed form (see module docstring)."""
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    delta = v.check_open_unit("delta", delta)
    limit = math.log(n / (16 * math.log(2 / delta))) if n > 16 * math.log(2 / delta) else -math.inf
    if eps0 > limit:
        raise ValueError(f"eps0={eps0!r} must be <= ln(n/(16 ln(2/delta))) = {limit:.4g} for the closed-form "
                         f"shuffle bound (n={n})")
    e = math.exp(eps0)
    return math.log1p((e - 1) / (e + 1) * (8 * math.sqrt(e * math.log(4 / delta)) / math.sqrt(n) + 8 * e / n))


_TAIL = 1e-24  # binomial mass left out of the tables (charged to delta)


@lru_cache(maxsize=32)
def _fmt_pair(eps0: float, n: int):
    """FMT dominating pair tables over the relevant window of (C, k): (weights of C, P(k|c), Q(k|c), mass of P(.|c)
    and Q(.|c) outside the k-window, truncated C mass). Rows: the C ~ Bin(n-1, e^{-eps0}) values whose pmf is
    >= 1e-24; columns: k within c/2 +- sqrt(30 c) + 2 of every row (Hoeffding: the Bin(c, 1/2) tail beyond is
    < 1e-24). Everything left out is accounted exactly (cdf/sf) and added to delta by `fmt_numerical_delta`."""
    pc = math.exp(-eps0)
    pmf_all = stats.binom.pmf(np.arange(n), n - 1, pc)
    idx = np.flatnonzero(pmf_all >= _TAIL)
    cs = np.arange(idx[0], idx[-1] + 1)
    wc = pmf_all[cs]
    dropped = max(0.0, float(stats.binom.cdf(cs[0] - 1, n - 1, pc) + stats.binom.sf(cs[-1], n - 1, pc)))
    p = math.exp(eps0) / (math.exp(eps0) + 1)
    half = math.ceil(math.sqrt(30 * cs[-1])) + 2
    kmin = max(0, int(cs[0]) // 2 - half)
    kmax = min(int(cs[-1]) + 1, -(-int(cs[-1]) // 2) + half + 1)
    k = np.arange(kmin, kmax + 1)[None, :]
    c = cs[:, None]
    b = stats.binom.pmf(k, c, 0.5)  # 0 outside [0, c]
    b_prev = stats.binom.pmf(k - 1, c, 0.5)
    col = cs.astype(np.float64)
    out_b = stats.binom.cdf(kmin - 1, col, 0.5) + stats.binom.sf(kmax, col, 0.5)
    out_prev = stats.binom.cdf(kmin - 2, col, 0.5) + stats.binom.sf(kmax - 1, col, 0.5)
    out_p = p * out_prev + (1 - p) * out_b
    out_q = (1 - p) * out_prev + p * out_b
    return wc, p * b_prev + (1 - p) * b, (1 - p) * b_prev + p * b, out_p, out_q, dropped


def fmt_numerical_delta(eps0: float, n: int, epsilon: float) -> float:
    """Exact delta(eps) of FMT's dominating pair for n shuffled eps0-DP reports (valid upper bound;
    the <= 1e-24 binomial tails left out of the tables are added in full)."""
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    eps = v.check_nonnegative("epsilon", epsilon)
    if n == 1:
        return max(0.0, (1 - math.exp(eps - eps0)) / (1 + math.exp(-eps0))) if eps < eps0 else 0.0
    wc, pk, qk, out_p, out_q, dropped = _fmt_pair(eps0, n)
    ee = math.exp(eps)
    d = np.maximum(np.clip(pk - ee * qk, 0, None).sum(axis=1) + out_p, np.clip(qk - ee * pk, 0, None).sum(axis=1) + out_q)
    return float(min(1.0, float(np.dot(wc, d)) + dropped))


def fmt_numerical_epsilon(eps0: float, n: int, delta: float) -> float:
    """Smallest eps in [0, eps0] with `fmt_numerical_delta` <= delta (bisection, 1e-7 absolute)."""
    eps0 = v.check_positive("eps0", eps0)
    delta = v.check_open_unit("delta", delta)
    if fmt_numerical_delta(eps0, n, 0.0) <= delta:
        return 0.0
    lo, hi = 0.0, eps0
    if fmt_numerical_delta(eps0, n, hi) > delta:
        return eps0  # shuffling never hurts: the local guarantee remains
    while hi - lo > 1e-7:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fmt_numerical_delta(eps0, n, mid) <= delta else (mid, hi)
    return hi


def approx_dp_shuffle_delta(eps: float, eps0: float, n: int, delta_shuffle: float, delta0: float) -> float:
    """delta_s + (e^eps + 1)(1 + e^{-eps0}/2) n delta0 (ISRL-DP Theorem G.1, reconstructed FMT Thm 3.8)."""
    eps = v.check_nonnegative("eps", eps)
    eps0 = v.check_positive("eps0", eps0)
    n = v.check_int("n", n, min_value=1)
    return delta_shuffle + (math.exp(eps) + 1) * (1 + math.exp(-eps0) / 2) * n * delta0


def subsampled_epsilon(eps: float, q: float, mode: str = "tight") -> float:
    """Amplification by subsampling: tight ln(1 + q(e^eps - 1)); paper 2 q eps (needs eps <= 1)."""
    eps = v.check_nonnegative("eps", eps)
    q = v.check_probability("q", q)
    v.check_choice("mode", mode, ("tight", "paper"))
    if mode == "paper":
        if eps > 1:
            raise ValueError(f"eps={eps!r} must be <= 1 for the paper's 2 q eps subsampling bound")
        return 2 * q * eps
    return math.log1p(q * math.expm1(eps))


def advanced_composition(eps: float, delta: float, k: int, delta_prime: float) -> tuple[float, float]:
    """Dwork-Roth Thm 3.20: k-fold (eps, delta) => (sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')."""
    eps = v.check_nonnegative("eps", eps)
    delta = v.check_probability("delta", delta)
    k = v.check_int("k", k, min_value=1)
    dp = v.check_open_unit("delta_prime", delta_prime)
    return math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * math.expm1(eps), k * delta + dp


#: Chain modes of `isrl_shuffle_chain` (see its docstring).
CHAIN_MODES = ("paper", "tight")
#: What the analyzer knows about the participating silos (see `isrl_shuffle_chain`).
PARTICIPATION = ("hidden", "public")
_RECORD_SAMPLING = ("without-replacement", "with-replacement")


def record_inclusion_probability(n: int, batch_size: int, sampling: str) -> float:
    """P(a given record is in a silo's round batch): K/n without replacement, 1 - (1 - 1/n)^K with."""
    n = v.check_int("n", n, min_value=1)
    k = v.check_int("batch_size", batch_size, min_value=1)
    v.check_choice("sampling", sampling, _RECORD_SAMPLING)
    if sampling == "without-replacement":
        if k > n:
            raise ValueError(f"batch_size={k} must be <= n={n} for sampling='without-replacement'")
        return k / n
    return -math.expm1(k * math.log1p(-1 / n)) if n > 1 else 1.0


def isrl_shuffle_chain(sigma: float, lipschitz: float, n: int, silos: int, reports: int, rounds: int, delta: float,
                       mode: str = "paper", *, batch_size: int = 1, sampling: str = "without-replacement",
                       participation: str = "hidden") -> dict:
    """Numerical chain for Shuffled Noisy MB-SGD (Section 5; Lowy & Razaviyayn 2023, Thm 5.1/G.1).

    Central (shuffle-DP) guarantee, replace-one over all n N records, of R rounds in each of which ``reports`` = M
    silos send ``mean of K clipped gradients + N(0, sigma^2 I)`` through a shuffler (M <= N; with K = 1, M up to n N
    models single-record reports drawn from the pooled records, q = M/(nN)):

    1. local randomizer: each report is an (eps0, delta0)-DP function of its silo's K-record batch (exact Gaussian
       epsilon, sensitivity 2L; for K > 1 the whole batch is the input: valid but conservative, the paper fixes K = 1);
    2. amplification by shuffling of the M reports (Feldman-McMillan-Talwar: closed form in ``mode="paper"``,
       numerical bound in ``"tight"``), delta_s = M delta0, plus the approximate-DP term (`approx_dp_shuffle_delta`);
    3. amplification by subsampling with q = P(a record is in this round's reports): (M/N) q_rec with
       ``participation="hidden"`` (the analyzer sees only shuffled messages, the paper's SDP model), q_rec with
       ``"public"`` (the analyzer knows who reported); q_rec = K/n (without replacement) or 1 - (1 - 1/n)^K (with).
       Paper: 2 q eps (needs eps <= 1); tight: ln(1 + q (e^eps - 1)) (any data-independent index sampling under
       replace-one, by advanced joint convexity);
    4. advanced composition over R rounds with delta' = delta/2.

    delta0 = delta/(18 R M q), the paper's split (= n N delta/(18 R M^2) for K = 1, hidden participation). Returns
    every stage's quantities and ("epsilon", "delta") = the composed (eps, delta_total); the chain stacks upper
    bounds (neither mode is exact).

    Raises:
      ValueError: naming the argument when an input is invalid or a condition of the chain fails (closed-form
        shuffle bound range, delta0 in (0, 1), eps_hat <= 1 for the paper's subsampling bound).
    """
    sigma = v.check_positive("sigma", sigma)
    lip = v.check_positive("lipschitz", lipschitz)
    n = v.check_int("n", n, min_value=1)
    silos = v.check_int("silos", silos, min_value=1)
    m = v.check_int("reports", reports, min_value=1, max_value=n * silos)
    r = v.check_int("rounds", rounds, min_value=1)
    delta = v.check_open_unit("delta", delta)
    v.check_choice("mode", mode, CHAIN_MODES)
    v.check_choice("participation", participation, PARTICIPATION)
    q_rec = record_inclusion_probability(n, batch_size, sampling)
    q = q_rec * m / silos if participation == "hidden" else q_rec
    if q > 1:
        raise ValueError(f"reports={m}: the inclusion probability q = M q_rec/N = {q:.4g} exceeds 1 (N={silos})")
    d0 = delta / (18 * r * m * q)
    if not 0 < d0 < 1:
        raise ValueError(f"delta={delta!r}: the chain's local delta0 = delta/(18 R M q) = {d0!r} is not in (0, 1)")
    e0 = gaussian_mechanism_epsilon(sigma, 2 * lip, d0)
    ds = m * d0
    e_hat = (fmt_closed_form_epsilon if mode == "paper" else fmt_numerical_epsilon)(e0, m, ds) if e0 > 0 else 0.0
    d_hat = approx_dp_shuffle_delta(e_hat, max(e0, 1e-300), m, ds, d0)
    e_r = subsampled_epsilon(e_hat, q, mode)
    d_r = q * d_hat
    e_tot, d_tot = advanced_composition(e_r, d_r, r, delta / 2)
    return {"eps0": e0, "delta0": d0, "eps_shuffle": e_hat, "delta_shuffle": d_hat, "q": q,
            "eps_round": e_r, "delta_round": d_r, "epsilon": e_tot, "delta": d_tot}


# -- The shuffler as an event of a DP plan (Shuffled Noisy MB-SGD's central guarantee) -------------
class ShuffleAccountant(str, enum.Enum):
    """Central accountants of Gaussian silo reports behind a shuffler (`isrl_shuffle_chain` modes)."""

    TIGHT = "shuffle-tight"  # numerical FMT bound, ln(1 + q(e^eps - 1)) subsampling
    PAPER = "shuffle-paper"  # FMT closed form, 2 q eps subsampling (the structure of Theorem G.1's proof)


_CHAIN_MODE = {ShuffleAccountant.TIGHT: "tight", ShuffleAccountant.PAPER: "paper"}


@dataclasses.dataclass(frozen=True)
class ShuffleEvent:
    """A shuffler between the silos and the analyzer (Lowy & Razaviyayn 2023, Section 5): the analyzer sees only the
    multiset of each round's reports. The aggregator of a shuffled family returns it; ``spec(plan)`` of Gaussian
    silo reports is `shuffled_gaussian_privacy` (P_vec reads ``min_reports`` from it).

    Attributes:
      min_reports: the fewest reports of any round (M; the amplification is over them).
      num_silos: N.
      participation: ``"hidden"`` (the analyzer sees only shuffled messages, the paper's model: silo sampling
        amplifies) or ``"public"`` (`isrl_shuffle_chain`).
      isrl_bound: also certify by the silos' own ISRL-DP guarantee ((eps0, delta0)-ISRL-DP implies (eps0,
        delta0)-central DP, App. C; the shuffled view is post-processing) and state the smaller.
    """

    min_reports: int
    num_silos: int
    participation: str = "hidden"
    isrl_bound: bool = True

    def __post_init__(self):
        v.check_int("num_silos", self.num_silos, min_value=1)
        v.check_int("min_reports", self.min_reports, min_value=1, max_value=self.num_silos)
        v.check_choice("participation", self.participation, PARTICIPATION)

    def spec(self, plan):
        return shuffled_gaussian_privacy(plan, self)


def _one_gaussian(plan):
    from dpjax.accounting.events import NoiseEvent, Placement

    if len(plan.noises) != 1 or not isinstance(plan.noises[0], NoiseEvent):
        raise ValueError(f"{plan.label}: the shuffle chain analyses one Gaussian noise event per report, got "
                         f"{plan.noises!r}")
    noise = plan.noises[0]
    if noise.placement is not Placement.SILO or isinstance(noise.noise_multiplier, tuple):
        raise ValueError(f"{plan.label}: the shuffle chain needs one noise multiplier, added by every silo")
    if plan.clip.neighboring.value != "replace-one":
        raise ValueError(f"neighboring={plan.clip.neighboring.value!r}: the shuffle chain is a replace-one analysis")
    return noise


def shuffled_gaussian_privacy(plan, event: ShuffleEvent):
    """The central guarantee of ``plan``'s Gaussian silo reports behind the shuffler ``event`` as a ``ReportPrivacy``
    (accountants ``ShuffleAccountant``); calibration scales the noise multiplier (an uncertified level counts as
    epsilon = inf)."""
    from dpjax.accounting.privacy_spec import ReportPrivacy

    noise = _one_gaussian(plan)

    def search(delta: float, accountant: str, scale: float):
        try:
            return shuffled_gaussian_report(plan, event, delta, accountant, scale)
        except ValueError:  # the chain cannot certify this noise level (isrl_bound=False): not a usable level
            return SimpleNamespace(epsilon=math.inf)

    return ReportPrivacy(
        epsilon_fn=lambda delta, accountant, scale: shuffled_gaussian_report(plan, event, delta, accountant, scale),
        values_fn=lambda scale, delta, accountant: {noise.field: noise.noise_multiplier * scale},
        accountants=tuple(a.value for a in ShuffleAccountant), neighboring="replace-one", privacy_unit="record",
        rtol=1e-6, search_fn=search)


def _chain_notes(event: ShuffleEvent, mode: str, rounds: int, k: int) -> list[str]:
    notes = [
        f"Numerical chain (Theorem G.1 structure): Gaussian local randomizer (sensitivity 2L), "
        f"{'numerical' if mode == 'tight' else 'closed-form'} Feldman-McMillan-Talwar amplification over "
        f"M={event.min_reports} shuffled reports, subsampling, advanced composition over R={rounds} "
        "rounds; an upper bound, not exact",
        "participation='hidden': the analyzer sees only shuffled messages (the paper's SDP model), so silo "
        "sampling amplifies" if event.participation == "hidden" else
        "participation='public': no amplification from silo sampling (the analyzer knows who reported)",
    ]
    if k > 1:
        notes.append(f"K={k} > 1: each report is treated as a local randomizer of its whole K-record batch "
                     "(sensitivity 2L, valid but conservative; the paper's proof fixes K = 1)")
    return notes


def shuffled_gaussian_report(plan, event: ShuffleEvent, delta: float, accountant: str = "shuffle-tight",
                             scale: float = 1.0, local_accountant: str = "rdp"):
    """``SdpReport`` of Gaussian silo reports behind a shuffler: the central shuffle-DP (eps, delta) of the run
    (replace-one, unit ``record``) and each silo's local ISRL-DP guarantee.

    Central epsilon: Theorem G.1's chain (`isrl_shuffle_chain`) and, with ``event.isrl_bound``, the smaller of it and
    the silos' ISRL-DP epsilon at ``delta`` (``central.accountant`` names the one that certified; ``details`` holds
    ``chain_epsilon`` and ``isrl_epsilon``). The chain certifies only where its conditions hold and its composed
    delta is <= ``delta``. The noise is a multiplier z of the per-record sensitivity (contribution bound 1;
    ``central.noise_std`` in those units); the chain's local randomizer is a silo's whole K-record batch, sensitivity
    2L = K times the per-record one (conservative for K > 1). ``scale`` multiplies z (the calibration family).
    """
    from dpjax.accounting.schedules import PrivacyReport, SdpReport, Sampling

    noise = _one_gaussian(plan)
    mode = _CHAIN_MODE[ShuffleAccountant(v.check_choice("accountant", accountant,
                                                         tuple(a.value for a in ShuffleAccountant)))]
    delta = v.check_open_unit("delta", delta)
    sel = plan.selection
    if len(set(sel.batch_sizes)) != 1 or sel.batch_sizes[0] is None:
        raise ValueError(f"batch_sizes={sel.batch_sizes}: the shuffle chain needs one batch size K for every silo")
    k, n, silos = int(sel.batch_sizes[0]), min(sel.dataset_sizes), len(sel.dataset_sizes)
    # K = 1 with replacement is a uniform 1-subset: the same law as without replacement.
    sampling = Sampling.WITHOUT_REPLACEMENT if k == 1 else sel.sampling
    if sampling.value not in _RECORD_SAMPLING:
        raise ValueError(f"sampling={sampling.value!r}: the shuffle chain analyses minibatches drawn with or "
                         "without replacement")
    z = noise.noise_multiplier * scale
    unit_sensitivity = 2.0  # replace-one, contribution bound 1
    local_plan = dataclasses.replace(plan, aggregation=None, selection=dataclasses.replace(sel, sampling=sampling),
                                     noises=(dataclasses.replace(noise, noise_multiplier=z),))
    local = local_plan.gaussian_spec().epsilon(delta, local_accountant)
    notes = _chain_notes(event, mode, plan.num_rounds, k)
    details: dict = {}
    chain_eps, chain_delta = math.inf, delta
    if z > 0:
        try:
            chain = isrl_shuffle_chain(z * unit_sensitivity, k * unit_sensitivity / 2, n, silos, event.min_reports,
                                       plan.num_rounds, delta, mode, batch_size=k, sampling=sampling.value,
                                       participation=event.participation)
            if chain["delta"] > delta:
                raise ValueError(f"its composed delta {chain['delta']:.3g} exceeds delta={delta!r}")
        except ValueError as exc:
            if not event.isrl_bound:
                raise ValueError(f"accountant={accountant!r} cannot certify this run: {exc}") from None
            notes.append(f"the {accountant} chain does not apply ({exc})")
            details["chain_error"] = str(exc)
        else:
            chain_eps, chain_delta = chain["epsilon"], chain["delta"]
            details |= dict(chain) | {"message_epsilon": chain["eps0"], "message_delta": chain["delta0"]}
    details["chain_epsilon"] = chain_eps
    eps, dl, name = chain_eps, chain_delta, accountant
    if event.isrl_bound:
        details["isrl_epsilon"] = local.epsilon
        if local.epsilon < chain_eps:
            eps, dl, name = local.epsilon, delta, f"isrl-dp:{local_accountant}"
            notes.append(f"certified by the silos' ISRL-DP guarantee ({local_accountant}, ISRL-DP => central DP, "
                         f"App. C); the shuffle chain gives {chain_eps:.4g}")
    central = PrivacyReport(eps, dl, name, sel.sampling, "replace-one", "record", z * unit_sensitivity, tuple(notes))
    return SdpReport(central, local, details)
