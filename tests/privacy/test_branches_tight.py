"""Branches of ``dpjax.accounting.tight`` (the tight accountants' dispatch, refusals, composition, group privacy and
``best``) reached by tests that can fail (issue 42, item 1).

Expected values are computed here: a composition of Gaussian releases is mu-GDP with mu^2 = sum passes (g Delta /
sigma)^2 (Dong, Roth & Su 2022, Cor. 3.3; Delta = 2 s under replace-one), whose exact epsilon is the root of Balle &
Wang's (2018, Thm 8) delta(eps) (mpmath, 40 digits); zCDP's conversion eps = rho + 2 sqrt(rho ln(1/delta)),
rho = mu^2 / 2 (Bun & Steinke 2016, Prop. 1.3; the Gaussian is Delta^2 / (2 sigma^2)-zCDP, their Prop. 1.6).
"""

from __future__ import annotations

import math

import mpmath
import pytest

from dpjax.accounting import tight
from dpjax.accounting.schedules import GaussianSchedule
from dpjax.accounting.tight import NotComputableError

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    """mpmath at 50 digits inside each test only (the closed forms cancel: Phi(a) - e^eps Phi(b)); restored after."""
    with mpmath.workdps(50):
        yield

N, S, DELTA = 1000, 0.5, 1e-5  # sensitivity 2 s = 1 under replace-one


def _exact_eps(mu: float, delta: float) -> float:
    lo, hi = mpmath.mpf(0), mpmath.mpf(mu * mu + 40 * mu)
    for _ in range(150):
        e = (lo + hi) / 2
        d = mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu)
        lo, hi = (e, hi) if d > delta else (lo, e)
    return float(hi)


def _full(sigma, steps, **kw):
    return GaussianSchedule(sigma, S, "full", N, None, steps, **kw)


def test_composition_of_deterministic_schedules_is_one_gdp_mechanism():
    # 4 full-batch releases at sigma 3 and 2 one-pass blocks (<= n / K = 10 blocks: one pass, each record once) at
    # sigma 2: mu^2 = 4 / 9 + 1 / 4
    a, b = _full(3.0, 4), GaussianSchedule(2.0, S, "one-pass", N, 100, 2)
    mu = math.sqrt(4 / 9 + 1 / 4)
    rep = tight.tight_epsilon([a, b], DELTA, "gdp")
    assert rep.epsilon == pytest.approx(_exact_eps(mu, DELTA), rel=1e-8)
    assert (rep.sampling, rep.noise_std, rep.neighboring) == ("full+one-pass", 2.0, "replace-one")
    assert "composition of 2 schedules (noise_std: the smallest)" in rep.notes
    assert any("no amplification by shuffling claimed" in n for n in rep.notes)
    rho = mu * mu / 2
    assert tight.tight_epsilon([a, b], DELTA, "zcdp").epsilon == pytest.approx(
        rho + 2 * math.sqrt(rho * math.log(1 / DELTA)), rel=1e-12)


def test_deterministic_group_privacy_is_sensitivity_times_g():
    rep = tight.tight_epsilon(_full(3.0, 4, group_size=3), DELTA, "gdp")
    assert rep.epsilon == pytest.approx(_exact_eps(3 * math.sqrt(4) / 3.0, DELTA), rel=1e-8)
    assert "group privacy for groups of 3 records (sensitivity x g: exact)" in rep.notes


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
def test_sampled_group_privacy_goes_through_the_conversion(accountant):
    # Poisson q = 0.01, 100 steps: group privacy by the (eps, delta) conversion; a group of 2 costs clearly more than
    # one record (at least the doubled sensitivity's exact GDP-free lower bound: more than 1.5 x the single epsilon)
    one = GaussianSchedule(1.0, S, "poisson", N, 10, 100)
    single = tight.tight_epsilon(one, DELTA, accountant).epsilon
    rep = tight.tight_epsilon(one.replace(group_size=2), DELTA, accountant)
    assert rep.epsilon > 1.5 * single
    assert "group privacy for groups of 2 records via (eps, delta) group conversion" in rep.notes


