"""Shuffle-DP algorithms of Lowy & Razaviyayn (ICLR 2023, Section 5):

* ``ShuffledNoisyMbSgd`` -- Shuffled Noisy MB-SGD (Section 5,
  Theorem 5.1/G.1). Each round exactly M silos are available; each samples K
  records (K = 1 in the paper's proof), releases its clipped minibatch mean
  plus ``N(0, sigma^2 I)``; a shuffler permutes the M reports and the server
  averages them. The server's update is a function of the multiset of reports
  (``federated.shuffled_aggregate``: bitwise invariant to the permutation), so
  shuffling changes privacy, not utility: the trajectory is that of Noisy
  MB-SGD with K records and ``FixedAvailability(M)`` up to float summation
  order.
* ``SdpOnePassAccelerated`` -- SDP One-Pass Accelerated Noisy MB-SGD
  (Algorithm 6, Theorem 5.2/G.2). The AC-SA round of
  ``accelerated.py`` where every available silo takes its next disjoint block
  of K records and runs the P_vec local randomizer on each of its K clipped
  gradients; the server runs the P_vec analyzer on the ``M_r K`` shuffled
  vectors and divides by the public ``M_r K``. P_vec is simulated at the count
  level (exact in distribution; ``dpjax.primitives.shuffle_protocols``).

Privacy (``privacy_report`` returns an ``SdpReport``: the central shuffle-DP
(eps, delta) of the whole run, replace-one over all records, computed from
the same config and hparams that drive the compiled loop, plus the per-silo
local guarantee where the paper's analysis has one; each algorithm also has
the calibration direction, target eps -> sigma or P_vec parameters).

* Shuffled Noisy MB-SGD: each silo's transcript is ISRL-DP before shuffling (record level,
  replace-one): R subsampled Gaussians with sensitivity ``2C/K``
  (``local_privacy``; the ``local`` part of the report). The central
  guarantee is a numerical chain with Theorem G.1's structure (whose
  constant C is unspecified): Gaussian local randomizer -> amplification
  by shuffling of the M reports (Feldman-McMillan-Talwar, numerical or closed
  form) -> amplification by subsampling silos and records -> advanced
  composition (``dpjax.accounting.shuffle.isrl_shuffle_chain``);
  ``calibrate_noise`` inverts it.
* Algorithm 6: each round's P_vec invocation is ``(eps, delta)``-shuffle-DP in its
  ``M_r K`` inputs (Theorem 3.2 of Cheu et al. 2022) for the (g, b, p) it
  runs with; one pass over disjoint blocks makes the run ``(eps, delta)``-SDP
  by parallel composition (Theorem 5.2/G.2). The report inverts the P_vec
  calculator at the smallest ``M_r K`` (``dpjax.accounting.pvec.pvec_epsilon``);
  ``pvec_params_for`` is the calculator. The paper gives P_vec messages no
  local (ISRL-DP) guarantee, so ``local`` is None.

P_vec's (g, b, p) are per-run hyperparameters (``SdpHParams.pvec``, traced):
a grid over eps is one ``run_many`` program (no recompilation per eps).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate, keys
from dpjax.accounting import calibrate_noise as calibrate_gaussian
from dpjax.accounting import compute_epsilon
from dpjax.accounting import pvec as pvec_accounting
from dpjax.accounting import shuffle as shuffle_accounting
from dpjax.accounting.events import PrivacyReport, SdpReport
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, ReportPrivacy
from dpjax.algorithms.accelerated import AcceleratedState, AcsaFamily, AcsaSchedule
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, isrl_privacy, smallest_silo
from dpjax.engine import parts
from dpjax.engine.contract import RoundFamily
from dpjax.engine.silos import SiloData
from dpjax.primitives import shuffle_protocols
from dpjax.primitives import sampling as sampling_lib

PyTree = Any

#: Central accountants of Shuffled Noisy MB-SGD: Theorem G.1's chain with the numerical (tight) or
#: closed-form (paper) shuffle bound (``isrl_shuffle_chain`` modes).
A4_ACCOUNTANTS = {"shuffle-tight": "tight", "shuffle-paper": "paper"}


def _scalar(name: str, value) -> float:
    """One run's hyperparameter as a float (ValueError for batched/traced values)."""
    try:
        a = np.asarray(value, np.float64)
    except Exception:
        raise ValueError(f"{name} is traced; pass one run's concrete hyperparameters") from None
    if a.ndim != 0:
        raise ValueError(f"{name} has shape {a.shape}; pass one run's hyperparameters (index the batch first)")
    return float(a)


