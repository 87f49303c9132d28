"""Inclusion laws of the balls-in-bins, cyclic-Poisson and b-min-separation samplers and their selection part.

Balls-in-bins: every real record in exactly one batch of every epoch (exact, on the gather and the dense path);
bins uniform (binomial z-test). Cyclic Poisson: a record is drawn only in its group's rounds, at rate q (binomial
tests, tolerances from the binomial law). Min-separation: every record exactly once every b rounds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax import keys
from dpjax.auditing.sampling_bins import TwoBinsMutant
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.parts.selection_bins import BinnedBatches
from dpjax.primitives import sampling, sampling_bins as sb

pytestmark = pytest.mark.privacy

# Two-sided z tolerance: P(|Z| > 5) = 5.7e-7 per check, so a correct sampler fails a run with negligible probability.
Z = 5.0


def _epoch_counts(sampler, size, n_max, rounds, seed=0, dense=False):
    """``[rounds, n_max]`` 0/1 (or multiplicity) matrix of which rows each round drew."""
    state = sampler.init_silo(jax.random.key(seed), size, n_max)

    def one(t, k):
        if dense:
            w, _ = sampler.draw_weights(k, size, n_max, t, state)
            return w
        idx, mask, overflow = sampler.draw(k, size, n_max, t, state)
        return jnp.zeros(n_max).at[idx].add(mask.astype(jnp.float32)), overflow

    ks = jax.random.split(jax.random.key(seed + 1), rounds)
    out = jax.jit(jax.vmap(one))(jnp.arange(rounds), ks)
    if dense:
        return np.asarray(out), np.zeros(rounds, bool)
    return np.asarray(out[0]), np.asarray(out[1])


@pytest.mark.parametrize("size,n_max,bins,dense", [(37, 40, 5, False), (40, 40, 8, True), (23, 30, 1, False),
                                                   (50, 64, 7, True)])
def test_balls_in_bins_every_record_exactly_once_per_epoch(size, n_max, bins, dense):
    s = sb.BallsInBins(batch_size=max(1, size // bins), num_bins=bins, capacity=n_max)
    epochs = 6
    counts, overflow = _epoch_counts(s, size, n_max, epochs * bins, dense=dense)
    assert not overflow.any()
    per_epoch = counts.reshape(epochs, bins, n_max).sum(1)
    np.testing.assert_array_equal(per_epoch[:, :size], 1.0)  # each real record exactly once an epoch
    np.testing.assert_array_equal(per_epoch[:, size:], 0.0)  # padding never
    if bins > 1:  # a fresh allocation each epoch: some record changes bin between epochs
        which = counts.reshape(epochs, bins, n_max).argmax(1)[:, :size]
        assert (which[0] != which[1:]).any()


def test_balls_in_bins_bins_are_uniform():
    """Over E epochs and n records, the number of placements in bin t is Binomial(nE, 1/B)."""
    size, bins, epochs = 60, 4, 200
    s = sb.BallsInBins(batch_size=15, num_bins=bins, capacity=size)
    counts, _ = _epoch_counts(s, size, size, epochs * bins, dense=True)
    per_bin = counts.reshape(epochs, bins, size).sum((0, 2))
    trials, p = size * epochs, 1 / bins
    assert np.all(np.abs(per_bin - trials * p) <= Z * np.sqrt(trials * p * (1 - p))), per_bin
    # and a single record's bins over epochs are uniform too (chi-square, alpha 1e-4)
    rec0 = counts.reshape(epochs, bins, size)[:, :, 0].sum(0)
    assert stats.chisquare(rec0).pvalue > 1e-4


def test_balls_in_bins_traced_size_and_bins_read_from_it():
    """With ``num_bins=None`` the silo's (traced) size gives B = size // K; the law holds under jit."""
    s = sampling.make_sampler("balls-in-bins", 5)
    size, n_max = jnp.int32(23), 30  # B = 4
    counts, overflow = _epoch_counts(s, size, n_max, 3 * 4)
    assert not overflow.any()
    np.testing.assert_array_equal(counts.reshape(3, 4, n_max).sum(1)[:, :23], 1.0)


def test_balls_in_bins_overflow_is_flagged_and_capacity_default_is_generous():
    s = sb.BallsInBins(batch_size=10, num_bins=2, capacity=3)  # 20 records in 2 bins: a bin of <= 3 is rare
    _, overflow = _epoch_counts(s, 20, 20, 8)
    assert overflow.any()
    big = sb.BallsInBins(batch_size=100, num_bins=100)
    cap = big.padded_size(10_000)
    # the Bernstein capacity's tail is below 1e-15 (exact binomial tail, scipy)
    assert stats.binom.sf(cap, 10_000, 0.01) <= 1e-15 and cap < 300


