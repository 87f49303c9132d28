"""Issue #37 item 3: record every certified number the DpEvent rewiring could move, and compare two runs.

    python experiments/accounting/events_baseline.py record OUT.json     # epsilon and calibrated noise of each case
    python experiments/accounting/events_baseline.py compare OLD.json NEW.json

``events_baseline_25556a3.json`` is the record of the code before issue #37 item 3 (commit 25556a3).

``compare`` prints the largest relative change, every epsilon at a given noise that DEcreased (more privacy claimed:
a bug) and every calibrated noise that moved (calibration re-checks its answer against the reported epsilon, so a
moved one still meets its target; the search's tolerance is ``api.CALIBRATION_RTOL``). Cases: ``dpjax account``
schedules (every sampling x relation x accountant, group privacy, calibration) and every private registered family's
``privacy(...).epsilon`` / ``.calibrate`` under the accountants it certifies.
"""

from __future__ import annotations

import json
import math
import sys
import time

DELTA = 1e-5


def _schedule_cases():
    from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon

    base = dict(noise_std=2.2, contribution_bound=1.0, dataset_size=600, steps=40)
    cases = {
        "poisson add-remove": dict(sampling="poisson", batch_size=30, neighboring="add-remove"),
        "poisson add-remove q": dict(sampling="poisson", batch_size=30, neighboring="add-remove", sampling_rate=0.05),
        "poisson replace-one": dict(sampling="poisson", batch_size=30, neighboring="replace-one", noise_std=4.4),
        "wor": dict(sampling="without-replacement", batch_size=30, noise_std=4.4),
        "wr": dict(sampling="with-replacement", batch_size=30, noise_std=4.4),
        "full": dict(sampling="full", batch_size=None, noise_std=20.0),
        "one-pass": dict(sampling="one-pass", batch_size=70, noise_std=4.4),
        "shuffle": dict(sampling="shuffle", batch_size=70, noise_std=4.4),
        "poisson group 2": dict(sampling="poisson", batch_size=30, neighboring="add-remove", group_size=2),
        "full group 3": dict(sampling="full", batch_size=None, noise_std=40.0, group_size=3),
    }
    accountants = {"poisson": ("rdp", "pld", "best"), "without-replacement": ("rdp", "best"),
                   "with-replacement": ("rdp",), "full": ("rdp", "pld", "gdp", "zcdp", "best"),
                   "one-pass": ("rdp", "pld", "gdp"), "shuffle": ("rdp", "gdp")}
    out = {}
    for name, kw in cases.items():
        s = GaussianSchedule(**{**base, **kw})
        for a in accountants[s.sampling.value]:
            out[f"schedule {name} eps {a}"] = compute_epsilon(s, DELTA, a).epsilon
        out[f"schedule {name} calib rdp"] = calibrate_noise(s, 2.0, DELTA, "rdp") / s.sensitivity
        if "pld" in accountants[s.sampling.value] and s.group_size == 1:
            out[f"schedule {name} calib pld"] = calibrate_noise(s, 2.0, DELTA, "pld") / s.sensitivity
    # composition of two schedules (DIFF2-like)
    a = GaussianSchedule(2.0, 1.0, "full", 100, None, 5)
    b = GaussianSchedule(4.0, 1.0, "full", 100, None, 9)
    out["schedule composed full rdp"] = compute_epsilon([a, b], DELTA, "rdp").epsilon
    out["schedule composed full pld"] = compute_epsilon([a, b], DELTA, "pld").epsilon
    # the CLI itself (dpjax account --json)
    import contextlib
    import io

    from dpjax.accounting import cli

    for args in (["--sampling", "poisson", "--noise-multiplier", "1.1", "--batch-size", "256", "--dataset-size",
                  "60000", "--steps", "1000", "--delta", "1e-5"],
                 ["--sampling", "without-replacement", "--epsilon", "1.5", "--batch-size", "15", "--dataset-size",
                  "1238", "--steps", "35", "--delta", "6.5e-7"],
                 ["--sampling", "poisson", "--epsilon", "1.0", "--sampling-rate", "0.01", "--dataset-size", "10000",
                  "--steps", "500", "--delta", "1e-5", "--accountant", "rdp"]):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            cli.main(args + ["--json"])
        d = json.loads(buf.getvalue())
        out["cli " + " ".join(args[:4]) + " eps"] = float(d["epsilon"])
        out["cli " + " ".join(args[:4]) + " z"] = float(d["noise_multiplier"])
    return out


