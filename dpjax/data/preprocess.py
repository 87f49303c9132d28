"""Preprocessing helpers in NumPy: PCA, standardisation, min-max scaling, encodings, splits."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from dpjax._validate import check_int, check_real

__all__ = ["PCA", "label_encode", "minmax_scale", "one_hot", "pca_fit", "pca_transform", "split_sizes", "standardize",
           "standardize_fit"]


@dataclasses.dataclass(frozen=True)
class PCA:
    """A fitted PCA: ``z = (x - mean) @ components.T``.

    Attributes: mean: ``[d]`` float64 feature means of the fitting data. components: ``[k, d]`` float64 orthonormal
      rows, by decreasing variance. explained_variance: ``[k]`` variances along the components (ddof = 1).
      explained_variance_ratio: ``[k]`` fractions of the total variance.
    """
    mean: np.ndarray
    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])


def _as_2d(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"{name} has shape {x.shape}; expected [n, d] (or [n, ...], flattened)")
    return x.reshape(x.shape[0], -1)


def pca_fit(x, n_components: int) -> PCA:
    """Fits a centred PCA in float64 via the eigen-decomposition of the covariance.

    Deterministic sign convention: each component's entry of largest absolute value is positive. ``x`` may have any
    trailing shape (flattened per row). (ISRL-DP Appendix I: PCA to d = 50 of the [0, 1]-scaled MNIST training images.)
    """
    x = _as_2d("x", x)
    n, d = x.shape
    k = check_int("n_components", n_components, min_value=1)
    if k > d:
        raise ValueError(f"n_components={k} must be <= the number of features d={d}")
    if n < 2:
        raise ValueError(f"x has n={n} rows; PCA needs at least 2")
    x64 = x.astype(np.float64, copy=False)
    mean = x64.mean(axis=0)
    xc = x64 - mean
    cov = (xc.T @ xc) / (n - 1)
    evals, evecs = np.linalg.eigh(cov)  # ascending
    order = np.argsort(evals)[::-1][:k]
    evals = np.clip(evals[order], 0.0, None)
    comps = evecs[:, order].T.copy()
    pivot = np.argmax(np.abs(comps), axis=1)
    signs = np.sign(comps[np.arange(k), pivot])
    signs[signs == 0] = 1.0
    comps *= signs[:, None]
    total = float(np.trace(cov))
    ratio = evals / total if total > 0 else np.zeros_like(evals)
    return PCA(mean=mean, components=comps, explained_variance=evals, explained_variance_ratio=ratio)


def pca_transform(pca: PCA, x, *, dtype=np.float64) -> np.ndarray:
    """Projects ``x`` (rows flattened) onto the fitted components: ``(x - mean) @ components.T``."""
    x = _as_2d("x", x)
    if x.shape[1] != pca.mean.shape[0]:
        raise ValueError(f"x has d={x.shape[1]} features, the PCA was fitted on d={pca.mean.shape[0]}")
    return ((x.astype(np.float64, copy=False) - pca.mean) @ pca.components.T).astype(dtype, copy=False)


def standardize_fit(x, *, ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard deviations of ``x`` (``[n, d]``); zero stds are replaced by 1.

    ``ddof=0`` matches scikit-learn's ``StandardScaler``. With std replaced by 1, a constant column standardises to all
    zeros.
    """
    x = _as_2d("x", x).astype(np.float64, copy=False)
    ddof = check_int("ddof", ddof, min_value=0)
    if x.shape[0] <= ddof:
        raise ValueError(f"x has n={x.shape[0]} rows; need more than ddof={ddof}")
    mean = x.mean(axis=0)
    std = x.std(axis=0, ddof=ddof)
    std = np.where(std > 0, std, 1.0)
    return mean, std


