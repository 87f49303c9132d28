"""Configuration of ``dpjax reproduce dpsgd-mnist`` (see ``dpjax.reproduce.dpsgd_mnist``): the paper's
constants, the protocol sizes, the model, the variants of both constructions and the data."""

from __future__ import annotations

import numpy as np

PAPER = "van Dijk et al., Generalizing DP-SGD with Shuffling and Batch Clipping"
DELTA = 1e-5
SIGMA = 2.0
GROUPS = (1, 2, 4, 8)
PAPER_ACCURACY = {"BC-SH": 98.3, "IC-SS": 98.4}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081

FULL = dict(n_train=60000, n_test=10000, epochs=(10, 30, 50), lrs=(0.01, 0.03, 0.1, 0.3, 1.0),
            clips=(0.1, 0.5, 1.0, 2.0, 5.0), seeds=3, max_extensions=2)
#: smoke size (every code path: batch and individual clipping, shuffling and subsampling, local SGD, momentum,
#: no privacy, two epochs of two rounds, the grid-edge extension; under a minute of CPU): a DP-SGD step of this
#: CNN costs ~0.19 s on the 2-core CPU and each variant compiles its own round (~4-6 s), so 5 variants x 5 runs
#: (2 step sizes + 3 edge extensions) x 4 rounds is what fits. "BC-SH m=1" runs in the full protocol only: its
#: round is BC-SH's code with m = 1 (no path of its own). Before 2026-11-26 quick was 10,240 / 2,000 images,
#: E = 3 and all six variants (120 rounds a run, > 540 s CPU).
QUICK = dict(n_train=512, n_test=500, epochs=(2,), lrs=(0.3, 1.0), clips=(1.0,), seeds=1, max_extensions=1,
             variants=("BC-SH", "IC-SS", "BC-SH-localSGD", "BC-SH-momentum", "SGD (non-private)"))
ROUND_RECORDS = 256  # ms: records per round, the same for every variant (so the same rounds per epoch)
MINI_BATCH = 4  # s of the batch-clipping variants: m = 64 clipped mini-batch means per round
LOCAL_BATCH = 1  # eqs. (2)/(3): one record per local step inside each mini-batch
CONSTRUCTIONS = ("paper", "authors")
AUTHORS_REPO = "github.com/MisaNguyen/DPSGD (commit cb9d355)"
AUTHORS_LR_DECAY = 0.9  # StepLR(step_size=1, gamma=0.9) per epoch, PyTorchProjectFramework/main_new.py line 210


def cnn():
    """A small MNIST CNN with group normalisation (no cross-round state).

    Normalisation and pooling are ``dpjax.problems.GroupNorm`` and ``dpjax.problems.max_pool``: flax's ``GroupNorm``
    and ``max_pool`` as functions (same parameters; equal up to float reordering, and pooling gradients equal away
    from ties), faster on XLA:CPU (issue 25)."""
    import flax.linen as nn

    from dpjax.problems import GroupNorm, max_pool

    class SmallCNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            unbatched = x.ndim == 3
            if unbatched:
                x = x[None]
            for features in (16, 32):
                x = nn.Conv(features, (5, 5), padding="VALID")(x)
                x = GroupNorm(num_groups=4)(x)
                x = max_pool(nn.tanh(x), (2, 2))
            x = nn.tanh(nn.Dense(32)(x.reshape(x.shape[0], -1)))
            x = nn.Dense(10)(x)
            return x[0] if unbatched else x

    return SmallCNN()


def variants() -> dict[str, dict]:
    """Variant name -> DpSgdGeneral keyword arguments (sampling, m, s, update rule)."""
    import optax

    m = ROUND_RECORDS // MINI_BATCH
    bc = dict(sampling="shuffle", subset_size=MINI_BATCH, num_subsets=m)
    local = dict(bc, update_rule="local", local_batch_size=LOCAL_BATCH)
    return {
        "BC-SH": bc,
        "IC-SS": dict(sampling="subsample", subset_size=1, num_subsets=ROUND_RECORDS),
        "BC-SH-localSGD": local,
        "BC-SH-momentum": dict(local, local_optimizer=optax.trace(decay=0.9)),
        "BC-SH m=1": dict(sampling="shuffle", subset_size=ROUND_RECORDS, num_subsets=1),
        "SGD (non-private)": dict(bc, private=False),
    }


