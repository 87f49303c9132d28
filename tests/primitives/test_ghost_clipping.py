"""Ghost clipping equals per-example autodiff + clipping (``vmap(grad)``).

Comparisons run in float64: both sides compute the same sums in a different
order, so they agree to a few hundred ulps of the largest term
(~1e-13 relative); ``RTOL = 1e-9`` leaves a wide margin yet fails on any wrong
term, factor or layout (those give O(1) relative errors).
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpjax.algorithms.isrl_mbsgd import MbSgdHParams
from dpjax.engine.roles import Batch, Context
from dpjax.parts import ClipPerUnit, MinibatchGradient
from dpjax.algorithms import diff2
from dpjax.engine.silos import SiloData
from dpjax.primitives import clipping
from dpjax.primitives import ghost_clipping as gc
from dpjax.problems import FlaxProblem

RTOL, ATOL = 1e-9, 1e-12
# Compile-time bound file (as tests/primitives/test_ghost_layers.py): XLA's cheap CPU backend settings cut
# compile time; the arithmetic, and so the tolerances, are unchanged.
jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0,
                                                   "xla_llvm_disable_expensive_passes": True})


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.tanh(nn.Dense(6)(x)))


class CNN(nn.Module):
    """Conv (materialised form: P=64 positions) + GroupNorm, pooling, a strided padded
    conv on a 4x4 map (Gram form: P=4) + LayerNorm, two dense layers."""

    @nn.compact
    def __call__(self, x):
        x = x.reshape(1, 8, 8, 1)
        x = nn.max_pool(nn.relu(nn.GroupNorm(num_groups=2)(nn.Conv(4, (3, 3))(x))), (2, 2), (2, 2))
        x = nn.LayerNorm()(nn.Conv(6, (3, 3), strides=2, padding=1)(x))
        return nn.Dense(3)(nn.tanh(nn.Dense(5)(x.reshape(-1))))


class Seq(nn.Module):
    """Embedding, a dense layer shared by two calls, Gram (T=3) and materialised
    (T=6) dense norms, RMSNorm."""

    @nn.compact
    def __call__(self, tokens):
        e = nn.Embed(7, 8)(tokens)                      # [6, 8]
        shared = nn.Dense(8, name="shared")
        h = nn.RMSNorm()(nn.tanh(shared(e[:3])))        # T=3: 3 (8 + 8) <= 64 -> Gram
        h = shared(nn.tanh(h))
        g = nn.Dense(4)(e)                              # T=6: 6 (8 + 4) > 32 -> materialised
        return nn.Dense(3)(jnp.concatenate([h.mean(0), g.mean(0)]))


class Scaled(nn.Module):
    """A parametrised layer ghost clipping does not know."""

    @nn.compact
    def __call__(self, x):
        return x * self.param("gain", nn.initializers.ones, x.shape)


class WithUnsupported(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(Scaled()(x))


_SETUPS: dict = {}


def _setup(module, kind="x", batch=9, seed=0):
    """Loss, float64 parameters and a batch for ``module``; cached per (module class, kind, batch, seed).

    The parameters are random normal draws (scaled by 1 / sqrt(fan-in) for kernels) in the shapes of
    ``module.init`` (``jax.eval_shape``: traced, not run): ghost clipping's identities hold for every
    parameter value, and flax's own init ran op by op in float64 (5 s for the CNN per test)."""
    cache_key = (type(module).__name__, kind, batch, seed)
    if cache_key not in _SETUPS:
        key = jax.random.key(seed)
        if kind == "tokens":
            x = jax.random.randint(key, (batch, 6), 0, 7)
        else:
            x = jax.random.normal(key, (batch, 64), jnp.float64)
        shapes = jax.eval_shape(module.init, jax.random.key(1), x[0])
        leaves, treedef = jax.tree_util.tree_flatten(shapes)
        rng = np.random.default_rng(seed + 1)
        params = jax.tree_util.tree_unflatten(treedef, [
            jnp.asarray(rng.normal(size=leaf.shape) / np.sqrt(max(1, int(np.prod(leaf.shape[:-1])))), jnp.float64)
            for leaf in leaves])
        _SETUPS[cache_key] = (params, x, jnp.arange(batch) % 3)
    params, x, y = _SETUPS[cache_key]

    def loss(p, xi, yi):
        out = module.apply(p, xi)
        return jax.nn.logsumexp(out) - out[yi]

    return loss, params, x, y


