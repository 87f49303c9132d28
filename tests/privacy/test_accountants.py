"""Accountants at the settings the other tests avoid: runs that end in a partial epoch, mixtures
whose truncated probability mass must stay in delta, and per-silo reports at K > 1 local steps.

* Partial epochs: a record can be used in the trailing partial epoch (the pins of
  ``test_central_families`` and ``test_samplers`` measure it), so every epoch-based accountant
  must certify R = 1.5 epochs exactly as 2 full epochs -- never as 1.
* Truncated mass: with the truncation threshold raised so that mass really is dropped, the
  kept probabilities and the dropped mass add to 1 (a unit identity) and the reported delta is
  never below the exact, untruncated one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import batch_clipping as bc
from dpjax.accounting import compute_epsilon, fdp, gdp
from dpjax.accounting import diff2 as diff2_acc
from dpjax.accounting import shuffle as shuffle_acc
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
from dpjax.algorithms.local_sgd import LocalSgd

from .pins import probe

DELTA = 1e-5


# ----------------------------------------------------------------------------- partial epochs
@pytest.mark.parametrize("sampling,accountant", [(s, a) for s in ("one-pass", "shuffle") for a in ("rdp", "zcdp", "gdp")]
                         + [("shuffle", "pld")])
def test_gaussian_schedule_counts_a_trailing_partial_epoch(sampling, accountant):
    """n = 10, K = 4: two blocks per epoch; 5 steps = 2.5 epochs -> 3 passes over a record."""
    at = lambda steps: compute_epsilon(GaussianSchedule(2.0, 1.0, sampling, 10, 4, steps), DELTA,  # noqa: E731
                                       accountant).epsilon
    assert GaussianSchedule(2.0, 1.0, sampling, 10, 4, 5).passes == 3
    assert at(5) == pytest.approx(at(6), rel=1e-9)
    assert at(5) > at(4) * (1 + 1e-3)


@pytest.mark.parametrize("accountant,s,m", [(a, 1, 3) for a in bc.BATCH_CLIPPING_ACCOUNTANTS]
                         + [(a, 3, 1) for a in bc.BATCH_CLIPPING_ACCOUNTANTS if a != "standard"])
def test_batch_clipping_report_counts_a_trailing_partial_epoch(accountant, s, m):
    """Shuffling, B = 4 rounds per epoch: 6 rounds certify as 8 (2 epochs), strictly more than 4
    (individual clipping s = 1, m = 3; batch clipping s = 3, m = 1)."""
    at = lambda rounds: bc.batch_clipping_report(  # noqa: E731
        accountant, sampling="shuffle", n_records=12, s=s, m=m, num_rounds=rounds, rounds_per_epoch=4,
        sigma=1.3, delta=DELTA).epsilon
    assert at(6) == pytest.approx(at(8), rel=1e-9)
    assert at(6) > at(4) * (1 + 1e-3)


def test_dpsgd_general_privacy_counts_a_trailing_partial_epoch():
    hp = DpSgdHParams.create(0.1, noise_multiplier=1.3, clip_norm=1.0)
    at = lambda rounds: DpSgdGeneral(probe(2), rounds, 1, 3, 4, sampling="shuffle").privacy(  # noqa: E731
        [12], hp).epsilon(DELTA, "strong-exact").epsilon
    assert at(6) == pytest.approx(at(8), rel=1e-9) and at(6) > at(4) * (1 + 1e-3)


def test_diff2_counts_the_last_restart_round_of_a_partial_period():
    """R = 5, T = 2: restart rounds 1, 3, 5 (ceil(R/T) = 3) and 2 difference rounds."""
    assert diff2_acc.count_restarts(5, 2) == 3
    # the paper's sigma (std sigma C on the server mean) is the multiplier z = sigma n_min P / 2 of the
    # mean's replace-one sensitivity 2C/(n_min P): n_min = 4, P = 2 gives z = 4 sigma
    hp = Diff2HParams.create(0.1, 2, noise_multiplier_restart=4 * 0.3, noise_multiplier_diff=4 * 0.4)
    schedules = Diff2GD(probe(1), 5, output="last").privacy([4, 6], hp).schedules
    assert [s.steps for s in schedules] == [3, 2]
    assert [s.noise_multiplier for s in schedules] == pytest.approx([1.2, 1.6], rel=1e-6)
    rdp = lambda a: diff2_acc.diff2_rdp(a, 5, 2, 4, 2, 0.3, 0.4)  # noqa: E731
    assert rdp(4.0) == pytest.approx(3 * diff2_acc.rdp_diff2_round(4.0, 0.3, 4, 2)
                                     + 2 * diff2_acc.rdp_diff2_round(4.0, 0.4, 4, 2))
    slope = 3 * 2 / (4 * 2 * 0.3) ** 2 + 2 * 2 / (4 * 2 * 0.4) ** 2  # 2 alpha / (n P sigma)^2 per round
    assert diff2_acc.diff2_epsilon(5, 2, 4, 2, 0.3, 0.4, DELTA, "tight") == pytest.approx(
        diff2_acc.tight_epsilon_from_slope(slope, DELTA), rel=1e-9)
    # BVR local steps: K ceil(R/P) per silo (P = 2 silos, R = 5: client 1 runs rounds 1, 3, 5)
    bvr = Diff2BvrLSgd(probe(1), 5, local_steps=3, batch_size=2, output="last")
    local = bvr.privacy([4, 6], Diff2HParams.create(0.1, 2, 1.0, 1.0, 0.3, 0.4, 1.0, 0.5)).schedules[-1]
    assert local.steps == 3 * math.ceil(5 / 2)


def test_one_pass_accelerated_counts_passes_over_a_partial_block():
    """R K < n: one pass; R = 3 blocks of K = 4 on n = 10 (floor(n/K) = 2) -> 2 passes."""
    hp = lambda r: AcceleratedHParams.create(AcsaSchedule.single_stage(r, 1.0), 1.0, 1.0)  # noqa: E731
    for rounds, passes in ((2, 1), (3, 2)):
        spec = AcceleratedMbSgd(probe(2), rounds, 4, sampling="one-pass").privacy([10, 12], hp(rounds)).schedule
        assert spec.passes == passes


# ----------------------------------------------------------------------------- truncated mass
def test_mixture_delta_charges_the_dropped_mass_in_full():
    law = {0.0: 0.5, 0.8: 0.3, 1.6: 0.2}
    for eps in (0.0, 0.5, 2.0):
        assert fdp.mixture_delta(law, eps, 3e-4) - fdp.mixture_delta(law, eps, 0.0) == pytest.approx(3e-4, rel=1e-9)
    exact = sum(p * gdp.gdp_delta(mu, 0.5) for mu, p in law.items() if mu > 0)
    assert fdp.mixture_delta(law, 0.5, 1e-4) == pytest.approx(exact + 1e-4, rel=1e-12)
    eps = fdp.mixture_epsilon(law, 1e-2, 1e-3)
    assert fdp.mixture_delta(law, eps, 1e-3) <= 1e-2 and fdp.mixture_delta(law, eps, 0.0) <= 1e-2 - 1e-3 + 1e-12


@pytest.mark.parametrize("sampling", ["shuffle", "subsample"])
def test_c2_law_keeps_its_truncated_mass_in_delta(sampling, monkeypatch):
    """With truncation at 1e-5 (instead of 1e-20) real mass is cut: kept + dropped = 1, and the
    delta / epsilon computed from the truncated law are never below the exact ones."""
    args = (sampling, 30, 1, 5, 2, 6)  # N, s, m, g, epochs
    bc.c2_law.cache_clear()  # c2_law is cached: a truncated law must neither be read nor left behind
    exact = bc.c2_law(*args)
    eps_exact = bc.batch_clipping_epsilon(sampling, *args[1:], 1.0, 1e-3)
    bc.c2_law.cache_clear()
    monkeypatch.setattr(bc, "_TRUNC", 1e-5)
    try:
        cut = bc.c2_law(*args)
        assert cut.dropped > 1e-6, "the test needs truncation to drop real mass"
        assert cut.probs.sum() + cut.dropped == pytest.approx(1.0, abs=1e-12)
        for eps in (0.5, 1.5, 3.0):
            assert bc.batch_clipping_delta(cut, 1.0, eps) >= bc.batch_clipping_delta(exact, 1.0, eps) - 1e-15
            kept = fdp.mixture_delta(cut.mu_law(1.0), eps, 0.0)
            assert bc.batch_clipping_delta(cut, 1.0, eps) == pytest.approx(min(1.0, kept + cut.dropped), rel=1e-12)
        assert bc.batch_clipping_epsilon(sampling, *args[1:], 1.0, 1e-3) >= eps_exact - 1e-9
        report = bc.batch_clipping_report("strong-exact", sampling=sampling, n_records=30, s=1, m=5,
                                          num_rounds=6 * (30 // 5), rounds_per_epoch=30 // 5, sigma=1.0, delta=1e-3,
                                          group_size=2)
        assert report.epsilon >= eps_exact - 1e-9
    finally:
        bc.c2_law.cache_clear()


def test_shuffle_amplification_keeps_its_truncated_binomial_mass(monkeypatch):
    """FMT's dominating pair (shuffle accountant): with its table cut at 1e-3 instead of 1e-24 the
    C-weights and the dropped mass add to 1, and delta(eps) stays >= the untruncated delta."""
    eps0, n = 1.0, 40
    full = [shuffle_acc.fmt_numerical_delta(eps0, n, e) for e in (0.05, 0.2, 0.5)]
    shuffle_acc._fmt_pair.cache_clear()
    monkeypatch.setattr(shuffle_acc, "_TAIL", 1e-3)
    try:
        wc, pk, qk, out_p, out_q, dropped = shuffle_acc._fmt_pair(eps0, n)
        assert dropped > 1e-4
        assert wc.sum() + dropped == pytest.approx(1.0, abs=1e-12)
        np.testing.assert_allclose(pk.sum(axis=1) + out_p, 1.0, atol=1e-12)
        np.testing.assert_allclose(qk.sum(axis=1) + out_q, 1.0, atol=1e-12)
        for e, d in zip((0.05, 0.2, 0.5), full):
            assert shuffle_acc.fmt_numerical_delta(eps0, n, e) >= d - 1e-15
    finally:
        shuffle_acc._fmt_pair.cache_clear()


# ----------------------------------------------------------------------------- per-silo report at K > 1
def test_local_sgd_report_counts_r_times_k_releases():
    """ISRL-DP Local SGD, K = 3 local steps, R = 4: the per-silo epsilon is that of R K releases of
    one uniformly random record (rate 1/n_min) with sensitivity 2C and std z 2C."""
    sizes, k, rounds, c, z = (6, 9), 3, 4, 0.7, 1.4
    hp = MbSgdHParams.create(0.1, z, c)
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    hand = GaussianSchedule(f32(z) * 2 * f32(c), f32(c), "without-replacement", min(sizes), 1, rounds * k)
    for accountant in ("rdp",):  # the accountants that certify fixed-size subsampling
        got = LocalSgd(probe(2), rounds, k).privacy(sizes, hp).epsilon(DELTA, accountant).epsilon
        assert got == pytest.approx(compute_epsilon(hand, DELTA, accountant).epsilon, rel=1e-9)
    one_step = LocalSgd(probe(2), rounds, 1).privacy(sizes, hp).epsilon(DELTA, "rdp").epsilon
    assert LocalSgd(probe(2), rounds, k).privacy(sizes, hp).epsilon(DELTA, "rdp").epsilon > 1.2 * one_step
