"""Datasets of the DIFF2 experiments (Murata & Suzuki, ICML 2023; Section 6, Table 2)
and LIBSVM binary classification sets (a9a, w8a).

Loaders return raw (unscaled) NumPy arrays; :func:`diff2_silos` applies the
paper's preprocessing (Appendix A) and the P = 10 round-robin i.i.d. client split of
the authors' code (reference doc B.5: example ``i`` goes to worker ``i mod P``).
Every loader takes ``verify=True``: a file named like a published one but with
another row count (truncated, cut) is refused (:func:`dpjax.data.sources.check_known_file`);
unreadable or non-numeric files raise a ``ValueError`` naming the file, row and column.

Two experimental constructions (``construction=``, as for ISRL-DP in
:mod:`dpjax.data.isrl`): ``"paper"`` follows the paper's text (Section 6,
Appendix A) and the spec's decisions where it is silent; ``"authors"``
reproduces the data construction of the authors' public scripts
(``lawrenceztang/CE-PLSGM``, ``src/utils/load_dataset.py`` and
``src/train.py``, the DIFF2 code the CE-PLSGM fork was built on):
scikit-learn's California housing feature set (:func:`california_housing_sklearn`),
symbolic columns label-encoded and not standardised (BlogFeedback's columns
262-268), one fixed ``train_test_split(test_size=0.2, random_state=0)`` for
every seed, ``StandardScaler`` statistics from the training split only,
computed on float32 features, and every training record dealt to a client
(no remainder dropped).
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from dpjax._validate import check_choice, check_int
from dpjax.data.diff2_files import (AUTHORS_SPLIT_SEED, BLOG_SYMBOLIC_COLUMNS, CAL_HOUSING_FEATURES,
                                    GAS_TURBINE_FEATURES, KDD_FEATURES, SKLEARN_CAL_HOUSING_FEATURES,
                                    california_housing_sklearn, load_a9a, load_blogfeedback, load_california_housing,
                                    load_gas_turbine, load_kddcup99, load_svmlight, load_w8a)
from dpjax.data.federated import FederatedDataset
from dpjax.data.isrl import CONSTRUCTIONS, authors_train_test_split, check_seed, check_train_fraction
from dpjax.data.preprocess import label_encode, split_sizes, standardize_fit
from dpjax.data.sources import download_dataset


__all__ = [
    "AUTHORS_SPLIT_SEED",
    "BLOG_SYMBOLIC_COLUMNS",
    "CAL_HOUSING_FEATURES",
    "CONSTRUCTIONS",
    "DIFF2_DATASETS",
    "GAS_TURBINE_FEATURES",
    "KDD_FEATURES",
    "SKLEARN_CAL_HOUSING_FEATURES",
    "california_housing_sklearn",
    "diff2_dataset",
    "diff2_silos",
    "download_diff2",
    "load_a9a",
    "load_blogfeedback",
    "load_california_housing",
    "load_diff2_raw",
    "load_gas_turbine",
    "load_kddcup99",
    "load_svmlight",
    "load_w8a",
    "standard_scaler_fit",
]


def _label_encode_columns(data: dict, columns) -> dict:
    """The authors' ``My_Dataset``: each symbolic column label-encoded in place (codes of its
    sorted unique values, ``LabelEncoder``) and excluded from standardisation."""
    x = np.array(data["x"], np.float64)
    mask = np.array(data.get("standardize_mask", np.ones(x.shape[1], bool)), bool)
    for j in columns:
        x[:, j] = label_encode(x[:, j])[0]
        mask[j] = False
    return {**data, "x": x, "standardize_mask": mask, "symbolic_columns": list(columns)}


def load_diff2_raw(name: str, data_dir: str | os.PathLike | None = None, *, construction: str = "paper",
                   verify: bool = True) -> dict:
    """The unscaled table of ``name`` (a key of :data:`DIFF2_DATASETS`) as ``construction`` defines it.

    ``"paper"``: the loader's table (Torgo's California housing with raw totals;
    KDD's symbolic columns one-hot, as dpjax documents for this dataset). ``"authors"``: as the authors'
    ``load_dataset.py`` builds it: California housing through scikit-learn's
    feature set (:func:`california_housing_sklearn`); BlogFeedback's columns
    262-268 label-encoded and not standardised; KDD Cup 99's three symbolic
    columns label-encoded in place (``symbolic="codes"``: its class is not in
    the public scripts, but their ``My_Dataset`` can only take numbers, so the
    string columns must go through its ``LabelEncoder`` step); gas turbine,
    a9a and w8a unchanged.
    """
    check_choice("name", name, tuple(DIFF2_DATASETS))
    check_choice("construction", construction, CONSTRUCTIONS)
    loader = DIFF2_DATASETS[name][0]
    if construction == "authors" and name == "kddcup99":
        return load_kddcup99(data_dir, symbolic="codes", verify=verify)
    data = loader(data_dir, verify=verify)
    if construction == "authors" and name == "california_housing":
        return california_housing_sklearn(data)
    if construction == "authors" and name == "blogfeedback":
        return _label_encode_columns(data, BLOG_SYMBOLIC_COLUMNS)
    return data


def standard_scaler_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean_, scale_)`` of scikit-learn's ``StandardScaler().fit(x)`` with its numerics.

    float64 accumulators over (possibly float32) ``x``, the two-pass variance with
    the correction term of ``_incremental_mean_and_var``, ddof = 0, and scale 1
    for columns ``_is_constant_feature`` flags (var <= n eps var + (n mean eps)^2)
    or whose std is below 10 eps. Applying it as scikit-learn does
    (``x -= mean_; x /= scale_`` in ``x``'s dtype) gives its values bit for bit.
    """
    x = np.asarray(x)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"x has shape {x.shape}; expected [n >= 1, d]")
    n = x.shape[0]
    total = np.sum(x, axis=0, dtype=np.float64)
    mean = total / n
    centred = x - mean
    correction = np.sum(centred, axis=0, dtype=np.float64)
    centred **= 2
    var = (np.sum(centred, axis=0, dtype=np.float64) - correction**2 / n) / n
    eps = np.finfo(np.float64).eps
    constant = var <= n * eps * var + (n * mean * eps) ** 2
    scale = np.sqrt(var)
    scale[constant | (scale < 10 * eps)] = 1.0
    return mean, scale


