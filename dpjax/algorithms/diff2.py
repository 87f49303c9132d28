"""DIFF2: differentially private optimisation via gradient differences.

Murata & Suzuki, "DIFF2: Differential Private Optimization via Gradient
Differences for Nonconvex Distributed Learning", ICML 2023.

Algorithms (Sections 3-5):

* ``Diff2GD`` -- Alg. 1 (DIFF2 framework) with the GD routine (Alg. 3).
  Round ``r = 1..R`` is a *restart* round iff ``(r - 1) mod T == 0``
  (round 1 always is). Restart round: every client ``p`` sends the
  ClippedMean (Alg. 2) of its per-record gradients at ``x_{r-1}`` with radius
  ``C1``; the server averages over the ``P`` clients, adds ONE Gaussian draw
  ``N(0, (sigma1 C1)^2 I)`` and *resets* the estimator to that value.
  Difference round: every client sends the ClippedMean of the per-record
  gradient *differences* ``grad l(x_{r-1}, z) - grad l(x_{r-2}, z)`` with radius
  ``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||``; the server adds the average to the
  previous noisy estimator and one draw ``N(0, (sigma2 C_{2,r})^2 I)``.
  GD routine: ``x_r = x_{r-1} - eta v~_r``.
  With ``restart_every_round=True`` it is **DP-GD** (every round is a
  restart round and the difference branch is not even traced); with
  ``private=False`` (and ``restart_every_round=True``) it is non-private
  **GD (ref)** (Section 6).
* ``Diff2BvrLSgd`` -- Alg. 1 with the BVR-L-SGD routine (Alg. 4): after the
  server step ``x_{1,r-1} = x_{r-1} - eta v~_r`` the client
  ``p_r = r mod P`` (0-indexed; the paper's ``1 + (r mod P)``) runs ``K - 1``
  local SARAH-type steps on minibatches of ``b`` records drawn without
  replacement, each privatised with its own gradient-difference Gaussian
  mechanism (radius ``C3 ||x_{k-1,r-1} - x_{k-2,r-1}||``, noise std
  ``sigma3`` times that radius); ``x_r = x_{K,r-1}``.

Privacy guarantee (Section 2, Prop. 4.1 / Prop. E.2): central DP with a
trusted server, record-level, **replace-one** neighbouring relation inside a
fixed silo (``D_p`` and ``D'_p`` have the same size and differ in one record).
Replacing one record of client ``p`` moves the server average by at most
``2 C / (n_p P)`` (``C = C1`` or ``C_{2,r}``; the additive ``v~_{r-1}`` is
already released), and the noise std is ``sigma C``, so every round is a
Gaussian mechanism with a data-independent RDP curve ``2 alpha/(n_p^2 P^2
sigma^2)``; ``C1`` and ``C2`` do not enter the privacy cost. BVR local steps
are additionally ``(alpha, 2 alpha/(b^2 sigma3^2))``-RDP before the
without-replacement amplification (Lemma B.7). The released transcript is the
iterates, the output candidates and the noisy estimators (BVR: the whole local
trajectory). ``privacy()`` hands this to ``dpjax.accounting``.
Noise multipliers ``sigma1, sigma2(, sigma3)`` are *multipliers of the
clipping radius*, already containing the ``1/(n_min P)`` factor -- they are
not rescaled here.

Output (the utility theorems of Sections 4-5 are for a random iterate): ``output="random"`` returns ``x_{r^-1}`` with
``r^ ~ Unif{1..R}`` (``x_R`` is never output; BVR: the local starting point
``x_{k^-1, r^-1}``), drawn from the run's ``"output"`` stream; ``"last"``
returns the last iterate (used for the experiments' curves).

Keys: the server noise of round ``r`` comes from the ``"server_noise"`` stream
of the round key, BVR minibatches from ``"sampling"`` and local noise from
``"local"`` (folded with the local step ``k``), the BVR output index ``k^``
from ``"output"``. Because the round key only depends on ``r``, runs that
differ in ``T``, ``eta`` or ``C`` share their random numbers, and DIFF2-GD
with ``T = 1`` is bit-identical to DP-GD.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyUnit, Sampling
from dpjax.accounting.privacy_spec import GaussianPrivacy, NoPrivacy, PrivacySpec
from dpjax.engine.contract import FamilyBase
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, ghost_clipping, noise
from dpjax.primitives.sampling import sample_without_replacement

PyTree = Any
OUTPUTS = ("random", "last")
PATHS = ("auto", "ghost", "per-record")


def _tree_sub(a: PyTree, b: PyTree) -> PyTree:
    return jax.tree_util.tree_map(jnp.subtract, a, b)


def _tree_axpy(alpha, x: PyTree, y: PyTree) -> PyTree:
    """``y + alpha * x``."""
    return jax.tree_util.tree_map(lambda xi, yi: yi + jnp.asarray(alpha, yi.dtype) * xi, x, y)


def _tree_select(pred, a: PyTree, b: PyTree) -> PyTree:
    return jax.tree_util.tree_map(lambda u, w: jnp.where(pred, u, w), a, b)


def _tree_zeros(tree: PyTree) -> PyTree:
    return jax.tree_util.tree_map(jnp.zeros_like, tree)


# ----------------------------------------------------------------------------- hparams
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Diff2HParams:
    """Per-run (sweepable) hyper-parameters of the DIFF2 family.

    Attributes:
      learning_rate: eta.
      restart_interval: T >= 1 (int32; traced, so a sweep can vmap over it).
        Ignored when the algorithm has ``restart_every_round=True``.
      clip_restart: C1, per-record gradient clipping radius in restart rounds
        (``inf`` disables clipping; then the run has no privacy guarantee).
      clip_diff: C2, clipping *coefficient* of per-record gradient differences;
        the radius in round r is ``C2 ||x_{r-1} - x_{r-2}||``.
      sigma_restart: sigma1, noise multiplier of restart rounds (std sigma1 C1).
      sigma_diff: sigma2, noise multiplier of difference rounds.
      clip_local: C3 (BVR local steps only).
      sigma_local: sigma3 (BVR local steps only).
    """

    learning_rate: Any
    restart_interval: Any = 1
    clip_restart: Any = 1.0
    clip_diff: Any = 1.0
    sigma_restart: Any = 0.0
    sigma_diff: Any = 0.0
    clip_local: Any = 1.0
    sigma_local: Any = 0.0

    @classmethod
    def create(
        cls,
        learning_rate,
        restart_interval=1,
        clip_restart=1.0,
        clip_diff=1.0,
        sigma_restart=0.0,
        sigma_diff=0.0,
        clip_local=1.0,
        sigma_local=0.0,
        dtype=jnp.float32,
    ) -> "Diff2HParams":
        """Validated constructor (host-side scalars; arrays are passed through)."""
        _validate.check_if_concrete(_validate.check_positive, "learning_rate", learning_rate)
        _validate.check_if_concrete(_validate.check_int, "restart_interval", restart_interval, min_value=1)
        for name, val in (("clip_restart", clip_restart), ("clip_diff", clip_diff), ("clip_local", clip_local)):
            _validate.check_if_concrete(_validate.check_positive, name, val, allow_inf=True)
        for name, val in (("sigma_restart", sigma_restart), ("sigma_diff", sigma_diff), ("sigma_local", sigma_local)):
            _validate.check_if_concrete(_validate.check_nonnegative, name, val)
        f = lambda v: jnp.asarray(v, dtype)  # noqa: E731
        return cls(
            f(learning_rate), jnp.asarray(restart_interval, jnp.int32), f(clip_restart), f(clip_diff),
            f(sigma_restart), f(sigma_diff), f(clip_local), f(sigma_local),
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Diff2State:
    """``params`` = x_{r-1}; ``prev_params`` = x_{r-2}; ``estimate`` = v~_{r-1}.

    ``round`` counts completed rounds (so the next round is ``round + 1``);
    ``output_round`` is r^ (1-based) and ``output`` the stored x_{r^-1};
    ``grad_cache`` (silo axis first) holds the per-record work at ``x_{r-1}``
    when the algorithm caches it, else None: the per-record gradients on the
    per-record path, the layers' passes (``ghost_clipping.carried_passes``)
    on the ghost path.
    """

    params: PyTree
    prev_params: PyTree
    estimate: PyTree
    round: jax.Array
    output_round: jax.Array
    output: PyTree
    hparams: Diff2HParams
    grad_cache: PyTree = None


# ----------------------------------------------------------------------------- DIFF2 pieces
def is_restart_round(round_number, restart_interval):
    """Restart predicate of Alg. 1: ``(r - 1) mod T == 0`` for 1-based ``r``.

    Works on Python ints and traced int32 scalars (so T can be vmapped).
    """
    return (round_number - 1) % restart_interval == 0


def _times(coef, norm):
    """``coef * norm`` with ``0 * inf = 0`` (no displacement or no noise stays
    exactly zero even when clipping is disabled with ``coef = inf``)."""
    return jnp.where((norm == 0) | (coef == 0), jnp.zeros_like(norm * coef), coef * norm)


def difference_radius(params: PyTree, prev_params: PyTree, clip_diff):
    """``C_{2,r} = C2 ||x_{r-1} - x_{r-2}||`` (global norm over all leaves)."""
    return _times(clip_diff, clipping.global_norm(_tree_sub(params, prev_params)))


def clipped_mean(vectors: PyTree, radius, mask, count) -> PyTree:
    """ClippedMean (Alg. 2): per-row clip to ``radius``, sum of the valid rows,
    divided by the true number of records ``count`` (not the padded length)."""
    summed = clipping.clipped_sum(vectors, radius, mask)
    return jax.tree_util.tree_map(lambda t: t / jnp.asarray(count, t.dtype), summed.total)


def _ghost_traffic(plan, params) -> float:
    """Floats moved per record by a ghost-clipped difference round: per layer
    call, its input and output-gradient rows (K + C per position) read or
    written about six times (pass, carry, norms, weighted sum)."""
    leaves = jax.tree_util.tree_leaves(params)
    total = 0.0
    for call in plan.calls:
        c = call.out_shape[-1] if call.out_shape else 1
        positions = math.prod(call.out_shape[:-1]) if len(call.out_shape) > 1 else 1
        k = max(int(leaves[i].size) for i in call.leaf_ids) // max(c, 1)
        total += 6.0 * positions * (k + c)
    return total


def clipping_path(problem, params, x, y, path: str = "auto") -> str:
    """Which per-record computation DIFF2 runs on ``problem``: ``"ghost"`` (ghost
    clipping of the gradient differences, ``dpjax.primitives.ghost_clipping``) or
    ``"per-record"`` (per-record gradients materialised with ``vmap(grad)``).

    ``path="auto"`` takes ghost clipping when the model supports it and it moves
    fewer floats per record than materialising (about 5 d per record: the
    gradient written, read for its norm and for the weighted sum, carried to
    the next round); ``"ghost"`` raises a ``ValueError`` if the model is not
    supported. ``x, y``: one silo's records (only shapes are used).
    """
    _validate.check_choice("path", path, PATHS)
    if path == "per-record":
        return "per-record"
    plan = ghost_clipping.make_plan(problem.loss, params, x, y)
    if not plan.fast:
        if path == "ghost":
            raise ValueError(f"path='ghost' but ghost clipping cannot run on {problem!r}: {plan.reason}")
        return "per-record"
    if path == "ghost":
        return "ghost"
    d = sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))
    return "ghost" if _ghost_traffic(plan, params) < 5.0 * d else "per-record"


def _ghost_passes(problem, params, x, y):
    plan = ghost_clipping.make_plan(problem.loss, params, x, y)
    return ghost_clipping.carried_passes(plan, ghost_clipping.layer_passes(problem.loss, params, x, y, plan))


def silo_messages(problem, params, prev_params, data: SiloData, restart, clip_restart, clip_diff, *,
                  private: bool = True, restart_only: bool = False, prev_cache: PyTree = None,
                  return_cache: bool = False, path: str = "auto"):
    """``d_r^(p)`` for every silo (silo axis first), step 2 of Alg. 1.

    Restart: ClippedMean of per-record gradients at ``x_{r-1}`` (radius C1).
    Difference: ClippedMean of per-record differences
    ``grad l(x_{r-1}, z) - grad l(x_{r-2}, z)`` (difference first, then clip)
    with radius ``C2 ||x_{r-1} - x_{r-2}||``. ``private=False`` disables
    clipping. ``restart_only`` (static) skips tracing the difference branch.
    ``path`` picks ghost clipping or materialised per-record gradients
    (``clipping_path``). ``prev_cache`` (silo axis first): the per-record work
    at ``x_{r-2}`` kept from the previous round (per-record gradients, or the
    ghost path's layer passes), used instead of recomputing it (one pass per record
    and round instead of two); ``return_cache`` also returns that work at ``x_{r-1}``.
    """
    radius_diff = difference_radius(params, prev_params, clip_diff)
    ghost = clipping_path(problem, params, data.x[0], data.y[0], path) == "ghost"

    def one_silo(x, y, mask, size, cached):
        radius = clip_restart if restart_only else jnp.where(restart, clip_restart, radius_diff)
        if not private:
            radius = jnp.inf
        if ghost and restart_only:
            return ghost_clipping.clipped_difference_mean(problem.loss, params, prev_params, x, y, radius, mask,
                                                          size, use_difference=False), cached
        if ghost:  # one layer pass per round: the one at x_{r-2} is carried
            plan = ghost_clipping.make_plan(problem.loss, params, x, y)
            passes = ghost_clipping.layer_passes(problem.loss, params, x, y, plan)
            prev = cached if cached is not None else _ghost_passes(problem, prev_params, x, y)
            total = ghost_clipping.clipped_difference_from_passes(
                plan, params, prev_params, passes, prev, radius, mask.astype(x.dtype), ~restart)
            mean = jax.tree_util.tree_map(lambda t: t / jnp.asarray(size, t.dtype), total)
            return mean, ghost_clipping.carried_passes(plan, passes)
        g_cur = clipping.per_example_grads(problem.loss, params, x, y)
        if restart_only:
            vectors = g_cur
        else:
            g_prev = cached if cached is not None else clipping.per_example_grads(problem.loss, prev_params, x, y)
            vectors = _tree_select(restart, g_cur, _tree_sub(g_cur, g_prev))
        return clipped_mean(vectors, radius, mask, size), g_cur

    msgs, cache = jax.vmap(one_silo)(data.x, data.y, data.mask, data.sizes, prev_cache)
    return (msgs, cache) if return_cache else msgs


def server_estimate(problem, params, prev_params, estimate, data: SiloData, restart, clip_restart, clip_diff, *,
                    private: bool = True, restart_only: bool = False, prev_cache: PyTree = None,
                    return_cache: bool = False, path: str = "auto"):
    """Noise-free ``v_r = (1/P) sum_p d_r^(p) + [not restart] v~_{r-1}`` (step 4).

    The accumulator is reset (treated as 0) in every restart round.
    This is the quantity whose sensitivity Prop. 4.1 bounds by ``2C/(n_p P)``.
    """
    msgs, cache = silo_messages(problem, params, prev_params, data, restart, clip_restart, clip_diff,
                                private=private, restart_only=restart_only, prev_cache=prev_cache,
                                return_cache=True, path=path)
    mean = jax.tree_util.tree_map(lambda m: jnp.mean(m, axis=0), msgs)
    if not restart_only:
        mean = jax.tree_util.tree_map(lambda m, v: m + jnp.where(restart, jnp.zeros_like(v), v), mean, estimate)
    return (mean, cache) if return_cache else mean


def diff2_round_estimate(problem, state: Diff2State, data: SiloData, key, *, private: bool, restart_only: bool,
                         prev_cache: PyTree = None, path: str = "auto"):
    """One DIFF2 estimator round (steps 1-5 of Alg. 1): returns ``(v~_r, info, per-record work at x_{r-1})``."""
    hp = state.hparams
    r = state.round + 1
    restart = jnp.asarray(True) if restart_only else is_restart_round(r, hp.restart_interval)
    v, cache = server_estimate(problem, state.params, state.prev_params, state.estimate, data, restart,
                               hp.clip_restart, hp.clip_diff, private=private, restart_only=restart_only,
                               prev_cache=prev_cache, return_cache=True, path=path)
    disp = clipping.global_norm(_tree_sub(state.params, state.prev_params))
    radius = jnp.where(restart, hp.clip_restart, _times(hp.clip_diff, disp))
    std = _times(jnp.where(restart, hp.sigma_restart, hp.sigma_diff), radius)
    if private:
        v = noise.add_gaussian_noise(keys.stream_key(key, "server_noise"), v, std)
    else:
        std = jnp.zeros_like(std)
    info = {"restart": restart, "displacement": disp, "clip_radius": radius, "noise_std": std}
    return v, info, cache


def _check_common(problem, num_rounds, output):
    if not hasattr(problem, "loss"):
        raise ValueError(f"problem={problem!r} must provide loss(params, x, y)")
    _validate.check_int("num_rounds", num_rounds, min_value=1)
    _validate.check_choice("output", output, OUTPUTS)


def _schedule(noise_multiplier: float, n: int, num_silos: int, steps: int) -> GaussianSchedule:
    """A full-batch schedule with radius normalised to 1: contribution 1/(n P),
    replace-one sensitivity 2/(n P), noise std = the multiplier."""
    return GaussianSchedule(
        noise_std=float(noise_multiplier),
        contribution_bound=1.0 / (n * num_silos),
        sampling=Sampling.FULL,
        dataset_size=int(n),
        batch_size=None,
        steps=int(steps),
        neighboring=Neighboring.REPLACE_ONE,
        unit=PrivacyUnit.RECORD,
    )


def _host_int(v) -> int:
    return int(jax.device_get(v)) if not isinstance(v, int) else v


# ----------------------------------------------------------------------------- DIFF2-GD
def _diff2_privacy(algorithm, silo_sizes, hparams, **kw) -> PrivacySpec:
    """``privacy()`` of the DIFF2 family: its schedules composed (RDP curves added, Lemma B.3)."""
    if not algorithm.private:
        return NoPrivacy(f"{type(algorithm).__name__}(private=False) is non-private", "replace-one", "record")
    sizes = [int(n) for n in (silo_sizes if hasattr(silo_sizes, "__len__") else [silo_sizes])]
    if not sizes:
        raise ValueError("silo_sizes=[] must name at least one silo")
    schedules = algorithm._schedules(min(sizes), len(sizes), hparams, **kw)
    # _schedules lists restart rounds, then difference rounds (if any), then local steps (BVR, if any)
    restarts = schedules[0].steps
    fields = ["sigma_restart"] + (["sigma_diff"] if restarts < algorithm.num_rounds else [])
    fields += ["sigma_local"] * (len(schedules) - len(fields))
    return GaussianPrivacy(tuple(schedules), tuple(fields))


@dataclasses.dataclass(frozen=True)
class Diff2GD(FamilyBase):
    """DIFF2-GD (Alg. 1 + Alg. 3), DP-GD and non-private GD.

    Args:
      problem: a dpjax problem (per-record ``loss``, ``init_params``, ``evaluate``).
      num_rounds: R.
      restart_every_round: static ``T = 1`` (DP-GD): the difference branch is
        not traced (half the per-record gradients); bit-identical to
        ``restart_interval = 1``.
      private: False gives non-private GD (no clipping, no noise).
      output: ``"random"`` (Alg. 1: ``x_{r^-1}``, ``r^ ~ Unif{1..R}``) or ``"last"``.
      cache_grads: keep the per-record work at ``x_{r-1}`` in the state so a
        difference round does one pass over the data instead of two: the
        per-record gradients (memory ``P x n_max x d`` per run) on the
        per-record path, the layers' output gradients and parameter-dependent
        inputs on the ghost path (``P x n_max x`` a few times the layer
        widths); same results.
      path: ``"auto"`` | ``"ghost"`` | ``"per-record"``: how per-record
        gradients (differences) are clipped, see ``clipping_path``;
        ``path_used(params, data)`` says which one runs.
    """

    problem: Any
    num_rounds: int
    restart_every_round: bool = False
    private: bool = True
    output: str = "random"
    cache_grads: bool = False
    path: str = "auto"

    hparams_type = Diff2HParams

    def __post_init__(self):
        _check_common(self.problem, self.num_rounds, self.output)
        _validate.check_choice("path", self.path, PATHS)

    def path_used(self, params, data: SiloData) -> str:
        """``"ghost"`` or ``"per-record"``: the path ``step`` runs on this model and data."""
        return clipping_path(self.problem, params, data.x[0], data.y[0], self.path)

    def validate(self, data: SiloData) -> None:
        if data.min_size < 1:
            raise ValueError(f"data has an empty silo (sizes={data.silo_sizes()})")

    def init(self, params, hparams: Diff2HParams, data: SiloData, run_key) -> Diff2State:
        r_hat = jax.random.randint(keys.run_stream_key(run_key, "output"), (), 1, self.num_rounds + 1)
        cache = None
        if self.cache_grads and not self.restart_every_round:
            # the work at x_0 (= x_{-1}); round 1 is a restart round, so it is only a placeholder
            work = _ghost_passes if self.path_used(params, data) == "ghost" else (
                lambda pr, p, x, y: clipping.per_example_grads(pr.loss, p, x, y))
            cache = jax.vmap(lambda x, y: work(self.problem, params, x, y))(data.x, data.y)
        return Diff2State(
            params=params, prev_params=params, estimate=_tree_zeros(params),
            round=jnp.zeros((), jnp.int32), output_round=r_hat.astype(jnp.int32), output=params, hparams=hparams,
            grad_cache=cache,
        )

    def step(self, state: Diff2State, data: SiloData, key) -> tuple[Diff2State, dict]:
        use_cache = self.cache_grads and not self.restart_every_round
        v, info, cache = diff2_round_estimate(self.problem, state, data, key, private=self.private,
                                              restart_only=self.restart_every_round,
                                              prev_cache=state.grad_cache if use_cache else None, path=self.path)
        new_params = _tree_axpy(-state.hparams.learning_rate, v, state.params)
        r = state.round + 1
        output = _tree_select(r == state.output_round, state.params, state.output)  # x_{r^-1}
        new_state = Diff2State(new_params, state.params, v, r, state.output_round, output, state.hparams,
                               cache if use_cache else None)
        metrics = dict(info)
        metrics["estimate_norm"] = clipping.global_norm(v)
        return new_state, metrics

    def params(self, state: Diff2State):
        return state.params

    def output_params(self, state: Diff2State):
        return state.output if self.output == "random" else state.params

    def restart_count(self, restart_interval: int) -> int:
        """m = ceil(R/T) (T = 1 when ``restart_every_round``)."""
        t = 1 if self.restart_every_round else _validate.check_int("restart_interval", _host_int(restart_interval), min_value=1)
        return -(-self.num_rounds // t)

    def privacy(self, silo_sizes, hparams: Diff2HParams) -> PrivacySpec:
        """Restart rounds (std sigma_1) and difference rounds (std sigma_2)
        composed; calibration keeps the ratio sigma_2/sigma_1 of ``hparams``."""
        return _diff2_privacy(self, silo_sizes, hparams)

    def _schedules(self, min_silo_size: int, num_silos: int, hparams: Diff2HParams) -> tuple[GaussianSchedule, ...]:
        """The run's releases for the accountant: (restart rounds[, difference rounds]).

        Each round's radius cancels (noise std = sigma x radius, sensitivity
        2 radius/(n P)), so the schedules use radius 1: contribution
        ``1/(n_min P)`` and ``noise_std = sigma``.
        """
        n = _validate.check_int("min_silo_size", min_silo_size, min_value=1)
        p = _validate.check_int("num_silos", num_silos, min_value=1)
        m = self.restart_count(1 if self.restart_every_round else hparams.restart_interval)
        out = [_schedule(float(hparams.sigma_restart), n, p, m)]
        if m < self.num_rounds:
            out.append(_schedule(float(hparams.sigma_diff), n, p, self.num_rounds - m))
        return tuple(out)


def dp_gd(problem, num_rounds: int, output: str = "random") -> Diff2GD:
    """DP-GD (Section 6): DIFF2-GD with every round a restart round."""
    return Diff2GD(problem, num_rounds, restart_every_round=True, private=True, output=output)


def nonprivate_gd(problem, num_rounds: int, output: str = "random") -> Diff2GD:
    """GD (ref) (Section 6): no clipping, no noise, full gradient every round."""
    return Diff2GD(problem, num_rounds, restart_every_round=True, private=False, output=output)


# ----------------------------------------------------------------------------- DIFF2-BVR-L-SGD
@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BvrState:
    """DIFF2 state plus nothing else: the local loop lives inside one round."""

    params: PyTree
    prev_params: PyTree
    estimate: PyTree
    round: jax.Array
    output_round: jax.Array
    output: PyTree
    hparams: Diff2HParams


@dataclasses.dataclass(frozen=True)
class Diff2BvrLSgd(FamilyBase):
    """DIFF2-BVR-L-SGD (Alg. 1 + Alg. 4).

    ``problem``, ``num_rounds``, ``private`` and ``output`` are as for ``Diff2GD``.

    Args:
      local_steps: K >= 1 (the server step plus K-1 local steps per round).
      batch_size: b, local minibatch size (without replacement, b <= n_min).
      server_learning_rate_scale: optional factor for the server step
        (Lemma F.1's proof hints at a second one; default 1: a single step size as in Alg. 4).

    The DIFF2 estimator ``v~_r`` is the one of ``Diff2GD`` (all clients,
    round-level iterates ``x_{r-1}, x_{r-2}``, which are K updates apart).
    Client ``p_r = r mod P`` (0-indexed, r 1-based; the paper's
    ``1 + (r mod P)``) runs the local loop; only its data enters the local
    steps. ``v~_{k,r}`` recurses on the previous *noisy* local estimator.
    """

    problem: Any
    num_rounds: int
    local_steps: int
    batch_size: int
    private: bool = True
    output: str = "random"
    server_learning_rate_scale: float = 1.0

    hparams_type = Diff2HParams

    def __post_init__(self):
        _check_common(self.problem, self.num_rounds, self.output)
        _validate.check_int("local_steps", self.local_steps, min_value=1)
        _validate.check_int("batch_size", self.batch_size, min_value=1)
        _validate.check_positive("server_learning_rate_scale", self.server_learning_rate_scale)

    def validate(self, data: SiloData) -> None:
        if self.batch_size > data.min_size:
            raise ValueError(f"batch_size={self.batch_size} must be <= the smallest silo size {data.min_size}")

    def init(self, params, hparams: Diff2HParams, data: SiloData, run_key) -> BvrState:
        r_hat = jax.random.randint(keys.run_stream_key(run_key, "output"), (), 1, self.num_rounds + 1)
        return BvrState(params, params, _tree_zeros(params), jnp.zeros((), jnp.int32),
                        r_hat.astype(jnp.int32), params, hparams)

    def local_client(self, round_number, num_silos: int):
        """``p_r`` (0-indexed) for 1-based round ``r``."""
        return round_number % num_silos

    def step(self, state: BvrState, data: SiloData, key) -> tuple[BvrState, dict]:
        hp = state.hparams
        v1, info, _ = diff2_round_estimate(self.problem, state, data, key, private=self.private, restart_only=False)
        r = state.round + 1
        x0 = state.params
        x1 = _tree_axpy(-hp.learning_rate * self.server_learning_rate_scale, v1, x0)
        p = self.local_client(r, data.num_silos)
        xs, ys, size = data.x[p], data.y[p], data.sizes[p]
        sample_key = keys.stream_key(key, "sampling")
        local_key = keys.stream_key(key, "local")
        k_hat = jax.random.randint(keys.stream_key(key, "output"), (), 1, self.local_steps + 1)

        def local_step(carry, k):
            x_prev, x_cur, v_prev, out = carry  # x_{k-2}, x_{k-1}, v~_{k-1}
            idx = sample_without_replacement(jax.random.fold_in(sample_key, k), size, data.n_max, self.batch_size)
            xb, yb = xs[idx], ys[idx]
            disp = clipping.global_norm(_tree_sub(x_cur, x_prev))
            radius = _times(hp.clip_local, disp) if self.private else jnp.inf
            d = ghost_clipping.clipped_difference_mean(self.problem.loss, x_cur, x_prev, xb, yb, radius, None,
                                                       self.batch_size)
            v = jax.tree_util.tree_map(jnp.add, d, v_prev)
            if self.private:
                v = noise.add_gaussian_noise(jax.random.fold_in(local_key, k), v, _times(hp.sigma_local, radius))
            x_next = _tree_axpy(-hp.learning_rate, v, x_cur)
            out = _tree_select(k == k_hat, x_cur, out)  # x_{k^-1}: start of local step k^
            return (x_cur, x_next, v, out), None

        out0 = x0  # k^ = 1: the server step starts at x_{0,r-1}
        if self.local_steps > 1:
            (_, x_last, _, out_k), _ = jax.lax.scan(
                local_step, (x0, x1, v1, out0), jnp.arange(2, self.local_steps + 1)
            )
        else:
            x_last, out_k = x1, out0
        output = _tree_select(r == state.output_round, out_k, state.output)
        new_state = BvrState(x_last, x0, v1, r, state.output_round, output, hp)
        metrics = dict(info)
        metrics["local_client"] = p
        return new_state, metrics

    def params(self, state: BvrState):
        return state.params

    def output_params(self, state: BvrState):
        return state.output if self.output == "random" else state.params

    def privacy(self, silo_sizes, hparams: Diff2HParams, local_count: str = "paper") -> PrivacySpec:
        """Restart, difference and local schedules composed (Prop. E.2);
        calibration keeps the ratios between sigma_1, sigma_2 and sigma_3."""
        return _diff2_privacy(self, silo_sizes, hparams, local_count=local_count)

    def _schedules(self, min_silo_size: int, num_silos: int, hparams: Diff2HParams,
                   local_count: str = "paper") -> tuple[GaussianSchedule, ...]:
        """(restart, [difference], local) schedules for the accountant (Prop. E.2).

        Local steps: ``K ceil(R/P)`` (``local_count="paper"``) or the exact
        ``(K-1) max_p #{r : p_r = p}`` (``"exact"``) without-replacement
        Gaussian releases with contribution ``C3/b`` per record (radius 1).
        """
        _validate.check_choice("local_count", local_count, ("paper", "exact"))
        n = _validate.check_int("min_silo_size", min_silo_size, min_value=1)
        p = _validate.check_int("num_silos", num_silos, min_value=1)
        t = _validate.check_int("restart_interval", _host_int(hparams.restart_interval), min_value=1)
        m = -(-self.num_rounds // t)
        out = [_schedule(float(hparams.sigma_restart), n, p, m)]
        if m < self.num_rounds:
            out.append(_schedule(float(hparams.sigma_diff), n, p, self.num_rounds - m))
        if local_count == "paper":
            steps = self.local_steps * math.ceil(self.num_rounds / p)
        else:
            steps = (self.local_steps - 1) * math.ceil(self.num_rounds / p)
        if steps > 0:
            out.append(GaussianSchedule(
                noise_std=float(hparams.sigma_local), contribution_bound=1.0 / self.batch_size,
                sampling=Sampling.WITHOUT_REPLACEMENT, dataset_size=n, batch_size=self.batch_size,
                steps=steps, neighboring=Neighboring.REPLACE_ONE, unit=PrivacyUnit.RECORD,
            ))
        return tuple(out)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

# DIFF2's sigma_* are noise multipliers (std sigma x radius): calibrated as they are, not scaled by a clip.
_DIFF2_FIELDS = dict(noise_fields=("sigma_restart", "sigma_diff", "sigma_local"),
                     clip_fields=("clip_restart", "clip_diff", "clip_local"), noise_scale_field=None)
register_family("diff2-gd", Diff2GD, twin="gd", **_DIFF2_FIELDS)
register_family("dp-gd", Diff2GD, fixed={"restart_every_round": True}, **_DIFF2_FIELDS)
register_family("diff2-bvr", Diff2BvrLSgd, twin="bvr-lsgd", **_DIFF2_FIELDS)
