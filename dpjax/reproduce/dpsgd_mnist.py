"""DP-SGD-General on MNIST (van Dijk et al., "Generalizing DP-SGD with Shuffling
and Batch Clipping", Section 3 experiments): ``dpjax reproduce dpsgd-mnist``.

The paper reports, at sigma = 2, MNIST test accuracy 98.3 % for batch clipping
of the mini-batch mean with shuffling (eq. (4), BC-SH) and 98.4 % for
individual clipping with subsampling (eq. (1), IC-SS). Its Appendix H
(architecture, C, eta, batch sizes, epochs) is missing from the text, so the
protocol below is our own choice:

* model: a small CNN with group normalisation (conv 5x5 16 -> GN -> tanh ->
  max-pool 2, conv 5x5 32 -> GN -> tanh -> max-pool 2, FC 32 tanh, FC 10;
  valid padding), inputs normalised with the public MNIST constants
  (0.1307, 0.3081);
* variants (all sigma = 2, noise N(0, (2 C sigma)^2 I) on the clipped sum):
  BC-SH (m = 1, s = 64), IC-SS (s = 1, m = 64), BC-SH with local SGD (eq. (2),
  micro-batches of 16 inside the round), BC-SH with momentum 0.9 reset every
  round (eq. (3)), and non-private mini-batch SGD (batch 64, same batches);
* full protocol: C in {0.1, 0.5, 1, 2, 5}, eta in {0.01, 0.03, 0.1, 0.3, 1},
  E in {10, 30, 50}, 3 seeds, all 60,000 training and 10,000 test images;
* quick protocol (``--quick``): a 3,072-image training subset, a 2,000-image
  test subset, E = 2, eta in {0.03, 0.3}, C = 1, one seed (a smoke-scale run:
  it checks the pipeline and the qualitative ordering, not the accuracies).

The best configuration per variant (mean test accuracy over seeds; tuning on
test data leaks privacy and is ignored, as usual) is reported with its
privacy at delta = 1e-5 for g in {1, 2, 4, 8}: the exact strong-adversary
mixture, G_{sqrt(gE)/sigma}, generic group privacy G_{g sqrt(E)/sigma} and,
for g = 1, a standard-adversary accountant.
"""

from __future__ import annotations

import csv
import json
import pathlib
import time

import numpy as np

from dpjax.reproduce import register

PAPER = "van Dijk et al., Generalizing DP-SGD with Shuffling and Batch Clipping"
DELTA = 1e-5
SIGMA = 2.0
GROUPS = (1, 2, 4, 8)
PAPER_ACCURACY = {"BC-SH": 98.3, "IC-SS": 98.4}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081

FULL = dict(n_train=60000, n_test=10000, epochs=(10, 30, 50), lrs=(0.01, 0.03, 0.1, 0.3, 1.0),
            clips=(0.1, 0.5, 1.0, 2.0, 5.0), seeds=3)
QUICK = dict(n_train=3072, n_test=2000, epochs=(2,), lrs=(0.03, 0.3), clips=(1.0,), seeds=1)
BATCH = 64
LOCAL_BATCH = 16


def cnn():
    """A small MNIST CNN with group normalisation (no cross-round state)."""
    import flax.linen as nn

    class SmallCNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            unbatched = x.ndim == 3
            if unbatched:
                x = x[None]
            for features in (16, 32):
                x = nn.Conv(features, (5, 5), padding="VALID")(x)
                x = nn.GroupNorm(num_groups=4)(x)
                x = nn.max_pool(nn.tanh(x), (2, 2), (2, 2))
            x = nn.tanh(nn.Dense(32)(x.reshape(x.shape[0], -1)))
            x = nn.Dense(10)(x)
            return x[0] if unbatched else x

    return SmallCNN()