def test_zero_noise_is_infinite_and_noted():
    rep = tight.tight_epsilon(_full(0.0, 3), DELTA, "rdp")
    assert rep.epsilon == math.inf and "noise_std = 0: non-private" in rep.notes


def test_accountant_refusals():
    with pytest.raises(ValueError, match="accountant='gdp'"):
        tight.tight_epsilon(GaussianSchedule(1.0, S, "poisson", N, 10, 5), DELTA, "gdp")
    with pytest.raises(ValueError, match="without-replacement"):
        tight.tight_epsilon(GaussianSchedule(1.0, S, "without-replacement", N, 10, 5), DELTA, "pld")


def test_not_computable_refusals_name_the_argument():
    with pytest.raises(NotComputableError, match=r"noise_multiplier=5e-05 .* below 0.0001"):
        tight.tight_epsilon(_full(5e-5, 1), DELTA, "rdp")
    with pytest.raises(NotComputableError, match=r"noise_multiplier=2e\+08 .* above 1e\+08"):
        tight.tight_epsilon(_full(2e8, 1), DELTA, "rdp")
    with pytest.raises(NotComputableError, match=r"steps=9007199254740993 \(schedule.steps\) is above 2\*\*53"):
        tight.tight_epsilon(_full(1.0, 2**53 + 1), DELTA, "rdp")
    with pytest.raises(NotComputableError, match=r"accountant='pld' composes at most 1e\+08 steps"):
        tight.tight_epsilon(GaussianSchedule(1.0, S, "poisson", N, 10, 10**8 + 1), DELTA, "pld")
    with pytest.raises(NotComputableError, match=r"at most 65536 \(schedule.batch_size=70000\)"):
        tight.tight_epsilon(GaussianSchedule(1.0, S, "with-replacement", 10**6, 70_000, 1), DELTA, "rdp")


def test_compositions_must_be_schedules_of_one_relation():
    with pytest.raises(ValueError, match="schedules='full' must be a GaussianSchedule or a sequence of them"):
        tight.check_composable("full")
    with pytest.raises(ValueError, match=r"schedules=\(\) must contain at least one GaussianSchedule"):
        tight.check_composable([])
    with pytest.raises(ValueError, match=r"schedules\[1\]=3 must be a GaussianSchedule"):
        tight.check_composable([_full(1.0, 1), 3])
    with pytest.raises(ValueError, match=r"schedules mix neighboring: schedules\[0\] has neighboring='replace-one', "
                                         r"schedules\[1\] has neighboring='add-remove'"):
        tight.check_composable([_full(1.0, 1), _full(1.0, 1, neighboring="add-remove")])


def test_best_names_the_exact_accountant_and_skips_one_that_cannot_compute():
    # full batch: gdp is exact, rdp and pld upper bounds -> best = gdp, the note lists the others
    rep = tight.tight_epsilon(_full(3.0, 4), DELTA, "best")
    assert rep.accountant == "gdp" and rep.epsilon == pytest.approx(_exact_eps(2 / 3.0, DELTA), rel=1e-8)
    assert any(n.startswith("accountant='best': gdp certified the smallest epsilon (vs rdp ") for n in rep.notes)
    # Poisson beyond PLD's step limit: pld is skipped (noted), rdp decides
    many = GaussianSchedule(50.0, S, "poisson", N, 10, 10**8 + 1)
    rep = tight.tight_epsilon(many, DELTA, "best")
    assert rep.accountant == "rdp"
    assert "accountant='pld' skipped: not computable in float64 for this schedule" in rep.notes


