"""User-level DP-SGD accountants at the edges (issue #39's battery): bounded work before a refusal, no silent accept.

binomial_pmf / ELS with k = 10^9 ran > 10 s (exact rationals, a mixture of 10^9 + 1 Gaussians); ULS at 10^12 steps
raised MemoryError inside dp_accounting's PLD; ``field='noise'`` was accepted and calibrate returned a key no hparams
reads. Each refusal names the argument and its value, under an alarm so the old behaviour fails instead of hanging."""

import pytest

from dpjax.accounting import user_dpsgd as ud
from tests._timing import within

pytestmark = pytest.mark.privacy

DELTA = 1e-5


def _within(seconds=5):
    return within(seconds)


def test_binomial_pmf_refuses_a_huge_k_up_front():
    with _within(), pytest.raises(ValueError, match=rf"k=1000000000 must be <= {ud.MAX_PMF_TERMS}"):
        ud.binomial_pmf(10**9, 0.5)
    # at the limit it still answers: a pmf (sums to 1 up to rounding of k + 1 terms)
    with _within():
        pmf = ud.binomial_pmf(ud.MAX_PMF_TERMS, 0.5)
    assert len(pmf) == ud.MAX_PMF_TERMS + 1 and abs(sum(pmf) - 1.0) < 1e-12


@pytest.mark.parametrize("make, needle", [
    (lambda: ud.els_dp_event(1.0, 0.1, 10, 10**9), r"records_per_user=1000000000"),
    (lambda: ud.els_dp_event(1.0, 0.1, 10, 20, group_size=4), r"records_per_user=20 x group_size=4"),
    (lambda: ud.uls_dp_event(1.0, 0.1, 10, group_size=10**6), r"group_size=1000000"),
    (lambda: ud.UserDpSgdPrivacy("example", 1.0, 0.1, 10, records_per_user=10**9), r"records_per_user=1000000000"),
])
def test_a_mixture_beyond_the_limit_is_refused_naming_the_argument(make, needle):
    with _within(), pytest.raises(ValueError, match=needle + ".*MAX_MIXTURE_TERMS"):
        make()


def test_field_must_be_the_families_multiplier_field():
    with pytest.raises(ValueError, match=r"field='noise' must be one of \('noise_multiplier',\)"):
        ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10, field="noise")
    assert ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).field in ud.FIELDS


def test_uls_pld_beyond_the_step_limit_is_refused_and_rdp_answers():
    spec = ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10**12)
    with _within(), pytest.raises(ValueError, match=r"num_steps=1000000000000 exceeds PLD_MAX_STEPS.*accountant='rdp'"):
        spec.epsilon(DELTA)  # the default accountant is the PLD
    with _within():
        rdp = spec.epsilon(DELTA, "rdp").epsilon
        best = spec.epsilon(DELTA, "best").epsilon  # "best" of what can be computed: RDP alone here
    assert best == rdp and rdp > 0


def test_els_beyond_the_step_limit_is_refused():
    spec = ud.UserDpSgdPrivacy("example", 1.0, 0.1, ud.PLD_MAX_STEPS + 1, records_per_user=2)
    with _within(), pytest.raises(ValueError, match=rf"num_steps={ud.PLD_MAX_STEPS + 1} exceeds PLD_MAX_STEPS"):
        spec.epsilon(DELTA, "best")
