"""Report wording (issue #39, newcomer 9): bars say what they are, a curve comparison is a verdict on intervals (or
"inconclusive"), and a paper σ that certifies far more than its nominal ε gets a sentence."""

import math

import pandas as pd

from dpjax.reproduce import isrl
from dpjax.reproduce.isrl_protocol import LOCAL, LOCAL_NP, MB, MB_NP


def test_dpsgd_bars_note_never_says_over_1_seeds():
    from dpjax.reproduce.dpsgd_mnist_report import bars_note

    assert bars_note([1, 1]) == "no bars: 1 seed"
    assert bars_note([3, 3]) == "bars: sample SD over 3 seeds"
    assert bars_note([1, 3]) == "bars: sample SD over 3 seeds; none where 1 seed"


def _summary(values: dict) -> pd.DataFrame:
    """``(alg, cal, eps) -> (mean, p_lo, p_hi, n_trials)``."""
    return pd.DataFrame([{"num_silos": 25, "silos_per_round": 12, "algorithm": a, "calibration": c, "epsilon": e,
                          "mean": m, "p_lo": lo, "p_hi": hi, "half_width": (hi - lo) / 2, "n_trials": n}
                         for (a, c, e), (m, lo, hi, n) in values.items()])


EXP = isrl.config.Experiment("m", "test_error", (isrl.config.Setting(25, 12),), (1.0, 3.0), 12.0, 5, 1, 1, (0.1,),
                             (0.1,), calibrations=("paper",))
NP = {(LOCAL_NP, "none", math.inf): (0.15, 0.15, 0.15, 2), (MB_NP, "none", math.inf): (0.13, 0.13, 0.13, 2)}


def test_close_means_from_two_trials_are_inconclusive_not_yes():
    close = NP | {(MB, "paper", 1.0): (0.147, 0.140, 0.154, 2), (LOCAL, "paper", 1.0): (0.148, 0.141, 0.155, 2),
                  (MB, "paper", 3.0): (0.120, 0.118, 0.122, 2), (LOCAL, "paper", 3.0): (0.160, 0.158, 0.162, 2)}
    (claim,) = isrl.claims.claims_mnist(_summary(close), EXP)
    assert claim["holds"]  # the means alone say yes
    assert claim["verdict"] == "inconclusive" and "ε = 1" in claim["verdict_reason"]
    table = isrl.outputs.claims_table([claim])
    assert "| inconclusive (" in table and "| yes |" not in table
    one_trial = {k: (m, m, m, 1) for k, (m, *_rest) in close.items()}
    assert isrl.claims.claims_mnist(_summary(one_trial), EXP)[0]["verdict"] == "inconclusive"
    apart = close | {(LOCAL, "paper", 1.0): (0.200, 0.190, 0.210, 2)}
    assert isrl.claims.claims_mnist(_summary(apart), EXP)[0]["verdict"] == "holds"
    above = close | {(MB, "paper", 1.0): (0.300, 0.290, 0.310, 2)}
    assert isrl.claims.claims_mnist(_summary(above), EXP)[0]["verdict"] == "differs"


def test_beating_the_non_private_line_by_0_001_from_two_trials_is_inconclusive():
    """The issue's case: MB-SGD 0.147 vs non-private Local SGD 0.148 (2 trials x 1 repetition) was 'holds: yes'."""
    exp = isrl.config.Experiment("m", "test_error", (isrl.config.Setting(25, 12),), (18.0,), 18.0, 5, 1, 1, (0.1,),
                                 (0.1,), calibrations=("paper",))
    vals = {(LOCAL_NP, "none", math.inf): (0.148, 0.146, 0.150, 2), (MB_NP, "none", math.inf): (0.13, 0.13, 0.13, 2),
            (MB, "paper", 18.0): (0.147, 0.145, 0.149, 2), (LOCAL, "paper", 18.0): (0.151, 0.150, 0.152, 2)}
    claims = isrl.claims.claims_mnist(_summary(vals), exp)
    (np_claim,) = [c for c in claims if "non-private" in c["claim"]]
    assert np_claim["holds"] and np_claim["verdict"] == "inconclusive"
    far = vals | {(LOCAL_NP, "none", math.inf): (0.20, 0.19, 0.21, 2)}
    (np_claim,) = [c for c in isrl.claims.claims_mnist(_summary(far), exp) if "non-private" in c["claim"]]
    assert np_claim["verdict"] == "holds"


def test_paper_sigma_far_above_nominal_gets_a_sentence():
    noise = pd.DataFrame([
        {"setting": "N=25, M=12", "algorithm": LOCAL, "epsilon": 3.0, "calibration": "paper", "sigma_over_L": 0.1,
         "realized_epsilon_rdp": 2.7e5},
        {"setting": "N=25, M=12", "algorithm": MB, "epsilon": 3.0, "calibration": "paper", "sigma_over_L": 1.0,
         "realized_epsilon_rdp": 2.9},
        {"setting": "N=25, M=12", "algorithm": LOCAL, "epsilon": 3.0, "calibration": "tight", "sigma_over_L": 2.0,
         "realized_epsilon_rdp": 3.0}])
    note = isrl.outputs.noise_note(noise)
    assert "ε = 2.7e+05 at nominal 3" in note and isrl.outputs.LABELS[LOCAL] in note
    assert isrl.outputs.LABELS[MB] + " (" not in note  # MB-SGD's σ is at its nominal ε: no sentence
    assert note in isrl.outputs.noise_table_md(noise)


def test_dpsgd_inf_series_is_named_not_listed_undrawn(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from dpjax.reproduce import dpsgd_mnist_report as rep

    monkeypatch.setattr(plt, "close", lambda *a, **k: None)
    plt.close("all")
    best = {"BC-SH": {"mean": 0.95, "std": 0.01, "seeds": 2}, "SGD": {"mean": 0.98, "std": 0.0, "seeds": 1}}
    privacy = {"BC-SH": [{"group_size": g, "epsilon": 2.0 * g, "accountant": "strong-exact"} for g in (1, 2)],
               "SGD": [{"group_size": g, "epsilon": math.inf, "accountant": "strong-exact"} for g in (1, 2)]}
    rep.plot(tmp_path / "f.png", best, privacy)
    fig = plt.figure(plt.get_fignums()[-1])
    ax2 = fig.axes[1]
    labels = [t.get_text() for t in ax2.get_legend().get_texts()]
    assert labels == ["BC-SH strong-exact"] and "ε = inf, not drawn: SGD strong-exact" in ax2.get_title()
    assert "bars: sample SD over 2 seeds; none where 1 seed" in fig.axes[0].get_title()
    monkeypatch.undo()
    plt.close("all")
