"""Canary audits of DP-SGD with BandMF noise (``DpSgd(noise="band-mf")``, registered as ``dp-sgd``), part of the
catalogue (``dpjax.auditing.mechanisms``): a ``FamilyRun`` of the family's own step (fixed-order blocks, clip, mean,
``dpjax.parts.band_mf.BandMfNoise``, SGD), certified by its ``privacy()`` (the multi-epoch BandMF event).

Choquette-Choo, Ganesh, McKenna, McMahan, Rush, Thakurta & Xu, "(Amplified) Banded Matrix Factorization: A unified
approach to private training", NeurIPS 2023 (Alg. 1, Sec. 4): with learning rate 1 and SGD the negated increments are
``u = x + sigma C^{-1} w`` (``x`` the clipped canary's contributions, ``sigma = z x 2C/B``), so ``C u = C x + sigma w``
and the pair is one Gaussian of shift ``||C x|| / z`` noise stds. The canary sits at row 0 of one silo in the stored
order: it joins rounds ``0, T, 2T, ...`` (``T = n // B``, ``k = R / T`` times); with ``bands <= T`` the Gram matrix
vanishes between them, ``||C x|| = sqrt(k)``, and the exact epsilon of the pair is the certificate's Gaussian.

Two catalogue audits, each with the mutants its score is built to see (mutants other than half-noise are a ``FamilyRun``
of the same family with one part changed):

* ``dp-sgd-band-mf-separation``, ``separation-ignored``: the selection repeats each block ``k`` times in a row (every
  record still joins ``k`` rounds, but consecutive ones): the cross terms of ``C^T C`` add, ``||C x_adj|| > sqrt(k)``;
* ``dp-sgd-band-mf``, ``noise-not-correlated``: the privatizer's buffer keeps the fresh draws ``w`` instead of the
  released ``z``, so the noise is ``M w`` (``M`` with first column ``(1, -c_1, ..., -c_{b-1}) / c_0``), not
  ``C^{-1} w``;
* ``dp-sgd-band-mf``, ``half-noise``: half the multiplier.

Scores: each mutant's likelihood-ratio direction in ``u`` (the audited pair's ``C^T C x_sep`` for half the noise,
the fresh buffer's ``(M M^T)^{-1} x_sep``, the repeated blocks' ``C^T C x_adj``), scaled to unit std under the audited
noise; ``dp-sgd-band-mf`` takes the larger of its two. The exact epsilon is of the whole release (a threshold at least
as tight as the score's). The optimal direction of one bug is nearly blind to the other (an effective shift of half the
pair's), hence two audits rather than one score for all.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax.accounting import gdp
from dpjax.algorithms.dp_ftrl import EpochBlocks
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdHParams
from dpjax.auditing import canaries
from dpjax.auditing.audit import CanaryAudit, FamilyRun
from dpjax.auditing.execute import CanaryProbe
from dpjax.engine.chain import DataShape, Parts
from dpjax.engine.roles import Batch, Context
from dpjax.parts.band_mf import BandMfNoise
from dpjax.primitives import banded_mf

__all__ = ["band_mf_audit"]


@dataclasses.dataclass(frozen=True)
class _RepeatedBlocks(EpochBlocks):
    """Mutant selection: block ``(r // repeats) mod T`` at round r (each block ``repeats`` rounds in a row)."""

    repeats: int = 1

    def update(self, data, state, ctx: Context) -> tuple[Batch, Any]:
        blocks = data.sizes // self.batch_size
        starts = ((ctx.round // self.repeats) % blocks) * self.batch_size
        idx = jax.vmap(lambda perm, s: jax.lax.dynamic_slice(perm, (s,), (self.batch_size,)))(state, starts)
        n = data.num_silos
        info = {"epoch_round": ctx.round % jnp.min(blocks)}
        return Batch(None, jnp.ones((n,), bool), idx, jnp.ones(idx.shape, bool), jnp.zeros((n,), bool), n, info), state


@dataclasses.dataclass(frozen=True)
class _FreshBuffer(BandMfNoise):
    """Mutant privatizer: the same recursion, but the buffer keeps ``w_t`` instead of ``z_t``."""

    def correlate(self, fresh, state):
        c = self.coeffs

        def one(w, buf):
            z = (w - jnp.tensordot(jnp.asarray(c[1:], buf.dtype), buf, axes=1)) / jnp.asarray(c[0], w.dtype)
            return z, jnp.concatenate([w[None], buf[:-1]])

        out = jax.tree_util.tree_map(one, fresh, state)
        treedef = jax.tree_util.tree_structure(fresh)
        leaves = treedef.flatten_up_to(out)
        return treedef.unflatten([z for z, _ in leaves]), treedef.unflatten([b for _, b in leaves])


@dataclasses.dataclass(frozen=True)
class _Mutant(DpSgd):
    """``DpSgd(noise="band-mf")`` with one part replaced (``mutation``); a mutant, never registered."""

    mutation: str = "separation-ignored"
    repeats: int = 1

    def parts(self, shape: DataShape) -> Parts:
        p = super().parts(shape)
        if self.mutation == "separation-ignored":
            sel = p.selection
            return dataclasses.replace(p, selection=_RepeatedBlocks(sel.batch_size, sel.shuffled, sel.unit,
                                                                    self.repeats))
        return dataclasses.replace(p, chain=tuple(_FreshBuffer(x.coeffs) if isinstance(x, BandMfNoise) else x
                                                  for x in p.chain))


def band_mf_audit(kind: str = "noise", noise_multiplier: float = 4.0, clip_norm: float = 0.5, n: int = 12,
                  batch_size: int = 2, rounds: int = 48, bands: int = 6) -> CanaryAudit:
    """The BandMF audit (module docstring): one silo of ``n`` records, ``T = n // batch_size`` rounds an epoch,
    ``rounds`` a whole number of epochs, the optimised strategy of ``bands <= T`` bands. ``kind="noise"``: the
    ``half-noise`` and ``noise-not-correlated`` mutants; ``"separation"``: the ``separation-ignored`` mutant."""
    per_epoch = n // batch_size
    if rounds % per_epoch or bands > per_epoch:
        raise ValueError(f"rounds={rounds} must be a whole number of epochs of {per_epoch} rounds and bands={bands} "
                         f"<= {per_epoch}")
    if kind not in ("noise", "separation"):
        raise ValueError(f"kind={kind!r} must be 'noise' or 'separation'")
    k = rounds // per_epoch
    kw = dict(sampling="one-pass", neighboring="replace-one", noise="band-mf", optimizer="sgd", bands=bands,
              order="given")
    family = DpSgd(CanaryProbe(2), rounds, batch_size, **kw)
    coeffs = family.parts(DataShape(1, n)).role("privatizer").coeffs
    strategy = banded_mf.toeplitz_strategy(coeffs, rounds)
    x_sep, x_adj = np.zeros(rounds), np.zeros(rounds)
    x_sep[::per_epoch], x_adj[:k] = 1.0, 1.0
    m = np.eye(rounds) / coeffs[0] - sum(coeffs[j] / coeffs[0] * np.eye(rounds, k=-j) for j in range(1, bands))
    # likelihood-ratio directions in u, scaled to unit std under the audited noise (C^{-1} w); the fresh buffer's
    # shift is ~10^3 stds along its own, so a weight of 0.05 keeps it visible while it rarely wins on the pair itself
    if kind == "noise":
        dirs = np.stack([strategy.T @ strategy @ x_sep, np.linalg.solve(m @ m.T, x_sep)])
        weights = np.array([1.0, 0.05])
    else:
        dirs, weights = (strategy.T @ strategy @ x_adj)[None], np.ones(1)
    inv_t = np.linalg.inv(strategy).T
    dirs = jnp.asarray(dirs * (weights / np.linalg.norm(inv_t @ dirs.T, axis=0))[:, None], jnp.float32)

    def score(inc):
        return jnp.max(dirs @ (-inc[:, 0]))

    z = noise_multiplier
    hparams = lambda inp: DpSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"])  # noqa: E731
    params = jnp.zeros((2,), jnp.float32)
    d, dp = canaries.canary_pair([n], 2, canaries.CANARY_SCALE * clip_norm)
    mu = {"epsilon": float(np.linalg.norm(strategy @ x_sep)) / z,
          "separation_ignored": float(np.linalg.norm(strategy @ x_adj)) / z,
          "noise_not_correlated": float(np.linalg.norm(np.linalg.solve(m, x_sep))) / z}
    exact = lambda: {**{(k_ if k_ == "epsilon" else f"{k_}_epsilon"): gdp.gdp_epsilon(v_, canaries.DELTA)  # noqa
                        for k_, v_ in mu.items()}, "mu": mu["epsilon"],
                     "half_noise_epsilon": gdp.gdp_epsilon(2 * mu["epsilon"], canaries.DELTA)}
    if kind == "noise":
        mutants = {"half-noise": {"noise_multiplier": z / 2},
                   "noise-not-correlated": FamilyRun(_Mutant(CanaryProbe(2), rounds, batch_size, **kw,
                                                             mutation="noise-not-correlated"), "dp-sgd", hparams,
                                                     params)}
    else:
        mutants = {"separation-ignored": FamilyRun(_Mutant(CanaryProbe(2), rounds, batch_size, **kw, repeats=k),
                                                   "dp-sgd", hparams, params)}
    name = "dp-sgd-band-mf" + ("" if kind == "noise" else "-separation")
    return canaries.family_audit(
        name, "dp-sgd", "DP-SGD with BandMF noise (DpSgd(noise='band-mf').step: fixed-order block, clip, mean, "
        "C^{-1}-correlated noise from the (bands-1) x d buffer, SGD)", family, hparams, [n], d, dp,
        {"noise_multiplier": z, "clip_norm": clip_norm}, score, "pld", mutants, exact,
        {"n": n, "batch_size": batch_size, "rounds": rounds, "bands": bands, "participations": k,
         "coeffs": [round(x, 4) for x in coeffs], "sqrt_k": math.sqrt(k)}, params)
