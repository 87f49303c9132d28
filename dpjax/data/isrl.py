"""Silo splits of the ISRL-DP federated learning experiments (Lowy & Razaviyayn, ICLR 2023).

ISRL spec §5.2 (MNIST, binary logistic regression), §5.3 (health insurance,
linear regression) and §5.4 (obesity, softmax regression).
"""

from __future__ import annotations

import numbers

import numpy as np

from dpjax._validate import check_int, check_probability, check_choice
from dpjax.data.federated import FederatedDataset
from dpjax.data.preprocess import PCA, pca_fit, pca_transform, split_sizes, standardize_fit

__all__ = [
    "ISRL_MNIST_PAIRS",
    "insurance_silos",
    "isrl_mnist_silos",
    "obesity_silos",
]

#: (even, odd) digit pair of each of the 25 silos; silo m = 5 * (even // 2) + (odd // 2).
ISRL_MNIST_PAIRS = tuple((e, o) for e in (0, 2, 4, 6, 8) for o in (1, 3, 5, 7, 9))


def _check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative integer")
    return int(seed)


def _check_train_fraction(train_fraction) -> float:
    f = check_probability("train_fraction", train_fraction, allow_zero=False)
    if f >= 1.0:
        raise ValueError(f"train_fraction={train_fraction!r} must be < 1 (a test split is needed)")
    return f


