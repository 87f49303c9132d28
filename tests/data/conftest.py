"""Shared fixtures for the dataset-layer tests.

Real data comes from ``<repo>/../shared/data`` (read-only); tests that need it
skip with a reason when it is absent.
"""

from __future__ import annotations

import gzip
import pathlib
import struct

import numpy as np
import pytest

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data"


def shared_file(*parts: str) -> pathlib.Path:
    p = SHARED_DATA.joinpath(*parts)
    if not p.is_file():
        pytest.skip(f"shared dataset file {p} not present (needs the project's shared/data folder)")
    return p


def write_idx(path: pathlib.Path, arr: np.ndarray) -> None:
    """Writes a uint8 IDX file (gzipped if the name ends in .gz)."""
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(struct.pack(">I", s) for s in arr.shape)
    data = header + arr.tobytes()
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="session")
def mnist_real():
    shared_file("mnist", "mnist.npz")
    from dpjax.data import load_mnist

    return load_mnist(SHARED_DATA, source="files")


@pytest.fixture(scope="session")
def mnist_pca(mnist_real):
    from dpjax.data import pca_fit

    x = mnist_real["train_images"].reshape(60000, -1).astype(np.float64) / 255.0
    return pca_fit(x, 50)
