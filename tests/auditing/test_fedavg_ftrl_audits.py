"""The audits of DP-FedAvg (adaptive clipping) and DP-FTRL (tree aggregation) pass and catch their
mutants at a fixed seed, each a ``FamilyRun`` of the registered family.

Tolerances: as ``test_audits`` (the lower bound is below the certified and the exact epsilon with
probability >= 95 % each if those are right). Mutants (power): at 2 x 10^4 runs per dataset every
mutant's bound exceeded min(certified, exact) at seeds 0-3; smallest margins 0.74 (dp-fedavg,
half-noise), 0.62 (dp-fedavg-count, half-noise), 0.92 (dp-ftrl, half-noise).
"""

import pytest

from dpjax.auditing import audit as audit_lib
from dpjax.auditing.fedavg_ftrl import dp_fedavg_audit, dp_fedavg_count_audit, dp_ftrl_audit
from dpjax.engine.registry import get_algorithm

DELTA = 1e-3  # the catalogue's point (mechanisms.DELTA)


@pytest.mark.parametrize("build", [dp_fedavg_audit, dp_fedavg_count_audit, dp_ftrl_audit])
@pytest.mark.slow  # the same audits run in the default suite through tests/auditing/test_audits.py
def test_audit_runs_the_registered_family_passes_and_catches_its_mutants(build):
    audit = build(delta=DELTA)
    mech = audit.mechanism
    assert isinstance(mech, audit_lib.FamilyRun) and type(mech.family) is get_algorithm(mech.registered).cls
    result = audit_lib.run_audit(audit, runs=20_000, seed=0)
    assert result.bound.epsilon < result.certificate.epsilon
    assert result.bound.epsilon <= result.exact_epsilon <= result.certificate.epsilon
    assert len(result.mutants) >= 2 and all(m.caught for m in result.mutants), [
        (m.name, m.bound.epsilon) for m in result.mutants]
    assert result.passed
