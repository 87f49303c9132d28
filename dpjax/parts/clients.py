"""Client updates: what each silo computes from the server's model and its batch.

A client update is a part of the one signature (``dpjax.engine.roles``): ``update(batch, state, ctx) -> (units, state)``
at the round's query point ``ctx.query`` on ``ctx.data``: it describes the units the clipper clips
(``dpjax.engine.roles.PerExampleGradients`` or ``PerUnitVectors``) and the public denominator of the silo's message; it
never clips or adds noise itself, so the sensitivity of what it sends is the clipper's.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.custom_batching import custom_vmap

from dpjax.engine.problem import has_closed_form_clipping
from dpjax.engine.chain import fold, init_all
from dpjax.engine.roles import Batch, Context, PerExampleGradients, PerUnitVectors, Stateless
from dpjax.primitives.projection import project_l2_ball


def supports_dense_gradients(problem, sampler) -> bool:
    """Whether the gather-free (multiplicity-weighted, closed-form) path applies."""
    return has_closed_form_clipping(problem) and hasattr(sampler, "draw_weights")


def prefer_dense_gradients(problem, sampler, batch_size: int, n_max: int) -> bool:
    """The ``gradient_path="auto"`` rule: dense when it applies, the batch is not tiny (``8 K >= n_max``: two passes
    over the silo cost less than gathering K rows and drawing K distinct indices by ``top_k``) and the sampler's
    multiplicity vector is not just a scatter of gathered indices (``weights_by_scatter``)."""
    return (supports_dense_gradients(problem, sampler) and 8 * batch_size >= n_max
            and not getattr(sampler, "weights_by_scatter", False)
            and not getattr(problem, "prefer_gathered_batches", False))  # networks: cost per row, gather


def _batch_records(problem, batch: Batch, data):
    """The computed silos' batch records ``x, y [M, B, ...]``, their weights ``[M, B]`` and (problems
    with a closed-form clipped sum) the rows' squared norms, gathered like the rows."""
    closed_form = problem is not None and has_closed_form_clipping(problem)
    # loop-invariant (data only): computed once from all rows and materialised; batch.indices None:
    # the gather-free path (every row of the silo, weighted)
    sq = jax.lax.optimization_barrier(problem.row_sq_norms(data.x)) if closed_form else None
    x, y, sq = batch.records((data.x, data.y, sq))
    return x, y, batch.weights, sq


@dataclasses.dataclass(frozen=True)
class MinibatchGradient(Stateless):
    """Each silo's ``(1/K_i) sum_{j in batch_i} grad f(w, x_ij)``, clipped per example by the clipper.

    The divisor is public: the sampler's (expected) batch size ``K``, one ``K_i`` per silo (``batch_sizes``, unbalanced
    silos; the batch selection keeps each silo's first ``K_i`` records), or the silo size for full batches.

    Args:
      problem: the problem (``loss``; a closed-form clipped sum if it has one).
      batch_size: K, or None for full batches (divide by the silo size).
      batch_sizes: one K_i per silo (None: every silo uses ``batch_size``)."""

    problem: Any
    batch_size: int | None = None
    batch_sizes: tuple | None = None

    roles = ("client",)

    def denominator(self, silo_sizes):
        """The public divisor of every silo's message: ``K``, or ``[N]``: the ``K_i`` or the silo sizes
        (also host-side, from the silo sizes: ``ChainFamily.message_sensitivity``)."""
        if self.batch_sizes is not None:
            return jnp.asarray(self.batch_sizes, jnp.float32)
        if self.batch_size is not None:
            return self.batch_size
        return silo_sizes  # full batch: the (public) silo size

    def update(self, batch: Batch, state, ctx: Context):
        x, y, weights, sq = _batch_records(self.problem, batch, ctx.data)
        denominator = self.denominator(ctx.data.sizes)
        if jnp.ndim(denominator) == 1:
            denominator = batch.select(denominator)
        return PerExampleGradients(self.problem.loss, ctx.query, x, y, weights, denominator, self.problem, sq), state


@dataclasses.dataclass(frozen=True)
class ExampleGradients(Stateless):
    """Each silo's per-example gradients of its batch, kept apart (``reduce=False``): the inputs of a
    local randomizer such as P_vec (Cheu et al. 2022, Algorithm 2), which sums them itself."""

    problem: Any

    roles = ("client",)

    def denominator(self, silo_sizes):
        """Every unit is one record's clipped gradient, undivided."""
        return 1.0

    def update(self, batch: Batch, state, ctx: Context):
        x, y, weights, _ = _batch_records(None, batch, ctx.data)
        return PerExampleGradients(self.problem.loss, ctx.query, x, y, weights, 1.0, self.problem,
                                   reduce=False), state


