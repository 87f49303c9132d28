"""The deterministic argmin oracle of the user-level mechanisms (Observation 3.5 needs a deterministic f) and its error bound.

``argmin(loss, x, y, weights, reg, center, ball_centers, ball_radii)`` minimises

    F(theta) = sum_i w_i L(theta; x_i) / sum_i w_i + (reg/2)||theta - center||^2   over  K = cap_j B(c_j, r_j),

with ``L(theta; x_i)`` user i's mean item loss (Section 1.3). It depends only on the multiset of retained users (a
weighted sum, a fixed start ``proj_K(center)`` and a fixed iteration count), as Observation 3.5 needs; the empty
dataset gives ``proj_K(center)``. Quadratic losses use the closed form (projection of the unconstrained minimiser);
the others use projected accelerated gradient with constant momentum on the (surrogate) loss. Intersections of balls
are projected with Dykstra's algorithm.

``solver_error_bound`` is a data-independent bound tau on ||argmin(...) - theta*|| for every dataset (from the
method's linear rate with a fixed iteration count), which the Appendix C certificate adds as 2 tau (the proofs assume
exact minimisers). Everything runs in float64 (``jax.enable_x64``): the certificate compares float64 numbers with
margins far above float64 rounding.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from dpjax.user_level.problems import Loss

DYKSTRA_ITERS = 60
SOLVER_ITERS = 400
# allowance for float64 rounding in tau (relative to the domain diameter); far below any certified margin
FLOAT_ALLOWANCE = 1e-13


def project_ball(theta, center, radius):
    diff = theta - center
    dist = jnp.sqrt(jnp.sum(diff * diff))
    scale = jnp.where(dist > radius, radius / jnp.maximum(dist, 1e-300), 1.0)
    return center + diff * scale


def project_balls(theta, centers, radii):
    """Euclidean projection onto the intersection of balls B(centers[j], radii[j]) (exact for one ball;
    Dykstra's algorithm with ``DYKSTRA_ITERS`` sweeps otherwise)."""
    k = centers.shape[0]
    if k == 1:
        return project_ball(theta, centers[0], radii[0])

    def sweep(_, carry):
        x, incs = carry
        new_incs = []
        for j in range(k):
            yj = project_ball(x + incs[j], centers[j], radii[j])
            new_incs.append(x + incs[j] - yj)
            x = yj
        return x, jnp.stack(new_incs)

    x, _ = jax.lax.fori_loop(0, DYKSTRA_ITERS, sweep, (theta, jnp.zeros((k,) + theta.shape, theta.dtype)))
    return x


def user_mean_grads(loss: Loss, theta, x, y):
    """[n, d]: grad of L(theta; x_i) = mean_j grad l(theta; x_ij) for every user. Linear-model losses take
    the closed form (1/m) sum_j phi'_ij x_ij, one contraction of the data, so that a vmap over thetas reads
    ``x`` once instead of materialising every item's gradient per theta."""
    if loss.linear_model:
        coef = loss.margin_coefficient(theta, x, y, jnp)
        return jnp.einsum("um,umd->ud", coef, x) / x.shape[1] + loss.ridge * theta
    return jax.vmap(lambda a, b: jnp.mean(loss.grad(theta, a, b, jnp), axis=0))(x, y)


def weighted_mean_grad(loss: Loss, theta, x, y, weights):
    """[d]: sum_i w_i grad L(theta; x_i) / sum_i w_i. Linear-model losses contract the weighted margin
    coefficients with the data in one product (the per-user gradients are never formed)."""
    if loss.linear_model:
        # items flattened to [n m, d]: under a vmap over thetas the margins come out [thetas, n m] with no
        # transpose of a [n, m, thetas] array (measured 2.5 vs 15 ms a gradient at n=100, m=1024, 24 thetas)
        n, m, d = x.shape
        flat_x = x.reshape(n * m, d)
        coef = loss.margin_coefficient(theta, flat_x, y.reshape(n * m), jnp).reshape(n, m)
        coef = coef * (weights / jnp.maximum(jnp.sum(weights), 1e-300))[:, None]
        return coef.reshape(n * m) @ flat_x / m + loss.ridge * theta
    g, _ = _weighted(weights, user_mean_grads(loss, theta, x, y))
    return g


def _weighted(weights, per_user):
    total = jnp.sum(weights)
    return jnp.tensordot(weights, per_user, axes=1) / jnp.maximum(total, 1e-300), total


@functools.partial(jax.jit, static_argnames=("loss", "iters"))
def argmin(loss: Loss, x, y, weights, reg, center, ball_centers, ball_radii, iters: int = SOLVER_ITERS):
    """The oracle theta*(x_mask) over K (see the module docstring); jit-compiled, vmappable over masks."""
    start = project_balls(center, ball_centers, ball_radii)
    mu = loss.strong_convexity + reg
    if loss.kind in ("mean", "squared"):
        means = jnp.mean(x, axis=1)
        xbar, total = _weighted(weights, means)
        c2 = 1.0 if loss.kind == "mean" else 2 * loss.zeta
        unconstrained = (c2 * xbar + reg * center) / mu
        sol = project_balls(unconstrained, ball_centers, ball_radii)
        return jnp.where(total > 0, sol, start)

    smooth = loss.smoothness + reg
    q = mu / smooth
    momentum = (1 - jnp.sqrt(q)) / (1 + jnp.sqrt(q))

    def grad_f(theta):
        return weighted_mean_grad(loss, theta, x, y, weights) + reg * (theta - center)

    def body(_, carry):
        theta, prev = carry
        z = theta + momentum * (theta - prev)
        new = project_balls(z - grad_f(z) / smooth, ball_centers, ball_radii)
        return new, theta

    theta, _ = jax.lax.fori_loop(0, iters, body, (start, start))
    return jnp.where(jnp.sum(weights) > 0, theta, start)


def solver_error_bound(loss: Loss, reg: float, diameter: float, iters: int = SOLVER_ITERS,
                       dykstra: bool = False) -> float:
    """Data-independent tau >= ||argmin(...) - theta*|| for every dataset (solver error, charged to the sensitivity).

    Closed form (quadratic losses, one ball): float rounding only. Accelerated projected gradient on a mu-strongly
    convex, L-smooth F over a set of diameter D: F(x_t) - F* <= (F(x_0) - F* + mu/2 D^2) (1 - sqrt(mu/L))^t with
    F(x_0) - F* <= G_F D (G_F = G + reg D), and ||x_t - x*||^2 <= 2 (F(x_t) - F*)/mu. Dykstra's projections
    (intersections of balls) carry no finite-iteration guarantee here: returns inf. Nonsmooth kinds (solved through a
    surrogate): inf (the certificate is refused: it needs the gradient at theta*).
    """
    if dykstra or not loss.smooth:
        return math.inf
    allowance = FLOAT_ALLOWANCE * max(diameter, 1.0)
    if loss.kind in ("mean", "squared"):
        return allowance
    mu = loss.strong_convexity + reg
    if mu <= 0:
        return math.inf
    smooth = loss.smoothness + reg
    g_f = loss.lipschitz + reg * diameter
    gap0 = g_f * diameter + 0.5 * mu * diameter**2
    log_gap = math.log(gap0) + iters * math.log1p(-math.sqrt(mu / smooth))
    return math.sqrt(2 * math.exp(log_gap) / mu) + allowance
