"""Shuffle-DP algorithms of Lowy & Razaviyayn (ICLR 2023, Section 5):

* ``ShuffledNoisyMbSgd`` -- **A4**, Shuffled Noisy MB-SGD (Theorem 5.1/G.1;
  spec §2.6). Each round exactly M silos are available; each samples K
  records (K = 1 in the paper's proof), releases its clipped minibatch mean
  plus ``N(0, sigma^2 I)``; a shuffler permutes the M reports and the server
  averages them. The server's update is a function of the multiset of reports
  (``federated.shuffled_aggregate``: bitwise invariant to the permutation), so
  shuffling changes privacy, not utility: the trajectory is that of Noisy
  MB-SGD with K records and ``FixedAvailability(M)`` up to float summation
  order.
* ``SdpOnePassAccelerated`` -- **A5**, SDP One-Pass Accelerated Noisy MB-SGD
  (Algorithm 6, Theorem 5.2/G.2; spec §2.7). The AC-SA round of
  ``accelerated.py`` where every available silo takes its next disjoint block
  of K records and runs the P_vec local randomizer on each of its K clipped
  gradients; the server runs the P_vec analyzer on the ``M_r K`` shuffled
  vectors and divides by the public ``M_r K``. P_vec is simulated at the count
  level (exact in distribution; ``dpjax.primitives.shuffle_protocols``).

Privacy.

* A4: before shuffling, each silo's transcript is ISRL-DP (record level,
  replace-one): R subsampled Gaussians with sensitivity ``2C/K``;
  ``privacy_schedule`` hands exactly this local guarantee to the accountant.
  The *shuffle-DP* amplification (the Feldman-McMillan-Talwar chain of spec
  §3.6) is not implemented in ``dpjax.accounting`` at the time of writing, so
  no SDP epsilon is reported here.
* A5: each round's P_vec invocation is ``(eps, delta)``-shuffle-DP in its
  ``M_r K`` inputs (Theorem 3.2 of Cheu et al.) provided ``(g, b, p)`` come
  from the P_vec calculator (shuffle spec §2.3; an accounting-layer piece not
  yet in ``dpjax.accounting``); one pass over disjoint blocks makes the run
  ``(eps, delta)``-SDP by parallel composition. No GaussianSchedule
  describes it, so A5 has no ``privacy_schedule``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from dpjax import _validate, keys
from dpjax.accounting.events import GaussianSchedule
from dpjax.algorithms.accelerated import AcceleratedState, AcsaSchedule, acsa_round, non_private_hparams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, silo_transcript_schedule
from dpjax.engine import federated
from dpjax.engine.averaging import IterateAverager
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, shuffle_protocols
from dpjax.primitives import sampling as sampling_lib
from dpjax.primitives.projection import project_l2_ball

PyTree = Any


# ---------------------------------------------------------------------------
# A4: Shuffled Noisy MB-SGD
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ShuffledState:
    params: PyTree
    round: jax.Array
    averaged: PyTree
    sampler_states: Any
    hparams: MbSgdHParams


@dataclasses.dataclass(frozen=True)
class ShuffledNoisyMbSgd:
    """A4 (and, ``private=False``, its non-private twin).

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      num_available: M, the fixed number of silos reporting each round.
      batch_size: K records per silo per round (1 in the paper's Theorem G.1).
      sampling: ``"with-replacement"`` (paper: ``j ~ Uniform[n]``) or
        ``"without-replacement"`` (identical for K = 1).
      output: ``"last"``, ``"average"`` (paper) or ``"window"``.
      projection_radius: radius of W (None: R^d).
      neighboring: ``"replace-one"`` or ``"add-remove"``.
    """

    problem: Any
    num_rounds: int
    num_available: int
    batch_size: int = 1
    sampling: str = "with-replacement"
    private: bool = True
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    neighboring: str = "replace-one"

    def __post_init__(self):
        _validate.check_int("num_rounds", self.num_rounds, min_value=1)
        _validate.check_int("num_available", self.num_available, min_value=1)
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_choice("sampling", self.sampling, ("with-replacement", "without-replacement"))
        _validate.check_choice("neighboring", self.neighboring, ("replace-one", "add-remove"))
        if self.projection_radius is not None:
            _validate.check_positive("projection_radius", self.projection_radius)
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported here; use 'last', 'average' or 'window'")
        IterateAverager(self.output, self.window)

    @property
    def availability(self):
        return sampling_lib.FixedAvailability(self.num_available)

    @property
    def sampler(self):
        return sampling_lib.make_sampler(self.sampling, self.batch_size)

    @property
    def averager(self) -> IterateAverager:
        return IterateAverager(self.output, self.window)

    def validate(self, data: SiloData) -> None:
        self.availability.validate(data.num_silos)
        self.sampler.validate(data.min_size, self.num_rounds)

    def init(self, params, hparams: MbSgdHParams, data: SiloData, run_key) -> ShuffledState:
        if not self.private:
            hparams = non_private_hparams(hparams)
        return ShuffledState(params, jnp.zeros((), jnp.int32), self.averager.init(params),
                             federated.init_sampler_states(self.sampler, data, run_key), hparams)

    def step(self, state: ShuffledState, data: SiloData, key) -> tuple[ShuffledState, dict]:
        hp = state.hparams
        available = self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)
        grads, overflow = federated.silo_minibatch_gradients(
            self.problem, self.sampler, state.params, data, state.sampler_states, key, state.round,
            clip_norm=hp.clip_norm, private=True, neighboring=self.neighboring,
        )
        reports = federated.privatize_messages(grads, key, hp.noise_std, data.num_silos)
        update = federated.shuffled_aggregate(reports, available, keys.stream_key(key, "shuffle"), "mean")
        new_params = jax.tree_util.tree_map(lambda p, g: p - hp.learning_rate * g, state.params, update)
        new_params = project_l2_ball(new_params, self.projection_radius)
        averaged = self.averager.update(state.averaged, state.params, new_params, state.round)
        metrics = {"num_available": jnp.sum(available), "sampling_overflow": jnp.any(overflow & available)}
        return ShuffledState(new_params, state.round + 1, averaged, state.sampler_states, hp), metrics

    def params(self, state: ShuffledState):
        return state.params

    def output_params(self, state: ShuffledState):
        return self.averager.value(state.averaged, state.params, state.round)

    def privacy_schedule(self, silo_size: int, hparams: MbSgdHParams) -> GaussianSchedule:
        """The local (pre-shuffle) ISRL-DP guarantee of one silo: R subsampled
        Gaussian releases with sensitivity 2C/K. Shuffle amplification is not
        included (not available in ``dpjax.accounting``)."""
        if not self.private:
            raise ValueError("private=False: the non-private twin has no privacy guarantee to account")
        # K = 1 with replacement is a uniform 1-subset: the same law as without replacement.
        scheme = "without-replacement" if self.batch_size == 1 else self.sampling
        return silo_transcript_schedule(
            noise_std=hparams.noise_std, contribution_bound=float(hparams.clip_norm) / self.batch_size,
            sampling=scheme, silo_size=silo_size, batch_size=self.batch_size,
            steps=self.num_rounds, neighboring=self.neighboring,
        )


# ---------------------------------------------------------------------------
# A5: SDP one-pass accelerated noisy MB-SGD with P_vec
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SdpHParams:
    """Per-run hyperparameters of A5: the AC-SA schedule and the norm bound
    L of the P_vec inputs (per-example clip)."""

    schedule: AcsaSchedule
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, schedule: AcsaSchedule, clip_norm=1.0) -> "SdpHParams":
        if isinstance(clip_norm, (int, float)):
            _validate.check_positive("clip_norm", clip_norm)
        return cls(schedule, jnp.asarray(clip_norm, jnp.float32))


def pvec_silo_reports(problem, params, data: SiloData, idx, mask, pvec, clip_norm, key):
    """Every silo's P_vec centred count report for its clipped per-example
    gradients at ``params``: ``[N, P]`` (P = number of parameters)."""
    round_keys = keys.silo_keys(keys.stream_key(key, "rounding"), data.num_silos)
    noise_keys = keys.silo_keys(keys.stream_key(key, "noise"), data.num_silos)

    def one_silo(x, y, i, m, kr, kn):
        grads = clipping.clip_per_example(clipping.per_example_grads(problem.loss, params, x[i], y[i]), clip_norm)
        vectors = jax.vmap(lambda t: ravel_pytree(t)[0])(grads)
        return shuffle_protocols.pvec_user_counts(kr, kn, vectors, m, pvec, clip_norm)

    return jax.vmap(one_silo)(data.x, data.y, idx, mask, round_keys, noise_keys)


@dataclasses.dataclass(frozen=True)
class SdpOnePassAccelerated:
    """A5: SDP One-Pass Accelerated Noisy MB-SGD (Algorithm 6).

    Args:
      problem: a dpjax problem.
      num_rounds: R <= floor(n/K) (one pass).
      batch_size: K records per silo per round.
      pvec: ``PvecParams`` (g, b, p), from the P_vec calculator for the target
        (eps, delta) and ``m = M_r K`` inputs; static (a new (eps, delta)
        recompiles).
      availability: silo availability model.
      projection_radius: radius of W (None: R^d).

    The non-private twin is ``AcceleratedMbSgd(sampling="one-pass",
    private=False)`` with the same schedule.
    """

    problem: Any
    num_rounds: int
    batch_size: int
    pvec: shuffle_protocols.PvecParams
    availability: Any = sampling_lib.FullAvailability()
    projection_radius: float | None = None

    def __post_init__(self):
        _validate.check_int("num_rounds", self.num_rounds, min_value=1)
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        if not isinstance(self.pvec, shuffle_protocols.PvecParams):
            raise ValueError(f"pvec={self.pvec!r} must be a PvecParams")
        if self.projection_radius is not None:
            _validate.check_positive("projection_radius", self.projection_radius)

    @property
    def sampler(self):
        return sampling_lib.OnePass(self.batch_size)

    def validate(self, data: SiloData) -> None:
        self.availability.validate(data.num_silos)
        self.sampler.validate(data.min_size, self.num_rounds)

    def init(self, params, hparams: SdpHParams, data: SiloData, run_key) -> AcceleratedState:
        length = jnp.shape(hparams.schedule.stage_round)[-1]
        if length != self.num_rounds:
            raise ValueError(f"hparams.schedule has {length} rounds; it must have num_rounds={self.num_rounds}")
        return AcceleratedState(params, params, params, jnp.zeros((), jnp.int32),
                                federated.init_sampler_states(self.sampler, data, run_key), hparams)

    def step(self, state: AcceleratedState, data: SiloData, key) -> tuple[AcceleratedState, dict]:
        hp = state.hparams
        available = self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)

        def problem_step(w_md):
            idx, mask, _ = federated.draw_silo_batches(self.sampler, data, state.sampler_states, key, state.round)
            reports = pvec_silo_reports(self.problem, w_md, data, idx, mask, self.pvec, hp.clip_norm, key)
            weights = available.astype(jnp.float32)
            total = shuffle_protocols.pvec_analyze(jnp.tensordot(weights, reports, axes=1), self.pvec, hp.clip_norm)
            m = jnp.maximum(jnp.sum(weights), 1.0) * self.batch_size  # M_r K, public
            _, unravel = ravel_pytree(w_md)
            return unravel(total / m), {"num_available": jnp.sum(available)}

        new_w, new_ag, metrics = acsa_round(problem_step, state, hp.schedule, self.projection_radius)
        return AcceleratedState(new_w, new_ag, state.anchor, state.round + 1, state.sampler_states, hp), metrics

    def params(self, state: AcceleratedState):
        return state.w_ag

    def output_params(self, state: AcceleratedState):
        return state.w_ag
