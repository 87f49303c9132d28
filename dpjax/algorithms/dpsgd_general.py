"""DP-SGD-General (van Dijk, Nguyen, Nguyen & Nguyen, "Generalizing DP-SGD with
Shuffling and Batch Clipping", Algorithm 1), with Poisson DP-SGD as its baseline.

Each round (per silo; one silo is the paper's single client):

1. the sampler gives the round's index set ``S_b`` split into ``m`` subsets
   ``S_{b,h}`` of ``s`` records: ``"shuffle"`` takes block ``b`` of a uniform
   permutation drawn once per epoch (every record once per epoch; the last
   ``N - B m s`` records of a permutation sit the epoch out), ``"subsample"``
   draws a fresh uniform ``ms``-subset every round;
2. ``a_h = A(w, S_{b,h})`` for every subset, all from the same ``w`` (vmapped):
   ``update_rule="gradient"`` is the subset's mean gradient (eq. (1) with
   ``s = 1``: individual clipping; eq. (4) with ``m = 1``: batch clipping of the
   mini-batch mean); ``"local"`` runs ``s / local_batch_size`` local steps of
   ``local_optimizer`` over the subset with a fresh optimiser state (reset
   every call: nothing private persists across rounds) and returns the summed
   local updates ``(w - w_final) / eta`` (eq. (2) with SGD and micro-batches of
   one; eq. (3) with momentum, Adam, ...; eq. (5) for any ``m, s``);
3. ``U = sum_h [a_h]_C`` and ``U_bar = U + N(0, (2 C sigma)^2 I)`` (eq. (5));
   the message is ``U_bar / m``;
4. the server (``server_optimizer``, any optax transformation; identity = the
   paper's ``w <- w - eta U_bar / m``) steps with the mean message over silos
   (synchronous multi-silo wrapper: privacy is per silo, unaffected).

``sampling="poisson"`` is the Opacus-style reference (Appendix D remark): each
record joins w.p. ``m / N``, individual clipping, noise ``N(0, (C sigma)^2 I)``
(add/remove sensitivity ``C``), message ``U_bar / m`` (``m`` = the expected
batch, public). ``filtering=True`` is Appendix D's probabilistic filtered
batches (experimental; each subset kept w.p. 1/2, rounds with fewer than
``filter_threshold`` kept subsets are skipped, message ``U_bar / (m/2)``); its
guarantee is reported without the heuristic factor-2 gain (dropping subsets
only lowers every round's ``L``, so the unfiltered accountant stays valid).

The learning rate ``eta``, the clip norm ``C`` and the noise multiplier
``sigma`` are traced per-run values (``DpSgdHParams``), so a grid over them is
one compiled program. ``privacy(silo_sizes, hparams, group_size)`` gives the
exact strong-adversary accountant of the paper (Definition 5.2, Theorem 5.6)
for the family's sampling x clipping x group size, plus the ``sqrt-gE``,
``generic-group`` and ``standard`` (amplification, g = 1) reports; the Poisson
baseline is accounted with the standard RDP/PLD accountants.

Individual clipping (``s = 1``, gradient rule) uses the problem's clipped sum
(``weighted_grad_sum``: ghost norms for flax models when available, the GLMs'
closed form) or ``per_example_clipped_sum``; batch clipping needs no
per-example gradients at all.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from dpjax import _validate, keys
from dpjax.accounting import batch_clipping as _bc
from dpjax.accounting.events import GaussianSchedule, Neighboring, PrivacyUnit, Sampling
from dpjax.accounting.privacy_spec import NoPrivacy, PrivacySpec, ReportPrivacy, gaussian
from dpjax.engine.contract import FamilyBase, sgd_updates
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping, noise
from dpjax.primitives import sampling as sampling_lib

PyTree = Any
SAMPLINGS = ("shuffle", "subsample", "poisson")
UPDATE_RULES = ("gradient", "local")
_FILTER_STREAM = 11  # folded into the round's sampling key for the filtering coins


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DpSgdHParams:
    """Per-run hyperparameters (a sweep vmaps over these).

    Attributes:
      learning_rate: eta (local and server step size).
      clip_norm: C, the clip norm of every clipped term ``[a_h]_C``.
      noise_multiplier: sigma; the round noise is ``N(0, (2 C sigma)^2 I)``
        (``(C sigma)^2`` for the Poisson baseline).
    """

    learning_rate: Any
    clip_norm: Any = 1.0
    noise_multiplier: Any = 0.0

    @classmethod
    def create(cls, learning_rate, clip_norm=1.0, noise_multiplier=0.0) -> "DpSgdHParams":
        for name, val, check in (("learning_rate", learning_rate, _validate.check_positive),
                                 ("clip_norm", clip_norm, _validate.check_positive),
                                 ("noise_multiplier", noise_multiplier, _validate.check_nonnegative)):
            _validate.check_if_concrete(check, name, val)  # Python, NumPy, jax scalars and arrays; not tracers
        f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        return cls(f32(learning_rate), f32(clip_norm), f32(noise_multiplier))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DpSgdState:
    params: PyTree
    server_state: PyTree
    round: jax.Array
    permutations: jax.Array  # [silos, epochs, n_max] for shuffling, else [silos, 1]
    hparams: DpSgdHParams


def rounds_per_epoch(n_records: int, subset_size: int, num_subsets: int) -> int:
    """B = floor(N / (ms)): rounds in one epoch (the remainder sits the epoch out)."""
    n_records = _validate.check_int("n_records", n_records, min_value=1)
    ms = _validate.check_int("subset_size", subset_size, min_value=1) * _validate.check_int(
        "num_subsets", num_subsets, min_value=1)
    if ms > n_records:
        raise ValueError(f"num_subsets*subset_size={ms} must be <= n_records={n_records}")
    return n_records // ms


@dataclasses.dataclass(frozen=True)
class DpSgdGeneral(FamilyBase):
    """DP-SGD-General (Algorithm 1) and the Poisson DP-SGD baseline.

    Args:
      problem: a dpjax problem (``loss``, ``init_params``; ``FlaxProblem`` for any flax model).
      num_rounds: T (use ``for_epochs`` to build it from E epochs).
      subset_size: s, records per clipped term.
      num_subsets: m, clipped terms per round (for Poisson: the expected batch size).
      rounds_per_epoch: B; shuffling uses blocks ``0..B-1`` of each epoch's
        permutation (every silo needs ``B m s`` records); subsampling counts
        ``B`` rounds as an epoch (reporting only).
      sampling: ``"shuffle"``, ``"subsample"`` or ``"poisson"``.
      update_rule: ``"gradient"`` (eqs. (1), (4)) or ``"local"`` (eqs. (2), (3)).
      local_batch_size: micro-batch of each local step (``"local"``; divides s).
      local_optimizer: optax transformation of the local steps at unit step size
        (scaled by -eta); default identity = SGD; ``optax.trace(0.9)`` = momentum.
      server_optimizer: optax transformation of the server step at unit step
        size; default identity = ``w - eta U_bar / m``.
      private: clip and add noise (False: the non-private twin, same batches).
      filtering: Appendix D's probabilistic filtered batches (experimental).
      filter_threshold: tau, minimum kept subsets for a round to run.
      neighboring: ``"replace-one"`` (shuffle/subsample, fixed N) or
        ``"add-remove"`` (Poisson).
    """

    problem: Any
    num_rounds: int
    subset_size: int
    num_subsets: int
    rounds_per_epoch: int
    sampling: str = "shuffle"
    update_rule: str = "gradient"
    local_batch_size: int = 1
    local_optimizer: Any = optax.identity()
    server_optimizer: Any = optax.identity()
    private: bool = True
    filtering: bool = False
    filter_threshold: int = 1
    neighboring: str = "replace-one"

    hparams_type = DpSgdHParams
    noise_fields = ("noise_multiplier",)
    noise_scale_field = None  # sigma is a multiplier of C: calibration needs no clip scaling

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, SAMPLINGS)
        _validate.check_choice("update_rule", self.update_rule, UPDATE_RULES)
        for name in ("num_rounds", "subset_size", "num_subsets", "rounds_per_epoch", "local_batch_size"):
            _validate.check_int(name, getattr(self, name), min_value=1)
        _validate.check_int("filter_threshold", self.filter_threshold, min_value=1, max_value=self.num_subsets)
        expected = "add-remove" if self.sampling == "poisson" else "replace-one"
        if self.neighboring != expected:
            raise ValueError(f"neighboring={self.neighboring!r} must be {expected!r} for sampling={self.sampling!r}")
        if self.sampling == "poisson" and (self.subset_size != 1 or self.update_rule != "gradient" or self.filtering):
            raise ValueError(f"sampling='poisson' is individual-clipping DP-SGD: subset_size={self.subset_size} "
                             "must be 1, update_rule 'gradient' and filtering False")
        if self.update_rule == "local" and self.subset_size % self.local_batch_size:
            raise ValueError(f"local_batch_size={self.local_batch_size} must divide subset_size={self.subset_size}")
        for name in ("local_optimizer", "server_optimizer"):
            if not isinstance(getattr(self, name), optax.GradientTransformation):
                raise ValueError(f"{name}={getattr(self, name)!r} must be an optax.GradientTransformation")
        _validate.check_int("num_rounds", self.num_rounds, min_value=1)

    @classmethod
    def for_epochs(cls, problem, n_records: int, epochs: int, subset_size: int, num_subsets: int,
                   **kwargs) -> "DpSgdGeneral":
        """The family for E epochs of B = floor(N/(ms)) rounds (T = E B)."""
        b = rounds_per_epoch(n_records, subset_size, num_subsets)
        epochs = _validate.check_int("epochs", epochs, min_value=1)
        return cls(problem, epochs * b, subset_size, num_subsets, b, **kwargs)

    # -- static pieces -----------------------------------------------------
    @property
    def batch_size(self) -> int:
        """ms: records per round (the expected batch for Poisson)."""
        return self.num_subsets * self.subset_size

    @property
    def stored_epochs(self) -> int:
        return -(-self.num_rounds // self.rounds_per_epoch)

    @property
    def individual_clipping(self) -> bool:
        return self.subset_size == 1 and self.update_rule == "gradient"

    def validate(self, data: SiloData) -> None:
        n = data.min_size
        need = self.rounds_per_epoch * self.batch_size if self.sampling == "shuffle" else self.batch_size
        if need > n:
            raise ValueError(f"rounds_per_epoch*num_subsets*subset_size={need} must be <= the smallest silo "
                             f"size n={n} for sampling={self.sampling!r}")

    # -- samplers (T2) -----------------------------------------------------
    def _capacity(self, n_max: int) -> int:
        return min(sampling_lib.default_poisson_capacity(self.num_subsets), n_max)

    def draw_indices(self, key, perms, size, n_max: int, round_index):
        """One silo's round: ``(idx [m, s], mask [m, s], overflow)`` (Poisson: ``[capacity, 1]``)."""
        m, s = self.num_subsets, self.subset_size
        if self.sampling == "shuffle":
            epoch, block = round_index // self.rounds_per_epoch, round_index % self.rounds_per_epoch
            idx = jax.lax.dynamic_slice(perms[epoch], (block * m * s,), (m * s,)).reshape(m, s)
            return idx, jnp.ones((m, s), bool), jnp.asarray(False)
        if self.sampling == "subsample":
            # top-k of i.i.d. scores: a uniform ms-subset in uniformly random order, so
            # consecutive rows are a uniform random partition into m subsets.
            idx = sampling_lib.sample_without_replacement(key, size, n_max, m * s).reshape(m, s)
            return idx, jnp.ones((m, s), bool), jnp.asarray(False)
        idx, mask, overflow = sampling_lib.poisson_sample(key, size, n_max, m / size, self._capacity(n_max))
        return idx[:, None], mask[:, None], overflow

    def _init_permutations(self, data: SiloData, run_key):
        if self.sampling != "shuffle":
            return jnp.zeros((data.num_silos, 1), jnp.int32)
        silo_keys = keys.silo_keys(keys.run_stream_key(run_key, "permutation"), data.num_silos)

        def one_silo(k, size):
            epoch_keys = jax.vmap(lambda e: jax.random.fold_in(k, e))(jnp.arange(self.stored_epochs))
            return jax.vmap(lambda ek: sampling_lib.valid_first_permutation(ek, size, data.n_max))(epoch_keys)

        return jax.vmap(one_silo)(silo_keys, data.sizes).astype(jnp.int32)

    # -- local update rules A (T3) -------------------------------------------
    def _mean_loss(self, params, x, y, mask):
        losses = jax.vmap(self.problem.loss, in_axes=(None, 0, 0))(params, x, y)
        return jnp.sum(jnp.where(mask, losses, 0.0)) / x.shape[0]

    def local_update(self, params, x, y, learning_rate):
        """eqs. (2)/(3): ``a = sum_j u_j = (w_1 - w_final)/eta`` over local steps
        ``w_{j+1} = w_j - eta u_j``, ``u_j`` = ``local_optimizer`` applied to the
        micro-batch gradient at ``w_j``; the optimiser state starts fresh."""
        lb = self.local_batch_size
        xs = x.reshape((-1, lb) + x.shape[1:])
        ys = y.reshape((-1, lb) + y.shape[1:])
        ones = jnp.ones((lb,), bool)

        def step(carry, batch):
            w, opt_state, total = carry
            g = jax.grad(self._mean_loss)(w, batch[0], batch[1], ones)
            u, opt_state = self.local_optimizer.update(g, opt_state, w)
            w = optax.apply_updates(w, sgd_updates(u, learning_rate))
            return (w, opt_state, optax.tree.add(total, u)), None

        init = (params, self.local_optimizer.init(params), optax.tree.zeros_like(params))
        # Unrolled: a convolution's gradient inside a loop body misses XLA:CPU's fast kernels
        # (see dpjax.engine.runner, round_loop="host"); s / local_batch_size steps are few.
        (_, _, total), _ = jax.lax.scan(step, init, (xs, ys), unroll=True)
        return total

    def clipped_terms_sum(self, params, xb, yb, mask, hp: DpSgdHParams, keep=None):
        """``U = sum_h keep_h [a_h]_C`` (``keep``: filtering weights [m]; no clipping for the twin)."""
        clip = hp.clip_norm if self.private else None
        if self.individual_clipping:
            x, y = xb[:, 0], yb[:, 0]
            w = mask[:, 0] if keep is None else mask[:, 0] & keep
            if clip is None:
                return jax.grad(lambda p: self._mean_loss(p, x, y, w) * x.shape[0])(params)
            if hasattr(self.problem, "weighted_grad_sum"):
                return self.problem.weighted_grad_sum(params, x, y, w.astype(x.dtype), clip)
            return clipping.per_example_clipped_sum(self.problem.loss, params, x, y, clip, w).total
        if self.update_rule == "gradient":
            a = jax.vmap(lambda x, y, w: jax.grad(self._mean_loss)(params, x, y, w))(xb, yb, mask)
        else:
            a = jax.vmap(lambda x, y: self.local_update(params, x, y, hp.learning_rate))(xb, yb)
        if self.num_subsets == 1 and keep is None:
            a0 = jax.tree_util.tree_map(lambda t: t[0], a)
            return a0 if clip is None else clipping.clip_to_norm(a0, clip)
        return clipping.clipped_sum(a, jnp.inf if clip is None else clip, keep).total

    # -- the compiled part -------------------------------------------------
    def init(self, params, hparams: DpSgdHParams, data: SiloData, run_key) -> DpSgdState:
        self.check_hparams(hparams)
        return DpSgdState(params, self.server_optimizer.init(params), jnp.zeros((), jnp.int32),
                          self._init_permutations(data, run_key), hparams)

    def silo_message(self, params, hp: DpSgdHParams, x, y, size, perms, sample_key, noise_key, round_index):
        """One silo's round (Algorithm 1 steps 3.1-3.4): ``(U_bar / m, ran, overflow)``."""
        idx, mask, overflow = self.draw_indices(sample_key, perms, size, x.shape[0], round_index)
        keep, ran, denominator = None, jnp.asarray(True), float(self.num_subsets)
        if self.filtering:  # Appendix D: keep each subset w.p. 1/2, run if >= tau kept
            keep = jax.random.bernoulli(jax.random.fold_in(sample_key, _FILTER_STREAM), 0.5, (self.num_subsets,))
            ran = jnp.sum(keep) >= self.filter_threshold
            denominator = self.num_subsets / 2.0
        total = self.clipped_terms_sum(params, x[idx], y[idx], mask, hp, keep)
        if self.private:
            scale = 2.0 if self.neighboring == "replace-one" else 1.0
            total = noise.add_gaussian_noise(noise_key, total, scale * hp.clip_norm * hp.noise_multiplier)
        message = jax.tree_util.tree_map(lambda t: t / jnp.asarray(denominator, t.dtype), total)
        return message, ran, jnp.any(overflow)

    def step(self, state: DpSgdState, data: SiloData, key) -> tuple[DpSgdState, dict]:
        hp = state.hparams
        n = data.num_silos
        sample_keys = keys.silo_keys(keys.stream_key(key, "sampling"), n)
        noise_keys = keys.silo_keys(keys.stream_key(key, "noise"), n)
        messages, ran, overflow = jax.vmap(
            lambda x, y, size, perms, ks, kn: self.silo_message(state.params, hp, x, y, size, perms, ks, kn,
                                                                state.round)
        )(data.x, data.y, data.sizes, state.permutations, sample_keys, noise_keys)
        weights = ran.astype(jnp.float32)
        count = jnp.maximum(jnp.sum(weights), 1.0)
        update = jax.tree_util.tree_map(lambda t: jnp.tensordot(weights.astype(t.dtype), t, axes=1) / count, messages)
        u, server_state = self.server_optimizer.update(update, state.server_state, state.params)
        stepped = optax.apply_updates(state.params, sgd_updates(u, hp.learning_rate))
        any_ran = jnp.any(ran)
        params = jax.tree_util.tree_map(lambda a, b: jnp.where(any_ran, a, b), stepped, state.params)
        server_state = jax.tree_util.tree_map(lambda a, b: jnp.where(any_ran, a, b), server_state, state.server_state)
        metrics = {"rounds_run": jnp.sum(ran), "sampling_overflow": overflow}
        return DpSgdState(params, server_state, state.round + 1, state.permutations, hp), metrics

    def output_params(self, state: DpSgdState):
        return state.params

    # -- privacy -----------------------------------------------------------
    def epochs(self, silo_size: int) -> float:
        """Epochs E of the run for a silo of ``silo_size`` records (T ms / N for sampled batches)."""
        if self.sampling == "shuffle":
            return float(self.stored_epochs)
        return self.num_rounds * self.batch_size / silo_size

    def privacy(self, silo_sizes, hparams: DpSgdHParams, group_size: int = 1) -> PrivacySpec:
        """Per-silo guarantee (the largest over the silos' sizes), replace-up-to-g with N fixed.

        Shuffling / subsampling: ``ReportPrivacy`` with the accountants of
        ``batch_clipping.BATCH_CLIPPING_ACCOUNTANTS`` (first: ``strong-exact``,
        the paper's exact strong-adversary mixture). Poisson: the standard
        RDP/PLD accountants (``GaussianPrivacy``, add/remove). Calibration
        returns ``{"noise_multiplier": sigma}``.
        """
        g = _validate.check_int("group_size", group_size, min_value=1)
        sizes = sorted({int(x) for x in ([silo_sizes] if isinstance(silo_sizes, int) else silo_sizes)})
        if not sizes:
            raise ValueError("silo_sizes=[] must name at least one silo")
        relation = "replace-one" if self.sampling != "poisson" else "add-remove"
        if not self.private:
            return NoPrivacy(f"{type(self).__name__}(private=False) is the non-private twin", relation,
                             PrivacyUnit.RECORD_IN_SILO.value)
        sigma = float(hparams.noise_multiplier)
        if self.sampling == "poisson":
            if g != 1:
                raise ValueError(f"group_size={g}: the Poisson baseline is accounted for single records only")
            # Unit clip: noise_std = sigma, contribution 1, so calibration returns sigma itself.
            return gaussian(GaussianSchedule(sigma, 1.0, Sampling.POISSON, sizes[0], self.num_subsets,
                                             self.num_rounds, Neighboring.ADD_REMOVE, PrivacyUnit.RECORD_IN_SILO),
                            "noise_multiplier")

        def report(sig: float, delta: float, accountant: str):
            reports = [_bc.batch_clipping_report(
                accountant, sampling=self.sampling, n_records=n, s=self.subset_size, m=self.num_subsets,
                num_rounds=self.num_rounds, rounds_per_epoch=self.rounds_per_epoch, sigma=sig, delta=delta,
                group_size=g) for n in sizes]
            worst = max(reports, key=lambda r: r.epsilon)
            notes = worst.notes + (("experimental filtering: reported without its heuristic factor-2 gain",)
                                   if self.filtering else ())
            return dataclasses.replace(worst, notes=notes)

        def epsilon_fn(delta, accountant):
            if sigma <= 0:
                raise ValueError(f"noise_multiplier={sigma!r} must be > 0 for a private run's epsilon")
            return report(sigma, delta, accountant)

        def calibrate_fn(target, delta, accountant):
            target = _validate.check_positive("target_epsilon", target)
            lo, hi = 1e-2, 1.0
            while report(hi, delta, accountant).epsilon > target:
                lo, hi = hi, hi * 2.0
                if hi > 1e4:
                    raise ValueError(f"target_epsilon={target!r} is not reached by any noise_multiplier <= 1e4")
            while hi / lo > 1 + 1e-4:
                mid = math.sqrt(lo * hi)
                lo, hi = (lo, mid) if report(mid, delta, accountant).epsilon <= target else (mid, hi)
            return {"noise_multiplier": hi}

        return ReportPrivacy(epsilon_fn, calibrate_fn, _bc.BATCH_CLIPPING_ACCOUNTANTS,
                             "replace-one" if g == 1 else f"replace-up-to-{g}", PrivacyUnit.RECORD_IN_SILO.value)


from dpjax.sweep.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dpsgd-general", DpSgdGeneral, twin="sgd-general")
