"""PRNG key discipline.

Every random draw in dpjax derives from one *run key* (``run_key(seed, *path)``: the seed's key folded in by the run's
position in its experiment, e.g. trial and repetition):

    run_key --fold_in(r)--> round key --fold_in(stream id)--> stream key --split(N)--> per-silo keys

``fold_in`` by round index (rather than sequential splitting) gives *common random numbers* across configurations: two
runs that differ only in a step size or noise level see the same availability masks and minibatches, which makes paired
comparisons less noisy and lets ``sigma = 0`` reproduce the non-private twin exactly.

Stream identifiers are fixed small integers, so that adding a new stream never changes the keys of the existing ones.
``tests/test_keys.py`` checks that no two (round, stream, silo) triples ever share a key.
"""

from __future__ import annotations

import contextlib
import contextvars

import jax
import jax.numpy as jnp

from dpjax import _validate

# Named streams inside a round. Never renumber: results must stay bit-identical.
STREAMS = {
    "availability": 1,
    "sampling": 2,
    "noise": 3,
    "permutation": 4,
    "shuffle": 5,
    "rounding": 6,
    "local": 7,
    "output": 8,
    "server_noise": 9,
}

# Streams used once per run (not per round) are folded in with an offset that
# no round index reaches (2**31 - 1 - id), so that they cannot collide with a
# round key.
_RUN_STREAM_BASE = 2**31 - 1


def round_key(run_key: jax.Array, round_index) -> jax.Array:
    """Key of round ``round_index`` (an int or traced int32 scalar)."""
    return jax.random.fold_in(run_key, round_index)


def _stream_id(stream: str) -> int:
    try:
        return STREAMS[stream]
    except KeyError:
        raise ValueError(f"stream={stream!r} must be one of {tuple(STREAMS)}") from None


def stream_key(key: jax.Array, stream: str) -> jax.Array:
    """Key of a named stream (see ``STREAMS``) derived from a round or run key."""
    return jax.random.fold_in(key, _stream_id(stream))


def run_stream_key(run_key: jax.Array, stream: str) -> jax.Array:
    """Key of a once-per-run stream (e.g. the one-pass permutation)."""
    return jax.random.fold_in(run_key, _RUN_STREAM_BASE - _stream_id(stream))


# (total silos, first silo) while one block of a run's silos is traced (``silo_window``)
_SILO_WINDOW: contextvars.ContextVar = contextvars.ContextVar("dpjax_silo_window", default=None)


def silo_keys(key: jax.Array, num_silos: int) -> jax.Array:
    """``num_silos`` independent keys, one per silo (silo axis first).

    Inside ``silo_window(total, first)``: the keys of silos ``first .. first + num_silos - 1`` of the
    ``total``-way split, so a block of silos draws exactly what those silos draw in the whole run."""
    return over_silos(lambda n: jax.random.split(key, n), num_silos)


def over_silos(draw, num_silos: int) -> jax.Array:
    """``draw(num_silos)``, a draw with one row per silo from ONE key (e.g. the availability mask); inside
    ``silo_window(total, first)`` the block's rows of ``draw(total)``, the values those silos get in the whole run."""
    window = _SILO_WINDOW.get()
    if window is None:
        return draw(num_silos)
    total, first = window
    return jax.lax.dynamic_slice_in_dim(draw(total), first, num_silos)


@contextlib.contextmanager
def silo_window(total: int, first):
    """While a block of a run's silos is traced (``dpjax.engine.silo_blocks``): ``silo_keys`` returns the
    block's slice of the ``total`` silos' keys, starting at silo ``first`` (an int or a traced index)."""
    token = _SILO_WINDOW.set((int(total), first))
    try:
        yield
    finally:
        _SILO_WINDOW.reset(token)


def run_key(seed, *path: int) -> jax.Array:
    """The key of one run: ``jax.random.key(seed)`` (or ``seed`` itself if it is already a key) folded in by each index
    of ``path`` in turn.

    The one run-key convention of every driver: the path names where the run sits in its experiment, outermost first,
    e.g. ``(trial, repetition)`` in a sweep or ``(trial, setting, family, repetition)`` in the ISRL figures. Runs that
    share a path prefix and differ only in hyperparameters get the same key (common random numbers);
    ``run_key(run_key(s, a), b) == run_key(s, a, b)``, so a driver may hand a prefix key to a sub-driver.
    """
    if _is_seed(seed) and _validate.concrete_scalar(seed) is not None:
        _validate.check_seed("seed", _validate.concrete_scalar(seed))  # jax keeps 32 bits: 2**32 would repeat 0
    key = jax.random.key(seed) if _is_seed(seed) else seed
    for index in path:
        key = jax.random.fold_in(key, index)
    return key


def run_keys(seed, num_runs: int, *path: int) -> jax.Array:
    """``num_runs`` run keys ``run_key(seed, *path, i)``, ``i = 0 .. num_runs - 1`` (leading axis)."""
    prefix = run_key(seed, *path)
    return jax.vmap(lambda i: jax.random.fold_in(prefix, i))(jnp.arange(num_runs, dtype=jnp.uint32))


def _is_seed(seed) -> bool:
    return not (isinstance(seed, jax.Array) and jnp.issubdtype(seed.dtype, jax.dtypes.prng_key))


def key_data(key: jax.Array) -> jnp.ndarray:
    """The raw uint32 words of a (typed) key, for equality checks in tests."""
    return jax.random.key_data(key)


def check_key(name: str, value, batch_ndim: int = 0) -> None:
    """``value`` is a PRNG key array with ``batch_ndim`` leading axes: typed (``jax.random.key``) or raw
    ``uint32 [..., 2]`` (``jax.random.PRNGKey``); a ``ValueError`` naming ``name`` otherwise (an int seed passed where
    a key belongs gets this, not jax's message about key data)."""
    dtype = getattr(value, "dtype", None)
    typed = dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and jnp.ndim(value) >= 1 and jnp.shape(value)[-1] == 2
    what = "one key (jax.random.key(seed))" if batch_ndim == 0 else "a batch of keys (e.g. dpjax.keys.run_keys(seed, n))"
    if not (typed or raw):
        shown = value if jnp.ndim(value) == 0 and dtype is None else f"an array of shape {jnp.shape(value)} and dtype {dtype}"
        raise ValueError(f"{name}={shown!r} must be a PRNG key array: {what}")
    ndim = jnp.ndim(value) - (0 if typed else 1)
    if ndim != batch_ndim:
        raise ValueError(f"{name} has {ndim} key axes (shape {jnp.shape(value)}); expected {what}")
