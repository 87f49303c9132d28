"""Shuffle-private stochastic convex optimisation (Cheu, Joseph, Mao & Peng, ICLR 2022, Section 4 and Appendix C) as two
dpjax families, each a declaration of parts (``dpjax.engine.chain``).

* ``ShuffleSgd`` -- projected (stochastic) gradient descent whose gradient is the P_vec sum of the round's users'
  gradients divided by the public number of users: P_SGD (Algorithm 3, Theorem 4.1: fresh users every round), P_GD
  (Algorithm 5, Lemma B.6 / Theorem 4.9: all users every round, on the Moreau envelope for non-smooth losses) and its
  phased strongly convex version (Theorem 4.9 with Lemma B.7). Update ``theta <- Proj(theta - eta g)`` (the paper prints
  ``+ eta g``, a sign error); output: the average of ``theta_0..theta_{T-1}`` of the last phase (``output="average"``,
  as printed) or the last iterate.
* ``ShuffleAcsa`` -- AC-SA (Lan 2012) with the same gradient oracle: P_AGD (Algorithm 4, Theorem 4.3), P_AGD on the
  Moreau envelope (Theorem 4.7), the phased strongly convex reduction (Theorem 4.8), and pan-private AC-SA (Appendix C,
  Algorithm 6: two Gaussian draws per batch instead of P_vec). The server is ``dpjax.parts.acsa.AcsaServer`` with mu = 0
  and ``acsa_schedule="lan"`` (default: alpha_t = 2/(t+1), step 1/L_t = t/(2 nu), the Ghadimi-Lan form of Lan's stepsize
  policy) or ``"paper"`` (Theorem 4.3 as printed: alpha_t = 2/(t+2), 1/L_t = (t+1)/nu with nu = (T+2)^{3/2} sigma/D +
  beta); a phase restarts it from the previous phase's output.

The round (``parts``)::

    UserWindows     users [start_r, start_r + batch_r) of the one silo (public per-round hparams)
    UserGradients   each user's gradient (or Moreau-envelope gradient), flattened
    ClipVectors     each projected onto the ball of radius L = clip_norm (sensitivity 2L)
    privatizer      PvecRandomizer (P_vec randomizers + shuffler; count or bit level) or
                    UserGaussian (exact / central / local / pan-private / matched surrogate)
    aggregator      PvecAnalyzer or BatchMean: divided by the public batch_r
    server          PhasedSgdServer (ShuffleSgd) or AcsaServer (ShuffleAcsa), fed the flat update

Users. The n users are the n records of ONE silo (``SiloData`` with ``num_silos=1``), in a fixed order that is the
protocol's user stream (the data are i.i.d., so any public order is a valid stream); one static shape serves P_SGD
(``start_r = r B``), P_GD (``start_r = 0``, ``batch_r = n``) and every phased schedule. Count-level P_vec
(``aggregator="pvec"``, the fast default) simulates the round's users as one count, equal in distribution to m separate
randomizers; ``"pvec-bits"`` materialises and shuffles every one-bit message (``bit_buffer=(g_max, b_max)``; small
demonstrations), see ``dpjax.parts.pvec``. Other aggregators: ``"exact"`` (the non-private twin), ``"central-gaussian"``
/ ``"local-gaussian"`` (the Gaussian baselines: N(0, (z 2L)^2 I) on the sum, or on every user's message),
``"pan-gaussian"`` (Algorithm 6) and ``"matched-gaussian"`` (a variance-matched Gaussian surrogate of P_vec for fast
rate experiments; certifies nothing). Gaussian noise is a per-round ``noise_multiplier`` z (std / sensitivity 2L).

Privacy (``privacy``, from the privatizer's event; the details:
``dpjax.accounting.sco_transcript.transcript_report(family.dp_plan(...))``): replace-one of one user. Each phase's P_vec
certificate comes from the (g, b, p) the run holds (at its worst round); rounds with fresh users compose in parallel, a
fully interactive phase composes its T rounds (optimal or advanced composition); calibration is the one routine over the
calculator's parameters. Constructors (classmethods named after the protocols) return ``(family, hparams, plan)`` with
the paper's parameter choices from ``dpjax.accounting.shuffle_sco``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting import shuffle_sco as sco_acc
from dpjax.accounting.sco_transcript import grouped_trials, matched_noise_std
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.silos import SiloData
from dpjax.parts.acsa import AcsaSchedule, AcsaServer
from dpjax.parts.clipping import ClipVectors
from dpjax.parts.pvec import PvecAnalyzer, PvecRandomizer
from dpjax.parts.servers import Averager
from dpjax.parts.users import BatchMean, FlatUpdates, PhasedSgdServer, UserGaussian, UserGradients, UserWindows
from dpjax.primitives import shuffle_protocols

PyTree = Any
AGGREGATORS = ("pvec", "pvec-bits", "exact", "central-gaussian", "local-gaussian", "pan-gaussian",
               "matched-gaussian")
#: the Gaussian aggregators' mechanism (``dpjax.parts.users.UserGaussian``)
_GAUSSIAN = {"exact": "none", "central-gaussian": "central", "local-gaussian": "local", "pan-gaussian": "pan-private",
             "matched-gaussian": "surrogate"}
_EXACT_F32 = 2**24


# ----------------------------------------------------------------------------- Per-round schedule (hparams)
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScoHParams:
    """Per-run, per-round public schedule (every leaf ``[T]`` except ``clip_norm``).

    ``start``/``batch``: the round's users are rows ``[start, start + batch)``; ``stage_round``: 1 on a phase's first
    round, counting up inside it; ``step``: eta (``ShuffleSgd``) or the AC-SA constant nu (``ShuffleAcsa``);
    ``smoothing``: the Moreau parameter (used when the family is ``smoothed``); ``pvec``: P_vec's (g, b, p) per round;
    ``noise_multiplier``: the Gaussian aggregators' z per round (std / sensitivity 2L of the round's sum; for local
    noise, of each user's message); ``clip_norm``: L, the users' norm bound."""

    start: Any
    batch: Any
    stage_round: Any
    step: Any
    smoothing: Any
    pvec: shuffle_protocols.PvecParams
    noise_multiplier: Any
    clip_norm: Any

    #: sweep axes (``dpjax.sweep``): one run's single-phase schedule, built by ``single_phase``
    #: (``interactive``: 0 = fresh users every round as in P_SGD/P_AGD, 1 = the same users every
    #: round as in P_GD); the P_vec axes default to "no P_vec" (Gaussian and exact aggregators).
    SWEEP_AXES: ClassVar[dict] = {"batch": dataclasses.MISSING, "step": dataclasses.MISSING, "interactive": 0,
                                  "smoothing": 0.0, "noise_multiplier": 0.0, "clip_norm": 1.0,
                                  "pvec.granularity": 1, "pvec.trials": 0, "pvec.probability": 0.0}

    @classmethod
    def single_phase(cls, num_rounds: int, batch: int, step, *, interactive: int = 0, smoothing=0.0,
                     noise_multiplier=0.0, clip_norm=1.0, pvec: shuffle_protocols.PvecParams | None = None,
                     start: int = 0) -> "ScoHParams":
        """One phase of ``num_rounds`` rounds of ``batch`` users from row ``start``: fresh users every round
        (``interactive=0``; rows ``[start + r batch, start + (r+1) batch)``) or the same users (``interactive=1``).
        Scalars are repeated over the rounds; ``pvec`` may hold scalars or per-round arrays (a calibration's result)."""
        T = _validate.check_int("num_rounds", num_rounds, min_value=1)
        # sweep grids hold floats: integral values are accepted for the integer axes
        as_int = lambda v: int(v) if isinstance(v, (float, np.floating)) and float(v).is_integer() else v  # noqa: E731
        B = _validate.check_int("batch", as_int(batch), min_value=1)
        inter = _validate.check_choice("interactive", as_int(interactive), (0, 1))
        start = as_int(start)
        step, smoothing, noise = (np.broadcast_to(np.asarray(v, np.float64), (T,)) for v in (step, smoothing,
                                                                                            noise_multiplier))
        for name, v, low in (("step", step, 0.0), ("smoothing", smoothing, None), ("noise_multiplier", noise, None)):
            if not np.all(np.isfinite(v)) or np.any(v < 0) or (low is not None and np.any(v <= low)):
                raise ValueError(f"{name}={v.tolist()!r} must be finite and " + (">= 0" if low is None else "> 0"))
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm)
        _validate.check_int("start", start, min_value=0)
        pvec = pvec if pvec is not None else shuffle_protocols.PvecParams(1, 0, 0.0)
        pv = shuffle_protocols.PvecParams.create(*(np.broadcast_to(np.asarray(a), (T,)) for a in (
            pvec.granularity, pvec.trials, pvec.probability)))
        r = np.arange(T)
        return cls(jnp.asarray(start + (0 if inter else B) * r, jnp.int32), jnp.full((T,), B, jnp.int32),
                   jnp.asarray(r + 1, jnp.int32), jnp.asarray(step, jnp.float32), jnp.asarray(smoothing, jnp.float32),
                   pv, jnp.asarray(noise, jnp.float32), jnp.float32(clip_norm))

    @classmethod
    def from_plan(cls, plan: sco_acc.ProtocolPlan, clip_norm: float | None = None, *,
                  with_pvec: bool = True, trial_groups: int = 1) -> "ScoHParams":
        """The per-round arrays of ``plan`` with noise multipliers 0 (a family converts a plan's absolute Gaussian stds:
        ``noise_multiplier_for``); ``with_pvec=False`` stores a placeholder P_vec (1, 0, 0) for Gaussian aggregators.
        With ``trial_groups = k`` the stored trials are ceil(b/k) (the family runs k of them per user) and p = b p/(k
        ceil(b/k)) (``sco_transcript.grouped_trials``)."""
        a = plan.round_arrays()
        if not with_pvec:
            a |= {"g": [1] * plan.num_rounds, "b": [0] * plan.num_rounds, "p": [0.0] * plan.num_rounds}
        else:
            a["b"], a["p"] = zip(*(grouped_trials(b, p, trial_groups) for b, p in zip(a["b"], a["p"])))
        stage = np.zeros(plan.num_rounds, np.int32)
        for r, flag in enumerate(a["restart"]):
            stage[r] = 1 if flag else stage[r - 1] + 1
        pv = shuffle_protocols.PvecParams.create(np.asarray(a["g"]), np.asarray(a["b"]), np.asarray(a["p"]))
        # cast on the host (the same rounding as XLA's convert) and device_put: an eager jnp cast or
        # jnp.asarray compiles a program per length T
        dev = lambda v, dtype: jax.device_put(np.asarray(v, dtype))  # noqa: E731
        return cls(dev(a["start"], np.int32), dev(a["batch"], np.int32), jax.device_put(stage),
                   dev(a["step"], np.float32), dev(a["smoothing"], np.float32), pv,
                   dev(np.zeros(plan.num_rounds), np.float32),
                   dev(plan.lipschitz if clip_norm is None else clip_norm, np.float32))

    @property
    def num_rounds(self) -> int:
        return int(np.shape(self.start)[-1])

    @property
    def schedule(self) -> AcsaSchedule:
        """AC-SA's schedule (``dpjax.parts.acsa``): mu = lam = 0, the stage rounds, nu = ``step``."""
        return AcsaSchedule(jnp.float32(0.0), jnp.float32(0.0), self.stage_round, self.step)


