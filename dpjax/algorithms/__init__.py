"""Algorithms: one family per module, each a frozen config with pure init/step."""

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, MbSgdState, NoisyMbSgd

__all__ = ["MbSgdHParams", "MbSgdState", "NoisyMbSgd"]
