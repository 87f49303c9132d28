"""Branches of ghost clipping's plan and entry points reached by tests that can fail (issue 42, item 1).

Which layer call is ghost, materialised or refused decides whose per-example norm is computed by which identity; a
construction the plan mis-files (a layer inside a transformation, parameters transformed before the layer sees
them, a module owning parameters and submodules with parameters) would drop a norm term. Each test here builds the
construction and checks the plan's verdict read off the model by hand, and where the plan runs, the norms or clipped
sums against ``vmap(grad)`` in float64 (the reference of ``tests/primitives/test_ghost_property.py``).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpjax.primitives import clipping, noise
from dpjax.primitives import ghost_clipping as gc
from dpjax.primitives import ghost_plan as gpl

pytestmark = pytest.mark.privacy

RTOL = 1e-10  # float64 on both sides (the property test's derivation)


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


# compile-time bound (as tests/primitives/test_ghost_property.py): XLA's cheap CPU settings, arithmetic unchanged
_CHEAP = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def _vmap_norms(loss_fn, params, x, y):
    def norms(p, a, b):
        g = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))(p, a, b)
        return jnp.sqrt(sum(jnp.sum(leaf.reshape(leaf.shape[0], -1) ** 2, axis=1)
                            for leaf in jax.tree_util.tree_leaves(g)))

    return np.asarray(jax.jit(norms, compiler_options=_CHEAP)(params, x, y))


def _ghost_norms(loss_fn, params, x, y):
    """``per_example_grad_norms`` compiled once, and whether the plan is the ghost one (``fast``)."""
    norms = jax.jit(lambda p, a, b: gc.per_example_grad_norms(loss_fn, p, a, b)[0], compiler_options=_CHEAP)
    return norms(params, x, y), gpl.make_plan(loss_fn, params, x, y).fast


def _f64(tree):
    return jax.tree_util.tree_map(lambda a: a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _data(shape, seed=0, n=3):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.normal(size=(n, *shape))), jnp.asarray(rng.normal(size=(n,)))


class _Tied(nn.Module):
    """Embed + DenseGeneral (two feature axes) + BatchNorm in eval mode + tied read-out (``attend``)."""

    @nn.compact
    def __call__(self, ids):
        emb = nn.Embed(7, 4, name="emb")
        h = emb(ids)                                               # [T, 4]
        h = nn.DenseGeneral((2, 2), axis=-1, name="dg")(h)         # [T, 2, 2]
        h = h.reshape(h.shape[0], 4)
        h = nn.BatchNorm(use_running_average=True, name="bn")(h)   # eval mode: the plain call, materialised
        return emb.attend(h)                                       # [T, 7]


def test_plan_of_a_tied_model_names_every_call_and_groups_the_shared_table():
    model = _Tied()
    ids = jnp.asarray([[1, 2, 3], [4, 4, 0], [6, 5, 1]])
    variables = _f64(model.init(jax.random.key(0), ids[0]))
    params, stats = variables["params"], variables["batch_stats"]
    y = jnp.zeros((3,))

    def loss(p, x, _):
        return jnp.sum(jnp.tanh(model.apply({"params": p, "batch_stats": stats}, x)) ** 2)

    plan = gpl.make_plan(loss, params, ids, y)
    assert plan.fast
    # by hand: four calls in execution order; the table is used by the embed and the attend calls
    assert plan.describe().splitlines() == ["Embed 'emb'.__call__: ghost embed", "DenseGeneral 'dg'.__call__: ghost dense",
                                            "BatchNorm 'bn'.__call__: materialised", "Embed 'emb'.attend: ghost attend"]
    assert (0, 3) in plan.groups and (1,) in plan.groups and (2,) in plan.groups
    assert plan.calls[1].spec == gpl.DenseSpec((1,), 2)  # T x 4 input: axis 1 contracted, two feature axes
    norms, fast = _ghost_norms(loss, params, ids, y)
    assert fast
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss, params, ids, y), rtol=RTOL)


def test_a_refused_plan_describes_its_reason_and_the_entry_points_fall_back():
    bn = nn.BatchNorm()
    x, y = _data((3,))
    variables = _f64(bn.init(jax.random.key(0), x[0], use_running_average=True))
    params, stats = variables["params"], variables["batch_stats"]

    def training(p, xi, _):  # the batch statistics of a training-mode BatchNorm couple the examples
        out, _ = bn.apply({"params": p, "batch_stats": stats}, xi, use_running_average=False, mutable=["batch_stats"])
        return jnp.sum(out)

    plan = gpl.make_plan(training, params, x, y)
    assert not plan.fast and "BatchNorm in training mode" in plan.reason
    assert plan.describe() == f"vmap(grad) fallback: {plan.reason}"
    with pytest.raises(gc.GhostFallbackError, match="BatchNorm in training mode"):
        gc.per_example_grad_norms(training, params, x, y, require_fast=True)

    def evaluation(p, xi, _):  # a kwarg makes the call not the plain one: materialised (and so exact)
        return jnp.sum(jnp.sin(bn.apply({"params": p, "batch_stats": stats}, xi, use_running_average=True)))

    plan = gpl.make_plan(evaluation, params, x, y)
    assert plan.fast and [c.kind for c in plan.calls] == [gpl.MATERIALISED]
    norms, fast = _ghost_norms(evaluation, params, x, y)
    assert fast
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(evaluation, params, x, y), rtol=RTOL)


def test_force_fallback_and_a_not_fast_plan_give_the_vmap_grad_norms():
    dense = nn.Dense(2)
    x, y = _data((3,))
    params = _f64(dense.init(jax.random.key(1), x[0]))

    def outside(p, xi, yi):  # the kernel is also used outside its layer: not fast
        return jnp.sum(dense.apply(p, xi) ** 2) + jnp.sum(p["params"]["kernel"]) * yi

    assert not gpl.make_plan(outside, params, x, y).fast
    norms, fast = _ghost_norms(outside, params, x, y)
    assert not fast
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(outside, params, x, y), rtol=RTOL)

    def plain(p, xi, yi):
        return jnp.sum((dense.apply(p, xi) - yi) ** 2)

    g = jax.vmap(jax.grad(plain), in_axes=(None, 0, 0))(params, x, y)
    res = jax.jit(lambda p, a, b: gc.ghost_clipped_sum(plain, p, a, b, 0.5, force_fallback=True))(params, x, y)
    assert not res.fast_path
    # by hand: sum_i g_i min(1, C/||g_i||)
    n = _vmap_norms(plain, params, x, y)
    want = jax.tree_util.tree_map(lambda leaf: np.tensordot(np.minimum(1.0, 0.5 / n), np.asarray(leaf), 1), g)
    for u, w in zip(jax.tree_util.tree_leaves(res.total), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(u), w, rtol=RTOL)


@pytest.mark.parametrize("force_fallback", [False, True])
def test_a_static_plain_restart_round_clips_the_plain_gradients_on_both_paths(force_fallback):
    dense = nn.Dense(2)
    x, y = _data((3,), seed=2)
    params = _f64(dense.init(jax.random.key(2), x[0]))
    prev = jax.tree_util.tree_map(lambda a: a + 0.3, params)

    def loss(p, xi, yi):
        return jnp.sum((dense.apply(p, xi) - yi) ** 2)

    res = jax.jit(lambda p, q, a, b: gc.clipped_difference_sum(loss, p, q, a, b, 0.7, use_difference=False,
                                                               force_fallback=force_fallback))(params, prev, x, y)
    assert bool(res.fast_path) is (not force_fallback)
    g = jax.vmap(jax.grad(loss), in_axes=(None, 0, 0))(params, x, y)  # the plain gradients at params, not w - w'
    n = _vmap_norms(loss, params, x, y)
    want = jax.tree_util.tree_map(lambda leaf: np.tensordot(np.minimum(1.0, 0.7 / n), np.asarray(leaf), 1), g)
    for u, w in zip(jax.tree_util.tree_leaves(res.total), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(u), w, rtol=RTOL)
    assert float(res.sensitivity) == 1.4  # replace-one: 2C


class _OwnAndChild(nn.Module):
    @nn.compact
    def __call__(self, x):
        s = self.param("s", nn.initializers.ones, (3,))
        return nn.Dense(2)(x * s)


def _plan_reason(loss, params, x, y):
    plan = gpl.make_plan(loss, params, x, y)
    assert not plan.fast
    return plan.reason


def test_linen_constructions_the_plan_cannot_observe_are_refused_by_name():
    x, y = _data((3,))
    dense = nn.Dense(2)
    params = _f64(dense.init(jax.random.key(0), x[0]))
    # inside jax.checkpoint the layer's inputs are the transformation's tracers
    reason = _plan_reason(lambda p, xi, _: jnp.sum(jax.checkpoint(lambda q: dense.apply(q, xi))(p)), params, x, y)
    assert "Dense (the top-level module) is called inside a JAX transformation" in reason
    # parameters transformed before the layer sees them are not leaves of params
    reason = _plan_reason(lambda p, xi, _: jnp.sum(dense.apply(jax.tree_util.tree_map(lambda a: 2 * a, p), xi)),
                          params, x, y)
    assert "parameters ['bias', 'kernel'] are not leaves of params" in reason
    own = _OwnAndChild()
    p2 = _f64(own.init(jax.random.key(0), x[0]))
    reason = _plan_reason(lambda p, xi, _: jnp.sum(own.apply(p, xi)), p2, x, y)
    assert "owns parameters and also has submodules with parameters" in reason


def test_a_parameter_returned_unchanged_is_not_fast():
    x, y = _data((3,))
    params = {"s": jnp.asarray(1.5)}
    plan = gpl.make_plan(lambda p, xi, yi: p["s"], params, x, y)
    assert (plan.fast, plan.reason) == (False, "a parameter is returned by the loss unchanged")


def test_a_layer_call_that_changes_between_traces_is_a_runtime_error():
    d1, d2 = nn.Dense(2), nn.Dense(2, use_bias=False)
    x, y = _data((3,))
    p1 = _f64(d1.init(jax.random.key(0), x[0]))
    p2 = {"params": {"kernel": p1["params"]["kernel"]}}
    calls = []

    def loss(p, xi, _):  # the second trace calls a layer with other parameters: the captured plan no longer holds
        calls.append(1)
        if len(calls) == 1:
            return jnp.sum(d1.apply(p, xi) ** 2)
        return jnp.sum(d2.apply(p2, xi) ** 2) + 0 * jnp.sum(p["params"]["bias"])

    with pytest.raises(RuntimeError, match=r"layer call 0 changed between traces \(Dense \(the top-level module\).__call__ expected"):
        gc.ghost_clipped_sum(loss, p1, x, y, 1.0)


def test_conv_with_strides_none_is_the_unit_stride():
    conv = nn.Conv(2, (3,), strides=None, padding="VALID")
    x, y = _data((6, 2))
    params = _f64(conv.init(jax.random.key(0), x[0]))

    def loss(p, xi, yi):
        return jnp.sum(jnp.tanh(conv.apply(p, xi)) * yi)

    plan = gpl.make_plan(loss, params, x, y)
    assert plan.calls[0].spec == gpl.ConvSpec((3,), (1,), "VALID", (1,), (1,))
    norms, _ = _ghost_norms(loss, params, x, y)
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss, params, x, y), rtol=RTOL)


def test_dense_general_with_batch_dims_is_materialised_and_exact():
    dg = nn.DenseGeneral(2, axis=-1, batch_dims=(0,))
    x, y = _data((2, 3))
    params = _f64(dg.init(jax.random.key(0), x[0]))

    def loss(p, xi, yi):
        return jnp.sum(jnp.tanh(dg.apply(p, xi)) * yi)

    plan = gpl.make_plan(loss, params, x, y)
    assert [c.kind for c in plan.calls] == [gpl.MATERIALISED]
    norms, fast = _ghost_norms(loss, params, x, y)
    assert fast
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss, params, x, y), rtol=RTOL)


class _NNXOwnAndChild(nnx.Module):
    def __init__(self, rngs):
        self.s = nnx.Param(jnp.ones((3,)))
        self.lin = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return self.lin(x * self.s)


class _NNXTwoArgs(nnx.Module):
    def __init__(self):
        self.w = nnx.Param(jnp.asarray([0.5, -1.0, 2.0]))

    def __call__(self, x, scale):
        return jnp.sum(jnp.sin(x * self.w.get_value()) * scale)


class _NNXEmbed(nnx.Module):
    def __init__(self, rngs):
        self.emb = nnx.Embed(6, 3, rngs=rngs)

    def __call__(self, ids):
        return jnp.sum(jnp.tanh(self.emb(ids)))


class _NNXGeneral(nnx.Module):
    def __init__(self, rngs):
        self.lg = nnx.LinearGeneral(3, (2, 2), rngs=rngs)

    def __call__(self, x):
        return jnp.sum(jnp.tanh(self.lg(x)))


class _NNXDropout(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)

    def __call__(self, x):
        return jnp.sum(self.drop(self.lin(x)))


class _NNXRemat(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return jnp.sum(nnx.remat(lambda m, v: m(v))(self.lin, x))


class _Counter(nnx.Variable):
    pass


class _NNXMutates(nnx.Module):
    def __init__(self, rngs):
        self.lin = nnx.Linear(3, 1, rngs=rngs)
        self.count = _Counter(jnp.zeros(()))

    def __call__(self, x):
        self.count.set_value(self.count.get_value() + 1)
        return self.lin(x)


def test_nnx_constructions_materialised_refused_and_exact():
    x, y = _data((3,))
    rngs = nnx.Rngs(0)
    loss_fn, params = gc.nnx_loss(_NNXOwnAndChild(rngs), lambda m, xi, yi: jnp.sum(m(xi) ** 2))
    plan = gpl.make_plan(loss_fn, params, x, y)
    assert not plan.fast and "owns parameters and also has submodules with parameters" in plan.reason
    # a call that is not the plain one-array call: materialised, and its norms are vmap(grad)'s
    loss_fn, params = gc.nnx_loss(_NNXTwoArgs(), lambda m, xi, yi: m(xi, yi))
    plan = gpl.make_plan(loss_fn, params, x, y)
    assert plan.fast and [c.kind for c in plan.calls] == [gpl.MATERIALISED]
    norms, _ = _ghost_norms(loss_fn, params, x, y)
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss_fn, params, x, y), rtol=RTOL)
    ids = jnp.asarray([[0, 1, 1], [5, 2, 0], [3, 3, 3]])
    loss_fn, params = gc.nnx_loss(_NNXEmbed(rngs), lambda m, xi, yi: m(xi) * yi)
    plan = gpl.make_plan(loss_fn, params, ids, y)
    assert [c.kind for c in plan.calls] == ["embed"]
    norms, _ = _ghost_norms(loss_fn, params, ids, y)
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss_fn, params, ids, y), rtol=RTOL)
    loss_fn, params = gc.nnx_loss(_NNXGeneral(rngs), lambda m, xi, yi: m(xi) * yi)
    plan = gpl.make_plan(loss_fn, params, x, y)
    assert [c.kind for c in plan.calls] == ["dense"] and plan.calls[0].spec == gpl.DenseSpec((0,), 2)
    norms, _ = _ghost_norms(loss_fn, params, x, y)
    np.testing.assert_allclose(np.asarray(norms), _vmap_norms(loss_fn, params, x, y), rtol=1e-6)
    loss_fn, params = gc.nnx_loss(_NNXRemat(rngs), lambda m, xi, yi: m(xi))
    plan = gpl.make_plan(loss_fn, params, x, y)
    assert not plan.fast and "is called inside a JAX transformation" in plan.reason
    # a training-mode Dropout advances its stateful Rngs inside the per-example trace: refused by name
    loss_fn, params = gc.nnx_loss(_NNXDropout(rngs), lambda m, xi, yi: m(xi))
    with pytest.raises(ValueError, match=r"Dropout 'drop' is in training mode \(deterministic=False\)"):
        gc.ghost_clipped_sum(loss_fn, params, x, y, 1.0)
    # a loss that updates a Variable other than BatchNorm/Dropout state: the general refusal
    loss_fn, params = gc.nnx_loss(_NNXMutates(rngs), lambda m, xi, yi: jnp.sum(m(xi)))
    with pytest.raises(ValueError, match="the NNX model mutates its state inside the per-example loss"):
        gc.ghost_clipped_sum(loss_fn, params, x, y, 1.0)


def test_nnx_loss_refusals_and_the_hooked_class_outside_an_observer():
    with pytest.raises(TypeError, match="model=int must be a flax.nnx.Module"):
        gc.nnx_loss(3, lambda m, x, y: 0.0)
    with pytest.raises(TypeError, match="loss=3 must be callable"):
        gc.nnx_loss(_NNXTwoArgs(), 3)
    graphdef, _ = nnx.split(_NNXTwoArgs())
    with pytest.raises(TypeError, match="loss='mse' must be callable"):
        gpl.NNXLoss(graphdef, "mse")
    hooked = gpl._hooked_class(nnx.Linear)
    assert gpl._hooked_class(hooked) is hooked and issubclass(hooked, nnx.Linear)
    lin = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    x = jnp.asarray([1.0, -2.0, 0.5])
    want = np.asarray(x @ lin.kernel.get_value() + lin.bias.get_value())  # y = x W + b by hand
    lin.__class__ = hooked  # no observer active: the hooked method is the plain one
    np.testing.assert_allclose(np.asarray(lin(x)), want, rtol=1e-12)


def test_clip_norm_and_mask_dtype_refusals():
    with pytest.raises(TypeError, match=r"clip_norm='1' must be a real number >= 0"):
        clipping.sensitivity_of_clipped_sum("1")
    with pytest.raises(TypeError, match=r"clip_norm=array\(\['1'\].* of dtype <U1"):
        clipping.sensitivity_of_clipped_sum(np.array(["1"]))
    x = jnp.zeros((2, 3))
    with pytest.raises(ValueError, match="mask has dtype complex128; give 0/1 flags"):
        clipping.check_mask(np.array([1 + 0j, 0j]))


def test_noise_std_must_be_one_scalar():
    with pytest.raises(ValueError, match=r"std=\[1.0, 2.0\] must be a scalar .* got list"):
        noise.check_noise_args(jax.random.key(0), {"w": jnp.zeros(2)}, [1.0, 2.0])
    with pytest.raises(ValueError, match=r"must be a scalar .* got shape \(2,\)"):
        noise.check_noise_args(jax.random.key(0), {"w": jnp.zeros(2)}, np.ones(2))