CASES = {"mlp": (MLP(), "x"), "cnn": (CNN(), "x"), "seq": (Seq(), "tokens")}


def _close(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=RTOL, atol=ATOL)


def _perturbed(params, scale):
    return jax.tree_util.tree_map(lambda p: p + scale * jnp.sin(7.0 * p + 1.0), params)


@pytest.mark.parametrize("name", list(CASES))
def test_norms_clipped_sums_and_differences_equal_vmap_grad(name):
    """Per-example norms; clipped sums with a mask for clip norms that bind for
    about half the examples, for none, and ``inf``; DIFF2's per-example
    ``clip(grad l(w) - grad l(w'))`` for w' far from and very close to w."""
    loss, params, x, y = _setup(*CASES[name])
    mask = jnp.asarray([1, 1, 0, 1, 0, 1, 1, 1, 1], jnp.float64)
    per_example = jit(lambda p: clipping.per_example_grads(loss, p, x, y))
    ghost_sum = jit(lambda p, c: gc.ghost_clipped_sum(loss, p, x, y, c, mask, require_fast=True))
    ghost_diff = jit(lambda p, q, c, use: gc.clipped_difference_sum(loss, p, q, x, y, c, mask, use_difference=use,
                                                                        require_fast=True))
    # the reference side compiled too (one program each, the clip norm and the scale traced): run op by op
    # in float64 it took as long as the ghost side's compiles
    ref_norms_of = jit(jax.vmap(clipping.global_norm))
    ref_sum = jit(lambda g, c: clipping.clipped_sum(g, c, mask).total)
    perturbed = jit(_perturbed)
    difference = jit(lambda a, b: jax.tree_util.tree_map(jnp.subtract, a, b))
    grads = per_example(params)
    ref_norms = np.asarray(ref_norms_of(grads))
    norms, fast = jit(lambda p: gc.per_example_grad_norms(loss, p, x, y, require_fast=True))(params)
    assert bool(fast)
    np.testing.assert_allclose(norms, ref_norms, rtol=RTOL)

    median = float(np.median(ref_norms))
    for clip_norm in (0.5 * median, 10.0 * float(np.max(ref_norms)), np.inf):
        res = ghost_sum(params, clip_norm)
        assert bool(res.fast_path) and float(res.count) == 7.0
        _close(res.total, ref_sum(grads, clip_norm))

    for scale in (1e-1, 1e-5):
        prev = perturbed(params, scale)
        diffs = difference(grads, per_example(prev))
        clip_norm = float(np.median(np.asarray(ref_norms_of(diffs))))
        res = ghost_diff(params, prev, clip_norm, True)
        assert bool(res.fast_path)
        _close(res.total, ref_sum(diffs, clip_norm))
    # the traced "restart" flag selects the plain clipped gradients instead
    _close(ghost_diff(params, prev, 0.5 * median, False).total, ref_sum(grads, 0.5 * median))


def test_padding_rows_contribute_nothing_even_if_nan():
    loss, params, x, y = _setup(MLP())
    x = x.at[2].set(jnp.nan)
    mask = jnp.ones(9).at[2].set(0.0)
    res = jit(lambda p: gc.ghost_clipped_sum(loss, p, x, y, 0.3, mask))(params)  # compiled, as the engine runs it
    keep = np.arange(9) != 2
    ref = jit(lambda p: clipping.per_example_clipped_sum(loss, p, x[keep], y[keep], 0.3))(params)
    _close(res.total, ref.total)


