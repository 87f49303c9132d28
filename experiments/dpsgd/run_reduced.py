"""Reduced runs of `dpjax reproduce dpsgd-mnist` on all 60,000 / 10,000 MNIST images.

The full protocol (25 (eta, C) x 3 seeds x E in {10, 30, 50}, six variants) needs hundreds of
CPU hours (see the quick report). This script runs a sub-grid of it, one variant per process so a
long run can be split across processes or machine leases; `--merge` combines finished parts into
one output folder (each variant's rows depend only on its own seeds and keys).

    # the development machine's reduced run: E = 1, eta = 0.5, C = 1, one seed, BC-SH and IC-SS
    python experiments/dpsgd/run_reduced.py --data-dir /path/to/data --out out/dpsgd-mnist-reduced
    # the full (eta, C) grid at E = 10 with 3 seeds, one variant (the GPU run in experiments/dpsgd)
    python experiments/dpsgd/run_reduced.py --epochs 10 --lrs 0.01 0.03 0.1 0.3 1.0 \
        --clips 0.1 0.5 1.0 2.0 5.0 --seeds 3 --only BC-SH --out parts/BC-SH
    python experiments/dpsgd/run_reduced.py --merge parts/* --out merged
    # the quick protocol (with its grid-edge extensions) for BC-SH and IC-SS only, either construction
    python experiments/dpsgd/run_reduced.py --quick --construction paper --out experiments/dpsgd/quick/dpsgd-mnist-paper-bc-ic
"""

import argparse
import pathlib

from dpjax.reproduce.dpsgd_mnist_config import CONSTRUCTIONS, FULL, QUICK
from dpjax.reproduce.dpsgd_mnist import merge_parts, run_protocol

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="BC-SH,IC-SS", help="comma-separated variants")
    ap.add_argument("--epochs", type=int, nargs="+", default=[1])
    ap.add_argument("--lrs", type=float, nargs="+", default=[0.5])
    ap.add_argument("--clips", type=float, nargs="+", default=[1.0])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--merge", nargs="+", default=None, help="finished part folders to merge into --out")
    ap.add_argument("--quick", action="store_true", help="the quick protocol's grid (ignores --epochs/--lrs/--clips/--seeds)")
    ap.add_argument("--construction", choices=CONSTRUCTIONS, default="paper")
    args = ap.parse_args()
    if args.merge:
        print(merge_parts(pathlib.Path(args.out), [pathlib.Path(p) for p in args.merge]))
    elif args.quick:
        print(run_protocol(pathlib.Path(args.out), quick=True, seed=0, data_dir=args.data_dir, config=dict(QUICK),
                           only=tuple(args.only.split(",")), construction=args.construction))
    else:
        config = dict(FULL, epochs=tuple(args.epochs), lrs=tuple(args.lrs), clips=tuple(args.clips),
                      seeds=args.seeds)
        print(run_protocol(pathlib.Path(args.out), quick=False, seed=0, data_dir=args.data_dir, config=config,
                           only=tuple(args.only.split(",")), construction=args.construction))
