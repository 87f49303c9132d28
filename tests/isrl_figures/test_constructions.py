"""Issue #16: the paper's and the authors' constructions of the ISRL-DP experiments."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpjax.algorithms.isrl_constructions import minibatch_sampling, server_noise_equivalent
from dpjax.reproduce import isrl
from dpjax.reproduce import isrl_protocol as proto


def test_batch_size_rules():
    """Fig. 4: n = 1238, R = 35, eps_max = 18: the paper's ceil gives 444, the script's int() 443."""
    from dpjax.accounting import isrl_experiment_calibration
    from dpjax.accounting.isrl import isrl_experiment_batch_size

    paper = isrl.mnist_experiment(quick=False)
    authors = isrl.mnist_experiment(quick=False, construction="authors")
    assert isrl_experiment_batch_size(1238, 35, 18.0) == 444
    assert isrl_experiment_batch_size(1238, 35, 18.0, "authors") == 443 == int(1238 * math.sqrt(18 / 140))
    assert isrl_experiment_calibration(1.0, 1238, 35, 18.0, 1 / 1238**2, 18.0)[1] == 444
    assert isrl_experiment_batch_size(10, 35, 1e6) == 10  # clipped to n (the authors' floor is not)
    with pytest.raises(ValueError, match="construction"):
        isrl_experiment_batch_size(1238, 35, 18.0, "script")
    assert minibatch_sampling(paper.construction) == "without-replacement"
    assert minibatch_sampling(authors.construction) == "with-replacement"
    assert authors.calibrations == ("paper",) and paper.calibrations == proto.CALIBRATIONS


def test_obesity_server_noise_has_the_scripts_law():
    """One server draw xi ~ N(0, sigma^2) added to the mean of M silos' K-sums, step eta, equals in
    law per-silo noise sigma sqrt(M)/K on the K-means averaged over M, step eta K."""
    m, k, sigma, eta = 3, 30, 0.7, 0.01
    table = {("paper", 3.0): proto.NoiseEntry("paper", 3.0, sigma, 2.5, "paper-experiment")}
    entry = server_noise_equivalent(table, m, k)[("paper", 3.0)]
    assert entry.sigma_unit == pytest.approx(sigma * math.sqrt(m) / k, rel=1e-15)
    assert entry.realized_epsilon == math.inf  # the silo messages carry no noise: no ISRL-DP guarantee
    # Monte Carlo: the update's noise part under both descriptions. Each sample variance has relative
    # sd sqrt(2/(n-1)), their ratio sqrt(4/(n-1)) ~ 0.0063 at n = 1e5; 6 sd bounds a false failure at ~1e-9.
    rng = np.random.default_rng(0)
    n = 100_000
    script = eta * rng.normal(0.0, sigma, n)
    dpjax_form = (eta * k) * rng.normal(0.0, entry.sigma_unit, (n, m)).mean(axis=1)
    ratio = dpjax_form.var() / script.var()
    assert abs(ratio - 1) < 6 * math.sqrt(2 * 2 / (n - 1))


def test_constructions_are_named_and_checked():
    from dpjax import reproduce

    figs = reproduce.figures()
    assert figs["isrl-mnist"].constructions == ("paper", "authors")
    assert figs["isrl-obesity"].constructions == ("paper", "authors")
    assert figs["isrl-insurance"].constructions == ("paper", "authors")
    authors = isrl.insurance_experiment(quick=False, construction="authors")
    assert authors.settings == (isrl.Setting(10, 5),) and authors.silo_rules == "insurance-script"
    assert isrl.insurance_experiment(quick=False).silo_rules == "common"
    with pytest.raises(ValueError, match="construction"):
        isrl.mnist_experiment(quick=True, construction="script")


def test_cli_refuses_a_construction_the_figure_lacks(tmp_path):
    from dpjax import reproduce
    from dpjax.reproduce import cli

    paper_only = sorted(name for name, fig in reproduce.figures().items() if fig.constructions == ("paper",))

    class Args:
        list = False
        figure = paper_only[0]
        construction = "authors"
        out = str(tmp_path / "x")
        quick = True
        seed = 0

    with pytest.raises(ValueError, match="offers"):
        cli._run(Args())
    assert not (tmp_path / "x").exists()


def test_insurance_script_noise_uses_each_silos_own_n_and_delta():
    """sigma_i^2 = 8 L^2 R ln(1/delta_i) / (n_i^2 eps^2) with delta_i = 1/n_i^2 (the script's gauss_AC
    called with each silo's n): the factors relative to the reference silo are exact."""
    from dpjax.accounting import isrl_experiment_calibration
    from dpjax.accounting.isrl import isrl_per_silo_sigma_factors

    sizes, n_ref, rounds, eps = [107, 108, 110, 96], 96, 35, 1.0
    factors = isrl_per_silo_sigma_factors(sizes, n_ref)
    sig = lambda n: isrl_experiment_calibration(1.0, n, rounds, eps, 1.0 / n**2, eps)[0]
    for n, f in zip(sizes, factors):
        assert f == pytest.approx(sig(n) / sig(n_ref), rel=1e-12)
    assert isrl_per_silo_sigma_factors([n_ref], n_ref)[0] == pytest.approx(1.0, rel=1e-15)
    with pytest.raises(ValueError, match="silo_sizes"):
        isrl_per_silo_sigma_factors([96, 1], n_ref)


def test_every_figure_takes_the_options_the_cli_passes():
    """`dpjax reproduce` passes data_dir to every figure that reads data and construction to those
    that offer one: each registered function must accept what it is given."""
    import inspect

    from dpjax import reproduce

    for fig in reproduce.figures().values():
        params = inspect.signature(fig.fn).parameters
        assert {"quick", "seed"} <= set(params), fig.name
        if len(fig.constructions) > 1:
            assert "construction" in params, fig.name
    assert reproduce.get("dpsgd-mnist").reads_data and reproduce.get("isrl-mnist").reads_data
    assert not reproduce.get("user-level-tail").reads_data
