"""Power of the test suite's run counts: the audits of tests/auditing/test_audits.py at seeds 0-3.

    PYTHONPATH=. python experiments/audit/margins.py > experiments/audit/margins.txt
    PYTHONPATH=. python experiments/audit/margins.py NAME ... >> experiments/audit/margins.txt  # some audits

One line per (seed, mechanism): runs per dataset, certified eps, exact eps of the canary pair,
lower bound, mutants' bounds, pass. The batch-clipping twins of the individual-clipping audits
(same law, same numbers) are left out.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "auditing"))
from test_audits import RUNS, RUNS_BY_AUDIT  # noqa: E402  (the run counts of the test suite)

from dpjax.auditing.audit import run_audit  # noqa: E402
from dpjax.auditing.mechanisms import audit_names, build_audit  # noqa: E402

SKIP = ("dpsgd-general-shuffle-batch", "dpsgd-general-subsample-batch")

names = sys.argv[1:] or [name for name in audit_names() if name not in SKIP]
if not sys.argv[1:]:
    print("seed mechanism runs certified exact lower_bound mutants passed")
for seed in (0, 1, 2, 3):
    for name in names:
        runs = RUNS_BY_AUDIT.get(name, RUNS)
        r = run_audit(build_audit(name), runs=runs, seed=seed)
        print(seed, name, runs, round(r.certificate.epsilon, 3), round(r.exact_epsilon, 3), round(r.bound.epsilon, 3),
              " ".join(f"{m.name}={m.bound.epsilon:.3f}" for m in r.mutants), r.passed, flush=True)
