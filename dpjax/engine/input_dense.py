"""Local SGD without per-client copies of the input layer: the low-rank form of a Dense first layer's local iterates.

A client running S plain SGD steps from the server model changes its first Dense kernel ``W`` (``h = x W``, x the raw
record) only by outer products of its own records: after steps ``0 .. s-1``

    W_s = W_0 - lr sum_{s' < s} X_{s'}^T G_{s'},     G_{s'} = d loss_{s'} / d h   (the step's [B, width] gradient at h)

so the step-s pre-activations are ``X_s W_s = X_s W_0 - lr sum_{s' < s} (X_s X_{s'}^T) G_{s'}``, and the client's
kernel delta is ``W_0 - W_S = lr X^T G`` over all its S B rows. ``X W_0`` for the whole cohort is ONE matmul with the
shared server kernel (the vmap over clients folds them into its rows), the correction needs each client's [S B, S B]
record Gram matrix, and no client ever holds a copy of W: on XLA:CPU a cohort of 100 MNIST clients (MLP 784-64-10,
6 steps of 10) trains in about half the time of the materialised per-client kernels, whose small batched matmuls and
per-step kernel updates (100 x 50k floats) dominate the round (``experiments/benchmarks/bench_fl_simulation.py``).
Exact in real arithmetic; float32 results differ from the materialised steps by rounding (~1e-6 relative).

The delta need not be formed either: ``||X^T h||_F^2 = <X X^T, h h^T>`` from the Gram the client already has, and the
cohort's clipped sum ``sum_i s_i X_i^T h_i = X_all^T (s * h_all)`` is one ``[d, M R] x [M R, width]`` matmul
(``factored_sq_norms``, ``factored_weighted_sum``; ``dpjax.engine.roles.FactoredDeltas`` carries the factors to the
clipper, which alone decides the scales ``s_i``): on the MNIST MLP round this drops the ``[M, d, width]`` deltas and
the memory passes over them (~0.8x the round, ``experiments/benchmarks/bench_fl_simulation.py``).

``split_input_dense(loss, params, x, y)`` finds the kernel from the loss's jaxpr (a record's first operation a
``dot_general`` of the record with one parameter leaf, used nowhere else) and returns the loss of the rest of the model
as a function of ``h``; None when the model does not start that way (the caller keeps the materialised steps). The
trick is the same identity ghost clipping uses for per-example norms (Goodfellow 2015; Li et al., ICLR 2022), applied
across a client's local steps instead of across examples.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.extend import core as jcore

#: What a record's first operation may be for the split: a dot_general contracting the record's only axis with the
#: kernel's first (``h = x @ W``).
_PLAIN_DOT = (((0,), (0,)), ((), ()))


@dataclasses.dataclass(frozen=True)
class InputDenseSplit:
    """A loss split at its input layer: ``kernel_index`` is the kernel's position in ``jax.tree.leaves(params)``;
    ``rest(leaves, h, y)`` is the per-record loss given the pre-activation ``h = x @ W`` (the kernel leaf unused)."""

    kernel_index: int
    rest: Callable[[list, jax.Array, Any], jax.Array]


def _uses(jaxpr: jcore.Jaxpr, var) -> list:
    return [i for i, eqn in enumerate(jaxpr.eqns) if any(v is var for v in eqn.invars)]


def split_input_dense(loss: Callable, params, x, y) -> InputDenseSplit | None:
    """The split of ``loss(params, x, y)`` (one record, ``x`` of rank 1) at a first Dense kernel, or None."""
    if jnp.ndim(x) != 1:
        return None
    leaves, treedef = jax.tree_util.tree_flatten(params)
    closed = jax.make_jaxpr(lambda lv, xi, yi: loss(jax.tree_util.tree_unflatten(treedef, lv), xi, yi))(leaves, x, y)
    jaxpr = closed.jaxpr
    leaf_vars, x_var = jaxpr.invars[:len(leaves)], jaxpr.invars[len(leaves)]
    users = _uses(jaxpr, x_var)
    if len(users) != 1 or any(v is x_var for v in jaxpr.outvars):
        return None
    dot_index = users[0]
    eqn = jaxpr.eqns[dot_index]
    if (eqn.primitive is not jax.lax.dot_general_p or eqn.invars[0] is not x_var
            or tuple(map(tuple, eqn.params["dimension_numbers"][0])) != _PLAIN_DOT[0]
            or tuple(map(tuple, eqn.params["dimension_numbers"][1])) != _PLAIN_DOT[1]):
        return None
    kernel_var = eqn.invars[1]
    matches = [i for i, v in enumerate(leaf_vars) if v is kernel_var]
    if len(matches) != 1 or len(_uses(jaxpr, kernel_var)) != 1 or any(v is kernel_var for v in jaxpr.outvars):
        return None
    if leaves[matches[0]].ndim != 2 or eqn.params.get("preferred_element_type") not in (None, x.dtype):
        return None

    def rest(lv, h, yi):
        env = {}

        def read(v):
            return v.val if isinstance(v, jcore.Literal) else env[v]

        for v, c in zip(jaxpr.constvars, closed.consts):
            env[v] = c
        for v, a in zip(leaf_vars, lv):
            env[v] = a
        env[jaxpr.invars[len(leaves) + 1]] = yi
        for i, e in enumerate(jaxpr.eqns):
            if i == dot_index:
                outs = [h]
            else:
                with e.ctx.manager:
                    outs = e.primitive.bind(*(read(v) for v in e.invars), **e.primitive.get_bind_params(e.params))
                if not e.primitive.multiple_results:
                    outs = [outs]
            for v, o in zip(e.outvars, outs):
                if not isinstance(v, jcore.DropVar):
                    env[v] = o
        (out,) = [read(v) for v in jaxpr.outvars]
        return out

    return InputDenseSplit(matches[0], rest)


def low_rank_local_sgd(split: InputDenseSplit, params, x, y, valid, lr, gram=None):
    """One client's local SGD delta ``params - params_S`` (a pytree like ``params``) in the low-rank form.

    ``x`` [S, B, d] / ``y`` [S, B] are the client's step batches, ``valid`` [S, B] their real rows; each step descends
    the mean loss over its valid rows (the materialised steps' ``masked_mean``), step size ``lr``. ``gram``: the rows'
    Gram matrix ``[S B, S B]`` if the caller has it (e.g. gathered from a per-silo Gram kept across rounds)."""
    steps, batch = valid.shape
    records = x.reshape(steps * batch, -1)
    index = jnp.arange(steps * batch).reshape(steps, batch)
    leaves, h, _ = low_rank_local_factors(split, params, records, index, y, valid, lr, gram)
    leaves[split.kernel_index] = records.T @ h
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)


def low_rank_local_factors(split: InputDenseSplit, params, records, index, y, valid, lr, gram=None):
    """``low_rank_local_sgd`` on rows named by index: step s trains on ``records[index[s]]`` (``records`` [R, d] the
    client's rows, ``index`` [S, B] into them; a row may recur, e.g. once an epoch), labels ``y`` [S, B], real rows
    ``valid``. Returns ``(leaves, h, gram)``: the other leaves' deltas in ``jax.tree.leaves(params)`` order (None at
    ``split.kernel_index``) and the kernel's delta in factored form ``records^T h``, ``h = lr G`` [R, width] (row r:
    the sum of its steps' pre-activation gradients, zero for a row no valid position used) with the rows' Gram
    ``records records^T`` [R, R] (given, or formed here; ``factored_sq_norms`` reads it).

    Indexing the silo's own rows rather than the steps' copies keeps ``X W_0``, the Gram and ``X^T h`` at the silo's
    n rows for any number of epochs (E n in step order), and a Gram kept per silo needs no permutation gather."""
    leaves = jax.tree_util.tree_leaves(params)
    k = split.kernel_index
    kernel = leaves[k]
    pre = (records @ kernel)[index]                                       # X W_0: the server kernel, no copy
    gram = records @ records.T if gram is None else gram
    per_record = jax.vmap(split.rest, in_axes=(None, 0, 0))

    def masked_mean(lv, h, yb, vb):
        return jnp.sum(jnp.where(vb, per_record(lv, h, yb), 0.0)) / jnp.maximum(jnp.sum(vb), 1)

    grad = jax.grad(masked_mean, argnums=(0, 1))

    def step(carry, inputs):
        lv, g_all = carry  # g_all [R, width]: the earlier steps' G, added at their rows
        idx, pre_s, gram_s, yb, vb = inputs
        h = pre_s - lr * (gram_s @ g_all)  # x W_s = x W_0 - lr sum_{s' < s} (x X^T) G_{s'}
        g_leaves, g_h = grad(lv, h, yb, vb)  # g_h is 0 at invalid positions (the where's cotangent)
        lv = [a if i == k else a - lr * g for i, (a, g) in enumerate(zip(lv, g_leaves))]
        return (lv, g_all.at[idx].add(g_h.astype(g_all.dtype))), None

    g0 = jnp.zeros((records.shape[0], kernel.shape[1]), kernel.dtype)
    (final, g_all), _ = jax.lax.scan(step, (leaves, g0), (index, pre, gram[index], y, valid))
    # lr scales the [R, width] G, not the [d, width] product: one pass over the small operand
    deltas = [None if i == k else a - b for i, (a, b) in enumerate(zip(leaves, final))]
    return deltas, lr * g_all, gram


# ----------------------------------------------------- Clipping and summing factored deltas (one silo: one X^T h)
def factored_sq_norms(gram, h):
    """``||X_i^T h_i||_F^2 = <X_i X_i^T, h_i h_i^T>`` for every silo ``i`` (``gram`` [M, R, R], ``h`` [M, R, w]): the
    kernel deltas' squared norms from the Gram, no [d, w] matrix per silo (ghost clipping's identity: Goodfellow 2015;
    Li et al., "Large Language Models Can Be Strong Differentially Private Learners", ICLR 2022). Dropping the Gram
    (``||h||^2``) would understate the norm, and the clip: a privacy bug the tests pin."""
    return jnp.sum(h * jnp.einsum("mrs,msw->mrw", gram, h), axis=(1, 2))


def factored_weighted_sum(records, h, coefficients, live=None, chunk=None):
    """``sum_i c_i X_i^T h_i`` (``records`` [M, R, d] or a function of n giving the first n silos' [n, R, d]; ``h``
    [M, R, w], ``coefficients`` [M]): ONE
    ``[d, M R] x [M R, w]`` matmul over the cohort's rows instead of M per-silo products and their [M, d, w] buffer.
    A silo of coefficient 0 adds exactly nothing, even if its ``h`` overflowed (inf x 0 is kept out by a select).

    ``live`` [M] bool and ``chunk`` k: every silo of nonzero coefficient is live (the caller's promise: its
    coefficients carry the availability factor). The matmul then runs over the first ``j k`` silos only, ``j`` the
    fewest chunks of k holding the last live one (``lax.switch`` over the ``ceil(M / k) + 1`` prefix lengths): a Poisson
    buffer's sampled silos come first, so its empty tail (~40 % of the default buffer) costs nothing. ``live`` is the
    batch's availability, not the coefficients, so under a vmapped grid with common random numbers the switch index
    is shared by the configurations and stays a branch (a per-configuration index would run every branch)."""
    c = coefficients.astype(h.dtype)[:, None, None]
    scaled = jnp.where(c != 0, h * c, jnp.zeros_like(h))
    m, r, w = h.shape
    first = records if callable(records) else (lambda n: records[:n])  # noqa: E731
    if live is None or chunk is None or chunk >= m:
        return first(m).reshape(m * r, -1).T @ scaled.reshape(m * r, w)
    one = jax.eval_shape(lambda: first(1))
    d, dtype = one.shape[-1], jnp.result_type(one.dtype, scaled.dtype)
    last = jnp.max(jnp.where(live, jnp.arange(m), -1))  # -1: nobody sampled
    needed = ((last + chunk) // chunk).astype(jnp.int32)  # chunks covering slots 0 .. last (0 if none)

    def prefix(j):
        n = min(j * chunk, m)
        if n == 0:
            return lambda: jnp.zeros((d, w), dtype)
        return lambda: first(n).reshape(n * r, -1).T @ scaled[:n].reshape(n * r, w)

    return jax.lax.switch(needed, [prefix(j) for j in range(-(-m // chunk) + 1)])
