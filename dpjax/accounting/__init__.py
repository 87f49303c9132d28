"""dpjax.accounting: privacy schedules, accountants and calibration (pure Python, no jax).

Quick start::

    from dpjax.accounting import GaussianSchedule, compute_epsilon, calibrate_noise
    s = GaussianSchedule(noise_std=1.1, contribution_bound=1.0, sampling="poisson",
                         dataset_size=60000, batch_size=256, steps=14062,
                         neighboring="add-remove", unit="record")
    compute_epsilon(s, 1e-5, "rdp").epsilon    # 2.5966
    compute_epsilon(s, 1e-5, "pld").epsilon    # 2.38
    compute_epsilon(s, 1e-5, "best")           # the smaller, naming the accountant that certified it
    compute_epsilon([s, s2], 1e-5, "pld")      # heterogeneous composition (one neighbouring relation)
    calibrate_noise(s, 1.0, 1e-5, "best")      # noise_std (absolute); / s.sensitivity = noise multiplier
    calibrate_schedule(s, 1.0, 1e-5, "best")   # the calibrated schedule: .noise_std, .noise_multiplier named

See README.md in this package for which accountant certifies what.
"""

from dpjax.accounting.api import ACCOUNTANTS, CALIBRATION_RTOL, calibrate_noise, calibrate_schedule, compute_epsilon
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyReport, PrivacyUnit, Sampling, SdpReport
from dpjax.accounting.isrl import (
    isrl_authors_code_calibration,
    isrl_experiment_calibration,
    isrl_paper_min_batch_size,
    isrl_paper_sigma,
)

__all__ = [
    "ACCOUNTANTS",
    "CALIBRATION_RTOL",
    "GaussianSchedule",
    "Neighboring",
    "PrivacyReport",
    "PrivacyUnit",
    "Sampling",
    "SdpReport",
    "calibrate_noise",
    "calibrate_schedule",
    "compute_epsilon",
    "isrl_authors_code_calibration",
    "isrl_experiment_calibration",
    "isrl_paper_min_batch_size",
    "isrl_paper_sigma",
]
