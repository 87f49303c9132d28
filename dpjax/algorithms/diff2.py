"""DIFF2: differentially private optimisation via gradient differences.

Murata & Suzuki, "DIFF2: Differential Private Optimization via Gradient
Differences for Nonconvex Distributed Learning", ICML 2023.

Algorithms (Sections 3-5):

* ``Diff2GD`` -- Alg. 1 (DIFF2 framework) with the GD routine (Alg. 3). Round ``r = 1..R`` is a *restart* round iff
  ``(r - 1) mod T == 0`` (round 1 always is). Restart round: every client ``p`` sends the ClippedMean (Alg. 2) of its
  per-record gradients at ``x_{r-1}`` with radius ``C1``; the server averages over the ``P`` clients, adds ONE Gaussian
  draw and *resets* the estimator to that value. Difference round: every client sends the ClippedMean of the per-record
  gradient *differences* ``grad l(x_{r-1}, z) - grad l(x_{r-2}, z)`` with radius
  ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||``; the server adds one Gaussian draw to the average and the previous noisy
  estimator to that. GD routine: ``x_r = x_{r-1} - eta v~_r``. With ``restart_every_round=True`` it is **DP-GD** (every
  round is a restart round and the difference branch is not even traced); with ``private=False`` (and
  ``restart_every_round=True``) it is non-private **GD (ref)** (Section 6).
* ``Diff2BvrLSgd`` -- Alg. 1 with the BVR-L-SGD routine (Alg. 4): after the server step
  ``x_{1,r-1} = x_{r-1} - eta v~_r`` the client ``p_r = r mod P`` (0-indexed; the paper's ``1 + (r mod P)``) runs
  ``K - 1`` local SARAH-type steps on minibatches of ``b`` records drawn without replacement, each privatised with its
  own gradient-difference Gaussian mechanism (radius ``C3 ||x_{k-1,r-1} - x_{k-2,r-1}||``); ``x_r = x_{K,r-1}``.

``Diff2GD`` is a declaration of parts (``dpjax.algorithms.diff2_parts``, composed by ``dpjax.engine.chain``): the full
batch of every silo -> ``Diff2Client`` (per-record gradients or differences; state ``x_{r-2}`` and the carried
per-record work) -> ``RadiusClipper`` (``C1`` or ``C_{2,r}``; bound ``radius / n_p``) -> ``SiloMean`` (bound / P) ->
``RoundNoise`` on the server -> ``EstimatorSgd`` (keeps ``v~``) -> ``RandomIterate`` / last.

Noise: every std is ``noise multiplier x sensitivity``, the sensitivity read
from the clipped value: replacing one record of client ``p`` moves the server average by at most ``2 C / (n_p P)``
(``C = C1`` or ``C_{2,r}``; the additive ``v~_{r-1}`` is already released), so a round's std is ``z x 2 C / (n_min P)``.
The paper's ``sigma_1, sigma_2, sigma_3`` (Props. 4.1, E.2) are multipliers of the *radius* (std ``sigma C``, the
``1/(n_min P)`` already inside); ``noise_multipliers_from_paper`` converts them with the family's own sensitivities
(``message_sensitivity``), never a re-typed formula.

Privacy guarantee (Section 2, Prop. 4.1 / Prop. E.2): central DP with a trusted server, record-level, **replace-one**
neighbouring relation inside a fixed silo. Every round is a Gaussian mechanism of multiplier ``z`` whatever the radius
(``C1`` and ``C2`` do not enter the privacy cost); ``privacy()`` composes ``m = ceil(R/T)`` restart and ``R - m``
difference releases (``dpjax.accounting.events.DpPlan``; calibration keeps the multipliers' ratio). BVR local steps are
additionally without-replacement subsampled Gaussian releases of sensitivity ``2 C_3 ||.|| / b`` (Lemma B.7). The
released transcript is the iterates, the output candidates and the noisy estimators (BVR: the whole local trajectory).

Output (the utility theorems of Sections 4-5 are for a random iterate): ``output="random"`` returns ``x_{r^-1}`` with
``r^ ~ Unif{1..R}`` (``x_R`` is never output; BVR: the local starting point ``x_{k^-1, r^-1}``), drawn from the run's
``"output"`` stream; ``"last"`` returns the last iterate (used for the experiments' curves).

Keys: the server noise of round ``r`` comes from the ``"server_noise"`` stream of the round key, BVR minibatches from
``"sampling"`` and local noise from ``"local"`` (folded with the local step ``k``), the BVR output index ``k^`` from
``"output"``. Because the round key only depends on ``r``, runs that differ in ``T``, ``eta`` or ``C`` share their
random numbers, and DIFF2-GD with ``T = 1`` is bit-identical to DP-GD.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dpjax import _validate
from dpjax.accounting.events import DpPlan
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PrivacySpec
from dpjax.algorithms.hparams import HParams, hparam
from dpjax.algorithms.diff2_parts import (PATHS, Diff2Client, EstimatorSgd, RadiusClipper, RandomIterate,
                                          RestartSchedule, RoundNoise, SiloMean, StepNoise, clipping_path,
                                          difference_radius, is_restart_round)
from dpjax.algorithms.diff2_local import LocalMinibatches, LocalSarahSteps, RandomLocalIterate, SarahRecursion
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.roles import Batch, Context
from dpjax.engine.silos import SiloData
from dpjax.parts import Averager, SiloBatches
from dpjax.primitives.sampling import FullAvailability

PyTree = Any
OUTPUTS = ("random", "last")
NOISE_FIELDS = ("noise_multiplier_restart", "noise_multiplier_diff", "noise_multiplier_local")
CLIP_FIELDS = ("clip_restart", "clip_diff", "clip_local")

__all__ = ["Diff2HParams", "Diff2GD", "Diff2BvrLSgd", "dp_gd", "nonprivate_gd", "is_restart_round",
           "clipping_path", "difference_radius", "silo_messages", "PATHS"]


# ----------------------------------------------------------------------------- hparams
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Diff2HParams(HParams):
    """Per-run (sweepable) hyper-parameters of the DIFF2 family.

    Attributes:
      learning_rate: eta.
      restart_interval: T >= 1 (int32; traced, so a sweep can vmap over it).
        Ignored when the algorithm has ``restart_every_round=True``.
      clip_restart: C1, per-record gradient clipping radius in restart rounds
        (``inf`` disables clipping; then the run has no privacy guarantee).
      clip_diff: C2, clipping *coefficient* of per-record gradient differences;
        the radius in round r is ``C2 ||x_{r-1} - x_{r-2}||``.
      noise_multiplier_restart: z1, restart rounds' noise std divided by their sensitivity (std ``z1 x 2 C1/(n_min P)``;
        the paper's sigma_1 is ``z1 x 2/(n_min P)``, see ``noise_multipliers_from_paper``).
      noise_multiplier_diff: z2, likewise for difference rounds (radius ``C_{2,r}``).
      clip_local: C3 (BVR local steps only; radius ``C3 ||x_{k-1} - x_{k-2}||``).
      noise_multiplier_local: z3 (BVR local steps only; std ``z3 x 2 C3 ||.||/b``)."""

    # ``create(learning_rate, restart_interval=1, ..., dtype=None)`` checks each concrete value by the rule
    # declared here (HParams); ``dtype`` overrides the float32 of the float fields.
    learning_rate: Any = hparam()
    restart_interval: Any = hparam(1, _validate.check_int, dtype=jnp.int32, min_value=1)
    clip_restart: Any = hparam(1.0, allow_inf=True)
    clip_diff: Any = hparam(1.0, allow_inf=True)
    noise_multiplier_restart: Any = hparam(0.0, _validate.check_nonnegative)
    noise_multiplier_diff: Any = hparam(0.0, _validate.check_nonnegative)
    clip_local: Any = hparam(1.0, allow_inf=True)
    noise_multiplier_local: Any = hparam(0.0, _validate.check_nonnegative)


# ----------------------------------------------------------------------------- shared by both families
def _sizes(silo_sizes) -> tuple[int, ...]:
    sizes = (silo_sizes,) if np.ndim(silo_sizes) == 0 else tuple(silo_sizes)
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    return tuple(_validate.check_int(f"silo_sizes[{i}]", int(n), min_value=1) for i, n in enumerate(sizes))


def _full_batch(num_silos: int) -> Batch:
    ones = jnp.ones((num_silos,), bool)
    return Batch(None, ones, None, ones[:, None].astype(jnp.float32), ~ones, num_silos)


def _mean_of(aggregator, messages, num_silos: int):
    """``aggregator``'s value on the ``num_silos`` silos' ``messages`` (host-side sensitivities)."""
    ctx = Context(jnp.zeros((), jnp.int32), jax.random.key(0), None, batch=_full_batch(num_silos))
    return aggregator.update(messages, aggregator.init(None, ctx), ctx)[0]


class _Diff2Family(ChainFamily):
    """What DIFF2-GD and DIFF2-BVR-L-SGD share: the estimator round's parts and the conversion of
    the paper's radius multipliers into noise multipliers."""

    hparams_type = Diff2HParams
    noise_fields = NOISE_FIELDS  # the non-private twin zeroes them
    clip_fields = CLIP_FIELDS  # ... and sets these to inf
    # Silo blocks run the per-silo stage with per-silo states only; DIFF2's client keeps x_{r-2}, one
    # iterate shared by every silo (and BVR's local steps read one client's records of the whole data).
    supports_silo_blocks = False
    silo_blocks_refusal = ("cannot run on blocks of silos: its client's state x_{r-2} is one iterate shared "
                           "by every silo, not a per-silo state (run it without silo_block)")

    def _check(self) -> None:
        if not hasattr(self.problem, "loss"):
            raise ValueError(f"problem={self.problem!r} must provide loss(params, x, y)")
        _validate.check_int("num_rounds", self.num_rounds, min_value=1)
        _validate.check_choice("output", self.output, OUTPUTS)

    def _estimator_parts(self, shape: DataShape, schedule: RestartSchedule, averager, *, path: str = "auto",
                         carry: bool = False, server=None) -> Parts:
        """The full batch of every silo, then the fold: client, clipper, the silos' mean, ONE noise on
        the mean (after the aggregator: central DP), the estimator's server (``server``, default
        ``EstimatorSgd``) and the output rule."""
        return Parts(
            selection=SiloBatches(FullAvailability(), "full", None, dense=True, all_silos=True, unit="record"),
            chain=(Diff2Client(self.problem, schedule, path, carry, shape.records),
                   RadiusClipper(),
                   SiloMean(),
                   RoundNoise(schedule),
                   server if server is not None else EstimatorSgd(schedule),
                   averager))

    def message_sensitivity(self, silo_sizes, radius: float = 1.0) -> float:
        """The l2 sensitivity of a round's released mean when the clip radius is ``radius``, as the
        round's own clipper and aggregator state it (``2 radius / (n_min P)``, replace-one)."""
        sizes = _sizes(silo_sizes)
        p = self.parts(DataShape.of_sizes(sizes))
        with jax.ensure_compile_time_eval():  # host-side numbers, also when called while tracing
            clipped = p.role("clipper").sensitive(jnp.zeros((len(sizes), 1)), radius, jnp.asarray(sizes))
            return float(_mean_of(p.role("aggregator"), clipped, len(sizes)).sensitivity)

    def noise_multipliers_from_paper(self, silo_sizes, **sigmas) -> dict:
        """Noise multipliers of rounds whose noise std is ``sigma x radius`` (the paper's ``sigma_restart`` = sigma_1,
        ``sigma_diff`` = sigma_2, ``sigma_local`` = sigma_3 of Props. 4.1 / E.2): ``sigma / sensitivity at radius 1``
        with this family's sensitivities. Values may be arrays (one per configuration, float64) or jax arrays; returns
        ``{noise_multiplier_<kind>: z}``."""
        out = {}
        for name, sigma in sigmas.items():
            kind = name.removeprefix("sigma_")
            if f"noise_multiplier_{kind}" not in NOISE_FIELDS:
                raise ValueError(f"{name}= is not a DIFF2 noise level; use sigma_restart, sigma_diff, sigma_local")
            sens = self.local_sensitivity() if kind == "local" else self.message_sensitivity(silo_sizes)
            if isinstance(sigma, jax.Array):  # traced (e.g. an audit's mutated input)
                out[f"noise_multiplier_{kind}"] = sigma / sens
            else:
                z = np.asarray(sigma, np.float64) / sens
                out[f"noise_multiplier_{kind}"] = float(z) if z.ndim == 0 else z
        return out

    def local_sensitivity(self, radius: float = 1.0) -> float:
        raise ValueError(f"{type(self).__name__} has no local steps (sigma_local is DIFF2-BVR-L-SGD's)")

    def validate(self, data: SiloData) -> None:
        if data.min_size < 1:
            raise ValueError(f"data has an empty silo (sizes={data.silo_sizes()})")


