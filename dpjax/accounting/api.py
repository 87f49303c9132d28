"""`compute_epsilon` and `calibrate_noise` for `GaussianSchedule`s.

Accountants (see README.md for the full certification table):

* tight: ``rdp``, ``pld``, ``zcdp``, ``gdp`` (`dpjax.accounting.tight`), and ``best``: the smallest epsilon of rdp, pld
  and gdp among those that certify the schedule (the report's ``accountant`` names the winner);
* ``paper``: the ISRL-DP paper's printed guarantee for Noisy MB-SGD (with/without-replacement sampling; ISRL Thm D.1) or
  for the one-pass variant (ISRL Thm 3.1) -- a reproduction of a claim, not a certificate;
* ``paper-experiment``: the ISRL-DP Appendix I moments-accountant form (add/remove calibration, reported for comparison
  only).

`compute_epsilon` also takes a sequence of schedules: their composition (heterogeneous, e.g. DIFF2's restart and
difference rounds), with every tight accountant; schedules that mix neighbouring relations are refused.
"""

from __future__ import annotations

import math


from dpjax import _validate as v
from dpjax.accounting import calibration
from dpjax.accounting import isrl as _isrl
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyReport, Sampling
from dpjax.accounting.tight import (
    MAX_ACCOUNTED_NOISE_MULTIPLIER,
    TIGHT_ACCOUNTANTS,
    NotComputableError,
    float64_guard,
    certifies,
    check_computable,
    tight_epsilon,
)

__all__ = ["ACCOUNTANTS", "compute_epsilon", "calibrate_noise", "calibrate_schedule", "use_probability", "CALIBRATION_RTOL",
           "PLD_CALIBRATION_RTOL", "MIN_NOISE_MULTIPLIER"]

PAPER_ACCOUNTANTS = ("paper", "paper-experiment")
ACCOUNTANTS = TIGHT_ACCOUNTANTS + ("best",) + PAPER_ACCOUNTANTS

#: Relative tolerance of `calibrate_noise`: the returned noise_std is at most
#: (1 + CALIBRATION_RTOL) times the smallest noise_std that meets the target on
#: the accountant's curve, and it always meets the target (it is re-checked).
CALIBRATION_RTOL = 1e-6
#: The same for PLD (and ``best`` when PLD wins), whose epsilon is only
#: resolved to its discretisation: bisection stops at this relative width.
PLD_CALIBRATION_RTOL = 5e-4
#: Calibration looks for the noise down to this noise multiplier; a target met
#: even there needs no noise to speak of and is refused (instead of chasing
#: noise_std -> 0 through ever larger privacy-loss grids).
MIN_NOISE_MULTIPLIER = 1e-4


def _check_schedule(schedule) -> GaussianSchedule:
    if not isinstance(schedule, GaussianSchedule):
        raise ValueError(f"schedule={schedule!r} must be a GaussianSchedule")
    return schedule


def _paper_epsilon(schedule: GaussianSchedule, delta: float, accountant: str) -> PrivacyReport:
    if schedule.group_size != 1:
        raise ValueError(f"accountant={accountant!r} has no group-privacy form; group_size={schedule.group_size} must be 1")
    n, k, r = schedule.dataset_size, schedule.batch_size, schedule.steps
    lip = schedule.contribution_bound * (k if k is not None else n)  # s = L/K
    notes: list[str] = []
    if schedule.noise_std == 0:
        eps = math.inf
    elif accountant == "paper-experiment":
        if schedule.sampling is Sampling.FULL:
            raise ValueError(f"accountant={accountant!r} needs a subsampled schedule, got sampling='full'")
        eps = _isrl.isrl_experiment_epsilon(lip, n, r, schedule.noise_std, delta)
        notes.append(
            "ISRL-DP Appendix I moments-accountant form (add/remove calibration): nominal, "
            "not certified for replace-one; report a tight accountant next to it"
        )
        if k < _isrl.moments_accountant_min_batch(n, r, eps):
            notes.append(f"batch condition K >= n sqrt(eps/(4R)) violated (K={k})")
    elif schedule.sampling in (Sampling.WITH_REPLACEMENT, Sampling.WITHOUT_REPLACEMENT):
        try:
            eps = _isrl.isrl_paper_epsilon(lip, n, r, schedule.noise_std, delta)
        except ValueError as exc:
            raise ValueError(f"accountant={accountant!r} cannot certify this schedule: {exc}") from None
        kmin = _isrl.isrl_paper_min_batch_size(n, r, eps, delta)
        if k < kmin:
            raise ValueError(
                f"accountant={accountant!r}: batch_size={k} is below the paper's requirement "
                f"K >= {kmin} (eps n/(4 sqrt(2R ln(2/delta)))) for eps={eps:.4g}"
            )
        notes.append("ISRL-DP Theorem D.1 printed calibration (advanced composition; paper's claim)")
        if schedule.sampling is Sampling.WITH_REPLACEMENT:
            notes.append("the paper's proof uses a without-replacement lemma for with-replacement sampling (ISRL-DP, Theorem D.1)")
    elif schedule.sampling is Sampling.ONE_PASS:
        if r * k > n:
            raise ValueError(f"accountant={accountant!r}: one-pass needs steps*batch_size <= dataset_size, got {r}*{k} > {n}")
        try:
            eps = _isrl.isrl_one_pass_paper_epsilon(lip, k, schedule.noise_std, delta)
        except ValueError as exc:
            raise ValueError(f"accountant={accountant!r} cannot certify this schedule: {exc}") from None
        notes.append("ISRL-DP Theorem 3.1 one-pass calibration (classical Gaussian mechanism; paper's claim)")
    else:
        raise ValueError(
            f"accountant={accountant!r} has no printed bound for sampling={schedule.sampling.value!r} "
            "(ISRL-DP paper mode covers with/without-replacement minibatches and one-pass)"
        )
    return PrivacyReport(
        epsilon=eps,
        delta=delta,
        accountant=accountant,
        sampling=schedule.sampling.value,
        neighboring=schedule.neighboring.value,
        unit=schedule.unit.value,
        noise_std=schedule.noise_std,
        notes=tuple(notes),
    )


