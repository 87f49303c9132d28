"""Shuffle-private stochastic convex optimisation (Cheu, Joseph, Mao & Peng,
ICLR 2022, Section 4 and Appendix C) as two dpjax families.

* ``ShuffleSgd`` -- projected (stochastic) gradient descent whose gradient is
  the P_vec sum of the round's users' gradients divided by the public number
  of users: P_SGD (Algorithm 3, Theorem 4.1: fresh users every round), P_GD
  (Algorithm 5, Lemma B.6 / Theorem 4.9: all users every round, on the Moreau
  envelope for non-smooth losses) and its phased strongly convex version
  (Theorem 4.9 with Lemma B.7). Update ``theta <- Proj(theta - eta g)`` (the
  paper prints ``+ eta g``, a sign error); output: the average of
  ``theta_0..theta_{T-1}`` of the last phase (``output="average"``, as printed)
  or the last iterate.
* ``ShuffleAcsa`` -- AC-SA (Lan 2012) with the same gradient oracle: P_AGD
  (Algorithm 4, Theorem 4.3), P_AGD on the Moreau envelope (Theorem 4.7), the
  phased strongly convex reduction (Theorem 4.8), and pan-private AC-SA
  (Appendix C, Algorithm 6: two Gaussian draws per batch instead of P_vec).
  The AC-SA round is ``dpjax.algorithms.accelerated.acsa_round`` with
  mu = 0 and ``acsa_schedule="lan"`` (default: alpha_t = 2/(t+1), step
  1/L_t = t/(2 nu), the Ghadimi-Lan form of Lan's stepsize policy) or
  ``"paper"`` (Theorem 4.3 as printed: alpha_t = 2/(t+2), 1/L_t = (t+1)/nu
  with nu = (T+2)^{3/2} sigma/D + beta); a phase restarts it from the previous
  phase's output.

Users. The n users are the n records of ONE silo (``SiloData`` with
``num_silos=1``), in a fixed order that is the protocol's user stream (the
data are i.i.d., so any public order is a valid stream). Round ``r`` uses the
rows ``[start_r, start_r + batch_r)`` (public per-round arrays in the hparams),
so one static shape serves P_SGD (``start_r = r B``), P_GD (``start_r = 0``,
``batch_r = n``) and every phased schedule (groups of n/k users). This is
the paper's model exactly: each user sends its own P_vec messages, and since
a sum of independent Bin(b, p) is Bin(m b, p), simulating the round's users as
one count (``pvec_user_counts``) is equal in distribution to m separate
randomizers (``aggregator="pvec"``, count level, the fast default). Rounds
with more than 2^24/g users are summed in chunks so that rounded sums stay
exact in float32. ``aggregator="pvec-bits"`` materialises every one-bit
message, shuffles them with a uniform permutation and runs the analyzer on
the shuffled list (needs static ``bit_buffer=(g_max, b_max)``; tests and small
demonstrations only).

Other aggregators: ``"exact"`` (the non-private twin: the exact sum),
``"central-gaussian"`` / ``"local-gaussian"`` (the Gaussian baselines of the
validation suite: one N(0, noise_std^2 I) on the sum, which for local DP is the
sum of the users' own N(0, sigma_l^2 I) with noise_std = sqrt(B) sigma_l),
``"pan-gaussian"`` (Algorithm 6: two independent N(0, noise_std^2 I) on the
sum, noise_std = B zeta) and ``"matched-gaussian"`` (a variance-matched
Gaussian surrogate of P_vec for fast rate experiments; certifies nothing).

Per-example gradients are ``vmap(grad(loss))`` over the round's users,
projected onto the ball of radius ``clip_norm`` (= L, a no-op for an
L-Lipschitz loss; it makes P_vec's norm bound hold for any data). With
``smoothed=True`` the per-user gradient is that of the Moreau envelope,
``s (theta - prox_{loss/s}(theta))`` with the round's traced ``s`` (the
problem needs a closed-form ``prox(params, x, y, beta)``,
``dpjax.algorithms.smoothing``).

Privacy (``privacy``; ``report`` gives the details): replace-one of one user.
Each phase's P_vec certificate comes from the (g, b, p) the run holds
(``dpjax.accounting.shuffle_sco.transcript_epsilon``): rounds with fresh
users compose in parallel, a fully interactive phase composes its T rounds
(optimal or advanced composition). Constructors (classmethods named after the
protocols) return ``(family, hparams, plan)`` with the paper's parameter
choices from ``dpjax.accounting.shuffle_sco``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from dpjax import _validate, keys
from dpjax.accounting import gdp
from dpjax.accounting import pvec as pvec_acc
from dpjax.accounting import shuffle_sco as sco_acc
from dpjax.accounting.events import PrivacyReport, SdpReport
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, ReportPrivacy
from dpjax.algorithms.accelerated import ACSA_SCHEDULES, AcceleratedState, AcsaSchedule, acsa_round
from dpjax.engine.contract import FamilyBase
from dpjax.engine.silos import SiloData
from dpjax.primitives import shuffle_protocols

PyTree = Any
AGGREGATORS = ("pvec", "pvec-bits", "exact", "central-gaussian", "local-gaussian", "pan-gaussian",
               "matched-gaussian")
_EXACT_F32 = 2**24


# ---------------------------------------------------------------------------
# Per-round schedule (hparams) and the gradient oracle
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ScoHParams:
    """Per-run, per-round public schedule (every leaf ``[T]`` except ``clip_norm``).

    ``start``/``batch``: the round's users are rows ``[start, start + batch)``;
    ``stage_round``: 1 on a phase's first round, counting up inside it;
    ``step``: eta (``ShuffleSgd``) or the AC-SA constant nu (``ShuffleAcsa``);
    ``smoothing``: the Moreau parameter (used when the family is ``smoothed``);
    ``pvec``: P_vec's (g, b, p) per round; ``noise_std``: Gaussian aggregators'
    std on the round's sum; ``clip_norm``: L, P_vec's norm bound.
    """

    start: Any
    batch: Any
    stage_round: Any
    step: Any
    smoothing: Any
    pvec: shuffle_protocols.PvecParams
    noise_std: Any
    clip_norm: Any

    #: sweep axes (``dpjax.sweep``): one run's single-phase schedule, built by ``single_phase``
    #: (``interactive``: 0 = fresh users every round as in P_SGD/P_AGD, 1 = the same users every
    #: round as in P_GD); the P_vec axes default to "no P_vec" (Gaussian and exact aggregators).
    SWEEP_AXES: ClassVar[dict] = {"batch": dataclasses.MISSING, "step": dataclasses.MISSING, "interactive": 0,
                                  "smoothing": 0.0, "noise_std": 0.0, "clip_norm": 1.0, "pvec.granularity": 1,
                                  "pvec.trials": 0, "pvec.probability": 0.0}

    @classmethod
    def single_phase(cls, num_rounds: int, batch: int, step, *, interactive: int = 0, smoothing=0.0,
                     noise_std=0.0, clip_norm=1.0, pvec: shuffle_protocols.PvecParams | None = None,
                     start: int = 0) -> "ScoHParams":
        """One phase of ``num_rounds`` rounds of ``batch`` users from row ``start``: fresh users every
        round (``interactive=0``; rows ``[start + r batch, start + (r+1) batch)``) or the same users
        (``interactive=1``). Scalars are repeated over the rounds; ``pvec`` may hold scalars or
        per-round arrays (a calibration's result)."""
        T = _validate.check_int("num_rounds", num_rounds, min_value=1)
        # sweep grids hold floats: integral values are accepted for the integer axes
        as_int = lambda v: int(v) if isinstance(v, (float, np.floating)) and float(v).is_integer() else v  # noqa: E731
        B = _validate.check_int("batch", as_int(batch), min_value=1)
        inter = _validate.check_choice("interactive", as_int(interactive), (0, 1))
        start = as_int(start)
        step, smoothing, noise_std = (np.broadcast_to(np.asarray(v, np.float64), (T,)) for v in (step, smoothing,
                                                                                                noise_std))
        for name, v, low in (("step", step, 0.0), ("smoothing", smoothing, None), ("noise_std", noise_std, None)):
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
                   pv, jnp.asarray(noise_std, jnp.float32), jnp.float32(clip_norm))

    @classmethod
    def from_plan(cls, plan: sco_acc.ProtocolPlan, clip_norm: float | None = None, *,
                  with_pvec: bool = True, trial_groups: int = 1) -> "ScoHParams":
        """The per-round arrays of ``plan``; ``with_pvec=False`` stores a placeholder P_vec (1, 0, 0)
        for Gaussian aggregators. With ``trial_groups = k`` the stored trials are ceil(b/k) (the family
        runs k of them per user) and p = b p/(k ceil(b/k)): the product b p that Lemma 3.1 needs is
        kept, and the run's k ceil(b/k) >= b trials satisfy the lemma's b > 180 g^2 ln(2/delta)/(eps^2 n)."""
        a = plan.round_arrays()
        if not with_pvec:
            a |= {"g": [1] * plan.num_rounds, "b": [0] * plan.num_rounds, "p": [0.0] * plan.num_rounds}
        else:
            a["b"], a["p"] = zip(*(_grouped_trials(b, p, trial_groups) for b, p in zip(a["b"], a["p"])))
        stage = np.zeros(plan.num_rounds, np.int32)
        for r, flag in enumerate(a["restart"]):
            stage[r] = 1 if flag else stage[r - 1] + 1
        pv = shuffle_protocols.PvecParams.create(np.asarray(a["g"]), np.asarray(a["b"]), np.asarray(a["p"]))
        return cls(jnp.asarray(a["start"], jnp.int32), jnp.asarray(a["batch"], jnp.int32), jnp.asarray(stage),
                   jnp.asarray(a["step"], jnp.float32), jnp.asarray(a["smoothing"], jnp.float32), pv,
                   jnp.asarray(a["noise_std"], jnp.float32),
                   jnp.asarray(plan.lipschitz if clip_norm is None else clip_norm, jnp.float32))

    @property
    def num_rounds(self) -> int:
        return int(np.shape(self.start)[-1])


