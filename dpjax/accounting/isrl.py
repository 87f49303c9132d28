"""ISRL-DP federated learning (Lowy & Razaviyayn, ICLR 2023): the paper's printed calibrations.

"Paper mode" reproduces the printed formulas exactly (Theorem D.1's proof, Theorem 3.1/E.1, Appendix I); the tight
accountants in `dpjax.accounting.tight` say what the resulting noise actually buys. Notation: L = Lipschitz / clip
bound of one record's gradient, n = records per silo, R = rounds, K = minibatch size, (epsilon, delta) = the
per-silo ISRL-DP target (replace-one relation). Where the paper is loose or wrong (numbers in README.md):

* Theorem D.1's chain: advanced composition + amplification by subsampling (2 q eps') + classical Gaussian
  mechanism. At n = 1238, R = 35, delta = 1/n^2 the printed sigma at nominal eps = 1.5 (K = 15, sigma = 0.852 L)
  buys eps = 0.039 (PLD, Poisson, replace-one) -- 36-270x more noise variance than needed.
* The proof applies a without-replacement subsampling lemma to the with-replacement sampling of Algorithm 2.
* Appendix I's moments-accountant calibration (`isrl_experiment_calibration`) is an add/remove calibration; under
  replace-one it is roughly nominal with PLD + Poisson and not certified by the fixed-size RDP bound.
* Local SGD baseline: the moments-accountant form needs RK >= n^2 eps/4, which the experiments violate
  (`moments_accountant_min_batch`).
"""

from __future__ import annotations

import math

from dpjax import _validate as v

__all__ = [
    "isrl_paper_sigma", "isrl_paper_epsilon", "isrl_paper_min_batch_size", "isrl_paper_chain",
    "isrl_experiment_calibration", "isrl_experiment_batch_size", "isrl_experiment_epsilon",
    "isrl_per_silo_sigma_factors", "isrl_authors_code_calibration", "isrl_one_pass_paper_sigma",
    "isrl_one_pass_paper_epsilon", "isrl_local_sgd_paper_sigma", "moments_accountant_min_batch"
]


def _common(n, rounds, epsilon, delta, eps_name="epsilon"):
    return (v.check_int("n", n, min_value=1), v.check_int("rounds", rounds, min_value=1),
            v.check_positive(eps_name, epsilon), v.check_open_unit("delta", delta))


def _check_paper_eps(epsilon: float, delta: float) -> None:
    bound = 2 * math.log(2 / delta)
    if epsilon > bound:
        raise ValueError(
            f"epsilon={epsilon!r} must be <= 2 ln(2/delta) = {bound:.6g} for the ISRL-DP paper "
            "calibration (Theorem D.1's advanced-composition regime)"
        )


def isrl_paper_chain(n: int, batch_size: int, rounds: int, epsilon: float, delta: float) -> dict:
    """Intermediate quantities of the Theorem D.1 proof's chain (keys eps_tilde, delta_tilde, eps_prime, batch_ok):
    eps~ = eps/(2 sqrt(2 R ln(2/delta))), delta~ = delta/(2R) (advanced composition, Dwork-Roth Thm 3.20);
    eps' = n eps~/(2K) per-step budget before amplification by subsampling (2 q eps'); requires eps' <= 1."""
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    k = v.check_int("batch_size", batch_size, min_value=1)
    eps_t = epsilon / (2 * math.sqrt(2 * rounds * math.log(2 / delta)))
    eps_p = n * eps_t / (2 * k)
    return {"eps_tilde": eps_t, "delta_tilde": delta / (2 * rounds), "eps_prime": eps_p, "batch_ok": eps_p <= 1.0}


def isrl_paper_sigma(lipschitz: float, n: int, rounds: int, epsilon: float, delta: float) -> float:
    """Printed noise of Noisy ISRL-DP MB-SGD (ISRL Thm 2.1/D.1): sigma^2 = 256 L^2 R ln(2.5 R/delta) ln(2/delta) /
    (n^2 eps^2). Requires eps <= 2 ln(2/delta) (ValueError otherwise) and K >= `isrl_paper_min_batch_size` (checked
    by the caller that chooses K)."""
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    _check_paper_eps(epsilon, delta)
    var = 256 * lipschitz**2 * rounds * math.log(2.5 * rounds / delta) * math.log(2 / delta) / (n**2 * epsilon**2)
    return math.sqrt(var)


