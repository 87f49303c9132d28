"""A shuffled run's three numbers (dpjax.accounting.shuffle_gap) and `dpjax account --sampling shuffle`."""

import json
import math

import pytest
from scipy import optimize, stats

from dpjax.accounting import cli
from dpjax.accounting.shuffle_gap import LABELS, shuffle_gap

pytestmark = pytest.mark.privacy


def _gauss_eps(mu, delta):
    # the Gaussian mechanism's exact epsilon (Balle & Wang 2018, Thm 8), solved here
    f = lambda e: stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta  # noqa
    return optimize.brentq(f, 0.0, 500.0, xtol=1e-12)


def test_three_numbers_pinned_independently():
    import dp_accounting as dpa

    sigma, b, n, e, d = 1.0, 200, 10_000, 3, 1e-5
    g = shuffle_gap(sigma, b, n, e, d)
    # certified: no amplification, E releases at replace-one sensitivity 2C and noise 2C sigma: G_{sqrt(E)/sigma}
    assert g.certified.epsilon == pytest.approx(_gauss_eps(math.sqrt(e) / sigma, d), rel=1e-6)
    # the Poisson number of an Opacus-style report: q = b/n, T E steps, multiplier std/clip = 2 sigma, add/remove
    acc = dpa.pld.PLDAccountant()
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(b / n, dpa.GaussianDpEvent(2 * sigma)), (n // b) * e))
    # the 1e-3 pessimistic grid is within a few grid steps of the 1e-4 default
    assert acc.get_epsilon(d) <= g.poisson.epsilon <= acc.get_epsilon(d) + 5e-3
    assert g.poisson.epsilon < g.lower_bound.epsilon <= g.certified.epsilon
    assert [x.key for x in g.entries()] == ["certified", "poisson", "lower_bound"]


def test_labels_say_what_each_number_is():
    g = shuffle_gap(0.8, 100, 5_000, 2, 1e-5)
    text = "\n".join(g.lines())
    for label in LABELS.values():
        assert label in text
    assert "not a certificate for this run" in g.poisson.label and "lower bound" in g.lower_bound.label


def test_account_cli_prints_all_three(capsys):
    args = ["--sampling", "shuffle", "--noise-multiplier", "1.0", "--batch-size", "100", "--dataset-size", "5000",
            "--steps", "100", "--delta", "1e-5"]
    assert cli.main(args) == 0
    text = capsys.readouterr().out
    missing = [label for label in LABELS.values() if label not in text]
    assert not missing, f"`dpjax account --sampling shuffle` lacks {missing}"
    assert cli.main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["shuffle_gap"]) == set(LABELS)
    assert out["shuffle_gap"]["certified"]["epsilon"] == pytest.approx(out["epsilon"])


def test_partial_epoch_claims_no_lower_bound():
    g = shuffle_gap(1.0, 100, 5_000, 1, 1e-5, steps=10)
    assert g.lower_bound.epsilon == 0.0 and "no complete epoch" in g.lower_bound.method


def test_validation():
    with pytest.raises(ValueError, match="batch_size"):
        shuffle_gap(1.0, 10_001, 10_000, 1, 1e-5)
    with pytest.raises(ValueError, match="steps"):
        shuffle_gap(1.0, 100, 10_000, 1, 1e-5, steps=101)
