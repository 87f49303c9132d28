"""Key discipline: no (round, stream, silo) key is ever used twice."""

import pytest
import itertools

import jax
import numpy as np

from dpjax import keys


def _words(key):
    return tuple(np.asarray(keys.key_data(key)).ravel().tolist())


def test_round_stream_silo_keys_are_all_distinct():
    run_key = jax.random.key(42)
    seen = {}
    num_rounds, num_silos = 40, 25
    for r in range(num_rounds):
        rk = keys.round_key(run_key, r)
        for stream in keys.STREAMS:
            sk = keys.stream_key(rk, stream)
            seen.setdefault(_words(sk), []).append((r, stream))
            for i, silo in enumerate(keys.silo_keys(sk, num_silos)):
                seen.setdefault(_words(silo), []).append((r, stream, i))
    for stream in keys.STREAMS:
        run_level = keys.run_stream_key(run_key, stream)
        seen.setdefault(_words(run_level), []).append(("run", stream))
        for i, silo in enumerate(keys.silo_keys(run_level, num_silos)):
            seen.setdefault(_words(silo), []).append(("run", stream, i))
    dupes = {k: v for k, v in seen.items() if len(v) > 1}
    assert not dupes, f"keys reused: {list(dupes.values())[:3]}"
    assert len(seen) == num_rounds * len(keys.STREAMS) * (num_silos + 1) + len(keys.STREAMS) * (num_silos + 1)


def test_run_keys_are_distinct_across_runs_and_seeds():
    words = [_words(k) for seed in range(3) for k in keys.run_keys(seed, 10)]
    assert len(set(words)) == len(words)


def test_run_key_is_the_seed_key_folded_by_the_path():
    # the convention every driver uses (sweep: (trial, repetition); ISRL figures: (trial, setting,
    # family, repetition)); a prefix key handed to a sub-driver gives the same keys
    seed, path = 7, (3, 25012, 1, 2)
    chain = jax.random.key(seed)
    for i in path:
        chain = jax.random.fold_in(chain, i)
    assert _words(keys.run_key(seed, *path)) == _words(chain)
    assert _words(keys.run_key(keys.run_key(seed, *path[:2]), *path[2:])) == _words(chain)
    batch = keys.run_keys(seed, 4, *path[:3])
    assert [_words(k) for k in batch] == [_words(keys.run_key(seed, *path[:3], r)) for r in range(4)]


def test_stream_ids_are_unique_and_unknown_stream_rejected():
    assert len(set(keys.STREAMS.values())) == len(keys.STREAMS)
    import pytest

    with pytest.raises(ValueError, match="stream"):
        keys.stream_key(jax.random.key(0), "nosie")


@pytest.mark.slow
def test_per_silo_noise_is_independent_across_silos_and_rounds():
    # The messages' noise of different silos/rounds must be uncorrelated draws.
    import jax.numpy as jnp

    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    from dpjax.engine.roles import Batch, Context, Sensitive
    from dpjax.parts import GaussianNoise

    num_silos, dim = 8, 4000
    zeros = Sensitive(jnp.zeros((num_silos, dim)), jnp.float32(0.5))  # replace-one: sensitivity 1
    every = Batch(None, jnp.ones((num_silos,), bool), None, jnp.ones((num_silos, 1)), jnp.zeros((num_silos,), bool),
                  num_silos)
    run_key = jax.random.key(0)
    hparams = MbSgdHParams.create(0.1, noise_multiplier=1.0)

    def noise_of(r):  # the silos' noise of round r, as the per-silo privatizer part draws it
        ctx = Context(jnp.int32(r), keys.round_key(run_key, r), hparams, batch=every)
        return GaussianNoise().update(zeros, (), ctx)[0].value

    draws = [noise_of(r) for r in range(3)]
    flat = np.concatenate([np.asarray(d) for d in draws])  # [3*8, dim]
    corr = np.corrcoef(flat)
    off_diag = corr[~np.eye(len(corr), dtype=bool)]
    assert np.max(np.abs(off_diag)) < 5 / np.sqrt(dim)
    for a, b in itertools.combinations(range(len(flat)), 2):
        assert not np.array_equal(flat[a], flat[b])
