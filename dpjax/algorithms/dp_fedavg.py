"""DP-FedAvg with adaptive clipping (Andrew, Thakkar, McMahan & Ramaswamy, "Differentially Private
Learning with Adaptive Clipping", NeurIPS 2021, Algorithm 1): user-level DP, the silo being the user.

Each round t:

1. the round's silos are sampled -- each of the N silos with the declared public probability q (``"poisson"``,
   add/remove: ``sampling_rate``, m/N for a public N; the number of users is not public under add/remove, so q is
   declared, never read from the data) or a uniform m-subset (``"without-replacement"``, replace-one);
2. every sampled silo runs ``local_steps`` non-private SGD steps from the server model
   (``client_learning_rate``; a uniform ``local_batch_size``-subset of its records per step, or all
   of them; or ``local_epochs`` passes over its shuffled records) and sends its model delta as the pseudo-gradient ``Delta_i = theta_t - theta_i``;
3. the adaptive clipping mechanism (``dpjax.parts.adaptive_clipping.AdaptiveClipMean``, which states the count
   release and the clip update ``C_{t+1} = C_t exp(-eta_C (b~ - gamma))``) clips every delta to C_t, releases the noisy
   centred count (``noise_multiplier_count`` z_b; the paper's sigma_b = z_b / 2 under add/remove) and adds
   ``N(0, (z_Delta C_t / m)^2)`` to the clipped deltas' sum over the public m (``noise_multiplier`` z_Delta);
4. the server applies it with the server optimizer (``server_optimizer``: optax SGD by default, ``learning_rate``
   eta_s, ``server_momentum`` beta; ``"adam"`` is DP-FedAdam, Reddi et al. 2021's FedAdam with this mechanism).

Privacy (Andrew et al. 2021, Theorem 1): each round is one Gaussian mechanism of multiplier
``z = (z_Delta^-2 + z_b^-2)^-1/2`` (the paper's ``z_Delta = (z^-2 - (2 sigma_b)^-2)^-1/2``; see ``adaptive_clipping``);
the run is R of them subsampled at the silo rate, unit "user". Calibration sets z_Delta with z_b fixed (Algorithm 1
derives z_Delta from z and sigma_b). ``private=False`` is FedAvg with a server optimizer (FedOpt): no clip, no noise.

Data: a ``SiloData`` or, at cross-device scale, a ``PooledSiloData`` (the clients as index rows into one shared
record pool; a Poisson round then gathers only its cohort's records: per-round time and memory set by the cohort,
not the population; ``experiments/benchmarks/bench_cross_device_scale.py``). No part keeps per-client state.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

from dpjax import _validate
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.parts import Averager, OptaxServer
from dpjax.parts.adaptive_clipping import AdaptiveClipMean, JointGaussianEvent, JointGaussianPrivacy
from dpjax.parts.cross_device import INPUT_LAYER_UPDATES, SILO_SAMPLINGS, LocalDeltas, SampledSilos

__all__ = ["DpFedAvg", "FedAvgHParams", "JointGaussianEvent", "JointGaussianPrivacy", "SERVER_OPTIMIZERS"]

#: The server optimizers a DP-FedAvg declaration names (static, sweepable): optax transformations at unit
#: step, the step size ``learning_rate`` applied by ``OptaxServer`` (FedOpt, Reddi et al., "Adaptive Federated
#: Optimization", ICLR 2021; their adaptive servers' b2 = 0.99 and eps = 1e-3).
SERVER_OPTIMIZERS = {
    "sgd": lambda momentum: optax.identity() if momentum is None else optax.trace(momentum),
    "adam": lambda momentum: optax.scale_by_adam(b1=0.9 if momentum is None else momentum, b2=0.99, eps=1e-3),
    "yogi": lambda momentum: optax.scale_by_yogi(b1=0.9 if momentum is None else momentum, b2=0.99, eps=1e-3),
    "adagrad": lambda momentum: optax.scale_by_rss(initial_accumulator_value=0.0, eps=1e-3),
}


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FedAvgHParams(HParams):
    """Per-run values: server / client step sizes, the delta's and the count's noise multipliers, the
    initial clip C_0, the target quantile gamma and the clip's learning rate eta_C."""

    learning_rate: Any = hparam(1.0)
    client_learning_rate: Any = hparam(0.1)
    noise_multiplier: Any = hparam(0.0, _validate.check_nonnegative)
    noise_multiplier_count: Any = hparam(0.0, _validate.check_nonnegative)
    clip_norm: Any = hparam(1.0, allow_inf=True)
    target_quantile: Any = hparam(0.5, _validate.check_probability)
    clip_learning_rate: Any = hparam(0.2, _validate.check_nonnegative)


def check_local_training(family) -> None:
    """The local-training and server fields DP-FedAvg and its BandMF variant share (``local_batch_size``,
    ``local_epochs`` instead of ``local_steps``, ``client_batch``, ``server_momentum``)."""
    if family.local_batch_size is not None:
        _validate.check_int("local_batch_size", family.local_batch_size, min_value=1)
    if family.local_epochs is not None:
        _validate.check_int("local_epochs", family.local_epochs, min_value=1)
        if family.local_batch_size is None or family.local_steps != 1:
            raise ValueError(f"local_epochs={family.local_epochs} replaces local_steps (leave it at 1, got "
                             f"{family.local_steps}) and needs a local_batch_size (got {family.local_batch_size})")
    if family.client_batch is not None:
        _validate.check_int("client_batch", family.client_batch, min_value=1)
    if family.server_momentum is not None:
        _validate.check_probability("server_momentum", family.server_momentum)


