"""Flower side of bench_fl_simulation.py: run with the peers' python; prints one JSON line of timings.

DP-FedAvg in Flower's idiom: its Ray simulation engine (``flwr.simulation.start_simulation``) with
``DifferentialPrivacyServerSideFixedClipping`` around ``FedAvg`` (clip each client's delta at C, noise sigma C / m
on the mean of a FIXED cohort of m = q x clients: Flower samples a fixed fraction), NumPy clients training the
torch MLP at 1 thread. Flower reports no epsilon for this strategy (epsilon: null)."""

import argparse
import json
import time

T0 = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import flwr  # noqa: E402
from flwr.client import NumPyClient  # noqa: E402
from flwr.server import ServerConfig  # noqa: E402
from flwr.server.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg  # noqa: E402
from flwr.simulation import start_simulation  # noqa: E402

IMPORT_S = time.perf_counter() - T0
torch.set_num_threads(1)
RECORDS = 60


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def get(net):
    return [p.detach().numpy().copy() for p in net.parameters()]


def put(net, arrays):
    with torch.no_grad():
        for p, a in zip(net.parameters(), arrays):
            p.copy_(torch.from_numpy(np.asarray(a)))


def run_one(args, d, client_lr, sigma, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    clients = len(d["train_x"]) // RECORDS
    cohort = max(1, round(args.cohort_rate * clients))
    tx, ty = torch.from_numpy(d["train_x"]), torch.from_numpy(d["train_y"].astype(np.int64))

    class Client(NumPyClient):
        def __init__(self, uid):
            self.uid = uid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            net = mlp()
            put(net, parameters)
            opt = torch.optim.SGD(net.parameters(), lr=client_lr)
            x, y = tx[self.uid * RECORDS:(self.uid + 1) * RECORDS], ty[self.uid * RECORDS:(self.uid + 1) * RECORDS]
            g = torch.Generator().manual_seed(int(config.get("round", 0)) * 100003 + self.uid)
            for _ in range(args.local_steps):
                idx = torch.randperm(RECORDS, generator=g)[:args.local_batch]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
            return get(net), RECORDS, {}

    def client_fn(context):
        return Client(int(context.node_config["partition-id"])).to_client()

    times, final = [], {}
    test_x, test_y = torch.from_numpy(d["test_x"]), d["test_y"]

    def evaluate_fn(server_round, parameters, config):
        times.append(time.perf_counter())
        if server_round == args.rounds:
            net = mlp()
            put(net, parameters)
            with torch.no_grad():
                final["accuracy"] = float((net(test_x).argmax(-1).numpy() == test_y).mean())
        return None

    init = mlp()
    strategy = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(fraction_fit=cohort / clients, fraction_evaluate=0.0, min_fit_clients=cohort, min_evaluate_clients=0,
               min_available_clients=clients, evaluate_fn=evaluate_fn,
               on_fit_config_fn=lambda r: {"round": r},
               initial_parameters=flwr.common.ndarrays_to_parameters(get(init))),
        noise_multiplier=sigma, clipping_norm=args.clip, num_sampled_clients=cohort)
    t = time.perf_counter()
    start_simulation(client_fn=client_fn, num_clients=clients, config=ServerConfig(num_rounds=args.rounds),
                     strategy=strategy, client_resources={"num_cpus": 1},
                     ray_init_args={"include_dashboard": False, "num_cpus": 2, "log_to_driver": False})
    end = time.perf_counter()
    rounds = np.diff(times)
    return {"first_round_s": float(rounds[0]), "per_round_s": float(np.median(rounds[1:] if len(rounds) > 1
                                                                             else rounds)),
            "end_to_end_s": end - t, "accuracy": final.get("accuracy"), "epsilon": None, "cohort": cohort}


def main():
    p = argparse.ArgumentParser()
    for a, t in (("--npz", str), ("--mode", str), ("--rounds", int), ("--cohort-rate", float), ("--clip", float),
                 ("--sigma", float), ("--client-lr", float), ("--local-steps", int), ("--local-batch", int)):
        p.add_argument(a, type=t)
    p.add_argument("--sweep-lrs", type=float, nargs="+")
    p.add_argument("--sweep-sigmas", type=float, nargs="+")
    args = p.parse_args()
    d = dict(np.load(args.npz))
    if args.mode == "single":
        out = run_one(args, d, args.client_lr, args.sigma, 0)
    else:
        t = time.perf_counter()
        runs = [run_one(args, d, lr, s, i) for i, (lr, s) in
                enumerate((lr, s) for lr in args.sweep_lrs for s in args.sweep_sigmas)]
        out = {"first_round_s": sum(r["first_round_s"] for r in runs), "per_round_s": sum(r["per_round_s"] for r in runs),
               "end_to_end_s": time.perf_counter() - t, "accuracy": [r["accuracy"] for r in runs]}
    out["startup_s"] = IMPORT_S
    out["import_s"] = IMPORT_S
    print(json.dumps(out))


if __name__ == "__main__":
    main()