def test_zero_gradients_give_zero_not_nan():
    module = MLP()
    _, params, x, _ = _setup(module)
    params = jax.tree_util.tree_map(jnp.zeros_like, params)

    def sq_loss(p, xi, yi):  # output 0 = target: every per-example gradient is exactly zero
        return 0.5 * jnp.sum(jnp.square(module.apply(p, xi) - yi))

    y0 = jnp.zeros((9, 3))
    ghost_sum = jit(lambda p, c: gc.ghost_clipped_sum(sq_loss, p, x, y0, c, require_fast=True))
    for clip_norm in (1.0, 0.0):
        res = ghost_sum(params, clip_norm)
        for leaf in jax.tree_util.tree_leaves(res.total):
            assert np.all(np.asarray(leaf) == 0.0)
    norms, _ = jit(lambda p: gc.per_example_grad_norms(sq_loss, p, x, y0))(params)
    assert np.all(np.asarray(norms) == 0.0)


@pytest.mark.parametrize("model", [MLP(), CNN()])
def test_fast_path_is_taken_and_required(model):
    """Fails if a supported model silently falls back to vmap(grad)."""
    loss, params, x, y = _setup(model)
    plan = gc.make_plan(loss, params, x, y)
    assert plan.fast, plan.reason
    flags = []
    jax.eval_shape(lambda p: flags.append(gc.ghost_clipped_sum(loss, p, x, y, 1.0, require_fast=True).fast_path), params)
    assert flags == [True]


def test_custom_leaf_layer_is_materialised_not_refused():
    """A parametrised layer with no ghost identity gets its per-example gradient
    materialised layer by layer (the rest stays ghost)."""
    loss, params, x, y = _setup(WithUnsupported())
    plan = gc.make_plan(loss, params, x, y)
    assert plan.fast, plan.reason
    assert [c.kind for c in plan.calls] == ["materialised", "dense"]
    res = jit(lambda p: gc.ghost_clipped_sum(loss, p, x, y, 0.2, require_fast=True))(params)
    _close(res.total, jit(lambda p: clipping.per_example_clipped_sum(loss, p, x, y, 0.2).total)(params))


def test_parameter_used_outside_its_layer_falls_back_with_flag():
    """Weight decay inside the per-example loss touches the kernel outside the
    Dense call: the ghost norm would miss it, so the plan refuses and names it."""
    loss0, params, x, y = _setup(MLP())

    def loss(p, xi, yi):
        return loss0(p, xi, yi) + 0.1 * jnp.sum(jnp.square(p["params"]["Dense_0"]["kernel"]))

    plan = gc.make_plan(loss, params, x, y)
    assert not plan.fast and "['params']['Dense_0']['kernel']" in plan.reason
    res = jit(lambda p: gc.ghost_clipped_sum(loss, p, x, y, 0.2))(params)
    assert not bool(res.fast_path)
    _close(res.total, jit(lambda p: clipping.per_example_clipped_sum(loss, p, x, y, 0.2).total)(params))
    with pytest.raises(gc.GhostFallbackError, match="require_fast=True.*used outside the layer"):
        gc.ghost_clipped_sum(loss, params, x, y, 0.2, require_fast=True)


