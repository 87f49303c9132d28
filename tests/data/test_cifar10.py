"""CIFAR-10 loader (user-supplied copy, python-pickle batches): tiny synthetic files in that format."""

import pickle
import tarfile

import numpy as np
import pytest

from dpjax.data import DatasetNotFoundError, load_cifar10
from dpjax.data.cifar10 import CIFAR10_TRAIN_BATCHES, read_cifar_batch

N_PER_BATCH = 3


def batch_bytes(offset: int) -> tuple[bytes, np.ndarray, list]:
    """A batch pickled as the original (Python 2, protocol 2, byte-string keys, numpy data)."""
    rng = np.random.default_rng(offset)
    data = rng.integers(0, 256, (N_PER_BATCH, 3072), dtype=np.uint8)
    labels = [int(v) for v in rng.integers(0, 10, N_PER_BATCH)]
    return pickle.dumps({b"batch_label": b"x", b"labels": labels, b"data": data}, protocol=2), data, labels


def write_folder(root, meta=True):
    folder = root / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    truth = {}
    for i, name in enumerate(CIFAR10_TRAIN_BATCHES + ("test_batch",)):
        raw, data, labels = batch_bytes(i)
        (folder / name).write_bytes(raw)
        truth[name] = (data, labels)
    if meta:
        (folder / "batches.meta").write_bytes(pickle.dumps({b"label_names": [b"airplane", b"automobile"]}, 2))
    return folder, truth


def test_folder_layout_loads_in_batch_order_as_nhwc(tmp_path):
    _, truth = write_folder(tmp_path)
    d = load_cifar10(tmp_path)
    assert d["train_images"].shape == (5 * N_PER_BATCH, 32, 32, 3) and d["train_images"].dtype == np.uint8
    assert d["test_images"].shape == (N_PER_BATCH, 32, 32, 3)
    assert d["label_names"] == ("airplane", "automobile")
    np.testing.assert_array_equal(d["train_labels"], np.concatenate([truth[n][1] for n in CIFAR10_TRAIN_BATCHES]))
    # row 3072 = 1024 red, 1024 green, 1024 blue values, each row-major over 32 x 32
    data = truth["data_batch_2"][0]
    img = d["train_images"][N_PER_BATCH + 1]
    for c in range(3):
        for r, col in ((0, 0), (0, 31), (5, 7), (31, 31)):
            assert img[r, col, c] == data[1, 1024 * c + 32 * r + col]
    np.testing.assert_array_equal(d["test_labels"], truth["test_batch"][1])


def test_archive_is_read_in_place_and_env_var_names_the_directory(tmp_path, monkeypatch):
    folder, truth = write_folder(tmp_path / "src", meta=False)
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    monkeypatch.setenv("DPJAX_DATA_DIR", str(tmp_path))
    d = load_cifar10()
    assert d["label_names"] == ()
    np.testing.assert_array_equal(d["test_images"].reshape(N_PER_BATCH, 32, 32, 3).transpose(0, 3, 1, 2).reshape(
        N_PER_BATCH, 3072), truth["test_batch"][0])


def test_absent_data_says_where_it_looked_and_what_it_expects(tmp_path):
    with pytest.raises(DatasetNotFoundError) as err:
        load_cifar10(tmp_path / "nowhere")
    msg = str(err.value)
    assert "CIFAR-10" in msg and "cifar-10-batches-py" in msg and "cifar-10-python.tar.gz" in msg
    assert "DPJAX_DATA_DIR" in msg and "does not exist" in msg


def test_bad_files_are_refused_without_running_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with pytest.raises(ValueError, match="not a CIFAR-10 python batch file"):
        read_cifar_batch(pickle.dumps({b"data": Evil(), b"labels": []}), "evil")
    with pytest.raises(ValueError, match=r"expected \[n, 3072\]"):
        read_cifar_batch(pickle.dumps({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}), "short")
    folder, _ = write_folder(tmp_path)
    (folder / "test_batch").write_bytes(b"not a pickle")
    with pytest.raises(ValueError, match="test_batch is not a CIFAR-10"):
        load_cifar10(tmp_path)