def isrl_paper_epsilon(lipschitz: float, n: int, rounds: int, sigma: float, delta: float) -> float:
    """Inverse of `isrl_paper_sigma`: the nominal eps the paper assigns to `sigma` (closed form); ValueError if it
    leaves the paper's regime eps <= 2 ln(2/delta)."""
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, sigma, delta = _common(n, rounds, sigma, delta, "sigma")
    eps = 16 * lipschitz * math.sqrt(rounds * math.log(2.5 * rounds / delta) * math.log(2 / delta)) / (n * sigma)
    _check_paper_eps(eps, delta)
    return eps


def isrl_paper_min_batch_size(n: int, rounds: int, epsilon: float, delta: float) -> int:
    """K >= eps n / (4 sqrt(2 R ln(2/delta))) (i.e. eps' <= 1 in Theorem D.1's chain), at least 1."""
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    return max(1, math.ceil(epsilon * n / (4 * math.sqrt(2 * rounds * math.log(2 / delta))) - 1e-12))


def moments_accountant_min_batch(n: int, steps: int, epsilon: float) -> float:
    """Batch-size condition of the moments-accountant form (Abadi et al. 2016 Thm 1 via
    Bassily et al. 2019 Thm 3.1): m >= n sqrt(eps / (4 T)) for T steps."""
    n = v.check_int("n", n, min_value=1)
    steps = v.check_int("steps", steps, min_value=1)
    epsilon = v.check_positive("epsilon", epsilon)
    return n * math.sqrt(epsilon / (4 * steps))


def isrl_experiment_calibration(lipschitz: float, n: int, rounds: int, epsilon: float, delta: float,
                                epsilon_max: float | None = None) -> tuple[float, int]:
    """Appendix I ("as in the experiments") moments-accountant calibration: sigma^2 = 8 L^2 ln(1/delta) R/(n^2 eps^2),
    K = ceil(n sqrt(eps_max) / (2 sqrt R)) clipped to [1, n]; eps_max defaults to eps (pass the sweep's largest eps
    so one K serves the sweep). An add/remove calibration: NOT a certified replace-one guarantee.
    """
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    eps_max = epsilon if epsilon_max is None else v.check_positive("epsilon_max", epsilon_max)
    sigma = math.sqrt(8 * lipschitz**2 * math.log(1 / delta) * rounds / (n**2 * epsilon**2))
    return sigma, isrl_experiment_batch_size(n, rounds, eps_max)


def isrl_experiment_batch_size(n: int, rounds: int, epsilon_max: float) -> int:
    """K of the experiments (Appendix I) from the sweep's largest epsilon: K = ceil(n sqrt(eps_max) / (2 sqrt R))
    clipped to [1, n]."""
    n, rounds = v.check_int("n", n, min_value=1), v.check_int("rounds", rounds, min_value=1)
    epsilon_max = v.check_positive("epsilon_max", epsilon_max)
    k = math.ceil(n * math.sqrt(epsilon_max) / (2 * math.sqrt(rounds)) - 1e-12)
    return int(min(max(k, 1), n))


def isrl_per_silo_sigma_factors(silo_sizes, n_ref: int):
    """sigma_i / sigma_ref (float64 array) of the Appendix I calibration when silo i uses its own n_i and
    delta_i = 1/n_i^2 (as the authors' insurance script does): sigma^2 is proportional to ln(n^2) / n^2, so
    sigma_i / sigma_ref = (n_ref / n_i) sqrt(ln n_i / ln n_ref)."""
    import numpy as np

    n_ref = v.check_int("n_ref", n_ref, min_value=2)
    sizes = np.asarray(silo_sizes, np.float64)
    if sizes.ndim != 1 or sizes.size == 0 or np.any(sizes < 2):
        raise ValueError(f"silo_sizes={list(np.atleast_1d(sizes))!r} must be a non-empty list of sizes >= 2")
    return (n_ref / sizes) * np.sqrt(np.log(sizes) / math.log(n_ref))


