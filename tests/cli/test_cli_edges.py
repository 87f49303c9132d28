"""The command line at its edges (issue #39; rows of experiments/robustness/battery_before.txt): every bad flag or
config value is refused with exit status 2 and ONE ``dpjax: error:`` line naming the flag and its value, after
bounded work -- and `dpjax sweep / audit / reproduce` refuse before jax loads (seconds on a loaded machine), so a typo
costs a fraction of a second. Good inputs next to the refused ones (a process share, ``--silo-devices all``,
``--distributed``) must still get through the new checks."""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from dpjax import cli
from tests._timing import within

REPO = pathlib.Path(__file__).resolve().parents[2]
_within = within


def _refusal(capsys, argv) -> str:
    """``dpjax ARGV``'s one error line, checked: exit 2, exactly one ``dpjax: error:`` line."""
    try:
        rc = cli.main(argv)
    except SystemExit as stop:  # argparse's refusal of a flag's value
        rc = stop.code
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("dpjax: error:")]
    assert rc == 2 and len(lines) == 1, (rc, err)
    return lines[0]


# ------------------------------------------------------------------------------------------------ dpjax account
ACC = ["account", "--noise-multiplier", "1.0", "--dataset-size", "10000", "--steps", "100", "--delta", "1e-5"]
B = ["--batch-size", "100"]
BINS = [*ACC, *B, "--sampling", "balls-in-bins", "--num-bins", "100"]
CYCLIC = [*ACC, "--sampling", "cyclic-poisson", "--sampling-rate", "0.01"]


@pytest.mark.parametrize("argv, needles", [
    # more bins / groups than records: most of them empty, a typo rather than a schedule (was: an epsilon)
    ([*ACC, *B, "--sampling", "balls-in-bins", "--num-bins", "100001"], ["--num-bins=100001", "<= 10000"]),
    ([*CYCLIC, "--num-bins", "1000000000"], ["--num-bins=1000000000", "<= 10000"]),
    ([*ACC, *B, "--sampling", "min-separation", "--num-bins", "99999999999"], ["--num-bins=99999999999"]),
    # --mc-samples 0 printed no estimate and exit 0; -5 named num_samples; 1e12 was a MemoryError traceback
    ([*BINS, "--mc-samples", "0"], ["--mc-samples=0 must be >= 1"]),
    ([*BINS, "--mc-samples", "-5"], ["--mc-samples=-5 must be >= 1"]),
    ([*BINS, "--mc-samples", "1000000000000"], ["--mc-samples=1000000000000 must be <= 10000000"]),
    # within the sample cap but 1e9 normal draws (100 bins): minutes of work, refused with the count that fits
    ([*BINS, "--mc-samples", "10000000"], ["--mc-samples=10000000", "give at most 100000"]),
    # cyclic Poisson under add/remove without a rate: say exactly what to pass
    ([*ACC, *B, "--sampling", "cyclic-poisson", "--num-bins", "10"],
     ["sampling_rate=None", "--sampling-rate", "--batch-size 100", "--neighboring replace-one"]),
    # a shuffled schedule of 1e12 steps ran for minutes (the Poisson PLD beside the certificate): a stated limit
    ([*ACC[:5], "--steps", "1000000000000", "--delta", "1e-5", *B, "--sampling", "shuffle"],
     ["--steps=1000000000000", "at most 100000 steps"]),
])
def test_account_refuses_with_the_flag_and_value_in_bounded_time(capsys, argv, needles):
    with _within(20):
        line = _refusal(capsys, argv)
    assert all(n in line for n in needles), line


def test_monte_carlo_work_limit_follows_the_draws_it_costs():
    """``check_work``: samples x epochs x bins draws per direction; the largest count it names is accepted."""
    from dpjax.accounting import balls_in_bins_mc as mc

    per_sample = math.ceil(250 / 10) * 10  # 25 epochs of 10 bins
    fits = mc.MAX_DRAWS // per_sample
    assert mc.check_work(fits, 250, 10) == fits
    with pytest.raises(ValueError, match=rf"num_samples={fits + 1} .* give at most {fits}"):
        mc.check_work(fits + 1, 250, 10)


