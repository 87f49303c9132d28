import gzip

import numpy as np
import pytest

from dpjax.data import (
    GAS_TURBINE_FEATURES,
    DatasetNotFoundError,
    diff2_dataset,
    diff2_silos,
    load_a9a,
    load_blogfeedback,
    load_california_housing,
    load_gas_turbine,
    load_kddcup99,
    load_svmlight,
    load_w8a,
)

from .conftest import SHARED_DATA, shared_file


@pytest.mark.parametrize("gz", [False, True])
def test_svmlight_parser(tmp_path, gz):
    text = "+1 1:0.5 3:2\n# comment\n-1 2:1  # trailing\n\n+1 4:-1.5\n"
    p = tmp_path / ("f.svm.gz" if gz else "f.svm")
    if gz:
        with gzip.open(p, "wt") as f:
            f.write(text)
    else:
        p.write_text(text)
    out = load_svmlight(p)
    np.testing.assert_array_equal(out["y"], [1, -1, 1])
    np.testing.assert_array_equal(out["x"], [[0.5, 0, 2, 0], [0, 1, 0, 0], [0, 0, 0, -1.5]])
    assert load_svmlight(p, n_features=6)["x"].shape == (3, 6)
    with pytest.raises(ValueError, match="n_features=2"):
        load_svmlight(p, n_features=2)


def test_svmlight_errors(tmp_path):
    p = tmp_path / "bad"
    p.write_text("+1 0:1\n")
    with pytest.raises(ValueError, match="1-based"):
        load_svmlight(p)
    p.write_text("+1 a:b:c\n")
    with pytest.raises(ValueError, match="LIBSVM format"):
        load_svmlight(p)
    with pytest.raises(DatasetNotFoundError):
        load_svmlight(tmp_path / "missing")


