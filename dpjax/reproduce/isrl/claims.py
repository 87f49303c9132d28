"""The ISRL-DP figures' claims: what the paper says of each figure, checked on the selected curves."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from dpjax.reproduce.isrl.config import Experiment, Setting
from dpjax.reproduce.isrl_protocol import LOCAL, LOCAL_NP, MB, MB_NP
from dpjax.sweep.select import error_bars


# Claims, report, outputs


def selected_means(selected: pd.DataFrame) -> pd.DataFrame:
    return error_bars(selected, x="epsilon", value="test", lines=["num_silos", "silos_per_round", "calibration", "algorithm"])


def _val(summ, setting: Setting, alg: str, cal: str, eps: float | None = None) -> float:
    s = summ[(summ.num_silos == setting.num_silos) & (summ.silos_per_round == setting.silos_per_round)
             & (summ.algorithm == alg) & (summ.calibration == cal)]
    if eps is not None:
        s = s[np.isclose(s.epsilon, eps)]
    return float(s["mean"].iloc[0]) if len(s) else float("nan")


def _private_curve(summ, setting, alg, cal) -> dict[float, float]:
    s = summ[(summ.num_silos == setting.num_silos) & (summ.silos_per_round == setting.silos_per_round)
             & (summ.algorithm == alg) & (summ.calibration == cal)]
    return {float(e): float(m) for e, m in zip(s.epsilon, s["mean"]) if math.isfinite(e)}


def _interval(summ, setting: Setting, alg: str, cal: str, eps: float) -> tuple[float, float, int]:
    """``(p_lo, p_hi, n_trials)`` of one curve's point (the trial interval ``selected_means`` gives)."""
    s = summ[(summ.num_silos == setting.num_silos) & (summ.silos_per_round == setting.silos_per_round)
             & (summ.algorithm == alg) & (summ.calibration == cal)]
    s = s[np.isclose(s.epsilon, eps)]
    if not len(s) or "p_lo" not in s.columns:
        return math.nan, math.nan, 0
    return float(s["p_lo"].iloc[0]), float(s["p_hi"].iloc[0]), int(s["n_trials"].iloc[0])


def compare_below(a: tuple[float, float, int], b: tuple[float, float, int]) -> str:
    """The verdict rule for "a is below b" on two trial intervals ``(lo, hi, n)``: ``holds`` when a's interval lies
    below b's, ``differs`` when above, ``inconclusive`` when they overlap or either point has fewer than 2 trials (a
    mean of one trial, or of two close ones, cannot tell 0.147 from 0.148)."""
    (a_lo, a_hi, a_n), (b_lo, b_hi, b_n) = a, b
    if min(a_n, b_n) < 2 or not all(map(math.isfinite, (a_lo, a_hi, b_lo, b_hi))):
        return "inconclusive"
    if a_hi < b_lo:
        return "holds"
    if a_lo > b_hi:
        return "differs"
    return "inconclusive"


def _below_every_eps(summ, setting, a_alg, b_alg, cal, eps_values, nonprivate: bool = False) -> dict:
    """``{"verdict", "verdict_reason"}`` of "a below b at every ε" by ``compare_below`` per ε: holds when every ε holds,
    differs when one differs, else inconclusive (naming the ε that cannot tell). ``nonprivate``: b is a non-private
    line (calibration "none", ε = inf), the same interval at every ε."""
    b_at = (lambda e: _interval(summ, setting, b_alg, "none", math.inf)) if nonprivate else \
        (lambda e: _interval(summ, setting, b_alg, cal, e))
    per = {e: compare_below(_interval(summ, setting, a_alg, cal, e), b_at(e)) for e in eps_values}
    n = min((_interval(summ, setting, a_alg, cal, e)[2] for e in eps_values), default=0)
    if per and all(v == "holds" for v in per.values()):
        return {"verdict": "holds", "verdict_reason": ""}
    differs = [e for e, v in per.items() if v == "differs"]
    if differs:
        return {"verdict": "differs", "verdict_reason": "intervals above at ε = " + ", ".join(f"{e:g}" for e in differs)}
    unsure = [e for e, v in per.items() if v == "inconclusive"]
    why = (f"{n} trial: no interval" if n < 2 else f"the p5–p95 intervals over {n} trials overlap")
    return {"verdict": "inconclusive", "verdict_reason": f"{why} at ε = " + ", ".join(f"{e:g}" for e in unsure)}


def fmt_value(v: float) -> str:
    return "nan" if not math.isfinite(v) else f"{v:.3f}"


def claims_mnist(summ, exp: Experiment) -> list[dict]:
    out = []
    for cal in exp.calibrations:
        for st in exp.settings:
            mb, lo = _private_curve(summ, st, MB, cal), _private_curve(summ, st, LOCAL, cal)
            np_local = _val(summ, st, LOCAL_NP, "none")
            wins = [e for e in mb if mb[e] < lo.get(e, math.inf)]
            out.append({
                "claim": "ISRL-DP MB-SGD beats ISRL-DP Local SGD at every ε", "setting": st.label, "calibration": cal,
                "measured": "; ".join(f"ε={e:g}: {fmt_value(mb[e])} vs {fmt_value(lo.get(e, math.nan))}" for e in sorted(mb)),
                "holds": len(wins) == len(mb), **_below_every_eps(summ, st, MB, LOCAL, cal, sorted(mb))})
            big = [e for e in mb if e >= 12]
            if big:
                out.append({
                    "claim": "ISRL-DP MB-SGD beats non-private Local SGD for ε ≥ 12", "setting": st.label,
                    "calibration": cal,
                    "measured": "; ".join(f"ε={e:g}: {fmt_value(mb[e])}" for e in sorted(big)) + f" vs non-private Local SGD {fmt_value(np_local)}",
                    "holds": all(mb[e] < np_local for e in big),
                    **_below_every_eps(summ, st, MB, LOCAL_NP, cal, sorted(big), nonprivate=True)})
    return out


