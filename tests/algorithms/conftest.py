"""Tiny shared fixtures for the ISRL-DP algorithm tests (CPU, seconds)."""

from __future__ import annotations

import numpy as np
import pytest

from dpjax.engine.silos import SiloData


def make_silos(num_silos=4, n=12, dim=3, seed=0, sizes=None, task="regression"):
    """Small random silos; ``sizes`` gives unbalanced silos."""
    rng = np.random.default_rng(seed)
    sizes = sizes or [n] * num_silos
    xs, ys = [], []
    for i, m in enumerate(sizes):
        x = rng.normal(size=(m, dim)).astype(np.float32)
        if task == "regression":
            y = (x @ np.linspace(1.0, -1.0, dim) + 0.1 * rng.normal(size=m) + 0.3 * i).astype(np.float32)
        else:
            y = (rng.random(m) < 0.5).astype(np.float32)
        xs.append(x)
        ys.append(y)
    return SiloData.from_silos(xs, ys)


@pytest.fixture(scope="session")
def reg_data():
    return make_silos()
