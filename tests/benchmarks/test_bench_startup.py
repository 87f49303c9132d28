"""experiments/benchmarks/bench_startup.py's import-time grouping, on a hand-written ``-X importtime`` log."""

from __future__ import annotations

from tests.benchmarks._bench_module import load_bench

LOG = """import time: self [us] | cumulative | imported package
import time:       100 |        100 |   scipy.special
import time:       400 |        500 | scipy
import time:       200 |       2000 |   dpjax.accounting
import time:      3000 |       5000 | dpjax.engine
import time:        10 |         10 | site
"""


def test_importtime_groups_by_top_level_and_lists_dpjax_modules():
    bench = load_bench("bench_startup")
    roots, dpjax_mods = bench.parse_importtime(LOG)
    assert roots == [("dpjax.engine", 0.005), ("scipy", 0.0005), ("site", 1e-05)]  # nested lines are not roots
    assert dpjax_mods == [("dpjax.engine", 0.005), ("dpjax.accounting", 0.002)]
