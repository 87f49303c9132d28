"""experiments/benchmarks/bench_fl_grid.py's profile summary: an op's self time is its duration less its children's
on the same thread (nested XLA thunks: a while loop holds its body's fusions), summed by name a round; Python frames
(``$...``) and the runtime's executor events are left out, so the shares are of the ops alone."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.benchmarks._bench_module import load_bench


def _trace(tmp_path, events):
    d = tmp_path / "plugins" / "profile" / "run"
    d.mkdir(parents=True)
    with gzip.open(d / "perfetto_trace.json.gz", "wt") as f:
        json.dump({"traceEvents": events}, f)
    return str(tmp_path)


def test_self_times_subtract_children_per_thread(tmp_path):
    bench = load_bench("bench_fl_grid", "bench_fl_grid")
    x = lambda name, ts, dur, tid=1: {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}  # noqa: E731
    events = [x("$python frame", 0, 100), x("ThunkExecutor::Execute", 0, 100),
              x("while.1", 10, 50), x("fusion.a", 12, 20), x("fusion.b", 35, 10),  # the loop's body
              x("fusion.a", 70, 10),  # again, after the loop
              x("while.1", 0, 30, tid=2), x("fusion.b", 5, 30, tid=2),  # another thread: not a child of tid 1's
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1}]
    whole, top = bench.op_self_times(_trace(tmp_path, events), rounds=2)
    got = {name: ms for name, ms, _ in top}
    # microseconds -> ms, over 2 rounds; thread 1's loop holds 20 + 10 of children, thread 2's its whole 30
    assert got["fusion.a"] == pytest.approx((20 + 10) / 2 / 1e3)
    assert got["fusion.b"] == pytest.approx((10 + 30) / 2 / 1e3)
    assert got["while.1"] == pytest.approx(((50 - 30) + (30 - 30)) / 2 / 1e3)
    assert "$python frame" not in got and "ThunkExecutor::Execute" not in got
    assert whole == pytest.approx(sum(got.values())) and sum(f for *_, f in top) == pytest.approx(1.0)
