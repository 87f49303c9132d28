"""The DIFF2 experiments' data and noise as the authors' public scripts build them (``lawrenceztang/CE-PLSGM``,
``src/utils/load_dataset.py``, ``src/train.py`` and ``src/optimizers.py``, the DIFF2 code the CE-PLSGM fork was built
on); the paper's construction is ``dpjax.data.diff2`` and ``dpjax.accounting.diff2``.

Data (``load_authors_raw``, ``authors_diff2_silos``): scikit-learn's California housing feature set
(``california_housing_sklearn``), symbolic columns label-encoded and not standardised (BlogFeedback's columns 262-268),
one fixed ``train_test_split(test_size=0.2, random_state=0)`` for every seed, ``StandardScaler`` statistics from the
training split only, computed on float32 features, and every training record dealt to a client (no remainder dropped).
Noise: ``diff2_gd_sigmas_script``.
"""

from __future__ import annotations

import math
import os

import numpy as np

from dpjax import _validate as v
from dpjax.accounting.diff2 import alpha0, count_restarts
from dpjax.data.diff2 import DIFF2_DATASETS, dealt_diff2_silos, diff2_table
from dpjax.data.diff2_files import CAL_HOUSING_FEATURES, load_kddcup99
from dpjax.data.preprocess import label_encode
from dpjax.reproduce.sklearn_numerics import authors_train_test_split, standard_scaler_fit

__all__ = ["AUTHORS_SPLIT_SEED", "BLOG_SYMBOLIC_COLUMNS", "SKLEARN_CAL_HOUSING_FEATURES", "authors_diff2_silos",
           "california_housing_sklearn", "diff2_gd_sigmas_script", "label_encode_columns", "load_authors_raw"]

#: scikit-learn's ``fetch_california_housing`` columns (per-household averages of the raw totals).
SKLEARN_CAL_HOUSING_FEATURES = ("MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup",
                                "Latitude", "Longitude")
#: BlogFeedback columns (0-based) the authors' ``BlogFeedback`` class declares symbolic: the seven
#: weekday indicators of the basetime, label-encoded and left unscaled.
BLOG_SYMBOLIC_COLUMNS = tuple(range(262, 269))
#: ``random_state`` of the authors' one ``train_test_split`` (the same split for every seed).
AUTHORS_SPLIT_SEED = 0


def california_housing_sklearn(data: dict) -> dict:
    """scikit-learn's ``fetch_california_housing`` table, derived from the raw-totals file
    (the authors' scripts'; the paper names the Torgo version).

    scikit-learn reads the same StatLib/Torgo ``cal_housing.data`` (20640 rows, no missing values; the 207 missing
    ``total_bedrooms`` exist only in the later ``housing.csv`` variant), reorders it and replaces the totals by
    per-household averages: MedInc, HouseAge, AveRooms = totalRooms / households, AveBedrms = totalBedrooms /
    households, Population, AveOccup = population / households, Latitude, Longitude; target = medianHouseValue /
    100000. Same float64 operations as scikit-learn, so the values are bit-identical.
    """
    names = list(data.get("feature_names") or ())
    if names != list(CAL_HOUSING_FEATURES):
        raise ValueError(f"data must be load_california_housing's raw table (features {CAL_HOUSING_FEATURES}), "
                         f"got features {names}")
    x = np.asarray(data["x"], np.float64)
    col = {n: x[:, i] for i, n in enumerate(CAL_HOUSING_FEATURES)}
    households = col["households"]
    feats = np.column_stack([
        col["medianIncome"], col["housingMedianAge"], col["totalRooms"] / households, col["totalBedrooms"] / households,
        col["population"], col["population"] / households, col["latitude"], col["longitude"],
    ])
    return {**data, "x": feats, "y": np.asarray(data["y"], np.float64) / 100000.0,
            "feature_names": list(SKLEARN_CAL_HOUSING_FEATURES), "target_name": "MedHouseVal (100k USD)"}


def label_encode_columns(data: dict, columns) -> dict:
    """The authors' ``My_Dataset``: each symbolic column label-encoded in place (codes of its
    sorted unique values, ``LabelEncoder``) and excluded from standardisation."""
    x = np.array(data["x"], np.float64)
    mask = np.array(data.get("standardize_mask", np.ones(x.shape[1], bool)), bool)
    for j in columns:
        x[:, j] = label_encode(x[:, j])[0]
        mask[j] = False
    return {**data, "x": x, "standardize_mask": mask, "symbolic_columns": list(columns)}