# ----------------------------------------------------------------------------- The families' shared declaration
@dataclasses.dataclass(frozen=True)
class _ShuffleScoBase(ChainFamily):
    problem: Any
    num_rounds: int
    max_batch: int
    aggregator: str = "pvec"
    smoothed: bool = False
    projection_radius: float | None = 1.0
    max_granularity: int = 2**12
    bit_buffer: tuple[int, int] | None = None
    honest_frac: float = 1.0
    trial_groups: int = 1

    hparams_type = ScoHParams

    def __post_init__(self):
        self.check_common()
        _validate.check_int("max_batch", self.max_batch, min_value=1)
        _validate.check_choice("aggregator", self.aggregator, AGGREGATORS)
        _validate.check_int("max_granularity", self.max_granularity, min_value=1, max_value=_EXACT_F32 - 1)
        _validate.check_int("trial_groups", self.trial_groups, min_value=1)
        if self.aggregator == "pvec-bits" and self.trial_groups != 1:
            raise ValueError(f"trial_groups={self.trial_groups}: the bit-level simulator sends b bits per user")
        if self.aggregator == "pvec-bits" and self.bit_buffer is None:
            raise ValueError("bit_buffer=None: aggregator='pvec-bits' needs static (g_max, b_max) bit buffers")
        if self.smoothed and not hasattr(self.problem, "prox"):
            raise ValueError(f"problem={self.problem!r} has no closed-form prox; smoothed=True needs one")
        h = _validate.check_real("honest_frac", self.honest_frac)
        if not 0 < h <= 1:
            raise ValueError(f"honest_frac={self.honest_frac!r} must be in (0, 1]")

    @property
    def dim(self) -> int:
        """d, the number of parameters: the dimension of every P_vec input."""
        return _dim(self.problem)

    # -- the round ---------------------------------------------------------
    def server(self):
        """The server optimizer part (the flat update is unravelled by ``FlatUpdates``); each subclass
        (``ShuffleSgd``, ``ShuffleAcsa``) declares its own; the shared base has none to compose."""
        raise TypeError(f"{type(self).__name__} is the shared base of the shuffle-SCO families and has no server "
                        "part: use ShuffleSgd or ShuffleAcsa, or declare server() in a subclass")

    def parts(self, shape: DataShape) -> Parts:
        if self.aggregator in ("pvec", "pvec-bits"):
            level = "bits" if self.aggregator == "pvec-bits" else "counts"
            privatizer = PvecRandomizer(self.dim, self.max_granularity, per_round=True, keys="noise-stream",
                                        level=level, trial_groups=self.trial_groups, honest_frac=self.honest_frac,
                                        bit_buffer=self.bit_buffer)
            aggregator = PvecAnalyzer(per_round=True, level=level, batch_field="batch")
        else:
            privatizer, aggregator = UserGaussian(_GAUSSIAN[self.aggregator]), BatchMean()
        return Parts(UserWindows(self.max_batch),
                     (UserGradients(self.problem, self.smoothed), ClipVectors("clip_norm"), privatizer, aggregator,
                      FlatUpdates(self.server()), Averager("last")))

    def noise_multiplier_for(self, noise_std, hparams: ScoHParams, silo_sizes=None) -> np.ndarray:
        """Per-round noise multipliers whose std on the round's sum is ``noise_std`` (absolute, per
        round: a plan's calibration): ``ChainFamily.noise_multiplier_for`` for the round's sum, whose
        privatizer (``UserGaussian.multiplier_for``) also knows the sqrt(batch_r) of local noise;
        the sensitivity is the family's ``message_sensitivity`` (2L, from the clipper)."""
        return self._gaussian().multiplier_for(noise_std, np.asarray(hparams.batch),
                                               self.message_sensitivity(hparams, silo_sizes or [self.max_batch]))

    def noise_std_of(self, hparams: ScoHParams, silo_sizes=None) -> np.ndarray:
        """The per-round std of the Gaussian noise the run adds to the round's sum (host, float64):
        ``noise_multiplier_for``'s inverse (``UserGaussian.sum_std``)."""
        return self._gaussian().sum_std(hparams.noise_multiplier, np.asarray(hparams.batch),
                                        self.message_sensitivity(hparams, silo_sizes or [self.max_batch]))

    def _gaussian(self) -> UserGaussian:
        privatizer = self.parts(DataShape(1, self.max_batch)).role("privatizer")
        if not isinstance(privatizer, UserGaussian) or privatizer.mechanism == "none":
            raise ValueError(f"aggregator={self.aggregator!r} adds no Gaussian noise")
        return privatizer

    @classmethod
    def _from_plan(cls, problem, plan, *, aggregator, smoothed, radius, **kwargs):
        """``(family, hparams, plan)`` running ``plan`` (max_batch, max_granularity from the plan)."""
        mb = max(p.batch for p in plan.phases)
        gmax = max([p.pvec.g for p in plan.phases if p.pvec] + [kwargs.pop("max_granularity", 4)])
        bmax = max([p.pvec.b for p in plan.phases if p.pvec] + [1])
        groups = kwargs.pop("trial_groups", -(-bmax // shuffle_protocols.MAX_TRIALS))
        fam = cls(problem, plan.num_rounds, mb, aggregator, smoothed, radius, max_granularity=gmax,
                  trial_groups=groups, **kwargs)
        hp = ScoHParams.from_plan(plan, with_pvec=aggregator in ("pvec", "pvec-bits"), trial_groups=groups)
        noise = matched_noise_std(plan) if aggregator == "matched-gaussian" else plan.round_arrays()["noise_std"]
        if aggregator != "exact" and any(s > 0 for s in noise):
            hp = dataclasses.replace(hp, noise_multiplier=jnp.asarray(fam.noise_multiplier_for(noise, hp)))
        return fam, hp, plan

    def hparams_from_values(self, **values) -> ScoHParams:
        """One sweep run's hparams (``ScoHParams.SWEEP_AXES``): a single phase of ``num_rounds``
        rounds (``ScoHParams.single_phase``)."""
        return ScoHParams.single_phase(self.num_rounds, **values)

    def validate(self, data: SiloData) -> None:
        if data.num_silos != 1:
            raise ValueError(f"data has {data.num_silos} silos; the n users are the records of ONE silo")


# ---------------------------------------- Projected (stochastic) gradient descent: P_SGD, P_GD, phased P_GD, baselines
@dataclasses.dataclass(frozen=True)
class ShuffleSgd(_ShuffleScoBase):
    """P_SGD (Algorithm 3), P_GD (Algorithm 5) and phased P_GD, with their Gaussian baselines.

    Args:
      problem: a dpjax problem (per-example ``loss``; ``prox`` when ``smoothed``).
      num_rounds: T (all phases).
      max_batch: static upper bound on the users of a round (n for P_GD).
      aggregator: see the module docstring (``"pvec"``: count-level P_vec, default).
      smoothed: run on the Moreau envelope with the per-round parameter ``hparams.smoothing``.
      output: ``"average"`` of theta_0..theta_{T-1} of the last phase (Algorithms 3, 5) or ``"last"``.
      projection_radius: Theta = ball of this radius (diameter D = 2 radius).
      max_granularity: static bound on P_vec's g (chunking of the count-level simulation).
      bit_buffer: ``(g_max, b_max)`` for ``aggregator="pvec-bits"``.
      honest_frac: robust shuffle privacy: the fraction of a round's users assumed honest.

    The run's params are the protocol's output so far (``PhasedSgdServer``)."""

    output: str = "average"

    def __post_init__(self):
        super().__post_init__()
        _validate.check_choice("output", self.output, ("average", "last"))

    def server(self) -> PhasedSgdServer:
        return PhasedSgdServer(self.output, self.projection_radius)

    # -- constructors with the paper's parameter choices ---------------------
    @classmethod
    def p_sgd(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0, mode="lemma_opt",
              aggregator="pvec", **kwargs):
        """P_SGD (Theorem 4.1): B = sqrt(d) ln(d/delta)/eps, T = floor(n/B), eta = D/(L_G sqrt T).
        Returns ``(family, hparams, plan)``."""
        plan = sco_acc.p_sgd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, mode=mode)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=False, radius=radius, **kwargs)

    @classmethod
    def p_gd(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0, smoothness=None, mode="lemma_opt",
             composition=None, rounds=None, aggregator="pvec", **kwargs):
        """P_GD (Lemma B.6 / Theorem 4.9): all users every round, T = min(n, eps^2 n^2/(d ln^2(nd/delta))), eta = D/(L
        sqrt T), per-round budget from the composition; non-smooth losses (``smoothness=None``) run on the Moreau
        envelope. ``rounds`` overrides T (T = n full-batch rounds cost n^2 gradients)."""
        plan = sco_acc.p_gd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, smoothness, mode=mode,
                                 composition=composition, rounds=rounds)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=smoothness is None, radius=radius,
                              **kwargs)

    @classmethod
    def p_gd_phased(cls, problem, n, epsilon, delta, lam, *, lipschitz=1.0, radius=1.0, smoothness=None,
                    mode="lemma_opt", phases=None, rounds=None, aggregator="pvec", **kwargs):
        """Phased P_GD for lam-strongly convex losses (Theorem 4.9 with Lemma B.7); ``rounds`` caps each phase's T."""
        def conv(m, diameter, start):
            t = None if rounds is None else min(rounds, sco_acc.pgd_rounds(m, _dim(problem), epsilon, delta))
            return sco_acc.p_gd_plan(m, _dim(problem), epsilon, delta, lipschitz, diameter, smoothness, mode=mode,
                                     start=start, rounds=t)

        plan = sco_acc.phased_plan(conv, n, lam, phases=phases, diameter=2 * radius)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=smoothness is None, radius=radius,
                              **kwargs)

    @classmethod
    def local_baseline(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0):
        """Local-DP one-pass SGD (each user's own Gaussian noise, B = 1)."""
        plan = sco_acc.local_sgd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius)
        return cls._from_plan(problem, plan, aggregator="local-gaussian", smoothed=False, radius=radius)