def authors_variants(n_train: int) -> dict[str, dict]:
    """The ``"authors"`` construction (module docstring): variant name -> DpSgdGeneral keyword arguments plus
    ``noise_factor`` (dpjax noise multiplier = sigma x noise_factor) and ``authors_code`` (file, lines)."""
    import jax.numpy as jnp
    import optax

    per_epoch = n_train // ROUND_RECORDS  # both variants use ms = 256 records per round

    def step_lr(count):  # torch StepLR(step_size=1, gamma=0.9), stepped after every epoch
        return jnp.power(AUTHORS_LR_DECAY, (count // per_epoch).astype(jnp.float32))

    decay = optax.scale_by_schedule(step_lr)
    return {
        "BC-SH": dict(sampling="shuffle", subset_size=ROUND_RECORDS, num_subsets=1, server_optimizer=decay,
                      noise_factor=1.0 / (2 * ROUND_RECORDS),
                      authors_code="train_model_BC_FGC.py lines 23-56 (noise sigma C / batch size)"),
        "IC-SS": dict(sampling="subsample", subset_size=1, num_subsets=ROUND_RECORDS, server_optimizer=decay,
                      noise_factor=0.5, authors_code="train_model_IC_FGC.py lines 127-178 (noise sigma C on the sum)"),
    }


def construction_variants(construction: str, n_train: int) -> dict[str, dict]:
    """The variants of ``construction`` ("paper": ``variants()``; "authors": ``authors_variants``)."""
    from dpjax import _validate

    _validate.check_choice("construction", construction, CONSTRUCTIONS)
    return variants() if construction == "paper" else authors_variants(n_train)


def family_kwargs(kw: dict) -> tuple[dict, float]:
    """(DpSgdGeneral keyword arguments, noise factor) of a variant entry."""
    fam = {k: v for k, v in kw.items() if k not in ("noise_factor", "authors_code")}
    return fam, float(kw.get("noise_factor", 1.0))


def edge_requests(rows: list[dict], private: bool, done: dict, max_extensions: int) -> list[tuple[float, float]]:
    """The grid-edge rule on one (variant, E)'s rows: where the best (eta, C) (highest mean test accuracy over
    seeds) has the smallest or largest eta (or C) tried so far, one more geometric step beyond it
    (``dpjax.sweep.select.extended_grid``) at the selected other value; at most ``max_extensions`` per side
    and axis (``done`` counts them). All runs diverged: no request."""
    from dpjax.sweep.select import extended_grid

    best = select_best(rows)
    if not best:
        return []
    (b,) = best.values()
    if b["mean"] < 0:
        return []
    requests = []
    axes = (("learning_rate", 0), ("clip_norm", 1)) if private else (("learning_rate", 0),)
    for column, pos in axes:
        values = sorted({r[column] for r in rows})
        for side, end in (("low", values[0]), ("high", values[-1])):
            key = (column, side)
            if np.isclose(b[column], end) and done.get(key, 0) < max_extensions:
                done[key] = done.get(key, 0) + 1
                new = extended_grid(values, side)
                pair = [b["learning_rate"], b["clip_norm"]]
                pair[pos] = float(f"{new:.6g}")
                requests.append(tuple(pair))
    return list(dict.fromkeys(requests))


def describe(kw: dict) -> str:
    """``m x s`` and the rule of a variant, for the report."""
    if "authors_code" in kw:
        return (f"m = {kw['num_subsets']}, s = {kw['subset_size']}, {kw['sampling']}, authors' code: "
                f"{kw['authors_code']}; lr x 0.9 per epoch")
    rule = "eq. (1)" if kw["subset_size"] == 1 else "eq. (4)" if kw.get("update_rule", "gradient") == "gradient" \
        else "eq. (3) momentum" if "local_optimizer" in kw else "eq. (2) local SGD"
    if not kw.get("private", True):
        return f"batch {kw['num_subsets'] * kw['subset_size']}, {kw['sampling']}, no clipping, no noise"
    return f"m = {kw['num_subsets']}, s = {kw['subset_size']}, {kw['sampling']}, {rule}"


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


def select_best(rows: list[dict]) -> dict[str, dict]:
    """Per variant, the (E, eta, C) with the highest mean test accuracy over seeds (NaN = diverged), with the
    sample standard deviation over its seeds (``std``; NaN for a single seed) and their number (``seeds``)."""
    groups: dict[tuple, list[float]] = {}
    for r in rows:
        groups.setdefault((r["variant"], r["epochs"], r["learning_rate"], r["clip_norm"]), []).append(r["test_accuracy"])
    best: dict[str, dict] = {}
    for (name, e, lr, c), accs in groups.items():
        a = np.asarray(accs, float)
        mean = float(np.mean(a)) if np.all(np.isfinite(a)) else -1.0
        if name not in best or mean > best[name]["mean"]:
            best[name] = {"epochs": e, "learning_rate": lr, "clip_norm": c, "mean": mean,
                          "std": float(np.std(a, ddof=1)) if len(a) > 1 else float("nan"), "seeds": len(a)}
    return best
