"""A shuffled run's three privacy numbers, side by side and each labelled for what it is.

Most DP-SGD code shuffles and then reports the Poisson-subsampling epsilon. Chua, Ghazi, Kamath, Kumar, Manurangsi,
Sinha & Zhang ("How Private are DP-SGD Implementations?", ICML 2024; "Scalable DP-SGD: Shuffling vs. Poisson
Subsampling", NeurIPS 2024) show that the true epsilon of shuffling can be far above it. `shuffle_gap` returns, for a
shuffled schedule (noise multiplier, batch size, data set size, epochs, delta):

* ``certified``: what dpjax certifies for the shuffled run: the caller's report where a sharper accountant applies
  (van Dijk et al.'s exact f-DP accountant for DP-SGD-General, `dpjax.accounting.batch_clipping`), otherwise the
  no-amplification bound (each record is in one batch per epoch: E Gaussian releases, the ``gdp`` accountant);
* ``poisson``: the epsilon a typical implementation would report for these numbers: Poisson subsampling at q = b/n
  for the same steps, add/remove, multiplier noise std / clip norm (Abadi et al. 2016, Opacus, dp_accounting) --
  NOT a certificate for this run;
* ``lower_bound``: Chua et al.'s lower bound for shuffling (`dpjax.accounting.shuffle_lower_bound`): no run with
  these parameters is (eps, delta)-DP below it.

Always certified >= lower_bound; where lower_bound > poisson, the Poisson number is provably wrong for the run.
"""

from __future__ import annotations

import dataclasses
import math

from dpjax import _validate as v
from dpjax.accounting import shuffle_lower_bound as lb
from dpjax.accounting.schedules import GaussianSchedule, Neighboring, PrivacyReport

__all__ = ["GapEntry", "ShuffleGap", "LABELS", "RDP_BELOW_Z", "PLD_MAX_STEPS", "PLD_MAX_EPSILON", "shuffle_gap",
           "poisson_accountant", "poisson_epsilon_reported"]

#: The three labels every report of a shuffled run prints (tests check that none is missing).
LABELS = {
    "certified": "certified (shuffling)",
    "poisson": "Poisson epsilon a typical implementation would report (not a certificate for this run)",
    "lower_bound": "lower bound for shuffling (Chua et al. 2024; not a certificate)",
}


@dataclasses.dataclass(frozen=True)
class GapEntry:
    """One labelled number: ``key`` in LABELS, its ``epsilon`` at ``delta``, the ``method`` that produced it."""

    key: str
    epsilon: float
    delta: float
    method: str

    @property
    def label(self) -> str:
        return LABELS[self.key]

    def line(self) -> str:
        eps = "inf" if math.isinf(self.epsilon) else f"{self.epsilon:.4g}"
        return f"{self.label}: ε = {eps} (δ = {self.delta:.2g}; {self.method})"


@dataclasses.dataclass(frozen=True)
class ShuffleGap:
    certified: GapEntry
    poisson: GapEntry
    lower_bound: GapEntry

    def entries(self) -> tuple[GapEntry, GapEntry, GapEntry]:
        return self.certified, self.poisson, self.lower_bound

    def lines(self) -> list[str]:
        return [e.line() for e in self.entries()]

    def as_dict(self) -> dict:
        """``{key: {"label", "epsilon", "delta", "method"}}`` (epsilon = inf written as 'inf')."""
        return {e.key: {"label": e.label, "epsilon": "inf" if math.isinf(e.epsilon) else e.epsilon,
                        "delta": e.delta, "method": e.method} for e in self.entries()}


#: Below this multiplier the Poisson number comes from RDP: dp_accounting's PLD of a Poisson-subsampled Gaussian at
#: z = 0.004 (a batch-clipping configuration's sigma / 512) ran for 8 minutes; RDP takes milliseconds at any z and is
#: what Opacus and TF Privacy report by default. Its epsilon is at or above the PLD's, so the gap shown between the
#: lower bound and the Poisson number is never wider than with the PLD.
RDP_BELOW_Z = 0.2
#: The PLD's cost grows with the steps and with the size of the privacy loss (its support): 10^6 steps at q = 0.01
#: took 7 s, 10^7 steps 280 s, 10^5 steps at z = 0.2, q = 0.5 (epsilon ~ 6e5) 145 s. Above either limit (the steps,
#: or RDP's epsilon, an upper bound on the PLD's) the Poisson number is RDP's, for the reason above; the papers'
#: grids (at most 5 x 10^4 steps, epsilon < 30) stay on the PLD.
PLD_MAX_STEPS = 10**5
PLD_MAX_EPSILON = 100.0


def _rdp_epsilon(z: float, q: float, steps: int, delta: float) -> float:
    import dp_accounting as dpa

    from dpjax.accounting.absl_logs import unconverged_orders

    # dp_accounting excludes the fractional orders whose series does not converge (their RDP is inf: still an upper
    # bound); its one absl WARNING per order stays out of dpjax's output
    with unconverged_orders():
        acc = dpa.rdp.RdpAccountant()
        acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps))
        return float(acc.get_epsilon(delta))


def poisson_accountant(z: float, steps: int | None = None, rdp_epsilon: float | None = None) -> str:
    """Which dp_accounting accountant ``poisson_epsilon_reported`` uses: ``"rdp"`` below ``RDP_BELOW_Z``, above
    ``PLD_MAX_STEPS`` steps or where RDP's epsilon exceeds ``PLD_MAX_EPSILON`` (the PLD's cost, see there), else
    ``"pld"``."""
    if z < RDP_BELOW_Z or (steps is not None and steps > PLD_MAX_STEPS):
        return "rdp"
    return "rdp" if rdp_epsilon is not None and rdp_epsilon > PLD_MAX_EPSILON else "pld"


