"""The catalogue of canary audits: every registered private family, through its own step.

Each builder returns a ``CanaryAudit`` whose mechanism is a ``FamilyRun``: the
family object that ``dpjax.engine.registry`` registers, run through the
engine's executor (``dpjax.auditing.execute.run_family``, one run per key) on
small canary data, never a re-built mechanism. The certificate is the
family's own ``privacy(silo_sizes, hparams).epsilon(delta, accountant)`` for the
same configuration; ``exact()`` is the exact epsilon of the canary pair for
what the observer sees (``dpjax.auditing.exact``), a second, tighter threshold.
Mutants are the same compiled run with a privacy bug in its hyperparameters
(half the noise, no clip, no noise).

Canaries: ``CanaryProbe`` problems (the loss ``<w, x>``: every record's
gradient is the record) with one record far outside the clip region along
``e_1`` (``-`` on D, ``+`` on D' for replace-one; absent on D for add/remove)
and every other record zero; the canary's silo is the smallest one, padded to
the largest silo's size. DIFF2 uses ``DifferenceProbe`` (its gradient
differences saturate the difference clip). The observed statistic is the
family's round increments ``w_r - w_{r-1}`` mapped back to the released sum
(a public factor per round); the score is its log-likelihood ratio.

=================================  =========================  ==================================================
audit                              registered family          certificate (accountant)
=================================  =========================  ==================================================
isrl-mbsgd                         isrl-mbsgd (K of n, dense)  RDP, without-replacement (Wang-Balle-Kasiviswanathan)
isrl-mbsgd-poisson                 isrl-mbsgd (gather, draw)  PLD, Poisson, replace-one (autodiff path)
isrl-local-sgd                     isrl-local-sgd             RDP, R K single-record releases
isrl-accelerated                   isrl-accelerated           GDP, one pass (each record once)
isrl-unbalanced                    isrl-unbalanced            RDP per silo (Algorithm 7), the largest
isrl-shuffled                      isrl-shuffled              shuffle chain / ISRL-DP (Theorem G.1 structure)
sdp-accelerated                    sdp-accelerated            P_vec Thm 3.2 (lemma constants), one pass
shuffle-sgd                        shuffle-sgd                P_vec Thm 3.2 (lemma constants)
shuffle-acsa                       shuffle-acsa               pan-privacy, Lemma C.4 (analytic Gaussian)
dp-sgd                             dp-sgd                     PLD, Poisson, add/remove
dpsgd-general-*                    dpsgd-general              van Dijk et al. exact strong adversary / PLD
diff2-gd, dp-gd, diff2-bvr         diff2-gd, dp-gd, diff2-bvr  RDP (dp-accounting) of the DIFF2 schedules
user-level                         (user_level, not a family)  Theorem 3.3's proof (test-mode kappa, sigma)
dp-fedavg(-count), dp-ftrl         dp-fedavg, dp-ftrl         RDP: Theorem 1 of Andrew et al.; the tree's depth
                                                              (the builders are in ``fedavg_ftrl``)
=================================  =========================  ==================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from dpjax.accounting import gdp
from dpjax.algorithms.accelerated import AcceleratedHParams, AcceleratedMbSgd
from dpjax.algorithms.diff2 import Diff2BvrLSgd, Diff2GD, Diff2HParams
from dpjax.algorithms.dp_sgd import DpSgd
from dpjax.algorithms.dpsgd_general import DpSgdGeneral, DpSgdHParams
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd
from dpjax.algorithms.local_sgd import LocalSgd
from dpjax.algorithms.shuffle_sco import ScoHParams, ShuffleAcsa, ShuffleSgd
from dpjax.algorithms.shuffled import SdpHParams, SdpOnePassAccelerated, ShuffledNoisyMbSgd
from dpjax.algorithms.unbalanced import UnbalancedHParams, UnbalancedNoisyMbSgd
from dpjax.auditing import exact as exact_lib
from dpjax.auditing.audit import CanaryAudit, Certificate, FamilyRun
from dpjax.auditing.execute import AutodiffProbe, CanaryProbe, DifferenceProbe
from dpjax.auditing.fedavg_ftrl import dp_fedavg_audit, dp_fedavg_count_audit, dp_ftrl_audit
from dpjax.auditing.scores import inclusion_mixture_llr, one_per_epoch_llr
from dpjax.engine.silos import SiloData
from dpjax.parts.acsa import AcsaSchedule, acsa_constants
from dpjax.primitives.shuffle_protocols import PvecParams

__all__ = ["AUDITS", "FAMILY_AUDITS", "build_audit", "audit_names"]

# The (eps, delta) point at which certificates are audited. Any point of the
# certified curve is a valid test; at delta = 1e-3 a threshold test on ~10^5
# runs sees the relevant tails (at 1e-5 the certified epsilon is set by events
# rarer than 1 in 10^5, so a half-noise mutant can hide below it).
DELTA = 1e-3
# How far outside the clip region canaries sit (in units of the clip norm,
# times the batch size where a batch mean is clipped): large enough that a
# missing clip moves the release by far more than the certified sensitivity.
_CANARY_SCALE = 100.0


# ----------------------------------------------------------------------------- shared pieces
def _silos(sizes, dim: int, canary: float, *, silo: int = 0, rows=(0,), fill: float = 0.0, label: float = 0.0,
           canary_label: float | None = None, drop_last: bool = False) -> SiloData:
    """Silos of ``dim``-dimensional records (padded to the largest size), every record ``fill e_1``
    with label ``label`` except rows ``rows`` of silo ``silo`` (``canary e_1``, label
    ``canary_label``). ``drop_last``: silo ``silo`` loses its last record (the add/remove neighbour
    D of a canary placed there)."""
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


def _inputs(data, **leaves) -> dict:
    """A run's inputs: the data plus its public hyperparameters as array leaves (mutants override them)."""
    return {"data": data, **{k: (jnp.asarray(v, jnp.int32) if isinstance(v, (int, np.integer)) and not
                                 isinstance(v, bool) else jnp.asarray(v, jnp.float32)) for k, v in leaves.items()}}


