"""scikit-learn's numerics the papers' public scripts rely on, without scikit-learn: its ``train_test_split``
(``authors_train_test_split``) and ``StandardScaler`` statistics (``standard_scaler_fit``), bit for bit. The authors'
constructions of ``dpjax.reproduce.isrl`` and ``dpjax.reproduce.diff2`` build their data with them."""

from __future__ import annotations

import numpy as np

from dpjax._validate import check_int, check_probability

__all__ = ["authors_train_test_split", "standard_scaler_fit"]


def authors_train_test_split(n_samples: int, test_fraction: float = 0.2, random_state: int = 1):
    """``(train_idx, test_idx)`` of scikit-learn's ``train_test_split(..., test_size=test_fraction,
    random_state=random_state)``, without scikit-learn.

    ``ShuffleSplit`` draws ``RandomState(random_state).permutation(n)``; the first ``ceil(test_fraction n)`` positions
    are the test rows, the rest (in permutation order) the training rows. Bit-for-bit the authors' split.
    """
    n = check_int("n_samples", n_samples, min_value=2)
    test_fraction = check_probability("test_fraction", test_fraction, allow_zero=False)
    n_test = int(np.ceil(test_fraction * n))
    if not 0 < n_test < n:
        raise ValueError(f"test_fraction={test_fraction!r} leaves no training or no test row of n_samples={n}")
    perm = np.random.RandomState(random_state).permutation(n)
    return perm[n_test:], perm[:n_test]



def standard_scaler_fit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean_, scale_)`` of scikit-learn's ``StandardScaler().fit(x)`` with its numerics.

    float64 accumulators over (possibly float32) ``x``, the two-pass variance with the correction term of
    ``_incremental_mean_and_var``, ddof = 0, and scale 1 for columns ``_is_constant_feature`` flags (var <= n eps var
    + (n mean eps)^2) or whose std is below 10 eps. Applying it as scikit-learn does (``x -= mean_; x /= scale_`` in
    ``x``'s dtype) gives its values bit for bit.
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
