"""One-run audit statistics (Steinke, Nasr & Jagielski 2023): the p-value, its epsilon lower bound,
the guess plan, and the bound's validity on an exactly eps-DP guesser."""

import math

import numpy as np
import pytest
from scipy import stats

from dpjax.auditing import one_run


def test_p_value_without_delta_is_the_binomial_tail_and_grows_with_epsilon():
    m, r, v = 1000, 100, 80
    for eps in (0.0, 0.5, 1.0, 2.0):
        q = math.exp(eps) / (1 + math.exp(eps))
        assert one_run.p_value(m, r, v, eps, 0.0) == pytest.approx(stats.binom.sf(v - 1, r, q), rel=1e-12)
    ps = [one_run.p_value(m, r, v, e, 1e-6) for e in np.linspace(0, 3, 13)]
    assert all(a <= b for a, b in zip(ps, ps[1:]))


def test_delta_term_is_two_m_delta_times_the_largest_average_pmf_below_v():
    m, r, v, eps, delta = 500, 40, 35, 1.0, 1e-4
    q = math.exp(eps) / (1 + math.exp(eps))
    alpha = max(sum(stats.binom.pmf(v - j, r, q) for j in range(1, i + 1)) / i for i in range(1, v + 1))
    expected = stats.binom.sf(v - 1, r, q) + 2 * m * delta * alpha
    assert one_run.p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("r", [10, 100, 1000])
def test_all_correct_bound_matches_the_closed_form(r):
    # P[Bin(r, q) >= r] = q^r = beta  =>  eps = log(q / (1 - q)), q = beta^(1/r)
    q = 0.05 ** (1 / r)
    expected = math.log(q / (1 - q))
    assert one_run.epsilon_lower_bound(10 * r, r, r, 0.0, 0.95) == pytest.approx(expected, abs=1e-5)


def test_bound_is_zero_at_chance_and_shrinks_with_delta():
    assert one_run.epsilon_lower_bound(1000, 100, 50, 0.0) == 0.0
    loose = one_run.epsilon_lower_bound(1000, 200, 190, 0.0)
    assert 0 < one_run.epsilon_lower_bound(1000, 200, 190, 1e-5) < loose


def test_bound_exceeds_the_true_epsilon_at_most_five_percent_of_the_time():
    """An exactly eps-DP guesser (randomized response: each guess right w.p. e^eps / (1 + e^eps)):
    the 95 % bound may exceed eps in at most 5 % of trials; 400 trials: allow the Bin(400, 0.05)
    99.9 % quantile."""
    eps, r, trials = 1.0, 200, 400
    rng = np.random.default_rng(0)
    q = math.exp(eps) / (1 + math.exp(eps))
    correct = rng.binomial(r, q, size=trials)
    exceed = sum(one_run.epsilon_lower_bound(r, r, int(v), 0.0, 0.95, tolerance=1e-3) > eps for v in correct)
    assert exceed <= stats.binom.ppf(0.999, trials, 0.05)
    assert np.mean([one_run.epsilon_lower_bound(r, r, int(v), 0.0, 0.95, tolerance=1e-3) for v in correct[:20]]) > 0.3


def test_audit_scores_guesses_top_and_bottom_with_bonferroni():
    m = 1000
    secrets = np.where(np.arange(m) % 2 == 0, 1, -1)
    scores = secrets * 10.0 + np.linspace(0, 1, m)  # perfectly separated
    plan = ((50, 50), (5, 5))
    b = one_run.audit_scores(scores, secrets, 0.0, 0.95, plan=plan)
    assert (b.r, b.v, b.k_plus) == (100, 100, 50)
    q = (0.05 / 2) ** (1 / 100)  # Bonferroni over the two plan entries
    assert b.epsilon == pytest.approx(math.log(q / (1 - q)), abs=1e-5)
    assert [e["v"] for e in b.entries] == [100, 10]
    flipped = one_run.audit_scores(-scores, secrets, 0.0, 0.95, plan=plan)
    assert flipped.epsilon == 0.0 and flipped.v == 0


@pytest.mark.parametrize("kwargs,needle", [
    (dict(scores=[1.0, 2.0], secrets=[1, 0]), "secrets must be"),
    (dict(scores=[1.0, float("nan")], secrets=[1, -1]), "non-finite"),
    (dict(scores=[1.0, 2.0, 3.0], secrets=[1, -1]), "must be equal"),
    (dict(scores=[1.0, 2.0], secrets=[1, -1], plan=((2, 1),)), "between 1 and m=2"),
])
def test_audit_scores_rejects_bad_input(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        one_run.audit_scores(delta=0.0, **kwargs)


def test_counts_are_validated():
    with pytest.raises(ValueError, match="v=5"):
        one_run.p_value(10, 4, 5, 1.0, 0.0)
    with pytest.raises(ValueError, match="confidence"):
        one_run.epsilon_lower_bound(10, 4, 4, 0.0, 1.5)