def _mutants(noise: dict, clip: str | None = None, multiplier_of: float | None = None) -> dict:
    """Half the noise (every noise leaf halved) and, for absolute noise stds, the clip not applied
    (clip leaf = inf). Where the noise std is a multiplier times the clip (``multiplier_of`` = C),
    a missing clip would also make the noise infinite; the mutant is instead a clip 4 times larger
    with the multiplier divided by 4: the same noise std, 4 times the sensitivity -- a noise std
    that does not follow the clip norm."""
    out = {"half-noise": {k: np.asarray(v, np.float32) / 2 for k, v in noise.items()}}
    if clip is not None and multiplier_of is None:
        out["no-clip"] = {clip: math.inf}
    elif clip is not None:
        out["noise-not-scaled-by-clip"] = {clip: 4 * multiplier_of,
                                           **{k: np.asarray(v, np.float32) / 4 for k, v in noise.items()}}
    return out


def _certificate(spec, accountant: str, what: str) -> Certificate:
    report = spec.epsilon(DELTA, accountant)
    return Certificate(report.epsilon, DELTA, f"{what}.privacy -> {report.accountant}", report.neighboring)


def _mixture(probs, m: float, rounds: int, m_d: float | None = None) -> Callable[[], dict]:
    """Exact epsilon of ``rounds`` i.i.d. releases ``sum_l probs[l] N(l m_X, 1)`` (m_X = ``m_d`` on D,
    default ``-m``; ``m`` on D')."""
    m_d = -m if m_d is None else m_d

    def exact():
        comps = lambda shift: [(float(p), l * shift) for l, p in enumerate(probs) if p > 0]  # noqa: E731
        return {"epsilon": exact_lib.mixture_pair_epsilon(comps(m_d), comps(m), rounds, DELTA),
                "half_noise_epsilon": exact_lib.mixture_pair_epsilon(comps(2 * m_d), comps(2 * m), rounds, DELTA),
                "shift_in_noise_stds": m}

    return exact


def _family_audit(name, registered, description, family, hparams, sizes_for_privacy, d, dp, leaves, score,
                  accountant, mutants, exact, details, params, privacy_kw=None) -> CanaryAudit:
    spec = family.privacy(sizes_for_privacy, hparams(_inputs(None, **leaves)), **(privacy_kw or {}))
    cert = _certificate(spec, accountant, type(family).__name__)
    return CanaryAudit(
        name=name, description=description,
        mechanism=FamilyRun(family, registered, hparams, params),
        dataset=_inputs(d, **leaves), neighbour=_inputs(dp, **leaves), score=score, certificate=cert,
        mutants=mutants, exact=exact, details={"family": registered, **details})


def _canary(sizes, dim: int, value: float, **kw):
    """(D, D'): the canary at ``-value e_1`` and at ``+value e_1`` (replace-one)."""
    return _silos(sizes, dim, -value, **kw), _silos(sizes, dim, value, **kw)


# ----------------------------------------------------------------------------- ISRL-DP families
def isrl_mbsgd_audit(noise_multiplier: float = 2.8, clip_norm: float = 0.5, sizes=(8, 10), batch_size: int = 7,
                     num_rounds: int = 2, dim: int = 2, sampling_scheme: str = "without-replacement",
                     gradient_path: str = "auto", accountant: str = "rdp") -> CanaryAudit:
    """Noisy MB-SGD (Lowy & Razaviyayn 2023, Algorithm 2): K of the canary silo's n records per
    round, per-example clip C, mean, + N(0, sigma^2 I) per silo, sigma = z 2C/K (z the noise
    multiplier of the clipped mean's replace-one sensitivity); the observer sees the server's mean
    of the N silos' messages. ``gradient_path="auto"`` runs the dense (gather-free) path here;
    ``"gather"`` the indices of the sampler's ``draw`` on the padded silo and per-example autodiff."""
    # the gather path with a problem without closed-form clipping: per-example autodiff + clipped_sum
    problem = AutodiffProbe(dim) if gradient_path == "gather" else CanaryProbe(dim)
    family = NoisyMbSgd(problem, num_rounds, batch_size, sampling=sampling_scheme, gradient_path=gradient_path)
    n_silos = len(sizes)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos)  # the observed sum of the messages
    q = batch_size / sizes[0]
    m = clip_norm / batch_size / sd
    d, dp = _canary(sizes, dim, _CANARY_SCALE * clip_norm * batch_size)
    name = "isrl-mbsgd" if sampling_scheme == "without-replacement" else f"isrl-mbsgd-{sampling_scheme}"
    return _family_audit(
        name, "isrl-mbsgd", f"ISRL-DP Noisy MB-SGD, {sampling_scheme}, {gradient_path} gradient path "
        "(NoisyMbSgd.step: sample K of n, clip, mean, per-silo noise, server mean)",
        family, lambda inp: MbSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: inclusion_mixture_llr(-inc[:, 0] * n_silos / sd, [1 - q, q], -m, m), accountant,
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        _mixture([1 - q, q], m, num_rounds),
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds, "sampling": sampling_scheme, "gradient_path": gradient_path},
        jnp.zeros((dim,), jnp.float32))


