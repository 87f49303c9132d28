import numpy as np
import pytest

from dpjax.data import (
    label_encode,
    minmax_scale,
    one_hot,
    pca_fit,
    pca_transform,
    split_sizes,
    standardize,
    standardize_fit,
)


def _data(seed=0, n=400, d=12):
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.1, d)
    return rng.normal(size=(n, d)) * scales + rng.normal(size=d) * 5


def test_pca_orthonormal_sorted_and_centred():
    x = _data()
    pca = pca_fit(x, 5)
    c = pca.components
    np.testing.assert_allclose(c @ c.T, np.eye(5), atol=1e-10)
    assert np.all(np.diff(pca.explained_variance) <= 0)
    np.testing.assert_allclose(pca.mean, x.mean(0))
    z = pca_transform(pca, x)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-10)
    np.testing.assert_allclose(z.var(0, ddof=1), pca.explained_variance, rtol=1e-8)


def test_pca_matches_svd_and_sign_convention():
    x = _data(1)
    pca = pca_fit(x, 4)
    _, s, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
    for k in range(4):
        assert abs(abs(pca.components[k] @ vt[k]) - 1) < 1e-8
        assert pca.components[k][np.argmax(np.abs(pca.components[k]))] > 0
    np.testing.assert_allclose(pca.explained_variance, s[:4] ** 2 / (len(x) - 1), rtol=1e-8)
    # deterministic, and invariant to sign flips of the data's row order
    again = pca_fit(x[::-1], 4)
    np.testing.assert_allclose(again.components, pca.components, atol=1e-10)


def test_pca_full_rank_reconstructs():
    x = _data(2, n=50, d=6)
    pca = pca_fit(x, 6)
    z = pca_transform(pca, x)
    np.testing.assert_allclose(z @ pca.components + pca.mean, x, atol=1e-9)
    assert abs(pca.explained_variance_ratio.sum() - 1) < 1e-12


def test_pca_argument_validation():
    x = _data()
    with pytest.raises(ValueError, match="n_components=0 must be >= 1"):
        pca_fit(x, 0)
    with pytest.raises(ValueError, match="n_components=13"):
        pca_fit(x, 13)
    with pytest.raises(ValueError, match="fitted on d=12"):
        pca_transform(pca_fit(x, 2), x[:, :5])


def test_real_mnist_pca(mnist_pca):
    c = mnist_pca.components
    assert c.shape == (50, 784)
    np.testing.assert_allclose(c @ c.T, np.eye(50), atol=1e-9)
    assert np.all(np.diff(mnist_pca.explained_variance) <= 0)
    # the well-known figure: 50 components keep ~82.5% of MNIST's pixel variance
    assert 0.80 < mnist_pca.explained_variance_ratio.sum() < 0.85


def test_standardize_and_constant_columns():
    x = _data()
    x[:, 3] = 7.0
    mean, std = standardize_fit(x)
    assert std[3] == 1.0
    z = standardize(x, mean, std)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-10)
    np.testing.assert_allclose(np.delete(z.std(0), 3), 1, atol=1e-10)
    assert np.all(z[:, 3] == 0)
    zc = standardize(x, columns=[0, 1])
    np.testing.assert_array_equal(zc[:, 2:], x[:, 2:])
    with pytest.raises(ValueError, match="std"):
        standardize(x, np.zeros(12), np.zeros(12))


def test_minmax_one_hot_label_encode_split_sizes():
    x = _data()
    s = minmax_scale(x)
    assert s.min() == 0 and s.max() == 1
    np.testing.assert_allclose(s.min(0), 0)
    np.testing.assert_allclose(s.max(0), 1)
    assert minmax_scale(x, feature_range=(-1, 1)).min() == -1
    with pytest.raises(ValueError, match="feature_range"):
        minmax_scale(x, feature_range=(1, 0))
    oh = one_hot(np.array([0, 2, 1, 2]), 3)
    np.testing.assert_array_equal(oh.argmax(1), [0, 2, 1, 2])
    assert oh.sum() == 4
    with pytest.raises(ValueError, match="num_classes"):
        one_hot(np.array([0, 3]), 3)
    codes, classes = label_encode(["b", "a", "c", "a"])
    assert classes == ["a", "b", "c"] and codes.tolist() == [1, 0, 2, 0]
    with pytest.raises(ValueError, match="not among"):
        label_encode(["z"], classes=["a"])
    assert split_sizes(1548, 0.8) == (1238, 310)
    assert split_sizes(20640, 0.8) == (16512, 4128)
    assert split_sizes(36733, 0.8) == (29386, 7347)
    assert split_sizes(494021, 0.8) == (395216, 98805)
    with pytest.raises(ValueError, match="train_fraction"):
        split_sizes(10, 0.0)
