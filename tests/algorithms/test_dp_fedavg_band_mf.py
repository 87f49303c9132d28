"""DP-FedAvg with BandMF noise over cyclic-Poisson client groups (``dpjax.algorithms.band_mf_fedavg``): its epsilon is
amplified BandMF's (NeurIPS 2023, Thm 4) built here from dp_accounting primitives (with the cohort buffer's overflow
tail charged to delta), min-separation's is the multi-epoch Gaussian, the noise state is ``(bands - 1) x d``, a run
trains, the selection keeps every client in its group's rounds, refusals name their values, and it sweeps."""

from __future__ import annotations

import math

import dp_accounting as dpa
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from dpjax import engine
from dpjax.algorithms.band_mf_fedavg import BandMfFedAvgHParams, DpFedAvgBandMf
from dpjax.algorithms.dp_fedavg import DpFedAvg, FedAvgHParams
from dpjax.engine.roles import Context
from dpjax.engine.silos import SiloData
from dpjax.problems import LinearRegression

DELTA = 1e-5
COEFFS = (1.0, 0.5, 0.25)  # a given 3-band strategy: no optimisation in the fast tests


def clients(num, n=5, dim=3, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, dim)).astype(np.float32) for _ in range(num)]
    return SiloData.from_silos(xs, [(x @ np.linspace(1.0, -1.0, dim)).astype(np.float32) for x in xs])


def hparams(z=1.25, clip=1.0, lr=1.0):
    return BandMfFedAvgHParams.create(learning_rate=lr, client_learning_rate=0.1, noise_multiplier=z, clip_norm=clip)


def pld_epsilon(event, delta):
    acc = pld_privacy_accountant.PLDAccountant(dpa.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                               value_discretization_interval=1e-4)
    return acc.compose(event).get_epsilon(delta)


def amplified(z, q, participations):
    """NeurIPS 2023, Thm 4: a user's ceil(R / p) rounds, each a Poisson-subsampled Gaussian of multiplier z."""
    return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), participations)


# (clients N, rounds R, cohort m, rate q, bands, groups p, z, capacity); z exact in float32
AMPLIFIED = [(60, 9, 5, 0.25, 3, 3, 1.5, 17),        # buffer 17 < group 20: the overflow tail is charged
             pytest.param(24, 12, 4, 0.5, 3, 3, 1.25, None,  # default buffer = a whole group (8): no overflow
                          marks=pytest.mark.slow),
             pytest.param(40, 10, 2, 0.25, 2, 4, 0.75, None,  # p > bands: ceil(10 / 4) = 3 participations
                          marks=pytest.mark.slow)]


