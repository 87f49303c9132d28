"""Property test: ghost norms equal ``vmap(grad)`` on every norm path, for random flax models.

Ghost clipping (``dpjax.primitives.ghost_clipping``) computes each example's gradient norm from the layers'
inputs and output gradients by one of several identities, chosen per parameter leaf from the layer's shape
(``ghost_passes.layer_parts`` / ``_outer_sq_norms``):

* ``||A^T D||^2`` of a dense layer (also attention projections, convolutions as unfolded patches, and the
  read-out ``Embed.attend``, whose gradient is ``D^T Q``) at ``T`` positions with ``K`` inputs, ``C`` outputs:
  ``||a||^2 ||d||^2`` for ``T = 1`` (Goodfellow 2015); the Gram form ``sum_{t,s} (a_t.a_s)(d_t.d_s)`` (Li et al.
  2022, Sec. 4) when ``T (K + C) <= K C``, fused for ``T <= 4`` and by einsum above; otherwise the materialised
  ``A^T D`` (Bu et al. 2023). The last branch of ``_outer_sq_norms`` is reached only by DIFF2's gradient
  differences (the stacked factors of ``A^T D - A'^T D'`` have ``2 T`` positions);
* embeddings: ``sum_{t,s} [idx_t = idx_s] (d_t.d_s)`` when the table has more than ``T^2`` entries, else
  the scattered per-example table; a tied embedding/read-out adds the cross term
  ``2 sum_{t,s} D^attend_s[idx_t] (d_t.q_s)`` (both sides ghost) or is materialised;
* materialised per-example gradients (``vec``): LayerNorm / RMSNorm / GroupNorm, grouped convolutions, biases,
  convolution kernels with more positions than the Gram form pays for (in example chunks or whole), and
  parameters shared by layers of different kinds (NNX shared ``Variable``).

An underestimated norm is a privacy failure, so every one of these paths is compared here with the
per-example gradients of ``vmap(grad)``: norms, clipped masked sums (clip at the median norm of the real rows),
the unclipped sum and DIFF2's clipped differences (clip at half the smallest real row's norm: every real row
clipped, so each difference norm, compared nowhere else, enters the sum). ``draw_case(seed)`` builds a random
model (flax linen or NNX, by seed parity) from blocks of every supported layer kind; each block draws its
regime (``T = 1`` / tiny Gram / Gram / materialised, exactly at or just past a switch) by rotating with the
seed and its sizes at random inside that regime, so every 8 consecutive seeds cover every form (slow test).
The default run checks a fast sample: two small models made of a few of the drawn blocks (``FAST_CASES``), each
one program sharing one ghost pass per iterate (``_programs(full=False)``: 4-6 s of setup at load 7 on the
shared 2-core machine, where the entry points' separate passes took 7-9 s);
``test_generator_reaches_every_norm_form`` asserts that they alone reach every form (``FormRecorder`` wraps the
norm routines while the programs are traced and records which form ran: ``REQUIRED``, including each ghost layer
kind's leaves on both sides of its switch and each branch of the clipped sums), so a term dropped from any form fails
the default run (the ``G`` mutants of ``experiments/mutation/run_mutants.py``). The whole drawn models, with
the NaN padding rows too, run under ``slow``.

Tolerance. float64 on both sides; they compute the same sums of products in different orders. Each squared
norm is a sum of ``n <= 1e4`` products with relative error ``<= n u kappa`` (``u = 1.1e-16``, ``kappa``: the
Gram form's cancellation, ``sum |terms| / total <= T <= 14`` for random data), i.e. ``<= 2e-11``;
``RTOL = 1e-10`` (the issue's bound) still fails on any dropped term (a position, feature or cross term of
random data carries an O(1e-2..1) share of a norm). Sums are compared leaf by leaf in l2 norm against
``RTOL`` times the leaf's norm plus ``RTOL`` times 1e-3 of the whole sum's norm (a leaf whose gradient is 0
up to rounding, such as an attention key bias, has no relative scale of its own).
"""

from __future__ import annotations

import collections
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dpjax.primitives import clipping
from dpjax.primitives import ghost_clipping as gc
from dpjax.primitives import ghost_passes as gp

pytestmark = pytest.mark.privacy

RTOL = 1e-10
BATCH = 5          # rows 1 and 3 are padding (mask 0), row 4 has multiplicity 2
REAL_ROWS = (0, 2, 4)
CLASSES = 3
# Compile-time bound (as tests/primitives/test_ghost_layers.py): XLA's cheap CPU settings, and the loop emitters
# instead of the fusion emitters (halves the compile time of these programs), and one LLVM module instead of
# parallel codegen splits (-12 % compile CPU on the shared 2-core machine); arithmetic unchanged.
jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0,
                                                   "xla_llvm_disable_expensive_passes": True,
                                                   "xla_cpu_use_fusion_emitters": False,
                                                   "xla_cpu_parallel_codegen_split_count": 1})

REGIMES = ("t1", "tiny", "gram", "mat")


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


# ----------------------------------------------------------------------------- the generator
def _is_mat(t, k, c):
    """ghost_passes' rule: materialise ``A^T D`` when ``T > 1`` and ``T (K + C) > K C``."""
    return t > 1 and t * (k + c) > k * c


