"""Ghost clipping on every common flax layer (linen and NNX) equals ``vmap(grad)``.

Property tests on random models of each layer type and their combinations:
the per-example gradient norms equal those of the materialised per-example
gradients, the clipped (masked) sum and the unclipped sum equal the
materialised ones, and every layer with a ghost identity takes it (a Dense
silently materialised, or the whole model silently falling back, fails).
Unsupported constructions raise ``GhostFallbackError`` naming the layer or
parameter under ``require_fast=True``.

Tolerances. float64 (most tests): both sides compute the same sums of
products in different orders, each with relative error <= n u kappa
(u = 1.1e-16, n <= 1e4 terms, kappa <= T <= 40 for the Gram form, whose terms
can cancel), i.e. <= 5e-11; ``RTOL64 = 1e-9`` leaves a margin and still fails
on any wrong term, factor or layout (those give O(1e-2..1) errors). Sums are
compared with an absolute tolerance relative to the largest entry of the
reference, since some entries are 0 up to rounding (the attention key bias
has an exactly zero gradient). float32 (the benchmark transformer, HIGHEST
matmul precision): the same bound with u = 6e-8 and pairwise/blocked
accumulation (log2 n ~ 14 instead of n) gives 2 u T log2 n ~ 1e-5 for T = 8;
``RTOL32 = 1e-4``.

Random models: every family draws its sizes (widths, sequence lengths, heads,
kernel sizes, strides, paddings, dilations, vocabulary sizes on both sides of
the Gram-vs-materialised switch) from a seeded generator; the default suite
runs seed 0 of each family, ``-m slow`` a sweep of seeds.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpjax.primitives import clipping
from dpjax.primitives import ghost_clipping as gc
from dpjax.primitives import ghost_passes
from dpjax.problems import TransformerClassifier, transformer_problem

RTOL64, RTOL32 = 1e-9, 1e-4
# Compile-time bound test: XLA's cheap CPU backend settings cut compile time by ~35 %
# (the arithmetic, and so the tolerances, are unchanged).
jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0,
                                                   "xla_llvm_disable_expensive_passes": True})
BATCH = 4
SLOW_SEEDS = [pytest.param(s, marks=pytest.mark.slow) for s in range(1, 6)]
SEEDS = [0] + SLOW_SEEDS


@pytest.fixture(autouse=True)
def x64(request):
    if "float32" in request.node.name:
        yield
        return
    with jax.enable_x64(True):
        yield


def _init(module, x0, key=1):
    """``module.init`` in one compiled call (eager initialisation compiles every op
    separately, which would dominate these tests' time), cast to float64."""
    return jit(lambda k: _f64(module.init(k, x0)))(jax.random.key(key))


def _nnx_model(ctor):
    """An NNX model built in one compiled call (see ``_init``)."""
    graphdef = nnx.split(nnx.eval_shape(ctor))[0]
    return nnx.merge(graphdef, jit(lambda: nnx.state(ctor()))())


def _f64(tree):
    return jax.tree_util.tree_map(lambda a: a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a,
                                  tree)


def _ce(out, yi):
    out = out.reshape(-1)
    return jax.nn.logsumexp(out) - out[yi]


def _linen_loss(module, **variables):
    def loss(p, xi, yi):
        return _ce(module.apply({**p, **variables}, xi), yi)

    return loss


def _compare(loss, params, x, y, rtol=RTOL64, unclipped=False):
    """Norms, clipped masked sum (clip binding for about half the examples) and,
    with ``unclipped``, the unclipped sum by ghost clipping vs vmap(grad); returns the plan."""
    plan = gc.make_plan(loss, params, x, y)
    assert plan.fast, plan.reason
    mask = (jnp.arange(x.shape[0]) % 4 != 2).astype(jnp.float32)

    @jit
    def run(p):
        grads = clipping.per_example_grads(loss, p, x, y)
        ref_norms = jax.vmap(clipping.global_norm)(grads)
        norms, _ = gc.per_example_grad_norms(loss, p, x, y, require_fast=True)
        c = jnp.median(ref_norms)
        clipped = gc.ghost_clipped_sum(loss, p, x, y, c, mask, require_fast=True).total
        pairs = [(clipping.clipped_sum(grads, c, mask).total, clipped)]
        if unclipped:
            pairs.append((clipping.clipped_sum(grads, jnp.inf, mask).total,
                          gc.ghost_clipped_sum(loss, p, x, y, None, mask, require_fast=True).total))
        return ref_norms, norms, pairs

    ref_norms, norms, pairs = run(params)
    assert np.all(np.asarray(ref_norms) > 0)
    np.testing.assert_allclose(norms, ref_norms, rtol=rtol)
    for ref, got in pairs:
        scale = max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree_util.tree_leaves(ref))
        for u, v in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(got)):
            np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=0, atol=rtol * scale)
    return plan


