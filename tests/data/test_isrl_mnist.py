import numpy as np
import pytest

from dpjax.data import ISRL_MNIST_PAIRS, FederatedDataset, isrl_mnist_silos


def _synthetic_digits(per_digit=60, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), per_digit).astype(np.uint8)
    images = rng.integers(0, 256, (labels.size, 8, 8), dtype=np.uint8)  # small: fast PCA
    return images, labels


def _check_no_replacement(fd):
    tr, te = fd.metadata["train_indices"], fd.metadata["test_indices"]
    seen = np.concatenate(tr + te)
    assert np.unique(seen).size == seen.size  # no duplicates within or across silos
    for a, b in zip(tr, te):
        assert np.intersect1d(a, b).size == 0


def test_synthetic_split_structure():
    images, labels = _synthetic_digits()
    fd = isrl_mnist_silos(images, labels, seed=3, n_per_digit=10, pca_dim=5)
    assert isinstance(fd, FederatedDataset) and fd.num_silos == 25 and fd.num_classes == 2
    assert fd.train_sizes == [16] * 25 and fd.test_sizes == [4] * 25 and fd.dim == 5
    for m, (e, o) in enumerate(ISRL_MNIST_PAIRS):
        digits = labels[np.concatenate([fd.metadata["train_indices"][m], fd.metadata["test_indices"][m]])]
        assert sorted(set(digits.tolist())) == sorted([e, o])
        assert np.sum(digits == e) == 10 and np.sum(digits == o) == 10
        np.testing.assert_array_equal(fd.train_y[m], (labels[fd.metadata["train_indices"][m]] % 2 == 0))
    _check_no_replacement(fd)


def test_synthetic_determinism_and_seed_dependence():
    images, labels = _synthetic_digits()
    a = isrl_mnist_silos(images, labels, seed=1, n_per_digit=10, pca_dim=4)
    b = isrl_mnist_silos(images, labels, seed=1, n_per_digit=10, pca_dim=4)
    c = isrl_mnist_silos(images, labels, seed=2, n_per_digit=10, pca_dim=4)
    for x, y in zip(a.train_x, b.train_x):
        np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(x, y) for x, y in zip(a.train_x, c.train_x))


def test_heterogeneity_knob():
    images, labels = _synthetic_digits(per_digit=200)
    fd = isrl_mnist_silos(images, labels, seed=0, n_per_digit=10, pca_dim=3, heterogeneity_p=0.5)
    assert fd.metadata["n_own_per_silo"] == 10 and fd.metadata["n_pool_per_silo"] == 10
    _check_no_replacement(fd)
    full = isrl_mnist_silos(images, labels, seed=0, n_per_digit=10, pca_dim=3, heterogeneity_p=1.0)
    digits = [set(labels[np.concatenate([t, s])].tolist())
              for t, s in zip(full.metadata["train_indices"], full.metadata["test_indices"])]
    assert any(len(ds) > 2 for ds in digits)  # pool records come from all digits


def test_replace_true_is_the_authors_with_replacement_sampling():
    images, labels = _synthetic_digits(per_digit=12)
    fd = isrl_mnist_silos(images, labels, seed=0, n_per_digit=30, pca_dim=3, replace=True)
    assert fd.train_sizes == [48] * 25
    idx = np.concatenate([fd.metadata["train_indices"][0], fd.metadata["test_indices"][0]])
    assert np.unique(idx).size < idx.size  # 60 draws from 24 images must repeat
    with pytest.raises(ValueError, match="replace=True"):
        isrl_mnist_silos(images, labels, seed=0, n_per_digit=30, pca_dim=3)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"pca_dim": 0}, "pca_dim=0 must be >= 1"),
        ({"n_per_digit": 0}, "n_per_digit=0 must be >= 1"),
        ({"heterogeneity_p": 1.5}, "heterogeneity_p=1.5"),
        ({"train_fraction": 1.0}, "train_fraction=1.0"),
        ({"seed": -1}, "seed=-1"),
        ({"replace": 1}, "replace=1"),
    ],
)
def test_argument_validation(kwargs, match):
    images, labels = _synthetic_digits()
    args = dict(seed=0, n_per_digit=5, pca_dim=3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        isrl_mnist_silos(images, labels, **args)


@pytest.mark.slow
def test_real_mnist_25_silos(mnist_real, mnist_pca):
    x, y = mnist_real["train_images"], mnist_real["train_labels"]
    fd = isrl_mnist_silos(x, y, seed=0, pca=mnist_pca)
    assert fd.num_silos == 25 and fd.dim == 50
    assert fd.train_sizes == [1238] * 25 and fd.test_sizes == [310] * 25
    assert sum(fd.train_sizes) == 30950
    for m, (e, o) in enumerate(ISRL_MNIST_PAIRS):
        tr = fd.metadata["train_indices"][m]
        te = fd.metadata["test_indices"][m]
        digits = y[np.concatenate([tr, te])]
        assert np.sum(digits == e) == 774 and np.sum(digits == o) == 774
        np.testing.assert_array_equal(fd.train_y[m], (y[tr] == e).astype(np.int32))
        np.testing.assert_array_equal(fd.test_y[m], (y[te] == e).astype(np.int32))
        assert fd.train_x[m].dtype == np.float32
    _check_no_replacement(fd)
    # features are the PCA projection of the [0,1] pixels
    i = fd.metadata["train_indices"][7][0]
    z = (x[i].reshape(-1) / 255.0 - mnist_pca.mean) @ mnist_pca.components.T
    np.testing.assert_allclose(fd.train_x[7][0], z, rtol=1e-5, atol=1e-5)
    again = isrl_mnist_silos(x, y, seed=0, pca=mnist_pca)
    np.testing.assert_array_equal(again.train_x[3], fd.train_x[3])
    other = isrl_mnist_silos(x, y, seed=1, pca=mnist_pca)
    assert not np.array_equal(other.metadata["train_indices"][3], fd.metadata["train_indices"][3])


def test_reused_pca_projection_cache_is_exact_and_tied_to_the_images():
    from dpjax.data import isrl as isrl_data
    from dpjax.data.preprocess import pca_fit

    images, labels = _synthetic_digits()
    pca = pca_fit(images.reshape(images.shape[0], -1) / 255.0, 5)
    first = isrl_mnist_silos(images, labels, seed=4, n_per_digit=10, pca_dim=5, pca=pca)
    assert isrl_data._PROJECTION_CACHE  # the whole image set was projected once
    again = isrl_mnist_silos(images, labels, seed=4, n_per_digit=10, pca_dim=5, pca=pca)
    isrl_data._PROJECTION_CACHE.clear()
    fresh = isrl_mnist_silos(images, labels, seed=4, n_per_digit=10, pca_dim=5, pca=pca)
    for a, b, c in zip(first.train_x, again.train_x, fresh.train_x):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, c)
    # the rows really are the PCA features of the images behind them
    idx = first.metadata["train_indices"][0]
    expect = (images.reshape(images.shape[0], -1)[idx] / 255.0 - pca.mean) @ pca.components[:5].T
    np.testing.assert_allclose(first.train_x[0], expect.astype(np.float32), rtol=1e-6, atol=1e-6)
    # other images (a modified copy) are never served from the cache
    other = images.copy()
    other[:] = 255 - other
    flipped = isrl_mnist_silos(other, labels, seed=4, n_per_digit=10, pca_dim=5, pca=pca)
    assert not np.allclose(flipped.train_x[0], first.train_x[0])
