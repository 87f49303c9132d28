"""Power of the test suite's audit run counts: how many runs per dataset each audit needs to catch its mutants.

    PYTHONPATH=. python experiments/audit/runs_power.py > experiments/audit/runs_power.txt
    PYTHONPATH=. python experiments/audit/runs_power.py NAME ... >> experiments/audit/runs_power.txt  # some audits

For every mutant of an audit, ``POOL`` runs per dataset (keys from seed 1000, never a test seed) stand in for its score
distributions on D and D'. For each run count R of ``GRID`` the whole procedure of ``run_audit`` is replayed ``B`` times
on disjoint random sub-samples of the pool (R/2 runs per dataset select the threshold, R/2 others bound epsilon:
``stats.select_and_bound``), giving the distribution of the mutant's lower bound at R runs. One line per (audit, mutant,
R): the threshold the mutant must exceed (min of certified and exact eps), the bounds' mean, standard deviation (scaled by
``1/sqrt(1 - R/POOL)``, the finite-pool correction of sub-sampling without replacement), smallest value, the number of
the B replicates that missed (bound <= threshold), and ``z = (mean - threshold)/sd``. The lower bound is a smooth
function of two binomial counts, close to normal, so a mutant is missed at R with probability about ``Phi(-z)``.
Per audit the last line is the smallest R of the grid with ``z >= Z_MIN`` for every mutant and no missed replicate (2 x
10^4, the suite's default, when none of the grid qualifies). tests/auditing/test_audits.py (RUNS_BY_AUDIT) lowers the run
count only where that is far below 2 x 10^4 and the saving is real (see the comment there).
"""

import sys
from pathlib import Path

import jax
import numpy as np

from dpjax import keys
from dpjax.auditing import audit as audit_lib, stats
from dpjax.auditing.mechanisms import audit_names, build_audit

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "auditing"))
from test_audits import _SLOW  # noqa: E402  (the audits the default suite leaves to the slow pass)

POOL = 40_000  # runs per dataset per mutant
GRID = (1000, 2000, 4000, 8000, 12_000)
B = 30  # replicates per run count
Z_MIN = 4.0  # Phi(-4) = 3e-5 per mutant

DEFAULT = [n for n in audit_names() if n not in _SLOW]  # the audits of the default suite


def mutant_pools(audit):
    """{mutant: (scores on D, scores on D')}, POOL runs each, as run_audit draws them."""
    main = audit_lib._scorer(audit.mechanism, audit.score)
    out = {}
    for i, (name, mutant) in enumerate(sorted(audit.mutants.items()), start=1):
        if audit_lib._is_mechanism(mutant):
            fn, data, neighbour = audit_lib._scorer(mutant, audit.score), audit.dataset, audit.neighbour
        else:
            fn, data, neighbour = main, audit_lib._override(audit.dataset, mutant), audit_lib._override(
                audit.neighbour, mutant)
        k_d, k_p = jax.random.split(keys.run_key(1000, i))
        chunk = 20_000
        out[name] = (audit_lib.sample_scores(None, None, data, k_d, POOL, chunk, fn),
                     audit_lib.sample_scores(None, None, neighbour, k_p, POOL, chunk, fn))
    return out


def main(names):
    print("audit mutant runs threshold mean sd min missed/B z", flush=True)
    rng = np.random.default_rng(0)
    for name in names:
        audit = build_audit(name)
        exact = audit.exact() if audit.exact is not None else None
        threshold = audit.certificate.epsilon
        if exact and exact.get("epsilon") is not None:
            threshold = min(threshold, float(exact["epsilon"]))
        delta = audit.certificate.delta
        pools = mutant_pools(audit)
        for runs in GRID:  # the smallest run count at which every mutant is caught with z >= Z_MIN
            half, ok = runs // 2, True
            for mutant, (sd, sp) in pools.items():
                bounds = []
                for _ in range(B):
                    i, j = rng.permutation(POOL), rng.permutation(POOL)
                    b = stats.select_and_bound(sd[i[:half]], sp[j[:half]], sd[i[half:runs]], sp[j[half:runs]], delta)
                    bounds.append(b.epsilon)
                bounds = np.asarray(bounds)
                spread = float(np.std(bounds, ddof=1)) / np.sqrt(1.0 - runs / POOL)
                z = (bounds.mean() - threshold) / spread if spread > 0 else (np.inf if bounds.min() > threshold
                                                                             else -np.inf)
                print(name, mutant, runs, round(threshold, 3), round(float(bounds.mean()), 3), round(spread, 3),
                      round(float(bounds.min()), 3), f"{int(np.sum(bounds <= threshold))}/{B}", round(float(z), 1),
                      flush=True)
                ok = ok and bool(bounds.min() > threshold) and z >= Z_MIN
                if not ok:
                    break
            if ok:  # larger run counts only add power
                print(name, "runs", runs, flush=True)
                break
        else:
            print(name, "runs", 20_000, "(none of the grid)", flush=True)



if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
