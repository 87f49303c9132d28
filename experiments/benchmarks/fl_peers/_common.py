"""What both peer workers of bench_fl_simulation.py share: their command line, the two torch models (the
MNIST MLP and pfl-research's CIFAR-10 CNN) and the single / sweep driver that prints one JSON line.

Run with the peers' python (torch imported); dpjax is never imported here."""

import argparse
import json
import time

import numpy as np
import torch


class Transpose2D(torch.nn.Module):
    """NHWC -> NCHW, as pfl-research's benchmark CNN receives its images."""

    def forward(self, x):
        return x.permute(0, 3, 1, 2)


def make_model(kind: str, image_shape=(32, 32, 3), num_classes: int = 10) -> torch.nn.Module:
    """``mlp``: 784-64-10 ReLU. ``cnn``: pfl-research's ``benchmarks/model/pytorch/cnn.py:simple_cnn`` (conv 3x3 32,
    conv 3x3 64, max-pool 2, dense 128, dense 10; ReLU; Glorot-uniform weights) WITHOUT its two dropout layers,
    because dpjax's side is deterministic and the three frameworks must run the same arithmetic."""
    if kind == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    if kind != "cnn":
        raise ValueError(f"model={kind!r} must be 'mlp' or 'cnn'")
    side = (image_shape[0] - 4) // 2
    net = torch.nn.Sequential(Transpose2D(), torch.nn.Conv2d(image_shape[-1], 32, (3, 3)), torch.nn.ReLU(),
                              torch.nn.Conv2d(32, 64, (3, 3)), torch.nn.ReLU(), torch.nn.MaxPool2d((2, 2)),
                              torch.nn.Flatten(), torch.nn.Linear(side * side * 64, 128), torch.nn.ReLU(),
                              torch.nn.Linear(128, num_classes))
    for m in net.modules():
        if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.xavier_uniform_(m.weight)
    return net


def parse_args():
    p = argparse.ArgumentParser()
    for a, t in (("--npz", str), ("--mode", str), ("--rounds", int), ("--cohort-rate", float), ("--clip", float),
                 ("--sigma", float), ("--client-lr", float), ("--local-steps", int), ("--local-batch", int),
                 ("--records", int), ("--model", str)):
        p.add_argument(a, type=t)
    p.add_argument("--sweep-lrs", type=float, nargs="+")
    p.add_argument("--sweep-sigmas", type=float, nargs="+")
    return p.parse_args()


def main(run_one, t0: float, import_s: float, startup_excludes_run: bool) -> None:
    """Runs ``run_one(args, data, client_lr, sigma, seed)`` once (``--mode single``) or over the sweep grid in turn
    (``--mode sweep``) and prints one JSON line. ``startup_excludes_run``: the worker's start-up is its process time
    less the run (pfl builds its model inside the run) rather than its imports alone."""
    args = parse_args()
    d = dict(np.load(args.npz))
    if args.mode == "single":
        out = run_one(args, d, args.client_lr, args.sigma, 0)
    else:
        t = time.perf_counter()
        runs = [run_one(args, d, lr, s, i) for i, (lr, s) in
                enumerate((lr, s) for lr in args.sweep_lrs for s in args.sweep_sigmas)]
        out = {"first_round_s": sum(r["first_round_s"] for r in runs),
               "per_round_s": sum(r["per_round_s"] for r in runs),
               "end_to_end_s": time.perf_counter() - t, "accuracy": [r["accuracy"] for r in runs]}
    single = args.mode == "single"
    out["startup_s"] = time.perf_counter() - t0 - out["end_to_end_s"] if single and startup_excludes_run else import_s
    out["import_s"] = import_s
    print(json.dumps(out))


def round_times(times) -> dict:
    """First round and the median of the others from the callbacks' time stamps."""
    rounds = np.diff(times)
    return {"first_round_s": float(rounds[0]),
            "per_round_s": float(np.median(rounds[1:] if len(rounds) > 1 else rounds))}
