"""Losses, user-structured data and synthetic generators for the user-level mechanisms.

Data layout: users are an axis. ``x`` is ``[n_users, items_per_user, dim]``, ``y`` is ``[n_users, items_per_user]``;
every user holds exactly ``items_per_user`` items (the paper's model, Section 1.1). Subsets of users (deletions,
Phased-SCO's disjoint groups, padding) are expressed by a ``[n_users]`` weight mask, so shapes stay static.

Every loss writes its per-item value and (sub)gradient once, for an array module ``xp`` (``jax.numpy`` in the compiled
solvers, ``numpy`` in float64 for the privacy-critical certificate of Appendix C).

The generators permute items across users (the exchangeability assumption pi of Theorem 3.6); that permutation is a
property of the *data*, never of a mechanism (shuffling items inside a mechanism would mix users).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax import _validate as v

LOSSES = ("mean", "logistic", "hinge", "absolute", "squared")


@dataclasses.dataclass(frozen=True)
class Loss:
    """A convex loss l(theta; (a, b)) on data with ||a|| <= 1, plus an optional ridge (ridge/2)||theta||^2.

    Kinds: ``mean`` 1/2||theta - a||^2 (mu = 1); ``logistic`` log(1 + exp(-b<theta, a>)); ``hinge`` max(0, 1 -
    b<theta, a>); ``absolute`` |<theta, a> - b|; ``squared`` zeta||theta - a||^2 (the lower-bound loss of Appendix D,
    zeta = mu/2). ``hinge``/``absolute`` are nonsmooth: the solver minimises their Huber-smoothed surrogate with width
    ``smoothing`` (uniformly within smoothing/2 of the loss), which keeps the minimiser a deterministic function of
    the data (all Algorithm 1 needs); the Appendix C certificate is refused for them (it reasons about exact
    minimisers of a differentiable loss).
    """

    kind: str
    radius: float = 1.0  # K = B(0, radius)
    ridge: float = 0.0
    smoothing: float = 1e-3
    zeta: float = 0.5

    def __post_init__(self):
        v.check_choice("kind", self.kind, LOSSES)
        v.check_positive("radius", self.radius)
        v.check_nonnegative("ridge", self.ridge)
        v.check_positive("smoothing", self.smoothing)
        v.check_positive("zeta", self.zeta)

    @property
    def smooth(self) -> bool:
        return self.kind in ("mean", "logistic", "squared")

    @property
    def strong_convexity(self) -> float:
        base = {"mean": 1.0, "squared": 2 * self.zeta}.get(self.kind, 0.0)
        return base + self.ridge

    @property
    def lipschitz(self) -> float:
        """G on K = B(0, radius) for data with ||a|| <= 1 (|b| <= 1 for the absolute loss)."""
        base = {"mean": self.radius + 1.0, "squared": 2 * self.zeta * (self.radius + 1.0)}.get(self.kind, 1.0)
        return base + self.ridge * self.radius

    @property
    def smoothness(self) -> float:
        """Smoothness constant of the loss the solver minimises (the surrogate for nonsmooth kinds)."""
        base = {"mean": 1.0, "squared": 2 * self.zeta, "logistic": 0.25}.get(self.kind, 1.0 / self.smoothing)
        return base + self.ridge

    def value(self, theta, a, b, xp, smoothed: bool = False):
        """Per-item loss, shape ``a.shape[:-1]``; ``smoothed`` gives the Huber surrogate for nonsmooth kinds."""
        ridge = 0.5 * self.ridge * xp.sum(theta * theta)
        if self.kind == "mean":
            return 0.5 * xp.sum((theta - a) ** 2, axis=-1) + ridge
        if self.kind == "squared":
            return self.zeta * xp.sum((theta - a) ** 2, axis=-1) + ridge
        z = a @ theta
        if self.kind == "logistic":
            return xp.logaddexp(0.0, -b * z) + ridge
        u = 1 - b * z if self.kind == "hinge" else z - b
        if self.kind == "absolute":
            u = xp.abs(u)
        s = self.smoothing
        if smoothed:
            out = xp.where(u <= 0, 0.0, xp.where(u >= s, u - s / 2, u * u / (2 * s)))
        else:
            out = xp.maximum(u, 0.0)
        return out + ridge

    @property
    def linear_model(self) -> bool:
        """True when l(theta; (a, b)) = phi(<theta, a>, b) (+ ridge): the gradient is ``margin_coefficient * a``."""
        return self.kind in ("logistic", "hinge", "absolute")

    def margin_coefficient(self, theta, a, b, xp):
        """phi'(<theta, a>, b) for the linear-model kinds (the surrogate's for nonsmooth ones), shape
        ``a.shape[:-1]``: the per-item gradient without ridge is this times ``a``."""
        z = a @ theta
        s = self.smoothing
        if self.kind == "logistic":
            return -b / (1 + xp.exp(b * z))
        if self.kind == "hinge":
            return -b * xp.clip((1 - b * z) / s, 0.0, 1.0)
        if self.kind == "absolute":
            return xp.clip((z - b) / s, -1.0, 1.0)
        raise ValueError(f"kind={self.kind!r} is not a linear-model loss")

    def grad(self, theta, a, b, xp):
        """Per-item gradient of the (surrogate) loss, shape ``a.shape``."""
        ridge = self.ridge * theta
        if self.kind == "mean":
            return theta - a + ridge
        if self.kind == "squared":
            return 2 * self.zeta * (theta - a) + ridge
        return self.margin_coefficient(theta, a, b, xp)[..., None] * a + ridge


# generators (experiment layer; the permutation pi lives here)


def erm_lambda(lipschitz: float, diameter: float, n: int, m: int, d: int, multiplier: float) -> float:
    """lambda = (G/R) A sqrt(d)/(n sqrt(m)) (Theorem 4.1 with the noise multiplier A made explicit)."""
    return lipschitz / diameter * multiplier * math.sqrt(d) / (n * math.sqrt(m))


def _unit_ball(rng, shape, d):
    z = rng.uniform(-1.0, 1.0, size=shape + (d,))
    return z / np.maximum(1.0, np.linalg.norm(z, axis=-1, keepdims=True))


def exchangeable(kind: str, n: int, m: int, d: int, seed: int, *, noise: float = 0.1,
                 heterogeneous: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(x [n, m, d], y [n, m])``: n m i.i.d. items assigned to users by a uniformly random permutation.

    ``heterogeneous > 0`` violates exchangeability: user i's features are shifted by u_i ~ N(0, tau^2 I) (tau =
    ``heterogeneous``) and, for classification, labels flipped at a user rate rho_i ~ U[0, 0.5] (a heterogeneous
    control for the certificate experiment). Features are clipped to the unit ball.
    """
    v.check_choice("kind", kind, LOSSES)
    n = v.check_int("n", n, min_value=1)
    m = v.check_int("m", m, min_value=1)
    d = v.check_int("d", d, min_value=1)
    rng = np.random.default_rng(seed)
    a = _unit_ball(rng, (n * m,), d)
    w = np.random.default_rng([seed, 1]).normal(size=d)  # its own stream: the same w for every (n, m) of a seed
    w /= np.linalg.norm(w)
    if kind in ("logistic", "hinge"):
        p = 1 / (1 + np.exp(-4 * a @ w))
        b = np.where(rng.uniform(size=n * m) < p, 1.0, -1.0)
    elif kind == "absolute":
        b = np.clip(a @ w * 0.5 + noise * rng.laplace(size=n * m), -1, 1)
    else:
        b = np.zeros(n * m)
    perm = rng.permutation(n * m)
    a, b = a[perm].reshape(n, m, d), b[perm].reshape(n, m)
    if heterogeneous > 0:
        shift = rng.normal(scale=heterogeneous, size=(n, 1, d))
        a = a + shift
        a /= np.maximum(1.0, np.linalg.norm(a, axis=-1, keepdims=True))
        if kind in ("logistic", "hinge"):
            flip = rng.uniform(size=(n, m)) < rng.uniform(0, 0.5, size=(n, 1))
            b = np.where(flip, -b, b)
    return a, b