@dataclasses.dataclass(frozen=True)
class LocalSteps(Stateless):
    """The local loop of the local-update families (Local SGD; Lowy & Razaviyayn 2023, App. I): from the server model,
    ``num_steps`` sequential single-record steps per silo, ``w <- Proj_W(w - eta inner(grad f(w, x_j)))`` on the records
    of the batch selection (one per step), the message being the last local iterate.

    ``inner`` is the chain each step's gradient is folded through (ISRL-DP Local SGD: ``ClipPerUnit``
    then ``LocalStepGaussian``), under ``lax.scan``; its states live for the round's local loop
    (``init`` at the loop's start: the privatizer draws a silo's K standard normals at once, as K
    small PRNG calls inside the scan cost ~100 us each on CPU). The accountant reads the inner
    clipper's and privatizer's events (``Parts.role`` looks inside ``inner``)."""

    problem: Any
    num_steps: int
    projection_radius: float | None = None
    lr_field: str = "learning_rate"
    inner: tuple = ()

    roles = ("client",)

    def denominator(self, silo_sizes):
        """Every step's message is one record's clipped gradient, undivided."""
        return 1.0

    def update(self, batch: Batch, state, ctx: Context):
        """The local models ``[M, ...]`` of the computed silos."""
        params, data = ctx.query, ctx.data
        step_ctx = Context(ctx.round, ctx.key, ctx.hparams, batch=batch)
        inner_states = init_all(self.inner, params, step_ctx)  # the loop's states, per computed silo
        # only the K records the steps use ([M, K, ...]): gathering the silos' whole data each round
        # (data.x[rows]) copied M x n_max rows per run for K of them (13 MNIST-shaped lanes: 607 MB a
        # round; 35 rounds 3.07 s before, 1.09 s after)
        xs, ys = batch.records((data.x, data.y))
        closed_form = has_closed_form_clipping(self.problem)
        # GLMs: the clipper takes the step's one record through the problem's closed form (||grad|| =
        # |residual| ||x||, the row norms computed once per round, outside the K steps and shared by
        # every run) instead of autodiff's gradient and its norm: fewer kernels in each sequential step
        sq = self.problem.row_sq_norms(xs) if closed_form else jnp.zeros(ys.shape[:2])

        def one_silo(params, x, y, states, sq, ctx):
            lr = getattr(ctx.hparams, self.lr_field)

            def body(carry, step):
                w, states = carry
                x_j, y_j, sq_j = step
                if closed_form:
                    one = lambda t: t[None, None]  # noqa: E731  (one silo, one record)
                    units = PerExampleGradients(self.problem.loss, w, one(x_j), one(y_j), jnp.ones((1, 1), bool),
                                                problem=self.problem, row_sq_norms=one(sq_j))
                else:
                    grad = jax.tree_util.tree_map(lambda t: t[None], jax.grad(self.problem.loss)(w, x_j, y_j))
                    units = PerUnitVectors(grad, per_silo=True)
                noisy, states = fold(self.inner, units, states, ctx)
                w = jax.tree_util.tree_map(lambda p, g: p - lr * g[0], w, noisy.value)
                return (project_l2_ball(w, self.projection_radius), states), None

            return jax.lax.scan(body, (params, states), (x, y, sq))[0][0]

        models = over_silos_runs_inside(one_silo)(params, xs, ys, inner_states, sq,
                                                  Context(ctx.round, ctx.key, ctx.hparams))
        return models, state


def over_silos_runs_inside(one_silo):
    """``one_silo(params, *per_silo, ctx)`` mapped over the leading (silo) axis of the ``per_silo`` arrays,
    with ``params`` and ``ctx`` shared: ``vmap(one_silo, in_axes=(None, 0, ..., 0, None))``, except that
    when an outer ``vmap`` (the engine's runs axis) batches it, the runs axis goes INSIDE the silo axis.

    Why: a plain ``vmap`` puts the runs axis outermost, so the K sequential local steps work on ``[runs, silos, d]``
    arrays whose shared records ``[silos, d]`` (runs with common random numbers draw the same records) broadcast over
    the leading axis. XLA:CPU runs that step about 2x slower than on ``[silos, runs, d]``
    (``experiments/benchmarks/bench_local_steps.py``). The values are the same operations on the same numbers in another
    layout (XLA may order a reduction differently: float rounding only)."""

    @custom_vmap
    def per_silo(params, *args):
        *silo_args, ctx = args
        return jax.vmap(one_silo, in_axes=(None,) + (0,) * len(silo_args) + (None,))(params, *silo_args, ctx)

    @per_silo.def_vmap
    def runs_inside(axis_size, in_batched, params, *args):
        del axis_size
        b_params, *b_args = in_batched
        runs_axis = lambda flags: jax.tree_util.tree_map(lambda b: 0 if b else None, flags)  # noqa: E731
        # the silo axis of a batched per-silo array sits behind the runs axis
        silo_axis = lambda flags: jax.tree_util.tree_map(lambda b: 1 if b else 0, flags)  # noqa: E731
        *silo_args, ctx = args

        def one_silo_every_run(*one_silo_args):
            return jax.vmap(one_silo, in_axes=(runs_axis(b_params), *map(runs_axis, b_args)))(
                params, *one_silo_args, ctx)

        models = jax.vmap(one_silo_every_run, in_axes=tuple(map(silo_axis, b_args[:-1])))(*silo_args)
        runs_first = jax.tree_util.tree_map(lambda t: jnp.swapaxes(t, 0, 1), models)
        return runs_first, jax.tree_util.tree_map(lambda _: True, runs_first)

    return per_silo


