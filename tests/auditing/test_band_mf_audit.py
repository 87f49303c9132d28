"""The BandMF audit's construction, cheaply (its 2 x 10^4-run catalogue test is slow, in test_audits.py): the
certificate is the canary pair's exact Gaussian, each mutant is a real privacy bug (its exact epsilon exceeds the
certificate), and the mutated parts do what their names say."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting import gdp
from dpjax.auditing import band_mf as audit_mod
from dpjax.auditing.audit import FamilyRun
from dpjax.auditing.mechanisms import FAMILY_AUDITS, build_audit
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.primitives import banded_mf

pytestmark = pytest.mark.privacy


@pytest.mark.parametrize("name,mutants", [("dp-sgd-band-mf", {"half-noise", "noise-not-correlated"}),
                                           ("dp-sgd-band-mf-separation", {"separation-ignored"})])
def test_certificate_is_the_pairs_gaussian_and_every_mutant_leaks_more(name, mutants):
    audit = build_audit(name)
    assert name in FAMILY_AUDITS["dp-sgd"]
    d = audit.details
    k, z = d["participations"], float(audit.dataset["noise_multiplier"])
    assert k == d["rounds"] // (d["n"] // d["batch_size"]) and d["bands"] > 1 and k > 1
    exact = audit.exact()
    # bands <= T: the Gram matrix vanishes between participations, ||C x|| = sqrt(k) (mu = sqrt(k) / z)
    assert exact["mu"] == pytest.approx(math.sqrt(k) / z, rel=1e-5)
    assert exact["epsilon"] == pytest.approx(gdp.gdp_epsilon(math.sqrt(k) / z, audit.certificate.delta), rel=1e-6)
    assert exact["epsilon"] <= audit.certificate.epsilon * (1 + 2e-3)
    assert audit.certificate.epsilon <= exact["epsilon"] * (1 + 2e-3)
    for name in ("separation_ignored_epsilon", "noise_not_correlated_epsilon", "half_noise_epsilon"):
        assert exact[name] > 1.5 * audit.certificate.epsilon, name
    assert set(audit.mutants) == mutants
    assert all(isinstance(audit.mutants[m], FamilyRun) for m in mutants - {"half-noise"})


def test_repeated_blocks_put_a_record_in_consecutive_rounds():
    data = SiloData.from_silos([np.zeros((8, 2), np.float32)], [np.zeros(8, np.float32)])
    sel = audit_mod._RepeatedBlocks(2, False, repeats=3)
    state = sel.init(None, Context(jnp.int32(0), jax.random.key(0), None, data))
    rounds = [r for r in range(12) if 0 in np.asarray(sel.update(data, state, Context(jnp.int32(r),
                                                                                      jax.random.key(r), None))[0]
                                                       .indices[0]).tolist()]
    assert rounds == [0, 1, 2]  # row 0: block 0 three rounds in a row (the audited order: rounds 0, 4, 8)


def test_fresh_buffer_releases_m_w_not_c_inverse_w():
    coeffs = tuple(banded_mf.optimize_banded_toeplitz(10, 3))
    part = audit_mod._FreshBuffer(coeffs)
    w = jax.random.normal(jax.random.key(0), (10, 1))
    buf, out = jnp.zeros((2, 1)), []
    for t in range(10):
        z, buf = part.correlate(w[t], buf)
        out.append(float(z[0]))
    c = np.asarray(part.coeffs)
    m = np.eye(10) / c[0] - sum(c[j] / c[0] * np.eye(10, k=-j) for j in range(1, 3))
    np.testing.assert_allclose(out, m @ np.asarray(w[:, 0], np.float64), rtol=1e-5, atol=1e-5)
    correct = np.linalg.solve(banded_mf.toeplitz_strategy(c, 10), np.asarray(w[:, 0], np.float64))
    assert np.abs(np.asarray(out) - correct).max() > 0.1  # not the audited noise
