"""Output perturbation with local deletion sensitivity (Ghazi et al., ICML 2023, Section 3, Appendix C).

* ``stable_table`` + ``del_output_pert``: Algorithm 1 (DelOutputPert) with the stable set computed exactly by
  enumerating every deletion set of at most 4 kappa + 1 users (the n^{O(log(1/delta)/eps)} procedure of Section 6;
  only for tiny n). Theorem 3.3: (eps, delta)-DP for every deterministic f.
* ``sc_output_pert``: Algorithm 2 (SCOutputPert), Algorithm 1 on f = theta* of a strongly convex ERM with target
  Delta_expl (Corollary 3.7, explicit constant). ``method='exact'`` enumerates; ``'certificate'`` first tries the
  Lemma C.1 sufficient condition for S = {} being stable (then Algorithm 1's output is exactly theta*(x) + N(0,
  sigma^2 I) whatever R1 is) and falls back to the enumeration when it fails.
* ``sc_output_pert_certified``: the polynomial-time version of Appendix C (A2c): target Delta_C = (2r+1)
  gamma_target/(mu (n-r-1)) that the certificate passes w.h.p. on exchangeable data.
* ``replace_output_pert``: baseline B1, the Gaussian mechanism with replace-one-user sensitivity 2G/(mu n).

What a user receives (``output_perturbation``; issue 23). The certificate is a shortcut inside Algorithm 1, not a
mechanism of its own: when it passes, S = {} is stable and Algorithm 1 releases f(x) + N(0, sigma^2 I) for every R1,
exactly what the shortcut releases (same key, same noise draw); when it fails the exact enumeration runs (Appendix C:
"fall back to the exponential algorithm"). A run that STOPS on failure (the superseded NOT_RELEASABLE) is a
data-dependent output outside Algorithm 1 with unbounded privacy loss on neighbours either side of the certificate's
threshold (the exact audit of ``tests/user_level`` measures it), and no cheap private failure event exists (a release
deleting no user has replace sensitivity 2G/(mu n), no better than B1; finding the users to delete is the
enumeration). So the module decides BEFORE reading the data, from public n and kappa = kappa(eps, delta)
(``dpjax.accounting.user_level.exact_feasible``), whether the exact fallback can run: if so the run is Algorithm 1
and ``privacy(...)`` certifies exactly its output; if not, ``fallback='refuse'`` (default) raises a ``ValueError``
naming n and kappa before any data is touched (the same for every dataset of that size, so it reveals nothing).
``fallback='stop'`` keeps the superseded behaviour as an explicit, NOT private diagnostic (releases carry
``private=False``; ``privacy(..., mode='certificate-stop')`` reports epsilon = inf). At the paper's constants
(eps <= 1) kappa >= 6, so n >= 8 kappa + 2 = 50 users already exceed the enumeration: the certified mechanisms release
only in test mode (kappa and sigma given, tiny n); the certificate's pass rate (D4) measures how often the
polynomial-time path would apply, not a release rate.

Randomness: ``key_r1, key_noise = jax.random.split(key)``; nothing else is random, and the data permutation pi of
Theorem 3.6 is never drawn here. Status codes: ``OK``, ``BOTTOM`` (the private failure symbol of Algorithm 1),
``NOT_RELEASABLE`` (only with ``fallback='stop'``: certificate failed and the exact enumeration is infeasible; not
private).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate as v
from dpjax.accounting import user_level as acc
from dpjax.user_level import solver
from dpjax.user_level.problems import Loss
from dpjax.user_level.tdlap import tdlap_sample

OK, BOTTOM, NOT_RELEASABLE = 0, 1, 2
STATUS_NAMES = {OK: "ok", BOTTOM: "bottom", NOT_RELEASABLE: "not-releasable"}
# public feasibility of the exact enumeration (pure Python, shared with the accountant)
MAX_EXACT_USERS = acc.MAX_EXACT_USERS
MAX_EXACT_EVALUATIONS = acc.MAX_EXACT_EVALUATIONS
exact_evaluations = acc.exact_evaluations
exact_feasible = acc.exact_feasible
FALLBACKS = ("refuse", "stop")


# exact Algorithm 1


@dataclasses.dataclass(frozen=True)
class StableTable:
    """Algorithm 1's deterministic part for every value r1 of R1 in {0..2 kappa}.

    ``selected[r1]``: the chosen deletion set S (sorted user tuple; smallest |S|, then lexicographic) or None
    (X^{r1}_stable empty: output bottom). ``centres[r1]`` = f(x_{-S}) (zeros where bottom). ``robust[S]`` (by bitmask)
    = Delta_{4 kappa - |S|} f(x_{-S}) for |S| <= 2 kappa.
    """

    selected: tuple[Optional[tuple[int, ...]], ...]
    centres: np.ndarray
    bottom: np.ndarray
    robust: dict


def deletion_sets(n: int, max_size: int) -> list[tuple[int, ...]]:
    """Every U subset of [n] with |U| <= max_size, by size then lexicographic order."""
    return [u for s in range(min(max_size, n) + 1) for u in itertools.combinations(range(n), s)]


def stable_table(f: Callable[[jax.Array], jax.Array], n: int, kappa: int, sensitivity: float) -> StableTable:
    """Algorithm 1 lines 5-9 for every r1 (the stable set computed exactly).

    ``f(weights [n]) -> [d]`` must be deterministic (weights 0 = user deleted). All f(x_{-U}), |U| <= 4 kappa + 1, are
    computed in one vmap; D(U) = max_{i not in U} ||f(x_{-U}) - f(x_{-U-{i}})||; the robust sensitivity of x_{-S} is
    max{D(U) : U superset of S, |U| <= 4 kappa} (a superset-max transform over bitmasks).
    """
    n = v.check_int("n", n, min_value=1)
    kappa = v.check_int("kappa", kappa, min_value=1)
    sensitivity = v.check_positive("sensitivity", sensitivity)
    if not exact_feasible(n, kappa):
        raise ValueError(f"n={n}, kappa={kappa}: the exact enumeration is infeasible "
                         f"({acc.fallback_cost(n, kappa)}, n <= {MAX_EXACT_USERS})")
    radius = 4 * kappa
    sets = deletion_sets(n, radius + 1)
    masks = np.array([sum(1 << i for i in u) for u in sets], dtype=np.int64)
    weights = np.ones((len(sets), n))
    for row, u in enumerate(sets):
        weights[row, list(u)] = 0.0
    with jax.enable_x64(True):
        fvals = np.asarray(jax.vmap(f)(jnp.asarray(weights, jnp.float64)), dtype=np.float64)
    full = 1 << n
    # dense tables over bitmasks (n <= MAX_EXACT_USERS): f(x_{-U}) and D(U), vectorised over U for each user i
    dense = np.zeros((full, fvals.shape[1]))
    dense[masks] = fvals
    size = np.zeros(full, np.int64)
    size[masks] = [len(u) for u in sets]
    robust_all = np.full(full, -np.inf)
    inner = masks[size[masks] <= radius]
    robust_all[inner] = 0.0
    for i in range(n):
        lack = inner[(inner >> i & 1) == 0]
        dist = np.linalg.norm(dense[lack] - dense[lack | (1 << i)], axis=1)
        robust_all[lack] = np.maximum(robust_all[lack], dist)
    idx = np.arange(full)
    for bit in range(n):
        lower = idx[(idx >> bit & 1) == 0]
        robust_all[lower] = np.maximum(robust_all[lower], robust_all[lower | (1 << bit)])
    first_stable: list[Optional[tuple[int, ...]]] = []
    robust = {}
    for s in range(2 * kappa + 1):
        found = None
        for u in itertools.combinations(range(n), s) if s <= n else ():
            mk = sum(1 << i for i in u)
            robust[mk] = float(robust_all[mk])
            if found is None and robust_all[mk] <= sensitivity:
                found = u
        first_stable.append(found)
    d = fvals.shape[1]
    selected, centres, bottom = [], np.zeros((2 * kappa + 1, d)), np.zeros(2 * kappa + 1, bool)
    for r1 in range(2 * kappa + 1):
        choice = next((first_stable[s] for s in range(r1 + 1) if first_stable[s] is not None), None)
        selected.append(choice)
        if choice is None:
            bottom[r1] = True
        else:
            centres[r1] = dense[sum(1 << i for i in choice)]
    return StableTable(tuple(selected), centres, bottom, robust)


def release_from_table(key: jax.Array, centres: jax.Array, bottom: jax.Array, sigma, eps_prime: float,
                       kappa: int) -> tuple[jax.Array, jax.Array]:
    """Algorithm 1 lines 4-10 given the stable table, traceable (jit/vmap over keys): R1 ~ TDLap(eps', kappa)
    (Definition 3.4), then bottom or ``centres[R1] + N(0, sigma^2 I)``. Returns ``(status, theta)`` with status
    ``OK``/``BOTTOM`` (int32) and theta NaN when bottom. ``key_r1, key_noise = split(key)``."""
    key_r1, key_noise = jax.random.split(key)
    r1 = tdlap_sample(key_r1, eps_prime, kappa)
    noise = sigma * jax.random.normal(key_noise, centres.shape[1:], centres.dtype)
    bot = bottom[r1]
    return jnp.where(bot, BOTTOM, OK).astype(jnp.int32), jnp.where(bot, jnp.nan, centres[r1] + noise)


def del_output_pert(key: jax.Array, table: StableTable, params: acc.A1Params) -> tuple[int, np.ndarray]:
    """Algorithm 1 (DelOutputPert) from its stable table: R1 ~ TDLap(eps', delta') (Definition 3.4), then bottom
    or f(x_{-S}) + N(0, sigma^2 I) (``release_from_table`` in float64). Returns ``(status, theta)`` (theta is NaN
    when bottom)."""
    if len(table.selected) != 2 * params.kappa + 1:
        raise ValueError(f"table has {len(table.selected)} entries; params.kappa={params.kappa} needs "
                         f"{2 * params.kappa + 1}")
    with jax.enable_x64(True):
        status, theta = release_from_table(key, jnp.asarray(table.centres, jnp.float64), jnp.asarray(table.bottom),
                                           params.sigma, params.eps_prime, params.kappa)
        return int(status), np.asarray(theta, np.float64)


# Algorithm 2 and its certified version (Appendix C)


@dataclasses.dataclass(frozen=True)
class Domain:
    """K = intersection of balls B(centers[j], radii[j]) plus the regulariser (reg/2)||theta - center||^2."""

    centers: np.ndarray
    radii: np.ndarray
    reg: float = 0.0
    center: Optional[np.ndarray] = None

    @staticmethod
    def ball(radius: float, d: int) -> "Domain":
        return Domain(np.zeros((1, d)), np.array([float(radius)]))

    def intersect(self, center, radius: float) -> "Domain":
        """K cap B(center, radius), dropping any ball that contains another (the set is unchanged, and a single
        ball keeps the exact projection and the finite solver error bound)."""
        centers = np.vstack([self.centers, np.asarray(center, np.float64)[None]])
        radii = np.append(self.radii, float(radius))
        keep = []
        for j in range(len(radii)):
            redundant = any(k != j and (k not in keep or k < j) and
                            np.linalg.norm(centers[j] - centers[k]) + radii[k] <= radii[j]
                            for k in range(len(radii)) if k in keep or k > j)
            if not redundant:
                keep.append(j)
        return dataclasses.replace(self, centers=centers[keep], radii=radii[keep])

    def regularised(self, reg: float, center) -> "Domain":
        return dataclasses.replace(self, reg=float(reg), center=np.asarray(center, np.float64))

    def project(self, theta) -> np.ndarray:
        with jax.enable_x64(True):
            return np.asarray(solver.project_balls(jnp.asarray(theta, jnp.float64),
                                                   jnp.asarray(self.centers, jnp.float64),
                                                   jnp.asarray(self.radii, jnp.float64)))

    @property
    def diameter(self) -> float:
        return float(2 * np.min(self.radii))

    def reg_center(self, d: int) -> np.ndarray:
        return np.zeros(d) if self.center is None else np.asarray(self.center, np.float64)


def minimiser(loss: Loss, x, y, domain: Domain, weights=None) -> np.ndarray:
    """theta*(x) (solver output, float64) over the domain for the users with weight 1."""
    n, _, d = x.shape
    w = np.ones(n) if weights is None else weights
    with jax.enable_x64(True):
        return np.asarray(solver.argmin(loss, jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64),
                                        jnp.asarray(w, jnp.float64), domain.reg, jnp.asarray(domain.reg_center(d)),
                                        jnp.asarray(domain.centers, jnp.float64),
                                        jnp.asarray(domain.radii, jnp.float64)))


def oracle(loss: Loss, x, y, domain: Domain) -> Callable[[jax.Array], jax.Array]:
    """f(weights) = theta*(x_mask): the deterministic function Algorithm 2 perturbs."""
    d = x.shape[-1]
    arrays = tuple(np.asarray(a, np.float64) for a in (x, y, domain.reg_center(d), domain.centers, domain.radii))

    def f(weights):  # converted at trace time, inside the caller's float64 context
        xs, ys, c, centers, radii = (jnp.asarray(a) for a in arrays)
        return solver.argmin(loss, xs, ys, weights, domain.reg, c, centers, radii)

    return f


@dataclasses.dataclass(frozen=True)
class Certificate:
    """Lemma C.1 check: passes iff (2r+1) gamma/(mu (n-r-1)) + 2 tau <= Delta (gamma inflated by 2 L_s tau)."""

    gamma: float
    tau: float
    bound: float
    target: float
    passed: bool


def certificate(loss: Loss, x, y, domain: Domain, theta, radius: int, sensitivity: float) -> Certificate:
    """Appendix C certificate at the solver output ``theta`` (float64 throughout; solver error added as 2 tau).

    g_i = grad L(theta; x_i) - grad L(theta; x) (centred per-user mean gradients, one vmap over users), gamma = max_i
    ||g_i|| + 2 L_s tau, tau = ``solver_error_bound`` (data-independent, so it also bounds the solver error on every
    sub-dataset x_{-S} the robust sensitivity involves).
    """
    n = x.shape[0]
    mu = loss.strong_convexity + domain.reg
    tau = solver.solver_error_bound(loss, domain.reg, domain.diameter, dykstra=len(domain.radii) > 1)
    if not math.isfinite(tau) or n < radius + 2 or mu <= 0:
        return Certificate(math.inf, tau, math.inf, sensitivity, False)
    with jax.enable_x64(True):
        grads = np.asarray(solver.user_mean_grads(loss, jnp.asarray(theta, jnp.float64),
                                                  jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64)))
    centred = grads - grads.mean(axis=0)
    gamma = float(np.linalg.norm(centred, axis=1).max()) + 2 * loss.smoothness * tau
    bound = (2 * radius + 1) * gamma / (mu * (n - radius - 1)) + 2 * tau
    return Certificate(gamma, tau, bound, sensitivity, bool(bound <= sensitivity))


@dataclasses.dataclass(frozen=True)
class Release:
    """One mechanism output: ``theta`` (NaN unless ``status == OK``), status, and the internal diagnostics
    (never released by the mechanism: kept for tests and reports)."""

    theta: np.ndarray
    status: int
    sigma: float
    sensitivity: float
    certificate: Optional[Certificate] = None
    minimiser: Optional[np.ndarray] = None
    path: str = ""
    private: bool = True  # False: produced by fallback='stop' where the exact fallback is infeasible

    @property
    def status_name(self) -> str:
        return STATUS_NAMES[self.status]


def gaussian_noise(key, sigma, d):
    with jax.enable_x64(True):
        return np.asarray(sigma * jax.random.normal(key, (d,), jnp.float64))


def output_perturbation(key: jax.Array, loss: Loss, x, y, domain: Domain, params: acc.A1Params,
                        method: str = "certificate", fallback: str = "refuse") -> Release:
    """Algorithm 1 applied to f = theta* with the given parameters (the core of Algorithms 2 and A2c).

    ``method='exact'``: the enumeration (tiny n); ``'certificate'``: Lemma C.1 first -- if it passes, release
    theta*(x) + N(0, sigma^2 I), which is Algorithm 1's output for this key (S = {} is stable and chosen for every R1)
    -- and the enumeration when it fails. Where the enumeration is infeasible at (n, kappa) (public:
    ``acc.exact_feasible``), ``fallback='refuse'`` raises before the data is read (module docstring: a stop on a
    failed certificate would be a data-dependent output); ``fallback='stop'`` runs the certificate anyway and returns
    ``NOT_RELEASABLE`` when it fails -- NOT private, every release then has ``private=False``.
    """
    v.check_choice("method", method, ("exact", "certificate"))
    v.check_choice("fallback", fallback, FALLBACKS)
    n, _, d = x.shape  # shapes are public
    feasible = exact_feasible(n, params.kappa)
    if not feasible and (method == "exact" or fallback == "refuse"):
        acc.exact_fallback_check(n, params.kappa, "output perturbation")  # raises: nothing read yet
    private = feasible
    theta = minimiser(loss, x, y, domain)
    cert = None
    if method == "certificate":
        cert = certificate(loss, x, y, domain, theta, params.radius, params.sensitivity)
        if cert.passed:
            _, key_noise = jax.random.split(key)
            return Release(theta + gaussian_noise(key_noise, params.sigma, d), OK, params.sigma, params.sensitivity,
                           cert, theta, "certificate", private)
        if not feasible:  # fallback == "stop": the superseded, data-dependent stop
            return Release(np.full(d, np.nan), NOT_RELEASABLE, params.sigma, params.sensitivity, cert, theta,
                           "certificate-failed", False)
    table = stable_table(oracle(loss, x, y, domain), n, params.kappa, params.sensitivity)
    status, out = del_output_pert(key, table, params)
    return Release(out, status, params.sigma, params.sensitivity, cert, theta, "exact", private)


def _strongly_convex_release(key, loss, x, y, domain, epsilon, delta, fail_prob, c_k, gaussian, lipschitz,
                             bound, method, fallback) -> Release:
    """Algorithm 1 on theta* with Delta = bound(n, m, 4 kappa, beta, G, mu, c_K) (mu includes the regulariser)."""
    n, m, _ = x.shape
    kappa = acc.user_level_params(epsilon, delta).kappa
    v.check_choice("fallback", fallback, FALLBACKS)
    if fallback == "refuse" or method == "exact":  # before anything is computed from the data
        acc.exact_fallback_check(n, kappa, "Algorithm 2" if bound is acc.deletion_sensitivity_bound else "A2c")
    g = loss.lipschitz if lipschitz is None else lipschitz
    sens = bound(n, m, 4 * kappa, fail_prob, g, loss.strong_convexity + domain.reg, c_k)
    return output_perturbation(key, loss, x, y, domain, acc.a1_params(epsilon, delta, sens, gaussian=gaussian),
                               method, fallback)


def sc_output_pert(key: jax.Array, loss: Loss, x, y, domain: Domain, epsilon: float, delta: float,
                   fail_prob: float, *, c_k: int = 2, method: str = "certificate", gaussian: str = "paper",
                   lipschitz: Optional[float] = None, fallback: str = "refuse") -> Release:
    """Algorithm 2 (SCOutputPert_{eps,delta,beta,G,mu,K}): Algorithm 1 with Delta = Delta_expl (Theorem 3.1).
    ``fallback``: see ``output_perturbation`` (refuses before reading the data where the exact stable set is
    infeasible)."""
    return _strongly_convex_release(key, loss, x, y, domain, epsilon, delta, fail_prob, c_k, gaussian, lipschitz,
                                    acc.deletion_sensitivity_bound, method, fallback)


def sc_output_pert_certified(key: jax.Array, loss: Loss, x, y, domain: Domain, epsilon: float, delta: float,
                             fail_prob: float, *, c_k: int = 2, gaussian: str = "paper",
                             lipschitz: Optional[float] = None, fallback: str = "refuse") -> Release:
    """A2c (Appendix C): target Delta_C = (2r+1) gamma_target/(mu(n-r-1)), released through the certificate,
    with the exact stable set as the fallback when it fails (module docstring). Where that fallback is
    infeasible at (n, kappa(eps, delta)) -- at the paper's constants, every n >= 8 kappa + 2 -- the default
    ``fallback='refuse'`` raises before reading the data; ``'stop'`` is the NOT private diagnostic."""
    return _strongly_convex_release(key, loss, x, y, domain, epsilon, delta, fail_prob, c_k, gaussian, lipschitz,
                                    acc.certificate_sensitivity, "certificate", fallback)


def replace_output_pert(key: jax.Array, loss: Loss, x, y, domain: Domain, epsilon: float, delta: float,
                        lipschitz: Optional[float] = None) -> Release:
    """Baseline B1: theta*(x) + N(0, sigma_B^2 I), sigma_B = (2G/(mu n) + 2 tau) sqrt(2 ln(1.25/delta))/eps."""
    n, _, d = x.shape
    g = loss.lipschitz if lipschitz is None else lipschitz
    mu = loss.strong_convexity + domain.reg
    tau = solver.solver_error_bound(loss, domain.reg, domain.diameter, dykstra=len(domain.radii) > 1)
    if not math.isfinite(tau):
        raise ValueError(f"loss={loss.kind!r} with this domain has no solver error bound; B1's sensitivity "
                         "2G/(mu n) would not cover the numerical minimiser")
    sigma = acc.b1_sigma(epsilon, delta, n, g, mu) * (1 + tau * mu * n / (2 * g))
    theta = minimiser(loss, x, y, domain)
    _, key_noise = jax.random.split(key)
    return Release(theta + gaussian_noise(key_noise, sigma, d), OK, sigma, 2 * g / (mu * n) + 2 * tau, None, theta, "B1")
