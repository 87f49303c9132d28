"""The ISRL-DP MNIST silos as the authors' script builds them (``DP_FL_MNIST_logistic_FINAL.py``,
``load_MNIST2``; lowya/Private-Federated-Learning-Without-a-Trusted-Server).

The paper's construction is ``dpjax.data.isrl_mnist_silos``; this one draws other rows and splits them otherwise, then
builds the same features and labels (``dpjax.data.isrl.mnist_parity_silos``).
"""

from __future__ import annotations

import numpy as np

from dpjax._validate import check_int, check_probability
from dpjax.data.isrl import (ISRL_MNIST_PAIRS, MnistDigits, MnistSiloSizes, mnist_parity_silos)
from dpjax.data.preprocess import PCA
from dpjax.reproduce.sklearn_numerics import authors_train_test_split

__all__ = ["authors_mnist_silos"]


def _pooled_draws(digits: MnistDigits, sizes: MnistSiloSizes, seed: int, p: float) -> list[np.ndarray]:
    """The script's rows: the pool of each digit is its first ``n_per_digit`` images; each silo draws
    ``round(n_silo (1 - p))`` rows with replacement from its pair's pool (evens first) and the rest from
    the pool of all digits, with ``RandomState(seed)``."""
    n = sizes.n_per_digit
    for k in range(10):
        if digits.by_digit[k].size < n:
            raise ValueError(f"n_per_digit={n} exceeds the {digits.by_digit[k].size} images of digit {k}")
    first = [digits.by_digit[k][:n] for k in range(10)]
    all_nums = np.concatenate([first[k] for k in (0, 2, 4, 6, 8)] + [first[k] for k in (1, 3, 5, 7, 9)])
    legacy = np.random.RandomState(seed)
    n_individual = int(np.round(sizes.n_silo * (1.0 - p)))
    silo_idx = []
    for e, o in ISRL_MNIST_PAIRS:
        task = np.concatenate([first[e], first[o]])
        own = task[legacy.choice(task.size, size=n_individual)]
        mixed = all_nums[legacy.choice(all_nums.size, size=sizes.n_silo - n_individual)]
        silo_idx.append(np.concatenate([own, mixed]))
    return silo_idx


def authors_mnist_silos(images, labels, *, seed: int, n_per_digit: int = 774, pca_dim: int | None = 50,
                        heterogeneity_p: float = 0.0, pca: PCA | None = None, dtype=np.float32):
    """The 25 pair silos of ``load_MNIST2``: the pool of each digit is its **first** ``n_per_digit`` images in file
    order (the same 7,740 images in every trial, shared by the five silos holding that digit); each silo draws
    ``2 n_per_digit`` rows **with replacement** from its pair's pool (evens first, as in the script) and, for ``p > 0``,
    from the pool of all digits; then scikit-learn's ``train_test_split(test_size=0.2, random_state=1)``
    (``authors_train_test_split``, bit for bit), so most test rows are copies of training images. The with-replacement
    draws use ``RandomState(seed)``: the script's global ``np.random`` state at that point depends on everything it ran
    before. Features and labels as ``dpjax.data.isrl_mnist_silos`` (metadata ``construction="authors"``).
    """
    seed = check_int("seed", seed, min_value=0)
    n_per_digit = check_int("n_per_digit", n_per_digit, min_value=1)
    p = check_probability("heterogeneity_p", heterogeneity_p)
    digits = MnistDigits.of(images, labels)
    sizes = MnistSiloSizes.of(n_per_digit, p, 0.8)
    split = authors_train_test_split(sizes.n_silo, 0.2, random_state=1)
    splits = [(idx[split[0]], idx[split[1]]) for idx in _pooled_draws(digits, sizes, seed, p)]
    settings = {"heterogeneity_p": p, "replace": True, "construction": "authors", "train_fraction": 0.8, "seed": seed}
    return mnist_parity_silos(digits, sizes, splits, pca_dim=pca_dim, pca=pca, dtype=dtype, settings=settings)