def _norm_forms(loss, params, x, y):
    """Per parameter leaf, the form its per-example norm takes (``vec``: materialised,
    ``outer``/``embed``: Gram or T = 1, ``tied``: embedding + read-out), traced only."""
    plan = gc.make_plan(loss, params, x, y)
    forms = []

    def parts(p):
        found = gc.layer_parts(plan, jax.tree_util.tree_leaves(p), *gc.capture_layer_io(loss, p, x, y, plan))[0]
        forms.extend(part[0] for part in found)

    jax.eval_shape(parts, params)
    return dict(zip((leaf for leaf, _ in plan.leaf_groups), forms))


def _table_form(problem, params, x, y):
    """The norm form of a tied transformer's token table."""
    plan = gc.make_plan(problem.loss, params, x, y)
    leaf = next(c.leaf("embedding") for c in plan.calls if c.method == "attend")
    return _norm_forms(problem.loss, params, x, y)[leaf]


def _kinds(plan):
    return {f"{c.name}.{c.method}": c.kind for c in plan.calls}


# ----------------------------------------------------------------------------- linen families
class DenseStack(nn.Module):
    """Dense and DenseGeneral on vectors and sequences: T = 1, Gram and materialised forms,
    multi-axis contractions and multi-axis features."""

    t: int
    d: int
    h: int
    heads: int

    @nn.compact
    def __call__(self, x):  # x [t, d]
        v = nn.tanh(nn.Dense(self.h)(x.mean(0)))                                   # T = 1
        s = nn.DenseGeneral((self.heads, self.h), axis=-1)(x)                       # [t, heads, h]
        s = nn.DenseGeneral(self.d, axis=(-2, -1))(nn.tanh(s))                      # [t, d]
        s = nn.DenseGeneral(self.h, axis=(0, 1))(nn.tanh(s))                        # contracts t and d: T = 1
        w = nn.Dense(2, use_bias=False)(x)                                          # no bias
        return nn.Dense(3)(jnp.concatenate([v, s, w.reshape(-1)]))


class ConvStack(nn.Module):
    """Conv (2-D and 1-D; strides, explicit and SAME padding, kernel and input dilation)
    as ghost layers; GroupNorm, grouped, circular and transposed convolutions materialised."""

    c: int
    k: int
    stride: int
    dil: int

    @nn.compact
    def __call__(self, x):  # x [6, 6]
        h = nn.Conv(self.c, (self.k, 2), strides=(self.stride, 1), padding=((1, self.k - 1), (0, 1)),
                    kernel_dilation=(self.dil, 1))(x[..., None])
        h = nn.GroupNorm(num_groups=2)(nn.relu(h))
        h = nn.Conv(self.c, (2, 2), feature_group_count=2)(h)
        h = nn.ConvTranspose(2, (2, 2))(nn.tanh(h))
        h1 = nn.Conv(3, self.k, padding="SAME")(h.reshape(-1, 2))
        h2 = nn.Conv(2, (3,), input_dilation=self.dil, padding=((1, 0),))(h.reshape(-1, 2))
        h3 = nn.Conv(2, 3, padding="CIRCULAR")(h.reshape(-1, 2))
        return nn.Dense(3)(jnp.concatenate([h1.mean(0), h2.mean(0), h3.mean(0)]))


class SharedAndMisc(nn.Module):
    """A Dense called twice, BatchNorm with running averages, Einsum, RMSNorm and a
    custom leaf layer with two parameters (materialised)."""

    d: int

    @nn.compact
    def __call__(self, x):  # x [t, d]
        shared = nn.Dense(self.d, name="shared")
        h = shared(nn.RMSNorm()(shared(x)))
        h = nn.BatchNorm(use_running_average=True)(h)
        h = nn.Einsum((self.d, 4), "...i,ij->...j")(h)
        return nn.Dense(3)(Affine()(h).mean(0))


