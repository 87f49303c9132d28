"""The protocol of ``dpjax reproduce correlated-noise``: the four methods at equal epsilon and equal compute, their
noise calibrated by dpjax's one calibration routine, and each noise strategy's prefix-sum RMSE.

Methods (all plain SGD at a constant step, per-example clipping to C, the clipped sum divided by the public expected
batch B, the same R steps):

* ``poisson``: DP-SGD (Abadi et al., CCS 2016, Alg. 1), Poisson sampling at q = B / n, add/remove;
* ``balls-in-bins``: DP-SGD with balls-in-bins batches (Chua, Ghazi, Harrison, Leeman, Kamath, Kumar, Manurangsi,
  Sinha & Zhang, "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025, Alg. 1): n / B bins an epoch, add/remove,
  certified WITHOUT amplification (``dpjax.accounting.sampling_bins``: ceil(R / (n/B)) Gaussians);
* ``tree-ftrl``: DP-FTRL with tree aggregation restarted every epoch (Kairouz, McMahan, Song, Thakkar, Thakurta & Xu,
  "Practical and Private (Deep) Learning without Sampling or Shuffling", ICML 2021, Alg. 1), blocks of B in a fixed
  order, replace-one (its sensitivity 2C / B: records sit at fixed positions);
* ``band-mf``: BandMF (Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix
  Factorization", NeurIPS 2023, Alg. 1 and Thm 4) with ``bands`` b optimised for the R prefix sums (McKenna 2024),
  the records in b cyclic-Poisson groups sampled at q = B b / n (expected batch B), amplified, add/remove.

Equal epsilon: for every target epsilon each method's noise multiplier z is found by dpjax's one calibration
routine (``dpjax.accounting.calibration.smallest_scale``, what every ``spec.calibrate`` runs) on the certified
epsilon of the family's own ``privacy()`` spec, to a relative width of ``REFINE_RTOL`` (``spec.calibrate`` stops at
1e-6 in z, and a static buffer's overflow charge makes it conservative by ~5e-5 in epsilon): the certified epsilons
of the four methods then agree with the target (from below) to ~1e-8 relative. The accountant is
dp_accounting's RDP (``ACCOUNTANT``): it certifies all four events and is continuous in z, so the refinement
converges (PLD's discretised epsilon is resolved only to ~1e-4; its epsilon at the calibrated z is reported beside).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["METHODS", "QUICK", "FULL", "DELTA", "ACCOUNTANT", "families", "calibrate", "noise_rmse"]

DELTA = 1e-5
ACCOUNTANT = "rdp"
#: relative width of the final calibration bracket (the certified epsilons' agreement is of this order)
REFINE_RTOL = 1e-9
METHODS = ("poisson", "balls-in-bins", "tree-ftrl", "band-mf")
#: quick: a smoke test of every code path (< 60 s on 2 cores), not a measurement
QUICK = dict(n_train=6_000, n_test=2_000, batch=100, steps=60, bands=4, hidden=(32,), epsilons=(4.0,),
             lrs=(1.0,), seeds=2)
#: full: all of MNIST, 2 epochs at B = 250, one step size for every method (sized for ~10 minutes on a 2-core CPU).
#: bands = 16: at R = 480 the calibrated RMSE z x rmse(b) of b in {1, 4, 8, 16, 24, 48} is smallest at b = 8-16 for
#: epsilon 1 (8.98-8.99, b = 48: 10.6) and within 11 % of the best (b = 48) at epsilon 8 (run 2026-12-03, RDP)
FULL = dict(n_train=60_000, n_test=10_000, batch=250, steps=480, bands=16, hidden=(64,),
            epsilons=(1.0, 2.0, 4.0, 8.0), lrs=(1.0,), seeds=2)


def families(cfg: dict, problem) -> dict:
    """method -> (family, hparams class): the four runs of one configuration (module docstring)."""
    from dpjax.algorithms.dp_ftrl import DpFtrl, FtrlHParams
    from dpjax.algorithms.dp_sgd import DpSgd
    from dpjax.algorithms.dpsgd_general import DpSgdHParams

    n, b, r, bands = cfg["n_train"], cfg["batch"], cfg["steps"], cfg["bands"]
    if n % b or (n // b) % bands:
        raise ValueError(f"n_train={n} must be a multiple of batch={b} x bands={bands} (equal batches and groups)")
    return {
        "poisson": (DpSgd(problem, r, b, sampling="poisson", sampling_rate=b / n, optimizer="sgd",
                           poisson_selection="buffered"), DpSgdHParams),  # the kept report was made buffered
        "balls-in-bins": (DpSgd(problem, r, b, sampling="balls-in-bins", num_bins=n // b, optimizer="sgd"),
                          DpSgdHParams),
        "tree-ftrl": (DpFtrl(problem, r, b), FtrlHParams),
        "band-mf": (DpSgd(problem, r, b, sampling="cyclic-poisson", sampling_rate=b * bands / n, noise="band-mf",
                          bands=bands, optimizer="sgd"), DpSgdHParams),
    }


def calibrate(family, hparams_type, n: int, target: float, delta: float = DELTA, accountant: str = ACCOUNTANT
              ) -> tuple[float, float]:
    """``(z, certified epsilon at z)``: the family's noise multiplier for ``target`` (module docstring)."""
    from dpjax.accounting import calibration

    def spec(z):
        return family.privacy([n], hparams_type.create(1.0, z, 1.0))

    def epsilon_at(z):
        try:
            return spec(z).epsilon(delta, accountant).epsilon
        except ValueError:  # so little noise that the static buffer's overflow charge exceeds delta: not met
            return math.inf

    z = calibration.smallest_scale(epsilon_at, target, start=1.0, rtol=REFINE_RTOL, min_scale=1e-3)
    return float(z), float(epsilon_at(z))


