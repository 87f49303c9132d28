"""``dpjax audit training``: a one-run audit (Steinke, Nasr & Jagielski 2023) of an actual dpjax training run through a
registered family's own step.

What runs. ``m`` white-box Dirac gradient canaries are the training set: canary ``i`` is a record whose per-example
gradient is ``+c e_i`` or ``-c e_i`` (``DiracProbe``: loss ``value x params[index]``), with ``c = canary_scale x C`` far
outside the clip region, so an honest clip turns it into ``+-C e_i``. The sign ``S_i`` of each canary is an independent
fair coin (which of two replace-one neighbours the record is; a secret of the auditor). The family -- DP-SGD-General
(``DpSgdGeneral``: shuffling, individual clipping, every record once per epoch in one round of ``m`` clipped terms),
ISRL-DP Noisy MB-SGD (``NoisyMbSgd``: one silo, minibatch ``K = m``) or DP-SCAFFOLD (``DpScaffold``: one silo, one local
step on all ``m`` records, step sizes 1) -- trains ONCE from zero through ``dpjax.auditing.execute.run_family``
(``dpjax.engine.run_many``, the executor every sweep uses). Nothing is re-implemented: the released iterate is the
family's.

Scores and bound. Canary ``i``'s score is ``-(w_T - w_0)_i``, the total update along its own coordinate (the update
subtracts ``eta`` times the message, which holds ``S_i C`` per round it ran in); the ``k`` largest guess ``S_i = +1``,
the ``k`` smallest ``-1``, for every ``k`` of a plan fixed in advance, and ``dpjax.auditing.one_run.audit_scores``
converts the correct guesses into an epsilon lower bound at 95 % (Theorem 5.2 with its delta term; Bonferroni over the
plan). The run's certified epsilon is the family's own ``privacy(...)`` at the same delta (DP-SGD-General: the exact
strong-adversary accountant; ISRL: RDP, as dp_accounting has no PLD for its fixed-size sampling). The audit passes when
the lower bound does not exceed the certified epsilon and every mutant's bound does.

Mutants (``mutant_family``): the same family with one part wrapped -- ``"no-clip"``: the clipper clips nothing but
reports the honest bound ``C`` to the noise (clipping skipped); ``"half-noise"``: the privatizer adds half the noise the
certificate assumes.

How strong a one-run audit is. For Gaussian noise the paper's bound reaches roughly half the true epsilon (its Fig.
1/2), so a mutant that only doubles the true epsilon (half the noise) is caught only with many canaries: the default
``m = 10^6`` with ``delta = 1e-9`` (the bound's delta term is ``2 m delta``, so delta must be well below ``1/m``) and a
certificate near eps 2.9 (GDP ``mu = sqrt(E)/sigma = 0.5``). Clipping skipped is caught at any size (the canaries move
the iterate by ``c >> C``).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate as v
from dpjax.auditing import one_run

__all__ = ["DiracProbe", "FAMILIES", "MUTANTS", "mutant_family", "TrainingAudit", "training_audit"]

FAMILIES = ("dpsgd-general", "isrl-mbsgd", "dp-scaffold")
MUTANTS = ("no-clip", "half-noise")
#: Most training rounds of one audit: the work is rounds x canaries, and beyond this the certificate at any useful
#: noise is far above what a one-run bound can reach (refused up front rather than run for hours).
MAX_ROUNDS = 10_000
#: Accountant of each family's certificate.
ACCOUNTANTS = {"dpsgd-general": "strong-exact", "isrl-mbsgd": "rdp", "dp-scaffold": "rdp"}


@dataclasses.dataclass(frozen=True)
class DiracProbe:
    """``dim``-dimensional parameters; a record ``x = (index, value)`` has loss ``value x params[index]``, so its
    gradient is ``value e_index`` at every ``w`` (a Dirac gradient canary). Implements the closed-form clipping protocol
    (``dpjax.engine.problem.ClosedFormClipping``): a clipped sum of ``n`` records costs O(n), not O(n dim), so 10^6
    canaries fit in one run."""

    dim: int

    def __post_init__(self):
        v.check_int("dim", self.dim, min_value=1)

    @staticmethod
    def _split(x):
        return x[..., 0].astype(jnp.int32), x[..., 1]

    def loss(self, params, x, y):
        del y
        index, value = self._split(x)
        return value * params[index]

    def init_params(self, key):
        del key
        return jnp.zeros((self.dim,), jnp.float32)

    def evaluate(self, params, x, y, mask=None):
        index, value = self._split(x)
        return {"loss": jnp.mean(value * params[index])}

    def row_sq_norms(self, x):
        return jnp.square(self._split(x)[1])

    def weighted_grad_sum(self, params, x, y, weights, clip_norm=None, row_sq_norms=None):
        index, value = self._split(x)
        sq = self.row_sq_norms(x) if row_sq_norms is None else row_sq_norms
        scale = jnp.ones_like(sq) if clip_norm is None else jnp.minimum(
            1.0, clip_norm / jnp.sqrt(jnp.maximum(sq, 1e-30)))
        return jnp.zeros((self.dim,), jnp.float32).at[index].add(weights * scale * value)


# ----------------------------------------------------------------------------- mutants (wrapped parts)
@dataclasses.dataclass(frozen=True)
class SkipClip:
    """A clipper that clips nothing (its clip field set to inf) but reports ``inner``'s honest bound, so the noise is
    calibrated to a clip that never happened."""
    inner: Any

    roles = ("clipper",)

    def init(self, params, ctx):
        return self.inner.init(params, ctx)

    def update(self, units, state, ctx):
        field = self.inner.clip_field
        hp = ctx.hparams
        loose = ctx._replace(hparams=dataclasses.replace(hp, **{field: jnp.full_like(getattr(hp, field), jnp.inf)}))
        message, state = self.inner.update(units, state, loose)
        honest = self.inner.bound_of(hp, units.denominator)
        return message.replace(contribution_bound=honest.contribution_bound), state

    def bound_of(self, hparams, denominator=1.0):
        return self.inner.bound_of(hparams, denominator)

    def event(self, hparams):
        return self.inner.event(hparams)


@dataclasses.dataclass(frozen=True)
class HalfNoise:
    """A privatizer that adds ``inner``'s noise with half its multiplier (the events still report the full one)."""
    inner: Any

    roles = ("privatizer",)

    def init(self, params, ctx):
        return self.inner.init(params, ctx)

    def update(self, message, state, ctx):
        field = self.inner.noise_field
        hp = ctx.hparams
        halved = ctx._replace(hparams=dataclasses.replace(hp, **{field: getattr(hp, field) / 2}))
        return self.inner.update(message, state, halved)

    def events(self, hparams, num_rounds):
        return self.inner.events(hparams, num_rounds)