def isrl_experiment_epsilon(lipschitz: float, n: int, rounds: int, sigma: float, delta: float) -> float:
    """Nominal eps of the Appendix I calibration: eps = L sqrt(8 ln(1/delta) R) / (n sigma)."""
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, sigma, delta = _common(n, rounds, sigma, delta, "sigma")
    return lipschitz * math.sqrt(8 * math.log(1 / delta) * rounds) / (n * sigma)


def isrl_authors_code_calibration(lipschitz: float, n: int, rounds: int, epsilon: float, delta: float,
                                  epsilon_max: float | None = None) -> tuple[float, int]:
    """The authors' public experiment scripts (whose noise differs from Appendix I's text):
    K = ceil(n eps_max / (4 sqrt(2 R ln(2/delta)))) (clipped to [1, n]) and sigma^2 = 256 L^2 R ln(2.5 R K/(delta n))
    ln(2/delta) / (n^2 eps^2) (delta~ amplified by K/n inside the logarithm).
    """
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    eps_max = epsilon if epsilon_max is None else v.check_positive("epsilon_max", epsilon_max)
    k = int(min(max(math.ceil(n * eps_max / (4 * math.sqrt(2 * rounds * math.log(2 / delta))) - 1e-12), 1), n))
    log_term = math.log(2.5 * rounds * k / (delta * n))
    if log_term <= 0:
        raise ValueError(f"rounds={rounds}, delta={delta!r}: ln(2.5 R K/(delta n)) = {log_term:.3g} <= 0, the "
                         "authors' formula is undefined")
    var = 256 * lipschitz**2 * rounds * log_term * math.log(2 / delta) / (n**2 * epsilon**2)
    return math.sqrt(var), k


def isrl_one_pass_paper_sigma(lipschitz: float, batch_size: int, epsilon: float, delta: float) -> float:
    """One-pass accelerated MB-SGD (ISRL Section 3, Thm 3.1/E.1): sigma^2 = 32 L^2 ln(1.25/delta) / (eps^2 K^2);
    requires eps <= 8 ln(1/delta). Parallel composition over disjoint blocks: no dependence on R. About 2.2-2.8x
    the std the exact analytic Gaussian needs."""
    lipschitz = v.check_positive("lipschitz", lipschitz)
    k = v.check_int("batch_size", batch_size, min_value=1)
    epsilon = v.check_positive("epsilon", epsilon)
    delta = v.check_open_unit("delta", delta)
    if epsilon > 8 * math.log(1 / delta):
        raise ValueError(f"epsilon={epsilon!r} must be <= 8 ln(1/delta) = {8 * math.log(1 / delta):.6g}")
    return math.sqrt(32 * lipschitz**2 * math.log(1.25 / delta) / (epsilon**2 * k**2))


def isrl_one_pass_paper_epsilon(lipschitz: float, batch_size: int, sigma: float, delta: float) -> float:
    """Inverse of `isrl_one_pass_paper_sigma`."""
    lipschitz = v.check_positive("lipschitz", lipschitz)
    k = v.check_int("batch_size", batch_size, min_value=1)
    sigma = v.check_positive("sigma", sigma)
    delta = v.check_open_unit("delta", delta)
    eps = math.sqrt(32 * math.log(1.25 / delta)) * lipschitz / (k * sigma)
    if eps > 8 * math.log(1 / delta):
        raise ValueError(f"sigma={sigma!r} gives epsilon={eps:.4g} > 8 ln(1/delta): outside the paper's regime")
    return eps


def isrl_local_sgd_paper_sigma(lipschitz: float, n: int, rounds: int, local_steps: int, epsilon: float,
                               delta: float) -> float:
    """ISRL-DP Local SGD baseline (Appendix I): sigma^2 = 8 L^2 (R K) ln(1/delta) / (eps^2 n^2) per local step (K
    local steps of batch 1 per round). The moments accountant behind it needs R K >= n^2 eps / 4
    (`moments_accountant_min_batch` <= 1), which the paper's experiments violate: reported, not certified.
    """
    lipschitz = v.check_positive("lipschitz", lipschitz)
    n, rounds, epsilon, delta = _common(n, rounds, epsilon, delta)
    k = v.check_int("local_steps", local_steps, min_value=1)
    return math.sqrt(8 * lipschitz**2 * rounds * k * math.log(1 / delta) / (epsilon**2 * n**2))
