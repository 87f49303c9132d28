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

from dpjax.engine.roles import Batch, Context, Sensitive
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


def _parts_estimate(randomizer, analyzer, key, x, weights, available, params, per_round, batch_size):
    """What ``PvecRandomizer`` then ``PvecAnalyzer`` deliver on ``x [M, U, d]`` (the mean)."""

    M = x.shape[0]
    batch = Batch(None, available, jnp.zeros(weights.shape, jnp.int32), weights, jnp.zeros((M,), bool), M)
    hp = type("HP", (), {"pvec": params, "batch": jnp.array([batch_size], jnp.int32)})()
    ctx = Context(jnp.int32(0), key, hp, batch=batch)
    reports, _ = randomizer.update(Sensitive(x, 1.0, "replace-one"), (), ctx)
    mean, _ = analyzer.update(reports, (), ctx)
    return mean.value


def test_one_randomizer_and_analyzer_serve_both_key_derivations():
    """The one P_vec implementation (dpjax.parts.pvec): with keys 'noise-stream' on one party (the
    shuffle-SCO families) it is ``pvec_chunked_sum`` / ``pvec_bits_sum`` on that round's noise key, bit for
    bit; with keys 'silo-streams' (ISRL-DP's silos) silo i's report is ``pvec_user_counts`` on silo i's
    rounding and noise keys, and unavailable silos are left out of the sum. Wrong configurations name
    the argument."""
    from dpjax import keys as K

    rng = np.random.default_rng(3)
    key = jax.random.key(11)
    x = jnp.asarray(rng.uniform(-1, 1, (1, 9, 4)), jnp.float32)
    w = jnp.asarray(rng.uniform(size=(1, 9)) < 0.7)
    per_round = sp.PvecParams.create(np.array([6]), np.array([40]), np.array([0.3]))
    one = sp.PvecParams(6, 40, np.float32(0.3))
    # each comparison is one compiled program holding both sides (run op by op they took ~260 compiles)
    def noise_stream(level, direct_sum):
        def both(k):
            direct = direct_sum(K.stream_key(k, "noise"))
            rz = P.PvecRandomizer(4, per_round=True, keys="noise-stream", level=level, bit_buffer=(8, 64))
            an = P.PvecAnalyzer(per_round=True, level=level, batch_field="batch")
            out = _parts_estimate(rz, an, k, x, w, jnp.ones((1,), bool), per_round, True, 9)
            return out, Sensitive(direct, 1.0, "replace-one").divided(jnp.float32(9)).value
        return jax.jit(both)(key)

    for level, direct_sum in (("counts", lambda nk: P.pvec_chunked_sum(nk, x[0], w[0], one, 1.0, 2**12)),
                              ("bits", lambda nk: P.pvec_bits_sum(nk, x[0], w[0], one, 1.0, 8, 64))):
        out, mean = noise_stream(level, direct_sum)
        np.testing.assert_array_equal(np.asarray(out), np.asarray(mean))

    xs = jnp.asarray(rng.uniform(-1, 1, (3, 5, 4)), jnp.float32)
    ws = jnp.ones((3, 5), bool)
    available = jnp.array([True, False, True])
    rz, an = P.PvecRandomizer(4, 2**10), P.PvecAnalyzer(5, None)

    @jax.jit
    def silo_streams(k):
        out = _parts_estimate(rz, an, k, xs, ws, available, one, False, 1)
        rk = K.silo_keys(K.stream_key(k, "rounding"), 3)
        nk = K.silo_keys(K.stream_key(k, "noise"), 3)
        counts = [sp.pvec_user_counts(rk[i], nk[i], xs[i], ws[i], one, 1.0, 2**10) for i in (0, 2)]
        return out, sp.pvec_analyze(counts[0] + counts[1], one, 1.0) / np.float32(10)  # M_r K = 2 x 5

    out, expected = silo_streams(key)
    np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6)

    with pytest.raises(ValueError, match="level"):
        P.PvecRandomizer(4, level="bytes")
    with pytest.raises(ValueError, match="keys"):
        P.PvecRandomizer(4, keys="global")
    with pytest.raises(ValueError, match="trial_groups"):
        P.PvecRandomizer(4, trial_groups=2)
    with pytest.raises(ValueError, match="batch_size"):
        P.PvecAnalyzer()
    with pytest.raises(ValueError, match="noise-stream"):
        _parts_estimate(P.PvecRandomizer(4, keys="noise-stream"), an, key, xs, ws, available, one, False, 1)
