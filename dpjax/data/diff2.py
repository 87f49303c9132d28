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

import gzip
import math
import os
import pathlib
import warnings

import numpy as np

from dpjax._validate import check_choice, check_int
from dpjax.data.federated import FederatedDataset
from dpjax.data.isrl import CONSTRUCTIONS, authors_train_test_split, check_seed, check_train_fraction
from dpjax.data.paths import DatasetNotFoundError, candidate_dirs, data_dir as _data_dir, find_file
from dpjax.data.preprocess import label_encode, one_hot, split_sizes, standardize_fit
from dpjax.data.sources import BLOG_ZIP_URL, REMOTE, UPSTREAM, check_known_file, download_dataset

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

CAL_HOUSING_FEATURES = (
    "longitude", "latitude", "housingMedianAge", "totalRooms", "totalBedrooms", "population",
    "households", "medianIncome",
)
GAS_TURBINE_FEATURES = ("AT", "AP", "AH", "AFDP", "GTEP", "TIT", "TAT", "TEY", "CDP")
GAS_TURBINE_YEARS = (2011, 2012, 2013, 2014, 2015)
KDD_FEATURES = (
    "duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land", "wrong_fragment",
    "urgent", "hot", "num_failed_logins", "logged_in", "num_compromised", "root_shell", "su_attempted",
    "num_root", "num_file_creations", "num_shells", "num_access_files", "num_outbound_cmds",
    "is_host_login", "is_guest_login", "count", "srv_count", "serror_rate", "srv_serror_rate",
    "rerror_rate", "srv_rerror_rate", "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate",
    "dst_host_count", "dst_host_srv_count", "dst_host_same_srv_rate", "dst_host_diff_srv_rate",
    "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate", "dst_host_serror_rate",
    "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate",
)
KDD_SYMBOLIC = ("protocol_type", "service", "flag")
#: scikit-learn's ``fetch_california_housing`` columns (per-household averages of the raw totals).
SKLEARN_CAL_HOUSING_FEATURES = ("MedInc", "HouseAge", "AveRooms", "AveBedrms", "Population", "AveOccup",
                                "Latitude", "Longitude")
#: BlogFeedback columns (0-based) the authors' ``BlogFeedback`` class declares symbolic: the seven
#: weekday indicators of the basetime, label-encoded and left unscaled.
BLOG_SYMBOLIC_COLUMNS = tuple(range(262, 269))
#: ``random_state`` of the authors' one ``train_test_split`` (the same split for every seed).
AUTHORS_SPLIT_SEED = 0


def _not_found(name: str, base: pathlib.Path, sub: str, files: list[str], remote_key: str) -> DatasetNotFoundError:
    if remote_key == "blogfeedback":
        url = BLOG_ZIP_URL
    else:
        url = ", ".join(u for _, u, _ in REMOTE[remote_key][1])
    return DatasetNotFoundError(
        name,
        candidate_dirs(base, sub),
        files,
        f"call dpjax.data.download_diff2({remote_key!r}, data_dir) (fetches {url}); upstream: {UPSTREAM[remote_key]}",
    )


def _open_text(path: pathlib.Path):
    return gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)


def _read_csv_table(path: pathlib.Path, n_cols: int):
    """Header-less CSV -> pandas DataFrame when pandas is installed (3-4x faster), else None."""
    try:
        import pandas as pd  # optional fast path; not a dependency of dpjax
    except ImportError:
        return None
    try:
        df = pd.read_csv(path, header=None)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not a readable CSV table: {' '.join(str(err).split())}") from None
    if df.shape[1] != n_cols:
        raise ValueError(f"{path} has {df.shape[1]} columns, expected {n_cols}")
    return df


def _finite(a: np.ndarray, path) -> np.ndarray:
    """``a`` when every value is finite; else a ValueError naming the file, row and column of the first
    NaN/inf (an empty field, ``nan`` or ``inf`` in a data file would poison every statistic computed from it)."""
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = (int(i) for i in np.argwhere(bad)[0]) if a.ndim == 2 else (int(np.argwhere(bad)[0][0]), 0)
        value = float(a[r, c] if a.ndim == 2 else a[r])
        raise ValueError(f"{path}: row {r + 1}, column {c + 1}: {value} is not a finite "
                         f"number ({int(bad.sum())} NaN/inf/empty value(s) in the file; --data-dir / data_dir)")
    return a


