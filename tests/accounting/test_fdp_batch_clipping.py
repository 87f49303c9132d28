"""f-DP / GDP toolkit and the exact batch-clipping accountant against batch-clipping spec §3.9."""

import math

import numpy as np
import pytest

from dpjax.accounting import batch_clipping as bc
from dpjax.accounting import fdp, gdp


def test_v1_gaussian_tradeoff():
    for mu, a, want in [(1, 0.05, 0.740489), (1, 0.1, 0.610856), (1, 0.5, 0.158655), (0.5, 0.05, 0.873865),
                        (1.5, 0.01, 0.795697), (1.5, 0.2, 0.255147), (1.5, 0.5, 0.066807)]:
        assert fdp.tradeoff_gaussian(mu, a) == pytest.approx(want, abs=1e-6)


V2 = [(0.5, 1.974127e-1, 6.829595e-3, 9.439169e-6, 1.993091, 2.254085),
      (1.0, 3.829249e-1, 1.269367e-1, 2.092364e-2, 4.377178, 4.886554),
      (math.sqrt(10) / 2, 5.708047e-1, 3.525181e-1, 1.704654e-1, 7.511276, 8.306225),
      (math.sqrt(40) / 2, 8.861537e-1, 8.185178e-1, 7.293863e-1, 17.856587, 19.423656),
      (4 * math.sqrt(10) / 2, 9.984346e-1, 9.974467e-1, 9.959239e-1, 46.211210, 49.319277)]


@pytest.mark.parametrize("row", V2)
def test_v2_gdp_to_eps_delta(row):
    mu, d0, d1, d2, e5, e6 = row
    for eps, want in [(0, d0), (1, d1), (2, d2)]:
        assert gdp.gdp_delta(mu, eps) == pytest.approx(want, rel=1e-5)
    assert gdp.gdp_delta(mu, 0) == pytest.approx(2 * fdp.tradeoff_gaussian(0, 0) * 0 + 2 * 0.5 * (1 + math.erf(mu / 2 / math.sqrt(2))) - 1, rel=1e-9)
    assert gdp.gdp_epsilon(mu, 1e-5) == pytest.approx(e5, rel=1e-6)
    assert gdp.gdp_epsilon(mu, 1e-6) == pytest.approx(e6, rel=1e-6)
    # generic sup-conversion of the trade-off function agrees
    assert fdp.delta_from_tradeoff(lambda a: fdp.tradeoff_gaussian(mu, a), 1.0) == pytest.approx(d1, rel=1e-4)


def test_v2_composition_and_v3_group():
    assert gdp.gdp_compose(0.5, 1.2) == pytest.approx(1.3, rel=1e-12)
    for g, root, generic in [(1, 7.5113, 7.5113), (2, 11.4800, 17.8566), (4, 17.8566, 46.2112), (8, 28.3735, 133.0863)]:
        mu = math.sqrt(10) / 2
        assert gdp.gdp_epsilon(math.sqrt(g) * mu, 1e-5) == pytest.approx(root, abs=6e-5)
        assert gdp.gdp_epsilon(gdp.gdp_group(mu, g), 1e-5) == pytest.approx(generic, abs=6e-5)


def test_v4_mixture_tradeoff_and_delta():
    law = {0.0: 0.2, 1.0: 0.5, 2.0: 0.3}
    for a, want in [(0.01, 0.816079), (0.05, 0.647857), (0.1, 0.536871), (0.3, 0.303731), (0.5, 0.122345)]:
        assert fdp.mixture_tradeoff(law, a) == pytest.approx(want, abs=2e-6)
    for e, want in [(0, 0.396269), (0.5, 0.298967), (1, 0.216427), (2, 0.110030)]:
        assert fdp.mixture_delta(law, e) == pytest.approx(want, abs=2e-6)
        assert fdp.delta_from_tradeoff(lambda a: np.array([fdp.mixture_tradeoff(law, x) for x in np.atleast_1d(a)]) if np.ndim(a) else fdp.mixture_tradeoff(law, float(a)), e, grid=2001) == pytest.approx(want, abs=1e-4)
    law2 = {1.0: 0.5, 2.0: 0.5}
    for a, want in [(0.01, 0.753767), (0.05, 0.550255), (0.1, 0.422179), (0.3, 0.175400), (0.5, 0.066807)]:
        assert fdp.mixture_tradeoff(law2, a) == pytest.approx(want, abs=2e-6)


