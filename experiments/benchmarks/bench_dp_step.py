"""One DP-SGD step on a neural network: ghost clipping vs non-private vs vmap(grad).

Issue #12 targets (measured side by side in one process; only ratios from one
run count on a shared machine): dpjax private / dpjax non-private <= 1.5x and
the private step >= 50x faster than the materialised ``vmap(grad)`` path.
Issue #27 targets for the transformer on CPU: private / non-private <= 1.25x
time and <= 1.2x peak memory.

Models (flax ``FlaxProblem``, softmax cross-entropy, batch 256, flat clipping
C = 1, noise std sigma C with sigma = 1, plain SGD update):

* ``mlp``: 784-256-10 with ReLU;
* ``cnn``: the small MNIST CNN of the batch-clipping reproduction protocol
  (two 5x5 convolutions with 16 and 32 channels, GroupNorm, ReLU and 2x2 max
  pooling after each, FC 32, FC 10);
* ``transformer``: ``dpjax.problems.TransformerClassifier`` (shared with the
  ghost-clipping tests), 2 pre-LayerNorm blocks (4-head attention, GELU MLP
  128), width 64, token + position embeddings, 32 tokens from a 1000-word
  vocabulary, mean pooling, 10 classes (133,770 parameters). Ghost plan: 2
  embeddings (Gram form), 13 dense layers (the attention projections are
  ``DenseGeneral``), 5 LayerNorms materialised.

Peak memory: XLA's buffer assignment of the compiled step
(``compiled.memory_analysis()``: arguments + outputs + temporaries - aliased).

Rows: ``private (ghost)`` = ``FlaxProblem.weighted_grad_sum`` with a clip norm
(ghost norms + one clipped weight-gradient pass) + Gaussian noise + update;
``non-private`` = gradient of the batch-mean loss + update; ``vmap(grad)`` =
``clipping.per_example_clipped_sum`` (the path every FlaxProblem used before)
+ noise + update; ``private without noise`` = the private step minus the noise
(the clipping's own cost); ``noise only`` times the Gaussian draw alone. Every
row prints its ratio to the non-private step and ``vmap(grad) / row``.

Optional rows: with ``--opacus`` the same shapes in Opacus (hooks and ghost
modes; the transformer's ``nn.MultiheadAttention`` becomes Opacus's
``DPMultiheadAttention``) if torch/opacus import, with ``--jax-privacy``
jax_privacy's ``clipped_grad`` if it imports. Neither is a dependency of
dpjax. Opacus rows are wall time (torch's idle threads spin, so its process CPU
time is not its cost) and run after, not interleaved with, the JAX rows. To
get them without touching the project's venv: ``python -m venv /tmp/torchvenv
&& /tmp/torchvenv/bin/pip install torch==2.13.0 opacus`` (the 2.13.0 CPU wheel;
opacus 1.6.0) and pass ``--torch-site /tmp/torchvenv/lib/python3.11/site-packages``
(appended to ``sys.path`` after this venv, so jax keeps its own numpy). On a
shared machine use ``--torch-threads 1``: with 2 threads and other jobs running,
torch's step was 5-10x slower.

Measured 2026-11-24 on the shared 2-core CPU (``--cpu-time``, median process
CPU ms per step, one run each; CNN from the first session, load ~15; MLP from
the second, load ~25, with jax_privacy 2.0.0 installed under /tmp):

| model | private (ghost) | non-private | vmap(grad) | private without noise | noise only | jax_privacy 2.0 clipped_grad |
|---|---|---|---|---|---|---|
| MLP 784-256-10 | 5.84 (2.15x) | 2.72 | 215 (79x) | 2.89 (1.06x) | 2.81 (1.03x) | 1651 (607x) |
| MNIST CNN + GroupNorm | 374 (1.41x) | 264 | 434 (1.64x) | - | 4.9 | 1072 |

MLP: the clipping itself costs 1.06x the non-private step (ghost norms + one
clipped weight-gradient pass); drawing the 203,530 Gaussians costs another
1.03x, so private/non-private is 2.15x and the 1.5x target is not reachable
with exact noise on this CPU: the threefry bits alone are ~95% of the draw and
every exact alternative measured (Box-Muller, packed words, rbg) is slower
(bench_noise.py). vmap(grad)/private = 37x (74.7x without the noise).
CNN: meets 1.5x; on CPU the materialised ``vmap(grad)`` is only 1.6x the
non-private step (convolutions dominate), so no method can be 50x faster than
it. Opacus could not be measured: opacus 1.6.0 and torch 2.15.0 download from
the registry, but its torch wheel is the CUDA build (``import torch`` fails
with ``libcudnn.so.9: cannot open shared object file`` without the ~GBs of
CUDA dependencies, whose install did not finish in 25 min on this machine) and
the CPU-wheel index is not reachable (``Name or service not known``).

Measured 2026-11-26 on the shared 2-core CPU with load average 9-12 (other
engineers' jobs), ``--repeats 10 --cpu-time``, one run; small repetition counts
to check the script, to be rerun on a quiet machine (issue #27):

| model | private (ghost) | non-private | vmap(grad) | private without noise | peak MiB private / non-private / vmap(grad) |
|---|---|---|---|---|---|
| MLP 784-256-10 | 5.28 (1.96x) | 2.69 | 187 (69.7x) | 2.63 (0.98x) | 6.95 / 2.83 / 205 |
| MNIST CNN + GroupNorm | 331 (1.31x) | 254 | 388 (1.53x) | 334 (1.32x) | 216 / 170 / 178 |
| transformer (2 layers) | 210 (1.18x) | 178 | 288 (1.62x) | 207 (1.16x) | 140 / 120 / 196 |

Transformer: 1.18x time and 1.17x peak memory (targets 1.25x / 1.2x); a
second, wall-time run gave 1.15x and 1.20x time in two repetitions (same
memory). Opacus 1.6 / torch 2.13 CPU on the same transformer, wall ms, 8
steps, ``--torch-threads 1``, load ~10: non-private 249, hooks 551 (2.2x),
ghost 463 (1.86x), against dpjax private 367 and non-private 318 in the same
run (dpjax's rows interleaved, Opacus's after them). The memory overhead is
the output gradients of every layer kept from the backward pass to the
clipped weight-gradient pass (book-keeping, Bu et al. 2023); an embedding's
per-example table is never materialised at this size (its Gram matrix is
``T^2 = 1024`` floats against ``V F = 64,000``).

Issue #25 (2026-11-26, shared 2-core CPU, load average 20-35 from other
engineers' jobs, so process CPU ms, one run each, rows interleaved):

* MLP, ``--models mlp --repeats 40 --cpu-time``: private 4.17 ms (1.57x),
  non-private 2.65, private without noise 3.12 (1.18x), noise only 1.37
  (0.52x), and the same private step with ``jax.random.normal``'s draw (the
  same numbers) 5.61 ms (2.12x). ``noise.gaussian_like`` now computes
  jax's Threefry normals bit for bit with the 20 rounds unrolled (jax lowers
  Threefry on CPU as a rolled 5-step loop, each step a kernel that writes and
  re-reads both state arrays) and draws each leaf in place from its counter
  range: the draw is ~2x cheaper (noise only 1.03x -> 0.52x of the non-private
  step). Two earlier runs of the same build: 1.55x, 1.67x. No noise draw is
  changed, so no reproduced number changes.
* CNN (a separate script with the same model, batch 256, 4 interleaved
  repetitions, process CPU ms): flax ``max_pool`` (``reduce_window``, gradient
  ``select_and_scatter``) private 373 / non-private 299; ``dpjax.problems.max_pool``
  (reshape + max, same values) 302 / 206, now the ``cnn`` model here
  (``cnn-flax-pool`` keeps the old one). Measured and rejected: convolutions as
  ``conv_general_dilated_patches`` + matmul (2,450-2,500 ms: the patches op is
  itself a convolution with an identity kernel), as 25 shifted slices + one
  Dense matmul (private 362 / non-private 337 against XLA's convolution's
  313 / 216 in the same run), ``--xla_cpu_use_xnnpack=true`` (285 / 206) and
  ``--xla_cpu_use_onednn=true`` (292 / 194) (separate runs: within the noise).
* Opacus rows (wall ms, ``--torch-threads 1``) were not comparable under this
  load (non-private MLP 63 ms, ghost 61 ms, hooks 4,183 ms); rerun on a quiet
  machine: ``--models mlp cnn --opacus --torch-site
  /tmp/torchvenv/lib/python3.11/site-packages --torch-threads 2``.

Issue #25 item 3, second session (2026-11-26 11:00-12:50 UTC, load average 11-24
from other engineers' jobs throughout, so process CPU ms from interleaved rows;
no quiet moment came):

* CNN GroupNorm: ``dpjax.problems.GroupNorm`` (flax's function and parameters,
  per-channel spatial sums first, output ``x mul + shift``) is now the ``cnn``
  model's normalisation (``cnn-flax-norm`` keeps flax's). Alone (first layer,
  forward + backward, vmapped per example) 16 vs 47.5 ms; in the whole step
  (interleaved, load 15) private 275 vs 287 ms, non-private 198 vs 194 ms (the
  non-private step is dominated by convolutions). On the dpsgd-mnist CNN (tanh,
  valid padding), with ``max_pool`` too: private 152 vs 192 ms, non-private 120
  vs 178 ms (load 21).
* CNN where the time goes (XLA profile of the steps; XLA:CPU runs convolutions
  and dots as YNNPACK fusions): non-private: the second convolution's weight
  gradient (a convolution with a 14x14 window, ~33 ms alone), its forward and
  input gradient (~10 ms each), the first layer's weight gradient with its
  transposes, GroupNorm/ReLU/pooling elementwise passes; private adds the ghost
  rule's patches (``conv_general_dilated_patches``, a grouped identity
  convolution: 78-92 ms alone for the second layer's 256 x 196 x 400 floats,
  10 ms for the first) and the per-example ``[256, 400, 32]`` gradients (~30 ms).
  Rejected here: the first convolution as shifted-slice patches times its kernel
  (``PatchConv``, materialised by the ghost plan: private 257/235 vs 262/267 ms
  in two runs, non-private unchanged), XLA flags (``--xla_cpu_use_xnnpack=false``,
  ``--xla_cpu_use_onednn=true``, ``--xla_cpu_prefer_vector_width=512``: all
  within +-5% of the default in two alternating runs each), patches as a stack of
  25 slices (128 vs 92 ms) or per-example gradients as 25 shifted per-example
  matmuls without patches (119 vs 122 ms). The patches and per-example products
  live in ``dpjax.primitives.ghost_passes``: that is where the private CNN step's
  remaining overhead is.
* MLP noise: the draw is fused into the update (one loop per leaf, both cores);
  ``private, noise apart`` puts it behind ``lax.optimization_barrier`` (same
  numbers) so the runtime may overlap it with the backward pass: the same
  process CPU time as the fused draw (3.83 vs 3.84, 4.21 vs 4.12 ms), and wall
  time under this load was not interpretable. ``--xla_cpu_prefer_vector_width=512``
  halves the Threefry bits alone (0.72 -> 0.36 ms for 203,530 words) but the
  normal only drops 1.02 -> 0.96 ms: ``erf_inv``'s ``log1p`` (0.29 ms alone) and
  the rest of the transform dominate, and a cheaper transform changes the numbers.
  Private / non-private (process CPU, 40 interleaved repetitions): 1.60x, 1.54x,
  1.53x, 1.42x at default flags; 1.45x, 1.58x with the flag; at 12:22 UTC (load 11.5-11.8)
  1.48x, ``noise apart`` 1.43x.

Final side-by-side run of that session (``--models mlp cnn --repeats 20 --opacus
--torch-site ... --torch-threads 1``, wall ms, 12:14 UTC, load average 13.9 at
the start, 13.3 at the end; the run before it, at load 21-22, gave MLP 13.7 /
7.8 (1.75x) against Opacus ghost 24.5 and CNN 829 / 529 (1.57x) against 742):

| model | private (ghost) | non-private | ratio | noise apart | Opacus ghost | Opacus hooks | torch non-private |
|---|---|---|---|---|---|---|---|
| MLP 784-256-10 | 7.51 | 3.63 | 2.07x | 7.64 | 18.9 | 700 | 6.31 |
| MNIST CNN + GroupNorm | 817 | 539 | 1.52x | 811 | 503 | 616 | 238 |

Not met under this load: the MLP's 1.5x in wall time (process CPU: 1.42-1.60x) and
the CNN ahead of Opacus ghost (XLA's step uses both cores, torch's one thread is
hurt less by 13-24 other runnable jobs; the process CPU time of dpjax's private
CNN step was 235-275 ms against Opacus ghost's 150 ms wall on the quiet machine
of the issue).

Issue #25 item 3, third session (2026-11-26 14:17-16:10 UTC; the issue's quiet-machine baseline at
14:17, wall ms, median of 30: dpjax private 188.9, non-private 115.2, private without noise 186.3,
vmap(grad) 258.8; Opacus non-private 66.6, ghost 131.4, hooks 152.9). The CNN's remaining private
overhead was the materialised per-example gradients of the two convolutions (the ghost plan's cost
rule materialises both: ``T (K + C) > K C``, T = 784 / 196 positions, K = 25 / 400, C = 16 / 32).

* Kept: ``ghost_passes._conv_per_example_grads`` unfolds the patches as strided slices of the
  padded input in ``[b, window c_in, positions]`` layout and multiplies them with the output gradient
  ``[b, c_out, positions]`` a few examples at a time (``lax.map`` over chunks of ~2^18 patch floats =
  1 MiB, 3 examples for the second convolution, 13 for the first), so each chunk's patches are still
  in cache when multiplied. Same numbers to float rounding (float64 tests against vmap(grad), chunks of
  1 and 2 forced in a test). Whole step, ``private without noise``, process CPU ms, interleaved in one
  process (12 repetitions, load 6): ``conv_general_dilated_patches`` over the whole batch 236.0;
  chunked with 2^17 / 2^18 / 2^19 floats per chunk 150.3 / 149.5 / 153.2; the same slices unchunked
  218.5; non-private 152.4. Peak memory of the private step 169 -> 91 MiB (the 80 MB of patches are
  never formed). Where it went (XLA profile): unfolding the whole batch writes and re-reads 80 MB
  through main memory, and XLA:CPU does not fuse the 25 slices into their ``concatenate``
  (each slice is its own fusion, then a separate copy), so every element crossed memory 4 times.
* Book-keeping (Bu et al. 2023) was already the algorithm: one forward and one backward pass to the
  layer outputs (no weight gradients in it), then per layer the clipped sum directly: ``coef . G`` for
  materialised layers, the weight-gradient op with ``coef``-scaled output gradients for ghost layers.
  No second backward pass runs. Mixed ghost / materialised is likewise per layer already (the rule
  above); both convolutions stay materialised.
* Rejected, per-example gradients of the second convolution alone (input ``[256, 14, 14, 16]``,
  process CPU ms at load 2-5; the batch's weight gradient, i.e. the non-private op, 31.9):
  ``conv_general_dilated_patches`` + ``[B, P, K] x [B, P, C]`` product 113; Rochette et al.'s one
  grouped convolution (batch as feature groups, ``feature_group_count=B``) 132; ``vmap`` of the
  weight-gradient convolution (JAX lowers it to the same grouped convolution) 125; 25 shifted
  per-example products without patches 95; an identity-kernel ungrouped convolution on the
  ``B c_in`` planes as patches 133-139. Chunked slices: 26.6 (chunks of 4), 27.4 (16), 45.4 (64),
  109 unchunked; first convolution 16.3 -> 8.6. Layout of the product on the same patches:
  ``[B, P, K] x [B, P, C]`` 31.4 vs ``[B, K, P] x [B, C, P]`` 19.5 (kept).
* Rejected inside the whole step (``private without noise``, process CPU ms, interleaved, load 8-10;
  all unchunked): stacked slices 197.9 vs the patches op 220.6; "wide" rows (contiguous 1-D shifts of
  the flattened padded image, 29 % more positions) 228.7; the slices written into one buffer with
  ``dynamic_update_slice`` 232.7; 25 shifted per-example products 217.2. With chunking (load 8):
  chunks dividing the batch (no padding row) 143.8, the first convolution unchunked 154.7 or by the
  patches op 154.9, against 144.3 for the kept rule (within the noise; kept the simplest). The chunks
  as a Python-unrolled loop (independent ops XLA could run on both cores, no zero-initialised scan
  output) instead of ``lax.map``: 186.3 vs 136.8 (non-private 135.9; load 7.6) and 23.8 s to compile
  instead of 5.8 s.
* Not the cause: glibc's allocator. ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` raised
  so that freed 80 MB buffers are reused cut a standalone slices kernel from 72 to 30 ms (page faults
  of a fresh output buffer) but left the whole private step unchanged (232.7 vs 235.2 ms).
* Rejected: the scan's stacked output is zero-initialised (a 13 MB ``broadcast`` per step, 21 ms in a
  profile at load 9); computing only the norms in one loop and the clipped sum in a second loop
  (patches unfolded twice) avoids it but costs more: second convolution alone, norms + clipped sum,
  42.8 vs 29.3 ms process CPU (load 7.6). dtype: float32 throughout (a
  lower-precision product would not be exact). The noise is already fused into the update
  (``private, noise apart`` gives the same time).

Exactness: float64 tests against vmap(grad) (tests/primitives/test_ghost_*.py, all seeds with ``-m slow``);
on this benchmark's CNN in float32 the clipped sum agrees with ``clipping.per_example_clipped_sum`` to
7.0e-7 / 7.6e-7 / 7.8e-7 of the largest entry (C = 1, the median norm, 1e9), the same as before the
change, and the norms to 2.8e-7. dpsgd-mnist (only IC-SS uses per-example clipping; ``run_protocol(...,
quick=True, only=("IC-SS",))`` on this change and on 90b9696, 15:16-15:23 UTC): the three grid points
of the first grid and the selected configuration (eta = 1, C = 1: 0.8150) are bit-identical, as is the
privacy table; the two edge-extension runs with the largest steps moved (eta = 3.33, C = 1: 0.6780 vs
0.6845; eta = 1, C = 10: 0.2130 vs 0.2715, largest relative change 0.215): training at those step sizes
amplifies the 1e-7 rounding differences over 120 rounds. The pipeline expectation's tiny IC grid moved
by 1.09e-7 (re-recorded); batch clipping is bit-identical.

Side by side after the change (``--models cnn``, old = 90b9696 run right after, 14:47-14:56 UTC,
load average 7-9.6 from other engineers' jobs; Opacus rows are wall time with torch's default
2 threads, which suffer most from the load, so the Opacus comparison here is only indicative):

| build | private (ghost) | non-private | private without noise | vmap(grad) | Opacus ghost | Opacus non-private |
|---|---|---|---|---|---|---|
| this change, wall ms | 288 | 291 | 282 | 558 | 882 | 472 |
| 90b9696, wall ms | 349 | 219 | 342 | 442 | 1,759 | 323 |
| this change, process CPU ms | 154 (1.02x) | 151 | 154 | 301 | - | - |
| 90b9696, process CPU ms | 235 (1.59x) | 147 | 230 | 295 | - | - |
| this change, wall ms, 15:24-15:26 (load 5.6-8.7) | 208 | 204 | 210 | 424 | 1,179 | 493 |
| 90b9696, wall ms, 15:27-15:29 (load 8.7-8.9) | 330 | 202 | 327 | 428 | 821 | 447 |

With ``--torch-threads 1`` (15:02-15:04, load 5.7-6.6, this change only): dpjax private 227, non-private
227, Opacus ghost 348, torch non-private 96 (the README's table).

Usage: ``python experiments/benchmarks/bench_dp_step.py [--repeats 30] [--models mlp cnn transformer] [--batch 256] [--cpu-time]
[--opacus --torch-site PATH --torch-threads 1]``
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from dpjax.primitives import clipping, noise  # noqa: E402
from dpjax.primitives import ghost_clipping  # noqa: E402
from dpjax.problems import FlaxProblem, GroupNorm, max_pool, transformer_problem  # noqa: E402

CLIP, SIGMA, LR = 1.0, 1.0, 0.1


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.Dense(256)(x)))


class MnistCNN(nn.Module):
    """Batch-clipping reproduction protocol's MNIST CNN (GroupNorm instead of batch norm).

    ``flax_pool``: pool with ``flax.linen.max_pool`` (``reduce_window``, whose
    gradient is XLA's slow ``select_and_scatter`` on CPU) instead of
    ``dpjax.problems.max_pool`` (reshape + max; same values). ``flax_norm``:
    ``flax.linen.GroupNorm`` instead of ``dpjax.problems.GroupNorm`` (same
    function up to float reordering, spatial sums first)."""

    flax_pool: bool = False
    flax_norm: bool = False

    @nn.compact
    def __call__(self, x):
        x = x.reshape(1, 28, 28, 1)
        norm = nn.GroupNorm if self.flax_norm else GroupNorm
        for ch in (16, 32):
            x = nn.Conv(ch, (5, 5))(x)
            x = nn.relu(norm(num_groups=4)(x))
            x = nn.max_pool(x, (2, 2), (2, 2)) if self.flax_pool else max_pool(x, (2, 2))
        x = nn.relu(nn.Dense(32)(x.reshape(-1)))
        return nn.Dense(10)(x)


MODELS = {"mlp": (MLP, (784,)), "cnn": (MnistCNN, (784,)),
          "cnn-flax-norm": (functools.partial(MnistCNN, flax_norm=True), (784,)),
          "cnn-flax-pool": (functools.partial(MnistCNN, flax_pool=True, flax_norm=True), (784,)),
          "transformer": (None, None)}
NO_TORCH_TWIN = ("cnn-flax-norm", "cnn-flax-pool")  # the same torch model as "cnn": Opacus rows only once

# 2-layer pre-LN transformer classifier (dpjax.problems.TransformerClassifier): 32 tokens
# from a 1000-word vocabulary, width 64, 4 heads, MLP 128, 10 classes.
TRANSFORMER = dict(seq_len=32, vocab_size=1000, width=64, num_heads=4, mlp_width=128, num_layers=2, num_classes=10)


def make_problem(name, batch, key):
    """``(problem, x, y)``: the model's ``FlaxProblem`` and one batch of inputs."""
    k1, k2 = jax.random.split(key)
    y = jax.random.randint(k2, (batch,), 0, 10)
    if name == "transformer":
        problem = transformer_problem(**TRANSFORMER)
        x = jax.random.randint(k1, (batch, TRANSFORMER["seq_len"]), 0, TRANSFORMER["vocab_size"])
        return problem, x, y
    cls, shape = MODELS[name]
    return FlaxProblem(cls(), shape, "softmax"), jax.random.normal(k1, (batch,) + shape), y


def make_steps(problem):
    def update(params, g):
        return jax.tree_util.tree_map(lambda p, gi: p - LR * gi, params, g)

    def private(params, x, y, key):
        total = problem.weighted_grad_sum(params, x, y, jnp.ones(x.shape[0]), CLIP)
        noisy = noise.add_gaussian_noise(key, total, SIGMA * CLIP)
        return update(params, jax.tree_util.tree_map(lambda t: t / x.shape[0], noisy))

    def nonprivate(params, x, y, key):
        def mean_loss(p):
            return jnp.mean(jax.vmap(problem.loss, in_axes=(None, 0, 0))(p, x, y))
        return update(params, jax.grad(mean_loss)(params))

    def vmap_grad(params, x, y, key):
        total = clipping.per_example_clipped_sum(problem.loss, params, x, y, CLIP).total
        noisy = noise.add_gaussian_noise(key, total, SIGMA * CLIP)
        return update(params, jax.tree_util.tree_map(lambda t: t / x.shape[0], noisy))

    def clip_only(params, x, y, key):
        total = problem.weighted_grad_sum(params, x, y, jnp.ones(x.shape[0]), CLIP)
        return update(params, jax.tree_util.tree_map(lambda t: t / x.shape[0], total))

    def private_barrier(params, x, y, key):
        """The private step with the noise behind ``lax.optimization_barrier`` (same numbers): XLA
        cannot fuse the draw into the update, so it is a separate kernel that depends on the key
        alone and the runtime may run it on the other core while the gradient is computed."""
        z = jax.lax.optimization_barrier(noise.gaussian_like(key, params, SIGMA * CLIP))
        total = problem.weighted_grad_sum(params, x, y, jnp.ones(x.shape[0]), CLIP)
        noisy = jax.tree_util.tree_map(jnp.add, total, z)
        return update(params, jax.tree_util.tree_map(lambda t: t / x.shape[0], noisy))

    def noise_only(params, x, y, key):
        return noise.gaussian_like(key, params, SIGMA * CLIP)

    def private_jax_normal(params, x, y, key):
        """The private step with the noise of ``jax.random.normal`` (the same numbers; jax's rolled
        Threefry lowering on CPU): what ``noise.gaussian_like`` drew before it unrolled Threefry."""
        total = problem.weighted_grad_sum(params, x, y, jnp.ones(x.shape[0]), CLIP)
        leaves, treedef = jax.tree_util.tree_flatten(total)
        sizes = [leaf.size for leaf in leaves]
        flat = jax.random.normal(key, (sum(sizes),)) * (SIGMA * CLIP)
        z = [p.reshape(leaf.shape) for p, leaf in zip(jnp.split(flat, list(itertools.accumulate(sizes))[:-1]), leaves)]
        noisy = jax.tree_util.tree_map(jnp.add, total, jax.tree_util.tree_unflatten(treedef, z))
        return update(params, jax.tree_util.tree_map(lambda t: t / x.shape[0], noisy))

    return {"private (ghost)": private, "non-private": nonprivate, "vmap(grad)": vmap_grad,
            "private without noise": clip_only, "noise only": noise_only, "private, noise apart": private_barrier,
            "private, jax.random.normal noise": private_jax_normal}


CLOCK = time.perf_counter


def peak_bytes(compiled) -> int:
    """Peak memory of one compiled step from XLA's buffer assignment
    (``compiled.memory_analysis()``: arguments + outputs + temporaries - aliased;
    its ``peak_memory_in_bytes`` is not filled in by the CPU backend)."""
    m = compiled.memory_analysis()
    return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes


def time_interleaved(fns: dict, args, repeats: dict) -> tuple[dict, dict]:
    """Median ms per call and XLA's peak bytes per step; the functions take turns,
    so load changes on a shared machine hit all of them alike. ``--cpu-time``
    times with the process's CPU time (all threads) instead of wall time:
    steadier on a machine other jobs load, at the price of counting
    idle-spinning threads."""
    compiled = {label: jax.jit(fn).lower(*args).compile() for label, fn in fns.items()}
    memory = {label: peak_bytes(c) for label, c in compiled.items()}
    for f in compiled.values():
        jax.block_until_ready(f(*args))
    times = {label: [] for label in fns}
    for rep in range(max(repeats.values())):
        for label, f in compiled.items():
            if rep < repeats[label]:
                t0 = CLOCK()
                jax.block_until_ready(f(*args))
                times[label].append(CLOCK() - t0)
    return {label: statistics.median(ts) * 1e3 for label, ts in times.items()}, memory


def bench_opacus(name, batch, repeats, threads=None):
    """Opacus 1.6 hooks / ghost DP-SGD steps on the same shapes (optional; wall ms
    always: torch's idle worker threads spin, so its process CPU time is not its cost)."""
    import torch
    from opacus import PrivacyEngine
    from opacus.utils.batch_memory_manager import BatchMemoryManager  # noqa: F401

    torch.set_num_threads(threads or len(os.sched_getaffinity(0)))
    x = torch.randn(batch, 784)
    if name == "transformer":
        make = lambda: _torch_transformer(torch)  # noqa: E731
        x = torch.randint(0, TRANSFORMER["vocab_size"], (batch, TRANSFORMER["seq_len"]))
    elif name == "mlp":
        make = lambda: torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))  # noqa: E731
    else:
        make = lambda: torch.nn.Sequential(  # noqa: E731
            torch.nn.Unflatten(1, (1, 28, 28)),
            torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.GroupNorm(4, 16), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.GroupNorm(4, 32), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(32 * 7 * 7, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    y = torch.randint(0, 10, (batch,))
    data = torch.utils.data.TensorDataset(x, y)
    out = {}
    for mode in ("non-private", "hooks", "ghost"):
        model = make()
        if mode != "non-private":
            from opacus.validators import ModuleValidator

            model = ModuleValidator.fix(model)  # nn.MultiheadAttention -> DPMultiheadAttention (Linear layers)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        loader = torch.utils.data.DataLoader(data, batch_size=batch)
        crit = torch.nn.CrossEntropyLoss()
        if mode != "non-private":
            engine = PrivacyEngine()
            kw = dict(module=model, optimizer=opt, data_loader=loader, noise_multiplier=SIGMA, max_grad_norm=CLIP,
                      poisson_sampling=False)
            if mode == "ghost":
                model, opt, crit, loader = engine.make_private(criterion=crit, grad_sample_mode="ghost", **kw)
            else:
                model, opt, loader = engine.make_private(grad_sample_mode="hooks", **kw)

        def step():
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()

        for _ in range(3):
            step()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        out[f"opacus {mode}"] = statistics.median(times) * 1e3
    return out


def _torch_transformer(torch):
    """The same transformer in PyTorch (pre-LN blocks, learned positions, mean pooling)."""
    nn_ = torch.nn
    t = TRANSFORMER

    class Block(nn_.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn_.LayerNorm(t["width"]), nn_.LayerNorm(t["width"])
            self.attn = nn_.MultiheadAttention(t["width"], t["num_heads"], batch_first=True)
            self.fc1, self.fc2 = nn_.Linear(t["width"], t["mlp_width"]), nn_.Linear(t["mlp_width"], t["width"])

        def forward(self, h):
            a = self.ln1(h)
            h = h + self.attn(a, a, a, need_weights=False)[0]
            return h + self.fc2(nn_.functional.gelu(self.fc1(self.ln2(h))))

    class Transformer(nn_.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn_.Embedding(t["vocab_size"], t["width"])
            self.pos = nn_.Embedding(t["seq_len"], t["width"])
            self.blocks = nn_.ModuleList([Block() for _ in range(t["num_layers"])])
            self.ln, self.out = nn_.LayerNorm(t["width"]), nn_.Linear(t["width"], t["num_classes"])

        def forward(self, tokens):
            # batch-first and contiguous, as Opacus's per-sample embedding norms need
            positions = torch.arange(tokens.shape[1]).repeat(tokens.shape[0], 1)
            h = self.tok(tokens) + self.pos(positions)
            for block in self.blocks:
                h = block(h)
            return self.out(self.ln(h).mean(1))

    for cls in (Block, Transformer):  # Opacus deep-copies the model by pickling: make the classes importable
        cls.__qualname__ = cls.__name__ = f"_Torch{cls.__name__}"
        globals()[cls.__name__] = cls
    return Transformer()


def jax_privacy_step(problem):
    """jax_privacy 2.0 ``clipped_grad`` (vmap of value_and_grad, clip, sum) + the same noise and update."""
    from jax_privacy import clipped_grad  # type: ignore

    def loss(p, xb, yb):  # keep_batch_dim: each call sees a batch of one example
        return problem.loss(p, xb[0], yb[0])

    grad_fn = clipped_grad(loss, l2_clip_norm=CLIP, batch_argnums=(1, 2))

    def step(p, xb, yb, key):
        noisy = noise.add_gaussian_noise(key, grad_fn(p, xb, yb), SIGMA * CLIP)
        return jax.tree_util.tree_map(lambda a, b: a - LR * b / xb.shape[0], p, noisy)

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--opacus", action="store_true")
    ap.add_argument("--jax-privacy", action="store_true")
    ap.add_argument("--cpu-time", action="store_true", help="time with process CPU time, not wall time")
    ap.add_argument("--torch-site", default=None,
                    help="site-packages of a separate venv holding torch/opacus, appended to sys.path "
                         "(after this venv's, so jax's numpy stays first)")
    ap.add_argument("--torch-threads", type=int, default=None, help="torch intra-op threads (default: all cores)")
    args = ap.parse_args()
    if args.torch_site:
        sys.path.append(args.torch_site)
    global CLOCK
    CLOCK = time.process_time if args.cpu_time else time.perf_counter
    print(f"device: {jax.devices()[0].device_kind} ({len(os.sched_getaffinity(0))} CPU cores usable), batch {args.batch}, median of {args.repeats} steps "
          f"({'process CPU' if args.cpu_time else 'wall'} ms)")
    for name in args.models:
        key = jax.random.key(0)
        problem, x, y = make_problem(name, args.batch, jax.random.fold_in(key, 1))
        params = problem.init_params(key)
        nkey = jax.random.key(3)
        steps = make_steps(problem)
        if args.jax_privacy:
            try:
                steps["jax_privacy clipped_grad"] = jax_privacy_step(problem)
            except ImportError as err:
                print(f"  (jax_privacy not available: {err})")
        slow = ("vmap(grad)", "jax_privacy clipped_grad")
        reps = {label: args.repeats if label not in slow else max(3, args.repeats // 5) for label in steps}
        rows, memory = time_interleaved(steps, (params, x, y, nkey), reps)
        if args.opacus and name not in NO_TORCH_TWIN:
            try:
                rows.update(bench_opacus(name, args.batch, args.repeats, args.torch_threads))
            except ImportError as err:
                print(f"  (opacus not available: {err})")
            except Exception as err:  # noqa: BLE001  (a failing optional row must not lose the others)
                print(f"  (opacus failed on {name}: {type(err).__name__}: {err})")
        n_params = sum(p.size for p in jax.tree_util.tree_leaves(params))
        base, base_mem = rows["non-private"], memory["non-private"]
        print(f"\n{name} ({n_params} params)")
        plan = ghost_clipping.make_plan(problem.loss, params, x, y)
        kinds = [c.kind for c in plan.calls]
        print(f"  ghost plan: {'fast' if plan.fast else 'FALLBACK ' + plan.reason}; "
              + ", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)))
        print(f"  {'step':28s} {'ms':>9s} {'/ non-private':>14s} {'vmap(grad) /':>13s} {'peak MiB':>9s} {'/ non-private':>14s}")
        for label, ms in rows.items():
            mem = f"{memory[label] / 2**20:9.2f} {memory[label] / base_mem:13.2f}x" if label in memory else ""
            print(f"  {label:28s} {ms:9.3f} {ms / base:13.2f}x {rows['vmap(grad)'] / ms:12.1f}x {mem}")
        print(f"  private/non-private = {rows['private (ghost)'] / base:.2f}x time, "
              f"{memory['private (ghost)'] / base_mem:.2f}x peak memory; private without noise/non-private = "
              f"{rows['private without noise'] / base:.2f}x time; "
              f"vmap(grad)/private = {rows['vmap(grad)'] / rows['private (ghost)']:.1f}x", flush=True)


if __name__ == "__main__":
    main()
