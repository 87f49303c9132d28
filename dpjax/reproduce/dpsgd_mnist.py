"""DP-SGD-General on MNIST (van Dijk et al., "Generalizing DP-SGD with Shuffling
and Batch Clipping", Section 1 experiments): ``dpjax reproduce dpsgd-mnist``.

The paper reports, at sigma = 2, MNIST test accuracy 98.3 % for batch clipping of mini-batch means with shuffling (eq.
(4), BC-SH) and 98.4 % for individual clipping with subsampling (eq. (1), IC-SS). Its Appendix H (architecture, C,
eta, batch sizes, epochs) is missing from the text, so the protocol is ours.

The round (Algorithm 1): ``m`` clipped terms, each ``A``'s output on its own subset of ``s`` records, are summed,
``N(0, (2 C sigma)^2 I)`` is added and the sum is divided by the public ``m``; a round uses ``ms`` records, an epoch
``N/(ms)`` rounds. Eq. (4) printed alone is the round with ``m = 1``: a message of norm <= C under noise of std ``2 C
sigma = 4 C`` per coordinate, which no step size turns into a model (the ``m = 1`` row stays at chance). Batch
clipping that learns at sigma = 2 is Algorithm 1 with eq. (4) as ``A`` on each of ``m`` mini-batches (eq. (5)): noise
``2 C sigma / m`` per coordinate of the message.

* model: conv 5x5 16 -> GN -> tanh -> max-pool 2, conv 5x5 32 -> GN -> tanh -> max-pool 2, FC 32 tanh, FC 10 (valid
  padding), inputs normalised with the public MNIST constants (0.1307, 0.3081);
* every round uses ``ms = 256`` records; variants (sigma = 2): BC-SH (eq. (4) on each of m = 64 mini-batches of s = 4,
  shuffling), IC-SS (eq. (1): m = 256, s = 1, subsampling), BC-SH with local SGD (eq. (2): sequential SGD over each
  mini-batch's 4 records) and with momentum 0.9 reset every call (eq. (3)), BC-SH with m = 1 (eq. (4) as printed), and
  non-private mini-batch SGD (batch 256);
* full protocol: C in {0.1, 0.5, 1, 2, 5}, eta in {0.01, 0.03, 0.1, 0.3, 1}, E in {10, 30, 50}, 3 seeds, all 60,000
  training and 10,000 test images (extrapolated; hundreds of CPU hours);
* quick protocol (``--quick``, a smoke test of every code path, not a reproduction): 512 training images (2 rounds per
  epoch), 500 test images, E = 2, eta in {0.3, 1}, C = 1, one seed, one grid-edge extension per side and axis, every
  variant but BC-SH with m = 1 (BC-SH's code; full protocol only).

The best configuration per variant (mean test accuracy over seeds; tuning on test data leaks privacy and is ignored,
as usual) is reported with its privacy at delta = 1e-5 for g in {1, 2, 4, 8}: the exact strong-adversary mixture,
G_{sqrt(gE)/sigma}, generic group privacy G_{g sqrt(E)/sigma} and, for g = 1, a standard-adversary accountant. Where a
selected eta or C (per E) sits at an end of the values tried, one more geometric step beyond it is run
(``dpjax.sweep.select.extended_grid``), at most ``max_extensions`` times per side and axis; such rows have
``grid_extension = 1`` in results.csv.

Constructions (``--construction``): ``"paper"`` (default) is the above. ``"authors"`` is what the batch-clipping code
of the authors' group does (github.com/MisaNguyen/DPSGD at commit cb9d355, ``PyTorchProjectFramework/``; not labelled
as this paper's code, no MNIST settings):

- BC-SH, ``train_model_BC_FGC.py`` lines 23-56: the gradient of the batch's mean loss (``main_new.py`` line 146) is
  clipped to C (lines 37-44) and ``param.grad = (grad * batch_size + noise) / batch_size`` with noise ``N(0, (sigma
  C)^2)`` (lines 48-56): std ``sigma C / s`` per coordinate. Here: m = 1 mean of s = 256 records, shuffling, dpjax
  noise multiplier ``sigma / (2 s)`` (dpjax's noise is ``noise_multiplier x 2C``), so the message is exactly the
  authors'.
- IC-SS, ``train_model_IC_FGC.py`` lines 127-178: per-example gradients clipped to C, summed, ``N(0, (sigma C)^2)``
  added, divided by the batch size: Algorithm 1 with m = 256, s = 1 and noise multiplier ``sigma / 2`` (the sum's
  replace-one sensitivity is 2C).
- Step sizes: plain SGD (``main_new.py`` line 192) with ``StepLR(step_size=1, gamma=0.9)`` per epoch (line 210): the
  server transformation ``optax.scale_by_schedule(0.9 ** epoch)``. The settings files are for CIFAR-10; the MNIST
  batch size, eta and C are unpublished, so the same grid and edge rule select them.

The epsilon reported for ``"authors"`` is what dpjax certifies for the noise actually added (noise multiplier ``sigma
x noise_factor``), not the paper's sigma = 2 guarantee.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
import time

import numpy as np

from dpjax.reproduce import register, report
from dpjax.reproduce.dpsgd_mnist_config import (CONSTRUCTIONS, DELTA, FULL, GROUPS, QUICK, SIGMA, cnn,
                                                construction_variants, describe, edge_requests, family_kwargs, load,
                                                select_best)
from dpjax.reproduce.dpsgd_mnist_report import extrapolate_full, plot, write_report

# The configuration and the report live in dpsgd_mnist_config / dpsgd_mnist_report (import them from there).
__all__ = ["dpsgd_mnist", "merge_parts", "privacy_rows", "report_only", "run_protocol", "train_grid"]


def privacy_rows(alg, n_train: int, hparams) -> list[dict]:
    """The selected configuration's guarantees (strong-exact, sqrt-gE, generic-group; standard at g = 1; for shuffled
    variants at g = 1 also the Poisson number a typical implementation reports and Chua et al.'s lower bound)."""
    from dpjax.reproduce import shuffle_report

    rows = []
    for g in GROUPS:
        spec = alg.privacy([n_train], hparams, group_size=g)
        for acc in ("strong-exact", "sqrt-gE", "generic-group") + (("standard",) if g == 1 else ()):
            rep = spec.epsilon(DELTA, acc)
            rows.append({"group_size": g, "accountant": acc, "epsilon": rep.epsilon, "notes": " | ".join(rep.notes)})
            if g == 1 and acc == "strong-exact":  # a shuffled run: the Poisson number and the lower bound beside it
                rows += shuffle_report.gap_rows(shuffle_report.family_gap(alg, n_train, rep))
    return rows


