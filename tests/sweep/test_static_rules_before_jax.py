"""A sweep config's bad static field is refused before jax loads (issue #39, "bounded: any CLI command refuses or
answers within 10 s"): band-mf's bands / band_coeffs / order / sampling and user-level DP-SGD's rate and records per
user were refused only once jax had loaded and the family was built (10-20 s on the loaded machine, the battery's 11
"hangs"). The rule is ``dpjax.algorithms.static_rules``', the one the family calls when it is constructed:
``dpjax sweep`` reads it (and the class's literal defaults) without importing jax or the family."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import pytest

from dpjax.sweep.config import precheck

REPO = pathlib.Path(__file__).resolve().parents[2]

BANDMF = textwrap.dedent("""
    name = "bmf"
    algorithm = "dp-sgd"
    num_rounds = 8
    [static]
    batch_size = 16
    sampling = "{sampling}"
    neighboring = "replace-one"
    optimizer = "sgd"
    noise = "{noise}"
    {extra}
    [data]
    name = "synthetic-mlp"
    n = 64
    hidden = 4
    [grid]
    learning_rate = [0.1]
    noise_multiplier = [1.0]
    clip_norm = [1.0]
    """)
ULS = textwrap.dedent("""
    name = "uls"
    algorithm = "user-level-dpsgd"
    num_rounds = 4
    [static]
    batch_size = 4
    sampling_rate = {q}
    unit = "user"
    records_per_user = {k}
    [data]
    name = "synthetic-mlp"
    n = 64
    hidden = 4
    [grid]
    learning_rate = [0.1]
    noise_multiplier = [1.0]
    clip_norm = [1.0]
    """)


def bmf(sampling="min-separation", noise="band-mf", extra=""):
    return BANDMF.format(sampling=sampling, noise=noise, extra=extra)


#: id: (config text, what the one error line must say: the key and its value). The battery's cases
#: (experiments/robustness/battery.py, "sweep toml") that took 10-20 s.
BAD = {
    "bands-0": (bmf(extra="bands = 0"), ["static.bands=0", "must be >= 1"]),
    "bands-over-rounds": (bmf(extra="bands = 1000"), ["static.bands=1000", "must be <= 8"]),
    "bands-float": (bmf(extra="bands = 2.5"), ["static.bands=2.5", "must be an integer"]),
    "bands-over-period": (bmf(extra="bands = 6\nnum_bins = 4"), ["bands=6", "num_bins=4"]),
    "band-mf-poisson": (bmf(sampling="poisson"), ["static.sampling='poisson'", "noise='band-mf'"]),
    "coeffs-vs-bands": (bmf(extra="bands = 3\nband_coeffs = [1.0, 0.5]"), ["band_coeffs", "2 entries", "bands=3"]),
    "coeffs-zero": (bmf(extra="band_coeffs = [0.0, 0.5]"), ["static.band_coeffs=[0.0, 0.5]", "band_coeffs[0] > 0"]),
    "order-bogus": (bmf(extra='order = "sorted"'), ["static.order='sorted'", "('shuffled-once', 'given')"]),
    "gaussian-bands": (bmf(noise="gaussian", sampling="without-replacement", extra="bands = 2"),
                       ["static.bands=2", "need noise='band-mf'"]),
    "uls-k-0": (ULS.format(q=0.1, k=0), ["static.records_per_user=0", "must be >= 1"]),
    "uls-q-1.5": (ULS.format(q=1.5, k=1), ["static.sampling_rate=1.5", "(0, 1]"]),
    "uls-q-0": (ULS.format(q=0.0, k=1), ["static.sampling_rate=0.0", "(0, 1]"]),
}

_SCRIPT = """
import contextlib, io, json, sys, time
from dpjax import cli
out = {}
for cid, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    t0 = time.process_time()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as stop:
            rc = stop.code
    out[cid] = {"rc": rc, "err": err.getvalue(), "jax": "jax" in sys.modules, "cpu_s": time.process_time() - t0}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Every ``BAD`` config through ``dpjax sweep`` in ONE fresh process, in order: exit status, stderr, whether jax
    had been imported by the end of it, and the CPU seconds it took."""
    tmp = tmp_path_factory.mktemp("static")
    argvs = {}
    for cid, (text, _) in BAD.items():
        (tmp / f"{cid}.toml").write_text(text)
        argvs[cid] = ["sweep", str(tmp / f"{cid}.toml"), "--out", str(tmp / f"out-{cid}"), "--quiet"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    r = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(argvs)], cwd=tmp, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cid", list(BAD))
def test_a_bad_static_field_is_refused_in_one_line_before_jax_loads(refused, cid):
    tmp, results = refused
    got = results[cid]
    lines = [ln for ln in got["err"].splitlines() if ln.startswith("dpjax: error:")]
    assert got["rc"] == 2 and len(lines) == 1, got
    assert all(n in lines[0] for n in BAD[cid][1]), lines[0]
    assert not got["jax"], f"{cid}: jax was imported before the refusal"
    # CPU time, not wall time (the machine is shared): importing jax and building the family costs > 2 s
    assert got["cpu_s"] < 2.0, got
    assert not (tmp / f"out-{cid}").exists()


@pytest.mark.parametrize("text", [
    bmf(extra="bands = 2\nnum_bins = 4"),
    bmf(extra="band_coeffs = [1.0, 0.5]"),  # the period defaults to the 2 bands
    bmf(sampling="one-pass"),
    bmf(sampling="cyclic-poisson", extra='neighboring = "add-remove"\nsampling_rate = 0.25\nbands = 2')
    .replace('neighboring = "replace-one"\n', ""),
    bmf(noise="gaussian", sampling="poisson").replace('neighboring = "replace-one"', "sampling_rate = 0.25"),
    ULS.format(q=1.0, k=3),
], ids=["bands-le-period", "coeffs", "one-pass", "cyclic-poisson", "gaussian-poisson", "uls-q-1"])
def test_valid_static_fields_pass_the_pre_jax_rule(text):
    precheck(tomllib.loads(text))


def test_a_static_axis_of_the_grid_is_checked_value_by_value():
    text = bmf(extra="").replace("clip_norm = [1.0]", "clip_norm = [1.0]\nbands = [1, 2, 0]")
    with pytest.raises(ValueError, match=r"static.bands=0: bands=0 must be >= 1"):
        precheck(tomllib.loads(text))


def test_the_family_and_the_sweep_share_one_rule(monkeypatch):
    """A rule changed in ``static_rules`` changes both the family's constructor and the pre-jax check: the sweep
    holds no copy of it."""
    from dpjax.algorithms import DpSgd, static_rules
    from dpjax.problems.glm import LinearRegression

    original = static_rules.RULES["DpSgd"]

    @functools.wraps(original)  # the same parameters
    def stricter(**kw):
        if kw["order"] == "given":
            raise ValueError(f"order={kw['order']!r} is refused by the test's rule")
        return original(**kw)

    monkeypatch.setitem(static_rules.RULES, "DpSgd", stricter)
    kw = dict(batch_size=16, sampling="min-separation", neighboring="replace-one", noise="band-mf", order="given")
    with pytest.raises(ValueError, match=r"order='given' is refused by the test's rule"):
        DpSgd(LinearRegression(1), 8, **kw)
    with pytest.raises(ValueError, match=r"static.order='given': order='given' is refused by the test's rule"):
        precheck(tomllib.loads(bmf(extra='order = "given"')))
    DpSgd(LinearRegression(1), 8, **{**kw, "order": "shuffled-once"})


@pytest.mark.parametrize("class_name", ["DpSgd", "UserLevelDpSgd"])
def test_the_defaults_read_from_source_are_the_dataclass_defaults(class_name):
    """The values a rule sees for unset fields before jax (``declared_defaults``) are the family's own."""
    import dpjax.algorithms
    from dpjax.algorithms import static_rules
    from dpjax.sweep import static_precheck

    assert class_name in static_rules.RULES

    cls = getattr(dpjax.algorithms, class_name)
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    read = static_precheck.declared_defaults(class_name)
    params = [p for p in static_rules.parameters(class_name) if p != "num_rounds"]
    assert params and all(read[p] == fields[p] for p in params), (read, fields)


def test_the_binned_samplings_are_the_selection_parts():
    from dpjax.algorithms import static_rules
    from dpjax.parts.selection_bins import BINNED_SCHEMES

    assert static_rules.BINNED_SAMPLINGS == BINNED_SCHEMES


def test_the_carried_fields_are_the_registrys():
    from dpjax.engine import registry
    from dpjax.sweep import static_precheck

    assert static_precheck.registry_literal("CARRIED_STATIC", None) == registry.CARRIED_STATIC


def test_every_packaged_config_passes_the_pre_jax_check():
    """No false refusal of a shipped config (``dpjax sweep NAME``) by the rules read before jax."""
    from dpjax.sweep import cli as sweep_cli

    configs = sweep_cli.packaged_configs()
    assert configs
    for name, path in configs.items():
        precheck(tomllib.loads(path.read_text(encoding="utf-8")))
