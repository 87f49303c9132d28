"""The roofline report (experiments/benchmarks/roofline.py) at its CI size: its table has the promised
columns, and no program beats its floor by more than the tolerance.

The floor is ``max(FLOPs / peak FLOP/s, bytes / peak bytes/s)`` with both peaks measured in the same
process, so ``measured / floor >= 1`` up to (a) timing noise of the peaks on a shared machine (a peak
measured while another job ran is too low, so the floor too high) and (b) XLA's byte count, which adds
every fusion's operands although a small program's operands stay in cache between fusions. Half the floor
is the tolerance: beating it would need a program to run twice as fast as the best copy or matmul the
machine did in the same minute.
"""

from __future__ import annotations

import pytest
import csv
import importlib.util
import math
import pathlib
import sys

import numpy as np

pytestmark = pytest.mark.slow  # minutes of CPU: CI runs it in its -m slow pass

REPO = pathlib.Path(__file__).resolve().parents[2]
TOLERANCE = 0.5


def _roofline():
    spec = importlib.util.spec_from_file_location("roofline", REPO / "experiments" / "benchmarks" / "roofline.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_quick_table_has_its_columns_and_no_program_beats_its_floor(tmp_path):
    roofline = _roofline()
    assert roofline.main(["--quick", "--figures", "none", "--models", "mlp", "--batch", "8", "--repeats", "3",
                          "--out", str(tmp_path)]) == 0
    with open(tmp_path / "roofline.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows and list(rows[0]) == roofline.COLUMNS
    programs = {r["program"] for r in rows}
    assert {"mlp private (ghost) (batch 8)", "mlp non-private (batch 8)"} <= programs
    assert any(r["group"] == "synthetic" for r in rows)
    for r in rows:
        ratio, floor = float(r["measured_over_floor"]), float(r["floor_ms"])
        assert math.isfinite(ratio) and floor > 0, r
        assert ratio >= TOLERANCE, r
        assert float(r["gflop"]) > 0 and float(r["mbytes"]) > 0, r
    with open(tmp_path / "roofline_protocols.csv") as f:
        protocols = list(csv.DictReader(f))
    assert [p["figure"] for p in protocols] == ["synthetic"]
    assert math.isfinite(float(protocols[0]["measured_over_floor"])) and float(protocols[0]["measured_over_floor"]) >= TOLERANCE
    md = (tmp_path / "roofline.md").read_text()
    assert "| measured_over_floor |" in md.splitlines()[4] or "measured_over_floor" in md


@pytest.mark.slow
def test_scan_cost_counts_every_round():
    """XLA counts a while loop's body once; the chunk cost must grow with the rounds (10 vs 20 rounds of
    the same round: round cost x 10 more, within 1% of the round's FLOPs)."""
    import jax.numpy as jnp

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run_grid
    from dpjax.problems import LogisticRegression

    roofline = _roofline()
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(3)]
    data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
    hps = MbSgdHParams.create(jnp.array([0.1, 0.2]), noise_multiplier=jnp.ones(2), clip_norm=jnp.ones(2))
    flops = {}
    for rounds in (10, 20):
        rec = roofline.Recorder(replay=False)
        with rec.patch():
            run_grid(NoisyMbSgd(LogisticRegression(4), rounds, 4), data, hps, jnp.stack([keys.run_key(0, 0)] * 2))
        (r,) = rec.programs.values()
        flops[rounds] = (r.flops, r.parts["round_flops"])
    (f10, per_round), (f20, _) = flops[10], flops[20]
    assert per_round > 0
    assert abs((f20 - f10) - 10 * per_round) <= 0.01 * per_round


def test_jit_programs_outside_chunk_programs_are_recorded_once_per_call():
    """A figure that calls ``jax.jit``-ed functions itself (user-level-noise, the audits) escapes the
    ``ChunkProgram.run_chunks`` patch; the recorder's direct path must count every call of such a program,
    cost it from its compiled executable, and not count a chunk program's inner executions twice."""
    import jax
    import jax.numpy as jnp

    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, run_grid
    from dpjax.problems import LogisticRegression

    roofline = _roofline()
    peaks = roofline.Peaks(1e10, 1e10, 1e10, 1, (1,))
    n = 48
    direct = jax.jit(lambda a, b: jnp.tanh(a @ b))  # 2 n^3 FLOPs of matmul, compiled outside any chunk program
    a = jnp.ones((n, n), jnp.float32)
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(16, 4)).astype(np.float32) for _ in range(3)]
    data = SiloData.from_silos(xs, [(x[:, 0] > 0).astype(np.float32) for x in xs])
    hps = MbSgdHParams.create(jnp.array([0.1, 0.2]), noise_multiplier=jnp.ones(2), clip_norm=jnp.ones(2))
    rec = roofline.Recorder(replay=False, label="t: ", direct=True)
    with rec.patch():
        for _ in range(3):
            direct(a, a)
        run_grid(NoisyMbSgd(LogisticRegression(4), 5, 4), data, hps, jnp.stack([keys.run_key(0, 0)] * 2))
    direct(a, a)  # after the patch: not recorded
    assert len(rec.programs) == 1  # the grid's chunk program, through run_chunks
    matmuls = [r for _, r in rec.executables.values() if r.flops >= 2 * n ** 3]
    assert len(matmuls) == 1 and matmuls[0].calls == 3, [(r.name, r.calls) for _, r in rec.executables.values()]
    assert matmuls[0].total_seconds > 0
    # nothing inside the chunk call (its compiled scan) is counted as a direct program
    assert not any("chunk" in r.name for _, r in rec.executables.values())
    proto = rec.protocol("t", "quick", peaks)
    assert proto["programs"] == 1 + len(rec.executables)
    assert proto["calls"] == rec.programs[next(iter(rec.programs))].calls + sum(
        r.calls for _, r in rec.executables.values())
    assert proto["floor_s"] > 0 and math.isfinite(proto["measured_over_floor"])


def test_a_program_without_cost_analysis_says_so_instead_of_inf():
    roofline = _roofline()
    peaks = roofline.Peaks(1e10, 1e10, 1e10, 1, (1,))
    r = roofline.row("g", "p", 0.0, 0.0, 0.01, peaks)
    assert r["bound"] == roofline.NO_COST and r["measured_over_floor"] is None
    assert roofline._fmt(r["measured_over_floor"]) == "n/a"
    rec = roofline.Recorder(replay=False)
    rec.executables[0] = (None, roofline.Recorded("empty", calls=2, real_calls=2, seconds=0.5, total_seconds=1.0))
    proto = rec.protocol("g", "quick", peaks)
    assert proto["measured_s"] == 1.0 and proto["floor_s"] == 0 and proto["measured_over_floor"] is None
    assert "no cost analysis" in proto["how"]
