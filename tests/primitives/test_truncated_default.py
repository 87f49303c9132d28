"""Truncated Poisson as DP-SGD's default Poisson selection (issue #41, item 3; dpjax.accounting.truncated_poisson's
module docstring): the cut batch's inclusion law (exact binomial test), the bit-for-bit coupling with the untruncated
batch, the capacity rule, the certificate's truncation delta, and the refusals."""

import math

import jax
import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import truncated_poisson as tp
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.engine.silos import SiloData
from dpjax.parts.selection import SubsetBatches
from dpjax.primitives.sampling import poisson_sample
from dpjax.primitives.sampling_truncated import TruncatedPoisson
from dpjax.problems import LinearRegression

pytestmark = pytest.mark.privacy

N, Q, B, DRAWS = 50, 0.2, 12, 20_000  # Pr[Bin(50, 0.2) > 12] ~ 0.1: the cut is frequent
P = LinearRegression(3)
HP = DpSgdHParams.create(0.5, 1.1, 0.6)


@pytest.fixture(scope="module")
def draws():
    keys = jax.random.split(jax.random.PRNGKey(3), DRAWS)
    cut = jax.jit(jax.vmap(lambda k: poisson_sample(k, N, N + 4, Q, B, truncate=True)))(keys)
    full = jax.jit(jax.vmap(lambda k: poisson_sample(k, N, N + 4, Q, N + 4)))(keys)
    return tuple(np.asarray(a) for a in cut), tuple(np.asarray(a) for a in full)


def test_cut_batch_inclusion_passes_an_exact_binomial_test(draws):
    (idx, mask, overflow), _ = draws
    # every real record is kept w.p. E[min(Bin(n, q), B)] / n (equal marginals: the cyclic start is uniform)
    k = np.arange(N + 1)
    pi = float(np.sum(np.minimum(k, B) * stats.binom.pmf(k, N, Q))) / N
    assert pi < Q * 0.99  # the cut is visible in the law, so the test below can tell a wrong rule
    for record in (0, 1, 24, N - 1):
        hits = int(np.sum((idx == record) & mask))
        assert stats.binomtest(hits, DRAWS, pi).pvalue > 1e-4, (record, hits / DRAWS, pi)
    assert not np.any((idx >= N) & mask) and not overflow.any()  # padding never drawn; a cut is no overflow
    assert all(len(set(r[m])) == int(m.sum()) for r, m in zip(idx[:500], mask[:500]))


def test_cut_batch_is_the_poisson_batch_whenever_nothing_is_cut(draws):
    (idx, mask, _), (idx_full, mask_full, _) = draws
    size_full = mask_full.sum(axis=1)
    assert np.array_equal(mask.sum(axis=1), np.minimum(size_full, B))
    small = size_full <= B
    assert small.sum() > DRAWS // 2 and (~small).sum() > DRAWS // 20
    same = [set(r[m]) == set(rf[mf]) for r, m, rf, mf in zip(idx[small], mask[small], idx_full[small], mask_full[small])]
    assert all(same)
    # a cut batch is a subset of its Poisson batch
    for r, m, rf, mf in zip(idx[~small][:200], mask[~small][:200], idx_full[~small][:200], mask_full[~small][:200]):
        assert set(r[m]) <= set(rf[mf])


def _capacity(n, q, r, mass=1e-18):
    """Independent linear search for the smallest B with R Pr[Bin(n + 1, q) > B] <= mass."""
    b = int(q * (n + 1))
    while r * stats.binom.sf(b, n + 1, q) > mass:
        b += 1
    return b


@pytest.mark.parametrize("n, q, r", [(60_000, 1 / 240, 480), (1_000, 0.05, 100), (200, 0.1, 30)])
def test_capacity_is_the_smallest_meeting_the_mass(n, q, r):
    b = tp.truncated_capacity(n, q, r)
    assert b == _capacity(n, q, r)
    assert r * stats.binom.sf(b, n + 1, q) <= tp.TRUNCATION_MASS < r * stats.binom.sf(b - 1, n + 1, q)
    # large (n > 2B): the buffer is B rows; the per-silo charge is <= 1e-3 delta at delta = 1e-8, eps = 16
    assert tp.selection_capacity(n, q, r) == b < n / 2
    assert (1 + math.exp(16)) * tp.TRUNCATION_MASS <= 1e-3 * 1e-8


