"""Banded Toeplitz matrix-factorization strategies for the prefix-sum workload (BandMF).

The mechanism (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix
Factorization: A unified approach to private training", NeurIPS 2023, Sec. 3) releases ``A x + A C^{-1} w`` for the
prefix-sum workload ``A`` (lower-triangular ones, ``n x n``) and a lower-triangular strategy ``C`` with ``b`` bands
(``C[i, j] = 0`` for ``i - j >= b``), ``w ~ N(0, sigma^2 I)``. Its expected total squared error is
``sens(C)^2 ||A C^{-1}||_F^2`` (sigma in units of the sensitivity), and the optimiser minimises that.

Toeplitz parametrisation (McKenna, "Scaling up the banded matrix factorization mechanism", 2024, Sec. 4):
``C[i, j] = c[i - j]`` for ``0 <= i - j < b``. Then ``C^{-1}`` is lower-triangular Toeplitz too, its first column
``y`` solves ``sum_{j<b} c_j y_{t-j} = [t = 0]`` (O(n b) recursion), ``A C^{-1}`` is Toeplitz with first column
``x = cumsum(y)``, so ``||A C^{-1}||_F^2 = sum_k (n - k) x_k^2`` and the max (last-row) error is
``sens sqrt(sum_k x_k^2)``: every evaluation (and its gradient, by jax autodiff) is O(n b), never a dense inverse.

Sensitivity (Choquette-Choo et al. 2023, Thm 2 / Sec. 4): under b-min-separation (a record in at most ``k`` rounds,
any two at least ``s`` apart), ``sens(C)^2 = max_pattern sum_{i, j in pattern} (C^T C)_{ij}`` when the Gram matrix is
non-negative. A ``b``-banded ``C`` with ``b <= s`` has ``(C^T C)_{ij} = 0`` between participations, so the max is
the best ``k`` separated diagonal entries (exact dynamic program); otherwise ``sensitivity`` falls back to an upper
bound (or, for small ``n``, the exact maximum by enumeration).
"""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpjax import _validate as v

__all__ = ["toeplitz_inverse_column", "toeplitz_strategy", "prefix_loss", "optimize_banded_toeplitz",
           "error_stats", "sensitivity_squared", "max_participations"]


def toeplitz_inverse_column(coeffs, n: int):
    """First column ``y`` of ``C^{-1}`` for the banded Toeplitz ``C`` of ``coeffs`` (``[b]``): O(n b) scan."""
    coeffs = jnp.asarray(coeffs)
    b = coeffs.shape[0]
    dtype = coeffs.dtype

    def step(hist, t):  # hist = (y_{t-1}, ..., y_{t-b+1})
        y = (jnp.where(t == 0, 1.0, 0.0).astype(dtype) - jnp.dot(coeffs[1:], hist)) / coeffs[0]
        return jnp.concatenate([y[None], hist[:-1]]) if b > 1 else hist, y

    _, ys = jax.lax.scan(step, jnp.zeros((b - 1,), dtype), jnp.arange(n))
    return ys


def toeplitz_strategy(coeffs, n: int) -> np.ndarray:
    """The dense ``n x n`` banded lower-triangular Toeplitz matrix (for tests and small n)."""
    c = np.asarray(coeffs, np.float64)
    m = np.zeros((n, n))
    for k, ck in enumerate(c[:n]):
        m += ck * np.eye(n, k=-k)
    return m


def prefix_loss(coeffs, n: int):
    """``sens^2 ||A C^{-1}||_F^2`` with the single-participation sensitivity ``||c||^2`` (the largest column norm
    of a Toeplitz ``C``); scale-invariant in ``coeffs``. Multi-epoch sensitivity multiplies it by ``k`` (cyclic)."""
    x = jnp.cumsum(toeplitz_inverse_column(coeffs, n))
    weights = n - jnp.arange(n, dtype=x.dtype)
    return jnp.sum(coeffs ** 2) * jnp.sum(weights * x ** 2)


