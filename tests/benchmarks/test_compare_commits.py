"""compare_commits.py reads the benchmarks' printed tables: its dp_step parser picks each model's rows."""

from __future__ import annotations

import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]


def _module():
    spec = importlib.util.spec_from_file_location("compare_commits", REPO / "experiments/benchmarks/compare_commits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dp_step_parser_reads_every_row_of_every_model():
    text = """device: cpu (2 CPU cores usable), batch 256, median of 20 steps

mlp (203530 params)
  step                                ms  / non-private  vmap(grad) /  peak MiB  / non-private
  private (ghost)                  2.860          1.73x          5.2x      12.0          1.10x
  non-private                      1.650          1.00x          9.0x
  private/non-private = 1.73x time, 1.10x memory

cnn (26010 params)
  step                                ms  / non-private  vmap(grad) /
  private (ghost)                234.000          1.37x          1.1x
  vmap(grad)                     260.500          1.52x          1.0x
"""
    assert _module().parse_dp_step(text) == {"mlp private (ghost) (ms)": 2.86, "mlp non-private (ms)": 1.65,
                                             "cnn private (ghost) (ms)": 234.0, "cnn vmap(grad) (ms)": 260.5}