def run_protocol(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None, config: dict | None = None,
                 only: tuple[str, ...] | None = None, construction: str = "paper") -> pathlib.Path:
    """Runs the protocol (``config`` overrides QUICK/FULL entries, ``only`` restricts the variants)
    and writes results.csv, privacy.csv, meta.json, the figure and report.md into ``out``."""
    import jax

    from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
    from dpjax.engine import SiloData, stack_hparams
    from dpjax.problems import FlaxProblem

    from dpjax import _validate

    _validate.check_choice("construction", construction, CONSTRUCTIONS)
    cfg = {**(QUICK if quick else FULL), **(config or {})}
    out = report.fresh_out(out)
    start, cpu_start = time.perf_counter(), time.process_time()
    from dpjax.data.paths import DatasetNotFoundError

    from dpjax import progress

    progress.stage(f"dpsgd-mnist: loading {cfg['n_train']} + {cfg['n_test']} MNIST images")
    try:
        (xtr, ytr), (xte, yte) = load(cfg["n_train"], cfg["n_test"], seed, data_dir)
    except DatasetNotFoundError as err:  # the CLI reports ValueErrors in one line
        raise ValueError(str(err)) from None
    data = SiloData.from_silos([xtr], [ytr])
    problem = FlaxProblem(cnn(), (28, 28, 1), "softmax")

    def eval_fn(params, ed):
        return {"test_accuracy": 1.0 - problem.evaluate(params, ed[0], ed[1])["error"]}

    rows, timings, algs = [], {}, {}
    all_variants = construction_variants(construction, len(ytr))
    listed = cfg.get("variants") or tuple(all_variants)  # the protocol's variants (QUICK names a subset)
    chosen = {k: v for k, v in all_variants.items() if k in listed and (only is None or k in only)}
    for name, kw in chosen.items():
        fam_kw, factor = family_kwargs(kw)
        private = fam_kw.get("private", True)
        sigma = SIGMA * factor if private else 0.0  # the noise multiplier the family (and the accountant) gets
        clips = cfg["clips"] if private else (1.0,)
        for epochs in cfg["epochs"]:
            alg = DpSgdGeneral.for_epochs(problem, len(ytr), epochs, **fam_kw)
            algs[(name, epochs)] = alg
            grid = [(lr, c) for c in clips for lr in cfg["lrs"]]
            done, extension, mine = {}, 0, []
            t0, c0, runs = time.perf_counter(), time.process_time(), 0
            while grid:
                hps = stack_hparams([DpSgdHParams.create(lr, noise_multiplier=sigma, clip_norm=c) for lr, c in grid])
                for s in range(cfg["seeds"]):
                    key = jax.random.key(seed * 1000 + s)
                    if extension:  # the first grid keeps the keys of earlier revisions
                        key = jax.random.fold_in(key, extension)
                    keys = jax.random.split(key, len(grid))
                    acc, diverged = train_grid(alg, data, hps, keys, eval_fn, (xte, yte))
                    for (lr, c), a, bad in zip(grid, acc, diverged):
                        mine.append({"variant": name, "epochs": epochs, "learning_rate": lr, "clip_norm": c,
                                     "sigma": SIGMA if private else 0.0, "noise_multiplier": sigma, "seed": s,
                                     "grid_extension": int(extension > 0),
                                     "test_accuracy": float(a) if bad < 0 else float("nan")})
                runs += len(grid) * cfg["seeds"]
                extension += 1
                grid = edge_requests(mine, private, done, cfg.get("max_extensions", 0))
                if grid:
                    print(f"  {name} E={epochs}: grid edge, extending with (eta, C) = {grid}", flush=True)
            rows += mine
            took, cpu = time.perf_counter() - t0, time.process_time() - c0
            timings[f"{name} E={epochs}"] = {"seconds": took, "cpu_seconds": cpu, "rounds": alg.num_rounds,
                                             "runs": runs, "batch": alg.batch_size}
            print(f"  {name} E={epochs}: {runs} runs x {alg.num_rounds} rounds in {took:.1f} s "
                  f"({cpu:.0f} s CPU)", flush=True)

    best = select_best(rows)
    privacy = {}
    for name, b in best.items():
        alg = algs[(name, b["epochs"])]
        if alg.private:
            sigma = SIGMA * family_kwargs(chosen[name])[1]
            privacy[name] = privacy_rows(alg, len(ytr), DpSgdHParams.create(b["learning_rate"], noise_multiplier=sigma,
                                                                              clip_norm=b["clip_norm"]))
    _write_tables(out, rows, privacy)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    full_estimate = extrapolate_full(timings)
    meta = {"quick": quick, "seed": seed, "construction": construction, "config": {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()},
            "variants": {n: describe(kw) for n, kw in chosen.items()}, "wall_seconds": wall, "cpu_seconds": cpu,
            "load_average_at_end": list(os.getloadavg()), "timings": timings,
            "full_protocol_estimate_cpu_seconds": full_estimate}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    plot(out / "dpsgd_mnist.png", best, privacy)
    return write_report(out, quick, cfg, chosen, best, privacy, wall, cpu, full_estimate, timings,
                        construction=construction, run_rows=rows)


