"""BandMF privatizer: the on-the-fly correlated noise equals the dense C^{-1} W, with an O(bands x d) buffer."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.parts.band_mf import BandMfNoise
from dpjax.primitives import banded_mf as bmf

pytestmark = pytest.mark.privacy


@pytest.mark.parametrize("coeffs", [(1.0,), (0.8, 0.6), (0.6, 0.4, 0.35, 0.3, 0.2)])
def test_released_noise_is_dense_inverse(coeffs):
    n, d = 17, 3
    part = BandMfNoise(coeffs)
    with jax.enable_x64(True):
        w = np.random.default_rng(0).standard_normal((n, d))
        params = {"a": jnp.zeros((d,), jnp.float64), "b": jnp.zeros((1,), jnp.float64)}
        state = part.init(params, None)
        assert state["a"].shape == (len(coeffs) - 1, d) and state["b"].shape == (len(coeffs) - 1, 1)
        step = jax.jit(part.correlate)
        zs = []
        for t in range(n):
            z, state = step({"a": jnp.asarray(w[t]), "b": jnp.asarray(w[t, :1])}, state)
            assert state["a"].shape == (len(coeffs) - 1, d)  # the buffer never grows with t
            zs.append(np.asarray(z["a"]))
    c = np.asarray(coeffs) / np.linalg.norm(coeffs)
    dense = np.linalg.solve(bmf.toeplitz_strategy(c, n), w)  # C^{-1} W, float64
    np.testing.assert_allclose(np.stack(zs), dense, rtol=0, atol=1e-10)


def test_uncorrelated_buffer_is_detected():
    # a mutant that ignores its buffer releases w / c_0, far from C^{-1} W for bands > 1
    part = BandMfNoise((0.8, 0.6))
    w = np.random.default_rng(1).standard_normal((8, 2))
    dense = np.linalg.solve(bmf.toeplitz_strategy(part.coeffs, 8), w)
    assert np.max(np.abs(w / part.coeffs[0] - dense)) > 0.1


def test_coeffs_validation():
    with pytest.raises(ValueError, match="coeffs="):
        BandMfNoise((0.0, 1.0))