def isrl_local_sgd_audit(noise_multiplier: float = 0.7, clip_norm: float = 0.5, sizes=(6, 8), local_steps: int = 3,
                         num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """ISRL-DP Local SGD: K single-record steps per silo and round, each clipped and noised; the
    observer sees the mean of the silos' last local iterates (the canary enters Bin(K, 1/n) times);
    every step's noise std is z 2C (the replace-one sensitivity of one clipped gradient)."""
    family = LocalSgd(CanaryProbe(dim), num_rounds, local_steps)
    n_silos, k = len(sizes), local_steps
    sd = noise_multiplier * 2 * clip_norm * math.sqrt(n_silos * k)
    m = clip_norm / sd
    probs = stats.binom.pmf(np.arange(k + 1), k, 1 / sizes[0])
    d, dp = _canary(sizes, dim, _CANARY_SCALE * clip_norm)
    return _family_audit(
        "isrl-local-sgd", "isrl-local-sgd", "ISRL-DP Local SGD (LocalSgd.step: K noisy clipped single-record "
        "steps per silo, model averaging)",
        family, lambda inp: MbSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: inclusion_mixture_llr(-inc[:, 0] * n_silos / sd, probs, -m, m), "rdp",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        _mixture(probs, m, num_rounds),
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "local_steps": k,
         "num_rounds": num_rounds}, jnp.zeros((dim,), jnp.float32))