class Affine(nn.Module):
    @nn.compact
    def __call__(self, x):
        return x * self.param("gain", nn.initializers.ones, x.shape[-1:]) + self.param(
            "shift", nn.initializers.normal(0.1), x.shape[-1:])


def _rng(seed):
    return np.random.default_rng(1000 + seed)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.slow
def test_dense_and_dense_general(seed):
    r = _rng(seed)
    t, d = int(r.integers(1, 7)), int(r.integers(2, 7))
    module = DenseStack(t, d, int(r.integers(2, 6)), int(r.integers(1, 4)))
    x = jax.random.normal(jax.random.key(seed), (BATCH, t, d), jnp.float64)
    params = _init(module, x[0])
    plan = _compare(_linen_loss(module), params, x, jnp.arange(BATCH) % 3)
    assert set(_kinds(plan).values()) == {"dense"}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.slow
def test_convolutions_and_group_norm(seed):
    r = _rng(seed)
    module = ConvStack(2 * int(r.integers(1, 3)), int(r.integers(2, 4)), int(r.integers(1, 3)), int(r.integers(1, 3)))
    x = jax.random.normal(jax.random.key(seed), (BATCH, 6, 6), jnp.float64)
    params = _init(module, x[0])
    plan = _compare(_linen_loss(module), params, x, jnp.arange(BATCH) % 3)
    kinds = list(_kinds(plan).values())
    assert kinds == ["conv", "materialised", "materialised", "materialised", "conv", "conv", "materialised", "dense"]


