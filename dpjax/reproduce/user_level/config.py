"""Constants shared by the user-level demonstrations D1-D9."""

from __future__ import annotations

PAPER = "Ghazi et al., On User-Level Private Convex Optimization (ICML 2023)"
SLOPE_TOL = 0.15
DELTA = 1e-6