def mutant_family(family, mutant: str):
    """``family`` with one part wrapped (``"no-clip"``: ``SkipClip`` around the clipper; ``"half-noise"``: ``HalfNoise``
    around the privatizer); same fields, same step otherwise."""
    v.check_choice("mutant", mutant, MUTANTS)
    base = type(family)

    def parts(self, shape):
        p = base.parts(self, shape)
        if mutant == "no-clip":
            return p.with_role("clipper", SkipClip)
        return p.with_role("privatizer", HalfNoise)

    cls = type(f"{base.__name__}[{mutant}]", (base,), {"parts": parts, "__module__": __name__})
    return cls(**{f.name: getattr(family, f.name) for f in dataclasses.fields(family) if f.init})


# ----------------------------------------------------------------------------- the audit
@dataclasses.dataclass(frozen=True)
class TrainingAudit:
    """One audited run: the family (``mutant`` None = honest), its certificate and the one-run bound."""
    family: str
    mutant: str | None
    canaries: int
    rounds: int
    noise_multiplier: float
    clip_norm: float
    canary_scale: float
    delta: float
    certified_epsilon: float
    accountant: str
    bound: one_run.OneRunBound
    seed: int
    seconds: float

    @property
    def passed(self) -> bool:
        """Honest: the bound does not exceed the certificate; mutant: it does (caught)."""
        exceeds = self.bound.epsilon > self.certified_epsilon
        return exceeds if self.mutant else not exceeds

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bound"] = self.bound.as_dict()
        return d | {"lower_bound": self.bound.epsilon, "passed": self.passed}


def build_family(name: str, canaries: int, rounds: int):
    """The registered family at full batch over ``canaries`` Dirac records for ``rounds`` rounds."""
    v.check_choice("family", name, FAMILIES)
    problem = DiracProbe(canaries)
    if name == "dpsgd-general":
        from dpjax.algorithms.dpsgd_general import DpSgdGeneral
        return DpSgdGeneral(problem, rounds, 1, canaries, 1, sampling="shuffle")
    if name == "dp-scaffold":  # one silo, one local step on every canary: its control variates cancel (c_i = c)
        from dpjax.algorithms.dp_scaffold import DpScaffold
        return DpScaffold(problem, rounds, 1, 1, canaries)
    from dpjax.algorithms.isrl_mbsgd import NoisyMbSgd
    return NoisyMbSgd(problem, rounds, canaries)