def _regression(n=1003, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(3, 2, (n, d))
    x[:, 2] = 5.0  # constant column
    return {"x": x, "y": rng.uniform(1, 50, n)}


def test_diff2_silos_regression_protocol():
    data = _regression()
    fd = diff2_silos(data, seed=0, task="regression")
    assert fd.metadata["n_train"] == 802 and fd.metadata["n_test"] == 201
    assert fd.train_sizes == [80] * 10 and fd.metadata["dropped_train_records"] == 2
    assert fd.num_classes is None and fd.test_x == [] and fd.pooled_test_x.shape == (201, 4)
    # round robin: client p holds the p-th, (p+P)-th, ... shuffled training records
    tr = np.concatenate([fd.metadata["train_indices"][p][None] for p in range(10)]).T.reshape(-1)
    assert np.unique(tr).size == 800
    assert np.intersect1d(tr, fd.metadata["test_indices"]).size == 0
    # whole-dataset standardisation and target scaling
    allx = np.concatenate([fd.pooled_train()[0], fd.pooled_test_x])
    assert np.all(allx[:, 2] == 0)
    ally = np.concatenate([fd.pooled_train()[1], fd.pooled_test_y])
    assert 0 < ally.min() and ally.max() <= 1
    assert fd.metadata["target_scale"] == pytest.approx(data["y"].max())
    full = np.concatenate([fd.pooled_train()[0], fd.pooled_test_x]).astype(np.float64)
    assert abs(full[:, 0].mean()) < 0.01  # 2 dropped records shift the mean only slightly
    keep = diff2_silos(data, seed=0, task="regression", drop_remainder=False)
    assert sorted(keep.train_sizes) == [80] * 8 + [81] * 2
    again = diff2_silos(data, seed=0, task="regression")
    np.testing.assert_array_equal(again.train_x[4], fd.train_x[4])


def test_diff2_silos_classification_and_validation():
    rng = np.random.default_rng(1)
    data = {"x": rng.normal(size=(200, 3)), "y": rng.choice([-1.0, 1.0], 200)}
    fd = diff2_silos(data, seed=0, task="classification", n_silos=4)
    assert fd.num_classes == 2 and set(np.unique(fd.pooled_train()[1])) <= {0, 1}
    assert fd.train_y[0].dtype == np.int32
    with pytest.raises(ValueError, match="task="):
        diff2_silos(data, seed=0, task="ranking")
    with pytest.raises(ValueError, match="n_silos=0 must be >= 1"):
        diff2_silos(data, seed=0, task="regression", n_silos=0)
    with pytest.raises(ValueError, match="normalization_stats="):
        diff2_silos(data, seed=0, task="regression", normalization_stats="test")
    with pytest.raises(ValueError, match="name="):
        diff2_dataset("covtype", seed=0)


def test_synthetic_files_and_missing_errors(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "gas_turbine_co_nox").mkdir()
    for year in range(2011, 2016):
        header = "AT,AP,AH,AFDP" + (" " if year == 2015 else "") + ",GTEP,TIT,TAT,TEY,CDP,CO,NOX"
        rows = "\n".join(",".join(f"{v:.4f}" for v in rng.uniform(0, 10, 11)) for _ in range(7))
        (tmp_path / "gas_turbine_co_nox" / f"gt_{year}.csv").write_text(header + "\n" + rows + "\n")
    g = load_gas_turbine(tmp_path, verify=False)
    assert g["x"].shape == (35, 9) and g["feature_names"] == list(GAS_TURBINE_FEATURES)
    assert np.bincount(g["year"])[2011:].tolist() == [7] * 5
    np.savetxt(tmp_path / "cal_housing.data", rng.uniform(1, 9, (30, 9)), delimiter=",")
    c = load_california_housing(tmp_path, verify=False)
    assert c["x"].shape == (30, 8) and c["y"].shape == (30,)
    kdd = ["0,tcp,http,SF," + ",".join(["1"] * 37) + ",normal.", "2,udp,private,REJ," + ",".join(["0"] * 37) + ",smurf.",
           "1,tcp,private,SF," + ",".join(["3"] * 37) + ",neptune."]
    with gzip.open(tmp_path / "kddcup.data_10_percent.gz", "wt") as f:
        f.write("\n".join(kdd) + "\n")
    k = load_kddcup99(tmp_path, verify=False)
    assert k["class_names"] == ["neptune", "normal", "smurf"] and k["y"].tolist() == [1, 2, 0]
    assert k["x"].shape == (3, 38 + 2 + 2 + 2) and k["standardize_mask"].sum() == 38
    kc = load_kddcup99(tmp_path, symbolic="codes", verify=False)
    assert kc["x"].shape == (3, 41) and kc["x"][:, 1].tolist() == [0, 1, 0]
    empty = tmp_path / "empty"
    for loader, fname in [(load_california_housing, "cal_housing.data"), (load_blogfeedback, "blogData_train.csv"),
                          (load_w8a, "w8a"), (load_a9a, "a9a")]:
        with pytest.raises(DatasetNotFoundError, match=fname):
            loader(empty)
    with pytest.raises(DatasetNotFoundError, match="gt_2011.csv"):
        load_gas_turbine(empty)


def test_real_california_and_gas():
    shared_file("california_housing", "cal_housing.data")
    c = load_california_housing(SHARED_DATA)
    assert c["x"].shape == (20640, 8)
    assert c["y"].mean() == pytest.approx(206855.816909) and c["y"].max() == 500001
    assert c["x"][:, 4].mean() == pytest.approx(537.898014)
    fd = diff2_silos(c, seed=0, task="regression")
    assert fd.metadata["n_train"] == 16512 and fd.train_sizes == [1651] * 10 and fd.dim == 8
    shared_file("gas_turbine_co_nox", "gt_2015.csv")
    g = load_gas_turbine(SHARED_DATA)
    assert g["x"].shape == (36733, 9)
    np.testing.assert_allclose(g["x"].mean(0), [17.7127, 1013.0702, 77.8670, 3.9255, 25.5638, 1081.4281,
                                                546.1585, 133.5064, 12.0605], atol=1e-4)
    assert g["y"].mean() == pytest.approx(2.3725, abs=1e-4)
    fd = diff2_dataset("gas_turbine", SHARED_DATA, seed=0)
    assert fd.metadata["n_train"] == 29386 and fd.metadata["n_min"] == 2938


def test_real_libsvm():
    shared_file("libsvm_a9a", "a9a")
    a = load_a9a(SHARED_DATA)
    assert a["x"].shape == (32561, 123) and (a["y"] == 1).sum() == 7841 and (a["y"] == -1).sum() == 24720
    assert int(a["x"].sum()) == 451592
    assert load_a9a(SHARED_DATA, split="test")["x"].shape == (16281, 123)
    shared_file("libsvm_w8a", "w8a")
    w = load_w8a(SHARED_DATA)
    assert w["x"].shape == (49749, 300) and (w["y"] == 1).sum() == 1479 and int(w["x"].sum()) == 579586


def test_real_blogfeedback():
    shared_file("blogfeedback", "blogData_train.csv.gz")
    b = load_blogfeedback(SHARED_DATA)
    assert b["x"].shape == (52397, 280)
    assert b["y"].mean() == pytest.approx(6.764719, abs=1e-6) and b["y"].max() == 1424
    assert abs((b["y"] == 0).mean() - 0.6405) < 1e-4
    fd = diff2_silos(b, seed=0, task="regression")
    assert fd.metadata["n_train"] == 41917 and fd.metadata["n_min"] == 4191 and fd.dim == 280
    assert fd.pooled_train()[1].max() <= 1.0


@pytest.mark.slow
def test_real_kddcup99():
    shared_file("kddcup99_10pct", "kddcup.data_10_percent.gz")
    k = load_kddcup99(SHARED_DATA)
    assert k["x"].shape == (494021, 118) and len(k["class_names"]) == 23
    counts = dict(zip(k["class_names"], np.bincount(k["y"]).tolist()))
    assert counts["smurf"] == 280790 and counts["neptune"] == 107201 and counts["normal"] == 97278
    assert counts["back"] == 2203 and counts["spy"] == 2
    fd = diff2_silos(k, seed=0, task="classification")
    assert fd.num_classes == 23 and fd.metadata["n_train"] == 395216 and fd.metadata["n_min"] == 39521
    onehot = fd.train_x[0][:, 38:]
    assert set(np.unique(onehot).tolist()) == {0.0, 1.0} and np.all(onehot.sum(1) == 3)
