"""Shuffle-DP algorithms of Lowy & Razaviyayn (ICLR 2023, Section 5):

* ``ShuffledNoisyMbSgd`` -- Shuffled Noisy MB-SGD (Section 5, Theorem 5.1/G.1). Each round exactly M silos are
  available; each samples K records (K = 1 in the paper's proof), releases its clipped minibatch mean plus Gaussian
  noise of multiplier ``noise_multiplier`` (std ``z x 2C/K``); a shuffler permutes the M reports and the server averages
  them. The server's update is a function of the multiset of reports (``dpjax.parts.aggregators.shuffled_aggregate``:
  bitwise invariant to the permutation), so shuffling changes privacy, not utility: the trajectory is that of Noisy
  MB-SGD with K records and ``FixedAvailability(M)`` up to float summation order. Parts: Noisy MB-SGD's with
  ``ShuffledAggregate``.
* ``SdpOnePassAccelerated`` -- SDP One-Pass Accelerated Noisy MB-SGD (Algorithm 6, Theorem 5.2/G.2). Every available
  silo takes its next disjoint block of K records and runs the P_vec local randomizer on each of its K clipped
  gradients; the server runs the P_vec analyzer on the ``M_r K`` shuffled vectors, divides by the public ``M_r K`` and
  takes the AC-SA step. Parts: ``SiloBatches("one-pass")`` -> ``ExampleGradients`` -> ``ClipVectors`` ->
  ``PvecRandomizer`` -> ``PvecAnalyzer`` -> ``AcsaServer``. P_vec is simulated at the count level (exact in
  distribution; ``dpjax.primitives.shuffle_protocols``).

Privacy (``privacy()``: the central shuffle-DP (eps, delta) of the whole run, replace-one over all records, from the
parts' events; the aggregator's ``ShuffleEvent`` dispatches to the shuffle accountants):

* Shuffled Noisy MB-SGD (``dpjax.accounting.shuffle.shuffled_gaussian_report``): each silo's transcript is ISRL-DP
  before shuffling (R subsampled Gaussians); the central guarantee is a numerical chain with Theorem G.1's structure
  (whose constant C is unspecified): Gaussian local randomizer -> amplification by shuffling of the M reports
  (Feldman-McMillan-Talwar, numerical or closed form) -> amplification by subsampling silos and records -> advanced
  composition, and (``isrl_bound``) the silos' ISRL-DP guarantee where it is smaller. Calibration scales the noise
  multiplier (``calibration.smallest_scale``).
* Algorithm 6 (``dpjax.accounting.pvec.pvec_report``): each round's P_vec invocation is ``(eps, delta)``-shuffle-DP in
  its ``M_r K`` inputs (Theorem 3.2 of Cheu et al. 2022) for the (g, b, p) it runs with; one pass over disjoint blocks
  makes the run ``(eps, delta)``-SDP by parallel composition (Theorem 5.2/G.2). Calibration searches the P_vec
  calculator's parameters (``pvec_params_for`` is the calculator itself).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting import pvec as pvec_accounting
from dpjax.accounting import shuffle as shuffle_accounting
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.contract import OutputRule
from dpjax.parts import (
    AcsaServer, Averager, ClipPerUnit, ClipVectors, ExampleGradients, GaussianNoise, MinibatchGradient, OptaxServer,
    PvecAnalyzer, PvecRandomizer, ShuffledAggregate, SiloBatches,
)
from dpjax.parts.acsa import AcsaSchedule
from dpjax.parts.aggregators import min_available
from dpjax.primitives import sampling as sampling_lib
from dpjax.primitives import shuffle_protocols

PyTree = Any


def _num_params(problem) -> int:
    """d: the number of model parameters (the dimension of a silo message)."""
    shapes = jax.eval_shape(problem.init_params, jax.random.key(0))
    return int(sum(int(np.prod(leaf.shape, dtype=np.int64)) for leaf in jax.tree_util.tree_leaves(shapes)))


# ------------------------------------------------------------------ Shuffled Noisy MB-SGD (Section 5, Theorem 5.1/G.1)
@dataclasses.dataclass(frozen=True)
class ShuffledNoisyMbSgd(OutputRule, ChainFamily):
    """Shuffled Noisy MB-SGD (and, ``private=False``, its non-private twin).

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      num_available: M, the fixed number of silos reporting each round.
      batch_size: K records per silo per round (1 in the paper's Theorem G.1).
      sampling: ``"with-replacement"`` (paper: ``j ~ Uniform[n]``) or ``"without-replacement"`` (identical for K = 1).
      output: the released iterate (``OutputRule``; ``"average"`` is the paper's).
      window: the averaging window of ``output="average"`` (``OutputRule``).
      projection_radius: radius of W (None: R^d).
      neighboring: ``"replace-one"`` or ``"add-remove"`` (the shuffle chain is replace-one).
      participation: what the analyzer knows (``ShuffleEvent``): ``"hidden"`` (the paper's SDP model: only shuffled
        messages, so silo sampling amplifies) or ``"public"`` (it knows who reported).
      isrl_bound: also certify by the silos' ISRL-DP guarantee (ISRL-DP => central DP, App. C) and state the smaller."""

    problem: Any
    num_rounds: int
    num_available: int
    batch_size: int = 1
    sampling: str = "with-replacement"
    private: bool = True
    projection_radius: float | None = None
    neighboring: str = "replace-one"
    participation: str = "hidden"
    isrl_bound: bool = True

    hparams_type = MbSgdHParams

    def __post_init__(self):
        _validate.check_int("num_available", self.num_available, min_value=1)
        _validate.check_choice("sampling", self.sampling, ("with-replacement", "without-replacement"))
        _validate.check_choice("participation", self.participation, shuffle_accounting.PARTICIPATION)
        self.check_common()
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported here; use 'last', 'average' or 'window'")

    @property
    def availability(self):
        return sampling_lib.FixedAvailability(self.num_available)

    def parts(self, shape: DataShape) -> Parts:
        """Noisy MB-SGD's round with the M reports shuffled before the (multiset) mean."""
        return Parts(
            SiloBatches(self.availability, self.sampling, self.batch_size),
            (MinibatchGradient(self.problem, self.batch_size), ClipPerUnit("clip_norm", self.neighboring),
             GaussianNoise("noise_multiplier", placement="silo"),
             ShuffledAggregate("mean", self.availability, self.participation, self.isrl_bound),
             OptaxServer(projection_radius=self.projection_radius), Averager(self.output, self.window)))


# ------------------------------------------------------- Algorithm 6: SDP one-pass accelerated noisy MB-SGD with P_vec
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SdpHParams:
    """Per-run hyperparameters of Algorithm 6: the AC-SA schedule, the P_vec parameters (g, b, p) and the norm bound L
    of the P_vec inputs (per-example clip). All leaves are traced, so runs with different (eps, delta) -- different (g,
    b, p) -- share one compiled program."""

    schedule: AcsaSchedule
    pvec: shuffle_protocols.PvecParams
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, schedule: AcsaSchedule, pvec: shuffle_protocols.PvecParams, clip_norm=1.0) -> "SdpHParams":
        """Validates ``pvec`` (``PvecParams.create``: int32 g, b; float32 p rounded up) and ``clip_norm``."""
        if not isinstance(pvec, shuffle_protocols.PvecParams):
            raise ValueError(f"pvec={pvec!r} must be a PvecParams")
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm)
        pvec = shuffle_protocols.PvecParams.create(pvec.granularity, pvec.trials, pvec.probability)
        return cls(schedule, pvec, jnp.asarray(clip_norm, jnp.float32))


