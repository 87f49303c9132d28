"""Benchmark: epsilon of a 1e5-step Poisson schedule (RDP target < 0.1 s, PLD reported), calibration
(RDP < 1 s; PLD and 'best' reported), and the PLD extremes of issue #11 (time and traced peak memory,
which the bounded grid keeps to seconds and tens of MiB where the fixed 1e-4 grid needed 38 GiB).

Run: python experiments/benchmarks/bench_accounting.py
"""

import time
import tracemalloc

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
    t, sig = best_of(lambda: calibrate_noise(s, 3.0, 1e-5, "best"), repeat=1)
    print(f"best calibration to eps = 3:      {t * 1e3:8.1f} ms   (noise_std = {sig:.6f})")
    for std, sampling, k, steps in ((1e-3, "poisson", 256, 14062), (0.009, "full", None, 1)):
        x = GaussianSchedule(noise_std=std, contribution_bound=1.0, sampling=sampling, dataset_size=60000,
                             batch_size=k, steps=steps, neighboring="add-remove", unit="record")
        tracemalloc.start()
        t, r = best_of(lambda: compute_epsilon(x, 1e-5, "pld"), repeat=1)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"pld  extreme noise_std={std:g} ({sampling}): {t * 1e3:8.1f} ms, peak {peak / 2**20:6.1f} MiB "
              f"(eps = {r.epsilon:.4g}, {r.accountant})")


if __name__ == "__main__":
    main()
