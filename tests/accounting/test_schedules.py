"""Schedule validation, derived quantities and the dp_accounting mapping."""

import json
import math
import subprocess
import sys

import dp_accounting as dpa
import pytest

from dpjax.accounting import GaussianSchedule, Neighboring, PrivacyReport, PrivacyUnit, Sampling


def sched(**kw):
    base = dict(noise_std=1.0, contribution_bound=0.5, sampling="poisson", dataset_size=1000, batch_size=50, steps=10)
    base.update(kw)
    return GaussianSchedule(**base)


def test_accounting_never_imports_jax():
    code = (
        "import importlib, pkgutil, sys, dpjax.accounting as A\n"
        "mods = [m.name for m in pkgutil.iter_modules(A.__path__, 'dpjax.accounting.')]\n"
        "[importlib.import_module(m) for m in mods]\n"
        "bad = sorted(m for m in sys.modules if m == 'jax' or m.startswith('jax.') or m.startswith('jaxlib'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_coercion_and_derived():
    s = sched(sampling="without-replacement", neighboring="replace-one", unit="record")
    assert s.sampling is Sampling.WITHOUT_REPLACEMENT and s.unit is PrivacyUnit.RECORD
    assert s.inclusion_probability == pytest.approx(0.05)
    assert s.sensitivity == pytest.approx(1.0)  # 2 * 0.5
    assert s.noise_multiplier == pytest.approx(1.0)
    a = s.replace(neighboring=Neighboring.REPLACE_ONE, sampling="poisson").replace(neighboring="add-remove")
    assert a.sensitivity == pytest.approx(0.5) and a.noise_multiplier == pytest.approx(2.0)
    full = sched(sampling="full", batch_size=None, steps=3)
    assert full.inclusion_probability == 1.0 and full.passes == 3
    one = sched(sampling="one-pass", batch_size=100, steps=25)
    assert one.passes == 3  # 2500 record-uses over 1000 records


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(noise_std=-1.0), "noise_std"),
        (dict(noise_std=float("nan")), "noise_std"),
        (dict(contribution_bound=0.0), "contribution_bound"),
        (dict(sampling="bogus"), "sampling"),
        (dict(dataset_size=0), "dataset_size"),
        (dict(dataset_size=10.5), "dataset_size"),
        (dict(batch_size=2000), "batch_size"),
        (dict(batch_size=None), "batch_size"),
        (dict(sampling="full", batch_size=7), "batch_size"),
        (dict(steps=0), "steps"),
        (dict(neighboring="swap"), "neighboring"),
        (dict(unit="planet"), "unit"),
        (dict(group_size=0), "group_size"),
        (dict(group_size=5000), "group_size"),
        (dict(sampling="shuffle", neighboring="add-remove"), "neighboring"),
    ],
)
def test_invalid_inputs_name_argument(kw, name):
    with pytest.raises(ValueError, match=name):
        sched(**kw)


def test_frozen():
    s = sched()
    with pytest.raises(Exception):
        s.steps = 3  # type: ignore[misc]


def _eps(event, neighboring, delta=1e-5, kind="rdp"):
    acc = dpa.rdp.RdpAccountant(neighboring_relation=neighboring) if kind == "rdp" else dpa.pld.PLDAccountant(neighboring)
    acc.compose(event)
    return acc.get_epsilon(delta)


def test_to_dp_event_semantics_full_gaussian_matches_analytic():
    # Full batch, replace-one: N(0) vs N(2s); exact eps from dp_accounting's analytic Gaussian.
    s = sched(sampling="full", batch_size=None, steps=1, noise_std=1.3, contribution_bound=0.4)
    ev = s.to_dp_event()
    exact = dpa.get_epsilon_gaussian(1.3 / 0.8, 1e-5)
    assert _eps(ev, s.dp_neighboring_relation, kind="pld") == pytest.approx(exact, rel=2e-3)


def test_to_dp_event_poisson_and_wor_structure():
    p = sched(neighboring="add-remove").to_dp_event()
    assert isinstance(p, dpa.SelfComposedDpEvent) and p.count == 10
    assert p.event.sampling_probability == pytest.approx(0.05)
    assert p.event.event.noise_multiplier == pytest.approx(2.0)
    w = sched(sampling="without-replacement").to_dp_event()
    assert isinstance(w.event, dpa.SampledWithoutReplacementDpEvent)
    assert w.event.event.noise_multiplier == pytest.approx(1.0)  # std / (2 s)
    assert isinstance(sched(noise_std=0.0).to_dp_event(), dpa.NonPrivateDpEvent)
    with pytest.raises(ValueError, match="group_size"):
        sched(group_size=2).to_dp_event()


def test_report_str_and_json():
    r = PrivacyReport(epsilon=1.234, delta=6.5e-7, accountant="pld", sampling=Sampling.POISSON,
                      neighboring="replace-one", unit="record-in-silo", noise_std=0.1)
    assert str(r) == "ε = 1.234 (δ = 6.5e-07; accountant=pld, sampling=poisson, neighbouring=replace-one, unit=record-in-silo)"
    d = json.loads(json.dumps(r.as_dict()))
    assert d["epsilon"] == 1.234 and d["accountant"] == "pld" and d["sampling"] == "poisson"
    inf = PrivacyReport(epsilon=math.inf, delta=1e-5, accountant="rdp", sampling="full", neighboring="replace-one", unit="record", noise_std=0.0)
    assert json.loads(json.dumps(inf.as_dict()))["epsilon"] == "inf"
    with pytest.raises(ValueError, match="epsilon"):
        PrivacyReport(epsilon=-1.0, delta=1e-5, accountant="rdp", sampling="full", neighboring="replace-one", unit="record", noise_std=1.0)


def test_sdp_report_carries_central_and_local():
    from dpjax.accounting import SdpReport

    central = PrivacyReport(0.5, 1e-6, "shuffle-tight", "without-replacement", "replace-one", "record", 2.0)
    local = PrivacyReport(3.0, 1e-6, "rdp", "without-replacement", "replace-one", "record-in-silo", 2.0)
    r = SdpReport(central, local, {"eps0": 1.2, "chain_epsilon": math.inf})
    assert (r.epsilon, r.delta) == (0.5, 1e-6)
    d = r.as_dict()
    assert d["central"]["unit"] == "record" and d["local"]["unit"] == "record-in-silo"
    assert d["details"] == {"eps0": 1.2, "chain_epsilon": "inf"}
    assert "shuffle DP" in str(r) and "local" in str(r)
    assert SdpReport(central).as_dict()["local"] is None
    with pytest.raises(ValueError, match="central"):
        SdpReport(0.5)
    with pytest.raises(ValueError, match="local"):
        SdpReport(central, 3.0)