def test_flax_problem_clipped_sums_in_the_engine():
    """``FlaxProblem`` gets the ghost path wherever the engine clips per example."""
    problem = FlaxProblem(MLP(), (64,), "softmax")
    params = jax.tree_util.tree_map(lambda p: p.astype(jnp.float64), jit(problem.init_params)(jax.random.key(0)))
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 64)) for n in (6, 4)]
    ys = [rng.integers(0, 3, size=n) for n in (6, 4)]
    data = SiloData.from_silos(xs, ys, dtype=jnp.float64)
    assert problem.uses_ghost_clipping(params, data.x[0], data.y[0])
    idx = jnp.asarray([[0, 2, 5, 1], [3, 0, 1, 0]])
    mask = jnp.asarray([[1, 1, 1, 1], [1, 1, 1, 0]], bool)
    batch = Batch(None, jnp.ones((2,), bool), idx, mask, jnp.zeros((2,), bool), 2)
    hparams = MbSgdHParams.create(0.1, noise_multiplier=0.0, clip_norm=0.1, dtype=jnp.float64)

    def silo_messages(p):  # the engine's client and clipper parts on this batch
        ctx = Context(jnp.int32(0), jax.random.key(0), hparams, data, batch, p, p)
        units, _ = MinibatchGradient(problem, 4).update(batch, (), ctx)
        return ClipPerUnit().update(units, (), ctx)[0].value

    got = jit(silo_messages)(params)
    reference = jit(lambda p, xb, yb, m: jax.tree_util.tree_map(
        lambda t: t / 4, clipping.per_example_clipped_sum(problem.loss, p, xb, yb, 0.1, m).total))
    for s in range(2):
        xb, yb = data.x[s][idx[s]], data.y[s][idx[s]]
        _close(jax.tree_util.tree_map(lambda g, s=s: g[s], got), reference(params, xb, yb, mask[s]))


def test_diff2_messages_use_ghost_differences_and_match_materialised():
    from dpjax.reproduce.diff2.model import mlp_problem

    problem = mlp_problem(5, 1, "regression")
    params = jax.tree_util.tree_map(lambda p: p.astype(jnp.float64), jit(problem.init_params)(jax.random.key(0)))
    prev = jit(_perturbed)(params, 1e-2)
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(n, 5)) for n in (7, 5)]
    ys = [rng.normal(size=(n, 1)) for n in (7, 5)]
    data = SiloData.from_silos(xs, ys, dtype=jnp.float64)
    assert gc.make_plan(problem.loss, params, data.x[0], data.y[0]).fast
    c1, c2 = 0.5, 3.0
    radius = float(jit(diff2.difference_radius)(params, prev, c2))
    messages = jit(lambda p, q, r: diff2.silo_messages(problem, p, q, data, r, c1, c2))

    @functools.partial(jit, static_argnums=4)  # the materialised reference, one program per silo size and path
    def reference(p, q, x, y, restart):
        g = clipping.per_example_grads(problem.loss, p, x, y)
        if not restart:
            g = jax.tree_util.tree_map(jnp.subtract, g, clipping.per_example_grads(problem.loss, q, x, y))
        return jax.tree_util.tree_map(lambda t: t / x.shape[0], clipping.clipped_sum(g, c1 if restart else radius).total)

    for restart in (True, False):
        msgs = messages(params, prev, jnp.asarray(restart))
        for s, (x, y) in enumerate(zip(xs, ys)):
            _close(jax.tree_util.tree_map(lambda m, s=s: m[s], msgs), reference(params, prev, x, y, restart))