def test_small_data_sets_hold_every_row_and_charge_nothing():
    # n = 60, q = 0.1, R = 50: B = 35 > n / 2, so the buffer holds all rows: exact Poisson, no charge, a DpEvent
    assert tp.selection_capacity(60, 0.1, 50) == 60 and tp.run_truncation_mass([40, 60], 0.1, 50) == 0.0
    fam = DpSgd(P, 50, 4, sampling_rate=0.1)
    spec, old = fam.privacy([40, 60], HP), DpSgd(P, 50, 4, sampling_rate=0.1, poisson_selection="buffered").privacy(
        [40, 60], HP)
    assert spec.epsilon(1e-5).epsilon == old.epsilon(1e-5).epsilon and spec.dp_event() == old.dp_event()


def test_certificate_charges_the_truncation_delta():
    sizes, q, r, delta = (5_000, 4_000), 0.01, 200, 1e-6
    fam = DpSgd(P, r, 50, sampling_rate=q)
    rep = fam.privacy(sizes, HP).epsilon(delta, "rdp")
    base = DpSgd(P, r, 50, sampling_rate=q, poisson_selection="buffered").privacy(sizes, HP)
    # eta = R sum_i Pr[Bin(n_i + 1, q) > B_-], B_- the capacity at n_max - 1 (independent search)
    b_low = _capacity(max(sizes) - 1, q, r)
    eta = r * sum(stats.binom.sf(b_low, n + 1, q) for n in sizes)
    charge = (1 + math.exp(base.epsilon(delta / 2, "rdp").epsilon)) * eta
    assert 0 < charge < 1e-9 * delta
    assert rep.sampling == "truncated-poisson" and rep.delta == delta
    assert rep.epsilon == base.epsilon(delta - charge, "rdp").epsilon >= base.epsilon(delta, "rdp").epsilon
    text = " ".join(rep.notes)
    assert f"B = {_capacity(max(sizes), q, r)} rows" in text and f"{eta:.3g}" in text and "charged to delta" in text


def test_a_large_truncated_run_is_refused_only_when_the_charge_exceeds_half_delta():
    spec = DpSgd(P, 200, 50, sampling_rate=0.01).privacy((5_000,), HP)
    heavy = tp.TruncatedPoissonPrivacy(spec.base, "truncated-poisson", 1e-6, "")
    with pytest.raises(ValueError, match=r"delta=1e-06: truncated Poisson's truncation probability 1e-06 over the run"):
        heavy.epsilon(1e-6)
    with pytest.raises(ValueError, match="poisson_selection='buffered'"):
        heavy.calibrate(1.0, 1e-6)


def test_the_selection_part_draws_at_the_capacity_and_never_overflows():
    sel = SubsetBatches("poisson", 1, 50, 1, 200, sampling_rate=0.01)
    idx, mask, overflow = sel.draw(jax.random.PRNGKey(0), None, 5_000, 5_000, 0)
    assert idx.shape == (tp.truncated_capacity(5_000, 0.01, 200), 1) and not bool(overflow)
    old = SubsetBatches("poisson", 1, 50, 1, 200, sampling_rate=0.01, poisson_selection="buffered")
    idx_old, mask_old, _ = old.draw(jax.random.PRNGKey(0), None, 5_000, 5_000, 0)
    # the same coins: the same records (nothing was cut: 50 expected, buffers of 116 and 128 rows)
    kept = set(np.asarray(idx[:, 0])[np.asarray(mask[:, 0])])
    assert kept == set(np.asarray(idx_old[:, 0])[np.asarray(mask_old[:, 0])])


