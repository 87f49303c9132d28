"""The families' static-field rules in pure Python (no jax): the checks of compile-time fields that need neither the
data nor jax -- allowed values, integer ranges and the relations between fields (BandMF's bands against its cyclic
period ``num_bins`` and the rounds, ``band_coeffs`` against ``bands``, the public numbers a binned selection needs,
a user-level sampling rate and records per user).

Each rule is written once, here: the family calls it when it is constructed (``DpSgd.__post_init__``), and
``dpjax sweep`` calls the same rule on a config's ``[static]`` table before jax and the families load
(``dpjax.sweep.config.precheck``), so a bad static value is refused in a fraction of a second, not after jax's import
and building the family (10-20 s on a loaded machine; issue #39).

``RULES`` maps a family class's name (as ``dpjax.algorithms.declared_families`` reads it from the ``register_family``
lines) to its rule: a function of keyword-only arguments named after the class's fields (and ``num_rounds``), that
raises a ``ValueError``/``TypeError`` naming the field and its value, and returns the normalised values the family
stores (``band_coeffs`` as a tuple, the resolved ``num_bins``). ``check(class_name, values)`` calls a rule with the
entries of ``values`` its parameters name.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping

from dpjax import _validate

__all__ = ["NOISES", "DP_SGD_SAMPLINGS", "BINNED_SAMPLINGS", "NEIGHBORINGS", "BAND_MF_ORDERS", "BAND_MF_SAMPLINGS",
           "MAX_OPTIMIZED_ROUNDS", "USER_UNITS", "RULES", "check", "parameters", "binned_selection",
           "binned_unused", "check_band_coeffs", "band_mf", "dp_sgd", "user_level_dpsgd"]

#: DpSgd's noise: independent Gaussian, or banded matrix-factorization noise.
NOISES = ("gaussian", "band-mf")
#: DpSgd's plain samplings -> DP-SGD-General's name of each.
DP_SGD_SAMPLINGS = {"poisson": "poisson", "without-replacement": "subsample"}
#: The binned selections (``dpjax.parts.selection_bins.BINNED_SCHEMES``, which imports jax; a test checks they agree).
BINNED_SAMPLINGS = ("balls-in-bins", "cyclic-poisson", "min-separation")
NEIGHBORINGS = ("add-remove", "replace-one")
#: BandMF's record orders: a permutation drawn once per run, or the stored order.
BAND_MF_ORDERS = ("shuffled-once", "given")
#: The selections BandMF is accounted for: fixed-order blocks, min-separation groups, cyclic Poisson (amplified).
BAND_MF_SAMPLINGS = ("one-pass", "cyclic-poisson", "min-separation")
#: The most rounds whose strategy is optimised (``bands > 1`` without ``band_coeffs``): the prefix loss is an O(R b)
#: scan evaluated ~200 times by L-BFGS (10^5 rounds: ~30 s on a loaded 2-core machine; 10^9 would need days and a
#: 4 GB scan). Beyond it, give ``band_coeffs`` (e.g. ``optimize_banded_toeplitz`` at a shorter horizon: the optimal
#: coefficients change little with R, and any coefficients are accounted exactly).
MAX_OPTIMIZED_ROUNDS = 10**5
#: User-level DP-SGD's privacy units: ULS (sample users) or ELS (sample records, group privacy).
USER_UNITS = ("user", "example")


# ------------------------------------------------------------------------------------------- binned selections
def binned_selection(sampling: str, neighboring: str, num_bins, sampling_rate) -> None:
    """A binned selection of ``DpSgd`` (Gaussian or BandMF noise): the scheme, the relation and the public numbers
    each relation needs (under add/remove the data set's size is not public)."""
    _validate.check_choice("sampling", sampling, BINNED_SAMPLINGS)
    _validate.check_choice("neighboring", neighboring, NEIGHBORINGS)
    if num_bins is not None:
        _validate.check_int("num_bins", num_bins, min_value=1)
    if neighboring == "add-remove":
        if num_bins is None and sampling != "cyclic-poisson":
            raise ValueError(f"num_bins=None with sampling={sampling!r} under add-remove: B = n // K would be read "
                             "from the data set's size, which differs between neighbours; declare num_bins")
        if sampling == "cyclic-poisson" and sampling_rate is None:
            raise ValueError("sampling_rate=None with sampling='cyclic-poisson' under add-remove: q = K b / n would "
                             "be read from the data set's size; declare the public rate sampling_rate")


def binned_unused(sampling: str, num_bins, capacity) -> None:
    """``num_bins`` / ``capacity`` belong to the binned selections: refused with any other ``sampling``."""
    if sampling not in BINNED_SAMPLINGS and (num_bins is not None or capacity is not None):
        raise ValueError(f"num_bins={num_bins!r}, capacity={capacity!r} need sampling in {BINNED_SAMPLINGS}, got "
                         f"sampling={sampling!r}")


# -------------------------------------------------------------------------------------------------------- BandMF
def check_band_coeffs(coeffs) -> tuple[float, ...]:
    """``band_coeffs`` as a tuple of floats: a non-empty sequence of finite numbers with ``band_coeffs[0] > 0``."""
    if isinstance(coeffs, (str, bytes)):
        raise TypeError(f"band_coeffs={coeffs!r} must be a sequence of numbers (c_0, ..., c_(b-1)), not a string")
    try:
        out = tuple(float(x) for x in coeffs)
    except (TypeError, ValueError):
        raise TypeError(f"band_coeffs={coeffs!r} must be a sequence of real numbers (c_0, ..., c_(b-1))") from None
    if not out or not all(math.isfinite(c) for c in out) or not out[0] > 0:
        raise ValueError(f"band_coeffs={coeffs!r} must be a non-empty sequence of finite numbers with "
                         "band_coeffs[0] > 0 (the strategy's diagonal: C must be invertible)")
    return out


def band_mf(num_rounds: int, sampling: str, neighboring: str, order: str, bands, coeffs, *, num_bins=None,
            sampling_rate=None) -> tuple:
    """A BandMF configuration (Choquette-Choo et al., NeurIPS 2023): returns ``(band_coeffs as a tuple or None,
    num_bins)``, the period of a binned selection defaulting to the strategy's bands (the cyclic period and the bands
    tied, as Thm 4 states it; BandMF's accounting needs a record's participations >= bands rounds apart)."""
    if sampling not in BAND_MF_SAMPLINGS:
        raise ValueError(f"sampling={sampling!r} must be 'one-pass', 'cyclic-poisson' or 'min-separation' with "
                         "noise='band-mf' (a record's participations separated, or cyclic Poisson groups: BandMF's "
                         "accounting)")
    if sampling == "one-pass":
        if neighboring != "replace-one":
            raise ValueError(f"neighboring={neighboring!r} must be 'replace-one' with noise='band-mf' and "
                             "sampling='one-pass' (fixed positions)")
        if num_bins is not None:
            raise ValueError(f"num_bins={num_bins!r}: sampling='one-pass' cycles blocks of batch_size; the period "
                             "is n_min // batch_size")
    elif sampling == "cyclic-poisson" and neighboring != "add-remove":
        raise ValueError(f"neighboring={neighboring!r} must be 'add-remove' with noise='band-mf' and "
                         "sampling='cyclic-poisson' (amplified BandMF, NeurIPS 2023, Thm 4)")
    _validate.check_choice("order", order, BAND_MF_ORDERS)
    num_rounds = _validate.check_rounds("num_rounds", num_rounds)
    if bands is not None:
        _validate.check_int("bands", bands, min_value=1, max_value=num_rounds)
    out = None
    if coeffs is not None:
        out = check_band_coeffs(coeffs)
        if bands is not None and len(out) != bands:
            raise ValueError(f"band_coeffs has {len(out)} entries; bands={bands} must match (band_coeffs={coeffs!r})")
        if len(out) > num_rounds:
            raise ValueError(f"band_coeffs has {len(out)} entries ({coeffs!r}); at most num_rounds={num_rounds} "
                             "(a band beyond the last round never applies)")
    elif bands is not None and bands > 1 and num_rounds > MAX_OPTIMIZED_ROUNDS:
        raise ValueError(f"num_rounds={num_rounds!r} with bands={bands}: the strategy is optimised for at most "
                         f"MAX_OPTIMIZED_ROUNDS={MAX_OPTIMIZED_ROUNDS} rounds (an O(R bands) loss, ~200 evaluations); "
                         "give band_coeffs (e.g. dpjax.primitives.banded_mf.optimize_banded_toeplitz at a shorter "
                         "horizon)")
    if sampling == "one-pass":
        return out, None
    b = len(out) if out is not None else (1 if bands is None else bands)
    period = b if num_bins is None else _validate.check_int("num_bins", num_bins, min_value=1)
    if b > period:
        raise ValueError(f"bands={b} must be <= num_bins={period}, the cyclic period (a record's participations "
                         "are num_bins rounds apart; BandMF's accounting needs them >= bands apart)")
    binned_selection(sampling, neighboring, period, sampling_rate)
    return out, period


# ------------------------------------------------------------------------------------------------ the families
def dp_sgd(*, num_rounds, noise, sampling, neighboring, sampling_rate, order, bands, band_coeffs, num_bins,
           capacity) -> dict:
    """``DpSgd``'s static fields (``dpjax.algorithms.dp_sgd``): the noise, the sampling it allows, BandMF's fields
    with ``noise="band-mf"`` only, a binned selection's numbers. Returns ``{"band_coeffs", "num_bins"}`` under BandMF
    (the coefficients as a tuple, the resolved period)."""
    _validate.check_choice("noise", noise, NOISES)
    binned_unused(sampling, num_bins, capacity)
    if noise == "band-mf":
        _validate.check_int("num_rounds", num_rounds, min_value=1)
        coeffs, period = band_mf(num_rounds, sampling, neighboring, order, bands, band_coeffs, num_bins=num_bins,
                                 sampling_rate=sampling_rate)
        return {"band_coeffs": coeffs, "num_bins": period}
    if bands is not None or band_coeffs is not None:
        raise ValueError(f"bands={bands!r}, band_coeffs={band_coeffs!r} need noise='band-mf'")
    _validate.check_choice("sampling", sampling, tuple(DP_SGD_SAMPLINGS) + BINNED_SAMPLINGS)
    if sampling in BINNED_SAMPLINGS:
        binned_selection(sampling, neighboring, num_bins, sampling_rate)
    return {}


def user_level_dpsgd(*, unit, sampling_rate, records_per_user, capacity) -> dict:
    """``UserLevelDpSgd``'s static fields (``dpjax.algorithms.user_level_dpsgd``): the unit, the public rate
    q in (0, 1], k >= 1 records per user, the buffer's capacity."""
    _validate.check_choice("unit", unit, USER_UNITS)
    _validate.check_probability("sampling_rate", sampling_rate, allow_zero=False)
    _validate.check_int("records_per_user", records_per_user, min_value=1)
    if capacity is not None:
        _validate.check_int("capacity", capacity, min_value=1)
    return {}


#: family class name -> its rule.
RULES = {"DpSgd": dp_sgd, "UserLevelDpSgd": user_level_dpsgd}


def parameters(class_name: str) -> tuple[str, ...]:
    """The fields (and ``num_rounds``) the rule of ``class_name`` reads; ``()`` for a family without one."""
    rule = RULES.get(class_name)
    return () if rule is None else tuple(inspect.signature(rule).parameters)


def check(class_name: str, values: Mapping) -> dict:
    """Applies the rule of ``class_name`` to ``values`` (field -> value, every parameter present); returns the
    normalised values to store (``{}`` for a family without a rule)."""
    rule = RULES.get(class_name)
    if rule is None:
        return {}
    return rule(**{k: values[k] for k in parameters(class_name)})