def test_group_privacy_conversion_is_the_smallest_feasible_g_eps():
    # base curve delta(e) = 0.5 e^{-10 e}; groups of 2: delta(e) (e^{2e} - 1) / (e^e - 1) = 0.5 e^{-10e} (e^e + 1)
    # <= 1e-3 (Dwork & Roth 2014, group privacy of (eps, delta)-DP); the smallest e by bisection here, reported 2 e
    def total(e):
        return 0.5 * mpmath.exp(-10 * e) * (mpmath.exp(e) + 1)
    lo, hi = mpmath.mpf(0), mpmath.mpf(10)
    for _ in range(150):
        m = (lo + hi) / 2
        lo, hi = (m, hi) if total(m) > 1e-3 else (lo, m)
    got = tight.group_privacy_epsilon(lambda e: 0.5 * math.exp(-10 * e), 2, 1e-3)
    assert got == pytest.approx(2 * float(hi), rel=1e-8)
    assert tight.group_privacy_epsilon(lambda e: 0.0, 3, 1e-3) == 0.0  # already (0, 0)-DP
    assert tight.group_privacy_epsilon(lambda e: 1.0, 3, 1e-3) == math.inf  # never below delta


def test_float64_guard_turns_numeric_failures_into_not_computable():
    with pytest.raises(NotComputableError, match=r"accountant='rdp' cannot compute .*OverflowError: big.*or a larger "
                                                 r"noise multiplier"):
        with tight.float64_guard("rdp"):
            raise OverflowError("big")
    with pytest.raises(NotComputableError, match=r"accountant='pld' cannot compute .*ValueError: got NaN"):
        with tight.float64_guard("pld"):
            raise ValueError("got NaN")
    with pytest.raises(ValueError, match="^epsilon=-1 must be > 0$") as info:  # dpjax's own argument errors pass
        with tight.float64_guard("pld"):
            raise ValueError("epsilon=-1 must be > 0")
    assert not isinstance(info.value, NotComputableError)


def test_rdp_building_blocks_at_zero_noise_and_their_refusals():
    zero = GaussianSchedule(0.0, S, "poisson", N, 10, 3)
    assert all(math.isinf(x) for x in tight.conditioned_rdp(zero, [2.0, 8.0]))
    with pytest.raises(ValueError, match="sampling='full' is not a random-sampling scheme"):
        tight.conditioned_rdp(_full(1.0, 1), [2.0])
    orders, rdp, notes = tight.rdp_curve([zero])
    assert all(math.isinf(x) for x in rdp) and notes == ["noise_std = 0: non-private"]
    assert tight._rdp_eps(orders, rdp, DELTA) == math.inf
    with pytest.raises(ValueError, match="without-replacement"):
        tight._pld_event_parameters(GaussianSchedule(1.0, S, "without-replacement", N, 10, 5))
    # no finite epsilon scale: the default interval
    assert tight.choose_pld_discretization(_full(10.0, 4), math.inf) == (tight.PLD_DISCRETIZATION, False)
    assert tight.choose_pld_discretization(_full(10.0, 4), 0.0) == (tight.PLD_DISCRETIZATION, False)


def test_pld_of_a_poisson_composition_and_an_explicit_grid():
    import dp_accounting as dpa

    # two Poisson schedules (q = 0.01 and 0.02, 50 steps each): dp_accounting's PLD of the two events built here
    # (REPLACE_ONE takes the multiplier w.r.t. one record's contribution s and handles the replacement itself)
    a, b = GaussianSchedule(1.0, S, "poisson", N, 10, 50), GaussianSchedule(1.5, S, "poisson", N, 20, 50)
    acc = dpa.pld.PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0 / S)), 50))
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(1.5 / S)), 50))
    got = tight.tight_epsilon([a, b], DELTA, "pld")
    assert got.epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=1e-6)
    # an explicit (coarse) grid on a full-batch Gaussian: pessimistic, so at least the exact epsilon, within the grid
    rep = tight.tight_epsilon(_full(3.0, 4), DELTA, "pld", pld_discretization=1e-2)
    exact = _exact_eps(2 / 3.0, DELTA)
    assert exact * (1 - 1e-9) <= rep.epsilon <= exact + 0.05
