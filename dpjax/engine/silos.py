"""Padded, masked silo data: the static-shape containers every round step reads.

Silo ``i`` holds ``sizes[i]`` real records; arrays are padded to ``n_max`` rows so that all silos share one shape and
can be ``vmap``-ed. Padded rows are zeros and are never sampled (samplers only draw indices ``< sizes[i]``).

Two forms:

* ``SiloData``: every silo's records materialised, ``x [N, n_max, ...]`` (cross-silo scale: a few to a few thousand
  silos);
* ``PooledSiloData``: the silos as index rows ``[N, n_max]`` into ONE shared record pool ``[P, ...]`` (cross-device
  scale: 100,000 clients of ~50 records are 20 MB of int32 indices beside the pool, where materialised MNIST-shaped
  records would be 15.7 GB). A round gathers only the rows its cohort's local steps read, inside the compiled
  program, so nothing in it is O(clients x record size). Families whose parts read the data through the methods both
  forms share (``silo_masks``, ``silo_records``; the cross-device parts of ``dpjax.parts.cross_device``) declare
  ``supports_pooled_data``; the others take ``materialize()``.
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

    Attributes: x: features ``[N, n_max, ...]``. y: labels/targets ``[N, n_max, ...]``. mask: ``[N, n_max]`` bool, true
      on real rows. sizes: ``[N]`` int32, number of real rows of each silo."""

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
        dtype = _storage_dtype("dtype", dtype)
        label_dtype = None if label_dtype is None else _storage_dtype("label_dtype", label_dtype)
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
        # device_put, not jnp.asarray: asarray compiles a small program for each new shape (issue #38)
        return cls(*(jax.device_put(a) for a in (x_pad, y_pad, mask, sizes)))

    def silo_masks(self, silos=None) -> jax.Array:
        """The real-row masks of silos ``silos`` (an index array, or None: every silo), ``[..., n_max]``."""
        return self.mask if silos is None else self.mask[silos]

    def silo_records(self, silo, rows=None) -> tuple[jax.Array, jax.Array]:
        """``(x, y)`` of silo ``silo``'s rows ``rows`` (an index array ``[B]``: ``[B, ...]``), or of all its padded
        rows (``rows`` None: ``[n_max, ...]``)."""
        if rows is None:
            return self.x[silo], self.y[silo]
        return self.x[silo, rows], self.y[silo, rows]

    def real_labels(self) -> np.ndarray:
        """Host-side: the labels of every real record (what a problem's label check reads)."""
        return np.asarray(self.y)[np.asarray(self.mask)]

    def pooled(self) -> tuple[jax.Array, jax.Array, jax.Array]:
        """All silos' rows flattened to ``[N * n_max, ...]`` with their mask."""
        n = self.num_silos * self.n_max
        return (
            self.x.reshape((n,) + self.x.shape[2:]),
            self.y.reshape((n,) + self.y.shape[2:]),
            self.mask.reshape((n,)),
        )


def _storage_dtype(name: str, value) -> np.dtype:
    """``np.dtype(value)`` for a ``dtype`` / ``label_dtype`` argument: a ``TypeError`` naming it for a value NumPy
    does not read as a dtype (``label_dtype='colour'``: "data type 'colour' not understood"), or a non-real one."""
    try:
        dt = np.dtype(value)
    except TypeError:
        raise TypeError(f"{name}={value!r} is not a dtype; give a real numeric one (e.g. jnp.float32, jnp.int32)"
                        ) from None
    if not (dt.kind in "iub" or jnp.issubdtype(dt, jnp.floating)):  # jnp.floating: also bfloat16 (kind 'V')
        raise TypeError(f"{name}={value!r} ({dt}) must be a real numeric dtype (float, int or bool)")
    return dt


