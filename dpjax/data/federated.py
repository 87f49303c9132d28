"""The common container for federated (silo-partitioned) datasets."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = ["FederatedDataset"]


@dataclasses.dataclass(frozen=True)
class FederatedDataset:
    """Per-silo NumPy arrays (the engine pads them into ``[N, n_max, d]`` plus a mask).

    Attributes:
      train_x: one ``[n_i, d]`` float array per silo.
      train_y: one ``[n_i]`` array per silo (int class labels, or float targets).
      test_x, test_y: per-silo test arrays, or empty lists when the protocol uses one pooled test set (then
        ``pooled_test_x/y`` are set).
      name: dataset/split name, e.g. ``"isrl_mnist"``.
      num_classes: number of classes, ``None`` for regression.
      metadata: sizes, ``d``, seed, source path, preprocessing choices.
      pooled_test_x, pooled_test_y: pooled test set, or ``None``.
    """
    train_x: list[np.ndarray]
    train_y: list[np.ndarray]
    test_x: list[np.ndarray]
    test_y: list[np.ndarray]
    name: str
    num_classes: int | None
    metadata: dict[str, Any]
    pooled_test_x: np.ndarray | None = None
    pooled_test_y: np.ndarray | None = None

    def __post_init__(self):
        n = len(self.train_x)
        if n == 0:
            raise ValueError("train_x=[] must hold at least one silo")
        if len(self.train_y) != n:
            raise ValueError(f"train_y has {len(self.train_y)} silos, train_x has {n}")
        if len(self.test_x) != len(self.test_y):
            raise ValueError(f"test_x has {len(self.test_x)} silos, test_y has {len(self.test_y)}")
        if self.test_x and len(self.test_x) != n:
            raise ValueError(f"test_x has {len(self.test_x)} silos, train_x has {n} (or pass [])")
        if (self.pooled_test_x is None) != (self.pooled_test_y is None):
            raise ValueError("pooled_test_x and pooled_test_y must be given together")
        d = None
        for kind, xs, ys in (("train", self.train_x, self.train_y), ("test", self.test_x, self.test_y)):
            for i, (x, y) in enumerate(zip(xs, ys)):
                if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
                    raise ValueError(
                        f"{kind} silo {i}: x has shape {x.shape}, y {y.shape}; expected [n_i, d] and [n_i]")
                if d is None:
                    d = x.shape[1]
                elif x.shape[1] != d:
                    raise ValueError(f"{kind} silo {i} has d={x.shape[1]}, silo 0 has d={d}")
        if self.pooled_test_x is not None:
            px, py = self.pooled_test_x, self.pooled_test_y
            if px.ndim != 2 or py.ndim != 1 or px.shape[0] != py.shape[0] or px.shape[1] != d:
                raise ValueError(f"pooled test x {px.shape} / y {py.shape} do not match d={d}")
        if self.num_classes is not None and (not isinstance(self.num_classes, int) or self.num_classes < 2):
            raise ValueError(f"num_classes={self.num_classes!r} must be None or an int >= 2")

    @property
    def num_silos(self) -> int:
        """N, the number of silos."""
        return len(self.train_x)

    @property
    def dim(self) -> int:
        """d, the feature dimension."""
        return int(self.train_x[0].shape[1])

    @property
    def train_sizes(self) -> list[int]:
        """n_i, training records per silo."""
        return [int(x.shape[0]) for x in self.train_x]

    @property
    def test_sizes(self) -> list[int]:
        """Test records per silo (empty list for a pooled test set)."""
        return [int(x.shape[0]) for x in self.test_x]

    def pooled_train(self) -> tuple[np.ndarray, np.ndarray]:
        """All silos' training data concatenated (silo 0 first)."""
        return np.concatenate(self.train_x), np.concatenate(self.train_y)
