"""Accounting of BandMF (banded matrix-factorization noise), as dp_accounting events.

Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023. The privatizer (``dpjax.parts.band_mf``) adds ``z x Delta x C^{-1} w``
with the strategy ``C`` normalised to unit largest column norm, ``Delta`` a record's clipped contribution:

* **multi-epoch, no amplification** (Sec. 4; also Choquette-Choo et al., "Multi-Epoch Matrix Factorization
  Mechanisms for Private Machine Learning", ICML 2023, Thm 2.1): the run is ``C x + sigma w``, ONE Gaussian mechanism of
  sensitivity ``sens(C) Delta`` under the participation pattern (b-min-separation: ``sens(C)^2`` from
  ``dpjax.primitives.banded_mf.sensitivity_squared``), so of multiplier ``z / sens(C)``: ``GaussianDpEvent``.
  For a unit-norm ``b``-banded ``C`` and separation ``>= b`` the cross terms vanish and ``sens(C) <= sqrt(k)``
  with ``k = ceil(n / min_sep)`` participations (``separated_sensitivity``).
* **amplified, cyclic Poisson sampling** (Thm 4 / Alg. 2): the records split into ``b`` groups, round ``t`` samples
  group ``t mod b`` with Poisson rate ``q``; a record meets ``ceil(n / b)`` rounds, each a Poisson-subsampled
  Gaussian of multiplier ``z`` (column-norm sensitivity), composed adaptively:
  ``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), ceil(n / b))``. Neighbouring: add/remove.

Pure Python + dp_accounting (no jax).
"""

from __future__ import annotations

import math

import dp_accounting
from dp_accounting.pld import pld_privacy_accountant

from dpjax import _validate as v

__all__ = ["separated_sensitivity", "multi_epoch_event", "amplified_event", "band_mf_epsilon"]


def separated_sensitivity(num_rounds: int, min_sep: int, bands: int) -> float:
    """``sqrt(ceil(n / min_sep))``: the sensitivity bound of a unit-column-norm ``bands``-banded strategy when every two
    participations are ``min_sep >= bands`` apart (the Gram matrix vanishes between them)."""
    n = v.check_int("num_rounds", num_rounds, min_value=1)
    sep = v.check_int("min_sep", min_sep, min_value=1)
    b = v.check_int("bands", bands, min_value=1)
    if b > sep:
        raise ValueError(f"bands={b} must be <= min_sep={sep} for the separated bound; use "
                         "dpjax.primitives.banded_mf.sensitivity_squared on the strategy matrix")
    return math.sqrt(-(-n // sep))


def multi_epoch_event(noise_multiplier: float, strategy_sensitivity: float) -> dp_accounting.DpEvent:
    """The whole run as one Gaussian mechanism of multiplier ``z / sens(C)``."""
    z = v.check_positive("noise_multiplier", noise_multiplier)
    sens = v.check_positive("strategy_sensitivity", strategy_sensitivity)
    return dp_accounting.GaussianDpEvent(z / sens)


def amplified_event(noise_multiplier: float, sampling_prob: float, num_rounds: int,
                    bands: int) -> dp_accounting.DpEvent:
    """Amplified BandMF under cyclic Poisson sampling (``bands`` groups, rate ``sampling_prob`` inside a group)."""
    z = v.check_positive("noise_multiplier", noise_multiplier)
    q = v.check_probability("sampling_prob", sampling_prob, allow_zero=False)
    n = v.check_int("num_rounds", num_rounds, min_value=1)
    b = v.check_int("bands", bands, min_value=1, max_value=n)
    inner = dp_accounting.GaussianDpEvent(z)
    if q < 1.0:
        inner = dp_accounting.PoissonSampledDpEvent(q, inner)
    return dp_accounting.SelfComposedDpEvent(inner, -(-n // b))


def band_mf_epsilon(event: dp_accounting.DpEvent, delta: float, *, discretization: float = 1e-4) -> float:
    """Certified ``epsilon`` at ``delta`` of a BandMF event by dp_accounting's PLD accountant (add/remove)."""
    d = v.check_open_unit("delta", delta)
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=v.check_positive(
        "discretization", discretization))
    return float(acc.compose(event).get_epsilon(d))
