"""The catalogue of canary audits: every registered private family, through its own step.

Each builder returns a ``CanaryAudit`` whose mechanism is a ``FamilyRun``: the family object that
``dpjax.engine.registry`` registers, run through the engine's executor (``dpjax.auditing.execute.run_family``, one run
per key) on small canary data, never a re-built mechanism. The certificate is the family's own ``privacy(silo_sizes,
hparams).epsilon(delta, accountant)`` for the same configuration; ``exact()`` is the exact epsilon of the canary pair
for what the observer sees (``dpjax.auditing.exact``), a second, tighter threshold. Mutants are the same compiled run
with a privacy bug in its hyperparameters (half the noise, no clip, no noise).

This module is the catalogue (``AUDITS``, ``FAMILY_AUDITS``, ``build_audit``); the builders live in one module per paper
(the first column below) on the shared pieces of ``dpjax.auditing.canaries``.

Canaries: ``CanaryProbe`` problems (the loss ``<w, x>``: every record's gradient is the record) with one record far
outside the clip region along ``e_1`` (``-`` on D, ``+`` on D' for replace-one; absent on D for add/remove) and every
other record zero; the canary's silo is the smallest one, padded to the largest silo's size. DIFF2 uses
``DifferenceProbe`` (its gradient differences saturate the difference clip). The observed statistic is the family's
round increments ``w_r - w_{r-1}`` mapped back to the released sum (a public factor per round); the score is its
log-likelihood ratio.

==================================  ==========================  ==================================================
audit (module)                      registered family           certificate (accountant)
==================================  ==========================  ==================================================
isrl-mbsgd (``isrl``)               isrl-mbsgd (K of n, dense)  RDP, without-replacement (Wang-Balle-Kasiviswanathan)
isrl-mbsgd-poisson                  isrl-mbsgd (gather, draw)   PLD, Poisson, replace-one (autodiff path)
isrl-local-sgd                      isrl-local-sgd              RDP, R K single-record releases
isrl-accelerated                    isrl-accelerated            GDP, one pass (each record once)
isrl-unbalanced                     isrl-unbalanced             RDP per silo (Algorithm 7), the largest
isrl-shuffled                       isrl-shuffled               shuffle chain / ISRL-DP (Theorem G.1 structure)
sdp-accelerated (``shuffle``)       sdp-accelerated             P_vec Thm 3.2 (lemma constants), one pass
shuffle-sgd                         shuffle-sgd                 P_vec Thm 3.2 (lemma constants)
shuffle-acsa                        shuffle-acsa                pan-privacy, Lemma C.4 (analytic Gaussian)
dp-sgd (``dpsgd``)                  dp-sgd                      PLD, Poisson, add/remove
dp-sgd-band-mf(-separation)         dp-sgd (noise="band-mf")    PLD, multi-epoch BandMF (one Gaussian)
(``band_mf``)
dp-fedavg-band-mf                   dp-fedavg-band-mf           PLD, amplified BandMF (cyclic Poisson over
(``band_mf_fedavg``)                                            client groups, add/remove of a user)
dpsgd-general-*                     dpsgd-general               van Dijk et al. exact strong adversary / PLD
dp-scaffold (``isrl``)              dp-scaffold                 RDP, R K subsampled releases (one round here)
dp-fedadam (``fedavg_ftrl``)        dp-fedadam                  RDP, the joint Gaussian (one round here)
diff2-gd, dp-gd, diff2-bvr          diff2-gd, dp-gd, diff2-bvr  RDP (dp-accounting) of the DIFF2 schedules
(``diff2``)
user-level (``user_level``)         (user_level, not a family)  Theorem 3.3's proof (test-mode kappa, sigma)
balls-in-bins (``sampling_bins``)   (sampler, not a family)     GDP, one Gaussian per epoch (no amplification)
user-level-dpsgd-uls, -els          user-level-dpsgd            PLD: Poisson over users (ULS); the mixture of
(``user_dpsgd``)                                                Gaussians of a user's k records (ELS)
dp-fedavg(-count), dp-ftrl          dp-fedavg, dp-ftrl          RDP: Theorem 1 of Andrew et al.; the tree's depth
(``fedavg_ftrl``)
==================================  ==========================  ==================================================
"""

from __future__ import annotations

from collections.abc import Callable

from dpjax.auditing.audit import CanaryAudit
from dpjax.auditing.band_mf import band_mf_audit
from dpjax.auditing.band_mf_fedavg import band_mf_fedavg_audit
from dpjax.auditing.canaries import DELTA
from dpjax.auditing.diff2 import diff2_audit, dp_gd_audit
from dpjax.auditing.dpsgd import dp_sgd_audit, dpsgd_general_audit
from dpjax.auditing.fedavg_ftrl import dp_fedadam_audit, dp_fedavg_audit, dp_fedavg_count_audit, dp_ftrl_audit
from dpjax.auditing.isrl import (dp_scaffold_audit, isrl_accelerated_audit, isrl_local_sgd_audit, isrl_mbsgd_audit,
                                 isrl_shuffled_audit, isrl_unbalanced_audit)
