"""Selection (Appendix A's step-size search) and the statistics the DIFF2 claims rest on."""

from __future__ import annotations

import numpy as np

from dpjax.reproduce.diff2.config import Protocol
# The authors' patience rule (Appendix A) is one of the sweep's selection rules.
from dpjax.sweep.select import largest_surviving as choose_learning_rate


# ----------------------------------------------------------------------------- selection (Appendix A)
def authors_step_size_search(etas, traces, patience: int = 5, factor: float = 1.05) -> tuple[int, bool, int]:
    """The authors' step-size search (``train.py`` and ``notebook_for_evaluation.ipynb`` of
    ``lawrenceztang/CE-PLSGM``): ``(index, survived, checkpoints recorded)``.

    Step sizes are tried from the largest; a run stops at an evaluation whose loss is NaN or that finds the patience
    counter already at ``patience`` (so a counter reaching it at the last checkpoint, or an inf loss, does not fail
    it), and the evaluations from the stopping one on are never recorded. The first run that completes is kept; when
    none does, the notebook's ``results[min(results.keys())]`` keeps the smallest step size, stopped early.
    """
    order = np.argsort(-np.asarray(etas, float))
    for i in order:
        losses = np.asarray(traces[i], float)
        count, recorded, best = 0, 1, losses[0]
        for loss in losses[1:]:
            if count >= patience or np.isnan(loss):
                break
            if loss > factor * best:
                count += 1
            if loss < best:
                best, count = loss, 0
            recorded += 1
        if recorded == losses.size:
            return int(i), True, recorded
    return int(i), False, recorded


def paired_one_sided_pvalue(a, b) -> float:
    """One-sided paired t-test p-value for mean(a - b) < 0 (scipy ``ttest_rel``, alternative 'less')."""
    from scipy import stats

    a, b = np.asarray(a, float), np.asarray(b, float)
    if np.allclose(a - b, (a - b)[0]):
        d = (a - b)[0]
        return 0.0 if d < 0 else (1.0 if d > 0 else 0.5)
    return float(stats.ttest_rel(a, b, alternative="less").pvalue)


def summarize(result: dict, protocol: Protocol, metrics, construction: str = "paper") -> dict:
    """Applies the step-size rule and the per-panel configuration choice per seed (``construction="authors"``:
    :func:`authors_step_size_search`, and a stopped run's checkpoints after its stop are not used).

    Returns ``{(algorithm, eps): {metric: {"curves": [seeds, checkpoints], "best": [...], "final": [...], "choice":
    [Config per seed], "fallback": n}}}``.
    """
    configs = result["configs"]
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(c.group(), []).append(i)
    out: dict = {}
    for seed, tr in result["traces"].items():
        # step-size search per group
        chosen: dict[tuple, tuple[int, bool]] = {}
        recorded: dict[int, int] = {}  # authors: checkpoints the script records before it stops a run
        if construction == "authors":
            tr = {k: np.array(v, float) for k, v in tr.items()}
        for g, idx in groups.items():
            etas = [configs[i].learning_rate for i in idx]
            if construction == "authors":
                j, ok, recorded[idx[j]] = authors_step_size_search(etas, tr["train_loss"][idx], protocol.patience,
                                                                   protocol.factor)
                for v in tr.values():
                    v[idx[j], recorded[idx[j]]:] = np.nan
            else:
                j, ok = choose_learning_rate(etas, tr["train_loss"][idx], protocol.patience, protocol.factor)
            chosen[g] = (idx[j], ok)
        by_alg: dict[tuple, list[tuple]] = {}
        for g in groups:
            by_alg.setdefault((g[0], g[1]), []).append(g)
        for key, gs in by_alg.items():
            entry = out.setdefault(key, {m: {"curves": [], "best": [], "final": [], "choice": [], "fallback": 0}
                                         for m in metrics})
            for m in metrics:
                higher = m.endswith("accuracy")
                crit_metric = "grad_norm_sq" if m == "grad_norm_sq" else "train_loss"
                def crit(i):
                    t = tr[crit_metric][i]
                    return np.nanmin(np.where(np.isfinite(t), t, np.nan)) if np.isfinite(t).any() else np.inf
                best_g = min(gs, key=lambda g: crit(chosen[g][0]))
                i = chosen[best_g][0]
                curve = tr[m][i]
                finite = np.where(np.isfinite(curve), curve, np.nan)
                e = entry[m]
                e["curves"].append(curve)
                e["best"].append(np.nanmax(finite) if higher else np.nanmin(finite))
                e["final"].append(curve[recorded.get(i, curve.size) - 1])
                e["choice"].append(configs[i])
                e["fallback"] += int(not chosen[best_g][1])
    for entry in out.values():
        for e in entry.values():
            for k in ("curves", "best", "final"):
                e[k] = np.asarray(e[k], float)
    return out
