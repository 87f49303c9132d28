"""Benchmark: dpjax's optimised banded Toeplitz strategy (``dpjax.primitives.banded_mf.optimize_banded_toeplitz``)
against jax_privacy's (``jax_privacy.matrix_factorization.toeplitz.optimize_banded_toeplitz``) for the same
prefix-sum workload and bands, (rounds, bands) in {(100, 1..16), (1000, 4..64)} (issue #40's acceptance: within 1 %
of jax_privacy's loss, or better).

Both strategies are scored by the same loss, dpjax's ``prefix_loss`` (``sens^2 ||A C^{-1}||_F^2`` with the
single-participation sensitivity, Choquette-Choo et al., "(Amplified) Banded Matrix Factorization", NeurIPS 2023,
Sec. 3; McKenna, "Scaling up the banded matrix factorization mechanism", 2024), and, as a cross-check, by
jax_privacy's own ``toeplitz.mean_loss``; the table prints both, their ratio and the optimisation times.

jax_privacy is an optional dependency (not in dpjax's environment): without it the script prints one line naming the
missing package and exits 0, unless ``--dpjax-only`` asks for dpjax's column alone.

Run: python experiments/benchmarks/bench_band_mf_vs_jax_privacy.py [--dpjax-only] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time

GRID = [(100, b) for b in (1, 2, 4, 8, 16)] + [(1000, b) for b in (4, 8, 16, 32, 64)]
QUICK = [(100, 4), (1000, 16)]


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dpjax-only", action="store_true", help="print dpjax's losses without jax_privacy")
    parser.add_argument("--quick", action="store_true", help=f"only {QUICK}")
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

    print(f"{'rounds':>6} {'bands':>5} {'dpjax loss':>14} {'jax_privacy loss':>16} {'ratio':>8} {'ours/s':>7} "
          f"{'theirs/s':>8}  {'jp.mean_loss ratio':>18}")
    worst = 0.0
    for n, b in (QUICK if args.quick else GRID):
        ours, t_ours = _timed(lambda: banded_mf.optimize_banded_toeplitz(n, b, dtype=jnp.float64))
        loss_ours = float(banded_mf.prefix_loss(jnp.asarray(ours), n))
        if not have_peer:
            print(f"{n:>6} {b:>5} {loss_ours:>14.6g} {'-':>16} {'-':>8} {t_ours:>7.2f} {'-':>8}")
            continue
        theirs, t_theirs = _timed(lambda: np.asarray(jp_toeplitz.optimize_banded_toeplitz(n, b), np.float64))
        loss_theirs = float(banded_mf.prefix_loss(jnp.asarray(theirs / np.linalg.norm(theirs)), n))
        ratio = loss_ours / loss_theirs
        jp_ratio = float(jp_toeplitz.mean_loss(jnp.asarray(ours), n=n)) / float(
            jp_toeplitz.mean_loss(jnp.asarray(theirs), n=n))
        worst = max(worst, ratio)
        print(f"{n:>6} {b:>5} {loss_ours:>14.6g} {loss_theirs:>16.6g} {ratio:>8.5f} {t_ours:>7.2f} {t_theirs:>8.2f}  "
              f"{jp_ratio:>18.5f}")
    if have_peer:
        print(f"worst dpjax / jax_privacy loss ratio: {worst:.5f} ({'within' if worst <= 1.01 else 'OUTSIDE'} 1 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
