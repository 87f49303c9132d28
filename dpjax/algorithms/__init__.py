"""Algorithms: one family per module, each a frozen config with pure init/step."""

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams, NoisyMbSgd

__all__ = ["MbSgdHParams", "NoisyMbSgd", "load_families"]


def load_families() -> None:
    """Imports every module of ``dpjax.algorithms``: each registers its families in
    ``dpjax.engine.registry.ALGORITHMS`` (``register_family`` at the end of the module)."""
    import importlib
    import pkgutil

    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