def variants() -> dict[str, dict]:
    """Variant name -> DpSgdGeneral keyword arguments (sampling, m, s, update rule)."""
    import optax

    bc = dict(sampling="shuffle", subset_size=BATCH, num_subsets=1)
    return {
        "BC-SH": bc,
        "IC-SS": dict(sampling="subsample", subset_size=1, num_subsets=BATCH),
        "BC-SH-localSGD": dict(bc, update_rule="local", local_batch_size=LOCAL_BATCH),
        "BC-SH-momentum": dict(bc, update_rule="local", local_batch_size=LOCAL_BATCH,
                               local_optimizer=optax.trace(decay=0.9)),
        "SGD (non-private)": dict(bc, private=False),
    }


def load(n_train: int, n_test: int, seed: int, data_dir=None):
    """Normalised MNIST arrays (NHWC); subsets drawn uniformly with ``seed`` when smaller than the split."""
    from dpjax.data.mnist import load_mnist

    d = load_mnist(data_dir)
    rng = np.random.default_rng(seed)

    def prep(images, labels, n):
        idx = np.sort(rng.choice(len(labels), n, replace=False)) if n < len(labels) else np.arange(len(labels))
        x = ((images[idx].astype(np.float32) / 255.0 - MNIST_MEAN) / MNIST_STD)[..., None]
        return x, labels[idx].astype(np.int32)

    return prep(d["train_images"], d["train_labels"], n_train), prep(d["test_images"], d["test_labels"], n_test)


def privacy_rows(alg, n_train: int, hparams) -> list[dict]:
    """The selected configuration's guarantees (strong-exact, sqrt-gE, generic-group; standard at g = 1)."""
    rows = []
    for g in GROUPS:
        spec = alg.privacy([n_train], hparams, group_size=g)
        for acc in ("strong-exact", "sqrt-gE", "generic-group") + (("standard",) if g == 1 else ()):
            rep = spec.epsilon(DELTA, acc)
            rows.append({"group_size": g, "accountant": acc, "epsilon": rep.epsilon, "notes": " | ".join(rep.notes)})
    return rows


