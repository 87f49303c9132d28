"""Accelerated noisy ISRL-DP minibatch SGD (Lowy & Razaviyayn, ICLR 2023,
Algorithm 1; AC-SA of Ghadimi & Lan (Algorithm 1's body is lost in print; the AC-SA step of Ghadimi & Lan 2012 is used).

One round ``r`` (``t`` = round index inside the current stage, 1-based)::

    alpha = 2/(t+1),  eta = 4 nu / (t (t+1))
    w_md  = [(1-alpha)(mu+eta) w_ag + alpha((1-alpha)mu+eta) w] / (eta + (1-alpha^2) mu)
    g     = (1/M_r) sum_{i in S_r} [ (1/K) sum_j clip_C(grad f(w_md, x_ij)) + u_i ]  + lam (w_md - w_0)
    w     = Proj_W( (alpha mu w_md + ((1-alpha)mu + eta) w - alpha g) / (mu + eta) )
    w_ag  = alpha w + (1-alpha) w_ag

and the output is ``w_ag``. ``mu`` is the strong-convexity modulus of the
objective actually minimised, ``lam`` an optional data-independent
regulariser ``(lam/2)||w - w_0||^2`` added at the server (it has no
sensitivity and gets no noise), ``nu`` the smoothness-like
constant of the stage. Stages (multi-stage method, Appendix E.1;
Ghadimi & Lan 2013 Prop. 7) restart at ``t = 1`` from ``q_{k-1} = w_ag`` (``q_0 = w_0``:
Delta is measured from w_0, not 0 as printed).
The whole schedule is per-round arrays in the hparams, so single-stage,
multi-stage and different constants share one compiled program.

Variants by the local sampling scheme:

* ``sampling="one-pass"``: One-Pass Accelerated Noisy MB-SGD
  (Theorem 3.1/E.1): disjoint blocks of a per-silo permutation, every record
  used at most once, so silo i's transcript is ONE Gaussian release per record
  (parallel composition): ISRL-DP with sensitivity 2C/K.
* ``sampling="with-replacement"``: accelerated ERM (Section 4, Theorem 4.1/F.1),
  K i.i.d. records per round, R adaptive subsampled Gaussians.
* ``"without-replacement"`` / ``"poisson"``: the same step with the samplers
  the tight accountants certify.

Privacy (ISRL-DP, record level, replace-one within a silo): the message of
silo i in round r is a clipped minibatch mean (sensitivity ``2C/K``) plus
``N(0, sigma^2 I)``; ``privacy()`` hands this to ``dpjax.accounting``
with the sampling scheme actually used. ``private=False`` is the
non-private twin (the same compiled step with sigma = 0 and no clip, see
``parts.non_private``); ``noise_std = 0`` with a non-binding clip is
bit-identical to it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, keys
from dpjax.accounting.shuffle_sco import ACSA_SCHEDULES  # AC-SA step-size schedules of acsa_constants
from dpjax.accounting.privacy_spec import PrivacySpec
from dpjax.algorithms.isrl_mbsgd import isrl_privacy
from dpjax.engine.contract import FamilyBase
from dpjax.engine import federated, parts
from dpjax.engine.silos import SiloData
from dpjax.primitives import sampling as sampling_lib
from dpjax.primitives.projection import project_l2_ball

PyTree = Any

# ---------------------------------------------------------------------------
# AC-SA algebra (pure, shared with the SDP one-pass variant, Algorithm 6)
# ---------------------------------------------------------------------------


def acsa_constants(stage_round, nu, schedule: str = "lan"):
    """``(alpha_t, eta_t)`` of round ``t`` of a stage.

    * ``"lan"`` (default): ``alpha_t = 2/(t+1)``, ``eta_t = 4 nu/(t(t+1))``
      (Ghadimi-Lan; with mu = 0 the prox step is ``alpha_t/eta_t = t/(2 nu)``).
    * ``"paper"``: the schedule printed in Cheu, Joseph, Mao & Peng (ICLR 2022),
      Theorem 4.3 (Algorithm 4, also Theorem C.3): ``alpha_t = 2/(t+2)`` and
      inverse step ``L_t = nu/(t+1)`` with ``nu = (T+2)^{3/2} sigma/D + beta``;
      written here as ``eta_t = alpha_t L_t = 2 nu/((t+1)(t+2))`` so that the
      mu = 0 prox step ``alpha_t/eta_t`` is ``1/L_t``. It gives the arbitrary
      start weight 1 - alpha_1 = 1/3 in the output and may overshoot on a
      noiseless problem (its step can be twice Lan's).
    """
    t = jnp.asarray(stage_round, jnp.float32)
    if schedule == "paper":
        return 2.0 / (t + 2.0), 2.0 * nu / ((t + 1.0) * (t + 2.0))
    if schedule != "lan":
        raise ValueError(f"schedule={schedule!r} must be one of {ACSA_SCHEDULES}")
    return 2.0 / (t + 1.0), 4.0 * nu / (t * (t + 1.0))


def acsa_query_point(w: PyTree, w_ag: PyTree, alpha, eta, mu) -> PyTree:
    """Line 4: ``w_md``, a convex combination of ``w_ag`` and ``w`` (weights sum to 1)."""
    denom = eta + (1.0 - alpha**2) * mu
    a_ag = (1.0 - alpha) * (mu + eta) / denom
    a_w = alpha * ((1.0 - alpha) * mu + eta) / denom
    return jax.tree_util.tree_map(lambda ag, p: a_ag * ag + a_w * p, w_ag, w)


def acsa_update(w: PyTree, w_md: PyTree, w_ag: PyTree, grad: PyTree, alpha, eta, mu, radius=None):
    """Lines 10-11: the prox step (closed form of the isotropic quadratic's
    minimiser over the ball W) and the aggregate point. Returns ``(w, w_ag)``."""
    c_md, c_w = alpha * mu, (1.0 - alpha) * mu + eta
    new_w = jax.tree_util.tree_map(
        lambda md, p, g: (c_md * md + c_w * p - alpha * g) / (mu + eta), w_md, w, grad
    )
    new_w = project_l2_ball(new_w, radius)
    new_ag = jax.tree_util.tree_map(lambda p, ag: alpha * p + (1.0 - alpha) * ag, new_w, w_ag)
    return new_w, new_ag


# ---------------------------------------------------------------------------
# Schedules and hyperparameters
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcsaSchedule:
    """Per-run AC-SA constants; ``stage_round``/``stage_nu`` have one entry per round.

    Attributes:
      mu: strong-convexity modulus used by the step (objective incl. ``lam``).
      lam: regularisation weight of ``(lam/2)||w - w_0||^2`` (0 for none).
      stage_round: int32 [R], the round's index t >= 1 inside its stage
        (t = 1 starts a stage from the current ``w_ag``).
      stage_nu: float32 [R], the stage's nu (eta_t = 4 nu/(t(t+1))).
    """

    mu: Any
    lam: Any
    stage_round: Any
    stage_nu: Any

    #: the per-run scalars a sweep varies (``None``: required); ``from_sweep`` builds the schedule.
    SWEEP_AXES: ClassVar[dict] = {"smoothness": dataclasses.MISSING, "strong_convexity": 0.0, "regularization": 0.0}

    @classmethod
    def from_sweep(cls, values: dict, num_rounds: int) -> "AcsaSchedule":
        """The single-stage schedule of one sweep point (``single_stage``)."""
        return cls.single_stage(num_rounds, float(values["smoothness"]), float(values.get("strong_convexity", 0.0)),
                                float(values.get("regularization", 0.0)))

    @classmethod
    def single_stage(cls, num_rounds: int, smoothness: float, strong_convexity: float = 0.0,
                     regularization: float = 0.0) -> "AcsaSchedule":
        """One stage on ``f + (lam/2)||w - w_0||^2`` with ``beta~ = beta + lam``,
        ``mu~ = mu + lam`` (step sizes the paper leaves open)."""
        _validate.check_int("num_rounds", num_rounds, min_value=1)
        beta = _validate.check_positive("smoothness", smoothness)
        mu = _validate.check_nonnegative("strong_convexity", strong_convexity)
        lam = _validate.check_nonnegative("regularization", regularization)
        return cls._build(mu + lam, lam, [(num_rounds, beta + lam)])

    @classmethod
    def multi_stage(cls, stages: Sequence[tuple[int, float]], strong_convexity: float) -> "AcsaSchedule":
        """Stages ``[(R_k, nu_k), ...]`` (e.g. from ``schedules.multistage_stages``)."""
        mu = _validate.check_positive("strong_convexity", strong_convexity)
        if len(stages) == 0:
            raise ValueError("stages=[] must contain at least one (R_k, nu_k) stage")
        for k, (r_k, nu_k) in enumerate(stages):
            _validate.check_int(f"stages[{k}][0]", r_k, min_value=1)
            _validate.check_positive(f"stages[{k}][1]", nu_k)
        return cls._build(mu, 0.0, stages)

    @classmethod
    def _build(cls, mu, lam, stages):
        t = np.concatenate([np.arange(1, r + 1) for r, _ in stages]).astype(np.int32)
        nu = np.concatenate([np.full(r, v) for r, v in stages]).astype(np.float32)
        return cls(jnp.float32(mu), jnp.float32(lam), jnp.asarray(t), jnp.asarray(nu))

    @property
    def num_rounds(self) -> int:
        return int(np.shape(self.stage_round)[-1])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcceleratedHParams:
    """Per-run hyperparameters: the AC-SA schedule, sigma and the clip C."""

    schedule: AcsaSchedule
    noise_std: Any = 0.0
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, schedule: AcsaSchedule, noise_std=0.0, clip_norm=1.0) -> "AcceleratedHParams":
        _validate.check_if_concrete(_validate.check_nonnegative, "noise_std", noise_std)
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm, allow_inf=True)
        return cls(schedule, jnp.asarray(noise_std, jnp.float32), jnp.asarray(clip_norm, jnp.float32))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcceleratedState:
    w: PyTree
    w_ag: PyTree
    anchor: PyTree
    round: jax.Array
    sampler_states: Any
    hparams: Any


def acsa_round(problem_step, state: AcceleratedState, schedule: AcsaSchedule, radius, step_rule: str = "lan"):
    """Shared AC-SA round: ``problem_step(w_md) -> (g, metrics)`` supplies the
    aggregated (private) gradient; returns ``(new_w, new_w_ag, metrics)``.
    ``step_rule`` is the (static) schedule of ``acsa_constants``."""
    r = state.round
    t, nu = schedule.stage_round[r], schedule.stage_nu[r]
    mu = schedule.mu
    alpha, eta = acsa_constants(t, nu, step_rule)
    restart = t == 1
    w_prev = jax.tree_util.tree_map(lambda p, ag: jnp.where(restart, ag, p), state.w, state.w_ag)
    w_md = acsa_query_point(w_prev, state.w_ag, alpha, eta, mu)
    g, metrics = problem_step(w_md)
    g = jax.tree_util.tree_map(lambda gi, md, a: gi + schedule.lam * (md - a), g, w_md, state.anchor)
    new_w, new_ag = acsa_update(w_prev, w_md, state.w_ag, g, alpha, eta, mu, radius)
    return new_w, new_ag, metrics


# ---------------------------------------------------------------------------
# The algorithm
# ---------------------------------------------------------------------------


class AcsaFamily(FamilyBase):
    """What the AC-SA families share (Algorithm 1 here, Algorithm 6 in ``shuffled``):
    the state, the schedule-length check, the server's AC-SA step around a
    family's ``problem_step(w_md) -> (gradient, metrics)``, and ``w_ag`` as output."""

    def init_state(self, params, hparams, data: SiloData, run_key) -> AcceleratedState:
        hparams = self.run_hparams(hparams)
        length = np.shape(hparams.schedule.stage_round)[-1]
        if length != self.num_rounds:
            raise ValueError(
                f"hparams.schedule has {length} rounds; it must have num_rounds={self.num_rounds}"
            )
        return AcceleratedState(
            w=params, w_ag=params, anchor=params, round=jnp.zeros((), jnp.int32),
            sampler_states=federated.init_sampler_states(self.sampler, data, run_key), hparams=hparams,
        )

    def acsa_step(self, state: AcceleratedState, problem_step) -> tuple[AcceleratedState, dict]:
        hp = state.hparams
        new_w, new_ag, metrics = acsa_round(problem_step, state, hp.schedule, self.projection_radius)
        return AcceleratedState(new_w, new_ag, state.anchor, state.round + 1, state.sampler_states, hp), metrics

    def params(self, state: AcceleratedState):
        return state.w_ag

    def output_params(self, state: AcceleratedState):
        return state.w_ag




@dataclasses.dataclass(frozen=True)
class AcceleratedMbSgd(AcsaFamily):
    """Accelerated noisy ISRL-DP MB-SGD (Algorithm 1; one-pass Theorem 3.1, ERM Theorem 4.1) and its
    non-private twin.

    Args:
      problem: a dpjax problem.
      num_rounds: R; must equal the length of the hparams' schedule.
      batch_size: K records per silo per round.
      sampling: ``"one-pass"`` (Theorem 3.1, default), ``"with-replacement"`` (ERM, Theorem 4.1),
        ``"without-replacement"`` or ``"poisson"``.
      availability: silo availability model.
      private: clip + per-silo Gaussian noise (True) or non-private twin.
      aggregation: ``"mean"`` (paper) or ``"sum"``.
      projection_radius: radius of the ball W (None: R^d).
      neighboring: ``"replace-one"`` (ISRL-DP) or ``"add-remove"``.
      log_indices: add each silo's batch indices/mask to the round metrics.
    """

    problem: Any
    num_rounds: int
    batch_size: int
    sampling: str = "one-pass"
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    projection_radius: float | None = None
    neighboring: str = "replace-one"
    log_indices: bool = False

    hparams_type = AcceleratedHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling,
                               ("one-pass", "with-replacement", "without-replacement", "poisson"))
        self.check_common()

    def init(self, params, hparams: AcceleratedHParams, data: SiloData, run_key) -> AcceleratedState:
        return self.init_state(params, hparams, data, run_key)

    def step(self, state: AcceleratedState, data: SiloData, key) -> tuple[AcceleratedState, dict]:
        """AC-SA round whose gradient is the parts' round: minibatch gradient at ``w_md``
        -> per-silo Gaussian -> mean/sum over the available silos (only the M
        available silos are computed when M is static, unless indices are logged)."""
        hp = state.hparams
        if self.log_indices:  # the index log is per silo: keep all N rows
            silo_ids, available = None, self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)
        else:
            silo_ids, available = federated.available_silos(self.availability, key, data.num_silos)
        client = parts.MinibatchGradient(self.problem, self.sampler, self.neighboring)
        privatizer, aggregator = parts.SiloGaussian(data.num_silos), parts.Aggregate(self.aggregation)

        def problem_step(w_md):
            grads, overflow, info = client(w_md, data, state.sampler_states, key, state.round, hp.clip_norm, silo_ids)
            grads, _ = privatizer.update(grads, privatizer.init(key), hp.noise_std, silo_ids)
            metrics = {"num_available": jnp.sum(available), "sampling_overflow": jnp.any(overflow & available)}
            if self.log_indices:
                metrics.update(indices=info["indices"], index_mask=info["index_mask"], available=available)
            return aggregator(grads, available, key), metrics

        return self.acsa_step(state, problem_step)

    def privacy(self, silo_sizes, hparams: AcceleratedHParams) -> PrivacySpec:
        """Each silo's transcript (every round counted): one-pass gives
        ``passes = ceil(R K / n) = 1`` Gaussian release per record (parallel
        composition); other schemes R subsampled Gaussians."""
        return isrl_privacy(self, silo_sizes, hparams.noise_std, float(hparams.clip_norm) / self.batch_size,
                            sampling=self.sampling, batch_size=self.batch_size, steps=self.num_rounds,
                            neighboring=self.neighboring)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-accelerated", AcceleratedMbSgd, twin="accelerated")