# ----------------------------------------------------------------------------- DIFF2-GD
@dataclasses.dataclass(frozen=True)
class Diff2GD(_Diff2Family):
    """DIFF2-GD (Alg. 1 + Alg. 3), DP-GD and non-private GD.

    Args:
      problem: a dpjax problem (per-record ``loss``, ``init_params``, ``evaluate``).
      num_rounds: R.
      restart_every_round: static ``T = 1`` (DP-GD): the difference branch is not traced (half the per-record
        gradients); bit-identical to ``restart_interval = 1``.
      private: False gives non-private GD (no clipping, no noise).
      output: ``"random"`` (Alg. 1: ``x_{r^-1}``, ``r^ ~ Unif{1..R}``) or ``"last"``.
      cache_grads: keep the per-record work at ``x_{r-1}`` in the client's state so a difference round does one pass
        over the data instead of two: the per-record gradients (memory ``P x n_max x d`` per run) on the per-record
        path, the layers' output gradients and parameter-dependent inputs on the ghost path (``P x n_max x`` a few times
        the layer widths); same results.
      path: ``"auto"`` | ``"ghost"`` | ``"per-record"``: how per-record gradients (differences) are clipped, see
        ``clipping_path``; ``path_used(params, data)`` says which one runs."""

    problem: Any
    num_rounds: int
    restart_every_round: bool = False
    private: bool = True
    output: str = "random"
    cache_grads: bool = False
    path: str = "auto"

    def __post_init__(self):
        self._check()
        _validate.check_choice("path", self.path, PATHS)

    def parts(self, shape: DataShape) -> Parts:
        averager = RandomIterate(self.num_rounds) if self.output == "random" else Averager("last")
        return self._estimator_parts(shape, RestartSchedule(self.restart_every_round), averager, path=self.path,
                                     carry=self.cache_grads)

    def path_used(self, params, data: SiloData) -> str:
        """``"ghost"`` or ``"per-record"``: the path ``step`` runs on this model and data."""
        return clipping_path(self.problem, params, data.x[0], data.y[0], self.path)

    def restart_count(self, restart_interval) -> int:
        """m = ceil(R/T) (T = 1 when ``restart_every_round``)."""
        return RestartSchedule(self.restart_every_round).count(self.num_rounds, restart_interval)