def compute_epsilon(schedule, delta: float, accountant: str = "rdp", events=None) -> PrivacyReport:
    """(epsilon, delta) guarantee of `schedule`, with the method that certified it.

    Args:
      schedule: a `GaussianSchedule`, or a sequence of them: their composition
        (one neighbouring relation, unit and group size; tight accountants).
      delta: target delta in (0, 1).
      accountant: one of `ACCOUNTANTS`; ``"best"`` reports the smallest
        epsilon of rdp/pld/gdp and names the one that certified it.
      events: the ``dp_accounting`` DpEvents the tight accountants compose, one
        per schedule (a ``DpPlan``'s parts' events); default: each schedule's.

    Raises:
      ValueError: invalid argument, schedules that mix neighbouring relations,
        or `accountant` cannot certify the schedule (the message names
        ``accountant`` and says what to use instead).
      NotComputableError (a ValueError): epsilon is not computable in float64
        (a noise multiplier below 1e-4 -- epsilon = inf for any practical
        purpose -- or above 1e8, more than 2**53 steps, or an accountant whose
        numerics overflow on this schedule); the message names the argument.
        It never escapes as an ``OverflowError`` or a NaN.
    """
    v.check_choice("accountant", accountant, ACCOUNTANTS)
    delta = v.check_open_unit("delta", delta)
    if accountant in PAPER_ACCOUNTANTS:
        if not isinstance(schedule, GaussianSchedule):
            raise ValueError(f"accountant={accountant!r} accounts one schedule; compose with a tight accountant")
        check_computable(schedule, accountant)
        with float64_guard(accountant):
            report = _paper_epsilon(schedule, delta, accountant)
        if math.isnan(report.epsilon):
            raise NotComputableError(f"accountant={accountant!r} gives no finite bound for this schedule (NaN in "
                                     "float64); use accountant='rdp'")
        return report
    return tight_epsilon(schedule, delta, accountant, events=events)


def calibrate_noise(
    schedule: GaussianSchedule, target_epsilon: float, delta: float, accountant: str = "rdp"
) -> float:
    """Smallest noise_std (ignoring ``schedule.noise_std``) with epsilon <= target.

    Returns the absolute noise standard deviation, a bare float: divide by ``schedule.sensitivity`` for the noise
    multiplier, or call ``calibrate_schedule`` for the calibrated schedule, whose ``noise_std``, ``noise_multiplier``
    and ``sensitivity`` are named. Never overshoots: the returned noise_std gives
    ``compute_epsilon(...).epsilon <= target_epsilon`` with the same accountant (checked on the same function), and it
    exceeds the smallest such noise_std by at most a factor (1 + CALIBRATION_RTOL) (RDP/zCDP/GDP) or (1 +
    PLD_CALIBRATION_RTOL) (PLD, "best").

    Raises:
      ValueError: invalid argument, an accountant that cannot certify the
        schedule, a target no noise level reaches, or a target met even at
        noise multiplier `MIN_NOISE_MULTIPLIER` (delta too large to need noise).
    """
    schedule = _check_schedule(schedule)
    target = v.check_positive("target_epsilon", target_epsilon)
    delta = v.check_open_unit("delta", delta)
    v.check_choice("accountant", accountant, ACCOUNTANTS)

    if accountant in PAPER_ACCOUNTANTS:
        eps_at = lambda std: compute_epsilon(schedule.replace(noise_std=std), delta, accountant).epsilon  # noqa: E731
        with float64_guard(accountant):
            return _calibrate_paper(schedule, target, delta, accountant, eps_at)
    if accountant == "best":
        # eps_best = min_a eps_a, each decreasing in the noise: the smallest noise is the min over accountants
        found, failed = [], []
        for a in ("rdp", "pld", "gdp"):
            if certifies(a, schedule):
                try:
                    found.append(_calibrate_tight(schedule, target, delta, a))
                except NotComputableError as err:  # that accountant's numerics give out here; the others decide
                    failed.append(err)
        if not found:
            raise failed[0]
        return min(found)
    return _calibrate_tight(schedule, target, delta, accountant)


