"""Tiny configurations of every grid driver, shared by the expectations script and the test.

``python -m tests.sweep.pipeline_cases [--data-dir DIR]`` (run from the repository root, on the code
before a refactoring) writes ``tests/sweep/data/pipeline_expectations.npz``: each driver's outputs on
its tiny configuration. ``tests/sweep/test_pipeline_drivers.py`` recomputes them and requires bit
equality, so a change of any reproduction driver that moves a number fails.
"""

from __future__ import annotations

import argparse
import pathlib
import types

import numpy as np

EXPECTATIONS = pathlib.Path(__file__).with_name("data") / "pipeline_expectations.npz"


def _synthetic_silos(num_silos=6, n=50, d=20, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(n, d)).astype(np.float32) for _ in range(num_silos)]
    ys = [rng.integers(0, 2, n).astype(np.float32) for _ in range(num_silos)]
    tx, ty = rng.normal(size=(40, d)).astype(np.float32), rng.integers(0, 2, 40).astype(np.float32)
    return xs, ys, tx, ty


def isrl_grid() -> dict[str, np.ndarray]:
    """``sweep.table.run_table`` on ``isrl_protocol`` specs: MB-SGD (binary and multiclass) and Local SGD families, two repetitions,
    chunks of 5 (padded)."""
    from dpjax import keys
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    from dpjax.algorithms.local_sgd import LocalSgd
    from dpjax.engine import SiloData
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression, SoftmaxRegression
    from dpjax.reproduce import isrl_protocol as proto
    from dpjax.sweep import table

    xs, ys, tx, ty = _synthetic_silos()
    train = SiloData.from_silos(xs, ys)
    problem = LogisticRegression(xs[0].shape[1])
    evaluator = table.Evaluator(problem)
    eval_data = table.eval_data_for(train, tx, ty)
    softmax = SoftmaxRegression(xs[0].shape[1], 3)
    ys3 = [(x[:, 0] > 0).astype(np.float32) + (x[:, 1] > 0.5) for x in xs]
    train3 = SiloData.from_silos(xs, ys3)
    out = {}
    for name, algo, kind in (("mb", NoisyMbSgd(problem, num_rounds=12, batch_size=10), "mbsgd"),
                             ("local", LocalSgd(problem, num_rounds=6, local_steps=3), "local-sgd"),
                             # the figures' setting: M < N available silos, 8-iterate window, a multiclass GLM
                             ("softmax", NoisyMbSgd(softmax, num_rounds=12, batch_size=10, output="window",
                                                    availability=FixedAvailability(4)), "mbsgd")):
        if name == "softmax":
            train, problem = train3, softmax
            evaluator = table.Evaluator(problem)
            eval_data = table.eval_data_for(train, tx, (tx[:, 0] > 0).astype(np.float32) + (tx[:, 1] > 0.5))
        noise = proto.noise_table(kind, n=50, rounds=algo.num_rounds, batch_size=10 if kind == "mbsgd" else 3,
                                  epsilons=(1.0, 4.0), delta=1e-4, epsilon_max=4.0, calibrations=("paper",))
        specs = proto.build_specs(private_name=name, nonprivate_name=name + "-np", noise=noise,
                                  learning_rates=(0.1, 1.0, 30.0), clip_norms=(0.5, 2.0), repetitions=2,
                                  nonprivate_clip=False)
        make = proto.spec_hparams(algo, train.silo_sizes())  # absolute noise_std -> the family's multiplier
        df = table.run_table(algo, train, eval_data, evaluator, specs, keys.run_key(7, 3, 1),
                            divergence_threshold=5.0, chunk_size=5, make_hparams=make)
        for col in ("train_loss", "test", "diverged"):
            out[f"isrl_grid/{name}/{col}"] = df[col].to_numpy()
        # a grid of one run (a chunk of width 1, as the figures' step-size grid extensions run)
        one = table.run_table(algo, train, eval_data, evaluator, specs[:1], keys.run_key(7, 3, 1),
                             divergence_threshold=5.0, chunk_size=5, make_hparams=make)
        out[f"isrl_grid/{name}/single_train_loss"] = one["train_loss"].to_numpy()
    return out


