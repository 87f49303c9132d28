"""Run by tests/sweep/test_silo_sharding_cli.py in a fresh process with 8 host devices: the commands a user types,
with and without ``--silo-devices``, and their stored results compared. Prints one line per case:

* ``sweep MODE devices=N IDENTICAL|DIFFERENT max_rel_diff=...``: ``dpjax sweep`` of an 8-silo config (noise on, so a
  layout-dependent random draw would move the results by the noise, not by float rounding), against the same command
  without the flag (whose chunks are spread over the 8 devices instead);
* ``run per-silo devices=5 ...``: ``dpjax run isrl-mnist-trial`` (25 silos) with ``--silo-devices 5 --silo-compute
  per-silo`` against the unsharded command;
* ``refused FLAGS: MESSAGE``: exit status 2 and the one error line.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import sys
import tempfile

import jax
import numpy as np
import pandas as pd

from dpjax import cli
from dpjax.sweep.store import load_results

CONFIG = """
name = "tiny8"
algorithm = "isrl-mbsgd"
num_rounds = 4
eval_every = 2
seed = 3
chunk_size = 4
[static]
batch_size = 8
sampling = "without-replacement"
[data]
name = "synthetic-logistic"
num_silos = 8
n = 24
dim = 4
n_test = 16
[grid]
learning_rate = [0.1, 0.5]
noise_multiplier = [0.0, 0.5]
clip_norm = ["1*maxnorm"]
repetition = 2
trial = 2
"""

SWEEP_CASES = [("exact", 8, []), ("exact", 2, []), ("per-silo", 8, ["--silo-compute", "per-silo"]),
               ("blocks", 4, ["--silo-compute", "blocks", "--silo-block", "1"])]


def _main(argv) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main(argv)
    return rc, err.getvalue()


def _compare(a: pd.DataFrame, b: pd.DataFrame) -> tuple[bool, float]:
    order = list(a.columns[:2])
    a, b = a.sort_values(order).reset_index(drop=True), b.sort_values(order).reset_index(drop=True)
    assert list(a.columns) == list(b.columns) and len(a) == len(b) and len(a), (a.columns, b.columns)
    num = [c for c in a.columns if pd.api.types.is_float_dtype(a[c])]
    same = a.equals(b)
    diff = max(float(np.max(np.abs(a[c] - b[c]) / np.maximum(np.abs(a[c]), 1e-3))) for c in num)
    return same, diff


def main() -> None:
    assert len(jax.devices()) == 8, jax.devices()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="silo-cli-"))
    config = tmp / "tiny8.toml"
    config.write_text(CONFIG)
    base = ["sweep", str(config), "--quiet"]
    assert _main(base + ["--out", str(tmp / "ref")])[0] == 0
    ref_runs, ref_evals = load_results(tmp / "ref")
    for mode, ndev, extra in SWEEP_CASES:
        out = tmp / f"{mode}-{ndev}"
        rc, err = _main(base + ["--out", str(out), "--silo-devices", str(ndev), *extra])
        assert rc == 0, err
        runs, evals = load_results(out)
        same_runs, d1 = _compare(ref_runs, runs)
        same_evals, d2 = _compare(ref_evals, evals)
        print(f"sweep {mode} devices={ndev} {'IDENTICAL' if same_runs and same_evals else 'DIFFERENT'} "
              f"max_rel_diff={max(d1, d2):.3g}", flush=True)
    # the [run] table of the config does the same as the flags
    (tmp / "table.toml").write_text(CONFIG.replace("[static]", "[run]\nsilo_devices = \"all\"\n[static]"))
    assert _main(["sweep", str(tmp / "table.toml"), "--quiet", "--out", str(tmp / "table")])[0] == 0
    runs, evals = load_results(tmp / "table")
    same = _compare(ref_runs, runs)[0] and _compare(ref_evals, evals)[0]
    print(f"sweep table devices=8 {'IDENTICAL' if same else 'DIFFERENT'}", flush=True)

    task = ["run", "isrl-mnist-trial", "--rounds", "2", "--repetitions", "2", "--learning-rates", "0.1", "1.0",
            "--no-baseline", "--quiet"]
    assert _main(task + ["--out", str(tmp / "task-ref")])[0] == 0
    rc, err = _main(task + ["--out", str(tmp / "task-5"), "--silo-devices", "5", "--silo-compute", "per-silo"])
    assert rc == 0, err
    same, diff = _compare(pd.read_csv(tmp / "task-ref" / "results.csv"), pd.read_csv(tmp / "task-5" / "results.csv"))
    print(f"run per-silo devices=5 {'IDENTICAL' if same else 'DIFFERENT'} max_rel_diff={diff:.3g}", flush=True)

    for flags in (["--silo-devices", "3"], ["--silo-devices", "9"], ["--silo-devices", "8", "--silo-block", "4",
                                                                       "--silo-compute", "blocks"]):
        rc, err = _main(base + ["--out", str(tmp / "refused"), *flags])
        line = [ln for ln in err.splitlines() if ln.startswith("dpjax: error:")]
        assert rc == 2 and len(line) == 1, (rc, err)
        print(f"refused {' '.join(flags)}: {line[0]}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
