"""Benchmark: epsilon of a 1e5-step Poisson schedule (RDP target < 0.1 s, PLD reported) and calibration (< 1 s).

Run: python experiments/benchmarks/bench_accounting.py
"""

import time

from dpjax.accounting import GaussianSchedule, calibrate_noise, compute_epsilon


def best_of(fn, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    import dp_accounting  # noqa: F401  (import cost excluded from the timings)

    s = GaussianSchedule(noise_std=1.0, contribution_bound=1.0, sampling="poisson", dataset_size=60000,
                         batch_size=256, steps=100_000, neighboring="add-remove", unit="record")
    compute_epsilon(s, 1e-5, "rdp")  # warm-up
    t, r = best_of(lambda: compute_epsilon(s, 1e-5, "rdp"))
    print(f"rdp  epsilon, 1e5 Poisson steps: {t * 1e3:8.1f} ms   (eps = {r.epsilon:.4f})   target < 100 ms")
    t, r = best_of(lambda: compute_epsilon(s, 1e-5, "pld"), repeat=1)
    print(f"pld  epsilon, 1e5 Poisson steps: {t * 1e3:8.1f} ms   (eps = {r.epsilon:.4f})")
    t, sig = best_of(lambda: calibrate_noise(s, 3.0, 1e-5, "rdp"))
    print(f"rdp  calibration to eps = 3:      {t * 1e3:8.1f} ms   (noise_std = {sig:.6f})   target < 1000 ms")
    t, sig = best_of(lambda: calibrate_noise(s, 3.0, 1e-5, "pld"), repeat=1)
    print(f"pld  calibration to eps = 3:      {t * 1e3:8.1f} ms   (noise_std = {sig:.6f})")


if __name__ == "__main__":
    main()
