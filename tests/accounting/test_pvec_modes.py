"""The optional P_vec accounting modes of the shuffle-private SCO spec (§2.3, §3.3): the numerical
privacy-loss-distribution account (heuristic worst case) and the Gaussian-approximation diagnostic,
each checked against an independent recomputation (exact hockey-stick divergences of the binomial
count mechanism computed here with scipy, not with dp_accounting)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import pvec as P
from dpjax.accounting import shuffle_sco as sco
from dpjax.accounting.sco_transcript import transcript_report
from dpjax.algorithms import shuffle_sco as S
from dpjax.algorithms.smoothing import AbsoluteRegression


def _exact_delta(m, p, shift, d, epsilon):
    """max over both orders of the hockey-stick divergence at ``epsilon`` between the d-fold products
    of shift + Bin(m, p) and Bin(m, p) (outer products of the exact pmfs; d <= 2)."""
    sd = math.sqrt(m * p * (1 - p))
    z = np.arange(max(0, int(m * p - 15 * sd)), min(m, int(m * p + 15 * sd)) + shift + 1)
    base, shifted = stats.binom.pmf(z, m, p), stats.binom.pmf(z - shift, m, p)
    out = 0.0
    for a, b in ((shifted, base), (base, shifted)):
        pa, pb = (a, b) if d == 1 else (np.outer(a, a).ravel(), np.outer(b, b).ravel())
        out = max(out, float(np.sum(np.clip(pa - math.exp(epsilon) * pb, 0, None))))
    return out


@pytest.mark.parametrize("g,b,p,n,d,calls", [(8, 200, 0.3, 10, 1, 1), (6, 100, 0.25, 20, 2, 1),
                                             (8, 200, 0.3, 10, 1, 2)])
def test_numerical_epsilon_is_never_below_the_exact_divergence(g, b, p, n, d, calls):
    """The reported eps (pessimistic PLD) must satisfy delta_exact(eps) <= delta, and it must not be
    loose either: at 0.9 eps the exact delta exceeds delta (so the account is tight to ~10%)."""
    delta = 1e-3
    cert = P.pvec_numerical_epsilon(g, b, p, n, d, delta, calls=calls)
    assert cert.shift == math.ceil(2 + g / math.sqrt(d)) and cert.heuristic
    dims = d * calls  # the calls' releases compose like more coordinates
    assert _exact_delta(n * b, p, cert.shift, dims, cert.epsilon) <= delta * (1 + 1e-9)
    assert _exact_delta(n * b, p, cert.shift, dims, 0.9 * cert.epsilon) > delta


def test_gaussian_approx_diagnostic_matches_the_gaussian_hockey_stick():
    """delta(eps) of N(0, s^2) vs N(k, s^2) (closed form) at the reported eps equals delta."""
    g, b, p, n, d, delta = 32, 3_028_194, 0.4999, 51, 10, 1e-6
    eps = P.pvec_gaussian_approx_epsilon(g, b, p, n, d, delta)
    s, k = math.sqrt(n * b * p * (1 - p)), g + 2 * math.sqrt(d)
    exact = stats.norm.cdf(k / (2 * s) - eps * s / k) - math.exp(eps) * stats.norm.cdf(-k / (2 * s) - eps * s / k)
    assert exact == pytest.approx(delta, rel=1e-3)


def test_family_reports_numerical_mode_below_the_lemmas_and_above_the_exact_divergence():
    """P_SGD with d = 1 (one coordinate, one call per user): the numerical report lies between the
    exact divergence of its own shift and the lemma-based certificate; refused by calibration."""
    delta = 1e-6
    fam, hp, plan = S.ShuffleSgd.p_sgd(AbsoluteRegression(1), 5000, 1.0, delta)
    rep = transcript_report(fam.dp_plan([5000], hp), delta, "pvec-numerical")
    lemma = transcript_report(fam.dp_plan([5000], hp), delta, "pvec-lemma").central.epsilon
    ph = plan.phases[0]
    g, b, p = ph.pvec.g, fam.trial_groups * int(np.asarray(hp.pvec.trials)[0]), float(np.asarray(hp.pvec.probability)[0])
    assert rep.central.accountant == "pvec-numerical:pld" and any("HEURISTIC" in x for x in rep.central.notes)
    assert rep.central.epsilon < lemma
    assert _exact_delta(ph.batch * b, p, P.spread_shift(g, 1), 1, rep.central.epsilon) <= delta
    assert rep.details["gaussian_approx_epsilon"] > 0
    with pytest.raises(ValueError, match="heuristic"):
        fam.privacy([5000], hp).calibrate(1.0, delta, "pvec-numerical")


def test_numerical_transcript_composes_an_interactive_phase():
    """A fully interactive phase's T rounds compose inside the PLD: more rounds, larger eps."""
    row = (8, 200, 0.3, 10, False, 3, 1e-4)
    e3, how = sco.transcript_epsilon([row], 1, 1e-3, "pvec-numerical")
    e1, _ = sco.transcript_epsilon([row[:4] + (True, 1, 1e-4)], 1, 1e-3, "pvec-numerical")
    assert e3 > e1 and "3 coordinate releases" in how[0][1]
