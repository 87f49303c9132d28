"""Convolutions relabelled into the layout XLA:CPU runs fast, inside loops too (issue 38: the CNN round).

XLA:CPU runs a convolution through Eigen only when its dimension labels are canonical (``b01f_01io->b01f``: batch first
and feature last in the input and output, the kernel's spatial dimensions first), and its ``ConvCanonicalization`` pass,
which rewrites any other convolution into that form with transposes, visits only the program's entry computation. A
convolution inside a ``while`` body -- every local step under ``lax.scan``, every round of the engine's round loop --
keeps its labels and is emitted as a generic loop nest. The forward pass of an NHWC model is canonical already, but
JAX's transpose rules label the kernel gradient ``f01b_i01o->01bf`` (the batch axis contracted as the feature): measured
on this 2-core CPU (jax 0.10.2), the kernel gradient of a 3x3 conv 32 -> 64 over 10 images of 32x32 takes 3.7 s in a
5-step loop and 0.14 s unrolled, and pfl-research's CIFAR-10 CNN round took 194 s against pfl's 0.58 s.

``canonical_convs(fn)`` traces ``fn`` (typically a gradient function, so that the transpose rules have run) and
evaluates its jaxpr with every ``conv_general_dilated`` rewritten as transposes around a canonically labelled
convolution -- the rewrite ``ConvCanonicalization`` would have made -- recursing into every sub-jaxpr (``pjit``,
``scan``, ``while``, ``cond``, custom derivatives). The dimension labels only say which axis is which, so the result is
the same convolution for any strides, padding, dilation and groups; the numbers agree up to the order of float
accumulation inside the convolution. Elsewhere than on the CPU backend it returns ``fn`` unchanged (GPU and TPU
compilers choose layouts themselves)."""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax import lax
from jax.extend import core as jcore


def _canonical_spec(n_spatial: int):
    """lhs/out ``(batch, feature, spatial...)`` and rhs ``(out, in, spatial...)`` positions of b01f / 01io."""
    bf = (0, n_spatial + 1, *range(1, n_spatial + 1))
    return lax.ConvDimensionNumbers(lhs_spec=bf, rhs_spec=(n_spatial + 1, n_spatial, *range(n_spatial)),
                                    out_spec=bf)


def relabeled_conv(lhs, rhs, *, dimension_numbers, **params):
    """``conv_general_dilated_p`` with ``dimension_numbers`` moved into transposes: the convolution itself is
    labelled ``b01f_01io->b01f``."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    n = len(lhs_spec) - 2
    canonical = _canonical_spec(n)
    if tuple(dimension_numbers) == tuple(canonical):
        return lax.conv_general_dilated_p.bind(lhs, rhs, dimension_numbers=dimension_numbers, **params)
    lhs_c = jax.numpy.transpose(lhs, (lhs_spec[0], *lhs_spec[2:], lhs_spec[1]))
    rhs_c = jax.numpy.transpose(rhs, (*rhs_spec[2:], rhs_spec[1], rhs_spec[0]))
    out_c = lax.conv_general_dilated_p.bind(lhs_c, rhs_c, dimension_numbers=canonical, **params)
    # axis k of out_c is axis order[k] of the original output
    order = (out_spec[0], *out_spec[2:], out_spec[1])
    return jax.numpy.transpose(out_c, tuple(int(i) for i in np.argsort(order)))


def _rewrite_closed(closed: jcore.ClosedJaxpr) -> jcore.ClosedJaxpr:
    if not _has_conv(closed.jaxpr):
        return closed
    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in closed.jaxpr.invars]
    return jax.make_jaxpr(functools.partial(_eval, closed.jaxpr, closed.consts))(*avals)


def _rewrite_param(value):
    if isinstance(value, jcore.ClosedJaxpr):
        return _rewrite_closed(value)
    if isinstance(value, tuple) and value and all(isinstance(v, jcore.ClosedJaxpr) for v in value):
        return tuple(_rewrite_closed(v) for v in value)
    return value


def _eval(jaxpr: jcore.Jaxpr, consts, *args):
    env = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, c in zip(jaxpr.constvars, consts):
        env[v] = c
    for v, a in zip(jaxpr.invars, args):
        env[v] = a
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive is lax.conv_general_dilated_p:
            outs = [relabeled_conv(*invals, **eqn.params)]
        else:
            params = eqn.primitive.get_bind_params({k: _rewrite_param(v) for k, v in eqn.params.items()})
            with eqn.ctx.manager:
                outs = eqn.primitive.bind(*invals, **params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, jcore.DropVar):
                env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _has_conv(jaxpr: jcore.Jaxpr) -> bool:
    if any(eqn.primitive is lax.conv_general_dilated_p for eqn in jaxpr.eqns):
        return True
    return any(_has_conv(sub) for sub in jcore.subjaxprs(jaxpr))


def canonical_convs(fn):
    """``fn`` with every convolution it runs (its derivatives' included, when ``fn`` is a gradient) relabelled
    canonically for XLA:CPU (module docstring); ``fn`` itself off the CPU backend or when it runs no convolution."""

    @functools.wraps(fn)
    def wrapped(*args):
        if jax.default_backend() != "cpu":
            return fn(*args)
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        if not _has_conv(closed.jaxpr):
            return fn(*args)
        flat = jax.tree_util.tree_leaves(args)
        outs = _eval(closed.jaxpr, closed.consts, *flat)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), outs)

    return wrapped