def dp_gd(problem, num_rounds: int, output: str = "random") -> Diff2GD:
    """DP-GD (Section 6): DIFF2-GD with every round a restart round."""
    return Diff2GD(problem, num_rounds, restart_every_round=True, private=True, output=output)


def nonprivate_gd(problem, num_rounds: int, output: str = "random") -> Diff2GD:
    """GD (ref) (Section 6): no clipping, no noise, full gradient every round."""
    return Diff2GD(problem, num_rounds, restart_every_round=True, private=False, output=output)


def silo_messages(problem, params, prev_params, data: SiloData, restart, clip_restart, clip_diff, *,
                  path: str = "auto"):
    """Every silo's ``d_r^(p)`` (step 2 of Alg. 1, silo axis first) as the ``Diff2GD`` parts compute
    it: the ClippedMean of the per-record gradients at ``params`` (``restart``, radius ``C1``) or of
    the per-record differences to ``prev_params`` (radius ``C2 ||params - prev_params||``)."""
    family = Diff2GD(problem, 2, path=path)
    p = family.parts(DataShape.of(data))
    hp = Diff2HParams(1.0, jnp.int32(2), clip_restart, clip_diff)
    # round 1 restarts, round 2 (T = 2) does not
    ctx = Context(jnp.where(restart, 0, 1), jax.random.key(0), hp, data, None, params, params)
    batch, _ = p.selection.update(data, p.selection.init(params, ctx), ctx)
    ctx = ctx._replace(batch=batch)
    client, clipper = p.role("client"), p.role("clipper")
    units, _ = client.update(batch, client.init(prev_params, ctx), ctx)
    return clipper.update(units, clipper.init(params, ctx), ctx)[0].value


