"""BandMF configuration at the edges (issue #39's battery): messages name ``band_coeffs`` (not an internal
``coeffs``), a string is a type error naming it, and a run whose strategy would be optimised over 10^9 rounds is
refused up front (it was accepted, then the O(R b) optimisation of the first round would never finish)."""

import math

import pytest

from dpjax.algorithms import band_mf_sgd
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.problems import LinearRegression


def _band_mf(**k):
    args = dict(problem=LinearRegression(3), num_rounds=8, batch_size=4, sampling="one-pass",
                neighboring="replace-one", noise="band-mf")
    return DpSgd(**{**args, **k})


@pytest.mark.parametrize("coeffs, needle", [
    ((0.0, 1.0), r"band_coeffs=\(0\.0, 1\.0\) must be .* band_coeffs\[0\] > 0"),
    ((), r"band_coeffs=\(\) must be a non-empty"),
    ((math.nan,), r"band_coeffs=\(nan,\) must be .*finite"),
    ((-1.0, 0.5), r"band_coeffs=\(-1\.0, 0\.5\) must be"),
])
def test_bad_coefficients_are_named_band_coeffs(coeffs, needle):
    with pytest.raises(ValueError, match=needle):
        _band_mf(band_coeffs=coeffs)


@pytest.mark.parametrize("coeffs", ["1,0.5", (1.0, "x"), (1.0, 1j)])
def test_coefficients_of_the_wrong_type_are_a_type_error(coeffs):
    with pytest.raises(TypeError, match=r"band_coeffs=.* must be a sequence of"):
        _band_mf(band_coeffs=coeffs)


def test_coefficients_must_fit_bands_and_rounds():
    with pytest.raises(ValueError, match=r"band_coeffs has 2 entries; bands=3 must match \(band_coeffs=\(1\.0, 0\.5\)\)"):
        _band_mf(bands=3, band_coeffs=(1.0, 0.5))
    with pytest.raises(ValueError, match=r"band_coeffs has 3 entries .* at most num_rounds=2"):
        _band_mf(num_rounds=2, band_coeffs=(1.0, 0.5, 0.25))


def test_an_unbounded_optimisation_is_refused_up_front():
    with pytest.raises(ValueError, match=r"num_rounds=1000000000 with bands=4: .*MAX_OPTIMIZED_ROUNDS=100000"):
        _band_mf(num_rounds=10**9, bands=4)
    with pytest.raises(ValueError, match=r"num_rounds=2147483648 must be <= 1073741824"):
        _band_mf(num_rounds=2**31)
    # a given strategy needs no optimisation: any number of rounds up to the engine's limit
    fam = _band_mf(num_rounds=10**9, band_coeffs=(1.0, 0.5, 0.25, 0.125))
    assert fam.band_coeffs == (1.0, 0.5, 0.25, 0.125)
    assert band_mf_sgd.MAX_OPTIMIZED_ROUNDS < 10**9


@pytest.mark.parametrize("coeffs", [0, 1.5])
def test_dp_fedavg_band_mf_names_a_scalar_band_coeffs(coeffs):
    # a scalar was read with len() before it was checked: "object of type 'int' has no len()"
    from dpjax.algorithms.band_mf_fedavg import DpFedAvgBandMf
    with pytest.raises(TypeError, match=r"band_coeffs=.* must be a sequence of real numbers"):
        DpFedAvgBandMf(LinearRegression(3), 8, 2, sampling_rate=0.5, band_coeffs=coeffs)
