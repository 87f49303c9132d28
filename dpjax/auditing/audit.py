"""Canary audits: many keyed runs of a compiled mechanism on two neighbouring datasets.

A mechanism is a ``FamilyRun`` -- a registered algorithm family driven through the engine's executor
(``dpjax.auditing.execute.run_family``), whose output is the iterate after every round -- or any pure JAX function
``mechanism(key, dataset) -> output`` (``dataset`` any pytree with the same shapes for D and D'). Every audit of the
catalogue (``mechanisms.py``) runs a family's own step. ``CanaryAudit`` bundles it with the neighbouring pair (D, D'), a
distinguishing score ``score(output) -> scalar`` (large = "came from D'"), the certified ``Certificate`` for the same
configuration, and mutants (the same mechanism with a privacy bug: half the noise, a clip not applied) that the audit
must catch. A mutant is either another mechanism (a function, or a ``FamilyRun`` of a mutated family) or, when the
datasets are dicts that carry the mechanism's
public hyperparameters as array leaves (e.g. ``{"x": ..., "noise_std": 1.0}``), a dict of overridden leaves
(``{"noise_std": 0.5}``): the same compiled program then runs the mutant. Auditing a new mechanism takes a few lines::

    audit = CanaryAudit(
        name="my-mechanism", mechanism=my_mech, dataset=d, neighbour=d_prime,
        score=lambda out: jnp.vdot(out, canary_direction),
        certificate=Certificate(epsilon=..., delta=..., accountant="..."),
        mutants={"half-noise": my_mech_half_noise},
    )
    result = run_audit(audit, runs=100_000, seed=0)

``run_audit`` draws ``runs`` keyed runs per dataset (``jax.vmap`` over keys, jitted once per mechanism; D and D' share
the compiled program), splits them into a selection half (threshold choice) and an evaluation half (bound), and returns
the lower bound with its confidence (``dpjax.auditing.stats``). The audit passes when the lower bound is below the
certified epsilon and, where the canary pair's exact epsilon is computable (``exact()["epsilon"]``), below that too --
so a mechanism that leaks more than the pair should but less than the (looser) certificate still fails -- and every
mutant is caught: its lower bound exceeds the smaller of the two.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate as v, keys
from dpjax.auditing import stats

__all__ = ["Certificate", "FamilyRun", "CanaryAudit", "MutantResult", "AuditResult", "sample_scores", "run_audit"]

Mechanism = Callable[[jax.Array, Any], Any]


@dataclasses.dataclass(frozen=True)
class Certificate:
    """What dpjax certifies for the audited configuration: ``(epsilon, delta)`` under ``neighboring``, computed by
    ``accountant`` (named, e.g. a dpjax.accounting function)."""
    epsilon: float
    delta: float
    accountant: str
    neighboring: str = "replace-one"

    def __post_init__(self):
        v.check_positive("epsilon", self.epsilon, allow_inf=True)
        v.check_open_unit("delta", self.delta)


@dataclasses.dataclass(frozen=True)
class FamilyRun:
    """A registered family as an audit's mechanism.

    ``family`` (registered as ``registered`` in ``dpjax.engine.registry``) runs once per key through
    ``execute.run_family`` on ``dataset["data"]`` with ``hparams(dataset)`` -- built from the dataset dict's public
    leaves, so an override mutant changes them -- from ``params``. The audit's score sees the increments ``w_r -
    w_{r-1}`` of the flattened output parameters, ``[rounds, P]`` per run.
    """
    family: Any
    registered: str
    hparams: Callable[[Mapping[str, Any]], Any]
    params: Any

    def _key(self):
        return (self.family, self.registered, id(self.hparams), tuple(np.ravel(np.asarray(self.params)).tolist()))

    def __hash__(self) -> int:  # params is an array: hashed by value (the compiled scorers are cached per run)
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, FamilyRun) and self._key() == other._key()


@dataclasses.dataclass(frozen=True)
class CanaryAudit:
    """A canary experiment (see the module docstring).

    ``mechanism``: a ``FamilyRun`` (a registered family's own step) or a JAX function. ``exact``: optional zero-argument
    callable returning a dict of exact quantities of the canary pair; its ``"epsilon"`` (at ``certificate.delta``, of
    the observed output's distributions) is a second threshold: the empirical bound must stay below it and mutants must
    exceed it. ``details``: configuration numbers for the report.
    """
    name: str
    description: str
    mechanism: Mechanism
    dataset: Any
    neighbour: Any
    score: Callable[[Any], jax.Array]
    certificate: Certificate
    mutants: Mapping[str, Mechanism | Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    exact: Callable[[], dict] | None = None
    details: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class MutantResult:
    name: str
    bound: stats.EpsilonLowerBound
    caught: bool

    def as_dict(self) -> dict:
        return {"name": self.name, "caught": self.caught, **self.bound.as_dict()}


@dataclasses.dataclass(frozen=True)
class AuditResult:
    name: str
    description: str
    certificate: Certificate
    bound: stats.EpsilonLowerBound
    mutants: tuple[MutantResult, ...]
    exact: dict | None
    runs: int
    seed: int
    seconds: float
    details: Mapping[str, Any]

    @property
    def below_certificate(self) -> bool:
        return self.bound.epsilon < self.certificate.epsilon

    @property
    def exact_epsilon(self) -> float | None:
        return None if not self.exact or self.exact.get("epsilon") is None else float(self.exact["epsilon"])

    @property
    def below_exact(self) -> bool:
        """The bound does not exceed the canary pair's exact epsilon (True where it is not computed)."""
        return self.exact_epsilon is None or self.bound.epsilon <= self.exact_epsilon

    @property
    def passed(self) -> bool:
        return self.below_certificate and self.below_exact and all(m.caught for m in self.mutants)

    @property
    def threshold(self) -> float:
        """What a mutant's bound must exceed: the smaller of the certified and the canary pair's exact epsilon."""
        return min(self.certificate.epsilon, self.exact_epsilon if self.exact_epsilon is not None else math.inf)

    @property
    def runs_needed(self) -> int | None:
        """Runs per dataset at which every uncaught mutant's test would be caught (``stats.runs_to_exceed`` on its
        observed rates); None when one would not be caught by any number of runs up to ``stats.MAX_RUNS`` (or all
        are caught)."""
        need = [stats.runs_to_exceed(m.bound, self.threshold) for m in self.mutants if not m.caught]
        return None if not need or None in need else max(max(need), self.runs + 1)

    @property
    def verdict(self) -> str:
        """``PASS``; ``FAIL`` (a bound above a threshold, or a mutant that more runs would not catch); or
        ``INCONCLUSIVE``: no violation found, but too few runs to catch the mutants (``runs_needed`` would decide)."""
        if self.passed:
            return "PASS"
        if self.below_certificate and self.below_exact and self.runs_needed is not None:
            return "INCONCLUSIVE"
        return "FAIL"

    def failed_criteria(self) -> list[str]:
        """Each criterion not met, in words (empty when passed)."""
        out = []
        if not self.below_certificate:
            out.append(f"lower bound {self.bound.epsilon:.3f} >= certified {self.certificate.epsilon:.3f}")
        if not self.below_exact:
            out.append(f"lower bound {self.bound.epsilon:.3f} > the pair's exact {self.exact_epsilon:.3f}")
        for m in self.mutants:
            if not m.caught:
                out.append(f"mutant {m.name} not caught ({m.bound.epsilon:.3f} <= {self.threshold:.3f})")
        if self.verdict == "INCONCLUSIVE":
            out.append(f"{self.runs} runs too few: about {self.runs_needed} would decide (--runs)")
        return out

    def as_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "passed": self.passed, "verdict": self.verdict,
                "failed_criteria": self.failed_criteria(), "runs_needed": self.runs_needed,
                "below_certificate": self.below_certificate, "below_exact": self.below_exact,
                "certificate": dataclasses.asdict(self.certificate), "lower_bound": self.bound.as_dict(),
                "mutants": [m.as_dict() for m in self.mutants], "exact": self.exact, "runs_per_dataset": self.runs,
                "seed": self.seed, "seconds": self.seconds, "details": dict(self.details)}


@functools.lru_cache(maxsize=64)
def _scorer(mechanism, score: Callable) -> Callable:
    """``fn(keys, dataset) -> scores``: jit(vmap over keys) of ``score(mechanism(key, dataset))``, or, for a
    ``FamilyRun``, the family run once per key through ``execute.run_family`` and ``score`` vmapped over the runs'
    increments; cached per pair."""
    if isinstance(mechanism, FamilyRun):
        from dpjax.auditing.execute import run_family
        start = jnp.ravel(jnp.asarray(mechanism.params, jnp.float32))
        scores = jax.jit(jax.vmap(lambda traj: jnp.asarray(score(jnp.diff(
            jnp.concatenate([start[None], traj]), axis=0)), jnp.float32).reshape(())))

        def run(keys_, dataset):
            result = run_family(mechanism.family, dataset["data"], mechanism.hparams(dataset), keys_,
                                params=mechanism.params)
            return scores(jnp.asarray(result.eval_metrics["params"]))

        return run

    def one(key, dataset):
        return jnp.asarray(score(mechanism(key, dataset)), jnp.float32).reshape(())

    return jax.jit(jax.vmap(one, in_axes=(0, None)))


def sample_scores(mechanism: Mechanism | None, score: Callable | None, dataset, key: jax.Array, runs: int,
                  chunk: int = 25_000, compiled: Callable | None = None) -> np.ndarray:
    """Scores of ``runs`` independent runs (keys split from ``key``), float64 [runs].

    Runs are vmapped in chunks of ``chunk`` (static shape: the last chunk is padded with extra keys whose scores are
    dropped). ``compiled`` (from a previous call) replaces ``mechanism`` and ``score``.
    """
    runs = v.check_int("runs", runs, min_value=1)
    chunk = min(v.check_int("chunk", chunk, min_value=1), runs)
    fn = compiled or _scorer(mechanism, score)
    num_chunks = -(-runs // chunk)
    keys_ = jax.random.split(key, num_chunks * chunk).reshape((num_chunks, chunk))
    out = [np.asarray(fn(keys_[c], dataset), np.float64) for c in range(num_chunks)]
    return np.concatenate(out)[:runs]


def _bound(fn: Callable, dataset, neighbour, delta: float, key: jax.Array, runs: int, confidence: float,
           chunk: int) -> stats.EpsilonLowerBound:
    half = runs // 2
    k_sel_d, k_sel_p, k_ev_d, k_ev_p = jax.random.split(key, 4)
    sample = lambda data, k, r: sample_scores(None, None, data, k, r, chunk, fn)  # noqa: E731
    return stats.select_and_bound(sample(dataset, k_sel_d, half), sample(neighbour, k_sel_p, half),
                                  sample(dataset, k_ev_d, runs - half), sample(neighbour, k_ev_p, runs - half),
                                  delta, confidence=confidence)


def _override(data, changes: Mapping[str, Any]):
    if not isinstance(data, Mapping):
        raise ValueError("a mutant given as overrides needs dict datasets carrying the hyperparameters")
    unknown = set(changes) - set(data)
    if unknown:
        raise ValueError(f"mutant overrides {sorted(unknown)} are not keys of the dataset {sorted(data)}")
    out = dict(data)
    for name, value in changes.items():
        out[name] = jnp.asarray(value, jnp.asarray(data[name]).dtype)
    return out


def _is_mechanism(mutant) -> bool:
    """A mutant given as a mechanism (a function or a ``FamilyRun`` of a mutated family), not as overrides."""
    return callable(mutant) or isinstance(mutant, FamilyRun)


def run_audit(audit: CanaryAudit, runs: int = 100_000, seed: int = 0, confidence: float = 0.95,
              chunk: int = 25_000) -> AuditResult:
    """Runs the canary experiment of ``audit`` and its mutants.

    ``runs`` runs per dataset (half select the threshold, half bound epsilon), for the mechanism and for each mutant
    (independent keys from ``seed``). The bound holds with probability >= ``confidence``.
    """
    runs = v.check_int("runs", runs, min_value=2, max_value=stats.MAX_RUNS)
    seed = v.check_seed("seed", seed)
    v.check_open_unit("confidence", confidence)
    overrides = {name: (_override(audit.dataset, m), _override(audit.neighbour, m))
                 for name, m in audit.mutants.items() if not _is_mechanism(m)}
    start = time.perf_counter()
    delta = audit.certificate.delta
    main = _scorer(audit.mechanism, audit.score)
    bound = _bound(main, audit.dataset, audit.neighbour, delta, keys.run_key(seed, 0), runs, confidence, chunk)
    exact = audit.exact() if audit.exact is not None else None
    threshold = audit.certificate.epsilon
    if exact and exact.get("epsilon") is not None:
        threshold = min(threshold, float(exact["epsilon"]))
    mutants = []
    for i, (name, mutant) in enumerate(sorted(audit.mutants.items()), start=1):
        if _is_mechanism(mutant):  # another mechanism (a function, or a mutant family's FamilyRun)
            fn, data, neighbour = _scorer(mutant, audit.score), audit.dataset, audit.neighbour
        else:
            fn, (data, neighbour) = main, overrides[name]
        b = _bound(fn, data, neighbour, delta, keys.run_key(seed, i), runs, confidence, chunk)
        mutants.append(MutantResult(name, b, b.epsilon > threshold))
    return AuditResult(audit.name, audit.description, audit.certificate, bound, tuple(mutants), exact, runs, seed,
                       time.perf_counter() - start, audit.details)
