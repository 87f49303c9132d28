"""PRNG key discipline.

Every random draw in dpjax derives from one *run key*:

    run_key --fold_in(r)--> round key --fold_in(stream id)--> stream key --split(N)--> per-silo keys

``fold_in`` by round index (rather than sequential splitting) gives *common
random numbers* across configurations: two runs that differ only in a step
size or noise level see the same availability masks and minibatches, which
makes paired comparisons less noisy and lets ``sigma = 0`` reproduce the
non-private twin exactly.

Stream identifiers are fixed small integers, so that adding a new stream
never changes the keys of the existing ones. ``tests/test_keys.py`` checks that
no two (round, stream, silo) triples ever share a key.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

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


def stream_key(key: jax.Array, stream: str) -> jax.Array:
    """Key of a named stream (see ``STREAMS``) derived from a round or run key."""
    try:
        stream_id = STREAMS[stream]
    except KeyError:
        raise ValueError(f"stream={stream!r} must be one of {tuple(STREAMS)}") from None
    return jax.random.fold_in(key, stream_id)


def run_stream_key(run_key: jax.Array, stream: str) -> jax.Array:
    """Key of a once-per-run stream (e.g. the one-pass permutation)."""
    try:
        stream_id = STREAMS[stream]
    except KeyError:
        raise ValueError(f"stream={stream!r} must be one of {tuple(STREAMS)}") from None
    return jax.random.fold_in(run_key, _RUN_STREAM_BASE - stream_id)


def silo_keys(key: jax.Array, num_silos: int) -> jax.Array:
    """``num_silos`` independent keys, one per silo (silo axis first)."""
    return jax.random.split(key, num_silos)


def run_keys(seed: int, num_runs: int) -> jax.Array:
    """Independent run keys for ``num_runs`` runs of one seed."""
    return jax.random.split(jax.random.key(seed), num_runs)


def key_data(key: jax.Array) -> jnp.ndarray:
    """The raw uint32 words of a (typed) key, for equality checks in tests."""
    return jax.random.key_data(key)
