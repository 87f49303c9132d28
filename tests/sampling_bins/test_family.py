"""``BinnedBatches`` in a family's fold: Noisy MB-SGD's parts with balls-in-bins / cyclic-Poisson selection run through
the engine, and the family's ``privacy()`` is the binned accountant's (the part's event, no family code)."""

import dataclasses
import math

import jax
import numpy as np
import dp_accounting as dpa
import pytest
from dp_accounting import gaussian_mechanism

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.accounting import tight
from dpjax.engine import SiloData, run
from dpjax.parts.selection_bins import BinnedBatches
from dpjax.problems import LogisticRegression

pytestmark = pytest.mark.privacy


@dataclasses.dataclass(frozen=True)
class BinnedMbSgd(NoisyMbSgd):
    """Noisy MB-SGD whose selection is a ``BinnedBatches`` (a test declaration: the parts swap, nothing else)."""

    sampling: str = "balls-in-bins"
    num_bins: int = 4
    capacity: int | None = None
    gradient_path: str = "gather"  # per-example autodiff on the gathered batch

    def __post_init__(self):
        pass  # Noisy MB-SGD's checks name its own samplings; BinnedBatches validates these

    @property
    def selection(self):
        return BinnedBatches(scheme=self.sampling, batch_size=self.batch_size, num_bins=self.num_bins,
                             sampling_rate=self.sampling_rate, capacity=self.capacity)

    @property
    def sampler(self):
        return self.selection.sampler

    def parts(self, shape):
        # Noisy MB-SGD's own parts (declared for a sampling it knows), with the selection swapped
        known = dataclasses.replace(self, sampling="poisson" if self.sampling_rate else "without-replacement")
        return dataclasses.replace(NoisyMbSgd.parts(known, shape), selection=self.selection)


def _data(sizes=(24, 20), d=3, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, d)).astype(np.float32) for n in sizes]
    ys = [(x[:, 0] > 0).astype(np.float32) for x in xs]
    return SiloData.from_silos(xs, ys)


def test_balls_in_bins_family_runs_and_its_privacy_is_the_binned_accountant():
    data = _data()
    algo = BinnedMbSgd(LogisticRegression(3), num_rounds=6, batch_size=6, neighboring="add-remove", num_bins=4)
    hp = MbSgdHParams.create(0.1, noise_multiplier=1.5, clip_norm=1.0)
    out = run(algo, data, hp, jax.random.key(0))
    assert np.all(np.isfinite(np.asarray(jax.tree_util.tree_leaves(out.output)[0])))
    assert not np.asarray(out.round_metrics["sampling_overflow"]).any()
    report = algo.privacy([24, 20], hp).epsilon(1e-5, "best")
    # 6 rounds of 4 bins: 2 epochs of fresh 1-of-4 allocations -> the random-allocation certificate, below the
    # unamplified bound (each record in <= 2 releases: a Gaussian of multiplier 1.5 / sqrt 2)
    from dpjax.accounting import random_allocation as ra

    assert report.epsilon == ra.allocation_epsilon(1.5, 4, 2, 1e-5) and report.accountant == ra.ACCOUNTANT
    assert report.epsilon < gaussian_mechanism.get_epsilon_gaussian(1.5 / math.sqrt(2), 1e-5)
    assert report.sampling == "balls-in-bins"


def test_cyclic_poisson_family_runs_and_its_privacy_is_ceil_t_over_b_sampled_gaussians():
    data = _data()
    algo = BinnedMbSgd(LogisticRegression(3), num_rounds=6, batch_size=3, neighboring="add-remove",
                       sampling="cyclic-poisson", num_bins=2, sampling_rate=0.25, capacity=12)
    hp = MbSgdHParams.create(0.1, noise_multiplier=1.0, clip_norm=1.0)
    out = run(algo, data, hp, jax.random.key(1))
    assert not np.asarray(out.round_metrics["sampling_overflow"]).any()
    spec = algo.privacy([24, 20], hp)
    assert spec.overflow_probability == 0  # the 12-row buffer holds the largest group (12): nothing to charge
    # 6 rounds, b = 2: 3 Poisson-sampled Gaussians at q = 0.25 (dp_accounting's RDP accountant, composed here)
    ra = dpa.rdp.RdpAccountant(list(tight.rdp_orders()))
    ra.compose(dpa.PoissonSampledDpEvent(0.25, dpa.GaussianDpEvent(1.0)), 3)
    assert spec.epsilon(1e-5, "rdp").epsilon == pytest.approx(ra.get_epsilon(1e-5), rel=1e-6)
