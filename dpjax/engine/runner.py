"""The compiled loop: rounds in ``lax.scan``, independent runs in ``vmap``.

An *algorithm* is a frozen (hashable) dataclass holding everything static
(problem, shapes, sampling scheme, number of rounds) with four methods::

    init(params, hparams, data, run_key) -> state     # per-run state; carries hparams
    step(state, data, round_key) -> (state, metrics)  # one round, pure
    params(state) -> current iterate
    output_params(state) -> the algorithm's output (e.g. an averaged iterate)

Per-run scalars that a sweep varies (step size, noise std, clip norm) live in
``hparams`` inside the state, so a grid of configurations with the same static
shape is one ``vmap`` over states and keys: one compilation for the whole grid.

Round ``r`` receives ``fold_in(run_key, r)`` (see ``dpjax.keys``); nothing
else is random. After the compiled program returns, the host checks every run
for NaN/inf and for broken sampling assumptions and raises an error naming the
run and the round rather than returning a silently broken result.

``round_loop="host"`` runs the same rounds as one compiled call per round from a
Python loop instead of one ``lax.scan``. Use it for convolutional networks on
XLA:CPU: its convolution canonicalisation pass (``ConvCanonicalization``, which
rewrites a convolution into the NHWC/HWIO layout that its fast Eigen/YNNPACK
kernels need) visits only the entry computation, so the backward-pass
convolutions of a gradient inside a ``scan`` body fall back to the naive
elemental emitter (2-85x slower per convolution on the MNIST CNN; jax-ml/jax#12868). In the
host loop every round is an entry computation.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, keys
from dpjax.engine.silos import SiloData

PyTree = Any
EvalFn = Callable[[PyTree, PyTree], dict]


class NonFiniteError(FloatingPointError):
    """A run produced NaN or inf parameters."""


class SamplingOverflowError(RuntimeError):
    """A Poisson batch exceeded its static buffer, so the batch was truncated."""


@dataclasses.dataclass
class RunResult:
    """Host-side (NumPy) results of one run or of a batch of runs.

    With ``run_many`` every array has a leading runs axis.

    Attributes:
      output: the algorithm's output parameters.
      state: the final algorithm state.
      round_metrics: per-round metrics, arrays ``[..., num_rounds]``.
      eval_metrics: metrics of ``eval_fn`` at ``eval_rounds``, ``[..., num_evals]``.
      eval_rounds: number of completed rounds at each evaluation.
      diverged_round: first round (0-based) whose iterate was not finite, -1 if
        none; only meaningful with ``on_nonfinite="mark"``.
    """

    output: PyTree
    state: PyTree
    round_metrics: dict[str, np.ndarray]
    eval_metrics: dict[str, np.ndarray]
    eval_rounds: np.ndarray
    diverged_round: np.ndarray


def tree_all_finite(tree: PyTree) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(tree)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in leaves]))


def eval_schedule(num_rounds: int, eval_every: int | None) -> np.ndarray:
    """Completed-round counts at which ``eval_fn`` runs (always includes the last)."""
    if eval_every is None:
        return np.array([num_rounds])
    points = list(range(eval_every, num_rounds + 1, eval_every))
    if not points or points[-1] != num_rounds:
        points.append(num_rounds)
    return np.array(points)


def _run_single(algorithm, eval_fn, eval_every, params, hparams, data, eval_data, run_key):
    """One run, traced: returns (state, output, round_metrics, eval_metrics)."""
    state = algorithm.init(params, hparams, data, run_key)

    def one_round(state, r):
        state, metrics = algorithm.step(state, data, keys.round_key(run_key, r))
        metrics = dict(metrics)
        metrics["finite"] = tree_all_finite(algorithm.params(state))
        return state, metrics

    num_rounds = algorithm.num_rounds
    if eval_fn is None:
        state, round_metrics = jax.lax.scan(one_round, state, jnp.arange(num_rounds))
        return state, algorithm.output_params(state), round_metrics, {}

    every = eval_every or num_rounds
    num_chunks, remainder = divmod(num_rounds, every)

    def chunk(state, c):
        state, m = jax.lax.scan(one_round, state, c * every + jnp.arange(every))
        return state, (m, eval_fn(algorithm.output_params(state), eval_data))

    state, (round_metrics, evals) = jax.lax.scan(chunk, state, jnp.arange(num_chunks))
    round_metrics = jax.tree_util.tree_map(lambda a: a.reshape((-1,) + a.shape[2:]), round_metrics)
    if remainder:
        state, tail = jax.lax.scan(one_round, state, num_chunks * every + jnp.arange(remainder))
        last_eval = eval_fn(algorithm.output_params(state), eval_data)
        round_metrics = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), round_metrics, tail)
        evals = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b[None]]), evals, last_eval)
    return state, algorithm.output_params(state), round_metrics, evals


@functools.lru_cache(maxsize=64)
def compiled_runner(algorithm, eval_fn, eval_every, batched: bool, params_axis, data_axis, key_axis=0):
    """The jitted program for an (algorithm, eval) pair; cached so a second
    call with new arrays of the same shapes does not recompile."""
    fn = functools.partial(_run_single, algorithm, eval_fn, eval_every)
    if batched:
        fn = jax.vmap(fn, in_axes=(params_axis, 0, data_axis, data_axis, key_axis))
    return jax.jit(fn)


ROUND_LOOPS = ("scan", "host")


@functools.lru_cache(maxsize=64)
def _host_loop_programs(algorithm, eval_fn, batched: bool, params_axis, data_axis, key_axis=0):
    """``(init, round, output, evaluate)`` jitted separately for ``round_loop="host"``; a round is
    ``_run_single``'s ``one_round`` with the same round key, so only XLA's compilation differs."""

    def init(params, hparams, data, run_key):
        return algorithm.init(params, hparams, data, run_key)

    def one_round(state, data, run_key, r):
        state, metrics = algorithm.step(state, data, keys.round_key(run_key, r))
        metrics = dict(metrics)
        metrics["finite"] = tree_all_finite(algorithm.params(state))
        return state, metrics

    output = algorithm.output_params

    def evaluate(state, eval_data):
        return eval_fn(algorithm.output_params(state), eval_data) if eval_fn is not None else {}

    if batched:
        init = jax.vmap(init, in_axes=(params_axis, 0, data_axis, key_axis))
        one_round = jax.vmap(one_round, in_axes=(0, data_axis, key_axis, None))
        output = jax.vmap(output)
        evaluate = jax.vmap(evaluate, in_axes=(0, data_axis))
    return jax.jit(init), jax.jit(one_round), jax.jit(output), jax.jit(evaluate)


def _run_host_loop(algorithm, eval_fn, eval_every, batched, params_axis, data_axis, key_axis,
                   params, hparams, data, eval_data, run_key):
    """``round_loop="host"``: the rounds of ``_run_single`` from a Python loop (same outputs)."""
    init, one_round, output, evaluate = _host_loop_programs(algorithm, eval_fn, batched, params_axis, data_axis, key_axis)
    state = init(params, hparams, data, run_key)
    eval_points = set(eval_schedule(algorithm.num_rounds, eval_every).tolist()) if eval_fn else set()
    round_metrics, evals = [], []
    for r in range(algorithm.num_rounds):
        state, metrics = one_round(state, data, run_key, jnp.int32(r))
        round_metrics.append(metrics)
        if r + 1 in eval_points:
            evals.append(evaluate(state, eval_data))
    axis = 1 if batched else 0
    stack = lambda *xs: jnp.stack(xs, axis=axis)  # noqa: E731  (rounds / evaluations axis, as scan's)
    round_metrics = jax.tree_util.tree_map(stack, *round_metrics)
    evals = jax.tree_util.tree_map(stack, *evals) if evals else {}
    return state, output(state), round_metrics, evals


def _check_keys(name: str, value, batch_ndim: int) -> None:
    """``value`` is a PRNG key array with ``batch_ndim`` leading axes: typed (``jax.random.key``)
    or raw ``uint32 [..., 2]`` (``jax.random.PRNGKey``)."""
    dtype = getattr(value, "dtype", None)
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == np.uint32 and np.ndim(value) >= 1 and np.shape(value)[-1] == 2
    what = "one key (jax.random.key(seed))" if batch_ndim == 0 else "a batch of keys (e.g. dpjax.keys.run_keys(seed, n))"
    if not (typed or raw):
        shown = value if np.ndim(value) == 0 else f"an array of shape {np.shape(value)} and dtype {dtype}"
        raise ValueError(f"{name}={shown!r} must be a PRNG key array: {what}")
    ndim = np.ndim(value) - (0 if typed else 1)
    if ndim != batch_ndim:
        raise ValueError(f"{name} has {ndim} key axes (shape {np.shape(value)}); expected {what}")


def _check_data(algorithm, data: SiloData, batched: bool) -> None:
    """The algorithm's host-side checks plus the problem's label check (when it has one)."""
    per_trial = [jax.tree_util.tree_map(lambda a: a[i], data) for i in range(data.x.shape[0])] if batched else [data]
    check_labels = getattr(algorithm.problem, "check_labels", None)
    for d in per_trial:
        algorithm.validate(d)
        if check_labels is not None:
            check_labels(np.asarray(d.y)[np.asarray(d.mask)])


def _check_eval_every(algorithm, eval_every):
    if eval_every is not None:
        _validate.check_int("eval_every", eval_every, min_value=1, max_value=algorithm.num_rounds)


def _finish(out, hparams, on_nonfinite: str, batched: bool, eval_rounds: np.ndarray) -> RunResult:
    state, output, round_metrics, evals = jax.device_get(out)
    finite = np.asarray(round_metrics.pop("finite"))
    finite = finite if batched else finite[None]
    first_bad = np.where(finite.all(axis=-1), -1, np.argmin(finite, axis=-1))
    overflow = round_metrics.get("sampling_overflow")
    if overflow is not None:
        overflow = np.asarray(overflow).reshape(finite.shape[0], -1, *np.shape(overflow)[finite.ndim:])
        flat = overflow.reshape(finite.shape[0], finite.shape[1], -1).any(axis=-1)
        if flat.any():
            run, rnd = np.argwhere(flat)[0]
            raise SamplingOverflowError(
                f"run {run}: a Poisson batch overflowed its buffer at round {rnd}; the batch was "
                "truncated and the Poisson privacy analysis does not apply. Increase the sampler's capacity."
            )
    if (first_bad >= 0).any() and on_nonfinite == "raise":
        run = int(np.argmax(first_bad >= 0))
        hp = jax.tree_util.tree_map(lambda a: np.asarray(a)[run] if batched else np.asarray(a), jax.device_get(hparams))
        where = f"run {run}" if batched else "the run"
        raise NonFiniteError(
            f"{where} produced NaN/inf parameters at round {int(first_bad[run])} "
            f"(0-based) with hparams {hp}; lower the step size or check the data. No result was returned."
        )
    return RunResult(
        output=output,
        state=state,
        round_metrics={k: np.asarray(v) for k, v in round_metrics.items()},
        eval_metrics={k: np.asarray(v) for k, v in evals.items()},
        eval_rounds=eval_rounds,
        diverged_round=first_bad if batched else first_bad[0],
    )


def run(
    algorithm,
    data: SiloData,
    hparams: PyTree,
    key: jax.Array,
    *,
    params: PyTree | None = None,
    eval_fn: EvalFn | None = None,
    eval_data: PyTree = None,
    eval_every: int | None = None,
    on_nonfinite: str = "raise",
    round_loop: str = "scan",
) -> RunResult:
    """Runs ``algorithm.num_rounds`` rounds of one configuration.

    Args:
      algorithm: an algorithm object (see module docstring).
      data: the silos' training data.
      hparams: the algorithm's per-run hyperparameters (its ``HParams``).
      key: the run key; every random draw of the run derives from it.
      params: initial parameters (default: ``algorithm.problem.init_params``).
      eval_fn: optional ``eval_fn(output_params, eval_data) -> dict`` of scalars,
        evaluated every ``eval_every`` rounds and after the last round.
      on_nonfinite: ``"raise"`` (default) raises ``NonFiniteError`` naming the
        round; ``"mark"`` returns the result with ``diverged_round`` set.
      round_loop: ``"scan"`` (default: all rounds in one compiled ``lax.scan``) or
        ``"host"`` (one compiled call per round; for CNNs on CPU, see the module
        docstring). Same rounds and keys; float results may differ in the last bits.
    """
    _validate.check_choice("on_nonfinite", on_nonfinite, ("raise", "mark"))
    _validate.check_choice("round_loop", round_loop, ROUND_LOOPS)
    _check_eval_every(algorithm, eval_every)
    _check_keys("key", key, 0)
    _check_data(algorithm, data, batched=False)
    if params is None:
        params = algorithm.problem.init_params(keys.run_stream_key(key, "local"))
    if round_loop == "host":
        out = _run_host_loop(algorithm, eval_fn, eval_every, False, None, None, None,
                             params, hparams, data, eval_data, key)
    else:
        out = compiled_runner(algorithm, eval_fn, eval_every, False, None, None)(params, hparams, data, eval_data, key)
    eval_rounds = eval_schedule(algorithm.num_rounds, eval_every) if eval_fn else np.array([], int)
    return _finish(out, hparams, on_nonfinite, batched=False, eval_rounds=eval_rounds)


def run_many(
    algorithm,
    data: SiloData,
    hparams: PyTree,
    keys_: jax.Array,
    *,
    params: PyTree | None = None,
    params_batched: bool = False,
    data_batched: bool = False,
    eval_fn: EvalFn | None = None,
    eval_data: PyTree = None,
    eval_every: int | None = None,
    on_nonfinite: str = "raise",
    shared_key: bool = False,
    round_loop: str = "scan",
) -> RunResult:
    """Runs a batch of independent configurations as one compiled program.

    ``hparams`` leaves and ``keys_`` carry a leading runs axis of the same
    length. ``data``/``eval_data`` (and ``params``) are shared by all runs
    unless ``data_batched`` (``params_batched``) says they have a runs axis too
    (e.g. one train/test split per trial). Results equal the same runs done one
    by one with ``run`` (tested).

    ``shared_key=True``: ``keys_`` is ONE key used by every run (common random
    numbers: all configurations see the same availability, batches and noise
    draws). The draws are then computed once, not per run, which on a grid of
    step sizes / noise levels over shared data turns per-run matrix-vector
    products into one matrix-matrix product.

    ``round_loop``: as in ``run`` (``"host"``: one compiled call per round for all runs).
    """
    _validate.check_choice("on_nonfinite", on_nonfinite, ("raise", "mark"))
    _validate.check_choice("round_loop", round_loop, ROUND_LOOPS)
    _check_eval_every(algorithm, eval_every)
    _check_keys("keys_ (shared_key=True)" if shared_key else "keys_", keys_, 0 if shared_key else 1)
    num_runs = jax.tree_util.tree_leaves(hparams)[0].shape[0] if shared_key else keys_.shape[0]
    for path, leaf in jax.tree_util.tree_leaves_with_path(hparams):
        if np.shape(leaf)[:1] != (num_runs,):
            raise ValueError(
                f"hparams{jax.tree_util.keystr(path)} has shape {np.shape(leaf)}; "
                f"its leading axis must be the number of runs ({num_runs} keys)"
            )
    _check_data(algorithm, data, batched=data_batched)
    if params is None:
        params = algorithm.problem.init_params(keys.run_stream_key(keys_ if shared_key else keys_[0], "local"))
        params_batched = False
    data_axis = 0 if data_batched else None
    axes = (0 if params_batched else None, data_axis, None if shared_key else 0)
    if round_loop == "host":
        out = _run_host_loop(algorithm, eval_fn, eval_every, True, *axes, params, hparams, data, eval_data, keys_)
    else:
        out = compiled_runner(algorithm, eval_fn, eval_every, True, *axes)(params, hparams, data, eval_data, keys_)
    eval_rounds = eval_schedule(algorithm.num_rounds, eval_every) if eval_fn else np.array([], int)
    return _finish(out, hparams, on_nonfinite, batched=True, eval_rounds=eval_rounds)


def stack_hparams(hparams_list) -> PyTree:
    """Stacks a list of per-run hparams into one batched pytree (runs axis first)."""
    if len(hparams_list) == 0:
        raise ValueError("hparams_list=[] must contain at least one configuration")
    return jax.tree_util.tree_map(lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]), *hparams_list)
