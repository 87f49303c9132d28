"""A table of run specs through ``dpjax.engine.run_grid``: one tidy row per run.

The paper drivers describe one trial's grid as a list of *run specs* (frozen dataclasses, one per run: the
hyperparameters, labels such as a calibration or an epsilon, and a ``repetition`` index). ``run_table`` executes them as
compiled chunks of ``run_grid`` on one data split and returns one row per spec (the spec's fields, the final training
loss, the test metric(s) and whether the run diverged); ``run_families`` does so for several algorithm families of one
trial, each with its own key, and extends each family's step-size grid where the selection sits at an end
(``select.extend_grid_at_edges``). Selection over the rows: ``dpjax.sweep.select``.

Protocol options (Lowy & Razaviyayn, ICLR 2023, Section 6 / Appendix I):

* common random numbers: repetition ``r`` of every spec uses ``keys.run_key(key, r)``; the runs of one repetition share
  it inside one program, so availability, batches and standard-normal draws are computed once and gradients become
  matrix products;
* divergence: a run whose iterate went non-finite or whose final training loss exceeds ``divergence_threshold`` (the
  authors' guard) is *diverged*; its training loss is +inf, so a mean over repetitions never selects it.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from dpjax import _validate


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """``eval_fn`` of a grid (hashable, so trials reuse the compiled program).

    Returns the pooled training loss and the test metric ``test_metric`` of the problem's ``evaluate`` (``"error"`` or
    ``"rmse"``).
    """
    problem: Any
    test_metric: str = "error"
    extra_tests: tuple[str, ...] = ()  # further test sets in eval_data, reported as columns of these names

    def __call__(self, params, data):
        tr = self.problem.evaluate(params, *data["train"])
        te = self.problem.evaluate(params, *data["test"])
        out = {"train_loss": tr["loss"], "test": te[self.test_metric]}
        for name in self.extra_tests:
            out[name] = self.problem.evaluate(params, *data[name])[self.test_metric]
        return out


def eval_data_for(train, test_x, test_y, extra: dict | None = None):
    """The ``eval_data`` of ``Evaluator``: pooled training rows, the pooled test set and any ``extra`` named test sets
    ``{name: (x, y)}``."""
    import jax.numpy as jnp
    out = {"train": train.pooled()}
    for name, (x, y) in [("test", (test_x, test_y))] + sorted((extra or {}).items()):
        out[name] = (jnp.asarray(x), jnp.asarray(y), jnp.ones(len(y), bool))
    return out


def balanced_chunk(num_runs: int, max_chunk: int = 256) -> int:
    """The chunk width that splits ``num_runs`` into equal chunks of at most ``max_chunk``."""
    return math.ceil(num_runs / math.ceil(num_runs / max_chunk))


#: Spec fields that label a run rather than configure it (never hparams); a spec class may name
#: more in a ``LABELS`` class attribute.
SPEC_LABELS = frozenset({"algorithm", "calibration", "epsilon", "repetition", "hp_index"})


def hparams_from_spec(algorithm, spec) -> Any:
    """The family's hparams from the spec's fields that name its per-run fields (``hparams_type.create`` with e.g.
    ``learning_rate``, ``noise_multiplier``, ``clip_norm``).

    Every other spec field must be a label (``SPEC_LABELS`` or the spec class's ``LABELS``): a field the family does not
    know (e.g. an absolute ``noise_std`` where the family takes a ``noise_multiplier``) raises a ValueError naming it
    instead of being dropped, which would run the family without that setting (noiseless, for a noise field). Pass
    ``make_hparams`` to ``run_table`` to convert such fields."""
    from dpjax.engine.contract import family_hparams, hparam_fields
    names = hparam_fields(family_hparams(algorithm))
    fields = [f.name for f in dataclasses.fields(spec)] if dataclasses.is_dataclass(spec) else list(vars(spec))
    labels = SPEC_LABELS | frozenset(getattr(type(spec), "LABELS", ()))
    unknown = [f for f in fields if f not in names and f not in labels]
    if unknown:
        raise ValueError(f"spec field {unknown[0]}={getattr(spec, unknown[0])!r} is not a per-run field of "
                         f"{type(algorithm).__name__} ({', '.join(names)}) nor a label ({', '.join(sorted(labels))}); "
                         "convert it with make_hparams")
    return algorithm.hparams_from_values(**{n: getattr(spec, n) for n in names if hasattr(spec, n)})


def _spec_row(spec) -> dict:
    """``dataclasses.asdict(spec)`` without its deep copy where every field is a flat value."""
    row = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    if any(isinstance(v, (list, tuple, dict, set)) or dataclasses.is_dataclass(v) for v in row.values()):
        return dataclasses.asdict(spec)
    return row


def run_table(algorithm, train, eval_data, evaluator: Evaluator, specs: Sequence[Any], key, *,
              divergence_threshold: float = math.inf, chunk_size: int = 256,
              make_hparams: Callable[[Any], Any] | None = None, pad_to: int | None = None) -> pd.DataFrame:
    """Runs every spec of one data split through ``dpjax.engine.run_grid``; one row per run.

    ``specs`` are dataclass instances with a ``repetition`` field; repetition ``r`` uses ``keys.run_key(key, r)``
    (common random numbers across the specs of a repetition). Chunks of ``chunk_size`` runs within a repetition keep the
    compiled program the same for every chunk and every trial. Columns: the spec fields, ``train_loss`` (+inf if
    diverged), ``test`` and the evaluator's extra test columns (NaN if diverged), ``diverged``. ``make_hparams(spec)``
    builds one run's hparams (default ``hparams_from_spec``); ``pad_to``: as in ``run_grid`` (narrower chunks padded to
    it).
    """
    import jax
    from dpjax import keys
    from dpjax.engine import run_grid, stack_hparams
    from dpjax.engine.checks import diverged
    if len(specs) == 0:
        raise ValueError("specs=[] must hold at least one run")
    _validate.check_positive("divergence_threshold", divergence_threshold, allow_inf=True)
    specs = list(specs)
    make = make_hparams or (lambda s: hparams_from_spec(algorithm, s))
    repetitions = sorted({int(s.repetition) for s in specs})
    # the distinct repetitions' keys stacked once, then one row per run: a stack of one key per run was a
    # program with one operand per run (1,950 in an insurance panel: 0.29 s a call, 7 s of the full protocol)
    rep_keys = jax.numpy.stack([keys.run_key(key, r) for r in repetitions])
    position = {r: i for i, r in enumerate(repetitions)}
    run_keys = rep_keys[np.array([position[int(s.repetition)] for s in specs], np.int32)]
    res = run_grid(algorithm, train, stack_hparams([make(s) for s in specs]), run_keys, eval_fn=evaluator,
                   eval_data=eval_data, common_random_numbers=True, chunk_size=chunk_size, pad_to=pad_to)
    tl = np.asarray(res.evals["train_loss"][:, -1], np.float64)
    bad = diverged(res.diverged_round, tl, divergence_threshold)
    # the spec fields as they are (flat scalars and strings): dataclasses.asdict deep-copies every value
    # (94,260 specs: 2.8 s of isrl-insurance's 3 trials)
    df = pd.DataFrame([_spec_row(s) for s in specs])
    df["train_loss"] = np.where(bad, np.inf, tl)
    df["test"] = np.where(bad, np.nan, np.asarray(res.evals["test"][:, -1], np.float64))
    for name in evaluator.extra_tests:
        df[name] = np.where(bad, np.nan, np.asarray(res.evals[name][:, -1], np.float64))
    df["diverged"] = bad
    return df


@dataclasses.dataclass(frozen=True)
class Family:
    """One algorithm family's grid in a trial.

    ``specs``: its run specs; ``extend(requests, runs) -> specs`` builds the runs of step-size grid extensions
    (``select.extend_grid_at_edges`` requests), ``None`` for none; ``make_hparams`` as in ``run_table``.
    """
    algorithm: Any
    specs: Sequence[Any]
    extend: Callable[[list[dict], pd.DataFrame], Sequence[Any]] | None = None
    make_hparams: Callable[[Any], Any] | None = None


def extension_width(specs: Sequence[Any], column: str, chunk: int) -> int:
    """The chunk width of a family's grid extensions: the most runs one repetition holds at one ``column`` value in the
    first grid (at most ``chunk``).

    An extension round asks for at most one new ``column`` value per group, and a group's runs at one value are those of
    the first grid at one value (every other hyperparameter, e.g. the clip norms), so one extension round of one
    repetition fits one chunk of this width when the groups share the grid. Padding extensions to the first grid's width
    instead (130 lanes for 13 requests in the full ``isrl-mnist``) made every extension round cost as much as the first
    grid: the chunk's cost grows with its width (measured on the Local SGD chunk: 1.3 s CPU at 35 lanes, 3.75 s
    at 130)."""
    per_value = collections.Counter((int(s.repetition), getattr(s, column, None)) for s in specs)
    per_rep = collections.Counter(int(s.repetition) for s in specs)
    return min(chunk, max(per_rep.values()), max(per_value.values()))


def run_families(families: Sequence[Family], train, eval_data, evaluator: Evaluator, key, *,
                 divergence_threshold: float, extend_by: Sequence[str] = (), criterion: str = "train_loss",
                 column: str = "learning_rate", max_extensions: int = 0,
                 narrow_extensions: bool = True) -> list[pd.DataFrame]:
    """One trial's families, one table each: family ``i`` runs its specs with ``keys.run_key(key, i)`` in balanced
    chunks (``balanced_chunk``), then, if it has an ``extend`` rule, extends its ``column`` grid per ``extend_by`` group
    while the selection (mean ``criterion``) sits at an end (``select.extend_grid_at_edges``; the extensions reuse the
    family's key, so they share their random draws with the first runs). An extension's chunks have one width per
    family, ``extension_width`` (``narrow_extensions=False``: the first grid's width, reusing its program: fewer
    compilations where few extension rounds follow), so every extension reuses one compiled program instead of compiling
    one per extension size (``run_grid``'s ``pad_to``)."""
    from dpjax import keys
    from dpjax.sweep.select import extend_grid_at_edges
    out = []
    for i, fam in enumerate(families):
        fam_key = keys.run_key(key, i)
        chunk = balanced_chunk(len(fam.specs))
        first = min(chunk, max(collections.Counter(int(s.repetition) for s in fam.specs).values()))
        width = extension_width(fam.specs, column, chunk) if narrow_extensions else first

        def run(specs, fam=fam, fam_key=fam_key, chunk=chunk, pad_to=None):
            return run_table(fam.algorithm, train, eval_data, evaluator, specs, fam_key,
                             divergence_threshold=divergence_threshold, chunk_size=chunk,
                             make_hparams=fam.make_hparams, pad_to=pad_to)

        df = run(fam.specs)
        if fam.extend is not None:
            df = extend_grid_at_edges(df, by=extend_by, criterion=criterion, column=column,
                                      max_extensions=max_extensions,
                                      run_values=lambda requests, runs, fam=fam, run=run, width=width: run(
                                          fam.extend(requests, runs), chunk=width, pad_to=width))
        out.append(df)
    return out