def tree_prefix_variances(steps: int, per_epoch: int) -> np.ndarray:
    """Variance of the noise in each of the ``steps`` prefix sums of tree aggregation restarted every ``per_epoch``
    rounds, per unit node variance: the nodes of a prefix of t leaves are the 1-bits of t (Kairouz et al. 2021,
    Sec. 3; Dwork, Naor, Pitassi & Rothblum, STOC 2010), and each finished epoch leaves its last prefix's nodes."""
    t = np.arange(1, steps + 1)
    epochs, within = np.divmod(t, per_epoch)
    full = bin(per_epoch).count("1")
    return epochs * full + np.array([bin(int(w)).count("1") for w in within])


def noise_rmse(method: str, cfg: dict, z: float, coeffs=None) -> dict:
    """The strategy's noise on the R prefix sums of the released mean gradients (the model is theta_0 minus eta
    times them), in units of C / B: per unit noise multiplier (``rmse_per_z``, ``max_per_z``: the last prefix) and
    at the calibrated z (``rmse``). Independent noise (Poisson, balls-in-bins) is the identity strategy, BandMF its
    banded Toeplitz C (``dpjax.primitives.banded_mf.error_stats``), tree aggregation the sum of its nodes; the
    replace-one sensitivity of tree aggregation is 2C / B (twice the add/remove one)."""
    from dpjax.primitives import banded_mf

    r = cfg["steps"]
    if method == "tree-ftrl":
        var = tree_prefix_variances(r, cfg["n_train"] // cfg["batch"]) * 4.0  # (2C/B)^2 per node, in (C/B)^2
        per_z, last = math.sqrt(float(np.mean(var))), math.sqrt(float(var[-1]))
    else:
        stats = banded_mf.error_stats((1.0,) if coeffs is None else coeffs, r)
        per_z, last = stats["rmse"], stats["max_error"]
    return {"rmse_per_z": per_z, "max_per_z": last, "rmse": z * per_z}