def _num_params(problem) -> int:
    """d: the number of model parameters (the dimension of a silo message)."""
    shapes = jax.eval_shape(problem.init_params, jax.random.key(0))
    return int(sum(int(np.prod(leaf.shape, dtype=np.int64)) for leaf in jax.tree_util.tree_leaves(shapes)))


def min_available(availability, num_silos: int) -> int:
    """The smallest number of silos any round can have (M for fixed, N for full)."""
    num_silos = _validate.check_int("num_silos", num_silos, min_value=1)
    availability.validate(num_silos)
    if isinstance(availability, sampling_lib.FullAvailability):
        return num_silos
    if isinstance(availability, sampling_lib.FixedAvailability):
        return availability.num_available
    if isinstance(availability, sampling_lib.RandomAvailability):
        return min(m for m, p in enumerate(availability.pmf, start=1) if p > 0)
    raise ValueError(f"availability={availability!r}: no rule for its smallest round size")


def _silo_count(silo_sizes) -> int:
    """N from ``silo_sizes`` (a sequence of per-silo sizes)."""
    if not hasattr(silo_sizes, "__len__"):
        raise ValueError(f"silo_sizes={silo_sizes!r} must list every silo's size (the protocol needs N)")
    return len(silo_sizes)


# ---------------------------------------------------------------------------
# Shuffled Noisy MB-SGD (Section 5, Theorem 5.1/G.1)
# ---------------------------------------------------------------------------


ShuffledState = parts.RoundState