# ----------------------------------------------------- dpjax sweep / audit / reproduce: refused before jax loads
TINY = textwrap.dedent("""
    name = "tiny"
    algorithm = "isrl-mbsgd"
    num_rounds = 6
    eval_every = 3
    seed = 3
    [static]
    batch_size = 8
    sampling = "without-replacement"
    [data]
    name = "synthetic-logistic"
    num_silos = 3
    n = 40
    dim = 4
    n_test = 16
    [grid]
    learning_rate = [0.1]
    noise_multiplier = [0.5]
    clip_norm = ["1*maxnorm"]
    """)
BANDMF = textwrap.dedent("""
    name = "bmf"
    algorithm = "dp-sgd"
    num_rounds = 8
    [static]
    batch_size = 16
    sampling = "min-separation"
    neighboring = "replace-one"
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
FILES = {"c.toml": TINY, "ftrl.toml": TINY.replace('"isrl-mbsgd"', '"dp-ftrl"').replace("num_rounds = 6", "num_rounds = "
                                                                                      "1000000000").replace(
    'sampling = "without-replacement"\n', ""), "pink.toml": BANDMF.format(noise="pink", extra=""),
         "devices.toml": TINY + "\n[run]\nsilo_devices = 2\n"}
SWEEP = ["sweep", "{tmp}/c.toml", "--out", "{tmp}/o", "--quiet"]
KEPT = ["reproduce", "shuffling-gap", "--quiet", "--report-only"]
AUDIT_TRAINING = ["audit", "--quiet", "training", "--family", "isrl-mbsgd", "--mutant", "none", "--canaries", "1000"]

BEFORE_JAX = {  # id: (argv, what the one error line must say)
    "chunk-size-0": ([*SWEEP, "--chunk-size", "0"], ["chunk_size=0 must be >= 1"]),
    "chunk-size-neg": ([*SWEEP, "--chunk-size", "-1"], ["chunk_size=-1 must be >= 1"]),
    "vmap-width-0": ([*SWEEP, "--vmap-width", "0"], ["vmap_width=0 must be >= 1"]),
    "max-chunks-0": ([*SWEEP, "--max-chunks", "0"], ["max_chunks=0 must be >= 1"]),
    "process-index-neg": ([*SWEEP, "--process-index", "-1", "--process-count", "2"], ["process_index=-1"]),
    "process-index-alone": ([*SWEEP, "--process-index", "1"], ["process_index=1 must be < process_count=1"]),
    "process-with-distributed": ([*SWEEP, "--distributed", "--process-index", "1"],
                                 ["--process-index and --distributed are exclusive"]),
    "silo-compute-no-devices": ([*SWEEP, "--silo-compute", "blocks"], ["run.silo_compute='blocks' needs"]),
    "silo-block-over-silos": ([*SWEEP, "--silo-devices", "1", "--silo-compute", "blocks", "--silo-block", "99"],
                              ["run.silo_block=99", "3 silos"]),
    "silo-devices-2": ([*SWEEP, "--silo-devices", "2"],
                       ["run.silo_devices=2 asks for more devices than there are: 1 device(s)"]),
    "init-timeout-neg": ([*SWEEP, "--init-timeout", "-5"], ["--init-timeout needs --distributed", "-5"]),
    "toml-silo-devices-2": (["sweep", "{tmp}/devices.toml", "--out", "{tmp}/o"], ["run.silo_devices=2"]),
    "toml-noise-pink": (["sweep", "{tmp}/pink.toml", "--out", "{tmp}/o"],
                        ["static.noise='pink'", "('gaussian', 'band-mf')"]),
    "show-empty": (["sweep", "--show", ""], ["--show=''", "empty"]),
    "show-directory": (["sweep", "--show", "{tmp}"], ["--show=", "is a directory"]),
    "show-with-out": (["sweep", "--show", "dp_sgd_adam_mlp", "--out", "{tmp}/o"], ["--show", "--out="]),
    "audit-runs-odd": (["audit", "--quiet", "dp-sgd", "--runs", "3"], ["--runs=3 must be even"]),
    "audit-runs-too-few": (["audit", "--quiet", "dp-sgd", "--runs", "10"], ["--runs=10 is too few", "at least 12"]),
    "audit-training-and-mech": ([*AUDIT_TRAINING, "dp-sgd"], ["training", "dp-sgd", "runs alone"]),
    "report-only-missing": ([*KEPT, "--out", "{tmp}/nothing"], ["--report-only", "{tmp}/nothing", "does not exist"]),
    "report-only-empty": ([*KEPT, "--out", "{tmp}"], ["--report-only", "holds no results.csv"]),
    "toml-eval-points": (["sweep", "{tmp}/ftrl.toml", "--out", "{tmp}/o"],
                         ["eval_every=3 over num_rounds=1000000000 gives 333333334 evaluations"]),
    "reproduce-no-data": (["reproduce", "user-level-dpsgd", "--quick", "--quiet", "--out", "{tmp}/r", "--data-dir",
                           "{tmp}/nodata"], ["--data-dir=", "nodata", "does not exist"]),
    "out-is-file": (["sweep", "{tmp}/c.toml", "--out", "{tmp}/c.toml"], ["c.toml", "is a file"]),
    "max-data-0": ([*SWEEP, "--max-data-mb", "0"], ["max_data_mb=0"]),
    "audit-training-rounds-0": ([*AUDIT_TRAINING, "--rounds", "0"], ["rounds=0 must be >= 1"]),
    "audit-training-canaries-0": ([*AUDIT_TRAINING[:-1], "0"], ["canaries=0 must be >= 2"]),
    "audit-training-noise-0": ([*AUDIT_TRAINING, "--noise-multiplier", "0"], ["noise_multiplier=0"]),
    "audit-training-delta-half": ([*AUDIT_TRAINING, "--delta", "0.5"], ["delta=0.5 is too large"]),
    "reproduce-unknown": (["reproduce", "shuffling-gaps", "--quiet"], ["figure='shuffling-gaps'", "shuffling-gap'?"]),
    "reproduce-silo-devices-2": (["reproduce", "shuffling-gap", "--quiet", "--out", "{tmp}/r", "--silo-devices", "2"],
                                 ["--silo-devices=2 asks for more devices than there are: 1 device(s)"]),
}

_SCRIPT = """
import contextlib, io, json, sys
from dpjax import cli
out = {}
for cid, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = cli.main(argv)
        except SystemExit as stop:
            rc = stop.code
    out[cid] = {"rc": rc, "err": err.getvalue(), "jax": "jax" in sys.modules}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def before_jax(tmp_path_factory):
    """Every ``BEFORE_JAX`` command in ONE fresh process (one interpreter start), in order; for each, its exit
    status, stderr and whether jax had been imported by the end of it."""
    tmp = tmp_path_factory.mktemp("edges")
    for name, text in FILES.items():
        (tmp / name).write_text(text)
    argvs = {cid: [a.replace("{tmp}", str(tmp)) for a in argv] for cid, (argv, _) in BEFORE_JAX.items()}
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", _SCRIPT, json.dumps(argvs)], cwd=tmp, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp, json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cid", list(BEFORE_JAX))
def test_refused_with_one_line_before_jax_loads(before_jax, cid):
    tmp, results = before_jax
    got, needles = results[cid], [n.replace("{tmp}", str(tmp)) for n in BEFORE_JAX[cid][1]]
    lines = [ln for ln in got["err"].splitlines() if ln.startswith("dpjax: error:")]
    assert got["rc"] == 2 and len(lines) == 1, got
    assert all(n in lines[0] for n in needles), lines[0]
    assert not got["jax"], f"{cid}: jax was imported before the refusal"