def _float_frame(df, path) -> np.ndarray:
    """``df`` as float64; a ValueError names the file, row and column of the first non-number or NaN/inf."""
    try:
        return _finite(df.to_numpy(dtype=np.float64), path)
    except (ValueError, TypeError) as err:
        if str(err).startswith(str(path)):
            raise
        import pandas as pd

        bad = (df.apply(pd.to_numeric, errors="coerce").isna() & df.notna()).to_numpy()
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"{path}: row {r + 1}, column {c + 1}: {df.iat[r, c]!r} is not a number") from None


def _loadtxt(path, source, **kwargs) -> np.ndarray:
    """``np.loadtxt`` whose errors name the file (numpy names the row and column)."""
    try:
        with warnings.catch_warnings():  # an empty table is reported by the caller, with the file name
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data")
            a = np.loadtxt(source, delimiter=",", dtype=np.float64, ndmin=2, **kwargs)
    except ValueError as err:
        raise ValueError(f"{path}: {' '.join(str(err).split())}") from None
    return _finite(a, path)


def load_california_housing(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """California Housing, L. Torgo's version (Table 2): 20640 x 8, target median house value.

    Reads ``cal_housing.data`` (no header; column order of ``cal_housing.domain``).
    Not scikit-learn's per-household variant.
    """
    base = _data_dir(data_dir)
    p = find_file(base, "california_housing", ["cal_housing.data"])
    if p is None:
        raise _not_found("California housing", base, "california_housing", ["cal_housing.data"], "california_housing")
    a = _loadtxt(p, p)
    if a.shape[1] != 9:
        raise ValueError(f"{p} has {a.shape[1]} columns, expected 9")
    check_known_file(p, a.shape[0], verify)
    return {"x": a[:, :8], "y": a[:, 8], "feature_names": list(CAL_HOUSING_FEATURES),
            "target_name": "medianHouseValue", "source": str(p)}


def california_housing_sklearn(data: dict) -> dict:
    """scikit-learn's ``fetch_california_housing`` table, derived from the raw-totals file
    (the authors' construction; the paper names the Torgo version).

    scikit-learn reads the same StatLib/Torgo ``cal_housing.data`` (20640 rows, no
    missing values; the 207 missing ``total_bedrooms`` exist only in the later
    ``housing.csv`` variant), reorders it and replaces the totals by
    per-household averages: MedInc, HouseAge, AveRooms = totalRooms / households,
    AveBedrms = totalBedrooms / households, Population, AveOccup = population /
    households, Latitude, Longitude; target = medianHouseValue / 100000. Same
    float64 operations as scikit-learn, so the values are bit-identical.
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


def load_gas_turbine(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """Gas Turbine CO and NOx emissions (Table 2): the five yearly files 2011-2015 pooled
    (36733 rows), 9 features AT..CDP, target CO; the NOx column is removed.

    Column names are stripped (``gt_2015.csv`` has ``"AFDP "``). ``"year"`` gives each row's file.
    """
    base = _data_dir(data_dir)
    names = [f"gt_{y}.csv" for y in GAS_TURBINE_YEARS]
    paths = [find_file(base, "gas_turbine_co_nox", [n]) for n in names]
    if any(p is None for p in paths):
        missing = [n for n, p in zip(names, paths) if p is None]
        raise _not_found("Gas turbine CO/NOx", base, "gas_turbine_co_nox", missing, "gas_turbine")
    xs, ys, years = [], [], []
    for year, p in zip(GAS_TURBINE_YEARS, paths):
        with open(p) as f:
            header = [c.strip() for c in f.readline().strip().split(",")]
            missing = [c for c in GAS_TURBINE_FEATURES + ("CO",) if c not in header]
            if missing:
                raise ValueError(f"{p} lacks the column(s) {missing}; it has {header}")
            a = _loadtxt(p, f)
        if a.shape[0] == 0:
            raise ValueError(f"{p} has a header but no data rows")
        if a.shape[1] != len(header):
            raise ValueError(f"{p} has {a.shape[1]} data columns, header has {len(header)}")
        check_known_file(p, a.shape[0], verify)
        xs.append(a[:, [header.index(c) for c in GAS_TURBINE_FEATURES]])
        ys.append(a[:, header.index("CO")])
        years.append(np.full(a.shape[0], year, np.int32))
    return {"x": np.concatenate(xs), "y": np.concatenate(ys), "feature_names": list(GAS_TURBINE_FEATURES),
            "target_name": "CO", "year": np.concatenate(years), "source": ", ".join(str(p) for p in paths)}


def load_blogfeedback(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """BlogFeedback training file (Table 2): 52397 x 280 features, target = column 281
    (comments in the next 24 h). Reads ``blogData_train.csv`` or ``blogData_train.csv.gz``.

    Only the training file is read: the paper's 60,021 rows also pool the 60 daily
    test files, which the authors' code (reference doc B.5) does not use.
    """
    base = _data_dir(data_dir)
    names = ["blogData_train.csv", "blogData_train.csv.gz"]
    p = find_file(base, "blogfeedback", names)
    if p is None:
        raise _not_found("BlogFeedback", base, "blogfeedback", names, "blogfeedback")
    df = _read_csv_table(p, 281)
    if df is not None:
        a = _float_frame(df, p)
    else:
        with _open_text(p) as f:
            a = _loadtxt(p, f)
    if a.shape[1] != 281:
        raise ValueError(f"{p} has {a.shape[1]} columns, expected 281")
    check_known_file(p, a.shape[0], verify)
    return {"x": a[:, :280], "y": a[:, 280], "feature_names": [f"f{i + 1}" for i in range(280)],
            "target_name": "comments_next_24h", "source": str(p)}


def load_kddcup99(data_dir: str | os.PathLike | None = None, *, symbolic: str = "one_hot", verify: bool = True) -> dict:
    """KDD Cup 1999, the official 10% file (Table 2; the paper's "10 percent" read as the official file): 494021 rows, 41 features,
    23 connection labels.

    ``symbolic="one_hot"`` (the paper does not say) one-hot encodes protocol_type,
    service and flag (categories in sorted order) after the 38 numeric columns
    (118 inputs); ``symbolic="codes"`` keeps 41 columns with those three
    label-encoded in place. ``"standardize_mask"`` marks the numeric columns
    (one-hot/code columns are not standardised). Labels are the trailing-dot-
    stripped names, label-encoded in sorted order (``"class_names"``).
    Reads ``kddcup.data_10_percent`` or ``kddcup.data_10_percent.gz``.
    """
    check_choice("symbolic", symbolic, ("one_hot", "codes"))
    base = _data_dir(data_dir)
    names = ["kddcup.data_10_percent.gz", "kddcup.data_10_percent"]
    p = find_file(base, "kddcup99_10pct", names)
    if p is None:
        raise _not_found("KDD Cup 99 (10%)", base, "kddcup99_10pct", names, "kddcup99")
    sym_idx = [KDD_FEATURES.index(c) for c in KDD_SYMBOLIC]
    num_idx = [i for i in range(41) if i not in sym_idx]
    df = _read_csv_table(p, 42)
    if df is not None:
        check_known_file(p, len(df), verify)
        num = _float_frame(df.iloc[:, num_idx], p)
        sym = df.iloc[:, sym_idx + [41]].to_numpy().astype(str)
    else:
        with _open_text(p) as f:
            lines = [ln for ln in f.read().splitlines() if ln.strip()]
        if not lines or lines[0].count(",") != 41:
            raise ValueError(f"{p}: expected 42 comma-separated fields per row")
        num = np.loadtxt(lines, delimiter=",", usecols=num_idx, dtype=np.float64, ndmin=2)
        sym = np.loadtxt(lines, delimiter=",", usecols=sym_idx + [41], dtype=str, ndmin=2)
    y, classes = label_encode(np.char.rstrip(sym[:, 3], "."))
    codes = {}
    enc = []
    for j, c in enumerate(KDD_SYMBOLIC):
        v, codes[c] = label_encode(sym[:, j])
        enc.append(v)
    num_names = [KDD_FEATURES[i] for i in num_idx]
    if symbolic == "one_hot":
        blocks = [one_hot(v, len(codes[c]), dtype=np.float64) for v, c in zip(enc, KDD_SYMBOLIC)]
        x = np.concatenate([num] + blocks, axis=1)
        feature_names = num_names + [f"{c}={v}" for c in KDD_SYMBOLIC for v in codes[c]]
        mask = np.array([True] * len(num_idx) + [False] * (x.shape[1] - len(num_idx)))
    else:
        x = np.empty((num.shape[0], 41), np.float64)
        x[:, num_idx] = num
        for v, i in zip(enc, sym_idx):
            x[:, i] = v
        feature_names = list(KDD_FEATURES)
        mask = np.array([i not in sym_idx for i in range(41)])
    return {"x": x, "y": y, "feature_names": feature_names, "class_names": list(classes),
            "symbolic_codes": codes, "standardize_mask": mask, "source": str(p)}


#: Largest dense matrix ``load_svmlight`` builds (a9a/w8a are a few MiB; a corrupt feature index must not
#: allocate gigabytes).
_MAX_DENSE_BYTES = 2**30


def load_svmlight(path: str | os.PathLike, *, n_features: int | None = None, dtype=np.float32) -> dict:
    """Parses a LIBSVM/svmlight text file (``label idx:val ...``, 1-based indices) into dense arrays.

    Returns ``{"x": [n, n_features], "y": float64 [n], "source"}``; ``n_features``
    defaults to the largest index present (pass it for test splits, e.g. 123 for
    ``a9a.t``). ``#`` comments and blank lines are skipped; ``.gz`` is read transparently.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise DatasetNotFoundError("LIBSVM file", [path.parent], [path.name], "see dpjax.data.download_diff2")
    if n_features is not None:
        n_features = check_int("n_features", n_features, min_value=1)
    labels, rows, cols, vals = [], [], [], []
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            try:
                labels.append(float(parts[0]))
                r = len(labels) - 1
                for tok in parts[1:]:
                    i, v = tok.split(":", 1)
                    cols.append(int(i))
                    vals.append(float(v))
                    rows.append(r)
            except ValueError:
                raise ValueError(f"{path}:{lineno}: not in LIBSVM format: {line[:80]!r}") from None
            if not (math.isfinite(labels[-1]) and all(math.isfinite(v) for v in vals[len(vals) - len(parts) + 1:])):
                raise ValueError(f"{path}:{lineno}: a label or value is not a finite number: {line[:80]!r}")
    cols_a = np.asarray(cols, np.int64)
    if cols_a.size and cols_a.min() < 1:
        raise ValueError(f"{path}: feature indices must be 1-based (found {cols_a.min()})")
    d = int(cols_a.max()) if cols_a.size else 0
    if n_features is None:
        n_features = max(d, 1)
    elif d > n_features:
        raise ValueError(f"n_features={n_features} is smaller than the largest index {d} in {path}")
    dense = len(labels) * n_features * np.dtype(dtype).itemsize
    if dense > _MAX_DENSE_BYTES:
        raise ValueError(f"{path}: {len(labels):,} rows x {n_features:,} features (largest feature index) would be "
                         f"{dense / 2**30:.1f} GiB dense, above {_MAX_DENSE_BYTES / 2**30:g} GiB; a corrupt index?")
    x = np.zeros((len(labels), n_features), dtype=dtype)
    x[np.asarray(rows, np.int64), cols_a - 1] = np.asarray(vals, dtype)
    return {"x": x, "y": np.asarray(labels, np.float64), "source": str(path)}


def load_a9a(data_dir: str | os.PathLike | None = None, *, split: str = "train", verify: bool = True) -> dict:
    """LIBSVM ``a9a`` (UCI Adult, 123 binary features, labels +1/-1): ``split="train"`` (32561 rows,
    file ``a9a``) or ``"test"`` (16281 rows, file ``a9a.t``)."""
    check_choice("split", split, ("train", "test"))
    base = _data_dir(data_dir)
    name = "a9a" if split == "train" else "a9a.t"
    p = find_file(base, "libsvm_a9a", [name])
    if p is None:
        raise _not_found("LIBSVM a9a", base, "libsvm_a9a", [name], "a9a")
    out = load_svmlight(p, n_features=123)
    check_known_file(p, out["x"].shape[0], verify)
    return out


def load_w8a(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """LIBSVM ``w8a`` (300 binary features, labels +1/-1; 49749 rows, file ``w8a``)."""
    base = _data_dir(data_dir)
    p = find_file(base, "libsvm_w8a", ["w8a"])
    if p is None:
        raise _not_found("LIBSVM w8a", base, "libsvm_w8a", ["w8a"], "w8a")
    out = load_svmlight(p, n_features=300)
    check_known_file(p, out["x"].shape[0], verify)
    return out


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
