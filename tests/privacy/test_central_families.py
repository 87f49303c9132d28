"""Central DP-SGD families (``dp-sgd``, ``dpsgd-general``): the noise on the released clipped sum,
the canary's contribution, the sampling rate and the participation count, measured from each
family's real step, equal what its ``privacy()`` certifies -- at clip C != 1, unequal and padded
silos, and (shuffling) a run that ends in a partial epoch. Measurements and tolerances:
``tests/privacy/pins.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.accounting import api
from dpjax.accounting import batch_clipping as bc
from dpjax.accounting import fdp
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams

from .pins import BIG, check_fresh_noise, check_rate, check_shift_values, check_std, increments, keys, probe, silos, trajectory

RUNS = 1500
DIM = 2
C, LR = 0.6, 0.5
DELTA = 1e-5


def _measure(family, hp, hp0, sizes, seed=0):
    noise = increments(trajectory(family, silos(sizes, DIM), hp, keys(RUNS, seed), DIM))
    plus = increments(trajectory(family, silos(sizes, DIM, +BIG), hp0, keys(RUNS, seed + 1), DIM))
    minus = increments(trajectory(family, silos(sizes, DIM, -BIG), hp0, keys(RUNS, seed + 1), DIM))
    assert np.all(plus[..., 1:] == minus[..., 1:])
    return noise, (plus - minus)[..., 0]


def test_dp_sgd_noise_on_the_clipped_sum(sampling="poisson", neighboring="add-remove"):
    """DP-SGD (optax SGD server): ``w_{r+1} - w_r = -lr (S + z) / (K N)`` with S the clipped sum and
    z ~ N(0, (sigma C)^2 I) added once (the noise multiplier sigma of the add/remove sensitivity C);
    the canary (smallest silo, padded) enters S with weight C at the declared rate q = K / n_min, which
    every silo draws with. The plan's schedule is in units of C."""
    k, rounds, sigma, sizes = 3, 3, 0.8, (9, 14)
    family = DpSgd(probe(DIM), rounds, k, sampling=sampling, optimizer="sgd", neighboring=neighboring,
                   sampling_rate=k / min(sizes))
    spec = family.privacy(sizes, DpSgdHParams.create(LR, sigma, C)).schedule
    noise, shift = _measure(family, DpSgdHParams.create(LR, sigma, C), DpSgdHParams.create(LR, 0.0, C), sizes)
    scale = k * len(sizes) / LR  # public: the expected batch K N and the step size
    check_std(-noise * scale / C, spec.noise_std, f"dp-sgd {sampling}: noise std on the clipped sum / C")
    check_fresh_noise(noise, "dp-sgd")
    # one record's contribution to S is C: D' - D moves S by 2C (2 contributions)
    mult = check_shift_values(-shift * scale / 2 / C, spec.contribution_bound, f"dp-sgd {sampling}: contribution / C")
    check_rate((mult > 0).sum(), mult.size, spec.inclusion_probability, f"dp-sgd {sampling}: canary inclusion")
    assert spec.steps == rounds and spec.dataset_size == min(sizes) and spec.inclusion_probability == family.sampling_rate
    # fixed batches (replace-one): the same step and clip, sensitivity 2C at rate K / n_min (the
    # standard adversary's report; the strong adversary, who sees the batches, gets no amplification)
    fixed = DpSgd(probe(DIM), rounds, k, sampling="without-replacement", optimizer="sgd",
                  neighboring="replace-one").privacy(sizes, DpSgdHParams.create(LR, sigma, C))
    standard = fixed.epsilon(DELTA, "standard")
    by_hand = GaussianSchedule(2 * spec.noise_std, 1.0, "without-replacement", min(sizes), k, rounds, unit="record")
    assert standard.noise_std == pytest.approx(2 * spec.noise_std)  # std / C = 2 sigma: sensitivity 2C
    assert standard.epsilon == pytest.approx(api.compute_epsilon(by_hand, DELTA, "rdp").epsilon, rel=1e-9)


def _general(sampling, subset_size, num_subsets, rounds, rounds_per_epoch, **kw):
    return DpSgdGeneral(probe(DIM), rounds, subset_size, num_subsets, rounds_per_epoch, sampling=sampling, **kw)


@pytest.mark.parametrize("subset_size,num_subsets", [(1, 3), (3, 1)], ids=["individual", "batch"])
def test_dpsgd_general_shuffle_partial_epoch(subset_size, num_subsets):
    """Shuffling, 6 rounds of B = 4 per epoch (1.5 epochs): U_bar = U + N(0, (2 C sigma)^2 I) with
    U the sum of the clipped terms; the canary's term moves U by 2C once per epoch, and the last
    (partial) epoch still uses it w.p. 6/12, so the accountant must count 2 epochs."""
    n, sigma, rounds, per_epoch = 12, 1.3, 6, 4
    family = _general("shuffle", subset_size, num_subsets, rounds, per_epoch)
    hp, hp0 = DpSgdHParams.create(LR, sigma, C), DpSgdHParams.create(LR, 0.0, C)
    report = family.privacy([n], hp).epsilon(DELTA, "strong-exact")
    noise, shift = _measure(family, hp, hp0, (n,))
    scale = num_subsets / LR  # w <- w - lr U_bar / m
    # the report's noise_std is the std of U_bar in units of C (2 sigma)
    check_std(-noise * scale / C, report.noise_std, "shuffle: noise std of U_bar / C")
    mult = check_shift_values(-shift * scale, 2 * C, "shuffle: canary term shift")
    uses = mult.sum(axis=1)
    epochs = -(-rounds // per_epoch)
    assert uses.min() == 1 and uses.max() == epochs, "participation per epoch is not one block"
    check_rate((uses == 2).sum(), RUNS, 6 / 12, "shuffle: canary in the partial epoch")
    law = bc.c2_law("shuffle", n, subset_size, num_subsets, 1, uses.max(), per_epoch)
    want = fdp.mixture_epsilon(law.mu_law(float(np.float32(sigma))), DELTA, law.dropped)  # hparams: float32
    assert report.epsilon == pytest.approx(want, rel=1e-9)


def test_dpsgd_general_poisson_baseline():
    """Poisson baseline (add/remove): noise N(0, (C sigma)^2 I) on U, the declared rate q (m / n of the
    smallest silo, padded), contribution C; ``privacy()`` is a Gaussian schedule with multiplier sigma."""
    sizes, m, sigma, rounds = (12, 15), 3, 1.1, 3
    family = _general("poisson", 1, m, rounds, 4, neighboring="add-remove", sampling_rate=m / min(sizes))
    hp, hp0 = DpSgdHParams.create(LR, sigma, C), DpSgdHParams.create(LR, 0.0, C)
    spec = family.privacy(sizes, hp).schedule
    noise, shift = _measure(family, hp, hp0, sizes)
    scale = m * len(sizes) / LR  # server mean over silos of U_bar / m
    check_std(-noise * scale / math.sqrt(len(sizes)) / C, spec.noise_multiplier, "poisson: noise std / C")
    mult = check_shift_values(-shift * scale / 2 / C, spec.contribution_bound, "poisson: contribution / C")
    check_rate((mult > 0).sum(), mult.size, spec.inclusion_probability, "poisson: canary inclusion")
    assert spec.inclusion_probability == pytest.approx(m / min(sizes)) and spec.steps == rounds