def train_grid(alg, data, hps, keys, eval_fn, eval_data) -> tuple[np.ndarray, np.ndarray]:
    """Final test accuracy and first diverged round (-1: none) of every run of the grid
    (``dpjax.engine.run_grid``, one key per run; the starting point comes from the chunk's first key).

    On an accelerator the runs are vmapped in one compiled scan over the rounds (one chunk: every run starts from the
    first key's initialisation, as ``dpjax.engine.run_many`` did here). On CPU every round is its own compiled call
    (``round_loop="host"``: XLA:CPU leaves the CNN's gradient convolutions inside a loop body on its naive emitter,
    see ``dpjax.engine.program``) and the runs go one after the other (chunks of one run, each from its own key's
    initialisation): vmapping the runs turns each convolution into a grouped one over per-run kernels, which XLA:CPU
    runs about 1.3x slower than the runs one by one (``experiments/benchmarks/bench_dpsgd_quick_variants.py
    --host-single``).
    """
    import jax

    from dpjax.engine import run_grid

    on_cpu = jax.default_backend() == "cpu"
    res = run_grid(alg, data, hps, keys, eval_fn=eval_fn, eval_data=eval_data, common_random_numbers=False,
                   chunk_size=1 if on_cpu else len(keys), round_loop="host" if on_cpu else "scan")
    return np.asarray(res.evals["test_accuracy"])[:, -1], np.asarray(res.diverged_round)


def _write_tables(out: pathlib.Path, rows: list[dict], privacy: dict[str, list[dict]]) -> None:
    """``results.csv`` (one row per run) and ``privacy.csv`` (one row per variant x group size x accountant)."""
    report.write_csv(out / "results.csv", rows, list(rows[0]))
    report.write_csv(out / "privacy.csv", [{"variant": name, **r} for name, prs in privacy.items() for r in prs],
                     ["variant", "group_size", "accountant", "epsilon", "notes"])


