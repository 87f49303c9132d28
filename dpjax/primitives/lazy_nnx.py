"""``flax.nnx``, imported on first use.

Importing ``flax.nnx`` costs ~0.2-0.6 s of a process's start-up (its linen bridge, treescope, IPython), which a
linen-only run (the benchmarks' MLP under DP-FedAvg, every flax.linen problem) never needs (issue #38). Ghost
clipping's NNX support reads ``nnx.<name>`` through :data:`nnx` only when it meets an NNX model.
"""

from __future__ import annotations


class _LazyNnx:
    """Forwards attribute reads to ``flax.nnx``, importing it the first time."""

    def __getattr__(self, name):
        from flax import nnx as module

        return getattr(module, name)


nnx = _LazyNnx()
