"""Every catalogued audit runs a registered family's own step, passes, and catches its mutants
(fixed seed).

Tolerances come from the math, not tuning:
* ``lower bound < certified eps`` and ``<= exact eps of the canary pair`` each fail with
  probability <= 5 % if the certificate (the exact value) is right (Clopper-Pearson at 95 %,
  threshold picked on independent runs);
* mutants (power, not validity): at 2 x 10^4 runs per dataset every half-noise mutant's lower bound
  exceeded the smaller of the certified and the exact eps at seeds 0-3 (smallest margins in
  experiments/audit/margins.txt). A missing clip moves the canary by 100x the sensitivity and a
  P_vec without noise is deterministic (bound ~ log(runs)).
"""

import dataclasses

import pytest

from dpjax.algorithms import load_families
from dpjax.auditing import audit as audit_lib, canaries
from dpjax.auditing.cli import _NAMES
from dpjax.auditing.mechanisms import FAMILY_AUDITS, audit_names, build_audit
from dpjax.engine.registry import ALGORITHMS

RUNS = 20_000  # runs per dataset (see the module docstring)

# Fewer runs where the power does not need them (issue #39; experiments/audit/runs_power.py replays run_audit's
# select-then-bound on sub-samples of 4 x 10^4 runs of each mutant and prints, per run count R, the spread of the
# mutant's bound and z = (mean - threshold) / sd; runs_power.txt). A half-noise mutant needs the full 2 x 10^4: at
# R = 12 000 its z is only 2.2-2.7 (dp-sgd, dp-fedavg, isrl-*, user-level-dpsgd-els; at 8 000 some replicates miss),
# and below 2 x 10^4 an audit saves only the execution, ~0.5 s of its ~2.5 s CPU (compilation and the exact eps of
# the pair are fixed costs). The exceptions are the P_vec audits, whose binomial draws scale with the runs and whose
# only mutant is deterministic: without noise D and D' give two distinct constant outputs, so FP = FN = 0 on the
# m = R/2 evaluation runs whatever the seed, the Clopper-Pearson bounds are 1 - 0.025^(1/m) (3.7e-3 at m = 1000) and
# the mutant's bound is log((1 - delta - 3.7e-3)/3.7e-3) = 5.6 >> the pair's exact eps 0.024: caught with probability
# 1. The mechanism's own bound stays below the thresholds with probability >= 95 % at any R (it was 0.0 at 2 x 10^4).
RUNS_BY_AUDIT = {"sdp-accelerated": 2000, "shuffle-sgd": 2000}

# With one canary record batch and individual clipping release the same law (same numbers in
# experiments/audit); batch clipping's code path stays in the default suite through the g = 2 audit.
# dp-fedavg-count (~65 s, the slowest of the default suite): DP-FedAvg's code path stays in the default run through
# the dp-fedavg audit; the count-noise variant runs in the slow pass.
_SLOW = ("dpsgd-general-shuffle-batch", "dpsgd-general-subsample-batch", "dp-fedavg-count",
         "dp-sgd-band-mf", "dp-sgd-band-mf-separation",  # 48 rounds; construction: test_band_mf_audit.py
         "dp-fedavg-band-mf")  # ~6 s; construction: test_band_mf_fedavg_audit.py


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in audit_names()])
def test_audit_passes_and_mutants_are_caught(name):
    audit = build_audit(name)
    result = audit_lib.run_audit(audit, runs=RUNS_BY_AUDIT.get(name, RUNS), seed=0)
    assert result.bound.epsilon < result.certificate.epsilon
    assert result.mutants, "every audit needs at least one mutant"
    for m in result.mutants:
        assert m.caught, (m.name, m.bound.epsilon, result.certificate.epsilon, result.exact_epsilon)
    assert result.exact_epsilon is not None, "every audit compares with the exact epsilon of its canary pair"
    assert result.bound.epsilon <= result.exact_epsilon  # (95 %)
    assert result.exact_epsilon <= result.certificate.epsilon * (1 + 2e-3), "exact above the certificate"
    assert result.passed
    if name == "dpsgd-general-subsample-individual-g2":
        # van Dijk et al.: for a user of g = 2 records batch clipping is more private than
        # individual clipping. The audit sees it: individual clipping's lower bound (95 %)
        # exceeds the certificate of batch clipping in the same configuration.
        assert result.bound.epsilon > build_audit("dpsgd-general-subsample-batch-g2").certificate.epsilon


def test_every_audit_runs_a_registered_family_and_every_private_family_has_one(monkeypatch):
    """A family audit's mechanism is the registered family object (same class and fixed fields),
    run through ``execute.run_family``; ``FAMILY_AUDITS`` covers every private registry entry.

    Only the mechanisms are checked here, so the builders' certificates (each a full accounting run: PLD for
    most, ~80 % of the building time) are stubbed; every certificate is computed and checked against the
    audit's runs in ``test_audit_passes_and_mutants_are_caught``."""
    monkeypatch.setattr(canaries, "certificate",
                        lambda spec, accountant, what: audit_lib.Certificate(1.0, canaries.DELTA, f"stub {what}"))
    load_families()
    private = {name for name, entry in ALGORITHMS.items() if entry.private}
    assert set(FAMILY_AUDITS) == private
    named = {a for audits in FAMILY_AUDITS.values() for a in audits}
    assert named | {"user-level", "balls-in-bins"} == set(audit_names())
    for family_name, audits in FAMILY_AUDITS.items():
        entry = ALGORITHMS[family_name]
        for name in audits:
            mech = build_audit(name).mechanism
            assert isinstance(mech, audit_lib.FamilyRun) and mech.registered == family_name
            assert type(mech.family) is entry.cls
            for field, value in entry.fixed_values.items():
                assert getattr(mech.family, field) == value, (name, field)
            assert getattr(mech.family, "private", True) is True


def test_a_mechanism_leaking_more_than_the_pair_but_less_than_certified_fails():
    """The exact comparison: 0.8 x the noise stays inside ISRL-DP's (loose) RDP certificate but
    leaks more than the canary pair's exact epsilon; the audit must fail on it."""
    audit = build_audit("isrl-mbsgd")
    z = "noise_multiplier"
    weaker = dataclasses.replace(audit, dataset={**audit.dataset, z: audit.dataset[z] * 0.6},
                                 neighbour={**audit.neighbour, z: audit.neighbour[z] * 0.6},
                                 mutants={})
    result = audit_lib.run_audit(weaker, runs=RUNS, seed=0)
    assert result.below_certificate and not result.below_exact and not result.passed


def test_cli_names_match_the_catalogue():
    assert tuple(_NAMES) == audit_names()


def test_same_seed_same_bound():
    audit = build_audit("dp-gd")
    a = audit_lib.run_audit(audit, runs=2000, seed=3)
    b = audit_lib.run_audit(audit, runs=2000, seed=3)
    assert a.bound == b.bound and [m.bound for m in a.mutants] == [m.bound for m in b.mutants]


def test_override_mutant_needs_dict_datasets():
    audit = build_audit("user-level")
    bad = audit_lib.CanaryAudit(name="x", description="", mechanism=audit.mechanism, dataset=audit.dataset["centres"],
                                neighbour=audit.neighbour["centres"], score=audit.score, certificate=audit.certificate,
                                mutants={"half-noise": {"noise_multiplier": 1.0}})
    with pytest.raises(ValueError, match="dict datasets"):
        audit_lib.run_audit(bad, runs=10)
