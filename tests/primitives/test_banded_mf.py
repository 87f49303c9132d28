"""BandMF strategy optimiser and sensitivity against dense / brute-force computations."""

import itertools

import numpy as np
import pytest
from scipy import optimize

from dpjax.primitives import banded_mf as bmf

pytestmark = pytest.mark.privacy


def _dense_loss(c, n):  # ||c||^2 ||A C^{-1}||_F^2 by a dense solve (independent of the O(n b) recursion)
    a = np.tril(np.ones((n, n)))
    return float(np.sum(np.asarray(c) ** 2) * np.sum(np.linalg.solve(bmf.toeplitz_strategy(c, n).T, a.T) ** 2))


@pytest.mark.parametrize("c", [[1.0], [1.0, 0.5], [0.7, 0.4, 0.3, 0.2]])
def test_loss_matches_dense(c):
    n = 12
    assert bmf.error_stats(c, n)["loss"] == pytest.approx(_dense_loss(c, n), rel=1e-5)


def test_one_band_is_independent_noise():
    # C = I: ||A||_F^2 = n (n + 1) / 2, max error sqrt(n)
    s = bmf.error_stats(bmf.optimize_banded_toeplitz(20, 1), 20)
    assert s["loss"] == pytest.approx(20 * 21 / 2) and s["max_error"] == pytest.approx(np.sqrt(20))


def test_optimiser_matches_scipy_on_dense_loss():
    n, b = 16, 3
    c = bmf.optimize_banded_toeplitz(n, b)
    ref = optimize.minimize(lambda p: _dense_loss(np.r_[1.0, p], n), np.zeros(b - 1), method="Nelder-Mead",
                            options={"xatol": 1e-9, "fatol": 1e-9, "maxiter": 4000})
    assert _dense_loss(c, n) <= ref.fun * (1 + 1e-4)
    assert _dense_loss(c, n) < _dense_loss([1.0], n)  # strictly better than independent noise


@pytest.mark.parametrize("n,bands,sep,k", [(6, 2, 2, 3), (7, 3, 3, 3), (7, 2, 3, 2), (6, 3, 2, 3), (8, 4, 4, 2)])
def test_sensitivity_against_brute_force(n, bands, sep, k):
    rng = np.random.default_rng(n * 10 + bands)
    c = np.tril(rng.uniform(0.1, 1.0, (n, n))) * (np.subtract.outer(np.arange(n), np.arange(n)) < bands)
    gram = c.T @ c
    brute = max(gram[np.ix_(p, p)].sum() for size in range(1, k + 1)
                for p in itertools.combinations(range(n), size)
                if all(q - r >= sep for r, q in zip(p, p[1:])))
    got = bmf.sensitivity_squared(c, sep, k)
    if bands <= sep:
        assert got == pytest.approx(brute, rel=1e-12)
    else:
        assert got >= brute * (1 - 1e-12)  # the fallback is an upper bound
    assert bmf.sensitivity_squared(c, sep, k, exact=True) == pytest.approx(brute, rel=1e-12)


def test_cyclic_toeplitz_sensitivity():
    # unit-norm b-banded Toeplitz, separation b: k = ceil(n/b) participations, each column norm 1 except the
    # truncated last b-1 columns: sens^2 = k (the cyclic pattern 0, b, 2b, ...)
    c = bmf.optimize_banded_toeplitz(12, 3)
    assert bmf.sensitivity_squared(bmf.toeplitz_strategy(c, 12), 3) == pytest.approx(4.0, rel=1e-9)


def test_bands_validation():
    with pytest.raises(ValueError, match="bands=5"):
        bmf.optimize_banded_toeplitz(4, 5)
