"""Sampling laws: with/without replacement, Poisson rate, one-pass blocks, and
silo availability (exactly M_r ones, uniform placement)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.primitives import sampling


def _draws(fn, num, seed=0):
    keys = jax.random.split(jax.random.key(seed), num)
    return np.asarray(jax.jit(jax.vmap(fn))(keys))


def _chi2_uniform_ok(counts, alpha=1e-4):
    from scipy import stats

    expected = np.full(len(counts), counts.sum() / len(counts))
    return stats.chisquare(counts, expected).pvalue > alpha


def test_with_replacement_is_uniform_and_stays_in_range():
    size, k = 13, 6
    idx = _draws(lambda key: sampling.sample_with_replacement(key, size, k), 4000)
    assert idx.min() >= 0 and idx.max() < size
    counts = np.bincount(idx.ravel(), minlength=size)
    assert _chi2_uniform_ok(counts)
    # repeats occur (with replacement): P(no repeat in 6 of 13) is about 0.2
    repeats = np.mean([len(set(row)) < k for row in idx])
    assert 0.7 < repeats < 0.9


def test_without_replacement_distinct_uniform_and_never_padding():
    size, n_max, k = 11, 16, 5
    idx = _draws(lambda key: sampling.sample_without_replacement(key, size, n_max, k), 4000)
    assert idx.max() < size, "a padded row was sampled"
    assert all(len(set(row)) == k for row in idx)
    counts = np.bincount(idx.ravel(), minlength=size)
    # inclusion probability K/n for every record
    assert _chi2_uniform_ok(counts)
    np.testing.assert_allclose(counts / len(idx), k / size, atol=5 * np.sqrt((k / size) * (1 - k / size) / len(idx)))


def test_poisson_mask_rate_and_padding():
    size, n_max, rate, cap = 400, 512, 0.05, 60
    def draw(key):
        idx, mask, overflow = sampling.poisson_sample(key, size, n_max, rate, cap)
        return idx, mask, overflow
    keys = jax.random.split(jax.random.key(3), 2000)
    idx, mask, overflow = jax.jit(jax.vmap(draw))(keys)
    idx, mask, overflow = map(np.asarray, (idx, mask, overflow))
    counts = mask.sum(axis=1)
    # count ~ Bin(size, rate): mean within 5 standard errors
    mean, var = size * rate, size * rate * (1 - rate)
    assert abs(counts.mean() - mean) < 5 * np.sqrt(var / len(counts))
    assert abs(counts.var() - var) < 0.2 * var
    assert not overflow.any()
    assert np.all(idx[mask] < size), "padded rows must never be sampled"
    per_record = np.bincount(idx[mask], minlength=size) / len(counts)
    assert np.all(np.abs(per_record - rate) < 5 * np.sqrt(rate * (1 - rate) / len(counts)))


def test_poisson_overflow_is_flagged():
    idx, mask, overflow = sampling.poisson_sample(jax.random.key(0), 100, 100, 0.9, 10)
    assert bool(overflow) and int(mask.sum()) == 10


def test_one_pass_blocks_are_disjoint_and_cover_each_record_once():
    size, n_max, k = 23, 30, 4
    sampler = sampling.OnePass(k)
    perm = sampler.init_silo(jax.random.key(5), size, n_max)
    rounds = size // k
    seen = []
    for r in range(rounds):
        idx, mask, _ = sampler.draw(None, size, n_max, r, perm)
        assert bool(mask.all())
        seen.extend(np.asarray(idx).tolist())
    assert len(seen) == len(set(seen)) == rounds * k
    assert max(seen) < size
    with pytest.raises(ValueError, match="num_rounds"):
        sampler.validate(min_size=size, num_rounds=rounds + 1)


@pytest.mark.parametrize("m", [1, 4, 10])
def test_fixed_availability_exact_count_and_uniform(m):
    n = 10
    av = sampling.FixedAvailability(m)
    masks = _draws(lambda key: av.sample(key, n), 3000)
    assert np.all(masks.sum(axis=1) == m)
    freq = masks.mean(axis=0)
    np.testing.assert_allclose(freq, m / n, atol=5 * np.sqrt((m / n) * (1 - m / n) / 3000) + 1e-12)


def test_random_availability_matches_pmf_and_expected_inverse():
    pmf = (0.0, 0.5, 0.0, 0.5)  # M_r in {2, 4}
    av = sampling.RandomAvailability(pmf)
    masks = _draws(lambda key: av.sample(key, 4), 4000)
    counts = masks.sum(axis=1)
    assert set(np.unique(counts)) == {2, 4}
    assert abs(np.mean(counts == 2) - 0.5) < 5 * np.sqrt(0.25 / 4000)
    empirical_inv = np.mean(1.0 / counts)
    assert abs(empirical_inv - av.expected_inverse(4)) < 5 * np.std(1.0 / counts) / np.sqrt(4000)
    assert av.expected_inverse(4) == pytest.approx(0.5 / 2 + 0.5 / 4)


def test_full_availability():
    assert np.all(np.asarray(sampling.FullAvailability().sample(jax.random.key(0), 7)))


def test_availability_validation():
    with pytest.raises(ValueError, match="num_available"):
        sampling.FixedAvailability(5).validate(num_silos=4)
    with pytest.raises(ValueError, match="num_available"):
        sampling.FixedAvailability(0)
    with pytest.raises(ValueError, match="pmf"):
        sampling.RandomAvailability((0.5, 0.6))
    with pytest.raises(ValueError, match="pmf"):
        sampling.RandomAvailability((0.5, 0.5)).validate(num_silos=3)


def test_sampler_validation():
    with pytest.raises(ValueError, match="batch_size"):
        sampling.WithoutReplacement(0)
    with pytest.raises(ValueError, match="batch_size=20"):
        sampling.WithoutReplacement(20).validate(min_size=10, num_rounds=1)
    with pytest.raises(ValueError, match="sampling"):
        sampling.make_sampler("bootstrap", 3)


@pytest.mark.parametrize("size,n_max,k", [(11, 16, 5), (1238, 1238, 444), (7, 7, 7), (50, 64, 1)])
def test_gather_free_without_replacement_mask_is_a_uniform_k_subset(size, n_max, k):
    masks = _draws(lambda key: sampling.subset_mask_without_replacement(key, size, n_max, k), 2000, seed=4)
    assert np.all(masks.sum(axis=1) == k)
    assert not masks[:, size:].any(), "a padded row was selected"
    freq = masks[:, :size].mean(axis=0)
    p = k / size
    np.testing.assert_allclose(freq, p, atol=5 * np.sqrt(p * (1 - p) / 2000) + 1e-12)
    if size <= 16:  # pairwise inclusion is uniform too (a k-subset, not just right marginals)
        pair = (masks[:, 0] & masks[:, 1]).mean()
        expected = k * (k - 1) / (size * (size - 1))
        assert abs(pair - expected) <= 5 * np.sqrt(expected * (1 - expected) / 2000)


@pytest.mark.parametrize("scheme", ["with-replacement", "without-replacement", "poisson", "one-pass"])
def test_draw_weights_has_the_law_of_draw(scheme):
    size, n_max, k = 20, 24, 4
    sampler = sampling.make_sampler(scheme, k)
    state = sampler.init_silo(jax.random.key(0), size, n_max)
    weights = _draws(lambda key: sampler.draw_weights(key, size, n_max, 0, state)[0], 3000, seed=5)
    assert np.all(weights[:, size:] == 0)
    totals = weights.sum(axis=1)
    if scheme == "poisson":
        assert abs(totals.mean() - k) < 5 * np.sqrt(k * (1 - k / size) / 3000)
    else:
        assert np.all(totals == k)
    if scheme == "one-pass":  # the block of round 0 of a fixed permutation
        assert np.all(weights == weights[0]) and set(np.unique(weights)) == {0.0, 1.0}
    else:
        np.testing.assert_allclose(weights[:, :size].mean(axis=0), k / size, atol=0.03)
