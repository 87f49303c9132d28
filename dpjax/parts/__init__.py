"""The parts families are declared from: one module per role (``dpjax.engine.roles`` gives the signatures).

* ``selection``: batch selection (availability x record samplers);
* ``clients``: client updates (minibatch gradients, local steps, ...);
* ``clipping``: clippers (the source of every sensitivity);
* ``privatizers``: noise (Gaussian on each silo or on the aggregate, ...);
* ``aggregators``: mean / sum / shuffled;
* ``servers``: optax server optimizers and output averagers.
"""

from dpjax.parts.aggregators import Aggregate, ShuffledAggregate
from dpjax.parts.clients import MinibatchGradient, SubsetUpdate
from dpjax.parts.clipping import ClipMinibatchMean, ClipPerUnit
from dpjax.parts.privatizers import GaussianNoise, gaussian_std
from dpjax.parts.selection import SiloBatches, SubsetBatches
from dpjax.parts.servers import Averager, Gated, OptaxServer, UnitStepServer

__all__ = ["Aggregate", "ShuffledAggregate", "MinibatchGradient", "SubsetUpdate", "ClipMinibatchMean", "ClipPerUnit",
           "GaussianNoise", "gaussian_std", "SiloBatches", "SubsetBatches", "Averager", "Gated", "OptaxServer",
           "UnitStepServer"]
