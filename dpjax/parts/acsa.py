"""The AC-SA server (Ghadimi & Lan 2012, multi-stage 2013) and its per-run schedule.

AC-SA is the server optimizer of ISRL-DP's accelerated families (Lowy & Razaviyayn, ICLR 2023, Algorithm 1 -- whose body
is lost in print, the AC-SA step of Ghadimi & Lan is used -- and the SDP one-pass Algorithm 6). One round ``r`` (``t`` =
the round's index inside its stage, 1-based)::

    alpha = 2/(t+1),  eta = 4 nu / (t (t+1))
    w_md  = [(1-alpha)(mu+eta) w_ag + alpha((1-alpha)mu+eta) w] / (eta + (1-alpha^2) mu)   # query
    g     = <the round's private gradient at w_md> + lam (w_md - w_0)
    w     = Proj_W( (alpha mu w_md + ((1-alpha)mu + eta) w - alpha g) / (mu + eta) )
    w_ag  = alpha w + (1-alpha) w_ag

As a server part (``dpjax.engine.roles``): the run's iterate (``params``) is ``w_ag`` (the output), the server state
holds ``w`` and the anchor ``w_0``; ``update`` takes the aggregated private gradient at ``w_md`` and serves (``Served``)
the new ``w_ag`` with the next round's ``w_md`` (where the clients compute). ``lam`` is an optional data-independent
regulariser ``(lam/2)||w - w_0||^2`` added at the server (no sensitivity, no noise). A stage restarts at ``t = 1`` from
``w_ag`` (``q_{k-1} = w_ag``, ``q_0 = w_0``). The whole schedule is per-round arrays in the hparams (``AcsaSchedule``),
so single-stage, multi-stage and different constants share one compiled program.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting.shuffle_sco import ACSA_SCHEDULES  # AC-SA step-size schedules of acsa_constants
from dpjax.engine.roles import Context, Served, released
from dpjax.primitives.projection import project_l2_ball

PyTree = Any


# ----------------------------------------------------------------------------- AC-SA algebra (pure)
def acsa_constants(stage_round, nu, schedule: str = "lan"):
    """``(alpha_t, eta_t)`` of round ``t`` of a stage.

    * ``"lan"`` (default): ``alpha_t = 2/(t+1)``, ``eta_t = 4 nu/(t(t+1))``
      (Ghadimi-Lan; with mu = 0 the prox step is ``alpha_t/eta_t = t/(2 nu)``).
    * ``"paper"``: the schedule printed in Cheu, Joseph, Mao & Peng (ICLR 2022), Theorem 4.3 (Algorithm 4, also Theorem
      C.3): ``alpha_t = 2/(t+2)`` and inverse step ``L_t = nu/(t+1)`` with ``nu = (T+2)^{3/2} sigma/D + beta``; written
      here as ``eta_t = alpha_t L_t = 2 nu/((t+1)(t+2))`` so that the mu = 0 prox step ``alpha_t/eta_t`` is ``1/L_t``.
      It gives the arbitrary start weight 1 - alpha_1 = 1/3 in the output and may overshoot on a noiseless problem (its
      step can be twice Lan's)."""
    t = jnp.asarray(stage_round, jnp.float32)
    if schedule == "paper":
        return 2.0 / (t + 2.0), 2.0 * nu / ((t + 1.0) * (t + 2.0))
    if schedule != "lan":
        raise ValueError(f"schedule={schedule!r} must be one of {ACSA_SCHEDULES}")
    return 2.0 / (t + 1.0), 4.0 * nu / (t * (t + 1.0))


def acsa_query_point(w: PyTree, w_ag: PyTree, alpha, eta, mu) -> PyTree:
    """``w_md``, a convex combination of ``w_ag`` and ``w`` (weights sum to 1)."""
    denom = eta + (1.0 - alpha**2) * mu
    a_ag = (1.0 - alpha) * (mu + eta) / denom
    a_w = alpha * ((1.0 - alpha) * mu + eta) / denom
    return jax.tree_util.tree_map(lambda ag, p: a_ag * ag + a_w * p, w_ag, w)


def acsa_update(w: PyTree, w_md: PyTree, w_ag: PyTree, grad: PyTree, alpha, eta, mu, radius=None):
    """The prox step (closed form of the isotropic quadratic's minimiser over the ball W) and
    the aggregate point. Returns ``(w, w_ag)``."""
    c_md, c_w = alpha * mu, (1.0 - alpha) * mu + eta
    # times the scalar reciprocal, not divided by it: XLA:CPU rewrites ``x / broadcast(s)`` into
    # ``x * broadcast(1 / s)`` in some programs and not in others (the one-device blocked run, not the
    # silo-sharded one: 1.5e-8 apart, dpjax.engine.silo_blocks); written as the product, every program
    # rounds the same.
    inv = 1.0 / (mu + eta)
    new_w = jax.tree_util.tree_map(lambda md, p, g: (c_md * md + c_w * p - alpha * g) * inv, w_md, w, grad)
    new_w = project_l2_ball(new_w, radius)
    new_ag = jax.tree_util.tree_map(lambda p, ag: alpha * p + (1.0 - alpha) * ag, new_w, w_ag)
    return new_w, new_ag


# ----------------------------------------------------------------------------- The per-run schedule
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class AcsaSchedule:
    """Per-run AC-SA constants; ``stage_round``/``stage_nu`` have one entry per round.

    Attributes:
      mu: strong-convexity modulus used by the step (objective incl. ``lam``).
      lam: regularisation weight of ``(lam/2)||w - w_0||^2`` (0 for none).
      stage_round: int32 [R], the round's index t >= 1 inside its stage
        (t = 1 starts a stage from the current ``w_ag``).
      stage_nu: float32 [R], the stage's nu (eta_t = 4 nu/(t(t+1)))."""

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


# ----------------------------------------------------------------------------- One AC-SA round, and the server part
def acsa_query(w: PyTree, w_ag: PyTree, schedule: AcsaSchedule, round_index, step_rule: str = "lan"):
    """``(w_prev, w_md, alpha, eta)`` of round ``round_index``: a stage's first round restarts
    from ``w_ag`` (``w_prev``), and the clients compute at ``w_md``."""
    t, nu = schedule.stage_round[round_index], schedule.stage_nu[round_index]
    alpha, eta = acsa_constants(t, nu, step_rule)
    w_prev = jax.tree_util.tree_map(lambda p, ag: jnp.where(t == 1, ag, p), w, w_ag)
    return w_prev, acsa_query_point(w_prev, w_ag, alpha, eta, schedule.mu), alpha, eta


def acsa_step(w_prev, w_md, w_ag, anchor, gradient, alpha, eta, schedule: AcsaSchedule, radius=None):
    """The round's update from the private ``gradient`` at ``w_md`` (plus the server's
    regulariser ``lam (w_md - w_0)``). Returns ``(w, w_ag)``."""
    g = jax.tree_util.tree_map(lambda gi, md, a: gi + schedule.lam * (md - a), gradient, w_md, anchor)
    return acsa_update(w_prev, w_md, w_ag, g, alpha, eta, schedule.mu, radius)


class AcsaState(NamedTuple):
    """The AC-SA server's state: the prox iterate ``w`` and the anchor ``w_0`` (the run's params are ``w_ag``)."""

    w: PyTree
    anchor: PyTree


@dataclasses.dataclass(frozen=True)
class AcsaServer:
    """AC-SA as a server part: ``query`` returns ``w_md``, ``update`` steps ``(w, w_ag)``.

    Args:
      num_rounds: R; the hparams' schedule must have R rounds (checked at ``init``).
      projection_radius: radius of the ball W (None: R^d).
      step_rule: ``acsa_constants``' schedule (``"lan"`` or ``"paper"``).
      schedule_field: the hparams field holding the ``AcsaSchedule``."""

    num_rounds: int
    projection_radius: float | None = None
    step_rule: str = "lan"
    schedule_field: str = "schedule"

    roles = ("server",)

    def init(self, params, ctx: Context) -> AcsaState:
        length = np.shape(getattr(ctx.hparams, self.schedule_field).stage_round)[-1]
        if length != self.num_rounds:
            raise ValueError(f"hparams.{self.schedule_field} has {length} rounds; it must have "
                             f"num_rounds={self.num_rounds}")
        return AcsaState(params, params)

    def update(self, update, state: AcsaState, ctx: Context):
        schedule = getattr(ctx.hparams, self.schedule_field)
        params = ctx.params
        w_prev, w_md, alpha, eta = acsa_query(state.w, params, schedule, ctx.round, self.step_rule)
        new_w, new_ag = acsa_step(w_prev, w_md, params, state.anchor, released(update), alpha, eta, schedule,
                                  self.projection_radius)
        # the next round's query point (the last round's is never used: its index is held in range)
        next_round = jnp.minimum(ctx.round + 1, self.num_rounds - 1)
        query = acsa_query(new_w, new_ag, schedule, next_round, self.step_rule)[1]
        return Served(new_ag, query), AcsaState(new_w, state.anchor)