def diff2_silos(
    data: dict,
    *,
    seed: int,
    task: str,
    n_silos: int = 10,
    train_fraction: float = 0.8,
    normalization_stats: str | None = None,
    scale_target: bool = True,
    drop_remainder: bool | None = None,
    name: str = "diff2",
    dtype=np.float32,
    construction: str = "paper",
) -> FederatedDataset:
    """The DIFF2 preprocessing and client split (Appendix A; the authors' code).

    1. shuffle and split 80/20 (``n_test = ceil(0.2 n)``);
    2. standardise the columns in ``data["standardize_mask"]`` (all when absent)
       to mean 0 / std 1, statistics from the whole dataset
       (``normalization_stats="all"``; the paper does not say which) or the training
       split (``"train"``); constant columns become 0;
    3. regression (``task="regression"``): divide y by max |y| over the whole
       dataset (``scale_target``), so y lies in (0, 1];
    4. the training set (already shuffled) is dealt round-robin: record ``i``
       goes to client ``i mod P``. With ``drop_remainder`` (train sizes are not multiples of P) only the
       first ``P * floor(n_train / P)`` records are dealt, so all clients have
       exactly ``n_min = floor(n_train / P)`` records; otherwise client sizes
       differ by at most one.

    Classification labels are int32 class codes (``num_classes`` = number of
    classes in ``data["class_names"]`` or in y); the test set is pooled.

    ``construction="paper"`` (default) is the above with ``normalization_stats="all"``
    and ``drop_remainder=True``. ``construction="authors"`` is the authors'
    ``My_Dataset`` + ``random_split_to_local_datasets``: the split is
    scikit-learn's ``train_test_split(test_size=0.2, random_state=0)``
    (:func:`dpjax.data.isrl.authors_train_test_split`), the same for every
    ``seed``; features are cast to float32 first and standardised with
    ``StandardScaler`` statistics of the training split
    (:func:`standard_scaler_fit`, ``normalization_stats="train"``); every
    training record is dealt (``drop_remainder=False``; ``n_min`` is the
    smallest client). Steps 3 and 4 are the same in both.
    """
    check_choice("task", task, ("regression", "classification"))
    check_choice("construction", construction, CONSTRUCTIONS)
    authors = construction == "authors"
    if normalization_stats is None:
        normalization_stats = "train" if authors else "all"
    check_choice("normalization_stats", normalization_stats, ("all", "train"))
    if drop_remainder is None:
        drop_remainder = not authors
    seed = check_seed(seed)
    train_fraction = check_train_fraction(train_fraction)
    if authors and (normalization_stats != "train" or drop_remainder or train_fraction != 0.8):
        raise ValueError(f"construction='authors' fixes normalization_stats='train', drop_remainder=False and "
                         f"train_fraction=0.8 (got {normalization_stats!r}, {drop_remainder!r}, {train_fraction!r})")
    for flag_name, flag in (("scale_target", scale_target), ("drop_remainder", drop_remainder)):
        if not isinstance(flag, bool):
            raise ValueError(f"{flag_name}={flag!r} must be a bool")
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError("data must be a loader's dict (keys 'x', 'y', ...)")
    x, y = np.asarray(data["x"]), np.asarray(data["y"])
    if x.ndim != 2 or y.shape != (x.shape[0],):
        raise ValueError(f"data['x'] {x.shape} / data['y'] {y.shape} must be [n, d] / [n]")
    n = x.shape[0]
    n_silos = check_int("n_silos", n_silos, min_value=1)
    n_train, n_test = split_sizes(n, train_fraction)
    if n_train < n_silos:
        raise ValueError(f"n_silos={n_silos} exceeds the {n_train} training records")
    mask = np.asarray(data.get("standardize_mask", np.ones(x.shape[1], bool)), bool)
    if mask.shape != (x.shape[1],):
        raise ValueError(f"data['standardize_mask'] has shape {mask.shape}, expected ({x.shape[1]},)")
    cols = np.flatnonzero(mask)
    if authors:
        tr, te = authors_train_test_split(n, 0.2, random_state=AUTHORS_SPLIT_SEED)
        n_train, n_test = tr.size, te.size
        x32 = x.astype(np.float32)  # the script casts before splitting and scaling
        mean, scale = standard_scaler_fit(x32[tr][:, cols]) if cols.size else (np.zeros(0), np.ones(0))

        def feats(rows):
            z = x32[rows]
            if cols.size:
                block = z[:, cols]
                block -= mean  # in float32, as StandardScaler.transform
                block /= scale
                z[:, cols] = block
            return z.astype(dtype)
    else:
        perm = np.random.default_rng(seed).permutation(n)
        tr, te = perm[:n_train], perm[n_train:]
        stat_rows = slice(None) if normalization_stats == "all" else tr
        mean, std = standardize_fit(x[stat_rows][:, cols]) if cols.size else (np.zeros(0), np.ones(0))

        def feats(rows):
            z = x[rows].astype(np.float64)
            if cols.size:
                z[:, cols] = (z[:, cols] - mean) / std
            return z.astype(dtype)

    if task == "regression":
        y_scale = float(np.max(np.abs(y))) if scale_target else 1.0
        if y_scale == 0:
            y_scale = 1.0
        ty = (y / y_scale).astype(dtype)
        num_classes = None
    else:
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
        ty = yi.astype(np.int32)
        y_scale = None
    n_p = n_train // n_silos
    dealt = tr[: n_p * n_silos] if drop_remainder else tr
    silo_idx = [dealt[p::n_silos] for p in range(n_silos)]
    meta = {
        "paper": "DIFF2 (Murata & Suzuki, ICML 2023), Appendix A",
        "num_silos": n_silos,
        "n_total": int(n),
        "n_train": int(n_train),
        "n_test": int(n_test),
        "n_per_silo": [int(s.size) for s in silo_idx],
        "n_min": int(min(s.size for s in silo_idx)),
        "dropped_train_records": int(n_train - sum(s.size for s in silo_idx)),
        "d": int(x.shape[1]),
        "seed": seed,
        "train_fraction": train_fraction,
        "normalization_stats": normalization_stats,
        "construction": construction,
        "split": (f"sklearn train_test_split(test_size=0.2, random_state={AUTHORS_SPLIT_SEED}), the same for every seed"
                  if authors else f"numpy default_rng(seed={seed}) permutation"),
        "standardized_columns": int(cols.size),
        "symbolic_columns": data.get("symbolic_columns"),
        "target_scale": y_scale,
        "partition": "round-robin over the shuffled training set (index mod P), i.i.d.",
        "source": data.get("source"),
        "feature_names": data.get("feature_names"),
        "class_names": data.get("class_names"),
        "train_indices": silo_idx,
        "test_indices": te,
    }
    return FederatedDataset(
        train_x=[feats(s) for s in silo_idx],
        train_y=[ty[s] for s in silo_idx],
        test_x=[],
        test_y=[],
        name=name,
        num_classes=num_classes,
        metadata=meta,
        pooled_test_x=feats(te),
        pooled_test_y=ty[te],
    )


