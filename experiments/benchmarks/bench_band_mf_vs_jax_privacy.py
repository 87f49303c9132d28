"""Benchmark: dpjax's optimised banded Toeplitz strategy (``dpjax.primitives.banded_mf.optimize_banded_toeplitz``)
against jax_privacy's (``jax_privacy.matrix_factorization.toeplitz.optimize_banded_toeplitz``, jax_privacy 2.0.0) for
the same prefix-sum workload and bands, (rounds, bands) in {(100, 1..16), (1000, 4..64), (2000, 128)} (issue #40's
acceptance: within 1 % of jax_privacy's loss, or better), and both libraries' epsilon for the same BandMF run.

Losses, like with like (both scale-invariant in the coefficients, both single-participation):

* dpjax's ``prefix_loss(c, n) = ||c||^2 sum_k (n - k) x_k^2``, ``x = cumsum(C^{-1} e_0)``: the TOTAL squared error
  ``sens(C)^2 ||A C^{-1}||_F^2`` over the n prefix sums (Choquette-Choo et al., "(Amplified) Banded Matrix
  Factorization", NeurIPS 2023, Sec. 3; McKenna, "Scaling up the banded matrix factorization mechanism", 2024);
* jax_privacy's ``toeplitz.loss(c, n)`` (``reduction_fn=jnp.mean``) is ``||c||^2 mean_t sum_{k<=t} x_k^2``, the
  MEAN over the n queries of the same per-query errors: ``n x toeplitz.loss == prefix_loss`` (checked per row,
  column ``n*jp/ours``). The table reports both in dpjax's total, and scores each strategy with BOTH functions
  (``ratio`` by dpjax's, ``jp ratio`` by jax_privacy's).

``ratio`` is dpjax's float64 optimum over jax_privacy's (which optimises in float64 internally); ``f32 ratio`` is
the float32 parameters that ``DpSgd(noise="band-mf")`` uses (``dpjax.algorithms.band_mf_sgd.optimized_coeffs``), here
inside this x64-enabled process (in a plain float32 process the family's strategy scored within 1e-7 of jax_privacy's
at (100, 16), (1000, 64), (2000, 128) on 2026-12-03).

Epsilon (both through dp_accounting's PLD accountant, discretisation 1e-4, add/remove): a data set of
``--records`` N records in ``bands`` cyclic groups, expected batch ``--batch`` B (rate ``q = B / (N // bands)``,
jax_privacy's convention), noise multiplier ``--sigma`` z, delta ``--delta``:

* amplified (cyclic Poisson, NeurIPS 2023 Thm 4): dpjax's ``BandMfAmplifiedPrivacy(z, q, n, bands, bands)`` against
  jax_privacy's ``DpsgdTrainingAccountant`` with ``cycle_length=bands`` (its "Band-MF with cyclic Poisson sampling");
* multi-epoch (every group member in its round, q = 1: b-min-separation, ``k = ceil(n / bands)`` participations):
  dpjax's ``BandMfPrivacy(z, sqrt(k))`` (one Gaussian of multiplier ``z / sqrt(k)``) against the same jax_privacy
  accountant with ``num_samples = bands x B`` (q = 1).

jax_privacy is an optional dependency (not in dpjax's environment): without it the script prints one line naming the
missing package and exits 0, unless ``--dpjax-only`` asks for dpjax's column alone.

Run: python experiments/benchmarks/bench_band_mf_vs_jax_privacy.py [--dpjax-only] [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import math
import platform
import sys
import time

GRID = ([(100, b) for b in (1, 2, 4, 8, 16)] + [(1000, b) for b in (4, 8, 16, 32, 64)] + [(2000, 128)])
QUICK = [(100, 4), (1000, 16)]


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _epsilons(n: int, b: int, args, have_peer: bool) -> dict:
    """Both libraries' amplified and multi-epoch epsilon of the run (module docstring)."""
    from dpjax.accounting.band_mf import BandMfAmplifiedPrivacy, BandMfPrivacy

    q = args.batch / (args.records // b)
    k = -(-n // b)
    out = {"sampling_rate": q, "participations": k,
           "dpjax_amplified": BandMfAmplifiedPrivacy(args.sigma, q, n, b, b).epsilon(args.delta, "pld").epsilon,
           "dpjax_multi_epoch": BandMfPrivacy(args.sigma, math.sqrt(k), num_rounds=n, bands=b,
                                              min_sep=b).epsilon(args.delta, "pld").epsilon}
    if have_peer:
        from jax_privacy import accounting as jpa

        acc = jpa.DpsgdTrainingAccountant(jpa.PldAccountantConfig(value_discretization_interval=1e-4))

        def jp_eps(num_samples):
            params = jpa.DpParams(noise_multipliers=args.sigma, num_samples=num_samples, delta=args.delta,
                                  batch_size=args.batch, cycle_length=b)
            return float(acc.compute_epsilon(n, params))

        out["jax_privacy_amplified"] = jp_eps(args.records)
        out["jax_privacy_multi_epoch"] = jp_eps(b * args.batch)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dpjax-only", action="store_true", help="print dpjax's losses without jax_privacy")
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK}")
    parser.add_argument("--json", help="write the rows, versions and settings to this path")
    parser.add_argument("--no-epsilon", action="store_true", help="skip the epsilon columns")
    parser.add_argument("--records", type=int, default=60_000, help="N, the data set's size (epsilon columns)")
    parser.add_argument("--batch", type=int, default=256, help="B, the expected batch size (epsilon columns)")
    parser.add_argument("--sigma", type=float, default=1.5, help="z, the noise multiplier (epsilon columns)")
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args(argv)
    have_peer = importlib.util.find_spec("jax_privacy") is not None
    if not have_peer and not args.dpjax_only:
        print("SKIP: the optional package jax_privacy (jax_privacy.matrix_factorization) is not installed; "
              "install it in a separate venv to compare, or pass --dpjax-only")
        return 0

    import jax

    jax.config.update("jax_enable_x64", True)  # both optimisers in float64: the comparison is the optimum's, not fp32's
    import jax.numpy as jnp
    import numpy as np

    from dpjax.primitives import banded_mf

    if have_peer:
        from jax_privacy.matrix_factorization import toeplitz as jp_toeplitz

    print(f"{'rounds':>6} {'bands':>5} {'dpjax loss':>12} {'jax_privacy':>12} {'ratio':>8} {'jp ratio':>8} "
          f"{'f32 ratio':>9} {'n*jp/ours':>9} {'ours/s':>7} {'theirs/s':>8} {'eps amp (dpjax/jp)':>19} "
          f"{'eps multi (dpjax/jp)':>21}", flush=True)
    rows, worst = [], 0.0
    for n, b in (QUICK if args.quick else GRID):
        ours, t_ours = _timed(lambda: banded_mf.optimize_banded_toeplitz(n, b, dtype=jnp.float64))
        ours32, t_ours32 = _timed(lambda: banded_mf.optimize_banded_toeplitz(n, b))
        loss_ours = float(banded_mf.prefix_loss(jnp.asarray(ours), n))
        loss_ours32 = float(banded_mf.prefix_loss(jnp.asarray(ours32, jnp.float64), n))
        row = {"rounds": n, "bands": b, "dpjax_loss": loss_ours, "dpjax_seconds": t_ours,
               "dpjax_f32_loss": loss_ours32, "dpjax_f32_seconds": t_ours32}
        if have_peer:
            theirs, t_theirs = _timed(lambda: np.asarray(jp_toeplitz.optimize_banded_toeplitz(n, b), np.float64))
            loss_theirs = float(banded_mf.prefix_loss(jnp.asarray(theirs), n))
            jp_ours, jp_theirs = (float(jp_toeplitz.loss(jnp.asarray(c), n)) for c in (ours, theirs))
            row.update(jax_privacy_loss=loss_theirs, jax_privacy_seconds=t_theirs, ratio=loss_ours / loss_theirs,
                       f32_ratio=loss_ours32 / loss_theirs, jp_ratio=jp_ours / jp_theirs,
                       jp_mean_loss=jp_theirs, jp_mean_times_n_over_total=n * jp_theirs / loss_theirs)
            worst = max(worst, row["ratio"], row["f32_ratio"])
        if not args.no_epsilon:
            row.update(_epsilons(n, b, args, have_peer))
        rows.append(row)
        g = lambda key, fmt: format(row[key], fmt) if key in row else "-"  # noqa: E731
        amp = f"{g('dpjax_amplified', '.4f')}/{g('jax_privacy_amplified', '.4f')}"
        multi = f"{g('dpjax_multi_epoch', '.4f')}/{g('jax_privacy_multi_epoch', '.4f')}"
        print(f"{n:>6} {b:>5} {loss_ours:>12.6g} {g('jax_privacy_loss', '12.6g'):>12} {g('ratio', '8.5f'):>8} "
              f"{g('jp_ratio', '8.5f'):>8} {g('f32_ratio', '9.5f'):>9} {g('jp_mean_times_n_over_total', '9.6f'):>9} "
              f"{t_ours:>7.2f} {g('jax_privacy_seconds', '8.2f'):>8} {amp:>19} {multi:>21}", flush=True)
    if have_peer:
        print(f"worst dpjax / jax_privacy loss ratio: {worst:.5f} ({'within' if worst <= 1.01 else 'OUTSIDE'} 1 %)")
    if args.json:
        versions = {k: _version(k) for k in ("dpjax", "jax", "jaxlib", "optax", "dp-accounting", "jax_privacy",
                                             "numpy")}
        versions["python"] = platform.python_version()
        out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "versions": versions,
               "args": vars(args), "rows": rows, "worst_ratio": worst if have_peer else None}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
