"""The DIFF2 authors' data construction (issue #16): :mod:`dpjax.reproduce.diff2.authors_data`
(built from :mod:`dpjax.data.diff2`'s pieces), pinned against the authors' scripts
(``lawrenceztang/CE-PLSGM``: ``src/utils/load_dataset.py``, ``src/train.py``,
``src/optimizers.py``) and scikit-learn's algorithms, on real data from
``../shared/data`` where it is present."""

import csv
import gzip
import math

import numpy as np
import pytest

from dpjax.data import diff2 as d2
from dpjax.reproduce.diff2 import authors_data as ad
from dpjax.reproduce.sklearn_numerics import standard_scaler_fit
from tests._shared import SHARED_DATA, shared_file


def _sklearn_split(n: int, random_state: int = 0):
    """scikit-learn's ``train_test_split(test_size=0.2, random_state=r)``: ``ShuffleSplit`` takes
    ``n_test = ceil(0.2 n)`` and ``RandomState(r).permutation(n)``; the first ``n_test`` positions
    are the test rows, the next ``n - n_test`` the training rows, both in permutation order."""
    perm = np.random.RandomState(random_state).permutation(n)
    n_test = math.ceil(0.2 * n)
    return perm[n_test:], perm[:n_test]


def _toy(n=23, d=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(2.0, 3.0, size=(n, d))
    x[:, 1] = 5.0  # a constant column: StandardScaler keeps scale 1, so it becomes 0
    return {"x": x, "y": rng.uniform(1, 4, size=n)}


def test_fixed_split_is_sklearns_for_every_seed():
    train, test = _sklearn_split(23)
    # scikit-learn 1.9.1 printed these for train_test_split(np.arange(23), test_size=.2, random_state=0)
    # (run offline as a cross-check; scikit-learn is not a dependency of dpjax)
    np.testing.assert_array_equal(test, [11, 10, 21, 14, 20])
    np.testing.assert_array_equal(train[:6], [1, 13, 22, 16, 8, 6])
    for seed in (0, 1, 7):
        fd = ad.authors_diff2_silos(_toy(), seed=seed, task="regression", n_silos=4)
        np.testing.assert_array_equal(fd.metadata["test_indices"], test)
        # train.py's random_split_to_local_datasets: record i of the training split goes to client i mod P,
        # and no record is dropped (sizes 5, 5, 4, 4 for 18 records)
        for p in range(4):
            np.testing.assert_array_equal(fd.metadata["train_indices"][p], train[p::4])
        assert fd.metadata["n_per_silo"] == [5, 5, 4, 4] and fd.metadata["n_min"] == 4
        assert fd.metadata["construction"] == "authors" and "random_state=0" in fd.metadata["split"]
    paper = [d2.diff2_silos(_toy(), seed=s, task="regression", n_silos=4).metadata["test_indices"] for s in (0, 1)]
    assert not np.array_equal(paper[0], paper[1])  # the paper's construction re-splits per seed


def test_statistics_from_the_training_split_only():
    data = _toy(n=40, d=4, seed=3)
    fd = ad.authors_diff2_silos(data, seed=0, task="regression", n_silos=4)
    tr, te = _sklearn_split(40)
    xtr = np.concatenate(fd.train_x)
    rows = np.concatenate(fd.metadata["train_indices"])
    # the dealt training records are exactly the split's: their standardised columns have mean 0 and
    # std 1 up to float32 rounding (|z| < 5, eps_32 = 1.2e-7: 1e-5 is far above any rounding error)
    assert sorted(rows.tolist()) == sorted(tr.tolist())
    live = [0, 2, 3]
    np.testing.assert_allclose(xtr[:, live].mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(xtr[:, live].std(0), 1.0, atol=1e-5)
    assert np.all(xtr[:, 1] == 0.0) and np.all(fd.pooled_test_x[:, 1] == 0.0)
    # the test rows are scaled with the training statistics, not their own
    x32 = data["x"].astype(np.float32)
    mu, sd = x32[tr].astype(np.float64).mean(0), x32[tr].astype(np.float64).std(0)
    np.testing.assert_allclose(fd.pooled_test_x[:, live], ((x32[te][:, live] - mu[live]) / sd[live]), rtol=1e-5,
                               atol=1e-5)
    assert np.abs(fd.pooled_test_x[:, live].mean(0)).max() > 0.05  # not re-centred on the test rows
    mean, scale = standard_scaler_fit(x32[tr])
    np.testing.assert_allclose(mean, mu, rtol=1e-12)
    np.testing.assert_allclose(scale[live], sd[live], rtol=1e-12)
    assert scale[1] == 1.0


def test_authors_construction_validates_its_arguments():
    with pytest.raises(ValueError, match="task="):
        ad.authors_diff2_silos(_toy(), seed=0, task="ranking")
    with pytest.raises(ValueError, match="n_silos=30"):
        ad.authors_diff2_silos(_toy(), seed=0, task="regression", n_silos=30)
    with pytest.raises(ValueError, match="name="):
        ad.load_authors_raw("covtype")
    with pytest.raises(ValueError, match="feature"):
        ad.california_housing_sklearn({"x": np.ones((2, 8)), "y": np.ones(2), "feature_names": list("abcdefgh")})


def _raw_rows(indices):
    path = shared_file("california_housing", "cal_housing.data")
    with open(path) as f:
        rows = list(csv.reader(f))
    return [[float(v) for v in rows[i]] for i in indices]


def test_real_california_sklearn_features():
    shared_file("california_housing", "cal_housing.data")  # the skip guard comes before any load
    rows = [0, 1, 100, 20639]
    sk = ad.load_authors_raw("california_housing", SHARED_DATA)
    assert sk["x"].shape == (20640, 8) and sk["feature_names"] == list(ad.SKLEARN_CAL_HOUSING_FEATURES)
    for i, r in zip(rows, _raw_rows(rows)):
        lon, lat, age, rooms, bedrooms, pop, households, income, value = r
        expect = [income, age, rooms / households, bedrooms / households, pop, pop / households, lat, lon]
        np.testing.assert_array_equal(sk["x"][i], expect)
        assert sk["y"][i] == value / 100000.0
    # scikit-learn's documented first row of fetch_california_housing (its user guide's frame head)
    np.testing.assert_allclose(sk["x"][0], [8.3252, 41.0, 6.984127, 1.02381, 322.0, 2.555556, 37.88, -122.23],
                               rtol=1e-6)
    assert sk["y"][0] == pytest.approx(4.526)
    # the same 20640 rows in the same order as the Torgo file: no row is dropped or added
    paper = d2.load_diff2_raw("california_housing", SHARED_DATA)
    np.testing.assert_array_equal(sk["x"][:, 6:], paper["x"][:, [1, 0]])
    fd = ad.authors_diff2_silos(sk, seed=4, task="regression")
    assert fd.metadata["n_train"] == 16512 and fd.metadata["n_test"] == 4128
    assert fd.metadata["n_per_silo"] == [1652, 1652] + [1651] * 8  # nothing dropped
    # target / max|target| over the whole table, as the script (500001 / 100000 is the cap)
    assert float(np.concatenate(fd.train_y).max()) <= 1.0 and fd.metadata["target_scale"] == 5.00001
    train, test = _sklearn_split(20640)
    np.testing.assert_array_equal(fd.metadata["test_indices"], test)
    np.testing.assert_array_equal(fd.metadata["train_indices"][3], train[3::10])
    xtr = np.concatenate(fd.train_x).astype(np.float64)
    np.testing.assert_allclose(xtr.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(xtr.std(0), 1.0, atol=1e-5)


def test_real_blogfeedback_symbolic_columns_unscaled():
    path = shared_file("blogfeedback", "blogData_train.csv.gz")
    data = ad.load_authors_raw("blogfeedback", SHARED_DATA)
    cols = list(ad.BLOG_SYMBOLIC_COLUMNS)
    assert cols == list(range(262, 269)) and data["symbolic_columns"] == cols
    assert not data["standardize_mask"][cols].any() and data["standardize_mask"].sum() == 273
    # weekday indicators: LabelEncoder of {0, 1} is the identity, so the codes are the file's values
    with gzip.open(path, "rt") as f:
        head = [[float(v) for v in row] for _, row in zip(range(200), csv.reader(f))]
    np.testing.assert_array_equal(data["x"][:200, cols], np.asarray(head)[:, cols])
    assert set(np.unique(data["x"][:, cols]).tolist()) == {0.0, 1.0}
    fd = ad.authors_diff2_silos(data, seed=2, task="regression")
    for p in (0, 9):
        np.testing.assert_array_equal(fd.train_x[p][:, cols], data["x"][fd.metadata["train_indices"][p]][:, cols])
    np.testing.assert_array_equal(fd.pooled_test_x[:, cols], data["x"][fd.metadata["test_indices"]][:, cols])
    # the other weekday block (269-275, publication day) is standardised (as every column is by the paper's)
    assert not set(np.unique(fd.train_x[0][:, 269]).tolist()) <= {0.0, 1.0}


def test_script_noise_multipliers():
    from dpjax.accounting import diff2 as acc
    from dpjax.reproduce.diff2.authors_data import diff2_gd_sigmas_script

    eps, delta, R, n, P = 3.0, 1e-5, 2000, 1651, 10
    for T in (6, 20, 60, 200):
        s1, s2 = diff2_gd_sigmas_script(eps, delta, R, T, n, P, u=1.25)
        # optimizers.py: coef * alpha * R / (T n^2 P^2 eps), coef = 4u; sigma2: 2 (2u)/(u-1) alpha R/(n^2P^2 eps)
        alpha = int(1 + np.ceil(2 * math.log(1 / delta) / eps))
        assert s1 == pytest.approx(math.sqrt(4 * 1.25 * alpha * R / (T * n**2 * P**2 * eps)), rel=1e-12)
        assert s2 == pytest.approx(math.sqrt(2 * 2.5 / 0.25 * alpha * R / (n**2 * P**2 * eps)), rel=1e-12)
        p1, p2 = acc.diff2_gd_sigmas(eps, delta, R, T, n, P, u=1.25, mode="paper")
        m = math.ceil(R / T)
        assert s1 == pytest.approx(p1 * math.sqrt(R / (T * m)), rel=1e-12)
        assert s2 == pytest.approx(p2 * math.sqrt(R / (R - m)), rel=1e-12)
    # T = 1 is the script's DP-GD (coef 4): Prop. 4.1's u -> 1 closed form
    s, none = diff2_gd_sigmas_script(eps, delta, R, 1, n, P)
    assert none is None and s == pytest.approx(acc.dpgd_sigma(eps, delta, R, n, P), rel=1e-12)
    with pytest.raises(ValueError, match="u=1.0"):
        diff2_gd_sigmas_script(eps, delta, R, 6, n, P, u=1.0)


def test_package_exports_every_listed_name():
    import dpjax.data as data

    for name in data.__all__:  # `from dpjax.data import *` needs every listed name
        assert hasattr(data, name), name
    assert data.load_diff2_raw is d2.load_diff2_raw and data.dealt_diff2_silos is d2.dealt_diff2_silos
    for name in ad.__all__:
        assert hasattr(ad, name), name
