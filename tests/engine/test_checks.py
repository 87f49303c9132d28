"""The one result check (``dpjax.engine.checks``) behind every entry point of the executor.

A stub family fails on purpose at a chosen round of a chosen run (a NaN iterate, or a Poisson
buffer overflow flag), so each error must name exactly that run and that round; a run that does
not fail must come back untouched.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.engine import NonFiniteError, SamplingOverflowError, SiloData, run, run_grid, run_many
from dpjax.engine.checks import diverged


class _Problem:
    def init_params(self, key):
        return jnp.zeros(2)


@dataclasses.dataclass(frozen=True)
class Faulty:
    """Adds 0.1 per round; goes NaN at round ``hp["nan_at"]`` and flags an overflow at round
    ``hp["overflow_at"]`` (-1: never)."""

    problem: Any
    num_rounds: int = 5

    def validate(self, data):
        pass

    def init(self, params, hparams, data, run_key):
        return params, hparams, jnp.int32(0)

    def step(self, state, data, key):
        params, hp, r = state
        params = jnp.where(r == hp["nan_at"], jnp.nan, params + 0.1)
        return (params, hp, r + 1), {"sampling_overflow": r == hp["overflow_at"]}

    def params(self, state):
        return state[0]

    def output_params(self, state):
        return state[0]


ALG = Faulty(_Problem())
DATA = SiloData.from_silos([np.zeros((4, 2), np.float32)], [np.zeros(4, np.float32)])


def _hp(nan_at, overflow_at):
    return {"nan_at": jnp.asarray(nan_at, jnp.int32), "overflow_at": jnp.asarray(overflow_at, jnp.int32)}


def test_run_names_the_round():
    with pytest.raises(NonFiniteError, match=r"the run .* round 2 \(0-based\)"):
        run(ALG, DATA, _hp(2, -1), jax.random.key(0))
    assert run(ALG, DATA, _hp(2, -1), jax.random.key(0), on_nonfinite="mark").diverged_round == 2
    with pytest.raises(SamplingOverflowError, match="the run .*overflowed its buffer at round 3"):
        run(ALG, DATA, _hp(-1, 3), jax.random.key(0), on_nonfinite="mark")
    ok = run(ALG, DATA, _hp(-1, -1), jax.random.key(0))
    np.testing.assert_allclose(ok.output, [0.5, 0.5], rtol=1e-6)
    assert ok.diverged_round == -1


@pytest.mark.parametrize("round_loop", ["scan", "host"])
def test_batched_entry_points_name_the_run_and_round(round_loop):
    keys_ = jax.random.split(jax.random.key(1), 3)
    failing = _hp([-1, 3, -1], [-1, -1, 1])
    with pytest.raises(SamplingOverflowError, match=r"^run 2\b.*at round 1;"):
        run_many(ALG, DATA, failing, keys_, on_nonfinite="mark", round_loop=round_loop)
    for chunk_size in (1, 3):  # the failing run alone in its chunk, or in a chunk with others
        with pytest.raises(SamplingOverflowError, match=r"^run 2\b.*at round 1;"):
            run_grid(ALG, DATA, failing, keys_, chunk_size=chunk_size, common_random_numbers=False,
                     round_loop=round_loop)
    nan_only = _hp([-1, 3, 4], [-1, -1, -1])
    with pytest.raises(NonFiniteError, match=r"^run 1 .* round 3 \(0-based\)"):
        run_many(ALG, DATA, nan_only, keys_, round_loop=round_loop)
    with pytest.raises(NonFiniteError, match=r"^run 1 .* round 3 \(0-based\)"):
        run_grid(ALG, DATA, nan_only, keys_, chunk_size=2, common_random_numbers=False, on_nonfinite="raise",
                 round_loop=round_loop)
    marked = run_grid(ALG, DATA, nan_only, keys_, chunk_size=2, round_loop=round_loop)
    np.testing.assert_array_equal(marked.diverged_round, [-1, 3, 4])
    np.testing.assert_array_equal(run_many(ALG, DATA, nan_only, keys_, on_nonfinite="mark",
                                           round_loop=round_loop).diverged_round, [-1, 3, 4])


def test_divergence_rule():
    bad = diverged(np.array([-1, 2, -1, -1, -1]), np.array([1.0, 1.0, np.nan, np.inf, 5.0]), threshold=4.0)
    np.testing.assert_array_equal(bad, [False, True, True, True, True])
    np.testing.assert_array_equal(diverged(np.array([-1, 0])), [False, True])


def test_from_silos_refuses_1d_features_and_truncating_dtypes():
    """1-d features per silo (records or features?) and dtype=int32 over float features (silently truncated) are
    refused, naming the argument; integral floats cast exactly and stay accepted."""
    import numpy as np
    import pytest
    from dpjax.engine.silos import SiloData

    y = [np.zeros(4, np.float32)]
    with pytest.raises(ValueError, match=r"xs\[0\] has shape \(4,\); features need a record axis"):
        SiloData.from_silos([np.arange(4.0)], y)
    with pytest.raises(ValueError, match=r"dtype=int32 would truncate the float values of xs\[0\] \(e.g. 0\.5\)"):
        SiloData.from_silos([np.full((4, 2), 0.5)], y, dtype=np.int32)
    with pytest.raises(ValueError, match=r"label_dtype=int32 would truncate the float values of ys\[0\]"):
        SiloData.from_silos([np.ones((4, 2))], [np.full(4, 0.25)], label_dtype=np.int32)
    data = SiloData.from_silos([np.full((4, 2), 3.0)], y, dtype=np.int32)
    assert int(data.x[0, 0, 0]) == 3