def _check_records(name: str, a: np.ndarray) -> None:
    if a.dtype.kind not in "fiub":
        raise ValueError(f"{name} has dtype {a.dtype}; silo data must be numeric")
    if a.ndim < 1 or a.shape[0] == 0:
        raise ValueError(f"{name} has shape {a.shape}; the pool needs at least one record (one row per record)")
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        bad = int(np.argwhere(~np.isfinite(a.reshape(a.shape[0], -1)))[0][0])
        raise ValueError(f"{name} contains NaN or inf (first at record {bad}); clean the data first")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class PooledSiloData:
    """Silos as rows of indices into one shared record pool: the cross-device form of ``SiloData``.

    Silo ``i``'s records are ``pool_x[index[i, :sizes[i]]]`` (and ``pool_y`` likewise); entries of ``index`` past
    ``sizes[i]`` are 0 and never read as records (their mask is false). Records may be shared between silos (a benchmark
    population drawn from one data set), or each record belong to one silo (``from_assignment``: a data set split by
    user). The memory of the data is the pool's plus ``4 (n_max + 1)`` bytes a silo, and a round reads only the rows its
    cohort's local steps gather (``silo_records`` inside the compiled round): per-round cost and memory are the
    cohort's. ``materialize()`` is the equal ``SiloData`` (same silos, same rows; padded rows zeros), so a run on either
    form with the same key computes the same numbers (tested).

    Attributes: pool_x: features ``[P, ...]`` of the pool's records. pool_y: labels/targets ``[P, ...]``. index:
      ``[N, n_max]`` int32 pool rows of each silo's records. sizes: ``[N]`` int32, number of real rows of each silo."""

    pool_x: jax.Array
    pool_y: jax.Array
    index: jax.Array
    sizes: jax.Array

    @property
    def num_silos(self) -> int:
        return self.index.shape[0]

    @property
    def n_max(self) -> int:
        return self.index.shape[1]

    @property
    def min_size(self) -> int:
        return int(np.min(np.asarray(self.sizes)))

    def silo_sizes(self) -> tuple[int, ...]:
        return tuple(int(s) for s in np.asarray(self.sizes))

    @property
    def mask(self) -> jax.Array:
        """``[N, n_max]`` bool, true on real rows (computed from ``sizes``: ``N x n_max`` booleans)."""
        return self.silo_masks()

    def silo_masks(self, silos=None) -> jax.Array:
        """The real-row masks of silos ``silos`` (an index array, or None: every silo), ``[..., n_max]``, from
        their sizes alone."""
        sizes = self.sizes if silos is None else self.sizes[silos]
        return jnp.arange(self.n_max) < jnp.asarray(sizes)[..., None]

    def silo_records(self, silo, rows=None) -> tuple[jax.Array, jax.Array]:
        """``(x, y)`` of silo ``silo``'s rows ``rows`` (``[B]``: ``[B, ...]``) or of all its padded rows (None:
        ``[n_max, ...]``), gathered from the pool: the same values ``materialize()`` holds at real rows."""
        at = self.index[silo] if rows is None else self.index[silo, rows]
        return self.pool_x[at], self.pool_y[at]

    def record_structs(self) -> tuple[jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
        """The shapes a materialised ``SiloData`` would have, ``x [N, n_max, ...]`` and ``y``, without building it
        (``dpjax.engine.chain.DataShape``)."""
        lead = tuple(self.index.shape)
        return (jax.ShapeDtypeStruct(lead + tuple(self.pool_x.shape[1:]), self.pool_x.dtype),
                jax.ShapeDtypeStruct(lead + tuple(self.pool_y.shape[1:]), self.pool_y.dtype))

    def real_labels(self) -> np.ndarray:
        """Host-side: the labels of the pool records some silo holds (each once)."""
        index, sizes = np.asarray(self.index), np.asarray(self.sizes)
        used = np.zeros(self.pool_y.shape[0], bool)
        used[index[np.arange(index.shape[1]) < sizes[:, None]]] = True
        return np.asarray(self.pool_y)[used]

    def materialize(self) -> SiloData:
        """The same silos as a ``SiloData`` (``x [N, n_max, ...]``, padded rows zeros): for families that read the
        padded records directly, and small populations only (it is ``N x n_max`` records)."""
        mask = np.asarray(self.silo_masks())
        index = np.asarray(self.index)

        def rows(pool):
            a = np.asarray(pool)[index]
            return jnp.asarray(np.where(mask.reshape(mask.shape + (1,) * (a.ndim - 2)), a, np.zeros((), a.dtype)))

        return SiloData(rows(self.pool_x), rows(self.pool_y), jnp.asarray(mask), jnp.asarray(self.sizes))

    @classmethod
    def from_indices(cls, pool_x, pool_y, indices, *, sizes=None, dtype=jnp.float32,
                     label_dtype=None) -> "PooledSiloData":
        """Silos from their records' rows in the pool ``(pool_x [P, ...], pool_y [P, ...])``.

        ``indices``: a list with one integer array of pool rows per silo (unequal lengths ok), or one ``[N, n_max]``
        integer array with ``sizes`` ``[N]`` (default: every silo ``n_max`` records; entries past a silo's size are
        ignored). The pool is stored once as ``dtype`` (labels as int32 for integer labels, else ``dtype``, or
        ``label_dtype``). Raises ``ValueError`` naming the argument for an empty pool or population, a pool of
        mismatched lengths, non-numeric or non-finite records, an empty silo, or a row outside ``[0, P)``."""
        dtype = _storage_dtype("dtype", dtype)
        label_dtype = None if label_dtype is None else _storage_dtype("label_dtype", label_dtype)
        pool_x, pool_y = np.asarray(pool_x), np.asarray(pool_y)
        _check_records("pool_x", pool_x)
        _check_records("pool_y", pool_y)
        if pool_x.shape[0] != pool_y.shape[0]:
            raise ValueError(f"pool_x has {pool_x.shape[0]} records but pool_y has {pool_y.shape[0]}; they must match")
        num_records = pool_x.shape[0]
        if isinstance(indices, np.ndarray) or hasattr(indices, "shape"):
            index = np.asarray(indices)
            if index.ndim != 2 or index.shape[0] == 0 or index.shape[1] == 0:
                raise ValueError(f"indices has shape {index.shape}; an array of indices must be [N, n_max] with "
                                 "N, n_max >= 1 (or give a list with one array per silo)")
            size_arr = (np.full(index.shape[0], index.shape[1], np.int64) if sizes is None
                        else np.asarray(sizes).astype(np.int64, copy=False))
            if size_arr.shape != (index.shape[0],):
                raise ValueError(f"sizes has shape {size_arr.shape}; expected ({index.shape[0]},), one per silo")
            if size_arr.min() < 1 or size_arr.max() > index.shape[1]:
                bad = int(np.flatnonzero((size_arr < 1) | (size_arr > index.shape[1]))[0])
                raise ValueError(f"sizes[{bad}]={int(size_arr[bad])} must be in [1, {index.shape[1]}] (n_max, the "
                                 "width of indices)")
        else:
            if sizes is not None:
                raise ValueError("sizes is given by the lengths of a list of indices; pass sizes only with an "
                                 "[N, n_max] array")
            rows = [np.asarray(r) for r in indices]
            if not rows:
                raise ValueError("indices=[] must contain at least one silo")
            for i, r in enumerate(rows):
                if r.ndim != 1 or r.shape[0] == 0:
                    raise ValueError(f"indices[{i}] has shape {r.shape}; every silo needs a 1-d array of at least "
                                     "one pool row")
            size_arr = np.array([r.shape[0] for r in rows], np.int64)
            index = np.zeros((len(rows), int(size_arr.max())), np.int64)
            for i, r in enumerate(rows):
                index[i, : r.shape[0]] = r
        if index.dtype.kind not in "iu":
            raise ValueError(f"indices have dtype {index.dtype}; pool rows must be integers")
        real = np.arange(index.shape[1]) < size_arr[:, None]
        index = np.where(real, index, 0)
        if index.min() < 0 or index.max() >= num_records:
            silo = int(np.argwhere((index < 0) | (index >= num_records))[0][0])
            raise ValueError(f"indices of silo {silo} hold pool rows outside [0, {num_records}) (the pool has "
                             f"{num_records} records)")
        if label_dtype is None:
            label_dtype = jnp.int32 if np.issubdtype(pool_y.dtype, np.integer) else dtype
        return cls(jnp.asarray(pool_x.astype(np.dtype(dtype), copy=False)),
                   jnp.asarray(pool_y.astype(np.dtype(label_dtype), copy=False)),
                   jnp.asarray(index.astype(np.int32)), jnp.asarray(size_arr.astype(np.int32)))

    @classmethod
    def from_assignment(cls, x, y, silo_of_record, **kwargs) -> "PooledSiloData":
        """A data set split by user: record ``j`` belongs to silo ``silo_of_record[j]`` (integers; the silos are
        the distinct values in increasing order, each record in its silo in data-set order). Keyword arguments as
        ``from_indices``."""
        owner = np.asarray(silo_of_record)
        if owner.ndim != 1 or owner.dtype.kind not in "iu" or owner.shape[0] != np.shape(x)[0]:
            raise ValueError(f"silo_of_record has shape {owner.shape} and dtype {owner.dtype}; expected "
                             f"{np.shape(x)[0]} integers (one silo id per record of x)")
        order = np.argsort(owner, kind="stable")
        _, starts, counts = np.unique(owner[order], return_index=True, return_counts=True)
        n_max = int(counts.max())
        offset = np.arange(n_max)
        index = order[np.minimum(starts[:, None] + offset, len(order) - 1)]
        return cls.from_indices(x, y, index, sizes=counts, **kwargs)