def _dense_dims(r, regime):
    """``(T, K, C)`` in ``regime``; half the time exactly at the switch (``T (K + C) = K C``, ``K = C = 2T``:
    still Gram) or just past it (``C = 2T - 1``: materialised)."""
    if regime == "t1":
        return 1, int(r.integers(1, 7)), int(r.integers(1, 7))
    if regime in ("tiny", "gram"):
        t = int(r.integers(2, 5)) if regime == "tiny" else int(r.integers(5, 7))
        if r.random() < 0.5:
            return t, 2 * t, 2 * t
        return t, int(r.integers(2 * t, 2 * t + 4)), int(r.integers(2 * t, 2 * t + 4))
    t = int(r.integers(2, 7))
    if r.random() < 0.5:
        return t, 2 * t, 2 * t - 1
    return t, int(r.integers(1, 2 * t)), int(r.integers(1, 2 * t))  # harmonic mean of K, C < 2T: T (K+C) > K C


def _embed_dims(r, gram):
    """``(T, V, F)``: the Gram form iff ``V F > T^2``; at the switch half the time (``V F = T^2 + 1`` or ``<= T^2``)."""
    t, f = int(r.integers(2, 7)), int(r.integers(1, 5))
    if gram:
        v = -(-(t * t + 1) // f) + (0 if r.random() < 0.5 else int(r.integers(1, 4)))
    else:
        v = max(2, t * t // f - (0 if r.random() < 0.5 else int(r.integers(0, 2))))
        if v * f > t * t:  # F > T^2 / 2: shrink the width instead
            f = max(1, t * t // v)
    return t, v, f


def _conv_out(n, k, s, pad, dil):
    span = (k - 1) * dil + 1
    if pad == "SAME":
        return -(-n // s)
    lo, hi = (0, 0) if pad == "VALID" else pad
    return (n + lo + hi - span) // s + 1


def _conv_dims(r, regime, rank):
    """A convolution in ``regime`` (``P`` output positions, ``K = c_in prod(kernel)``, ``C = c_out``),
    by rejection sampling over sizes, strides, paddings and dilations."""
    for _ in range(10_000):
        kernel = tuple(int(r.integers(1, 4)) for _ in range(rank))
        strides = tuple(int(r.integers(1, 3)) for _ in range(rank))
        dil = tuple(int(r.integers(1, 3)) for _ in range(rank))
        pads = [("SAME", "VALID", (1, 0), (0, 2))[int(r.integers(0, 4))] for _ in range(rank)]
        if "SAME" in pads and pads.count("SAME") != rank:
            pads = ["VALID" if p == "SAME" else p for p in pads]
        size = tuple(int(r.integers(k * d, k * d + 5)) for k, d in zip(kernel, dil))
        c_in = int(r.integers(1, 6)) if rank == 1 else int(r.integers(1, 3))
        c_out = int(r.integers(1, 13))
        p = math.prod(_conv_out(n, k, s, pd, d) for n, k, s, pd, d in zip(size, kernel, strides, pads, dil))
        kk = c_in * math.prod(kernel)
        got = "t1" if p == 1 else "mat" if _is_mat(p, kk, c_out) else "tiny" if p <= 4 else "gram"
        if p >= 1 and got == regime:
            if all(isinstance(pd, str) for pd in pads):  # all SAME or all VALID
                padding = pads[0]
            else:  # flax wants pairs in every dimension once one is a pair
                padding = tuple((0, 0) if pd == "VALID" else pd for pd in pads)
            return dict(size=size, kernel=kernel, strides=strides, dil=dil, padding=padding, c_in=c_in, c_out=c_out)
    raise AssertionError(f"no convolution found in regime {regime}")


NORMS = (None, "layer", "rms", "group")


def draw_case(seed: int, keep=None) -> dict:
    """A random model: ``framework`` (linen on even seeds, NNX on odd), ``blocks`` (each one layer kind in one
    norm regime, rotating with the seed), data sizes and a flag for chunked convolution gradients.

    ``keep`` (default: all): the indices of the blocks to keep, and ``"mix"`` for the NNX layers of different
    kinds sharing a parameter (the fast sample's small models; the draws are those of the whole model)."""
    r = np.random.default_rng(4200 + seed)
    rot = lambda j: REGIMES[(seed // 2 + j) % 4]  # noqa: E731  (both frameworks see every regime)
    blocks = []
    t, k, c = _dense_dims(r, rot(0))
    blocks.append(("dense", "plain", t, k, c, True, bool(r.random() < 0.7), NORMS[int(r.integers(0, 4))]))
    t, k, c = _dense_dims(r, rot(1))
    variant = ("features", "axes", "plain")[int(r.integers(0, 3))]
    if variant == "axes" and k % 2:
        k += 1
    blocks.append(("dense", variant, t, k, c, False, bool(r.random() < 0.7), NORMS[int(r.integers(0, 4))]))
    t, k, c = _dense_dims(r, rot(2))
    blocks.append(("shared", t, k))                                           # one Dense called twice
    t, k, c = _dense_dims(r, rot(3))
    heads = 1 + int(r.integers(0, 2))
    blocks.append(("attn", max(t, 2), k, heads, max(1, c // heads)))
    for j, rank in enumerate((1, 2)):
        spec = _conv_dims(r, rot(j + 1), rank)
        groups = 2 if r.random() < 0.3 else 1
        if groups == 2:
            spec.update(c_in=2 * max(1, spec["c_in"] // 2), c_out=2 * max(1, spec["c_out"] // 2))
        blocks.append(("conv", rank, bool(r.random() < 0.5), groups, NORMS[int(r.integers(0, 4))],
                       tuple(sorted(spec.items()))))
    t, v, f = _embed_dims(r, gram=rot(0) != "mat")
    blocks.append(("embed", t, v, f, NORMS[int(r.integers(0, 3))]))
    # tied table: both sides ghost ("tied" form, cross term), or the embedding / read-out side materialised
    tied = ("tied", "tied", "embed-mat", "attend-mat")[(seed // 2) % 4]
    tq = int(r.integers(1, 4))
    t, v, f = _embed_dims(r, gram=tied != "embed-mat")
    if tied in ("tied", "embed-mat"):
        f = max(f, 2 * tq)  # attend not materialised: tq (F + V) <= F V
        v = max(v, 2 * tq) if tied == "tied" else max(2, min(v, t * t // f))
        if tied == "embed-mat":
            f = max(1, min(f, t * t // v))
            tq = 1  # T = 1 read-out: never materialised
    else:
        f, v = 1, max(v, 2)
        tq = max(tq, 2)  # tq (1 + V) > V: the read-out side materialised
    blocks.append(("tied", t, v, f, tq, bool(r.random() < 0.5)))
    tq, f, v = _dense_dims(r, rot(2))
    blocks.append(("readout", tq, f, max(v, 2)))                             # Embed used only by attend
    mixed = seed % 2 == 1 and (keep is None or "mix" in keep)
    if keep is not None:
        blocks = [b for j, b in enumerate(blocks) if j in keep]
    seq = max(b[2] if b[0] in ("dense", "attn") else b[1] if b[0] in ("shared", "embed", "tied", "readout")
              else 1 for b in blocks)
    seq = max([seq, 4 if mixed else 1] + [dict(b[5])["size"][0] for b in blocks if b[0] == "conv"])
    width = max([b[3] for b in blocks if b[0] == "dense"] + [b[2] for b in blocks if b[0] in ("shared", "attn")]
                + [b[2] for b in blocks if b[0] == "readout"]
                + [dict(b[5])["c_in"] if b[1] == 1 else dict(b[5])["size"][1] for b in blocks if b[0] == "conv"]
                + [3 if mixed else 1])
    return dict(seed=seed, framework="linen" if seed % 2 == 0 else "nnx", blocks=tuple(blocks), seq=seq,
                width=width, vocab_draw=3 + int(r.integers(0, 3)), chunked=seed % 4 == 1, mixed=mixed)


def _group(n):
    return 2 if n % 2 == 0 else 1


class _Ops:
    """The layers a block uses, by name: linen creates them inline (``nn.compact``); NNX creates them on the
    first (building) pass in ``__init__`` from the input's shape and looks them up afterwards. A name asked for
    twice is one layer called twice (linen: the module made once per ``__call__``)."""

    def __init__(self, owner, framework, rngs=None):
        self.owner, self.nnx, self.rngs = owner, framework == "nnx", rngs
        self.linen_mods = {}

    def _get(self, name, make_nnx, make_linen):
        if not self.nnx:
            if name not in self.linen_mods:
                self.linen_mods[name] = make_linen()
            return self.linen_mods[name]
        if self.rngs is not None and not hasattr(self.owner, name):
            setattr(self.owner, name, make_nnx(self.rngs))
        return getattr(self.owner, name)

    def dense(self, name, x, features, bias=True, nnx_cls=None):
        return self._get(name, lambda rg: nnx.Linear(x.shape[-1], features, use_bias=bias, rngs=rg, **F64),
                         lambda: nn.Dense(features, use_bias=bias, name=name))(x)

    def dense_general(self, name, x, features, axis, bias=True):
        axes = (axis,) if isinstance(axis, int) else axis
        in_f = tuple(x.shape[a] for a in axes)
        return self._get(name, lambda rg: nnx.LinearGeneral(in_f, features, axis=axis, use_bias=bias, rngs=rg, **F64),
                         lambda: nn.DenseGeneral(features, axis=axis, use_bias=bias, name=name))(x)

    def conv(self, name, x, c_out, kernel, strides, padding, dil, groups):
        kw = dict(strides=strides, padding=padding, kernel_dilation=dil, feature_group_count=groups)
        return self._get(name, lambda rg: nnx.Conv(x.shape[-1], c_out, kernel, rngs=rg, **kw, **F64),
                         lambda: nn.Conv(c_out, kernel, name=name, **kw))(x)

    def embed(self, name, v, f):
        return self._get(name, lambda rg: nnx.Embed(v, f, rngs=rg, **F64), lambda: nn.Embed(v, f, name=name))

    def norm(self, name, x, kind):
        if kind is None:
            return x
        n = x.shape[-1]
        if kind == "layer":
            return self._get(name, lambda rg: nnx.LayerNorm(n, rngs=rg, **F64), lambda: nn.LayerNorm(name=name))(x)
        if kind == "rms":
            return self._get(name, lambda rg: nnx.RMSNorm(n, rngs=rg, **F64), lambda: nn.RMSNorm(name=name))(x)
        return self._get(name, lambda rg: nnx.GroupNorm(n, num_groups=_group(n), rngs=rg, **F64),
                         lambda: nn.GroupNorm(num_groups=_group(n), name=name))(x)

    def attention(self, name, x, heads, head_dim):
        f = x.shape[-1]
        return self._get(name, lambda rg: nnx.MultiHeadAttention(heads, f, heads * head_dim, f, decode=False,
                                                                 rngs=rg, **F64),
                         lambda: nn.MultiHeadDotProductAttention(num_heads=heads, qkv_features=heads * head_dim,
                                                                 out_features=f, name=name))(x)

    def mixed_share(self, name, x, features):
        """NNX only: a ``Linear`` and a ``Linear`` with ``preferred_element_type`` (not ghost: materialised) sharing
        one kernel ``Variable`` (a leaf contributed to by a ghost and a materialised call)."""
        if self.rngs is not None and not hasattr(self.owner, name + "_a"):
            a = nnx.Linear(x.shape[-1], features, rngs=self.rngs, **F64)
            b = nnx.Linear(x.shape[-1], features, use_bias=False, preferred_element_type=jnp.float64,
                           rngs=self.rngs, **F64)
            b.kernel = a.kernel
            setattr(self.owner, name + "_a", a)
            setattr(self.owner, name + "_b", b)
        return getattr(self.owner, name + "_a")(x) + getattr(self.owner, name + "_b")(jnp.tanh(x))

    def mixed_conv_share(self, name, x, c_out):
        """NNX only: a ``Conv`` and a masked ``Conv`` (materialised) sharing one kernel ``Variable``."""
        if self.rngs is not None and not hasattr(self.owner, name + "_a"):
            a = nnx.Conv(x.shape[-1], c_out, (2,), rngs=self.rngs, **F64)
            b = nnx.Conv(x.shape[-1], c_out, (2,), use_bias=False, mask=np.ones((2, x.shape[-1], c_out)),
                         rngs=self.rngs, **F64)
            b.kernel = a.kernel
            setattr(self.owner, name + "_a", a)
            setattr(self.owner, name + "_b", b)
        return getattr(self.owner, name + "_a")(x) + getattr(self.owner, name + "_b")(jnp.tanh(x))


F64 = dict(param_dtype=jnp.float64)


def _pool(h):
    return jnp.tanh(h.reshape(-1, h.shape[-1]).mean(0)) if h.ndim > 1 else jnp.tanh(h)


def forward(ops: _Ops, case: dict, x):
    """One example ``x [seq, 1 + width]``: column 0 holds token ids, the rest features. Every block maps the
    example to a vector; a Dense head reads their concatenation."""
    tokens = x[:, 0].astype(jnp.int32)
    feats = x[:, 1:]
    outs = []
    for j, b in enumerate(case["blocks"]):
        n = f"b{j}"
        if b[0] == "dense":
            _, variant, t, k, c, fixed, bias, norm = b
            src = feats[:t, :k] if fixed else jnp.tanh(ops.dense(n + "_pre", feats[:t], k))
            if variant == "plain":
                h = ops.dense(n, src if t > 1 else src[0], c, bias)
            elif variant == "features":
                h = ops.dense_general(n, src, (c, 1), -1, bias).reshape(t, c)
            else:
                h = ops.dense_general(n, src.reshape(t, 2, k // 2), c, (-2, -1), bias)
            outs.append(_pool(ops.norm(n + "_norm", h.reshape(-1, c), norm)))
        elif b[0] == "shared":
            _, t, k = b
            h = ops.dense(n, feats[:t, :k], k)
            outs.append(_pool(ops.dense(n, jnp.tanh(h), k)))
        elif b[0] == "attn":
            _, t, k, heads, hd = b
            outs.append(_pool(ops.attention(n, feats[:t, :k], heads, hd)))
        elif b[0] == "conv":
            _, rank, fixed, groups, norm, spec = b
            s = dict(spec)
            if rank == 1:
                src = feats[:s["size"][0], :s["c_in"]]
                src = src if fixed and groups == 1 else jnp.tanh(ops.dense(n + "_pre", src, s["c_in"]))
            else:
                src = feats[:s["size"][0], :s["size"][1], None]
                src = src if fixed and groups == 1 else jnp.tanh(ops.dense(n + "_pre", src, s["c_in"]))
            h = ops.conv(n, src, s["c_out"], s["kernel"], s["strides"], s["padding"], s["dil"], groups)
            outs.append(_pool(ops.norm(n + "_norm", h, norm)))
        elif b[0] == "embed":
            _, t, v, f, norm = b
            outs.append(_pool(ops.norm(n + "_norm", ops.embed(n, v, f)(tokens[:t] % v), norm)))
        elif b[0] == "tied":
            _, t, v, f, tq, mix = b
            table = ops.embed(n, v, f)
            h = table(tokens[:t] % v)
            h = ops.norm(n + "_norm", h, "layer") if mix else h
            q = jnp.tanh(h[:tq] + h[-tq:])  # the read-out's input depends on the table (not fixed)
            outs.append(_pool(table.attend(q)))
        elif b[0] == "readout":
            _, tq, f, v = b
            q = jnp.tanh(ops.dense(n + "_pre", feats[:tq], f))
            outs.append(_pool(ops.embed(n, v, f).attend(q)))
    if case["mixed"]:  # layers of different kinds sharing one parameter
        outs.append(_pool(ops.mixed_share("mix", feats[:2, :3], 2)))
        outs.append(_pool(ops.mixed_conv_share("mixc", feats[:4, :2], 3)))
    return ops.dense("head", jnp.concatenate(outs), CLASSES)


class LinenNet(nn.Module):
    case: dict

    @nn.compact
    def __call__(self, x):
        return forward(_Ops(self, "linen"), self.case, x)


class NNXNet(nnx.Module):
    def __init__(self, case, x0, rngs):
        self.case = case
        forward(_Ops(self, "nnx", rngs), case, x0)  # builds the layers from the input shapes

    def __call__(self, x):
        return forward(_Ops(self, "nnx"), self.case, x)


def _ce(out, yi):
    return jax.nn.logsumexp(out) - out[yi]


def _random_params(shapes, seed):
    """Normal draws in the parameters' shapes (scaled by 1/sqrt(fan-in)): the identities hold for every value,
    and random norm scales/biases make those gradients non-trivial."""
    leaves, treedef = jax.tree_util.tree_flatten(shapes)
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_unflatten(treedef, [
        np.asarray(rng.normal(size=s.shape) / np.sqrt(max(1, math.prod(s.shape[:-1]))), np.float64)
        for s in leaves])


def build(case: dict):
    """``(loss_fn, params, x, y, mask)`` of a drawn case (the batch: 5 examples, padding rows 1 and 3 hold
    large garbage values; ``mask`` 0 there and 2 on row 4)."""
    r = np.random.default_rng(7 + case["seed"])
    x = r.normal(size=(BATCH, case["seq"], 1 + case["width"]))
    x[:, :, 0] = r.integers(0, case["vocab_draw"], size=(BATCH, case["seq"]))  # small id range: repeated ids
    x[[1, 3], :, 1:] *= 30.0
    x0 = x[0]  # numpy: an eager jax op would compile a program
    x = jnp.asarray(x, jnp.float64)
    y = jnp.asarray(r.integers(0, CLASSES, size=BATCH))
    mask = jnp.asarray([1.0, 0.0, 1.0, 0.0, 2.0], jnp.float64)
    if case["framework"] == "linen":
        module = LinenNet(case)
        params = _random_params(jax.eval_shape(module.init, jax.random.key(0), x0), case["seed"])
        return (lambda p, xi, yi: _ce(module.apply(p, xi), yi)), params, x, y, mask
    ctor = lambda: NNXNet(case, x0, nnx.Rngs(case["seed"]))  # noqa: E731
    graphdef, shapes, rest = nnx.split(nnx.eval_shape(ctor), nnx.Param, ...)
    model = nnx.merge(graphdef, _random_params(shapes, case["seed"]),
                      jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), rest))
    loss, params = gc.nnx_loss(model, lambda m, xi, yi: _ce(m(xi), yi))
    return loss, params, x, y, mask


# ----------------------------------------------------------------------------- which forms ran
class FormRecorder:
    """Wraps ghost_passes' norm routines (and the branches that feed them) and records, at trace time, which form
    each call took. Names: ``outer:t1|tiny|gram|mat`` (the four branches of ``_outer_sq_norms``), ``embed:gram``,
    ``tied:cross``, ``vec:<source>`` (materialised per-example gradients: ``layer`` (LayerNorm, grouped conv, ...),
    ``bias``, ``conv-whole``/``conv-chunked``, ``outer-plain``/``outer-transposed``/``outer-conv``, ``index``),
    ``shared:<kinds>`` (leaf groups of several calls), ``diff:<part>`` (DIFF2 difference factors),
    ``leaf:<kinds>:ghost|mat`` (a ghost layer kind's leaf and the side of its switch it took) and ``sum:<kind>``
    (the branch of the clipped sums' weight-gradient pass, ``ghost_passes._weight_grad``)."""

    def __init__(self, monkeypatch):
        self.hits = collections.Counter()
        mp = monkeypatch
        orig_outer, orig_embed, orig_dense_of = gp._outer_sq_norms, gp._embed_sq_norms, gp.dense_of
        orig_contrib, orig_chunk, orig_weight_grad = gp.layer_contribution, gp._conv_chunk, gp._weight_grad
        orig_parts, orig_sq, orig_diff = gc.layer_parts, gc.parts_sq_norms, gc.difference_parts

        def outer(a, d):
            t, k, c = a.shape[1], a.shape[2], d.shape[2]
            self.hits["outer:" + ("t1" if t == 1 else "mat" if _is_mat(t, k, c) else "tiny" if t <= 4 else "gram")] += 1
            return orig_outer(a, d)

        def embed(idx, d, v):
            self.hits["embed:gram"] += 1
            return orig_embed(idx, d, v)

        def dense_of(contrib, shape):
            kind = contrib[0]
            if kind == "outer":
                layout = contrib[3]
                self.hits["vec:outer-" + (layout if isinstance(layout, str) else "conv")] += 1
            elif kind in ("conv", "index"):
                self.hits["vec:" + kind] += 1
            return orig_dense_of(contrib, shape)

        def contribution(call, role, a, d):
            if call.kind == gp.MATERIALISED:
                self.hits["vec:layer"] += 1
            elif role == "bias":
                self.hits["vec:bias"] += 1
            return orig_contrib(call, role, a, d)

        def weight_grad(call, role, a, cot, shape):
            self.hits["sum:" + ("bias" if role == "bias" else call.kind)] += 1
            return orig_weight_grad(call, role, a, cot, shape)

        def chunk(batch, patch_floats):
            got = orig_chunk(batch, patch_floats)
            self.hits["vec:conv-chunked" if got < batch else "vec:conv-whole"] += 1
            return got

        def layer_parts(plan, leaves, inputs, deltas):
            out = orig_parts(plan, leaves, inputs, deltas)
            for leaf, contribs in plan.leaf_groups:
                kinds = sorted({plan.calls[k].kind for k, _ in contribs})
                if len(contribs) > 1 and any(role != "bias" for _, role in contribs):
                    self.hits["shared:" + "+".join(kinds)] += 1
                if all(role != "bias" for _, role in contribs) and gp.MATERIALISED not in kinds:
                    # each ghost layer kind on both sides of its Gram / materialised switch
                    self.hits["leaf:" + "+".join(kinds) + (":mat" if leaf in out[1] else ":ghost")] += 1
            return out

        def parts_sq(parts):
            for p in parts:
                if p[0] == "tied":
                    self.hits["tied:cross"] += 1
            return orig_sq(parts)

        def diff(parts, prev):
            for p in parts:
                self.hits["diff:" + p[0] + ("" if p[0] in ("vec", "tied") else ":fixed" if p[3] else ":dependent")] += 1
            return orig_diff(parts, prev)

        for mod, name, fn in ((gp, "_outer_sq_norms", outer), (gp, "_embed_sq_norms", embed),
                              (gp, "dense_of", dense_of),
                              (gc, "dense_of", dense_of), (gp, "layer_contribution", contribution),
                              (gc, "layer_contribution", contribution), (gp, "_conv_chunk", chunk), (gp, "_weight_grad", weight_grad),
                              (gc, "layer_parts", layer_parts), (gc, "parts_sq_norms", parts_sq),
                              (gc, "difference_parts", diff)):
            mp.setattr(mod, name, fn)


# Every form a norm can take. "diff:embed:dependent" is left out: embedding ids are data (integers), so their
# input never depends on the parameters.
REQUIRED = frozenset({
    "outer:t1", "outer:tiny", "outer:gram", "outer:mat", "embed:gram", "tied:cross",
    "vec:layer", "vec:bias", "vec:conv", "vec:conv-whole", "vec:conv-chunked", "vec:outer-plain",
    "vec:outer-transposed", "vec:outer-conv", "vec:index",
    "shared:dense", "shared:attend+embed", "shared:dense+materialised", "shared:conv+materialised",
    "diff:vec", "diff:outer:fixed", "diff:outer:dependent", "diff:embed:fixed", "diff:tied",
    # each ghost layer kind's leaves on both sides of its Gram / materialised switch (a Gram-form convolution
    # unfolds its patches with strides and paddings), and each branch of the clipped sums' weight-gradient pass
    "leaf:dense:ghost", "leaf:dense:mat", "leaf:conv:ghost", "leaf:conv:mat", "leaf:embed:ghost",
    "leaf:attend+embed:ghost", "leaf:attend+embed:mat",
    "sum:dense", "sum:conv", "sum:embed", "sum:attend", "sum:bias",
})
# The whole models also reach an embedding and a read-out (``attend`` only) on their own, on both sides of the
# switch: the same routines as the tied table's two sides (``_embed_sq_norms`` / ``dense_of`` index scatter,
# ``_outer_sq_norms`` / ``dense_of`` transposed), which the fast sample reaches through the tied table.
REQUIRED_SLOW = REQUIRED | {"leaf:embed:mat", "leaf:attend:ghost", "leaf:attend:mat"}


# ----------------------------------------------------------------------------- the comparison
def _perturbed(params):
    return jax.tree_util.tree_map(lambda p: p + 0.05 * jnp.sin(7.0 * p + 1.0), params)


def _programs(loss, x, y, mask, full=True):
    """Ghost and reference (vmap(grad)) quantities of one case, as one function of the parameters.

    ``full=True`` (slow): through the public entry points (``per_example_grad_norms``, ``ghost_clipped_sum``
    clipped and unclipped, ``clipped_difference_sum``), with NaN padding rows too. Each entry point plans and
    captures on its own, so this program traces the model 9 times (7 ghost passes and 2 ``vmap(grad)``) and
    compiles ~0.5 MB of HLO. ``full=False`` (the fast sample): the same quantities from one ghost pass per
    iterate (``layer_passes``, the carried-pass API DIFF2 runs on): the norm routines, the clipped and unclipped
    sums' weight-gradient pass and DIFF2's ``clipped_difference_from_passes`` are the same code, the model is
    traced 4 times instead of 9 and the program costs about half the CPU time (trace + compile; the run itself
    is ~0.1 s). The entry points' own lines (the plan, masked-row zeroing, the NaN guard) are covered by the slow
    cases, ``test_ghost_clipping.py`` and ``test_ghost_layers.py``."""

    def reference(p, q):
        # both iterates' per-example gradients in one vmap over the stacked parameters: one copy of the
        # model's backward pass in the program instead of two (a third of the fast sample's compile time)
        both = jax.vmap(lambda w: clipping.per_example_grads(loss, w, x, y))(
            jax.tree_util.tree_map(lambda u, v: jnp.stack([u, v]), p, q))
        grads = jax.tree_util.tree_map(lambda g: g[0], both)
        ref_norms = jax.vmap(clipping.global_norm)(grads)
        c = jnp.median(ref_norms[jnp.asarray(REAL_ROWS)])  # one real row clipped, one at the clip, one under
        diffs = jax.tree_util.tree_map(lambda g: g[0] - g[1], both)
        diff_norms = jax.vmap(clipping.global_norm)(diffs)
        # half the smallest norm of a real row: every real row clipped, so every difference norm enters the sum
        # (at the median of all rows the padding rows' large norms leave the real rows unclipped, and a dropped
        # term of a difference norm would not show)
        cd = 0.5 * jnp.min(jnp.where(mask != 0, diff_norms, jnp.inf))
        return grads, ref_norms, c, diffs, diff_norms, cd

    def run(p):
        q = _perturbed(p)  # inside the program: eager ops would each compile
        grads, ref_norms, c, diffs, diff_norms, cd = reference(p, q)
        pairs = {}
        if full:
            norms, _ = gc.per_example_grad_norms(loss, p, x, y, require_fast=True)
            ghost_clipped = gc.ghost_clipped_sum(loss, p, x, y, c, mask, require_fast=True).total
            # unclipped: the materialised leaves come from their own routine (no norms)
            ghost_unclipped = gc.ghost_clipped_sum(loss, p, x, y, None, mask, require_fast=True).total
            ghost_diff = gc.clipped_difference_sum(loss, p, q, x, y, cd, mask, require_fast=True).total
        else:
            plan = gc.make_plan(loss, p, x, y)
            assert plan.fast, plan.reason
            # both iterates' passes in one vmap over the stacked parameters (one copy of the pass in the program)
            both = jax.vmap(lambda w: gc.layer_passes(loss, w, x, y, plan))(
                jax.tree_util.tree_map(lambda u, v: jnp.stack([u, v]), p, q))
            passes, passes_q = (jax.tree_util.tree_map(lambda a, i=i: a[i], both) for i in (0, 1))
            leaves, rows = jax.tree_util.tree_leaves(p), mask != 0
            parts, mats = gc.layer_parts(plan, leaves, *passes)
            sq = gc.parts_sq_norms(parts)
            norms = jnp.sqrt(sq)
            ghost_clipped = gp.weighted_layer_sums(plan, p, *passes, gc._clip_coefficients(sq, c, mask), mats,
                                                   rows=rows)
            ghost_unclipped = gp.weighted_layer_sums(plan, p, *passes, mask,
                                                     gc._materialised_leaves(plan, leaves, *passes), rows=rows)
            ghost_diff = gc.clipped_difference_from_passes(plan, p, q, passes, passes_q, cd, mask)
        pairs["clipped sum"] = (clipping.clipped_sum(grads, c, mask).total, ghost_clipped)
        pairs["unclipped sum"] = (clipping.clipped_sum(grads, jnp.inf, mask).total, ghost_unclipped)
        pairs["DIFF2 clipped differences"] = (clipping.clipped_sum(diffs, cd, mask).total, ghost_diff)
        if full:
            # NaN in the padding rows: they contribute nothing (the reference: the rows as they were)
            x_nan = x.at[jnp.asarray([1, 3]), :, 1:].set(jnp.nan)
            pairs["clipped sum, NaN padding rows"] = (
                pairs["clipped sum"][0], gc.ghost_clipped_sum(loss, p, x_nan, y, c, mask, require_fast=True).total)
            # DIFF2 with NaN padding rows: the same guard as the clipped sum's
            pairs["DIFF2 clipped differences, NaN padding rows"] = (
                pairs["DIFF2 clipped differences"][0],
                gc.clipped_difference_sum(loss, p, q, x_nan, y, cd, mask, require_fast=True).total)
        return ref_norms, norms, diff_norms, pairs

    return run


def _assert_close_trees(ref, got, what):
    """Leaf by leaf, in numpy (eager jax ops would each compile a program)."""
    ref_leaves = [np.asarray(u) for u in jax.tree_util.tree_leaves(ref)]
    got_leaves = [np.asarray(v) for v in jax.tree_util.tree_leaves(got)]
    assert len(ref_leaves) == len(got_leaves), what
    total = math.sqrt(sum(float(np.sum(np.square(u))) for u in ref_leaves))
    assert total > 0, what
    for i, (u, v) in enumerate(zip(ref_leaves, got_leaves)):
        err, scale = float(np.linalg.norm((v - u).ravel())), float(np.linalg.norm(u.ravel()))
        assert err <= RTOL * (scale + 1e-3 * total), f"{what}: leaf {i} {u.shape}: |error| {err:.3g}, |ref| {scale:.3g}"


def run_case(seed: int, keep=None, full=True):
    """Draws, builds, traces (recording the norm forms) and runs case ``seed``: ``(forms, results)``."""
    case = draw_case(seed, keep)
    with pytest.MonkeyPatch.context() as mp, jax.enable_x64(True):
        if case["chunked"]:
            # a few examples per chunk of the materialised convolution gradients (the CPU cache rule would take
            # the whole batch at these sizes): the lax.map path with a zero-padded last chunk
            mp.setattr(gp, "_CONV_CHUNK_FLOATS", 1)
        rec = FormRecorder(mp)
        loss, params, x, y, mask = build(case)
        results = jax.device_get(jit(_programs(loss, x, y, mask, full))(params))
    return rec.hits, results


def forms_of(seed: int) -> collections.Counter:
    """The forms the ghost functions take on case ``seed`` (traced, not compiled)."""
    case = draw_case(seed)
    with pytest.MonkeyPatch.context() as mp, jax.enable_x64(True):
        if case["chunked"]:
            mp.setattr(gp, "_CONV_CHUNK_FLOATS", 1)
        rec = FormRecorder(mp)
        loss, params, x, y, mask = build(case)
        jax.eval_shape(_programs(loss, x, y, mask), params)
    return rec.hits


def check_results(seed: int, results):
    ref_norms, norms, diff_norms, pairs = results
    assert np.all(np.asarray(ref_norms) > 0) and np.all(np.asarray(diff_norms) > 0)
    np.testing.assert_allclose(np.asarray(norms), np.asarray(ref_norms), rtol=RTOL, atol=0,
                               err_msg=f"per-example norms, seed {seed}")
    for what, (ref, got) in pairs.items():
        _assert_close_trees(ref, got, f"{what}, seed {seed}")


# The default run's sample: two small models (a few of the drawn blocks) that together reach every form (asserted
# below); (seed, blocks kept). Seed 5 (NNX, chunked convolution gradients): a Dense (Gram), a 2-D convolution in
# the ghost (unfolded-patch) form with strides (2, 1), an embedding (Gram), a tied table materialised on the
# embedding side (index scatter, transposed read-out), the mixed-kind shares;
# seed 2 (linen): a Dense called twice, a materialised 2-D convolution (whole batch), a tied table with both sides
# ghost (cross term).
FAST_CASES = ((5, (0, 5, 6, 7, "mix")), (2, (2, 5, 7)))
SLOW_SEEDS = tuple(range(16))  # two ranges of 8 (each reaches every form)


@pytest.fixture(scope="module")
def fast_runs():
    return {seed: run_case(seed, keep, full=False) for seed, keep in FAST_CASES}


@pytest.mark.parametrize("seed", [s for s, _ in FAST_CASES])
def test_fast_sample_equals_vmap_grad(seed, fast_runs):
    check_results(seed, fast_runs[seed][1])


def test_generator_reaches_every_norm_form(fast_runs):
    """The default run's sample alone reaches every form (so a term dropped from any of them fails there)."""
    hits = collections.Counter()
    for forms, _ in fast_runs.values():
        hits.update(forms)
    assert REQUIRED <= set(hits), f"forms never reached: {sorted(REQUIRED - set(hits))}"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_ghost_norms_clipped_sums_and_differences_equal_vmap_grad(seed):
    """Whole drawn models (every block), every quantity."""
    check_results(seed, run_case(seed)[1])


@pytest.mark.slow
def test_every_seed_range_reaches_every_norm_form():
    """Each block rotates through the regimes with the seed: every 8 consecutive seeds reach every form."""
    for start in range(0, len(SLOW_SEEDS) - 7, 8):
        hits = collections.Counter()
        for seed in range(start, start + 8):
            hits.update(forms_of(seed))
        assert REQUIRED_SLOW <= set(hits), (start, sorted(REQUIRED_SLOW - set(hits)))


class _IdsNet(nn.Module):
    """Embedding ids the generator never draws: negative ids (flax's ``jnp.take`` wraps them, ``id + V``) into a
    Gram-form table (``V F = 15 > T^2 = 9``) and a materialised one (``V F = 4 <= 9``), and a one-row table,
    which flax broadcasts whatever the id (``ghost_passes._embed_index`` maps every id to row 0)."""

    @nn.compact
    def __call__(self, x):
        ids = x[:, 0].astype(jnp.int32)
        h = [nn.Embed(5, 3, name="gram")(ids), nn.Embed(2, 2, name="mat")(ids % 2 - 2 * (ids < 0)),
             nn.Embed(1, 4, name="one_row")(jnp.abs(ids))]
        return nn.Dense(CLASSES, name="head")(jnp.concatenate([jnp.tanh(v.mean(0)) for v in h]))


def test_negative_ids_and_a_one_row_table_equal_vmap_grad(monkeypatch):
    """Norms and clipped sums of embeddings looked up by negative ids (wrapped) and of a one-row table (every id
    is row 0) equal ``vmap(grad)``'s: an id mapped to the out-of-range row would drop its term from the norm."""
    r = np.random.default_rng(11)
    ids = np.array([[-5, 4, -1], [3, -3, -3], [0, -2, 2], [-4, 1, 4], [2, 2, -5]])  # -5..4: every row, both signs
    assert (ids < 0).any(axis=1).all() and (np.abs(ids) > 0).any(axis=1).all()
    x = np.concatenate([ids[..., None].astype(np.float64), r.normal(size=ids.shape + (1,))], -1)
    y = jnp.asarray(r.integers(0, CLASSES, size=len(ids)))
    x = jnp.asarray(x)
    mask = jnp.asarray([1.0, 0.0, 1.0, 1.0, 2.0], jnp.float64)
    module = _IdsNet()
    params = _random_params(jax.eval_shape(module.init, jax.random.key(0), np.asarray(x[0])), 11)
    loss = lambda p, xi, yi: _ce(module.apply(p, xi), yi)  # noqa: E731
    rec = FormRecorder(monkeypatch)
    seen = []
    orig_index = gp._embed_index
    monkeypatch.setattr(gp, "_embed_index", lambda call, idx: (seen.append(call.spec.num_embeddings),
                                                                orig_index(call, idx))[1])

    def run(p):
        grads = clipping.per_example_grads(loss, p, x, y)
        ref = jax.vmap(clipping.global_norm)(grads)
        c = jnp.median(ref)
        norms, _ = gc.per_example_grad_norms(loss, p, x, y, require_fast=True)
        return ref, norms, clipping.clipped_sum(grads, c, mask).total, \
            gc.ghost_clipped_sum(loss, p, x, y, c, mask, require_fast=True).total

    ref, norms, want, got = jax.device_get(jit(run)(params))
    assert {"embed:gram", "vec:index"} <= set(rec.hits) and 1 in seen, (rec.hits, seen)
    np.testing.assert_allclose(norms, ref, rtol=RTOL, atol=0)
    _assert_close_trees(want, got, "clipped sum")
