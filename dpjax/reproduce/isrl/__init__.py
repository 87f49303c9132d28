"""ISRL-DP figures (Lowy & Razaviyayn, ICLR 2023, Section 6 / Appendix I).

``dpjax reproduce isrl-mnist | isrl-insurance | isrl-obesity [--quick]``.

Every figure compares ISRL-DP Noisy MB-SGD, ISRL-DP Local SGD and their
non-private twins (horizontal lines) with the paper's protocol (Appendix I):

* matched work: MB-SGD draws K records per available silo per round, Local SGD
  takes K single-record steps; the same R for all methods; w0 = 0, no projection;
* aggregation: the paper's *averaged* silo messages; the authors' step-size
  grids were tuned for summed silo messages (MNIST, insurance) or a summed
  minibatch (obesity), so the MB-SGD grids are multiplied by M (resp. K)
  (the authors' scripts); Local SGD averages the local iterates in the authors' scripts
  too, so its grids are used as printed;
* output: the average of the last 8 iterates (authors' MNIST/insurance
  scripts); obesity: the last iterate (authors' obesity script);
* sampling: K records *without* replacement per silo and round (the
  printed algorithm samples with replacement, which no tight accountant
  certifies);
* step size (and, on insurance, clip threshold) selected by the mean final
  training excess risk F^(w) - F^* over repetitions, F^* and w* from Newton's
  method on the pooled training data of each trial (``isrl_optimum``; for
  MNIST on the unclipped logistic loss); diverged runs (non-finite, or
  training loss above the authors' guard) count as infinite loss; trials use
  fresh train/test splits; error bars are the 5th/95th percentiles over
  trials drawn as a symmetric bar (authors' code);
* heterogeneity label: upsilon*^2 = (1/N) sum_i ||grad F^_i(w*)||^2 (mean over
  trials) in the figure title, per trial in ``meta.json`` and ``optimum.csv``;
* delta = 1/n^2 with n the (smallest) silo's training size.

Each figure is produced twice (two rows of panels, column ``calibration``):

* ``paper``: the Appendix I moments-accountant calibration
  (accountant ``paper-experiment``), K = ceil(n sqrt(eps_max)/(2 sqrt R)) from
  the sweep's largest epsilon; Local SGD sigma^2 = 8 L^2 R K ln(1/delta)/(n^2 eps^2);
* ``tight``: sigma calibrated by the RDP accountant for the actual schedule
  (fixed-size sampling without replacement, replace-one, same K) at the same
  nominal epsilon.

The epsilon that RDP certifies for the paper's sigma is reported next to the
nominal one (metric ``realized_epsilon_rdp``; Appendix I's form is an add/remove calibration).

The package keeps each part in its own module: ``config`` (settings, the three experiments, notes),
``driver`` (one experiment's panels), ``claims``, ``outputs`` (tables, figure, report) and ``figures`` (the
registered figures). The paper-specific protocol pieces are ``dpjax.reproduce.isrl_protocol`` and
``isrl_optimum``. Importing the package registers the three figures.
"""

from dpjax.reproduce.isrl.claims import claims_insurance, claims_mnist, claims_obesity, fmt_value, selected_means
from dpjax.reproduce.isrl.config import (AUTHORS_NOTES, COMMON_NOTES, Experiment, OBESITY_SILO_SIZE, PAPER, Setting,
                                         TITLES, Task, insurance_experiment, insurance_task, mnist_experiment,
                                         mnist_lipschitz, mnist_task, obesity_experiment, obesity_task)
from dpjax.reproduce.isrl.driver import Panel, realized_on_the_silos, run_experiment
from dpjax.reproduce.isrl.figures import isrl_insurance_figure, isrl_mnist_figure, isrl_obesity_figure, report_only
from dpjax.reproduce.isrl.outputs import UPSILON_NOTE, claims_table, plot_figure, title_with_optimum, write_outputs

__all__ = ["AUTHORS_NOTES", "COMMON_NOTES", "Experiment", "OBESITY_SILO_SIZE", "PAPER", "Panel", "Setting",
           "TITLES", "Task", "UPSILON_NOTE", "claims_insurance", "claims_mnist", "claims_obesity", "claims_table",
           "fmt_value", "insurance_experiment", "insurance_task", "isrl_insurance_figure", "isrl_mnist_figure",
           "isrl_obesity_figure", "mnist_experiment", "mnist_lipschitz", "mnist_task", "obesity_experiment",
           "obesity_task", "plot_figure", "realized_on_the_silos", "report_only", "run_experiment",
           "selected_means", "title_with_optimum", "write_outputs"]
