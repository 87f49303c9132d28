"""Every report of a shuffled run shows the certificate beside the Poisson number a typical implementation would report
and Chua et al.'s lower bound, each labelled (dpjax.reproduce.shuffle_report); never the Poisson number alone."""

import csv

import pytest

from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.reproduce import dpsgd_mnist as exp
from dpjax.reproduce import dpsgd_mnist_config as cfg
from dpjax.reproduce.shuffle_report import GAP_ACCOUNTANTS
from tests.reproduce import missing_labels

pytestmark = pytest.mark.privacy


def _alg(sampling, n=10240):
    from dpjax.problems import FlaxProblem

    kw = dict(cfg.variants()["BC-SH" if sampling == "shuffle" else "IC-SS"])
    return DpSgdGeneral.for_epochs(FlaxProblem(cfg.cnn(), (28, 28, 1), "softmax"), n, 3, **kw)


def test_shuffled_privacy_rows_carry_the_gap_and_subsampled_ones_do_not():
    hp = DpSgdHParams.create(0.3, cfg.SIGMA, 1.0)
    rows = exp.privacy_rows(_alg("shuffle"), 10240, hp)
    got = {r["accountant"]: r["epsilon"] for r in rows if r["group_size"] == 1}
    assert set(GAP_ACCOUNTANTS.values()) <= set(got)
    # lower bound <= certificate (the lower bound is of the same run)
    assert got[GAP_ACCOUNTANTS["lower_bound"]] <= got["strong-exact"] + 1e-9
    rows = exp.privacy_rows(_alg("subsample"), 10240, hp)
    assert not set(GAP_ACCOUNTANTS.values()) & {r["accountant"] for r in rows}


def test_dpsgd_mnist_report_of_a_shuffled_variant_has_all_three(tmp_path):
    part = tmp_path / "bc"
    part.mkdir()
    with open(part / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "epochs", "learning_rate", "clip_norm", "sigma", "seed",
                                          "test_accuracy"])
        w.writeheader()
        w.writerow({"variant": "BC-SH", "epochs": 3, "learning_rate": 0.3, "clip_norm": 1.0, "sigma": 2.0, "seed": 0,
                    "test_accuracy": 0.9})
    rows = exp.privacy_rows(_alg("shuffle"), 10240, DpSgdHParams.create(0.3, cfg.SIGMA, 1.0))
    with open(part / "privacy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "group_size", "accountant", "epsilon", "notes"])
        w.writeheader()
        for r in rows:
            w.writerow({"variant": "BC-SH", **r})
    import json

    meta = {"quick": True, "seed": 0, "config": {**cfg.QUICK, "lrs": [0.3], "epochs": [3], "clips": [1.0]},
            "variants": {"BC-SH": cfg.describe(cfg.variants()["BC-SH"])}, "wall_seconds": 1.0, "cpu_seconds": 1.0,
            "load_average_at_end": [1.0, 1.0, 1.0],
            "timings": {"BC-SH E=3": {"seconds": 1.0, "cpu_seconds": 1.0, "rounds": 120, "runs": 1,
                                      "batch": cfg.ROUND_RECORDS}}}
    (part / "meta.json").write_text(json.dumps(meta))
    text = exp.report_only(part, quick=True).read_text()
    assert not missing_labels(text), f"the shuffled run's report lacks {missing_labels(text)}"


def test_missing_labels_catches_a_report_with_the_poisson_number_alone():
    from dpjax.accounting.shuffle_gap import LABELS

    assert missing_labels(f"{LABELS['poisson']}: ε = 1.2") == [LABELS["certified"], LABELS["lower_bound"]]


def test_batch_clipping_n9_rows_hold_the_three_numbers():
    from dpjax.accounting.shuffle_gap import LABELS
    from dpjax.reproduce import batch_clipping_privacy as B

    rows = []
    B.n9_shuffle_gap(rows)
    by_key = {}
    for r in rows:
        by_key.setdefault(r["key"], {})[r["metric"]] = r["value"]
    assert len(by_key) == 2
    for key, vals in by_key.items():
        assert set(vals) == set(LABELS.values()), key
        assert vals[LABELS["lower_bound"]] <= vals[LABELS["certified"]]
