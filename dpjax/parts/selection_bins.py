"""Batch selection parts beyond Poisson: balls-in-bins, cyclic Poisson, b-min-separation.

``BinnedBatches`` is ``SiloBatches`` (``dpjax.parts.selection``: same signature, same key streams, the same ``Batch``;
gather or dense path) with a sampler of ``dpjax.primitives.sampling_bins``, and its host-side event is
``dpjax.accounting.sampling_bins.BinnedSelectionEvent``, which carries its own certified accountant (and charges the
static buffer's overflow probability to delta). References: Chua et al., "Balls-and-Bins Sampling for DP-SGD", AISTATS
2025; Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023 (cyclic Poisson, b-min-separation).
"""

from __future__ import annotations

import dataclasses

from dpjax.accounting.sampling_bins import BinnedSelectionEvent
from dpjax.parts.selection import SiloBatches
from dpjax.primitives import sampling_bins

#: The schemes, by their accounting names.
BINNED_SCHEMES = ("balls-in-bins", "cyclic-poisson", "min-separation")


@dataclasses.dataclass(frozen=True)
class BinnedBatches(SiloBatches):
    """Availability x a balls-in-bins / cyclic-Poisson / min-separation record sampler.

    Beyond ``SiloBatches``' ``availability``, ``dense``, ``all_silos`` and ``unit``, its fields:

    Args:
      scheme: ``"balls-in-bins"``, ``"cyclic-poisson"`` or ``"min-separation"``.
      batch_size: K, the public (expected) batch, the minibatch divisor.
      num_bins: B (bins per epoch) or b (groups); None: balls-in-bins / min-separation read ``max(1, n // K)`` from
        each silo's size (replace-one only), cyclic Poisson takes b = 1 (Poisson).
      sampling_rate: cyclic Poisson's public q; None: ``K b / n`` (replace-one only).
      capacity: the static buffer of balls-in-bins / cyclic Poisson (None: the sampler's default; ``n_max``: never
        overflows); the accountant charges its overflow probability.

    The round's draws: ``"sampling"`` stream (cyclic Poisson's coins); per-silo state from the run key's
    ``"permutation"`` stream (balls-in-bins' epoch key, the groups' partition)."""

    scheme: str = "balls-in-bins"
    num_bins: int | None = None
    capacity: int | None = None

    def __post_init__(self):
        if self.scheme not in BINNED_SCHEMES:
            raise ValueError(f"scheme={self.scheme!r} must be one of {BINNED_SCHEMES}")
        if self.batch_size is None:
            raise ValueError(f"batch_size=None: scheme={self.scheme!r} needs the public (expected) batch size K")
        if self.batch_sizes is not None:
            raise ValueError(f"batch_sizes={self.batch_sizes!r}: per-silo batch sizes are not supported here")
        if self.sampling_rate is not None and self.scheme != "cyclic-poisson":
            raise ValueError(f"sampling_rate={self.sampling_rate!r} is cyclic Poisson's rate; scheme="
                             f"{self.scheme!r} takes none")
        if self.capacity is not None and self.scheme == "min-separation":
            raise ValueError(f"capacity={self.capacity!r}: min-separation batches are whole groups (their buffer "
                             "never overflows); leave it None")
        self.sampler  # noqa: B018  (validates the numbers)

    @property
    def sampler(self):
        k = self.batch_size
        if self.scheme == "balls-in-bins":
            return sampling_bins.BallsInBins(k, self.num_bins, self.capacity)
        if self.scheme == "cyclic-poisson":
            return sampling_bins.CyclicPoisson(k, self.num_bins or 1, self.sampling_rate, self.capacity)
        return sampling_bins.MinSeparation(k, self.num_bins)

    def validate(self, data) -> None:
        super().validate(data)
        self.sampler.validate(int(data.min_size), 1)

    def _periods(self, sizes) -> tuple[int, ...]:
        if self.num_bins is not None:
            return (self.num_bins,) * len(sizes)
        if self.scheme == "cyclic-poisson":
            return (1,) * len(sizes)
        return tuple(max(1, n // self.batch_size) for n in sizes)

    def event(self, silo_sizes) -> BinnedSelectionEvent:
        sizes = tuple(int(n) for n in silo_sizes)
        periods = self._periods(sizes)
        rates = groups = capacity = None
        if self.scheme == "cyclic-poisson":
            # the sampler's q: declared, else K b / n (capped at 1)
            rates = tuple(self.sampling_rate or min(1.0, self.batch_size * b / n) for n, b in zip(sizes, periods))
            groups = tuple(-(-n // b) for n, b in zip(sizes, periods))
        if self.scheme != "min-separation":
            # the buffer at the largest silo: <= the run's (n_max >= every size), so the charged tail is >= the true
            capacity = self.sampler.padded_size(max(sizes))
        derived = (self.num_bins is None and self.scheme != "cyclic-poisson") or (
            self.scheme == "cyclic-poisson" and self.sampling_rate is None)
        return BinnedSelectionEvent(self.scheme, sizes, self.batch_size, periods, self.unit, rates=rates,
                                    capacity=capacity, group_sizes=groups, size_derived=derived)
