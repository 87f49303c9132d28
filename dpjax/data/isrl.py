"""Silo splits of the ISRL-DP federated learning experiments (Lowy & Razaviyayn, ICLR 2023).

ISRL-DP Section 6 / Appendix I: MNIST, binary logistic regression (Fig. 4/7); health insurance, linear regression (Fig.
5, 8-9); obesity, softmax regression (Fig. 6).
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from dpjax._validate import check_choice, check_int, check_probability
from dpjax.data.federated import FederatedDataset
from dpjax.data.preprocess import PCA, pca_fit, split_sizes, standardize_fit

__all__ = ["ISRL_MNIST_PAIRS", "MnistDigits", "MnistSiloSizes", "insurance_silos", "isrl_mnist_silos",
           "mnist_parity_silos", "obesity_silos"]

#: (even, odd) digit pair of each of the 25 silos; silo m = 5 * (even // 2) + (odd // 2).
ISRL_MNIST_PAIRS = tuple((e, o) for e in (0, 2, 4, 6, 8) for o in (1, 3, 5, 7, 9))

# (weakref to the images, pca, pca_dim, features): the last projection of a whole image
# set. A protocol splits the same 60,000 images once per trial (20 trials for Fig. 4), and
# projecting all of them once costs about as much as projecting one split's 38,700 rows.
_PROJECTION_CACHE: list = []


def _projected_images(images: np.ndarray, rows, pca: PCA, pca_dim: int) -> np.ndarray:
    """``(rows(all) - mean) @ components[:pca_dim].T`` for every image, cached for ``images``."""
    for ref, cached_pca, cached_dim, feats in _PROJECTION_CACHE:
        if ref() is images and cached_pca is pca and cached_dim == pca_dim:
            return feats
    feats = (rows(slice(None)) - pca.mean) @ pca.components[:pca_dim].T
    feats.setflags(write=False)
    _PROJECTION_CACHE[:] = [(weakref.ref(images), pca, pca_dim, feats)]
    return feats


def check_train_fraction(train_fraction) -> float:
    f = check_probability("train_fraction", train_fraction, allow_zero=False)
    if f >= 1.0:
        raise ValueError(f"train_fraction={train_fraction!r} must be < 1 (a test split is needed)")
    return f


@dataclasses.dataclass(frozen=True)
class MnistDigits:
    """Checked MNIST images and labels: the flat pixels, each digit's row indices, and ``rows(idx)``."""
    images: np.ndarray
    labels: np.ndarray
    pixels: np.ndarray
    by_digit: tuple

    @classmethod
    def of(cls, images, labels) -> "MnistDigits":
        """``images`` ``[n, ...]`` (uint8 0..255 or floats in [0, 1]) and integer digits ``labels`` ``[n]``."""
        images = np.asarray(images)
        labels = np.asarray(labels)
        if images.ndim < 2 or images.shape[0] != labels.shape[0] or labels.ndim != 1:
            raise ValueError(f"images {images.shape} and labels {labels.shape} must be [n, ...] and [n]")
        pixels = images.reshape(images.shape[0], -1)
        if images.dtype != np.uint8 and pixels.size and (pixels.min() < 0 or pixels.max() > 1):
            raise ValueError("images must be uint8 (0..255) or floats already scaled to [0, 1]")
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 9:
            raise ValueError("labels must be integer digits 0..9")
        missing = sorted(set(range(10)) - set(np.unique(labels).tolist()))
        if missing:
            # every ISRL silo pairs an even and an odd digit: a label set without some digit is a wrong file or
            # split, not a shortfall that a smaller n_per_digit would fix
            raise ValueError(f"labels hold no image of digit(s) {missing} (present: "
                             f"{sorted(np.unique(labels).tolist())}); the 25 pair silos need all ten digits 0..9")
        return cls(images, labels, pixels, tuple(np.flatnonzero(labels == k) for k in range(10)))

    def rows(self, idx) -> np.ndarray:
        """Rows ``idx`` of the images as float64 in [0, 1] (converting only those rows: a float64 copy of all 60,000
        images per split cost 0.5 s per trial)."""
        r = self.pixels[idx].astype(np.float64)
        return r / 255.0 if self.images.dtype == np.uint8 else r


