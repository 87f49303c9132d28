"""The dp-fedavg-band-mf audit's construction, cheaply (its 2 x 10^4-run catalogue test is slow, in test_audits.py):
the certificate is the pair's exact value (k Poisson-subsampled Gaussians of shift 1 / z), the half-noise mutant is
a real privacy bug, and the score is the exact log-likelihood ratio of D' against D, checked against a brute-force
sum over the canary's group and participation patterns of multivariate normal densities."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from dpjax.auditing.audit import FamilyRun
from dpjax.auditing.mechanisms import FAMILY_AUDITS, build_audit
from dpjax.primitives import banded_mf

pytestmark = pytest.mark.privacy


def test_certificate_is_the_pairs_exact_value_and_half_noise_leaks_more():
    audit = build_audit("dp-fedavg-band-mf")
    assert FAMILY_AUDITS["dp-fedavg-band-mf"] == ("dp-fedavg-band-mf",)
    assert isinstance(audit.mechanism, FamilyRun) and audit.mechanism.registered == "dp-fedavg-band-mf"
    d = audit.details
    assert d["bands"] > 1 and d["participations"] == d["rounds"] // d["groups"] > 1
    exact = audit.exact()
    assert exact["shift_in_noise_stds"] == pytest.approx(1 / float(audit.dataset["noise_multiplier"]))
    assert audit.certificate.epsilon <= exact["epsilon"] * (1 + 2e-3)
    assert exact["epsilon"] <= audit.certificate.epsilon * (1 + 2e-3)
    assert exact["half_noise_epsilon"] > 1.5 * audit.certificate.epsilon
    assert audit.certificate.neighboring == "add-remove"
    assert set(audit.mutants) == {"half-noise", "noise-not-scaled-by-clip"}


def test_score_is_the_exact_likelihood_ratio():
    """log p_D'(v) / p_D(v) with v = C_s u: D is N(0, I); D' is the mixture over the canary's group g (uniform) and
    its participations b in {0, 1}^k (each w.p. q) of N(C_s x_{g,b} / z, I), x_{g,b} the indicator of the rounds
    g + j p with b_j = 1. Written out term by term (3 x 16 terms) with scipy's multivariate normal."""
    audit = build_audit("dp-fedavg-band-mf")
    d = audit.details
    z, clip = float(audit.dataset["noise_multiplier"]), float(audit.dataset["clip_norm"])
    rounds, p, q, k, m = d["rounds"], d["groups"], d["sampling_rate"], d["participations"], d["cohort"]
    strategy = banded_mf.toeplitz_strategy(np.asarray(d["coeffs"]) / np.linalg.norm(d["coeffs"]), rounds)
    sigma = float(np.float32(z) * np.float32(clip)) / m
    rng = np.random.default_rng(0)
    for shift in (0.0, 1.0):
        v = rng.normal(size=rounds) + shift * strategy[:, 0] / z  # around D, and around D' with the canary in round 0
        u = np.linalg.solve(strategy, v)
        inc = np.zeros((rounds, 2), np.float32)
        inc[:, 0] = -u * sigma
        terms = []
        for g in range(p):
            for b in itertools.product((0, 1), repeat=k):
                x = np.zeros(rounds)
                x[[g + j * p for j in range(k) if b[j]]] = 1.0
                weight = q ** sum(b) * (1 - q) ** (k - sum(b)) / p
                terms.append(math.log(weight) + stats.multivariate_normal.logpdf(v, strategy @ x / z)
                             - stats.multivariate_normal.logpdf(v, np.zeros(rounds)))
        assert float(audit.score(inc)) == pytest.approx(float(special.logsumexp(terms)), abs=2e-4, rel=1e-4)
