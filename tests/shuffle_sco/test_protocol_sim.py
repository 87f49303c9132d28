"""Count-level (chunked) and bit-level P_1D / P_vec simulations of the SCO families: unbiasedness,
exact variance, agreement in distribution.

Tolerances. Over R independent repetitions the empirical mean of a coordinate has standard error
sqrt(Var/R): we accept |mean - sum x| <= 4 s.e. (two-sided p = 6e-5 per coordinate). The empirical
variance s^2 satisfies (R-1) s^2/Var ~ chi^2_{R-1} for Gaussian noise; the noise is a binomial with
m b >= 10^3 trials plus bounded rounding terms, whose excess kurtosis is O(1/(m b p)), so we accept
the chi^2 99.9% interval widened by a factor 1.1 on its half-width for that approximation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.parts import pvec as P
from dpjax.primitives import shuffle_protocols as sp

REPS = 2000


def _chi2_ok(sample_var, var, reps):
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1) / (reps - 1)
    lo, hi = 1 - 1.1 * (1 - lo), 1 + 1.1 * (hi - 1)
    return np.all((sample_var / var >= lo) & (sample_var / var <= hi))


def _moments_ok(est, x, params, bound, reps=REPS):
    var = sp.pvec_variance(np.asarray(x), params, bound)
    true = np.asarray(x, np.float64).sum(0)
    assert np.all(np.abs(est.mean(0) - true) <= 4 * np.sqrt(var / reps))
    assert _chi2_ok(est.var(0, ddof=1), var, reps)


def test_p1d_moments_adversarial_inputs():
    """P_1D (d = 1) on n = 100 inputs in [-L, L]: all at -L (0 after the shift), all at L (Delta), at
    fractional positions 1/2 (rounding variance maximal), uniform -- one column each (P_vec with d = 4
    runs one P_1D per coordinate)."""
    n, params, L, g = 100, sp.PvecParams(10, 30, 0.35), 1.0, 10
    x = np.stack([np.full(n, -L), np.full(n, L), np.full(n, -L + 2 * L * 3.5 / g),
                  np.random.default_rng(1).uniform(-L, L, n)], axis=1)
    xj = jnp.asarray(x, jnp.float32)
    f = jax.jit(jax.vmap(lambda k: P.pvec_chunked_sum(k, xj, jnp.ones(n, bool), params, L, 2**12)))
    est = np.asarray(f(jax.random.split(jax.random.key(0), REPS)), np.float64)
    _moments_ok(est, x, params, L)


def test_chunked_pvec_is_unbiased_with_the_exact_variance():
    """More users than one float32-exact chunk: the chunks' binomials add up to Bin(m b, p)."""
    m, d, L = 40, 3, 1.5
    params = sp.PvecParams(6, 25, 0.4)
    gmax = (2**24 - 1) // 7  # chunks of 7 users
    x = np.random.default_rng(2).normal(size=(m, d))
    x = x / np.linalg.norm(x, axis=1, keepdims=True) * L * 0.9
    f = jax.jit(jax.vmap(lambda k: P.pvec_chunked_sum(k, jnp.asarray(x, jnp.float32), jnp.ones(m, bool),
                                                     params, L, gmax)))
    est = np.asarray(f(jax.random.split(jax.random.key(1), REPS)), np.float64)
    _moments_ok(est, x, params, L)


def test_bit_level_equals_count_level_in_distribution():
    """Bit-level (every message materialised and shuffled) vs count-level: KS test, fixed seeds,
    and both unbiased; masked users send nothing."""
    m, d, L = 20, 2, 1.0
    params = sp.PvecParams(4, 40, 0.3)
    x = np.random.default_rng(3).uniform(-0.7, 0.7, (m, d))
    mask = np.arange(m) < 17
    xj, mj = jnp.asarray(x, jnp.float32), jnp.asarray(mask)
    bits = jax.jit(jax.vmap(lambda k: P.pvec_bits_sum(k, xj, mj, params, L, 4, 40)))
    counts = jax.jit(jax.vmap(lambda k: P.pvec_chunked_sum(k, xj, mj, params, L, 8)))
    b = np.asarray(bits(jax.random.split(jax.random.key(4), 400)), np.float64)
    c = np.asarray(counts(jax.random.split(jax.random.key(5), 400)), np.float64)
    for j in range(d):
        assert stats.ks_2samp(b[:, j], c[:, j]).pvalue > 1e-3
    _moments_ok(b, x[mask], params, L, 400)


def test_exact_sum_without_noise_and_on_the_grid():
    """p = 0, b = 0 and inputs with (x + L) g/(2L) integers: both simulators return the sum exactly."""
    params = sp.PvecParams(8, 0, 0.0)
    x = jnp.array([[-1.0, 1.0, 0.25], [0.0, 0.75, -1.0], [0.5, -0.25, 0.0]])
    m = jnp.ones(3, bool)
    both = jax.jit(lambda k: (P.pvec_chunked_sum(k, x, m, params, 1.0, 8), P.pvec_bits_sum(k, x, m, params, 1.0, 8, 4)))
    for out in both(jax.random.key(0)):
        np.testing.assert_allclose(out, x.sum(0), atol=1e-6)