def _calibrate_tight(schedule: GaussianSchedule, target: float, delta: float, accountant: str) -> float:
    """Bracket by factors of 4, then ``dp_accounting.calibrate_dp_mechanism`` where dpjax's RDP is dp_accounting's
    (``_rdp_is_dp_accountings``), else Brent on log noise_std and bisection on the verified side: the smallest
    noise_std with eps <= target to a relative width CALIBRATION_RTOL (PLD_CALIBRATION_RTOL for PLD).

    PLD searches first on a 4x coarser grid (cheap), then re-brackets around that root and finishes on the reporting
    grid. The final evaluations are ``tight_epsilon`` itself, so the returned value -- the upper end of the final
    bracket, where eps <= target was evaluated -- meets the target as `compute_epsilon` reports it. An epsilon of 0
    (tiny targets: eps already 0 at the bracket's top) is handled by the bisection.
    """
    cache: dict[tuple[float, float], float] = {}

    def eps_at(std: float, coarsening: float = 1.0) -> float:
        if (std, coarsening) not in cache:
            try:
                cache[std, coarsening] = tight_epsilon(schedule.replace(noise_std=std), delta, accountant,
                                                       pld_coarsening=coarsening).epsilon
            except NotComputableError:
                # Only an upper bound is safe here: inf never lets the search accept this noise level.
                cache[std, coarsening] = math.inf
        return cache[std, coarsening]

    pld = accountant == "pld"
    first = (lambda std: eps_at(std, 4.0)) if pld else eps_at
    lo, hi = _bracket(schedule, target, delta, first)
    if accountant == "rdp" and _rdp_is_dp_accountings(schedule):
        found = _calibrate_dp_mechanism(schedule, target, delta, lo, hi, eps_at)
        if found is not None:
            return found
    lo, hi = calibration.refine_bracket(first, target, lo, hi, 1e-3 if pld else CALIBRATION_RTOL)
    if not pld:
        return hi
    # re-bracket on the reporting grid around the coarse root, widening geometrically
    lo, hi = calibration.rebracket(eps_at, target, lo, hi)
    return calibration.refine_bracket(eps_at, target, lo, hi, PLD_CALIBRATION_RTOL)[1]


def _rdp_is_dp_accountings(schedule: GaussianSchedule) -> bool:
    """Whether dpjax's RDP of ``schedule`` is dp_accounting's ``RdpAccountant`` on its DpEvent, at a cheap curve:
    Poisson add/remove (one record) and deterministic participation. Not with replacement or Poisson replace-one (the
    conditioned bound), group privacy under sampling (the conversion), nor without replacement (RdpAccountant redoes
    O(alpha^2) forward differences per order each evaluation; ``wor_rdp`` does them once a noise level)."""
    if schedule.sampling in (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE):
        return True
    return (schedule.sampling is Sampling.POISSON and schedule.neighboring is Neighboring.ADD_REMOVE
            and schedule.group_size == 1)


def _calibrate_dp_mechanism(schedule: GaussianSchedule, target: float, delta: float, lo: float, hi: float, eps_at):
    """``dp_accounting.calibrate_dp_mechanism`` over log std of the schedule's DpEvent in dpjax's bracket (``eps(lo) >
    target >= eps(hi)``) to log1p(CALIBRATION_RTOL) / 4: within (1 + CALIBRATION_RTOL) of the smallest std meeting the
    target, re-checked on ``eps_at`` (what ``compute_epsilon`` reports); None: dpjax's own search decides."""
    from dp_accounting import mechanism_calibration as mc
    from dp_accounting.rdp import RdpAccountant

    from dpjax.accounting.absl_logs import unconverged_orders
    from dpjax.accounting.tight import rdp_orders

    if not math.isfinite(eps_at(lo)):
        return None
    relation, orders = schedule.dp_neighboring_relation, list(rdp_orders())
    try:
        with float64_guard("rdp"), unconverged_orders():
            log_std = mc.calibrate_dp_mechanism(lambda: RdpAccountant(orders, relation),
                                                lambda u: schedule.replace(noise_std=math.exp(u)).to_dp_event(),
                                                target, delta, mc.ExplicitBracketInterval(math.log(lo), math.log(hi)),
                                                tol=math.log1p(CALIBRATION_RTOL) / 4)
    except ValueError:  # brentq found no sign change on this curve
        return None
    std = None if log_std is None else math.exp(log_std)
    for _ in range(16):  # the same curve: at most float summation order apart
        if std is None or eps_at(std) <= target:
            return std
        std = math.nextafter(std, math.inf)
    return None