def optimize_banded_toeplitz(n: int, bands: int, *, iterations: int = 200, dtype=jnp.float32) -> np.ndarray:
    """Coefficients ``c`` (``[bands]``, ``||c|| = 1``) minimising ``prefix_loss`` by optax L-BFGS (McKenna 2024).

    Starts from the first ``bands`` coefficients of ``(1 - x)^{-1/2}`` (the square-root factorization of ``A``,
    near-optimal for large ``bands``); ``bands = 1`` is independent noise (DP-SGD)."""
    n = v.check_int("n", n, min_value=1)
    bands = v.check_int("bands", bands, min_value=1)
    if bands > n:
        raise ValueError(f"bands={bands} must be <= n={n}")
    init = np.ones(bands)
    for k in range(1, bands):  # binomial series of (1 - x)^(-1/2): c_k = c_{k-1} (2k - 1) / (2k)
        init[k] = init[k - 1] * (2 * k - 1) / (2 * k)
    params = jnp.asarray(init, dtype)
    if bands > 1:
        loss = lambda c: prefix_loss(c, n)  # noqa: E731
        opt = optax.lbfgs()
        state = opt.init(params)
        value_and_grad = optax.value_and_grad_from_state(loss)

        @jax.jit
        def step(carry, _):
            p, s = carry
            val, g = value_and_grad(p, state=s)
            upd, s = opt.update(g, s, p, value=val, grad=g, value_fn=loss)
            return (optax.apply_updates(p, upd), s), None

        (params, _), _ = jax.lax.scan(step, (params, state), None, length=iterations)
    c = np.asarray(params, np.float64)
    return c / np.linalg.norm(c)


def error_stats(coeffs, n: int) -> dict:
    """Per-unit-noise-multiplier errors of the Toeplitz strategy: ``loss`` (expected total squared error over the
    ``n`` prefix sums, single participation), ``rmse = sqrt(loss / n)`` and ``max_error`` (the last prefix's std)."""
    c = jnp.asarray(coeffs, jnp.float32)
    x = np.cumsum(np.asarray(toeplitz_inverse_column(c, n), np.float64))
    sens2 = float(np.sum(np.asarray(coeffs, np.float64) ** 2))
    loss = sens2 * float(np.sum((n - np.arange(n)) * x ** 2))
    return {"loss": loss, "rmse": math.sqrt(loss / n), "max_error": math.sqrt(sens2 * float(np.sum(x ** 2)))}


def max_participations(n: int, min_sep: int) -> int:
    """The most rounds out of ``n`` a record can join with any two at least ``min_sep`` apart: ``ceil(n / min_sep)``."""
    return -(-v.check_int("n", n, min_value=1) // v.check_int("min_sep", min_sep, min_value=1))


def _bandwidth(c: np.ndarray) -> int:
    rows, cols = np.nonzero(c)
    return int(np.max(rows - cols)) + 1 if rows.size else 1


def _separated_patterns(n: int, min_sep: int, k: int):
    for size in range(1, k + 1):
        for pat in itertools.combinations(range(n), size):
            if all(b - a >= min_sep for a, b in zip(pat, pat[1:])):
                yield pat


def sensitivity_squared(strategy, min_sep: int, max_parts: int | None = None, *, exact: bool = False) -> float:
    """``max_pattern sum_{i,j in pattern} |(C^T C)_{ij}|`` over patterns of at most ``max_parts`` rounds, any two at
    least ``min_sep`` apart (Choquette-Choo et al. 2023, Sec. 4) -- the squared l2 sensitivity when ``C^T C >= 0``,
    an upper bound on it otherwise.

    Exact by dynamic program when ``C`` has at most ``min_sep`` bands (cross terms vanish); ``exact=True`` enumerates
    all patterns (small ``n`` only); else the bound ``k max_i (G_ii + top_{k-1} |G_ij|, |i - j| >= min_sep)``."""
    c = np.asarray(strategy, np.float64)
    if c.ndim != 2 or c.shape[0] != c.shape[1]:
        raise ValueError(f"strategy has shape {c.shape}; expected a square matrix")
    n = c.shape[0]
    min_sep = v.check_int("min_sep", min_sep, min_value=1)
    k = max_participations(n, min_sep) if max_parts is None else v.check_int("max_parts", max_parts, min_value=1)
    gram = np.abs(c.T @ c)
    if exact:
        return max(float(gram[np.ix_(p, p)].sum()) for p in _separated_patterns(n, min_sep, k))
    if _bandwidth(c) <= min_sep:  # best[j][i]: the top j separated diagonal entries among columns >= i
        diag = np.diag(gram)
        best = np.zeros((k + 1, n + min_sep))
        for j in range(1, k + 1):
            for i in range(n - 1, -1, -1):
                best[j, i] = max(best[j, i + 1], diag[i] + best[j - 1, i + min_sep])
        return float(best[k, 0])
    rows = []
    for i in range(n):
        far = np.abs(np.arange(n) - i) >= min_sep
        others = np.sort(gram[i, far])[::-1][:k - 1]
        rows.append(gram[i, i] + others.sum())
    return float(k * max(rows))