#: name -> (loader, task) for :func:`diff2_dataset`.
DIFF2_DATASETS = {
    "california_housing": (load_california_housing, "regression"),
    "gas_turbine": (load_gas_turbine, "regression"),
    "blogfeedback": (load_blogfeedback, "regression"),
    "kddcup99": (load_kddcup99, "classification"),
    "a9a": (load_a9a, "classification"),
    "w8a": (load_w8a, "classification"),
}


def diff2_dataset(name: str, data_dir: str | os.PathLike | None = None, *, seed: int, construction: str = "paper",
                  **kwargs) -> FederatedDataset:
    """Loads ``name`` (a key of :data:`DIFF2_DATASETS`) under ``construction``
    (:func:`load_diff2_raw`) and applies :func:`diff2_silos` (P = 10 by default;
    keyword arguments are passed on). Cover Type is not available."""
    data = load_diff2_raw(name, data_dir, construction=construction)
    return diff2_silos(data, seed=seed, task=DIFF2_DATASETS[name][1], name=f"diff2_{name}",
                       construction=construction, **kwargs)


def download_diff2(name: str, data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads one of the DIFF2/LIBSVM datasets (``california_housing``, ``gas_turbine``,
    ``blogfeedback``, ``kddcup99``, ``a9a``, ``w8a``) with SHA-256 checks; returns its folder."""
    check_choice("name", name, tuple(DIFF2_DATASETS))
    return download_dataset(name, data_dir)
