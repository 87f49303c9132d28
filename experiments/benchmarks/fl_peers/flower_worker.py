"""Flower side of bench_fl_simulation.py: run with the peers' python; prints one JSON line of timings.

DP-FedAvg in Flower's idiom: its Ray simulation engine (``flwr.simulation.start_simulation``) with
``DifferentialPrivacyServerSideFixedClipping`` around ``FedAvg`` (clip each client's delta at C, noise sigma C / m
on the mean of a FIXED cohort of m = q x clients: Flower samples a fixed fraction), NumPy clients training the
torch model (``--model mlp`` or ``cnn``, ``_common.make_model``) at 1 thread. Flower reports no epsilon for this
strategy (epsilon: null)."""

import os
import time

T0 = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
import flwr  # noqa: E402
from flwr.client import NumPyClient  # noqa: E402
from flwr.server import ServerConfig  # noqa: E402
from flwr.server.strategy import DifferentialPrivacyServerSideFixedClipping, FedAvg  # noqa: E402
from flwr.simulation import start_simulation  # noqa: E402

from _common import main, make_model, round_times  # noqa: E402

IMPORT_S = time.perf_counter() - T0
# Ray's workers unpickle client_fn, which refers to _common by name: they must find it on their path
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.abspath(__file__)),
                                                         os.environ.get("PYTHONPATH")]))
torch.set_num_threads(1)


def get(net):
    return [p.detach().numpy().copy() for p in net.parameters()]


def put(net, arrays):
    with torch.no_grad():
        for p, a in zip(net.parameters(), arrays):
            p.copy_(torch.from_numpy(np.asarray(a)))


def run_one(args, d, client_lr, sigma, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    records = args.records
    clients = len(d["train_x"]) // records
    cohort = max(1, round(args.cohort_rate * clients))
    tx, ty = torch.from_numpy(d["train_x"]), torch.from_numpy(d["train_y"].astype(np.int64))

    class Client(NumPyClient):
        def __init__(self, uid):
            self.uid = uid

        def fit(self, parameters, config):
            torch.set_num_threads(1)
            net = make_model(args.model)
            put(net, parameters)
            opt = torch.optim.SGD(net.parameters(), lr=client_lr)
            x, y = tx[self.uid * records:(self.uid + 1) * records], ty[self.uid * records:(self.uid + 1) * records]
            g = torch.Generator().manual_seed(int(config.get("round", 0)) * 100003 + self.uid)
            # shuffled passes over the client's records, batch after batch (FedAvg's local epochs)
            need = args.local_steps * args.local_batch
            order = torch.cat([torch.randperm(records, generator=g) for _ in range(-(-need // records))])
            for step in range(args.local_steps):
                idx = order[step * args.local_batch:(step + 1) * args.local_batch]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
                opt.step()
            return get(net), records, {}

    def client_fn(context):
        return Client(int(context.node_config["partition-id"])).to_client()

    times, final = [], {}
    test_x, test_y = torch.from_numpy(d["test_x"]), d["test_y"]

    def evaluate_fn(server_round, parameters, config):
        times.append(time.perf_counter())
        if server_round == args.rounds:
            net = make_model(args.model)
            put(net, parameters)
            with torch.no_grad():
                final["accuracy"] = float((net(test_x).argmax(-1).numpy() == test_y).mean())
        return None

    init = make_model(args.model)
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
    return {**round_times(times), "end_to_end_s": end - t, "accuracy": final.get("accuracy"), "epsilon": None, "cohort": cohort}


if __name__ == "__main__":
    main(run_one, T0, IMPORT_S, startup_excludes_run=False)
