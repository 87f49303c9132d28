"""Every branch of ``dpjax.accounting.api``'s paper accountants, ``use_probability`` and the calibration bracket
reached by a test that can fail (issue 42, item 1).

The "paper" accountants reproduce printed claims (Lowy & Razaviyayn, "Private Federated Learning Without a Trusted
Server", ISRL-DP): Thm D.1 (MB-SGD, with/without replacement), Thm 3.1 (one pass) and the Appendix I moments-accountant
form. Each expected value is the printed formula evaluated here, with ``L = s K`` (s: one record's contribution bound
to the batch mean, so L = s K is the per-example Lipschitz bound the paper's formulas take).
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpjax.accounting import api
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.accounting.tight import NotComputableError

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    """mpmath at 50 digits inside each test only (the closed forms cancel: Phi(a) - e^eps Phi(b)); restored after."""
    with mpmath.workdps(50):
        yield

N, K, R, DELTA = 1000, 50, 20, 1e-5
S = 0.02  # contribution bound of one record to the mean: L = s K = 1


def _sched(sampling="without-replacement", noise_std=1.0, batch=K, steps=R, **kw):
    return GaussianSchedule(noise_std, S, sampling, N, batch, steps, **kw)


def _thm_d1_eps(lip, n, r, sigma, delta):  # ISRL Thm D.1 inverted: eps = 16 L sqrt(R ln(2.5R/d) ln(2/d)) / (n sigma)
    return 16 * lip * math.sqrt(r * math.log(2.5 * r / delta) * math.log(2 / delta)) / (n * sigma)


@pytest.mark.parametrize("sampling", ["without-replacement", "with-replacement"])
def test_paper_thm_d1_epsilon_and_notes(sampling):
    sigma = 1.0  # eps ~ 0.98: K = 50 >= the Thm D.1 minimum ~ 12
    rep = api.compute_epsilon(_sched(sampling, noise_std=sigma), DELTA, "paper")
    assert rep.epsilon == pytest.approx(_thm_d1_eps(1.0, N, R, sigma, DELTA), rel=1e-12)
    assert (rep.accountant, rep.sampling, rep.noise_std) == ("paper", sampling, sigma)
    assert any("Theorem D.1" in n for n in rep.notes)
    assert any("without-replacement lemma" in n for n in rep.notes) == (sampling == "with-replacement")


def test_paper_refusals():
    with pytest.raises(ValueError, match="no group-privacy form; group_size=2 must be 1"):
        api.compute_epsilon(_sched(group_size=2), DELTA, "paper")
    # Thm D.1 needs K >= eps n / (4 sqrt(2 R ln(2/delta))): at sigma 0.05, eps = 16 sqrt(...) / 50 ~ 9.8, so K >= 16
    eps = _thm_d1_eps(1.0, N, R, 0.05, DELTA)
    kmin = math.ceil(eps * N / (4 * math.sqrt(2 * R * math.log(2 / DELTA))))
    assert kmin > 5
    small = GaussianSchedule(0.05, 1.0 / 5, "without-replacement", N, 5, R)  # K = 5, L = 1
    with pytest.raises(ValueError, match=rf"batch_size=5 is below the paper's requirement K >= {kmin}"):
        api.compute_epsilon(small, DELTA, "paper")
    # outside the advanced-composition regime eps <= 2 ln(2/delta) (~24.4): a tiny sigma
    assert _thm_d1_eps(1.0, N, R, 0.01, DELTA) > 2 * math.log(2 / DELTA)
    with pytest.raises(ValueError, match="accountant='paper' cannot certify this schedule"):
        api.compute_epsilon(_sched(noise_std=0.01), DELTA, "paper")
    for sampling in ("poisson", "shuffle"):
        with pytest.raises(ValueError, match=f"no printed bound for sampling='{sampling}'"):
            api.compute_epsilon(_sched(sampling), DELTA, "paper")
    with pytest.raises(ValueError, match="accounts one schedule"):
        api.compute_epsilon([_sched(), _sched()], DELTA, "paper")


def test_paper_zero_noise_is_infinite():
    assert api.compute_epsilon(_sched(noise_std=0.0), DELTA, "paper").epsilon == math.inf


def test_paper_one_pass_thm_3_1():
    # Thm 3.1: eps = sqrt(32 ln(1.25/delta)) L / (K sigma), for R K <= n
    sigma = 0.01
    rep = api.compute_epsilon(_sched("one-pass", noise_std=sigma), DELTA, "paper")
    assert rep.epsilon == pytest.approx(math.sqrt(32 * math.log(1.25 / DELTA)) * 1.0 / (K * sigma), rel=1e-12)
    assert any("Theorem 3.1" in n for n in rep.notes)
    with pytest.raises(ValueError, match=r"one-pass needs steps\*batch_size <= dataset_size, got 30\*50 > 1000"):
        api.compute_epsilon(_sched("one-pass", steps=30), DELTA, "paper")
    # outside eps <= 8 ln(1/delta) (~92): sigma 1e-4 gives eps ~ 5e3
    with pytest.raises(ValueError, match="accountant='paper' cannot certify this schedule"):
        api.compute_epsilon(_sched("one-pass", noise_std=1e-4), DELTA, "paper")


def test_paper_experiment_moments_form_and_batch_note():
    # Appendix I: eps = L sqrt(8 ln(1/delta) R) / (n sigma); the batch condition K >= n sqrt(eps / (4R))
    sigma = 0.01
    eps = math.sqrt(8 * math.log(1 / DELTA) * R) / (N * sigma)
    rep = api.compute_epsilon(_sched(noise_std=sigma), DELTA, "paper-experiment")
    assert rep.epsilon == pytest.approx(eps, rel=1e-12)
    assert N * math.sqrt(eps / (4 * R)) > K  # violated here: the note names K
    assert any("batch condition" in n and f"K={K}" in n for n in rep.notes)
    big = api.compute_epsilon(_sched(noise_std=1.0), DELTA, "paper-experiment")  # eps 0.068: K >= 29 holds
    assert not any("batch condition" in n for n in big.notes)
    with pytest.raises(ValueError, match="needs a subsampled schedule, got sampling='full'"):
        api.compute_epsilon(_sched("full", batch=None), DELTA, "paper-experiment")


@pytest.mark.parametrize("accountant,sampling,want", [
    # Thm D.1: sigma^2 = 256 L^2 R ln(2.5R/d) ln(2/d) / (n^2 eps^2)
    ("paper", "without-replacement",
     lambda e: math.sqrt(256 * R * math.log(2.5 * R / DELTA) * math.log(2 / DELTA) / (N**2 * e**2))),
    # Thm 3.1: sigma^2 = 32 L^2 ln(1.25/d) / (eps^2 K^2)
    ("paper", "one-pass", lambda e: math.sqrt(32 * math.log(1.25 / DELTA) / (e**2 * K**2))),
    # Appendix I: sigma^2 = 8 L^2 ln(1/d) R / (n^2 eps^2)
    ("paper-experiment", "without-replacement", lambda e: math.sqrt(8 * math.log(1 / DELTA) * R / (N**2 * e**2))),
])
def test_paper_calibration_is_the_printed_sigma(accountant, sampling, want):
    sched = _sched(sampling, steps=R if sampling != "one-pass" else 10)
    want_sigma = want(2.0)
    got = api.calibrate_noise(sched, 2.0, DELTA, accountant)
    assert got == pytest.approx(want_sigma, rel=1e-9)
    assert api.compute_epsilon(sched.replace(noise_std=got), DELTA, accountant).epsilon <= 2.0


def test_paper_calibration_outside_float64_is_refused():
    # a target so large that the printed sigma's noise multiplier (sigma / 2s) is below 1e-4
    with pytest.raises(NotComputableError, match="target_epsilon=1000000.0 with accountant='paper-experiment' needs"):
        api.calibrate_noise(_sched(), 1e6, DELTA, "paper-experiment")


def test_use_probability_closed_forms():
    # with replacement: K R draws of 1/n each: 1 - (1 - 1/n)^(K R)
    assert api.use_probability(_sched("with-replacement")) == pytest.approx(1 - (1 - 1 / N) ** (K * R), rel=1e-12)
    # without replacement / Poisson: in each step's batch w.p. K / n: 1 - (1 - K/n)^R
    assert api.use_probability(_sched("poisson")) == pytest.approx(1 - (1 - K / N) ** R, rel=1e-12)
    assert api.use_probability(GaussianSchedule(1.0, S, "poisson", N, N, R)) == 1.0  # q = 1
    assert api.use_probability(_sched(group_size=2)) == 1.0
    assert api.use_probability(_sched("shuffle")) == 1.0


def test_calibration_bracket_refusals():
    # delta >= the use probability: (0, delta)-DP without noise (one step of K = 1 of n = 1000: p = 1e-3)
    tiny = GaussianSchedule(1.0, 1.0, "poisson", 1000, 1, 1)
    with pytest.raises(ValueError, match=r"delta=0.01 is >= 0.001, the probability that a record is used"):
        api.calibrate_noise(tiny, 1.0, 0.01)
    # a target met at noise multiplier 1e-4 already (one full-batch Gaussian at delta 0.5: eps(z=1e-4) < 1e9)
    with pytest.raises(ValueError, match=r"target_epsilon=1e\+20 is met at every noise level down to"):
        api.calibrate_noise(_sched("full", batch=None, steps=1), 1e20, 0.5)


def _gdp_sigma(target, steps, sens, delta):
    """The smallest sigma making ``steps`` full-batch Gaussian releases of l2 sensitivity ``sens`` (target, delta)-DP:
    sqrt(steps) sens / mu*, mu* the largest mu with Phi(mu/2 - e/mu) - e^e Phi(-mu/2 - e/mu) <= delta (Balle & Wang
    2018, Thm 8; composition DRS Cor. 3.3), by bisection at 40 digits."""
    e = mpmath.mpf(target)
    lo, hi = mpmath.mpf("1e-6"), mpmath.mpf(100)
    for _ in range(150):
        m = (lo + hi) / 2
        ok = mpmath.ncdf(m / 2 - e / m) - mpmath.exp(e) * mpmath.ncdf(-m / 2 - e / m) <= delta
        lo, hi = (m, hi) if ok else (lo, m)
    return math.sqrt(steps) * sens / float(lo)


@pytest.mark.parametrize("target", [0.5, 60.0])  # bracketed upwards / downwards from noise multiplier 1
def test_calibrate_schedule_is_the_exact_gaussian_sigma(target):
    sched = _sched("full", batch=None, steps=4)  # replace-one: sensitivity 2 s
    want = _gdp_sigma(target, 4, 2 * S, DELTA)
    got = api.calibrate_schedule(sched, target, DELTA, "gdp")
    assert want * (1 - 1e-9) <= got.noise_std <= want * (1 + 2e-6)
    assert got.noise_multiplier == pytest.approx(got.noise_std / (2 * S), rel=1e-15)


def test_calibrate_refuses_a_non_schedule_and_an_unreachable_target():
    with pytest.raises(ValueError, match="schedule=1.0 must be a GaussianSchedule"):
        api.calibrate_noise(1.0, 1.0, DELTA)
    # zCDP's epsilon never reaches 0 (Bun & Steinke 2016, Prop. 1.3: eps = rho + 2 sqrt(rho ln(1/delta)), rho = R / (2 z^2)
    # for R Gaussians of multiplier z): at the largest accounted multiplier 1e8 it is still ~1e-7 > 1e-12
    rho = 4 / (2 * 1e8**2)
    assert rho + 2 * math.sqrt(rho * math.log(1 / DELTA)) > 1e-8
    with pytest.raises(ValueError, match="target_epsilon=1e-12 cannot be reached by any noise level"):
        api.calibrate_noise(_sched("full", batch=None, steps=4), 1e-12, DELTA, "zcdp")


def test_calibrate_best_is_the_smallest_accountants_noise():
    # full batch: gdp is exact (the others upper bounds on epsilon, so they need at least as much noise): "best" is
    # gdp's noise, the closed form
    sched = _sched("full", batch=None, steps=4)
    want = _gdp_sigma(1.0, 4, 2 * S, DELTA)
    assert want * (1 - 1e-9) <= api.calibrate_noise(sched, 1.0, DELTA, "best") <= want * (1 + 2e-6)
