"""Learning problems: per-example losses, evaluation metrics, Lipschitz bounds."""

from dpjax.problems.flax_model import FlaxProblem
from dpjax.problems.glm import LinearRegression, LogisticRegression, SoftmaxRegression
from dpjax.problems.layers import GroupNorm, max_pool
from dpjax.problems.transformer import TransformerClassifier, transformer_problem

__all__ = ["FlaxProblem", "GroupNorm", "LinearRegression", "LogisticRegression", "SoftmaxRegression", "TransformerClassifier",
           "max_pool", "transformer_problem"]