@dataclasses.dataclass(frozen=True)
class SdpOnePassAccelerated(ChainFamily):
    """SDP One-Pass Accelerated Noisy MB-SGD (Algorithm 6).

    Args:
      problem: a dpjax problem.
      num_rounds: R <= floor(n/K) (one pass).
      batch_size: K records per silo per round.
      availability: silo availability model.
      projection_radius: radius of W (None: R^d).
      max_granularity: static upper bound on the traced P_vec precision g (rounded sums stay exact in float32 while K *
        max_granularity < 2^24; a run whose g exceeds it fails with a NaN error).

    The P_vec parameters (g, b, p) are per-run hyperparameters (``SdpHParams.pvec``; ``pvec_params_for`` computes them
    for a target eps). The non-private twin is ``AcceleratedMbSgd(sampling="one-pass", private=False)`` with the same
    schedule."""

    problem: Any
    num_rounds: int
    batch_size: int
    availability: Any = sampling_lib.FullAvailability()
    projection_radius: float | None = None
    max_granularity: int = 2**14

    hparams_type = SdpHParams
    noise_fields = ()  # P_vec's (g, b, p) are set by calibration (nested axes), not a Gaussian field

    def __post_init__(self):
        self.check_common()
        _validate.check_int("max_granularity", self.max_granularity, min_value=1)
        if self.batch_size * self.max_granularity >= 2**24:
            raise ValueError(
                f"max_granularity={self.max_granularity} times batch_size={self.batch_size} must be < 2^24 "
                "(exact float32 rounded sums)"
            )

    @property
    def sampler(self):
        return sampling_lib.OnePass(self.batch_size)

    @property
    def dim(self) -> int:
        """d, the number of parameters: the dimension of every P_vec input."""
        return _num_params(self.problem)

    def parts(self, shape: DataShape) -> Parts:
        """Clipped per-example vectors of every silo's next block -> P_vec local randomizer ->
        shuffled P_vec analyzer over the available silos, divided by ``M_r K`` -> AC-SA."""
        return Parts(
            SiloBatches(self.availability, "one-pass", self.batch_size, all_silos=True),
            (ExampleGradients(self.problem), ClipVectors("clip_norm"), PvecRandomizer(self.dim, self.max_granularity),
             PvecAnalyzer(self.batch_size, self.availability), AcsaServer(self.num_rounds, self.projection_radius),
             Averager("last")))

    # -- the P_vec calculator ------------------------------------------------
    def min_vectors(self, num_silos: int) -> int:
        """The fewest P_vec inputs of any round, ``min M_r * K``: the binomial
        noise is Bin(M_r K b, p), so the smallest round is the least private."""
        return min_available(self.availability, num_silos) * self.batch_size

    def pvec_params_for(self, num_silos: int, epsilon: float, delta: float, *,
                        mode: str = "lemma_opt") -> shuffle_protocols.PvecParams:
        """P_vec parameters for a target (eps, delta)-SDP run, from the P_vec calculator itself
        (proof of Cheu et al. Theorem 3.2; ``dpjax.accounting.pvec.pvec_params``; ``mode="lemma_opt"``,
        the lemma-optimised constants, by default; ``"paper"`` = Theorem 3.2's printed choice) for
        ``min_vectors(num_silos)`` inputs of dimension ``dim``. Pass the result to ``SdpHParams.create``;
        ``privacy(...).calibrate`` searches the same calculator with the one calibration routine."""
        calc = pvec_accounting.pvec_params(epsilon, delta, self.min_vectors(num_silos), self.dim, mode)
        if calc.g > self.max_granularity:
            raise ValueError(f"max_granularity={self.max_granularity} is below the calculator's g={calc.g}")
        return shuffle_protocols.PvecParams.from_calculator(calc)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-shuffled", ShuffledNoisyMbSgd,
                "shuffled ISRL-DP MB-SGD: silos' noisy updates through a shuffler (central shuffle-DP)",
                twin={"shuffled": "non-private shuffled MB-SGD, the twin of isrl-shuffled"})
register_family("sdp-accelerated", SdpOnePassAccelerated,  # calibration sets pvec
                "SDP one-pass accelerated noisy MB-SGD (Lowy & Razaviyayn, Algorithm 6; P_vec sums)")
