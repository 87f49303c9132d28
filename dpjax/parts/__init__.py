"""The parts families are declared from: one module per role, every part of the one signature of
``dpjax.engine.roles`` (``init(params, ctx)``, ``update(value, state, ctx)``).

* ``selection``: batch selection (availability x record samplers);
* ``clients``: client updates (minibatch gradients, local steps, ...);
* ``clipping``: clippers (the source of every sensitivity);
* ``privatizers``: noise (Gaussian on each silo or on the aggregate, ...);
* ``aggregators``: mean / sum / shuffled;
* ``servers``: the optax server optimizer, output averagers and model averaging; ``acsa``: the AC-SA server.
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
from dpjax.engine.roles import Gated
from dpjax.parts.servers import Averager, ModelAveraging, OptaxServer

__all__ = ["AcsaServer", "Aggregate", "PvecAnalyzer", "ShuffledAggregate", "ExampleGradients", "LocalSteps",
           "MinibatchGradient", "SubsetUpdate", "ClipPerUnit", "ClipVectors", "GaussianNoise",
           "LocalStepGaussian", "PvecRandomizer", "gaussian_std", "LocalStepRecords", "SiloBatches", "SubsetBatches",
           "Averager", "Gated", "ModelAveraging", "OptaxServer"]
