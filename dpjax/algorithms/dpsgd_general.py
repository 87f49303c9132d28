"""DP-SGD-General (van Dijk, Nguyen, Nguyen & Nguyen, "Generalizing DP-SGD with Shuffling and Batch Clipping", Algorithm
1), with Poisson DP-SGD as its baseline and central (pooled) DP-SGD as a configuration.

Each round (per silo; one silo is the paper's single client):

1. the batch selection gives the round's index set ``S_b`` split into ``m`` subsets ``S_{b,h}`` of ``s`` records:
   ``"shuffle"`` takes block ``b`` of a uniform permutation drawn once per epoch (every record once per epoch; the last
   ``N - B m s`` records of a permutation sit the epoch out), ``"subsample"`` draws a fresh uniform ``ms``-subset every
   round;
2. ``a_h = A(w, S_{b,h})`` for every subset, all from the same ``w`` (vmapped): ``update_rule="gradient"`` is the
   subset's mean gradient (eq. (1) with ``s = 1``: individual clipping; eq. (4) with ``m = 1``: batch clipping of the
   mini-batch mean); ``"local"`` runs ``s / local_batch_size`` local steps of ``local_optimizer`` over the subset with a
   fresh optimiser state (reset every call: nothing private persists across rounds) and returns the summed local updates
   ``(w - w_final) / eta`` (eq. (2) with SGD and micro-batches of one; eq. (3) with momentum, Adam, ...; eq. (5) for any
   ``m, s``);
3. ``U = sum_h [a_h]_C`` and ``U_bar = U + N(0, (2 C sigma)^2 I)`` (eq. (5)); the message is ``U_bar / m``;
4. the server (``server_optimizer``, any optax transformation at unit step
   size; identity = the paper's ``w <- w - eta U_bar / m``) steps with the mean
   message over silos (synchronous multi-silo wrapper: privacy is per silo).

The round is its parts (``dpjax.engine.chain``): ``SubsetBatches`` (the epoch permutations live in its state; subsample
/ Poisson draws; filtering coins) -> ``SubsetUpdate`` (the ``m`` units) -> ``ClipPerUnit`` (bound ``C`` per unit of
``s`` records: the sensitivity ``2C`` under replace-one, ``C`` under add/remove comes from here) -> ``GaussianNoise``
on each silo (std ``sigma x sensitivity``: the paper's ``2 C sigma``, so ``noise_multiplier`` is the paper's sigma
exactly) -> ``Aggregate`` (divide by the public ``m``, mean over the silos that ran) -> ``OptaxServer`` (the optax
transformation, then ``-eta``) -> ``Averager``.

``sampling="poisson"`` is the Opacus-style reference (Appendix D remark): each record joins w.p. the declared public
``sampling_rate`` q (``m / N`` for a public N; under add/remove the data's size is not public, so q must be given and
the accountant reads the same q), individual clipping, noise ``N(0, (C sigma)^2 I)`` (add/remove sensitivity ``C``),
message ``U_bar / m`` (``m`` = the expected batch, public). ``filtering=True`` is Appendix D's probabilistic filtered
batches (experimental; each subset kept w.p. 1/2 by a data-independent coin, a silo whose round keeps fewer than
``filter_threshold`` subsets does not run, message ``U_bar / (m/2)``, no server step when no silo ran); its guarantee is
reported without the heuristic factor-2 gain (dropping subsets only lowers every round's ``L``, so the unfiltered
accountant stays valid). ``placement="server"`` adds the noise once to the mean of the silos' clipped sums instead
(central DP over the pooled records; ``DpSgd`` in ``dpjax.algorithms.dp_sgd`` is this configuration).

The learning rate ``eta``, the clip norm ``C`` and the noise multiplier ``sigma`` are traced per-run values
(``DpSgdHParams``), so a grid over them is one compiled program. ``privacy(silo_sizes, hparams, group_size)`` is the
parts' DP plan (``dpjax.accounting.events``): for shuffling / subsampling the exact strong-adversary accountant of the
paper (Definition 5.2, Theorem 5.6; ``dpjax.accounting.batch_clipping``) for the family's sampling x clipping x group
size, plus the ``sqrt-gE``, ``generic-group`` and ``standard`` (amplification, g = 1) reports; the Poisson baseline
through the Gaussian rules (RDP/PLD). Calibration is the one routine (``calibration.smallest_scale``).

Individual clipping (``s = 1``, gradient rule) hands the clipper per-example gradients (ghost norms for flax models when
available, the GLMs' closed form, else ``vmap(grad)``); batch clipping needs no per-example gradients at all.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax

from dpjax import _validate
from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
from dpjax.engine.chain import ChainFamily, DataShape, Parts
from dpjax.engine.contract import OutputRule
from dpjax.engine.silos import SiloData
from dpjax.parts import Aggregate, Averager, ClipPerUnit, GaussianNoise, SubsetBatches, SubsetUpdate, OptaxServer
from dpjax.parts.clients import UPDATE_RULES
from dpjax.parts.selection import POISSON_SELECTIONS, SUBSET_SAMPLINGS

PyTree = Any
SAMPLINGS = tuple(SUBSET_SAMPLINGS)
PLACEMENTS = ("silo", "server")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DpSgdHParams(MbSgdHParams):
    """Per-run hyperparameters of every DP-SGD family (a sweep vmaps over these): Noisy MB-SGD's
    three values and their validated ``create`` (``MbSgdHParams``), read as the paper's.

    Attributes:
      learning_rate: eta (local and server step size).
      noise_multiplier: sigma, the noise std divided by the sensitivity of the clipped sum: ``N(0, (2 C sigma)^2 I)``
        per round under replace-one (shuffle / subsample: the paper's sigma), ``(C sigma)^2`` under add/remove
        (Poisson).
      clip_norm: C, the clip norm of every clipped unit ``[a_h]_C``."""


def rounds_per_epoch(n_records: int, subset_size: int, num_subsets: int) -> int:
    """B = floor(N / (ms)): rounds in one epoch (the remainder sits the epoch out)."""
    n_records = _validate.check_int("n_records", n_records, min_value=1)
    ms = _validate.check_int("subset_size", subset_size, min_value=1) * _validate.check_int(
        "num_subsets", num_subsets, min_value=1)
    if ms > n_records:
        raise ValueError(f"num_subsets*subset_size={ms} must be <= n_records={n_records}")
    return n_records // ms


@dataclasses.dataclass(frozen=True)
class DpSgdGeneral(OutputRule, ChainFamily):
    """DP-SGD-General (Algorithm 1), the Poisson DP-SGD baseline and central DP-SGD.

    Args:
      problem: a dpjax problem (``loss``, ``init_params``; ``FlaxProblem`` for any flax model).
      num_rounds: T (use ``for_epochs`` to build it from E epochs).
      subset_size: s, records per clipped term.
      num_subsets: m, clipped terms per round (for Poisson: the expected batch size).
      rounds_per_epoch: B; shuffling uses blocks ``0..B-1`` of each epoch's permutation (every silo needs ``B m s``
        records); subsampling counts ``B`` rounds as an epoch (reporting only).
      sampling: ``"shuffle"``, ``"subsample"`` or ``"poisson"``.
      update_rule: ``"gradient"`` (eqs. (1), (4)) or ``"local"`` (eqs. (2), (3)).
      local_batch_size: micro-batch of each local step (``"local"``; divides s).
      local_optimizer: optax transformation of the local steps at unit step size
        (scaled by -eta); default identity = SGD; ``optax.trace(0.9)`` = momentum.
      server_optimizer: optax transformation of the server step at unit step
        size; default identity = ``w - eta U_bar / m``; ``optax.scale_by_adam()`` = Adam.
      private: clip and add noise (False: the non-private twin, same batches).
      filtering: Appendix D's probabilistic filtered batches (experimental; silo placement).
      filter_threshold: tau, minimum kept subsets for a silo's round to run.
      neighboring: ``"replace-one"`` (shuffle/subsample, fixed N) or ``"add-remove"`` (Poisson).
      placement: ``"silo"`` (each silo privatizes its own message: the paper's
        client; unit record-in-silo) or ``"server"`` (noise once on the mean of
        the silos' clipped sums: central DP over the pooled records, unit record).
      output: the released iterate (``OutputRule``; ``"last"`` is the paper's).
      window: the averaging window of ``output="average"`` (``OutputRule``).
      sampling_rate: ``"poisson"`` only, and required there (add/remove): the public rate q each
        record is drawn with; the accountant reads the same q (``m`` stays the public divisor).
      poisson_selection: ``"poisson"``: ``"truncated"`` (default: truncated Poisson on a large data set, its
        truncation charged to delta, exact Poisson with a buffer of every row on a small one;
        ``dpjax.accounting.truncated_poisson``) or ``"buffered"`` (the former static buffer, the run refused when a
        batch does not fit, nothing charged; kept for reproductions made with it)."""

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
    placement: str = "silo"
    sampling_rate: float | None = None
    poisson_selection: str = "truncated"

    hparams_type = DpSgdHParams

    def __post_init__(self):
        _validate.check_choice("sampling", self.sampling, SAMPLINGS)
        _validate.check_choice("update_rule", self.update_rule, UPDATE_RULES)
        _validate.check_choice("placement", self.placement, PLACEMENTS)
        for name in ("num_rounds", "subset_size", "num_subsets", "rounds_per_epoch", "local_batch_size"):
            _validate.check_int(name, getattr(self, name), min_value=1)
        _validate.check_int("filter_threshold", self.filter_threshold, min_value=1, max_value=self.num_subsets)
        expected = "add-remove" if self.sampling == "poisson" else "replace-one"
        if self.neighboring != expected:
            raise ValueError(f"neighboring={self.neighboring!r} must be {expected!r} for sampling={self.sampling!r}")
        if self.sampling == "poisson" and (self.subset_size != 1 or self.update_rule != "gradient" or self.filtering):
            raise ValueError(f"sampling='poisson' is individual-clipping DP-SGD: subset_size={self.subset_size} "
                             "must be 1, update_rule 'gradient' and filtering False")
        _validate.check_choice("poisson_selection", self.poisson_selection, POISSON_SELECTIONS)
        if self.poisson_selection != "truncated" and self.sampling != "poisson":
            raise ValueError(f"poisson_selection={self.poisson_selection!r} is how a Poisson batch is held; "
                             f"sampling={self.sampling!r} draws fixed-size batches (leave it 'truncated')")
        if self.update_rule == "local" and self.subset_size % self.local_batch_size:
            raise ValueError(f"local_batch_size={self.local_batch_size} must divide subset_size={self.subset_size}")
        if self.filtering and self.placement != "silo":
            raise ValueError("filtering=True decides per silo whether its round runs: placement must be 'silo', "
                             f"not {self.placement!r}")
        for name in ("local_optimizer", "server_optimizer"):
            if not isinstance(getattr(self, name), optax.GradientTransformation):
                raise ValueError(f"{name}={getattr(self, name)!r} must be an optax.GradientTransformation")
        self.check_common()

    @classmethod
    def for_epochs(cls, problem, n_records: int, epochs: int, subset_size: int, num_subsets: int,
                   **kwargs) -> "DpSgdGeneral":
        """The family for E epochs of B = floor(N/(ms)) rounds (T = E B). ``n_records`` is the declared
        public N: Poisson sampling draws at ``sampling_rate = m / N`` unless another rate is given."""
        b = rounds_per_epoch(n_records, subset_size, num_subsets)
        epochs = _validate.check_int("epochs", epochs, min_value=1)
        if kwargs.get("sampling") == "poisson" and kwargs.get("sampling_rate") is None:
            kwargs["sampling_rate"] = num_subsets / n_records
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

    def epochs(self, silo_size: int) -> float:
        """Epochs E of the run for a silo of ``silo_size`` records (T ms / N for sampled batches, T q for
        Poisson at the declared rate q)."""
        if self.sampling == "shuffle":
            return float(self.stored_epochs)
        if self.sampling_rate is not None:
            return self.num_rounds * self.sampling_rate
        return self.num_rounds * self.batch_size / silo_size

    def validate(self, data: SiloData) -> None:
        self.parts(DataShape.of(data)).selection.validate(data)

    # -- the round: m clipped units -> Gaussian (sigma x 2C) -> / m -> mean over silos -> optax ----
    def parts(self, shape: DataShape) -> Parts:
        # the public divisor of the noisy sum: m, or the expected number of kept subsets m/2
        denominator = self.num_subsets / 2.0 if self.filtering else float(self.num_subsets)
        unit = "record-in-silo" if self.placement == "silo" else "record"
        noise = GaussianNoise("noise_multiplier", placement=self.placement)
        aggregate = Aggregate("mean", denominator, gate=self.filtering)
        # where the noise goes is the order: on each silo's clipped sum, or once on the aggregate
        release = (noise, aggregate) if self.placement == "silo" else (aggregate, noise)
        return Parts(
            SubsetBatches(self.sampling, self.subset_size, self.num_subsets, self.rounds_per_epoch,
                          self.num_rounds, self.filtering, self.filter_threshold, unit, self.sampling_rate,
                          self.poisson_selection),
            (SubsetUpdate(self.problem, self.update_rule, self.local_batch_size, self.local_optimizer),
             ClipPerUnit("clip_norm", self.neighboring, unit_records=self.subset_size), *release,
             OptaxServer(self.server_optimizer), Averager(self.output, self.window)))


from dpjax.engine.registry import register_family  # noqa: E402  (after the classes: registration only)

register_family("dpsgd-general", DpSgdGeneral,
                "DP-SGD-General (van Dijk et al., Algorithm 1): shuffling / subsampling, individual or batch clipping",
                twin={"sgd-general": "non-private SGD-General, the twin of dpsgd-general"})
