"""The compiled round-step engine: silos (vmap), rounds (scan), runs (vmap), and the one executor."""

from dpjax.engine.checks import NonFiniteError, SamplingOverflowError
from dpjax.engine.executor import Chunk, GridResult, OutputParams, RunResult, Trial, execute, run, run_grid, run_many
from dpjax.engine.program import ChunkProgram, compiled_runner
from dpjax.engine.run_inputs import run_key_data, stack_hparams
from dpjax.engine.silos import PooledSiloData, SiloData
from dpjax.engine import compile_cache

compile_cache.enable_default()  # JAX's persistent compilation cache in dpjax's cache dir (DPJAX_COMPILATION_CACHE=0: off)

__all__ = [
    "NonFiniteError", "RunResult", "SamplingOverflowError",
    "Chunk", "ChunkProgram", "GridResult", "OutputParams", "Trial", "execute", "run_grid",
    "compiled_runner", "run", "run_many", "run_key_data", "stack_hparams", "SiloData",
    "PooledSiloData",
]