def _hparams(name: str, noise_multiplier: float, clip_norm: float):
    if name == "dpsgd-general":
        from dpjax.algorithms.dpsgd_general import DpSgdHParams
        return DpSgdHParams.create(1.0, noise_multiplier, clip_norm)
    if name == "dp-scaffold":
        from dpjax.algorithms.dp_scaffold import ScaffoldHParams
        return ScaffoldHParams.create(1.0, 1.0, noise_multiplier, clip_norm)
    from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
    return MbSgdHParams.create(1.0, noise_multiplier, clip_norm)


def training_audit(family: str = "dpsgd-general", mutant: str | None = None, *, canaries: int = 1_000_000,
                   rounds: int = 4, noise_multiplier: float = 4.0, clip_norm: float = 1.0, canary_scale: float = 100.0,
                   delta: float = 1e-9, confidence: float = 0.95, seed: int = 0,
                   fractions=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1)) -> TrainingAudit:
    """Trains ``family`` (or its ``mutant``) once on ``canaries`` Dirac canaries of random signs and returns the one-run
    epsilon lower bound beside the family's certified epsilon (module docstring).

    Defaults: full batch, 4 rounds, noise multiplier 4 (GDP ``mu = sqrt(4)/4 = 0.5`` per record for both families:
    DP-SGD-General's ``N(0, (2 C sigma)^2)`` on the sum, ISRL's ``sigma x 2C/K`` on the mean)."""
    v.check_choice("family", family, FAMILIES)
    if mutant is not None:
        v.check_choice("mutant", mutant, MUTANTS)
    canaries = v.check_int("canaries", canaries, min_value=2, max_value=2**24)  # float32 holds the index exactly
    rounds = v.check_int("rounds", rounds, min_value=1, max_value=MAX_ROUNDS)
    v.check_positive("noise_multiplier", noise_multiplier)
    v.check_positive("clip_norm", clip_norm)
    v.check_positive("canary_scale", canary_scale)
    v.check_open_unit("delta", delta)
    v.check_open_unit("confidence", confidence)
    v.check_seed("seed", seed)
    if 2 * canaries * delta >= 1 - confidence:
        raise ValueError(f"delta={delta!r} is too large for canaries={canaries}: the bound's delta term "
                         f"2 m delta = {2 * canaries * delta:.3g} must be below 1 - confidence = {1 - confidence:.3g}")
    from dpjax.auditing.execute import run_family
    from dpjax.engine.silos import SiloData
    start = time.perf_counter()
    honest = build_family(family, canaries, rounds)
    hparams = _hparams(family, noise_multiplier, clip_norm)
    report = honest.privacy([canaries], hparams).epsilon(delta, ACCOUNTANTS[family])
    run = honest if mutant is None else mutant_family(honest, mutant)

    stream = FAMILIES.index(family)  # each family's run gets its own secrets and noise (independent audits)
    rng = np.random.default_rng([seed, stream])
    secrets = rng.choice(np.array([-1, 1], np.int8), canaries)
    x = np.stack([np.arange(canaries, dtype=np.float32), secrets.astype(np.float32) * canary_scale * clip_norm], axis=1)
    data = SiloData.from_silos([x], [np.zeros(canaries, np.float32)])
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), 0x0AE1), stream)
    result = run_family(run, data, hparams, key[None], params=jnp.zeros((canaries,), jnp.float32), eval_every=rounds)
    final = np.asarray(result.eval_metrics["params"])[0, -1]
    scores = -final.astype(np.float64)  # w_0 = 0
    bound = one_run.audit_scores(scores, secrets.astype(np.int64), delta, confidence,
                                 plan=one_run.guess_plan(canaries, fractions))
    return TrainingAudit(family, mutant, canaries, rounds, float(noise_multiplier), float(clip_norm),
                         float(canary_scale), float(delta), float(report.epsilon), report.accountant, bound, seed,
                         time.perf_counter() - start)


def format_row(a: TrainingAudit) -> str:
    what = "honest" if a.mutant is None else f"mutant {a.mutant}"
    verdict = ("caught" if a.passed else "NOT caught") if a.mutant else ("PASS" if a.passed else "FAIL")
    return (f"{a.family} ({what}): certified eps {a.certified_epsilon:.3f} ({a.accountant}, delta {a.delta:g}), "
            f"one-run lower bound {a.bound.epsilon:.3f} ({a.bound.v}/{a.bound.r} correct of {a.canaries} canaries) "
            f"-> {verdict} ({a.seconds:.1f} s)")
