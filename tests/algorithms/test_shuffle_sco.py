"""The shuffle-private SCO families as declarations of parts: privacy() against hand computations at a
non-trivial setting (L = 2.5, batches of 7 and 40 users), calibration through the one routine, and the
measured noise of the Gaussian aggregators (std z 2L / batch after the division by the batch)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import gdp
from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting import shuffle_sco as sco
from dpjax.algorithms import shuffle_sco as S
from dpjax import engine
from dpjax.engine.silos import SiloData
from dpjax.primitives import shuffle_protocols as sp
from dpjax.reproduce.isrl_scaling import MeanEstimation

DELTA, L, D = 1e-6, 2.5, 3


def _hp(rounds, batch, interactive, **kw):
    return S.ScoHParams.single_phase(rounds, batch, 0.5, interactive=interactive, clip_norm=L, **kw)


def test_families_are_declarations_of_parts():
    """No family of the module writes its own round or privacy (issue 24, rule 1)."""
    for cls in (S.ShuffleSgd, S.ShuffleAcsa, S._ShuffleScoBase):
        assert not {"init", "step", "privacy", "params", "output_params", "report", "calibrate"} & set(vars(cls))
    fam = S.ShuffleSgd(MeanEstimation(D), 4, 40, "pvec")
    assert fam.noise_fields == ("noise_multiplier",)


@pytest.mark.parametrize("interactive", [0, 1])
def test_pvec_privacy_is_theorem_3_2_by_hand(interactive):
    """P_vec on 40 users per round, d = 3, L = 2.5: a fresh phase is (eps_1, delta)-SDP with eps_1 Theorem 3.2
    inverted at the round's (g, b, p, 40 users) (``pvec.pvec_epsilon``, corrected Lemma 3.3); an interactive
    phase composes its T = 4 rounds at (eps_r, delta/(T+1)) optimally (Kairouz-Oh-Viswanath). The norm bound L
    sets P_vec's range, not its privacy."""
    T, m = 4, 40
    dr = DELTA / (T + 1)
    calc = pvec_acc.pvec_params(0.6, dr, m, D, "lemma_opt")
    params = sp.PvecParams.create(calc.g, calc.b, calc.p)
    g, b, p = params.numbers()
    fam = S.ShuffleSgd(MeanEstimation(D), T, m, "pvec", max_granularity=g)
    hp = _hp(T, m, interactive, pvec=params)
    users = m if interactive else T * m
    if interactive:
        e0 = pvec_acc.pvec_epsilon(g, b, p, m, D, dr, "lemma").epsilon
        hand = sco.compose_epsilon(e0, dr, T, DELTA, "optimal")
    else:
        hand = pvec_acc.pvec_epsilon(g, b, p, m, D, DELTA, "lemma").epsilon
    rep = fam.privacy([users], hp).epsilon(DELTA)
    assert rep.epsilon == pytest.approx(hand, rel=1e-12)
    assert rep.accountant == "pvec-lemma:optimal" and rep.unit == "user" and rep.neighboring == "replace-one"
    unit_clip = S.ScoHParams.single_phase(T, m, 0.5, interactive=interactive, pvec=params)
    assert fam.privacy([users], unit_clip).epsilon(DELTA).epsilon == rep.epsilon


@pytest.mark.parametrize("aggregator", ["central-gaussian", "local-gaussian"])
@pytest.mark.parametrize("interactive", [0, 1])
def test_gaussian_privacy_is_gdp_by_hand(aggregator, interactive):
    """z = 0.75 per round, 7 users, L = 2.5: each user's view has sensitivity 2L and std z 2L (on the round's
    sum, or on its own message for local noise), T = 4 rounds composed when the users stay:
    mu = sqrt(calls) / z, eps = the GDP epsilon at delta; the batch does not enter."""
    T, m, z = 4, 7, 0.75
    fam = S.ShuffleSgd(MeanEstimation(D), T, m, aggregator)
    hp = _hp(T, m, interactive, noise_multiplier=z)
    calls = T if interactive else 1
    hand = gdp.gaussian_mechanism_epsilon(z * 2 * L, 2 * L, DELTA, count=calls)
    rep = fam.privacy([m if interactive else T * m], hp).epsilon(DELTA)
    assert rep.epsilon == pytest.approx(hand, rel=1e-9) and rep.accountant == "gdp"
    assert hand == pytest.approx(gdp.gdp_epsilon(math.sqrt(calls) / z, DELTA), rel=1e-12)


