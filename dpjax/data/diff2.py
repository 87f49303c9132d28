"""Datasets of the DIFF2 experiments (Murata & Suzuki, ICML 2023; Section 6, Table 2) and LIBSVM binary classification
sets (a9a, w8a).

Loaders return raw (unscaled) NumPy arrays; :func:`diff2_silos` applies the paper's preprocessing (Appendix A) and the
P = 10 round-robin i.i.d. client split of the authors' code (reference doc B.5: example ``i`` goes to worker ``i mod
P``). Every loader takes ``verify=True``: a file named like a published one but with another row count (truncated, cut)
is refused (:func:`dpjax.data.sources.check_known_file`); unreadable or non-numeric files raise a ``ValueError`` naming
the file, row and column.

The authors' scripts' version of the same data is built by ``dpjax.reproduce.diff2.authors_data``.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from dpjax._validate import check_choice, check_int
from dpjax.data.diff2_files import (CAL_HOUSING_FEATURES, GAS_TURBINE_FEATURES, KDD_FEATURES, load_a9a,
                                    load_blogfeedback, load_california_housing, load_gas_turbine, load_kddcup99,
                                    load_svmlight, load_w8a)
from dpjax.data.federated import FederatedDataset
from dpjax.data.isrl import check_train_fraction
from dpjax.data.preprocess import split_sizes, standardize_fit
from dpjax.data.sources import download_dataset


__all__ = ["CAL_HOUSING_FEATURES", "DIFF2_DATASETS", "GAS_TURBINE_FEATURES", "KDD_FEATURES", "dealt_diff2_silos",
           "diff2_dataset", "diff2_silos", "diff2_table", "diff2_targets", "download_diff2", "load_a9a",
           "load_blogfeedback", "load_california_housing", "load_diff2_raw", "load_gas_turbine", "load_kddcup99",
           "load_svmlight", "load_w8a"]


def load_diff2_raw(name: str, data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """The unscaled table of ``name`` (a key of :data:`DIFF2_DATASETS`): its loader's table (Torgo's California housing
    with raw totals; KDD's symbolic columns one-hot, as dpjax documents for this dataset)."""
    check_choice("name", name, tuple(DIFF2_DATASETS))
    return DIFF2_DATASETS[name][0](data_dir, verify=verify)


