"""ISRL-DP figures (Lowy & Razaviyayn, ICLR 2023, Section 6 / Appendix I).

``dpjax reproduce isrl-mnist | isrl-insurance | isrl-obesity [--quick]``.

Every figure compares ISRL-DP Noisy MB-SGD, ISRL-DP Local SGD and their non-private twins (horizontal lines) with the
paper's protocol (Appendix I):

* matched work: MB-SGD draws K records per available silo per round, Local SGD takes K single-record steps; the same R
  for all methods; w0 = 0, no projection;
* aggregation: the paper's *averaged* silo messages; the authors' step-size grids were tuned for summed silo messages
  (MNIST, insurance) or a summed minibatch (obesity), so the MB-SGD grids are multiplied by M (resp. K) (the authors'
  scripts); Local SGD averages the local iterates in the authors' scripts too, so its grids are used as printed;
* output: the average of the last 8 iterates (authors' MNIST/insurance scripts); obesity: the last iterate (authors'
  obesity script);
* sampling: K records *without* replacement per silo and round (the printed algorithm samples with replacement, which
  no tight accountant certifies);
* step size (and, on insurance, clip threshold) selected by the mean final training excess risk F^(w) - F^* over
  repetitions, F^* and w* from Newton's method on the pooled training data of each trial (``isrl_optimum``; for MNIST
  on the unclipped logistic loss); diverged runs (non-finite, or training loss above the authors' guard) count as
  infinite loss; trials use fresh train/test splits; error bars are the 5th/95th percentiles over trials drawn as a
  symmetric bar (authors' code);
* heterogeneity label: upsilon*^2 = (1/N) sum_i ||grad F^_i(w*)||^2 (mean over trials) in the figure title, per trial
  in ``meta.json`` and ``optimum.csv``;
* delta = 1/n^2 with n the (smallest) silo's training size.

Each figure is produced twice (two rows of panels, column ``calibration``):

* ``paper``: the Appendix I moments-accountant calibration (accountant ``paper-experiment``), K = ceil(n
  sqrt(eps_max)/(2 sqrt R)) from the sweep's largest epsilon; Local SGD sigma^2 = 8 L^2 R K ln(1/delta)/(n^2 eps^2);
* ``tight``: sigma calibrated by the RDP accountant for the actual schedule (fixed-size sampling without replacement,
  replace-one, same K) at the same nominal epsilon.

The epsilon that RDP certifies for the paper's sigma is reported next to the nominal one (metric
``realized_epsilon_rdp``; Appendix I's form is an add/remove calibration).

The package keeps each part in its own module: ``config`` (settings, the three experiments, notes), ``driver`` (one
experiment's panels), ``claims``, ``outputs`` (tables, figure, report) and ``figures`` (the registered figures); the
authors' scripts' constructions are ``constructions`` (sampling, batch size, the obesity server noise, the insurance
MB-SGD with its minibatch-mean clipper) and ``authors_data`` (the MNIST silos). The paper-specific protocol pieces are
``dpjax.reproduce.isrl_protocol`` and ``isrl_optimum``. Importing the package registers the three figures.
"""

from dpjax.reproduce.isrl import claims, config, driver, figures, outputs  # noqa: F401

__all__: list[str] = []
