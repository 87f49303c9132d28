"""DP-SGD with banded matrix-factorization noise (``DpSgd(noise="band-mf", sampling="one-pass")``): the round of
Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023, Alg. 1 (multi-epoch, no amplification), in the parts of DP-FTRL
(``dpjax.algorithms.dp_ftrl``) with the tree privatizer replaced by BandMF's.

Round t:

1. ``EpochBlocks``: every silo's records in a fixed order (``order="shuffled-once"``: a permutation drawn once per run;
   ``"given"``: the stored order) cut into blocks of ``B`` and cycled, so a record joins every ``T = floor(n_min / B)``
   rounds: b-min-separation with ``min_sep = T`` and at most ``k = ceil(R / T)`` participations;
2. per-example clipped gradients (``ClipPerUnit``, replace-one: the fixed positions make the data set's size
   public), the public mean over the batch and the silos (sensitivity ``2C / (B N)``);
3. ``BandMfNoise`` (``dpjax.parts.band_mf``) adds ``z x sensitivity x (C^{-1} w)_t`` from its ``(bands - 1) x d``
   buffer, ``C`` the banded Toeplitz strategy: ``band_coeffs`` if given, else
   ``dpjax.primitives.banded_mf.optimize_banded_toeplitz(R, bands)`` (the prefix-sum workload over the run's ``R``
   rounds, McKenna 2024's O(R b) loss, optimised once per (R, bands) and cached);
4. the server's optax transformation at unit step, then ``-eta``.

Privacy: ``BandMfNoise.events`` gives a ``dpjax.accounting.band_mf.BandMfEvent``, whose ``spec(plan)`` is the
multi-epoch guarantee (NeurIPS 2023, Sec. 4, with Choquette-Choo et al., "Multi-Epoch Matrix Factorization Mechanisms
for Private Machine Learning", ICML 2023, Thm 2.1): one Gaussian of multiplier ``z / sqrt(k)`` when ``bands <= T``
(refused otherwise).

``sampling="cyclic-poisson"`` (add/remove) replaces step 1 by ``dpjax.parts.selection_bins.BinnedBatches``: the records
of every silo split once into ``num_bins`` p groups (default: the bands b, the period and the bands tied as in NeurIPS
2023, Thm 4; ``p < b`` is refused), round t Poisson-samples group ``t mod p`` at the public ``sampling_rate`` q. The
same ``BandMfEvent`` then reads the selection's ``BinnedSelectionEvent`` and reports the amplified guarantee:
``ceil(R / p)`` Poisson-subsampled Gaussians of multiplier z (``dpjax.accounting.band_mf.amplified_event``), with the
static buffer's overflow charged to delta. ``sampling="min-separation"`` (all of group ``t mod p``) is the multi-epoch
guarantee at ``min_sep = p`` (``dpjax.algorithms.binned_sgd`` builds both rounds).
"""

from __future__ import annotations

import functools

import jax

from dpjax import _validate
from dpjax.algorithms import binned_sgd, static_rules
from dpjax.algorithms.dp_ftrl import EpochBlocks
from dpjax.engine.chain import Parts
from dpjax.parts import Aggregate, Averager, ClipPerUnit, MinibatchGradient, OptaxServer
from dpjax.parts.band_mf import BandMfNoise
from dpjax.primitives import banded_mf

__all__ = ["ORDERS", "SAMPLINGS", "MAX_OPTIMIZED_ROUNDS", "optimized_coeffs", "strategy_coeffs", "check_config",
           "band_mf_parts", "validate_data"]

# The static rules (pure Python: ``dpjax sweep`` checks a config with them before jax loads) live in
# ``dpjax.algorithms.static_rules``; their names stay importable from here.
ORDERS = static_rules.BAND_MF_ORDERS
SAMPLINGS = static_rules.BAND_MF_SAMPLINGS
MAX_OPTIMIZED_ROUNDS = static_rules.MAX_OPTIMIZED_ROUNDS


@functools.lru_cache(maxsize=32)
def optimized_coeffs(num_rounds: int, bands: int) -> tuple[float, ...]:
    """The optimised unit-norm banded Toeplitz strategy for ``num_rounds`` prefix sums (cached: every call of the
    family's ``parts`` asks for it, also while the round is traced: the optimisation is run eagerly then)."""
    with jax.ensure_compile_time_eval():
        return tuple(float(x) for x in banded_mf.optimize_banded_toeplitz(num_rounds, bands))


def strategy_coeffs(num_rounds: int, bands: int | None, band_coeffs) -> tuple[float, ...]:
    """``band_coeffs`` (a given strategy) or the optimised one of ``bands`` bands (default 1: independent noise)."""
    if band_coeffs is not None:
        return tuple(float(x) for x in band_coeffs)
    return optimized_coeffs(int(num_rounds), 1 if bands is None else int(bands))


#: Validates the band-mf configuration of ``DpSgd``; returns ``(band_coeffs as a tuple or None, num_bins)`` (the rule
#: ``dpjax sweep`` checks before jax loads).
check_config = static_rules.band_mf


def band_mf_parts(problem, num_rounds: int, batch_size: int, order: str, bands, band_coeffs, server_optimizer,
                  output: str, window: int, selection=None, neighboring: str = "replace-one") -> Parts:
    """The round's parts (module docstring); ``selection`` a ``BinnedBatches`` (cyclic Poisson, min-separation)
    instead of the fixed-order blocks."""
    noise = BandMfNoise(strategy_coeffs(num_rounds, bands, band_coeffs))
    if selection is not None:
        return binned_sgd.binned_parts(problem, batch_size, selection, neighboring, noise, server_optimizer, output,
                                       window)
    return Parts(EpochBlocks(batch_size, order == "shuffled-once"),
                 (MinibatchGradient(problem, batch_size), ClipPerUnit("clip_norm", "replace-one"), Aggregate("mean"),
                  noise, OptaxServer(server_optimizer), Averager(output, window)))


def validate_data(batch_size: int, bands, band_coeffs, data) -> None:
    """``batch_size <= n_min`` and ``bands <= T = n_min // batch_size`` (the separation the accounting needs)."""
    _validate.check_le("batch_size", batch_size, "the smallest silo size", data.min_size)
    b = len(band_coeffs) if band_coeffs is not None else (1 if bands is None else bands)
    per_epoch = data.min_size // batch_size
    if b > per_epoch:
        raise ValueError(f"bands={b} must be <= the rounds between a record's participations, {per_epoch} "
                         "(= smallest silo size // batch_size: b-min-separation)")
