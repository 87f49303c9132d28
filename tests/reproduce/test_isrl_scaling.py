"""Fast version of the spec §5.6 scaling check: Noisy MB-SGD's excess risk follows
Theorem 2.1's private term d/(M eps^2 n^2) (log-log slopes -2, -2, -1 within 0.15)."""

from __future__ import annotations

import numpy as np
import pytest

from dpjax.reproduce.isrl_scaling import ScalingConfig, excess_risk, loglog_slope, sweep

pytestmark = pytest.mark.slow  # minutes of CPU: CI runs it in its -m slow pass

CFG = ScalingConfig(dim=20, rounds=50, batch_size=128, repetitions=32)


@pytest.fixture(scope="module")
def slopes():
    base = {"n": 2048, "epsilon": 4.0, "num_silos": 16}
    res = sweep(CFG, base=base, values={"n": [1024, 4096], "epsilon": [2.0, 8.0]})
    res |= sweep(CFG, base=base | {"epsilon": 8.0}, values={"num_silos": [4, 16]})
    return res


@pytest.mark.parametrize("factor", ["n", "epsilon", "num_silos"])
@pytest.mark.slow
def test_slopes_match_theorem_2_1(slopes, factor):
    got = slopes[factor]
    assert abs(got["slope"] - got["theory"]) <= 0.15, (factor, got["slope"], [r["excess_risk"] for r in got["rows"]])


def test_private_term_dominates_in_the_checked_regime(slopes):
    for v in slopes.values():
        for r in v["rows"]:
            assert r["excess_risk"] > 10 * r["statistical_floor"]


def test_loglog_slope_and_validation():
    x = np.array([1.0, 2.0, 4.0])
    assert loglog_slope(x, 3 * x**-1.5) == pytest.approx(-1.5)
    with pytest.raises(ValueError, match="two distinct"):
        loglog_slope([2.0, 2.0], [1.0, 3.0])
    with pytest.raises(ValueError, match="batch_size"):
        excess_risk(ScalingConfig(batch_size=4), n=4096, epsilon=8.0, num_silos=2)
    with pytest.raises(ValueError, match="clip"):
        ScalingConfig(w_norm=0.9, phi=0.2, clip=1.0)