@dataclasses.dataclass(frozen=True)
class ShuffledNoisyMbSgd(RoundFamily):
    """Shuffled Noisy MB-SGD (and, ``private=False``, its non-private twin).

    Args:
      problem: a dpjax problem.
      num_rounds: R.
      num_available: M, the fixed number of silos reporting each round.
      batch_size: K records per silo per round (1 in the paper's Theorem G.1).
      sampling: ``"with-replacement"`` (paper: ``j ~ Uniform[n]``) or
        ``"without-replacement"`` (identical for K = 1).
      output: ``"last"``, ``"average"`` (paper) or ``"window"``.
      projection_radius: radius of W (None: R^d).
      neighboring: ``"replace-one"`` or ``"add-remove"``.
    """

    problem: Any
    num_rounds: int
    num_available: int
    batch_size: int = 1
    sampling: str = "with-replacement"
    private: bool = True
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    neighboring: str = "replace-one"

    hparams_type = MbSgdHParams

    def __post_init__(self):
        _validate.check_int("num_available", self.num_available, min_value=1)
        _validate.check_choice("sampling", self.sampling, ("with-replacement", "without-replacement"))
        self.check_common()
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported here; use 'last', 'average' or 'window'")

    @property
    def availability(self):
        return sampling_lib.FixedAvailability(self.num_available)

    def round(self, data: SiloData) -> parts.FederatedRound:
        """Noisy MB-SGD's round with the M reports shuffled before the (multiset) mean."""
        client = parts.MinibatchGradient(self.problem, self.sampler, self.neighboring)
        return parts.FederatedRound(self.availability, client, parts.SiloGaussian(data.num_silos),
                                    parts.Shuffled("mean"),
                                    parts.ServerOptimizer(projection_radius=self.projection_radius), self.averager)

    def local_privacy(self, silo_sizes, hparams: MbSgdHParams) -> PrivacySpec:
        """The local (pre-shuffle) ISRL-DP guarantee of each silo: R subsampled
        Gaussian releases with sensitivity 2C/K (the ``local`` part of
        ``privacy_report``; shuffle amplification is its ``central`` part)."""
        # K = 1 with replacement is a uniform 1-subset: the same law as without replacement.
        scheme = "without-replacement" if self.batch_size == 1 else self.sampling
        return isrl_privacy(self, silo_sizes, hparams.noise_std, float(hparams.clip_norm) / self.batch_size,
                            sampling=scheme, batch_size=self.batch_size, steps=self.num_rounds,
                            neighboring=self.neighboring)

    def _chain_args(self, silo_size, num_silos, accountant, participation) -> dict:
        if not self.private:
            raise ValueError("private=False: the non-private twin has no privacy guarantee to account")
        if self.neighboring != "replace-one":
            raise ValueError(f"neighboring={self.neighboring!r}: the shuffle chain is a replace-one analysis")
        _validate.check_choice("accountant", accountant, tuple(A4_ACCOUNTANTS))
        _validate.check_choice("participation", participation, shuffle_accounting.PARTICIPATION)
        n = _validate.check_int("silo_size", silo_size, min_value=1)
        num_silos = _validate.check_int("num_silos", num_silos, min_value=1)
        self.availability.validate(num_silos)
        self.sampler.validate(n, self.num_rounds)
        return dict(n=n, silos=num_silos, reports=self.num_available, rounds=self.num_rounds,
                    mode=A4_ACCOUNTANTS[accountant], batch_size=self.batch_size,
                    sampling="without-replacement" if self.batch_size == 1 else self.sampling,
                    participation=participation)

    def privacy(self, silo_sizes, hparams: MbSgdHParams, *, participation: str = "hidden",
                isrl_bound: bool = True) -> PrivacySpec:
        """The central shuffle-DP guarantee of the run (``privacy_report``'s
        ``central``); accountants ``"shuffle-tight"`` (default) and
        ``"shuffle-paper"``; calibration returns ``noise_std``."""
        if not self.private:
            return NoPrivacy("ShuffledNoisyMbSgd(private=False) is the non-private twin")
        n, num_silos = smallest_silo(silo_sizes), _silo_count(silo_sizes)
        opts = dict(participation=participation, isrl_bound=isrl_bound)
        return ReportPrivacy(
            epsilon_fn=lambda delta, acc: self.privacy_report(n, num_silos, hparams, delta, accountant=acc, **opts),
            calibrate_fn=lambda target, delta, acc: {"noise_std": self.calibrate_noise(
                n, num_silos, float(hparams.clip_norm), target, delta, accountant=acc, **opts)},
            accountants=tuple(A4_ACCOUNTANTS), relation="replace-one", privacy_unit="record")

    def privacy_report(self, silo_size: int, num_silos: int, hparams: MbSgdHParams, delta: float, *,
                       accountant: str = "shuffle-tight", participation: str = "hidden", isrl_bound: bool = True,
                       local_delta: float | None = None, local_accountant: str = "rdp") -> SdpReport:
        """Shuffle-DP (eps, delta) of the whole run and each silo's local ISRL-DP guarantee.

        Central epsilon: Theorem G.1's chain (``isrl_shuffle_chain``) and,
        with ``isrl_bound=True`` (default), the smaller of it and the silos'
        ISRL-DP epsilon at ``delta``: (eps0, delta0)-ISRL-DP implies
        (eps0, delta0)-central DP (Lowy & Razaviyayn 2023, App. C) and the
        analyzer's shuffled view is a post-processing of the silos'
        transcripts. The chain analyses each report as a local randomizer
        without the within-silo subsampling, so at moderate N the ISRL-DP
        bound is often the smaller one; ``details`` holds both
        (``chain_epsilon``, ``isrl_epsilon``) and ``central.accountant`` names
        the one that certified.

        Args:
          silo_size: n, records per silo (the smallest silo for unbalanced data).
          num_silos: N.
          hparams: one run's ``MbSgdHParams`` (sigma = ``noise_std``, L = ``clip_norm``).
          delta: the central delta budget (the report states the chain's
            delta_total <= delta, or delta for the ISRL-DP bound).
          accountant: ``"shuffle-tight"`` (numerical FMT bound, ln(1 + q(e^eps - 1))
            subsampling) or ``"shuffle-paper"`` (FMT closed form, 2 q eps
            subsampling; the structure of Theorem G.1's proof).
          participation: ``"hidden"`` (the paper's SDP model: the analyzer sees
            only shuffled messages, so silo sampling amplifies, q = M K/(N n)) or
            ``"public"`` (the analyzer knows who reported: q = K/n).
          isrl_bound: also use ISRL-DP => central DP (see above).
          local_delta: delta0 of the per-silo ISRL-DP (eps0, delta0) of the
            silo's pre-shuffle transcript (``local_privacy``; default ``delta``).
          local_accountant: the accountant of that (eps0, delta0), via
            ``dpjax.accounting.compute_epsilon``.

        Raises:
          ValueError: naming the argument (invalid input, an infinite clip, a
            batched hparams, or -- with ``isrl_bound=False`` -- a condition of
            the chain that fails).
        """
        args = self._chain_args(silo_size, num_silos, accountant, participation)
        delta = _validate.check_open_unit("delta", delta)
        local_delta = delta if local_delta is None else _validate.check_open_unit("local_delta", local_delta)
        sigma = _validate.check_nonnegative("hparams.noise_std", _scalar("hparams.noise_std", hparams.noise_std))
        clip = _validate.check_positive("hparams.clip_norm", _scalar("hparams.clip_norm", hparams.clip_norm))
        schedule = self.local_privacy([args["n"]], hparams).schedule
        local = compute_epsilon(schedule, local_delta, local_accountant)
        notes = [
            f"Numerical chain (Theorem G.1 structure): Gaussian local randomizer (sensitivity 2L), "
            f"{'numerical' if args['mode'] == 'tight' else 'closed-form'} Feldman-McMillan-Talwar amplification "
            f"over M={args['reports']} shuffled reports, subsampling, advanced composition over R={args['rounds']} "
            "rounds; an upper bound, not exact",
            "participation='hidden': the analyzer sees only shuffled messages (the paper's SDP model), so silo "
            "sampling amplifies" if participation == "hidden" else
            "participation='public': no amplification from silo sampling (the analyzer knows who reported)",
        ]
        if self.batch_size > 1:
            notes.append(f"K={self.batch_size} > 1: each report is treated as a local randomizer of its whole "
                         "K-record batch (sensitivity 2L, valid but conservative; the paper's proof fixes K = 1)")
        details: dict = {}
        chain_eps, chain_delta = math.inf, delta
        if sigma > 0:
            n, silos, m, r = args.pop("n"), args.pop("silos"), args.pop("reports"), args.pop("rounds")
            try:
                chain = shuffle_accounting.isrl_shuffle_chain(sigma, clip, n, silos, m, r, delta, **args)
            except ValueError as exc:
                if not isrl_bound:
                    raise ValueError(f"accountant={accountant!r} cannot certify this run: {exc}") from None
                notes.append(f"the {accountant} chain does not apply ({exc})")
                details["chain_error"] = str(exc)
            else:
                chain_eps, chain_delta = chain["epsilon"], chain["delta"]
                details |= dict(chain) | {"message_epsilon": chain["eps0"], "message_delta": chain["delta0"]}
        details["chain_epsilon"] = chain_eps
        eps, dl, name = chain_eps, chain_delta, accountant
        if isrl_bound:
            isrl_eps = local.epsilon if local_delta == delta else compute_epsilon(schedule, delta, local_accountant).epsilon
            details["isrl_epsilon"] = isrl_eps
            if isrl_eps < chain_eps:
                eps, dl, name = isrl_eps, delta, f"isrl-dp:{local_accountant}"
                notes.append(f"certified by the silos' ISRL-DP guarantee ({local_accountant}, ISRL-DP => central DP, "
                             f"App. C); the shuffle chain gives {chain_eps:.4g}")
        central = PrivacyReport(eps, dl, name, self.sampling, "replace-one", "record", sigma, tuple(notes))
        return SdpReport(central, local, details)

    def calibrate_noise(self, silo_size: int, num_silos: int, clip_norm: float, target_epsilon: float,
                        delta: float, *, accountant: str = "shuffle-tight", participation: str = "hidden",
                        isrl_bound: bool = True, local_accountant: str = "rdp") -> float:
        """Calibration direction: the smallest sigma (``noise_std``, absolute) whose
        ``privacy_report`` central epsilon is <= ``target_epsilon`` (chain: bisection,
        1e-6 relative; with ``isrl_bound`` the smaller of that sigma and the ISRL-DP
        calibration ``dpjax.accounting.calibrate_noise`` at the same (eps, delta))."""
        args = self._chain_args(silo_size, num_silos, accountant, participation)
        clip = _validate.check_positive("clip_norm", clip_norm)
        target = _validate.check_positive("target_epsilon", target_epsilon)
        delta = _validate.check_open_unit("delta", delta)
        n, silos, m, r = args.pop("n"), args.pop("silos"), args.pop("reports"), args.pop("rounds")
        mode = args.pop("mode")
        try:
            sigma = shuffle_accounting.isrl_shuffle_sigma(target, clip, n, silos, m, r, delta, mode, **args)
        except ValueError:
            if not isrl_bound:
                raise
            sigma = math.inf
        if isrl_bound:
            unit = MbSgdHParams(learning_rate=1.0, noise_std=1.0, clip_norm=clip)
            sigma = min(sigma, calibrate_gaussian(self.local_privacy([n], unit).schedule, target, delta, local_accountant))
        return sigma