def test_pan_private_privacy_by_hand():
    """Algorithm 6, z = 6, L = 2.5: one draw of std z 2L on the batch's sum (sensitivity 2L) protects the user
    (Lemma C.4): the analytic Gaussian epsilon at sigma/Delta = z, or Lemma C.5's sqrt(2 ln(2/delta))/z."""
    T, m, z = 3, 7, 6.0
    fam = S.ShuffleAcsa(MeanEstimation(D), T, m, "pan-gaussian")
    spec = fam.privacy([T * m], _hp(T, m, 0, noise_multiplier=z))
    assert spec.epsilon(DELTA).epsilon == pytest.approx(gdp.gaussian_mechanism_epsilon(z * 2 * L, 2 * L, DELTA),
                                                        rel=1e-9)
    assert spec.epsilon(DELTA, "pan-paper").epsilon == pytest.approx(math.sqrt(2 * math.log(2 / DELTA)) / z,
                                                                     rel=1e-12)
    with pytest.raises(ValueError, match="one batch"):
        fam.privacy([m], _hp(T, m, 1, noise_multiplier=z))


def test_gaussian_calibration_is_the_closed_form_through_the_one_routine():
    """The one routine (``calibration.smallest_scale``) on the multipliers scale x sqrt(calls) meets the target
    at the closed form sigma = sqrt(T) 2L / mu(eps, delta) (to its tolerance), never above it."""
    T, m, target = 4, 7, 1.3
    for interactive in (0, 1):
        fam = S.ShuffleSgd(MeanEstimation(D), T, m, "central-gaussian")
        hp = _hp(T, m, interactive)
        users = m if interactive else T * m
        z = np.asarray(fam.privacy([users], hp).calibrate(target, DELTA)["noise_multiplier"])
        closed = gdp.gaussian_mechanism_sigma(target, DELTA, 1.0, count=T if interactive else 1)
        np.testing.assert_allclose(z, closed, rtol=1e-9)
        z32 = z.astype(np.float32)
        z32 = np.where(z32 < z, np.nextafter(z32, np.float32(np.inf)), z32)  # stored rounded up, as sweeps do
        calibrated = S.ScoHParams.single_phase(T, m, 0.5, interactive=interactive, clip_norm=L, noise_multiplier=z32)
        assert fam.privacy([users], calibrated).epsilon(DELTA).epsilon <= target * (1 + 1e-12)


def test_pvec_calibration_of_an_interactive_phase_meets_the_target():
    """The calculator's parameters at epsilon 1/scale (each of T rounds at the optimal per-round budget),
    certified as stored (p in float32): the smallest scale meeting the target certifies it to 1e-6."""
    T, m, target = 5, 60, 0.9
    fam = S.ShuffleSgd(MeanEstimation(D), T, m, "pvec", max_granularity=2**12)
    hp = _hp(T, m, 1)
    spec = fam.privacy([m], hp)
    pv = spec.calibrate(target, DELTA)["pvec"]
    assert len(set(np.asarray(pv.granularity).tolist())) == 1 and np.all(np.asarray(pv.trials) > 0)
    eps = fam.privacy([m], dataclasses.replace(hp, pvec=pv)).epsilon(DELTA).epsilon
    assert target * (1 - 1e-6) <= eps <= target
    with pytest.raises(ValueError, match="heuristic"):
        spec.calibrate(target, DELTA, "pvec-numerical")


