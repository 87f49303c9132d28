"""P_vec protocol (shuffle spec §2.1-2.4) and the shuffle-DP algorithms A4, A5
(ISRL spec §2.6-2.7, §6 items 12-13)."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from dpjax.accounting import GaussianSchedule, compute_epsilon
from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting import shuffle as shuffle_acc
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd, AcsaSchedule
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated, ShuffledNoisyMbSgd
from dpjax import engine
from dpjax.parts import aggregators
from dpjax.primitives import shuffle_protocols as sp
from dpjax.primitives.sampling import FixedAvailability
from dpjax.problems import LinearRegression, LogisticRegression

from .conftest import make_silos

PROBLEM = LinearRegression(3)


@jax.jit
def _many_sums(keys, x):
    return jax.vmap(lambda k: sp.pvec_sum(k, x, PARAMS, BOUND))(keys)


PARAMS, BOUND = sp.PvecParams(granularity=5, trials=40, probability=0.3), 1.5


# ------------------------------------------------------------------ P_vec
def test_rounding_endpoints_and_exact_sum_without_noise():
    params = sp.PvecParams(granularity=8, trials=0, probability=0.0)
    x = jnp.array([[-1.0, 1.0, 0.25, -0.5], [0.0, 0.75, -1.0, 0.5]])  # (x+1)*8/2 are integers
    xhat = sp.randomized_rounding(jax.random.key(0), x, params, 1.0)
    np.testing.assert_array_equal(xhat, (np.asarray(x) + 1) * 4)
    np.testing.assert_allclose(sp.pvec_sum(jax.random.key(1), x, params, 1.0), x.sum(0), atol=1e-6)


def test_pvec_unbiased_with_the_exact_variance():
    """Inputs with fractional parts near 1/2 (maximal rounding variance) and
    the binomial noise; mean within 4 s.e., variance within 5 s.e. of the
    exact expression (range Delta = 2L, re-centring by m L: I-3)."""
    reps = 4000
    x = jnp.asarray(np.tile([[0.3, -1.2, 1.5, 0.0]], (6, 1)), jnp.float32)  # m = 6 equal vectors
    est = np.asarray(_many_sums(jax.random.split(jax.random.key(3), reps), x), np.float64)
    var = sp.pvec_variance(np.asarray(x), PARAMS, BOUND)
    true = np.asarray(x, np.float64).sum(0)
    assert np.all(np.abs(est.mean(0) - true) <= 4 * np.sqrt(var / reps))
    assert np.all(np.abs(est.var(0, ddof=1) / var - 1) <= 5 * math.sqrt(2 / reps))


def pvec_bits_numpy(x: np.ndarray, params: sp.PvecParams, bound: float, rng: np.random.Generator) -> np.ndarray:
    """Bit-level reference: materialises every labelled one-bit message, shuffles
    them, and runs the analyzer on the shuffled list. Small g, b, m only.

    ``x``: ``[m, d]`` (NumPy, each coordinate in ``[-bound, bound]``). Returns float64 ``[d]``."""
    x = np.asarray(x, np.float64)
    m, d = x.shape
    g, b, p = params.numbers()
    delta = 2.0 * bound
    labels, bits = [], []
    for k in range(m):
        for j in range(d):
            scaled = min(max((x[k, j] + bound) * g / delta, 0.0), g)
            low = np.floor(scaled)
            xhat = int(low) + int(rng.random() < scaled - low)
            eta2 = int(np.sum(rng.random(b) < p))
            ones = xhat + eta2
            labels.append(np.full(g + b, j))
            bits.append(np.r_[np.ones(ones, np.int64), np.zeros(g + b - ones, np.int64)])
    labels, bits = np.concatenate(labels), np.concatenate(bits)
    order = rng.permutation(len(bits))  # the shuffler
    labels, bits = labels[order], bits[order]
    ones_per_label = np.bincount(labels, weights=bits, minlength=d)
    return (delta / g) * (ones_per_label - p * b * m) - m * bound


def test_count_level_equals_bit_level_in_distribution():
    rng = np.random.default_rng(0)
    x = np.array([[0.3, -1.2], [1.1, 0.4], [-0.7, 0.9]])
    bits = np.array([pvec_bits_numpy(x, PARAMS, BOUND, rng) for _ in range(400)])
    counts = np.asarray(_many_sums(jax.random.split(jax.random.key(9), 2000), jnp.asarray(x, jnp.float32)))
    for j in range(2):
        assert stats.ks_2samp(bits[:, j], counts[:, j]).pvalue > 1e-3
    var = sp.pvec_variance(x, PARAMS, BOUND)
    assert np.all(np.abs(bits.mean(0) - x.sum(0)) <= 4 * np.sqrt(var / 400))


def test_huge_trial_counts_are_exact_and_deterministic():
    """m b = 2e9 > 2^31: the centred binomial is drawn in int64 on the host;
    a float32 count would be biased by tens of counts."""
    params = sp.PvecParams(granularity=4, trials=2_000_000, probability=0.45)
    x = jnp.zeros((1000, 3))
    f = jax.jit(jax.vmap(lambda k: sp.pvec_sum(k, x, params, 1.0)))
    est = np.asarray(f(jax.random.split(jax.random.key(0), 300)), np.float64)
    sd = np.sqrt(sp.pvec_variance(np.zeros((1000, 3)), params, 1.0))
    assert np.all(np.abs(est.mean(0)) <= 4 * sd / math.sqrt(300))
    assert np.all(np.abs(est.std(0) / sd - 1) < 0.25)
    again = np.asarray(f(jax.random.split(jax.random.key(0), 300)), np.float64)
    np.testing.assert_array_equal(est, again)


def test_pvec_params_validation():
    with pytest.raises(ValueError, match="probability"):
        sp.PvecParams.create(4, 10, 0.5)
    with pytest.raises(ValueError, match="granularity"):
        sp.PvecParams.create(0, 10, 0.1)
    with pytest.raises(ValueError, match="trials"):
        sp.PvecParams.create(4, -1, 0.1)
    with pytest.raises(ValueError, match="trials"):
        sp.PvecParams.create(4, 2**31, 0.1)
    # p is stored as the nearest float32 at or above it (never less noise)
    p = 0.1234567891
    stored = sp.PvecParams.create(4, 10, p)
    assert float(stored.probability) >= p and float(stored.probability) - p < 1e-8
    assert stored.numbers() == (4, 10, float(np.float32(stored.probability)))


# ------------------------------------------------------------------ A4
def test_shuffled_aggregate_is_exactly_permutation_invariant():
    rng = np.random.default_rng(1)
    msgs = {"a": jnp.asarray(rng.normal(size=(7, 5)), jnp.float32), "b": jnp.asarray(rng.normal(size=(7,)), jnp.float32)}
    avail = jnp.array([1, 0, 1, 1, 0, 1, 1], bool)
    ref = aggregators.shuffled_aggregate(msgs, avail, jax.random.key(0))
    perm = rng.permutation(7)
    permuted = jax.tree_util.tree_map(lambda a: a[perm], msgs)
    for k in range(5):
        out = aggregators.shuffled_aggregate(permuted, avail[perm], jax.random.key(k))
        jax.tree_util.tree_map(np.testing.assert_array_equal, out, ref)
    expect = np.asarray(msgs["a"])[np.asarray(avail)].mean(0)
    np.testing.assert_allclose(ref["a"], expect, rtol=1e-5)


def test_a4_matches_noisy_mbsgd_with_k1_and_fixed_m(reg_data):
    hp = MbSgdHParams.create(0.1, noise_multiplier=0.075, clip_norm=2.0)  # std z x 2C/K = 0.3
    key = jax.random.key(4)
    shuffled = engine.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3), reg_data, hp, key)
    plain = engine.run(NoisyMbSgd(PROBLEM, 6, 1, sampling="with-replacement", availability=FixedAvailability(3)),
                       reg_data, hp, key)
    np.testing.assert_allclose(shuffled.output, plain.output, rtol=1e-5, atol=1e-6)
    twin = engine.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3, private=False), reg_data, hp, key)
    zero = engine.run(ShuffledNoisyMbSgd(PROBLEM, 6, 3), reg_data, MbSgdHParams.create(0.1, 0.0, 1e9), key)
    np.testing.assert_array_equal(twin.output, zero.output)
    algo = ShuffledNoisyMbSgd(PROBLEM, 6, 3)
    s = algo.dp_plan([12] * 4, hp).gaussian_spec().schedule  # the silos' own (pre-shuffle) transcript
    assert (s.steps, s.batch_size, s.noise_multiplier) == (6, 1, pytest.approx(0.075))
    assert algo.message_sensitivity(hp, [12] * 4) == pytest.approx(4.0)  # 2C/K


# ------------------------------------------------------------------ A5
def test_a5_without_noise_tracks_the_non_private_twin():
    """b = 0 and fine rounding (g = 2^14): the only error is randomized
    rounding, at most 2L/g per coordinate of the averaged gradient."""
    data = make_silos(num_silos=4, n=12)
    rounds, k = 4, 3
    sched = AcsaSchedule.single_stage(rounds, 8.0)
    a5 = SdpOnePassAccelerated(PROBLEM, rounds, k)
    res = engine.run(a5, data, SdpHParams.create(sched, sp.PvecParams(2**14, 0, 0.0), clip_norm=50.0),
                     jax.random.key(0))
    twin = engine.run(AcceleratedMbSgd(PROBLEM, rounds, k, private=False), data,
                      AcceleratedHParams.create(sched), jax.random.key(0))
    err = np.max(np.abs(np.asarray(res.output) - np.asarray(twin.output)))
    assert 0 < err < rounds * 2 * 50.0 / 2**14 / 16.0  # each step moves by g~/(mu+eta) with eta >= 2*8


def test_a5_noise_scale_matches_the_protocol_variance():
    """Zero gradients, one round (alpha = 1): w_1 = -o/(M K (mu + eta_1)); its
    per-coordinate variance is Var_vec / (M K (mu+eta_1))^2."""
    dim, n_silos, k, nu, bound = 3000, 3, 2, 1.0, 0.5
    data = make_silos(num_silos=n_silos, n=4, dim=dim)
    data = type(data)(data.x * 0, data.y * 0, data.mask, data.sizes)
    params = sp.PvecParams(granularity=6, trials=500, probability=0.2)
    a5 = SdpOnePassAccelerated(LinearRegression(dim), 1, k)
    res = engine.run(a5, data, SdpHParams.create(AcsaSchedule.single_stage(1, nu), params, bound), jax.random.key(2))
    m = n_silos * k
    var_sum = sp.pvec_variance(np.zeros((m, 1)), params, bound)[0]  # g even: no rounding variance
    expected = var_sum / (m * 2 * nu) ** 2  # eta_1 = 4 nu / 2, mu = 0
    out = np.asarray(res.output, np.float64)
    assert abs(out.var() / expected - 1) < 5 * math.sqrt(2 / dim)
    assert abs(out.mean()) < 5 * math.sqrt(expected / dim)


# ------------------------------------------------------------------ privacy reports (A4)
A4_SIZES = [200] * 100  # N = 100 silos of n = 200 records


def _a4(num_available=100, rounds=50, k=1, sampling="with-replacement", **kw):
    return ShuffledNoisyMbSgd(LogisticRegression(10), rounds, num_available, batch_size=k, sampling=sampling, **kw)


def _a4_report(algo, sizes, hp, delta, accountant="shuffle-tight"):
    """The full report (central, local, details) of the shuffler event the aggregator contributes."""
    plan = algo.dp_plan(sizes, hp)
    assert isinstance(plan.aggregation, shuffle_acc.ShuffleEvent)
    return shuffle_acc.shuffled_gaussian_report(plan, plan.aggregation, delta, accountant)


def test_a4_report_matches_the_accounting_functions():
    """Central eps = the chain called directly (isrl_bound=False), local eps0 = compute_epsilon of
    the silo transcript; by default the smaller of chain and ISRL-DP certifies (ISRL-DP => central
    DP). Documented configuration: N = M = 100, n = 200, R = 50, sigma/L = 8 (K = 1: z = 4),
    delta = 1e-6."""
    hp = MbSgdHParams.create(0.1, noise_multiplier=4.0, clip_norm=1.0)
    chain_only = _a4_report(_a4(isrl_bound=False), A4_SIZES, hp, 1e-6)
    direct = shuffle_acc.isrl_shuffle_chain(8.0, 1.0, 200, 100, 100, 50, 1e-6, "tight")
    assert chain_only.epsilon == direct["epsilon"] and chain_only.delta == direct["delta"] <= 1e-6
    assert chain_only.central.accountant == "shuffle-tight" and chain_only.central.unit == "record"
    assert chain_only.central.neighboring == "replace-one" and chain_only.details["message_epsilon"] == direct["eps0"]
    assert _a4(isrl_bound=False).privacy(A4_SIZES, hp).epsilon(1e-6) == chain_only.central
    schedule = GaussianSchedule(noise_std=8.0, contribution_bound=1.0, sampling="without-replacement", dataset_size=200,
                                batch_size=1, steps=50)
    local = compute_epsilon(schedule, 1e-6, "rdp")
    assert chain_only.local.epsilon == local.epsilon and chain_only.local.unit == "record-in-silo"
    algo = _a4()
    best = algo.privacy(A4_SIZES, hp).epsilon(1e-6)
    assert best.epsilon == min(direct["epsilon"], local.epsilon)
    assert direct["epsilon"] == pytest.approx(0.43239, rel=1e-4) and local.epsilon == pytest.approx(0.085150, rel=1e-4)
    assert best.accountant == "isrl-dp:rdp"  # the chain is looser at this N
    # with many silos the chain wins (N = 1e4, M = 1e3, n = 10)
    many = _a4_report(_a4(num_available=1000), [10] * 10_000, hp, 1e-6)
    assert many.central.accountant == "shuffle-tight" and many.epsilon == pytest.approx(0.17411, rel=1e-4)
    assert many.epsilon < many.details["isrl_epsilon"] == pytest.approx(1.76842, rel=1e-4)
    # paper mode (closed-form shuffle bound) needs M >= 16 ln(2/delta_s): refused, or ISRL-DP certifies
    with pytest.raises(ValueError, match="accountant"):
        _a4(isrl_bound=False).privacy(A4_SIZES, hp).epsilon(1e-6, "shuffle-paper")
    assert algo.privacy(A4_SIZES, hp).epsilon(1e-6, "shuffle-paper").epsilon == local.epsilon
    # too little noise: the chain's composed delta exceeds the target delta, so it certifies nothing
    low = MbSgdHParams.create(0.1, noise_multiplier=2.0, clip_norm=1.0)
    assert _a4_report(algo, A4_SIZES, low, 1e-6).details["chain_epsilon"] == math.inf
    with pytest.raises(ValueError, match="exceeds delta"):
        _a4(isrl_bound=False).privacy(A4_SIZES, low).epsilon(1e-6)


def test_a4_privacy_equals_a_hand_computation_at_k_above_one():
    """K = 4 records without replacement, C = 2.5, z = 40: each report's std is z x 2C/K and the
    chain treats a report as a local randomizer of its whole batch (sensitivity 2C), i.e.
    isrl_shuffle_chain(sigma = z x 2C/K, L = C); the silos' ISRL-DP bound is R subsampled
    Gaussians of that std on a mean of sensitivity 2C/K."""
    c, k, z, n, silos, m, rounds = 2.5, 4, 40.0, 50, 400, 100, 20
    hp = MbSgdHParams.create(0.1, z, c)
    algo = _a4(num_available=m, rounds=rounds, k=k, sampling="without-replacement")
    sizes = [n] * silos
    chain = shuffle_acc.isrl_shuffle_chain(z * 2 * c / k, c, n, silos, m, rounds, 1e-6, "tight", batch_size=k,
                                           sampling="without-replacement")
    local = compute_epsilon(GaussianSchedule(noise_std=z * 2 * c / k, contribution_bound=c / k,
                                             sampling="without-replacement", dataset_size=n, batch_size=k,
                                             steps=rounds), 1e-6, "rdp")
    report = _a4_report(algo, sizes, hp, 1e-6)
    assert report.details["chain_epsilon"] == pytest.approx(chain["epsilon"], rel=1e-9)
    assert report.details["isrl_epsilon"] == pytest.approx(local.epsilon, rel=1e-9)
    assert algo.privacy(sizes, hp).epsilon(1e-6).epsilon == pytest.approx(min(chain["epsilon"], local.epsilon),
                                                                          rel=1e-9)
    assert algo.message_sensitivity(hp, sizes) == pytest.approx(2 * c / k)


def test_a4_report_is_monotone():
    def chain_eps(sigma=8.0, n_silos=100, m=100, **kw):
        algo = _a4(num_available=m, isrl_bound=False, **kw)
        unit = MbSgdHParams.create(0.1, 0.0, 1.0)
        hp = dataclasses.replace(unit, noise_multiplier=algo.noise_multiplier_for(sigma, unit, [200] * n_silos))
        return algo.privacy([200] * n_silos, hp).epsilon(1e-6).epsilon

    base = chain_eps()
    # (sigma = 6: the least noise at which the chain's composed delta stays <= 1e-6)
    assert chain_eps(sigma=16.0) < base < chain_eps(sigma=6.0)  # more noise, smaller eps
    assert chain_eps(n_silos=400, m=400) < base  # more shuffled reports, same q
    assert chain_eps(n_silos=400, m=25) < chain_eps(n_silos=100, m=25)  # more silos, same M: more amplification
    assert chain_eps(n_silos=400, m=25, participation="public") > chain_eps(n_silos=400, m=25)
    assert chain_eps(k=4, sampling="without-replacement") > base


def test_a4_calibration_round_trips():
    """The one calibration routine on the multiplier: the result meets the target to 1e-4, and 1%
    less noise does not."""
    sizes = [10] * 10_000
    for isrl_bound in (True, False):
        algo = _a4(num_available=1000, isrl_bound=isrl_bound)
        unit = MbSgdHParams.create(0.1, 1.0, 2.0)
        z = algo.privacy(sizes, unit).calibrate(1.0, 1e-6)["noise_multiplier"]
        eps = algo.privacy(sizes, dataclasses.replace(unit, noise_multiplier=z)).epsilon(1e-6).epsilon
        assert 1.0 - 1e-4 <= eps <= 1.0
        less = algo.privacy(sizes, dataclasses.replace(unit, noise_multiplier=z * 0.99)).epsilon(1e-6)
        assert less.epsilon > 1.0


def test_a4_report_invalid_inputs_name_the_argument():
    hp = MbSgdHParams.create(0.1, noise_multiplier=4.0, clip_norm=1.0)
    algo = _a4(num_available=10, rounds=5)
    with pytest.raises(ValueError, match="silo_sizes"):
        algo.privacy([0] * 20, hp)
    with pytest.raises(ValueError, match="num_available"):
        algo.privacy([50] * 5, hp)
    with pytest.raises(ValueError, match="delta"):
        algo.privacy([50] * 20, hp).epsilon(1.5)
    with pytest.raises(ValueError, match="accountant"):
        algo.privacy([50] * 20, hp).epsilon(1e-6, "rdp")
    with pytest.raises(ValueError, match="participation"):
        _a4(participation="secret")
    with pytest.raises(ValueError, match="noise_multiplier"):  # unchecked construction: the plan refuses it
        algo.privacy([50] * 20, MbSgdHParams(jnp.float32(0.1), jnp.float32(-1.0), jnp.float32(1.0)))
    with pytest.raises(ValueError, match="neighboring"):
        _a4(sampling="without-replacement", neighboring="add-remove", k=2)
    twin = ShuffledNoisyMbSgd(LogisticRegression(10), 5, 10, private=False).privacy([50] * 20, hp)
    assert math.isinf(twin.epsilon(1e-6).epsilon) and not twin.private
    with pytest.raises(ValueError, match="target_epsilon"):
        algo.privacy([50] * 20, hp).calibrate(0.0, 1e-6)
    assert math.isinf(algo.privacy([50] * 20, MbSgdHParams.create(0.1, 0.0, 1.0)).epsilon(1e-6).epsilon)


# ------------------------------------------------------------------ privacy reports (A5)
def _a5_setup(num_silos=4, n=12, k=3, rounds=4, availability=None):
    data = make_silos(num_silos=num_silos, n=n)
    algo = SdpOnePassAccelerated(PROBLEM, rounds, k, availability=availability or FixedAvailability(num_silos))
    return data, algo


def _a5_report(algo, sizes, hp, delta, accountant="pvec-lemma"):
    """The full report of the P_vec event the randomizer contributes (central, local None, details)."""
    plan = algo.dp_plan(sizes, hp)
    (event,) = plan.noises
    assert isinstance(event, pvec_acc.PvecEvent) and isinstance(plan.aggregation, shuffle_acc.ShuffleEvent)
    return pvec_acc.pvec_report(plan, event, delta, accountant)


def test_a5_report_matches_pvec_accounting_and_the_calibrator():
    _, algo = _a5_setup(num_silos=8, availability=FixedAvailability(5))
    sched = AcsaSchedule.single_stage(4, 8.0)
    sizes = [12] * 8
    assert algo.min_vectors(8) == 15 and algo.dim == 3
    for eps in (0.5, 2.0, 8.0):
        hp = SdpHParams.create(sched, algo.pvec_params_for(8, eps, 1e-5), clip_norm=2.0)
        rep = _a5_report(algo, sizes, hp, 1e-5)
        g, b, p = hp.pvec.numbers()
        cert = pvec_acc.pvec_epsilon(g, b, p, 15, 3, 1e-5, "lemma")
        assert rep.epsilon == cert.epsilon and rep.delta == cert.delta == pytest.approx(1e-5)
        assert algo.privacy(sizes, hp).epsilon(1e-5) == rep.central
        # the float32 probability is rounded up: the run is never less private than its target
        assert eps * (1 - 1e-6) <= rep.epsilon <= eps * (1 + 1e-12)
        assert rep.local is None and rep.central.accountant == "pvec-lemma" and rep.central.unit == "record"
        if eps <= 2.0:  # the printed form needs eps_j <= 1 (e^x - 1 <= 2x)
            printed = algo.privacy(sizes, hp).epsilon(1e-5, "pvec-printed")
            assert printed.epsilon > rep.epsilon  # the printed Lemma 3.3 constants are looser
        else:
            with pytest.raises(ValueError, match="granularity"):
                algo.privacy(sizes, hp).epsilon(1e-5, "pvec-printed")
        # the privacy noise's std in the averaged gradient, in units of the clip norm L = 2
        assert rep.central.noise_std * 2.0 == pytest.approx(4.0 / g * math.sqrt(15 * b * p * (1 - p)) / 15)
    paper = SdpHParams.create(sched, algo.pvec_params_for(8, 1.0, 1e-5, mode="paper"), clip_norm=2.0)
    assert algo.privacy(sizes, paper).epsilon(1e-5).epsilon < 0.5  # Theorem 3.2's calculator is loose


@pytest.mark.parametrize("accountant", ["pvec-lemma", "pvec-printed"])
def test_a5_calibration_is_the_one_routine_over_the_calculator(accountant):
    """calibrate searches the calculator's parameters (lemma_opt / paper mode) with the one routine:
    the result is certified at the target, within the routine's tolerance of it, and needs no more
    noise than the calculator at the target itself (lemma_opt solves the lemma's equation to ~1e-9:
    the same up to that tolerance; Theorem 3.2's choice is loose: far less noise)."""
    _, algo = _a5_setup(num_silos=8, availability=FixedAvailability(5))
    sched = AcsaSchedule.single_stage(4, 8.0)
    sizes = [12] * 8
    start = SdpHParams.create(sched, algo.pvec_params_for(8, 2.0, 1e-5), clip_norm=2.0)
    mode = {"pvec-lemma": "lemma_opt", "pvec-printed": "paper"}[accountant]
    for target in (0.5, 1.0):
        pvec = algo.privacy(sizes, start).calibrate(target, 1e-5, accountant)["pvec"]
        eps = algo.privacy(sizes, dataclasses.replace(start, pvec=pvec)).epsilon(1e-5, accountant).epsilon
        assert target * (1 - 1e-6) <= eps <= target
        direct = SdpHParams.create(sched, algo.pvec_params_for(8, target, 1e-5, mode=mode), clip_norm=2.0)
        assert eps >= algo.privacy(sizes, direct).epsilon(1e-5, accountant).epsilon * (1 - 1e-6)


def test_a5_report_is_monotone():
    sched = AcsaSchedule.single_stage(4, 8.0)
    _, algo = _a5_setup(availability=FixedAvailability(4))
    pv = algo.pvec_params_for(4, 2.0, 1e-5)
    base = algo.privacy([12] * 4, SdpHParams.create(sched, pv)).epsilon(1e-5).epsilon
    more_noise = sp.PvecParams(pv.granularity, 2 * pv.trials, pv.probability)
    assert algo.privacy([12] * 4, SdpHParams.create(sched, more_noise)).epsilon(1e-5).epsilon < base
    full = SdpOnePassAccelerated(PROBLEM, 4, 3)  # FullAvailability: more silos, more users per P_vec call
    assert full.privacy([12] * 8, SdpHParams.create(sched, pv)).epsilon(1e-5).epsilon < \
        full.privacy([12] * 4, SdpHParams.create(sched, pv)).epsilon(1e-5).epsilon == base


def test_a5_report_invalid_inputs_name_the_argument():
    sched = AcsaSchedule.single_stage(4, 8.0)
    _, algo = _a5_setup()
    hp = SdpHParams.create(sched, algo.pvec_params_for(4, 2.0, 1e-5))
    with pytest.raises(ValueError, match="num_rounds"):  # one pass needs R K <= n
        algo.privacy([11] * 4, hp)
    with pytest.raises(ValueError, match="num_available"):
        algo.privacy([12] * 3, hp)
    with pytest.raises(ValueError, match="delta"):
        algo.privacy([12] * 4, hp).epsilon(0.7)
    with pytest.raises(ValueError, match="accountant"):
        algo.privacy([12] * 4, hp).epsilon(1e-5, "tight")
    with pytest.raises(ValueError, match="trials"):
        algo.privacy([12] * 4, SdpHParams.create(sched, sp.PvecParams(8, 0, 0.0))).epsilon(1e-5)
    small = SdpOnePassAccelerated(PROBLEM, 4, 3, availability=FixedAvailability(4), max_granularity=8)
    with pytest.raises(ValueError, match="max_granularity"):
        small.privacy([12] * 4, hp).epsilon(1e-5)
    with pytest.raises(ValueError, match="epsilon"):
        algo.pvec_params_for(4, 20.0, 1e-5)
    batched = engine.stack_hparams([hp, hp])
    with pytest.raises(ValueError, match="index one run"):
        algo.privacy([12] * 4, batched)
    with pytest.raises(ValueError, match="max_granularity"):
        SdpOnePassAccelerated(PROBLEM, 4, 2**11, max_granularity=2**14)


# ------------------------------------------------------------------ traced P_vec parameters
@pytest.mark.slow
def test_a5_epsilon_grid_is_one_compiled_program():
    """(g, b, p) are per-run hparams: three epsilons run with ONE compilation of
    the single-run program and ONE of the batched program, and the vmapped
    grid equals the per-epsilon runs."""
    data, algo = _a5_setup(availability=FixedAvailability(3))
    sched = AcsaSchedule.single_stage(4, 8.0)
    hps = [SdpHParams.create(sched, algo.pvec_params_for(4, e, 1e-5), clip_norm=2.0) for e in (0.5, 2.0, 8.0)]
    assert len({hp.pvec.numbers() for hp in hps}) == 3
    key = jax.random.key(7)
    engine.compiled_runner.cache_clear()
    singles = [engine.run(algo, data, hp, key) for hp in hps]
    single_prog = engine.compiled_runner(algo, None, None, False, None, None)
    assert single_prog._cache_size() == 1
    grid = engine.run_many(algo, data, engine.stack_hparams(hps), jnp.stack([key] * 3))
    batched_prog = engine.compiled_runner(algo, None, None, True, None, None, 0)
    assert batched_prog._cache_size() == 1
    for i, res in enumerate(singles):
        np.testing.assert_allclose(grid.output[i], res.output, rtol=1e-6, atol=1e-7)
    assert not np.allclose(singles[0].output, singles[2].output)  # the noise really differs per epsilon
    # a traced granularity above the static bound fails loudly (NaN -> NonFiniteError), not silently
    capped = SdpOnePassAccelerated(PROBLEM, 4, 3, availability=FixedAvailability(3), max_granularity=4)
    with pytest.raises(engine.NonFiniteError):
        engine.run(capped, data, hps[0], key)