def standardize(x, mean=None, std=None, *, columns: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
    """``(x - mean) / std`` on the selected ``columns`` (all by default), float64 copy.

    ``mean``/``std`` default to the statistics of ``x`` itself (:func:`standardize_fit`); when given they are per
    selected column.
    """
    x = _as_2d("x", x).astype(np.float64, copy=True)
    cols = np.arange(x.shape[1]) if columns is None else np.asarray(columns)
    if cols.dtype == bool:
        if cols.shape != (x.shape[1],):
            raise ValueError(f"columns mask has shape {cols.shape}; expected ({x.shape[1]},)")
        cols = np.flatnonzero(cols)
    if cols.size == 0:
        return x
    if mean is None or std is None:
        m, s = standardize_fit(x[:, cols])
        mean = m if mean is None else mean
        std = s if std is None else std
    mean = np.asarray(mean, np.float64)
    std = np.asarray(std, np.float64)
    if mean.shape != (cols.size,) or std.shape != (cols.size,):
        raise ValueError(f"mean {mean.shape} / std {std.shape} must have shape ({cols.size},)")
    if np.any(std <= 0):
        raise ValueError("std must be > 0 in every selected column")
    x[:, cols] = (x[:, cols] - mean) / std
    return x


def minmax_scale(x, lo=None, hi=None, *, feature_range: tuple[float, float] = (0.0, 1.0)) -> np.ndarray:
    """Maps each column linearly from ``[lo, hi]`` (default: its min/max) to ``feature_range``.

    Constant columns map to ``feature_range[0]``.
    """
    x = _as_2d("x", x).astype(np.float64, copy=False)
    a = check_real("feature_range[0]", feature_range[0])
    b = check_real("feature_range[1]", feature_range[1])
    if not a < b:
        raise ValueError(f"feature_range={feature_range!r} must satisfy low < high")
    lo = x.min(axis=0) if lo is None else np.broadcast_to(np.asarray(lo, np.float64), x.shape[1:])
    hi = x.max(axis=0) if hi is None else np.broadcast_to(np.asarray(hi, np.float64), x.shape[1:])
    span = hi - lo
    if np.any(span < 0):
        raise ValueError("hi must be >= lo in every column")
    safe = np.where(span > 0, span, 1.0)
    return a + (b - a) * (x - lo) / safe


def one_hot(labels, num_classes: int | None = None, *, dtype=np.float32) -> np.ndarray:
    """``[n]`` integer labels in ``[0, num_classes)`` -> ``[n, num_classes]`` one-hot."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels has shape {labels.shape}; expected [n]")
    if labels.size and not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels has dtype {labels.dtype}; expected integers")
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.size else 1
    num_classes = check_int("num_classes", num_classes, min_value=1)
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, num_classes={num_classes})")
    out = np.zeros((labels.shape[0], num_classes), dtype=dtype)
    out[np.arange(labels.shape[0]), labels] = 1
    return out


def label_encode(values, classes: Sequence | None = None) -> tuple[np.ndarray, list]:
    """Maps values to ``int64`` codes. ``classes`` defaults to the sorted unique values (scikit-learn ``LabelEncoder``
    order); returns ``(codes, classes)``."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"values has shape {values.shape}; expected [n]")
    uniq, inverse = np.unique(values, return_inverse=True)
    if classes is None:
        classes = uniq.tolist()
    classes = list(classes)
    lookup = {c: i for i, c in enumerate(classes)}
    try:
        table = np.array([lookup[v] for v in uniq.tolist()], dtype=np.int64)
    except KeyError as e:
        raise ValueError(f"value {e.args[0]!r} is not among classes={classes!r}") from None
    codes = table[inverse.reshape(-1)] if table.size else np.zeros(0, np.int64)
    return codes, classes


def split_sizes(n: int, train_fraction: float) -> tuple[int, int]:
    """``(n_train, n_test)`` with ``n_test = ceil((1 - train_fraction) * n)`` (scikit-learn's ``train_test_split``
    convention; e.g. 1548 -> 1238/310, 20640 -> 16512/4128)."""
    n = check_int("n", n, min_value=0)
    f = check_real("train_fraction", train_fraction)
    if not 0.0 < f <= 1.0:
        raise ValueError(f"train_fraction={train_fraction!r} must be in (0, 1]")
    test_frac = round(1.0 - f, 12)
    n_test = math.ceil(test_frac * n - 1e-9)
    return n - n_test, n_test
