"""DP-FedAvg with banded matrix-factorization noise, cross-device: the clients' participation pattern is the separation
(Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023, Alg. 1 with the cyclic Poisson sampling of Sec. 4 / Alg. 2 over client
groups, amplified by Thm 4; user-level DP, the silo being the user, as DP-FedAvg's McMahan, Ramage, Talwar & Zhang,
"Learning Differentially Private Recurrent Language Models", ICLR 2018).

Round t:

1. ``CyclicSilos`` (``dpjax.parts.cyclic_silos``): the N clients split once into ``num_groups`` p groups (default: the
   strategy's bands b; ``p < b`` is refused); ``"cyclic-poisson"`` samples each client of group ``t mod p`` with the
   public ``sampling_rate`` q into a static cohort buffer, ``"min-separation"`` takes the whole group;
2. every sampled client runs DP-FedAvg's local SGD (``dpjax.parts.cross_device.LocalDeltas``) and sends its model delta;
3. FIXED clipping of every delta to ``clip_norm`` C (``ClipPerUnit``, one unit per client), the sum over the PUBLIC
   expected cohort m (``PublicMean``): sensitivity ``C / m`` under add/remove of a user;
4. ``BandMfNoise`` (``dpjax.parts.band_mf``) adds ``z x (C / m) x (C_s^{-1} w)_t`` from its ``(b - 1) x d`` buffer,
   ``C_s`` the banded Toeplitz strategy: ``band_coeffs`` or ``optimize_banded_toeplitz(R, b)`` (cached);
5. the server's optax transformation (``SERVER_OPTIMIZERS`` of ``dpjax.algorithms.dp_fedavg``) at step
   ``learning_rate``.

Privacy: nothing here re-derives an event. The privatizer's ``BandMfEvent`` reads the selection's
``BinnedSelectionEvent`` over the population of N users: cyclic Poisson gives the amplified guarantee (``ceil(R / p)``
Poisson-subsampled Gaussians of multiplier z at rate q, ``dpjax.accounting.band_mf.amplified_event``, add/remove), with
the cohort buffer's overflow tail charged to delta; min-separation the multi-epoch one (one Gaussian of multiplier
``z / sqrt(ceil(R / p))``).

Adaptive clipping is refused (``clipping="adaptive"``): Andrew et al.'s (NeurIPS 2021) noisy count is a second release
on every round's cohort; with independent noise both are one Gaussian per round (their Thm 1), but here the deltas'
noise is correlated across rounds and the amplified analysis (Thm 4) covers one banded mechanism, not a per-round count
interleaved with it and moving the clip, i.e. the sensitivity, of later rounds. That composition needs its own proof;
until then the clip is a fixed public number.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from dpjax import _validate
from dpjax.algorithms import band_mf_sgd, static_rules
from dpjax.algorithms.dp_fedavg import SERVER_OPTIMIZERS, check_local_training
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.parts import Averager, ClipPerUnit, OptaxServer
from dpjax.parts.band_mf import BandMfNoise
from dpjax.parts.cross_device import LocalDeltas, PublicMean
from dpjax.parts.cyclic_silos import CYCLIC_SCHEMES, CyclicSilos

__all__ = ["DpFedAvgBandMf", "BandMfFedAvgHParams", "SAMPLINGS"]

#: The client selections BandMF is accounted for here (module docstring).
SAMPLINGS = CYCLIC_SCHEMES


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BandMfFedAvgHParams(HParams):
    """Per-run values: server / client step sizes, the BandMF noise multiplier z and the fixed clip C."""

    learning_rate: Any = hparam(1.0)
    client_learning_rate: Any = hparam(0.1)
    noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
    clip_norm: Any = hparam(1.0, allow_inf=True)


@dataclasses.dataclass(frozen=True)
class DpFedAvgBandMf(ChainFamily):
    """DP-FedAvg with BandMF noise under cyclic Poisson (or min-separation) participation of client groups.

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      silos_per_round: m, the public expected cohort and the mean's divisor.
      sampling_rate: q, a client's public inclusion probability in its group's rounds (``"cyclic-poisson"``).
      bands: b, the strategy's bands (None: 1, independent noise).
      band_coeffs: a given strategy ``(c_0, ..., c_{b-1})`` instead of the optimised one.
      num_groups: p, the public number of client groups, the cyclic period (None: b); ``p >= b``.
      sampling: ``"cyclic-poisson"`` (amplified, add/remove) or ``"min-separation"`` (whole groups, multi-epoch).
      local_steps: each client's local SGD steps (DP-FedAvg's, ``dpjax.parts.cross_device.LocalDeltas``).
      local_batch_size: records per local step (None: all the client's records).
      local_epochs: E passes over the client's shuffled records instead of ``local_steps`` (leave that at 1).
      client_batch: None: the cohort's local training vmapped; k: k clients at a time.
      server_optimizer: a key of ``dpjax.algorithms.dp_fedavg.SERVER_OPTIMIZERS``.
      server_momentum: beta of the server's SGD, or Adam's / Yogi's b1.
      cohort_capacity: cyclic Poisson's cohort buffer (None: the binomial tail bound, 1e-15 a round).
      neighboring: ``"add-remove"`` (cyclic Poisson needs it) or ``"replace-one"`` (min-separation only).
      clipping: ``"fixed"``; ``"adaptive"`` is refused (module docstring)."""

    problem: Any
    num_rounds: int
    silos_per_round: int
    sampling_rate: float | None = None
    bands: int | None = None
    band_coeffs: tuple | None = None
    num_groups: int | None = None
    sampling: str = "cyclic-poisson"
    local_steps: int = 1
    local_batch_size: int | None = None
    local_epochs: int | None = None
    client_batch: int | None = None
    server_optimizer: str = "sgd"
    server_momentum: float | None = None
    cohort_capacity: int | None = None
    neighboring: str = "add-remove"
    clipping: str = "fixed"
    private: bool = True

    hparams_type = BandMfFedAvgHParams
    noise_fields = ("noise_multiplier",)
    # its parts read the data through silo_masks / silo_records: a PooledSiloData population runs as it is
    supports_pooled_data = True

    def __post_init__(self):
        if self.clipping != "fixed":
            raise ValueError(f"clipping={self.clipping!r}: only 'fixed' with BandMF noise; adaptive clipping's noisy "
                             "count is a second per-round release whose composition with the correlated noise (and "
                             "its effect on later rounds' sensitivity) the amplified BandMF analysis does not cover")
        _validate.check_choice("sampling", self.sampling, SAMPLINGS)
        _validate.check_choice("server_optimizer", self.server_optimizer, tuple(SERVER_OPTIMIZERS))
        _validate.check_int("silos_per_round", self.silos_per_round, min_value=1)
        if self.band_coeffs is not None:  # checked before its length is read: band_coeffs=0 has none
            object.__setattr__(self, "band_coeffs", static_rules.check_band_coeffs(self.band_coeffs))
        b = len(self.band_coeffs) if self.band_coeffs is not None else (self.bands or 1)
        if self.num_groups is not None and _validate.check_int("num_groups", self.num_groups, min_value=1) < b:
            raise ValueError(f"bands={b} must be <= num_groups={self.num_groups}, the cyclic period (a client's "
                             "participations are num_groups rounds apart; BandMF's accounting needs them >= bands "
                             "apart)")
        coeffs, period = band_mf_sgd.check_config(self.num_rounds, self.sampling, self.neighboring, "shuffled-once",
                                                  self.bands, self.band_coeffs, num_bins=self.num_groups,
                                                  sampling_rate=self.sampling_rate)
        object.__setattr__(self, "band_coeffs", coeffs)
        object.__setattr__(self, "num_groups", period)
        check_local_training(self)
        self.selection_part  # noqa: B018  (validates the rate, the capacity)
        self.check_common()

    @property
    def selection_part(self) -> CyclicSilos:
        return CyclicSilos(self.silos_per_round, self.num_groups, self.sampling, self.sampling_rate,
                           self.cohort_capacity)

    def validate(self, data) -> None:
        self.selection_part.validate(data)
        if self.local_batch_size is not None:
            _validate.check_le("local_batch_size", self.local_batch_size, "the smallest silo size", data.min_size)

    def parts(self, shape: DataShape) -> Parts:
        noise = BandMfNoise(band_mf_sgd.strategy_coeffs(self.num_rounds, self.bands, self.band_coeffs))
        server = OptaxServer(SERVER_OPTIMIZERS[self.server_optimizer](self.server_momentum))
        return Parts(self.selection_part,
                     (LocalDeltas(self.problem, self.local_steps, self.local_batch_size, local_epochs=self.local_epochs,
                                  client_batch=self.client_batch),
                      ClipPerUnit("clip_norm", self.neighboring), PublicMean(self.silos_per_round), noise, server,
                      Averager("last")))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dp-fedavg-band-mf", DpFedAvgBandMf,
                "DP-FedAvg with BandMF noise, cyclic Poisson client groups (amplified, NeurIPS 2023), user-level DP")
