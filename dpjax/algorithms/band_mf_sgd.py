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
import math

import jax

from dpjax import _validate
from dpjax.algorithms import binned_sgd
from dpjax.algorithms.dp_ftrl import EpochBlocks
from dpjax.engine.chain import Parts
from dpjax.parts import Aggregate, Averager, ClipPerUnit, MinibatchGradient, OptaxServer
from dpjax.parts.band_mf import BandMfNoise
from dpjax.primitives import banded_mf

__all__ = ["ORDERS", "SAMPLINGS", "MAX_OPTIMIZED_ROUNDS", "optimized_coeffs", "strategy_coeffs", "check_config",
           "band_mf_parts", "validate_data"]

ORDERS = ("shuffled-once", "given")
#: The selections BandMF is accounted for: fixed-order blocks, min-separation groups, cyclic Poisson (amplified).
SAMPLINGS = ("one-pass", "cyclic-poisson", "min-separation")
#: The most rounds whose strategy is optimised (``bands > 1`` without ``band_coeffs``): the prefix loss is an O(R b)
#: scan evaluated ~200 times by L-BFGS (10^5 rounds: ~30 s on a loaded 2-core machine; 10^9 would need days and a
#: 4 GB scan). Beyond it, give ``band_coeffs`` (e.g. ``optimize_banded_toeplitz`` at a shorter horizon: the optimal
#: coefficients change little with R, and any coefficients are accounted exactly).
MAX_OPTIMIZED_ROUNDS = 10**5


def _check_coeffs(band_coeffs) -> tuple[float, ...]:
    """``band_coeffs`` as a tuple of floats: a non-empty sequence of finite numbers with ``band_coeffs[0] > 0``."""
    if isinstance(band_coeffs, (str, bytes)):
        raise TypeError(f"band_coeffs={band_coeffs!r} must be a sequence of numbers (c_0, ..., c_(b-1)), not a string")
    try:
        coeffs = tuple(float(x) for x in band_coeffs)
    except (TypeError, ValueError):
        raise TypeError(f"band_coeffs={band_coeffs!r} must be a sequence of real numbers (c_0, ..., c_(b-1))") from None
    if not coeffs or not all(math.isfinite(c) for c in coeffs) or not coeffs[0] > 0:
        raise ValueError(f"band_coeffs={band_coeffs!r} must be a non-empty sequence of finite numbers with "
                         "band_coeffs[0] > 0 (the strategy's diagonal: C must be invertible)")
    return coeffs


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


def check_config(num_rounds: int, sampling: str, neighboring: str, order: str, bands, band_coeffs, *,
                 num_bins=None, sampling_rate=None) -> tuple:
    """Validates the band-mf configuration of ``DpSgd``; returns ``(band_coeffs as a tuple or None, num_bins)``, the
    period of a binned selection defaulting to the strategy's bands (the cyclic period and the bands tied, as
    NeurIPS 2023, Thm 4 states it)."""
    if sampling not in SAMPLINGS:
        raise ValueError(f"sampling={sampling!r} must be 'one-pass', 'cyclic-poisson' or 'min-separation' with "
                         "noise='band-mf' (a record's participations separated, or cyclic Poisson groups: BandMF's "
                         "accounting)")
    if sampling == "one-pass":
        if neighboring != "replace-one":
            raise ValueError(f"neighboring={neighboring!r} must be 'replace-one' with noise='band-mf' and "
                             "sampling='one-pass' (fixed positions)")
        if num_bins is not None:
            raise ValueError(f"num_bins={num_bins!r}: sampling='one-pass' cycles blocks of batch_size; the period "
                             "is n_min // batch_size")
    elif sampling == "cyclic-poisson" and neighboring != "add-remove":
        raise ValueError(f"neighboring={neighboring!r} must be 'add-remove' with noise='band-mf' and "
                         "sampling='cyclic-poisson' (amplified BandMF, NeurIPS 2023, Thm 4)")
    _validate.check_choice("order", order, ORDERS)
    num_rounds = _validate.check_rounds("num_rounds", num_rounds)
    if bands is not None:
        _validate.check_int("bands", bands, min_value=1, max_value=num_rounds)
    coeffs = None
    if band_coeffs is not None:
        coeffs = _check_coeffs(band_coeffs)
        if bands is not None and len(coeffs) != bands:
            raise ValueError(f"band_coeffs has {len(coeffs)} entries; bands={bands} must match "
                             f"(band_coeffs={band_coeffs!r})")
        if len(coeffs) > num_rounds:
            raise ValueError(f"band_coeffs has {len(coeffs)} entries ({band_coeffs!r}); at most num_rounds={num_rounds} "
                             "(a band beyond the last round never applies)")
        BandMfNoise(coeffs)
    elif bands is not None and bands > 1 and num_rounds > MAX_OPTIMIZED_ROUNDS:
        raise ValueError(f"num_rounds={num_rounds!r} with bands={bands}: the strategy is optimised for at most "
                         f"MAX_OPTIMIZED_ROUNDS={MAX_OPTIMIZED_ROUNDS} rounds (an O(R bands) loss, ~200 evaluations); "
                         "give band_coeffs (e.g. dpjax.primitives.banded_mf.optimize_banded_toeplitz at a shorter "
                         "horizon)")
    if sampling == "one-pass":
        return coeffs, None
    b = len(coeffs) if coeffs is not None else (1 if bands is None else bands)
    period = b if num_bins is None else _validate.check_int("num_bins", num_bins, min_value=1)
    if b > period:
        raise ValueError(f"bands={b} must be <= num_bins={period}, the cyclic period (a record's participations "
                         "are num_bins rounds apart; BandMF's accounting needs them >= bands apart)")
    binned_sgd.check_config(sampling, neighboring, period, sampling_rate)
    return coeffs, period


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