def use_probability(schedule: GaussianSchedule) -> float:
    """Probability that a given record is used by at least one release.

    Without noise the two neighbouring runs differ only when it is, so the schedule is (0, p)-DP for every noise level
    including 0: a delta >= p needs no noise. Group privacy (g > 1) and deterministic participation: 1.
    """
    if schedule.group_size > 1 or schedule.sampling in (Sampling.FULL, Sampling.ONE_PASS, Sampling.SHUFFLE):
        return 1.0
    if schedule.sampling is Sampling.WITH_REPLACEMENT:
        draws, q = schedule.batch_size * schedule.steps, 1.0 / schedule.dataset_size
    else:  # poisson, without-replacement: in each step's batch w.p. K/n
        draws, q = schedule.steps, schedule.inclusion_probability
    return -math.expm1(draws * math.log1p(-q)) if q < 1 else 1.0


def _bracket(schedule: GaussianSchedule, target: float, delta: float, eps_at) -> tuple[float, float]:
    """(lo, hi) with eps(lo) > target >= eps(hi), by factors of 4 from noise multiplier 1."""
    p_used = use_probability(schedule)
    if delta >= p_used:
        raise ValueError(
            f"delta={delta!r} is >= {p_used:.6g}, the probability that a record is used at all: the schedule is "
            f"(0, delta)-DP without any noise, so target_epsilon={target!r} needs none; use a smaller delta"
        )
    unit = schedule.sensitivity * schedule.group_size
    lo, hi = None, unit
    while True:  # noise multiplier up to MAX_ACCOUNTED_NOISE_MULTIPLIER (1e8), the accountants' float64 range
        if eps_at(hi) <= target:
            break
        if hi * 4.0 > MAX_ACCOUNTED_NOISE_MULTIPLIER * schedule.sensitivity:
            raise ValueError(f"target_epsilon={target!r} cannot be reached by any noise level (delta={delta!r}): "
                             f"epsilon is still {eps_at(hi):.3g} at noise multiplier {hi / schedule.sensitivity:.3g}")
        lo, hi = hi, hi * 4.0
    if lo is None:
        lo = hi
        while True:
            lo = lo / 4.0
            if lo < MIN_NOISE_MULTIPLIER * schedule.sensitivity:
                raise ValueError(
                    f"target_epsilon={target!r} is met at every noise level down to noise multiplier "
                    f"{MIN_NOISE_MULTIPLIER} (epsilon {eps_at(hi):.3g} there) with delta={delta!r}: this delta "
                    "needs (almost) no noise, nothing to calibrate; use a smaller delta"
                )
            if eps_at(lo) > target:
                break
            hi = lo
    return lo, hi


def _calibrate_paper(schedule, target, delta, accountant, eps_at) -> float:
    n, k, r = schedule.dataset_size, schedule.batch_size, schedule.steps
    lip = schedule.contribution_bound * (k if k is not None else n)
    if accountant == "paper-experiment":
        sigma = _isrl.isrl_experiment_calibration(lip, n, r, target, delta)[0]
    elif schedule.sampling is Sampling.ONE_PASS:
        sigma = _isrl.isrl_one_pass_paper_sigma(lip, k, target, delta)
    else:
        sigma = _isrl.isrl_paper_sigma(lip, n, r, target, delta)
    try:
        check_computable(schedule.replace(noise_std=sigma), accountant)
    except NotComputableError as err:
        raise NotComputableError(f"target_epsilon={target!r} with accountant={accountant!r} needs {err}") from None
    # rounding: make sure the closed form round-trips below target
    for _ in range(10):
        if eps_at(sigma) <= target:
            return sigma
        sigma *= 1 + 1e-12
    raise ValueError(f"accountant={accountant!r} calibration did not reach target_epsilon={target!r}")


def calibrate_schedule(
    schedule: GaussianSchedule, target_epsilon: float, delta: float, accountant: str = "rdp"
) -> GaussianSchedule:
    """``schedule`` with the noise ``calibrate_noise`` finds (its ``noise_std`` ignored): the result names its parts,
    ``.noise_std`` (absolute), ``.noise_multiplier`` (std / sensitivity) and ``.sensitivity``, and is what
    ``compute_epsilon`` certifies (``<= target_epsilon``, never overshooting)."""
    std = calibrate_noise(schedule, target_epsilon, delta, accountant)
    return _check_schedule(schedule).replace(noise_std=std)
