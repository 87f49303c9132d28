"""``dpjax run isrl-mnist-trial``: one trial of ISRL-DP Noisy MB-SGD on the 25-silo MNIST task.

The setting of Lowy & Razaviyayn (ICLR 2023), Section 6 / Appendix I (experiment of Fig. 4/7): binary (even vs odd)
logistic regression on PCA-50 MNIST features, N = 25 silos each holding one (even, odd) digit pair, n = 1238 training
records per silo, ``M`` silos available per round, R rounds, delta = 1/n^2.

One call does one *trial* at one epsilon: every step size of the grid is run with several repetitions through the
executor (``dpjax.engine.run_grid``, one compiled chunk, one key per run), the step size with the lowest mean final
training loss is selected, and its test error (mean over repetitions) is reported, next to the non-private MB-SGD
baseline run the same way.

Noise calibration (``calibration=``):

* ``"rdp"`` (default) / ``"pld"``: sigma is the smallest noise that a tight accountant certifies for the *actual*
  sampling scheme under replace-one (ISRL-DP's relation) at the target (epsilon, delta);
* ``"paper"``: Theorem D.1's advanced-composition calibration;
* ``"paper-experiment"``: the Appendix I moments-accountant form used for the paper's figures (add/remove calibration,
  Appendix I; not a replace-one certificate, so the tight epsilon of the resulting run is printed too).

Whatever the calibration, the run reports epsilon as certified by a tight accountant for its sampling scheme, naming
accountant, sampling and relation.

Named ``isrl-mnist-trial`` because it is not the figure: ``dpjax reproduce isrl-mnist`` runs the Fig. 4/7 protocol
(both families, both calibrations, 20 trials) and ``dpjax/sweep/configs/isrl_fig4_mbsgd_appendix_i.toml`` the MB-SGD
grid with Appendix I's calibration; their numbers differ by design.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import time
from typing import Any

import numpy as np

from dpjax import _validate

CALIBRATIONS = ("rdp", "pld", "paper", "paper-experiment")
# The accountant that certifies each sampling scheme tightly under replace-one.
CERTIFYING_ACCOUNTANT = {"without-replacement": "rdp", "with-replacement": "rdp", "poisson": "pld", "one-pass": "gdp"}


@dataclasses.dataclass(frozen=True)
class IsrlMnistConfig:
    """Everything that defines one ``isrl-mnist-trial`` run (written to config.json)."""

    epsilon: float = 1.5
    rounds: int = 35
    silos_per_round: int = 12
    seed: int = 0
    batch_size: int | None = None  # default: K = ceil(n sqrt(eps_max) / (2 sqrt(R))) (Appendix I)
    epsilon_max: float | None = None  # the eps_max of that K rule; default: epsilon
    sampling: str = "without-replacement"
    calibration: str = "rdp"
    learning_rates: tuple[float, ...] | None = None  # default: M * exp(linspace(-6, 0, 10))
    repetitions: int = 3
    n_per_digit: int = 774
    pca_dim: int = 50
    output: str = "last"
    baseline: bool = True
    data_dir: str | None = None

    def __post_init__(self):
        _validate.check_positive("epsilon", self.epsilon)
        _validate.check_rounds("rounds", self.rounds)
        _validate.check_int("silos_per_round", self.silos_per_round, min_value=1, max_value=25)
        _validate.check_seed("seed", self.seed)
        if self.batch_size is not None:
            _validate.check_int("batch_size", self.batch_size, min_value=1)
        if self.epsilon_max is not None:
            _validate.check_positive("epsilon_max", self.epsilon_max)
        _validate.check_choice("sampling", self.sampling, tuple(CERTIFYING_ACCOUNTANT))
        _validate.check_choice("calibration", self.calibration, CALIBRATIONS)
        _validate.check_int("repetitions", self.repetitions, min_value=1)
        _validate.check_int("n_per_digit", self.n_per_digit, min_value=2)
        _validate.check_int("pca_dim", self.pca_dim, min_value=1, max_value=784)
        if self.learning_rates is not None:
            if len(self.learning_rates) == 0:
                raise ValueError("learning_rates=() must contain at least one step size")
            for i, lr in enumerate(self.learning_rates):
                _validate.check_positive(f"learning_rates[{i}]", lr)

    def step_sizes(self) -> tuple[float, ...]:
        if self.learning_rates is not None:
            return tuple(self.learning_rates)
        # The authors' grid exp(linspace(-6, 0, 10)) was tuned for *summed* silo messages: times M for averaged ones.
        return tuple(float(self.silos_per_round * v) for v in np.exp(np.linspace(-6.0, 0.0, 10)))


def json_default(obj):
    """``json.dumps`` default for NumPy scalars and arrays (the summary and config files)."""
    if isinstance(obj, (np.floating, np.integer)):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def prepare_data(cfg: IsrlMnistConfig):
    """Loads MNIST and builds the 25-silo split of this trial (NumPy)."""
    from dpjax.data import isrl_mnist_silos, load_mnist

    mnist = load_mnist(cfg.data_dir)
    return isrl_mnist_silos(mnist["train_images"], mnist["train_labels"], seed=cfg.seed, n_per_digit=cfg.n_per_digit,
                            pca_dim=cfg.pca_dim)


def run_identity(cfg: IsrlMnistConfig) -> dict:
    """What makes two ``isrl-mnist-trial`` runs the same run (their output may be rewritten)."""
    return {"command": "run isrl-mnist-trial", "config": json.loads(json.dumps(dataclasses.asdict(cfg), default=json_default))}


def run(cfg: IsrlMnistConfig, out_dir: str | os.PathLike | None = None, *, progress: bool = True, dataset=None,
        overwrite: bool = False) -> dict[str, Any]:
    """Runs one trial and returns (and writes) its summary.

    Writes ``config.json``, ``results.csv`` (tidy: algorithm, epsilon, trial, learning_rate, repetition, metric, value,
    accountant) and ``summary.json`` into ``out_dir`` when given. ``out_dir`` is checked before any compute: a file, an
    unwritable path, or a directory holding a different run's results (unless ``overwrite``) raise ``ValueError`` (see
    :mod:`dpjax.outputs`). ``dataset`` may pass a prebuilt ``FederatedDataset`` (tests use a small synthetic one).
    """
    from dpjax import outputs

    if out_dir is None:
        return _run(cfg, None, progress=progress, dataset=dataset)
    out, created = outputs.claim_output_dir(out_dir, run_identity(cfg), overwrite=overwrite, flag="out_dir")
    try:
        summary = _run(cfg, out, progress=progress, dataset=dataset)
    except BaseException:
        outputs.release_output_dir(out, created)
        raise
    outputs.finish_output_dir(out, run_identity(cfg))
    return summary


def _run(cfg: IsrlMnistConfig, out_dir: pathlib.Path | None, *, progress: bool, dataset) -> dict[str, Any]:
    import jax

    from dpjax import progress as _progress
    from dpjax.engine import SiloData

    start = time.perf_counter()
    stages = ["load data", "calibrate noise", "train ISRL-DP MB-SGD", "train non-private MB-SGD", "write results"]
    # A bar on a terminal only (dpjax.progress.bar); a log gets one stage line per stage instead of carriage returns.
    bar = _progress.bar(total=len(stages), desc="isrl-mnist-trial", unit="stage",
                        **({} if progress else {"disable": True}))

    def at(i: int) -> None:  # stage i starts
        bar.set_postfix_str(stages[i])
        if progress and bar.disable:
            _progress.stage(f"isrl-mnist-trial [{i + 1}/{len(stages)}]: {stages[i]}")

    at(0)
    fed = dataset if dataset is not None else prepare_data(cfg)
    train = SiloData.from_silos(fed.train_x, fed.train_y)
    _validate.check_le("silos_per_round", cfg.silos_per_round, "num_silos", train.num_silos)
    n = train.min_size
    delta = 1.0 / n**2
    # L = 2 max ||x|| over the training features (Appendix I; non-private
    # preprocessing as in the paper). Per-example clipping at L never binds for
    # logistic regression (||grad|| <= ||x||) but makes the bound unconditional.
    lipschitz = 2.0 * max(float(np.max(np.linalg.norm(x, axis=1))) for x in fed.train_x)
    bar.update()

    at(1)
    noise = _calibrate(cfg, train, n, delta, lipschitz)
    bar.update()

    runs = _Runs(cfg, train, fed, noise["algorithm"].problem, lipschitz)
    at(2)
    private_final, private_div, private_by_lr, private_lr = runs.sweep(noise["algorithm"], noise["noise_multiplier"])
    bar.update()
    at(3)
    baseline = None
    if cfg.baseline:
        twin = dataclasses.replace(noise["algorithm"], private=False)
        baseline = runs.sweep(twin, 0.0)
    bar.update()

    at(4)
    rows = _result_rows(cfg, runs.grid, (private_final, private_div), baseline, noise["certified"].accountant)
    summary = {
        "task": "isrl-mnist-trial",
        "config": dataclasses.asdict(cfg),
        "num_silos": train.num_silos,
        "n_per_silo": n,
        "dim": int(train.x.shape[-1]),
        "lipschitz": lipschitz,
        "batch_size": noise["algorithm"].batch_size,
        "delta": delta,
        "sigma": noise["sigma"],
        "privacy": noise["certified"].as_dict(),
        "calibration": {"method": cfg.calibration, "report": noise["nominal"].as_dict()},
        "selected_learning_rate": private_lr,
        "test_error": private_by_lr[private_lr]["test_error"],
        "train_loss": private_by_lr[private_lr]["train_loss"],
        "diverged_runs": int(private_div.sum()),
        "private_runs": len(runs.grid),
        "nonprivate": None if baseline is None else {
            "selected_learning_rate": baseline[3],
            "test_error": baseline[2][baseline[3]]["test_error"],
            "train_loss": baseline[2][baseline[3]]["train_loss"],
        },
        "devices": [str(d) for d in jax.devices()],
        "jax_version": jax.__version__,
    }
    summary["wall_time_s"] = time.perf_counter() - start
    if out_dir is not None:
        _write_outputs(out_dir, cfg, rows, summary)
    bar.update()
    bar.close()
    return summary


def _calibrate(cfg: IsrlMnistConfig, train, n: int, delta: float, lipschitz: float) -> dict[str, Any]:
    """The trial's family and noise: ``sigma`` (the absolute std of each silo's noise, by
    ``cfg.calibration``), its ``noise_multiplier`` (sigma over the message's sensitivity 2L/K, read
    from the family's parts), and the ``certified`` / ``nominal`` epsilon reports."""
    from dpjax.accounting import isrl_experiment_calibration
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
    from dpjax.primitives import FixedAvailability
    from dpjax.problems import LogisticRegression

    eps_max = cfg.epsilon_max or cfg.epsilon
    sigma_exp, k_rule = isrl_experiment_calibration(lipschitz, n, cfg.rounds, cfg.epsilon, delta, eps_max)
    algo = NoisyMbSgd(
        LogisticRegression(train.x.shape[-1]), num_rounds=cfg.rounds, batch_size=cfg.batch_size or k_rule,
        sampling=cfg.sampling, availability=FixedAvailability(cfg.silos_per_round), output=cfg.output,
    )
    unit = MbSgdHParams.create(1.0, 1.0, lipschitz)
    sensitivity = algo.message_sensitivity(unit, [n])
    if cfg.calibration == "paper-experiment":
        sigma = sigma_exp
    else:
        sigma = algo.privacy([n], unit).calibrate(cfg.epsilon, delta, cfg.calibration)["noise_multiplier"] * sensitivity
    spec = algo.privacy([n], dataclasses.replace(unit, noise_multiplier=sigma / sensitivity))
    certifier = CERTIFYING_ACCOUNTANT[cfg.sampling]
    certified = spec.epsilon(delta, certifier)
    nominal = spec.epsilon(delta, cfg.calibration) if cfg.calibration != certifier else certified
    return {"algorithm": algo, "sigma": sigma, "noise_multiplier": algo.noise_multiplier_for(sigma, unit, [n]),
            "certified": certified, "nominal": nominal}


class _Runs:
    """The trial's grid (every step size x repetition, repetition r of every step size on the same
    key: common random numbers) and its evaluation on the pooled train and test sets."""

    def __init__(self, cfg: IsrlMnistConfig, train, fed, problem, lipschitz: float):
        import jax.numpy as jnp

        from dpjax import keys

        self.train, self.problem, self.lipschitz = train, problem, lipschitz
        self.lrs = cfg.step_sizes()
        self.grid = [(lr, rep) for lr in self.lrs for rep in range(cfg.repetitions)]
        self.rkeys = jnp.stack([keys.run_key(cfg.seed, rep) for _, rep in self.grid])
        test_y = np.concatenate(fed.test_y).astype(np.float32)
        self.eval_data = {
            "train": train.pooled(),
            "test": (jnp.asarray(np.concatenate(fed.test_x)), jnp.asarray(test_y), jnp.ones(len(test_y), bool)),
        }

    def evaluate(self, params, data):
        tr, te = self.problem.evaluate(params, *data["train"]), self.problem.evaluate(params, *data["test"])
        return {"train_loss": tr["loss"], "train_error": tr["error"], "test_loss": te["loss"], "test_error": te["error"]}

    def sweep(self, algorithm, z):
        """``(final metrics per run, diverged per run, mean metrics per step size, selected step size)``."""
        from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
        from dpjax.engine import run_grid, stack_hparams
        from dpjax.engine.checks import diverged

        grid, lrs = self.grid, self.lrs
        hps = stack_hparams([MbSgdHParams.create(lr, z, self.lipschitz) for lr, _ in grid])
        # One key per lane, all runs in one chunk (the grid's historical program; its numbers are pinned).
        res = run_grid(algorithm, self.train, hps, self.rkeys, eval_fn=self.evaluate, eval_data=self.eval_data,
                       common_random_numbers=False, chunk_size=len(grid))
        final = {k: v[:, -1] for k, v in res.evals.items()}
        for k in final:  # diverged runs count as infinitely bad (paper protocol)
            final[k] = np.where(diverged(res.diverged_round, final[k]), np.inf, final[k])
        nonfinite = diverged(res.diverged_round)
        by_lr = {
            lr: {k: float(np.mean([final[k][i] for i, (l, _) in enumerate(grid) if l == lr])) for k in final}
            for lr in lrs
        }
        best = min(lrs, key=lambda lr: by_lr[lr]["train_loss"])
        return final, nonfinite, by_lr, best


def _result_rows(cfg: IsrlMnistConfig, grid, private, baseline, accountant: str) -> list[tuple]:
    """The tidy rows of ``results.csv``: one per algorithm, run and metric."""
    rows = []
    for algorithm_name, result, eps, acc in (
        ("isrl-dp-mbsgd", private, cfg.epsilon, accountant),
        ("mbsgd-nonprivate", baseline[:2] if baseline else None, math.inf, "none"),
    ):
        if result is None:
            continue
        final, div = result
        for i, (lr, rep) in enumerate(grid):
            for metric, values in final.items():
                rows.append((algorithm_name, eps, cfg.seed, lr, rep, metric, float(values[i]), bool(div[i]), acc))
    return rows


def _write_outputs(out: pathlib.Path, cfg: IsrlMnistConfig, rows: list[tuple], summary: dict) -> None:
    """``config.json``, ``results.csv`` and ``summary.json`` (each written atomically); adds ``out_dir``
    to the summary."""
    from dpjax.sweep.store import atomic_write_text as _atomic_write

    _atomic_write(out / "config.json", json.dumps(dataclasses.asdict(cfg), indent=2, default=json_default))
    header = "algorithm,epsilon,trial,learning_rate,repetition,metric,value,diverged,accountant\n"
    body = "".join(",".join(str(c) for c in row) + "\n" for row in rows)
    _atomic_write(out / "results.csv", header + body)
    _atomic_write(out / "summary.json", json.dumps(summary, indent=2, default=json_default))
    summary["out_dir"] = str(out)


def _divergence_lines(summary: dict) -> list[str]:
    """Says plainly when runs diverged (an ``inf`` test error is otherwise easy to misread)."""
    total = summary["private_runs"]
    k = summary.get("diverged_runs", 0)
    if not math.isfinite(summary["test_error"]):
        return [f"  DIVERGED: every run of the selected step size produced NaN/inf parameters ({k} of {total} runs "
                "diverged); no step size of the grid trains stably: try smaller --learning-rates"]
    if k:
        return [f"  note: {k} of {total} private runs diverged (NaN/inf parameters) and count as infinitely bad"]
    return []


def format_summary(summary: dict) -> str:
    p = summary["privacy"]
    lines = [
        f"ISRL-DP Noisy MB-SGD on MNIST: N={summary['num_silos']} silos, M={summary['config']['silos_per_round']} per round, "
        f"n={summary['n_per_silo']}, d={summary['dim']}, R={summary['config']['rounds']}, K={summary['batch_size']}",
        f"  noise sigma = {summary['sigma']:.4g} (calibration: {summary['calibration']['method']}), "
        f"clip L = {summary['lipschitz']:.3g}, selected step size = {summary['selected_learning_rate']:.4g}",
        f"  test error  = {summary['test_error']:.4f}   (train loss {summary['train_loss']:.4f}; "
        f"mean of {summary['config']['repetitions']} repetitions)",
        *_divergence_lines(summary),
        f"  privacy     : ε = {p['epsilon']:.4g} at δ = {p['delta']:.3g}  [accountant={p['accountant']}, "
        f"sampling={p['sampling']}, neighbouring={p['neighboring']}, unit={p['unit']}]",
    ]
    cal = summary["calibration"]["report"]
    if summary["calibration"]["method"] != p["accountant"]:
        lines.append(f"  calibration : ε = {cal['epsilon']:.4g} by accountant={cal['accountant']} (nominal)")
    if summary.get("nonprivate"):
        npv = summary["nonprivate"]
        lines.append(f"  non-private MB-SGD test error = {npv['test_error']:.4f} (step size {npv['selected_learning_rate']:.4g})")
    lines.append(f"  wall time {summary['wall_time_s']:.1f} s" + (f"; results in {summary['out_dir']}" if "out_dir" in summary else ""))
    return "\n".join(lines)
