"""Scaling check of Noisy ISRL-DP MB-SGD against Theorem 2.1 (a check not in
the paper: the empirical slopes of its upper bound).

Problem (i.i.d. SCO, smooth and 1-strongly convex): ``f(w, x) = ||w - x||^2 / 2`` with records ``x = w_dagger + phi *
z``, ``z`` uniform on the unit sphere of R^d, so ``F(w) - F* = ||w - w_dagger||^2 / 2`` exactly (no estimation of F*).
Every record has ``||x|| <= ||w_dagger|| + phi``; gradients are clipped at ``L = clip`` so the sensitivity bound holds
whatever the iterate.

Algorithm: Noisy MB-SGD (Algorithm 2) with the paper's noise (Theorem D.1, ``isrl_paper_sigma``: sigma^2 = 256 L^2 R
ln(2.5R/delta) ln(2/delta)/(n^2 eps^2)), K records per silo and round drawn with replacement as printed in Algorithm 2
(K >= the paper's minimum; O(K) sampling keeps large n cheap), M = N silos every round, constant step size tuned over
a small grid (mean excess risk over repetitions), uniform average of w_0..w_{R-1} (Algorithm 2).

Theorem 2.1 (strongly convex): E F(w^) - F* = O~((L^2/(mu M)) (1/n + d ln(1/delta)/(eps^2 n^2))). With phi small the
privacy term dominates, so at fixed delta and R the excess risk should scale as ``n^-2``, ``eps^-2`` and ``M^-1``
(log-log slopes -2, -2, -1). delta is held fixed across the sweep (the rate's ln(1/delta) factor is explicit; delta =
1/n^2 would add a slowly varying log factor).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from dpjax import _validate

THEORY_SLOPES = {"n": -2.0, "epsilon": -2.0, "num_silos": -1.0}


@dataclasses.dataclass(frozen=True)
class MeanEstimation:
    """``f(w, x) = ||w - x||^2 / 2`` (the label is unused): 1-smooth, 1-strongly convex."""

    dim: int

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)

    def init_params(self, key=None):
        import jax.numpy as jnp

        return jnp.zeros((self.dim,), jnp.float32)

    def loss(self, params, x, y):
        import jax.numpy as jnp

        return 0.5 * jnp.sum(jnp.square(params - x))

    def evaluate(self, params, x, y, mask=None):
        import jax.numpy as jnp

        losses = 0.5 * jnp.sum(jnp.square(params[None] - x), axis=-1)
        w = jnp.ones_like(losses) if mask is None else mask.astype(losses.dtype)
        return {"loss": jnp.sum(losses * w) / jnp.maximum(jnp.sum(w), 1.0)}


@dataclasses.dataclass(frozen=True)
class ScalingConfig:
    """The synthetic instance and the algorithm's fixed parameters."""

    dim: int = 5
    w_norm: float = 0.1
    phi: float = 0.05
    clip: float = 1.0
    rounds: int = 200
    batch_size: int = 128
    delta: float = 1e-6
    learning_rates: tuple[float, ...] = (0.25, 0.5, 1.0)
    repetitions: int = 32

    def __post_init__(self):
        _validate.check_int("dim", self.dim, min_value=1)
        _validate.check_nonnegative("w_norm", self.w_norm)
        _validate.check_nonnegative("phi", self.phi)
        _validate.check_positive("clip", self.clip)
        _validate.check_int("rounds", self.rounds, min_value=1)
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_open_unit("delta", self.delta)
        _validate.check_int("repetitions", self.repetitions, min_value=1)
        if not self.learning_rates:
            raise ValueError("learning_rates=() must hold at least one step size")
        if self.w_norm + self.phi > self.clip:
            raise ValueError(f"w_norm + phi = {self.w_norm + self.phi} must be <= clip={self.clip} (records' norm bound)")


def synthetic_silos(cfg: ScalingConfig, *, n: int, num_silos: int, seed: int):
    """``num_silos`` silos of ``n`` i.i.d. records and the true minimiser ``w_dagger``."""
    rng = np.random.default_rng(seed)
    w_dagger = rng.normal(size=cfg.dim)
    w_dagger *= cfg.w_norm / np.linalg.norm(w_dagger)
    z = rng.normal(size=(num_silos, n, cfg.dim))
    z /= np.linalg.norm(z, axis=-1, keepdims=True)
    x = (w_dagger + cfg.phi * z).astype(np.float32)
    return [x[i] for i in range(num_silos)], w_dagger


