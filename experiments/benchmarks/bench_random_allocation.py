"""Balls-in-bins' certified random-allocation epsilon (``dpjax.accounting.random_allocation``) on the Monte Carlo
bench's grid (z in {0.6, 1, 2} x B in {10, 30, 100}, one epoch, delta 1e-5), beside the bounds it sits between and the
numbers it is compared with: the Poisson marginal (rate 1/B, a lower bound), the port's dominated PLD (a lower bound),
the certificate, Chua et al.'s Monte Carlo estimate (not certified), Poisson at rate 1/B over B steps (Feldman &
Shenfeld 2025: asymptotically not below the allocation) and the unamplified Gaussian; plus the seconds one certificate
took. Run: ``python experiments/benchmarks/bench_random_allocation.py [--samples N] [--discretization H]``."""

from __future__ import annotations

import argparse
import os
import time

from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from dpjax.accounting import balls_in_bins_mc as mc
from dpjax.accounting import random_allocation as ra


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=100_000)
    p.add_argument("--discretization", type=float, default=ra.DEFAULT_DISCRETIZATION)
    p.add_argument("--delta", type=float, default=1e-5)
    a = p.parse_args()
    d, h = a.delta, a.discretization
    print(f"# load average {os.getloadavg()[0]:.1f}; delta {d}; grid {h}; {a.samples} MC samples per direction")
    print("z B poisson_marginal lower certificate seconds mc_estimate mc_delta_se poisson_1/B_B_steps gaussian")
    for z in (0.6, 1.0, 2.0):
        for b in (10, 30, 100):
            t0 = time.perf_counter()
            cert = ra.allocation_epsilon(z, b, 1, d, discretization=h)
            secs = time.perf_counter() - t0
            lower = ra.allocation_epsilon(z, b, 1, d, discretization=h, upper=False)
            marginal = ra.poisson_marginal_epsilon(z, b, 1, d)
            poisson = pld_lib.from_gaussian_mechanism(z, sampling_prob=1 / b).self_compose(b).get_epsilon_for_delta(d)
            est = mc.mc_epsilon(z, b, b, d, num_samples=a.samples, seed=11)
            gauss = gaussian_mechanism.get_epsilon_gaussian(z, d)
            assert marginal <= cert and lower <= cert <= gauss + 1e-9, (z, b)
            print(f"{z} {b} {marginal:.4f} {lower:.4f} {cert:.4f} {secs:.1f} {est.epsilon:.4f} {est.stderr:.1e} "
                  f"{poisson:.4f} {gauss:.4f}", flush=True)


if __name__ == "__main__":
    main()
