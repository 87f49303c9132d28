"""The parts DIFF2's rounds are declared from (Murata & Suzuki, ICML 2023, Algs. 1-4).

One DIFF2 round (Alg. 1 steps 1-5) as roles of ``dpjax.engine.roles``:

* ``RestartSchedule`` -- which rounds restart the estimator (``(r - 1) mod T == 0``; every round for DP-GD); every part
  that behaves differently in restart and difference rounds asks it, so they all agree.
* ``Diff2Client`` -- describes each silo's units at ``x_{r-1}``: the per-record gradients (restart) or the per-record
  differences ``grad l(x_{r-1}, z) - grad l(x_{r-2}, z)`` (difference round), materialised or as ghost-clipping layer
  passes (``dpjax.primitives.ghost_clipping``). Its state is ``x_{r-2}`` and, optionally, the per-record work at
  ``x_{r-1}`` carried to the next round (one pass over the data per round instead of two).
* ``RadiusClipper`` -- clips every unit to ``C1`` (restart) or ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||`` (difference) and
  returns the ClippedMean (Alg. 2) of each silo with that radius divided by the silo size as its bound.
* ``SiloMean`` -- the mean over the P silos (bound / P).
* ``RoundNoise`` -- Gaussian noise on the server, noise multiplier
  ``noise_multiplier_restart`` or ``noise_multiplier_diff`` of the round, std
  ``z x sensitivity`` read from the value (``parts.privatizers.gaussian_std``).
* ``EstimatorSgd`` -- keeps ``v~_r = noisy mean + [not restart] v~_{r-1}``
  (post-processing of released values) and steps ``x_r = x_{r-1} - eta v~_r``.
* ``RandomIterate`` -- Alg. 1's output ``x_{r^-1}``, ``r^ ~ Unif{1..R}``.

DIFF2-BVR-L-SGD's local steps (Alg. 4) reuse ``RadiusClipper`` and ``SiloMean`` and add
``StepNoise`` in the inner chain of its server (``dpjax.algorithms.diff2_local``).

Every part has the one signature of ``dpjax.engine.roles`` (``init(params, ctx)``,
``update(value, state, ctx)``) and names its ``roles``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate, keys
from dpjax.accounting.events import ClipEvent, NoiseEvent
from dpjax.engine.roles import Batch, Context, Sensitive, Stateless, released
from dpjax.parts.privatizers import gaussian_std, host_multiplier
from dpjax.primitives import clipping, ghost_clipping, noise

PyTree = Any
PATHS = ("auto", "ghost", "per-record")


def is_restart_round(round_number, restart_interval):
    """Restart predicate of Alg. 1: ``(r - 1) mod T == 0`` for 1-based ``r``.

    Works on Python ints and traced int32 scalars (so T can be vmapped)."""
    return (round_number - 1) % restart_interval == 0


def _host_int(v) -> int:
    return v if isinstance(v, int) else int(jax.device_get(v))


@dataclasses.dataclass(frozen=True)
class RestartSchedule:
    """Which rounds are restart rounds: every round (``every_round``, DP-GD: a static True, so the
    difference branch is never traced) or ``(r - 1) mod T == 0`` with ``T = hparams.restart_interval``."""

    every_round: bool = False

    def restart(self, ctx: Context):
        """Whether round ``ctx.round + 1`` (1-based) restarts: ``True`` or a traced bool."""
        return True if self.every_round else is_restart_round(ctx.round + 1, ctx.hparams.restart_interval)

    def count(self, num_rounds: int, restart_interval) -> int:
        """m = ceil(R/T), the number of restart rounds (T = 1 for ``every_round``)."""
        t = 1 if self.every_round else _validate.check_int("restart_interval", _host_int(restart_interval),
                                                            min_value=1)
        return -(-num_rounds // t)


def scaled_norm(coef, norm):
    """``coef * norm`` with ``0 * inf = 0`` (no displacement or no noise stays
    exactly zero even when clipping is disabled with ``coef = inf``)."""
    return jnp.where((norm == 0) | (coef == 0), jnp.zeros_like(norm * coef), coef * norm)


def displacement(params: PyTree, prev_params: PyTree):
    """``||x_{r-1} - x_{r-2}||`` (global norm over all leaves)."""
    return clipping.global_norm(optax.tree.sub(params, prev_params))


def difference_radius(params: PyTree, prev_params: PyTree, clip_diff):
    """``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||``."""
    return scaled_norm(clip_diff, displacement(params, prev_params))


# ----------------------------------------------------------------------------- which per-record path
def _ghost_traffic(plan, params) -> float:
    """Floats moved per record by a ghost-clipped difference round: per layer call, its input and output-gradient rows
    (K + C per position) read or written about six times (pass, carry, norms, weighted sum)."""
    leaves = jax.tree_util.tree_leaves(params)
    total = 0.0
    for call in plan.calls:
        c = call.out_shape[-1] if call.out_shape else 1
        positions = math.prod(call.out_shape[:-1]) if len(call.out_shape) > 1 else 1
        k = max(int(leaves[i].size) for i in call.leaf_ids) // max(c, 1)
        total += 6.0 * positions * (k + c)
    return total


def clipping_path(problem, params, x, y, path: str = "auto") -> str:
    """Which per-record computation DIFF2 runs on ``problem``: ``"ghost"`` (ghost clipping of the gradient differences,
    ``dpjax.primitives.ghost_clipping``) or ``"per-record"`` (per-record gradients materialised with ``vmap(grad)``).

    ``path="auto"`` takes ghost clipping when the model supports it and it moves fewer floats per record than
    materialising (about 5 d per record: the gradient written, read for its norm and for the weighted sum, carried to
    the next round); ``"ghost"`` raises a ``ValueError`` if the model is not supported. ``x, y``: one silo's records
    (only shapes are used)."""
    _validate.check_choice("path", path, PATHS)
    if path == "per-record":
        return "per-record"
    plan = ghost_clipping.make_plan(problem.loss, params, x, y)
    if not plan.fast:
        if path == "ghost":
            raise ValueError(f"path='ghost' but ghost clipping cannot run on {problem!r}: {plan.reason}")
        return "per-record"
    if path == "ghost":
        return "ghost"
    d = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))
    return "ghost" if _ghost_traffic(plan, params) < 5.0 * d else "per-record"


# ----------------------------------------------------------------------------- units
@dataclasses.dataclass(frozen=True)
class GhostPasses:
    """Ghost path of a round: the layer passes of every silo at ``x_{r-1}`` and ``x_{r-2}``
    (``ghost_clipping.layer_passes``, silo axis first; ``prev_passes`` may be carried ones)."""

    plan: Any
    params: PyTree
    prev_params: PyTree
    passes: Any
    prev_passes: Any


@dataclasses.dataclass(frozen=True)
class GhostRecords:
    """Records whose per-record gradients (``use_difference=False``) or differences between
    ``params`` and ``prev_params`` the clipper sums with ``ghost_clipping.clipped_difference_sum``
    (ghost norms where the model allows, else materialised); ``x, y`` silo axis first."""

    loss: Any
    params: PyTree
    prev_params: PyTree
    x: jax.Array
    y: jax.Array
    use_difference: bool


@dataclasses.dataclass(frozen=True)
class RecordDifferences:
    """DIFF2's units of one round, every silo (leading axis ``[M]``): per-record gradients (``restart``) or per-record
    gradient differences, described for the clipper.

    Attributes: restart: True (static), or a traced bool: the round restarts the estimator. displacement:
      ``||x_{r-1} - x_{r-2}||`` (the difference radius is ``C2`` times it). weights: bool ``[M, B]`` (None: every row).
      denominator: the public divisor of each silo's sum (``[M]`` silo sizes, or ``b``). vectors: the per-record vectors
      ``[M, B, ...]`` (per-record path), or None. ghost: ``GhostPasses`` / ``GhostRecords`` (ghost path), or None."""

    restart: Any
    displacement: Any
    weights: Any
    denominator: Any
    vectors: PyTree = None
    ghost: Any = None


# ----------------------------------------------------------------------------- client
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Diff2ClientState:
    """``prev_params`` = x_{r-2} (x_{r-1} after the round); ``cache`` (silo axis first): the
    per-record work at x_{r-1} for the next round, or None (per-record gradients on the per-record
    path, the layers' passes (``ghost_clipping.carried_passes``) on the ghost path)."""

    prev_params: PyTree
    cache: PyTree = None


def _per_record_grads(problem, params, x, y):
    return jax.vmap(lambda xs, ys: clipping.per_example_grads(problem.loss, params, xs, ys))(x, y)


def _ghost_passes(problem, params, x, y):
    """Every silo's carried layer passes at ``params`` (``x, y``: ``[M, B, ...]``)."""
    plan = ghost_clipping.make_plan(problem.loss, params, x[0], y[0])
    passes = jax.vmap(lambda xs, ys: ghost_clipping.layer_passes(problem.loss, params, xs, ys, plan))(x, y)
    return ghost_clipping.carried_passes(plan, passes)


@dataclasses.dataclass(frozen=True)
class Diff2Client:
    """Step 2 of Alg. 1 before clipping: every silo's per-record gradients at ``x_{r-1}`` (restart) or their differences
    to ``x_{r-2}`` (difference round), as ``RecordDifferences``.

    Args:
      problem: the problem (per-record ``loss``).
      schedule: the ``RestartSchedule``.
      path: ``"auto"`` | ``"ghost"`` | ``"per-record"`` (``clipping_path``).
      carry: keep the per-record work at ``x_{r-1}`` in the state for the next round.
      records: the data's ``(x, y)`` shapes (``DataShape.records``), which shape the carried work."""

    problem: Any
    schedule: RestartSchedule
    path: str = "auto"
    carry: bool = False
    records: Any = None

    roles = ("client",)

    @property
    def carries(self) -> bool:
        return self.carry and not self.schedule.every_round

    def _ghost(self, params, x, y) -> bool:
        return clipping_path(self.problem, params, x[0], y[0], self.path) == "ghost"

    def init(self, params, ctx: Context):
        if not self.carries:
            return Diff2ClientState(params)
        x, y = (jnp.zeros(s.shape, s.dtype) for s in self.records)
        work = _ghost_passes if self._ghost(params, x, y) else _per_record_grads
        # round 1 always restarts: the carried work of x_{-1} is a placeholder of the right shape
        cache = optax.tree.zeros_like(jax.eval_shape(lambda: work(self.problem, params, x, y)))
        return Diff2ClientState(params, cache)

    def update(self, batch: Batch, state: Diff2ClientState, ctx: Context):
        params, data = ctx.query, ctx.data
        restart = self.schedule.restart(ctx)
        x, y, sizes = batch.select(data.x), batch.select(data.y), batch.select(data.sizes)
        weights = batch.weights.astype(x.dtype)  # the full batch: 1 on every real record, 0 on padding
        disp = displacement(params, state.prev_params)
        ghost = self._ghost(params, x, y)
        if self.schedule.every_round:  # DP-GD: gradients at x_{r-1} only, nothing carried
            if ghost:
                return RecordDifferences(True, disp, weights, sizes, ghost=GhostRecords(
                    self.problem.loss, params, params, x, y, False)), Diff2ClientState(params)
            vectors = _per_record_grads(self.problem, params, x, y)
            return RecordDifferences(True, disp, weights, sizes, vectors), Diff2ClientState(params)
        prev, cached = state.prev_params, state.cache if self.carries else None
        if ghost:  # one layer pass per round when the one at x_{r-2} is carried
            plan = ghost_clipping.make_plan(self.problem.loss, params, x[0], y[0])
            passes = jax.vmap(lambda xs, ys: ghost_clipping.layer_passes(self.problem.loss, params, xs, ys, plan))(x, y)
            prev_passes = cached if cached is not None else _ghost_passes(self.problem, prev, x, y)
            units = RecordDifferences(restart, disp, weights, sizes,
                                      ghost=GhostPasses(plan, params, prev, passes, prev_passes))
            work = ghost_clipping.carried_passes(plan, passes)
        else:
            work = _per_record_grads(self.problem, params, x, y)
            g_prev = cached if cached is not None else _per_record_grads(self.problem, prev, x, y)
            units = RecordDifferences(restart, disp, weights, sizes,
                                      optax.tree.where(restart, work, optax.tree.sub(work, g_prev)))
        return units, Diff2ClientState(params, work if self.carries else None)


# ----------------------------------------------------------------------------- clipper
@dataclasses.dataclass(frozen=True)
class RadiusClipper:
    """DIFF2's ClippedMean (Alg. 2) of every silo: each unit clipped to ``C1`` in restart rounds
    and to ``C2 ||x_{r-1} - x_{r-2}||`` in difference rounds, summed, divided by the public
    denominator (the silo size); the bound is that radius over the denominator (replace-one: one
    record moves a silo's mean by ``2 radius / n_p``). ``restart_field=None`` (local steps): every
    round is a difference round. The state keeps the last radius (a diagnostic)."""

    restart_field: str | None = "clip_restart"
    difference_field: str = "clip_diff"
    neighboring: str = "replace-one"

    roles = ("clipper",)

    def init(self, params, ctx: Context):
        return jnp.zeros((), jnp.result_type(float))

    def radius(self, units: RecordDifferences, hparams):
        c_diff = scaled_norm(getattr(hparams, self.difference_field), units.displacement)
        if self.restart_field is None:
            return c_diff
        c_restart = getattr(hparams, self.restart_field)
        return c_restart if units.restart is True else jnp.where(units.restart, c_restart, c_diff)

    def update(self, units: RecordDifferences, state, ctx: Context) -> tuple[Sensitive, Any]:
        radius = self.radius(units, ctx.hparams)
        ghost = units.ghost
        if units.vectors is not None:
            total = jax.vmap(lambda v, w: clipping.clipped_sum(v, radius, w).total)(units.vectors, units.weights)
        elif isinstance(ghost, GhostPasses):
            use_difference = ~units.restart
            total = jax.vmap(lambda p, q, w: ghost_clipping.clipped_difference_from_passes(
                ghost.plan, ghost.params, ghost.prev_params, p, q, radius, w, use_difference))(
                ghost.passes, ghost.prev_passes, units.weights)
        else:
            weights = units.weights if units.weights is not None else jnp.ones(ghost.x.shape[:2], bool)
            total = jax.vmap(lambda x, y, w: ghost_clipping.clipped_difference_sum(
                ghost.loss, ghost.params, ghost.prev_params, x, y, radius, w,
                use_difference=ghost.use_difference).total)(ghost.x, ghost.y, weights)
        clipped = self.sensitive(total, radius, units.denominator)
        return clipped, jnp.asarray(radius, state.dtype)

    def sensitive(self, total, radius, denominator) -> Sensitive:
        """Each silo's clipped sum with bound ``radius``, divided by its public ``denominator``."""
        return Sensitive(total, radius, self.neighboring).divided(denominator)

    def event(self, hparams) -> ClipEvent:
        return ClipEvent(self.neighboring)


# ----------------------------------------------------------------------------- aggregator
@dataclasses.dataclass(frozen=True)
class SiloMean(Stateless):
    """``(1/P) sum_p d_r^(p)`` over all P silos (Alg. 1 step 4); a record lives in one silo, so
    the bound is the largest silo's bound over P (``2 radius / (n_min P)`` replace-one)."""

    roles = ("aggregator",)

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        count = jax.tree_util.tree_leaves(messages.value)[0].shape[0]
        mean = jax.tree_util.tree_map(lambda m: jnp.mean(m, axis=0), messages.value)
        bound = jnp.max(jnp.asarray(messages.contribution_bound)) / count
        return Sensitive(mean, bound, messages.neighboring), state


# ----------------------------------------------------------------------------- privatizers
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ReleaseRecord:
    """What the last release was (a diagnostic; both are public): a restart round, its noise std."""

    restart: jax.Array
    noise_std: jax.Array


@dataclasses.dataclass(frozen=True)
class RoundNoise:
    """Gaussian noise on the server's mean, ``N(0, (z sensitivity)^2 I)`` with ``z`` the round's multiplier
    (``restart_field`` in restart rounds, ``difference_field`` in difference rounds), from the round key's ``stream``.
    Events: ``m = ceil(R/T)`` restart releases and ``R - m`` difference releases, composed by the accountant."""

    schedule: RestartSchedule
    restart_field: str = "noise_multiplier_restart"
    difference_field: str = "noise_multiplier_diff"
    stream: str = "server_noise"

    roles = ("privatizer",)

    def init(self, params, ctx: Context):
        return ReleaseRecord(jnp.asarray(False), jnp.zeros((), jnp.float32))

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, ReleaseRecord]:
        restart = self.schedule.restart(ctx)
        z_restart = getattr(ctx.hparams, self.restart_field)
        z = z_restart if restart is True else jnp.where(restart, z_restart, getattr(ctx.hparams, self.difference_field))
        std = gaussian_std(z, message.sensitivity)
        value = noise.add_gaussian_noise(keys.stream_key(ctx.key, self.stream), message.value, std)
        return message.replace(value=value), ReleaseRecord(jnp.asarray(restart), std)

    def metrics(self, state: ReleaseRecord, batch) -> dict:
        """The round's public diagnostics (round metrics): whether it restarted, its noise std."""
        return {"restart": state.restart, "noise_std": state.noise_std}

    def events(self, hparams, num_rounds: int) -> tuple[NoiseEvent, ...]:
        m = self.schedule.count(num_rounds, getattr(hparams, "restart_interval", 1))
        return (NoiseEvent(self.restart_field, host_multiplier(getattr(hparams, self.restart_field)), "server", m),
                NoiseEvent(self.difference_field, host_multiplier(getattr(hparams, self.difference_field)), "server",
                           num_rounds - m))


