"""User-level output perturbation (Ghazi et al., Algorithm 1): the released noise and the
stability step's law, measured from ``release_from_table`` (the code ``del_output_pert`` runs),
equal what ``a1_certified`` accounts; the certificate is the proof of Theorem 3.3 by hand."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting import gdp
from dpjax.accounting import user_level as ul_acc
from dpjax.user_level import mechanisms as ul_mech

from .pins import ALPHA, check_rate, check_std, keys

EPS_PRIME, KAPPA, DELTA_T, SIGMA = 1.0, 3, 1e-4, 0.02


def _release(centres, bottom, draws=20_000):
    fn = jax.jit(jax.vmap(lambda k: ul_mech.release_from_table(k, centres, bottom, SIGMA, EPS_PRIME, KAPPA)))
    status, theta = fn(keys(draws))
    return np.asarray(status), np.asarray(theta, np.float64)


def test_release_noise_std_is_sigma():
    """Every table entry stable (no bottom), all centres 0: the release is N(0, sigma^2 I)."""
    centres = jnp.zeros((2 * KAPPA + 1, 3), jnp.float32)
    status, theta = _release(centres, jnp.zeros((2 * KAPPA + 1,), bool))
    assert np.all(status == ul_mech.OK)
    check_std(theta, SIGMA, "user-level release noise std")


def test_bottom_probability_is_the_tdlap_mass_of_the_unstable_entries():
    """The stability step's randomness is R1 ~ TDLap(eps', kappa): with entries r1 < 2 unstable the
    release is bottom with the pmf's mass there (the quantity the certificate charges)."""
    pmf = ul_acc.tdlap_pmf(EPS_PRIME, KAPPA)
    bottom = jnp.arange(2 * KAPPA + 1) < 2
    status, _ = _release(jnp.zeros((2 * KAPPA + 1, 1), jnp.float32), bottom)
    check_rate(int((status == ul_mech.BOTTOM).sum()), status.size, float(pmf[:2].sum()), "P(bottom)")


def _theorem_3_3(eps_prime, kappa, mu):
    w = np.exp(-eps_prime * np.abs(np.arange(2 * kappa + 1) - kappa))
    p = w / w.sum()
    return p[0] + p[-1] + math.exp(eps_prime) * gdp.gdp_delta(mu, eps_prime)


@pytest.mark.parametrize("mu", [0.5, 1.0])  # the Gaussian step's shift 8 kappa Delta / sigma, in noise stds
def test_a1_certificate_is_theorem_3_3_proof_by_hand(mu):
    """(2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G(eps'; 8 kappa Delta / sigma)); at mu = 0.5, 1 the
    Gaussian term is a large part of delta (about 30 % and 90 %)."""
    sigma = 8 * KAPPA * DELTA_T / mu
    eps, delta = ul_acc.a1_certified(ul_acc.a1_test_params(EPS_PRIME, KAPPA, DELTA_T, sigma))
    assert eps == 2 * EPS_PRIME and delta == pytest.approx(_theorem_3_3(EPS_PRIME, KAPPA, mu), rel=1e-12)
    # the parameter check of the (eps, delta) design reads the same formula through sigma / Delta
    params = ul_acc.UserLevelParams(2 * EPS_PRIME, 0.1, EPS_PRIME, 0.01, KAPPA, KAPPA, 8 * KAPPA / mu, 8 * KAPPA + 2)
    assert ul_acc.user_level_audit(params) == (2 * EPS_PRIME, pytest.approx(_theorem_3_3(EPS_PRIME, KAPPA, mu),
                                                                            rel=1e-12))
    assert ALPHA < delta < 1