def test_mutant_two_bins_is_caught_by_the_once_per_epoch_law():
    """A sampler that puts record 0 in two bins breaks the property the certificate rests on."""
    m = TwoBinsMutant(batch_size=4, num_bins=4, capacity=16)
    counts, _ = _epoch_counts(m, 16, 16, 3 * 4)
    per_epoch = counts.reshape(3, 4, 16).sum(1)
    assert (per_epoch[:, 0] == 2).all() and not (per_epoch == 1).all()


@pytest.mark.parametrize("size,groups,q", [(40, 4, 0.3), (33, 3, 0.6)])
def test_cyclic_poisson_groups_and_rate(size, groups, q):
    n_max, cycles = 40, 300
    s = sb.CyclicPoisson(batch_size=2, num_groups=groups, sampling_rate=q, capacity=n_max)
    group = np.asarray(s.init_silo(jax.random.key(0), size, n_max))
    sizes = np.bincount(group[:size], minlength=groups)
    assert sizes.max() - sizes.min() <= 1 and (group[size:] == groups).all()  # balanced; padding in no group
    counts, overflow = _epoch_counts(s, size, n_max, cycles * groups)
    assert not overflow.any()
    rounds = np.arange(cycles * groups) % groups
    for g in range(groups):  # never drawn outside the group's rounds
        assert counts[rounds != g][:, group == g].sum() == 0
    per_record = counts.sum(0)[:size]  # Binomial(cycles, q) each
    total, trials = per_record.sum(), cycles * size
    assert abs(total - trials * q) <= Z * np.sqrt(trials * q * (1 - q))
    # every record's own count, two-sided binomial test with a Bonferroni-corrected level 1e-6 / size
    lo = stats.binom.ppf(1e-6 / size / 2, cycles, q)
    hi = stats.binom.isf(1e-6 / size / 2, cycles, q)
    assert per_record.min() >= lo and per_record.max() <= hi


def test_cyclic_poisson_undeclared_rate_is_kb_over_n():
    s = sampling.make_sampler("cyclic-poisson", 3)  # b = 1: Poisson at K / n
    assert float(s.inclusion_probability(30)) == pytest.approx(0.1)
    s4 = sb.CyclicPoisson(batch_size=3, num_groups=4)
    assert float(s4.inclusion_probability(60)) == pytest.approx(0.2)  # K b / n


@pytest.mark.parametrize("size,n_max,k,groups", [(40, 40, 8, 5), (37, 40, 8, None), (29, 32, 4, 3)])
def test_min_separation_every_record_exactly_every_b_rounds(size, n_max, k, groups):
    s = sb.MinSeparation(batch_size=k, num_groups=groups)
    b = groups or size // k
    counts, overflow = _epoch_counts(s, size, n_max, 4 * b)
    assert not overflow.any()
    for i in range(size):
        rounds = np.flatnonzero(counts[:, i])
        assert len(rounds) == 4 and np.all(np.diff(rounds) == b)  # separation exactly b
    assert counts[:, size:].sum() == 0


def test_registered_and_refusals():
    for name, cls in (("balls-in-bins", sb.BallsInBins), ("cyclic-poisson", sb.CyclicPoisson),
                      ("min-separation", sb.MinSeparation)):
        assert sampling.SAMPLERS[name] is cls and sampling.make_sampler(name, 4).scheme == name
    with pytest.raises(ValueError, match="num_bins=0"):
        sb.BallsInBins(4, num_bins=0)
    with pytest.raises(ValueError, match="sampling_rate=1.5"):
        sb.CyclicPoisson(4, 2, sampling_rate=1.5)
    with pytest.raises(ValueError, match="scheme='poisson'"):
        BinnedBatches(scheme="poisson", batch_size=4)
    with pytest.raises(ValueError, match="sampling_rate=0.5"):
        BinnedBatches(scheme="balls-in-bins", batch_size=4, sampling_rate=0.5)


def test_part_draws_the_same_law_and_describes_it():
    """``BinnedBatches`` (gather and dense): every record of every silo once an epoch; its event names the scheme."""
    sizes = (24, 17)
    data = SiloData.from_silos([np.ones((n, 1), np.float32) for n in sizes], [np.zeros(n) for n in sizes])
    run_key = keys.run_key(0)
    for dense in (False, True):
        part = BinnedBatches(scheme="balls-in-bins", batch_size=4, num_bins=4, dense=dense)
        state = part.init(None, Context(jnp.int32(0), run_key, None, data))
        step = jax.jit(lambda t, st: part.update(data, st, Context(t, keys.round_key(run_key, t), None, data)))
        counts = np.zeros((2, data.n_max))
        for t in range(8):
            batch, state = step(jnp.int32(t), state)
            if dense:
                counts += np.asarray(batch.weights)
            else:
                for i in range(2):
                    np.add.at(counts[i], np.asarray(batch.indices[i]), np.asarray(batch.weights[i]))
        for i, n in enumerate(sizes):
            np.testing.assert_array_equal(counts[i, :n], 2.0)  # two epochs
            assert counts[i, n:].sum() == 0
    event = part.event(sizes)
    assert event.sampling.value == "balls-in-bins" and event.periods == (4, 4)
