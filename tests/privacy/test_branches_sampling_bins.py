"""Branches of ``dpjax.accounting.sampling_bins`` (balls-in-bins, cyclic Poisson, b-min-separation accounting) reached
by tests that can fail (issue 42, item 1). Expected values by hand: a b-min-separated run is ceil(T / b) Gaussians of
multiplier z, i.e. mu = sqrt(ceil(T / b)) / z (Dong, Roth & Su 2022, Cor. 3.3), whose exact epsilon is Balle & Wang's
(2018, Thm 8) root (mpmath here); cyclic Poisson's default rate under replace-one is q = K b / n.
"""

from __future__ import annotations

import json
import math
import types

import mpmath
import pytest

from dpjax.accounting import cli
from dpjax.accounting import sampling_bins as sb
from dpjax.accounting.schedules import Neighboring

pytestmark = pytest.mark.privacy


@pytest.fixture(autouse=True)
def _high_precision():
    with mpmath.workdps(50):  # the closed form cancels; restored after each test
        yield


def _exact_eps(mu, delta):
    lo, hi = mpmath.mpf(0), mpmath.mpf(mu * mu + 40 * mu)
    for _ in range(150):
        e = (lo + hi) / 2
        d = mpmath.ncdf(mu / 2 - e / mu) - mpmath.exp(e) * mpmath.ncdf(-mu / 2 - e / mu)
        lo, hi = (e, hi) if d > delta else (lo, e)
    return float(hi)


def test_binned_selection_event_refusals_and_min_separation_never_overflows():
    with pytest.raises(ValueError, match=r"silo_sizes=\(\) must name at least one silo"):
        sb.BinnedSelectionEvent("min-separation", (), 5, ())
    with pytest.raises(ValueError, match="periods has 1 entries for 2 silos"):
        sb.BinnedSelectionEvent("min-separation", (10, 20), 5, (2,))
    with pytest.raises(ValueError, match="rates has 1 entries for 2 silos"):
        sb.BinnedSelectionEvent("cyclic-poisson", (10, 20), 5, (2, 2), rates=(0.1,))
    # b-min-separation's batches are exactly K: a buffer of any capacity never overflows
    assert sb.BinnedSelectionEvent("min-separation", (10, 20), 5, (2, 4), capacity=3).tails() == (0.0, 0.0)


def _plan(sel, *noises, neighboring=Neighboring.ADD_REMOVE, rounds=10):
    return types.SimpleNamespace(selection=sel, noises=noises, num_rounds=rounds, label="fam", group_size=1,
                                 clip=types.SimpleNamespace(neighboring=neighboring))


def test_binned_spec_skips_silent_events_and_refuses_none_of_zero_noise():
    sel = sb.BinnedSelectionEvent("min-separation", (100,), 10, (5,))
    noise = types.SimpleNamespace(noise_multiplier=2.0, steps=None, field="z")
    silent = types.SimpleNamespace(noise_multiplier=3.0, steps=0, field="w")  # makes no release: skipped
    spec = sel.spec(_plan(sel, noise, silent))
    # 10 rounds, b = 5: ceil(10 / 5) = 2 participations of multiplier 2 -> mu = sqrt(2) / 2; no overflow charge
    assert spec.overflow_probability == 0.0
    rep = spec.epsilon(1e-5, "gdp")
    assert rep.epsilon == pytest.approx(_exact_eps(math.sqrt(2) / 2, 1e-5), rel=1e-8)
    assert rep.sampling == "min-separation"
    zero = types.SimpleNamespace(noise_multiplier=0.0, steps=None, field="z")
    assert sel.spec(_plan(sel, zero)).epsilon(1e-5).epsilon == math.inf


def _cli(capsys, argv):
    rc = cli.main(argv + ["--dataset-size", "60000", "--steps", "250", "--delta", "1e-5", "--json"])
    captured = capsys.readouterr()
    return rc, (json.loads(captured.out) if rc == 0 else captured.err)


def test_cli_cyclic_poisson_defaults(capsys):
    # no --num-bins: one group (b = 1); no --sampling-rate under replace-one: q = K b / n = 600 / 60000
    rc, out = _cli(capsys, ["--sampling", "cyclic-poisson", "--noise-multiplier", "3", "--batch-size", "600",
                            "--neighboring", "replace-one", "--accountant", "rdp"])
    assert rc == 0 and out["num_bins"] == 1 and out["participations"] == 250
    assert out["sampling_rate"] == pytest.approx(0.01, rel=1e-15)


def test_cli_min_separation_needs_bins_or_a_batch(capsys):
    rc, err = _cli(capsys, ["--sampling", "min-separation", "--noise-multiplier", "3"])
    assert rc == 2 and err.startswith("dpjax: error: num_bins=None: give --num-bins (or --batch-size")


def test_calibration_with_a_buffer_charges_the_overflow_at_the_target():
    # 10 steps, b = 5 (k = 2 Gaussians, add/remove), overflow p = 1e-7: the ideal run is calibrated at
    # delta' = delta - (1 + e^target) p, so z = sqrt(2) / mu*, mu* the largest mu with delta_mu(1) <= delta'
    p, delta, target = 1e-7, 1e-5, 1.0
    reduced = delta - (1 + math.e) * p
    lo, hi = mpmath.mpf("1e-6"), mpmath.mpf(50)
    for _ in range(150):
        m = (lo + hi) / 2
        d = mpmath.ncdf(m / 2 - target / m) - mpmath.exp(target) * mpmath.ncdf(-m / 2 - target / m)
        lo, hi = (m, hi) if d <= reduced else (lo, m)
    want = math.sqrt(2) / float(lo)
    spec = sb.binned_privacy("min-separation", 1.0, 10, 5, overflow=p)
    got = spec.calibrate(target, delta, "gdp")["noise_multiplier"]
    assert want * (1 - 1e-9) <= got <= want * (1 + 2e-6)


def test_dp_event_only_when_nothing_can_overflow():
    import dp_accounting as dpa

    # no buffer: the ideal run's event, ceil(10 / 5) = 2 Gaussians of multiplier 1 (add/remove, sensitivity 1)
    assert sb.binned_privacy("min-separation", 1.0, 10, 5).dp_event() == dpa.SelfComposedDpEvent(
        dpa.GaussianDpEvent(1.0), 2)
    # an overflow charge is no DpEvent: refused as unsupported, never the ideal run's event
    assert isinstance(sb.binned_privacy("min-separation", 1.0, 10, 5, overflow=1e-7).dp_event(),
                      dpa.UnsupportedDpEvent)
