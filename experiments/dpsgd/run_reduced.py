"""The reduced full-data run of `dpjax reproduce dpsgd-mnist` that fits the development machine.

All 60,000 training / 10,000 test MNIST images, E = 1, eta = 0.5, C = 1, one seed, BC-SH
(m = 64 clipped means of s = 4) and IC-SS (m = 256, s = 1) only, sigma = 2. The full protocol
(25 (eta, C) x 3 seeds x E in {10, 30, 50}) needs hundreds of CPU hours (see the quick report).

    python experiments/dpsgd/run_reduced.py --data-dir /path/to/data --out experiments/dpsgd/reduced/dpsgd-mnist
"""

import argparse
import pathlib

from dpjax.reproduce.dpsgd_mnist import FULL, run_protocol

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="BC-SH,IC-SS", help="comma-separated variants (one process each in parallel)")
    args = ap.parse_args()
    config = dict(FULL, epochs=(1,), lrs=(0.5,), clips=(1.0,), seeds=1)
    print(run_protocol(pathlib.Path(args.out), quick=False, seed=0, data_dir=args.data_dir, config=config,
                       only=tuple(args.only.split(","))))
