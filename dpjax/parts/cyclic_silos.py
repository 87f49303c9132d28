"""Cross-device selection of clients by cyclic Poisson sampling or b-min-separation over client groups.

The participation pattern amplified BandMF needs (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu,
"(Amplified) Banded Matrix Factorization: A unified approach to private training", NeurIPS 2023, Section 4 and
Thm 4), with the users (silos) as the protected units instead of records: the N clients are split ONCE into ``p``
balanced groups (a uniform partition from the run key's ``"permutation"`` stream, the part's state ``[N]`` int32);
round t takes group ``t mod p``:

* ``"cyclic-poisson"``: each client of that group independently w.p. the public ``sampling_rate`` q (Alg. 2); the
  sampled clients are gathered into a static cohort buffer (``cohort_capacity``); a round that samples more flags
  ``overflow`` (the engine refuses the run) and the accountant charges the binomial tail of every round's overflow
  to delta;
* ``"min-separation"``: all clients of that group (Definition 2's b-min-separation, no amplification), the buffer
  the largest group.

So a client takes part at most ``ceil(R / p)`` times, any two ``p`` rounds apart. The draws reuse the record samplers
of ``dpjax.primitives.sampling_bins`` (``CyclicPoisson``, ``MinSeparation``) over the N clients as one "silo" of N
rows; the host-side event is ``dpjax.accounting.sampling_bins.BinnedSelectionEvent`` over the population of N users
(unit ``user``), which BandMF's privatizer event reads (``dpjax.accounting.band_mf.BandMfEvent``).

Public numbers: ``num_groups`` p, ``sampling_rate`` q and the divisor ``silos_per_round`` m are declared, never read
from N (under add/remove of a user N differs between neighbours).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.accounting.sampling_bins import BinnedSelectionEvent
from dpjax.engine.roles import Batch, Context
from dpjax.primitives import sampling_bins

#: The client-group selections.
CYCLIC_SCHEMES = ("cyclic-poisson", "min-separation")


@dataclasses.dataclass(frozen=True)
class CyclicSilos:
    """Clients in ``num_groups`` fixed groups, round t selecting from group ``t mod num_groups`` (module docstring).

    Args:
      silos_per_round: m, the public expected cohort (the mean's divisor downstream).
      num_groups: p, the public number of groups (the cyclic period).
      scheme: ``"cyclic-poisson"`` or ``"min-separation"``.
      sampling_rate: q, cyclic Poisson's public rate inside the round's group (required for it, refused otherwise).
      cohort_capacity: cyclic Poisson's static buffer (None: ``binomial_capacity(q ceil(N / p))``, per-round tail
        1e-15; the accountant charges the exact tail)."""

    silos_per_round: int
    num_groups: int
    scheme: str = "cyclic-poisson"
    sampling_rate: float | None = None
    cohort_capacity: int | None = None

    roles = ("selection",)

    def __post_init__(self):
        _validate.check_choice("scheme", self.scheme, CYCLIC_SCHEMES)
        _validate.check_int("silos_per_round", self.silos_per_round, min_value=1)
        _validate.check_int("num_groups", self.num_groups, min_value=1)
        if self.scheme == "cyclic-poisson":
            if self.sampling_rate is None:
                raise ValueError("sampling_rate=None: cyclic Poisson over clients needs the public rate q (a rate "
                                 "read from the number of clients would differ between add/remove neighbours)")
            _validate.check_probability("sampling_rate", self.sampling_rate, allow_zero=False)
        else:
            if self.sampling_rate is not None:
                raise ValueError(f"sampling_rate={self.sampling_rate!r}: scheme='min-separation' takes all of the "
                                 "round's group; it has no rate")
            if self.cohort_capacity is not None:
                raise ValueError(f"cohort_capacity={self.cohort_capacity!r}: min-separation cohorts are whole "
                                 "groups (their buffer never overflows); leave it None")
        if self.cohort_capacity is not None:
            _validate.check_int("cohort_capacity", self.cohort_capacity, min_value=1)

    @property
    def sampler(self):
        if self.scheme == "cyclic-poisson":
            return sampling_bins.CyclicPoisson(self.silos_per_round, self.num_groups, self.sampling_rate,
                                               self.cohort_capacity)
        return sampling_bins.MinSeparation(self.silos_per_round, self.num_groups)

    def validate(self, data) -> None:
        n = int(data.num_silos)
        if self.num_groups > n:
            raise ValueError(f"num_groups={self.num_groups} must be <= num_silos={n} (every group needs a client)")
        if self.scheme == "cyclic-poisson" and self.silos_per_round * self.num_groups > n:
            raise ValueError(f"silos_per_round={self.silos_per_round} x num_groups={self.num_groups} must be <= "
                             f"num_silos={n} (the expected cohort m is at most a group)")

    def init(self, params, ctx: Context):
        """Every client's group, int32 ``[N]``, from the run key's ``"permutation"`` stream."""
        n = ctx.data.num_silos
        return self.sampler.init_silo(keys.run_stream_key(ctx.key, "permutation"), n, n)

    def update(self, data, groups, ctx: Context) -> tuple[Batch, Any]:
        n = data.num_silos
        # the coins from the round key's "availability" stream (the stream SampledSilos draws its cohort from)
        silo_ids, available, overflow = self.sampler.draw(keys.stream_key(ctx.key, "availability"), n, n,
                                                          ctx.round, groups)
        return Batch(silo_ids, available, None, data.silo_masks(silo_ids),
                     jnp.broadcast_to(overflow, available.shape), n), groups

    def event(self, silo_sizes) -> BinnedSelectionEvent:
        """The protected data set is the N clients (users), one "silo" of N rows for the binned accountant."""
        n = len(silo_sizes)
        cyclic = self.scheme == "cyclic-poisson"
        return BinnedSelectionEvent(self.scheme, (n,), self.silos_per_round, (self.num_groups,), "user",
                                    rates=(self.sampling_rate,) if cyclic else None,
                                    capacity=self.sampler.padded_size(n) if cyclic else None,
                                    group_sizes=(-(-n // self.num_groups),) if cyclic else None)
