"""DP-SGD with BandMF noise (``DpSgd(noise="band-mf")``): its privacy report is the multi-epoch BandMF event, the
noise it adds on its own rounds has the ``C^{-1} C^{-T}`` covariance, its noise state is ``(bands - 1) x d`` floats
whatever the number of rounds, and with zero noise it is DP-FTRL's SGD on the same order of records."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

from dpjax import engine
from dpjax.accounting import band_mf as bmf_acc
from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdHParams
from dpjax.engine.silos import SiloData
from dpjax.primitives import banded_mf
from dpjax.problems import LinearRegression

DELTA = 1e-5


def band_mf(dim=3, rounds=10, batch=3, **kw):
    return DpSgd(LinearRegression(dim), rounds, batch, sampling="one-pass", neighboring="replace-one",
                 noise="band-mf", optimizer="sgd", **kw)


def silos(sizes=(12, 15), dim=3, zero=False, seed=0):
    rng = np.random.default_rng(seed)
    xs = [np.zeros((n, dim), np.float32) if zero else rng.normal(size=(n, dim)).astype(np.float32) for n in sizes]
    return SiloData.from_silos(xs, [(x @ np.linspace(1, -1, dim)).astype(np.float32) for x in xs])


def _gaussian_eps(mu, delta):
    """Balle & Wang (ICML 2018), Thm 8: delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2), solved."""
    f = lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta  # noqa
    return optimize.brentq(f, 0, 100)


@pytest.mark.privacy
@pytest.mark.parametrize("rounds,batch,bands,sizes", [
    (10, 3, 3, (12, 15)), pytest.param(17, 2, 4, (9, 12, 10), marks=pytest.mark.slow),
    pytest.param(6, 3, 2, (12, 12), marks=pytest.mark.slow)])
def test_report_is_the_multi_epoch_band_mf_event_after_a_run(rounds, batch, bands, sizes):
    """A few rounds run; the report: T = n_min // B rounds between a record's participations, k = ceil(R / T)
    participations, so one Gaussian of multiplier z / sqrt(k) (Choquette-Choo et al. 2023, Sec. 4)."""
    family = band_mf(rounds=rounds, batch=batch, bands=bands)
    hp = DpSgdHParams.create(0.1, 1.3, 0.7)
    res = engine.run(family, silos(sizes), hp, jax.random.key(1))
    assert np.all(np.isfinite(np.asarray(res.output)))
    per_epoch = min(sizes) // batch
    k = -(-rounds // per_epoch)
    assert k > 1  # several epochs
    spec = family.privacy(list(sizes), hp)
    z = float(np.float32(1.3))
    report = spec.epsilon(DELTA, "pld")
    assert report.epsilon == bmf_acc.band_mf_epsilon(bmf_acc.multi_epoch_event(z, math.sqrt(k)), DELTA)
    assert report.neighboring == "replace-one" and report.unit == "record"
    # independent: the analytic Gaussian of mu = sqrt(k) / z (PLD discretisation 1e-4 in the loss: ~1e-3 relative)
    assert report.epsilon == pytest.approx(_gaussian_eps(math.sqrt(k) / z, DELTA), rel=2e-3)
    assert report.epsilon >= _gaussian_eps(math.sqrt(k) / z, DELTA) * (1 - 1e-6)  # PLD is pessimistic
    exact = spec.epsilon(DELTA, "gdp").epsilon
    assert exact == pytest.approx(_gaussian_eps(math.sqrt(k) / z, DELTA), rel=1e-6)
    best = spec.epsilon(DELTA, "best")
    assert best.epsilon == min(exact, report.epsilon, spec.epsilon(DELTA, "rdp").epsilon) and best.accountant == "gdp"
    z_cal = spec.calibrate(2.0, DELTA)["noise_multiplier"]
    assert z_cal / math.sqrt(k) == pytest.approx(optimize.brentq(lambda m: _gaussian_eps(1 / m, DELTA) - 2.0, 0.1, 20),
                                                 rel=3e-3)


@pytest.mark.privacy
def test_bands_beyond_the_separation_and_other_samplings_are_refused():
    hp = DpSgdHParams.create(0.1, 1.0, 1.0)
    with pytest.raises(ValueError, match="bands=5 must be <= the rounds between"):
        band_mf(bands=5).privacy([12, 15], hp)  # T = 12 // 3 = 4
    with pytest.raises(ValueError, match="bands=5"):
        band_mf(bands=5).validate(silos())
    with pytest.raises(ValueError, match="sampling='poisson' must be 'one-pass'"):
        DpSgd(LinearRegression(3), 10, 3, noise="band-mf", sampling_rate=0.1)
    with pytest.raises(ValueError, match="need noise='band-mf'"):
        DpSgd(LinearRegression(3), 10, 3, bands=3, sampling_rate=0.1)
    with pytest.raises(ValueError, match="band_coeffs has 2 entries"):
        band_mf(bands=3, band_coeffs=(1.0, 0.5))
    with pytest.raises(ValueError, match="noise="):
        DpSgd(LinearRegression(3), 10, 3, noise="tree", sampling_rate=0.1)


def test_given_strategy_is_used_and_optimised_one_by_default():
    fam = band_mf(band_coeffs=[2.0, 1.0])
    assert fam.band_coeffs == (2.0, 1.0)
    noise = fam.parts(None).role("privatizer")
    np.testing.assert_allclose(noise.coeffs, np.array([2.0, 1.0]) / math.sqrt(5), rtol=1e-12)
    opt = band_mf(rounds=10, bands=3).parts(None).role("privatizer")
    np.testing.assert_allclose(opt.coeffs, banded_mf.optimize_banded_toeplitz(10, 3), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("bands", [1, 3])
def test_noise_on_the_family_rounds_has_the_inverse_strategy_covariance(bands):
    """Zero data, eta = 1, SGD: w_t - w_{t-1} = -std z_t with z = C^{-1} w, so cov(z) = C^{-1} C^{-T}
    (std = z_mult x 2C/(B N)). 20000 runs: a sample covariance entry's std is <= sqrt(2 / runs) x (largest
    variance, <= 1 / c_0^2 ... here < 2.5), so 6 of them, 0.06, is the tolerance."""
    rounds, batch, sizes = 8, 3, (12, 12)
    family = band_mf(dim=1, rounds=rounds, batch=batch, bands=bands)
    hp = DpSgdHParams.create(1.0, 0.9, 0.5)
    runs = 20_000
    batched = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (runs,)), hp)
    res = engine.run_many(family, silos(sizes, 1, zero=True), batched, jax.random.split(jax.random.key(3), runs),
                          eval_fn=lambda params, _: {"w": params}, eval_every=1)
    w = np.asarray(res.eval_metrics["w"], np.float64)[:, :, 0]
    std = float(np.float32(0.9)) * 2 * 0.5 / (batch * len(sizes))
    z = -np.diff(np.concatenate([np.zeros((runs, 1)), w], axis=1), axis=1) / std
    c = banded_mf.toeplitz_strategy(family.parts(None).role("privatizer").coeffs, rounds)
    inv = np.linalg.inv(c)
    expected = inv @ inv.T
    assert expected.max() < 2.5
    np.testing.assert_allclose(np.cov(z, rowvar=False), expected, atol=0.06)
    if bands > 1:
        assert np.abs(expected - np.diag(np.diag(expected))).max() > 0.2  # the test sees the correlation


def _floats(tree) -> int:
    return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("bands", [3, pytest.param(5, marks=pytest.mark.slow)])
def test_noise_state_is_bands_minus_one_times_d_whatever_the_rounds(bands):
    """The privatizer's state is (bands - 1) x d floats (d = model size), and the whole run state is the same size
    for 8 and 64 rounds: O(bands x d) memory, never O(rounds x d)."""
    dim = 7
    sizes, totals = (16, 16), []
    for rounds in (8, 64):
        family = band_mf(dim=dim, rounds=rounds, batch=2, bands=bands)  # T = 8 >= bands
        state = engine.run(family, silos(sizes, dim), DpSgdHParams.create(0.1, 1.0, 1.0), jax.random.key(0)).state
        assert _floats(state.parts["privatizer"]) == (bands - 1) * dim
        totals.append(_floats(state))
    assert totals[0] == totals[1]


def test_zero_noise_is_dp_ftrls_sgd_on_the_same_order():
    data, key = silos(), jax.random.key(5)
    ours = engine.run(band_mf(rounds=10, bands=3), data, DpSgdHParams.create(0.1, 0.0, 1e9), key)
    ftrl = engine.run(DpFtrl(LinearRegression(3), 10, 3), data, FtrlHParams.create(0.1, 0.0, 1e9), key)
    np.testing.assert_allclose(ours.output, ftrl.output, rtol=1e-6, atol=1e-7)


@pytest.mark.privacy
def test_sweepable_through_the_registry_and_calibrated_to_a_target():
    """The registry builds it from a sweep's static table (a TOML list for band_coeffs); calibration meets the
    target from below: z = sqrt(k) x the Gaussian multiplier of eps = 3 (T = 10 // 2 = 5, k = 20 / 5 = 4)."""
    from dpjax.algorithms import load_families
    from dpjax.engine import registry

    load_families()
    entry = registry.get_algorithm("dp-sgd")
    fam = entry.build(LinearRegression(3), 20, {"batch_size": 2, "noise": "band-mf", "sampling": "one-pass",
                                                "neighboring": "replace-one", "bands": 2, "band_coeffs": [1.0, 0.4]})
    assert fam.band_coeffs == (1.0, 0.4)
    values = {"learning_rate": 0.1, "clip_norm": 1.0, "noise_multiplier": 1.0}
    z = entry.calibrate(fam, [10, 10], values, 3.0, DELTA, "pld")["noise_multiplier"]
    spec = fam.privacy([10, 10], entry.make_hparams({**values, "noise_multiplier": z}, fam))
    assert 3.0 * (1 - 1e-3) <= spec.epsilon(DELTA, "pld").epsilon <= 3.0
    assert z / 2 == pytest.approx(optimize.brentq(lambda m: _gaussian_eps(1 / m, DELTA) - 3.0, 0.1, 20), rel=3e-3)
