"""`dpjax reproduce dpsgd-mnist --construction authors` and the grid-edge rule of the (eta, C) grid."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.auditing.execute import CanaryProbe, run_family
from dpjax.engine.silos import SiloData
from dpjax.reproduce import dpsgd_mnist as d
from dpjax.reproduce import dpsgd_mnist_config as cfg


def _row(lr, c, acc, variant="BC-SH", epochs=3):
    return {"variant": variant, "epochs": epochs, "learning_rate": lr, "clip_norm": c, "test_accuracy": acc}


def test_edge_rule_extends_the_selected_end_by_one_geometric_step():
    done = {}
    rows = [_row(0.3, 1.0, 0.7), _row(1.0, 1.0, 0.6)]  # best eta at the low end; one C: both C ends
    req = cfg.edge_requests(rows, True, done, max_extensions=1)
    assert req == [(0.09, 1.0), (0.3, 0.1), (0.3, 10.0)]
    rows += [_row(0.09, 1.0, 0.75), _row(0.3, 0.1, 0.2), _row(0.3, 10.0, 0.5)]
    assert cfg.edge_requests(rows, True, done, max_extensions=1) == []  # still at the low eta end, but the budget is spent
    assert cfg.edge_requests(rows, True, {}, max_extensions=2)[0] == pytest.approx((0.027, 1.0))
    inner = [_row(lr, c, 0.9 if (lr, c) == (0.1, 1.0) else 0.5) for lr in (0.01, 0.1, 1.0) for c in (0.1, 1.0, 5.0)]
    assert cfg.edge_requests(inner, True, {}, max_extensions=3) == []  # an interior selection is final
    assert cfg.edge_requests([_row(0.3, 1.0, math.nan)], True, {}, 2) == []  # every run diverged
    assert cfg.edge_requests([_row(0.3, 1.0, 0.9), _row(1.0, 1.0, 0.5)], False, {}, 1) == [(0.09, 1.0)]  # twin: no C


def test_authors_construction_is_cited_and_calibrated_to_the_authors_noise():
    variants = cfg.authors_variants(10240)
    assert set(variants) == {"BC-SH", "IC-SS"}
    bc, ic = variants["BC-SH"], variants["IC-SS"]
    assert "train_model_BC_FGC.py" in bc["authors_code"] and "train_model_IC_FGC.py" in ic["authors_code"]
    # dpjax's noise is noise_multiplier x 2C on the sum; the authors' BC: sigma C / s on the clipped mean
    # (m = 1), their IC: sigma C on the sum of m = 256 clipped gradients
    assert 2 * cfg.SIGMA * cfg.family_kwargs(bc)[1] == pytest.approx(cfg.SIGMA / bc["subset_size"])
    assert 2 * cfg.SIGMA * cfg.family_kwargs(ic)[1] == pytest.approx(cfg.SIGMA)
    assert (bc["num_subsets"], bc["subset_size"], ic["num_subsets"], ic["subset_size"]) == (1, 256, 256, 1)
    assert "authors' code" in cfg.describe(bc) and set(cfg.construction_variants("paper", 10240)) == set(cfg.variants())
    with pytest.raises(ValueError, match="construction='nope'"):
        cfg.construction_variants("nope", 10240)


def test_authors_step_lr_decays_by_0_9_per_epoch():
    decay = cfg.authors_variants(2560)["BC-SH"]["server_optimizer"]  # 10 rounds of 256 per epoch
    state = decay.init(jnp.zeros(1))
    scales = []
    for _ in range(25):
        u, state = decay.update(jnp.ones(1), state)
        scales.append(float(u[0]))
    np.testing.assert_allclose(scales, [0.9 ** (t // 10) for t in range(25)], rtol=1e-6)


def test_authors_bc_releases_the_clipped_mean_plus_sigma_c_over_s_noise():
    """One round of the authors' BC-SH on records with zero gradient: the iterate moves by -eta x noise,
    whose per-coordinate std must be sigma C / s (chi-square interval on 4,000 coordinates)."""
    dim, n = 4000, 256
    kw, factor = cfg.family_kwargs(cfg.authors_variants(n)["BC-SH"])
    fam = DpSgdGeneral.for_epochs(CanaryProbe(dim), n, 1, **kw)
    data = SiloData.from_silos([np.zeros((n, dim), np.float32)], [np.zeros(n, np.float32)])
    clip = 0.5
    res = run_family(fam, data, DpSgdHParams.create(1.0, cfg.SIGMA * factor, clip), jax.random.key(0)[None],
                     params=jnp.zeros(dim))
    step = np.asarray(res.eval_metrics["params"])[0, 0]
    expected = cfg.SIGMA * clip / n
    rel = 4 / math.sqrt(2 * dim)  # 4 standard errors of a sample standard deviation
    assert abs(np.std(step) / expected - 1) < rel


def test_authors_certified_epsilon_is_what_its_noise_gives():
    from dpjax.problems import FlaxProblem

    problem = FlaxProblem(cfg.cnn(), (28, 28, 1), "softmax")
    eps = {}
    for name, kw in cfg.authors_variants(10240).items():
        fam_kw, factor = cfg.family_kwargs(kw)
        alg = DpSgdGeneral.for_epochs(problem, 10240, 3, **fam_kw)
        rows = d.privacy_rows(alg, 10240, DpSgdHParams.create(0.3, cfg.SIGMA * factor, 1.0))
        eps[name] = {r["accountant"]: r["epsilon"] for r in rows if r["group_size"] == 1}
    # BC: noise multiplier sigma / 512 over E = 3: G_mu with mu = sqrt(3) x 256 -> eps ~ mu^2 / 2
    assert eps["BC-SH"]["sqrt-gE"] > (math.sqrt(3) * 256) ** 2 / 2
    # IC: noise multiplier sigma / 2 = 1: sqrt(E)/1 = 1.73 -> eps(1e-5) ~ 8.4 against the paper's sigma = 2 (3.7)
    assert 8 < eps["IC-SS"]["sqrt-gE"] < 9
