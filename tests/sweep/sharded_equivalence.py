"""Helper of test_sweep.py (run in a fresh process with 8 fake CPU devices):
the same sweep on 8 devices (shard_map over the runs axis) and on 1 device
must store bit-identical tables."""

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