def claims_insurance(summ, exp: Experiment) -> list[dict]:
    out = []
    for cal in exp.calibrations:
        for st in exp.settings:
            mb, lo = _private_curve(summ, st, MB, cal), _private_curve(summ, st, LOCAL, cal)
            np_local, np_mb = _val(summ, st, LOCAL_NP, "none"), _val(summ, st, MB_NP, "none")
            small = sorted(e for e in mb if e <= 2)
            out.append({
                "claim": "ISRL-DP MB-SGD beats ISRL-DP Local SGD, especially for ε ≤ 2", "setting": st.label,
                "calibration": cal,
                "measured": "; ".join(f"ε={e:g}: {fmt_value(mb[e])} vs {fmt_value(lo.get(e, math.nan))}" for e in sorted(mb)),
                "holds": bool(small) and all(mb[e] < lo.get(e, math.inf) for e in small),
                **_below_every_eps(summ, st, MB, LOCAL, cal, small)})
            big = sorted(e for e in mb if e >= 2)
            if big:
                out.append({
                    "claim": "for ε ≥ 2 ISRL-DP MB-SGD is on par with non-private Local SGD (within 10%)",
                    "setting": st.label, "calibration": cal,
                    "measured": "; ".join(f"ε={e:g}: {fmt_value(mb[e])}" for e in big) + f" vs {fmt_value(np_local)}",
                    "holds": all(mb[e] <= 1.1 * np_local for e in big)})
            near1 = [e for e in mb if 0.5 <= e <= 2]
            if near1:
                e1 = min(near1, key=lambda e: abs(math.log(e)))
                out.append({
                    "claim": "relative RMSE ≈ 0.6–0.7 at ε ≈ 1 (tolerance ±0.05)", "setting": st.label,
                    "calibration": cal, "measured": f"ε={e1:g}: {fmt_value(mb[e1])}",
                    "holds": 0.55 <= mb[e1] <= 0.75})
            below = [e for e in mb if mb[e] < 1]
            out.append({
                "claim": "relative RMSE < 1 for most ε", "setting": st.label, "calibration": cal,
                "measured": f"{len(below)}/{len(mb)} ε values below 1", "holds": len(below) > len(mb) / 2})
            if 3.0 in mb:
                out.append({
                    "claim": "privacy costs little at ε ≈ 3 (within 10% of non-private MB-SGD)", "setting": st.label,
                    "calibration": cal, "measured": f"{fmt_value(mb[3.0])} vs non-private MB-SGD {fmt_value(np_mb)}",
                    "holds": mb[3.0] <= 1.1 * np_mb})
    return out


def _relative(rel: float) -> str:
    """MB-SGD's test error relative to Local SGD's, in words: ``12% lower``, ``3% higher``."""
    if abs(rel) < 0.005:
        return "equal within 0.5%"
    return f"{100 * abs(rel):.0f}% {'lower' if rel > 0 else 'higher'}"


def claims_obesity(summ, exp: Experiment) -> list[dict]:
    """Fig. 6's claim (MB-SGD 10–30 % lower than Local SGD at every ε) and its weaker form (lower at every ε),
    as two rows; ``rel = (Local - MB) / Local``."""
    out = []
    for cal in exp.calibrations:
        for st in exp.settings:
            mb, lo = _private_curve(summ, st, MB, cal), _private_curve(summ, st, LOCAL, cal)
            rel = {e: (lo[e] - mb[e]) / lo[e] for e in mb if e in lo and lo[e] > 0}
            measured = "; ".join(f"ε={e:g}: MB-SGD {fmt_value(mb[e])} vs Local SGD {fmt_value(lo[e])} (MB-SGD {_relative(rel[e])})"
                                 for e in sorted(rel))
            lower = sorted(e for e, r in rel.items() if r > 0)
            out.append({
                "claim": "ISRL-DP MB-SGD has 10–30% lower test error than ISRL-DP Local SGD at every ε",
                "setting": st.label, "calibration": cal, "measured": measured,
                "holds": bool(rel) and all(0.10 <= r <= 0.30 for r in rel.values())})
            out.append({
                "claim": "weaker form: ISRL-DP MB-SGD has lower test error than ISRL-DP Local SGD at every ε",
                "setting": st.label, "calibration": cal,
                "measured": f"lower at {len(lower)}/{len(rel)} ε" + (f" ({', '.join(f'{e:g}' for e in lower)})"
                                                                     if lower else ""),
                "holds": bool(rel) and len(lower) == len(rel), **_below_every_eps(summ, st, MB, LOCAL, cal, sorted(rel))})
    return out
