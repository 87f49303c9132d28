"""Helper of test_sweep.py (run in a fresh process with 8 fake CPU devices):
the same sweep on 8 devices (shard_map over the runs axis) and on 1 device
must store bit-identical tables, and ``run_grid`` over 8 devices must equal it on 1."""

import pathlib
import sys
import tomllib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import jax  # noqa: E402
import pandas as pd  # noqa: E402

from dpjax.sweep import SweepConfig, run_sweep  # noqa: E402
from tests.sweep.conftest import TINY  # noqa: E402

out = pathlib.Path(sys.argv[1])
devices = jax.devices()
assert len(devices) == 8, devices
d = tomllib.loads(TINY)
d["chunk_size"] = 4  # 12 chunks: 8 on the devices in one step, then 4 (+4 idle duplicates)
cfg = SweepConfig.from_dict(d)
sharded = run_sweep(cfg, out / "sharded", devices=devices, progress=False)
single = run_sweep(cfg, out / "single", devices=devices[:1], progress=False)
assert len(sharded.computed_chunks) == len(single.computed_chunks) == 12
pd.testing.assert_frame_equal(sharded.runs, single.runs, check_exact=True)
pd.testing.assert_frame_equal(sharded.evals, single.evals, check_exact=True)
print("IDENTICAL", len(sharded.runs), "runs")

# The programmatic executor: data shared (replicated) across devices, hparams and keys sharded.
import numpy as np  # noqa: E402

from dpjax.engine import run_grid  # noqa: E402
from tests.sweep.test_pipeline_drivers import _tiny_grid  # noqa: E402

algo, train, hps, run_keys, ev, ed, grid = _tiny_grid()
for common in (True, False):  # chunks of 2: 3 or 4 chunks over 8 devices (idle devices padded)
    one = run_grid(algo, train, hps, run_keys, eval_fn=ev, eval_data=ed, chunk_size=2, common_random_numbers=common,
                   devices=devices[:1])
    many = run_grid(algo, train, hps, run_keys, eval_fn=ev, eval_data=ed, chunk_size=2,
                    common_random_numbers=common, devices=devices)
    np.testing.assert_array_equal(one.evals["train_loss"], many.evals["train_loss"])
    np.testing.assert_array_equal(one.diverged_round, many.diverged_round)
print("IDENTICAL run_grid")
