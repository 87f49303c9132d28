"""Parameter rules (spec §6 items 6, 10, 11): golden values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.algorithms import schedules as S


def test_mbsgd_convex_schedule_hand_values():
    # R = (1*1*2/1) min(10, 100/10) + min(400, 1e4*4/100) = 20 + 400; eta = 200/(420*10) = 1/21
    out = S.mbsgd_convex_schedule(smoothness=1, diameter=1, lipschitz=1, n=100, num_available=4, dim=100, epsilon=1)
    assert out["num_rounds"] == 420
    assert out["learning_rate"] == pytest.approx(1 / 21, rel=1e-12)


def test_mbsgd_strongly_convex_schedule_hand_values():
    # (2/0.5) ln(80) = 17.53 < min(20, 40) = 20 -> R = 20; c = 5/2 + 1 = 3.5;
    # eta = ln(0.25*4*400/3.5)/(0.5*20) = ln(114.2857)/10
    out = S.mbsgd_strongly_convex_schedule(smoothness=1, strong_convexity=0.5, diameter=2, lipschitz=1, n=10,
                                           num_available=2, dim=5, epsilon=1, noise_std=1)
    assert out["num_rounds"] == 20
    assert out["learning_rate"] == pytest.approx(math.log(400 / 3.5) / 10, rel=1e-12)
    assert out["decay"] == pytest.approx(0.5 * out["learning_rate"])


def test_stich_weights_sum_to_one_and_are_stable():
    np.testing.assert_allclose(S.stich_weights(3, 0.5, 1.0), np.array([2, 4, 8]) / 14, rtol=1e-12)
    w = S.stich_weights(1_000_000, 0.1, 1.0)  # (1/0.9)^1e6 overflows any float
    assert np.all(np.isfinite(w)) and w.sum() == pytest.approx(1.0, abs=1e-12)
    assert w[-1] / w[-2] == pytest.approx(1 / 0.9, rel=1e-9)
    with pytest.raises(ValueError, match="strong_convexity"):
        S.stich_weights(3, 2.0, 1.0)


def test_smoothing_beta_hand_values():
    common = dict(lipschitz=1, n=100, num_available=4, dim=100, epsilon=1, delta=math.exp(-1))
    # convex: (1*2/2) / (0.1 + sqrt(100)/100) = 5; sc: 4/(0.01 + 100/1e4) = 200
    assert S.smoothing_beta(diameter=2, **common) == pytest.approx(5.0)
    assert S.smoothing_beta(strong_convexity=1, **common) == pytest.approx(200.0)
    # ERM: 1*100*2*1/(10*2) = 10; 1*4*1e4/100 = 400
    assert S.smoothing_beta(diameter=2, erm=True, **common) == pytest.approx(10.0)
    assert S.smoothing_beta(strong_convexity=1, erm=True, **common) == pytest.approx(400.0)
    with pytest.raises(ValueError, match="exactly one"):
        S.smoothing_beta(**common)
    assert S.smoothed_strong_convexity(1.0, 99.0) == pytest.approx(0.99)


def test_variance_bound_and_lambda_hand_values():
    v2 = S.variance_bound(gradient_variance=4, batch_size=2, num_available=2, num_silos=3, heterogeneity=1,
                          dim=10, noise_std=0.5)
    assert v2 == pytest.approx(1 + 0.25 + 1.25)
    assert S.regularization_lambda(variance=4, diameter=1, num_rounds=16) == pytest.approx(0.25)


def test_multistage_stages_hand_values():
    # V = 0: R_k = ceil(4 sqrt(2*1/0.5)) = 8, nu_k = 2 beta = 2; two stages fit in 20
    assert S.multistage_stages(num_rounds=20, smoothness=1, strong_convexity=0.5, variance=0,
                               initial_gap=1) == [(8, 2.0), (8, 2.0)]
    # V^2 = 0.01: the noise term 1.28/(1.5 * 2^-(k+1)) = 3.41, 6.83, 13.65, 27.3 -> R_k = 8, 8, 14, (28)
    stages = S.multistage_stages(num_rounds=40, smoothness=1, strong_convexity=0.5, variance=0.01, initial_gap=1)
    assert [r for r, _ in stages] == [8, 8, 14]
    assert all(nu == 2.0 for _, nu in stages)
    with pytest.raises(ValueError, match="num_rounds"):
        S.multistage_stages(num_rounds=5, smoothness=1, strong_convexity=0.5, variance=0, initial_gap=1)


def test_one_pass_batch_sizes_hand_values():
    common = dict(lipschitz=1, smoothness=1, diameter=1, n=100_000, dim=1, epsilon=1, delta=math.exp(-1))
    assert S.one_pass_batch_size_convex(num_available=1, **common) == 1000  # (1e5)^(3/5)
    assert S.one_pass_batch_size_convex(num_available=32, **common) == 500  # / 32^(1/5)
    assert S.one_pass_batch_size_convex(num_available=32, shuffle_dp=True, **common) == 250  # / 32^(2/5)
    # sc: kappa = 4, ln(mu Delta min(1e4 * 1/(1*1*1), 100*1/1)) = ln(100*0.25*1)... = ln(25)
    k = S.one_pass_batch_size_strongly_convex(lipschitz=1, smoothness=1, strong_convexity=0.25, initial_gap=1,
                                              n=100, dim=1, epsilon=1, delta=math.exp(-1), num_available=1,
                                              gradient_variance=1)
    assert k == round(100 / (2 * math.log(0.25 * 100)))


def test_erm_accelerated_rounds_fixed_point():
    common = dict(smoothness=1, diameter=1, lipschitz=1, n=100, num_silos=1, num_available=1, dim=1,
                  epsilon=1, delta=math.exp(-4))
    full = S.erm_accelerated_rounds(**common)  # R = ceil(sqrt(100/2)) = 8, K = n
    assert (full["num_rounds"], full["batch_size"]) == (8, 100)
    small = S.erm_accelerated_rounds(batch_size=10, **common)  # R = 1e4/(10*4) = 250, K_min(250) = 1
    assert (small["num_rounds"], small["batch_size"]) == (250, 10)
    # K below K_min is raised: K_min(R) = ceil(100/(4 sqrt(2 R ln(2/delta))))
    tiny = S.erm_accelerated_rounds(**{**common, "epsilon": 8.0, "delta": 1e-3}, batch_size=1)
    r = tiny["num_rounds"]
    assert tiny["batch_size"] >= math.ceil(8 * 100 / (4 * math.sqrt(2 * r * math.log(2e3))) - 1e-12)


def test_unbalanced_parameters_hand_values():
    # K_min = ceil(eps n / (4 sqrt(2 R ln(2/delta)))) = ceil(n/56.30) = 2 and 4; c = 0.02
    out = S.unbalanced_parameters(silo_sizes=[100, 200], epsilons=[1, 1], deltas=[1e-4, 1e-4], num_rounds=10,
                                  lipschitz=1)
    assert out["batch_sizes"] == (2, 4)
    assert out["fraction"] == pytest.approx(0.02)
    s1, s2 = out["noise_stds"]
    assert s1 == pytest.approx(2 * s2)  # sigma_i proportional to 1/n_i
    with pytest.raises(ValueError, match="epsilons"):
        S.unbalanced_parameters(silo_sizes=[10, 20], epsilons=[1], deltas=[1e-4, 1e-4], num_rounds=3, lipschitz=1)


def test_hybrid_user_level_budget():
    eps0, delta0 = S.hybrid_user_level_budget(epsilon=0.5, delta=1e-5, n=10)
    assert (eps0, delta0) == pytest.approx((0.05, 2.5e-7))
    # group privacy over the silo's n records gives back at most (eps, delta)
    assert 10 * eps0 <= 0.5 + 1e-12 and 10 * math.exp(9 * eps0) * delta0 <= 1e-5
    with pytest.raises(ValueError, match="epsilon"):
        S.hybrid_user_level_budget(epsilon=2.0, delta=1e-5, n=10)
