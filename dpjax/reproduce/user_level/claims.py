"""Slope claims of the user-level demonstrations (the verdict rule of ``dpjax.sweep.select``)."""

from __future__ import annotations

import numpy as np

from dpjax.reproduce.user_level.config import SLOPE_TOL


def slope(xs, ys) -> float:
    """Least-squares slope of log(ys) against log(xs)."""
    return float(np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)[0])


def slope_claim(name: str, xs, samples, theory: float, setting: str, *, side: str = "two-sided",
                paired: bool = False, statistic=None, unit: str = "runs") -> dict:
    """A claim on a log-log exponent, judged by ``dpjax.sweep.select.slope_verdict``: ``samples[i]`` are the
    runs at ``xs[i]`` (scalars: exact values); ``side="at_most"``/``"at_least"``: the claim is
    ``slope <= theory + SLOPE_TOL`` / ``>= theory - SLOPE_TOL``; ``paired``: the runs of every cell share their
    keys. ``holds`` is True only for the verdict "holds"; ``verdict`` and ``reason`` say which and why."""
    from dpjax.sweep import select

    v = select.slope_verdict(xs, samples, predicted=theory, tolerance=SLOPE_TOL, side=side, paired=paired,
                             statistic=statistic, unit=unit)
    return {"claim": f"{name}: log-log slope {v.expected()}", "setting": setting, "measured": v.measured(),
            "holds": v.holds, "verdict": v.verdict, "reason": v.reason}


def select_rule_line() -> str:
    from dpjax.sweep import select

    return ("Slope claims: " + select.verdict_rule_text(SLOPE_TOL) + " The runs of a cell are its seeds "
            "(paired: the cells share their run keys).")
