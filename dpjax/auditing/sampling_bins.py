"""Canary audit of balls-in-bins batch selection (Chua et al., "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025);
part of the catalogue (``dpjax.auditing.mechanisms``). Its mechanism is one epoch of noisy batch sums over
``dpjax.parts.selection_bins.BinnedBatches``' sampler (``dpjax.primitives.sampling_bins.BallsInBins``), not a
registry family: the audit checks the sampler's privacy property -- a record is in exactly one batch an epoch --
which is what the certified bound (``dpjax.accounting.sampling_bins``: the random-allocation PLD of
``dpjax.accounting.random_allocation``, capped by one Gaussian per epoch) rests on.

Canary: ``n`` rows, all zero but the canary row 0 (0 on D: the same output law as the record absent, add/remove;
1 on D', the clip norm). Round t of the epoch releases ``sum_{i in bin t} x_i + N(0, sigma^2)``: the output is
``y [B]``. The observer sees Chua et al.'s pair ``P = (1/B) sum_t N(e_t, sigma^2 I)`` vs ``Q = N(0, sigma^2 I)``; the
score is its log-likelihood ratio ``log mean_t exp((y_t - 1/2) / sigma^2)``. With ``B = 2`` the pair's exact epsilon
is a 1-d integral (``exact_two_bins``). Mutant: a sampler that also puts record 0 in the next bin (two bins an
epoch): its output law ``N(e_J + e_{J+1}, sigma^2 I)`` leaks more than the certificate allows.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.auditing.audit import CanaryAudit, Certificate
from dpjax.primitives.sampling_bins import BallsInBins

__all__ = ["balls_in_bins_audit", "exact_two_bins", "TwoBinsMutant"]


class TwoBinsMutant(BallsInBins):
    """A privacy bug: record 0 is also placed in the bin after its own (two bins an epoch)."""

    def _chosen(self, size, n_max, round_index, silo_state):
        chosen = super()._chosen(size, n_max, round_index, silo_state)
        num_bins = self.num_bins
        bins = self.assignment(silo_state, size, n_max, round_index // num_bins)
        second = (bins[0] + 1) % num_bins == round_index % num_bins
        return chosen.at[0].set(chosen[0] | second)


def _mechanism(sampler, n: int, num_bins: int):
    def mech(key, dataset):
        k_bins, k_noise = jax.random.split(key)
        state = sampler.init_silo(k_bins, n, n)

        def one_round(t):
            idx, mask, _ = sampler.draw(None, n, n, t, state)
            return jnp.sum(jnp.where(mask, jnp.clip(dataset["x"][idx], -1.0, 1.0), 0.0))

        sums = jax.vmap(one_round)(jnp.arange(num_bins))
        return sums + dataset["sigma"] * jax.random.normal(k_noise, (num_bins,))

    return mech


def _gaussian_delta(eps, mu: float):
    """Hockey-stick divergence of N(mu, 1) vs N(0, 1) at every real ``eps`` (Balle & Wang 2018, Thm 8)."""
    from scipy.stats import norm

    eps = np.asarray(eps, float)
    return norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)


def exact_two_bins(sigma: float, delta: float) -> float:
    """The exact epsilon at ``delta`` of ``P = (N(e_1, s^2 I) + N(e_2, s^2 I)) / 2`` vs ``Q = N(0, s^2 I)`` in R^2.

    Rotate to ``v = (y_1 + y_2) / sqrt 2``, ``u = (y_1 - y_2) / sqrt 2``: under both, v and u are independent;
    ``v ~ N(1/sqrt 2, s^2)`` (P) vs ``N(0, s^2)`` (Q), ``u ~ (N(1/sqrt 2, s^2) + N(-1/sqrt 2, s^2)) / 2`` vs
    ``N(0, s^2)``. So ``delta_{P||Q}(eps) = int m(u) delta_G(eps - log(m(u) / g(u))) du`` with delta_G the Gaussian
    pair's divergence (mu = 1 / (sqrt 2 s)), and symmetrically for Q||P; both by quadrature on a fine grid, the
    larger taken, and eps by bisection."""
    from scipy.stats import norm

    mu = 1.0 / (math.sqrt(2.0) * sigma)
    u = np.linspace(-12 * sigma - 1, 12 * sigma + 1, 20_001)
    du = u[1] - u[0]
    a = 1.0 / math.sqrt(2.0)
    m = 0.5 * (norm.pdf(u, a, sigma) + norm.pdf(u, -a, sigma))
    g = norm.pdf(u, 0.0, sigma)
    log_ratio = np.log(m) - np.log(g)

    def hockey(eps: float) -> float:
        pq = np.sum(m * _gaussian_delta(eps - log_ratio, mu)) * du
        qp = np.sum(g * _gaussian_delta(eps + log_ratio, mu)) * du
        return max(pq, qp)

    lo, hi = 0.0, 1.0
    while hockey(hi) > delta:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-7 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if hockey(mid) > delta else (lo, mid)
    return hi


def balls_in_bins_audit(sigma: float = 1.0, n: int = 8, delta: float = 1e-3) -> CanaryAudit:
    """One epoch of B = 2 balls-in-bins batches of ``n`` records (n / 2 expected each), noise std ``sigma`` (clip 1,
    add/remove); certificate: ``dpjax.accounting.sampling_bins`` under ``best`` (the certified random-allocation PLD,
    which the unamplified Gaussian of multiplier sigma caps); exact: ``exact_two_bins``; mutant: record 0 in two bins
    (``TwoBinsMutant``)."""
    from dpjax.accounting import sampling_bins as acc

    num_bins = 2
    sampler = BallsInBins(batch_size=n // num_bins, num_bins=num_bins, capacity=n)
    mutant = TwoBinsMutant(batch_size=n // num_bins, num_bins=num_bins, capacity=n)
    cert = acc.binned_epsilon("balls-in-bins", sigma, num_bins, num_bins, delta, "best", neighboring="add-remove")
    zero = np.zeros(n, np.float32)
    one = zero.copy()
    one[0] = 1.0
    d = {"x": jnp.asarray(zero), "sigma": jnp.float32(sigma)}
    dp = {"x": jnp.asarray(one), "sigma": jnp.float32(sigma)}

    def score(y):
        z = (y - 0.5) / sigma**2
        return jax.scipy.special.logsumexp(z) - math.log(num_bins)

    return CanaryAudit(
        name="balls-in-bins",
        description=(f"one epoch of B={num_bins} balls-in-bins batch sums (n={n}, sigma={sigma}), canary absent vs "
                     "present; certified by the random-allocation PLD"),
        mechanism=_mechanism(sampler, n, num_bins), dataset=d, neighbour=dp, score=score,
        certificate=Certificate(cert.epsilon, delta, f"dpjax.accounting.sampling_bins ({cert.accountant})", "add-remove"),
        mutants={"record-in-two-bins": _mechanism(mutant, n, num_bins)},
        exact=lambda: {"epsilon": exact_two_bins(sigma, delta)},
        details={"num_bins": num_bins, "n": n, "sigma": sigma})