def load_authors_raw(name: str, data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """The unscaled table of ``name`` (a key of ``dpjax.data.diff2.DIFF2_DATASETS``) as the authors' ``load_dataset.py``
    builds it: California housing through scikit-learn's feature set (:func:`california_housing_sklearn`);
    BlogFeedback's columns 262-268 label-encoded and not standardised; KDD Cup 99's three symbolic columns label-encoded
    in place (``symbolic="codes"``: its class is not in the public scripts, but their ``My_Dataset`` can only take
    numbers, so the string columns must go through its ``LabelEncoder`` step); gas turbine, a9a and w8a unchanged."""
    v.check_choice("name", name, tuple(DIFF2_DATASETS))
    if name == "kddcup99":
        return load_kddcup99(data_dir, symbolic="codes", verify=verify)
    data = DIFF2_DATASETS[name][0](data_dir, verify=verify)
    if name == "california_housing":
        return california_housing_sklearn(data)
    if name == "blogfeedback":
        return label_encode_columns(data, BLOG_SYMBOLIC_COLUMNS)
    return data


def authors_diff2_silos(data: dict, *, seed: int, task: str, n_silos: int = 10, scale_target: bool = True,
                        name: str = "diff2", dtype=np.float32):
    """The authors' ``My_Dataset`` + ``random_split_to_local_datasets``: the split is scikit-learn's
    ``train_test_split(test_size=0.2, random_state=0)`` (``authors_train_test_split``), the same for every ``seed``;
    features are cast to float32 first and standardised with ``StandardScaler`` statistics of the training split
    (``standard_scaler_fit``); every training record is dealt round-robin (``n_min`` is the smallest client). Targets
    and dealing as ``dpjax.data.diff2_silos`` (``dealt_diff2_silos``); metadata ``construction="authors"``."""
    v.check_choice("task", task, ("regression", "classification"))
    seed = v.check_int("seed", seed, min_value=0)
    if not isinstance(scale_target, bool):
        raise ValueError(f"scale_target={scale_target!r} must be a bool")
    x, _, cols = diff2_table(data)
    n_silos = v.check_int("n_silos", n_silos, min_value=1)
    tr, te = authors_train_test_split(x.shape[0], 0.2, random_state=AUTHORS_SPLIT_SEED)
    if tr.size < n_silos:
        raise ValueError(f"n_silos={n_silos} exceeds the {tr.size} training records")
    x32 = x.astype(np.float32)  # the script casts before splitting and scaling
    mean, scale = standard_scaler_fit(x32[tr][:, cols]) if cols.size else (np.zeros(0), np.ones(0))

    def features(rows):
        z = x32[rows]
        if cols.size:
            block = z[:, cols]
            block -= mean  # in float32, as StandardScaler.transform
            block /= scale
            z[:, cols] = block
        return z.astype(dtype)

    settings = {"seed": seed, "train_fraction": 0.8, "normalization_stats": "train", "construction": "authors",
                "split": f"sklearn train_test_split(test_size=0.2, random_state={AUTHORS_SPLIT_SEED}), the same for "
                         "every seed"}
    return dealt_diff2_silos(data, features, tr, te, task=task, n_silos=n_silos, drop_remainder=False,
                             scale_target=scale_target, name=name, dtype=dtype, settings=settings)


def diff2_gd_sigmas_script(eps: float, delta: float, num_rounds: int, restart_interval: int, n_min: int,
                           num_silos: int, u: float = 1.25) -> tuple[float, float | None]:
    """The noise multipliers the authors' DIFF2 script uses (``Diff2_GD_Server._set_sigma`` /
    ``_set_sigma2``; public in ``lawrenceztang/CE-PLSGM``, ``src/optimizers.py``).

    Prop. 4.1 with ``R/T`` restart rounds in place of ``m = ceil(R/T)`` and ``R`` difference rounds in place of ``R -
    m``: ``sigma1^2 = 4 u alpha_0 R/(T n^2P^2 eps)`` (``4`` for ``u`` when ``T = 1``, DP-GD), ``sigma2^2 = (4u/(u-1))
    alpha_0 R/(n^2P^2 eps)``. ``sigma1`` is below Prop. 4.1's by ``sqrt(R/(T m))`` when ``T`` does not divide ``R``;
    ``sigma2`` is above it by ``sqrt(R/(R - m))``. ``(sigma, None)`` for ``T = 1``.
    """
    count_restarts(num_rounds, restart_interval)  # checks both
    v.check_int("n", n_min, min_value=1)
    v.check_int("num_silos", num_silos, min_value=1)
    u = v.check_real("u", u)
    if not u > 1:
        raise ValueError(f"u={u!r} must be > 1 (budget split 1/u : (u-1)/u)")
    scale = alpha0(eps, delta) * num_rounds / ((n_min * num_silos) ** 2 * eps)
    if restart_interval == 1:
        return math.sqrt(4.0 * scale), None
    return math.sqrt(4.0 * u * scale / restart_interval), math.sqrt(4.0 * u / (u - 1.0) * scale)