def test_diff2_path_selector_says_which_path_ran_and_carried_ghost_run_equals_per_record_run():
    """DIFF2-GD with the layer passes carried between rounds (ghost path) gives the
    run of materialised per-record gradients; the selector names the path it took."""
    from dpjax import engine
    from dpjax.problems import LinearRegression
    from dpjax.reproduce.diff2.model import mlp_problem

    problem = mlp_problem(5, 1, "regression")
    params = jax.tree_util.tree_map(lambda p: p.astype(jnp.float64), problem.init_params(jax.random.key(0)))
    rng = np.random.default_rng(2)
    xs = [rng.normal(size=(n, 5)) for n in (7, 5)]
    ys = [rng.normal(size=(n, 1)) for n in (7, 5)]
    data = SiloData.from_silos(xs, ys, dtype=jnp.float64)
    h = diff2.Diff2HParams.create(0.05, restart_interval=3, clip_restart=0.5, clip_diff=2.0,
                                  noise_multiplier_restart=0.7, noise_multiplier_diff=1.4, dtype=jnp.float64)
    ghost = diff2.Diff2GD(problem, 10, output="last", cache_grads=True, path="auto")
    ref = diff2.Diff2GD(problem, 10, output="last", cache_grads=True, path="per-record")
    assert ghost.path_used(params, data) == "ghost" and ref.path_used(params, data) == "per-record"
    # the first layer sees the data: its input is not carried (it is the same at every iterate)
    assert gc.make_plan(problem.loss, params, data.x[0], data.y[0]).fixed_inputs == (True, False)
    key = jax.random.key(3)
    a = engine.run(ghost, data, h, key, params=params)
    b = engine.run(ref, data, h, key, params=params)
    _close(a.output, b.output)
    carried_inputs, carried_deltas = a.state.parts["client"].cache  # layer passes, not per-record gradients
    assert carried_inputs[0] is None and [d.shape[-1] for d in carried_deltas] == [10, 1]
    # a model ghost clipping does not support: auto falls back and says so, "ghost" refuses
    linear = LinearRegression(5, fit_intercept=False)
    w = jnp.zeros(5, jnp.float64)
    assert diff2.clipping_path(linear, w, data.x[0], data.y[0][:, 0]) == "per-record"
    with pytest.raises(ValueError, match="path='ghost'"):
        diff2.clipping_path(linear, w, data.x[0], data.y[0][:, 0], "ghost")
    with pytest.raises(ValueError, match="path"):
        diff2.Diff2GD(problem, 3, path="fast")


@pytest.mark.privacy
@pytest.mark.parametrize("path", ["ghost", "per-example"])
def test_negative_or_nonfinite_masks_are_refused_on_both_paths(path):
    """A mask of -1 returned a negated sum (a record subtracted: outside the sensitivity); both drop-in paths refuse
    it, naming the entry."""
    loss, params, x, y = _setup(MLP())
    fn = gc.ghost_clipped_sum if path == "ghost" else clipping.per_example_clipped_sum
    for bad, needle in [(-1.0, r"mask\[2\]=-1\.0"), (float("nan"), r"mask\[2\]=nan")]:
        mask = np.ones(9)
        mask[2] = bad
        with pytest.raises(ValueError, match=needle):
            fn(loss, params, x, y, 1.0, jnp.asarray(mask))
    fn(loss, params, x, y, 1.0, jnp.asarray([1, 0, 2, 1, 1, 1, 1, 1, 1]))  # multiplicities stay accepted


@pytest.mark.privacy
# Not "cnn": there the reference itself fails -- vmap(grad) of a convolution batches into one grouped convolution in
# which a NaN example turns every example's kernel gradient into NaN (the per-example path then zeroes them all).
@pytest.mark.parametrize("name", ["mlp"])
def test_a_nonfinite_example_contributes_zero_on_both_paths(name):
    """One NaN (or inf) input row: the per-example path zeroes that gradient (``clip_to_norm``); ghost clipping gave a
    NaN total. Both now give the clipped sum of the other rows; unclipped (``clip_norm=None``) both propagate it."""
    loss, params, x, y = _setup(*CASES[name])
    for poison in (jnp.nan, jnp.inf):
        bad = x.at[4, 3].set(poison)
        keep = jnp.asarray([1, 1, 1, 1, 0, 1, 1, 1, 1], jnp.float64)
        ghost = gc.ghost_clipped_sum(loss, params, bad, y, 0.5, require_fast=True).total
        ref = clipping.per_example_clipped_sum(loss, params, bad, y, 0.5).total
        others = clipping.per_example_clipped_sum(loss, params, x, y, 0.5, keep).total
        _close(ghost, others)
        _close(ref, others)
        unclipped = gc.ghost_clipped_sum(loss, params, bad, y, None, require_fast=True).total
        assert not all(bool(jnp.all(jnp.isfinite(u))) for u in jax.tree_util.tree_leaves(unclipped))
