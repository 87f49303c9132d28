"""``dpjax reproduce user-level-dpsgd``: ELS vs ULS utility at equal user-level epsilon, in the spirit of Charles,
Ganesh, McKenna, McMahan, Mitchell, Pillutla & Rush ("Fine-Tuning Large Language Models with User-Level Differential
Privacy", 2024, Section 5: example-level sampling with group privacy vs user-level sampling at the same user-level
budget), on MNIST dealt to synthetic users of power-law sizes -- a small, fast stand-in, not their language-model
experiments.

Protocol: the first ``n_train`` MNIST training images (pixels / 255) dealt to ``num_users`` users of power-law sizes
(``dpjax.engine.users.UserSplit.power_law``, exponent 1, the run's seed), each capped at its first k records (the ELS
contribution bound, and the k records of a ULS user's mean gradient); a linear softmax model; Adam (learning rate
``lr``), clip norm 1, T steps at the same public rate q for both units (users for ULS, records for ELS); for every
target user-level epsilon (delta 1e-5) each unit's noise multiplier is calibrated by its own accountant
(``dpjax.accounting.user_dpsgd``: PLD); test error on ``n_test`` test images, ``trials`` seeds. Writes
``results.csv``, ``user_level_dpsgd.png``, ``report.md`` and ``meta.json``.
"""

from __future__ import annotations

import pathlib
import time

import numpy as np

from dpjax.reproduce import register
from dpjax.reproduce import report as rep

__all__ = ["user_level_dpsgd"]

PAPER = "Charles et al., Fine-Tuning Large Language Models with User-Level DP (2024)"
QUICK = dict(n_train=10_000, n_test=2_000, num_users=500, k=8, steps=200, q=0.05, lr=0.01, epsilons=(4.0,), trials=2)
FULL = dict(n_train=60_000, n_test=10_000, num_users=3_000, k=8, steps=500, q=0.02, lr=0.01,
            epsilons=(2.0, 4.0, 8.0), trials=3)
DELTA = 1e-5


def _runs(cfg, split, xte, yte, seed):
    """Rows (unit, epsilon, trial, test_error, noise multiplier) of every configuration."""
    import jax
    import jax.numpy as jnp
    import flax.linen as nn

    from dpjax import engine, progress
    from dpjax.algorithms.user_level_dpsgd import DpSgdHParams, UserLevelDpSgd
    from dpjax.problems import FlaxProblem

    problem = FlaxProblem(nn.Dense(10), (784,), "softmax")
    kept = int(split.sizes.sum())
    batches = {"user": max(1, round(cfg["q"] * split.num_users)), "example": max(1, round(cfg["q"] * kept))}
    rows = []
    for eps in cfg["epsilons"]:
        for unit in ("user", "example"):
            fam = UserLevelDpSgd(problem, cfg["steps"], unit, batch_size=batches[unit], sampling_rate=cfg["q"],
                                 records_per_user=cfg["k"], optimizer="adam")
            progress.stage(f"user-level-dpsgd: calibrating {unit} at epsilon {eps}")
            spec = fam.privacy(split.data.silo_sizes(), DpSgdHParams.create(cfg["lr"], 1.0, 1.0))
            z = float(np.float32(spec.calibrate(eps, DELTA)["noise_multiplier"]) * np.float32(1 + 1e-6))
            hp = DpSgdHParams.create(cfg["lr"], z, 1.0)
            certified = fam.privacy(split.data.silo_sizes(), hp).epsilon(DELTA).epsilon
            for trial in range(cfg["trials"]):
                res = engine.run(fam, split.data, hp, jax.random.key(seed * 1000 + trial))
                error = float(problem.evaluate(res.output, jnp.asarray(xte), jnp.asarray(yte))["error"])
                rows.append({"algorithm": "ULS" if unit == "user" else "ELS", "epsilon": eps, "trial": trial,
                             "metric": "test_error", "value": error, "accountant": "pld",
                             "noise_multiplier": z, "certified_epsilon": certified, "batch_size": batches[unit]})
    return rows


def _plot(out: pathlib.Path, rows) -> pathlib.Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for alg in ("ULS", "ELS"):
        eps = sorted({r["epsilon"] for r in rows if r["algorithm"] == alg})
        mean = [np.mean([r["value"] for r in rows if r["algorithm"] == alg and r["epsilon"] == e]) for e in eps]
        ax.plot(eps, mean, "o-", label=alg)
    ax.set(xscale="log", xlabel="user-level epsilon (delta 1e-5)", ylabel="test error",
           title="user-level DP-SGD on MNIST users")
    ax.legend()
    path = out / "user_level_dpsgd.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


@register("user-level-dpsgd")
def user_level_dpsgd(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None) -> pathlib.Path:
    from dpjax.data import load_mnist
    from dpjax.data.paths import DatasetNotFoundError
    from dpjax.engine.users import UserSplit

    out, cfg = rep.fresh_out(out), dict(QUICK if quick else FULL)
    start = time.perf_counter()
    try:
        d = load_mnist(data_dir)
    except DatasetNotFoundError as err:  # the CLI reports ValueErrors in one line
        raise ValueError(str(err)) from None
    n, nt = cfg["n_train"], cfg["n_test"]
    x = d["train_images"][:n].reshape(n, -1).astype(np.float32) / 255.0
    split = UserSplit.power_law(x, d["train_labels"][:n].astype(np.int32), cfg["num_users"], exponent=1.0,
                                seed=seed, max_records=cfg["k"])
    xte = d["test_images"][:nt].reshape(nt, -1).astype(np.float32) / 255.0
    rows = _runs(cfg, split, xte, d["test_labels"][:nt].astype(np.int32), seed)
    rep.tidy_results(out, rows)
    _plot(out, rows)
    table = []
    for eps in cfg["epsilons"]:
        for alg in ("ULS", "ELS"):
            mine = [r for r in rows if r["algorithm"] == alg and r["epsilon"] == eps]
            table.append([alg, eps, f"{mine[0]['noise_multiplier']:.4f}", f"{mine[0]['certified_epsilon']:.4f}",
                          mine[0]["batch_size"], " ".join(f"{r['value']:.4f}" for r in mine)])
    lines = [f"# User-level DP-SGD: ELS vs ULS at equal user-level epsilon ({'quick' if quick else 'full'})", "",
             f"{PAPER}, Section 5's comparison on a small stand-in: MNIST ({n} training images) dealt to "
             f"{cfg['num_users']} power-law users, each capped at k = {cfg['k']} records ({int(split.sizes.sum())} "
             f"kept); linear softmax, Adam lr {cfg['lr']}, C = 1, T = {cfg['steps']}, q = {cfg['q']} for both units; "
             "each unit's noise calibrated by its own accountant (ULS: user-level Poisson Gaussian; ELS: the "
             "mixture-of-Gaussians PLD of a user's k records).", "",
             rep.markdown_table(table, ["unit", "target epsilon", "z", "certified epsilon", "public batch",
                                        "test error per trial"]), "",
             "Measured here, not their figures: no paper number is claimed. ![figure](user_level_dpsgd.png)", "",
             f"Platform: {rep.device_line()}; {time.perf_counter() - start:.0f} s."]
    rep.write_meta(out, {"figure": "user-level-dpsgd", "quick": quick, "seed": seed, **cfg, "delta": DELTA})
    return rep.write_report(out, lines)
