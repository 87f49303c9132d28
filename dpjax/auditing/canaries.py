"""The pieces every canary audit of the catalogue (``dpjax.auditing.mechanisms``) is built from.

Canary data (``silos``, ``canary_pair``), a run's inputs with its public hyperparameters as array leaves (``inputs``),
the standard mutants (``mutants``), the certificate read from a family's ``privacy()`` (``family_audit``), and the exact
epsilon of a canary that enters i.i.d. Gaussian releases a random number of times (``mixture``, ``inclusion_mixture``).
``DELTA`` is the point at which the whole catalogue is audited.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

from dpjax.auditing import exact as exact_lib
from dpjax.auditing.audit import CanaryAudit, Certificate, FamilyRun
from dpjax.auditing.scores import inclusion_mixture_llr
from dpjax.engine.silos import SiloData

__all__ = ["CANARY_SCALE", "DELTA", "add_remove_pair", "canary_pair", "certificate", "family_audit", "inclusion_mixture", "inputs",
           "multiplier_audit", "mixture", "mutants", "silos"]

# The (eps, delta) point at which certificates are audited. Any point of the certified curve is a valid test; at delta =
# 1e-3 a threshold test on ~10^5 runs sees the relevant tails (at 1e-5 the certified epsilon is set by events rarer than
# 1 in 10^5, so a half-noise mutant can hide below it).
DELTA = 1e-3
# How far outside the clip region canaries sit (in units of the clip norm, times the batch size where a batch mean is
# clipped): large enough that a missing clip moves the release by far more than the certified sensitivity.
CANARY_SCALE = 100.0


def silos(sizes, dim: int, canary: float, *, silo: int = 0, rows=(0,), fill: float = 0.0, label: float = 0.0,
          canary_label: float | None = None, drop_last: bool = False) -> SiloData:
    """Silos of ``dim``-dimensional records (padded to the largest size), every record ``fill e_1`` with label ``label``
    except rows ``rows`` of silo ``silo`` (``canary e_1``, label ``canary_label``). ``drop_last``: silo ``silo`` loses
    its last record (the add/remove neighbour D of a canary placed there)."""
    xs = [np.zeros((n, dim), np.float32) for n in sizes]
    ys = [np.full(n, label, np.float32) for n in sizes]
    for x in xs:
        x[:, 0] = fill
    for r in rows:
        xs[silo][r, 0] = canary
        if canary_label is not None:
            ys[silo][r] = canary_label
    if drop_last:
        xs[silo], ys[silo] = xs[silo][:-1], ys[silo][:-1]
    return SiloData.from_silos(xs, ys)


def canary_pair(sizes, dim: int, value: float, **kw):
    """(D, D'): the canary at ``-value e_1`` and at ``+value e_1`` (replace-one)."""
    return silos(sizes, dim, -value, **kw), silos(sizes, dim, value, **kw)


def add_remove_pair(sizes, dim: int, value: float):
    """(D, D'): D' holds the canary ``value e_1`` as the last record of silo 0, D lacks that record (add/remove)."""
    last = (sizes[0] - 1,)
    return silos(sizes, dim, value, rows=last, drop_last=True), silos(sizes, dim, value, rows=last)


def inputs(data, **leaves) -> dict:
    """A run's inputs: the data plus its public hyperparameters as array leaves (mutants override them)."""
    return {"data": data, **{k: (jnp.asarray(v, jnp.int32) if isinstance(v, (int, np.integer)) and not
                                 isinstance(v, bool) else jnp.asarray(v, jnp.float32)) for k, v in leaves.items()}}


def mutants(noise: dict, clip: str | None = None, multiplier_of: float | None = None) -> dict:
    """Half the noise (every noise leaf halved) and, for absolute noise stds, the clip not applied (clip leaf = inf).
    Where the noise std is a multiplier times the clip (``multiplier_of`` = C), a missing clip would also make the noise
    infinite; the mutant is instead a clip 4 times larger with the multiplier divided by 4: the same noise std, 4 times
    the sensitivity -- a noise std that does not follow the clip norm."""
    out = {"half-noise": {k: np.asarray(v, np.float32) / 2 for k, v in noise.items()}}
    if clip is not None and multiplier_of is None:
        out["no-clip"] = {clip: math.inf}
    elif clip is not None:
        out["noise-not-scaled-by-clip"] = {clip: 4 * multiplier_of,
                                           **{k: np.asarray(v, np.float32) / 4 for k, v in noise.items()}}
    return out


def certificate(spec, accountant: str, what: str) -> Certificate:
    """The certificate of a family's ``PrivacySpec`` at ``DELTA`` under ``accountant``."""
    report = spec.epsilon(DELTA, accountant)
    return Certificate(report.epsilon, DELTA, f"{what}.privacy -> {report.accountant}", report.neighboring)


def mixture(probs, m: float, rounds: int, m_d: float | None = None) -> Callable[[], dict]:
    """Exact epsilon of ``rounds`` i.i.d. releases ``sum_l probs[l] N(l m_X, 1)`` (m_X = ``m_d`` on D, default ``-m``;
    ``m`` on D')."""
    m_d = -m if m_d is None else m_d

    def exact():
        comps = lambda shift: [(float(p), l * shift) for l, p in enumerate(probs) if p > 0]  # noqa: E731
        return {"epsilon": exact_lib.mixture_pair_epsilon(comps(m_d), comps(m), rounds, DELTA),
                "half_noise_epsilon": exact_lib.mixture_pair_epsilon(comps(2 * m_d), comps(2 * m), rounds, DELTA),
                "shift_in_noise_stds": m}

    return exact


def inclusion_mixture(released: Callable, probs, m: float, rounds: int, m_d: float | None = None):
    """(score, exact) of a canary that enters each of ``rounds`` releases ``l`` times with probability ``probs[l]``,
    each time shifting it by ``m_d`` (D, default ``-m``) or ``m`` (D') noise stds; ``released(inc)`` is the per-round
    release in noise stds, read from the increments. The score (the log-likelihood ratio of that mixture) and the exact
    epsilon (``mixture``) read the same law."""
    m_d = -m if m_d is None else m_d
    return (lambda inc: inclusion_mixture_llr(released(inc), probs, m_d, m)), mixture(probs, m, rounds, m_d)


def family_audit(name, registered, description, family, hparams, sizes_for_privacy, d, dp, leaves, score,
                 accountant, mutants, exact, details, params, privacy_kw=None) -> CanaryAudit:
    """The ``CanaryAudit`` of ``family`` (registered as ``registered``) run as a ``FamilyRun`` on the canary pair ``(d,
    dp)`` with public leaves ``leaves``, certified by its own ``privacy()``."""
    spec = family.privacy(sizes_for_privacy, hparams(inputs(None, **leaves)), **(privacy_kw or {}))
    cert = certificate(spec, accountant, type(family).__name__)
    return CanaryAudit(name=name, description=description, mechanism=FamilyRun(family, registered, hparams, params),
                       dataset=inputs(d, **leaves), neighbour=inputs(dp, **leaves), score=score, certificate=cert,
                       mutants=mutants, exact=exact, details={"family": registered, **details})


def multiplier_audit(name, registered, description, family, create, first, sizes, d, dp, noise_multiplier,
                     clip_norm, score, accountant, exact, details, dim: int, privacy_kw=None) -> CanaryAudit:
    """``family_audit`` of a family whose Gaussian noise is ``noise_multiplier`` times the clipped function's
    sensitivity: hyperparameters ``create(first, noise_multiplier, clip_norm)`` read from the inputs' leaves of those
    names, the multiplier's mutants (half the noise; a clip norm the noise does not follow), parameters ``0`` in
    ``R^dim``."""
    return family_audit(name, registered, description, family,
                        lambda inp: create(first, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
                        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm}, score, accountant,
                        mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm), exact,
                        details, jnp.zeros((dim,), jnp.float32), privacy_kw)
