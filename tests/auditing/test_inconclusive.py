"""An audit too small to catch its own mutants is INCONCLUSIVE, with the runs that would decide (issue #39, 3)."""

import math

import pytest

from dpjax.auditing import audit as audit_lib, stats
from dpjax.auditing.cli import summary_line


def _bound(fp: int, fn: int, runs: int, delta: float = 1e-3, confidence: float = 0.95) -> stats.EpsilonLowerBound:
    half = (1 - confidence) / 2
    fpr_u = float(stats.clopper_pearson_upper(fp, runs, half))
    fnr_u = float(stats.clopper_pearson_upper(fn, runs, half))
    return stats.EpsilonLowerBound(float(stats.epsilon_from_rates(fpr_u, fnr_u, delta)), confidence, delta, 0.0, 1,
                                   fp, runs, fn, runs, fpr_u, fnr_u)


def _result(main: stats.EpsilonLowerBound, mutant: stats.EpsilonLowerBound, certified: float, exact=None):
    threshold = min(certified, math.inf if exact is None else exact)
    return audit_lib.AuditResult(
        "m", "a mechanism", audit_lib.Certificate(certified, 1e-3, "test"), main,
        (audit_lib.MutantResult("half-noise", mutant, mutant.epsilon > threshold),),
        None if exact is None else {"epsilon": exact}, 2 * main.runs_d, 0, 0.1, {})


@pytest.mark.privacy
def test_runs_to_exceed_is_the_smallest_deciding_count():
    b = _bound(fp=50, fn=50, runs=1000)  # rates 5 %: point epsilon log(0.949/0.05) = 2.94
    target = 2.8
    assert b.epsilon < target  # not caught at 1000 evaluation runs
    need = stats.runs_to_exceed(b, target)
    assert need is not None and need > 2 * 1000
    at = lambda n: float(stats.epsilon_from_rates(  # noqa: E731  the bound at n evaluation runs, same rates
        stats.clopper_pearson_upper(0.05 * n, n, 0.025), stats.clopper_pearson_upper(0.05 * n, n, 0.025), 1e-3))
    assert at(need // 2) > target >= at(need // 2 - 1)
    # rates that certify no more than the target: no number of runs would catch them
    assert stats.runs_to_exceed(b, 3.0) is None


@pytest.mark.privacy
def test_small_audit_is_inconclusive_and_says_the_runs_that_decide():
    main = _bound(fp=400, fn=400, runs=1000)  # no violation
    mutant = _bound(fp=50, fn=50, runs=1000)
    r = _result(main, mutant, certified=2.8)
    assert not r.passed and r.verdict == "INCONCLUSIVE"
    assert r.runs_needed == stats.runs_to_exceed(mutant, 2.8)
    line = summary_line(["m"], [r.passed], 3.0, results=[r])
    assert "0 of 1 passed" in line and "none failed" in line and "1 inconclusive" in line
    assert "mutant half-noise not caught" in line and f"about {r.runs_needed} would decide" in line
    assert r.as_dict()["verdict"] == "INCONCLUSIVE" and r.as_dict()["runs_needed"] == r.runs_needed


@pytest.mark.privacy
def test_a_violation_is_a_failure_naming_its_criterion():
    main = _bound(fp=0, fn=0, runs=1000)  # bound ~ log(1000 / 3.7) = 5.6 > certified 2.5
    r = _result(main, _bound(fp=0, fn=0, runs=1000), certified=2.5)
    assert r.verdict == "FAIL"
    line = summary_line(["m"], [r.passed], 3.0, results=[r])
    assert "1 failed (m: lower bound" in line and ">= certified 2.500" in line and "inconclusive" not in line
    # a mutant whose observed rates certify less than the threshold: more runs would not help either
    weak = _result(_bound(400, 400, 1000), _bound(300, 300, 1000), certified=2.5)
    assert weak.verdict == "FAIL" and weak.runs_needed is None


@pytest.mark.slow
def test_dpjax_audit_dp_sgd_2000_runs_is_inconclusive(capsys):
    """The issue's command: dp-sgd's half-noise mutant is out of reach at 2000 runs; about 6000 catch it."""
    from dpjax.cli import main

    assert main(["audit", "dp-sgd", "--runs", "2000", "--quiet"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "1 inconclusive" in last and "would decide" in last and "none failed" in last
