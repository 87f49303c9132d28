"""Padded, masked silo data: the static-shape container every round step reads.

Silo ``i`` holds ``sizes[i]`` real records; arrays are padded to ``n_max`` rows so that all silos share one shape and
can be ``vmap``-ed. Padded rows are zeros and are never sampled (samplers only draw indices ``< sizes[i]``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SiloData:
    """Per-silo data, silo axis first.

    Attributes:
      x: features ``[N, n_max, ...]``.
      y: labels/targets ``[N, n_max, ...]``.
      mask: ``[N, n_max]`` bool, true on real rows.
      sizes: ``[N]`` int32, number of real rows of each silo."""

    x: jax.Array
    y: jax.Array
    mask: jax.Array
    sizes: jax.Array

    @property
    def num_silos(self) -> int:
        return self.x.shape[0]

    @property
    def n_max(self) -> int:
        return self.x.shape[1]

    @property
    def min_size(self) -> int:
        return int(np.min(np.asarray(self.sizes)))

    def silo_sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in np.asarray(self.sizes))

    @classmethod
    def from_silos(cls, xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], *, dtype=jnp.float32,
                   label_dtype=None) -> "SiloData":
        """Pads a list of per-silo arrays into one ``SiloData``.

        Raises ``ValueError`` (naming the argument) for an empty list, mismatched numbers of silos or rows, empty silos,
        inconsistent feature shapes, or NaN/inf values."""
        for name, arrs in (("xs", xs), ("ys", ys)):
            if hasattr(arrs, "shape") or isinstance(arrs, (str, bytes)) or not isinstance(arrs, Sequence):
                raise ValueError(f"{name} (a {type(arrs).__name__}{getattr(arrs, 'shape', '')}) must be a list "
                                 "with one array per silo, e.g. [x_silo0, x_silo1, ...]")
        if len(xs) == 0:
            raise ValueError("xs=[] must contain at least one silo")
        if len(xs) != len(ys):
            raise ValueError(f"xs has {len(xs)} silos but ys has {len(ys)}; they must match")
        xs = [np.asarray(x) for x in xs]
        ys = [np.asarray(y) for y in ys]
        for name, arrs in (("xs", xs), ("ys", ys)):
            for i, a in enumerate(arrs):
                if a.dtype.kind not in "fiub":
                    raise ValueError(f"{name}[{i}] has dtype {a.dtype}; silo data must be numeric")
                if a.ndim < 1:
                    raise ValueError(f"{name}[{i}] is a scalar; every silo needs an array with one row per record")
        for i, x in enumerate(xs):
            if x.ndim < 2:  # a 1-d silo is ambiguous: n records of one feature, or one record of n features
                raise ValueError(f"xs[{i}] has shape {x.shape}; features need a record axis and a feature axis, "
                                 f"[records, features...] (one feature per record: x.reshape(-1, 1))")
        target = np.dtype(dtype)
        for name, arrs, kind in (("xs", xs, target), ("ys", ys, None if label_dtype is None else np.dtype(label_dtype))):
            if kind is None or kind.kind not in "iub":
                continue
            for i, a in enumerate(arrs):
                if a.dtype.kind == "f" and np.any(a.astype(kind) != a):
                    what = "dtype" if name == "xs" else "label_dtype"
                    raise ValueError(f"{what}={kind.name} would truncate the float values of {name}[{i}] "
                                     f"(e.g. {a.reshape(-1)[np.flatnonzero(a.astype(kind) != a)[0]].item()!r}); keep a float "
                                     f"{what} or round the data first")
        feat_shape = xs[0].shape[1:]
        label_shape = ys[0].shape[1:]
        for i, (x, y) in enumerate(zip(xs, ys)):
            if x.ndim < 1 or x.shape[0] == 0:
                raise ValueError(f"xs[{i}] has shape {x.shape}; every silo needs at least one record")
            if x.shape[0] != y.shape[0]:
                raise ValueError(
                    f"xs[{i}] has {x.shape[0]} rows but ys[{i}] has {y.shape[0]}; they must match"
                )
            if x.shape[1:] != feat_shape:
                raise ValueError(f"xs[{i}] has feature shape {x.shape[1:]}, expected {feat_shape} as in xs[0]")
            if y.shape[1:] != label_shape:
                raise ValueError(f"ys[{i}] has shape {y.shape[1:]} per record, expected {label_shape} as in ys[0]")
            if np.issubdtype(x.dtype, np.floating) and not np.all(np.isfinite(x)):
                bad = int(np.argwhere(~np.isfinite(x.reshape(x.shape[0], -1)))[0][0])
                raise ValueError(f"xs[{i}] contains NaN or inf (first at row {bad}); clean the data first")
            if np.issubdtype(y.dtype, np.floating) and not np.all(np.isfinite(y)):
                raise ValueError(f"ys[{i}] contains NaN or inf; clean the data first")
        sizes = np.array([x.shape[0] for x in xs], np.int32)
        n_max = int(sizes.max())
        n = len(xs)
        if label_dtype is None:
            label_dtype = jnp.int32 if np.issubdtype(ys[0].dtype, np.integer) else dtype
        x_pad = np.zeros((n, n_max) + feat_shape, np.dtype(dtype))
        y_pad = np.zeros((n, n_max) + label_shape, np.dtype(label_dtype))
        mask = np.zeros((n, n_max), bool)
        for i, (x, y) in enumerate(zip(xs, ys)):
            x_pad[i, : x.shape[0]] = x
            y_pad[i, : y.shape[0]] = y
            mask[i, : x.shape[0]] = True
        return cls(jnp.asarray(x_pad), jnp.asarray(y_pad), jnp.asarray(mask), jnp.asarray(sizes))

    def pooled(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """All silos' rows flattened to ``[N * n_max, ...]`` with their mask."""
        n = self.num_silos * self.n_max
        return (
            self.x.reshape((n,) + self.x.shape[2:]),
            self.y.reshape((n,) + self.y.shape[2:]),
            self.mask.reshape((n,)),
        )
