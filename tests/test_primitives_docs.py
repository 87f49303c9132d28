"""Every public callable of ``dpjax.primitives`` (and the shuffle protocols) says what shapes it expects:
a user writing their own JAX code reads the docstring, not the implementation."""

import inspect
import re

import pytest

import dpjax.primitives as P
from dpjax.primitives import shuffle_protocols as S

# Words that state a shape or structure: an axis in brackets, "shape", a pytree, a scalar, a batch axis.
SHAPE_WORDS = re.compile(r"\[[^\]]*\]|shape|pytree|scalar|leading|axis", re.IGNORECASE)

PUBLIC = sorted({(n, getattr(P, n)) for n in P.__all__ if callable(getattr(P, n))}
                | {(n, getattr(S, n)) for n in dir(S) if not n.startswith("_") and callable(getattr(S, n))
                   and getattr(getattr(S, n), "__module__", "") == S.__name__}, key=lambda t: t[0])
# Not about arrays: a decorator, an exception, the "which path ran" record.
NO_ARRAYS = {"checked", "GhostFallbackError", "make_sampler"}


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_primitive_documents_its_shapes(name, obj):
    doc = inspect.getdoc(obj)
    assert doc and len(doc) > 40, f"{name}: no docstring"
    if name not in NO_ARRAYS:
        assert SHAPE_WORDS.search(doc), f"{name}: the docstring does not say what shapes it takes or returns"


def test_per_example_clipped_sum_says_what_loss_fn_must_look_like():
    doc = inspect.getdoc(P.per_example_clipped_sum)
    assert "loss_fn(params, x_i, y_i) -> scalar" in doc and "ONE example" in doc
    assert "[B, ...]" in doc and "mask" in doc and "ClippedSum" in doc


@pytest.mark.slow
def test_the_documented_example_runs():
    """The docstring's example, run as written (with its free names bound)."""
    import jax
    import jax.numpy as jnp

    doc = inspect.getdoc(P.per_example_clipped_sum)
    code = "\n".join(ln[4:] for ln in doc.split("Example::", 1)[1].splitlines() if ln.startswith("    "))
    d, key, sigma = 3, jax.random.key(0), 1.0
    x, y = jnp.ones((5, d)), jnp.ones(5)
    scope = {"jnp": jnp, "per_example_clipped_sum": P.per_example_clipped_sum,
             "add_gaussian_noise": P.add_gaussian_noise, "d": d, "x": x, "y": y, "key": key, "sigma": sigma}
    exec(code, scope)
    assert scope["res"].total.shape == (d,) and scope["noisy"].shape == (d,)
