"""``dpjax reproduce user-level-dpsgd --quick``: both units at the target user-level epsilon, their own certificates."""

from __future__ import annotations

import pandas as pd
import pytest

from dpjax.reproduce import user_dpsgd


@pytest.mark.slow  # 8 trainings and 2 ELS calibrations (~3 minutes on the shared 2-core CPU)
@pytest.mark.privacy
def test_quick_run_certifies_both_units_at_the_target(tmp_path, mnist_dir):
    report = user_dpsgd.user_level_dpsgd(tmp_path / "run", quick=True, seed=0, data_dir=mnist_dir)
    rows = pd.read_csv(tmp_path / "run" / "results.csv")
    assert set(rows.algorithm) == {"ULS", "ELS"} and len(rows) == 2 * user_dpsgd.QUICK["trials"]
    # each unit's noise calibrated by its own accountant: certified at (not above) the target, and not far below
    assert (rows.certified_epsilon <= rows.epsilon).all() and (rows.certified_epsilon > 0.99 * rows.epsilon).all()
    # ELS pays group privacy over k = 8 records: it needs more noise per unit of clip than ULS
    z = rows.groupby("algorithm").noise_multiplier.first()
    assert z["ELS"] > 3 * z["ULS"]
    assert rows.value.between(0.0, 0.9).all() and report.read_text().startswith("# User-level DP-SGD")
    assert (tmp_path / "run" / "user_level_dpsgd.png").stat().st_size > 0