def _flags(**kw) -> argparse.Namespace:
    base = dict(chunk_size=None, vmap_width=None, max_chunks=None, process_index=None, process_count=None,
                distributed=False, silo_devices=None, silo_compute=None, silo_block=None)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("flags", [
    dict(process_index=1, process_count=2),  # the second of two hosts sharing --out
    dict(process_index=0),
    dict(distributed=True),  # the share comes from JAX: checked by _share, not here
    dict(silo_devices="all"),
    dict(silo_devices=8),  # 8 host devices (XLA_FLAGS below)
    dict(silo_devices=1, silo_block=2),  # blocks of silos on the exact path: a valid layout
    dict(silo_devices=1, silo_compute="blocks", silo_block=3),  # a block of all 3 silos
    dict(chunk_size=1, vmap_width=1, max_chunks=1),
])
def test_the_pre_jax_checks_pass_good_flags(monkeypatch, flags):
    from dpjax.sweep import cli as sweep_cli
    import tomllib

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.delitem(sys.modules, "jax", raising=False)  # as in a fresh `dpjax sweep` (restored afterwards)
    sweep_cli.precheck_flags(_flags(**flags), tomllib.loads(TINY))


def test_the_host_device_count_is_read_only_where_it_is_known(monkeypatch):
    from dpjax.sweep import cli as sweep_cli
    import tomllib

    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    with pytest.raises(ValueError, match=r"run.silo_devices=9 asks for more devices than there are: 8 device"):
        sweep_cli.precheck_flags(_flags(silo_devices=9), tomllib.loads(TINY))
    for name, value in (("JAX_PLATFORMS", "gpu"), ("JAX_PLATFORMS", "")):  # another platform: jax decides later
        monkeypatch.setenv(name, value)
        sweep_cli.precheck_flags(_flags(silo_devices=9), tomllib.loads(TINY))