def diff2_table(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, y, cols)`` of a loader's dict: ``x`` ``[n, d]``, ``y`` ``[n]`` and the indices of the columns to
    standardise (``data["standardize_mask"]``, all when absent)."""
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError("data must be a loader's dict (keys 'x', 'y', ...)")
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"data['x'] {x.shape} / data['y'] {y.shape} must be [n, d] / [n]")
    mask = np.asarray(data.get("standardize_mask", np.ones(x.shape[1], bool)), bool)
    if mask.shape != (x.shape[1],):
        raise ValueError(f"data['standardize_mask'] has shape {mask.shape}, expected ({x.shape[1]},)")
    return x, y, np.flatnonzero(mask)


def diff2_targets(data: dict, task: str, scale_target: bool, dtype) -> tuple[np.ndarray, int | None, float | None]:
    """``(targets, num_classes, target_scale)``: regression targets divided by max |y| (``scale_target``), or
    classification labels as int32 class codes (LIBSVM's +1/-1 as 1/0)."""
    y = np.asarray(data["y"])
    if task == "regression":
        y_scale = float(np.max(np.abs(y))) if scale_target else 1.0
        if y_scale == 0:
            y_scale = 1.0
        return (y / y_scale).astype(dtype), None, y_scale
    if not np.issubdtype(y.dtype, np.integer):
        if not np.all(y == np.round(y)):
            raise ValueError("classification labels must be integers (class codes)")
    yi = y.astype(np.int64)
    if "class_names" in data:
        num_classes = len(data["class_names"])
    elif set(np.unique(yi).tolist()) <= {-1, 1}:
        yi = (yi > 0).astype(np.int64)  # LIBSVM +1/-1 -> 1/0
        num_classes = 2
    else:
        num_classes = int(yi.max()) + 1
    if yi.min() < 0 or yi.max() >= num_classes:
        raise ValueError(f"class labels must lie in [0, {num_classes})")
    return yi.astype(np.int32), num_classes, None


def dealt_diff2_silos(data: dict, features, train_rows, test_rows, *, task: str, n_silos: int,
                      drop_remainder: bool, scale_target: bool, name: str, dtype, settings: dict) -> FederatedDataset:
    """Steps 3-4 of :func:`diff2_silos` on a given split: the targets, and the training rows (already shuffled) dealt
    round-robin to ``n_silos`` clients; ``features(rows)`` gives the standardised features of table rows; ``settings``
    (seed, split, statistics) go into the metadata."""
    x, _, cols = diff2_table(data)
    ty, num_classes, y_scale = diff2_targets(data, task, scale_target, dtype)
    n_train = len(train_rows)
    n_p = n_train // n_silos
    dealt = train_rows[: n_p * n_silos] if drop_remainder else train_rows
    silo_idx = [dealt[p::n_silos] for p in range(n_silos)]
    meta = {"paper": "DIFF2 (Murata & Suzuki, ICML 2023), Appendix A", "num_silos": n_silos, "n_total": int(x.shape[0]),
            "n_train": int(n_train), "n_test": int(len(test_rows)), "n_per_silo": [int(s.size) for s in silo_idx],
            "n_min": int(min(s.size for s in silo_idx)),
            "dropped_train_records": int(n_train - sum(s.size for s in silo_idx)), "d": int(x.shape[1]), **settings,
            "standardized_columns": int(cols.size), "symbolic_columns": data.get("symbolic_columns"),
            "target_scale": y_scale, "partition": "round-robin over the shuffled training set (index mod P), i.i.d.",
            "source": data.get("source"), "feature_names": data.get("feature_names"),
            "class_names": data.get("class_names"), "train_indices": silo_idx, "test_indices": test_rows}
    return FederatedDataset(train_x=[features(s) for s in silo_idx], train_y=[ty[s] for s in silo_idx],
                            test_x=[], test_y=[], name=name, num_classes=num_classes, metadata=meta,
                            pooled_test_x=features(test_rows), pooled_test_y=ty[test_rows])


def diff2_silos(data: dict, *, seed: int, task: str, n_silos: int = 10, train_fraction: float = 0.8,
                normalization_stats: str = "all", scale_target: bool = True, drop_remainder: bool = True,
                name: str = "diff2", dtype=np.float32) -> FederatedDataset:
    """The DIFF2 preprocessing and client split (Appendix A; the authors' code).

    1. shuffle and split 80/20 (``n_test = ceil(0.2 n)``);
    2. standardise the columns in ``data["standardize_mask"]`` (all when absent) to mean 0 / std 1, statistics from the
       whole dataset (``normalization_stats="all"``, default; the paper does not say which) or the training split
       (``"train"``); constant columns become 0;
    3. regression (``task="regression"``): divide y by max |y| over the whole dataset (``scale_target``), so y lies in
       (0, 1];
    4. the training set (already shuffled) is dealt round-robin: record ``i`` goes to client ``i mod P``. With
       ``drop_remainder`` (default; train sizes are not multiples of P) only the first ``P * floor(n_train / P)``
       records are dealt, so all clients have exactly ``n_min = floor(n_train / P)`` records; otherwise client sizes
       differ by at most one.

    Classification labels are int32 class codes (``num_classes`` = number of classes in ``data["class_names"]`` or in
    y); the test set is pooled.
    """
    check_choice("task", task, ("regression", "classification"))
    check_choice("normalization_stats", normalization_stats, ("all", "train"))
    seed = check_int("seed", seed, min_value=0)
    train_fraction = check_train_fraction(train_fraction)
    for flag_name, flag in (("scale_target", scale_target), ("drop_remainder", drop_remainder)):
        if not isinstance(flag, bool):
            raise ValueError(f"{flag_name}={flag!r} must be a bool")
    x, _, cols = diff2_table(data)
    n = x.shape[0]
    n_silos = check_int("n_silos", n_silos, min_value=1)
    n_train, _ = split_sizes(n, train_fraction)
    if n_train < n_silos:
        raise ValueError(f"n_silos={n_silos} exceeds the {n_train} training records")
    perm = np.random.default_rng(seed).permutation(n)
    tr, te = perm[:n_train], perm[n_train:]
    stat_rows = slice(None) if normalization_stats == "all" else tr
    mean, std = standardize_fit(x[stat_rows][:, cols]) if cols.size else (np.zeros(0), np.ones(0))

    def features(rows):
        z = x[rows].astype(np.float64)
        if cols.size:
            z[:, cols] = (z[:, cols] - mean) / std
        return z.astype(dtype)

    settings = {"seed": seed, "train_fraction": train_fraction, "normalization_stats": normalization_stats,
                "split": f"numpy default_rng(seed={seed}) permutation"}
    return dealt_diff2_silos(data, features, tr, te, task=task, n_silos=n_silos, drop_remainder=drop_remainder,
                             scale_target=scale_target, name=name, dtype=dtype, settings=settings)


#: name -> (loader, task) for :func:`diff2_dataset`.
DIFF2_DATASETS = {"california_housing": (load_california_housing, "regression"),
                  "gas_turbine": (load_gas_turbine, "regression"), "blogfeedback": (load_blogfeedback, "regression"),
                  "kddcup99": (load_kddcup99, "classification"), "a9a": (load_a9a, "classification"),
                  "w8a": (load_w8a, "classification")}


def diff2_dataset(name: str, data_dir: str | os.PathLike | None = None, *, seed: int,
                  **kwargs) -> FederatedDataset:
    """Loads ``name`` (a key of :data:`DIFF2_DATASETS`, :func:`load_diff2_raw`) and applies :func:`diff2_silos` (P = 10
    by default; keyword arguments are passed on). Cover Type is not available."""
    data = load_diff2_raw(name, data_dir)
    return diff2_silos(data, seed=seed, task=DIFF2_DATASETS[name][1], name=f"diff2_{name}", **kwargs)


def download_diff2(name: str, data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads one of the DIFF2/LIBSVM datasets (``california_housing``, ``gas_turbine``, ``blogfeedback``,
    ``kddcup99``, ``a9a``, ``w8a``) with SHA-256 checks; returns its folder."""
    check_choice("name", name, tuple(DIFF2_DATASETS))
    return download_dataset(name, data_dir)