# ---------------------------------------------------------------------------
# Algorithm 6: SDP one-pass accelerated noisy MB-SGD with P_vec
# ---------------------------------------------------------------------------


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SdpHParams:
    """Per-run hyperparameters of Algorithm 6: the AC-SA schedule, the P_vec
    parameters (g, b, p) and the norm bound L of the P_vec inputs
    (per-example clip). All leaves are traced, so runs with different
    (eps, delta) -- different (g, b, p) -- share one compiled program."""

    schedule: AcsaSchedule
    pvec: shuffle_protocols.PvecParams
    clip_norm: Any = 1.0

    @classmethod
    def create(cls, schedule: AcsaSchedule, pvec: shuffle_protocols.PvecParams, clip_norm=1.0) -> "SdpHParams":
        """Validates ``pvec`` (``PvecParams.create``: int32 g, b; float32 p rounded up) and ``clip_norm``."""
        if not isinstance(pvec, shuffle_protocols.PvecParams):
            raise ValueError(f"pvec={pvec!r} must be a PvecParams")
        _validate.check_if_concrete(_validate.check_positive, "clip_norm", clip_norm)
        pvec = shuffle_protocols.PvecParams.create(pvec.granularity, pvec.trials, pvec.probability)
        return cls(schedule, pvec, jnp.asarray(clip_norm, jnp.float32))