# ----------------------------------------------------------------------------- DIFF2-BVR-L-SGD
@dataclasses.dataclass(frozen=True)
class Diff2BvrLSgd(_Diff2Family):
    """DIFF2-BVR-L-SGD (Alg. 1 + Alg. 4).

    ``problem``, ``num_rounds``, ``private`` and ``output`` are as for ``Diff2GD``.

    Args:
      local_steps: K >= 1 (the server step plus K-1 local steps per round).
      batch_size: b, local minibatch size (without replacement, b <= n_min).
      server_learning_rate_scale: optional factor for the server step
        (Lemma F.1's proof hints at a second one; default 1: a single step size as in Alg. 4).

    The DIFF2 estimator ``v~_r`` is the one of ``Diff2GD`` (all clients, round-level iterates ``x_{r-1}, x_{r-2}``,
    which are K updates apart), from the same parts. Client ``p_r = r mod P`` (0-indexed, r 1-based; the paper's
    ``1 + (r mod P)``) runs the local loop; only its data enters the local steps. ``v~_{k,r}`` recurses on the
    previous *noisy* local estimator.

    Its round is ``Diff2GD``'s fold with ``LocalSarahSteps`` as the server (``dpjax.algorithms.diff2_local``): the
    estimator's server step, then the ``K - 1`` local steps under ``lax.scan``, each folding the inner chain
    ``RadiusClipper`` on ``clip_local``, ``SiloMean`` of the one client, ``SarahRecursion``, ``StepNoise``; the output
    rule ``RandomLocalIterate`` records ``x_{k^-1, r^-1}``. ``privacy()`` composes the estimator's ``DpPlan`` with the
    local steps' ``DpPlan``, read from the same parts."""

    problem: Any
    num_rounds: int
    local_steps: int
    batch_size: int
    private: bool = True
    output: str = "random"
    server_learning_rate_scale: float = 1.0

    def __post_init__(self):
        self._check()
        _validate.check_int("local_steps", self.local_steps, min_value=1)
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_positive("server_learning_rate_scale", self.server_learning_rate_scale)

    def validate(self, data: SiloData) -> None:
        if self.batch_size > data.min_size:
            raise ValueError(f"batch_size={self.batch_size} must be <= the smallest silo size {data.min_size}")

    def parts(self, shape: DataShape) -> Parts:
        schedule = RestartSchedule(False)
        averager = RandomLocalIterate(self.num_rounds) if self.output == "random" else Averager("last")
        server = LocalSarahSteps(
            self.problem, EstimatorSgd(schedule, lr_scale=self.server_learning_rate_scale),
            LocalMinibatches(self.batch_size), self.local_steps,
            inner=(RadiusClipper(None, "clip_local"), SiloMean(), SarahRecursion(), StepNoise()),
            record_candidate=self.output == "random")
        return self._estimator_parts(shape, schedule, averager, server=server)

    def local_parts(self):
        """The local steps' parts, read from the declaration: minibatches, clipper (``C3 ||x_{k-1} -
        x_{k-2}||``), the one client's mean (its bound: radius / b), noise."""
        server = self.parts(DataShape(1, 1)).role("server")
        inner = {part.roles[0]: part for part in server.inner}
        return server.batches, inner["clipper"], inner["aggregator"], inner["privatizer"]

    def local_sensitivity(self, radius: float = 1.0) -> float:
        """The l2 sensitivity of one local step's release at clip radius ``radius`` (``2 radius / b``)."""
        _, clipper, mean, _ = self.local_parts()
        with jax.ensure_compile_time_eval():
            clipped = clipper.sensitive(jnp.zeros((1, 1)), radius, jnp.ones((1,)) * self.batch_size)
            return float(_mean_of(mean, clipped, 1).sensitivity)

    def local_client(self, round_number, num_silos: int):
        """``p_r`` (0-indexed) for 1-based round ``r``."""
        return LocalSarahSteps.local_client(round_number, num_silos)

    def local_release_count(self, num_silos: int, local_count: str = "paper") -> int:
        """Local releases per client: ``K ceil(R/P)`` (``"paper"``, Prop. E.2) or the exact
        ``(K-1) max_p #{r : p_r = p} = (K-1) ceil(R/P)`` (``"exact"``)."""
        _validate.check_choice("local_count", local_count, ("paper", "exact"))
        per_step = self.local_steps if local_count == "paper" else self.local_steps - 1
        return per_step * math.ceil(self.num_rounds / num_silos)

    def local_plan(self, silo_sizes, hparams, local_count: str = "paper") -> DpPlan | None:
        """The local steps' releases (without-replacement batches of b, amplified at the smallest
        silo); None when there are none."""
        sizes = _sizes(silo_sizes)
        steps = self.local_release_count(len(sizes), local_count)
        if steps == 0:
            return None
        batches, clipper, _, privatizer = self.local_parts()
        return DpPlan(batches.event(sizes), clipper.event(hparams), privatizer.events(hparams, steps),
                      self.num_rounds, f"{type(self).__name__} local steps")

    def privacy(self, silo_sizes, hparams: Diff2HParams, local_count: str = "paper") -> PrivacySpec:
        """Restart, difference and local releases composed (Prop. E.2): the estimator's ``DpPlan``
        and the local steps' ``DpPlan``; calibration keeps the ratios of the three multipliers."""
        spec = super().privacy(silo_sizes, hparams)
        local = self.local_plan(silo_sizes, hparams, local_count)
        if isinstance(spec, NoPrivacy) or local is None:
            return spec
        local_spec = local.spec()
        if isinstance(local_spec, NoPrivacy):
            return local_spec
        return GaussianPrivacy(spec.schedules + local_spec.schedules, spec.noise_fields + local_spec.noise_fields,
                               multipliers=True, events=spec.events + local_spec.events)


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("diff2-gd", Diff2GD,
                "DIFF2-GD (Murata & Suzuki): clipped, noised gradient differences with periodic restarts",
                twin={"gd": "non-private gradient descent, the twin of diff2-gd"})
register_family("dp-gd", Diff2GD,
                "DP-GD: DIFF2-GD restarting every round (a full clipped, noised gradient each round)",
                fixed={"restart_every_round": True})
register_family("diff2-bvr", Diff2BvrLSgd,
                "DIFF2-BVR-L-SGD (Murata & Suzuki): DIFF2 with local variance-reduced SGD steps",
                twin={"bvr-lsgd": "non-private BVR-L-SGD, the twin of diff2-bvr"})
