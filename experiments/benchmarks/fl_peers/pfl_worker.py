"""pfl-research side of bench_fl_simulation.py: run with the peers' python; prints one JSON line of timings.

DP-FedAvg in pfl's idiom: ``FederatedAveraging`` on a ``SimulatedBackend`` with a
``CentrallyAppliedPrivacyMechanism(GaussianMechanism(C, sigma))`` (noise sigma C on the sum of the cohort's
clipped deltas), torch at 1 thread, a fixed cohort of q x clients users a round (pfl's user sampler draws a
fixed-size cohort; its accountant is given the rate q), epsilon from ``PLDPrivacyAccountant``. The model is
``--model mlp`` (MNIST) or ``cnn`` (pfl-research's CIFAR-10 benchmark CNN, ``_common.make_model``)."""

import time

T0 = time.perf_counter()
import numpy as np  # noqa: E402
import torch  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.callback.base import TrainingProcessCallback  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.metrics import Metrics, Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism, PLDPrivacyAccountant  # noqa: E402

from _common import main, make_model, round_times  # noqa: E402

IMPORT_S = time.perf_counter() - T0
torch.set_num_threads(1)


class Model(torch.nn.Module):
    """pfl's PyTorchModel calls ``loss`` and ``metrics`` on the module."""

    def __init__(self, kind):
        super().__init__()
        self.net = make_model(kind)

    def forward(self, x):
        return self.net(x)

    def loss(self, x, y, eval=False):  # noqa: A002 -- pfl's signature
        self.eval() if eval else self.train()
        return torch.nn.functional.cross_entropy(self(x), y.long())

    @torch.no_grad()
    def metrics(self, x, y, eval=True):  # noqa: A002
        out = self(x)
        n = len(y)
        return {"loss": Weighted(float(torch.nn.functional.cross_entropy(out, y.long(), reduction="sum")), n),
                "accuracy": Weighted(float((out.argmax(-1) == y).sum()), n)}


class Timer(TrainingProcessCallback):
    def __init__(self):
        self.times = [time.perf_counter()]

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        self.times.append(time.perf_counter())
        return False, Metrics()


def run_one(args, d, client_lr, sigma, seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    tx, ty = torch.from_numpy(d["train_x"]), torch.from_numpy(d["train_y"].astype(np.int64))
    records = args.records
    clients = len(tx) // records
    cohort = max(1, round(args.cohort_rate * clients))

    def make(uid):
        return Dataset(raw_data=[tx[uid * records:(uid + 1) * records], ty[uid * records:(uid + 1) * records]],
                       user_id=uid)

    train = FederatedDataset(make, get_user_sampler("random", list(range(clients))))
    mech = CentrallyAppliedPrivacyMechanism(GaussianMechanism(args.clip, sigma))
    backend = SimulatedBackend(training_data=train, val_data=None, postprocessors=[mech])
    net = Model(args.model)
    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    timer = Timer()
    FederatedAveraging().run(
        NNAlgorithmParams(central_num_iterations=args.rounds, evaluation_frequency=10 ** 9,
                          train_cohort_size=cohort, val_cohort_size=None),
        backend, model,
        NNTrainHyperParams(local_batch_size=args.local_batch, local_num_epochs=None, local_learning_rate=client_lr,
                           local_num_steps=args.local_steps),
        NNEvalHyperParams(local_batch_size=1000), callbacks=[timer], send_metrics_to_platform=False)
    end = time.perf_counter()
    with torch.no_grad():
        acc = float((net(torch.from_numpy(d["test_x"])).argmax(-1).numpy() == d["test_y"]).mean())
    eps = PLDPrivacyAccountant(num_compositions=args.rounds, sampling_probability=args.cohort_rate,
                               mechanism="gaussian", noise_parameter=sigma, delta=1e-5).epsilon if sigma > 0 else None
    return {**round_times(timer.times), "end_to_end_s": end - timer.times[0], "accuracy": acc, "epsilon": eps, "cohort": cohort}


if __name__ == "__main__":
    main(run_one, T0, IMPORT_S, startup_excludes_run=True)