def merge_parts(out: pathlib.Path, parts: list[pathlib.Path]) -> pathlib.Path:
    """One output folder from runs of ``run_protocol(..., only=...)`` over disjoint variants (e.g. one
    process per variant on a loaded machine). Each variant's rows depend only on its own seeds and
    keys, so the merged results equal a single run's; wall and CPU seconds are summed."""
    out = report.fresh_out(out)
    rows, privacy, timings, chosen, wall, cpu, metas = [], {}, {}, {}, 0.0, 0.0, []
    all_variants = None
    for part in map(pathlib.Path, parts):
        meta = _read_part(part, rows, privacy)
        kept = construction_variants(meta.get("construction", "paper"), meta["config"]["n_train"])
        if all_variants is not None and metas and meta.get("construction", "paper") != metas[0].get("construction",
                                                                                                   "paper"):
            raise ValueError(f"parts={parts!r} mix constructions; merge parts of one construction")
        all_variants = kept
        metas.append(meta)
        timings.update(meta["timings"])
        chosen.update({n: all_variants[n] for n in meta["variants"]})
        wall, cpu = wall + meta["wall_seconds"], cpu + meta["cpu_seconds"]
    order = [n for n in all_variants if n in chosen]
    chosen = {n: chosen[n] for n in order}
    rows.sort(key=lambda r: order.index(r["variant"]))
    privacy = {n: privacy[n] for n in order if n in privacy}
    _write_tables(out, rows, privacy)
    best = select_best(rows)
    best = {n: best[n] for n in order}
    full_estimate = extrapolate_full(timings)
    cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in metas[0]["config"].items()}
    meta = {**metas[0], "variants": {n: describe(kw) for n, kw in chosen.items()}, "wall_seconds": wall,
            "cpu_seconds": cpu, "timings": timings, "full_protocol_estimate_cpu_seconds": full_estimate,
            "merged_from": [str(p) for p in parts], "load_average_at_end": [m["load_average_at_end"] for m in metas]}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    plot(out / "dpsgd_mnist.png", best, privacy)
    return write_report(out, meta["quick"], cfg, chosen, best, privacy, wall, cpu, full_estimate, timings, len(parts),
                        load=max(m["load_average_at_end"][0] for m in metas),
                        construction=meta.get("construction", "paper"), run_rows=rows)


def _read_part(folder: pathlib.Path, rows: list, privacy: dict) -> dict:
    """Appends a kept run's results.csv rows and privacy.csv rows; returns its meta.json."""
    meta = json.loads((folder / "meta.json").read_text())
    with open(folder / "results.csv") as f:
        for r in csv.DictReader(f):
            rows.append({**r, "epochs": int(r["epochs"]), "learning_rate": float(r["learning_rate"]),
                         "clip_norm": float(r["clip_norm"]), "sigma": float(r["sigma"]), "seed": int(r["seed"]),
                         "test_accuracy": float(r["test_accuracy"]),
                         "noise_multiplier": float(r.get("noise_multiplier", r["sigma"])),
                         "grid_extension": int(r.get("grid_extension", 0))})
    with open(folder / "privacy.csv") as f:
        for r in csv.DictReader(f):
            privacy.setdefault(r.pop("variant"), []).append(
                {**r, "group_size": int(r["group_size"]), "epsilon": float(r["epsilon"])})
    return meta


def report_only(out: pathlib.Path, *, quick: bool) -> pathlib.Path:
    """Rewrites report.md and the figure of a kept run (results.csv, privacy.csv, meta.json) without
    re-running; the load average is the one the run recorded."""
    out = pathlib.Path(out)
    rows, privacy = [], {}
    meta = _read_part(out, rows, privacy)
    if bool(meta["quick"]) != quick:
        raise ValueError(f"out={str(out)!r} holds a {'quick' if meta['quick'] else 'full/reduced'} run; "
                         f"quick={quick} does not match")
    all_variants = construction_variants(meta.get("construction", "paper"), meta["config"]["n_train"])
    chosen = {n: all_variants[n] for n in meta["variants"]}
    best = select_best(rows)
    best = {n: best[n] for n in chosen if n in best}
    privacy = {n: privacy[n] for n in chosen if n in privacy}
    cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in meta["config"].items()}
    loads = meta.get("load_average_at_end") or [math.nan]
    load = max(l[0] for l in loads) if isinstance(loads[0], list) else loads[0]
    plot(out / "dpsgd_mnist.png", best, privacy)
    return write_report(out, meta["quick"], cfg, chosen, best, privacy, meta["wall_seconds"], meta["cpu_seconds"],
                        meta.get("full_protocol_estimate_cpu_seconds", extrapolate_full(meta["timings"])), meta["timings"],
                        len(meta.get("merged_from", [])) or 1, load=load,
                        construction=meta.get("construction", "paper"), run_rows=rows)


@register("dpsgd-mnist", report_only=report_only)
def dpsgd_mnist(out: pathlib.Path, *, quick: bool, seed: int, data_dir=None, construction: str = "paper") -> pathlib.Path:
    return run_protocol(pathlib.Path(out), quick=quick, seed=seed, data_dir=data_dir, construction=construction)