@dataclasses.dataclass(frozen=True)
class StepNoise(Stateless):
    """Gaussian noise of one local step, ``N(0, (z sensitivity)^2 I)`` with ``z = noise_field``,
    drawn from the round key's ``stream`` folded with the local step index ``ctx.round``
    (inside the local loop the context counts local steps)."""

    noise_field: str = "noise_multiplier_local"
    stream: str = "local"

    roles = ("privatizer",)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        std = gaussian_std(getattr(ctx.hparams, self.noise_field), message.sensitivity)
        key = jax.random.fold_in(keys.stream_key(ctx.key, self.stream), ctx.round)
        return message.replace(value=noise.add_gaussian_noise(key, message.value, std)), state

    def events(self, hparams, steps: int) -> tuple[NoiseEvent, ...]:
        return (NoiseEvent(self.noise_field, host_multiplier(getattr(hparams, self.noise_field)), "silo", steps),)


# ----------------------------------------------------------------------------- server and output
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class EstimatorState:
    """``estimate`` = v~_r, the noisy estimator of the last round."""

    estimate: PyTree


@dataclasses.dataclass(frozen=True)
class EstimatorSgd:
    """Steps 4-5 of Alg. 1 (+ the GD routine, Alg. 3): ``v~_r = u + [not restart] v~_{r-1}`` from
    the released noisy mean ``u`` (post-processing), then ``x_r = x_{r-1} - eta lr_scale v~_r``."""

    schedule: RestartSchedule
    lr_field: str = "learning_rate"
    lr_scale: float = 1.0

    roles = ("server",)

    def init(self, params, ctx: Context):
        return EstimatorState(optax.tree.zeros_like(params))

    def update(self, value, state: EstimatorState, ctx: Context):
        """``x_r`` from the round's iterate ``ctx.params`` and the released mean ``value``."""
        update, params = released(value), ctx.params
        restart = self.schedule.restart(ctx)
        v = update if restart is True else optax.tree.where(restart, update, optax.tree.add(update, state.estimate))
        step = -getattr(ctx.hparams, self.lr_field) * self.lr_scale
        return optax.tree.add_scale(params, step, v), EstimatorState(v)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class RandomIterateState:
    output_round: jax.Array
    output: PyTree


@dataclasses.dataclass(frozen=True)
class RandomIterate:
    """Alg. 1's output: ``x_{r^-1}`` with ``r^ ~ Unif{1..R}`` drawn at init from the run key's
    ``"output"`` stream (``x_R`` is never output)."""

    num_rounds: int

    roles = ("averager",)

    def init(self, params, ctx: Context):
        r_hat = jax.random.randint(keys.run_stream_key(ctx.key, "output"), (), 1, self.num_rounds + 1)
        return RandomIterateState(r_hat.astype(jnp.int32), params)

    def candidate(self, value, ctx: Context):
        """The round's output candidate: its starting point ``x_{r-1}`` (``ctx.params``)."""
        return ctx.params

    def update(self, value, state: RandomIterateState, ctx: Context):
        """Records the candidate of round ``r^``; passes the server's ``value`` on."""
        output = optax.tree.where(ctx.round + 1 == state.output_round, self.candidate(value, ctx), state.output)
        return self.passed(value), RandomIterateState(state.output_round, output)

    def passed(self, value):
        return value

    def value(self, state: RandomIterateState, params, rounds_done):
        return state.output