@pytest.mark.parametrize("aggregator,users_noise", [("central-gaussian", 1.0), ("local-gaussian", 7.0)])
def test_measured_gaussian_noise_is_z_times_2L_over_the_batch(aggregator, users_noise):
    """Zero gradients (mean estimation at 0 of zero data), one round, eta = 1, last iterate: the output is
    minus the aggregated noise, whose std per coordinate must be z 2L / B (central: one draw on the sum) or
    sqrt(B) z 2L / B (local: B users' own draws), B = 7, z = 0.3, L = 2.5; the sample variance within the
    chi^2 99.9 % interval of 3000 draws, the mean within 4 standard errors."""
    B, z, reps = 7, 0.3, 3000
    data = SiloData.from_silos([np.zeros((B, D), np.float32)], [np.zeros(B, np.float32)])
    fam = S.ShuffleSgd(MeanEstimation(D), 1, B, aggregator, projection_radius=None, output="last")
    hp = S.ScoHParams.single_phase(1, B, 1.0, noise_multiplier=z, clip_norm=L)
    batched = jax.tree_util.tree_map(lambda v: jnp.broadcast_to(v, (reps,) + jnp.shape(v)), hp)
    out = engine.run_many(fam, data, batched, jax.random.split(jax.random.key(11), reps))
    x = -np.asarray(out.output, np.float64)
    std = math.sqrt(users_noise) * z * 2 * L / B
    np.testing.assert_allclose(fam.noise_std_of(hp), math.sqrt(users_noise) * z * 2 * L, rtol=1e-6)
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1) / (reps - 1)
    ratio = x.var(axis=0, ddof=1) / std**2
    assert np.all((ratio > lo) & (ratio < hi)), ratio
    assert np.all(np.abs(x.mean(axis=0)) <= 4 * std / math.sqrt(reps))


def test_windows_are_checked_against_the_data_and_max_batch():
    """A window past the n users, or beyond the compiled max_batch, would run with fewer users (fewer noise
    draws) than the accountant counts: privacy() refuses it naming the quantity."""
    fam = S.ShuffleSgd(MeanEstimation(D), 3, 5, "central-gaussian")
    hp = _hp(3, 5, 0, noise_multiplier=1.0)
    assert fam.privacy([15], hp).epsilon(DELTA).epsilon < math.inf
    with pytest.raises(ValueError, match="num_users=14"):
        fam.privacy([14], hp)
    with pytest.raises(ValueError, match="ONE silo"):
        fam.privacy([15, 15], hp)
    with pytest.raises(ValueError, match="max_batch=4"):
        S.ShuffleSgd(MeanEstimation(D), 3, 4, "central-gaussian").privacy([15], hp)
    with pytest.raises(ValueError, match="num_rounds=2"):
        S.ShuffleSgd(MeanEstimation(D), 2, 5, "central-gaussian").privacy([15], hp)


class _TwoLeafMean:
    """``MeanEstimation`` on ``[x, y]`` with the params split into two leaves ``{"w": [d], "b": []}``."""

    def __init__(self, dim):
        self.dim = dim

    def init_params(self, key=None):
        return {"b": jnp.zeros((), jnp.float32), "w": jnp.zeros((self.dim,), jnp.float32)}

    def loss(self, params, x, y):
        return 0.5 * jnp.sum(jnp.square(params["w"] - x)) + 0.5 * jnp.square(params["b"] - y)


@pytest.mark.parametrize("cls", [S.ShuffleSgd, S.ShuffleAcsa])
def test_pytree_params_run_on_the_flattened_user_vectors(cls):
    """The users' gradients are flattened (``ravel_pytree``: leaf "b" then "w") and the server unravels the
    flat update: a two-leaf model runs exactly like mean estimation on the concatenated (y, x)."""
    n, T, B = 24, 3, 8
    rng = np.random.default_rng(4)
    x, y = rng.uniform(-0.5, 0.5, (n, D)).astype(np.float32), rng.uniform(-0.5, 0.5, n).astype(np.float32)
    hp = S.ScoHParams.single_phase(T, B, 0.4, clip_norm=L)
    split = engine.run(cls(_TwoLeafMean(D), T, B, "exact"), SiloData.from_silos([x], [y]), hp, jax.random.key(0))
    joined = np.concatenate([y[:, None], x], axis=1)
    flat = engine.run(cls(MeanEstimation(D + 1), T, B, "exact"), SiloData.from_silos([joined], [y]), hp,
                      jax.random.key(0))
    out = np.concatenate([np.atleast_1d(split.output["b"]), np.asarray(split.output["w"])])
    np.testing.assert_allclose(out, np.asarray(flat.output), rtol=1e-6, atol=1e-7)


def test_the_shared_base_has_no_server_part_and_says_which_families_do():
    fam = S.ShuffleSgd(MeanEstimation(D), 4, 40, "pvec")
    assert fam.server() is not None  # each family declares its own
    with pytest.raises(TypeError, match="ShuffleSgd or ShuffleAcsa"):
        S._ShuffleScoBase.server(fam)