def isrl_mnist_silos(
    images,
    labels,
    *,
    seed: int,
    n_per_digit: int = 774,
    train_fraction: float = 0.8,
    pca_dim: int | None = 50,
    heterogeneity_p: float = 0.0,
    replace: bool = False,
    pca: PCA | None = None,
    dtype=np.float32,
) -> FederatedDataset:
    """The 25 (even, odd)-digit-pair silos of ISRL experiment A (ISRL spec §5.2, Fig. 4/7).

    Construction (following Woodworth et al. 2020b, as in the authors' code):

    * pixels scaled to [0, 1]; PCA to ``pca_dim`` dimensions fitted (centred) on
      *all* ``images`` passed — pass the full 60,000-image training set — or
      reuse a fitted ``pca`` (it must have been fitted on [0, 1]-scaled pixels);
      ``pca_dim=None`` keeps the 784 raw pixels;
    * N = 25 silos, silo m holds the pair ``ISRL_MNIST_PAIRS[m]``; label 1 for
      an even digit, 0 for an odd one (task: even vs odd);
    * each silo gets ``2 * n_per_digit`` records: ``round((1 - p) * 2 n)`` from
      its own pair (split evenly between the two digits) and the rest from the
      pool of all digits (heterogeneity knob ``p = heterogeneity_p``; p = 0 is
      the paper's maximal heterogeneity, p = 1 is i.i.d.);
    * shuffled and split per silo with ``n_test = ceil((1 - train_fraction) n)``:
      774 per digit -> 1548 per silo -> 1238 train / 310 test.

    ``replace=False`` (default, spec §7 I-14): records are drawn without
    replacement *across all silos*, so no image appears twice in a silo, silos
    are disjoint and train/test never overlap. ``replace=True`` reproduces the
    authors' code, which draws with replacement (duplicates and possible
    train/test leakage). ``metadata["train_indices"]``/``["test_indices"]`` give
    the row of ``images`` behind every record.
    """
    seed = _check_seed(seed)
    n_per_digit = check_int("n_per_digit", n_per_digit, min_value=1)
    train_fraction = _check_train_fraction(train_fraction)
    p = check_probability("heterogeneity_p", heterogeneity_p)
    if not isinstance(replace, bool):
        raise ValueError(f"replace={replace!r} must be a bool")
    if pca_dim is not None:
        pca_dim = check_int("pca_dim", pca_dim, min_value=1)
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.ndim < 2 or images.shape[0] != labels.shape[0] or labels.ndim != 1:
        raise ValueError(f"images {images.shape} and labels {labels.shape} must be [n, ...] and [n]")
    x = images.reshape(images.shape[0], -1)
    if images.dtype == np.uint8:
        x = x.astype(np.float64) / 255.0
    else:
        x = x.astype(np.float64)
        if x.size and (x.min() < 0 or x.max() > 1):
            raise ValueError("images must be uint8 (0..255) or floats already scaled to [0, 1]")
    if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 9:
        raise ValueError("labels must be integer digits 0..9")
    if pca_dim is not None and pca_dim > x.shape[1]:
        raise ValueError(f"pca_dim={pca_dim} must be <= the number of pixels {x.shape[1]}")

    n_silo = 2 * n_per_digit
    n_own = int(round((1.0 - p) * n_silo))
    own_even, own_odd = n_own - n_own // 2, n_own // 2
    n_pool = n_silo - n_own
    n_train, n_test = split_sizes(n_silo, train_fraction)
    if n_train < 1:
        raise ValueError(f"train_fraction={train_fraction} leaves no training record in a silo of {n_silo}")

    rng = np.random.default_rng(seed)
    by_digit = [np.flatnonzero(labels == k) for k in range(10)]
    silo_idx = []
    if replace:
        all_idx = np.arange(x.shape[0])
        for e, o in ISRL_MNIST_PAIRS:
            parts = [
                rng.choice(by_digit[e], own_even, replace=True) if own_even else np.empty(0, np.int64),
                rng.choice(by_digit[o], own_odd, replace=True) if own_odd else np.empty(0, np.int64),
                rng.choice(all_idx, n_pool, replace=True) if n_pool else np.empty(0, np.int64),
            ]
            silo_idx.append(np.concatenate(parts))
    else:
        # Each digit serves 5 silos: own records are consecutive blocks of one permutation per digit.
        for k in range(10):
            need = 5 * (own_even if k % 2 == 0 else own_odd)
            if need > by_digit[k].size:
                raise ValueError(
                    f"n_per_digit={n_per_digit} with heterogeneity_p={p} needs {need} images of digit {k} "
                    f"without replacement, only {by_digit[k].size} available (use replace=True or a smaller n)"
                )
        perms = [rng.permutation(by_digit[k]) for k in range(10)]
        used = np.zeros(x.shape[0], bool)
        own = []
        for e, o in ISRL_MNIST_PAIRS:
            je, jo = o // 2, e // 2  # block index of this silo within digit e's (resp. o's) 5 silos
            a = perms[e][je * own_even : (je + 1) * own_even]
            b = perms[o][jo * own_odd : (jo + 1) * own_odd]
            used[a] = True
            used[b] = True
            own.append(np.concatenate([a, b]))
        free = rng.permutation(np.flatnonzero(~used))
        if 25 * n_pool > free.size:
            raise ValueError(
                f"n_per_digit={n_per_digit} with heterogeneity_p={p} needs {25 * n_pool} pool images without "
                f"replacement, only {free.size} left (use replace=True or a smaller n)"
            )
        for m in range(25):
            silo_idx.append(np.concatenate([own[m], free[m * n_pool : (m + 1) * n_pool]]))

    if pca_dim is None:
        feats = x
        pca_info = None
    else:
        if pca is None:
            pca = pca_fit(x, pca_dim)
        elif pca.n_components < pca_dim or pca.mean.shape[0] != x.shape[1]:
            raise ValueError(
                f"pca has {pca.n_components} components on d={pca.mean.shape[0]}; need >= pca_dim={pca_dim} on d={x.shape[1]}"
            )
        feats = None
        pca_info = pca
    parity = (labels % 2 == 0).astype(np.int32)

    def featurize(idx):
        if pca_info is None:
            return feats[idx].astype(dtype)
        z = (x[idx] - pca_info.mean) @ pca_info.components[:pca_dim].T
        return z.astype(dtype)

    train_x, train_y, test_x, test_y, tr_idx, te_idx = [], [], [], [], [], []
    for idx in silo_idx:
        idx = rng.permutation(idx)
        tr, te = idx[:n_train], idx[n_train:]
        tr_idx.append(tr)
        te_idx.append(te)
        train_x.append(featurize(tr))
        train_y.append(parity[tr])
        test_x.append(featurize(te))
        test_y.append(parity[te])
    d = train_x[0].shape[1]
    meta = {
        "paper": "ISRL-DP (Lowy & Razaviyayn, ICLR 2023), spec §5.2",
        "num_silos": 25,
        "pairs": list(ISRL_MNIST_PAIRS),
        "n_per_digit": n_per_digit,
        "n_per_silo": n_silo,
        "n_train_per_silo": n_train,
        "n_test_per_silo": n_test,
        "n_own_per_silo": n_own,
        "n_pool_per_silo": n_pool,
        "heterogeneity_p": p,
        "replace": replace,
        "train_fraction": train_fraction,
        "d": d,
        "seed": seed,
        "pixel_scaling": "x / 255 in [0, 1]",
        "pca_dim": pca_dim,
        "pca_fit_on": None if pca_dim is None else f"{x.shape[0]} images (centred)",
        "pca_explained_variance_ratio": None
        if pca_info is None
        else float(pca_info.explained_variance_ratio[:pca_dim].sum()),
        "label": "1 = even digit, 0 = odd digit",
        "train_indices": tr_idx,
        "test_indices": te_idx,
    }
    return FederatedDataset(
        train_x=train_x,
        train_y=train_y,
        test_x=test_x,
        test_y=test_y,
        name="isrl_mnist",
        num_classes=2,
        metadata=meta,
    )
