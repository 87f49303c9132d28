"""Central DP-SGD (Abadi et al. 2016, Algorithm 1) with any optax optimizer: a configuration of DP-SGD-General
(``dpjax.algorithms.dpsgd_general``), not a trainer of its own.

Each step every silo samples a batch (Poisson: every record w.p. the declared public ``sampling_rate`` q, e.g. ``K/n``
for a public n -- under add/remove the data's size is not public, so q is required and is the rate the accountant reads;
or a fixed ``K``-subset without replacement), clips every record's gradient to ``C`` (DP-SGD-General with ``s = 1``,
``m = K``: individual clipping), the server takes the mean of the silos' clipped sums divided by the public ``K`` (the
sum over the pooled records divided by the expected pooled batch ``K x silos``), adds Gaussian noise ONCE to it
(``placement="server"``) with std ``noise_multiplier x`` its sensitivity (``C / (K x silos)`` under add/remove, twice
that under replace-one) and hands it to the server optimizer (``optax.adam`` by default, its learning rate a traced
per-run value).

Privacy (record level, central DP): the DP plan of those parts. Poisson: ``R`` subsampled Gaussian releases at the
declared rate q (every silo's records are drawn with it), a ``GaussianPrivacy`` (add-remove).
Without replacement: DP-SGD-General's accountants for subsampled individual clipping (first the exact strong-adversary
one, ``"standard"`` the amplification-by-subsampling RDP bound), at every silo's size, the worst. ``private=False`` is
the non-private twin (noise 0, no clip).

``noise="band-mf"`` (with ``sampling="one-pass"``, replace-one) replaces the independent noise by banded
matrix-factorization noise (Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023, Alg. 1):
records in a fixed order, cycled, and ``C^{-1}``-correlated noise of ``bands`` bands (``dpjax.algorithms.band_mf_sgd``);
its guarantee is the multi-epoch BandMF event (``dpjax.accounting.band_mf``, no amplification).

``sampling="balls-in-bins"``, ``"cyclic-poisson"`` or ``"min-separation"`` (``num_bins`` B or b, cyclic Poisson's
``sampling_rate`` q, the static buffer's ``capacity``) selects with ``dpjax.parts.selection_bins.BinnedBatches``
(``dpjax.algorithms.binned_sgd``); the privacy report is the selection event's certified accountant
(``dpjax.accounting.sampling_bins``, what ``dpjax account --sampling ...`` prints for the same schedule), and with
``noise="band-mf"`` and cyclic Poisson the amplified BandMF guarantee (Choquette-Choo et al., NeurIPS 2023, Thm 4).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from dpjax import _validate
from dpjax.algorithms import band_mf_sgd, binned_sgd, static_rules
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.contract import OutputRule
from dpjax.engine.silos import SiloData

__all__ = ["DpSgd", "DpSgdHParams", "OPTIMIZERS"]

#: The server optimizers by name, at unit step size (DP-SGD-General's ``server_optimizer``; the
#: step ``-eta`` is applied after them): ``optax.adam(eta)`` = ``scale_by_adam`` then ``-eta``, etc.
OPTIMIZERS = {
    "adam": optax.scale_by_adam(),
    "sgd": optax.identity(),
    "adamw": optax.chain(optax.scale_by_adam(), optax.add_decayed_weights(1e-4)),  # optax.adamw's defaults
    "rmsprop": optax.scale_by_rms(decay=0.9, eps=1e-8),  # optax.rmsprop's defaults
}
_SAMPLING = static_rules.DP_SGD_SAMPLINGS
NOISES = static_rules.NOISES


@dataclasses.dataclass(frozen=True)
class DpSgd(OutputRule, ChainFamily):
    """Central DP-SGD with an optax server optimizer (``general()`` is the DP-SGD-General it runs).

    Args:
      problem: a dpjax problem (e.g. ``dpjax.problems.FlaxProblem``).
      num_rounds: R optimizer steps.
      batch_size: K, expected records per silo per step.
      sampling: ``"poisson"`` (default; add-remove) or ``"without-replacement"`` (fixed batches; replace-one);
        ``"balls-in-bins"``, ``"cyclic-poisson"``, ``"min-separation"`` (``dpjax.algorithms.binned_sgd``; either
        relation); ``"one-pass"`` (fixed order, blocks cycled; replace-one) with ``noise="band-mf"``, which also takes
        ``"cyclic-poisson"`` (add-remove: amplified) and ``"min-separation"``.
      optimizer: a key of ``OPTIMIZERS`` (``"adam"`` default).
      private: clip and add noise (True) or the non-private twin.
      neighboring: ``"add-remove"`` (default; Poisson) or ``"replace-one"`` (without replacement).
      output: the released iterate (``OutputRule``).
      window: the averaging window of ``output="average"`` (``OutputRule``).
      sampling_rate: q, each record's public inclusion probability (``"poisson"``; required under
        add/remove). ``batch_size`` K stays the public divisor (expected batch per silo), so
        ``K = q n`` for the public silo size n gives the unbiased mean.
      noise: ``"gaussian"`` (independent, default) or ``"band-mf"`` (BandMF correlated noise).
      bands: ``"band-mf"``: the strategy's bands b (default 1), optimised for the run's prefix sums; must be <= the
        rounds between a record's participations, ``n_min // batch_size``.
      band_coeffs: ``"band-mf"``: a given strategy ``(c_0, ..., c_{b-1})`` instead of the optimised one.
      order: ``"band-mf"``: ``"shuffled-once"`` (a permutation drawn once per run) or ``"given"`` (stored order).
      num_bins: the binned samplings' period: B bins an epoch (balls-in-bins) or b groups (cyclic Poisson,
        min-separation); required under add/remove (None: ``n // K`` of each silo, replace-one only; cyclic
        Poisson: 1). With ``noise="band-mf"`` it defaults to ``bands`` and must be ``>= bands``.
      capacity: balls-in-bins / cyclic Poisson: the static batch buffer (None: the sampler's default; its overflow
        probability is charged to delta).
      poisson_selection: ``"poisson"``: ``"truncated"`` (default; truncated Poisson on a large data set, the
        truncation charged to delta) or ``"buffered"`` (the former buffer that refuses an overflowing run), as in
        ``DpSgdGeneral``."""

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "poisson"
    optimizer: str = "adam"
    private: bool = True
    neighboring: str = "add-remove"
    sampling_rate: float | None = None
    noise: str = "gaussian"
    bands: int | None = None
    band_coeffs: tuple | None = None
    order: str = "shuffled-once"
    num_bins: int | None = None
    capacity: int | None = None
    poisson_selection: str = "truncated"

    hparams_type = DpSgdHParams

    def __post_init__(self):
        _validate.check_choice("optimizer", self.optimizer, tuple(OPTIMIZERS))
        # the jax-free rule (noise, sampling, BandMF's fields, a binned selection's numbers) that `dpjax sweep`
        # also checks before jax loads: one definition (static_rules.dp_sgd)
        for k, v in static_rules.check("DpSgd", vars(self)).items():
            object.__setattr__(self, k, v)
        if self.poisson_selection != "truncated" and (self.sampling != "poisson" or self.noise != "gaussian"):
            raise ValueError(f"poisson_selection={self.poisson_selection!r} is how a Poisson batch is held; "
                             f"sampling={self.sampling!r}, noise={self.noise!r} does not use it (leave it 'truncated')")
        if self.noise == "band-mf":
            self.check_common()
            self.selection  # noqa: B018  (validates the binned selection's numbers)
            return
        self.check_common()
        if self.binned:
            self.selection  # noqa: B018
            return
        self.general()  # the configuration is valid DP-SGD-General

    @property
    def binned(self) -> bool:
        """A balls-in-bins / cyclic-Poisson / min-separation selection (``dpjax.algorithms.binned_sgd``)."""
        return self.sampling in binned_sgd.BINNED_SAMPLINGS

    @property
    def selection(self):
        """The binned selection part (None for the other samplings)."""
        if not self.binned:
            return None
        return binned_sgd.selection(self.sampling, self.batch_size, self.num_bins, self.sampling_rate,
                                    self.capacity)

    def general(self) -> DpSgdGeneral:
        """This run as DP-SGD-General: ``s = 1``, ``m = K`` (individual clipping), noise on the server."""
        return DpSgdGeneral(self.problem, self.num_rounds, subset_size=1, num_subsets=self.batch_size,
                            rounds_per_epoch=1, sampling=_SAMPLING[self.sampling],
                            server_optimizer=OPTIMIZERS[self.optimizer], private=self.private,
                            neighboring=self.neighboring, placement="server", output=self.output, window=self.window,
                            sampling_rate=self.sampling_rate, poisson_selection=self.poisson_selection)

    def validate(self, data: SiloData) -> None:
        if self.binned:
            self.selection.validate(data)
            return
        if self.noise == "band-mf":
            band_mf_sgd.validate_data(self.batch_size, self.bands, self.band_coeffs, data)
            return
        self.general().validate(data)

    def parts(self, shape: DataShape) -> Parts:
        if self.noise == "band-mf":
            return band_mf_sgd.band_mf_parts(self.problem, self.num_rounds, self.batch_size, self.order, self.bands,
                                             self.band_coeffs, OPTIMIZERS[self.optimizer], self.output, self.window,
                                             self.selection, self.neighboring)
        if self.binned:
            return binned_sgd.binned_parts(self.problem, self.batch_size, self.selection, self.neighboring, None,
                                           OPTIMIZERS[self.optimizer], self.output, self.window)
        return self.general().parts(shape)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dp-sgd", DpSgd,
                "central DP-SGD (Abadi et al.) with any optax optimizer, Poisson or fixed-size batches",
                twin={"sgd": "non-private SGD with the same optimizer, the twin of dp-sgd"})
