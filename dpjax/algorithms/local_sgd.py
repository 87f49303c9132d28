"""ISRL-DP Local SGD and non-private Local SGD (FedAvg): the baselines of
Lowy & Razaviyayn (ICLR 2023), Appendix I (spec §2.10, §3.5).

Each round r:

1. the network makes a uniformly random subset S_r of M_r silos available;
2. every available silo i starts from the server model, ``w^{i,0} = w_r``, and
   takes K single-record steps, ``t = 1..K``::

       j_t ~ Uniform{0..n_i-1}                       (a fresh index each step)
       g_t = clip_C(grad f(w^{i,t-1}, x_{i,j_t})) + u_t,   u_t ~ N(0, sigma^2 I)
       w^{i,t} = Proj_W(w^{i,t-1} - eta g_t)

   and sends only its last local iterate ``w^{i,K}`` (the message);
3. the server sets ``w_{r+1} = (1/M_r) sum_{i in S_r} w^{i,K}`` (``"mean"``,
   the paper's FedAvg) or ``w_r + sum_{i in S_r} (w^{i,K} - w_r)``
   (``"sum"``, summed local updates, the authors' scripts' scaling).

Privacy (ISRL-DP, record level, replace-one within a silo): silo i's message
is post-processing of its R*K noisy single-record gradients; each is a
Gaussian mechanism with l2 sensitivity ``2C`` (one clipped gradient replaced)
applied to a uniformly random record (sampling rate 1/n_i), adaptively
composed R*K times. ``privacy()`` hands exactly this to the accountant
(a uniformly random 1-subset per step, i.e. fixed-size sampling without
replacement with K = 1). The paper's own calibration
``sigma^2 = 8 C^2 R K ln(1/delta) / (eps^2 n^2)``
(``dpjax.accounting.isrl.isrl_local_sgd_paper_sigma``) is not certified by
the moments accountant in the paper's regime (spec I-12): calibrate with the
accountant instead and report both.

``private=False`` is non-private Local SGD (FedAvg): the same compiled step
with ``noise_std = 0`` and ``clip_norm = inf`` (``parts.non_private``). With ``noise_std = 0`` and a clip that never
binds, the private algorithm is bit-identical to it (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from dpjax import _validate, keys
from dpjax.accounting.privacy_spec import PrivacySpec
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, isrl_privacy
from dpjax.engine.contract import FamilyBase
from dpjax.engine import federated
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise
from dpjax.primitives import sampling as sampling_lib
from dpjax.primitives.projection import project_l2_ball

PyTree = Any

# Local SGD takes the same per-run hyperparameters as Noisy MB-SGD:
# learning_rate (eta of every local step), noise_std (sigma per local step),
# clip_norm (C, per-record gradient clip).
LocalSgdHParams = MbSgdHParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LocalSgdState:
    params: PyTree
    round: jax.Array
    averaged: PyTree
    hparams: MbSgdHParams


def local_sgd_trajectory(
    problem,
    params: PyTree,
    x: jax.Array,
    y: jax.Array,
    size,
    sample_key: jax.Array,
    noise_key: jax.Array,
    *,
    num_steps: int,
    learning_rate,
    clip_norm,
    noise_std,
    projection_radius=None,
):
    """K = ``num_steps`` single-record (noisy, clipped) SGD steps of one silo.

    All K record indices come from one draw on ``sample_key`` and all K
    standard-normal noise vectors from one draw on ``noise_key``, made before
    the sequential steps (the steps only consume them): K small PRNG calls
    inside the scan cost ~100 us each on CPU and dominated the run. The
    non-private twin sees the same records. Returns ``(last_iterate, indices [K])``.
    """
    indices = sampling_lib.sample_with_replacement(sample_key, size, num_steps)
    stacked = jax.tree_util.tree_map(lambda p: jnp.zeros((num_steps,) + jnp.shape(p), jnp.result_type(p)), params)
    std_normals = noise.gaussian_like(noise_key, stacked, 1.0)

    def body(w, step):
        j, z = step
        g = clipping.clip_to_norm(jax.grad(problem.loss)(w, x[j], y[j]), clip_norm)
        g = jax.tree_util.tree_map(lambda gi, zi: gi + jnp.asarray(noise_std, zi.dtype) * zi, g, z)
        w = jax.tree_util.tree_map(lambda p, gi: p - learning_rate * gi, w, g)
        return project_l2_ball(w, projection_radius), j

    return jax.lax.scan(body, params, (indices, std_normals))


@dataclasses.dataclass(frozen=True)
class LocalSgd(FamilyBase):
    """ISRL-DP Local SGD and (``private=False``) non-private Local SGD / FedAvg.

    Args:
      problem: a dpjax problem.
      num_rounds: R (communication rounds).
      local_steps: K single-record local steps per silo per round (the same
        number of gradient evaluations as MB-SGD with batch K).
      availability: ``FullAvailability()``, ``FixedAvailability(M)`` or
        ``RandomAvailability(pmf)``.
      private: clip and add noise at every local step (True) or not.
      aggregation: ``"mean"`` (average of the local iterates, paper) or
        ``"sum"`` (sum of the local updates ``w^{i,K} - w_r``, authors' scale).
      output: ``"last"``, ``"average"`` or ``"window"`` (as ``NoisyMbSgd``).
      projection_radius: radius of the ball W (applied after every local
        step), None for R^d.
      log_indices: add the record indices used by every silo to the round
        metrics (``"indices"`` ``[N, K]``), for tests and audits.
    """

    problem: Any
    num_rounds: int
    local_steps: int
    availability: Any = sampling_lib.FullAvailability()
    private: bool = True
    aggregation: str = "mean"
    output: str = "last"
    window: int = 8
    projection_radius: float | None = None
    log_indices: bool = False

    hparams_type = MbSgdHParams

    def __post_init__(self):
        self.check_common()
        if self.output == "exponential":
            raise ValueError("output='exponential' is not supported by LocalSgd; use 'last', 'average' or 'window'")

    def validate(self, data: SiloData) -> None:
        self.availability.validate(data.num_silos)

    def init(self, params, hparams: MbSgdHParams, data: SiloData, run_key) -> LocalSgdState:
        return LocalSgdState(params, jnp.zeros((), jnp.int32), self.averager.init(params), self.run_hparams(hparams))

    def step(self, state: LocalSgdState, data: SiloData, key) -> tuple[LocalSgdState, dict]:
        hp = state.hparams
        n = data.num_silos
        if self.log_indices:  # the index log is per silo: keep all N rows
            silo_ids, available = None, self.availability.sample(keys.stream_key(key, "availability"), n)
        else:  # static M: only the available silos run their local steps
            silo_ids, available = federated.available_silos(self.availability, key, n)
        sample_keys = keys.silo_keys(keys.stream_key(key, "sampling"), n)
        noise_keys = keys.silo_keys(keys.stream_key(key, "noise"), n)
        pick = (lambda a: a) if silo_ids is None else (lambda a: a[silo_ids])

        def one_silo(x, y, size, ks, kn):
            return local_sgd_trajectory(
                self.problem, state.params, x, y, size, ks, kn,
                num_steps=self.local_steps, learning_rate=hp.learning_rate,
                clip_norm=hp.clip_norm, noise_std=hp.noise_std,
                projection_radius=self.projection_radius,
            )

        messages, indices = jax.vmap(one_silo)(
            pick(data.x), pick(data.y), pick(data.sizes), pick(sample_keys), pick(noise_keys)
        )
        if self.aggregation == "mean":
            new_params = federated.aggregate(messages, available, "mean")
        else:
            updates = jax.tree_util.tree_map(lambda m, p: m - p[None], messages, state.params)
            total = federated.aggregate(updates, available, "sum")
            new_params = jax.tree_util.tree_map(jnp.add, state.params, total)
        new_params = project_l2_ball(new_params, self.projection_radius)
        averaged = self.averager.update(state.averaged, state.params, new_params, state.round)
        metrics = {"num_available": jnp.sum(available)}
        if self.log_indices:
            metrics["indices"] = indices
            metrics["available"] = available
        return LocalSgdState(new_params, state.round + 1, averaged, hp), metrics

    def output_params(self, state: LocalSgdState):
        return self.averager.value(state.averaged, state.params, state.round)

    def privacy(self, silo_sizes, hparams: MbSgdHParams) -> PrivacySpec:
        """Each silo's transcript: R*K adaptive Gaussian releases, each on one
        uniformly random record (rate 1/n) with sensitivity 2C (replace-one);
        every round counts, available or not."""
        return isrl_privacy(self, silo_sizes, hparams.noise_std, float(hparams.clip_norm),
                            sampling="without-replacement", batch_size=1,
                            steps=self.num_rounds * self.local_steps)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("isrl-local-sgd", LocalSgd, twin=("local-sgd", "fedavg"))  # two names of one twin
