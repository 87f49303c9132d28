"""What calibration returns is named, docs read the key the spec returns, the default unit is central DP's, and
``poisson_sample`` documents its arguments (issue #39, newcomer 7)."""

import inspect
import pathlib
import re

import pytest

from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.privacy
@pytest.mark.parametrize("neighboring", ["add-remove", "replace-one"])
def test_calibrate_schedule_names_std_and_multiplier(neighboring):
    from dpjax.accounting import calibrate_schedule

    base = GaussianSchedule(noise_std=1.0, contribution_bound=0.5, sampling="poisson", dataset_size=10_000,
                            batch_size=100, steps=1000, neighboring=neighboring, unit="record")
    std = calibrate_noise(base, 1.0, 1e-5, "rdp")
    cal = calibrate_schedule(base, 1.0, 1e-5, "rdp")
    assert cal.noise_std == std and cal.noise_multiplier == std / base.sensitivity
    assert cal.replace(noise_std=1.0) == base  # nothing else changed
    assert compute_epsilon(cal, 1e-5, "rdp").epsilon <= 1.0


def test_gaussian_schedule_default_unit_is_central_dp():
    s = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling="poisson", dataset_size=100, batch_size=10,
                         steps=5, neighboring="add-remove")
    assert s.unit.value == "record"
    assert compute_epsilon(s, 1e-5, "rdp").unit == "record"


def test_docs_read_the_key_the_spec_returns():
    """Every ``spec.calibrate(...)["KEY"]`` in the README and the pages names a key the calibrated spec returns."""
    import numpy as np

    from dpjax.algorithms import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    texts = [ROOT / "README.md", *sorted((ROOT / "dpjax" / "docs" / "pages").rglob("*.md"))]
    keys = {(p.name, k) for p in texts for k in re.findall(r"\.calibrate\([^)]*\)\[\"(\w+)\"\]", p.read_text())}
    assert keys, "the pages read a calibrated spec somewhere"
    rng = np.random.default_rng(0)
    data = SiloData.from_silos([rng.normal(size=(50, 3)).astype(np.float32)] * 2, [np.ones(50, np.float32)] * 2)
    algo = NoisyMbSgd(LogisticRegression(3), num_rounds=5, batch_size=10, sampling="without-replacement",
                      availability=FixedAvailability(2))
    returned = set(algo.privacy(data.silo_sizes(), MbSgdHParams.create(1.0, 1.0, 1.0)).calibrate(2.0, 1e-4, "rdp"))
    assert {(page, k) for page, k in keys if k not in returned} == set(), returned


def test_poisson_sample_documents_every_argument():
    from dpjax.primitives import poisson_sample

    doc = inspect.getdoc(poisson_sample)
    for name in inspect.signature(poisson_sample).parameters:
        assert re.search(rf"^\s+{name}: \S", doc, flags=re.M), name
    assert "rows ``0 .. size - 1``" in doc  # what size is: the real records of the padded rows
