"""experiments/benchmarks/kernel_sizes.py: the copy-bandwidth curve is interpolated in log(size) and
clamped at its ends, the tiny-kernel probe measures a positive cost, and (slow, real data) a figure's main
chunk program is found, costed kernel by kernel and reported with both estimates."""

from __future__ import annotations

import importlib.util
import math
import pathlib
import re
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _bench():
    name = "kernel_sizes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / "benchmarks" / f"{name}.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def test_bandwidth_at_interpolates_in_log_size_and_clamps():
    curve = [(1e6, 10e9), (4e6, 30e9), (16e6, 20e9)]
    at = _bench().bandwidth_at
    assert at(curve, 1e6) == 10e9 and at(curve, 4e6) == 30e9 and at(curve, 16e6) == 20e9
    assert at(curve, 2e6) == pytest.approx(20e9)  # the log-midpoint of 1 and 4 MB
    assert at(curve, 8e6) == pytest.approx(25e9)
    assert at(curve, 1e3) == 10e9 and at(curve, 1e9) == 20e9  # the end values outside the measured sizes


def test_a_tiny_kernel_costs_something_and_a_copy_has_a_bandwidth():
    bench = _bench()
    assert 0 < bench.tiny_kernel_seconds(repeats=2, iterations=2_000) < 1e-3
    (traffic, bandwidth), = bench.copy_bandwidths(repeats=2, sizes_mib=(1,))
    assert traffic == 2 * 2**20 and 1e8 < bandwidth < 1e13


@pytest.mark.slow
def test_a_figure_is_reported_with_both_estimates(shared_data):
    report = _bench().analyse("isrl-insurance", str(shared_data), repeats=2)
    head = re.search(r"([\d,]+) kernel launches \((\d+) a round\), ([\d.]+) GB", report)
    assert head and int(head.group(1).replace(",", "")) > 0, report
    shares = [float(s) for s in re.findall(r"\| ([\d.]+) % \|", report)]
    assert shares and sum(shares) == pytest.approx(100, abs=0.5)  # the size classes cover every byte
    m = re.search(r"one-bandwidth floor ([\d.]+) ms \(measured / floor ([\d.]+)\); size-aware estimate "
                  r"([\d.]+) ms", report)
    assert m, report
    floor, ratio, aware = (float(x) for x in m.groups())
    assert ratio > 0 and math.isfinite(ratio)
    assert aware >= floor  # no kernel runs above the best copy bandwidth in the estimate