# name -> (static, hparams, rounds, sizes, accountants, calibrate accountants)
FAMILIES = {
    "isrl-mbsgd": ({"batch_size": 4}, {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, None,
                   ("rdp",), ("rdp",)),
    "isrl-mbsgd poisson": ({"batch_size": 4, "sampling": "poisson", "neighboring": "add-remove", "sampling_rate": 0.2},
                           {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, None,
                           ("rdp", "pld"), ("rdp", "pld")),
    "isrl-mbsgd poisson replace-one": ({"batch_size": 4, "sampling": "poisson"},
                                       {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, None,
                                       ("rdp", "pld"), ("rdp",)),
    "isrl-local-sgd": ({"local_steps": 2}, {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 3,
                       None, ("rdp",), ("rdp",)),
    "isrl-accelerated": ({"batch_size": 4}, {"smoothness": 1.0, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, None,
                         ("rdp", "pld", "gdp", "zcdp"), ("rdp", "gdp")),
    "dp-scaffold": ({"silos_per_round": 2, "local_steps": 2, "batch_size": 4},
                    {"noise_multiplier": 1.5, "clip_norm": 2.0}, 3, None, ("rdp",), ("rdp",)),
    "isrl-unbalanced": ({"batch_sizes": (5, 4)}, {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0},
                        6, None, ("rdp",), ("rdp",)),
    "dp-gd": ({}, {"learning_rate": 0.1, "noise_multiplier_restart": 1.5, "clip_restart": 2.0}, 6, (12,),
              ("rdp", "pld", "gdp"), ("rdp", "pld")),
    "diff2-gd": ({}, {"learning_rate": 0.1, "restart_interval": 2, "noise_multiplier_restart": 1.5,
                      "noise_multiplier_diff": 2.0, "clip_restart": 2.0, "clip_diff": 3.0}, 6, (12,),
                 ("rdp", "pld"), ("rdp",)),
    "diff2-bvr": ({"local_steps": 2, "batch_size": 3},
                  {"learning_rate": 0.1, "restart_interval": 2, "noise_multiplier_restart": 1.5,
                   "noise_multiplier_diff": 2.0, "noise_multiplier_local": 2.5, "clip_restart": 2.0, "clip_diff": 3.0,
                   "clip_local": 1.5}, 6, None, ("rdp",), ()),
    "dp-ftrl": ({"batch_size": 4}, {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 7, (12,),
                ("rdp",), ("rdp",)),
    "dp-sgd": ({"batch_size": 3, "sampling_rate": 0.25}, {"learning_rate": 0.1, "noise_multiplier": 1.5,
                                                          "clip_norm": 2.0}, 6, (12,), ("rdp", "pld", "best"),
               ("rdp", "pld")),
    "dp-sgd wor": ({"batch_size": 4, "sampling": "without-replacement", "neighboring": "replace-one"},
                   {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, (12,),
                   (None, "standard"), (None,)),
    "dpsgd-general": ({"subset_size": 4, "num_subsets": 2, "rounds_per_epoch": 1},
                      {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, (12,),
                      ("sqrt-gE", "standard"), ("standard",)),
    "dpsgd-general poisson": ({"subset_size": 1, "num_subsets": 3, "rounds_per_epoch": 1, "sampling": "poisson",
                               "neighboring": "add-remove", "sampling_rate": 0.25},
                              {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6, (12,),
                              (None,), (None,)),
    "dp-fedavg": ({"silos_per_round": 2, "sampling_rate": 0.25},
                  {"noise_multiplier": 2.5, "noise_multiplier_count": 5.0, "clip_norm": 2.0}, 6, None,
                  ("rdp", "pld"), ("rdp",)),
    "isrl-shuffled": ({"num_available": 2}, {"learning_rate": 0.1, "noise_multiplier": 1.5, "clip_norm": 2.0}, 6,
                      None, (None,), ()),
    "user-level-dpsgd": ({"unit": "user", "batch_size": 2, "sampling_rate": 2 / 3, "records_per_user": 8},
                         {"learning_rate": 0.5, "noise_multiplier": 0.8}, 6, (20, 12, 16), (None,), (None,)),
    "dp-fedavg-band-mf": ({"silos_per_round": 1, "sampling_rate": 0.5, "bands": 2, "num_groups": 3,
                           "band_coeffs": [1.0, 0.4]}, {"learning_rate": 0.5, "noise_multiplier": 0.8}, 6,
                          (20, 12, 16), (None,), ()),
}


def _family_cases():
    from dpjax.algorithms import load_families
    from dpjax.engine.registry import ALGORITHMS
    from dpjax.problems.glm import LinearRegression

    load_families()
    out = {}
    for label, (static, hparams, rounds, sizes, accountants, calibs) in FAMILIES.items():
        name = label.split(" ")[0]
        entry = ALGORITHMS[name]
        alg = entry.build(LinearRegression(2), rounds, static)
        spec = alg.privacy(list(sizes or (20, 12)), entry.make_hparams(hparams, alg))
        for a in accountants:
            r = spec.epsilon(DELTA) if a is None else spec.epsilon(DELTA, a)
            out[f"family {label} eps {a or 'default'}"] = r.epsilon
        for a in calibs:
            got = spec.calibrate(2.0, DELTA) if a is None else spec.calibrate(2.0, DELTA, a)
            for field, value in sorted(got.items()):
                vals = value if isinstance(value, (tuple, list)) else (value,)
                for i, x in enumerate(vals):
                    out[f"family {label} calib {a or 'default'} {field}[{i}]"] = float(x)
    from dpjax.accounting import user_level as ul

    for mech, n, m in (("A3", 1850, 1), ("B1", 10, 3)):
        out[f"user-level {mech} eps"] = ul.privacy(mech, 1.0, 1e-3, n=n, m=m, noise_std=0.7).epsilon(2e-3).epsilon
    return out


def record(path):
    t = time.time()
    out = {**_schedule_cases(), **_family_cases()}
    with open(path, "w") as f:
        json.dump({k: (str(x) if isinstance(x, float) and math.isinf(x) else x) for k, x in out.items()}, f,
                  indent=1)
    print(f"{len(out)} numbers in {time.time() - t:.1f} s -> {path}")


def compare(old_path, new_path):
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    missing = sorted(set(old) ^ set(new))
    worst, bad, moved = (0.0, None), [], []
    for k in sorted(set(old) & set(new)):
        if isinstance(old[k], str) and old[k] != "inf" or isinstance(new[k], str) and new[k] != "inf":
            if old[k] != new[k]:
                bad.append((k, old[k], new[k]))
            continue
        a, b = float(old[k]), float(new[k])
        rel = 0.0 if a == b else abs(b - a) / abs(a)
        if rel > worst[0]:
            worst = (rel, k)
        calibration = " calib " in k or "--epsilon" in k  # a calibrated noise, or the epsilon reported at one
        if b < a and not calibration:
            bad.append((k, a, b))  # a smaller epsilon at the same noise: more privacy claimed
        elif b != a and calibration:
            moved.append((k, a, b))
    print(f"{len(set(old) & set(new))} numbers compared; largest relative change {worst[0]:.3g} ({worst[1]})")
    for k, a, b in bad:
        print(f"EPSILON DECREASE (a bug) {k}: {a!r} -> {b!r}")
    for k, a, b in moved:  # calibration re-checks its answer on the reported epsilon: still within the target
        print(f"calibration moved {(b - a) / a:+.2e}: {k}")
    if missing:
        print("only in one file:", missing)
    return 1 if bad or missing else 0


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(sys.argv[2])
    else:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