def isrl_scaling() -> dict[str, np.ndarray]:
    """``isrl_scaling.excess_risk`` on a tiny synthetic instance."""
    from dpjax.reproduce import isrl_scaling as sc

    cfg = sc.ScalingConfig(dim=3, rounds=20, batch_size=16, learning_rates=(0.25, 1.0), repetitions=3)
    res = sc.excess_risk(cfg, n=400, epsilon=2.0, num_silos=3, seed=1)
    return {f"isrl_scaling/{k}": np.asarray(v, np.float64) for k, v in res.items()}


def isrl_mnist_task() -> dict[str, np.ndarray]:
    """``dpjax run isrl-mnist-trial`` (``tasks.isrl_mnist.run``) on a synthetic 4-silo split."""
    from dpjax.tasks import isrl_mnist as task

    xs, ys, tx, ty = _synthetic_silos(num_silos=4, n=40, d=8, seed=2)
    fed = types.SimpleNamespace(train_x=xs, train_y=ys, test_x=[tx], test_y=[ty])
    cfg = task.IsrlMnistConfig(epsilon=2.0, rounds=6, silos_per_round=3, seed=1, repetitions=2,
                               learning_rates=(0.5, 2.0, 8.0))
    s = task.run(cfg, None, progress=False, dataset=fed)
    out = {f"isrl_mnist_task/{k}": np.asarray(s[k], np.float64)
           for k in ("sigma", "selected_learning_rate", "test_error", "train_loss", "diverged_runs")}
    for k in ("selected_learning_rate", "test_error", "train_loss"):
        out[f"isrl_mnist_task/nonprivate_{k}"] = np.asarray(s["nonprivate"][k], np.float64)
    return out


def diff2_protocol():
    from dpjax.reproduce import diff2

    return diff2.config.Protocol(num_rounds=6, eval_every=3, seeds=(0, 1), learning_rates=(0.5, 0.25),
                          clip_restart=(1.0,), clip_diff=(3.0,), restart_fractions=(0.5,),
                          max_records={"california_housing": 300}, chunk_floats=2.7e5)


def diff2_dataset(data_dir: str) -> dict[str, np.ndarray]:
    """``diff2.driver.run_dataset`` on 300 California housing records, R = 6, two seeds, chunks of 3 or 4 (padded)."""
    from dpjax.reproduce import diff2

    res = diff2.driver.run_dataset("california_housing", diff2_protocol(), (3.0, 5.0), data_dir=data_dir, log=lambda *_: None)
    out = {"diff2/eval_rounds": np.asarray(res["eval_rounds"])}
    for seed, traces in res["traces"].items():
        for metric, arr in traces.items():
            out[f"diff2/{seed}/{metric}"] = np.asarray(arr)
    return out


