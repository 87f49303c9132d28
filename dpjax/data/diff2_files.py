"""The DIFF2 experiments' data files (Murata & Suzuki, ICML 2023; Table 2) and LIBSVM sets (a9a, w8a): readers that
return raw (unscaled) NumPy arrays, refusing truncated or non-numeric files with an error naming the file, row and
column. :mod:`dpjax.data.diff2` builds the experiments' silos from them."""

from __future__ import annotations

import gzip
import math
import os
import pathlib
import warnings

import numpy as np

from dpjax._validate import check_choice, check_int
from dpjax.data.paths import DatasetNotFoundError, candidate_dirs, data_dir as _data_dir, find_file
from dpjax.data.preprocess import label_encode, one_hot
from dpjax.data.sources import BLOG_ZIP_URL, REMOTE, UPSTREAM, check_known_file


CAL_HOUSING_FEATURES = ("longitude", "latitude", "housingMedianAge", "totalRooms", "totalBedrooms", "population",
                        "households", "medianIncome")
GAS_TURBINE_FEATURES = ("AT", "AP", "AH", "AFDP", "GTEP", "TIT", "TAT", "TEY", "CDP")
GAS_TURBINE_YEARS = (2011, 2012, 2013, 2014, 2015)
KDD_FEATURES = ("duration", "protocol_type", "service", "flag", "src_bytes", "dst_bytes", "land", "wrong_fragment",
                "urgent", "hot", "num_failed_logins", "logged_in", "num_compromised", "root_shell", "su_attempted",
                "num_root", "num_file_creations", "num_shells", "num_access_files", "num_outbound_cmds",
                "is_host_login", "is_guest_login", "count", "srv_count", "serror_rate", "srv_serror_rate",
                "rerror_rate", "srv_rerror_rate", "same_srv_rate", "diff_srv_rate", "srv_diff_host_rate",
                "dst_host_count", "dst_host_srv_count", "dst_host_same_srv_rate", "dst_host_diff_srv_rate",
                "dst_host_same_src_port_rate", "dst_host_srv_diff_host_rate", "dst_host_serror_rate",
                "dst_host_srv_serror_rate", "dst_host_rerror_rate", "dst_host_srv_rerror_rate")
KDD_SYMBOLIC = ("protocol_type", "service", "flag")


def _not_found(name: str, base: pathlib.Path, sub: str, files: list[str], remote_key: str) -> DatasetNotFoundError:
    url = BLOG_ZIP_URL if remote_key == "blogfeedback" else ", ".join(u for _, u, _ in REMOTE[remote_key][1])

    return DatasetNotFoundError(
        name, candidate_dirs(base, sub), files,
        f"call dpjax.data.download_diff2({remote_key!r}, data_dir) (fetches {url}); upstream: {UPSTREAM[remote_key]}")


def _find(data_dir, name: str, sub: str, files: list[str], remote_key: str) -> pathlib.Path:
    """The first of ``files`` found under ``sub`` of the data directory; ``DatasetNotFoundError`` naming them if none."""
    base = _data_dir(data_dir)
    p = find_file(base, sub, files)
    if p is None:
        raise _not_found(name, base, sub, files, remote_key)
    return p


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
    """``a`` when every value is finite; else a ValueError naming the file, row and column of the first NaN/inf (an
    empty field, ``nan`` or ``inf`` in a data file would poison every statistic computed from it)."""
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

    Reads ``cal_housing.data`` (no header; column order of ``cal_housing.domain``). Not scikit-learn's per-household
    variant.
    """
    p = _find(data_dir, "California housing", "california_housing", ["cal_housing.data"], "california_housing")
    a = _loadtxt(p, p)
    if a.shape[1] != 9:
        raise ValueError(f"{p} has {a.shape[1]} columns, expected 9")
    check_known_file(p, a.shape[0], verify)
    return {"x": a[:, :8], "y": a[:, 8], "feature_names": list(CAL_HOUSING_FEATURES),
            "target_name": "medianHouseValue", "source": str(p)}


def load_gas_turbine(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """Gas Turbine CO and NOx emissions (Table 2): the five yearly files 2011-2015 pooled (36733 rows), 9 features
    AT..CDP, target CO; the NOx column is removed.

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
    """BlogFeedback training file (Table 2): 52397 x 280 features, target = column 281 (comments in the next 24 h).
    Reads ``blogData_train.csv`` or ``blogData_train.csv.gz``.

    Only the training file is read: the paper's 60,021 rows also pool the 60 daily test files, which the authors' code
    (reference doc B.5) does not use.
    """
    p = _find(data_dir, "BlogFeedback", "blogfeedback", ["blogData_train.csv", "blogData_train.csv.gz"], "blogfeedback")
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
    """KDD Cup 1999, the official 10% file (Table 2; the paper's "10 percent" read as the official file): 494021 rows,
    41 features, 23 connection labels.

    ``symbolic="one_hot"`` (the paper does not say) one-hot encodes protocol_type, service and flag (categories in
    sorted order) after the 38 numeric columns (118 inputs); ``symbolic="codes"`` keeps 41 columns with those three
    label-encoded in place. ``"standardize_mask"`` marks the numeric columns (one-hot/code columns are not
    standardised). Labels are the trailing-dot- stripped names, label-encoded in sorted order (``"class_names"``). Reads
    ``kddcup.data_10_percent`` or ``kddcup.data_10_percent.gz``.
    """
    check_choice("symbolic", symbolic, ("one_hot", "codes"))
    p = _find(data_dir, "KDD Cup 99 (10%)", "kddcup99_10pct", ["kddcup.data_10_percent.gz", "kddcup.data_10_percent"],
              "kddcup99")
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

    Returns ``{"x": [n, n_features], "y": float64 [n], "source"}``; ``n_features`` defaults to the largest index present
    (pass it for test splits, e.g. 123 for ``a9a.t``). ``#`` comments and blank lines are skipped; ``.gz`` is read
    transparently.
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
    """LIBSVM ``a9a`` (UCI Adult, 123 binary features, labels +1/-1): ``split="train"`` (32561 rows, file ``a9a``) or
    ``"test"`` (16281 rows, file ``a9a.t``)."""
    check_choice("split", split, ("train", "test"))
    p = _find(data_dir, "LIBSVM a9a", "libsvm_a9a", ["a9a" if split == "train" else "a9a.t"], "a9a")
    out = load_svmlight(p, n_features=123)
    check_known_file(p, out["x"].shape[0], verify)
    return out


def load_w8a(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """LIBSVM ``w8a`` (300 binary features, labels +1/-1; 49749 rows, file ``w8a``)."""
    p = _find(data_dir, "LIBSVM w8a", "libsvm_w8a", ["w8a"], "w8a")
    out = load_svmlight(p, n_features=300)
    check_known_file(p, out["x"].shape[0], verify)
    return out
