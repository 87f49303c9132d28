"""DP-SGD's batch selections beyond Poisson: ``DpSgd(sampling="balls-in-bins" | "cyclic-poisson" | "min-separation")``.

The round is central DP-SGD's (``dpjax.algorithms.dp_sgd``) with its selection swapped for
``dpjax.parts.selection_bins.BinnedBatches``:

1. ``BinnedBatches`` (unit ``record``): balls-in-bins (Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi, Sinha
   & Zhang, "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025, Algorithm 1: every record in one of ``num_bins`` B
   batches an epoch), cyclic Poisson (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified)
   Banded Matrix Factorization", NeurIPS 2023, Section 4: ``num_bins`` b fixed groups, round t Poisson-samples group
   ``t mod b`` at ``sampling_rate`` q) or b-min-separation (the same groups, all of group ``t mod b``; ibid.,
   Definition 2), gathered into a static buffer of ``capacity`` rows;
2. ``MinibatchGradient`` + ``ClipPerUnit``: per-example clipping, the silo's clipped sum over the public ``K``;
3. ``Aggregate("mean")`` over the silos, then ONE Gaussian (``GaussianNoise(placement="server")``) or BandMF noise
   (``dpjax.parts.band_mf.BandMfNoise``, ``noise="band-mf"``) on the aggregate;
4. the optax server and the averager.

Privacy: nothing here re-derives an event. With Gaussian noise the plan asks the selection's
``BinnedSelectionEvent`` (``dpjax.accounting.sampling_bins``: ``ceil(T / B)`` Gaussians, or ``ceil(T / b)``
Poisson-sampled ones, certified; the buffer's overflow charged to delta), the numbers ``dpjax account --sampling ...``
prints for the same schedule. With BandMF noise the privatizer's ``BandMfEvent`` reads that selection event
(``dpjax.accounting.band_mf``: amplified under cyclic Poisson, multi-epoch under min-separation). Balls-in-bins under
add/remove is certified WITH amplification by the random-allocation PLD (``dpjax.accounting.random_allocation``,
Feldman & Shenfeld 2026; accountants ``pld`` and ``best``), else without; Chua et al.'s Monte Carlo number
(``dpjax.accounting.balls_in_bins_mc``) stays an estimate, never reported as a family's epsilon.

Public numbers: under add/remove the data set's size is not public, so ``num_bins`` (and cyclic Poisson's
``sampling_rate``) must be declared; under replace-one they may be read from each silo's size.
"""

from __future__ import annotations

from dpjax.algorithms import static_rules
from dpjax.engine.chain import Parts
from dpjax.parts import Aggregate, Averager, ClipPerUnit, GaussianNoise, MinibatchGradient, OptaxServer
from dpjax.parts.selection_bins import BINNED_SCHEMES, BinnedBatches

__all__ = ["BINNED_SAMPLINGS", "NEIGHBORINGS", "check_config", "check_unused", "selection", "binned_parts"]

BINNED_SAMPLINGS = BINNED_SCHEMES
NEIGHBORINGS = static_rules.NEIGHBORINGS
#: The binned selection's static checks (pure Python: ``dpjax sweep`` runs them before jax loads).
check_config = static_rules.binned_selection
check_unused = static_rules.binned_unused


def selection(sampling: str, batch_size: int, num_bins, sampling_rate, capacity) -> BinnedBatches:
    """The family's selection part (central DP: unit ``record``); it validates the numbers itself."""
    return BinnedBatches(scheme=sampling, batch_size=batch_size, num_bins=num_bins, sampling_rate=sampling_rate,
                         capacity=capacity, unit="record")


def binned_parts(problem, batch_size: int, select: BinnedBatches, neighboring: str, noise, server_optimizer,
                 output: str, window: int) -> Parts:
    """The round's parts (module docstring); ``noise`` None is the independent Gaussian on the aggregate."""
    noise = GaussianNoise("noise_multiplier", placement="server") if noise is None else noise
    return Parts(select, (MinibatchGradient(problem, batch_size), ClipPerUnit("clip_norm", neighboring),
                          Aggregate("mean"), noise, OptaxServer(server_optimizer), Averager(output, window)))
