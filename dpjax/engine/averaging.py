"""Output rules: which point of the trajectory an algorithm returns.

* ``"last"``: the last iterate ``w_R``.
* ``"average"``: the uniform average ``(1/R) sum_{r=0}^{R-1} w_r`` (Algorithm 2
  of Lowy & Razaviyayn with ``gamma_r = 1/R``; note ``w_R`` is excluded).
* ``"window"``: the mean of the last ``window`` iterates ``w_{R-window+1..R}`` (the authors' experiment code uses 8).
* ``"exponential"``: ``sum gamma_r w_r / sum gamma_r`` with ``gamma_r = a^(r+1)``, ``a = 1/(1 - mu*eta)`` (Stich 2019
  weights for the strongly convex case, Theorem D.1.2); updated in a numerically stable running form so large R never
  overflows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate

PyTree = Any
RULES = ("last", "average", "window", "exponential")


@dataclasses.dataclass(frozen=True)
class IterateAverager:
    rule: str = "last"
    window: int = 8

    def __post_init__(self):
        _validate.check_choice("output", self.rule, RULES)
        _validate.check_int("window", self.window, min_value=1)

    def init(self, params: PyTree) -> PyTree:
        if self.rule == "window":
            return jax.tree_util.tree_map(lambda p: jnp.zeros((self.window,) + p.shape, p.dtype), params)
        if self.rule in ("average", "exponential"):
            return jax.tree_util.tree_map(jnp.zeros_like, params)
        return ()

    def update(self, avg: PyTree, before: PyTree, after: PyTree, round_index, decay=None) -> PyTree:
        """Folds round ``round_index`` (which moved ``before -> after``) into ``avg``.

        ``decay`` is ``mu * eta`` for the exponential rule."""
        if self.rule == "window":
            slot = round_index % self.window
            return jax.tree_util.tree_map(lambda buf, p: buf.at[slot].set(p), avg, after)
        if self.rule == "average":
            weight = 1.0 / (round_index + 1.0)
            return jax.tree_util.tree_map(lambda a, p: a + (p - a) * weight.astype(p.dtype), avg, before)
        if self.rule == "exponential":
            # gamma_r / Gamma_r = (a - 1) / (a - a^{-r}) with a = 1/(1 - decay) > 1.
            a = 1.0 / (1.0 - decay)
            ratio = (a - 1.0) / (a - a ** (-round_index.astype(jnp.float32)))
            ratio = jnp.where(round_index == 0, 1.0, ratio)
            return jax.tree_util.tree_map(lambda m, p: m + (p - m) * ratio.astype(p.dtype), avg, before)
        return avg

    def value(self, avg: PyTree, current: PyTree, rounds_done) -> PyTree:
        """The output after ``rounds_done`` rounds (``current`` is ``w_{rounds_done}``)."""
        if self.rule == "window":
            filled = jnp.minimum(rounds_done, self.window)
            valid = jnp.arange(self.window) < filled
            def mean(buf):
                w = valid.astype(buf.dtype).reshape((-1,) + (1,) * (buf.ndim - 1))
                return jnp.sum(buf * w, axis=0) / jnp.maximum(filled, 1).astype(buf.dtype)
            out = jax.tree_util.tree_map(mean, avg)
            return jax.tree_util.tree_map(lambda o, c: jnp.where(rounds_done == 0, c, o), out, current)
        if self.rule in ("average", "exponential"):
            return jax.tree_util.tree_map(lambda a, c: jnp.where(rounds_done == 0, c, a), avg, current)
        return current
