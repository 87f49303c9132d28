"""Parameter rules of Lowy & Razaviyayn: golden values computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.algorithms import schedules as S


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