def test_v5_v6_bound_families():
    assert fdp.f_lower_beta_star(1.5, 0.01) == pytest.approx(0.221658, abs=2e-6)
    for a, want in [(0, 0.99), (0.01, 0.785697), (0.05, 0.547587), (0.2, 0.245147), (0.5, 0.063621), (0.9, 0.00225)]:
        assert fdp.f_lower(1.5, 0.01, a) == pytest.approx(want, abs=2e-6)
        assert fdp.f_lower(1.5, 0.01, a) <= fdp.tradeoff_gaussian(1.5, a) + 1e-12
    for a, want in [(0, 1.0), (0.01, 0.797740), (0.05, 0.562011), (0.2, 0.262596), (0.5, 0.068463), (0.9, 0.002753)]:
        assert fdp.f_upper(1.5, 0.01, a) == pytest.approx(want, abs=2e-6)
        assert fdp.f_upper(1.5, 0.01, a) >= fdp.tradeoff_gaussian(1.5, a) - 1e-12
    for e, want, gd, floor in [(0.5, 0.441822, 0.431822, 0.425219), (1, 0.330392, 0.320392, 0.315073), (2, 0.152321, 0.142321, 0.139534)]:
        assert fdp.delta_from_lower(1.5, 0.01, e) == pytest.approx(want, abs=2e-6)
        assert gdp.gdp_delta(1.5, e) == pytest.approx(gd, abs=2e-6)
        assert fdp.delta_from_tradeoff(lambda a: fdp.f_upper(1.5, 0.01, a), e) == pytest.approx(floor, abs=5e-6)


def test_v9_occupancy_laws():
    # subsampling per-round law (N=40, g=3, m=3, s=4) mixes Pr[L | t] over t ~ Hypergeometric
    from scipy import stats
    pl = np.zeros(4)
    for t in range(4):
        for l, p in enumerate(bc.round_occupancy_law(3, 4, t)):
            pl[l] += stats.hypergeom.pmf(t, 40, 3, 12) * p
    np.testing.assert_allclose(pl, [0.331579, 0.511336, 0.150607, 0.006478], atol=2e-6)
    law = bc.c2_law("shuffle", 48, 4, 2, 3, 1).as_dict()
    np.testing.assert_allclose([law[k] for k in range(1, 6)], [0.002775, 0.166512, 0.592044, 0.016651, 0.222017], atol=2e-6)
    # subsampling, one round, one epoch: c^2 law equals the per-round law of L^2 (B = 3 rounds -> convolution)
    one = bc.c2_law("subsample", 12, 4, 3, 3, 1)  # B = 1: ms = 12 = N, so t = 3 always
    np.testing.assert_allclose([one.probs[1], one.probs[4], one.probs[9]], bc.round_occupancy_law(3, 4, 3)[1:], atol=1e-12)


def test_v10_theorem_f1_qj_is_bose_einstein():
    exact = bc.c2_law("shuffle", 1000, 10, 1, 2, 1).as_dict()
    assert exact[1] == pytest.approx(0.009009, abs=1e-6) and exact[2] == pytest.approx(0.990991, abs=1e-6)
    paper = bc.shuffle_bose_einstein_qj(1000, 10, 2)
    assert paper[1] == pytest.approx(0.019802, abs=1e-6)
    ex4 = bc.c2_law("shuffle", 50000, 50, 1, 4, 1).as_dict()
    assert ex4[3] == pytest.approx(0.005863, abs=1e-6) and ex4[4] == pytest.approx(0.994130, abs=1e-6)


V7 = [("batch", 1, 9.1901, 7.5113), ("batch", 2, 13.1825, 11.4774), ("batch", 4, 19.5987, 17.8422),
      ("individual", 1, 9.1901, 7.5113), ("individual", 2, 13.2051, 11.4930), ("individual", 4, 19.6854, 17.9057)]


