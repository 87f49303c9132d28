"""Truncated Poisson at the edges (issue #39's battery): silent accepts and raw errors, now refusals naming the
argument and its value."""

import jax
import pytest

from dpjax.accounting import truncated_poisson as tp
from dpjax.primitives.sampling_truncated import TruncatedPoisson, default_capacity, truncated_poisson_sample

pytestmark = pytest.mark.privacy


def test_report_refuses_a_capacity_above_the_data_set_size():
    # capacity 5000 > n = 1000 gave a report (epsilon 7.05): n and B swapped, most likely
    with pytest.raises(ValueError, match=r"capacity=5000 must be <= 1000"):
        tp.truncated_poisson_report(1.0, 0.1, 1000, 5000, 100, 1e-5)
    with pytest.raises(ValueError, match=r"capacity=1001 must be <= 1000"):
        tp.truncation_probability(1000, 0.1, 1001)
    # B = n is still a capacity: Pr[Bin(n + 1, q) > n] = q^(n + 1) = 1e-1001 (0 in float64)
    assert 0.0 <= tp.truncation_probability(1000, 0.1, 1000) < 1e-300


def test_sampler_refuses_a_capacity_below_the_expected_batch():
    with pytest.raises(ValueError, match=r"capacity=3 must be >= batch_size=10"):
        TruncatedPoisson(10, 0.1, 3)
    assert TruncatedPoisson(10, 0.1, 10).capacity == 10


def test_sample_refuses_a_size_above_n_max():
    # size 20 of n_max 10 drew rows as if all 10 padded rows were real
    with pytest.raises(ValueError, match=r"size=20 must be <= 10"):
        truncated_poisson_sample(jax.random.key(0), 20, 10, 0.5, 5)
    with pytest.raises(ValueError, match=r"size=-1 must be >= 0"):
        truncated_poisson_sample(jax.random.key(0), -1, 10, 0.5, 5)
    # a traced size is the caller's contract (the engine's silo sizes under vmap)
    idx, mask, count = jax.jit(lambda s: truncated_poisson_sample(jax.random.key(0), s, 10, 0.5, 5))(10)
    assert idx.shape == (5,) and int(count) <= 10


@pytest.mark.parametrize("args, needle", [
    ((-1.0, 10), r"expected_batch_size=-1.0 must be > 0"),       # was: math domain error
    ((0.0, 10), r"expected_batch_size=0.0 must be > 0"),
    ((10.0, 10, 0.0), r"tail=0.0 must be in the open interval \(0, 1\)"),  # was: OverflowError
    ((10.0, 10, 2.0), r"tail=2.0 must be in the open interval \(0, 1\)"),  # was: 14
    ((10.0, 10, 1.0), r"tail=1.0 must be in the open interval"),
    ((10.0, -5), r"num_rounds=-5 must be >= 1"),                  # was: 34
    ((10.0, 2.5), r"num_rounds=2.5 must be an integer"),
])
def test_default_capacity_refuses_bad_arguments(args, needle):
    with pytest.raises(ValueError, match=needle):
        default_capacity(*args)


def test_default_capacity_is_the_normal_quantile_rule():
    from scipy import stats

    # E + z sqrt(E) + 1, z the normal quantile of tail / R, rounded up: computed here from its definition
    e, r, tail = 100.0, 1000, 1e-12
    z = stats.norm.isf(tail / r)
    want = int(-(-(e + z * e ** 0.5) // 1)) + 1
    assert default_capacity(e, r, tail) == want