# ------------------------------------------------------------------- AC-SA: P_AGD, smoothed P_AGD, phased, pan-private
@dataclasses.dataclass(frozen=True)
class ShuffleAcsa(_ShuffleScoBase):
    """P_AGD (Algorithm 4), smoothed P_AGD (Theorem 4.7), the phased reduction (Theorem 4.8) and pan-private AC-SA
    (Algorithm 6, ``aggregator="pan-gaussian"``). Arguments as ``ShuffleSgd`` (no ``output``: AC-SA returns theta^ag,
    the run's params), plus ``acsa_schedule``: ``"lan"`` (default) or ``"paper"`` (Theorem 4.3's alpha_t, L_t;
    ``dpjax.parts.acsa.acsa_constants``); the hparams' ``step`` is that schedule's nu (the constructors' ``schedule=``
    sets both)."""

    acsa_schedule: str = "lan"

    def __post_init__(self):
        super().__post_init__()
        _validate.check_choice("acsa_schedule", self.acsa_schedule, sco_acc.ACSA_SCHEDULES)

    def server(self) -> AcsaServer:
        # ScoHParams.schedule: mu = lam = 0, a stage per phase, nu = the hparams' step
        return AcsaServer(self.num_rounds, self.projection_radius, self.acsa_schedule, "schedule")

    @classmethod
    def p_agd(cls, problem, n, epsilon, delta, *, smoothness, lipschitz=1.0, radius=1.0, mode="lemma_opt",
              aggregator="pvec", schedule="lan", **kwargs):
        """P_AGD (Theorem 4.3): B = n^{3/5} d^{1/5} (L ln(d/delta))^{2/5}/(eps beta D)^{2/5}, T = floor(n/B),
        AC-SA constant nu = max(2 beta, (T+2)^{3/2} sigma_or/(sqrt 6 D)) (``schedule="lan"``) or
        Theorem 4.3's (T+2)^{3/2} sigma_or/D + beta (``schedule="paper"``)."""
        plan = sco_acc.p_agd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, smoothness, mode=mode,
                                  schedule=schedule)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=False, radius=radius,
                              acsa_schedule=schedule, **kwargs)

    @classmethod
    def p_agd_smoothed(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0, mode="lemma_opt",
                       aggregator="pvec", schedule="lan", **kwargs):
        """P_AGD on the beta_s-Moreau envelope (Theorem 4.7), beta_s = (eps n)^{2/3} L/(d^{1/3} D ln^{2/3}(d/delta))."""
        plan = sco_acc.p_agd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, smoothed=True, mode=mode,
                                  schedule=schedule)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=True, radius=radius,
                              acsa_schedule=schedule, **kwargs)

    @classmethod
    def phased(cls, problem, n, epsilon, delta, lam, *, smoothness=None, lipschitz=1.0, radius=1.0,
               mode="lemma_opt", phases=None, aggregator="pvec", schedule="lan", **kwargs):
        """Theorem 4.8: k disjoint groups, phase i runs (smoothed, if ``smoothness`` is None) P_AGD from the
        previous output with distance D_{i-1}."""
        d = _dim(problem)
        plan = sco_acc.phased_plan(
            lambda m, diameter, start: sco_acc.p_agd_plan(m, d, epsilon, delta, lipschitz, diameter, smoothness,
                                                          smoothed=smoothness is None, mode=mode, start=start,
                                                          schedule=schedule),
            n, lam, phases=phases, diameter=2 * radius)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=smoothness is None, radius=radius,
                              acsa_schedule=schedule, **kwargs)

    @classmethod
    def pan_private(cls, problem, n, epsilon, delta, *, smoothness=None, lipschitz=1.0, radius=1.0, lam=None,
                    phases=None, schedule="lan"):
        """Pan-private AC-SA (Algorithm 6, Theorem C.3), smoothed when ``smoothness`` is None, phased when
        ``lam`` is given."""
        d = _dim(problem)

        def conv(m, diameter=2 * radius, start=0):
            return sco_acc.pan_private_plan(m, d, epsilon, delta, lipschitz, diameter, smoothness,
                                            smoothed=smoothness is None, start=start, schedule=schedule)

        plan = conv(n) if lam is None else sco_acc.phased_plan(conv, n, lam, phases=phases, diameter=2 * radius)
        return cls._from_plan(problem, plan, aggregator="pan-gaussian", smoothed=smoothness is None, radius=radius,
                              acsa_schedule=schedule)


def _dim(problem) -> int:
    shapes = jax.eval_shape(problem.init_params, jax.random.key(0))
    return int(sum(int(np.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes)))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

# One sweep run is one phase (``ScoHParams.SWEEP_AXES``); the non-private twin is ``aggregator="exact"``.
register_family("shuffle-sgd", ShuffleSgd,
                "P_SGD / P_GD / phased P_GD with shuffle-private P_vec sums (Cheu et al.), Gaussian baselines")
register_family("shuffle-acsa", ShuffleAcsa, "P_AGD, smoothed and phased P_AGD, pan-private AC-SA (Cheu et al.)")