def isrl_accelerated_audit(noise_multiplier: float = 1.2, clip_norm: float = 0.5, sizes=(8, 10), batch_size: int = 4,
                           dim: int = 2, smoothness: float = 1.0) -> CanaryAudit:
    """One-pass accelerated MB-SGD (Algorithm 1 / Theorem 3.1): R = 2 disjoint blocks of K = n/2 of
    the canary silo, so the canary is in exactly one round; AC-SA's w_ag moves by
    ``-(alpha_t^2 / eta_t) g_t`` in rounds 1 and 2 (mu = 0); per-silo noise std z 2C/K."""
    rounds = 2
    family = AcceleratedMbSgd(CanaryProbe(dim), rounds, batch_size, sampling="one-pass")
    if rounds * batch_size != sizes[0]:
        raise ValueError("the audit needs R K = n on the canary silo (each record in exactly one round)")
    schedule = AcsaSchedule.single_stage(rounds, smoothness)
    factors = jnp.asarray([float(e) / float(a) ** 2 for a, e in (acsa_constants(t, smoothness) for t in (1, 2))])
    n_silos = len(sizes)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos)
    m = clip_norm / batch_size / sd
    d, dp = _canary(sizes, dim, _CANARY_SCALE * clip_norm * batch_size)
    return _family_audit(
        "isrl-accelerated", "isrl-accelerated", "one-pass accelerated ISRL-DP MB-SGD (AcceleratedMbSgd.step: "
        "next block, clip, mean, per-silo noise, AC-SA)",
        family, lambda inp: AcceleratedHParams.create(schedule, inp["noise_multiplier"], inp["clip_norm"]), sizes,
        d, dp, {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: one_per_epoch_llr((-inc[:, 0] * factors * n_silos / sd).reshape(1, rounds), -m, m), "gdp",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        lambda: {"epsilon": exact_lib.one_of_two_epsilon(m, DELTA),
                 "half_noise_epsilon": exact_lib.one_of_two_epsilon(2 * m, DELTA), "shift_in_noise_stds": m},
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": rounds}, jnp.zeros((dim,), jnp.float32))


def isrl_unbalanced_audit(noise_multipliers=(1.05, 2.0), clip_norm: float = 0.5, sizes=(6, 9), batch_sizes=(3, 4),
                          num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """Algorithm 7 (unbalanced silos, per-silo K_i and sigma_i); the canary is in silo 0, whose
    guarantee is the largest; the certificate is the largest per-silo epsilon. Silo i's noise std
    is z_i 2C/K_i."""
    family = UnbalancedNoisyMbSgd(CanaryProbe(dim), num_rounds, tuple(batch_sizes))
    n_silos = len(sizes)
    sd = math.sqrt(sum((z * 2 * clip_norm / k) ** 2 for z, k in zip(noise_multipliers, batch_sizes)))
    q = batch_sizes[0] / sizes[0]
    m = clip_norm / batch_sizes[0] / sd
    d, dp = _canary(sizes, dim, _CANARY_SCALE * clip_norm * batch_sizes[0])
    return _family_audit(
        "isrl-unbalanced", "isrl-unbalanced", "ISRL-DP Noisy MB-SGD with unbalanced silos (UnbalancedNoisyMbSgd.step: "
        "K_i of n_i, clip, mean, N(0, sigma_i^2 I))",
        family, lambda inp: UnbalancedHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
        {"noise_multiplier": list(noise_multipliers), "clip_norm": clip_norm},
        lambda inc: inclusion_mixture_llr(-inc[:, 0] * n_silos / sd, [1 - q, q], -m, m), "rdp",
        _mutants({"noise_multiplier": list(noise_multipliers)}, "clip_norm", multiplier_of=clip_norm),
        _mixture([1 - q, q], m, num_rounds),
        {"noise_multipliers": tuple(noise_multipliers), "clip_norm": clip_norm, "silo_sizes": sizes, "batch_sizes": tuple(batch_sizes),
         "num_rounds": num_rounds}, jnp.zeros((dim,), jnp.float32))


def isrl_shuffled_audit(noise_multiplier: float = 0.8, clip_norm: float = 0.5, sizes=(6, 8), batch_size: int = 2,
                        num_rounds: int = 2, dim: int = 2) -> CanaryAudit:
    """Shuffled Noisy MB-SGD (Section 5): every silo reports (M = N) K records drawn with replacement;
    the server sees the shuffled multiset's mean (per-silo noise std z 2C/K). Certificate: the
    family's central guarantee."""
    n_silos = len(sizes)
    family = ShuffledNoisyMbSgd(CanaryProbe(dim), num_rounds, n_silos, batch_size)
    sd = noise_multiplier * 2 * clip_norm / batch_size * math.sqrt(n_silos)
    m = clip_norm / batch_size / sd
    probs = stats.binom.pmf(np.arange(batch_size + 1), batch_size, 1 / sizes[0])
    d, dp = _canary(sizes, dim, _CANARY_SCALE * clip_norm * batch_size)
    return _family_audit(
        "isrl-shuffled", "isrl-shuffled", "Shuffled Noisy MB-SGD (ShuffledNoisyMbSgd.step: K with replacement, clip, "
        "mean, per-silo noise, shuffler, multiset mean)",
        family, lambda inp: MbSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: inclusion_mixture_llr(-inc[:, 0] * n_silos / sd, probs, -m, m), "shuffle-tight",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        _mixture(probs, m, num_rounds),
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds}, jnp.zeros((dim,), jnp.float32))


# ----------------------------------------------------------------------------- shuffle-model P_vec and SCO
def _binomial_exact(trials: int, p: float, g: int) -> dict:
    pm, qm = exact_lib.shifted_binomial_pmfs(trials, p, g)
    half = exact_lib.shifted_binomial_pmfs(trials // 2, p, g)
    return {"epsilon": exact_lib.exact_epsilon(pm, qm, DELTA), "half_noise_epsilon": exact_lib.exact_epsilon(*half, DELTA),
            "note": f"canary coordinate's count: Bin({trials}, p) vs {g} + Bin({trials}, p)"}


def sdp_accelerated_audit(epsilon: float = 2.0, sizes=(4, 4), bound: float = 1.0) -> CanaryAudit:
    """SDP one-pass accelerated MB-SGD (Lowy & Razaviyayn Algorithm 6): one round of K = n records per
    silo, each clipped and run through the P_vec randomizer (d = 1), analyzer over the M K shuffled
    vectors. Other records sit at -L (deterministic rounding to 0), the canary at -/+ 1000 L (clipped
    to the range ends: rounding 0 or g), so the count is Bin(M K b, p) or g + Bin(M K b, p)."""
    k = sizes[0]
    family = SdpOnePassAccelerated(CanaryProbe(1), 1, k)
    params = family.pvec_params_for(len(sizes), epsilon, DELTA)
    g, b, p = params.numbers()
    schedule = AcsaSchedule.single_stage(1, 1.0)
    gran, prob = jnp.int32(g), jnp.float32(params.probability)

    def hparams(inp):
        return SdpHParams(schedule, PvecParams(gran, inp["trials"], prob), inp["clip_norm"])

    d, dp = (_silos(sizes, 1, s * 1000.0 * bound, fill=-bound) for s in (-1.0, 1.0))
    vectors = family.min_vectors(len(sizes))
    return _family_audit(
        "sdp-accelerated", "sdp-accelerated", "SDP one-pass accelerated MB-SGD with P_vec (SdpOnePassAccelerated.step: "
        "clipped vectors, P_vec randomizer, shuffled analyzer)",
        family, hparams, sizes, d, dp, {"trials": int(b), "clip_norm": bound},
        lambda inc: -inc[0, 0], "pvec-lemma", {"no-noise": {"trials": 0}},
        lambda: _binomial_exact(vectors * b, p, g),
        {"silo_sizes": sizes, "vectors": vectors, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon},
        jnp.zeros((1,), jnp.float32))


def shuffle_sgd_audit(epsilon: float = 2.0, n: int = 20, bound: float = 1.0) -> CanaryAudit:
    """P_SGD (Cheu et al. 2022, Algorithm 3) for one round of all n users with P_vec (d = 1), the
    P_vec parameters from the family's own calibration: P_1D on the canary's coordinate."""
    family = ShuffleSgd(CanaryProbe(1), 1, n, aggregator="pvec", projection_radius=None, output="last")
    base = ScoHParams.single_phase(1, n, 1.0, clip_norm=bound)
    pv = family.privacy([n], base).calibrate(epsilon, DELTA, "pvec-lemma")["pvec"]
    g, b, p = (int(np.asarray(pv.granularity)[0]), int(np.asarray(pv.trials)[0]) * family.trial_groups,
               float(np.asarray(pv.probability)[0]))
    gran, prob = jnp.asarray(pv.granularity), jnp.asarray(pv.probability)

    def hparams(inp):
        return ScoHParams(base.start, base.batch, base.stage_round, base.step, base.smoothing,
                          PvecParams(gran, jnp.reshape(inp["trials"], (1,)), prob), base.noise_multiplier,
                          inp["clip_norm"])

    d, dp = (_silos((n,), 1, s * 1000.0 * bound, fill=-bound) for s in (-1.0, 1.0))
    return _family_audit(
        "shuffle-sgd", "shuffle-sgd", "P_SGD with P_vec (ShuffleSgd.step: users' projected gradients, count-level "
        "P_vec, analyzer / B)",
        family, hparams, [n], d, dp, {"trials": int(np.asarray(pv.trials)[0]), "clip_norm": bound},
        lambda inc: -inc[0, 0], "pvec-lemma", {"no-noise": {"trials": 0}}, lambda: _binomial_exact(n * b, p, g),
        {"n": n, "g": g, "b": b, "p": p, "calibrated_epsilon": epsilon}, jnp.zeros((1,), jnp.float32))


def shuffle_acsa_audit(noise_multiplier: float = 2.5, n: int = 10, batch: int = 5, bound: float = 0.5,
                       smoothness: float = 1.0) -> CanaryAudit:
    """Pan-private AC-SA (Cheu et al. 2022, Appendix C, Algorithm 6): two N(0, zeta^2) draws on each
    batch sum of the users' projected gradients (zeta = z 2L, the sum's replace-one sensitivity); the canary user is in round 1's batch. Round 1
    moves w_ag by ``-(alpha_1^2 / eta_1)`` times the batch mean."""
    rounds = 2
    family = ShuffleAcsa(CanaryProbe(1), rounds, batch, aggregator="pan-gaussian", projection_radius=None)
    base = ScoHParams.single_phase(rounds, batch, smoothness, noise_multiplier=noise_multiplier, clip_norm=bound)
    alpha, eta = acsa_constants(1, smoothness, family.acsa_schedule)
    factor = float(eta) / float(alpha) ** 2 * batch

    def hparams(inp):
        return ScoHParams(base.start, base.batch, base.stage_round, base.step, base.smoothing, base.pvec,
                          jnp.full((rounds,), inp["noise_multiplier"]), inp["clip_norm"])

    sd = math.sqrt(2) * noise_multiplier * 2 * bound
    m = bound / sd
    d, dp = _canary((n,), 1, 1000.0 * bound)
    return _family_audit(
        "shuffle-acsa", "shuffle-acsa", "pan-private AC-SA (ShuffleAcsa.step: projected user gradients, two Gaussian "
        "draws per batch)",
        family, hparams, [n], d, dp, {"noise_multiplier": noise_multiplier, "clip_norm": bound},
        lambda inc: -inc[0, 0] * factor / sd, "pan-analytic",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=bound),
        lambda: {"epsilon": gdp.gdp_epsilon(2 * m, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(4 * m, DELTA)},
        {"n": n, "batch": batch, "noise_multiplier": noise_multiplier, "clip_norm": bound}, jnp.zeros((1,), jnp.float32))


# ----------------------------------------------------------------------------- central DP-SGD
def dp_sgd_audit(noise_multiplier: float = 1.5, clip_norm: float = 0.5, sizes=(20, 24), batch_size: int = 5,
                 num_rounds: int = 4, dim: int = 2) -> CanaryAudit:
    """DP-SGD (Abadi et al., Poisson, add/remove): D' holds the canary as the last record of the
    smallest silo, D does not; N(0, (sigma C)^2 I) once on the clipped sum; SGD server. Both draw every
    record at the declared public rate q = K / n of D' (not at each data set's own K / n)."""
    q = batch_size / sizes[0]
    family = DpSgd(CanaryProbe(dim), num_rounds, batch_size, sampling="poisson", optimizer="sgd", sampling_rate=q)
    std = noise_multiplier * clip_norm  # the multiplier of the add/remove sensitivity C of the sum
    n_silos = len(sizes)
    m = clip_norm / std
    value = _CANARY_SCALE * clip_norm
    d = _silos(sizes, dim, value, rows=(sizes[0] - 1,), drop_last=True)
    dp = _silos(sizes, dim, value, rows=(sizes[0] - 1,))
    scale = batch_size * n_silos / std  # w <- w - (S + z) / (K N): the sum in noise stds
    return _family_audit(
        "dp-sgd", "dp-sgd", "DP-SGD, Poisson (DpSgd, DP-SGD-General's step: Poisson batches, per-example clip, one "
        "Gaussian on the pooled mean)",
        family, lambda inp: DpSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), sizes, d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: inclusion_mixture_llr(-inc[:, 0] * scale, [1 - q, q], 0.0, m), "pld",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        _mixture([1 - q, q], m, num_rounds, m_d=0.0),
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes, "batch_size": batch_size,
         "num_rounds": num_rounds}, jnp.zeros((dim,), jnp.float32))


def dpsgd_general_audit(sampling: str, clip: str, noise_multiplier: float, n: int, batch_size: int = 5,
                        epochs: int = 1, clip_norm: float = 0.5, dim: int = 2, group_size: int = 1) -> CanaryAudit:
    """DP-SGD-General (van Dijk et al., Algorithm 1) on one silo: shuffling (one permutation per
    epoch), uniform subsampling or Poisson; individual clipping (s = 1, m = K) or batch clipping
    (s = K, m = 1); N(0, (2 C sigma)^2 I) (Poisson: (C sigma)^2, add/remove) on the sum of the clipped
    terms. ``group_size`` g > 1: D and D' differ in g canary records (replace-up-to-g)."""
    s, mm = (1, batch_size) if clip == "individual" else (batch_size, 1)
    poisson = sampling == "poisson"
    per_epoch = n // batch_size if sampling != "subsample" else 1
    family = DpSgdGeneral(CanaryProbe(dim), epochs * per_epoch, s, mm, per_epoch, sampling=sampling,
                          neighboring="add-remove" if poisson else "replace-one",
                          sampling_rate=mm / n if poisson else None)  # D and D' both drawn at q = m / n
    rounds = family.num_rounds
    std = noise_multiplier * clip_norm * (1 if poisson else 2)
    shift = clip_norm / std  # the canary's clipped term in noise stds
    value = _CANARY_SCALE * clip_norm * batch_size
    if poisson:
        d = _silos((n,), dim, value, rows=(n - 1,), drop_last=True)
        dp = _silos((n,), dim, value, rows=(n - 1,))
        q = mm / n
        probs, m_d = [1 - q, q], 0.0
    else:
        d, dp = _canary((n,), dim, value, rows=tuple(range(group_size)))
        m_d = -shift
        hits = [math.comb(group_size, t) * math.comb(n - group_size, batch_size - t) / math.comb(n, batch_size)
                for t in range(min(group_size, batch_size) + 1)]
        probs = hits if clip == "individual" else [hits[0], 1.0 - hits[0]]
    if sampling == "shuffle":
        score = lambda inc: one_per_epoch_llr((-inc[:, 0] * mm / std).reshape(epochs, per_epoch), -shift, shift)  # noqa: E731
        exact = (lambda: {"epsilon": exact_lib.one_of_two_epsilon(shift, DELTA),
                          "half_noise_epsilon": exact_lib.one_of_two_epsilon(2 * shift, DELTA)}) \
            if (epochs, per_epoch) == (1, 2) else None
    else:
        score = lambda inc: inclusion_mixture_llr(-inc[:, 0] * mm / std, probs, m_d, shift)  # noqa: E731
        exact = _mixture(probs, shift, rounds, m_d=m_d)
    suffix = "" if group_size == 1 else f"-g{group_size}"
    name = "dpsgd-general-poisson" if poisson else f"dpsgd-general-{sampling}-{clip}{suffix}"
    return _family_audit(
        name, "dpsgd-general", f"DP-SGD-General, {clip} clipping, {sampling} (DpSgdGeneral.step)",
        family, lambda inp: DpSgdHParams.create(1.0, inp["noise_multiplier"], inp["clip_norm"]), [n], d, dp,
        {"noise_multiplier": noise_multiplier, "clip_norm": clip_norm}, score, "pld" if poisson else "strong-exact",
        _mutants({"noise_multiplier": noise_multiplier}, "clip_norm", multiplier_of=clip_norm), exact,
        {"noise_multiplier": noise_multiplier, "noise_std": std, "clip_norm": clip_norm, "n": n,
         "batch_size": batch_size, "epochs": epochs, "rounds": rounds, "group_size": group_size},
        jnp.zeros((dim,), jnp.float32), privacy_kw=None if poisson else {"group_size": group_size})


# ----------------------------------------------------------------------------- DIFF2
def diff2_audit(kind: str = "diff2-gd", noise_multiplier_restart: float = 1.8, noise_multiplier_diff: float = 1.8,
                sizes=(4, 6), clip_restart: float = 1.0, clip_diff: float = 1.0,
                learning_rate: float = 1.0) -> CanaryAudit:
    """DIFF2 (Murata & Suzuki 2023, Alg. 1 + 3) for R = 2 rounds with T = 2: round 1 restarts (std
    z1 2 C1 / (n_min P), the replace-one sensitivity of the server mean of clipped means), round 2
    is a difference round (std z2 2 C2 ||x1 - x0|| / (n_min P)); the observer sees the two noisy
    estimators (from the iterates). ``kind="diff2-bvr"``: the same estimator in
    ``Diff2BvrLSgd.step`` with K = 1 (no local steps; their noise is pinned in tests/privacy)."""
    if kind == "diff2-gd":
        family = Diff2GD(DifferenceProbe(), 2, output="last")
        privacy_kw = None
    else:
        family = Diff2BvrLSgd(DifferenceProbe(), 2, local_steps=1, batch_size=2, output="last")
        privacy_kw = {"local_count": "exact"}
    z1, z2 = noise_multiplier_restart, noise_multiplier_diff
    big = _CANARY_SCALE * max(clip_restart, clip_diff, 1.0)
    d, dp = (_silos(sizes, 1, big, label=1.0, canary_label=sign) for sign in (-1.0, 1.0))
    a = 1.0 / (sizes[0] * len(sizes))  # normalised shift of the server mean (Prop. 4.1: 2C/(n P) between D, D')

    def score(inc):
        v1, v2, x1 = -inc[0, 0] / learning_rate, -inc[1, 0] / learning_rate, inc[0, 0]
        s1 = v1 / (2 * a * z1 * clip_restart)  # the restart estimator in noise stds
        s2 = (v2 - v1) / (2 * a * z2 * clip_diff * jnp.abs(x1)) * jnp.sign(x1)  # x0 = 0
        return s1 / z1 + s2 / z2  # Gaussian LLR up to a constant (the shifts are 1/z in noise stds)

    mu = math.hypot(1 / z1, 1 / z2)
    return _family_audit(
        kind, kind, f"DIFF2 restart + difference channel ({type(family).__name__}.step: clipped means, z x "
        "sensitivity noise)",
        family, lambda inp: Diff2HParams.create(learning_rate, 2, clip_restart, clip_diff,
                                                inp["noise_multiplier_restart"], inp["noise_multiplier_diff"]),
        sizes, d, dp, {"noise_multiplier_restart": z1, "noise_multiplier_diff": z2}, score, "rdp",
        {"half-noise": {"noise_multiplier_restart": z1 / 2, "noise_multiplier_diff": z2 / 2}},
        lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        {"noise_multiplier_restart": z1, "noise_multiplier_diff": z2, "silo_sizes": sizes, "rounds": 2,
         "restart_interval": 2}, jnp.zeros((1,), jnp.float32), privacy_kw=privacy_kw)


def dp_gd_audit(noise_multiplier: float = 2.0, sizes=(4, 6), clip_norm: float = 0.5,
                learning_rate: float = 1.0) -> CanaryAudit:
    """DP-GD (DIFF2-GD with every round a restart round), one round: the Gaussian mechanism on the
    server mean of the silos' clipped full-batch means, std z 2C / (n_min P)."""
    family = Diff2GD(DifferenceProbe(), 1, restart_every_round=True, output="last")
    d, dp = (_silos(sizes, 1, _CANARY_SCALE * clip_norm, label=1.0, canary_label=sign) for sign in (-1.0, 1.0))
    a = 1.0 / (sizes[0] * len(sizes))
    std = noise_multiplier * 2 * a * clip_norm
    mu = 1 / noise_multiplier  # the shift 2 a C in noise stds
    return _family_audit(
        "dp-gd", "dp-gd", "DP-GD (Diff2GD.step, restart every round: clipped full-batch means, one Gaussian)",
        family, lambda inp: Diff2HParams.create(learning_rate, 1, inp["clip_norm"], 1.0,
                                                inp["noise_multiplier_restart"], 0.0),
        sizes, d, dp, {"noise_multiplier_restart": noise_multiplier, "clip_norm": clip_norm},
        lambda inc: -inc[0, 0] / (learning_rate * std), "rdp",
        _mutants({"noise_multiplier_restart": noise_multiplier}, "clip_norm", multiplier_of=clip_norm),
        lambda: {"mu": mu, "epsilon": gdp.gdp_epsilon(mu, DELTA), "half_noise_epsilon": gdp.gdp_epsilon(2 * mu, DELTA)},
        {"noise_multiplier_restart": noise_multiplier, "clip_norm": clip_norm, "silo_sizes": sizes},
        jnp.zeros((1,), jnp.float32))


# ----------------------------------------------------------------------------- user-level output perturbation
def user_level_audit(eps_prime: float = 1.0, kappa: int = 3, n: int = 14, outliers: int = 2,
                     sensitivity: float = 1e-4, gaussian_mu: float = 0.25) -> CanaryAudit:
    """Algorithm 1 of Ghazi et al. (ICML 2023), DelOutputPert, on f = mean of the users' values clipped to [0, 1],
    replace-one-user neighbours (``dpjax.user_level.audit.canary_pair``: D' moves the canary user from 0 to 1).

    Test mode (spec test U5): ``kappa`` and sigma = 8 kappa Delta / ``gaussian_mu`` are given directly; the
    certificate is Theorem 3.3's proof, ``(2 eps', p(0) + p(2 kappa) + e^{eps'} delta_G(eps', gaussian_mu))``.
    The stable tables come from the exact enumeration of every deletion set of <= 4 kappa + 1 users
    (``stable_table``); the audited runs are ``release_from_table`` (the TDLap draw, bottom, the Gaussian) jitted
    and vmapped over keys. The target Delta is far below the replace sensitivity 1/n of f (the paper's regime:
    Delta ~ 1/(n sqrt(m)) << 1/n), so privacy rests on the stability test; the mutant skips it (releases
    f(x) + N(0, sigma^2), never bottom) and is caught. Score: the release, bottom mapped above every release.
    """
    from dpjax.accounting import user_level as ul_acc
    from dpjax.user_level import audit as ul_audit, mechanisms as ul_mech

    sigma = 8 * kappa * sensitivity / gaussian_mu
    params = ul_acc.a1_test_params(eps_prime, kappa, sensitivity, sigma)
    cert_eps, cert_delta = ul_acc.a1_certified(params)
    x, x2 = ul_audit.canary_pair(n, outliers)
    tables = [ul_audit.clipped_mean_table(v_, kappa, sensitivity) for v_ in (x, x2)]

    def inputs(values, table):
        return {"centres": jnp.asarray(table.centres, jnp.float32), "bottom": jnp.asarray(table.bottom),
                "sigma": jnp.float32(sigma), "f_full": jnp.float32(np.clip(values, 0, 1).mean())}

    def mech(key, inp):
        return ul_mech.release_from_table(key, inp["centres"], inp["bottom"], inp["sigma"], eps_prime, kappa)

    def no_stability_test(key, inp):  # the same key use: the noise key is the second half of split(key)
        _, key_noise = jax.random.split(key)
        return jnp.int32(ul_mech.OK), inp["f_full"] + inp["sigma"] * jax.random.normal(key_noise, (1,))

    bottom_score = 1e3  # above every release (|f| <= 1, sigma << 1): one threshold sees both bottom and shifts

    def exact():
        laws = [ul_audit.output_law(t, eps_prime, kappa) for t in tables]
        skip = [ul_audit.skip_test_law(v_) for v_ in (x, x2)]
        return {"epsilon": ul_audit.exact_epsilon(*laws, sigma, cert_delta),
                "no_stability_test_epsilon": ul_audit.exact_epsilon(*skip, sigma, cert_delta),
                "half_noise_epsilon": ul_audit.exact_epsilon(*laws, sigma / 2, cert_delta),
                "p_bottom_d": laws[0][0], "p_bottom_d_prime": laws[1][0]}

    return CanaryAudit(
        name="user-level",
        description="Ghazi et al. Algorithm 1 (DelOutputPert; user_level.mechanisms.release_from_table on exact "
                    "stable tables), f = clipped mean of user values",
        mechanism=mech, dataset=inputs(x, tables[0]), neighbour=inputs(x2, tables[1]),
        score=lambda out: jnp.where(out[0] == ul_mech.BOTTOM, bottom_score, out[1][0]),
        certificate=Certificate(cert_eps, cert_delta, "dpjax.accounting.user_level.a1_certified (Theorem 3.3 proof, "
                                "test-mode kappa and sigma)", "replace-one-user"),
        mutants={"no-stability-test": no_stability_test},
        exact=exact,
        details={"eps_prime": eps_prime, "kappa": kappa, "n": n, "outlier_users": outliers,
                 "Delta": sensitivity, "sigma": sigma, "gaussian_mu": gaussian_mu,
                 "release_probability": f"{1 - tables[0].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D), "
                                        f"{1 - tables[1].bottom.dot(ul_audit.sampler_pmf(eps_prime, kappa)):.3f} (D')"},
    )


# DP-SGD-General configurations (certified eps 1-5 at DELTA): shuffling, one epoch of 2 rounds of
# 5 of 10 records; subsampling, 2 rounds of 5 of 6 records; Poisson, 4 rounds at q = 1/4; groups of
# g = 2 records (a user), subsampling as above at sigma = 2 (individual clipping certifies more).
_DPSGD = {"shuffle": dict(noise_multiplier=1.2, n=10, epochs=1),
          "subsample": dict(noise_multiplier=1.5, n=6, epochs=2),
          "poisson": dict(noise_multiplier=1.5, n=20, epochs=1),
          "subsample-g2": dict(noise_multiplier=2.0, n=6, epochs=2, group_size=2)}

AUDITS: dict[str, Callable[[], CanaryAudit]] = {
    "isrl-mbsgd": isrl_mbsgd_audit,
    "isrl-mbsgd-poisson": lambda: isrl_mbsgd_audit(noise_multiplier=1.2, batch_size=4, sampling_scheme="poisson",
                                                   gradient_path="gather", accountant="pld"),
    "isrl-local-sgd": isrl_local_sgd_audit,
    "isrl-accelerated": isrl_accelerated_audit,
    "isrl-unbalanced": isrl_unbalanced_audit,
    "isrl-shuffled": isrl_shuffled_audit,
    "sdp-accelerated": sdp_accelerated_audit,
    "shuffle-sgd": shuffle_sgd_audit,
    "shuffle-acsa": shuffle_acsa_audit,
    "dp-sgd": dp_sgd_audit,
    "dpsgd-general-shuffle-individual": lambda: dpsgd_general_audit("shuffle", "individual", **_DPSGD["shuffle"]),
    "dpsgd-general-shuffle-batch": lambda: dpsgd_general_audit("shuffle", "batch", **_DPSGD["shuffle"]),
    "dpsgd-general-subsample-individual": lambda: dpsgd_general_audit("subsample", "individual", **_DPSGD["subsample"]),
    "dpsgd-general-subsample-batch": lambda: dpsgd_general_audit("subsample", "batch", **_DPSGD["subsample"]),
    "dpsgd-general-poisson": lambda: dpsgd_general_audit("poisson", "individual", **_DPSGD["poisson"]),
    "dpsgd-general-subsample-individual-g2": lambda: dpsgd_general_audit("subsample", "individual",
                                                                         **_DPSGD["subsample-g2"]),
    "dpsgd-general-subsample-batch-g2": lambda: dpsgd_general_audit("subsample", "batch", **_DPSGD["subsample-g2"]),
    "diff2-gd": diff2_audit,
    "dp-gd": dp_gd_audit,
    "diff2-bvr": lambda: diff2_audit("diff2-bvr"),
    "user-level": user_level_audit,
    "dp-fedavg": lambda: dp_fedavg_audit(delta=DELTA),
    "dp-fedavg-count": lambda: dp_fedavg_count_audit(delta=DELTA),
    "dp-ftrl": lambda: dp_ftrl_audit(delta=DELTA),
}

#: Every registered private family and the audits that run its step (``user-level`` runs the
#: user-level mechanisms of ``dpjax.user_level``, which are not registry families).
FAMILY_AUDITS: dict[str, tuple[str, ...]] = {
    "isrl-mbsgd": ("isrl-mbsgd", "isrl-mbsgd-poisson"),
    "isrl-local-sgd": ("isrl-local-sgd",),
    "isrl-accelerated": ("isrl-accelerated",),
    "isrl-unbalanced": ("isrl-unbalanced",),
    "isrl-shuffled": ("isrl-shuffled",),
    "sdp-accelerated": ("sdp-accelerated",),
    "shuffle-sgd": ("shuffle-sgd",),
    "shuffle-acsa": ("shuffle-acsa",),
    "dp-sgd": ("dp-sgd",),
    "dpsgd-general": tuple(n for n in AUDITS if n.startswith("dpsgd-general")),
    "diff2-gd": ("diff2-gd",),
    "dp-gd": ("dp-gd",),
    "diff2-bvr": ("diff2-bvr",),
    "dp-fedavg": ("dp-fedavg", "dp-fedavg-count"),
    "dp-ftrl": ("dp-ftrl",),
}


def audit_names() -> tuple[str, ...]:
    return tuple(AUDITS)


def build_audit(name: str) -> CanaryAudit:
    """The catalogue's audit ``name`` (see ``audit_names()``)."""
    if name not in AUDITS:
        raise ValueError(f"mechanism={name!r} must be one of {audit_names()}")
    return AUDITS[name]()
