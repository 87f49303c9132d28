"""Exact strong-adversary accountant for DP-SGD with batch / individual clipping (van Dijk, Nguyen, Nguyen & Phan,
"Generalizing DP-SGD with Shuffling and Batch Clipping", Appendices C-F).

Setting: N records, each round uses m subsets of s records (batch size ms); each subset's (mean) update is clipped
to C and the round adds N(0, (2 C sigma)^2 I), so `sigma` is the noise multiplier w.r.t. the replace sensitivity 2C.
If L of the m subsets of a round touch the g differing records, the round is G_{L/sigma} (App. C.4-C.5). Over E
epochs (B = floor(N/(ms)) rounds each) the realised c^2 = sum_rounds L^2 gives G_{c/sigma} (Eq. 13), and the run is
the labelled mixture over the exact law q_E(c^2) (Lemma B.1; exact for the strong adversary A_1, valid in general):

    delta(eps) = sum_{c^2} q_E(c^2) delta_GDP(eps; c/sigma) + rho,

rho the probability mass dropped in the convolutions. Relation: replace-up-to-g with N fixed (N stays secret).

`c2_law` computes q_E exactly (inclusion-exclusion occupancy law) for ``sampling="shuffle"`` (random permutation
per epoch) and ``"subsample"`` (a fresh uniform ms-subset each round). `paper_bounds` reproduces the paper's printed
closed forms with a `valid` flag; the subsampling tails e^{-E} are wrong (the Hoeffding step in Lemmas E.2, E.3, E.5
omits the 1/trials factor) and the printed lower bound is violated for E = 100 (N = 60000, ms = 256); Theorem F.1's
q_j is the Bose-Einstein law, not the permutation law.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import signal, special

from dpjax import _validate as v
from dpjax.accounting import fdp as _fdp
from dpjax.accounting.gdp import gdp_delta

__all__ = [
    "round_occupancy_law", "C2Law", "c2_law", "batch_clipping_epsilon", "batch_clipping_delta", "paper_bounds",
    "shuffle_bose_einstein_qj", "standard_dp_sgd_clt_mu", "batch_clipping_report", "batch_clipping_privacy"
]

_TRUNC = 1e-20  # upper-tail mass below which convolutions are truncated (charged to delta)


def _comb(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


@lru_cache(maxsize=256)
def round_occupancy_law(m: int, s: int, t: int) -> tuple[float, ...]:
    """Pr[L = l | t], l = 0..min(t, m): t differing records in uniformly random slots of a round with m subsets of s
    slots, L = number of subsets hit: C(m,l) sum_i (-1)^i C(l,i) C((l-i)s, t) / C(ms, t) (exact integers)."""
    m = v.check_int("m", m, min_value=1)
    s = v.check_int("s", s, min_value=1)
    t = v.check_int("t", t, min_value=0, max_value=m * s)
    if t == 0:
        return (1.0,)
    denom = _comb(m * s, t)
    out = [0.0]
    for l in range(1, min(t, m) + 1):
        num = sum((-1) ** i * _comb(l, i) * _comb((l - i) * s, t) for i in range(l + 1))
        out.append(_comb(m, l) * num / denom)
    return tuple(out)


@dataclass(frozen=True)
class C2Law:
    """Law of c^2 over E epochs: probs[k] = Pr[c^2 = k]; `dropped` = truncated upper-tail mass."""

    probs: np.ndarray
    dropped: float

    def as_dict(self) -> dict[int, float]:
        return {int(k): float(p) for k, p in enumerate(self.probs) if p > 0}

    def mu_law(self, sigma: float) -> dict[float, float]:
        return {math.sqrt(k) / sigma: float(p) for k, p in enumerate(self.probs) if p > 0}


def _truncate(p: np.ndarray) -> tuple[np.ndarray, float]:
    p = np.clip(p, 0.0, None)
    tail = np.cumsum(p[::-1])[::-1]  # tail[k] = sum_{j >= k}
    keep = np.nonzero(tail > _TRUNC)[0]
    cut = int(keep[-1]) + 1 if len(keep) else 1
    dropped = float(tail[cut]) if cut < len(p) else 0.0
    return p[:cut], dropped


def _power(base, n: int, mul, result):
    """``result * base^n`` by repeated squaring under the product ``mul``."""
    while n > 0:
        if n & 1:
            result = mul(result, base)
        n >>= 1
        if n:
            base = mul(base, base)
    return result


def _conv_power(p: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """n-fold self-convolution with upper-tail truncation. Returns (pmf, dropped): every input sums to 1, so the
    mass missing at the end is what truncation removed from the upper (worst-privacy) tail, plus float rounding
    (1e-15 is added as a rounding allowance)."""
    result = _power(p.copy(), n, lambda a, b: _truncate(signal.convolve(a, b, method="auto"))[0], np.array([1.0]))
    result = np.clip(result, 0.0, None)
    dropped = max(0.0, 1.0 - float(result.sum())) + 1e-15
    return result, min(1.0, dropped)


def _check_sizes(n_records, s, m, g, epochs):
    n_records = v.check_int("n_records", n_records, min_value=1)
    s = v.check_int("s", s, min_value=1)
    m = v.check_int("m", m, min_value=1)
    g = v.check_int("g", g, min_value=1)
    epochs = v.check_int("epochs", epochs, min_value=1)
    if m * s > n_records:
        raise ValueError(f"m*s={m * s} must be <= n_records={n_records}")
    if g > n_records:
        raise ValueError(f"g={g} must be <= n_records={n_records}")
    return n_records, s, m, g, epochs


@lru_cache(maxsize=128)
def c2_law(sampling: str, n_records: int, s: int, m: int, g: int, epochs: int,
           rounds_per_epoch: int | None = None) -> C2Law:
    """Exact law of c^2 (Definition 5.1) for ``sampling`` in {"shuffle", "subsample"}.

    Args:
      n_records: N. s: records per clipped subset. m: subsets per round (m = 1: batch clipping; s = 1: individual
        clipping). g: group size. epochs: E. rounds_per_epoch: B, default floor(N/(ms)); with shuffling each epoch
        uses the first B blocks of a uniform permutation, the other N - B ms records sit it out (B <= floor(N/(ms)));
        with subsampling the run has E B independent rounds.
    """
    v.check_choice("sampling", sampling, ("shuffle", "subsample"))
    n_records, s, m, g, epochs = _check_sizes(n_records, s, m, g, epochs)
    ms = m * s
    rounds = n_records // ms
    if rounds_per_epoch is not None:
        rounds = v.check_int("rounds_per_epoch", rounds_per_epoch, min_value=1,
                             max_value=rounds if sampling == "shuffle" else None)
    if sampling == "subsample":
        # per round: t ~ Hypergeometric(N, g, ms); Y = L^2
        ymax = min(g, m) ** 2
        py = np.zeros(ymax + 1)
        log_den = special.gammaln(n_records + 1) - special.gammaln(ms + 1) - special.gammaln(n_records - ms + 1)
        for t in range(0, min(g, ms) + 1):
            if ms - t > n_records - g:
                continue
            lp = (math.lgamma(g + 1) - math.lgamma(t + 1) - math.lgamma(g - t + 1)
                  + math.lgamma(n_records - g + 1) - math.lgamma(ms - t + 1) - math.lgamma(n_records - g - ms + t + 1)
                  - log_den)
            pt = math.exp(lp)
            for l, pl in enumerate(round_occupancy_law(m, s, t)):
                py[l * l] += pt * pl
        py[0] = max(0.0, 1.0 - py[1:].sum())  # normalise via the zero mass (keeps the law summing to 1 despite rounding)
        return C2Law(*_conv_power(py, rounds * epochs))
    # shuffle: per-epoch generating function in x (records placed) and z (c^2)
    log_scale = -(special.gammaln(n_records + 1) - special.gammaln(g + 1) - special.gammaln(n_records - g + 1)) / g
    zdeg = g * min(g, m)
    poly = np.zeros((g + 1, zdeg + 1))
    for t in range(0, min(g, ms) + 1):
        w = math.exp(math.log(_comb(ms, t)) + t * log_scale) if t else 1.0
        for l, pl in enumerate(round_occupancy_law(m, s, t)):
            if l * l <= zdeg:
                poly[t, l * l] += w * pl
    leftover = n_records - rounds * ms
    extra = np.zeros((g + 1, zdeg + 1))
    for t in range(0, min(g, leftover) + 1):
        extra[t, 0] = math.exp(math.log(_comb(leftover, t)) + t * log_scale) if t else 1.0

    res = _power(poly, rounds, lambda a, b: signal.convolve2d(a, b)[: g + 1, : zdeg + 1], extra)
    per_epoch = np.clip(res[g], 0.0, None)
    per_epoch = per_epoch / per_epoch.sum()  # exact up to rounding; the total is 1 analytically
    return C2Law(*_conv_power(per_epoch, epochs))


def batch_clipping_delta(law: C2Law, sigma: float, epsilon: float) -> float:
    """delta(eps) = sum q(c^2) delta_GDP(eps; c/sigma) + dropped mass."""
    sigma = v.check_positive("sigma", sigma)
    return _fdp.mixture_delta(law.mu_law(sigma), epsilon, law.dropped)


def batch_clipping_epsilon(sampling: str, n_records: int, s: int, m: int, g: int, epochs: int, sigma: float,
                           delta: float) -> float:
    """Exact strong-adversary epsilon at `delta` (delta of the mixture, inverted in eps)."""
    sigma = v.check_positive("sigma", sigma)
    delta = v.check_open_unit("delta", delta)
    law = c2_law(sampling, n_records, s, m, g, epochs)
    return _fdp.mixture_epsilon(law.mu_law(sigma), delta, law.dropped)


def shuffle_bose_einstein_qj(n_records: int, s: int, g: int) -> dict[int, float]:
    """Theorem F.1's printed q_j = C(N/s, j) C(g-1, j-1) / C(N/s - 1 + g, g) (WRONG: Bose-Einstein occupancy, not the permutation law)."""
    n_records = v.check_int("n_records", n_records, min_value=1)
    s = v.check_int("s", s, min_value=1)
    g = v.check_int("g", g, min_value=1)
    b = n_records // s
    den = _comb(b - 1 + g, g)
    return {j: _comb(b, j) * _comb(g - 1, j - 1) / den for j in range(1, g + 1)}


