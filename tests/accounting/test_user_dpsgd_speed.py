"""ELS's mixture-of-Gaussians PLD built with the vectorised inverse (``user_dpsgd._VectorMixturePrivacyLoss``, issue
#41): the same epsilon as dp_accounting's own ``PLDAccountant`` path, which evaluates the privacy loss one midpoint at
a time, and several times faster."""

import time

import dp_accounting
import pytest

from dpjax.accounting import user_dpsgd as ud

pytestmark = pytest.mark.privacy

DELTA = 1e-5


def _dp_accounting(event, interval):
    acc = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
                                          value_discretization_interval=interval)
    return acc.compose(event).get_epsilon(DELTA)


# (z, q, T, k, g, interval): ELS at several k, and ULS for a group of users (also a mixture)
CASES = [(1.0, 0.05, 20, 2, 1, 1e-2), (2.0, 0.1, 10, 3, 1, 1e-2), (0.8, 0.02, 50, 4, 1, 1e-2),
         (1.5, 0.2, 5, 2, 2, 1e-2)]


@pytest.mark.parametrize("z, q, steps, k, g, interval", CASES)
def test_vectorised_mixture_pld_gives_dp_accountings_epsilon(z, q, steps, k, g, interval):
    event = ud.els_dp_event(z, q, steps, k, g)
    assert ud.epsilon_of_event(event, DELTA, "pld", interval) == pytest.approx(_dp_accounting(event, interval),
                                                                              rel=1e-9)


def test_uls_group_event_takes_the_same_path():
    event = ud.uls_dp_event(1.2, 0.1, 30, group_size=3)
    assert isinstance(event.event, dp_accounting.dp_event.MixtureOfGaussiansDpEvent)
    assert ud.epsilon_of_event(event, DELTA, "pld", 1e-2) == pytest.approx(_dp_accounting(event, 1e-2), rel=1e-9)


def test_non_mixture_events_keep_the_accountants_path():
    event = ud.uls_dp_event(1.2, 0.1, 30)  # a Poisson-sampled Gaussian: no mixture, dp_accounting's closed form
    assert ud._mixture_pld(event, 1e-2) is None
    assert ud.epsilon_of_event(event, DELTA, "pld", 1e-2) == _dp_accounting(event, 1e-2)


@pytest.mark.slow
def test_els_at_k8_t1000_agrees_and_is_faster():
    event = ud.els_dp_event(2.0, 0.02, 1000, 8)
    t0 = time.perf_counter()
    fast = ud.epsilon_of_event(event, DELTA, "pld", 1e-3)
    t1 = time.perf_counter()
    slow = _dp_accounting(event, 1e-3)
    t2 = time.perf_counter()
    assert fast == pytest.approx(slow, rel=1e-9)
    assert t1 - t0 < (t2 - t1) / 2, (t1 - t0, t2 - t1)
