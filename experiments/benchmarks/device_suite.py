"""The accelerator suite: one command, the roofline table of dpjax's main workloads on this device.

Full size on one H100 (2026-11-26, jax 0.11.2): dp-steps 19 s, fig4 20 s, diff2 57 s, dpsgd 212 s
(BC-SH and IC-SS), about 5.3 minutes with start-up; output in
``results/device_suite_h100_2026-11-26/``. Most of fig4's (99 %) and dpsgd's (73 %) section time is XLA
compilation (a costed program is compiled four times: itself and three loop-free variants).
``--reduced`` is the CI size on a CPU (39 s on the idle 2-core machine for dp-steps, fig4 and dpsgd).
Sections (each prints its rows as they finish; a section whose dataset is
missing prints one ``skipped`` line and the rest goes on; a section that fails otherwise prints
``FAILED`` with the error, the rest goes on, and the suite exits 1):

1. ``peaks``: the device's matmul FLOP/s and copy bytes/s (``roofline.measure_peaks``);
2. ``fig4``: the ISRL-DP Fig. 4 sweep (M = 12 panel, 6 eps x 10 step sizes x 3
   repetitions x 20 trials = 3600 runs, ``bench_sweep_fig4.fig4_config``) through
   ``run_sweep``, every chunk program costed and timed (``roofline.Recorder``);
   reduced: synthetic data, 1 trial;
3. ``dp-steps``: the DP steps of ``bench_dp_step.py`` (MLP, CNN; private ghost and
   non-private twin), batch 256 (reduced: 8);
4. ``diff2``: DIFF2-GD on California housing and gas turbine: a probe grid
   (``probe_runs`` configurations of the paper's grid x ``probe_rounds`` rounds,
   one seed) through the figure's own ``run_dataset``; prints the cost per
   run-round and the full protocol (Figs. 1-2: every configuration x 5 seeds x
   2000 rounds) extrapolated from it, with its floor;
5. ``dpsgd``: the dpsgd-mnist grid at E = 10 (every variant, 5 step sizes x 5
   clip norms, one seed, all 60,000 images; reduced: 512 images, one variant,
   one configuration) through the figure's ``run_protocol``.

Usage::

    PYTHONPATH=$PWD python experiments/benchmarks/device_suite.py --data-dir /path/to/data --out results/
    PYTHONPATH=$PWD python experiments/benchmarks/device_suite.py --reduced        # CI, CPU

Output: the roofline rows (``roofline.COLUMNS``) of every program, one
protocol row per workload, and with ``--out`` ``device_suite.csv`` /
``device_suite_protocols.csv`` / ``device_suite.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu") if "--reduced" in sys.argv else None

import jax  # noqa: E402
import numpy as np  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SECTIONS = ("fig4", "dp-steps", "diff2", "dpsgd")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


roofline = _load("roofline")


def fig4(peaks, reduced: bool, data_dir=None):
    from dpjax.sweep import run_sweep

    fig4_config = _load("bench_sweep_fig4").fig4_config
    data = "synthetic" if reduced else "isrl-mnist"
    cfg = fig4_config(1 if reduced else 20, None, data)
    if reduced:  # 5 rounds, 2 step sizes x 2 epsilons x 1 repetition on 8 small synthetic silos
        import dataclasses

        grid = {**cfg.grid, "learning_rate": {"logspace": [-3, 0, 2], "base": "e"}, "epsilon": [1.5, 6.0],
                "repetition": 1}
        data = {"name": "synthetic-logistic", "num_silos": 8, "n": 64, "dim": 10, "n_test": 32}
        cfg = dataclasses.replace(cfg, num_rounds=5, grid=grid, data=data,
                                  static={**cfg.static, "availability": 4})
    rec = roofline.Recorder(replay=False, label="fig4: ")
    with tempfile.TemporaryDirectory() as out, rec.patch():
        run_sweep(cfg, out)
    return rec.rows("fig4", peaks), [rec.protocol("fig4", "reduced" if reduced else "full (3600 runs)", peaks)]


def dp_steps(peaks, reduced: bool, data_dir=None):
    rows = roofline.dp_step_rows(["mlp"] if reduced else ["mlp", "cnn"], 8 if reduced else 256, peaks,
                                 3 if reduced else 20)
    return rows, []


def diff2(peaks, reduced: bool, data_dir=None, probe_rounds: int | None = None, probe_runs: int | None = None):
    """Cost per run-round of DIFF2-GD (and the DP-GD / GD rows of the same grid) on the two regression sets."""
    import dataclasses

    from dpjax.reproduce import diff2 as fig

    probe_rounds = probe_rounds or (4 if reduced else 100)
    probe_runs = probe_runs or (2 if reduced else 64)
    rows, protocols = [], []
    for name in ("california_housing", "gas_turbine"):
        probe = dataclasses.replace(fig.config.FULL, num_rounds=probe_rounds, eval_every=probe_rounds, seeds=(0,),
                                    max_records={name: 300} if reduced else None)
        full_configs = None
        picked = []

        def keep(c, picked=picked):
            # a spread of the grid (every kind of row: DIFF2-GD, DP-GD, GD), the first probe_runs of a stride
            picked.append(c)
            return len(picked) % 7 == 1 and len(picked) // 7 < probe_runs

        rec = roofline.Recorder(replay=False, label=f"diff2 {name}: ")
        with rec.patch():
            result = fig.driver.run_dataset(name, probe, (3.0, 5.0), data_dir=data_dir, config_filter=keep, log=lambda s: None)
        full_configs = len(fig.config.build_configs(fig.config.FULL, (3.0, 5.0), result["meta"]["n_min"]))
        runs = len(result["configs"])
        proto = rec.protocol(f"diff2 {name}", f"probe {runs} runs x {probe_rounds} rounds", peaks)
        per_run_round = proto["measured_s"] / (runs * probe_rounds)
        floor_per_run_round = proto["floor_s"] / (runs * probe_rounds)
        full_run_rounds = full_configs * len(fig.config.FULL.seeds) * fig.config.FULL.num_rounds
        protocols.append(proto)
        protocols.append({"figure": f"diff2 {name}", "protocol": ("[reduced: 300-record probe, NOT the full data] "
                          if reduced else "") + f"full Figs. 1-2 ({full_configs} configs x "
                          f"{len(fig.config.FULL.seeds)} seeds x {fig.config.FULL.num_rounds} rounds)", "programs": proto["programs"],
                          "calls": "-", "measured_s": per_run_round * full_run_rounds,
                          "floor_s": floor_per_run_round * full_run_rounds,
                          "measured_over_floor": per_run_round / floor_per_run_round if floor_per_run_round else math.inf,
                          "how": f"extrapolated: {per_run_round * 1e6:.3g} us per run-round"})
        rows += rec.rows(f"diff2 {name}", peaks)
        # the comparison of issue #25 item 6: non-private full-batch GD (its own static program, T = 1) on
        # the same split, as many lanes as the DIFF2 probe, same rounds
        gd_rows, gd_proto = _gd_twin(fig, name, probe, runs, peaks, data_dir)
        rows += gd_rows
        protocols.append(gd_proto)
        protocols.append({"figure": f"diff2 {name}", "protocol": "DIFF2-GD grid / non-private GD, per run-round",
                          "programs": 2, "calls": "-", "measured_s": per_run_round,
                          "floor_s": gd_proto["measured_s"] / (runs * probe_rounds),
                          "measured_over_floor": per_run_round / (gd_proto["measured_s"] / (runs * probe_rounds)),
                          "how": "ratio of measured times (floor_s column: GD's measured s per run-round)"})
    return rows, protocols


def _gd_twin(fig, name, probe, lanes, peaks, data_dir):
    import jax.numpy as jnp

    from dpjax import keys
    from dpjax.algorithms import diff2 as alg
    from dpjax.engine import run_grid

    cap = (probe.max_records or {}).get(name)
    fd, task = fig.model.load_split(name, probe.seeds[0], cap, data_dir)
    data = fig.driver.silo_data(fd, False)
    problem = fig.model.mlp_problem(fd.train_x[0].shape[1], 1, task)
    gd = alg.nonprivate_gd(problem, probe.num_rounds, output="last")
    f32 = lambda v: np.full(lanes, v, np.float32)  # noqa: E731
    hp = alg.Diff2HParams(learning_rate=f32(0.1), restart_interval=np.ones(lanes, np.int32),
                          clip_restart=f32(np.inf), clip_diff=f32(np.inf), noise_multiplier_restart=f32(0.0),
                          noise_multiplier_diff=f32(0.0), clip_local=f32(1.0), noise_multiplier_local=f32(0.0))
    run_keys = jnp.stack([keys.run_key(0, i) for i in range(lanes)])
    rec = roofline.Recorder(replay=False, label=f"diff2 {name} GD twin: ")
    with rec.patch():
        run_grid(gd, data, hp, run_keys, common_random_numbers=False, chunk_size=lanes,
                 params=problem.init_params(keys.run_key(0, 1)))
    return rec.rows(f"diff2 {name} GD", peaks), rec.protocol(f"diff2 {name} GD", f"GD {lanes} runs x "
                                                              f"{probe.num_rounds} rounds", peaks)


DPSGD_VARIANTS = ("BC-SH", "IC-SS")  # the paper's two headline rows; each E = 10 grid took 73-122 s on one H100


def dpsgd(peaks, reduced: bool, data_dir=None, variants=None):
    from dpjax.reproduce import dpsgd_mnist as fig

    config = ({"n_train": 512, "n_test": 256, "epochs": (1,), "lrs": (0.3,), "clips": (1.0,), "seeds": 1}
              if reduced else {"epochs": (10,), "seeds": 1})
    only = ("BC-SH",) if reduced else (None if variants == ["all"] else tuple(variants or DPSGD_VARIANTS))
    rec = roofline.Recorder(replay=False, label="dpsgd-mnist: ")
    with tempfile.TemporaryDirectory() as tmp, rec.patch():
        fig.run_protocol(pathlib.Path(tmp) / "out", quick=False, seed=0, data_dir=data_dir, config=config, only=only)
    return rec.rows("dpsgd-mnist", peaks), [rec.protocol("dpsgd-mnist", "reduced" if reduced else "E=10 grid", peaks)]


RUNNERS = {"fig4": fig4, "dp-steps": dp_steps, "diff2": diff2, "dpsgd": dpsgd}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reduced", action="store_true", help="CI size on CPU")
    ap.add_argument("--sections", nargs="*", default=list(SECTIONS), choices=SECTIONS)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--dpsgd-variants", nargs="*", default=None, metavar="NAME",
                    help=f"dpsgd-mnist variants at full size (default {' '.join(DPSGD_VARIANTS)}; 'all' for all six)")
    ap.add_argument("--diff2-probe", type=int, nargs=2, default=None, metavar=("ROUNDS", "RUNS"),
                    help="DIFF2 probe size (default 100 64; reduced 4 2)")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    dev = jax.devices()[0]
    print(f"device suite ({'reduced' if args.reduced else 'full'}): jax {jax.__version__}, {dev.platform} "
          f"{getattr(dev, 'device_kind', '')} x{len(jax.devices())}", flush=True)
    peaks = roofline.measure_peaks(args.reduced, repeats=10)
    print(f"peaks: {peaks.flops / 1e9:.1f} GFLOP/s, {peaks.bandwidth / 1e9:.1f} GB/s", flush=True)
    rows, protocols, failed = [], [], []
    for section in args.sections:
        t0 = time.perf_counter()
        try:
            kw = {"probe_rounds": args.diff2_probe[0], "probe_runs": args.diff2_probe[1]} \
                if section == "diff2" and args.diff2_probe else {}
            if section == "dpsgd":
                kw = {"variants": args.dpsgd_variants}
            r, p = RUNNERS[section](peaks, args.reduced, data_dir=args.data_dir, **kw)
        except Exception as err:
            # a missing dataset skips its section, the suite goes on (a figure may re-raise it as the
            # ValueError its CLI prints in one line: the FileNotFoundError is then its context)
            if not isinstance(err, FileNotFoundError) and not isinstance(err.__context__, FileNotFoundError):
                print(f"{section}: FAILED ({type(err).__name__}: {str(err)[:300]})", flush=True)
                failed.append(section)
                continue
            print(f"{section}: skipped, dataset missing ({str(err)[:200]})", flush=True)
            continue
        rows += r
        protocols += p
        print(f"{section}: {len(r)} programs in {time.perf_counter() - t0:.1f} s", flush=True)
        if args.out is not None:  # after every section: a suite cut short keeps what it measured
            roofline.write(args.out, rows, protocols, peaks, stem="device_suite", note=_note(args, dev, start))
    # a shared machine: the better of the peaks measured before and after is the machine's (as roofline.main)
    peaks = roofline.best_peaks(peaks, roofline.measure_peaks(args.reduced, repeats=10))
    rows, protocols = roofline.rescale(rows, protocols, peaks)
    note = _note(args, dev, start)
    print(roofline.markdown(rows, protocols, peaks, note), flush=True)
    if args.out is not None:
        roofline.write(args.out, rows, protocols, peaks, stem="device_suite", note=note)
    if failed:
        print(f"device suite: {len(failed)} section(s) failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


def _note(args, dev, start) -> str:
    return (f"device suite {'reduced' if args.reduced else 'full'} on {dev.platform} "
            f"{getattr(dev, 'device_kind', '')}; {time.perf_counter() - start:.0f} s; load average "
            f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    sys.exit(main())
