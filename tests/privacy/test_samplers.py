"""The samplers the families run, on a padded silo (7 real rows of 12): the law of every
record's inclusion equals the rate the accountant is given, and padded rows never join.

Both forms a family may call are checked -- ``draw`` (indices, the gather path) and
``draw_weights`` (multiplicity vector, the dense path) -- for every scheme of
``dpjax.primitives.sampling.make_sampler``, plus DP-SGD-General's own ``SubsetBatches.draw`` and the
fixed-size availability that the shuffle accountant's silo-sampling amplification assumes.
Tolerance: exact binomial tests, Bonferroni over the rows, family-wise level ALPHA.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.accounting.schedules import GaussianSchedule
from dpjax.algorithms.dpsgd_general import DpSgdGeneral
from dpjax.engine.chain import DataShape
from dpjax.primitives import sampling

from .pins import ALPHA, check_rate, keys, probe

SIZE, N_MAX, K, DRAWS = 7, 12, 3, 4000


def _counts(fn, draws=DRAWS, seed=0):
    """``fn`` (one key -> per-row multiplicities, ...) over ``draws`` keys, as NumPy arrays."""
    return jax.tree_util.tree_map(np.asarray, jax.jit(jax.vmap(fn))(keys(draws, seed)))


def _from_indices(sampler, round_index=0, state=None):
    def fn(key):
        idx, mask, overflow = sampler.draw(key, jnp.int32(SIZE), N_MAX, round_index,
                                           jnp.zeros((), jnp.int32) if state is None else state)
        return jnp.zeros((N_MAX,), jnp.int32).at[idx].add(mask.astype(jnp.int32)), overflow
    return fn


def _from_weights(sampler):
    def fn(key):
        w, overflow = sampler.draw_weights(key, jnp.int32(SIZE), N_MAX, 0, jnp.zeros((), jnp.int32))
        return w.astype(jnp.int32), overflow
    return fn


def _check_law(counts: np.ndarray, per_row_rate: float, what: str, trials_per_draw: int = 1) -> None:
    assert counts[:, SIZE:].sum() == 0, f"{what}: a padded row was drawn"
    for j in range(SIZE):
        check_rate(counts[:, j].sum(), counts.shape[0] * trials_per_draw, per_row_rate / trials_per_draw,
                   f"{what}: row {j}", alpha=ALPHA / SIZE)


def _schedule(scheme):
    return GaussianSchedule(1.0, 1.0, scheme, SIZE, K, 1)


@pytest.mark.parametrize("form", ["draw", "draw_weights"])
@pytest.mark.parametrize("scheme", ["without-replacement", "poisson", "with-replacement"])
def test_sampler_law_on_a_padded_silo(scheme, form):
    sampler = sampling.make_sampler(scheme, K)
    counts, overflow = _counts(_from_indices(sampler) if form == "draw" else _from_weights(sampler))
    assert not overflow.any()
    q = _schedule(scheme).inclusion_probability  # what the accountant is told: K / n
    if scheme == "with-replacement":  # K i.i.d. uniform draws: multiplicity ~ Bin(K, 1/n)
        _check_law(counts, q, f"{scheme}.{form}", trials_per_draw=K)
        assert np.all(counts.sum(axis=1) == K)
    else:
        assert counts.max() <= 1, f"{scheme}.{form}: a record twice in one batch"
        _check_law(counts, q, f"{scheme}.{form}")
        if scheme == "without-replacement":
            assert np.all(counts.sum(axis=1) == K)
        else:  # Poisson: the batch size is Bin(n, q), not fixed
            assert len(np.unique(counts.sum(axis=1))) > 2


def test_poisson_buffer_on_a_padded_silo_is_the_padded_size_capped():
    """The static buffer never truncates a batch of the padded silo (overflow would void the analysis)."""
    sampler = sampling.make_sampler("poisson", K)
    assert sampler.padded_size(N_MAX) == min(sampling.default_poisson_capacity(K), N_MAX)


def test_one_pass_uses_each_real_record_once_per_pass():
    sampler = sampling.make_sampler("one-pass", K)
    blocks = SIZE // K  # floor(n / K) rounds before the pass is exhausted

    def fn(key):
        state = sampler.init_silo(key, jnp.int32(SIZE), N_MAX)
        per_round = [_from_indices(sampler, r, state)(key)[0] for r in range(blocks)]
        return jnp.stack(per_round)

    counts = _counts(fn)  # [draws, rounds, rows]
    assert counts.sum(axis=1).max() <= 1, "a record used twice in one pass"
    assert np.all(counts.sum(axis=2) == K)
    for r in range(blocks):
        _check_law(counts[:, r], K / SIZE, f"one-pass round {r}")
    assert _schedule("one-pass").passes == 1 and GaussianSchedule(1.0, 1.0, "one-pass", SIZE, K, blocks + 1).passes == 2


@pytest.mark.parametrize("sampling_name", ["shuffle", "subsample", "poisson"])
def test_dpsgd_general_draw_indices_on_a_padded_silo(sampling_name):
    """DP-SGD-General's batch selection (``SubsetBatches.draw``, one silo's round): rate m s / n per
    round (Poisson: the declared q, here not m / n); shuffling walks one permutation, so an epoch never
    repeats a record."""
    m, s, per_epoch = 3, 1, 2
    poisson = sampling_name == "poisson"
    family = DpSgdGeneral(probe(2), per_epoch, s, m, per_epoch, sampling=sampling_name,
                          neighboring="add-remove" if poisson else "replace-one",
                          sampling_rate=0.25 if poisson else None)
    selection = family.parts(DataShape(1, N_MAX)).selection

    def fn(key):
        if sampling_name == "shuffle":
            perms = jax.vmap(lambda e: sampling.valid_first_permutation(jax.random.fold_in(key, e), SIZE, N_MAX))(
                jnp.arange(1)).astype(jnp.int32)
        else:
            perms = jnp.zeros((1,), jnp.int32)
        out = []
        for r in range(per_epoch):
            idx, mask, _ = selection.draw(jax.random.fold_in(key, 100 + r), perms, jnp.int32(SIZE), N_MAX, r)
            out.append(jnp.zeros((N_MAX,), jnp.int32).at[idx.ravel()].add(mask.ravel().astype(jnp.int32)))
        return jnp.stack(out)

    counts = _counts(fn)
    if sampling_name == "shuffle":
        assert counts.sum(axis=1).max() <= 1, "shuffling repeated a record inside an epoch"
    for r in range(per_epoch):
        assert counts[:, r].max() <= 1
        _check_law(counts[:, r], 0.25 if poisson else m * s / SIZE, f"dpsgd-general {sampling_name} round {r}")


def test_fixed_availability_ids_are_a_uniform_m_subset():
    """``sample_ids`` (the M-silo fast path) has the law of ``sample``: each silo w.p. M / N."""
    avail, n_silos = sampling.FixedAvailability(2), 5
    ids = np.asarray(jax.jit(jax.vmap(lambda k: avail.sample_ids(k, n_silos)))(keys(DRAWS)))
    assert np.all(np.diff(ids, axis=1) > 0)
    counts = np.stack([(ids == i).any(axis=1) for i in range(n_silos)], axis=1)
    for i in range(n_silos):
        check_rate(counts[:, i].sum(), DRAWS, 2 / n_silos, f"silo {i}", alpha=ALPHA / n_silos)
