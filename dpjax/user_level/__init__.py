"""User-level private convex optimisation (Ghazi, Kamath, Kumar, Manurangsi, Meka, Zhang; ICML 2023).

Mechanisms (privacy unit: a user's whole block of m items; replace-one-user neighbours, Definition 1.1):

* ``tdlap``: the shifted truncated discrete Laplace sampler TDLap (Definition 3.4).
* ``mechanisms``: Algorithm 1 (DelOutputPert; exact subset enumeration), Algorithm 2 (SCOutputPert), the certified
  polynomial-time version of Appendix C (A2c), and the replace-sensitivity baseline B1.
* ``phased``: Algorithm 3 (Phased-ERM), Algorithm 4 (Phased-SCO, as printed and the equal-split correction A4b),
  Algorithm 5 (Strongly-Convex-ERM), Algorithm 6 (Strongly-Convex-SCO), and the idealised M' (B2,
  ``mode='rate-shape'``, not private).
* ``problems``: losses, user-structured data ``[users, items, dim]`` and generators (exchangeable, heterogeneous, the
  Appendix D lower-bound instance L1, the convex instance whose curvature is Phased-ERM's lambda (Theorem 4.1's
  worst-case regime), Lemma 3.8's zero-sum families).
* ``audit``: exact output laws and hockey-stick divergences of Algorithm 1, exact Lemma 3.8 tails.

Accounting (pure Python) is in ``dpjax.accounting.user_level``: ``privacy(mechanism, epsilon, delta, n=, m=, mode=)``
returns the ``PrivacySpec`` of a run.

Why this package has its own problems and solver instead of ``dpjax.engine.problem.Problem`` and the engine's
executor: the mechanisms are output perturbation of an exact minimiser, not rounds of noisy gradient steps. Their
privacy proofs (Observation 3.5, the Appendix C certificate) need a *deterministic* argmin oracle of a weighted sum of
users' mean item losses over an intersection of balls, with a data-independent error bound tau, run in float64 so the
certificate's comparisons are exact -- none of which the engine's float32 compiled rounds over per-record losses
(``Problem.loss(params, x, y)``) provide. The package sits at the algorithms' layer and imports only
``dpjax.accounting`` and ``dpjax._validate``.
"""

from dpjax.user_level.mechanisms import (BOTTOM, NOT_RELEASABLE, OK, Domain, Release, del_output_pert,
                                         output_perturbation, replace_output_pert, sc_output_pert,
                                         sc_output_pert_certified, stable_table)
from dpjax.user_level.phased import (phased_erm, phased_sco, strongly_convex_erm, strongly_convex_sco)
from dpjax.user_level.problems import Loss, convex_rate_instance, exchangeable, lower_bound_instance
from dpjax.user_level.tdlap import tdlap_sample

__all__ = ["BOTTOM", "NOT_RELEASABLE", "OK", "Domain", "Release", "del_output_pert", "output_perturbation",
           "replace_output_pert", "sc_output_pert", "sc_output_pert_certified", "stable_table", "phased_erm",
           "phased_sco", "strongly_convex_erm", "strongly_convex_sco", "Loss", "convex_rate_instance", "exchangeable",
           "lower_bound_instance", "tdlap_sample"]
