"""Localisation schedules built on Algorithm 2 (Ghazi et al., ICML 2023, Sections 4-5, Appendix B).

* ``phased_erm``: Algorithm 3 (Phased-ERM, Theorem 4.1): T = ceil(log2(n m)) calls at (eps/T, delta/T) on all users,
  lambda_i = lambda 4^i, l_i = l + (lambda_i/2)||theta - theta_{i-1}||^2, K_i = K cap B(theta_{i-1}, G/lambda_i).
* ``phased_sco``: Algorithm 4 (Phased-SCO, Theorem 5.1) as printed (``variant='A4'``: halving user groups (n/2^i,
  n/2^{i-1}]) and the corrected equal split (``'A4b'``: T = ceil(log2(n m)) groups of floor(n/T) users); each phase
  runs at the full (eps, delta) on its own disjoint users (parallel composition).
* ``strongly_convex_erm`` / ``strongly_convex_sco``: Algorithms 5 and 6 (Theorems 4.3, 5.3): Algorithm 2 at (eps/2,
  delta/2) gives theta_0, then Phased-ERM / Phased-SCO at (eps/2, delta/2) on K' = K cap B(theta_0, R').

Modes: ``'certified'`` calls Algorithm 2 through the Appendix C certificate (``inner='A2c'``, default) or with
Delta_expl (``'A2'``), each phase with the exact stable set as the certificate's fallback; a bottom phase ends the run
with that status. Every phase's (users, kappa) is public, so where any phase's exact fallback is infeasible the run
refuses before reading the data (``dpjax.accounting.user_level.exact_fallback_check``; see
``dpjax.user_level.mechanisms``). ``'certificate-stop'`` is the superseded behaviour (a failed certificate stops the
run as not releasable: a data-dependent output, NOT private), kept as a diagnostic. ``'rate-shape'`` is the idealised
mechanism M' of Theorem 4.1's proof (baseline B2): theta_i = theta*_i + N(0, sigma_i^2 I) with sigma_i = rho
2G/(lambda_i n_i sqrt(m)) and no stability test -- NOT private; it is compiled as one scan over the phases and vmapped
over run keys.

Choices of this package (the paper leaves them open): the oracle minimises l_i over K, not K_i -- the two minima
coincide when theta_{i-1} is in K (first-order optimality gives ||theta*_i - theta_{i-1}|| <= G/lambda_i, the fact
Theorem 4.1's proof uses) -- and every released phase output is projected onto K before the next phase
(post-processing). Phase i's key is ``fold_in(key, i)``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate as v
from dpjax.accounting import user_level as acc
from dpjax.user_level import mechanisms as mech
from dpjax.user_level import solver
from dpjax.user_level.problems import Loss, erm_lambda

MODES = ("certified", "certificate-stop", "rate-shape")


def _fallback(mode: str) -> str:
    return "stop" if mode == "certificate-stop" else "refuse"


def _check_releasable(mode: str, calls, what: str) -> None:
    """Certified mode: refuse before reading any data when one of the run's calls ``(users, eps, delta)`` has
    an infeasible exact fallback (a decision from public quantities only)."""
    if mode == "certified":
        for users, eps, dlt in calls:
            acc.exact_fallback_check(users, acc.user_level_params(eps, dlt).kappa, what)


@dataclasses.dataclass(frozen=True)
class PhasedResult:
    """Output of a phased schedule: ``theta`` (NaN unless OK), status, and per-phase diagnostics."""

    theta: np.ndarray
    status: int
    phases: tuple = ()
    variant: str = ""

    @property
    def status_name(self) -> str:
        return mech.STATUS_NAMES[self.status]


def num_phases(n: int, m: int) -> int:
    """T = ceil(log2(n m)) (the paper's log(nm) has no base; base 2 makes 4^T = (nm)^2)."""
    return max(1, math.ceil(math.log2(n * m) - 1e-12))


def phase_lambdas(lam: float, t: int) -> np.ndarray:
    """lambda_i = lambda 4^i, i = 1..T (Algorithm 3 line 5)."""
    return lam * 4.0 ** np.arange(1, t + 1)


def sco_lambda(lipschitz: float, diameter: float, n: int, m: int, d: int, multiplier: float,
               num_groups: int = 1) -> float:
    """lambda = (G/R) max{A T sqrt(d)/(n sqrt(m)), sqrt(T/(n m))} (correction of Theorem 5.1's lambda,
    T = ``num_groups`` for the equal split, 1 for the printed halving schedule)."""
    t = num_groups
    return lipschitz / diameter * max(multiplier * t * math.sqrt(d) / (n * math.sqrt(m)), math.sqrt(t / (n * m)))


def _groups(n, m, epsilon, delta, variant, min_group=None):
    if min_group is None:
        return acc.phased_sco_groups(n, m, epsilon, delta, variant)
    # rate-shape mode: no privacy minimum; N0 is ``min_group`` (keeps the schedule's shape at small n)
    if variant == "A4":
        t = int(math.floor(math.log2(n / min_group)))
        if t < 1:
            raise ValueError(f"n={n} must be >= 2 N0 = {2 * min_group}")
        return [(n // 2**i, n // 2 ** (i - 1)) for i in range(1, t + 1)]
    t = num_phases(n, m)
    size = n // t
    if size < min_group:
        raise ValueError(f"n={n} must be >= T N0 = {t * min_group}")
    return [(i * size, (i + 1) * size) for i in range(t)]


@functools.partial(jax.jit, static_argnames=("loss", "iters"))
def _rate_shape_scan(loss: Loss, x, y, weights, lambdas, sigmas, base_centers, base_radii, theta0, key,
                     iters: int = solver.SOLVER_ITERS):
    """M': theta_i = proj_K(theta*_i + sigma_i N(0, I)) for i = 1..T (one scan; ``weights`` [T, users]).

    ``x`` is ``[n, m, d]`` (every phase sees all users, Phased-ERM) or ``[T, users per group, m, d]`` (phase i sees
    only its own group, Phased-SCO: the same objective as masking the full data, at 1/T of the cost)."""
    per_phase = x.ndim == 4

    def phase(theta_prev, inputs):
        i, w, lam, sigma = inputs[:4]
        xi, yi = inputs[4:] if per_phase else (x, y)
        star = solver.argmin(loss, xi, yi, w, lam, theta_prev, base_centers, base_radii, iters)
        noise = sigma * jax.random.normal(jax.random.fold_in(key, i), theta_prev.shape, theta_prev.dtype)
        return solver.project_balls(star + noise, base_centers, base_radii), star

    idx = jnp.arange(1, lambdas.shape[0] + 1)
    theta, stars = jax.lax.scan(phase, theta0, (idx, weights, lambdas, sigmas) + ((x, y) if per_phase else ()))
    return theta, stars


def _group_stack(x, y, groups):
    """Phased-SCO's disjoint groups stacked as ``[T, largest group, m, d]`` (shorter groups padded with weight-0
    users), with their ``[T, largest group]`` weights."""
    size = max(hi - lo for lo, hi in groups)
    xs = np.zeros((len(groups), size) + x.shape[1:])
    ys = np.zeros((len(groups), size) + y.shape[1:])
    weights = np.zeros((len(groups), size))
    for i, (lo, hi) in enumerate(groups):
        xs[i, : hi - lo], ys[i, : hi - lo], weights[i, : hi - lo] = x[lo:hi], y[lo:hi], 1.0
    return xs, ys, weights


def rate_shape_many(keys, loss: Loss, x, y, domain, weights, lambdas, sigmas, theta0=None,
                    iters: int = solver.SOLVER_ITERS) -> np.ndarray:
    """``[runs, d]`` outputs of M' for a batch of run keys (vmapped); NOT private. ``lambdas`` / ``sigmas`` are
    ``[T]`` (shared) or ``[runs, T]`` (one schedule per run, e.g. several rho in one program); ``domain`` is one
    ``Domain`` or one per run, all with the same number of balls (Algorithm 5's K' = K cap B(theta_0, R'))."""
    d = x.shape[-1]
    lambdas, sigmas = np.asarray(lambdas, np.float64), np.asarray(sigmas, np.float64)
    per_run = lambdas.ndim == 2
    if per_run != (sigmas.ndim == 2) or (per_run and not lambdas.shape[0] == sigmas.shape[0] == len(keys)):
        raise ValueError(f"lambdas {lambdas.shape} and sigmas {sigmas.shape} must both be [T] or both "
                         f"[runs={len(keys)}, T]")
    per_run_domain = not isinstance(domain, mech.Domain)
    domains = list(domain) if per_run_domain else [domain]
    if per_run_domain and (len(domains) != len(keys) or len({len(dm.radii) for dm in domains}) != 1):
        raise ValueError(f"domain: {len(domains)} domains for {len(keys)} runs with "
                         f"{sorted({len(dm.radii) for dm in domains})} balls; need one per run, equal ball counts")
    th0 = np.stack([dm.project(np.zeros(d) if theta0 is None else theta0) for dm in domains])
    centers = np.stack([dm.centers for dm in domains]).astype(np.float64)
    radii = np.stack([dm.radii for dm in domains]).astype(np.float64)
    if not per_run_domain:
        th0, centers, radii = th0[0], centers[0], radii[0]
    with jax.enable_x64(True):
        f = lambda k, lam, sig, c, r, t0: _rate_shape_scan(  # noqa: E731
            loss, jnp.asarray(x, jnp.float64), jnp.asarray(y, jnp.float64), jnp.asarray(weights, jnp.float64), lam,
            sig, c, r, t0, k, iters)[0]
        axis = 0 if per_run else None
        dom_axis = 0 if per_run_domain else None
        return np.asarray(jax.vmap(f, in_axes=(0, axis, axis, dom_axis, dom_axis, dom_axis))(
            keys, jnp.asarray(lambdas), jnp.asarray(sigmas), jnp.asarray(centers), jnp.asarray(radii),
            jnp.asarray(th0)))


def _certified_phases(key, loss, x, y, domain, groups, lambdas, eps_ph, delta_ph, beta_ph, lipschitz, inner,
                      c_k, theta0=None, mode="certified"):
    """Certified loop: phase i calls Algorithm 2 (or A2c) on l_i with G_i = 2G, mu_i = lambda_i (+ loss mu).
    Every phase's exact fallback is checked before the first phase reads the data."""
    d = x.shape[-1]
    _check_releasable(mode, [(hi - lo, eps_ph, delta_ph) for lo, hi in groups], f"a phase ({inner} inside)")
    theta = domain.project(np.zeros(d) if theta0 is None else theta0)
    phases = []
    for i, ((lo, hi), lam) in enumerate(zip(groups, lambdas), start=1):
        dom_i = domain.regularised(lam, theta)
        call = mech.sc_output_pert_certified if inner == "A2c" else mech.sc_output_pert
        rel = call(jax.random.fold_in(key, i), loss, x[lo:hi], y[lo:hi], dom_i, eps_ph, delta_ph, beta_ph,
                   c_k=c_k, lipschitz=2 * lipschitz, fallback=_fallback(mode))
        phases.append(rel)
        if rel.status != mech.OK:
            return PhasedResult(np.full(d, np.nan), rel.status, tuple(phases))
        theta = domain.project(rel.theta)
    return PhasedResult(theta, mech.OK, tuple(phases))


def phased_erm(key, loss: Loss, x, y, domain: mech.Domain, epsilon: float, delta: float, fail_prob: float, *,
               lam: Optional[float] = None, mode: str = "certified", rho: float = 1.0, inner: str = "A2c",
               c_k: int = 2, lipschitz: Optional[float] = None) -> PhasedResult:
    """Algorithm 3 (Phased-ERM; Theorem 4.1). ``lam`` defaults to ``erm_lambda`` with the certified noise
    multiplier of the phase (the phase-independent multiplier A) or ``rho`` in rate-shape mode."""
    v.check_choice("mode", mode, MODES)
    v.check_choice("inner", inner, ("A2", "A2c"))
    n, m, d = x.shape
    g = loss.lipschitz if lipschitz is None else lipschitz
    t = num_phases(n, m)
    eps_ph, delta_ph, beta_ph = epsilon / t, delta / t, fail_prob / t
    if lam is None:
        mult = rho if mode == "rate-shape" else acc.noise_multiplier(eps_ph, delta_ph, beta_ph, n, m, c_k, inner)
        lam = erm_lambda(g, domain.diameter, n, m, d, mult)
    lambdas = phase_lambdas(lam, t)
    groups = [(0, n)] * t
    if mode == "rate-shape":
        sigmas = rho * 2 * g / (lambdas * n * math.sqrt(m))
        theta = rate_shape_many(key[None], loss, x, y, domain, np.ones((t, n)), lambdas, sigmas)[0]
        return PhasedResult(theta, mech.OK, (), "B2 (M', rate-shape, not private)")
    res = _certified_phases(key, loss, x, y, domain, groups, lambdas, eps_ph, delta_ph, beta_ph, g, inner, c_k,
                            mode=mode)
    return dataclasses.replace(res, variant=f"A3 ({inner} inside)")


def phased_sco(key, loss: Loss, x, y, domain: mech.Domain, epsilon: float, delta: float, fail_prob: float, *,
               variant: str = "A4b", lam: Optional[float] = None, mode: str = "certified", rho: float = 1.0,
               inner: str = "A2c", c_k: int = 2, lipschitz: Optional[float] = None,
               min_group: Optional[int] = None) -> PhasedResult:
    """Algorithm 4 (Phased-SCO; Theorem 5.1): ``variant='A4'`` as printed (halving groups), ``'A4b'`` the
    corrected equal split. Rate-shape mode takes N0 = ``min_group`` (default 8 kappa + 2)."""
    v.check_choice("mode", mode, MODES)
    if mode == "rate-shape":
        theta = phased_sco_rate_shape(key[None], loss, x, y, domain, epsilon, delta, variant=variant, lam=lam,
                                      rho=rho, lipschitz=lipschitz, min_group=min_group)[0]
        return PhasedResult(theta, mech.OK, (), f"{variant} rate-shape (not private)")
    n, m, d, g, n0, groups = _sco_groups(loss, x, epsilon, delta, variant, lipschitz, min_group)
    t = len(groups)
    beta_ph = fail_prob / t
    if lam is None:
        mult = acc.noise_multiplier(epsilon, delta, beta_ph, n0 * 2, m, c_k, inner)
        lam = sco_lambda(g, domain.diameter, n, m, d, mult, t if variant == "A4b" else 1)
    lambdas = phase_lambdas(lam, t)
    res = _certified_phases(key, loss, x, y, domain, groups, lambdas, epsilon, delta, beta_ph, g, inner, c_k, mode=mode)
    return dataclasses.replace(res, variant=variant)


def _sco_groups(loss, x, epsilon, delta, variant, lipschitz, min_group):
    """Phased-SCO's shapes, G, N0 (``min_group`` or the certified 8 kappa + 2) and its groups of users."""
    v.check_choice("variant", variant, ("A4", "A4b"))
    n, m, d = x.shape
    g = loss.lipschitz if lipschitz is None else lipschitz
    n0 = min_group if min_group is not None else acc.user_level_params(epsilon, delta).n_min
    return n, m, d, g, n0, _groups(n, m, epsilon, delta, variant, n0)


def phased_sco_rate_shape(keys, loss: Loss, x, y, domain: mech.Domain, epsilon: float, delta: float, *,
                          variant: str = "A4b", lam: Optional[float] = None, rho: float = 1.0,
                          lipschitz: Optional[float] = None, min_group: Optional[int] = None) -> np.ndarray:
    """``[runs, d]``: Phased-SCO (Algorithm 4) in rate-shape mode (NOT private) for a batch of keys, one
    vmapped program (``phased_sco(..., mode="rate-shape")`` is this with one key). Phase i runs on its own
    group only (``_group_stack``); ``epsilon, delta`` only set the default N0."""
    n, m, d, g, _, groups = _sco_groups(loss, x, epsilon, delta, variant, lipschitz, min_group)
    t = len(groups)
    if lam is None:
        lam = sco_lambda(g, domain.diameter, n, m, d, rho, t if variant == "A4b" else 1)
    lambdas = phase_lambdas(lam, t)
    sizes = np.array([hi - lo for lo, hi in groups], np.float64)
    xs, ys, weights = _group_stack(np.asarray(x), np.asarray(y), groups)
    sigmas = rho * 2 * g / (lambdas * sizes * math.sqrt(m))
    return rate_shape_many(keys, loss, xs, ys, domain, weights, lambdas, sigmas)


def localisation_radius(sigma0: float, d: int, fail_prob: float, *, sco_term: float = 0.0) -> float:
    """R' = sigma_0 (sqrt(d) + sqrt(2 ln(1/beta))) (+ the Proposition B.1 term for Algorithm 6)."""
    return sigma0 * (math.sqrt(d) + math.sqrt(2 * math.log(1 / fail_prob))) + sco_term


def _centring_step(key, loss, x, y, domain, epsilon, delta, fail_prob, mode, rho, c_k):
    """Step 1 of Algorithms 5/6: theta_0 from Algorithm 2 (A2c) at (eps/2, delta/2), or theta* + N(0, sigma_0^2)
    with sigma_0 = rho G/(mu n sqrt(m)) in rate-shape mode. Returns (sigma_0, theta_0, failed release or None)."""
    n, m, d = x.shape
    if mode == "rate-shape":
        sigma0 = rho * loss.lipschitz / (loss.strong_convexity * n * math.sqrt(m))
        return sigma0, domain.project(mech.minimiser(loss, x, y, domain) + mech.gaussian_noise(key, sigma0, d)), None
    first = mech.sc_output_pert_certified(key, loss, x, y, domain, epsilon / 2, delta / 2, fail_prob, c_k=c_k,
                                          fallback=_fallback(mode))
    if first.status != mech.OK:
        return first.sigma, None, first
    return first.sigma, domain.project(first.theta), None


def strongly_convex_erm(key, loss: Loss, x, y, domain: mech.Domain, epsilon: float, delta: float, fail_prob: float,
                        *, mode: str = "certified", rho: float = 1.0, c_k: int = 2) -> PhasedResult:
    """Algorithm 5 (Strongly-Convex-ERM; Theorem 4.3). Rate-shape mode: theta_0 = theta* + N(0, sigma_0^2 I),
    sigma_0 = rho G/(mu n sqrt(m)), then M' on K' (``strongly_convex_erm_rate_shape`` with one key)."""
    n, m, d = x.shape
    v.check_choice("mode", mode, MODES)
    t = num_phases(n, m)
    _check_releasable(mode, [(n, epsilon / 2, delta / 2), (n, epsilon / (2 * t), delta / (2 * t))], "A5")
    if mode == "rate-shape":
        theta = strongly_convex_erm_rate_shape(key[None], loss, x, y, domain, fail_prob, rho=rho)[0]
        return PhasedResult(theta, mech.OK, (), "A5 B2 (M', rate-shape, not private)")
    k0, k1 = jax.random.split(key)
    sigma0, theta0, failed = _centring_step(k0, loss, x, y, domain, epsilon, delta, fail_prob, mode, rho, c_k)
    if failed is not None:
        return PhasedResult(np.full(d, np.nan), failed.status, (failed,), "A5")
    inner_dom = domain.intersect(theta0, localisation_radius(sigma0, d, fail_prob))
    res = phased_erm(k1, loss, x, y, inner_dom, epsilon / 2, delta / 2, fail_prob, mode=mode, rho=rho, c_k=c_k)
    return dataclasses.replace(res, variant="A5 " + res.variant)


def strongly_convex_erm_rate_shape(keys, loss: Loss, x, y, domain: mech.Domain, fail_prob: float, *,
                                   rho: float = 1.0) -> np.ndarray:
    """``[runs, d]``: Algorithm 5 in rate-shape mode (NOT private) for a batch of keys. theta* is solved once
    (it does not depend on the key); each key's theta_0 = proj_K(theta* + N(0, sigma_0^2 I)) gives its own K' =
    K cap B(theta_0, R'), and the runs whose K' has the same number of balls share one vmapped M' program."""
    n, m, d = x.shape
    g = loss.lipschitz
    t = num_phases(n, m)
    sigma0 = rho * g / (loss.strong_convexity * n * math.sqrt(m))
    star = mech.minimiser(loss, x, y, domain)
    r_prime = localisation_radius(sigma0, d, fail_prob)
    lambdas = phase_lambdas(erm_lambda(g, 2 * r_prime, n, m, d, rho), t)
    sigmas = rho * 2 * g / (lambdas * n * math.sqrt(m))
    split = [jax.random.split(k) for k in keys]
    inner = [domain.intersect(domain.project(star + mech.gaussian_noise(k0, sigma0, d)), r_prime) for k0, _ in split]
    out = np.empty((len(split), d))
    for balls in sorted({len(dm.radii) for dm in inner}):
        lanes = [i for i, dm in enumerate(inner) if len(dm.radii) == balls]
        out[lanes] = rate_shape_many(jnp.stack([split[i][1] for i in lanes]), loss, x, y, [inner[i] for i in lanes],
                                     np.ones((t, n)), lambdas, sigmas)
    return out


def strongly_convex_sco(key, loss: Loss, x, y, domain: mech.Domain, epsilon: float, delta: float, fail_prob: float,
                        *, mode: str = "certified", rho: float = 1.0, c_k: int = 2, split_users: bool = True,
                        variant: str = "A4b", min_group: Optional[int] = None) -> PhasedResult:
    """Algorithm 6 (Strongly-Convex-SCO; Theorem 5.3). ``split_users`` (default): the first half of the users
    gives theta_0, the second half runs Phased-SCO (the printed Algorithm 6 reuses them, a data-dependent K')."""
    n, m, d = x.shape
    g, mu = loss.lipschitz, loss.strong_convexity
    v.check_choice("mode", mode, MODES)
    half = n // 2 if split_users else n
    if mode == "certified":  # the centring call and every Phased-SCO group, before any data is read
        n0 = min_group if min_group is not None else acc.user_level_params(epsilon / 2, delta / 2).n_min
        later = _groups(n - half if split_users else n, m, epsilon / 2, delta / 2, variant, n0)
        _check_releasable(mode, [(half, epsilon / 2, delta / 2)] + [(hi - lo, epsilon / 2, delta / 2)
                                                                     for lo, hi in later], "A6")
    k0, k1 = jax.random.split(key)
    x0, y0 = x[:half], y[:half]
    x1, y1 = (x[half:], y[half:]) if split_users else (x, y)
    sigma0, theta0, failed = _centring_step(k0, loss, x0, y0, domain, epsilon, delta, fail_prob, mode, rho, c_k)
    if failed is not None:
        return PhasedResult(np.full(d, np.nan), failed.status, (failed,), "A6")
    r_prime = localisation_radius(sigma0, d, fail_prob,
                                  sco_term=30 * g * math.sqrt(math.log(2 / fail_prob)) / (mu * math.sqrt(half * m)))
    inner_dom = domain.intersect(theta0, r_prime)
    res = phased_sco(k1, loss, x1, y1, inner_dom, epsilon / 2, delta / 2, fail_prob, variant=variant, mode=mode,
                     rho=rho, c_k=c_k, min_group=min_group)
    return dataclasses.replace(res, variant="A6 " + res.variant)
