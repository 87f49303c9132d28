"""CIFAR-10 (Krizhevsky, 2009) from a user-supplied copy, as plain NumPy arrays.

Used by the CIFAR-10 experiment of van Dijk et al., "Generalizing DP-SGD with Shuffling and Batch Clipping" (Section
1: 71.5 % batch clipping with shuffling, 71.1 % individual clipping with subsampling, at sigma = 2). dpjax never
downloads it: the user places the standard "CIFAR-10 python version" in the data directory (``--data-dir``,
``$DPJAX_DATA_DIR`` or the cache directory), either extracted or as the original archive:

1. the folder ``cifar-10-batches-py/`` (``data_batch_1`` ... ``data_batch_5``, ``test_batch``, optionally
   ``batches.meta``), looked for in ``<dir>/cifar10/`` and ``<dir>/``; the batch files may also sit directly in those
   folders;
2. the archive ``cifar-10-python.tar.gz`` in the same places (read in place).

Each batch file is a Python pickle of a dict with ``b"data"`` (uint8 ``[n, 3072]``: the 1024 red, then green, then blue
values of a 32x32 image in row-major order) and ``b"labels"`` (n ints in 0..9). The pickles are read with an unpickler
that only admits the NumPy array reconstruction globals such files contain, so a crafted file cannot run code.
"""

from __future__ import annotations

import io
import os
import pathlib
import pickle
import tarfile

import numpy as np

from dpjax.data.paths import DatasetNotFoundError, candidate_dirs, data_dir as _data_dir

__all__ = ["CIFAR10_TRAIN_BATCHES", "CIFAR10_URL", "load_cifar10", "read_cifar_batch"]

SUBDIR = "cifar10"
FOLDER = "cifar-10-batches-py"
ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_BATCH = "test_batch"
META = "batches.meta"
_HOW_TO_GET = (f"download {CIFAR10_URL} yourself and place it (or its extracted {FOLDER}/ folder) in the data "
               "directory; dpjax does not download CIFAR-10")
# The globals a NumPy-array pickle (protocol 2, written by Python 2 or 3) needs.
_ALLOWED_GLOBALS = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                    ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
                    ("numpy._core.multiarray", "scalar"), ("_codecs", "encode"), ("copy_reg", "_reconstructor"),
                    ("copyreg", "_reconstructor"), ("__builtin__", "object"), ("builtins", "object")}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed in a CIFAR-10 batch file")


def _decode(obj):
    """Byte-string keys (files pickled by Python 2) -> str keys."""
    if isinstance(obj, dict):
        return {(k.decode("latin1") if isinstance(k, bytes) else k): _decode(v) for k, v in obj.items()}
    return obj


def read_cifar_batch(raw: bytes, where: str) -> tuple[np.ndarray, np.ndarray]:
    """One batch file's bytes -> ``(images uint8 [n, 32, 32, 3] (NHWC), labels uint8 [n])``."""
    try:
        d = _decode(_ArrayUnpickler(io.BytesIO(raw), encoding="latin1").load())
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError) as err:
        raise ValueError(f"{where} is not a CIFAR-10 python batch file ({type(err).__name__}: {err})") from None
    if not isinstance(d, dict) or "data" not in d or "labels" not in d:
        keys = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise ValueError(f"{where} lacks the entries 'data' and 'labels' of a CIFAR-10 batch (has {keys})")
    data = np.asarray(d["data"])
    labels = np.asarray(d["labels"])
    if data.ndim != 2 or data.shape[1] != 3072 or labels.shape != (data.shape[0],):
        raise ValueError(f"{where}: data has shape {data.shape} and labels {labels.shape}; expected [n, 3072] and [n]")
    if data.dtype != np.uint8 or labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{where}: data must be uint8 (is {data.dtype}) and labels in 0..9")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # channel-major rows -> NHWC
    return np.ascontiguousarray(images), labels.astype(np.uint8)


def _folder_reader(base: pathlib.Path):
    names = CIFAR10_TRAIN_BATCHES + (TEST_BATCH,)
    for d in [c / FOLDER for c in candidate_dirs(base, SUBDIR)] + candidate_dirs(base, SUBDIR):
        if all((d / n).is_file() for n in names):
            return lambda n, d=d: ((d / n).read_bytes() if (d / n).is_file() else None), str(d)
    return None


def _archive_reader(base: pathlib.Path):
    for d in candidate_dirs(base, SUBDIR):
        path = d / ARCHIVE
        if path.is_file():
            try:
                with tarfile.open(path, "r:gz") as tar:
                    members = {pathlib.PurePosixPath(m.name).name: tar.extractfile(m).read()
                               for m in tar.getmembers() if m.isfile()}
            except (tarfile.TarError, OSError, EOFError) as err:
                raise ValueError(f"{path} is not a readable .tar.gz archive ({err}); download it again") from None
            return members.get, str(path)
    return None


def load_cifar10(data_dir: str | os.PathLike | None = None) -> dict:
    """Loads a user-supplied CIFAR-10: ``{"train_images", "train_labels", "test_images", "test_labels",
    "label_names"}``.

    Images are ``uint8 [n, 32, 32, 3]`` (NHWC, 0..255), labels ``uint8 [n]``; n = 50000 / 10000 for the real data set
    (the five training batches in order). ``label_names`` comes from ``batches.meta`` (``()`` without it).

    Raises:
      DatasetNotFoundError: neither the extracted folder nor the archive is in the data directory (the message says
        where it looked and how to get it).
      ValueError: a file that is not a CIFAR-10 python batch.
    """
    base = _data_dir(data_dir)
    found = _folder_reader(base) or _archive_reader(base)
    if found is None:
        searched = [c / FOLDER for c in candidate_dirs(base, SUBDIR)] + candidate_dirs(base, SUBDIR)
        expected = [f"{FOLDER}/{{{', '.join(CIFAR10_TRAIN_BATCHES + (TEST_BATCH,))}}}", ARCHIVE]
        raise DatasetNotFoundError("CIFAR-10", searched, expected, _HOW_TO_GET)
    read, where = found
    parts = []
    for name in CIFAR10_TRAIN_BATCHES + (TEST_BATCH,):
        raw = read(name)
        if raw is None:
            raise ValueError(f"{where} lacks the CIFAR-10 batch file {name!r}")
        parts.append(read_cifar_batch(raw, f"{where}/{name}"))
    train_x = np.concatenate([p[0] for p in parts[:-1]])
    train_y = np.concatenate([p[1] for p in parts[:-1]])
    names = ()
    meta = read(META)
    if meta is not None:
        try:
            d = _decode(_ArrayUnpickler(io.BytesIO(meta), encoding="latin1").load())
            names = tuple(n.decode() if isinstance(n, bytes) else str(n) for n in d.get("label_names", ()))
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
            raise ValueError(f"{where}/{META} is not a CIFAR-10 meta file ({err})") from None
    return {"train_images": train_x, "train_labels": train_y, "test_images": parts[-1][0],
            "test_labels": parts[-1][1], "label_names": names}