def test_refusals_name_the_argument():
    with pytest.raises(ValueError, match="poisson_selection='cut'"):
        DpSgd(P, 10, 4, sampling_rate=0.1, poisson_selection="cut")
    with pytest.raises(ValueError, match="poisson_selection='buffered'.*sampling='without-replacement'"):
        DpSgd(P, 10, 4, sampling="without-replacement", neighboring="replace-one", poisson_selection="buffered")
    with pytest.raises(ValueError, match="poisson_selection='buffered'.*sampling='shuffle'"):
        DpSgdGeneral(P, 10, 1, 4, 1, neighboring="replace-one", poisson_selection="buffered")
    with pytest.raises(ValueError, match="poisson_selection='x'"):
        SubsetBatches("poisson", 1, 4, 1, 10, sampling_rate=0.1, poisson_selection="x")
    x = np.zeros((2, 3000, 3), np.float32)
    sizes = np.array([2000, 2500])
    data = SiloData(x, np.zeros((2, 3000), np.float32), np.arange(3000)[None] < sizes[:, None], sizes)
    with pytest.raises(ValueError, match="n_max=3000 rows padded beyond the largest silo"):
        SubsetBatches("poisson", 1, 20, 1, 10, sampling_rate=0.01).validate(data)


def test_existing_truncated_sampler_marginal_matches_the_default_rule():
    # the opt-in TruncatedPoisson (uniform cut) and the default (cyclic cut) keep each record equally often
    k = np.arange(N + 1)
    assert TruncatedPoisson(10, Q, B).inclusion_probability(N) == pytest.approx(
        float(np.sum(np.minimum(k, B) * stats.binom.pmf(k, N, Q))) / N, rel=1e-12)


def test_user_level_selections_charge_their_truncation():
    """ULS samples users (a neighbour adds one), ELS samples every user's first k records (a neighbour adds k)."""
    from dpjax.algorithms.user_level_dpsgd import UserLevelDpSgd

    sizes, q, r, k, delta = (3,) * 1_500 + (9,) * 500, 0.02, 8, 2, 1e-6
    users = len(sizes)
    for unit, trials, rows in (("user", users + 1, users - 1),
                               ("example", sum(min(m, k) for m in sizes) + k, (users - 1) * k)):
        fam = UserLevelDpSgd(P, r, unit, batch_size=40, sampling_rate=q, records_per_user=k)
        old = UserLevelDpSgd(P, r, unit, batch_size=40, sampling_rate=q, records_per_user=k,
                             poisson_selection="buffered").privacy(sizes, HP)
        rep = fam.privacy(sizes, HP).epsilon(delta)
        eta = r * stats.binom.sf(_capacity(rows, q, r), trials, q)  # the smallest neighbour buffer, independently
        charge = (1 + math.exp(old.epsilon(delta / 2).epsilon)) * eta
        assert 0 < charge < 1e-9 * delta and rep.sampling == "truncated-poisson", unit
        assert rep.epsilon == old.epsilon(delta - charge).epsilon >= old.epsilon(delta).epsilon, unit
        assert f"truncation probability {eta:.3g} charged to delta" in " ".join(rep.notes), unit
    with pytest.raises(ValueError, match="poisson_selection='x'"):
        UserLevelDpSgd(P, r, "user", batch_size=40, sampling_rate=q, poisson_selection="x")


def test_a_run_too_weak_for_the_charge_is_refused_naming_what_it_certifies():
    from dpjax.accounting.user_dpsgd import UserDpSgdPrivacy

    weak = UserDpSgdPrivacy("user", 0.3, 0.05, 500, truncation=1e-18)  # eps(delta / 2) far above 29
    top = math.log(1e-5 / 2e-18 - 1)
    with pytest.raises(ValueError, match=rf"this buffer certifies eps <= {top:.3g} only\).*'buffered'"):
        weak.epsilon(1e-5, "rdp")
    assert UserDpSgdPrivacy("user", 0.3, 0.05, 500).epsilon(1e-5, "rdp").epsilon > top  # untruncated: a number