def keep_record_grams(num_rounds: int, silos_per_round: int, num_silos: int) -> bool:
    """Whether the low-rank client keeps every silo's record Gram as state (``LocalDeltas.keep_grams``): only when the
    run visits about every silo, ``R m >= N``. The Grams cost the same per silo either way (``n_max^2 d`` multiply-adds),
    so N once at the start against ~R m over the rounds (the MNIST benchmark's 5 rounds of 100 of 1,000 clients: 1,000
    Grams up front, ~5.6 GFLOP, more than its 5 rounds' training)."""
    return num_rounds * silos_per_round >= num_silos


@dataclasses.dataclass(frozen=True)
class DpFedAvg(ChainFamily):
    """DP-FedAvg with adaptive clipping and (``private=False``) FedOpt, its non-private twin.

    Args:
      problem: a dpjax problem; num_rounds: R.
      silos_per_round: m, the (expected, for Poisson) number of sampled silos.
      sampling: ``"poisson"`` (add/remove) or ``"without-replacement"`` (replace-one).
      local_steps: each silo's local SGD steps, each on an independent uniform ``local_batch_size``-subset.
      local_batch_size: records per local step (None: all the silo's records per step).
      local_epochs: instead of ``local_steps`` (leave it at 1): E passes over each silo's shuffled records in
        batches of ``local_batch_size`` (FedAvg's local epochs, every record once an epoch).
      cohort_capacity: Poisson: how many sampled silos a round's static buffer holds (None: the expected m plus
        6 sqrt(m) + 8, rounded up to a multiple of ``client_batch``; a round sampling more is refused, never
        truncated).
      client_batch: None (default): the cohort's local training vmapped; k: k silos at a time (``lax.map``;
        ``client_batch=1`` is faster for convolutional models on CPU, ``parts.cross_device.LocalDeltas``).
      input_layer: ``"materialized"``, ``"low-rank"`` or ``"auto"``: how local steps update a Dense first layer
        (``"low-rank"``: no per-silo kernel copies, ``dpjax.engine.input_dense``; the same deltas up to rounding, and the
        clipper takes the kernels' norms from the records' Gram and their clipped sum as one matmul).
      server_momentum: beta of the server's optax SGD (None: plain SGD), or Adam's / Yogi's b1.
      server_optimizer: a key of ``SERVER_OPTIMIZERS`` (``"sgd"``, ``"adam"``: DP-FedAdam, ...).
      neighboring: of one silo's data; None: ``"add-remove"`` for Poisson, ``"replace-one"`` for a fixed m.
      sampling_rate: q, each silo's public inclusion probability (``"poisson"``; required under
        add/remove); the accountant reads the same q, ``silos_per_round`` m stays the public divisor."""

    problem: Any
    num_rounds: int
    silos_per_round: int
    sampling: str = "poisson"
    local_steps: int = 1
    local_batch_size: int | None = None
    server_momentum: float | None = None
    neighboring: str | None = None
    private: bool = True
    sampling_rate: float | None = None
    server_optimizer: str = "sgd"
    local_epochs: int | None = None
    cohort_capacity: int | None = None
    client_batch: int | None = None
    input_layer: str = "materialized"

    hparams_type = FedAvgHParams
    noise_fields = ("noise_multiplier", "noise_multiplier_count")
    # its parts read the data through silo_masks / silo_records: a PooledSiloData population runs as it is
    supports_pooled_data = True

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, SILO_SAMPLINGS)
        _validate.check_choice("server_optimizer", self.server_optimizer, tuple(SERVER_OPTIMIZERS))
        _validate.check_choice("input_layer", self.input_layer, INPUT_LAYER_UPDATES)
        if self.neighboring is None:
            object.__setattr__(self, "neighboring", "add-remove" if self.sampling == "poisson" else "replace-one")
        _validate.check_int("silos_per_round", self.silos_per_round, min_value=1)
        check_local_training(self)
        self.check_common()

    def validate(self, data) -> None:
        _validate.check_le("silos_per_round", self.silos_per_round, "num_silos", data.num_silos)
        if self.local_batch_size is not None:
            _validate.check_le("local_batch_size", self.local_batch_size, "the smallest silo size", data.min_size)

    def parts(self, shape: DataShape) -> Parts:
        server = OptaxServer(SERVER_OPTIMIZERS[self.server_optimizer](self.server_momentum))
        return Parts(SampledSilos(self.silos_per_round, self.sampling, self.sampling_rate, self.cohort_capacity,
                                  capacity_multiple=self.client_batch or 1),
                     (LocalDeltas(self.problem, self.local_steps, self.local_batch_size, local_epochs=self.local_epochs,
                                  client_batch=self.client_batch, input_layer=self.input_layer,
                                  keep_grams=keep_record_grams(self.num_rounds, self.silos_per_round, shape.num_silos)),
                      AdaptiveClipMean(self.silos_per_round, self.neighboring), server, Averager("last")))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

# The epsilon axis calibrates z_Delta; the count's z_b stays the grid's value (Algorithm 1's parametrisation).
register_family("dp-fedavg", DpFedAvg,  # "fedopt" is renamed (registry.RETIRED)
                "DP-FedAvg with adaptive quantile clipping (Andrew et al.), user-level DP",
                twin={"fedavg-server-opt": "non-private FedAvg with dp-fedavg's server optimizer (FedOpt), the twin "
                                           "of dp-fedavg"},
                noise_fields=("noise_multiplier",))
register_family("dp-fedadam", DpFedAvg, "DP-FedAdam: DP-FedAvg's adaptive clipping with an Adam server (FedAdam)",
                fixed={"server_optimizer": "adam"}, twin={"fedadam": "non-private FedAdam, the twin of dp-fedadam"},
                noise_fields=("noise_multiplier",))