@pytest.mark.privacy
@pytest.mark.parametrize("n,rounds,m,q,bands,p,z,cap", AMPLIFIED)
def test_epsilon_is_amplified_band_mf_built_from_dp_accounting(n, rounds, m, q, bands, p, z, cap):
    """PLD and RDP of SelfComposed(PoissonSampled(q, Gaussian(z)), ceil(R / p)), add/remove, unit user; with a
    buffer smaller than a group, delta is reduced by (1 + e^eps(delta / 2)) x R x P(Binomial(ceil(N / p), q) > cap)
    (the union bound over rounds, scipy's exact binomial tail)."""
    fam = DpFedAvgBandMf(LinearRegression(3), rounds, m, sampling_rate=q, bands=bands, num_groups=p,
                         band_coeffs=COEFFS[:bands], cohort_capacity=cap)
    spec = fam.privacy([5] * n, hparams(z))
    k = -(-rounds // p)
    event = amplified(z, q, k)
    p_over = 0.0 if cap is None else rounds * stats.binom.sf(cap, -(-n // p), q)
    assert (p_over > 1e-12) == (cap is not None)  # the third case really charges something
    for name in ("pld", "rdp"):
        if name == "pld":
            eps_at = lambda d: pld_epsilon(event, d)  # noqa: E731
        else:
            eps_at = lambda d: dpa.rdp.RdpAccountant(  # noqa: E731
                neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE).compose(event).get_epsilon(d)
        reduced = DELTA - (1 + math.exp(eps_at(DELTA / 2))) * p_over if p_over else DELTA
        report = spec.epsilon(DELTA, name)
        assert report.epsilon == pytest.approx(eps_at(reduced), rel=1e-9)
        if p_over:  # the charge is visible: ~1e-7 of delta = 1e-5
            assert report.epsilon > eps_at(DELTA) * (1 + 1e-5)
        assert (report.unit, report.neighboring, report.sampling, report.delta) == (
            "user", "add-remove", "cyclic-poisson", DELTA)
    # amplification helps: the same noise without sampling (min-separation, one Gaussian of z / sqrt(k)) costs more
    assert spec.epsilon(DELTA, "pld").epsilon < gaussian_mechanism.get_epsilon_gaussian(z / math.sqrt(k), DELTA)


@pytest.mark.privacy
@pytest.mark.parametrize("neighboring", ["add-remove", "replace-one"])
def test_min_separation_is_the_multi_epoch_gaussian(neighboring):
    """Whole groups, 3 groups over 12 rounds: k = 4 participations 3 apart, bands 3 <= 3, so the run is one Gaussian
    of multiplier z / sqrt(4) (NeurIPS 2023, Sec. 4; ICML 2023, Thm 2.1): the analytic Gaussian's epsilon (Balle &
    Wang 2018, dp_accounting's gaussian_mechanism) exactly by "gdp", and PLD's above it within its discretisation."""
    fam = DpFedAvgBandMf(LinearRegression(3), 12, 8, bands=3, band_coeffs=COEFFS, sampling="min-separation",
                         neighboring=neighboring)
    spec = fam.privacy([5] * 24, hparams(1.25))
    exact = gaussian_mechanism.get_epsilon_gaussian(1.25 / 2, DELTA)
    assert spec.epsilon(DELTA, "gdp").epsilon == pytest.approx(exact, rel=1e-6)
    pld = spec.epsilon(DELTA, "pld").epsilon
    assert exact * (1 - 1e-6) <= pld <= exact * 1.003
    assert spec.epsilon(DELTA).unit == "user" and spec.epsilon(DELTA).neighboring == neighboring


@pytest.mark.privacy
def test_one_band_one_group_is_dp_fedavgs_fixed_clip_poisson():
    """bands = p = 1 is independent noise on a Poisson cohort: DP-FedAvg's fixed-clip (eta_C = 0) report at the
    same q, z and R (RDP, both through the DP plan of a different family)."""
    q, z, rounds, n = 0.25, 1.25, 10, 20
    ours = DpFedAvgBandMf(LinearRegression(2), rounds, 5, sampling_rate=q, cohort_capacity=n).privacy(
        [5] * n, hparams(z))
    theirs = DpFedAvg(LinearRegression(2), rounds, 5, sampling_rate=q).privacy(
        [5] * n, FedAvgHParams.create(noise_multiplier=z, clip_learning_rate=0.0))
    assert ours.epsilon(DELTA, "rdp").epsilon == pytest.approx(theirs.epsilon(DELTA, "rdp").epsilon, rel=1e-9)


def _floats(tree) -> int:
    return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


def test_noise_state_is_bands_minus_one_times_d_whatever_the_rounds():
    """The privatizer's state is (bands - 1) x d floats, and the run state the same for 6 and 48 rounds (O(bands x
    d), never O(rounds x d)); the noisy runs stay finite."""
    dim, data = 4, clients(24, dim=4)
    totals = []
    for rounds in (6, 48):
        fam = DpFedAvgBandMf(LinearRegression(dim), rounds, 4, sampling_rate=0.5, bands=3, band_coeffs=COEFFS,
                             local_steps=2)
        res = engine.run(fam, data, hparams(1.0), jax.random.key(0))
        assert _floats(res.state.parts["privatizer"]) == (3 - 1) * dim
        assert np.all(np.isfinite(np.asarray(res.output)))
        totals.append(_floats(res.state))
    assert totals[0] == totals[1]


@pytest.mark.slow
def test_a_noiseless_run_trains():
    """Without noise (clip 10: nothing clipped) 24 federated rounds of 2 local steps cut the training loss of the
    zero model by more than 5x on a noiseless linear target."""
    dim, data = 4, clients(24, dim=4)
    problem = LinearRegression(dim)
    x, y = np.asarray(data.x).reshape(-1, dim), np.asarray(data.y).reshape(-1)
    loss = lambda w: float(np.mean(0.5 * (x @ np.asarray(w) - y) ** 2))  # noqa: E731
    quiet = engine.run(DpFedAvgBandMf(problem, 24, 4, sampling_rate=0.5, bands=3, band_coeffs=COEFFS, local_steps=2),
                       data, hparams(0.0, clip=10.0), jax.random.key(1))
    assert loss(quiet.output) < 0.2 * loss(np.zeros(dim))


def test_a_client_joins_only_its_groups_rounds():
    """Round t's cohort lies in group t mod p (the part's state, a balanced partition); over the run each client
    of a group takes part about q x its group's rounds (binomial: 3 sigma)."""
    fam = DpFedAvgBandMf(LinearRegression(2), 30, 3, sampling_rate=0.5, bands=2, band_coeffs=(1.0, 0.3), num_groups=3)
    part, data = fam.selection_part, clients(18, dim=2)
    ctx = Context(jnp.zeros((), jnp.int32), jax.random.key(4), hparams(), data, None, None, None)
    groups = np.asarray(part.init(None, ctx))
    assert sorted(np.bincount(groups)) == [6, 6, 6]
    joined = np.zeros(18)
    for t in range(30):
        batch, _ = part.update(data, jnp.asarray(groups), ctx._replace(round=jnp.int32(t),
                                                                       key=jax.random.fold_in(ctx.key, t)))
        ids = np.asarray(batch.silo_ids)[np.asarray(batch.available)]
        assert np.all(groups[ids] == t % 3) and not bool(np.any(batch.overflow))
        joined[ids] += 1
    total = joined.sum()  # 18 clients x 10 rounds each x q = 90 expected, sd sqrt(180 x 0.25) = 6.7
    assert abs(total - 90) < 3 * math.sqrt(180 * 0.25)


@pytest.mark.parametrize("kwargs,match", [
    ({"clipping": "adaptive"}, "clipping='adaptive': only 'fixed'"),
    ({"bands": 4, "num_groups": 3}, "bands=4 must be <= num_groups=3"),
    ({"sampling_rate": None}, "sampling_rate=None"),
    ({"neighboring": "replace-one"}, "neighboring='replace-one' must be 'add-remove'"),
    ({"sampling": "poisson"}, "sampling='poisson'"),
    ({"sampling": "min-separation"}, "sampling_rate=0.5"),
    ({"band_coeffs": (1.0, 0.5), "bands": 3}, "band_coeffs has 2 entries; bands=3"),
    ({"cohort_capacity": 0}, "cohort_capacity=0"),
])
def test_refusals_name_their_values(kwargs, match):
    base = {"sampling_rate": 0.5, "bands": 2}
    with pytest.raises(ValueError, match=match):
        DpFedAvgBandMf(LinearRegression(2), 10, 3, **{**base, **kwargs})


def test_data_refusals_name_their_values():
    fam = DpFedAvgBandMf(LinearRegression(2), 10, 4, sampling_rate=0.5, bands=2, num_groups=3, band_coeffs=(1.0, 0.3))
    with pytest.raises(ValueError, match="silos_per_round=4 x num_groups=3 must be <= num_silos=10"):
        fam.validate(clients(10, dim=2))
    with pytest.raises(ValueError, match="local_batch_size=9 must be <= the smallest silo size"):
        DpFedAvgBandMf(LinearRegression(2), 10, 2, sampling_rate=0.5, local_batch_size=9).validate(clients(12, dim=2))


def test_built_by_the_registry_from_a_sweeps_static_table():
    """A sweep's static table (a TOML list for band_coeffs) builds the family; the number of groups defaults to
    the bands."""
    from dpjax.algorithms import algorithm_entry

    entry = algorithm_entry("dp-fedavg-band-mf")
    fam = entry.build(LinearRegression(2), 12, {"silos_per_round": 4, "sampling_rate": 0.5, "bands": 3,
                                                "band_coeffs": [1.0, 0.5, 0.25]})
    assert isinstance(fam, DpFedAvgBandMf) and fam.band_coeffs == COEFFS and fam.num_groups == 3
    hp = entry.make_hparams({"learning_rate": 1.0, "clip_norm": 1.0, "noise_multiplier": 1.0}, fam)
    assert isinstance(hp, BandMfFedAvgHParams)


@pytest.mark.slow
@pytest.mark.privacy
def test_sweepable_through_the_registry_and_calibrated_to_a_target():
    """The registry builds it from a sweep's static table (a TOML list for band_coeffs); calibration meets the
    target from below, and the calibrated z is amplified BandMF's for eps = 2 (bisection on dp_accounting's PLD)."""
    from scipy import optimize

    from dpjax.algorithms import algorithm_entry

    entry = algorithm_entry("dp-fedavg-band-mf")
    fam = entry.build(LinearRegression(2), 12, {"silos_per_round": 4, "sampling_rate": 0.5, "bands": 3,
                                                "band_coeffs": [1.0, 0.5, 0.25]})
    assert fam.band_coeffs == COEFFS and fam.num_groups == 3
    values = {"learning_rate": 1.0, "clip_norm": 1.0, "noise_multiplier": 1.0}
    sizes = [5] * 24  # default buffer: a whole group, no overflow charge
    z = entry.calibrate(fam, sizes, values, 2.0, DELTA, "pld")["noise_multiplier"]
    eps = fam.privacy(sizes, entry.make_hparams({**values, "noise_multiplier": z}, fam)).epsilon(DELTA, "pld").epsilon
    assert 2.0 * (1 - 1e-3) <= eps <= 2.0
    ref = optimize.brentq(lambda s: pld_epsilon(amplified(s, 0.5, 4), DELTA) - 2.0, 0.3, 20, xtol=1e-6)
    assert z == pytest.approx(ref, rel=2e-3)


@pytest.mark.privacy
def test_a_cohort_over_its_buffer_refuses_the_run():
    """q = 1 puts a whole group of 6 in a 2-client buffer: the run is refused (never silently truncated), and the
    privacy report, whose overflow charge is then 1, refuses too."""
    from dpjax.engine.checks import SamplingOverflowError

    fam = DpFedAvgBandMf(LinearRegression(2), 3, 2, sampling_rate=1.0, bands=1, num_groups=3, cohort_capacity=2)
    with pytest.raises(SamplingOverflowError, match="overflowed its buffer at round 0"):
        engine.run(fam, clients(18, dim=2), hparams(1.0), jax.random.key(0))
    with pytest.raises(ValueError, match="raise the capacity"):
        fam.privacy([5] * 18, hparams(1.0)).epsilon(DELTA)


@pytest.mark.slow
@pytest.mark.privacy
def test_noise_on_the_family_rounds_has_the_inverse_strategy_covariance():
    """Zero data (every delta 0), server SGD at eta = 1: w_t - w_{t-1} = -std z_t with z = C^{-1} w and
    std = z_mult x C / m (add/remove: one user moves the clipped sum by C). 20000 runs: a sample covariance
    entry's std is <= sqrt(2 / runs) x (largest variance, here < 2.5) = 0.025, so 0.08 is > 3 of them."""
    rounds, m, coeffs = 6, 2, (1.0, 0.6, 0.2)
    fam = DpFedAvgBandMf(LinearRegression(1), rounds, m, sampling_rate=0.5, bands=3, band_coeffs=coeffs)
    xs = [np.zeros((3, 1), np.float32)] * 12
    data = SiloData.from_silos(xs, [np.zeros(3, np.float32)] * 12)
    runs = 20_000
    hp = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (runs,)), hparams(0.9, clip=0.5))
    res = engine.run_many(fam, data, hp, jax.random.split(jax.random.key(3), runs),
                          eval_fn=lambda params, _: {"w": params}, eval_every=1)
    w = np.asarray(res.eval_metrics["w"], np.float64)[:, :, 0]
    std = float(np.float32(0.9)) * float(np.float32(0.5)) / m
    z = -np.diff(np.concatenate([np.zeros((runs, 1)), w], axis=1), axis=1) / std
    c = np.asarray(coeffs) / np.linalg.norm(coeffs)
    strategy = sum(ck * np.eye(rounds, k=-k) for k, ck in enumerate(c))  # the banded Toeplitz C, written out
    inv = np.linalg.inv(strategy)
    expected = inv @ inv.T
    assert expected.max() < 2.5 and np.abs(expected - np.diag(np.diag(expected))).max() > 0.2
    np.testing.assert_allclose(np.cov(z, rowvar=False), expected, atol=0.08)