def round_params(pvec: shuffle_protocols.PvecParams, r) -> shuffle_protocols.PvecParams:
    return shuffle_protocols.PvecParams(pvec.granularity[r], pvec.trials[r], pvec.probability[r])


def pvec_chunked_sum(key, vectors, mask, params, bound, max_granularity: int, trial_groups: int = 1):
    """P_vec (count level) on ``vectors [m, d]``: per coordinate the rounded sum (exact int32 -> float32
    in chunks of < 2^24/max_granularity users) plus ``Bin(m * trial_groups * b, p)`` centred, drawn
    exactly on the host (``shuffle_protocols.centred_binomial``; the chunks' binomials add up to
    the round's). Each user runs ``trial_groups * b`` binomial trials (``trial_groups > 1`` represents
    trial counts above the int32 range of ``PvecParams.trials``). A traced g above
    ``max_granularity`` makes the result NaN rather than silently inexact."""
    m, d = vectors.shape
    chunk = max(1, min(m, (_EXACT_F32 - 1) // max_granularity))
    pad = -m % chunk
    vec = jnp.pad(vectors, ((0, pad), (0, 0))).reshape(-1, chunk, d)
    msk = jnp.pad(mask, (0, pad)).reshape(-1, chunk)
    kr, kn = jax.random.split(key)
    g = jnp.asarray(params.granularity, jnp.float32)

    def chunk_report(k, v, mk):
        xhat = jnp.where(mk[:, None], shuffle_protocols.randomized_rounding(k, v, params, bound), 0)
        return jnp.sum(xhat, axis=0).astype(jnp.float32) - jnp.sum(mk).astype(jnp.float32) * (g / 2.0)

    rounded = jnp.sum(jax.vmap(chunk_report)(jax.random.split(kr, vec.shape[0]), vec, msk), axis=0)
    count = jnp.sum(mask.astype(jnp.int32)) * trial_groups
    total = rounded + shuffle_protocols.centred_binomial(kn, count, params, d)
    total = jnp.where(jnp.asarray(params.granularity) <= max_granularity, total, jnp.nan)
    return shuffle_protocols.pvec_analyze(total, params, bound)


def pvec_bits_sum(key, vectors, mask, params, bound, g_max: int, b_max: int):
    """Bit-level P_vec: every user sends g + b labelled one-bit messages per coordinate
    (``xhat`` ones then ``Bin(b, p)`` ones, as unary bits), a uniform permutation shuffles all
    messages, the analyzer counts the ones per label (Algorithms 1-2)."""
    m, d = vectors.shape
    k_round, k_noise, k_shuffle = jax.random.split(key, 3)
    g = jnp.asarray(params.granularity, jnp.int32)
    b = jnp.asarray(params.trials, jnp.int32)
    p = jnp.asarray(params.probability, jnp.float32)
    xhat = shuffle_protocols.randomized_rounding(k_round, vectors, params, bound)
    jg, jb = jnp.arange(g_max), jnp.arange(b_max)
    round_bits = (jg < xhat[..., None]) & (jg < g)
    noise_bits = jax.random.bernoulli(k_noise, p, (m, d, b_max)) & (jb < b)
    bits = jnp.concatenate([round_bits, noise_bits], axis=-1)
    sent = jnp.concatenate([jnp.broadcast_to(jg < g, (m, d, g_max)), jnp.broadcast_to(jb < b, (m, d, b_max))], -1)
    sent = sent & mask[:, None, None]
    labels = jnp.broadcast_to(jnp.arange(d)[None, :, None], bits.shape)
    order = jax.random.permutation(k_shuffle, bits.size)  # the shuffler
    bits, sent, labels = (a.reshape(-1)[order] for a in (bits, sent, labels))
    ones = jax.ops.segment_sum((bits & sent).astype(jnp.float32), labels, num_segments=d)
    count = jnp.sum(mask.astype(jnp.float32))
    gf = g.astype(jnp.float32)
    return (2.0 * bound / gf) * (ones - p * b.astype(jnp.float32) * count) - count * bound


def _user_gradients(problem, smoothed, params, x, y, smoothing, clip_norm):
    """Per-user (envelope) gradients, flattened ``[m, P]`` and projected onto the ball of radius L."""
    flat, unravel = ravel_pytree(params)
    if smoothed:
        def one(xi, yi):
            return smoothing * (flat - ravel_pytree(problem.prox(params, xi, yi, smoothing))[0])
    else:
        def one(xi, yi):
            return ravel_pytree(jax.grad(problem.loss)(params, xi, yi))[0]
    grads = jax.vmap(one)(x, y)
    norms = jnp.linalg.norm(grads, axis=1, keepdims=True)
    # a user whose gradient overflowed sends the zero vector (norm <= L): inf times C/inf would be NaN, and
    # one user would decide that P_vec's sum is NaN -- outside the accounted mechanism (issue 23)
    ok = jnp.isfinite(norms)
    factor = jnp.where(ok, jnp.minimum(1.0, clip_norm / jnp.maximum(norms, 1e-30)), 0.0)
    return jnp.where(ok, grads, 0.0) * factor, unravel


@dataclasses.dataclass(frozen=True)
class _ShuffleScoBase(FamilyBase):
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

    @classmethod
    def _from_plan(cls, problem, plan, *, aggregator, smoothed, radius, **kwargs):
        """``(family, hparams, plan)`` running ``plan`` (max_batch, max_granularity from the plan)."""
        mb = max(p.batch for p in plan.phases)
        gmax = max([p.pvec.g for p in plan.phases if p.pvec] + [kwargs.pop("max_granularity", 4)])
        bmax = max([p.pvec.b for p in plan.phases if p.pvec] + [1])
        groups = kwargs.pop("trial_groups", -(-bmax // shuffle_protocols._MAX_TRIALS))
        fam = cls(problem, plan.num_rounds, mb, aggregator, smoothed, radius, max_granularity=gmax,
                  trial_groups=groups, **kwargs)
        hp = ScoHParams.from_plan(plan, with_pvec=aggregator in ("pvec", "pvec-bits"), trial_groups=groups)
        if aggregator == "matched-gaussian":
            hp = dataclasses.replace(hp, noise_std=_matched_std(plan))
        return fam, hp, plan

    def hparams_from_values(self, **values) -> ScoHParams:
        """One sweep run's hparams (``ScoHParams.SWEEP_AXES``): a single phase of ``num_rounds``
        rounds (``ScoHParams.single_phase``)."""
        return ScoHParams.single_phase(self.num_rounds, **values)

    def validate(self, data: SiloData) -> None:
        if data.num_silos != 1:
            raise ValueError(f"data has {data.num_silos} silos; the n users are the records of ONE silo")

    def check_schedule(self, hparams: ScoHParams, num_users: int) -> ScoHParams:
        """Host check: every round's users exist and fit ``max_batch``; the schedule has num_rounds."""
        self.check_hparams(hparams)
        start, batch = np.asarray(hparams.start), np.asarray(hparams.batch)
        if start.shape[-1] != self.num_rounds:
            raise ValueError(f"hparams has {start.shape[-1]} rounds; the family has num_rounds={self.num_rounds}")
        if np.any(batch > self.max_batch) or np.any(batch < 1):
            raise ValueError(f"hparams.batch={batch.max()} must be in [1, max_batch={self.max_batch}]")
        if np.any(start + batch > num_users):
            raise ValueError(f"hparams uses users up to {int(np.max(start + batch))} > num_users={num_users}")
        return hparams

    # -- the gradient oracle --------------------------------------------------
    def _oracle(self, params, data: SiloData, hp: ScoHParams, r, key):
        idx = hp.start[r] + jnp.arange(self.max_batch)
        mask = (jnp.arange(self.max_batch) < hp.batch[r]) & (idx < data.sizes[0])
        idx = jnp.where(mask, idx, 0)
        grads, unravel = _user_gradients(self.problem, self.smoothed, params, data.x[0, idx], data.y[0, idx],
                                         hp.smoothing[r], hp.clip_norm)
        grads = grads * mask[:, None]
        k = keys.stream_key(key, "noise")
        pv = round_params(hp.pvec, r)
        if self.aggregator == "pvec":
            total = pvec_chunked_sum(k, grads, mask, pv, hp.clip_norm, self.max_granularity, self.trial_groups)
        elif self.aggregator == "pvec-bits":
            total = pvec_bits_sum(k, grads, mask, pv, hp.clip_norm, *self.bit_buffer)
        else:
            total = jnp.sum(grads, axis=0)
            if self.aggregator != "exact":
                total = total + hp.noise_std[r] * jax.random.normal(k, total.shape)
            if self.aggregator == "pan-gaussian":  # Algorithm 6 draws twice per batch (lines 4 and 6)
                total = total + hp.noise_std[r] * jax.random.normal(keys.stream_key(key, "server_noise"), total.shape)
        grad = total / hp.batch[r].astype(jnp.float32)  # divide by the public number of users
        return unravel(grad), {"users": jnp.sum(mask)}

    # -- privacy ----------------------------------------------------------------
    def _phases(self, hparams: ScoHParams):
        """(start, batch, fresh, T, first round) of each phase read from the schedule."""
        stage, start, batch = (np.asarray(a) for a in (hparams.stage_round, hparams.start, hparams.batch))
        firsts = [int(i) for i in np.flatnonzero(stage == 1)] + [len(stage)]
        out = []
        for a, z in zip(firsts[:-1], firsts[1:]):
            fresh = z - a == 1 or bool(np.all(np.diff(start[a:z]) == batch[a:z - 1]))
            if not fresh and np.any(start[a:z] != start[a]):
                raise ValueError("hparams.start must either advance by the batch (fresh users) or stay fixed "
                                 "(fully interactive) inside a phase")
            out.append((int(start[a]), int(np.min(batch[a:z])), fresh, z - a, a))
        return out

    def privacy(self, silo_sizes, hparams: ScoHParams) -> PrivacySpec:
        """The whole transcript's guarantee for one user (replace-one); see ``report``.

        The schedule is checked against the data first (``check_schedule``): a round asking for users
        beyond the n that exist, or for more than ``max_batch``, runs with fewer users than its
        ``batch`` -- fewer P_vec noise contributions than the report counts -- so it is refused."""
        agg = self.aggregator
        if agg in ("exact", "matched-gaussian"):
            return NoPrivacy("the exact sum (non-private twin)" if agg == "exact" else
                             "matched-gaussian is a variance-matched surrogate of P_vec, not a DP mechanism",
                             privacy_unit="user")
        sizes = [int(x) for x in (silo_sizes if hasattr(silo_sizes, "__len__") else [silo_sizes])]
        if len(sizes) != 1:
            raise ValueError(f"silo_sizes={sizes!r}: the n users are the records of ONE silo")
        self.check_schedule(hparams, sizes[0])
        if agg in ("pvec", "pvec-bits"):
            accs = tuple(sco_acc.PVEC_ACCOUNTANTS) + ("pvec-lemma-advanced",)
            generic = {"best": "pvec-lemma", "paper": "pvec-printed"}
        elif agg == "pan-gaussian":
            accs, generic = ("pan-analytic", "pan-paper"), {"best": "pan-analytic", "paper": "pan-paper"}
        else:
            accs, generic = ("gdp",), {"best": "gdp"}
        # the generic names a sweep config accepts ("best": the tightest proven account, "paper": the
        # paper's own) resolve to this protocol's accountants
        own = lambda acc: generic.get(acc, acc)  # noqa: E731
        return ReportPrivacy(epsilon_fn=lambda delta, acc: self.report(hparams, delta, own(acc)),
                             calibrate_fn=lambda target, delta, acc: self.calibrate(hparams, target, delta, own(acc)),
                             accountants=accs + tuple(generic), relation="replace-one", privacy_unit="user")

    def report(self, hparams: ScoHParams, delta: float, accountant: str = "pvec-lemma") -> SdpReport:
        """Certificate of the whole transcript from the parameters the run holds.

        P_vec: per phase, Theorem 3.2 inverted at the (g, b, p) and batch it runs with -- at its worst
        round when these vary inside a phase (each distinct round is accounted and the largest epsilon
        kept: the bound grows with g and falls with b, p and the number of users, so neither a min over
        g nor a min over the batch can stand in for it; p >= 1/2 is outside Lemma 3.1 and refused, and
        since Bin(m, p) = m - Bin(m, 1 - p) a smaller p is not the worse one there) (issue 23)
        (``pvec-lemma``: corrected Lemma 3.3 constant, optimal composition across rounds;
        ``pvec-printed``: the paper's constants and advanced composition;
        ``pvec-lemma-advanced``: lemma constants, advanced composition;
        ``pvec-numerical``: numerical privacy-loss distributions at the spread worst-case
        shift, a heuristic that is not from the paper); phases use disjoint users, so the
        run's eps is the largest phase's. Details: per-phase eps and how it was composed, bits
        per user (Corollaries B.8-B.11, exact in (g, b)) and the ``gaussian_approx`` diagnostic
        eps (never a guarantee). Gaussian
        aggregators: GDP (central/local) or Lemma C.4 (pan-private), each phase at its smallest
        per-round noise on what one user's change moves: ``noise_std`` on the sum (central) or
        ``noise_std_r / sqrt(batch_r)``, each user's own share (local). ``noise_std`` of the report is
        the smallest per-round noise std (the one the guarantee rests on).
        """
        delta = _validate.check_open_unit("delta", delta)
        L = float(np.asarray(hparams.clip_norm))
        phases = self._phases(hparams)
        noise = np.asarray(hparams.noise_std)
        details: dict = {"phases": len(phases), "rounds": self.num_rounds, "aggregator": self.aggregator}
        if self.aggregator in ("pvec", "pvec-bits"):
            comp = {"pvec-lemma": None, "pvec-printed": None, "pvec-numerical": None,
                    "pvec-lemma-advanced": "advanced"}[accountant]
            base = "pvec-lemma" if accountant == "pvec-lemma-advanced" else accountant
            rows, bits = [], 0
            g_all, b_all, p_all = (np.asarray(a) for a in (hparams.pvec.granularity, hparams.pvec.trials,
                                                           hparams.pvec.probability))
            batch_all = np.asarray(hparams.batch)
            for start, batch, fresh, T, a in phases:
                sl = slice(a, a + T)
                # every distinct round of the phase, accounted with its own (g, b, p, users); the phase is
                # certified at the worst of them (a min over g would under-report: eps grows with g)
                candidates = []
                for r in range(a, a + T):
                    g, b, p = int(g_all[r]), int(b_all[r]) * self.trial_groups, float(p_all[r])
                    if b == 0 or p == 0.0:
                        raise ValueError(f"hparams.pvec has trials={b}, probability={p} in round {r}: no privacy "
                                         "noise")
                    row = (g, b, p, int(batch_all[r]), fresh, T, delta / (T + 1))
                    if row not in candidates:
                        candidates.append(row)
                if len(candidates) > 1:
                    candidates.sort(key=lambda row: sco_acc.transcript_epsilon(
                        [row], self.dim, delta, base, comp, self.honest_frac)[0])
                rows.append(candidates[-1])
                bits = max(bits, (1 if fresh else T) * self.dim * (int(np.max(g_all[sl]))
                                                                   + self.trial_groups * int(np.max(b_all[sl]))))
            eps, per_phase = sco_acc.transcript_epsilon(rows, self.dim, delta, base, comp, self.honest_frac)
            name = f"{base}:{comp or sco_acc.PVEC_ACCOUNTANTS[base][2]}"
            details |= {"per_phase": per_phase, "bits_per_user": bits, "honest_frac": self.honest_frac,
                        "gaussian_approx_epsilon": sco_acc.gaussian_approx_transcript_epsilon(rows, self.dim, delta)}
            notes = [f"P_vec (Theorem 3.2; Lemma 3.1 per coordinate, Lemma 3.3 "
                     f"{'as printed' if base == 'pvec-printed' else 'with the Hoeffding constant'})",
                     "; ".join(f"phase {i}: eps={e:.4g} ({how})" for i, (e, how) in enumerate(per_phase)),
                     f"communication: {bits} one-bit messages per user"]
            if self.honest_frac < 1:
                notes.append(f"robust shuffle privacy with honest fraction {self.honest_frac:g} (Claim A.8)")
            if base == "pvec-numerical":
                notes.append("HEURISTIC: numerical account at the spread worst-case shift, not proven for "
                             "binomial noise (not a guarantee of the paper)")
            std = float(np.min((2 * L / g_all) * np.sqrt(np.maximum(self.trial_groups * b_all * p_all * (1 - p_all), 0))))
        elif self.aggregator == "pan-gaussian":
            if not all(fresh for _, _, fresh, _, _ in phases):
                raise ValueError("the pan-private analysis (Lemma C.4) needs every user in one batch")
            eps = max(sco_acc.pan_private_epsilon(float(s), L, delta, accountant) for s in noise)
            name, std = accountant, float(noise.min())
            notes = ["pan-privacy against one intrusion (Lemma C.4): one Gaussian draw of the batch protects it"]
        else:
            mus = []
            batch_all = np.asarray(hparams.batch, np.float64)
            for start, batch, fresh, T, a in phases:
                per_round = noise[a:a + T].astype(np.float64)
                if self.aggregator == "local-gaussian":
                    # each user's own noise is noise_std_r / sqrt(batch_r): the smallest of these ratios, not
                    # min(noise) / sqrt(min(batch)) (larger when the small noise sits in a large batch)
                    per_round = per_round / np.sqrt(batch_all[a:a + T])
                sig = float(np.min(per_round))
                mus.append(gdp.gaussian_mechanism_mu(sig, 2 * L, 1 if fresh else T))
            eps = gdp.gdp_epsilon(max(mus), delta)
            name, std = "gdp", float(noise.min())
            notes = [f"{self.aggregator}: Gaussian mechanism, sensitivity 2L, exact GDP composition over a "
                     "user's rounds" + (" (local DP: each user's own message)" if "local" in self.aggregator else "")]
        central = PrivacyReport(eps, delta, name, "fresh-users" if all(f for _, _, f, _, _ in phases) else
                                "fully-interactive", "replace-one", "user", std, tuple(notes))
        return SdpReport(central, None, details)

    def calibrate(self, hparams: ScoHParams, target_epsilon: float, delta: float, accountant: str = "pvec-lemma"):
        """Per-round parameters meeting ``target_epsilon``: P_vec (g, b, p) from the calculator
        (lemma_opt for ``pvec-lemma*``, paper for ``pvec-printed``; interactive phases split the
        budget over their rounds) or Gaussian noise stds. Returns ``{"pvec": ...}`` or ``{"noise_std": ...}``."""
        target = _validate.check_positive("target_epsilon", target_epsilon)
        delta = _validate.check_open_unit("delta", delta)
        phases = self._phases(hparams)
        L = float(np.asarray(hparams.clip_norm))
        if self.aggregator in ("pvec", "pvec-bits"):
            if accountant in sco_acc.REPORT_ONLY:
                raise ValueError(f"accountant={accountant!r} is a heuristic report; calibrate with 'pvec-lemma' "
                                 "or 'pvec-printed'")
            base = "pvec-lemma" if accountant == "pvec-lemma-advanced" else accountant
            comp_name, mode, comp = sco_acc.PVEC_ACCOUNTANTS[base]
            comp = "advanced" if accountant == "pvec-lemma-advanced" else comp
            g, b, p = (np.array(a, t) for a, t in zip((hparams.pvec.granularity, hparams.pvec.trials,
                                                     hparams.pvec.probability), (np.int64, np.int64, np.float64)))
            for start, batch, fresh, T, a in phases:
                if fresh or T == 1:
                    e, dl = target, delta
                else:
                    e, dl = sco_acc.pgd_round_budget(target, delta, T, comp)
                calc = pvec_acc.pvec_params(min(e, 15.0), dl, max(1, math.floor(self.honest_frac * batch)) if
                                            self.honest_frac < 1 and comp_name == "lemma" else batch, self.dim, mode)
                if calc.g > self.max_granularity:
                    raise ValueError(f"max_granularity={self.max_granularity} is below the calculator's g={calc.g}")
                g[a:a + T] = calc.g
                b[a:a + T], p[a:a + T] = _grouped_trials(calc.b, calc.p, self.trial_groups)
            return {"pvec": shuffle_protocols.PvecParams.create(g, b, p)}
        if self.aggregator == "pan-gaussian":
            if accountant == "pan-paper":
                zeta = 2 * L * math.sqrt(2 * math.log(2 / delta)) / target
            else:
                zeta = gdp.gaussian_mechanism_sigma(target, delta, 2 * L)
            return {"noise_std": jnp.full_like(jnp.asarray(hparams.noise_std), zeta)}
        noise = np.array(hparams.noise_std, np.float64)
        for start, batch, fresh, T, a in phases:
            sig = gdp.gaussian_mechanism_sigma(target, delta, 2 * L, count=1 if fresh else T)
            noise[a:a + T] = sig * (math.sqrt(batch) if self.aggregator == "local-gaussian" else 1.0)
        return {"noise_std": jnp.asarray(noise, jnp.float32)}


# ---------------------------------------------------------------------------
# Projected (stochastic) gradient descent: P_SGD, P_GD, phased P_GD, baselines
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SgdState:
    params: PyTree
    avg_sum: PyTree
    avg_count: jax.Array
    round: jax.Array
    hparams: ScoHParams


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
    """

    output: str = "average"

    def __post_init__(self):
        super().__post_init__()
        _validate.check_choice("output", self.output, ("average", "last"))

    def init(self, params, hparams: ScoHParams, data: SiloData, run_key) -> SgdState:
        zero = jax.tree_util.tree_map(jnp.zeros_like, params)
        return SgdState(params, zero, jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32), hparams)

    def step(self, state: SgdState, data: SiloData, key) -> tuple[SgdState, dict]:
        hp, r = state.hparams, state.round
        # a new phase starts from the previous phase's output (Lemma B.7 reduction)
        restart = (hp.stage_round[r] == 1) & (r > 0)
        prev_out = self._phase_output(state)
        params = jax.tree_util.tree_map(lambda p, o: jnp.where(restart, o, p), state.params, prev_out)
        avg_sum = jax.tree_util.tree_map(lambda s: jnp.where(restart, 0.0, s), state.avg_sum)
        count = jnp.where(restart, 0.0, state.avg_count)
        grad, metrics = self._oracle(params, data, hp, r, key)
        new = self.server_step(params, grad, hp.step[r])
        avg_sum = jax.tree_util.tree_map(jnp.add, avg_sum, params)  # theta_{t-1}: the output excludes theta_T
        return SgdState(new, avg_sum, count + 1.0, r + 1, hp), metrics

    def _phase_output(self, state: SgdState):
        if self.output == "last":
            return state.params
        return jax.tree_util.tree_map(lambda s: s / jnp.maximum(state.avg_count, 1.0), state.avg_sum)

    def output_params(self, state: SgdState):
        return self._phase_output(state)

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
        """P_GD (Lemma B.6 / Theorem 4.9): all users every round, T = min(n, eps^2 n^2/(d ln^2(nd/delta))),
        eta = D/(L sqrt T), per-round budget from the composition; non-smooth losses
        (``smoothness=None``) run on the Moreau envelope. ``rounds`` overrides T (T = n full-batch
        rounds cost n^2 gradients)."""
        plan = sco_acc.p_gd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, smoothness, mode=mode,
                                 composition=composition, rounds=rounds)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=smoothness is None, radius=radius,
                              **kwargs)

    @classmethod
    def p_gd_phased(cls, problem, n, epsilon, delta, lam, *, lipschitz=1.0, radius=1.0, smoothness=None,
                    mode="lemma_opt", phases=None, rounds=None, aggregator="pvec", **kwargs):
        """Phased P_GD for lam-strongly convex losses (Theorem 4.9 with Lemma B.7); ``rounds`` caps each
        phase's T."""
        def conv(m, diameter, start):
            t = None if rounds is None else min(rounds, sco_acc.pgd_rounds(m, _dim(problem), epsilon, delta))
            return sco_acc.p_gd_plan(m, _dim(problem), epsilon, delta, lipschitz, diameter, smoothness, mode=mode,
                                     start=start, rounds=t)

        plan = sco_acc.phased_plan(
            conv,
            n, lam, phases=phases, diameter=2 * radius)
        return cls._from_plan(problem, plan, aggregator=aggregator, smoothed=smoothness is None, radius=radius,
                              **kwargs)

    @classmethod
    def central_baseline(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0, smoothness=None,
                         rounds=None):
        """Central-DP noisy GD (Gaussian mechanism, GDP composition) on P_GD's schedule (``rounds``
        overrides T)."""
        plan = sco_acc.central_gd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius, smoothness,
                                       rounds=rounds)
        return cls._from_plan(problem, plan, aggregator="central-gaussian", smoothed=smoothness is None,
                              radius=radius)

    @classmethod
    def local_baseline(cls, problem, n, epsilon, delta, *, lipschitz=1.0, radius=1.0):
        """Local-DP one-pass SGD (each user's own Gaussian noise, B = 1)."""
        plan = sco_acc.local_sgd_plan(n, _dim(problem), epsilon, delta, lipschitz, 2 * radius)
        return cls._from_plan(problem, plan, aggregator="local-gaussian", smoothed=False, radius=radius)


# ---------------------------------------------------------------------------
# AC-SA: P_AGD, smoothed P_AGD, phased, pan-private
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShuffleAcsa(_ShuffleScoBase):
    """P_AGD (Algorithm 4), smoothed P_AGD (Theorem 4.7), the phased reduction (Theorem 4.8)
    and pan-private AC-SA (Algorithm 6, ``aggregator="pan-gaussian"``). Arguments as
    ``ShuffleSgd`` (no ``output``: AC-SA returns theta^ag), plus ``acsa_schedule``: ``"lan"``
    (default) or ``"paper"`` (Theorem 4.3's alpha_t, L_t; ``accelerated.acsa_constants``); the
    hparams' ``step`` is that schedule's nu (the constructors' ``schedule=`` sets both)."""

    acsa_schedule: str = "lan"

    def __post_init__(self):
        super().__post_init__()
        _validate.check_choice("acsa_schedule", self.acsa_schedule, ACSA_SCHEDULES)

    def init(self, params, hparams: ScoHParams, data: SiloData, run_key) -> AcceleratedState:
        return AcceleratedState(params, params, params, jnp.zeros((), jnp.int32), None, hparams)

    def step(self, state: AcceleratedState, data: SiloData, key) -> tuple[AcceleratedState, dict]:
        hp, r = state.hparams, state.round
        schedule = AcsaSchedule(jnp.float32(0.0), jnp.float32(0.0), hp.stage_round, hp.step)
        new_w, new_ag, metrics = acsa_round(lambda w_md: self._oracle(w_md, data, hp, r, key), state, schedule,
                                            self.projection_radius, self.acsa_schedule)
        return AcceleratedState(new_w, new_ag, state.anchor, r + 1, None, hp), metrics

    def params(self, state: AcceleratedState):
        return state.w_ag

    def output_params(self, state: AcceleratedState):
        return state.w_ag

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


def _grouped_trials(b: int, p: float, groups: int) -> tuple[int, float]:
    """Trials per group and probability keeping b p when each user runs ``groups`` groups."""
    if groups == 1:
        return int(b), float(p)
    per = -(-int(b) // groups)
    return per, float(b) * p / (groups * per)


def _dim(problem) -> int:
    shapes = jax.eval_shape(problem.init_params, jax.random.key(0))
    return int(sum(int(np.prod(s.shape)) for s in jax.tree_util.tree_leaves(shapes)))


def _matched_std(plan: sco_acc.ProtocolPlan):
    """Per-round std of a Gaussian with P_vec's exact per-coordinate variance (worst-case rounding)."""
    out = []
    for ph in plan.phases:
        var = sco_acc.pvec_total_variance(ph.pvec, plan.lipschitz, ph.batch) / plan.d
        out += [math.sqrt(var)] * ph.rounds
    return jnp.asarray(out, jnp.float32)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

# One sweep run is one phase (``ScoHParams.SWEEP_AXES``); the non-private twin is ``aggregator="exact"``.
register_family("shuffle-sgd", ShuffleSgd)
register_family("shuffle-acsa", ShuffleAcsa)
