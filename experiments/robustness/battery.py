"""A battery of bad or extreme inputs against dpjax's newer surfaces (issue #39's acceptance, issue #41's surfaces).

Run from the repository root (2 CPU cores are enough; ~5 minutes)::

    PYTHONPATH=$PWD JAX_PLATFORMS=cpu python experiments/robustness/battery.py [--only cli|api] [--jobs 3] [-v]

Every input is classified automatically:

* bad: ``traceback`` (an uncaught library error: a CLI traceback, or an API exception other than dpjax's own
  ``ValueError``/``TypeError`` refusal), ``silent accept`` (a nonsensical input accepted), ``memory`` (RSS > 1 GB,
  or a MemoryError under the 3 GB address-space limit), ``hang`` (> 10 s), ``unclear`` (refused, but the message does
  not name the argument and its value, or a CLI failure that is not one ``dpjax: error:`` line with exit 2),
  ``wrong answer`` (a good input refused, or answered wrongly);
* good: ``clean refusal``, ``correct answer``.

CLI inputs run ``python -m dpjax.cli ...`` in a subprocess (``JAX_PLATFORMS=cpu``, 3 GB ``RLIMIT_AS``, peak RSS from
``wait4``, 10 s wall limit; a few at a time); API inputs run in-process (``SIGALRM`` at 10 s, RSS growth from
``getrusage``). The script prints the counts table by class and surface.

Counts, first run (2026-12-03, main at 0ddc065, no fixes; 361 s on the shared 2-core machine), 189 CLI + 159 API:

    class            CLI   API  total
    traceback          0     2      2
    silent accept      5     8     13
    memory             1     1      2
    hang              16     4     20
    unclear           20     7     27
    wrong answer       1     0      1
    clean refusal    127   116    243
    correct answer    19    21     40

Not yet triaged: some of these are the battery's own mistakes, not dpjax's. The 9 band-mf TOML cases use
``sampling = "one-pass"``, which sweeps do not offer (a clean refusal of that key, classed "unclear" because it does
not name the key the case meant); the cyclic-poisson CLI cases lack the ``--sampling-rate`` that scheme requires; the
sweep-flag "hangs" may be valid inputs that start a sweep or jax's import under load (> 10 s), not hangs.
No fixes were made after this run.

CLI half after the CLI fixes (2026-12-04, branch edgescli; ``--only cli --jobs 3``, 173 s, load average 10-16 on the
shared machine; battery_after_cli.txt), with the battery's own mistakes fixed: the band-mf TOML cases use
``sampling = "min-separation"``, the cyclic-poisson cases pass ``--sampling-rate`` (and a new ``cyclic-no-rate`` case
expects the refusal that says what to pass), ``bins-mc-float`` gives 2.5 (``1e3`` is an exact integer, accepted on
purpose), ``silo-block-not-blocks`` and ``cyclic-noise-0`` (epsilon = inf, as plain Poisson answers) expect "any", the
dp-ftrl case drops the static ``sampling`` it does not have, and ``bins-mc-over-work`` is new; 191 CLI inputs:

    class            CLI
    traceback          0
    silent accept      0
    memory             0
    hang              14
    unclear            0
    wrong answer       0
    clean refusal    154
    correct answer    23

The 14 "hangs" all load jax and the family: 11 are clean refusals of a static field that only building the family
checks (17-20 s under load ~21, 9.9 s alone at load 11), ``silo-block-not-blocks`` is a valid sweep that starts,
``toml-bandmf-rounds-1e9`` a valid 10^9-round sweep that trains. (``toml-bandmf-bands-over-sep`` was a wrong case: with
``num_bins`` unset min-separation's period defaults to the bands, so 6 bands over 6 groups is valid; it now sets
``num_bins = 4`` and is refused, naming bands=6.)

CLI half after branch refuse (2026-12-04 21:17-21:20, ``--only cli --jobs 2``, 207 s, load average 11.0-11.4;
battery_after_cli.txt): the band-mf and user-level-dpsgd static fields are checked before jax by the families' own
rules (``dpjax.algorithms.static_rules``, read by ``dpjax.sweep.static_precheck``), 0.6-0.7 s per refusal:

    class            CLI
    traceback          0
    silent accept      0
    memory             0
    hang               2   (both valid inputs: silo-block-not-blocks starts, toml-bandmf-rounds-1e9 trains)
    unclear            0
    wrong answer       0
    clean refusal    166
    correct answer    23
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import dataclasses
import json
import math
import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

REPO = pathlib.Path(__file__).resolve().parents[2]
TIME_LIMIT = 10.0
RSS_LIMIT = 1 << 30  # 1 GB: above it, a memory blow-up
AS_LIMIT = 3 << 30  # the CLI child's address space (jax on CPU needs ~1.5 GB of it)

BAD = ("traceback", "silent accept", "memory", "hang", "unclear", "wrong answer")
GOOD = ("clean refusal", "correct answer")


@dataclasses.dataclass
class Case:
    """One input. ``expect``: "refuse" (a nonsensical input), "answer" (a good one), "any" (either is fine, as long
    as a refusal is clean). ``names``: what a refusal must mention (the argument and its value; ``-``/``_`` and a
    leading ``--`` are interchangeable). ``check``: for answers, a predicate of stdout (CLI) or of the result (API)."""

    id: str
    surface: str
    kind: str  # "cli" | "api"
    payload: Any  # argv (list of str, "{tmp}" substituted) or a callable
    expect: str = "refuse"
    names: tuple = ()
    check: Callable | None = None
    files: dict = dataclasses.field(default_factory=dict)  # CLI: {name: text} written into {tmp} first


def _variants(fragment: str) -> set[str]:
    f = fragment.lower()
    out = {f, f.replace("-", "_"), f.replace("_", "-")}
    if f.startswith("--"):
        out |= {f[2:], f[2:].replace("-", "_")}
    return out


def names_all(text: str, names) -> bool:
    t = text.lower()
    return all(any(v in t for v in _variants(n)) for n in names)


# ----------------------------------------------------------------------------- CLI cases
ACC = ["account", "--noise-multiplier", "1.0", "--batch-size", "100", "--dataset-size", "10000", "--steps", "100",
       "--delta", "1e-5"]


def acc(*extra, base=ACC):
    return [*base, *extra]


def acc_without(flag, *extra):
    argv = list(ACC)
    i = argv.index(flag)
    del argv[i:i + 2]
    return [*argv, *extra]


def has_eps(out: str) -> bool:
    return bool(re.search(r"(epsilon|eps|ε)\s*[=:]?\s*[0-9.]+", out, re.I))


def json_eps(out: str) -> bool:
    try:
        d = json.loads(out)
    except ValueError:
        return False
    e = d.get("epsilon")
    return isinstance(e, (int, float)) and 0 < e < math.inf


def shuffle_three(out: str) -> bool:
    low = out.lower()
    return "poisson" in low and "lower bound" in low and has_eps(out)


TINY = """
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
"""

BANDMF = """
name = "bmf"
algorithm = "dp-sgd"
num_rounds = {rounds}
seed = 0
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
"""

ULS = """
name = "uls"
algorithm = "user-level-dpsgd"
num_rounds = {rounds}
seed = 0
[static]
batch_size = 4
sampling_rate = {q}
unit = "{unit}"
records_per_user = {k}
optimizer = "sgd"
[data]
name = "synthetic-mlp"
n = 64
hidden = 4
[grid]
learning_rate = [0.1]
noise_multiplier = [1.0]
clip_norm = [1.0]
"""


def tiny_with(run_table: str = "", extra_top: str = "") -> str:
    return extra_top + TINY + ("\n[run]\n" + run_table if run_table else "")


def bmf(rounds=8, sampling="min-separation", noise="band-mf", extra=""):
    # min-separation under replace-one: a sampling band-mf takes in a sweep ("one-pass" is DpSgd's, not a sweep's)
    return BANDMF.format(rounds=rounds, sampling=sampling, noise=noise, extra=extra)


def sweep_file(cid, text, *flags, surface="sweep toml"):
    return Case(cid, surface, "cli", ["sweep", "{tmp}/c.toml", "--out", "{tmp}/out", "--quiet", *flags],
                files={"c.toml": text})


def cli_cases() -> list[Case]:
    C = []

    def c(cid, surface, argv, expect="refuse", names=(), check=None, files=None):
        C.append(Case(cid, surface, "cli", argv, expect, tuple(names), check, files or {}))

    # -- dpjax account: the newer samplings -------------------------------------------------------------------
    s = "account sampling"
    c("bins-no-num-bins", s, acc("--sampling", "balls-in-bins"), names=["--num-bins"])
    c("bins-num-bins-0", s, acc("--sampling", "balls-in-bins", "--num-bins", "0"), names=["--num-bins", "0"])
    c("bins-num-bins-neg", s, acc("--sampling", "balls-in-bins", "--num-bins", "-3"), names=["--num-bins", "-3"])
    c("bins-num-bins-over-n", s, acc("--sampling", "balls-in-bins", "--num-bins", "100001"),
      names=["100001"])
    c("bins-num-bins-float", s, acc("--sampling", "balls-in-bins", "--num-bins", "2.5"), names=["--num-bins", "2.5"])
    c("bins-ok", s, acc("--sampling", "balls-in-bins", "--num-bins", "100"), "answer", check=has_eps)
    c("bins-ok-json", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--json"), "answer", check=json_eps)
    c("bins-batch-mismatch", s, acc("--sampling", "balls-in-bins", "--num-bins", "50"), "any",
      names=["--batch-size", "100"])
    c("bins-rate", s, acc_without("--batch-size", "--sampling", "balls-in-bins", "--num-bins", "100",
                                  "--sampling-rate", "0.01"), "any", names=["--sampling-rate"])
    c("poisson-with-num-bins", s, acc("--num-bins", "10"), names=["num_bins", "poisson"])
    c("poisson-with-mc", s, acc("--mc-samples", "1000"), names=["mc_samples", "poisson"])
    c("bins-mc-0", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--mc-samples", "0"),
      names=["--mc-samples", "0"])
    c("bins-mc-neg", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--mc-samples", "-5"),
      names=["--mc-samples", "-5"])
    c("bins-mc-1e12", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--mc-samples", "1000000000000"),
      names=["--mc-samples", "1000000000000"])
    c("bins-mc-float", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--mc-samples", "2.5"),
      names=["--mc-samples", "2.5"])  # (1e3 is an exact integer, accepted on purpose)
    c("bins-mc-over-work", s, acc("--sampling", "balls-in-bins", "--num-bins", "100", "--mc-samples", "10000000"),
      names=["--mc-samples", "10000000"])
    c("bins-epsilon", s, acc_without("--noise-multiplier", "--sampling", "balls-in-bins", "--num-bins", "100",
                                     "--epsilon", "2"), "any", names=["--epsilon"])
    c("bins-steps-1e12", s, acc_without("--steps", "--sampling", "balls-in-bins", "--num-bins", "100", "--steps",
                                        "1000000000000"), "any", names=["--steps", "1000000000000"])
    c("bins-delta-0", s, acc_without("--delta", "--sampling", "balls-in-bins", "--num-bins", "100", "--delta", "0"),
      names=["delta", "0"])
    # cyclic Poisson takes its rate from --sampling-rate (under add/remove, the default): not --batch-size
    def cyc(*extra, drop=()):
        argv = acc_without("--batch-size", "--sampling", "cyclic-poisson", "--sampling-rate", "0.01")
        for flag in drop:
            i = argv.index(flag)
            del argv[i:i + 2]
        return [*argv, *extra]

    c("cyclic-no-rate", s, acc("--sampling", "cyclic-poisson", "--num-bins", "10"),
      names=["--sampling-rate", "--neighboring"])
    c("cyclic-no-groups", s, cyc(), "any", names=["--num-bins"])  # b = 1 by default: plain Poisson
    c("cyclic-groups-0", s, cyc("--num-bins", "0"), names=["--num-bins", "0"])
    c("cyclic-groups-over-n", s, cyc("--num-bins", "1000000000"), names=["1000000000"])
    c("cyclic-ok", s, cyc("--num-bins", "10"), "answer", check=has_eps)
    c("cyclic-mc", s, cyc("--num-bins", "10", "--mc-samples", "100"), names=["mc_samples"])
    c("cyclic-steps-1e12", s, cyc("--num-bins", "10", "--steps", "1000000000000", drop=("--steps",)), "any",
      names=["--steps", "1000000000000"])
    # zero noise: epsilon = inf, the answer plain Poisson gives too (`--noise-multiplier 0` is not refused there)
    c("cyclic-noise-0", s, cyc("--num-bins", "10", "--noise-multiplier", "0", drop=("--noise-multiplier",)), "any",
      names=["noise_multiplier", "0"])
    c("minsep-groups-0", s, acc("--sampling", "min-separation", "--num-bins", "0"), names=["--num-bins", "0"])
    c("minsep-ok", s, acc("--sampling", "min-separation", "--num-bins", "10"), "answer", check=has_eps)
    c("minsep-steps-1e12", s, acc_without("--steps", "--sampling", "min-separation", "--num-bins", "10", "--steps",
                                          "1000000000000"), "any", names=["--steps", "1000000000000"])
    c("minsep-json", s, acc("--sampling", "min-separation", "--num-bins", "10", "--json"), "answer", check=json_eps)
    c("minsep-groups-huge", s, acc("--sampling", "min-separation", "--num-bins", "99999999999"),
      names=["99999999999"])
    c("shuffle-ok", s, acc("--sampling", "shuffle"), "answer", check=shuffle_three)
    c("shuffle-json", s, acc("--sampling", "shuffle", "--json"), "answer", check=json_eps)
    c("shuffle-steps-1e12", s, acc_without("--steps", "--sampling", "shuffle", "--steps", "1000000000000"), "any",
      names=["--steps", "1000000000000"])
    c("shuffle-batch-over-n", s, acc_without("--batch-size", "--sampling", "shuffle", "--batch-size", "20000"),
      names=["batch_size", "20000"])
    c("shuffle-batch-0", s, acc_without("--batch-size", "--sampling", "shuffle", "--batch-size", "0"),
      names=["batch_size", "0"])
    c("shuffle-add-remove", s, acc("--sampling", "shuffle", "--neighboring", "add-remove"), "any",
      names=["add-remove"])
    c("shuffle-epsilon", s, acc_without("--noise-multiplier", "--sampling", "shuffle", "--epsilon", "2"), "answer",
      check=has_eps)
    c("shuffle-gdp", s, acc("--sampling", "shuffle", "--accountant", "gdp"), "any", names=["gdp"])
    c("shuffle-paper", s, acc("--sampling", "shuffle", "--accountant", "paper"), "any", names=["paper"])
    c("shuffle-noise-0", s, acc_without("--noise-multiplier", "--sampling", "shuffle", "--noise-multiplier", "0"),
      names=["noise", "0"])
    c("shuffle-noise-nan", s, acc_without("--noise-multiplier", "--sampling", "shuffle", "--noise-multiplier",
                                          "nan"), names=["noise", "nan"])
    c("shuffle-noise-inf", s, acc_without("--noise-multiplier", "--sampling", "shuffle", "--noise-multiplier",
                                          "inf"), names=["noise", "inf"])
    c("shuffle-noise-1e-300", s, acc_without("--noise-multiplier", "--sampling", "shuffle", "--noise-multiplier",
                                             "1e-300"), "any", names=["noise", "1e-300"])
    c("shuffle-delta-0", s, acc_without("--delta", "--sampling", "shuffle", "--delta", "0"), names=["delta", "0"])
    c("shuffle-delta-1", s, acc_without("--delta", "--sampling", "shuffle", "--delta", "1"), names=["delta", "1"])
    c("shuffle-group-0", s, acc("--sampling", "shuffle", "--group-size", "0"), names=["group_size", "0"])
    c("shuffle-group-5", s, acc("--sampling", "shuffle", "--group-size", "5"), "any", names=["group_size", "5"])
    c("shuffle-unit-user", s, acc("--sampling", "shuffle", "--unit", "user"), "any", names=["user"])
    c("shuffle-rate-ok", s, acc_without("--batch-size", "--sampling", "shuffle", "--sampling-rate", "0.01"), "answer",
      check=has_eps)
    c("shuffle-rate-fraction", s, acc_without("--batch-size", "--sampling", "shuffle", "--sampling-rate", "0.00333"),
      names=["sampling_rate", "0.00333"])
    c("shuffle-num-bins", s, acc("--sampling", "shuffle", "--num-bins", "3"), names=["num_bins", "shuffle"])
    c("account-huge-steps-json", s, ["account", "--noise-multiplier", "10000", "--batch-size", "100",
                                     "--dataset-size", "10000", "--steps", "100000000", "--delta", "1e-5", "--json"],
      "any", names=["--steps"])
    c("account-steps-0", s, acc_without("--steps", "--steps", "0"), names=["steps", "0"])
    c("account-dataset-0", s, acc_without("--dataset-size", "--dataset-size", "0"), names=["dataset_size", "0"])
    c("account-epsilon-0", s, acc_without("--noise-multiplier", "--epsilon", "0"), names=["epsilon", "0"])
    c("account-epsilon-inf", s, acc_without("--noise-multiplier", "--epsilon", "inf"), names=["epsilon", "inf"])
    c("account-sampling-bogus", s, acc("--sampling", "bogus"), names=["--sampling", "bogus"])
    c("account-group-huge", s, acc("--group-size", "100000"), names=["group_size", "100000"])

    # -- dpjax sweep: names, --show, silo flags ---------------------------------------------------------------
    s = "sweep names/--show"
    c("show-unknown", s, ["sweep", "--show", "no_such_config"], names=["no_such_config"])
    c("show-empty", s, ["sweep", "--show", ""], names=["--show"])
    c("show-path-escape", s, ["sweep", "--show", "../../pyproject"], names=["../../pyproject"])
    c("show-with-suffix", s, ["sweep", "--show", "dp_sgd_adam_mlp.toml"], "any", names=["dp_sgd_adam_mlp.toml"])
    c("show-ok", s, ["sweep", "--show", "dp_sgd_adam_mlp"], "answer", check=lambda o: 'algorithm = "dp-sgd"' in o)
    c("show-upper", s, ["sweep", "--show", "DP_SGD_ADAM_MLP"], "any", names=["DP_SGD_ADAM_MLP"])
    c("show-with-config", s, ["sweep", "--show", "dp_sgd_adam_mlp", "dp_ftrl_tree"], names=["--show"])
    c("show-with-out", s, ["sweep", "--show", "dp_sgd_adam_mlp", "--out", "{tmp}/o"], names=["--show", "--out"])
    c("show-with-list", s, ["sweep", "--show", "dp_sgd_adam_mlp", "--list"], names=["--show", "--list"])
    c("show-directory", s, ["sweep", "--show", "{tmp}"], names=["--show"])
    c("sweep-unknown-name", s, ["sweep", "no_such_config", "--out", "{tmp}/o"], names=["no_such_config"])
    c("sweep-name-with-dash", s, ["sweep", "dp-sgd-adam-mlp", "--out", "{tmp}/o"], "any", names=["dp-sgd-adam-mlp"])
    c("sweep-no-config", s, ["sweep", "--out", "{tmp}/o"], names=["config"])
    c("sweep-no-out", s, ["sweep", "dp_sgd_adam_mlp"], names=["--out"])
    c("sweep-list-extra", s, ["sweep", "--list", "dp_sgd_adam_mlp"], names=["--list"])
    c("sweep-out-is-file", s, ["sweep", "{tmp}/c.toml", "--out", "{tmp}/c.toml"], names=["c.toml"],
      files={"c.toml": TINY})
    s = "sweep flags"
    for cid, flags, nm in [
        ("silo-devices-0", ["--silo-devices", "0"], ["silo-devices", "0"]),
        ("silo-devices-neg", ["--silo-devices", "-1"], ["silo-devices", "-1"]),
        ("silo-devices-abc", ["--silo-devices", "abc"], ["silo-devices", "abc"]),
        ("silo-devices-2", ["--silo-devices", "2"], ["silo-devices", "2"]),
        ("silo-devices-1.5", ["--silo-devices", "1.5"], ["silo-devices", "1.5"]),
        ("silo-devices-list", ["--silo-devices", "cpu:0"], ["silo-devices", "cpu:0"]),
        ("silo-block-0", ["--silo-devices", "1", "--silo-compute", "blocks", "--silo-block", "0"],
         ["silo-block", "0"]),
        ("silo-block-no-devices", ["--silo-block", "2"], ["silo-block"]),
        ("silo-block-not-blocks", ["--silo-devices", "1", "--silo-block", "2"], ["silo-block"]),  # valid: "any"
        ("silo-compute-no-devices", ["--silo-compute", "blocks"], ["silo-compute"]),
        ("silo-block-over-silos", ["--silo-devices", "1", "--silo-compute", "blocks", "--silo-block", "99"],
         ["silo-block", "99"]),
        ("chunk-size-0", ["--chunk-size", "0"], ["chunk-size", "0"]),
        ("chunk-size-neg", ["--chunk-size", "-1"], ["chunk-size", "-1"]),
        ("vmap-width-0", ["--vmap-width", "0"], ["vmap-width", "0"]),
        ("max-runs-neg", ["--max-runs", "-1"], ["max-runs", "-1"]),
        ("max-data-0", ["--max-data-mb", "0"], ["max-data-mb", "0"]),
        ("max-data-nan", ["--max-data-mb", "nan"], ["max-data-mb", "nan"]),
        ("process-index-eq-count", ["--process-index", "2", "--process-count", "2"], ["process-index", "2"]),
        ("process-count-0", ["--process-count", "0"], ["process-count", "0"]),
        ("process-index-neg", ["--process-index", "-1", "--process-count", "2"], ["process-index", "-1"]),
        ("process-index-alone", ["--process-index", "1"], ["process-index"]),
        ("max-chunks-0", ["--max-chunks", "0"], ["max-chunks", "0"]),
        ("init-timeout-neg", ["--init-timeout", "-5"], ["init-timeout", "-5"]),
        ("num-processes-no-distributed", ["--num-processes", "2"], ["num-processes"]),
    ]:
        C.append(sweep_file(cid, TINY, *flags, surface=s))
        C[-1].names = tuple(nm)
        if cid == "silo-block-not-blocks":  # silo_block under "exact" is a valid layout (blocks on the exact path)
            C[-1].expect = "any"
    s = "sweep toml"
    for cid, text, nm in [
        ("toml-silo-devices-0", tiny_with("silo_devices = 0"), ["silo_devices", "0"]),
        ("toml-silo-devices-str", tiny_with('silo_devices = "gpu"'), ["silo_devices", "gpu"]),
        ("toml-silo-devices-list", tiny_with("silo_devices = [0, 0]"), ["silo_devices"]),
        ("toml-silo-devices-2", tiny_with("silo_devices = 2"), ["silo_devices", "2"]),
        ("toml-silo-devices-bool", tiny_with("silo_devices = true"), ["silo_devices", "true"]),
        ("toml-silo-block-0", tiny_with('silo_devices = 1\nsilo_compute = "blocks"\nsilo_block = 0'),
         ["silo_block", "0"]),
        ("toml-silo-compute-bogus", tiny_with('silo_devices = 1\nsilo_compute = "fast"'), ["silo_compute", "fast"]),
        ("toml-run-unknown-key", tiny_with("colour = 1"), ["colour"]),
        ("toml-bandmf-bands-0", bmf(extra="bands = 0"), ["bands", "0"]),
        ("toml-bandmf-bands-over", bmf(extra="bands = 1000"), ["bands", "1000"]),
        ("toml-bandmf-bands-float", bmf(extra="bands = 2.5"), ["bands", "2.5"]),
        ("toml-bandmf-bands-over-sep", bmf(extra="bands = 6\nnum_bins = 4"), ["bands", "6"]),  # unset num_bins = bands
        ("toml-bandmf-poisson", bmf(sampling="poisson"), ["sampling", "poisson"]),
        ("toml-bandmf-coeffs-mismatch", bmf(extra="bands = 3\nband_coeffs = [1.0, 0.5]"), ["band_coeffs", "bands"]),
        ("toml-bandmf-coeffs-zero", bmf(extra="band_coeffs = [0.0, 0.5]"), ["band_coeffs", "0"]),
        ("toml-bandmf-order-bogus", bmf(extra='order = "sorted"'), ["order", "sorted"]),
        ("toml-noise-pink", bmf(noise="pink"), ["noise", "pink"]),
        ("toml-gaussian-bands", bmf(noise="gaussian", sampling="without-replacement", extra="bands = 2"),
         ["bands", "2"]),
        ("toml-bandmf-rounds-1e9", bmf(rounds=1000000000), ["num_rounds", "1000000000"]),
        ("toml-uls-unit-record", ULS.format(rounds=4, q=0.1, unit="record", k=2), ["unit", "record"]),
        ("toml-uls-k-0", ULS.format(rounds=4, q=0.1, unit="user", k=0), ["records_per_user", "0"]),
        ("toml-uls-q-1.5", ULS.format(rounds=4, q=1.5, unit="user", k=1), ["sampling_rate", "1.5"]),
        ("toml-uls-q-0", ULS.format(rounds=4, q=0.0, unit="user", k=1), ["sampling_rate", "0"]),
        ("toml-uls-rounds-1e12", ULS.format(rounds=10**12, q=0.1, unit="user", k=1), ["num_rounds"]),
        ("toml-ftrl-rounds-1e9", TINY.replace('algorithm = "isrl-mbsgd"', 'algorithm = "dp-ftrl"').replace(
            "num_rounds = 6", "num_rounds = 1000000000").replace('sampling = "without-replacement"\n', ""),
         ["num_rounds", "1000000000"]),  # (dp-ftrl has no static sampling)
    ]:
        C.append(Case(cid, s, "cli", ["sweep", "{tmp}/c.toml", "--out", "{tmp}/out", "--quiet"], "refuse",
                      tuple(nm), files={"c.toml": text}))

    # -- dpjax audit: flags that belong to another audit, bounds ----------------------------------------------
    s = "audit flags"
    A = ["audit", "--quiet"]
    TR = [*A, "training", "--family", "isrl-mbsgd", "--mutant", "none", "--canaries", "1000"]
    for cid, argv, nm in [
        ("audit-unknown", [*A, "bogus-mech"], ["bogus-mech"]),
        ("audit-nothing", [*A], ["mechanism"]),
        ("audit-all-and-one", [*A, "--all", "dp-sgd"], ["--all"]),
        ("audit-runs-0", [*A, "dp-sgd", "--runs", "0"], ["--runs", "0"]),
        ("audit-runs-neg", [*A, "dp-sgd", "--runs", "-5"], ["--runs", "-5"]),
        ("audit-runs-1e8", [*A, "dp-sgd", "--runs", "100000000"], ["--runs", "100000000"]),
        ("audit-runs-abc", [*A, "dp-sgd", "--runs", "abc"], ["--runs", "abc"]),
        ("audit-runs-odd", [*A, "dp-sgd", "--runs", "3"], ["--runs", "3"]),
        ("audit-seed-neg", [*A, "dp-sgd", "--seed", "-1"], ["--seed", "-1"]),
        ("audit-seed-2-32", [*A, "dp-sgd", "--seed", "4294967296"], ["--seed", "4294967296"]),
        ("audit-conf-0", [*A, "dp-sgd", "--confidence", "0"], ["--confidence", "0"]),
        ("audit-conf-1", [*A, "dp-sgd", "--confidence", "1"], ["--confidence", "1"]),
        ("audit-conf-nan", [*A, "dp-sgd", "--confidence", "nan"], ["--confidence", "nan"]),
        ("audit-conf-pct", [*A, "dp-sgd", "--confidence", "95"], ["--confidence", "95"]),
        ("audit-ftrl-family", [*A, "dp-ftrl", "--family", "isrl-mbsgd"], ["--family"]),
        ("audit-fedavg-mutant", [*A, "dp-fedavg", "--mutant", "no-clip"], ["--mutant"]),
        ("audit-dpsgd-canaries", [*A, "dp-sgd", "--canaries", "10"], ["--canaries"]),
        ("audit-dpsgd-rounds", [*A, "dp-sgd", "--rounds", "3"], ["--rounds"]),
        ("audit-dpsgd-noise", [*A, "dp-sgd", "--noise-multiplier", "2"], ["--noise-multiplier"]),
        ("audit-dpsgd-delta", [*A, "dp-sgd", "--delta", "1e-6"], ["--delta"]),
        ("audit-uls-family", [*A, "user-level-dpsgd-uls", "--family", "dp-scaffold"], ["--family"]),
        ("audit-bandmf-mutant", [*A, "dp-sgd-band-mf", "--mutant", "half-noise"], ["--mutant"]),
        ("audit-all-family", [*A, "--all", "--family", "dp-scaffold"], ["--family"]),
        ("audit-out-is-file", [*A, "dp-sgd", "--out", "{tmp}/f.txt"], ["f.txt"]),
        ("audit-training-runs", [*TR, "--runs", "5"], ["--runs"]),
        ("audit-training-confidence", [*TR, "--confidence", "0"], ["--confidence", "0"]),
        ("audit-training-rounds-0", [*TR, "--rounds", "0"], ["--rounds", "0"]),
        ("audit-training-rounds-1e9", [*TR, "--rounds", "1000000000"], ["--rounds", "1000000000"]),
        ("audit-training-canaries-0", [*TR[:-1], "0"], ["--canaries", "0"]),
        ("audit-training-canaries-neg", [*TR[:-1], "-1"], ["--canaries", "-1"]),
        ("audit-training-canaries-1e12", [*TR[:-1], "1000000000000"], ["--canaries", "1000000000000"]),
        ("audit-training-noise-0", [*TR, "--noise-multiplier", "0"], ["--noise-multiplier", "0"]),
        ("audit-training-noise-nan", [*TR, "--noise-multiplier", "nan"], ["--noise-multiplier", "nan"]),
        ("audit-training-delta-0", [*TR, "--delta", "0"], ["--delta", "0"]),
        ("audit-training-delta-half", [*TR, "--delta", "0.5"], ["--delta", "0.5"]),
        ("audit-training-and-mech", [*TR, "dp-sgd"], ["training", "dp-sgd"]),
        ("audit-training-family-bogus", [*A, "training", "--family", "bogus"], ["--family", "bogus"]),
        ("audit-training-all", [*A, "training", "--all"], ["--all"]),
    ]:
        c(cid, s, argv, names=nm)

    # -- dpjax reproduce shuffling-gap / user-level-dpsgd flags -----------------------------------------------
    s = "reproduce flags"
    for fig in ("shuffling-gap", "user-level-dpsgd"):
        R = ["reproduce", fig, "--quiet", "--out", "{tmp}/r", "--data-dir", "{tmp}/nodata"]
        short = "gap" if fig == "shuffling-gap" else "uls"
        for cid, extra, nm in [
            ("construction-authors", ["--construction", "authors"], ["--construction", "authors"]),
            ("silo-devices-2", ["--silo-devices", "2"], ["--silo-devices"]),
            ("silo-block", ["--silo-block", "2"], ["--silo-block"]),
            ("silo-compute", ["--silo-compute", "blocks"], ["--silo-compute"]),
            ("seed-neg", ["--seed", "-1"], ["--seed", "-1"]),
            ("seed-abc", ["--seed", "abc"], ["--seed", "abc"]),
            ("seed-2-32", ["--seed", "4294967296"], ["--seed", "4294967296"]),
            ("report-only-empty", ["--report-only"], ["--report-only"]),
            ("report-only-quick", ["--report-only", "--quick"], ["--report-only"]),
            ("distributed", ["--distributed"], ["--distributed"]),
            ("num-processes", ["--num-processes", "2"], ["--num-processes"]),
            ("init-timeout-neg", ["--init-timeout", "-1"], ["--init-timeout", "-1"]),
        ]:
            c(f"{short}-{cid}", s, [*R, *extra], names=nm)
    c("gap-out-is-file", s, ["reproduce", "shuffling-gap", "--quiet", "--out", "{tmp}/f.txt"], names=["f.txt"])
    c("uls-no-data", s, ["reproduce", "user-level-dpsgd", "--quick", "--quiet", "--out", "{tmp}/r", "--data-dir",
                         "{tmp}/nodata"], names=["nodata"])
    c("reproduce-unknown", s, ["reproduce", "shuffling-gaps", "--quiet"], names=["shuffling-gaps"])
    c("reproduce-list-and-fig", s, ["reproduce", "--list", "shuffling-gap"], "any", names=["--list"])
    return C


# ----------------------------------------------------------------------------- API cases
def api_cases() -> list[Case]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    C = []

    def a(cid, surface, fn, expect="refuse", names=(), check=None):
        C.append(Case(cid, surface, "api", fn, expect, tuple(names), check))

    # -- shuffling's three numbers ----------------------------------------------------------------------------
    from dpjax.accounting import shuffle_gap as sg

    def gap(**k):
        args = dict(noise_multiplier=1.0, batch_size=100, dataset_size=10000, epochs=1, delta=1e-5)
        return sg.shuffle_gap(**{**args, **k})

    s = "shuffle_gap"
    for cid, k, nm in [
        ("noise-0", dict(noise_multiplier=0.0), ["noise_multiplier", "0"]),
        ("noise-neg", dict(noise_multiplier=-1.0), ["noise_multiplier", "-1"]),
        ("noise-nan", dict(noise_multiplier=math.nan), ["noise_multiplier", "nan"]),
        ("noise-inf", dict(noise_multiplier=math.inf), ["noise_multiplier", "inf"]),
        ("batch-0", dict(batch_size=0), ["batch_size", "0"]),
        ("batch-over-n", dict(batch_size=20000), ["batch_size", "20000"]),
        ("batch-float", dict(batch_size=2.5), ["batch_size", "2.5"]),
        ("epochs-0", dict(epochs=0), ["epochs", "0"]),
        ("epochs-float", dict(epochs=1.5), ["epochs", "1.5"]),
        ("delta-0", dict(delta=0.0), ["delta", "0"]),
        ("delta-1", dict(delta=1.0), ["delta", "1"]),
        ("neighboring-bogus", dict(neighboring="replace"), ["neighboring", "replace"]),
        ("steps-per-epoch-0", dict(steps_per_epoch=0), ["steps_per_epoch", "0"]),
        ("steps-over", dict(steps=101), ["steps", "101"]),
        ("dataset-bool", dict(dataset_size=True), ["dataset_size", "True"]),
    ]:
        a(f"gap-{cid}", s, (lambda k=k: gap(**k)), names=nm)

    def gap_ok(r):
        lb, pois, cert = r.lower_bound.epsilon, r.poisson.epsilon, r.certified.epsilon
        # a lower bound never exceeds the certificate; all three finite and positive at sigma = 1, one epoch
        return all(0 < e < math.inf for e in (lb, pois, cert)) and lb <= cert * (1 + 1e-9)

    a("gap-ok", s, lambda: gap(), "answer", check=gap_ok)
    a("gap-epochs-1e6", s, lambda: gap(epochs=10**6), "any", names=["epochs"])
    a("gap-n-1e15", s, lambda: gap(dataset_size=10**15, batch_size=10**5), "any", names=["dataset_size"])

    # -- user-level DP-SGD accountants ------------------------------------------------------------------------
    from dpjax.accounting import user_dpsgd as ud

    s = "user_dpsgd accounting"
    for cid, fn, nm in [
        ("uls-noise-neg", lambda: ud.uls_dp_event(-1.0, 0.1, 10), ["noise_multiplier", "-1"]),
        ("uls-q-1.5", lambda: ud.uls_dp_event(1.0, 1.5, 10), ["sampling_rate", "1.5"]),
        ("uls-q-nan", lambda: ud.uls_dp_event(1.0, math.nan, 10), ["sampling_rate", "nan"]),
        ("uls-steps-0", lambda: ud.uls_dp_event(1.0, 0.1, 0), ["num_steps", "0"]),
        ("uls-group-0", lambda: ud.uls_dp_event(1.0, 0.1, 10, 0), ["group_size", "0"]),
        ("els-k-0", lambda: ud.els_dp_event(1.0, 0.1, 10, 0), ["records_per_user", "0"]),
        ("els-k-float", lambda: ud.els_dp_event(1.0, 0.1, 10, 2.5), ["records_per_user", "2.5"]),
        ("pmf-k-neg", lambda: ud.binomial_pmf(-1, 0.5), ["k", "-1"]),
        ("pmf-k-1e9", lambda: ud.binomial_pmf(10**9, 0.5), ["k", "1000000000"]),
        ("els-k-1e9", lambda: ud.els_dp_event(1.0, 0.1, 10, 10**9), ["records_per_user", "1000000000"]),
        ("spec-level-record", lambda: ud.UserDpSgdPrivacy("record", 1.0, 0.1, 10), ["level", "record"]),
        ("spec-field-bogus", lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10, field="noise"), ["field", "noise"]),
        ("spec-interval-neg", lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10, pld_interval=-1.0).epsilon(1e-5),
         ["pld_interval", "-1"]),
        ("spec-delta-0", lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).epsilon(0.0), ["delta", "0"]),
        ("spec-accountant-bogus", lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).epsilon(1e-5, "magic"),
         ["accountant", "magic"]),
        ("calibrate-target-0", lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).calibrate(0.0, 1e-5),
         ["target_epsilon", "0"]),
        ("event-accountant", lambda: ud.epsilon_of_event(ud.uls_dp_event(1.0, 0.1, 10), 1e-5, "gdp"),
         ["accountant", "gdp"]),
        ("event-interval-0", lambda: ud.epsilon_of_event(ud.uls_dp_event(1.0, 0.1, 10), 1e-5, "pld", 0.0),
         ["pld_interval", "0"]),
    ]:
        a(cid, s, fn, names=nm)
    a("uls-eps-ok", s, lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).epsilon(1e-5), "answer",
      check=lambda r: 0 < r.epsilon < 10)
    a("els-ge-uls", s, lambda: (ud.UserDpSgdPrivacy("example", 1.0, 0.1, 10, records_per_user=3).epsilon(1e-5).epsilon,
                                ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10).epsilon(1e-5).epsilon), "answer",
      check=lambda t: t[0] > t[1])
    a("uls-steps-1e12", s, lambda: ud.UserDpSgdPrivacy("user", 1.0, 0.1, 10**12).epsilon(1e-5), "any",
      names=["num_steps"])

    # -- truncated Poisson ------------------------------------------------------------------------------------
    from dpjax.accounting import truncated_poisson as tp
    from dpjax.primitives import sampling_truncated as st

    s = "truncated poisson"
    for cid, fn, nm in [
        ("prob-n-0", lambda: tp.truncation_probability(0, 0.1, 5), ["dataset_size", "0"]),
        ("prob-q-0", lambda: tp.truncation_probability(100, 0.0, 5), ["sampling_rate", "0"]),
        ("prob-cap-0", lambda: tp.truncation_probability(100, 0.1, 0), ["capacity", "0"]),
        ("report-cap-tiny", lambda: tp.truncated_poisson_report(1.0, 0.1, 1000, 50, 100, 1e-5), ["capacity", "50"]),
        ("report-delta-0", lambda: tp.truncated_poisson_report(1.0, 0.1, 1000, 200, 100, 0.0), ["delta", "0"]),
        ("report-cap-over-n", lambda: tp.truncated_poisson_report(1.0, 0.1, 1000, 5000, 100, 1e-5),
         ["capacity", "5000"]),
        ("sampler-batch-0", lambda: st.TruncatedPoisson(0, 0.1, 10), ["batch_size", "0"]),
        ("sampler-q-1.5", lambda: st.TruncatedPoisson(10, 1.5, 10), ["sampling_rate", "1.5"]),
        ("sampler-cap-0", lambda: st.TruncatedPoisson(10, 0.1, 0), ["capacity", "0"]),
        ("sampler-cap-below-batch", lambda: st.TruncatedPoisson(10, 0.1, 3), ["capacity", "3"]),
        ("sampler-validate", lambda: st.TruncatedPoisson(10, 0.1, 50).validate(20, 10), ["capacity", "50"]),
        ("sample-size-over-nmax", lambda: st.truncated_poisson_sample(jax.random.key(0), 20, 10, 0.5, 5),
         ["size", "20"]),
        ("sample-cap-over-nmax", lambda: st.truncated_poisson_sample(jax.random.key(0), 10, 10, 0.5, 50),
         ["capacity", "50"]),
        ("sample-rate-neg", lambda: st.truncated_poisson_sample(jax.random.key(0), 10, 10, -0.5, 5),
         ["rate", "-0.5"]),
        ("default-cap-neg", lambda: st.default_capacity(-1.0, 10), ["expected_batch_size", "-1"]),
        ("default-cap-tail-0", lambda: st.default_capacity(10.0, 10, 0.0), ["tail", "0"]),
        ("default-cap-tail-2", lambda: st.default_capacity(10.0, 10, 2.0), ["tail", "2"]),
        ("default-cap-rounds-neg", lambda: st.default_capacity(10.0, -5), ["num_rounds", "-5"]),
    ]:
        a(cid, s, fn, names=nm)
    a("default-cap-ok", s, lambda: st.default_capacity(100.0, 1000), "answer", check=lambda b: 100 < b < 200)

    # -- BandMF -----------------------------------------------------------------------------------------------
    from dpjax.accounting import band_mf as bm
    from dpjax.algorithms.dp_sgd import DpSgd
    from dpjax.problems import LinearRegression

    def bmf_algo(**k):
        args = dict(problem=LinearRegression(3), num_rounds=8, batch_size=4, sampling="one-pass",
                    neighboring="replace-one", noise="band-mf")
        return DpSgd(**{**args, **k})

    s = "band-mf"
    for cid, fn, nm in [
        ("sens-rounds-0", lambda: bm.separated_sensitivity(0, 1, 1), ["num_rounds", "0"]),
        ("sens-sep-0", lambda: bm.separated_sensitivity(10, 0, 1), ["min_sep", "0"]),
        ("sens-bands-over-sep", lambda: bm.separated_sensitivity(10, 2, 5), ["bands", "5"]),
        ("sens-bands-0", lambda: bm.separated_sensitivity(10, 2, 0), ["bands", "0"]),
        ("algo-bands-0", lambda: bmf_algo(bands=0), ["bands", "0"]),
        ("algo-bands-neg", lambda: bmf_algo(bands=-1), ["bands", "-1"]),
        ("algo-bands-bool", lambda: bmf_algo(bands=True), ["bands", "True"]),
        ("algo-bands-over-rounds", lambda: bmf_algo(bands=9), ["bands", "9"]),
        ("algo-coeffs-zero", lambda: bmf_algo(band_coeffs=(0.0, 1.0)), ["band_coeffs", "0"]),
        ("algo-coeffs-nan", lambda: bmf_algo(band_coeffs=(math.nan,)), ["nan"]),
        ("algo-coeffs-empty", lambda: bmf_algo(band_coeffs=()), ["band_coeffs"]),
        ("algo-coeffs-mismatch", lambda: bmf_algo(bands=3, band_coeffs=(1.0, 0.5)), ["band_coeffs", "bands=3"]),
        ("algo-coeffs-str", lambda: bmf_algo(band_coeffs="1,0.5"), ["band_coeffs"]),
        ("algo-poisson", lambda: bmf_algo(sampling="poisson"), ["sampling", "poisson"]),
        ("algo-add-remove", lambda: bmf_algo(neighboring="add-remove"), ["neighboring", "add-remove"]),
        ("algo-order-bogus", lambda: bmf_algo(order="sorted"), ["order", "sorted"]),
        ("algo-gaussian-bands", lambda: bmf_algo(noise="gaussian", sampling="without-replacement", bands=2),
         ["bands", "2"]),
        ("algo-noise-bogus", lambda: bmf_algo(noise="pink"), ["noise", "pink"]),
        ("algo-rounds-1e9", lambda: bmf_algo(num_rounds=10**9, bands=4), ["num_rounds", "1000000000"]),
        ("algo-rounds-0", lambda: bmf_algo(num_rounds=0), ["num_rounds", "0"]),
    ]:
        a(cid, s, fn, names=nm)

    # -- ghost clipping: masks and dtypes ---------------------------------------------------------------------
    from dpjax.primitives import ghost_clipped_sum, nnx_loss, per_example_clipped_sum
    import flax.linen as nn

    lin = nn.Dense(2)
    params = lin.init(jax.random.key(0), jnp.zeros(3))["params"]

    def loss(p, x, y):
        return jnp.sum((lin.apply({"params": p}, x) - y) ** 2)

    X = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)), jnp.float32)
    Y = jnp.zeros((4, 2), jnp.float32)

    def g(x=X, y=Y, clip=1.0, mask=None, **k):
        return ghost_clipped_sum(loss, params, x, y, clip, mask, **k)

    def agrees(x=X, mask=None, clip=1.0, rtol=1e-4):
        def fn():
            fast = g(x, clip=clip, mask=mask)
            ref = per_example_clipped_sum(loss, params, jnp.asarray(x, jnp.float32), Y, clip, mask)
            return fast, ref
        return fn

    def close(t, rtol=1e-3):
        fast, ref = t
        fa = jax.tree_util.tree_leaves(fast.total)
        ra = jax.tree_util.tree_leaves(ref.total)
        return all(np.all(np.isfinite(np.asarray(u))) and np.allclose(np.asarray(u, np.float32), np.asarray(w),
                                                                        rtol=rtol, atol=1e-3) for u, w in zip(fa, ra))

    s = "ghost clipping"
    for cid, fn, nm in [
        ("mask-neg", lambda: g(mask=jnp.array([1.0, -1.0, 1.0, 1.0])), ["mask[1]", "-1"]),
        ("mask-nan", lambda: g(mask=jnp.array([1.0, jnp.nan, 1.0, 1.0])), ["mask[1]", "nan"]),
        ("mask-inf", lambda: g(mask=jnp.array([1.0, 1.0, jnp.inf, 1.0])), ["mask[2]", "inf"]),
        ("mask-short", lambda: g(mask=jnp.ones(3)), ["mask", "(3,)"]),
        ("mask-2d", lambda: g(mask=jnp.ones((4, 1))), ["mask", "(4, 1)"]),
        ("mask-str", lambda: g(mask=np.array(["a", "b", "c", "d"])), ["mask", "dtype"]),
        ("mask-complex", lambda: g(mask=np.ones(4, np.complex64)), ["mask", "complex"]),
        ("mask-int-neg", lambda: g(mask=np.array([1, 0, -2, 1])), ["mask[2]", "-2"]),
        ("x-y-mismatch", lambda: g(y=jnp.zeros((5, 2))), ["x", "y", "4", "5"]),
        ("x-scalar", lambda: g(x=jnp.float32(1.0)), ["x", "scalar"]),
        ("clip-neg", lambda: g(clip=-1.0), ["clip_norm", "-1"]),
        ("clip-nan", lambda: g(clip=math.nan), ["clip_norm", "nan"]),
        ("clip-str", lambda: g(clip="1.0"), ["clip_norm", "1.0"]),
        ("neighboring-bogus", lambda: g(neighboring="swap"), ["neighboring", "swap"]),
        ("x-complex", lambda: g(x=X.astype(jnp.complex64)), ["x", "complex"]),
    ]:
        a(cid, s, fn, names=nm)
    a("mask-bool", s, agrees(mask=jnp.array([True, False, True, True])), "answer", check=close)
    a("mask-multiplicity-2", s, agrees(mask=jnp.array([2.0, 0.0, 1.0, 1.0])), "answer", check=close)
    a("mask-int", s, agrees(mask=np.array([1, 0, 1, 1], np.int32)), "answer", check=close)
    a("x-float16", s, agrees(x=X.astype(jnp.float16)), "answer", check=lambda t: close(t, 2e-2))
    a("x-bfloat16", s, agrees(x=X.astype(jnp.bfloat16)), "answer", check=lambda t: close(t, 5e-2))
    a("x-float64-np", s, agrees(x=np.asarray(X, np.float64)), "answer", check=close)
    a("x-int32", s, agrees(x=jnp.asarray(np.arange(12).reshape(4, 3) % 3, jnp.int32)), "any", names=["x", "int32"],
      check=close)
    a("x-nan-row", s, agrees(x=X.at[1, 0].set(jnp.nan)), "answer", check=close)
    a("x-nan-row-masked", s, agrees(x=X.at[1, 0].set(jnp.nan), mask=jnp.array([1.0, 0.0, 1.0, 1.0])), "answer",
      check=close)
    a("clip-0", s, lambda: g(clip=0.0), "any", names=["clip_norm", "0"],
      check=lambda r: all(np.all(np.asarray(u) == 0) for u in jax.tree_util.tree_leaves(r.total)))

    # -- NNX models -------------------------------------------------------------------------------------------
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs, bn=False, dropout=False):
            self.l1 = nnx.Linear(3, 4, rngs=rngs)
            self.bn = nnx.BatchNorm(4, rngs=rngs) if bn else None
            self.do = nnx.Dropout(0.5, rngs=rngs) if dropout else None
            self.l2 = nnx.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            h = self.l1(x)
            if self.bn is not None:
                h = self.bn(h[None])[0]
            if self.do is not None:
                h = self.do(h)
            return self.l2(jax.nn.relu(h))

    def nloss(m, x, y):
        return jnp.sum((m(x) - y) ** 2)

    def nnx_run(bn=False, dropout=False, require_fast=True, eval_mode=False, mask=None, x=X):
        m = Net(nnx.Rngs(0), bn, dropout)
        if eval_mode:
            m.eval()
        lf, p = nnx_loss(m, nloss)
        fast = ghost_clipped_sum(lf, p, x, Y, 1.0, mask, require_fast=require_fast)
        ref = per_example_clipped_sum(lf, p, x, Y, 1.0, mask)
        return fast, ref

    s = "nnx"
    a("nnx-not-module", s, lambda: nnx_loss(lin, nloss), names=["model", "Dense"])
    a("nnx-params-filter-empty", s, lambda: ghost_clipped_sum(*nnx_loss(Net(nnx.Rngs(0)), nloss, nnx.BatchStat), X, Y,
                                                               1.0), "any", names=["params"])
    a("nnx-batchnorm-train-fast", s, lambda: nnx_run(bn=True), names=["BatchNorm", "use_running_average"])
    a("nnx-batchnorm-train-fallback", s, lambda: nnx_run(bn=True, require_fast=False),
      names=["BatchNorm", "use_running_average"])
    a("nnx-batchnorm-eval", s, lambda: nnx_run(bn=True, eval_mode=True, require_fast=False), "answer", check=close)
    a("nnx-dropout-train", s, lambda: nnx_run(dropout=True, require_fast=False), "any", names=["Dropout"])
    a("nnx-ok", s, lambda: nnx_run(), "answer", check=close)
    a("nnx-mask-neg", s, lambda: nnx_run(mask=jnp.array([1.0, -1.0, 1.0, 1.0])), names=["mask[1]", "-1"])
    a("nnx-nan-row", s, lambda: nnx_run(x=X.at[2, 1].set(jnp.nan)), "answer", check=close)
    a("nnx-loss-not-callable", s, lambda: ghost_clipped_sum(nnx_loss(Net(nnx.Rngs(0)), 3)[0],
                                                            nnx_loss(Net(nnx.Rngs(0)), nloss)[1], X, Y, 1.0),
      names=["loss"])

    # -- silo_devices -----------------------------------------------------------------------------------------
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(10, 3)).astype(np.float32) for _ in range(2)]
    ys = [rng.integers(0, 2, 10).astype(np.float32) for _ in range(2)]

    def srun(devs, **k):
        algo = NoisyMbSgd(LogisticRegression(3), num_rounds=2, batch_size=4, availability=FixedAvailability(2))
        return run(algo, SiloData.from_silos(xs, ys), MbSgdHParams.create(0.1), jax.random.key(0),
                   silo_devices=devs, **k)

    s = "silo_devices"
    dev = jax.devices()[0]
    for cid, devs, nm in [
        ("int-0", 0, ["silo_devices", "0"]),
        ("int-neg", -1, ["silo_devices", "-1"]),
        ("int-2", 2, ["silo_devices", "2"]),
        ("str-cpu", "cpu:0", ["silo_devices", "cpu:0"]),
        ("list-str", ["cpu:0"], ["silo_devices", "cpu:0"]),
        ("dup", [dev, dev], ["silo_devices"]),
        ("empty", [], ["silo_devices", "[]"]),
        ("float", 1.5, ["silo_devices", "1.5"]),
        ("bool", True, ["silo_devices", "True"]),
        ("np-int-0", np.int64(0), ["silo_devices", "0"]),
    ]:
        a(f"silo-devices-{cid}", s, (lambda d=devs: srun(d)), names=nm)
    a("silo-devices-1", s, lambda: srun(1), "answer", check=lambda r: r is not None)
    a("silo-block-0", s, lambda: srun(1, silo_compute="blocks", silo_block=0), names=["silo_block", "0"])
    a("silo-compute-bogus", s, lambda: srun(1, silo_compute="fast"), names=["silo_compute", "fast"])
    a("silo-block-no-devices", s, lambda: srun(None, silo_block=1), "any", names=["silo_block"])

    # -- user_id data, user-level DP-SGD ----------------------------------------------------------------------
    from dpjax.algorithms.user_level_dpsgd import UserLevelDpSgd
    from dpjax.data.users import assign_users, group_by_user, power_law_user_sizes
    from dpjax.engine.users import UserSplit

    ux = rng.normal(size=(12, 3)).astype(np.float32)
    uy = rng.integers(0, 2, 12).astype(np.float32)
    s = "user_id / user-level dpsgd"
    for cid, fn, nm in [
        ("uid-short", lambda: UserSplit.from_user_ids(ux, uy, np.arange(11)), ["user_id", "(11,)"]),
        ("uid-2d", lambda: UserSplit.from_user_ids(ux, uy, np.zeros((12, 1), int)), ["user_id", "(12, 1)"]),
        ("uid-float-nan", lambda: UserSplit.from_user_ids(ux, uy, np.r_[np.zeros(11), np.nan]), ["user_id"]),
        ("uid-max-records-0", lambda: UserSplit.from_user_ids(ux, uy, np.arange(12) % 3, max_records=0),
         ["max_records", "0"]),
        ("uid-max-records-neg", lambda: group_by_user(np.arange(12) % 3, -1), ["max_records", "-1"]),
        ("uid-max-records-float", lambda: group_by_user(np.arange(12) % 3, 1.5), ["max_records", "1.5"]),
        ("uid-empty", lambda: group_by_user(np.array([], np.int64)), ["user_id"]),
        ("power-users-0", lambda: power_law_user_sizes(100, 0), ["num_users", "0"]),
        ("power-users-over", lambda: power_law_user_sizes(100, 200), ["num_users", "200"]),
        ("power-exp-neg", lambda: power_law_user_sizes(100, 5, -1.0), ["exponent", "-1"]),
        ("power-exp-nan", lambda: power_law_user_sizes(100, 5, math.nan), ["exponent", "nan"]),
        ("power-exp-inf", lambda: power_law_user_sizes(100, 5, math.inf), ["exponent", "inf"]),
        ("power-min-0", lambda: power_law_user_sizes(100, 5, 1.0, 0, 0), ["min_records", "0"]),
        ("assign-empty", lambda: assign_users([]), ["sizes"]),
        ("assign-zero", lambda: assign_users([0, 3]), ["sizes"]),
        ("assign-float", lambda: assign_users([2.5, 1]), ["sizes"]),
        ("split-users-0", lambda: UserSplit.power_law(ux, uy, 0), ["num_users", "0"]),
        ("uls-unit-record", lambda: UserLevelDpSgd(LogisticRegression(3), 4, unit="record"), ["unit", "record"]),
        ("uls-q-0", lambda: UserLevelDpSgd(LogisticRegression(3), 4, sampling_rate=0.0), ["sampling_rate", "0"]),
        ("uls-q-1.5", lambda: UserLevelDpSgd(LogisticRegression(3), 4, sampling_rate=1.5), ["sampling_rate", "1.5"]),
        ("uls-k-0", lambda: UserLevelDpSgd(LogisticRegression(3), 4, records_per_user=0), ["records_per_user", "0"]),
        ("uls-opt-bogus", lambda: UserLevelDpSgd(LogisticRegression(3), 4, optimizer="lion9"), ["optimizer", "lion9"]),
        ("uls-cap-0", lambda: UserLevelDpSgd(LogisticRegression(3), 4, capacity=0), ["capacity", "0"]),
        ("uls-batch-0", lambda: UserLevelDpSgd(LogisticRegression(3), 4, batch_size=0), ["batch_size", "0"]),
        ("uls-rounds-0", lambda: UserLevelDpSgd(LogisticRegression(3), 0), ["num_rounds", "0"]),
        ("uls-rounds-1e12", lambda: UserLevelDpSgd(LogisticRegression(3), 10**12), ["num_rounds", "1000000000000"]),
    ]:
        a(cid, s, fn, names=nm)
    a("uid-strings", s, lambda: UserSplit.from_user_ids(ux, uy, np.array(list("aabbccddeeff"))), "any",
      names=["user_id"])
    a("uid-negative-ok", s, lambda: UserSplit.from_user_ids(ux, uy, np.arange(12) % 3 - 5), "answer",
      check=lambda u: u.num_users == 3)
    a("power-ok", s, lambda: power_law_user_sizes(100, 5), "answer", check=lambda z: int(z.sum()) == 100)

    # -- SiloData: issue #39's silent accepts -----------------------------------------------------------------
    s = "silo data"
    a("silos-1d-features", s, lambda: SiloData.from_silos([np.ones(5, np.float32)], [np.zeros(5)]), "any",
      names=["xs[0]"])
    a("silos-int-dtype-truncates", s, lambda: SiloData.from_silos([np.full((5, 2), 0.5, np.float32)], [np.zeros(5)],
                                                                 dtype=jnp.int32), names=["dtype", "int32"])
    a("silos-label-dtype-bogus", s, lambda: SiloData.from_silos([np.ones((5, 2))], [np.zeros(5)],
                                                               label_dtype="colour"), names=["label_dtype", "colour"])
    return C


# ----------------------------------------------------------------------------- classification
def _one_error_line(err: str):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    errs = [ln for ln in lines if "error:" in ln]
    noise = [ln for ln in lines if "error:" not in ln and not ln.startswith("usage:") and not ln.startswith(" ")]
    return errs, noise


def classify_cli(case: Case, rc, out, err, maxrss, elapsed) -> tuple[str, str]:
    if rc is None:
        return "hang", f"> {TIME_LIMIT:.0f} s"
    if maxrss > RSS_LIMIT or "MemoryError" in err or rc in (-9, 137):
        return "memory", f"maxrss {maxrss / 2**20:.0f} MB rc={rc}"
    if "Traceback" in err:
        last = err.strip().splitlines()[-1]
        return "traceback", last[:160]
    if rc == 0:
        if case.expect == "refuse":
            return "silent accept", (out.strip().splitlines() or [""])[0][:160]
        ok = case.check is None or case.check(out)
        return ("correct answer", "") if ok else ("wrong answer", out.strip()[:160])
    errs, _ = _one_error_line(err)
    msg = errs[0] if errs else err.strip()[:160]
    if case.expect == "answer":
        return "wrong answer", f"rc={rc}: {msg[:160]}"
    if rc != 2 or len(errs) != 1:
        return "unclear", f"rc={rc}, {len(errs)} error lines: {err.strip()[:200]}"
    if not names_all(msg, case.names):
        return "unclear", msg[:200]
    return "clean refusal", msg[:160]


class _Hang(Exception):
    pass


def _alarm(*_):
    raise _Hang()


def classify_api(case: Case) -> tuple[str, str]:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        try:
            result = case.payload()
            if hasattr(result, "block_until_ready"):
                result.block_until_ready()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Hang:
        return "hang", f"> {TIME_LIMIT:.0f} s"
    except MemoryError:
        return "memory", "MemoryError"
    except (ValueError, TypeError) as e:  # dpjax's refusals (flax/jax errors subclass these too: checked below)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if after - before > RSS_LIMIT:
            return "memory", f"+{(after - before) / 2**20:.0f} MB then {type(e).__name__}"
        msg = f"{type(e).__name__}: {e}".replace("\n", " ")
        mod = type(e).__module__
        if case.expect == "answer":
            return "wrong answer", msg[:200]
        if not (mod == "builtins" or mod.startswith("dpjax")):
            return "traceback", f"{mod}.{msg}"[:200]
        if "object is not iterable" in msg or "unsupported operand" in msg or "not subscriptable" in msg:
            return "traceback", msg[:200]  # a raw Python error escaping from deep inside
        return ("clean refusal", msg[:160]) if names_all(msg, case.names) else ("unclear", msg[:220])
    except Exception as e:  # noqa: BLE001  (anything else escaping is a traceback)
        return "traceback", f"{type(e).__module__}.{type(e).__name__}: {e}".replace("\n", " ")[:220]
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if after - before > RSS_LIMIT:
        return "memory", f"+{(after - before) / 2**20:.0f} MB"
    if case.expect == "refuse":
        return "silent accept", repr(result)[:160]
    try:
        ok = case.check is None or bool(case.check(result))
    except Exception as e:  # noqa: BLE001
        ok, result = False, e
    return ("correct answer", "") if ok else ("wrong answer", repr(result)[:160])


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_cli(case: Case) -> tuple[str, str, float]:
    with tempfile.TemporaryDirectory(prefix="dpjax-battery-") as tmp:
        for name, text in case.files.items():
            pathlib.Path(tmp, name).write_text(text)
        pathlib.Path(tmp, "f.txt").write_text("not a directory\n")
        argv = [a.replace("{tmp}", tmp) for a in case.payload]
        env = {k: v for k, v in os.environ.items() if k != "DPJAX_DATA_DIR"}
        env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO), XDG_CACHE_HOME=f"{tmp}/cache", HOME=tmp)
        t0 = time.monotonic()
        with open(f"{tmp}/.out", "w+") as fo, open(f"{tmp}/.err", "w+") as fe:
            p = subprocess.Popen([sys.executable, "-m", "dpjax.cli", *argv], cwd=tmp, env=env, stdout=fo, stderr=fe,
                                 preexec_fn=_limit, start_new_session=True)
            rc, maxrss = None, 0
            while time.monotonic() - t0 < TIME_LIMIT:
                pid, status, ru = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    rc, maxrss = os.waitstatus_to_exitcode(status), ru.ru_maxrss * 1024
                    p.returncode = rc
                    break
                time.sleep(0.05)
            elapsed = time.monotonic() - t0
            if rc is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read(), fe.read()
        cls, why = classify_cli(case, rc, out, err, maxrss, elapsed)
        return cls, why, elapsed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("cli", "api"))
    ap.add_argument("--jobs", type=int, default=3, help="CLI cases at a time (default 3)")
    ap.add_argument("--match", default="", help="only cases whose id contains this")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case (default: the bad ones)")
    ap.add_argument("--json", help="write every case's class and reason here")
    args = ap.parse_args(argv)
    rows = []
    t0 = time.monotonic()
    if args.only != "api":
        cases = [c for c in cli_cases() if args.match in c.id]
        with cf.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            for case, (cls, why, dt) in zip(cases, pool.map(run_cli, cases)):
                rows.append((case, cls, why, dt))
    if args.only != "cli":
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        for case in (c for c in api_cases() if args.match in c.id):
            t = time.monotonic()
            cls, why = classify_api(case)
            rows.append((case, cls, why, time.monotonic() - t))
    for case, cls, why, dt in rows:
        if args.verbose or cls in BAD:
            print(f"{cls:15s} {case.kind} {case.surface:22s} {case.id:32s} {dt:5.1f}s  {why}")
    counts = collections.Counter((case.kind, cls) for case, cls, _, _ in rows)
    print(f"\n{'class':16s} {'CLI':>5s} {'API':>5s} {'total':>6s}")
    for cls in (*BAD, *GOOD):
        c, a = counts[("cli", cls)], counts[("api", cls)]
        print(f"{cls:16s} {c:5d} {a:5d} {c + a:6d}")
    nc = sum(1 for r in rows if r[0].kind == "cli")
    print(f"{'inputs':16s} {nc:5d} {len(rows) - nc:5d} {len(rows):6d}   ({time.monotonic() - t0:.0f} s)")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            [dict(id=c.id, kind=c.kind, surface=c.surface, cls=k, why=w) for c, k, w, _ in rows], indent=1))
    return 1 if any(cls in BAD for _, cls, _, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
