"""The DIFF2 experiments' model (the paper's MLP), its diagnostics and the data splits."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from dpjax.reproduce.diff2.config import NUM_SILOS


# ----------------------------------------------------------------------------- model
@functools.lru_cache(maxsize=16)  # one problem object per shape: repeated runs reuse the compiled programs
def mlp_problem(input_dim: int, num_outputs: int, task: str):
    """The paper's FC_10 network as a dpjax problem (Section 6)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from dpjax.problems import FlaxProblem

    def fan_in_uniform(fan_in):
        bound = 1.0 / math.sqrt(fan_in)
        return lambda key, shape, dtype=jnp.float32: jax.random.uniform(key, shape, dtype, -bound, bound)

    class FC10(nn.Module):
        """input -> dense(10) -> softplus -> dense(num_outputs); weights and biases U[+-1/sqrt(fan_in)]."""

        din: int
        dout: int

        @nn.compact
        def __call__(self, x):
            h = nn.Dense(10, kernel_init=fan_in_uniform(self.din), bias_init=fan_in_uniform(self.din))(x)
            h = nn.softplus(h)
            out = nn.Dense(self.dout, kernel_init=fan_in_uniform(10), bias_init=fan_in_uniform(10))(h)
            return out

    module = FC10(input_dim, num_outputs)
    if task == "regression":
        return SquaredLossMLP(module, (input_dim,), "squared")
    return FlaxProblem(module, (input_dim,), "softmax")


def _squared_loss_problem_cls():
    from dpjax.problems import FlaxProblem

    @dataclasses.dataclass(frozen=True)
    class _SquaredLossMLP(FlaxProblem):
        """FlaxProblem with the paper's ``(pred - y)^2`` (PyTorch MSELoss; the paper leaves the 1/2 open)
        instead of ``0.5 (pred - y)^2``."""

        def loss(self, params, x, y):
            import jax.numpy as jnp

            return jnp.sum(jnp.square(self.output(params, x) - y))

    return _SquaredLossMLP


SquaredLossMLP = _squared_loss_problem_cls()


@functools.lru_cache(maxsize=16)
def make_eval_fn(problem, classification: bool):
    """Non-private diagnostics: train loss f(x) over the clients' union,
    squared norm of the full unclipped train gradient, test loss (and accuracies)."""
    import jax
    import jax.numpy as jnp

    def mean_loss(params, x, y):
        return jnp.mean(jax.vmap(problem.loss, in_axes=(None, 0, 0))(params, x, y))

    def eval_fn(params, ed):
        train_loss, grad = jax.value_and_grad(mean_loss)(params, ed["xtr"], ed["ytr"])
        out = {
            "train_loss": train_loss,
            "grad_norm_sq": sum(jnp.sum(jnp.square(g)) for g in jax.tree_util.tree_leaves(grad)),
            "test_loss": mean_loss(params, ed["xte"], ed["yte"]),
        }
        if classification:
            for name, x, y in (("train_accuracy", ed["xtr"], ed["ytr"]), ("test_accuracy", ed["xte"], ed["yte"])):
                logits = jax.vmap(problem.output, in_axes=(None, 0))(params, x)
                out[name] = jnp.mean((jnp.argmax(logits, -1) == y).astype(jnp.float32))
        return out

    return eval_fn


# ----------------------------------------------------------------------------- data
@functools.lru_cache(maxsize=8)
def _raw(name: str, data_dir: str | None, construction: str = "paper"):
    from dpjax.data import diff2 as d2
    from dpjax.reproduce.diff2.authors_data import load_authors_raw

    load = load_authors_raw if construction == "authors" else d2.load_diff2_raw
    return load(name, data_dir), d2.DIFF2_DATASETS[name][1]


def load_split(name: str, seed: int, max_records: int | None, data_dir: str | None = None, construction: str = "paper"):
    """(FederatedDataset, task) for one seed; ``max_records`` subsamples rows first (quick mode;
    under the authors' construction the same rows for every seed, since their split is fixed)."""
    from dpjax.data import diff2 as d2
    from dpjax.reproduce.diff2.authors_data import authors_diff2_silos

    raw, task = _raw(name, None if data_dir is None else str(data_dir), construction)
    n = raw["y"].shape[0]
    if max_records is not None and max_records < n:
        sub_seed = 10_000 + (seed if construction == "paper" else 0)
        rows = np.sort(np.random.default_rng(sub_seed).choice(n, max_records, replace=False))
        sub = {k: (v[rows] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v) for k, v in raw.items()}
        raw = sub
    if construction == "authors":
        return authors_diff2_silos(raw, seed=seed, task=task, n_silos=NUM_SILOS, name=f"diff2_{name}"), task
    fd = d2.diff2_silos(raw, seed=seed, task=task, n_silos=NUM_SILOS, name=f"diff2_{name}")
    # meta.json names the construction where the authors' does (after the normalisation statistics)
    meta = dict(fd.metadata)
    fd.metadata.clear()
    for key, value in meta.items():
        fd.metadata[key] = value
        if key == "normalization_stats":
            fd.metadata["construction"] = "paper"
    return fd, task
