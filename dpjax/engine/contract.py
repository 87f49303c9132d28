"""The one contract every algorithm family implements, and its shared parts.

An algorithm family is a frozen (hashable) dataclass: its fields are the *static* configuration (problem, shapes,
sampling scheme, number of rounds; one compiled program per combination). Per-run scalars that a sweep varies (step
size, noise std, clip norm) live in an ``hparams`` pytree of type ``hparams_type``, carried in the state, so a grid of
configurations with the same static shape is one ``vmap``. The methods::

    validate(data) -> None                            # host-side, before compiling
    init(params, hparams, data, run_key) -> state     # per-run state; carries hparams
    step(state, data, round_key) -> (state, metrics)  # one round, pure
    params(state) -> current iterate
    output_params(state) -> the algorithm's output (e.g. an averaged iterate)
    privacy(silo_sizes, hparams) -> PrivacySpec       # what the run releases

``privacy`` is the only privacy method: it returns a ``dpjax.accounting.privacy_spec.PrivacySpec`` whose
``epsilon(delta, accountant)`` and ``calibrate(target_epsilon, delta, accountant)`` every driver uses the same way
(non-private twins return ``NoPrivacy``).

``FamilyBase`` removes the repetition between families: the common field checks, the hparams type check, the sampling x
neighbouring check at creation time (``__post_init__``), the iterate averager and the non-private twin
(``run_hparams``). Rounds are composed of the parts of ``dpjax.parts`` by ``dpjax.engine.chain.ChainFamily``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Protocol, Sequence, runtime_checkable

import jax
import optax

from dpjax import _validate
from dpjax.accounting.schedules import FIXED_SIZE, Neighboring, Sampling, coerce_enum
from dpjax.accounting.privacy_spec import PrivacySpec
from dpjax.engine.averaging import IterateAverager

PyTree = Any


@runtime_checkable
class Algorithm(Protocol):
    """What the runner, the sweep executor and the accountant rely on."""

    problem: Any
    num_rounds: int
    hparams_type: ClassVar[type]

    def validate(self, data) -> None: ...

    def init(self, params: PyTree, hparams: Any, data, run_key: jax.Array) -> Any: ...

    def step(self, state: Any, data, key: jax.Array) -> tuple[Any, dict]: ...

    def params(self, state: Any) -> PyTree: ...

    def output_params(self, state: Any) -> PyTree: ...

    def privacy(self, silo_sizes: Sequence[int], hparams: Any) -> PrivacySpec: ...


def check_sampling_relation(sampling: str, neighboring: str) -> None:
    """Refuses a sampling scheme x neighbouring relation pair no accountant certifies.

    Fixed-size batches (with/without replacement, one-pass, shuffling) need a
    fixed, public dataset size, so only replace-one is meaningful for them."""
    coerce_enum("neighboring", neighboring, Neighboring)
    try:
        s = Sampling(sampling)
    except ValueError:
        return  # not an accounting sampling name (e.g. "full-batch"); the family checks it
    if Neighboring(neighboring) is Neighboring.ADD_REMOVE and s in FIXED_SIZE:
        raise ValueError(f"neighboring='add-remove' is not meaningful for sampling={sampling!r} (fixed-size "
                         "batches need a fixed, public dataset size); use 'replace-one'")


def check_sampling_rate(sampling: str, neighboring: str, sampling_rate) -> None:
    """Poisson's rate q is a public declared number (``sampling_rate``): the sampler draws with it and the accountant
    reads it. Refuses a rate for a fixed-size scheme, and Poisson under add/remove without one: the fallback ``K / n``
    reads the data set's size, which differs between neighbours (one record more lowers every other record's rate), so
    the sampled law would not be the accounted one. Checked from the configuration alone, before any data is touched."""
    if sampling_rate is not None:
        if sampling not in ("poisson", "cyclic-poisson"):  # cyclic Poisson: the rate inside the round's group
            raise ValueError(f"sampling_rate={sampling_rate!r} is Poisson's public rate; sampling={sampling!r} "
                             "draws fixed-size batches and takes none")
        _validate.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    elif sampling == "poisson" and neighboring == "add-remove":
        raise ValueError("sampling_rate=None: Poisson sampling under add/remove needs a public rate q (each "
                         "record's inclusion probability, e.g. batch_size / n for a public n); a rate read from "
                         "the data set's size would differ between neighbours")


@dataclasses.dataclass(frozen=True, kw_only=True)
class OutputRule:
    """The output-rule fields a family declares by mixing this in (before ``FamilyBase``; keyword-only,
    so they follow the family's own fields): ``output`` ``"last"`` (default), ``"average"`` (the
    running mean of the iterates) or ``"window"`` (the mean of the last ``window`` iterates), as
    ``IterateAverager`` computes them and ``check_common`` validates them."""

    output: str = "last"
    window: int = 8


#: How the server combines the silos' messages: their mean over the reports, or their sum.
AGGREGATIONS = ("mean", "sum")


class FamilyBase:
    """Shared behaviour of algorithm families (mix into a frozen dataclass).

    Subclasses set ``hparams_type`` and may define any of the common fields ``num_rounds``, ``batch_size``,
    ``local_steps``, ``sampling``, ``neighboring``, ``aggregation``, ``output``/``window``, ``projection_radius``
    (``output``/``window`` by mixing in ``OutputRule``); ``check_common()`` (call it from ``__post_init__``) validates
    whichever are present."""

    hparams_type: ClassVar[type] = object
    #: hparams fields that the non-private twin sets to 0 (noise multipliers or stds) and inf (clip norms).
    noise_fields: ClassVar[tuple[str, ...]] = ("noise_multiplier",)
    clip_fields: ClassVar[tuple[str, ...]] = ("clip_norm",)

    def check_common(self) -> None:
        _validate.check_rounds("num_rounds", self.num_rounds)
        for name in ("batch_size", "local_steps"):
            if hasattr(self, name):
                _validate.check_int(name, getattr(self, name), min_value=1)
        if hasattr(self, "aggregation"):
            _validate.check_choice("aggregation", self.aggregation, AGGREGATIONS)
        if getattr(self, "projection_radius", None) is not None:
            _validate.check_positive("projection_radius", self.projection_radius)
        if hasattr(self, "neighboring"):
            check_sampling_relation(getattr(self, "sampling", "full"), self.neighboring)
        if hasattr(self, "sampling_rate"):
            check_sampling_rate(getattr(self, "sampling", "full"), getattr(self, "neighboring", "replace-one"),
                                self.sampling_rate)
        if hasattr(self, "output") and hasattr(self, "window"):
            IterateAverager(self.output, self.window)

    # -- shared pieces ------------------------------------------------------
    @property
    def sampler(self):
        """The per-silo record sampler of ``sampling`` with ``batch_size`` records."""
        from dpjax.primitives import sampling

        return sampling.make_sampler(self.sampling, self.batch_size, getattr(self, "sampling_rate", None))

    def validate(self, data) -> None:
        """Host-side checks against the data: the availability model, and for a family that samples ``batch_size``
        records per silo, that its sampler can serve ``num_rounds`` rounds from the smallest silo."""
        self.availability.validate(data.num_silos)
        if getattr(self, "batch_size", None) is not None:
            self.sampler.validate(data.min_size, self.num_rounds)

    @property
    def averager(self) -> IterateAverager:
        return IterateAverager(self.output, getattr(self, "window", 8))

    def check_hparams(self, hparams: Any) -> Any:
        """Refuses hparams of another family (a common silent mistake in sweeps)."""
        if not isinstance(hparams, self.hparams_type):
            raise ValueError(f"hparams={type(hparams).__name__} must be a {self.hparams_type.__name__} "
                             f"for {type(self).__name__}")
        return hparams

    def hparams_from_values(self, **fields) -> Any:
        """The validated hparams of one run from its field values (``hparams_type.create``)."""
        return self.hparams_type.create(**fields)

    def run_hparams(self, hparams: Any) -> Any:
        """The hparams a run uses: checked, and for the non-private twin
        (``private=False``) ``twin.non_private(hparams)`` -- the one twin
        mechanism of every family: the same compiled step with noise 0 and no clip."""
        from dpjax.engine import twin

        self.check_hparams(hparams)
        if getattr(self, "private", True):
            return hparams
        return twin.non_private(hparams, self.noise_fields, self.clip_fields)

    def params(self, state: Any) -> PyTree:
        return state.params


def sgd_updates(gradient: PyTree, learning_rate) -> PyTree:
    """The updates of ``optax.sgd(learning_rate)`` for a stateless, traced step size
    (``-(eta g)``, exact, so ``apply_updates`` gives ``w - eta g`` bit for bit)."""
    return optax.tree.scale(-learning_rate, gradient)


def family_hparams(algorithm) -> type:
    """The family's hparams type (``hparams_type``)."""
    t = getattr(type(algorithm), "hparams_type", None)
    if t is None or t is object:
        raise ValueError(f"{type(algorithm).__name__} declares no hparams_type")
    return t


def static_fields(cls) -> dict[str, dataclasses.Field]:
    """A family's static configuration fields (all but problem and num_rounds), its own (positional)
    fields first, then the keyword-only ones of its mixins (``OutputRule``, ...)."""
    fields = sorted(dataclasses.fields(cls), key=lambda f: f.kw_only)  # stable: declaration order within each
    return {f.name: f for f in fields if f.name not in ("problem", "num_rounds")}


def hparam_fields(hparams_type) -> dict[str, dataclasses.Field]:
    """A family's per-run (vmapped) fields."""
    return {f.name: f for f in dataclasses.fields(hparams_type)}
