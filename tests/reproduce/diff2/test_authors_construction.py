"""The DIFF2 figures' ``construction="authors"`` (issue #16): the authors' step-size search
(``train.py`` + ``notebook_for_evaluation.ipynb`` of ``lawrenceztang/CE-PLSGM``) and the
threading of the construction through the quick-mode data and the noise multipliers."""

import math
import pathlib

import numpy as np
import pytest

from dpjax.reproduce import diff2 as rep
from dpjax.sweep import select

from tests._shared import SHARED_DATA, shared_file  # noqa: E402


def test_authors_search_checks_patience_one_evaluation_late():
    nan = float("nan")
    # the counter reaches 5 at the last checkpoint: dpjax's rule fails the run, the script has no
    # later evaluation at which to stop it
    late = [1.0, 1.1, 1.2, 1.1, 1.06, 1.3]
    assert not select.patience_survives(late)
    assert rep.claims.authors_step_size_search([0.5], [late]) == (0, True, 6)
    # one more evaluation after the counter reached 5: stopped there, that evaluation unrecorded
    assert rep.claims.authors_step_size_search([0.5], [late + [0.9]]) == (0, False, 6)
    # inf is not a failure for the script (np.isnan only), NaN is
    assert rep.claims.authors_step_size_search([0.5], [[1.0, math.inf, 0.9]]) == (0, True, 3)
    assert rep.claims.authors_step_size_search([0.5], [[1.0, 0.9, nan, 0.8]]) == (0, False, 2)


def test_authors_search_keeps_the_first_survivor_else_the_smallest_step():
    nan = float("nan")
    ok, bad = [1.0, 0.9, 0.8], [1.0, nan, 0.5]
    # step sizes in any order: the largest that completes wins
    assert rep.claims.authors_step_size_search([0.125, 0.5, 0.25], [ok, bad, ok]) == (2, True, 3)
    # none completes: the notebook's results[min(keys)] is the smallest step size (the last tried),
    # whatever its loss; dpjax's rule (spec A23) takes the lowest minimum instead
    traces = [[1.0, 0.1, nan], [1.0, 0.5, nan], [1.0, 0.9, nan]]
    assert rep.claims.authors_step_size_search([0.5, 0.25, 0.125], traces) == (2, False, 2)
    assert rep.claims.choose_learning_rate([0.5, 0.25, 0.125], traces) == (0, False)


def test_summarize_masks_what_the_script_never_evaluates():
    mk = lambda eta: rep.config.Config("GD", math.inf, 1, math.inf, math.inf, eta, 0.0, 0.0)
    configs = [mk(0.5), mk(0.25)]
    nan = float("nan")
    loss = np.array([[1.0, nan, nan, nan], [1.0, 0.8, 0.7, nan]])
    result = {"configs": configs, "traces": {0: {"train_loss": loss, "grad_norm_sq": loss * 2, "test_loss": loss}}}
    paper = rep.claims.summarize(result, rep.config.QUICK, rep.config.METRICS_REG)[("GD", math.inf)]
    authors = rep.claims.summarize(result, rep.config.QUICK, rep.config.METRICS_REG, "authors")[("GD", math.inf)]
    # neither survives; the script keeps the smallest step size and its three recorded checkpoints
    assert authors["train_loss"]["choice"][0].learning_rate == 0.25
    np.testing.assert_array_equal(authors["test_loss"]["curves"][0], [1.0, 0.8, 0.7, nan])
    assert authors["train_loss"]["final"][0] == 0.7 and authors["train_loss"]["best"][0] == 0.7
    # dpjax's rule (A23) picks the same run here but reads its final value at the last checkpoint
    assert paper["train_loss"]["fallback"] == 1 and np.isnan(paper["train_loss"]["final"][0])


