"""The parts families are declared from: one module per role (``dpjax.engine.roles`` gives the signatures).

* ``selection``: batch selection (availability x record samplers);
* ``clients``: client updates (minibatch gradients, local steps, ...);
* ``clipping``: clippers (the source of every sensitivity);
* ``privatizers``: noise (Gaussian on each silo or on the aggregate, ...);
* ``aggregators``: mean / sum / shuffled;
* ``servers``: optax server optimizers and output averagers; ``acsa``: the AC-SA server.
* ``pvec``: P_vec's randomizers + shuffler and analyzer (ISRL-DP's one-pass silos and shuffle-private SCO's
  user stream, one implementation);
* ``users``: the parts of protocols over one stream of users (shuffle-private SCO: user windows,
  per-user gradients, Gaussian sums, phased SGD server).
* ``cross_device``: user-level federated learning, the silo being the user (silo sampling, local-delta
  clients, the mean over a public expected count; DP-FedAvg).
"""

from dpjax.parts.acsa import AcsaServer
from dpjax.parts.aggregators import Aggregate, ShuffledAggregate
from dpjax.parts.clients import ExampleGradients, LocalSteps, MinibatchGradient, SubsetUpdate
from dpjax.parts.clipping import ClipPerUnit, ClipVectors
from dpjax.parts.privatizers import GaussianNoise, LocalStepGaussian, gaussian_std
from dpjax.parts.pvec import PvecAnalyzer, PvecRandomizer
from dpjax.parts.selection import LocalStepRecords, SiloBatches, SubsetBatches
from dpjax.parts.servers import Averager, Gated, ModelAveraging, OptaxServer, UnitStepServer

__all__ = ["AcsaServer", "Aggregate", "PvecAnalyzer", "ShuffledAggregate", "ExampleGradients", "LocalSteps",
           "MinibatchGradient", "SubsetUpdate", "ClipPerUnit", "ClipVectors", "GaussianNoise",
           "LocalStepGaussian", "PvecRandomizer", "gaussian_std", "LocalStepRecords", "SiloBatches", "SubsetBatches",
           "Averager", "Gated", "ModelAveraging", "OptaxServer", "UnitStepServer"]
