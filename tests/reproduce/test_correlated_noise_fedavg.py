"""``dpjax reproduce correlated-noise-fedavg``: the three DP-FedAvg participations share rounds, cohort and local
training; their epsilons are the accountant's for exactly the participation they sample (against dp_accounting
events built here); the RMSE against closed forms; the verdict rule; (slow) the --quick run."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pandas as pd
import pytest

from dpjax.reproduce.correlated_noise import fedavg as F

pytestmark = pytest.mark.privacy

# 40 clients of 4 records, cohort 4 (q = 0.1), 12 rounds; BandMF: 2 groups (q = 0.2); min-separation: 10 groups
TINY = dict(F.FED_QUICK, clients=40, records=4, cohort=4, rounds=12, bands=2, min_sep_bands=3, local_steps=1,
            local_batch=2, band_coeffs=(0.8, 0.6), min_sep_coeffs=(1.0, 0.5, 0.25))  # given: no optimisation


def _families(cfg=TINY):
    from dpjax.problems import FlaxProblem
    from dpjax.problems.mlp import MLP

    return F.families(cfg, FlaxProblem(MLP((4,), 10), (784,), "softmax"))


def _rdp(event, delta=F.cfgmod.DELTA):
    acc = dpa.rdp.RdpAccountant(neighboring_relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE)
    return acc.compose(event).get_epsilon(delta)


def test_equal_compute_every_method_runs_the_same_rounds_cohort_and_local_training():
    from dpjax.reproduce.correlated_noise import fedavg_outputs

    fams = _families()
    assert tuple(fams) == F.METHODS == fedavg_outputs.METHODS
    assert {f.num_rounds for f in fams.values()} == {TINY["rounds"]}
    assert {f.silos_per_round for f in fams.values()} == {TINY["cohort"]}  # the public divisor m
    assert {(f.local_steps, f.local_batch_size) for f in fams.values()} == {(1, 2)}
    n, m = TINY["clients"], TINY["cohort"]
    poisson, band, minsep = fams.values()
    assert poisson.sampling == "poisson" and poisson.sampling_rate * n == pytest.approx(m)
    # cyclic Poisson: b groups of N / b sampled at q: expected cohort q N / b = m
    assert band.num_groups == TINY["bands"] and band.sampling_rate * n / TINY["bands"] == pytest.approx(m)
    # min-separation: N / m whole groups of m
    assert minsep.sampling == "min-separation" and minsep.num_groups == n // m
    assert len(F.strategy("band-mf", band)) == 2 and len(F.strategy("band-mf-min-sep", minsep)) == 3
    with pytest.raises(ValueError, match="multiple of cohort"):
        _families(dict(TINY, clients=42))
    with pytest.raises(ValueError, match="min_sep_bands=11"):
        _families(dict(TINY, min_sep_bands=11))


def test_epsilons_are_the_accountant_s_for_exactly_the_sampled_participation():
    """At one z each family's certified epsilon is dp_accounting's RDP of its own participation: R Poisson-sampled
    Gaussians at m / N; ceil(R / b) at m b / N (amplified BandMF, NeurIPS 2023 Thm 4, a cohort buffer's overflow
    tail charged to delta: (1 + e^eps(delta / 2)) x R x P(Binomial(N / b, q) > capacity), scipy's exact tail); one Gaussian of z / sqrt(ceil(R / p)) (min-separation, no amplification)."""
    from scipy import stats

    fams, z = _families(), 1.25  # z exact in float32 (the hparams are float32)
    n, m, r = TINY["clients"], TINY["cohort"], TINY["rounds"]
    sizes = [TINY["records"]] * n

    def eps(method):
        return fams[method].privacy(sizes, F.hparams(method, TINY, z)).epsilon(F.cfgmod.DELTA, "rdp").epsilon

    pois = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(m / n, dpa.GaussianDpEvent(z)), r)
    assert eps("poisson") == pytest.approx(_rdp(pois), rel=1e-9)
    b = TINY["bands"]
    band = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(m * b / n, dpa.GaussianDpEvent(z)), -(-r // b))
    cap = fams["band-mf"].selection_part.sampler.padded_size(n)
    p_over = r * stats.binom.sf(cap, n // b, m * b / n)
    reduced = F.cfgmod.DELTA - (1 + math.exp(_rdp(band, F.cfgmod.DELTA / 2))) * p_over
    assert eps("band-mf") == pytest.approx(_rdp(band, reduced), rel=1e-9)
    # here the default buffer holds a whole group (nothing charged); tests/algorithms/test_dp_fedavg_band_mf.py
    # pins the charged case
    assert cap >= n // b and p_over == 0.0
    k = -(-r // (n // m))
    assert eps("band-mf-min-sep") == pytest.approx(_rdp(dpa.GaussianDpEvent(z / math.sqrt(k))), rel=1e-9)
    # the count multiplier of dp-fedavg's (switched-off) adaptive clipping is not accounted
    other = fams["poisson"].privacy(sizes, dataclasses.replace(F.hparams("poisson", TINY, z),
                                                                      noise_multiplier_count=0.3))
    assert other.epsilon(F.cfgmod.DELTA, "rdp").epsilon == pytest.approx(eps("poisson"), rel=1e-12)


def test_min_separation_is_calibrated_to_the_target_from_below():
    fams = _families()
    z, certified = F.calibrate("band-mf-min-sep", fams["band-mf-min-sep"], TINY, 2.0)
    assert certified <= 2.0 and abs(certified / 2.0 - 1) < 1e-6
    sizes = [TINY["records"]] * TINY["clients"]
    less = fams["band-mf-min-sep"].privacy(sizes, F.hparams("band-mf-min-sep", TINY, z * 0.999))
    assert less.epsilon(F.cfgmod.DELTA, "rdp").epsilon > 2.0  # 0.1 % less noise misses the target


def test_noise_rmse_against_closed_forms():
    # independent noise: prefix t has variance t: RMSE sqrt((R + 1) / 2), last prefix sqrt(R)
    ind = F.noise_rmse((1.0,), 8, 2.0)
    assert ind["rmse_per_z"] == pytest.approx(math.sqrt(4.5), rel=1e-6)
    assert ind["max_per_z"] == pytest.approx(math.sqrt(8), rel=1e-6) and ind["rmse"] == pytest.approx(
        2 * ind["rmse_per_z"])
    a, b = 0.8, 0.6  # a 2-band strategy: the explicit prefix-sum workload times C^{-1}
    c = np.eye(8) * a + np.eye(8, k=-1) * b
    explicit = np.linalg.norm(np.tril(np.ones((8, 8))) @ np.linalg.inv(c)) / math.sqrt(8)
    assert F.noise_rmse((a, b), 8, 1.0)["rmse_per_z"] == pytest.approx(explicit, rel=1e-5)


def _best(cells):
    return {k: {"mean": float(np.mean(v)), "lo": min(v), "hi": max(v)} for k, v in cells.items()}


def test_verdict_needs_four_epsilons_over_a_decade_all_agreeing():
    from dpjax.reproduce.correlated_noise.fedavg_outputs import compare

    eps = (1.0, 2.0, 4.0, 10.0)
    better = _best({**{("a", e): [0.80, 0.82] for e in eps}, **{("p", e): [0.70, 0.79] for e in eps}})
    c = compare(better, "a", "p", eps)
    assert c["overall"] == "better" and c["per"][1.0]["lo"] == pytest.approx(0.80 - 0.79)
    assert compare(better, "p", "a", eps)["overall"] == "worse"
    assert compare(better, "a", "p", eps[:3])["overall"] == "inconclusive"  # 3 points
    assert compare(better, "a", "p", (1.0, 2.0, 4.0, 8.0))["overall"] == "inconclusive"  # 0.9 decades
    # one epsilon where the seed ranges overlap makes it mixed, all overlapping inconclusive
    mixed = {**better, **_best({("a", 10.0): [0.75, 0.80]})}
    assert compare(mixed, "a", "p", eps)["overall"] == "mixed"
    tie = _best({**{("a", e): [0.70, 0.80] for e in eps}, **{("p", e): [0.72, 0.78] for e in eps}})
    assert compare(tie, "a", "p", eps)["overall"] == "inconclusive"


def test_registered_listed_and_refuses_a_used_out_dir(tmp_path):
    from dpjax import reproduce

    assert reproduce.get("correlated-noise-fedavg").fn is F.correlated_noise_fedavg
    assert "correlated-noise-fedavg" in reproduce.LISTING and reproduce.get("correlated-noise-fedavg").reads_data
    (tmp_path / "results.csv").write_text("x\n")
    with pytest.raises(ValueError, match="never overwritten"):
        F.correlated_noise_fedavg(tmp_path, quick=True, seed=0)


def test_missing_mnist_is_one_clear_error_and_leaves_no_output(tmp_path):
    with pytest.raises(ValueError, match="(?i)mnist"):
        F.correlated_noise_fedavg(tmp_path / "out", quick=True, seed=0, data_dir=tmp_path / "no-such-dir")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # three calibrations and 3 x 2 trainings: ~1-5 minutes on the shared 2-core CPU
def test_quick_run_writes_report_figure_and_equal_epsilons(tmp_path, mnist_dir):
    report = F.correlated_noise_fedavg(tmp_path / "run", quick=True, seed=0, data_dir=mnist_dir)
    rows = pd.read_csv(tmp_path / "run" / "results.csv")
    acc = rows[rows.metric == "test_accuracy"]
    assert set(acc.algorithm) == set(F.METHODS) and len(acc) == 3 * F.FED_QUICK["seeds"] * len(
        F.FED_QUICK["epsilons"])
    assert acc.value.between(0.15, 1.0).all()  # beyond chance (0.1) after 12 rounds
    cert = rows[rows.metric == "certified_epsilon"]
    assert (np.abs(cert.value / cert.epsilon - 1) < 1e-6).all() and (cert.value <= cert.epsilon).all()
    text = report.read_text()
    assert text.startswith("# DP-FedAvg cross-device") and "Quick mode" in text and "Verdict" in text
    assert (tmp_path / "run" / "correlated_noise_fedavg.png").stat().st_size > 0
    before = text
    (tmp_path / "run" / "report.md").unlink()
    assert F._report_only(tmp_path / "run", quick=True).read_text() == before