@dataclasses.dataclass(frozen=True)
class MnistSiloSizes:
    """Records per silo: ``n_silo = 2 n_per_digit``, ``n_own = round((1 - p) n_silo)`` from the silo's pair
    (``own_even`` + ``own_odd``), ``n_pool`` from all digits, and the per-silo ``n_train`` / ``n_test``."""
    n_per_digit: int
    n_silo: int
    n_own: int
    own_even: int
    own_odd: int
    n_pool: int
    n_train: int
    n_test: int

    @classmethod
    def of(cls, n_per_digit: int, heterogeneity_p: float, train_fraction: float) -> "MnistSiloSizes":
        n_silo = 2 * n_per_digit
        n_own = int(round((1.0 - heterogeneity_p) * n_silo))
        n_train, n_test = split_sizes(n_silo, train_fraction)
        if n_train < 1:
            raise ValueError(f"train_fraction={train_fraction} leaves no training record in a silo of {n_silo}")
        return cls(n_per_digit, n_silo, n_own, n_own - n_own // 2, n_own // 2, n_silo - n_own, n_train, n_test)


def _draws_with_replacement(digits: MnistDigits, sizes: MnistSiloSizes, rng) -> list[np.ndarray]:
    """Each silo's records drawn with replacement from all images of its two digits and, for its pool share, from all
    images."""
    all_idx = np.arange(digits.pixels.shape[0])
    empty = np.empty(0, np.int64)
    silo_idx = []
    for e, o in ISRL_MNIST_PAIRS:
        silo_idx.append(np.concatenate([
            rng.choice(digits.by_digit[e], sizes.own_even, replace=True) if sizes.own_even else empty,
            rng.choice(digits.by_digit[o], sizes.own_odd, replace=True) if sizes.own_odd else empty,
            rng.choice(all_idx, sizes.n_pool, replace=True) if sizes.n_pool else empty,
        ]))
    return silo_idx


def _disjoint_draws(digits: MnistDigits, sizes: MnistSiloSizes, rng, p: float) -> list[np.ndarray]:
    """Each silo's records drawn without replacement across all silos: its own records are consecutive blocks of one
    permutation per digit (each digit serves 5 silos), its pool share a block of the rest."""
    for k in range(10):
        need = 5 * (sizes.own_even if k % 2 == 0 else sizes.own_odd)
        if need > digits.by_digit[k].size:
            raise ValueError(
                f"n_per_digit={sizes.n_per_digit} with heterogeneity_p={p} needs {need} images of digit {k} "
                f"without replacement, only {digits.by_digit[k].size} available (pass replace=True to isrl_mnist_silos, or a smaller n_per_digit)")
    perms = [rng.permutation(digits.by_digit[k]) for k in range(10)]
    used = np.zeros(digits.pixels.shape[0], bool)
    own = []
    for e, o in ISRL_MNIST_PAIRS:
        je, jo = o // 2, e // 2  # block index of this silo within digit e's (resp. o's) 5 silos
        a = perms[e][je * sizes.own_even : (je + 1) * sizes.own_even]
        b = perms[o][jo * sizes.own_odd : (jo + 1) * sizes.own_odd]
        used[a] = True
        used[b] = True
        own.append(np.concatenate([a, b]))
    free = rng.permutation(np.flatnonzero(~used))
    n_pool = sizes.n_pool
    if 25 * n_pool > free.size:
        raise ValueError(
            f"n_per_digit={sizes.n_per_digit} with heterogeneity_p={p} needs {25 * n_pool} pool images without "
            f"replacement, only {free.size} left (pass replace=True to isrl_mnist_silos, or a smaller n_per_digit)")
    return [np.concatenate([own[m], free[m * n_pool : (m + 1) * n_pool]]) for m in range(25)]


def isrl_mnist_silos(images, labels, *, seed: int, n_per_digit: int = 774, train_fraction: float = 0.8,
                     pca_dim: int | None = 50, heterogeneity_p: float = 0.0, replace: bool = False,
                     pca: PCA | None = None, dtype=np.float32) -> FederatedDataset:
    """The 25 (even, odd)-digit-pair silos of the ISRL-DP MNIST experiment (Lowy & Razaviyayn 2023, Figs. 4/7).

    Following Woodworth et al. 2020b, as in the authors' code:

    * pixels scaled to [0, 1]; PCA to ``pca_dim`` dimensions fitted (centred) on *all* ``images`` passed — pass the full
      60,000-image training set — or reuse a fitted ``pca`` (it must have been fitted on [0, 1]-scaled pixels);
      ``pca_dim=None`` keeps the 784 raw pixels;
    * N = 25 silos, silo m holds the pair ``ISRL_MNIST_PAIRS[m]``; label 1 for an even digit, 0 for an odd one (task:
      even vs odd);
    * each silo gets ``2 * n_per_digit`` records: ``round((1 - p) * 2 n)`` from its own pair (split evenly between the
      two digits) and the rest from the pool of all digits (heterogeneity knob ``p = heterogeneity_p``; p = 0 is the
      paper's maximal heterogeneity, p = 1 is i.i.d.);
    * shuffled and split per silo with ``n_test = ceil((1 - train_fraction) n)``: 774 per digit -> 1548 per silo -> 1238
      train / 310 test.

    With ``replace=False`` (default) records are drawn without replacement *across all silos*, so no image appears twice
    in a silo, silos are disjoint and train/test never overlap (a fresh random draw per ``seed``). ``replace=True``
    draws each silo's records with replacement from *all* images of its digits (duplicates, possible train/test
    leakage).

    ``metadata["train_indices"]``/``["test_indices"]`` give the row of ``images`` behind every record.
    """
    seed = check_int("seed", seed, min_value=0)
    n_per_digit = check_int("n_per_digit", n_per_digit, min_value=1)
    train_fraction = check_train_fraction(train_fraction)
    p = check_probability("heterogeneity_p", heterogeneity_p)
    _check_bools(replace=replace)
    digits = MnistDigits.of(images, labels)
    sizes = MnistSiloSizes.of(n_per_digit, p, train_fraction)
    rng = np.random.default_rng(seed)
    silo_idx = _draws_with_replacement(digits, sizes, rng) if replace else _disjoint_draws(digits, sizes, rng, p)
    splits = []
    for idx in silo_idx:
        idx = rng.permutation(idx)
        splits.append((idx[: sizes.n_train], idx[sizes.n_train :]))
    settings = {"heterogeneity_p": p, "replace": replace, "train_fraction": train_fraction, "seed": seed}
    return mnist_parity_silos(digits, sizes, splits, pca_dim=pca_dim, pca=pca, dtype=dtype, settings=settings)


def mnist_parity_silos(digits: MnistDigits, sizes: MnistSiloSizes, splits, *, pca_dim: int | None = 50,
                       pca: PCA | None = None, dtype=np.float32, settings: dict | None = None) -> FederatedDataset:
    """The 25 pair silos of given image rows: ``splits[m] = (train_rows, test_rows)`` of silo m, as features (the PCA
    projection of ``isrl_mnist_silos``, or the raw pixels for ``pca_dim=None``) and parity labels (1 = even).
    ``settings`` (how the rows were drawn) are recorded in the metadata."""
    if pca_dim is not None:
        pca_dim = check_int("pca_dim", pca_dim, min_value=1)
        if pca_dim > digits.pixels.shape[1]:
            raise ValueError(f"pca_dim={pca_dim} must be <= the number of pixels {digits.pixels.shape[1]}")
        if pca is None:
            pca = pca_fit(digits.rows(slice(None)), pca_dim)
        elif pca.n_components < pca_dim or pca.mean.shape[0] != digits.pixels.shape[1]:
            raise ValueError(f"pca has {pca.n_components} components on d={pca.mean.shape[0]}; need >= "
                             f"pca_dim={pca_dim} on d={digits.pixels.shape[1]}")
    projected = None if pca_dim is None else _projected_images(digits.images, digits.rows, pca, pca_dim)
    parity = (digits.labels % 2 == 0).astype(np.int32)

    def featurize(idx):
        return digits.rows(idx).astype(dtype) if projected is None else projected[idx].astype(dtype)

    tr_idx, te_idx = [tr for tr, _ in splits], [te for _, te in splits]
    train_x = [featurize(tr) for tr in tr_idx]
    meta = {
        "paper": "ISRL-DP (Lowy & Razaviyayn, ICLR 2023), Figs. 4/7", "num_silos": 25, "pairs": list(ISRL_MNIST_PAIRS),
        "n_per_digit": sizes.n_per_digit, "n_per_silo": sizes.n_silo, "n_train_per_silo": sizes.n_train,
        "n_test_per_silo": sizes.n_test, "n_own_per_silo": sizes.n_own, "n_pool_per_silo": sizes.n_pool,
        **(settings or {}), "d": train_x[0].shape[1], "pixel_scaling": "x / 255 in [0, 1]", "pca_dim": pca_dim,
        "pca_fit_on": None if pca_dim is None else f"{digits.pixels.shape[0]} images (centred)",
        "pca_explained_variance_ratio": None if pca_dim is None else float(pca.explained_variance_ratio[:pca_dim].sum()),
        "label": "1 = even digit, 0 = odd digit", "train_indices": tr_idx, "test_indices": te_idx,
    }
    return FederatedDataset(train_x=train_x, train_y=[parity[tr] for tr in tr_idx],
                            test_x=[featurize(te) for te in te_idx], test_y=[parity[te] for te in te_idx],
                            name="isrl_mnist", num_classes=2, metadata=meta)


def _check_loader_dict(name: str, data, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(data, dict) or "x" not in data or "y" not in data:
        raise ValueError(f"{name} must be the dict returned by its loader (keys 'x', 'y', ...)")
    x, y = np.asarray(data["x"], np.float64), np.asarray(data["y"])
    if x.ndim != 2 or x.shape[1] != n_features or y.shape != (x.shape[0],):
        raise ValueError(f"{name}['x'] has shape {x.shape} and y {y.shape}; expected [n, {n_features}] and [n]")
    return x, y


def _check_bools(**flags) -> None:
    for name, flag in flags.items():
        if not isinstance(flag, bool):
            raise ValueError(f"{name}={flag!r} must be a bool")


def _features(x, rows, cols, stats, add_bias: bool, dtype) -> np.ndarray:
    """Records ``rows`` of ``x`` with columns ``cols`` standardised by ``stats = (mean, std)`` (left as they are when
    ``None``) and, with ``add_bias``, a constant column appended."""
    z = x[rows].copy()
    if stats is not None:
        z[:, cols] = (z[:, cols] - stats[0]) / stats[1]
    if add_bias:
        z = np.concatenate([z, np.ones((z.shape[0], 1))], axis=1)
    return z.astype(dtype)


def _sorted_groups(y, n_silos: int):
    """``(size, groups)``: the record indices sorted by ``y`` (ascending, stable) cut into ``n_silos`` consecutive
    groups of ``size = ceil(n / n_silos)`` (the last takes the remainder)."""
    n = y.shape[0]
    size = -(-n // n_silos)
    order = np.argsort(y, kind="stable")
    groups = [order[i * size : (i + 1) * size] for i in range(n_silos)]
    if any(g.size < 2 for g in groups):
        raise ValueError(
            f"n_silos={n_silos}: cutting {n} records into groups of ceil(n/N)={size} leaves a silo with < 2 records")
    return size, groups


def _split_each(groups, rng, train_fraction: float):
    """Each group shuffled (``rng``, in order) and split into training and test indices."""
    tr_idx, te_idx = [], []
    for g in groups:
        g = rng.permutation(g)
        n_tr, _ = split_sizes(g.size, train_fraction)
        if n_tr < 1:
            raise ValueError(f"train_fraction={train_fraction} leaves silo of {g.size} records without training data")
        tr_idx.append(g[:n_tr])
        te_idx.append(g[n_tr:])
    return tr_idx, te_idx


def _class_silos(per_class, n_per_silo, replace: bool, rng):
    """``(n_per_silo, indices)``: one silo per class, each ``n_per_silo`` of its training indices (default: the smallest
    class's count) drawn by ``rng`` with or without replacement."""
    smallest = min(c.size for c in per_class)
    if n_per_silo is None:
        n_per_silo = smallest
    n_per_silo = check_int("n_per_silo", n_per_silo, min_value=1)
    if not replace and n_per_silo > smallest:
        raise ValueError(
            f"n_per_silo={n_per_silo} exceeds the smallest class's {smallest} training records; "
            f"use replace=True (authors' code) or a smaller value")
    return n_per_silo, [rng.choice(c, n_per_silo, replace=replace) for c in per_class]


def insurance_silos(data: dict, *, n_silos: int, seed: int, train_fraction: float = 0.8, standardize: str = "per_silo",
                    add_bias: bool = True, dtype=np.float32, ddof: int = 0) -> FederatedDataset:
    """Silos of the ISRL-DP insurance experiment, linear regression (Lowy & Razaviyayn 2023, Figs. 5/8/9).

    ``data`` is :func:`dpjax.data.load_insurance`'s output. Records are sorted by the target (charges, ascending,
    stable) and cut into ``n_silos`` consecutive groups of ``ceil(n / n_silos)`` records (the last takes the remainder),
    so silos are strongly heterogeneous in y. Each silo is shuffled and split 80/20 (``n_test = ceil(0.2 n_i)``). Age
    and BMI are standardised with ``standardize="per_silo"`` (each silo's own training mean/std, the authors' code),
    ``"pooled"`` (pooled training statistics) or ``"none"``. A constant column is appended (``add_bias``), giving d = 7
    with columns ``age, sex, bmi, children, smoker, region, bias``. y (USD) is not scaled. ``metadata["y_train_mean"]``
    is the pooled training mean used by the naive predictor of the relative-RMSE metric. The paper's grid is N in {3, 5,
    10, 12}. ``ddof``: the standard deviation's delta degrees of freedom (0 = scikit-learn's ``StandardScaler``; the
    authors' script uses pandas ``std()``, ddof = 1).
    """
    x, y = _check_loader_dict("data", data, 6)
    n = x.shape[0]
    n_silos = check_int("n_silos", n_silos, min_value=1, max_value=n)
    seed = check_int("seed", seed, min_value=0)
    train_fraction = check_train_fraction(train_fraction)
    check_choice("standardize", standardize, ("per_silo", "pooled", "none"))
    _check_bools(add_bias=add_bias)
    size, groups = _sorted_groups(y, n_silos)
    tr_idx, te_idx = _split_each(groups, np.random.default_rng(seed), train_fraction)
    cont = [0, 2]  # age, bmi
    pooled_stats = standardize_fit(x[np.concatenate(tr_idx)][:, cont], ddof=ddof)
    feats = lambda rows, stats: _features(x, rows, cont, stats, add_bias, dtype)  # noqa: E731

    train_x, train_y, test_x, test_y, stats_used = [], [], [], [], []
    for tr, te in zip(tr_idx, te_idx):
        if standardize == "per_silo":
            stats = standardize_fit(x[tr][:, cont], ddof=ddof)
        elif standardize == "pooled":
            stats = pooled_stats
        else:
            stats = None
        stats_used.append(None if stats is None else (stats[0].tolist(), stats[1].tolist()))
        train_x.append(feats(tr, stats))
        test_x.append(feats(te, stats))
        train_y.append(y[tr].astype(dtype))
        test_y.append(y[te].astype(dtype))
    names = list(data.get("feature_names", ["age", "sex", "bmi", "children", "smoker", "region"]))
    meta = {"paper": "ISRL-DP (Lowy & Razaviyayn, ICLR 2023), Fig. 5/8-9", "num_silos": n_silos, "group_size": size,
            "n_per_silo": [int(g.size) for g in groups], "n_train_per_silo": [int(t.size) for t in tr_idx],
            "n_test_per_silo": [int(t.size) for t in te_idx], "d": train_x[0].shape[1],
            "feature_names": names + (["bias"] if add_bias else []), "seed": seed, "train_fraction": train_fraction,
            "standardize": standardize, "ddof": ddof, "standardized_columns": ["age", "bmi"],
            "standardize_stats": stats_used, "target": "charges (USD, unscaled)",
            "y_train_mean": float(y[np.concatenate(tr_idx)].mean()),
            "silo_assignment": "sorted by y ascending, consecutive groups of ceil(n/N)", "source": data.get("source"),
            "train_indices": tr_idx, "test_indices": te_idx}
    return FederatedDataset(train_x, train_y, test_x, test_y, name="isrl_insurance", num_classes=None, metadata=meta)


#: Continuous obesity columns the authors' code standardises.
OBESITY_STANDARDIZED = ("Age", "Height", "Weight", "CH2O", "TUE")


def obesity_silos(data: dict, *, seed: int, train_fraction: float = 0.8, n_per_silo: int | None = None,
                  replace: bool = False, add_bias: bool = True, dtype=np.float32) -> FederatedDataset:
    """Silos of ISRL experiment C, softmax regression on obesity data (ISRL-DP Fig. 6).

    ``data`` is :func:`dpjax.data.load_obesity`'s output (label-encoded, 16 features). Global shuffled 80/20 split
    (``n_test = ceil(0.2 n)``: 1688 / 423); Age, Height, Weight, CH2O and TUE standardised with the training statistics;
    a bias column appended (d = 17). N = 7 silos, silo m holds training records of class m only
    (``data["class_names"][m]``), each subsampled to ``n_per_silo`` records (default: the smallest class's training
    count). ``replace=False`` subsamples without replacement (no duplicates; the smallest class keeps all its records);
    ``replace=True`` samples with replacement as the authors' code. The test set is pooled (``pooled_test_x/y``;
    per-silo test lists are empty).
    """
    x, y = _check_loader_dict("data", data, 16)
    seed = check_int("seed", seed, min_value=0)
    train_fraction = check_train_fraction(train_fraction)
    _check_bools(replace=replace, add_bias=add_bias)
    names = list(data.get("feature_names", []))
    if len(names) != 16 or not all(c in names for c in OBESITY_STANDARDIZED):
        raise ValueError("data['feature_names'] must list the 16 obesity feature names")
    classes = list(data.get("class_names", range(int(y.max()) + 1)))
    k = len(classes)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(x.shape[0])
    n_tr, _ = split_sizes(x.shape[0], train_fraction)
    tr, te = perm[:n_tr], perm[n_tr:]
    cols = [names.index(c) for c in OBESITY_STANDARDIZED]
    mean, std = standardize_fit(x[tr][:, cols])
    feats = lambda rows: _features(x, rows, cols, (mean, std), add_bias, dtype)  # noqa: E731
    per_class = [tr[y[tr] == m] for m in range(k)]
    n_per_silo, silo_idx = _class_silos(per_class, n_per_silo, replace, rng)
    meta = {"paper": "ISRL-DP (Lowy & Razaviyayn, ICLR 2023), Fig. 6", "num_silos": k, "class_names": classes,
            "n_train_per_silo": n_per_silo, "n_train_total": int(n_tr), "n_test": int(te.size),
            "class_train_counts": [int(c.size) for c in per_class], "replace": replace, "d": 16 + int(add_bias),
            "feature_names": names + (["bias"] if add_bias else []), "standardized_columns": list(OBESITY_STANDARDIZED),
            "standardize_stats": (mean.tolist(), std.tolist()), "seed": seed, "train_fraction": train_fraction,
            "silo_assignment": "silo m = training records of class m (one class per silo)",
            "source": data.get("source"), "train_indices": silo_idx, "test_indices": te}
    return FederatedDataset(train_x=[feats(i) for i in silo_idx], train_y=[y[i].astype(np.int32) for i in silo_idx],
                            test_x=[], test_y=[], name="isrl_obesity", num_classes=k, metadata=meta,
                            pooled_test_x=feats(te), pooled_test_y=y[te].astype(np.int32))
