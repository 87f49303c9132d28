"""Every catalogued mechanism's audit passes and its mutants are caught (fixed seed).

Tolerances come from the math, not tuning:
* ``lower bound < certified eps`` fails with probability <= 5 % if the certificate is valid
  (Clopper-Pearson at 95 %, threshold picked on independent runs);
* mutants (power, not validity): at the run counts below, each half-noise mutant's lower bound
  exceeded the certified eps at every one of seeds 0-3; smallest margins 0.11 (ISRL-DP, RDP
  without-replacement certificate) and 0.23 (shuffling, strong-adversary certificate), >= 0.43
  elsewhere (experiments/audit/margins.txt). A missing clip moves the canary by 100x the
  sensitivity (bound ~ log(runs)).
"""

import pytest

from dpjax.auditing import audit as audit_lib
from dpjax.auditing.cli import _NAMES
from dpjax.auditing.mechanisms import audit_names, build_audit

# Runs per dataset. ISRL-DP (RDP without-replacement certificate) and shuffling (strong-adversary
# certificate) leave the smallest gap between the certificate and what a half-noise mutant shows
# an observer of the releases: 10^5 runs. Gaussian, subsampling, Poisson and DIFF2 mutants clear
# it by >= 0.43 already at 4 x 10^4. P_1D/P_vec draw binomials on the host (~50 us a run) and
# their only mutant (no clip, canary 1000 L) is caught by a wide margin.
RUNS = {"isrl-silo": 100_000, "dpsgd-individual-shuffle": 100_000, "dpsgd-batch-shuffle": 100_000,
        "p1d": 4000, "pvec": 4000}


# With one canary record batch and individual clipping release the same law (same numbers in
# experiments/audit); batch clipping's code path stays in the default suite through the g = 2 audit.
_SLOW = ("dpsgd-batch-shuffle", "dpsgd-batch-subsample")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in audit_names()])
def test_audit_passes_and_mutants_are_caught(name):
    audit = build_audit(name)
    result = audit_lib.run_audit(audit, runs=RUNS.get(name, 40_000), seed=0)
    assert result.bound.epsilon < result.certificate.epsilon
    assert result.mutants, "every audit needs at least one mutant"
    for m in result.mutants:
        assert m.caught, (m.name, m.bound.epsilon, result.certificate.epsilon)
    if result.exact and "epsilon" in result.exact:  # the bound is below the exact eps too (95 %)
        assert result.bound.epsilon <= result.exact["epsilon"]
    assert result.passed
    if name == "dpsgd-individual-subsample-g2":
        # van Dijk et al.: for a user of g = 2 records batch clipping is more private than
        # individual clipping. The audit sees it: individual clipping's lower bound (95 %)
        # exceeds the certificate of batch clipping in the same configuration.
        assert result.bound.epsilon > build_audit("dpsgd-batch-subsample-g2").certificate.epsilon


def test_cli_names_match_the_catalogue():
    assert tuple(_NAMES) == audit_names()


def test_same_seed_same_bound():
    audit = build_audit("gaussian")
    a = audit_lib.run_audit(audit, runs=2000, seed=3)
    b = audit_lib.run_audit(audit, runs=2000, seed=3)
    assert a.bound == b.bound and [m.bound for m in a.mutants] == [m.bound for m in b.mutants]


def test_override_mutant_needs_dict_datasets():
    audit = build_audit("gaussian")
    bad = audit_lib.CanaryAudit(name="x", description="", mechanism=audit.mechanism, dataset=audit.dataset["data"],
                                neighbour=audit.neighbour["data"], score=audit.score, certificate=audit.certificate,
                                mutants={"half-noise": {"noise_std": 1.0}})
    with pytest.raises(ValueError, match="dict datasets"):
        audit_lib.run_audit(bad, runs=10)
