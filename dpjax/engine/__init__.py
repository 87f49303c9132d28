"""The compiled round-step engine: silos (vmap), rounds (scan), runs (vmap)."""

from dpjax.engine.averaging import IterateAverager
from dpjax.engine.federated import aggregate, init_sampler_states, privatize_messages, silo_minibatch_gradients
from dpjax.engine.runner import (
    NonFiniteError,
    RunResult,
    SamplingOverflowError,
    compiled_runner,
    run,
    run_many,
    stack_hparams,
)
from dpjax.engine.silos import SiloData

__all__ = [
    "IterateAverager", "aggregate", "init_sampler_states", "privatize_messages",
    "silo_minibatch_gradients", "NonFiniteError", "RunResult", "SamplingOverflowError",
    "compiled_runner", "run", "run_many", "stack_hparams", "SiloData",
]