def standard_dp_sgd_clt_mu(n_records: int, batch_size: int, epochs: int, sigma: float) -> float:
    """Standard-adversary CLT reference mu = sqrt(ms E/N) sqrt(e^{1/sigma^2} - 1) (not a certificate)."""
    n_records = v.check_int("n_records", n_records, min_value=1)
    batch_size = v.check_int("batch_size", batch_size, min_value=1)
    epochs = v.check_int("epochs", epochs, min_value=1)
    sigma = v.check_positive("sigma", sigma)
    return math.sqrt(batch_size * epochs / n_records) * math.sqrt(math.expm1(1 / sigma**2))


def paper_bounds(case: str, n_records: int, s: int, m: int, g: int, epochs: int, sigma: float,
                 delta: float | None = None, gamma: float = 1.0) -> dict:
    """The paper's printed closed forms, verbatim, with a validity flag (paper_formula mode).

    case: "SS-BC" (Lemma E.5; also SS-1 = Lemmas E.2/E.3 with g = 1), "SS-IC" (Lemma E.4), "SH-1" (Lemma F.2),
    "SH-BC" (Theorem F.1 batch, u per epoch), "SH-GC" (Theorem F.1 general clipping, l per epoch). Returns mu_L, l,
    (mu_U, u), valid, note and, if `delta` is given, the epsilon implied by the lower bound (delta_GDP(mu_L) + l).
    """
    v.check_choice("case", case, ("SS-BC", "SS-1", "SS-IC", "SH-1", "SH-BC", "SH-GC"))
    n_records, s, m, g, epochs = _check_sizes(n_records, s, m, g, epochs)
    sigma = v.check_positive("sigma", sigma)
    gamma = v.check_positive("gamma", gamma)
    out: dict = {"case": case}
    E = epochs
    if case in ("SS-BC", "SS-1"):
        q = 1.0 if case == "SS-1" else (n_records / s) * (1.0 - math.prod((n_records - s - j) / (n_records - j)
                                                                           for j in range(g)))
        qe = q * E
        out.update(q=q, mu_L=math.sqrt((1 + 1 / math.sqrt(2 * qe)) * qe) / sigma,
                   mu_U=math.sqrt((1 - 1 / math.sqrt(2 * qe)) * qe) / sigma, l=math.exp(-qe), u=math.exp(-qe),
                   valid=False, note="tails e^{-qE} wrong (Hoeffding without 1/trials; spec B2, V11-V13)")
    elif case == "SS-IC":
        beta = math.exp(n_records / (n_records - g - m)) + gamma
        cl = math.sqrt(beta * min(m, g) * g * E)
        out.update(beta=beta, c_L=cl, mu_L=cl / sigma, l=math.exp(-gamma * g * E), valid=True,
                   note="Lemma E.4 (valid; loose by sqrt(e + gamma) in mu)")
    elif case == "SH-1":
        out.update(mu_L=math.sqrt(E) / sigma, l=0.0, mu_U=math.sqrt(E) / sigma, u=0.0, valid=True, note="exact (Lemma F.2)")
    elif case == "SH-BC":
        b = n_records / s
        u = g * g / (b - g - g * g)
        out.update(mu_L=math.sqrt(g * E) / sigma, l=0.0, mu_U=math.sqrt(g * E) / sigma, u=min(1.0, E * u), u_epoch=u,
                   valid=True, note="lower bound G_{sqrt(gE)/sigma} valid for any g; paper's q_j wrong (B3)")
    else:  # SH-GC
        l_epoch = g * g * m * s / (n_records - g)
        out.update(mu_L=math.sqrt(g) * math.sqrt(E) / sigma, l=min(1.0, E * l_epoch), l_epoch=l_epoch, valid=True,
                   note="valid but l is an additive delta floor (E l); compute the exact law instead")
    if delta is not None:
        d = v.check_open_unit("delta", delta)
        l = out["l"]
        out["epsilon"] = math.inf if l >= d else _fdp.epsilon_from_tradeoff(lambda e: gdp_delta(out["mu_L"], e) + l, d)
    return out