def lower_bound_instance(n: int, m: int, d: int, seed: int, *, lipschitz: float = 1.0,
                         strong_convexity: float = 1.0, psi: float = 1.0):
    """L1 (Appendix D): x_ij i.i.d. N(chi, sigma_D^2 I) truncated to ||x|| <= B (Z 1[||Z|| <= B]), B = G/mu,
    sigma_D = B/(1000 sqrt(d)), chi uniform in [-psi sigma_D/sqrt(m), psi sigma_D/sqrt(m)]^d.

    Returns ``(x [n, m, d], chi, sigma_D, B)``; the loss is ``Loss('squared', radius=B, zeta=mu/2)``.
    """
    n = v.check_int("n", n, min_value=1)
    m = v.check_int("m", m, min_value=1)
    d = v.check_int("d", d, min_value=1)
    big_b = v.check_positive("lipschitz", lipschitz) / v.check_positive("strong_convexity", strong_convexity)
    sigma_d = big_b / (1000 * math.sqrt(d))
    rng = np.random.default_rng(seed)
    chi = rng.uniform(-psi * sigma_d / math.sqrt(m), psi * sigma_d / math.sqrt(m), size=d)
    return _truncated_gaussian(rng, chi, sigma_d, (n, m), big_b), chi, sigma_d, big_b