def dpsgd_mnist_grid() -> dict[str, np.ndarray]:
    """``dpsgd_mnist.train_grid`` (on CPU: chunks of one run, host round loop) for batch clipping with
    shuffling and individual clipping with subsampling on a tiny CNN and 8x8 synthetic images, one run
    diverging. The metric is the mean predicted probability of the true label: continuous, so the pin
    sees the last bit of the trained parameters (a 0/1 accuracy over a few images would not)."""
    import flax.linen as nn
    import jax

    from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
    from dpjax.engine import SiloData, stack_hparams
    from dpjax.problems import FlaxProblem
    from dpjax.reproduce import dpsgd_mnist

    class TinyCNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.tanh(nn.Conv(4, (3, 3), padding="VALID")(x))
            return nn.Dense(10)(x.reshape(x.shape[:-3] + (-1,)))

    rng = np.random.default_rng(11)
    x = rng.normal(size=(48, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, 48).astype(np.int32)
    problem = FlaxProblem(TinyCNN(), (8, 8, 1), "softmax")
    data = SiloData.from_silos([x[:32]], [y[:32]])

    def eval_fn(params, ed):
        probs = jax.nn.softmax(problem.module.apply(params, ed[0]))
        return {"test_accuracy": probs[np.arange(len(ed[1])), ed[1]].mean()}

    hps = stack_hparams([DpSgdHParams.create(lr, noise_multiplier=0.5, clip_norm=1.0) for lr in (0.3, 1.0, 3e38)])
    out = {}
    for name, kw in (("bc", dict(subset_size=4, num_subsets=4)),
                     ("ic", dict(sampling="subsample", subset_size=1, num_subsets=8))):
        alg = DpSgdGeneral.for_epochs(problem, 32, 2, **kw)
        acc, diverged = dpsgd_mnist.train_grid(alg, data, hps, jax.random.split(jax.random.key(5), 3), eval_fn,
                                               (x[32:], y[32:]))
        out[f"dpsgd_mnist_grid/{name}/test_accuracy"] = np.asarray(acc)
        out[f"dpsgd_mnist_grid/{name}/diverged"] = np.asarray(diverged)
    return out


def shuffle_sco_points() -> dict[str, np.ndarray]:
    """``shuffle_sco.measure_point`` (one grid of the protocol, its non-private twin and, for a reference
    protocol, the central/local Gaussian baselines) at n = 1000, d = 8, two seeds."""
    from dpjax.reproduce import shuffle_sco as sco

    out = {}
    for protocol in ("p_sgd", "p_agd_smoothed", "p_agd_phased"):
        inst = sco.config.INSTANCES[sco.config.TABLE1[protocol][0]]
        _, res, _ = sco.measure.measure_point(protocol, inst, 1000, 8, 2, 0, sco.config.EPS_RATES, "lan")
        out.update({f"shuffle_sco_points/{protocol}/{k}": np.asarray(v) for k, v in res.items()})
    return out


CASES = {"isrl_grid": isrl_grid, "isrl_scaling": isrl_scaling, "isrl_mnist_task": isrl_mnist_task,
         "dpsgd_mnist_grid": dpsgd_mnist_grid, "shuffle_sco_points": shuffle_sco_points}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", required=True, help="directory holding california_housing (the DIFF2 case)")
    ap.add_argument("--only", nargs="+", choices=sorted(CASES) + ["diff2"],
                    help="re-record only these cases, keep every other stored array as it is, and print the "
                         "largest relative change of each re-recorded array (for a deliberate float-order change)")
    args = ap.parse_args()
    wanted = set(args.only or list(CASES) + ["diff2"])
    out = dict(np.load(EXPECTATIONS)) if args.only else {}
    new = {}
    for name, fn in CASES.items():
        if name in wanted:
            new.update(fn())
    if "diff2" in wanted:
        new.update(diff2_dataset(args.data_dir))
    for k, v in sorted(new.items()):
        if k in out:
            old, now = np.asarray(out[k], np.float64), np.asarray(v, np.float64)
            finite = np.isfinite(old)  # diverged runs store inf / NaN
            if not np.array_equal(old[~finite], now[~finite], equal_nan=True) or not np.isfinite(now[finite]).all():
                print(f"{k}: non-finite entries changed")
                continue
            change = np.abs(now[finite] - old[finite]) / np.maximum(np.abs(old[finite]), 1e-30)
            print(f"{k}: largest relative change {np.max(change, initial=0.0):.3g}")
    out.update(new)
    EXPECTATIONS.parent.mkdir(exist_ok=True)
    np.savez(EXPECTATIONS, **out)
    print(f"wrote {len(out)} arrays to {EXPECTATIONS}")


if __name__ == "__main__":
    main()