@pytest.mark.parametrize("row", V7, ids=[f"{r[0]}-{r[1]}" for r in V7])
def test_v7_exact_strong_adversary(row):
    clip, g, sub, shuf = row
    m, s = (1, 60) if clip == "batch" else (60, 1)
    assert bc.batch_clipping_epsilon("subsample", 60000, s, m, g, 10, 2.0, 1e-5) == pytest.approx(sub, abs=1e-4)
    assert bc.batch_clipping_epsilon("shuffle", 60000, s, m, g, 10, 2.0, 1e-5) == pytest.approx(shuf, abs=1e-4)
    if clip == "batch":  # batch clipping + shuffling is at or below the sqrt(gE)/sigma curve
        assert bc.batch_clipping_epsilon("shuffle", 60000, s, m, g, 10, 2.0, 1e-5) <= gdp.gdp_epsilon(math.sqrt(g * 10) / 2, 1e-5) + 1e-9


def test_v12_printed_lower_bound_violated():
    law = bc.c2_law("subsample", 60000, 256, 1, 1, 100)  # g = 1: Bin(E*floor(N/ms), ms/N)
    pb = bc.paper_bounds("SS-1", 60000, 256, 1, 1, 100, 2.0)
    assert pb["mu_L"] == pytest.approx(5.1738, abs=1e-4) and not pb["valid"]
    exact = bc.batch_clipping_delta(law, 2.0, 34.72)
    printed = gdp.gdp_delta(pb["mu_L"], 34.72) + pb["l"]
    assert exact == pytest.approx(1.2198e-5, rel=2e-3)
    assert printed == pytest.approx(1.0021e-5, rel=2e-3)
    assert exact > printed


def test_v13_paper_closed_forms():
    g2 = bc.paper_bounds("SS-BC", 60000, 60, 1, 2, 10, 2.0, 1e-5)
    assert g2["q"] == pytest.approx(1.999017, abs=1e-6) and g2["mu_L"] == pytest.approx(2.4058, abs=1e-4)
    assert g2["epsilon"] == pytest.approx(12.5823, abs=1e-4)
    assert bc.paper_bounds("SS-BC", 60000, 60, 1, 4, 10, 2.0, 1e-5)["epsilon"] == pytest.approx(19.1210, abs=1e-4)
    ic = bc.paper_bounds("SS-IC", 60000, 1, 60, 1, 10, 2.0, 1e-5, gamma=2.0)
    assert ic["mu_L"] == pytest.approx(3.4355, abs=1e-4) and ic["epsilon"] == pytest.approx(19.9062, abs=1e-4)
    assert bc.paper_bounds("SS-IC", 60000, 1, 60, 4, 10, 2.0, 1e-5)["epsilon"] == pytest.approx(125.6001, abs=1e-3)
    assert bc.paper_bounds("SH-GC", 60000, 1, 240, 2, 1, 2.0)["l_epoch"] == pytest.approx(1.600e-2, rel=1e-3)


def test_v14_standard_adversary_reference():
    mu = bc.standard_dp_sgd_clt_mu(60000, 60, 10, 2.0)
    assert mu == pytest.approx(0.053294, abs=1e-6)
    assert gdp.gdp_epsilon(mu, 1e-5) == pytest.approx(0.1716, abs=1e-4)


def test_invalid_inputs():
    with pytest.raises(ValueError, match="sampling"):
        bc.c2_law("poisson", 100, 10, 1, 1, 1)
    with pytest.raises(ValueError, match="m\\*s"):
        bc.c2_law("shuffle", 100, 60, 2, 1, 1)
    with pytest.raises(ValueError, match="mu"):
        gdp.gdp_epsilon(-1.0, 1e-5)
    with pytest.raises(ValueError, match="alpha"):
        fdp.tradeoff_gaussian(1.0, 1.5)
    with pytest.raises(ValueError, match="delta"):
        gdp.gdp_epsilon(1.0, 0.0)