def excess_risk(cfg: ScalingConfig, *, n: int, epsilon: float, num_silos: int, seed: int = 0,
                keep_runs: bool = False) -> dict:
    """Mean excess risk of the tuned step size (one ``dpjax.engine.run_grid`` over step sizes x repetitions);
    ``keep_runs``: also ``excess_risk_runs``, the selected step size's excess risk per repetition (the
    repetitions' keys are the same at every point: ``keys.run_key(seed, r)``)."""
    from dpjax import keys
    import jax.numpy as jnp

    from dpjax.accounting import isrl_paper_min_batch_size, isrl_paper_sigma
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.engine import SiloData, stack_hparams
    from dpjax.engine import OutputParams, run_grid

    n = _validate.check_int("n", n, min_value=2)
    num_silos = _validate.check_int("num_silos", num_silos, min_value=1)
    epsilon = _validate.check_positive("epsilon", epsilon)
    k_min = isrl_paper_min_batch_size(n, cfg.rounds, epsilon, cfg.delta)
    if not k_min <= cfg.batch_size <= n:
        raise ValueError(f"batch_size={cfg.batch_size} must lie in [{k_min}, n={n}] (Theorem D.1's minimum K)")
    sigma = isrl_paper_sigma(cfg.clip, n, cfg.rounds, epsilon, cfg.delta)
    xs, w_dagger = synthetic_silos(cfg, n=n, num_silos=num_silos, seed=seed)
    data = SiloData.from_silos(xs, [np.zeros(n, np.float32)] * num_silos)
    algo = NoisyMbSgd(MeanEstimation(cfg.dim), num_rounds=cfg.rounds, batch_size=cfg.batch_size,
                      sampling="with-replacement", output="average")
    grid = [(lr, r) for lr in cfg.learning_rates for r in range(cfg.repetitions)]
    # Theorem D.1's sigma is absolute: the family's noise multiplier is sigma over its message's sensitivity
    z = algo.noise_multiplier_for(sigma, MbSgdHParams.create(1.0, 0.0, cfg.clip), data.silo_sizes())
    hps = stack_hparams([MbSgdHParams.create(lr, z, cfg.clip) for lr, _ in grid])
    # One key per lane (not shared by a repetition's step sizes): the grid is one chunk of all runs.
    res = run_grid(algo, data, hps, jnp.stack([keys.run_key(seed, r) for _, r in grid]), eval_fn=OutputParams(),
                   common_random_numbers=False, chunk_size=len(grid), on_nonfinite="raise")
    err = 0.5 * np.sum((np.asarray(res.evals["params"][:, -1], np.float64) - w_dagger) ** 2, axis=-1)
    by_lr = {lr: float(np.mean([e for (l, _), e in zip(grid, err) if l == lr])) for lr in cfg.learning_rates}
    best = min(by_lr, key=by_lr.get)
    sel = np.array([e for (l, _), e in zip(grid, err) if l == best])
    out = {"n": n, "epsilon": epsilon, "num_silos": num_silos, "sigma": sigma, "learning_rate": best,
            "excess_risk": float(sel.mean()), "excess_risk_se": float(sel.std(ddof=1) / np.sqrt(len(sel))) if len(sel) > 1 else float("nan"),
            # Theorem 2.1's private term (constants and the fixed log factor dropped): d / (M eps^2 n^2).
            "theory_private_term": cfg.dim / (num_silos * epsilon**2 * n**2),
            # The excess risk of the pooled ERM (the sample mean of all n N records) in expectation:
            # the non-private statistical floor of this instance.
            "statistical_floor": 0.5 * cfg.phi**2 / (n * num_silos)}
    return out | ({"excess_risk_runs": sel.tolist()} if keep_runs else {})


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """Least-squares slope of log y against log x."""
    x, y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if x.size < 2 or np.ptp(x) == 0:
        raise ValueError("need at least two distinct x values to fit a slope")
    return float(np.polyfit(x, y, 1)[0])


def sweep(cfg: ScalingConfig, *, base: dict, values: dict[str, Sequence], seed: int = 0,
          tolerance: float = 0.15) -> dict:
    """One-factor-at-a-time sweep around ``base`` (keys n, epsilon, num_silos).

    Returns ``{factor: {"rows": [...], "slope": s, "theory": t, "verdict": v}}``, ``v`` the
    ``dpjax.sweep.select.slope_verdict`` of the exponent (paired bootstrap over the repetitions, ``tolerance`` around
    the theory's exponent); every row keeps ``excess_risk_runs``.
    """
    from dpjax.sweep import select

    for k in ("n", "epsilon", "num_silos"):
        if k not in base:
            raise ValueError(f"base must give {k!r}")
    out = {}
    for factor, vals in values.items():
        _validate.check_choice("factor", factor, tuple(THEORY_SLOPES))
        rows = [excess_risk(cfg, **(base | {factor: v}), seed=seed, keep_runs=True) for v in vals]
        xs = [r[factor] for r in rows]
        verdict = select.slope_verdict(xs, [r["excess_risk_runs"] for r in rows], predicted=THEORY_SLOPES[factor],
                                       tolerance=tolerance, paired=True, unit="repetitions")
        out[factor] = {"rows": rows, "slope": loglog_slope(xs, [r["excess_risk"] for r in rows]),
                       "theory": THEORY_SLOPES[factor], "verdict": verdict}
    return out