from dpjax.auditing.sampling_bins import balls_in_bins_audit
from dpjax.auditing.shuffle import sdp_accelerated_audit, shuffle_acsa_audit, shuffle_sgd_audit
from dpjax.auditing.user_dpsgd import user_dpsgd_audit, user_dpsgd_els_audit
from dpjax.auditing.user_level import user_level_audit

__all__ = ["AUDITS", "DELTA", "FAMILY_AUDITS", "build_audit", "audit_names"]

# DP-SGD-General configurations (certified eps 1-5 at DELTA): shuffling, one epoch of 2 rounds of
# 5 of 10 records; subsampling, 2 rounds of 5 of 6 records; Poisson, 4 rounds at q = 1/4; groups of
# g = 2 records (a user), subsampling as above at sigma = 2 (individual clipping certifies more).
_DPSGD = {"shuffle": dict(noise_multiplier=1.2, n=10, epochs=1),
          "subsample": dict(noise_multiplier=1.5, n=6, epochs=2),
          "poisson": dict(noise_multiplier=1.5, n=20, epochs=1),
          "subsample-g2": dict(noise_multiplier=2.0, n=6, epochs=2, group_size=2)}

AUDITS: dict[str, Callable[[], CanaryAudit]] = {
    "isrl-mbsgd": isrl_mbsgd_audit,
    "isrl-mbsgd-poisson": lambda: isrl_mbsgd_audit(noise_multiplier=1.2, batch_size=4, sampling_scheme="poisson",
                                                   gradient_path="gather", accountant="pld"),
    "isrl-local-sgd": isrl_local_sgd_audit, "isrl-accelerated": isrl_accelerated_audit,
    "isrl-unbalanced": isrl_unbalanced_audit, "isrl-shuffled": isrl_shuffled_audit,
    "sdp-accelerated": sdp_accelerated_audit, "shuffle-sgd": shuffle_sgd_audit, "shuffle-acsa": shuffle_acsa_audit,
    "dp-sgd": dp_sgd_audit, "dp-sgd-band-mf": band_mf_audit,
    "dp-sgd-band-mf-separation": lambda: band_mf_audit("separation"),
    **{f"dpsgd-general-{s}-{c}": lambda s=s, c=c: dpsgd_general_audit(s, c, **_DPSGD[s])
       for s in ("shuffle", "subsample") for c in ("individual", "batch")},
    "dpsgd-general-poisson": lambda: dpsgd_general_audit("poisson", "individual", **_DPSGD["poisson"]),
    **{f"dpsgd-general-subsample-{c}-g2": lambda c=c: dpsgd_general_audit("subsample", c, **_DPSGD["subsample-g2"])
       for c in ("individual", "batch")},
    "diff2-gd": diff2_audit, "dp-gd": dp_gd_audit, "diff2-bvr": lambda: diff2_audit("diff2-bvr"),
    "user-level": user_level_audit,
    "dp-fedavg": lambda: dp_fedavg_audit(delta=DELTA), "dp-fedavg-count": lambda: dp_fedavg_count_audit(delta=DELTA),
    "dp-ftrl": lambda: dp_ftrl_audit(delta=DELTA), "dp-fedadam": lambda: dp_fedadam_audit(delta=DELTA),
    "dp-scaffold": dp_scaffold_audit, "dp-fedavg-band-mf": band_mf_fedavg_audit,
    "balls-in-bins": balls_in_bins_audit,

    "user-level-dpsgd-uls": user_dpsgd_audit, "user-level-dpsgd-els": user_dpsgd_els_audit,
}

#: Every registered private family and the audits that run its step (``user-level`` runs the
#: user-level mechanisms of ``dpjax.user_level``, which are not registry families).
FAMILY_AUDITS: dict[str, tuple[str, ...]] = {
    "isrl-mbsgd": ("isrl-mbsgd", "isrl-mbsgd-poisson"), "isrl-local-sgd": ("isrl-local-sgd",),
    "isrl-accelerated": ("isrl-accelerated",), "isrl-unbalanced": ("isrl-unbalanced",),
    "isrl-shuffled": ("isrl-shuffled",), "sdp-accelerated": ("sdp-accelerated",), "shuffle-sgd": ("shuffle-sgd",),
    "shuffle-acsa": ("shuffle-acsa",), "dp-sgd": ("dp-sgd", "dp-sgd-band-mf", "dp-sgd-band-mf-separation"),
    "dpsgd-general": tuple(n for n in AUDITS if n.startswith("dpsgd-general")), "diff2-gd": ("diff2-gd",),
    "dp-gd": ("dp-gd",), "diff2-bvr": ("diff2-bvr",), "dp-fedavg": ("dp-fedavg", "dp-fedavg-count"),
    "dp-ftrl": ("dp-ftrl",), "dp-fedadam": ("dp-fedadam",), "dp-scaffold": ("dp-scaffold",),
    "dp-fedavg-band-mf": ("dp-fedavg-band-mf",),
    "user-level-dpsgd": ("user-level-dpsgd-uls", "user-level-dpsgd-els"),
}


def audit_names() -> tuple[str, ...]:
    return tuple(AUDITS)


def build_audit(name: str) -> CanaryAudit:
    """The catalogue's audit ``name`` (see ``audit_names()``)."""
    if name not in AUDITS:
        raise ValueError(f"mechanism={name!r} must be one of {audit_names()}")
    return AUDITS[name]()