# ------------------------------------------------------------------------------------------------ dpjax audit
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99, 0.999])
def test_min_runs_is_the_first_size_whose_best_outcome_bounds_epsilon_above_zero(confidence):
    """At ``min_runs / 2`` evaluation runs with no error at all, the Clopper-Pearson rates (``stats``) give an
    epsilon lower bound above 0; one run fewer gives 0: below it no audit outcome can catch anything."""
    from dpjax.auditing import stats
    from dpjax.auditing.cli import min_runs

    half = min_runs(confidence) // 2
    alpha = (1.0 - confidence) / 2.0

    def best_bound(m):  # zero false positives and zero false negatives among m runs on each side
        u = stats.clopper_pearson_upper(0, m, alpha)
        return float(stats.epsilon_from_rates(u, u, 0.0))

    assert best_bound(half) > 0.0 and best_bound(half - 1) == 0.0


def test_the_audit_parser_reads_the_training_constants_without_importing_them():
    from dpjax.auditing import training, training_cli

    got = training_cli.training_constants()
    assert got == {"FAMILIES": training.FAMILIES, "MUTANTS": training.MUTANTS, "MAX_ROUNDS": training.MAX_ROUNDS}


# ------------------------------------------------------------------------------------ sweep config static fields
@pytest.mark.parametrize("extra, message", [
    ("bands = 0", r"static.bands=0: bands=0 must be >= 1"),  # was refused as "need noise='band-mf'"
    ("band_coeffs = [0.0, 0.5]", r"static.band_coeffs=\[0.0, 0.5\]: .*coeffs\[0\] > 0"),
])
def test_band_mf_fields_are_checked_with_the_noise_they_belong_to(extra, message):
    import tomllib

    from dpjax.sweep.config import SweepConfig

    with pytest.raises(ValueError, match=message):
        SweepConfig.from_dict(tomllib.loads(BANDMF.format(noise="band-mf", extra=extra)))


def test_the_pre_jax_evaluation_limit_is_the_engines():
    from dpjax.engine import program
    from dpjax.sweep import config

    assert config.MAX_EVALUATIONS == program.MAX_EVALUATIONS