def test_quick_split_and_noise_follow_the_construction():
    shared_file("california_housing", "cal_housing.data")
    cap = rep.config.QUICK.max_records["california_housing"]
    a0, _ = rep.model.load_split("california_housing", 0, cap, SHARED_DATA, "authors")
    a1, _ = rep.model.load_split("california_housing", 1, cap, SHARED_DATA, "authors")
    p0, _ = rep.model.load_split("california_housing", 0, cap, SHARED_DATA)
    # the authors' split (and the quick subsample under it) is the same for every seed
    for x, y in zip(a0.train_x + [a0.pooled_test_x], a1.train_x + [a1.pooled_test_x]):
        np.testing.assert_array_equal(x, y)
    assert a0.metadata["construction"] == "authors" and p0.metadata["construction"] == "paper"
    assert a0.metadata["feature_names"][0] == "MedInc" and p0.metadata["feature_names"][0] == "longitude"
    n = a0.metadata["n_min"]
    paper = rep.config.build_configs(rep.config.QUICK, (3.0,), n)
    authors = rep.config.build_configs(rep.config.QUICK, (3.0,), n, "authors")
    assert [c.group()[:1] + c.group()[2:] for c in paper] == [c.group()[:1] + c.group()[2:] for c in authors]
    for c, d in zip(paper, authors):
        if c.algorithm == "DIFF2-GD":  # R = 80, T in {2, 8}: same sigma1 (T divides R), sigma2 x sqrt(R/(R-m))
            m = math.ceil(80 / c.restart_interval)
            assert d.sigma_restart == pytest.approx(c.sigma_restart, rel=1e-12)
            assert d.sigma_diff == pytest.approx(c.sigma_diff * math.sqrt(80 / (80 - m)), rel=1e-12)
        else:
            assert (d.sigma_restart, d.sigma_diff) == (c.sigma_restart, c.sigma_diff)
    rep.config.verify_privacy(authors, rep.config.QUICK, n)  # raises if the script's noise exceeded eps


def test_report_names_the_construction(tmp_path):
    """Title, report settings and results.csv name the construction (hand-made traces, no training)."""
    import pandas as pd

    proto = rep.config.Protocol(num_rounds=4, eval_every=2, seeds=(0, 1), learning_rates=(0.5, 0.25), clip_restart=(1.0,),
                         clip_diff=(3.0,), restart_fractions=(0.5,))
    configs = [c for c in rep.config.build_configs(proto, (3.0,), 50, "authors")]
    rng = np.random.default_rng(0)
    traces = {s: {m: np.sort(rng.uniform(0.1, 1.0, (len(configs), 3)), axis=1)[:, ::-1] for m in rep.config.METRICS_REG}
              for s in (0, 1)}
    result = {"configs": configs, "eval_rounds": np.array([0, 2, 4]), "traces": traces, "wall_s": 1.0,
              "privacy": {(3.0, 1): (2.9, 2.9), (3.0, 2): (2.8, 2.8)},
              "meta": {"task": "regression", "n_total": 600, "n_train": 480, "n_min": 48, "d": 8, "n_params": 101,
                       "max_records": None, "split": "sklearn train_test_split(test_size=0.2, random_state=0)"}}
    summ = rep.claims.summarize(result, proto, rep.config.METRICS_REG, "authors")
    report = rep.figures.write_outputs(tmp_path, "t", ["california_housing"], (3.0,), rep.config.METRICS_REG,
                                {"california_housing": result}, {"california_housing": summ}, proto, True, 1.0,
                                construction="authors")
    text = report.read_text()
    assert "[construction: authors]" in text.splitlines()[0]
    assert "diff2_gd_sigmas_script" in text and "authors_step_size_search" in text and "random_state=0" in text
    assert set(pd.read_csv(tmp_path / "results.csv")["construction"]) == {"authors"}


def test_both_diff2_figures_offer_both_constructions():
    import inspect

    from dpjax import reproduce

    figs = reproduce.figures()
    for name in ("diff2-regression", "diff2-classification"):
        assert figs[name].constructions == ("paper", "authors")
        assert inspect.signature(figs[name].fn).parameters["construction"].default == "paper"
