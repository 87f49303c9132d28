"""dp_accounting's absl log records inside dpjax's own calls (pure Python; never imports jax or absl).

dp_accounting's RDP accountant logs one WARNING per order whose fractional-order series does not converge
(``_compute_log_a_frac failed to converge ... Excluding this order``); a schedule can log dozens before dpjax's one
line of result or error. dpjax collects them inside its call and reports the excluded orders once, as a note.
"""

from __future__ import annotations

import contextlib
import logging
import math

__all__ = ["unconverged_orders"]


class _Unconverged(logging.Filter):
    """Drops dp_accounting's ``_compute_log_a_frac failed to converge`` records, keeping each one's order."""

    def __init__(self):
        super().__init__()
        self.orders: list[float] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("_compute_log_a_frac failed to converge"):
            args = record.args if isinstance(record.args, tuple) else ()
            self.orders.append(float(args[-1]) if args else math.nan)  # (iterations, q, sigma, alpha)
            return False
        return True  # any other record (e.g. "Negative Renyi divergence") still reaches the user


@contextlib.contextmanager
def unconverged_orders():
    """Within the block, dp_accounting's per-order "failed to converge" absl warnings are not printed; yields the
    list of the orders they named (dp_accounting excludes those orders itself: their RDP is inf, a valid bound).

    Scoped to dpjax's own call, so a user's direct dp_accounting calls still log; other records pass through.
    absl logs through the standard ``logging`` logger ``"absl"``, so no absl import is needed.
    """
    logger, flt = logging.getLogger("absl"), _Unconverged()
    logger.addFilter(flt)
    try:
        yield flt.orders
    finally:
        logger.removeFilter(flt)