@dataclasses.dataclass(frozen=True)
class SdpOnePassAccelerated(AcsaFamily):
    """SDP One-Pass Accelerated Noisy MB-SGD (Algorithm 6).

    Args:
      problem: a dpjax problem.
      num_rounds: R <= floor(n/K) (one pass).
      batch_size: K records per silo per round.
      availability: silo availability model.
      projection_radius: radius of W (None: R^d).
      max_granularity: static upper bound on the traced P_vec precision g
        (rounded sums stay exact in float32 while K * max_granularity < 2^24;
        a run whose g exceeds it fails with a NaN error).

    The P_vec parameters (g, b, p) are per-run hyperparameters
    (``SdpHParams.pvec``; ``pvec_params_for`` computes them for a target eps).
    The non-private twin is ``AcceleratedMbSgd(sampling="one-pass",
    private=False)`` with the same schedule.
    """

    problem: Any
    num_rounds: int
    batch_size: int
    availability: Any = sampling_lib.FullAvailability()
    projection_radius: float | None = None
    max_granularity: int = 2**14

    hparams_type = SdpHParams

    def __post_init__(self):
        self.check_common()
        _validate.check_int("max_granularity", self.max_granularity, min_value=1)
        if self.batch_size * self.max_granularity >= 2**24:
            raise ValueError(
                f"max_granularity={self.max_granularity} times batch_size={self.batch_size} must be < 2^24 "
                "(exact float32 rounded sums)"
            )
        if self.projection_radius is not None:
            _validate.check_positive("projection_radius", self.projection_radius)

    @property
    def sampler(self):
        return sampling_lib.OnePass(self.batch_size)

    @property
    def dim(self) -> int:
        """d, the number of parameters: the dimension of every P_vec input."""
        return _num_params(self.problem)

    def init(self, params, hparams: SdpHParams, data: SiloData, run_key) -> AcceleratedState:
        return self.init_state(params, hparams, data, run_key)

    def step(self, state: AcceleratedState, data: SiloData, key) -> tuple[AcceleratedState, dict]:
        """AC-SA round whose gradient at ``w_md`` is: clipped per-example vectors of
        every silo's next block (``parts.ClippedExampleVectors``) -> P_vec local
        randomizer (``parts.PvecRandomizer``) -> shuffled P_vec analyzer over the
        available silos, divided by ``M_r K`` (``parts.PvecAnalyzer``)."""
        hp = state.hparams
        available = self.availability.sample(keys.stream_key(key, "availability"), data.num_silos)
        client = parts.ClippedExampleVectors(self.problem, self.sampler)
        privatizer = parts.PvecRandomizer(data.num_silos, self.max_granularity)
        analyzer = parts.PvecAnalyzer(self.batch_size)

        def problem_step(w_md):
            messages = client(w_md, data, state.sampler_states, key, state.round, hp.clip_norm)
            reports, _ = privatizer.update(messages, privatizer.init(key), hp.pvec, hp.clip_norm)
            return analyzer(reports, available, hp.pvec, hp.clip_norm, w_md), {"num_available": jnp.sum(available)}

        return self.acsa_step(state, problem_step)

    # -- privacy -----------------------------------------------------------
    def min_vectors(self, num_silos: int) -> int:
        """The fewest P_vec inputs of any round, ``min M_r * K``: the binomial
        noise is Bin(M_r K b, p), so the smallest round is the least private."""
        return min_available(self.availability, num_silos) * self.batch_size

    def pvec_params_for(self, num_silos: int, epsilon: float, delta: float, *,
                        mode: str = "lemma_opt") -> shuffle_protocols.PvecParams:
        """Calibration direction: P_vec parameters for a target (eps, delta)-SDP run.

        The P_vec calculator (proof of Cheu et al. Theorem 3.2; ``dpjax.accounting.pvec.pvec_params``;
        ``mode="lemma_opt"``, the lemma-optimised constants, by default;
        ``"paper"`` = Theorem 3.2's printed choice) for ``min_vectors(num_silos)``
        inputs of dimension ``dim``. Pass the result to ``SdpHParams.create``.
        """
        calc = pvec_accounting.pvec_params(epsilon, delta, self.min_vectors(num_silos), self.dim, mode)
        if calc.g > self.max_granularity:
            raise ValueError(f"max_granularity={self.max_granularity} is below the calculator's g={calc.g}")
        return shuffle_protocols.PvecParams.from_calculator(calc)

    def privacy(self, silo_sizes, hparams: SdpHParams) -> PrivacySpec:
        """The run's shuffle-DP guarantee from the P_vec parameters it runs with.

        Accountants: ``"pvec-lemma"`` (corrected Lemma 3.3 constant, default;
        calibration with the lemma-optimised calculator) and ``"pvec-printed"``
        (the paper's printed constants; calibration with Theorem 3.2's choice).
        Calibration returns ``pvec``.
        """
        n, num_silos = smallest_silo(silo_sizes), _silo_count(silo_sizes)
        compositions = {"pvec-lemma": ("lemma", "lemma_opt"), "pvec-printed": ("printed", "paper")}
        return ReportPrivacy(
            epsilon_fn=lambda delta, acc: self.privacy_report(n, num_silos, hparams, delta,
                                                              composition=compositions[acc][0]),
            calibrate_fn=lambda target, delta, acc: {"pvec": self.pvec_params_for(
                num_silos, target, delta, mode=compositions[acc][1])},
            accountants=tuple(compositions), relation="replace-one", privacy_unit="record")

    def privacy_report(self, silo_size: int, num_silos: int, hparams: SdpHParams, delta: float, *,
                       composition: str = "lemma") -> SdpReport:
        """Shuffle-DP (eps, delta) of the whole run from the (g, b, p) it runs with.

        Each round's P_vec call on its M_r K >= ``min_vectors`` inputs is
        (eps, delta)-SDP with eps from ``dpjax.accounting.pvec.pvec_epsilon``
        (Lemma 3.1 per coordinate, Lemma 3.3 across coordinates;
        ``composition="lemma"`` = the corrected Hoeffding constant, default;
        ``"printed"`` = the paper's printed constants); records are used once
        (one pass, R K <= n), so the run is (eps, delta)-SDP (parallel
        composition; Lowy & Razaviyayn 2023, Thm 5.2/G.2). The paper gives
        the silo messages no local guarantee: ``local`` is None.

        ``noise_std`` of the report is the per-coordinate std of the privacy
        noise in the averaged gradient of the smallest round,
        (2L/g) sqrt(m b p (1 - p))/m with m = ``min_vectors``.

        Raises:
          ValueError: naming the argument (invalid input, R K > n, g above
            ``max_granularity``, batched hparams, a failed lemma hypothesis).
        """
        n = _validate.check_int("silo_size", silo_size, min_value=1)
        self.sampler.validate(n, self.num_rounds)  # one pass: every record in at most one round
        delta = _validate.check_open_unit("delta", delta)
        m = self.min_vectors(num_silos)
        g, b, p = hparams.pvec.numbers()
        if g > self.max_granularity:
            raise ValueError(f"hparams.pvec.granularity={g} exceeds max_granularity={self.max_granularity}")
        clip = _validate.check_positive("hparams.clip_norm", _scalar("hparams.clip_norm", hparams.clip_norm))
        if b == 0 or p == 0.0:
            raise ValueError(f"hparams.pvec has trials={b}, probability={p}: no privacy noise, epsilon = inf")
        cert = pvec_accounting.pvec_epsilon(g, b, p, m, self.dim, delta, composition)
        std = (2 * clip / g) * math.sqrt(m * b * p * (1 - p)) / m
        notes = (
            f"P_vec (Cheu et al. 2022, Thm 3.2; Lemma 3.1 per coordinate, Lemma 3.3 "
            f"{'with the corrected Hoeffding constant' if composition == 'lemma' else 'as printed'}) at the "
            f"smallest round, M_r K = {m} inputs of dimension d = {self.dim}",
            "one pass over disjoint blocks: parallel composition over rounds (Lowy & Razaviyayn 2023, Thm 5.2/G.2); "
            "no amplification by silo sampling is claimed",
        )
        central = PrivacyReport(cert.epsilon, cert.delta, f"pvec-{composition}", "one-pass", "replace-one", "record",
                                std, notes)
        details = {"eps_hat": cert.eps_hat, "delta_hat": cert.delta_hat, "gamma": cert.gamma, "alpha": cert.alpha,
                   "min_vectors": m, "dim": self.dim, "granularity": g, "trials": b, "probability": p,
                   "bits_per_vector": self.dim * (g + b)}
        return SdpReport(central, None, details)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-shuffled", ShuffledNoisyMbSgd, twin="shuffled")
register_family("sdp-accelerated", SdpOnePassAccelerated, noise_scale_field=None)  # calibration sets pvec
