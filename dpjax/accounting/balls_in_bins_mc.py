"""Monte Carlo ESTIMATE of balls-in-bins DP-SGD's privacy (Chua et al., AISTATS 2025) -- never a certificate.

Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha & Zhang, "Balls-and-Bins Sampling for DP-SGD",
AISTATS 2025, account the adaptive batch linear query with balls-in-bins batches through the pair of one epoch of B
steps (sensitivity 1, noise std sigma)

    P_B = (1/B) sum_{t<B} N(e_t, sigma^2 I_B)        Q_B = N(0, sigma^2 I_B),

composed over the E epochs, and estimate its hockey-stick divergence by sampling the privacy loss (Section 5, their
Monte Carlo accountant). The privacy loss of one epoch is ``L(x) = log((1/B) sum_t exp((x_t - 1/2) / sigma^2))``, so

    delta_{P||Q}(eps) = E_{x~P}[(1 - e^{eps - L(x)})_+],     delta_{Q||P}(eps) = E_{x~Q}[(1 - e^{eps + L(x)})_+],

and the estimate is the larger, with its standard error. It is a sample mean: it can fall below the true value, so
it is reported as an ``MonteCarloEstimate`` (``certified = False``) and never as a ``PrivacyReport``; the certified
bound is ``dpjax.accounting.sampling_bins`` (no amplification). Add/remove only (the pair's relation).
Pure Python + numpy: never imports jax.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpjax import _validate as v

_CHUNK_FLOATS = 2**22  # samples x epochs x bins drawn at once (32 MiB of float64)

#: The most samples per direction an estimate takes: its float64 [samples] loss arrays (and the hockey-stick terms
#: of both directions) stay under ~0.5 GB.
MAX_SAMPLES = 10**7
#: The most normal draws (samples x epochs x bins) per direction ``check_work`` lets a command make: about 2-3 s of
#: one loaded CPU core each way, so `dpjax account --mc-samples` answers within seconds or is refused up front.
MAX_DRAWS = 10**7


def check_work(num_samples: int, num_steps: int, num_bins: int, name: str = "num_samples") -> int:
    """``num_samples`` if ``num_samples x epochs x bins <= MAX_DRAWS`` (the estimate's cost), else a ``ValueError``
    naming ``name``, the value and the largest count that fits."""
    n = v.check_int(name, num_samples, min_value=1, max_value=MAX_SAMPLES)
    per_sample = _num_epochs(num_steps, num_bins) * v.check_int("num_bins", num_bins, min_value=1)
    if n * per_sample > MAX_DRAWS:
        fits = MAX_DRAWS // per_sample
        raise ValueError(f"{name}={n} with {num_bins} bins over {-(-num_steps // num_bins)} epoch(s) is "
                         f"{n * per_sample:.3g} normal draws per direction, above the limit {MAX_DRAWS:.0e} "
                         + (f"(about 2 s each); give at most {fits}" if fits >= 1 else
                            "even for one sample: no Monte Carlo estimate for this schedule"))
    return n


@dataclasses.dataclass(frozen=True)
class MonteCarloEstimate:
    """An (epsilon, delta) ESTIMATE from sampled privacy losses: not a guarantee.

    Attributes:
      epsilon: the epsilon of the estimated pair.
      delta: the sample mean of the hockey-stick divergence at epsilon.
      stderr: the standard error of the delta estimate.
      delta_upper: ``delta + z stderr`` (z = 3), a confidence bound of the estimate, still not a certificate.
      num_samples: samples per direction.
      direction: ``"P||Q"`` (remove) or ``"Q||P"`` (add), the larger.
      certified: always False (a sample mean certifies nothing).
      label: what the number is, for every printed form.
    """

    epsilon: float
    delta: float
    stderr: float
    delta_upper: float
    num_samples: int
    direction: str
    certified: bool = False
    label: str = "Monte Carlo ESTIMATE (Chua et al. 2025), not a certified guarantee"

    def __str__(self) -> str:
        return (f"ε ≈ {self.epsilon:.4g} at δ ≈ {self.delta:.3g} ± {self.stderr:.2g} ({self.label}; "
                f"{self.num_samples} samples, {self.direction})")


def privacy_losses(noise_multiplier: float, num_bins: int, num_epochs: int, num_samples: int, under: str,
                   seed: int = 0) -> np.ndarray:
    """Samples of the E-epoch privacy loss ``sum_e L(x_e)`` of the pair (P_B, Q_B) with x drawn from ``under``
    (``"P"`` or ``"Q"``): float64 ``[num_samples]``."""
    sigma = v.check_positive("noise_multiplier", noise_multiplier)
    b = v.check_int("num_bins", num_bins, min_value=1)
    e = v.check_int("num_epochs", num_epochs, min_value=1)
    n = v.check_int("num_samples", num_samples, min_value=1)
    v.check_choice("under", under, ("P", "Q"))
    rng = np.random.default_rng(v.check_int("seed", seed, min_value=0))
    out = np.empty(n)
    chunk = max(1, _CHUNK_FLOATS // (e * b))
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = sigma * rng.standard_normal((m, e, b))
        if under == "P":  # the differing record sits in a uniform bin of each epoch
            j = rng.integers(0, b, size=(m, e))
            np.put_along_axis(x, j[..., None], np.take_along_axis(x, j[..., None], -1) + 1.0, -1)
        z = (x - 0.5) / sigma**2
        top = z.max(-1, keepdims=True)
        per_epoch = top[..., 0] + np.log(np.exp(z - top).sum(-1)) - math.log(b)  # log-mean-exp over the bins
        out[start:start + m] = per_epoch.sum(-1)
    return out


def _deltas(losses_p: np.ndarray, losses_q: np.ndarray, epsilon: float):
    """``(delta, stderr, direction)`` of the larger of the two hockey-stick estimates at ``epsilon``."""
    terms = {"P||Q": -np.expm1(np.minimum(epsilon - losses_p, 0.0)),  # (1 - e^{eps - L})_+
             "Q||P": -np.expm1(np.minimum(epsilon + losses_q, 0.0))}
    best = max(terms, key=lambda k: terms[k].mean())
    t = terms[best]
    return float(t.mean()), float(t.std(ddof=1) / math.sqrt(t.size)) if t.size > 1 else math.inf, best


def _num_epochs(num_steps: int, num_bins: int) -> int:
    return -(-v.check_int("num_steps", num_steps, min_value=1) // v.check_int("num_bins", num_bins, min_value=1))


def mc_delta(noise_multiplier: float, num_steps: int, num_bins: int, epsilon: float, num_samples: int = 100_000,
             seed: int = 0) -> MonteCarloEstimate:
    """The Monte Carlo delta ESTIMATE at ``epsilon`` of T = ``num_steps`` balls-in-bins rounds with B bins
    (``ceil(T / B)`` epochs; a partial epoch is counted whole, which only adds loss)."""
    eps = v.check_nonnegative("epsilon", epsilon)
    e = _num_epochs(num_steps, num_bins)
    lp = privacy_losses(noise_multiplier, num_bins, e, num_samples, "P", seed)
    lq = privacy_losses(noise_multiplier, num_bins, e, num_samples, "Q", seed + 1)
    delta, se, direction = _deltas(lp, lq, eps)
    return MonteCarloEstimate(eps, delta, se, delta + 3 * se, num_samples, direction)


def mc_epsilon(noise_multiplier: float, num_steps: int, num_bins: int, delta: float, num_samples: int = 100_000,
               seed: int = 0) -> MonteCarloEstimate:
    """The Monte Carlo epsilon ESTIMATE at ``delta``: the smallest eps whose estimated delta is <= ``delta``
    (bisection on one fixed set of samples, so the estimate is monotone in eps).

    The estimate leans optimistic: the sample mean of a rare-event divergence is right-skewed, so in most draws it
    falls below the true delta and the eps found is a little low (measured: at the eps this returns for seed 0, fresh
    samples put delta at 1.05-1.14x the target for (z, B) = (0.6, 10), (0.6, 100), (1, 10) at delta = 1e-3 and 1e5
    samples). ``delta_upper`` (three standard errors) is the number to compare with a target."""
    target = v.check_open_unit("delta", delta)
    e = _num_epochs(num_steps, num_bins)
    lp = privacy_losses(noise_multiplier, num_bins, e, num_samples, "P", seed)
    lq = privacy_losses(noise_multiplier, num_bins, e, num_samples, "Q", seed + 1)
    lo, hi = 0.0, 1.0
    while _deltas(lp, lq, hi)[0] > target:
        lo, hi = hi, 2 * hi
        if hi > 1e4:
            raise ValueError(f"delta={delta!r} is below what {num_samples} samples can resolve; raise num_samples")
    if _deltas(lp, lq, 0.0)[0] <= target:
        hi = 0.0
    for _ in range(60):
        if hi - lo <= 1e-6 * max(hi, 1e-12):
            break
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _deltas(lp, lq, mid)[0] > target else (lo, mid)
    d, se, direction = _deltas(lp, lq, hi)
    return MonteCarloEstimate(hi, d, se, d + 3 * se, num_samples, direction)