def run_protocol(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None) -> pathlib.Path:
    import jax

    from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
    from dpjax.engine import SiloData, run_many, stack_hparams
    from dpjax.problems import FlaxProblem

    cfg = QUICK if quick else FULL
    results = out / "results.csv"
    if results.exists():
        raise ValueError(f"out={out} already holds results.csv; choose another --out (results are never overwritten)")
    start = time.perf_counter()
    from dpjax.data.paths import DatasetNotFoundError

    try:
        (xtr, ytr), (xte, yte) = load(cfg["n_train"], cfg["n_test"], seed, data_dir)
    except DatasetNotFoundError as err:  # the CLI reports ValueErrors in one line
        raise ValueError(str(err)) from None
    data = SiloData.from_silos([xtr], [ytr])
    problem = FlaxProblem(cnn(), (28, 28, 1), "softmax")

    def eval_fn(params, ed):
        return {"test_accuracy": 1.0 - problem.evaluate(params, ed[0], ed[1])["error"]}

    rows, timings, algs = [], {}, {}
    for name, kw in variants().items():
        private = kw.get("private", True)
        clips = cfg["clips"] if private else (1.0,)
        grid = [(lr, c) for c in clips for lr in cfg["lrs"]]
        for epochs in cfg["epochs"]:
            alg = DpSgdGeneral.for_epochs(problem, len(ytr), epochs, **kw)
            algs[(name, epochs)] = alg
            hps = stack_hparams([DpSgdHParams.create(lr, c, SIGMA if private else 0.0) for lr, c in grid])
            t0 = time.perf_counter()
            for s in range(cfg["seeds"]):
                keys = jax.random.split(jax.random.key(seed * 1000 + s), len(grid))
                res = run_many(alg, data, hps, keys, eval_fn=eval_fn, eval_data=(xte, yte), on_nonfinite="mark")
                acc = np.asarray(res.eval_metrics["test_accuracy"])[:, -1]
                for (lr, c), a, bad in zip(grid, acc, np.asarray(res.diverged_round)):
                    rows.append({"variant": name, "epochs": epochs, "learning_rate": lr, "clip_norm": c,
                                 "sigma": SIGMA if private else 0.0, "seed": s,
                                 "test_accuracy": float(a) if bad < 0 else float("nan")})
            took = time.perf_counter() - t0
            timings[f"{name} E={epochs}"] = {"seconds": took, "rounds": alg.num_rounds, "runs": len(grid) * cfg["seeds"]}
            print(f"  {name} E={epochs}: {len(grid) * cfg['seeds']} runs x {alg.num_rounds} rounds in {took:.1f} s",
                  flush=True)

    with open(results, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    best = select_best(rows)
    privacy = {}
    for name, b in best.items():
        alg = algs[(name, b["epochs"])]
        if alg.private:
            privacy[name] = privacy_rows(alg, len(ytr), DpSgdHParams.create(b["learning_rate"], b["clip_norm"], SIGMA))
    with open(out / "privacy.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "group_size", "accountant", "epsilon", "notes"])
        w.writeheader()
        for name, prs in privacy.items():
            for r in prs:
                w.writerow({"variant": name, **r})
    wall = time.perf_counter() - start
    full_estimate = extrapolate_full(timings, cfg)
    meta = {"quick": quick, "seed": seed, "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
            "wall_seconds": wall, "timings": timings, "full_protocol_estimate_seconds": full_estimate}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    plot(out / "dpsgd_mnist.png", best, privacy)
    return write_report(out, quick, cfg, best, privacy, wall, full_estimate, timings)


def select_best(rows: list[dict]) -> dict[str, dict]:
    """Per variant, the (E, eta, C) with the highest mean test accuracy over seeds (NaN = diverged)."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["epochs"], r["learning_rate"], r["clip_norm"]), []).append(r["test_accuracy"])
    best: dict[str, dict] = {}
    for (name, e, lr, c), accs in groups.items():
        a = np.asarray(accs, float)
        mean = float(np.mean(a)) if np.all(np.isfinite(a)) else -1.0
        if name not in best or mean > best[name]["mean"]:
            best[name] = {"epochs": e, "learning_rate": lr, "clip_norm": c, "mean": mean,
                          "std": float(np.std(a)) if len(a) > 1 else 0.0, "seeds": len(a)}
    return best


def extrapolate_full(timings: dict, cfg: dict) -> float:
    """Full-protocol wall time from the measured seconds per run-round of each variant.

    Cost per round scales with the batch (fixed) and not with N; one run-round of a
    variant costs what it cost here. Sum over variants of (runs x rounds) at full size.
    """
    per_run_round = {}
    for key, t in timings.items():
        name = key.rsplit(" E=", 1)[0]
        per_run_round.setdefault(name, []).append(t["seconds"] / (t["runs"] * t["rounds"]))
    total = 0.0
    rounds_per_epoch = FULL["n_train"] // BATCH
    for name, vals in per_run_round.items():
        runs = FULL["seeds"] * (len(FULL["lrs"]) * (len(FULL["clips"]) if name != "SGD (non-private)" else 1))
        total += float(np.mean(vals)) * runs * rounds_per_epoch * sum(FULL["epochs"])
    return total


def plot(path: pathlib.Path, best: dict, privacy: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(best)
    ax1.bar(range(len(names)), [100 * best[n]["mean"] for n in names], yerr=[100 * best[n]["std"] for n in names],
            color=["C0", "C1", "C2", "C3", "C7"][: len(names)])
    for n, v in PAPER_ACCURACY.items():
        if n in names:
            ax1.plot([names.index(n) - 0.4, names.index(n) + 0.4], [v, v], "k--")
    ax1.set_xticks(range(len(names)), names, rotation=20, fontsize=8)
    ax1.set_ylabel("best test accuracy (%)")
    ax1.set_title("MNIST, sigma = 2 (dashed: paper)")
    for name, rows in privacy.items():
        for acc, style in (("strong-exact", "-o"), ("sqrt-gE", ":"), ("generic-group", "--")):
            pts = [(r["group_size"], r["epsilon"]) for r in rows if r["accountant"] == acc]
            if pts:
                ax2.plot(*zip(*pts), style, label=f"{name} {acc}")
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("group size g")
    ax2.set_ylabel("epsilon at delta = 1e-5")
    ax2.set_title("privacy of the selected configurations")
    ax2.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(out, quick, cfg, best, privacy, wall, full_estimate, timings) -> pathlib.Path:
    lines = [f"# DP-SGD-General on MNIST ({'quick' if quick else 'full'} protocol)", "",
             f"Paper: {PAPER}. Paper's claims (sigma = 2): BC-SH 98.3 %, IC-SS 98.4 %; hyperparameters unknown "
             "(Appendix H is missing from the text).", "",
             f"Protocol (ours): {cfg['n_train']} training / {cfg['n_test']} test images, batch {BATCH} "
             f"(BC: m = 1, s = {BATCH}; IC: m = {BATCH}, s = 1), local rules with micro-batches of {LOCAL_BATCH}, "
             f"E in {list(cfg['epochs'])}, eta in {list(cfg['lrs'])}, C in {list(cfg['clips'])}, "
             f"{cfg['seeds']} seed(s), sigma = {SIGMA}. Selection on test accuracy (its privacy cost is ignored).",
             "", "| variant | best test accuracy (%) | E | eta | C | paper (%) |", "| --- | --- | --- | --- | --- | --- |"]
    for n, b in best.items():
        lines.append(f"| {n} | {100 * b['mean']:.2f} ± {100 * b['std']:.2f} | {b['epochs']} | {b['learning_rate']} | "
                     f"{b['clip_norm']} | {PAPER_ACCURACY.get(n, '-')} |")
    lines += ["", "Privacy of the selected configurations (delta = 1e-5; replace-up-to-g, N fixed; "
              "strong adversary unless 'standard'):", "",
              "| variant | g | strong-exact | sqrt-gE | generic-group | standard |", "| --- | --- | --- | --- | --- | --- |"]
    for n, rows in privacy.items():
        for g in GROUPS:
            get = {r["accountant"]: r["epsilon"] for r in rows if r["group_size"] == g}
            fmt = lambda a: f"{get[a]:.3f}" if a in get else "-"  # noqa: E731
            lines.append(f"| {n} | {g} | {fmt('strong-exact')} | {fmt('sqrt-gE')} | {fmt('generic-group')} | "
                         f"{fmt('standard')} |")
    bc, ic = best.get("BC-SH"), best.get("IC-SS")
    lines += ["", "## Reading", ""]
    if bc and ic:
        gap = 100 * (ic["mean"] - bc["mean"])
        lines.append(f"BC-SH reaches {100 * bc['mean']:.2f} % against IC-SS {100 * ic['mean']:.2f} % "
                     f"(gap {gap:+.2f} points; paper: 98.3 % vs 98.4 %). "
                     + ("Within a few points, as the paper says." if abs(gap) <= 3 else
                        "NOT within a few points: with m = 1 each round's clipped mean (norm <= C) carries noise of "
                        f"std 2 C sigma = {2 * SIGMA:g} C per coordinate, while individual clipping divides the same "
                        f"noise by m = {BATCH}; at equal sigma, E and batch size both make the same number of rounds, so "
                        f"batch clipping has a {BATCH}x worse signal-to-noise ratio in every round. "
                        "The paper's 98.3 % cannot be matched with these (our) hyperparameters; its own are unknown."))
    if quick:
        lines.append("")
        lines.append("Quick mode is a smoke-scale run (small subsets, few epochs, one seed): accuracies are far below "
                     "a full run's and are not a reproduction of the paper's numbers.")
    lines += ["", f"Wall time: {wall:.0f} s on this machine (2 shared CPU cores). Extrapolated full protocol "
              f"(5 variants x 25 or 5 configurations x 3 seeds x E in {{10, 30, 50}} on 60,000 images, from the "
              f"measured seconds per run-round here): {full_estimate / 3600:.0f} h on the same machine.", "",
              "Per-variant timings: " + ", ".join(f"{k}: {v['seconds']:.0f} s" for k, v in timings.items())]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


@register("dpsgd-mnist", paper=PAPER, description="BC-SH vs IC-SS vs local SGD/momentum vs SGD on MNIST, sigma = 2")
def dpsgd_mnist(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None) -> pathlib.Path:
    return run_protocol(pathlib.Path(out), quick=quick, seed=seed, data_dir=data_dir)