def _poisson_number(z: float, batch_size, dataset_size: int, steps: int, delta: float) -> tuple[float, str]:
    import dp_accounting as dpa

    z = v.check_positive("z", z)
    q = v.check_probability("batch_size / dataset_size", batch_size / v.check_int("dataset_size", dataset_size,
                                                                                   min_value=1), allow_zero=False)
    steps = v.check_int("steps", steps, min_value=1)
    delta = v.check_open_unit("delta", delta)
    # RDP first (milliseconds at any size): it decides whether the PLD's cost is bounded
    rdp = _rdp_epsilon(z, q, steps, delta)
    if poisson_accountant(z, steps, rdp) == "rdp":
        return rdp, "rdp"
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-3)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps))
    return float(acc.get_epsilon(delta)), "pld"


def poisson_epsilon_reported(z: float, batch_size, dataset_size: int, steps: int, delta: float) -> float:
    """The Poisson-subsampling epsilon (dp_accounting's PLD, pessimistic, grid 1e-3 as in Chua et al.'s code; RDP
    where ``poisson_accountant`` says so; add/remove, q = batch_size / dataset_size, multiplier z = noise std / clip
    norm) a typical shuffled implementation reports. NOT a certificate for a shuffled run. Bounded work at any size
    (RDP is used where the PLD would not be)."""
    return _poisson_number(z, batch_size, dataset_size, steps, delta)[0]


def shuffle_gap(noise_multiplier: float, batch_size: int, dataset_size: int, epochs: int, delta: float, *,
                neighboring: str = "replace-one", steps: int | None = None, steps_per_epoch: int | None = None,
                certified: PrivacyReport | None = None) -> ShuffleGap:
    """The three numbers of a shuffled run (module docstring).

    Args:
      noise_multiplier: noise std / sensitivity under ``neighboring`` (replace-one: std / (2 clip), dpjax's and van
        Dijk et al.'s sigma; add-remove: std / clip).
      batch_size: b records per step (a DP-SGD-General round: m s); steps per epoch T = floor(n / b).
      dataset_size: n.
      epochs: E, a fresh permutation each; ``steps`` (default T E) may end inside an epoch.
      steps_per_epoch: T (default and largest: floor(n / b)); with fewer, every epoch leaves records out and the
        lower-bound pair (each record in exactly one step per epoch) does not apply: no lower bound is claimed.
      delta: the target delta of all three numbers.
      certified: the run's own certificate where a sharper accountant applies (e.g. DP-SGD-General's strong-exact
        report); default: the no-amplification bound of the shuffled schedule.
    """
    sigma = v.check_positive("noise_multiplier", noise_multiplier)
    n = v.check_int("dataset_size", dataset_size, min_value=1)
    b = v.check_int("batch_size", batch_size, min_value=1, max_value=n)
    e = v.check_int("epochs", epochs, min_value=1)
    d = v.check_open_unit("delta", delta)
    rel = Neighboring(v.check_choice("neighboring", neighboring, tuple(x.value for x in Neighboring)))
    t = n // b if steps_per_epoch is None else v.check_int("steps_per_epoch", steps_per_epoch, min_value=1,
                                                          max_value=n // b)
    steps = t * e if steps is None else v.check_int("steps", steps, min_value=1, max_value=t * e)
    # z = noise std / clip norm: the multiplier of the Poisson convention and of Chua et al.'s sigma
    z = 2.0 * sigma if rel is Neighboring.REPLACE_ONE else sigma
    if certified is None:
        from dpjax.accounting.api import compute_epsilon

        sens = 2.0 if rel is Neighboring.REPLACE_ONE else 1.0
        sched = GaussianSchedule(noise_std=sigma * sens, contribution_bound=1.0, sampling="shuffle", dataset_size=n,
                                 batch_size=b, steps=steps, neighboring=rel.value, unit="record")
        rep = compute_epsilon(sched, d, "gdp")
        cert = GapEntry("certified", rep.epsilon, d, f"no amplification: {sched.passes} Gaussian releases per record, "
                                                     f"{rel.value}, gdp accountant")
    else:
        cert = GapEntry("certified", certified.epsilon, certified.delta,
                        f"{certified.accountant} accountant, {certified.neighboring}")
    pois_eps, pois_acc = _poisson_number(z, b, n, steps, d)
    pois_method = f"dp_accounting {pois_acc}, add/remove, q = {b}/{n}, {steps} steps, multiplier std/clip = {z:g}"
    if pois_eps == 0.0:  # RDP's q^2 terms vanish in float64 at a tiny q (q = 1e-10: 0, where the PLD would hang)
        pois_method += "; RDP underflows at this q: 0 is a numerical floor, not an epsilon"
    pois = GapEntry("poisson", pois_eps, d, pois_method)
    full_epochs = steps // t
    if t < n // b:
        low, method = 0.0, f"epochs of {t} < floor(n/b) = {n // b} steps leave records out: no lower bound claimed"
    elif full_epochs >= 1:
        pair = "best-replace-one" if rel is Neighboring.REPLACE_ONE else "paper"
        low = lb.shuffle_epsilon_lower_bound(z, t, full_epochs, d, pair=pair)
        method = (f"ABLQ_S pair {pair}, T = {t} steps/epoch, {full_epochs} reshuffled epoch(s), "
                  f"sigma = std/clip = {z:g}")
        if full_epochs > lb.MAX_COMPOSED_EPOCHS:
            method += f" (the bound of the first {lb.MAX_COMPOSED_EPOCHS} epochs: more epochs only leak more)"
    else:  # no complete epoch: nothing below the trivial bound is claimed
        low, method = 0.0, "no complete epoch: trivial bound"
    return ShuffleGap(cert, pois, GapEntry("lower_bound", low, d, method))