# -- The accountants of DP-SGD-General (Algorithm 1), as PrivacyReports ----------------------------
#: ``strong-exact``: the exact strong-adversary mixture (Definition 5.2, Theorem 5.6) over the exact
#: law of c^2; ``sqrt-gE``: G_{sqrt(gE)/sigma} (a certified lower bound for shuffling with batch
#: clipping or g = 1, Theorem F.1 / Lemma F.2; an approximation otherwise, marked in the notes);
#: ``generic-group``: G_{g sqrt(E)/sigma} (the g = 1 shuffling law composed with generic group
#: privacy); ``standard``: a standard-adversary accountant (rdp, amplification by sampling), g = 1.
BATCH_CLIPPING_ACCOUNTANTS = ("strong-exact", "sqrt-gE", "generic-group", "standard")


def _epochs_for(sampling: str, num_rounds: int, rounds_per_epoch: int) -> tuple[int, int]:
    """(epochs, rounds per epoch) to feed `c2_law` for `num_rounds` rounds. Shuffling: a trailing partial epoch counts
    as a full one (its transcript is a prefix of the full epoch's: post-processing). Subsampling: the rounds are
    i.i.d., so the run is one "epoch" of exactly `num_rounds` rounds."""
    if sampling == "subsample":
        return 1, num_rounds
    return -(-num_rounds // rounds_per_epoch), rounds_per_epoch


def batch_clipping_report(
    accountant: str, *, sampling: str, n_records: int, s: int, m: int, num_rounds: int, rounds_per_epoch: int,
    sigma: float, delta: float, group_size: int = 1,
):
    """The (epsilon, delta) guarantee (a ``PrivacyReport``) of a DP-SGD-General run (Algorithm 1, noise
    N(0, (2C sigma)^2 I)). Relation: replace-up-to-g with N fixed (g = ``group_size``), index representation. The
    strong adversary knows every round's index sets (Appendix C.2); its guarantee holds against any weaker one.
    """
    from dpjax.accounting.schedules import PrivacyReport
    from dpjax.accounting.gdp import gdp_epsilon

    v.check_choice("accountant", accountant, BATCH_CLIPPING_ACCOUNTANTS)
    v.check_choice("sampling", sampling, ("shuffle", "subsample"))
    n_records, s, m, g, num_rounds = _check_sizes(n_records, s, m, group_size, num_rounds)
    rounds_per_epoch = v.check_int("rounds_per_epoch", rounds_per_epoch, min_value=1,
                                   max_value=(n_records // (m * s)) if sampling == "shuffle" else None)
    sigma = v.check_positive("sigma", sigma)
    delta = v.check_open_unit("delta", delta)
    epochs, b = _epochs_for(sampling, num_rounds, rounds_per_epoch)
    epochs_equiv = num_rounds * m * s / n_records if sampling == "subsample" else epochs
    neighboring = "replace-one" if g == 1 else f"replace-up-to-{g}"
    notes: list[str] = [f"s={s}, m={m}, rounds={num_rounds}, epochs={epochs_equiv:.4g}, sigma={sigma:g}"]
    if accountant == "strong-exact":
        law = c2_law(sampling, n_records, s, m, g, epochs, b)
        eps = _fdp.mixture_epsilon(law.mu_law(sigma), delta, law.dropped)
        notes.append("exact strong-adversary mixture over q_E(c^2) (Definition 5.2, Lemma B.5); "
                     f"truncated mass {law.dropped:.1e} charged to delta")
    elif accountant == "sqrt-gE":
        eps = gdp_epsilon(math.sqrt(g * epochs_equiv) / sigma, delta)
        if sampling == "shuffle" and (m == 1 or g == 1):
            notes.append("G_{sqrt(gE)/sigma}: certified lower bound (c^2 <= gE always; Theorem F.1, Lemma F.2)")
        else:
            notes.append("G_{sqrt(gE)/sigma}: an APPROXIMATION for this sampling x clipping (not a bound; "
                         "see strong-exact)")
    elif accountant == "generic-group":
        eps = gdp_epsilon(g * math.sqrt(epochs_equiv) / sigma, delta)
        notes.append("G_{g sqrt(E)/sigma}: the g = 1 law G_{sqrt(E)/sigma} with generic group privacy "
                     + ("(valid)" if sampling == "shuffle" else "(for contrast; the g = 1 subsampling law is "
                                                                "the binomial mixture)"))
    else:
        if g != 1:
            raise ValueError(f"accountant='standard' covers group_size=1 only, got group_size={g}; "
                             "use 'strong-exact' for groups")
        from dpjax.accounting import api
        from dpjax.accounting.schedules import GaussianSchedule

        # One record moves the round's clipped sum by <= 2C (L <= 1); noise 2 C sigma.
        shuf = sampling == "shuffle"
        sched = GaussianSchedule(2.0 * sigma, 1.0, "shuffle" if shuf else "without-replacement", b * m * s if shuf
                                 else n_records, m * s, epochs * b if shuf else num_rounds, unit="record")
        which = "gdp" if shuf else "rdp"
        eps = api.compute_epsilon(sched, delta, which).epsilon
        notes.append(f"standard adversary (does not see the batches): {which} accountant"
                     + (", amplification by subsampling credited" if sampling == "subsample" else ""))
    return PrivacyReport(eps, delta, accountant, sampling, neighboring, "record", 2.0 * sigma, tuple(notes))


def batch_clipping_privacy(
    *, sampling: str, dataset_sizes, s: int, m: int, num_rounds: int, rounds_per_epoch: int,
    noise_multiplier: float, field: str = "noise_multiplier", group_size: int = 1, unit: str = "record-in-silo",
    notes: tuple[str, ...] = (),
):
    """The ``PrivacySpec`` of a DP-SGD-General run (Algorithm 1), from its parts' events: a ``ReportPrivacy`` over
    ``BATCH_CLIPPING_ACCOUNTANTS`` (first: ``strong-exact``); each silo of ``dataset_sizes`` is accounted by
    ``batch_clipping_report`` at its own size and the worst report is the run's. Calibration scales
    ``noise_multiplier`` and returns ``{field: sigma}``. Relation: replace-up-to-g with N fixed (g = 1: replace-one).
    """
    from dpjax.accounting.privacy_spec import ReportPrivacy

    v.check_choice("sampling", sampling, ("shuffle", "subsample"))
    sizes = sorted({v.check_int(f"dataset_sizes[{i}]", int(n), min_value=1) for i, n in enumerate(dataset_sizes)})
    if not sizes:
        raise ValueError("dataset_sizes=() must name at least one silo")
    sigma0 = v.check_positive("noise_multiplier", noise_multiplier)
    g = v.check_int("group_size", group_size, min_value=1)
    notes = tuple(notes)

    def epsilon_fn(delta: float, accountant: str, scale: float):
        reports = [batch_clipping_report(accountant, sampling=sampling, n_records=n, s=s, m=m, num_rounds=num_rounds,
                                         rounds_per_epoch=rounds_per_epoch, sigma=sigma0 * scale, delta=delta,
                                         group_size=g) for n in sizes]
        worst = max(reports, key=lambda r: r.epsilon)
        return dataclasses.replace(worst, unit=unit, notes=worst.notes + notes)

    return ReportPrivacy(epsilon_fn, lambda scale, delta, acc: {field: sigma0 * scale}, BATCH_CLIPPING_ACCOUNTANTS,
                         "replace-one" if g == 1 else f"replace-up-to-{g}", unit)