UPDATE_RULES = ("gradient", "local")


@dataclasses.dataclass(frozen=True)
class SubsetUpdate(Stateless):
    """DP-SGD-General's update rule ``A`` on each of the round's ``m`` subsets, all from the same ``w``
    (van Dijk et al., Algorithm 1): the ``m`` units the clipper clips and sums, ``U = sum_h [a_h]_C``.

    ``rule="gradient"``: ``a_h`` is the subset's mean gradient (eq. (4)); with ``s = 1`` the units are the per-example
    gradients (eq. (1): ``PerExampleGradients``, so the clipper takes ghost norms or the problem's closed form).
    ``rule="local"``: ``a_h = (w - w_final) / eta`` over ``s / local_batch_size`` local steps of ``local_optimizer``
    with a fresh optimiser state (eqs. (2), (3)). The divisor here is 1: the public ``m`` divides the NOISY sum
    (``U_bar / m``, the aggregator). Filtering's coins (``batch.info["keep"]``) weight the units."""

    problem: Any
    rule: str = "gradient"
    local_batch_size: int = 1
    local_optimizer: Any = optax.identity()

    roles = ("client",)

    def denominator(self, silo_sizes):
        """1: the privatizer's message is the clipped sum ``U`` itself (sensitivity 2C, the paper's noise
        ``2 C sigma``); the public ``m`` divides the noisy sum in the aggregator."""
        return 1.0

    def update(self, batch: Batch, state, ctx: Context):
        params, data = ctx.query, ctx.data
        rows = batch.rows()
        x, y = data.x[rows[:, None, None], batch.indices], data.y[rows[:, None, None], batch.indices]
        keep = batch.info.get("keep")
        if self.rule == "gradient" and batch.indices.shape[-1] == 1:  # s = 1: individual clipping
            weights = batch.weights[..., 0] if keep is None else batch.weights[..., 0] & keep
            xs, ys = x[:, :, 0], y[:, :, 0]
            sq = self.problem.row_sq_norms(xs) if has_closed_form_clipping(self.problem) else None
            return PerExampleGradients(self.problem.loss, params, xs, ys, weights, 1.0, self.problem, sq), state
        if self.rule == "gradient":
            one = lambda xb, yb, mb: jax.grad(self._mean_loss)(params, xb, yb, mb)  # noqa: E731
            units = jax.vmap(jax.vmap(one))(x, y, batch.weights)
        else:
            lr = ctx.hparams.learning_rate
            units = jax.vmap(jax.vmap(lambda xb, yb: self.local_update(params, xb, yb, lr)))(x, y)
        if batch.indices.shape[1] == 1 and keep is None:  # m = 1: the silo's one unit is its message
            return PerUnitVectors(jax.tree_util.tree_map(lambda t: t[:, 0], units), None, 1.0, per_silo=True), state
        return PerUnitVectors(units, keep, 1.0), state

    def _mean_loss(self, params, x, y, mask):
        losses = jax.vmap(self.problem.loss, in_axes=(None, 0, 0))(params, x, y)
        return jnp.sum(jnp.where(mask, losses, 0.0)) / x.shape[0]

    def local_update(self, params, x, y, learning_rate):
        """eqs. (2)/(3): ``a = sum_j u_j = (w_1 - w_final)/eta`` over local steps ``w_{j+1} = w_j - eta u_j``, ``u_j`` =
        ``local_optimizer`` applied to the micro-batch gradient at ``w_j``; the optimiser state starts fresh."""
        lb = self.local_batch_size
        xs = x.reshape((-1, lb) + x.shape[1:])
        ys = y.reshape((-1, lb) + y.shape[1:])
        ones = jnp.ones((lb,), bool)

        def step(carry, batch):
            w, opt_state, total = carry
            g = jax.grad(self._mean_loss)(w, batch[0], batch[1], ones)
            u, opt_state = self.local_optimizer.update(g, opt_state, w)
            w = optax.apply_updates(w, optax.tree.scale(-learning_rate, u))
            return (w, opt_state, optax.tree.add(total, u)), None

        init = (params, self.local_optimizer.init(params), optax.tree.zeros_like(params))
        # Unrolled: a convolution's gradient inside a loop body misses XLA:CPU's fast kernels
        # (see dpjax.engine.program, round_loop="host"); s / local_batch_size steps are few.
        (_, _, total), _ = jax.lax.scan(step, init, (xs, ys), unroll=True)
        return total
