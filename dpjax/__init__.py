"""dpjax: a JAX-compiled experiment engine for differentially private federated optimization."""

__version__ = "0.1.0"
