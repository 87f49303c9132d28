"""One-run audit statistics (Steinke, Nasr & Jagielski 2023, "Privacy Auditing with One (1) Training Run",
NeurIPS 2023): an empirical epsilon lower bound from ``m`` canaries of ONE run.

Pure Python/SciPy (no jax), reusable on scores produced anywhere.

Each of ``m`` canaries gets an independent uniform secret ``S_i in {-1, +1}`` (which of two neighbouring records it is:
included or excluded, or ``+x`` against ``-x`` under replace-one); the mechanism runs once; the auditor guesses ``T_i in
{-1, 0, +1}`` (0: abstain) from the output, ``r = ||T||_1`` guesses of which ``v`` are right. If the mechanism is (eps,
delta)-DP with respect to changing one canary's record, the paper's Theorem 5.2 (with its delta term, Proposition 5.7 /
Algorithm 2 as published with the paper) bounds the chance of ``>= v`` correct guesses by

    p(eps, delta) = P[Bin(r, q) >= v] + 2 m delta max_{1 <= i <= v} P[v - i <= Bin(r, q) < v] / i,
    q = e^eps / (1 + e^eps)   (the accuracy of eps-DP randomized response).

``epsilon_lower_bound(m, r, v, delta, confidence)`` is the largest eps with ``p(eps, delta) < 1 - confidence``
(bisection: ``p`` increases in eps). If the mechanism were (eps', delta)-DP for some eps' below the bound, ``v`` correct
guesses would have had probability below ``1 - confidence``: the bound holds with probability at least ``confidence``.

``audit_scores`` turns canary scores into guesses: the ``k_+`` largest scores guess ``+1``, the ``k_-`` smallest ``-1``,
for every ``(k_+, k_-)`` of a guess plan fixed BEFORE looking at the scores; the best bound over the plan is reported at
confidence ``1 - (1 - confidence) / |plan|`` per plan entry (Bonferroni), so picking the best entry keeps the stated
confidence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as _stats

from dpjax import _validate as v_

__all__ = ["p_value", "epsilon_lower_bound", "guess_plan", "OneRunBound", "audit_scores"]


def _check_counts(m: int, r: int, v: int) -> None:
    v_.check_int("m", m, min_value=1)
    v_.check_int("r", r, min_value=0, max_value=m)
    v_.check_int("v", v, min_value=0, max_value=r)


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P[>= v correct of r guesses] under (epsilon, delta)-DP w.r.t. each of m canaries (module docstring)."""
    _check_counts(m, r, v)
    v_.check_nonnegative("epsilon", epsilon)
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta={delta!r} must be in [0, 1]")
    if v == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(_stats.binom.sf(v - 1, r, q))  # P[Bin(r, q) >= v]
    if delta == 0.0:
        return min(tail, 1.0)
    # alpha = max_i P[v - i <= Bin < v] / i over i = 1..v (cumulative sums of the pmf below v)
    pmf = _stats.binom.pmf(np.arange(v - 1, -1, -1), r, q)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
    alpha = float(np.max(np.cumsum(pmf) / np.arange(1, v + 1)))
    return min(tail + 2.0 * m * delta * alpha, 1.0)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, confidence: float = 0.95, *,
                        tolerance: float = 1e-6, epsilon_max: float = 100.0) -> float:
    """The largest epsilon (to ``tolerance``, at most ``epsilon_max``) whose ``p_value`` is below ``1 - confidence``; 0
    when even epsilon = 0 explains ``v`` correct guesses."""
    _check_counts(m, r, v)
    v_.check_open_unit("confidence", confidence)
    beta = 1.0 - confidence
    if p_value(m, r, v, 0.0, delta) >= beta:
        return 0.0
    lo, hi = 0.0, 1.0  # p(lo) < beta <= p(hi) once hi is found
    while p_value(m, r, v, hi, delta) < beta:
        lo, hi = hi, 2.0 * hi
        if hi > epsilon_max:
            return epsilon_max
    while hi - lo > tolerance:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if p_value(m, r, v, mid, delta) < beta else (lo, mid)
    return lo


def guess_plan(m: int, fractions: Sequence[float] = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)) -> tuple[tuple[int, int], ...]:
    """``(k_+, k_-)`` pairs fixed in advance: a fraction ``f`` of the m canaries guessed, half each side."""
    v_.check_int("m", m, min_value=2)
    plan = []
    for f in fractions:
        k = max(1, int(round(f * m / 2)))
        if 2 * k <= m and (k, k) not in plan:
            plan.append((k, k))
    return tuple(plan)


@dataclasses.dataclass(frozen=True)
class OneRunBound:
    """The best bound over a guess plan: ``epsilon`` (at ``confidence`` overall, Bonferroni over the plan), with the
    guesses ``r``, correct ``v``, the ``(k_plus, k_minus)`` that gave it and every entry."""
    epsilon: float
    r: int
    v: int
    k_plus: int
    k_minus: int
    m: int
    delta: float
    confidence: float
    entries: tuple[dict, ...]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self) | {"entries": [dict(e) for e in self.entries]}


def audit_scores(scores: Sequence[float], secrets: Sequence[int], delta: float, confidence: float = 0.95,
                 plan: Sequence[tuple[int, int]] | None = None) -> OneRunBound:
    """Epsilon lower bound from canary ``scores`` (large = "secret is +1") and their ``secrets`` (+-1).

    Ties are broken by canary index (a fixed, score-independent order)."""
    s = np.asarray(scores, np.float64)
    t = np.asarray(secrets)
    if s.ndim != 1 or s.shape != t.shape:
        raise ValueError(f"scores shape {s.shape} and secrets shape {t.shape} must be equal 1-D")
    if not np.all(np.isin(t, (-1, 1))):
        raise ValueError("secrets must be +1 or -1")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"scores hold {int(np.sum(~np.isfinite(s)))} non-finite values")
    m = len(s)
    plan = tuple(guess_plan(m) if plan is None else plan)
    if not plan:
        raise ValueError("plan is empty")
    per_entry = 1.0 - (1.0 - confidence) / len(plan)
    order = np.argsort(-s, kind="stable")  # descending scores
    entries, best = [], None
    for kp, km in plan:
        v_.check_int("k_plus", kp, min_value=0)
        v_.check_int("k_minus", km, min_value=0)
        if kp + km > m or kp + km == 0:
            raise ValueError(f"plan entry (k_plus, k_minus)=({kp}, {km}) must guess between 1 and m={m} canaries")
        correct = int(np.sum(t[order[:kp]] == 1) + (np.sum(t[order[m - km:]] == -1) if km else 0))
        eps = epsilon_lower_bound(m, kp + km, correct, delta, per_entry)
        entry = {"k_plus": kp, "k_minus": km, "r": kp + km, "v": correct, "epsilon": eps}
        entries.append(entry)
        if best is None or eps > best["epsilon"]:
            best = entry
    return OneRunBound(best["epsilon"], best["r"], best["v"], best["k_plus"], best["k_minus"], m, delta, confidence,
                       tuple(entries))
