"""Truncated Poisson sampling (Chua et al., NeurIPS 2024): the inclusion law (exact binomial test), the batch law,
and its certificate's truncation delta (dpjax.accounting.truncated_poisson) against the binomial tail."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import truncated_poisson as tp
from dpjax.primitives.sampling_truncated import TruncatedPoisson, truncated_poisson_sample

pytestmark = pytest.mark.privacy

N, Q, B, DRAWS = 50, 0.2, 12, 20_000  # Pr[Bin(50, 0.2) > 12] ~ 0.1: truncation is frequent


@pytest.fixture(scope="module")
def draws():
    keys = jax.random.split(jax.random.PRNGKey(0), DRAWS)
    idx, mask, count = jax.vmap(lambda k: truncated_poisson_sample(k, N, N + 5, Q, B))(keys)
    return np.asarray(idx), np.asarray(mask), np.asarray(count)


def test_inclusion_probability_formula_is_exchangeability():
    # by symmetry each of the n records is in the batch w.p. E[min(Bin(n, q), B)] / n
    k = np.arange(N + 1)
    expected = float(np.sum(np.minimum(k, B) * stats.binom.pmf(k, N, Q))) / N
    assert TruncatedPoisson(10, Q, B).inclusion_probability(N) == pytest.approx(expected, rel=1e-12)


def test_inclusion_passes_an_exact_binomial_test(draws):
    idx, mask, _ = draws
    pi = TruncatedPoisson(10, Q, B).inclusion_probability(N)
    for record in (0, 17, N - 1):
        hits = int(np.sum((idx == record) & mask))
        # the record's inclusions over independent draws are Binomial(DRAWS, pi): exact two-sided test at 1e-4
        assert stats.binomtest(hits, DRAWS, pi).pvalue > 1e-4, (record, hits / DRAWS, pi)
    # padding rows (>= N) are never drawn; a batch never repeats a record
    assert not np.any((idx >= N) & mask)
    assert all(len(set(r[m])) == int(m.sum()) for r, m in zip(idx[:500], mask[:500]))


def test_batch_size_is_the_truncated_binomial(draws):
    _, mask, count = draws
    size = mask.sum(axis=1)
    assert np.array_equal(size, np.minimum(count, B))
    # Pr[truncated] = Pr[Bin(n, q) > B]: exact binomial test on the number of truncated draws
    assert stats.binomtest(int(np.sum(count > B)), DRAWS, float(stats.binom.sf(B, N, Q))).pvalue > 1e-4


def test_sampler_contract():
    s = TruncatedPoisson(10, Q, B)
    idx, mask, overflow = s.draw(jax.random.PRNGKey(1), N, N, 0, s.init_silo(None, N, N))
    assert idx.shape == (B,) and mask.shape == (B,) and idx.dtype == jnp.int32 and not bool(overflow)
    w, _ = s.draw_weights(jax.random.PRNGKey(1), N, N, 0, None)
    assert float(w.sum()) == float(mask.sum()) and s.scheme == "truncated-poisson"
    with pytest.raises(ValueError, match="capacity"):
        s.validate(B - 1, 10)


def _tail(n, q, b):
    # Pr[Bin(n, q) > b] summed from the pmf, each term exp(log C(n, k) + k log q + (n - k) log(1 - q)) with
    # log-gamma binomials (independent of scipy; exact integer binomials overflow a float at n = 60000)
    def log_pmf(k):
        return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                + k * math.log(q) + (n - k) * math.log1p(-q))
    return math.fsum(math.exp(log_pmf(k)) for k in range(b + 1, n + 1))


@pytest.mark.parametrize("n,q,b,r,eps", [(1000, 0.01, 25, 100, 1.0), (60000, 256 / 60000, 330, 2000, 2.0)])
def test_truncation_delta_is_the_binomial_tail(n, q, b, r, eps):
    want = (1 + math.exp(eps)) * r * stats.binom.sf(b, n + 1, q)
    assert tp.truncation_delta(n, q, b, r, eps) == pytest.approx(want, rel=1e-12)
    assert tp.truncation_probability(n, q, b) == pytest.approx(_tail(n + 1, q, b), rel=1e-9)


def test_certificate_charges_the_truncation():
    import dp_accounting as dpa

    n, q, b, r, z, d = 10_000, 0.01, 168, 500, 1.0, 1e-5  # 500 Pr[Bin(10001, .01) > 168] = 8.3e-8
    rep = tp.truncated_poisson_report(z, q, n, b, r, d)
    text = " ".join(rep.notes)
    assert "truncation" in text and rep.sampling == "truncated-poisson"
    acc = dpa.pld.PLDAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), r))
    trunc = tp.truncation_delta(n, q, b, r, rep.epsilon)
    assert trunc > 1e-8  # this capacity's truncation mass is not negligible at delta = 1e-5
    assert acc.get_delta(rep.epsilon) + trunc <= d * (1 + 1e-9)  # both terms fit in delta
    assert rep.epsilon > acc.get_epsilon(d)  # and charging it moved epsilon up
    with pytest.raises(ValueError, match="capacity"):
        tp.truncated_poisson_report(z, q, n, 105, r, d)  # truncation alone exceeds delta
