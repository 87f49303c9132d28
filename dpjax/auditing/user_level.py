"""Canary audit of Ghazi et al.'s (ICML 2023) user-level output perturbation (Algorithm 1, DelOutputPert); part of the
catalogue (``dpjax.auditing.mechanisms``). Its mechanism is the user-level release (``dpjax.user_level``), not a
registry family."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.auditing.audit import CanaryAudit, Certificate

__all__ = ["user_level_audit"]


def user_level_audit(eps_prime: float = 1.0, kappa: int = 3, n: int = 14, outliers: int = 2,
                     sensitivity: float = 1e-4, gaussian_mu: float = 0.25) -> CanaryAudit:
    """Algorithm 1 of Ghazi et al. (ICML 2023), DelOutputPert, on f = mean of the users' values clipped to [0, 1],
    replace-one-user neighbours (``dpjax.user_level.audit.canary_pair``: D' moves the canary user from 0 to 1).

    Test mode (spec test U5): ``kappa`` and sigma = 8 kappa Delta / ``gaussian_mu`` are given directly; the certificate
    is Theorem 3.3's proof, ``(2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G(eps', gaussian_mu))``. The stable tables
    come from the exact enumeration of every deletion set of <= 4 kappa + 1 users (``stable_table``); the audited runs
    are ``release_from_table`` (the TDLap draw, bottom, the Gaussian) jitted and vmapped over keys. The target Delta is
    far below the replace sensitivity 1/n of f (the paper's regime: Delta ~ 1/(n sqrt(m)) << 1/n), so privacy rests on
    the stability test; the mutant skips it (releases f(x) + N(0, sigma^2), never bottom) and is caught. Score: the
    release, bottom mapped above every release.
    """
    from dpjax.accounting import user_level as ul_acc
    from dpjax.user_level import audit as ul_audit, mechanisms as ul_mech
    sigma = 8 * kappa * sensitivity / gaussian_mu
    params = ul_acc.a1_test_params(eps_prime, kappa, sensitivity, sigma)
    cert_eps, cert_delta = ul_acc.a1_certified(params)
    x, x2 = ul_audit.canary_pair(n, outliers)
    tables = [ul_audit.clipped_mean_table(v_, kappa, sensitivity) for v_ in (x, x2)]

    def inputs(values, table):
        return {"centres": jnp.asarray(table.centres, jnp.float32), "bottom": jnp.asarray(table.bottom),
                "sigma": jnp.float32(sigma), "f_full": jnp.float32(np.clip(values, 0, 1).mean())}

    def mech(key, inp):
        return ul_mech.release_from_table(key, inp["centres"], inp["bottom"], inp["sigma"], eps_prime, kappa)

    def no_stability_test(key, inp):  # the same key use: the noise key is the second half of split(key)
        _, key_noise = jax.random.split(key)
        return jnp.int32(ul_mech.OK), inp["f_full"] + inp["sigma"] * jax.random.normal(key_noise, (1,))

    bottom_score = 1e3  # above every release (|f| <= 1, sigma << 1): one threshold sees both bottom and shifts

    def exact():
        laws = [ul_audit.output_law(t, eps_prime, kappa) for t in tables]
        skip = [ul_audit.skip_test_law(v_) for v_ in (x, x2)]
        return {"epsilon": ul_audit.exact_epsilon(*laws, sigma, cert_delta),
                "no_stability_test_epsilon": ul_audit.exact_epsilon(*skip, sigma, cert_delta),
                "half_noise_epsilon": ul_audit.exact_epsilon(*laws, sigma / 2, cert_delta),
                "p_bottom_d": laws[0][0], "p_bottom_d_prime": laws[1][0]}

    return CanaryAudit(
        name="user-level",
        description="Ghazi et al. Algorithm 1 (DelOutputPert; user_level.mechanisms.release_from_table on exact "
                    "stable tables), f = clipped mean of user values",
        mechanism=mech, dataset=inputs(x, tables[0]), neighbour=inputs(x2, tables[1]),
        score=lambda out: jnp.where(out[0] == ul_mech.BOTTOM, bottom_score, out[1][0]),
        certificate=Certificate(cert_eps, cert_delta, "dpjax.accounting.user_level.a1_certified (Theorem 3.3 proof, "
                                "test-mode kappa and sigma)", "replace-one-user"),
        mutants={"no-stability-test": no_stability_test},
        exact=exact,
        details={"eps_prime": eps_prime, "kappa": kappa, "n": n, "outlier_users": outliers,
                 "Delta": sensitivity, "sigma": sigma, "gaussian_mu": gaussian_mu,
                 "release_probability": f"{1 - tables[0].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D), "
                                        f"{1 - tables[1].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D')"})


# DP-SGD-General configurations (certified eps 1-5 at DELTA): shuffling, one epoch of 2 rounds of
# 5 of 10 records; subsampling, 2 rounds of 5 of 6 records; Poisson, 4 rounds at q = 1/4; groups of
