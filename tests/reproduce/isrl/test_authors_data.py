"""The ISRL-DP MNIST silos of the authors' script (``DP_FL_MNIST_logistic_FINAL.py``'s ``load_MNIST2``,
issue #16): :mod:`dpjax.reproduce.isrl.authors_data`, built from :mod:`dpjax.data.isrl`'s pieces."""

import numpy as np
import pytest

from dpjax.data import ISRL_MNIST_PAIRS, isrl_mnist_silos
from dpjax.reproduce.isrl.authors_data import authors_mnist_silos
from dpjax.reproduce.sklearn_numerics import authors_train_test_split
from tests._shared import load_real_mnist


@pytest.fixture(scope="module")
def mnist_real():
    return load_real_mnist()


@pytest.fixture(scope="module")
def mnist_pca(mnist_real):
    from dpjax.data import pca_fit

    return pca_fit(mnist_real["train_images"].reshape(60000, -1).astype(np.float64) / 255.0, 50)


def test_authors_split_is_sklearn_shuffle_split():
    train, test = authors_train_test_split(1548, 0.2, random_state=1)
    perm = np.random.RandomState(1).permutation(1548)
    assert test.size == 310 and train.size == 1238  # ceil(0.2 * 1548) test rows, as ShuffleSplit
    np.testing.assert_array_equal(test, perm[:310])
    np.testing.assert_array_equal(train, perm[310:])
    assert np.intersect1d(train, test).size == 0


def test_authors_construction_on_real_mnist(mnist_real, mnist_pca):
    images, labels = mnist_real["train_images"], mnist_real["train_labels"]
    a = authors_mnist_silos(images, labels, seed=0, pca=mnist_pca)
    b = authors_mnist_silos(images, labels, seed=1, pca=mnist_pca)
    first = {k: np.flatnonzero(labels == k)[:774] for k in range(10)}
    pool = np.concatenate(list(first.values()))
    assert a.train_sizes == [1238] * 25 and a.test_sizes == [310] * 25
    for fd in (a, b):
        for m, (e, o) in enumerate(ISRL_MNIST_PAIRS):
            rows = np.concatenate([fd.metadata["train_indices"][m], fd.metadata["test_indices"][m]])
            # pool membership: only the first 774 images of the pair's two digits, in file order
            assert np.isin(rows, np.concatenate([first[e], first[o]])).all()
            # 1548 rows drawn with replacement from 1548 pool images: duplicates (expected
            # distinct fraction 1 - (1 - 1/1548)^1548 ~ 0.632; 0.68 is > 6 sd above it)
            assert rows.size == 1548 and np.unique(rows).size < 0.68 * 1548
            np.testing.assert_array_equal(fd.train_y[m], (labels[fd.metadata["train_indices"][m]] % 2 == 0))
    # the pool is the same 7,740 images in every trial; only the draws differ
    used = lambda fd: np.unique(np.concatenate(fd.metadata["train_indices"] + fd.metadata["test_indices"]))
    assert np.isin(used(a), pool).all() and np.isin(used(b), pool).all() and pool.size == 7740
    assert not np.array_equal(a.metadata["train_indices"][0], b.metadata["train_indices"][0])
    # most test rows are copies of training images (the script's leakage): with 1238 draws from
    # 1548 images, P(a test image is also drawn for training) = 1 - (1 - 1/1548)^1238 ~ 0.55
    leak = np.mean([np.isin(te, tr).mean() for tr, te in zip(a.metadata["train_indices"], a.metadata["test_indices"])])
    assert 0.45 < leak < 0.65
    # the fixed split: position j of silo m's drawn rows goes to train iff the permutation says so
    train_pos, _ = authors_train_test_split(1548)
    assert a.metadata["construction"] == "authors"
    assert a.metadata["train_indices"][3].shape == train_pos.shape


def test_authors_construction_validates_its_arguments():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 5).astype(np.uint8)
    images = rng.integers(0, 256, (labels.size, 4, 4), dtype=np.uint8)
    with pytest.raises(ValueError, match="n_per_digit=6 exceeds the 5 images of digit 0"):
        authors_mnist_silos(images, labels, seed=0, n_per_digit=6, pca_dim=3)
    with pytest.raises(ValueError, match="heterogeneity_p"):
        authors_mnist_silos(images, labels, seed=0, n_per_digit=5, heterogeneity_p=1.5, pca_dim=3)
    with pytest.raises(ValueError, match="seed"):
        authors_mnist_silos(images, labels, seed=-1, n_per_digit=5, pca_dim=3)
    # the same features as the paper's construction for the same rows: only the draws and the split differ
    fd = authors_mnist_silos(images, labels, seed=0, n_per_digit=5, pca_dim=None)
    rows = fd.metadata["train_indices"][7]
    np.testing.assert_array_equal(fd.train_x[7], (images.reshape(labels.size, -1)[rows] / 255.0).astype(np.float32))
    assert fd.metadata["replace"] is True and fd.metadata["train_fraction"] == 0.8
    paper = isrl_mnist_silos(images, labels, seed=0, n_per_digit=1, pca_dim=None)
    assert "construction" not in paper.metadata and paper.metadata["replace"] is False