def _truncated_gaussian(rng, chi, sigma, shape, bound):
    """Definition D.1: Z 1[||Z|| <= bound] with Z ~ N(chi, sigma^2 I)."""
    z = chi + sigma * rng.normal(size=shape + (len(chi),))
    return z * (np.linalg.norm(z, axis=-1, keepdims=True) <= bound)


def convex_rate_instance(n: int, m: int, d: int, seed: int, *, rho: float = 1.0, radius: float = 1.0,
                         lipschitz: float = 1.0, offset: float = 0.5):
    """Theorem 4.1's worst-case regime for Phased-ERM (Algorithm 3): a convex G-Lipschitz ERM instance whose
    curvature equals the cell's lambda = (G/R) rho sqrt(d)/(n sqrt(m)) (R = 2 ``radius``, the diameter of K).

    Loss ``zeta ||theta - x||^2`` with 2 zeta = mu = lambda (the Appendix D loss, with mu tied to lambda instead of to
    G/R: Phased-ERM's excess on it is Theta(mu R^2) when mu ~ lambda and smaller for any other mu -- ~mu R^2 below,
    the strongly convex rate G^2 d/(mu n^2 m) above -- so mu = lambda puts the instance where the bound R G sqrt(d)/(n
    sqrt(m)) is attained up to a constant). Data: x_ij ~ N^tr(chi, s^2 I; B) (Definition D.1) with chi = ``offset``
    radius u (u a uniform unit vector from its own stream, the same for every (n, m) of a seed), s = radius/sqrt(d)
    and B = G/mu - radius, so the gradient mu (theta - x) has norm <= mu (radius + B) = G on K = B(0, radius). The ERM
    minimiser is the item mean x_bar (inside K w.h.p.; the caller checks).

    Returns ``(x [n, m, d], chi, mu, B)``; the loss is ``Loss('squared', radius=radius, zeta=mu/2)`` with G =
    ``lipschitz`` (``Loss.lipschitz`` assumes ||x|| <= 1 and does not apply here).
    """
    n = v.check_int("n", n, min_value=1)
    m = v.check_int("m", m, min_value=1)
    d = v.check_int("d", d, min_value=1)
    v.check_positive("rho", rho)
    v.check_positive("radius", radius)
    v.check_positive("lipschitz", lipschitz)
    if not 0 <= offset < 1:
        raise ValueError(f"offset={offset} must be in [0, 1)")
    mu = erm_lambda(lipschitz, 2 * radius, n, m, d, rho)
    big_b = lipschitz / mu - radius
    if big_b <= radius:
        raise ValueError(f"rho={rho}: lambda = {mu:.3g} leaves no room for data (G/lambda - radius = {big_b:.3g} must "
                         f"be > radius = {radius}); rho sqrt(d)/(n sqrt(m)) must be < 1")
    u = np.random.default_rng([seed, 2]).normal(size=d)
    chi = offset * radius * u / np.linalg.norm(u)
    x = _truncated_gaussian(np.random.default_rng(seed), chi, radius / math.sqrt(d), (n, m), big_b)
    return x, chi, mu, big_b


def zero_sum_family(kind: str, size: int, d: int, lipschitz: float, seed: int) -> np.ndarray:
    """Lemma 3.8's vectors: ``'pm'`` +-G e_1 half and half; ``'sphere'`` random unit vectors minus their mean,
    rescaled so every norm is <= G. Both sum to zero (up to float rounding for ``'sphere'``)."""
    v.check_choice("kind", kind, ("pm", "sphere"))
    size = v.check_int("size", size, min_value=2)
    if kind == "pm":
        if size % 2:
            raise ValueError(f"size={size} must be even for the +-G e_1 family")
        out = np.zeros((size, d))
        out[: size // 2, 0], out[size // 2:, 0] = lipschitz, -lipschitz
        return out
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(size, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    u -= u.mean(axis=0)
    return u * lipschitz / np.linalg.norm(u, axis=1).max()