# chunk = 2 (3 chunks, one zero-padding row) runs every line of the chunked path that chunk = 1 runs (5 chunks, the
# padding of 0 rows a no-op) plus the padding and its drop; chunk = 1 adds a compilation of the whole ConvStack (~6 s
# on 2 cores), so it runs in the slow pass (issue #39).
@pytest.mark.parametrize("chunk", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_convolution_gradients_in_example_chunks(chunk, monkeypatch):
    """The materialised per-example convolution gradients are computed a few examples
    at a time (``lax.map`` over chunks, the batch zero-padded to a multiple of the
    chunk): chunks of 1 and of 2 (5 examples: one padding row) still equal vmap(grad)
    for every convolution of ConvStack (strides, explicit/SAME padding, kernel and
    input dilation, 1-D with per-example batch axes)."""
    calls = []

    def fixed_chunk(batch, patch_floats):
        calls.append(batch)
        return chunk

    monkeypatch.setattr(ghost_passes, "_conv_chunk", fixed_chunk)
    module = ConvStack(2, 3, 2, 2)
    x = jax.random.normal(jax.random.key(7), (5, 6, 6), jnp.float64)
    params = _init(module, x[0])
    plan = _compare(_linen_loss(module), params, x, jnp.arange(5) % 3, unclipped=True)
    assert calls and set(calls) == {5}  # every convolution took the chunked path
    forms = _norm_forms(_linen_loss(module), params, x, jnp.arange(5) % 3)
    assert all(forms[c.leaf("kernel")] == "vec" for c in plan.calls if c.kind == "conv")


@pytest.mark.parametrize("seed", SEEDS)
def test_weight_sharing_batchnorm_einsum_custom_layer(seed):
    r = _rng(seed)
    t, d = int(r.integers(1, 6)), int(r.integers(2, 6))
    module = SharedAndMisc(d)
    x = jax.random.normal(jax.random.key(seed), (BATCH, t, d), jnp.float64)
    variables = _init(module, x[0])
    stats = jax.tree_util.tree_map(lambda v: v + 0.3, variables["batch_stats"])  # non-trivial running stats
    params = {"params": variables["params"]}
    plan = _compare(_linen_loss(module, batch_stats=stats), params, x, jnp.arange(BATCH) % 3, unclipped=True)
    assert [c.kind for c in plan.calls] == ["dense", "materialised", "dense", "materialised", "materialised",
                                            "materialised", "dense"]
    assert plan.calls[0].leaf_ids == plan.calls[2].leaf_ids  # one parameter group, two calls


def _random_transformer(seed, tied):
    r = _rng(seed)
    t = int(r.integers(5, 9))
    heads = int(r.integers(1, 3))
    # tied: a table no larger than the T^2 Gram matrix (V F <= T^2: the embedding gradient is
    # materialised) on even seeds, else the Gram form with the cross term
    vocab = (3 if seed % 2 == 0 else 97) if tied else int(r.integers(5, 40))
    kw = dict(vocab_size=vocab, width=4 * heads, num_heads=heads, mlp_width=int(r.integers(4, 12)),
              num_layers=1 + (seed // 2) % 2, num_classes=vocab if tied else 3, tied_readout=tied)
    problem = transformer_problem(seq_len=t, **kw)
    x = jax.random.randint(jax.random.key(seed), (BATCH, t), 0, vocab)
    y = jax.random.randint(jax.random.key(seed + 7), (BATCH,), 0, kw["num_classes"])
    return problem, x, y


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("tied", [pytest.param(False, marks=pytest.mark.slow), True])
@pytest.mark.slow
def test_transformer_embedding_attention_layernorm(seed, tied):
    """The benchmark's transformer (dpjax.problems): token and position Embed,
    the DenseGeneral projections inside MultiHeadDotProductAttention, MLP,
    LayerNorm; with a tied read-out (Embed.attend) the embedding's per-example
    gradient has two contributions. (The untied model runs in float32 in the
    default suite, ``test_transformer_float32_highest_precision``.)"""
    problem, x, y = _random_transformer(seed, tied)
    params = jit(lambda k: _f64(problem.init_params(k)))(jax.random.key(seed))
    plan = _compare(problem.loss, params, x, y, unclipped=tied)
    kinds = _kinds(plan)
    assert all(k == ("materialised" if "LayerNorm" in name else "attend" if name.endswith(".attend")
                     else "embed" if "Embed" in name else "dense") for name, k in kinds.items()), kinds
    assert sum("attn_0/" in name for name in kinds) == 4  # query, key, value, out
    if tied:
        assert _table_form(problem, params, x, y) == ("vec" if problem.module.vocab_size == 3 else "tied")


@pytest.mark.slow
def test_tied_embedding_differences_for_diff2():
    """DIFF2's clipped gradient differences on the tied transformer (Gram + cross
    term for the shared table, materialised LayerNorm differences)."""
    problem, x, y = _random_transformer(1, True)
    params = jit(lambda k: _f64(problem.init_params(k)))(jax.random.key(0))
    prev = jax.tree_util.tree_map(lambda p: p + 0.05 * jnp.sin(7.0 * p + 1.0), params)

    @jit
    def run(p, q):
        diffs = jax.tree_util.tree_map(jnp.subtract, clipping.per_example_grads(problem.loss, p, x, y),
                                       clipping.per_example_grads(problem.loss, q, x, y))
        c = jnp.median(jax.vmap(clipping.global_norm)(diffs))
        got = gc.clipped_difference_sum(problem.loss, p, q, x, y, c, require_fast=True).total
        return clipping.clipped_sum(diffs, c).total, got

    assert _table_form(problem, params, x, y) == "tied"  # the shared table: Gram form + cross term
    ref, got = run(params, prev)
    scale = max(float(jnp.max(jnp.abs(leaf))) for leaf in jax.tree_util.tree_leaves(ref))
    for u, v in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(got)):
        np.testing.assert_allclose(np.asarray(v), np.asarray(u), rtol=0, atol=RTOL64 * scale)


@pytest.mark.slow
def test_transformer_float32_highest_precision():
    """The float32 tolerance (HIGHEST matmul precision)."""
    with jax.default_matmul_precision("highest"):
        problem = transformer_problem(seq_len=8, vocab_size=50, width=8, num_heads=2, mlp_width=16, num_classes=5,
                                      num_layers=1)
        params = jit(problem.init_params)(jax.random.key(0))
        x = jax.random.randint(jax.random.key(1), (BATCH, 8), 0, 50)
        _compare(problem.loss, params, x, jnp.arange(BATCH) % 5, rtol=RTOL32)


# ----------------------------------------------------------------------------- NNX families
F64 = dict(param_dtype=jnp.float64)


class NNXMLP(nnx.Module):
    """LinearGeneral (multi-axis), LayerNorm, RMSNorm, a Variable shared by two Linear
    layers with their own biases, and a Linear module called twice."""

    def __init__(self, d, h, rngs):
        self.l1 = nnx.LinearGeneral(d, (2, h), rngs=rngs, **F64)
        self.ln = nnx.LayerNorm(2 * h, rngs=rngs, **F64)
        self.l2 = nnx.LinearGeneral((2, h), d, axis=(-2, -1), rngs=rngs, **F64)
        self.rms = nnx.RMSNorm(d, rngs=rngs, **F64)
        self.shared = nnx.Linear(d, d, rngs=rngs, **F64)
        self.twin = nnx.Linear(d, d, rngs=rngs, **F64)
        self.twin.kernel = self.shared.kernel
        self.out = nnx.Linear(d, 3, rngs=rngs, **F64)

    def __call__(self, x):  # x [t, d]
        h = self.l1(x)
        h = self.ln(h.reshape(h.shape[0], -1)).reshape(h.shape)
        h = self.rms(jnp.tanh(self.l2(h)))
        h = self.shared(self.twin(jnp.tanh(self.shared(h))))
        return self.out(h.mean(0))


class NNXCNN(nnx.Module):
    def __init__(self, c, k, rngs):
        self.c1 = nnx.Conv(1, c, (k, 2), strides=(1, 2), padding=((1, 1), (0, 1)), rngs=rngs, **F64)
        self.gn = nnx.GroupNorm(c, num_groups=2, rngs=rngs, **F64)
        self.c2 = nnx.Conv(c, c, (2, 2), feature_group_count=2, rngs=rngs, **F64)
        self.bn = nnx.BatchNorm(c, use_running_average=True, rngs=rngs, **F64)
        self.out = nnx.Linear(c, 3, rngs=rngs, **F64)

    def __call__(self, x):  # x [6, 6]
        h = self.gn(nnx.relu(self.c1(x[..., None])))
        return self.out(self.bn(self.c2(h)).mean((0, 1)))


class NNXTiedAttention(nnx.Module):
    def __init__(self, vocab, t, width, heads, rngs):
        self.emb = nnx.Embed(vocab, width, rngs=rngs, **F64)
        self.pos = nnx.Embed(t, width, rngs=rngs, **F64)
        self.ln = nnx.LayerNorm(width, rngs=rngs, **F64)
        self.att = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False, rngs=rngs, **F64)
        self.ln2 = nnx.LayerNorm(width, rngs=rngs, **F64)

    def __call__(self, tokens):
        h = self.emb(tokens) + self.pos(jnp.arange(tokens.shape[-1]))
        h = h + self.att(self.ln(h))
        return self.emb.attend(self.ln2(h).mean(0))


def _nnx_ce(model, xi, yi):
    return _ce(model(xi), yi)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.slow
def test_nnx_linear_norms_and_shared_variable(seed):
    r = _rng(seed)
    t, d, h = int(r.integers(1, 6)), int(r.integers(2, 6)), int(r.integers(2, 5))
    loss, params = gc.nnx_loss(_nnx_model(lambda: NNXMLP(d, h, nnx.Rngs(seed))), _nnx_ce)
    x = jax.random.normal(jax.random.key(seed), (BATCH, t, d), jnp.float64)
    plan = _compare(loss, params, x, jnp.arange(BATCH) % 3)
    assert [c.kind for c in plan.calls] == ["dense", "materialised", "dense", "materialised"] + ["dense"] * 4
    shared = plan.calls[4].leaf("kernel")
    assert shared == plan.calls[5].leaf("kernel") and plan.calls[4].leaf("bias") != plan.calls[5].leaf("bias")


@pytest.mark.parametrize("seed", SEEDS)
def test_nnx_conv_group_norm_batch_norm(seed):
    r = _rng(seed)
    c, k = 2 * int(r.integers(1, 3)), int(r.integers(2, 4))
    loss, params = gc.nnx_loss(_nnx_model(lambda: NNXCNN(c, k, nnx.Rngs(seed))), _nnx_ce)
    x = jax.random.normal(jax.random.key(seed), (BATCH, 6, 6), jnp.float64)
    plan = _compare(loss, params, x, jnp.arange(BATCH) % 3)
    assert [c.kind for c in plan.calls] == ["conv", "materialised", "materialised", "materialised", "dense"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.slow
def test_nnx_embedding_attention_tied_readout(seed):
    r = _rng(seed)
    t, heads = int(r.integers(5, 8)), int(r.integers(1, 3))
    vocab = 97 if seed % 2 == 0 else 3  # Gram form + cross term, or the materialised table
    model = _nnx_model(lambda: NNXTiedAttention(vocab, t, 4 * heads, heads, nnx.Rngs(seed)))
    loss, params = gc.nnx_loss(model, _nnx_ce)
    x = jax.random.randint(jax.random.key(seed), (BATCH, t), 0, vocab)
    plan = _compare(loss, params, x, jax.random.randint(jax.random.key(seed + 7), (BATCH,), 0, vocab))
    kinds = _kinds(plan)
    assert kinds["Embed 'emb'.attend"] == "attend" and kinds["LinearGeneral 'att/out'.__call__"] == "dense"


@pytest.mark.slow
def test_nnx_graphdef_and_state_entry_point_and_training_step():
    """``NNXLoss(graphdef, loss, rest)`` (graphdef + state) and ``nnx_loss(model, loss)``
    are the same loss with the same plan; the clipped sum is a state that updates the model."""
    model = _nnx_model(lambda: NNXMLP(4, 3, nnx.Rngs(0)))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    loss_a = gc.NNXLoss(graphdef, _nnx_ce, (rest,))
    loss_b, params_b = gc.nnx_loss(model, _nnx_ce)
    x = jax.random.normal(jax.random.key(0), (BATCH, 3, 4), jnp.float64)
    y = jnp.arange(BATCH) % 3
    plan_a, plan_b = gc.make_plan(loss_a, params, x, y), gc.make_plan(loss_b, params_b, x, y)
    assert plan_a.fast and plan_a.describe() == plan_b.describe()

    @jit
    def step(p, q):
        total = gc.ghost_clipped_sum(loss_a, p, x, y, 0.1, require_fast=True).total
        return total, loss_a(p, x[0], y[0]), loss_b(q, x[0], y[0])

    total, value_a, value_b = step(params, params_b)
    assert float(value_a) == float(value_b)
    new = jax.tree_util.tree_map(lambda p, g: p - 0.5 * g, params, total)
    nnx.update(model, new)
    jax.tree_util.tree_map(lambda u, v: np.testing.assert_array_equal(np.asarray(u), np.asarray(v)),
                           nnx.state(model, nnx.Param), new)
    assert any(float(jnp.max(jnp.abs(g))) > 0 for g in jax.tree_util.tree_leaves(total))
    with pytest.raises(TypeError, match="flax.nnx.Module"):
        gc.nnx_loss(graphdef, _nnx_ce)
    # a frozen part (not in params) is a constant: only the trained layer is observed
    frozen_loss, trained = gc.nnx_loss(model, _nnx_ce, nnx.All(nnx.Param, nnx.PathContains("out")))
    plan = gc.make_plan(frozen_loss, trained, x, y)
    assert plan.fast and [c.name for c in plan.calls] == ["Linear 'out'"]


# ----------------------------------------------------------------------------- refusals
class _Block(nn.Module):
    @nn.compact
    def __call__(self, h, _):
        return nn.Dense(h.shape[-1])(h), None


class _Scanned(nn.Module):
    @nn.compact
    def __call__(self, x):
        h, _ = nn.scan(_Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=2)()(x, None)
        return nn.Dense(3)(h.sum(0))


class _Remat(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.remat(nn.Dense)(4)(x).sum(0))


class _Vmapped(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.vmap(nn.Dense, variable_axes={"params": None}, split_rngs={"params": False})(4)(x)
        return nn.Dense(3)(h.sum(0))


class _EmbeddingReadByAttribute(nn.Module):
    @nn.compact
    def __call__(self, x):
        e = nn.Embed(5, 4)
        h = e(jnp.arange(3)) * x.sum()
        return h.mean(0) @ e.embedding[:3].T


class _OwnAndChildParams(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)((x * self.param("gain", nn.initializers.ones, (4,))).sum(0))


class _BatchNormTraining(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.BatchNorm(use_running_average=False)(x).sum(0))


class _TwoDense(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3)(nn.Dense(4)(x).sum(0))


class _NNXTwo(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(4, 4, rngs=rngs)
        self.l2 = nnx.Linear(4, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(nnx.remat(lambda m, h: m(h))(self.l1, x).sum(0))


def _linen_refusal(module, mutable=False, wrap=None):
    x = jax.random.normal(jax.random.key(0), (BATCH, 2, 4))
    variables = module.init(jax.random.key(1), x[0])

    def loss(p, xi, yi):
        apply = (lambda q, xx: module.apply(q, xx, mutable=["batch_stats"])[0]) if mutable else module.apply
        return _ce((wrap(apply) if wrap else apply)(p, xi), yi)

    return loss, variables, x


def _weight_decay_loss():
    loss, params, x = _linen_refusal(_TwoDense())
    return (lambda p, xi, yi: loss(p, xi, yi) + jnp.sum(jnp.square(p["params"]["Dense_0"]["kernel"]))), params, x


def _nnx_plain_loss():
    graphdef, state = nnx.split(_NNXTwo(nnx.Rngs(0)), nnx.Param)
    x = jax.random.normal(jax.random.key(0), (BATCH, 2, 4))
    return (lambda p, xi, yi: _ce(nnx.merge(graphdef, p).l2(nnx.merge(graphdef, p).l1(xi).sum(0)), yi)), state, x


def _nnx_remat():
    loss, params = gc.nnx_loss(_NNXTwo(nnx.Rngs(0)), _nnx_ce)
    return loss, params, jax.random.normal(jax.random.key(0), (BATCH, 2, 4))


REFUSALS = {
    "nn.scan": (lambda: _linen_refusal(_Scanned()), r"Dense '\w*Block_0/Dense_0' is called inside a JAX transf"),
    "nn.remat": (lambda: _linen_refusal(_Remat()), r"Dense 'CheckpointDense_0' is called inside a JAX transf"),
    "nn.vmap": (lambda: _linen_refusal(_Vmapped()), r"Dense 'VmapDense_0' is called inside a JAX transf"),
    "jax.checkpoint in the loss": (lambda: _linen_refusal(_TwoDense(), wrap=jax.checkpoint),
                                   r"Dense 'Dense_\d' is called inside a JAX transf"),
    "embedding read as an attribute": (lambda: _linen_refusal(_EmbeddingReadByAttribute()),
                                       r"parameter \['params'\]\['Embed_0'\]\['embedding'\] is used outside"),
    "weight decay in the loss": (_weight_decay_loss, r"parameter \['params'\]\['Dense_0'\]\['kernel'\] is used outside"),
    "own and child parameters": (lambda: _linen_refusal(_OwnAndChildParams()),
                                 r"_OwnAndChildParams \(the top-level module\) owns parameters and also has sub"),
    "BatchNorm training": (lambda: _linen_refusal(_BatchNormTraining(), mutable=True),
                           r"BatchNorm 'BatchNorm_0': BatchNorm in training mode"),
    "NNX state merged by a plain loss": (_nnx_plain_loss, r"parameter \['l1'\]\['kernel'\].* is used outside.*NNXLoss"),
    "nnx.remat": (_nnx_remat, r"Linear \(a copy made inside an NNX transformation\) is called inside a JAX"),
}


@pytest.mark.parametrize("name", list(REFUSALS))
@pytest.mark.slow
def test_unsupported_constructions_are_refused_by_name(name):
    """Never a silently wrong norm: each construction ghost clipping cannot
    see through is refused with the layer or parameter named (the default path
    then runs vmap(grad), which test_ghost_clipping checks)."""
    build, message = REFUSALS[name]
    loss, params, x = build()
    y = jnp.arange(BATCH) % 3
    plan = gc.make_plan(loss, params, x, y)
    assert not plan.fast
    with pytest.raises(gc.GhostFallbackError, match="require_fast=True but ghost clipping cannot run: " + message):
        gc.ghost_clipped_sum(loss, params, x, y, 1.0, require_fast=True)
    flags = []
    jax.eval_shape(lambda p: flags.append(gc.ghost_clipped_sum(loss, p, x, y, 1.0).fast_path), params)
    assert flags == [False]


def test_transformer_classifier_is_the_shared_model():
    """Tests and benchmarks share dpjax.problems.TransformerClassifier."""
    problem = transformer_problem(seq_len=8)
    assert isinstance(problem.module, TransformerClassifier) and problem.input_shape == (8,)
    assert problem.module.num_layers == 2
