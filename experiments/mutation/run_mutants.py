"""Mutation testing of dpjax's privacy-critical code: one plausible privacy bug at a time, applied
to a scratch copy, against the test suite; reports which mutants the suite catches and which test
catches each.

    python experiments/mutation/run_mutants.py                          # targeted: each mutant vs its tests
    python experiments/mutation/run_mutants.py --full --timeout 900     # each vs the privacy suite, -x
    python experiments/mutation/run_mutants.py --only P01 N02 --full    # some mutants
    python experiments/mutation/run_mutants.py --list                   # the mutants

Every mutant is a ``(file, old snippet, new snippet)`` triple; ``old`` must occur exactly once in
the file (checked before anything runs). The scratch copy is ``--scratch`` (default
``/tmp/dpjax-mutants``): the working tree's files are copied once into ``base/`` and every mutant
runs in a hard-linked copy of it with only the mutated file rewritten, so the repository is never
touched. Tests run as ``python -m pytest <paths> -x -q -m "privacy and not slow"`` from the copy
(``PYTHONPATH`` = the copy, ``JAX_PLATFORMS=cpu``); ``--full`` runs every privacy-marked test of
the default suite (``FULL_PATHS``: ``tests/privacy`` first, where most mutants fail fast), the
default mode only the mutant's listed tests (cheap; for iterating). A JAX persistent compilation cache under the
scratch directory makes the unmutated programs compile once across all runs (a mutated program
has another cache key). An unmutated baseline runs first: if it fails, nothing is reported.

A mutant is *caught* when pytest exits with failures (the first failing test is named), *missed*
when the tests pass, and *timeout* when the per-mutant limit ran out (neither). Exit status 0 when
every mutant is caught. Results: a Markdown table on stdout and ``--json`` (optional).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: str
    kind: str  # accountant / truncated-mass / sampling / clipping / noise / step / report / user-level / band-mf
    file: str
    old: str
    new: str
    why: str
    targets: tuple[str, ...]


M = Mutant
PRIV = "tests/privacy"
GP, GHOST = "dpjax/primitives/ghost_passes.py", "tests/primitives/test_ghost_property.py"
BMF = "dpjax/accounting/band_mf.py"
MUTANTS: tuple[Mutant, ...] = (
    # -- accountants that drop a trailing partial epoch ------------------------------------------
    M("P01", "partial-epoch", "dpjax/accounting/schedules.py",
      "return -(-steps // blocks_per_epoch)", "return max(1, steps // blocks_per_epoch)",
      "one-pass/shuffle passes = floor(steps / blocks) (drops the last partial epoch)",
      (f"{PRIV}/test_accountants.py",)),
    M("P02", "partial-epoch", "dpjax/accounting/batch_clipping.py",
      "return -(-num_rounds // rounds_per_epoch), rounds_per_epoch",
      "return max(1, num_rounds // rounds_per_epoch), rounds_per_epoch",
      "DP-SGD-General shuffling: whole epochs only", (f"{PRIV}/test_accountants.py", f"{PRIV}/test_central_families.py")),
    M("P03", "partial-epoch", "dpjax/algorithms/diff2_parts.py", "return -(-num_rounds // t)",
      "return max(1, num_rounds // t)",
      "DIFF2: floor(R/T) restart rounds (the restart schedule the round noise part's events count)",
      (f"{PRIV}/test_accountants.py",)),
    M("P04", "partial-epoch", "dpjax/accounting/schedules.py", "blocks_per_epoch = dataset_size // batch_size",
      "blocks_per_epoch = -(-dataset_size // batch_size)",
      "one-pass/shuffle epochs of ceil(n/K) blocks (the partial block counted as one: fewer passes)",
      (f"{PRIV}/test_accountants.py",)),
    # -- delta that loses truncated mass ----------------------------------------------------------
    M("T01", "truncated-mass", "dpjax/accounting/fdp.py", "return min(1.0, total + rho)", "return min(1.0, total)",
      "mixture delta without the dropped mass", (f"{PRIV}/test_accountants.py",)),
    M("T02", "truncated-mass", "dpjax/accounting/batch_clipping.py",
      "dropped = max(0.0, 1.0 - float(result.sum())) + 1e-15", "dropped = 0.0",
      "convolution truncation reports no dropped mass", (f"{PRIV}/test_accountants.py",)),
    M("T03", "truncated-mass", "dpjax/accounting/batch_clipping.py",
      "eps = _fdp.mixture_epsilon(law.mu_law(sigma), delta, law.dropped)",
      "eps = _fdp.mixture_epsilon(law.mu_law(sigma), delta, 0.0)",
      "strong-exact report ignores the truncated mass", (f"{PRIV}/test_accountants.py",)),
    M("T04", "truncated-mass", "dpjax/accounting/shuffle.py", "float(np.dot(wc, d)) + dropped",
      "float(np.dot(wc, d))", "FMT shuffle delta without the binomial mass left out of its tables",
      (f"{PRIV}/test_accountants.py",)),
    M("T05", "truncated-mass", "dpjax/accounting/truncated_poisson.py",
      "        trunc = (1.0 + math.exp(eps)) * eta\n        if trunc >= d",
      "        trunc = 2.0 * eta\n        if trunc >= d",
      "truncated Poisson charges (1 + e^0) R Pr, not (1 + e^eps) R Pr: the eps found leaves the truncation unpaid",
      ("tests/primitives/test_sampling_truncated.py", f"{PRIV}/test_branches_truncated_poisson.py")),
    M("T06", "truncated-mass", "dpjax/accounting/truncated_poisson.py",
      "    trunc = (1.0 + math.exp(eps)) * eta\n    poisson_delta", "    trunc = eta\n    poisson_delta",
      "truncated Poisson report prints (and re-checks) R Pr without the (1 + e^eps) factor",
      (f"{PRIV}/test_branches_truncated_poisson.py",)),
    M("T07", "truncated-mass", "dpjax/accounting/sampling_bins.py",
      "charge = (1.0 + math.exp(min(epsilon_bound, 700.0))) * self.overflow_probability",
      "charge = self.overflow_probability",
      "a binned scheme's buffer overflow charged to delta without the (1 + e^eps) factor",
      (f"{PRIV}/test_branches_sampling_bins.py",)),
    M("T08", "truncated-mass", "dpjax/accounting/truncated_poisson.py",
      "        eta = run_truncation_mass(self.dataset_sizes, self.sampling_rate, plan.num_rounds)",
      "        eta = 0.0", "DP-SGD's default truncated Poisson selection certified without its truncation charge",
      ("tests/primitives/test_truncated_default.py",)),
    M("T09", "truncated-mass", "dpjax/primitives/sampling.py",
      "    start = jax.random.randint(key, (), 0, jnp.maximum(size, 1))",
      "    start = jnp.zeros((), jnp.int32)",
      "a cut Poisson batch keeps its lowest rows (no random start): the last records are kept less often",
      ("tests/primitives/test_truncated_default.py",)),
    # -- the sampler that runs ----------------------------------------------------------------------
    M("S01", "sampling", "dpjax/primitives/sampling.py",
      "return poisson_sample(key, size, n_max, self.inclusion_probability(size), self.padded_size(n_max))",
      "return poisson_sample(key, size, n_max, self.inclusion_probability(n_max), self.padded_size(n_max))",
      "Poisson draw at rate K / n_max on a padded silo (accountant: K / n)",
      (f"{PRIV}/test_samplers.py", f"{PRIV}/test_isrl_families.py")),
    M("S02", "sampling", "dpjax/primitives/sampling.py",
      "    chosen = (jax.random.uniform(key, (n_max,)) < rate) & (jnp.arange(n_max) < size)\n    if truncate:",
      "    chosen = jax.random.uniform(key, (n_max,)) < rate\n    if truncate:",
      "poisson_sample draws padded rows", (f"{PRIV}/test_samplers.py",)),
    M("S03", "sampling", "dpjax/primitives/sampling.py",
      "        rate = self.inclusion_probability(size)\n        chosen",
      "        rate = self.inclusion_probability(n_max)\n        chosen", "Poisson draw_weights at rate K / n_max",
      (f"{PRIV}/test_samplers.py",)),
    M("S04", "sampling", "dpjax/primitives/sampling.py", "start = round_index * self.batch_size",
      "start = round_index", "one-pass blocks overlap (records reused)",
      (f"{PRIV}/test_samplers.py", f"{PRIV}/test_isrl_families.py")),
    M("S05", "sampling", "dpjax/parts/selection.py",
      "idx = jax.lax.dynamic_slice(perms[epoch], (block * m * s,), (m * s,)).reshape(m, s)",
      "idx = jax.lax.dynamic_slice(perms[epoch], (block * s,), (m * s,)).reshape(m, s)",
      "shuffling blocks overlap inside an epoch", (f"{PRIV}/test_samplers.py", f"{PRIV}/test_central_families.py")),
    M("S06", "sampling", "dpjax/parts/selection.py",
      "mask = mask & (jnp.arange(idx.shape[1])[None, :] < ks[:, None])",
      "mask = mask & (jnp.arange(idx.shape[1])[None, :] <= ks[:, None])",
      "unbalanced silos keep K_i + 1 records (accounted K_i)", (f"{PRIV}/test_isrl_families.py",)),
    M("S07", "sampling", "dpjax/primitives/sampling.py",
      "    scores = jnp.where(jnp.arange(n_max) < size, scores, -jnp.inf)\n    _, idx",
      "    _, idx", "without-replacement indices include padded rows",
      (f"{PRIV}/test_samplers.py",)),
    M("S08", "sampling", "dpjax/primitives/sampling.py",
      "return self.batch_size / size if self.sampling_rate is None else self.sampling_rate", "return self.batch_size / size",
      "Poisson records drawn at K / n of the data's size despite the declared public rate (add/remove "
      "neighbours sampled at different rates)", (f"{PRIV}/test_poisson_rates.py",)),
    M("S09", "sampling", "dpjax/parts/cross_device.py",
      "return self.silos_per_round / num_silos if self.sampling_rate is None else self.sampling_rate",
      "return self.silos_per_round / num_silos",
      "DP-FedAvg's Poisson silos drawn at m / N of the data's number of users despite the declared rate",
      (f"{PRIV}/test_poisson_rates.py",)),
    # -- clipping -----------------------------------------------------------------------------------
    M("C01", "clipping", "dpjax/primitives/clipping.py",
      "scale = jnp.minimum(1.0, clip_norm / jnp.maximum(norms, _TINY))",
      "scale = jnp.minimum(1.0, 2.0 * clip_norm / jnp.maximum(norms, _TINY))",
      "clip to 2C (accountant: C)", (f"{PRIV}/test_isrl_families.py", f"{PRIV}/test_central_families.py")),
    M("C02", "clipping", "dpjax/parts/clients.py",
      "denominator = self.denominator(ctx.data.sizes)\n        if jnp.ndim(denominator) == 1:\n"
      "            denominator = batch.select(denominator)\n",
      "denominator = jnp.maximum(jnp.sum(weights.astype(jnp.float32), axis=-1), 1.0)\n",
      "minibatch mean divided by the realised (Poisson) batch size, not the public K (the noise follows it)",
      (f"{PRIV}/test_isrl_families.py",)),
    M("C03", "clipping", "dpjax/parts/clipping.py",
      "vectors = jax.vmap(clipping.clip_per_example, in_axes=(0, None))(units.vectors, clip_norm)",
      "vectors = jax.vmap(clipping.clip_per_example, in_axes=(0, None))(units.vectors, 1.0)",
      "shuffle SCO users' gradients projected onto the unit ball, not radius L (right only at L = 1)",
      (f"{PRIV}/test_protocol_families.py",)),
    M("C04", "clipping", "dpjax/algorithms/diff2_parts.py",
      "return Sensitive(total, radius, self.neighboring).divided(denominator)",
      "return Sensitive(total, radius, self.neighboring).divided(denominator - 1).replace(contribution_bound=radius / denominator)",
      "DIFF2 ClippedMean divides by n - 1 (sensitivity 2C/((n-1)P)), its bound says 2C/(nP)",
      (f"{PRIV}/test_protocol_families.py",)),
    M("C05", "clipping", "dpjax/reproduce/isrl/constructions.py",
      "return Sensitive(total, jnp.asarray(clip_norm, jnp.float32), self.neighboring), state",
      "return Sensitive(total, jnp.asarray(clip_norm, jnp.float32) / denominator, self.neighboring), state",
      "minibatch-average clipping (ClipMinibatchMean) bounded as per-example (C/K instead of C)",
      (f"{PRIV}/test_isrl_families.py",)),
    # -- ghost norms: one dropped term per norm form (an underestimated norm clips too little) ------------------
    M("G01", "ghost-norm", GP, "return jnp.sum(jnp.square(a[:, 0]), -1) * jnp.sum(jnp.square(d[:, 0]), -1)",
      "return jnp.sum(jnp.square(a[:, 0]), -1) * jnp.sum(jnp.square(d[:, 0, 1:]), -1)",
      "T = 1 dense norm ||a||^2 ||d||^2 drops the first output feature", (GHOST,)),
    M("G02", "ghost-norm", GP, "gram_a = jnp.sum(a[:, :, None, :] * a[:, None, :, :], axis=-1)",
      "gram_a = jnp.sum(a[:, :, None, :] * a[:, None, :, :], axis=-1) * jnp.eye(t)",
      "tiny Gram form (T <= 4) drops the cross-position terms t != s", (GHOST,)),
    M("G03", "ghost-norm", GP, 'gram_a = jnp.einsum("btk,bsk->bts", a, a, precision=HIGHEST_PRECISION)',
      'gram_a = jnp.einsum("btk,bsk->bts", a, a, precision=HIGHEST_PRECISION) * jnp.eye(t)',
      "Gram form (T > 4) drops the cross-position terms t != s", (GHOST,)),
    M("G04", "ghost-norm", GP,
      'return jnp.sum(jnp.square(jnp.einsum("btk,btc->bkc", a, d, precision=HIGHEST_PRECISION)), axis=(1, 2))',
      'return jnp.sum(jnp.square(jnp.einsum("btk,btc->bkc", a[:, 1:], d[:, 1:], precision=HIGHEST_PRECISION)), '
      'axis=(1, 2))', "materialised branch of _outer_sq_norms (DIFF2's stacked factors) drops a position", (GHOST,)),
    M("G05", "ghost-norm", GP, "same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] < v)",
      "same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] < v) & jnp.eye(idx.shape[1], dtype=bool)",
      "embedding Gram form drops the repeated-token terms (idx_t = idx_s, t != s)", (GHOST,)),
    M("G06", "ghost-norm", GP, "+ _outer_sq_norms(q, dv) + 2.0 * cross", "+ _outer_sq_norms(q, dv)",
      "tied embedding / read-out norm drops the cross term", (GHOST,)),
    M("G07", "ghost-norm", GP, "total = total + jnp.sum(jnp.square(p[1]), axis=-1)",
      "total = total + jnp.sum(jnp.square(p[1][:, 1:]), axis=-1)",
      "materialised leaves' norm drops the first coordinate", (GHOST,)),
    M("G08", "ghost-norm", GP, 'g = jnp.zeros((idx.shape[0], v, d.shape[-1]), d.dtype).at[b, idx].add(d, mode="drop")',
      'g = jnp.zeros((idx.shape[0], v, d.shape[-1]), d.dtype).at[b, idx].set(d, mode="drop")',
      "materialised embedding gradient: a repeated token overwrites instead of adding", (GHOST,)),
    M("G09", "ghost-norm", GP, 'g = jnp.einsum("btk,btc->bkc", a, d, precision=HIGHEST_PRECISION)\n    if layout',
      'g = jnp.einsum("btk,btc->bkc", a[:, 1:], d[:, 1:], precision=HIGHEST_PRECISION)\n    if layout',
      "materialised A^T D (dense, read-out, unfolded conv) drops the first position", (GHOST,)),
    M("G10", "ghost-norm", GP, 'return jnp.einsum("bkt,bct->bkc", p, dt, precision=HIGHEST_PRECISION)',
      'return jnp.einsum("bkt,bct->bkc", p[:, :, 1:], dt[:, :, 1:], precision=HIGHEST_PRECISION)',
      "per-example convolution kernel gradients (whole or chunked) drop the first output position", (GHOST,)),
    M("G11", "ghost-norm", GP, "return (\"vec\", jnp.sum(_flat_d(call, d), axis=1))",
      "return (\"vec\", _flat_d(call, d)[:, 0])", "bias gradient from the first position only", (GHOST,)),
    M("G12", "ghost-norm", GP, "a = jnp.concatenate([c[0][1] for c in cs], axis=1)\n"
      "            d = jnp.concatenate([c[0][2] for c in cs], axis=1)",
      "a = jnp.concatenate([c[0][1] for c in cs[:1]], axis=1)\n"
      "            d = jnp.concatenate([c[0][2] for c in cs[:1]], axis=1)",
      "a layer called twice: the Gram form stacks only its first call", (GHOST,)),
    M("G13", "ghost-norm", GP, "if part is None:  # the materialised gradient of this leaf: sum of its contributions\n"
      "            g = sum(dense_of(c, shape) for c, _ in cs)",
      "if part is None:  # the materialised gradient of this leaf: sum of its contributions\n"
      "            g = dense_of(cs[0][0], shape)",
      "a parameter shared by layers of different kinds: only the first call's gradient", (GHOST,)),
    M("G14", "ghost-norm", GP, "return (\"outer\", jnp.concatenate([p[1], p[1] - q[1]], 1), "
      "jnp.concatenate([p[2] - q[2], q[2]], 1), False)", "return (\"outer\", p[1], p[2] - q[2], False)",
      "DIFF2 difference of a layer with parameter-dependent input drops (A - A')^T D'", (GHOST,)),
    M("G15", "ghost-norm", GP, "return (\"embed\", p[1], p[2] - q[2], True, p[4])",
      "return (\"embed\", p[1], p[2], True, p[4])",
      "DIFF2 embedding difference drops the previous iterate's term", (GHOST,)),
    M("G16", "ghost-norm", GP, "return (\"tied\", diff(p[1], q[1]), diff(p[2], q[2]))",
      "return (\"tied\", diff(p[1], q[1]), p[2])", "DIFF2 tied table: read-out side not differenced", (GHOST,)),
    M("G17", "ghost-norm", GP, "    return p.reshape(batch, -1, p.shape[-1])\n",
      "    return p.reshape(batch, -1, p.shape[-1]).at[..., 0].set(0.0)\n",
      "unfolded convolution patches (Gram form and unfolded materialised form) drop the first patch feature",
      (GHOST,)),
    M("G18", "ghost-norm", GP, "out[leaf] = jnp.tensordot(coef.astype(g.dtype), weighted, axes=1)",
      "out[leaf] = jnp.tensordot(jnp.where(keep, 1.0, 0.0).astype(g.dtype), weighted, axes=1)",
      "clipped sum adds the materialised leaves' per-example gradients unclipped (weight 1, not the clip factor)",
      (GHOST,)),
    M("G19", "ghost-norm", GP, "idx = jnp.where(idx < 0, idx + v, idx)", "idx = jnp.where(idx < 0, v, idx)",
      "embedding ids: a negative id (flax wraps it) taken as out of range (its gradient term dropped)", (GHOST,)),
    M("G20", "ghost-norm", GP, "if v == 1:  # flax broadcasts the single row", "if v == 0:  # flax broadcasts the single row",
      "one-row embedding table: ids other than 0 (flax broadcasts the row) taken as out of range", (GHOST,)),
    M("G21", "ghost-norm", GP, 'return ("outer", p[1], p[2] - q[2], True)', 'return ("outer", p[1], p[2], True)',
      "DIFF2 difference of a data-input layer (A = A') drops D': the plain gradient's norm instead", (GHOST,)),
    M("G22", "ghost-norm", GP, 'return ("vec", p[1] - q[1])', 'return ("vec", p[1])',
      "DIFF2 difference of a materialised leaf drops the previous iterate's gradient", (GHOST,)),
    # -- ghost clipped sums: each branch of the weight-gradient pass (cotangents f_i delta_i) ---------------------
    M("G23", "ghost-sum", GP, 'return jnp.einsum("btk,btc->kc", a2, d2).reshape(shape)',
      'return jnp.einsum("btk,btc->kc", a2[:, 1:], d2[:, 1:]).reshape(shape)',
      "clipped sum of a dense layer drops the first position", (GHOST,)),
    M("G24", "ghost-sum", GP,
      'return jnp.einsum("btv,btf->vf", _flat_d(call, cot), a.reshape(a.shape[0], -1, a.shape[-1])).reshape(shape)',
      'return jnp.einsum("btv,btf->vf", _flat_d(call, cot)[:, 1:], a.reshape(a.shape[0], -1, a.shape[-1])[:, 1:])'
      '.reshape(shape)', "clipped sum of a read-out (Embed.attend) drops the first query position", (GHOST,)),
    M("G25", "ghost-sum", GP, '.at[idx].add(d2.reshape(-1, d2.shape[-1]), mode="drop")',
      '.at[idx].set(d2.reshape(-1, d2.shape[-1]), mode="drop")',
      "clipped sum of an embedding: a repeated id overwrites instead of adding", (GHOST,)),
    M("G26", "ghost-sum", GP, "return vjp(out)[0]", "return vjp(out.at[0].set(0.0))[0]",
      "clipped sum of a convolution drops the first example's output gradient", (GHOST,)),
    M("G27", "ghost-sum", GP, "return jnp.sum(_flat_d(call, cot), axis=(0, 1)).reshape(shape)",
      "return jnp.sum(_flat_d(call, cot)[:, 1:], axis=(0, 1)).reshape(shape)",
      "clipped sum of a bias drops the first position", (GHOST,)),
    # -- noise ----------------------------------------------------------------------------------------
    M("N01", "noise", "dpjax/parts/clipping.py",
      "clipped = Sensitive(total, jnp.asarray(clip_norm, jnp.float32), self.neighboring)",
      "clipped = Sensitive(total, jnp.asarray(1.0, jnp.float32), self.neighboring)",
      "ClipPerUnit's bound 1, not C: DP-SGD-General noise 2 sigma, right only at C = 1",
      (f"{PRIV}/test_central_families.py",)),
    M("N02", "noise", "dpjax/algorithms/diff2_parts.py",
      "return Sensitive(total, radius, self.neighboring).divided(denominator)",
      "return Sensitive(total, jnp.ones_like(radius), self.neighboring).divided(denominator)",
      "DIFF2's bound (hence noise) not scaled by the clip radius (right only at radius 1)",
      (f"{PRIV}/test_protocol_families.py",)),
    M("N03", "noise", "dpjax/parts/aggregators.py",
      "return bound / jnp.maximum(jnp.sum(available.astype(jnp.float32)), 1.0)",
      "return bound / jnp.maximum(jnp.sum(available.astype(jnp.float32)), 1.0) ** 2",
      "the mean's bound divided by the reports twice: DP-SGD's noise once on the pooled mean too small by N",
      (f"{PRIV}/test_central_families.py",)),
    M("N04", "noise", "dpjax/parts/privatizers.py",
      "        std = gaussian_std(z, message.sensitivity)\n        silo_keys = batch.select(",
      "        std = gaussian_std(z, message.sensitivity) / jnp.sqrt(batch.num_silos)\n        silo_keys = batch.select(",
      "per-silo noise divided by sqrt(N) (the aggregate's std put on each silo)",
      (f"{PRIV}/test_isrl_families.py",)),
    M("N05", "noise", "dpjax/engine/roles.py", 'return 2.0 * self.contribution_bound if self.neighboring == "replace-one" else self.contribution_bound',
      "return self.contribution_bound", "replace-one sensitivity C: DP-SGD-General with the add/remove noise C sigma",
      (f"{PRIV}/test_central_families.py",)),
    M("N06", "noise", "dpjax/primitives/noise.py",
      "noise = [_threefry_normal(words, int(o), leaf.shape) * jnp.asarray(std, dtype)",
      "noise = [_threefry_normal(words, int(o), leaf.shape) * jnp.asarray(std, dtype) ** 2",
      "multi-leaf noise scaled by the variance (right only at std = 1)", ("tests/primitives/test_noise.py",)),
    M("N07", "noise", "dpjax/parts/privatizers.py",
      "lambda g, z: g + std.astype(z.dtype) * z[step][None],",
      "lambda g, z: g + std.astype(z.dtype) * z[step][None] / z.shape[-1] ** 0.5,",
      "Local SGD per-step noise shrunk by the leaf size", (f"{PRIV}/test_isrl_families.py",)),
    M("N08", "noise", "dpjax/parts/users.py",
      'total = total + std * jax.random.normal(keys.stream_key(ctx.key, "server_noise"), total.shape)',
      "total = total", "pan-private AC-SA draws once per batch (Algorithm 6 draws twice)",
      (f"{PRIV}/test_protocol_families.py",)),
    M("N09", "noise", "dpjax/algorithms/accelerated.py",
      'ClipPerUnit("clip_norm", self.neighboring),', 'ClipPerUnit("clip_norm", "add-remove"),',
      "accelerated MB-SGD's clipper bound stated for add/remove (C/K) under replace-one: half the noise",
      (f"{PRIV}/test_isrl_families.py",)),
    M("N10", "noise", "dpjax/engine/program.py",
      "state, metrics = algorithm.step(state, data, keys.round_key(run_key, r))",
      "state, metrics = algorithm.step(state, data, keys.round_key(run_key, 0))",
      "every round reuses round 0's key (the same noise and batch each round)", (f"{PRIV}/test_isrl_families.py",)),
    M("N11", "noise", "dpjax/parts/privatizers.py",
      "silo_keys = batch.select(keys.silo_keys(noise_key, batch.num_silos))",
      "silo_keys = batch.select(jnp.stack([noise_key] * batch.num_silos))",
      "every silo draws the same noise (the silos' noises do not average out)", (f"{PRIV}/test_isrl_families.py",)),
    M("N12", "noise", "dpjax/engine/silo_blocks.py",
      "with keys.silo_window(num_silos, first + start), silo_sharding.local_block():",
      "with keys.silo_window(num_silos, start), silo_sharding.local_block():",
      "every device's silo blocks start at silo 0's keys (devices' silos share noise)",
      (f"{PRIV}/test_layout_draws.py",)),
    # -- privacy reports / schedules ------------------------------------------------------------------
    M("R01", "report", "dpjax/parts/selection.py", '1, "record-in-silo",\n                              releases_per_round=self.num_steps)',
      '1, "record-in-silo",\n                              releases_per_round=1)', "Local SGD report counts one release per round (right only at K = 1)",
      (f"{PRIV}/test_isrl_families.py", f"{PRIV}/test_accountants.py")),
    M("R02", "report", "dpjax/accounting/shuffle.py",
      "sampling = Sampling.WITHOUT_REPLACEMENT if k == 1 else sel.sampling",
      "sampling = Sampling.WITHOUT_REPLACEMENT", "shuffled local report: with-replacement K > 1 accounted as a K-subset",
      (f"{PRIV}/test_isrl_families.py",)),
    M("R03", "report", "dpjax/accounting/schedules.py",
      "factor = 2.0 if self.neighboring is Neighboring.REPLACE_ONE else 1.0", "factor = 1.0",
      "replace-one sensitivity s instead of 2 s", (f"{PRIV}/test_isrl_families.py",)),
    M("R04", "report", "dpjax/accounting/schedules.py",
      "inner = dpa.SampledWithoutReplacementDpEvent(dataset_size, batch_size, release)",
      "inner = dpa.SampledWithoutReplacementDpEvent(dataset_size, batch_size, dpa.GaussianDpEvent(2 * z))",
      "without-replacement RDP event with the add/remove multiplier", ("tests/accounting/test_tight.py",)),
    M("R05", "report", "dpjax/accounting/tight.py",
      "expo = a * (a - 1) * (2 * s * j[None, :]) ** 2 / (2 * sigma**2)",
      "expo = a * (a - 1) * (s * j[None, :]) ** 2 / (2 * sigma**2)",
      "multiplicity-conditioned RDP with sensitivity s per copy", ("tests/accounting/test_tight.py",)),
    M("R06", "report", "dpjax/parts/selection.py",
      "return SelectionEvent(self.scheme, tuple(int(n) for n in silo_sizes), ks, self.unit,",
      "return SelectionEvent(self.scheme, tuple(max(int(n) for n in silo_sizes) for _ in silo_sizes), ks, self.unit,",
      "ISRL-DP accounted at the largest silo (smaller sampling rate)", (f"{PRIV}/test_isrl_families.py",)),
    M("R07", "report", "dpjax/accounting/events.py",
      "return GaussianSchedule(noise_std=z * _unit_sensitivity(self.clip.neighboring), contribution_bound=1.0,",
      "return GaussianSchedule(noise_std=z * _unit_sensitivity(self.clip.neighboring), contribution_bound=0.5,",
      "the DP plan accounts half the clipper's contribution (DP-SGD: a mean's C/K for the sum at K = 2)",
      (f"{PRIV}/test_central_families.py",)),
    M("R08", "report", "dpjax/accounting/sco_transcript.py",
      "mus = [math.inf if z_min == 0 else math.sqrt(_calls(ph)) / z_min for ph",
      "mus = [math.inf if z_min == 0 else 1.0 / z_min for ph",
      "Gaussian transcript mu ignores the number of releases (a fully interactive phase's rounds)",
      (f"{PRIV}/test_protocol_families.py",)),
    M("R09", "report", "dpjax/algorithms/diff2_parts.py",
      "bound = jnp.max(jnp.asarray(messages.contribution_bound)) / count", "bound = jnp.min(jnp.asarray(messages.contribution_bound)) / count",
      "DIFF2's server-mean bound (hence noise) at the largest client", (f"{PRIV}/test_protocol_families.py",)),
    M("R10", "report", "dpjax/accounting/shuffle_sco.py", "sens = 2 * v.check_positive(\"lipschitz\", lipschitz)",
      "sens = v.check_positive(\"lipschitz\", lipschitz)", "pan-privacy with sensitivity L instead of 2L",
      (f"{PRIV}/test_protocol_families.py",)),
    M("R11", "report", "dpjax/accounting/events.py", "smallest = min(silos, key=lambda i: sel.dataset_sizes[i])",
      "smallest = max(silos, key=lambda i: sel.dataset_sizes[i])",
      "the DP plan's Gaussian rules at the largest silo: Poisson at K / n_max under replace-one",
      (f"{PRIV}/test_poisson_rates.py", f"{PRIV}/test_central_families.py", f"{PRIV}/test_isrl_families.py")),
    M("R12", "report", "dpjax/accounting/events.py",
      "group_size=self.group_size, sampling_rate=self.selection.sampling_rate)", "group_size=self.group_size)",
      "the accountant reads K / n_min of the data instead of the declared Poisson rate the sampler uses",
      (f"{PRIV}/test_poisson_rates.py",)),
    M("R13", "report", "dpjax/accounting/calibration.py",
      "        return refine_bracket(eps, target, lo, hi, rtol)[1]",
      "        return refine_bracket(eps, target, lo, hi, rtol)[0]",
      "calibration returns the bracket's infeasible low end (a noise level whose epsilon exceeds the target)",
      (f"{PRIV}/test_branches_gdp_calibration.py",)),
    M("R14", "report", "dpjax/accounting/calibration.py",
      "lo, hi = hi, hi * (1 + 1e-3 * 2**k)\n    else:", "lo, hi = hi, hi * (1 + 1e-3 * 2**k)\n    if False:",
      "coarse-then-fine calibration returns a scale the fine curve never met (no refusal)",
      (f"{PRIV}/test_branches_gdp_calibration.py",)),
    M("R15", "report", "dpjax/accounting/gdp.py", "    if f(lo) > 0:\n        return 0.0",
      "    if f(lo) > 0:\n        return lo",
      "gdp_mu claims mu = 1e-8 where no mu meets (eps, delta): a Gaussian sigma for an unreachable target",
      (f"{PRIV}/test_branches_gdp_calibration.py",)),
    M("R16", "report", "dpjax/accounting/gdp.py", "    if f(0.0) <= 0:\n        return 0.0",
      "    if f(0.0) <= 1:\n        return 0.0",
      "gdp_epsilon reports eps = 0 while delta(0) is up to e times the target delta",
      (f"{PRIV}/test_branches_gdp_calibration.py",)),
    M("R17", "report", "dpjax/accounting/api.py",
      "lip = schedule.contribution_bound * (k if k is not None else n)  # s = L/K",
      "lip = schedule.contribution_bound  # s = L/K",
      "ISRL paper accountant reads the mean's bound s as the per-example Lipschitz L = s K (eps K times too small)",
      (f"{PRIV}/test_branches_api.py",)),
    M("R18", "report", "dpjax/accounting/tight.py",
      "mu = math.sqrt(sum(s.passes * (g * s.sensitivity / s.noise_std) ** 2 for s in scheds))",
      "mu = math.sqrt(sum(s.passes * (s.sensitivity / s.noise_std) ** 2 for s in scheds))",
      "GDP/zCDP of deterministic schedules ignore the group size (a group of g accounted as one record)",
      (f"{PRIV}/test_branches_tight.py",)),
    M("R19", "report", "dpjax/accounting/tight.py",
      "factor = math.expm1(g * eps) / math.expm1(eps) if g * eps < 700 else math.inf",
      "factor = 1.0",
      "(eps, delta) group conversion drops the sum_{i<g} e^{i eps} factor on delta",
      (f"{PRIV}/test_branches_tight.py",)),
    M("R20", "report", "dpjax/accounting/privacy_spec.py",
      "worst = max(range(len(reports)), key=lambda i: reports[i].epsilon)",
      "worst = min(range(len(reports)), key=lambda i: reports[i].epsilon)",
      "ISRL-DP per-silo guarantee reports the most private silo's epsilon, not the worst",
      (f"{PRIV}/test_branches_privacy_spec.py",)),
    M("R21", "report", "dpjax/accounting/events.py",
      "return 2.0 if neighboring is Neighboring.REPLACE_ONE else 1.0", "return 1.0",
      "the DP plan's Gaussian schedules take the add/remove sensitivity under replace-one (noise std z, not 2 z)",
      (f"{PRIV}/test_branches_events_schedules.py",)),
    M("R22", "report", "dpjax/accounting/schedules.py",
      "f = 2.0 if neighboring is Neighboring.REPLACE_ONE else 1.0", "f = 1.0",
      "the Poisson DpEvent under replace-one states the multiplier per 2s, not per record's bound s (PLD: half the "
      "noise accounted)", ("tests/accounting/test_tight.py",)),
    # -- BandMF accounting ----------------------------------------------------------------------------
    M("B01", "band-mf", BMF, "return math.sqrt(-(-n // sep))", "return math.sqrt(n // sep)",
      "BandMF separated sensitivity counts floor(R / min_sep) participations (drops the last partial epoch)",
      (f"{PRIV}/test_branches_band_mf.py", "tests/accounting/test_band_mf.py")),
    M("B02", "band-mf", BMF,
      "sens = plan.group_size * separated_sensitivity(plan.num_rounds, min_sep, self.bands)",
      "sens = separated_sensitivity(plan.num_rounds, min_sep, self.bands)",
      "BandMF one-pass plan ignores the group size (a group of g records accounted as one)",
      (f"{PRIV}/test_branches_band_mf.py",)),
    M("B03", "band-mf", BMF, "amplified = BandMfAmplifiedPrivacy(z, max(sel.rates)",
      "amplified = BandMfAmplifiedPrivacy(z, min(sel.rates)",
      "amplified BandMF accounted at the smallest silo rate (the worst silo samples more)",
      (f"{PRIV}/test_branches_band_mf.py",)),
    M("B04", "band-mf", BMF, "return dp_accounting.SelfComposedDpEvent(inner, -(-n // b))",
      "return dp_accounting.SelfComposedDpEvent(inner, n // b)",
      "amplified BandMF composes floor(R / p) rounds per record (drops the partial cycle)",
      (f"{PRIV}/test_branches_band_mf.py",)),
    M("B05", "band-mf", BMF, "return gdp.gdp_epsilon(self.strategy_sensitivity / z, delta)",
      "return gdp.gdp_epsilon(1.0 / z, delta)",
      "BandMF's GDP accountant drops the strategy sensitivity (k participations accounted as one)",
      (f"{PRIV}/test_branches_band_mf.py",)),
    # -- user-level mechanisms ------------------------------------------------------------------------
    M("U01", "user-level", "dpjax/accounting/user_level.py", "float(min(1.0, pmf[0] + pmf[-1] + math.exp(params.eps_prime) * dg))",
      "float(min(1.0, pmf[0] + pmf[-1] + dg))",
      "Algorithm 1's certificate drops the e^eps' factor of the Gaussian step", (f"{PRIV}/test_user_level_mechanism.py",)),
    M("U04", "user-level", "dpjax/accounting/user_level.py", "float(pmf[0] + pmf[-1] + math.exp(params.eps_prime) * dg)",
      "float(pmf[0] + math.exp(params.eps_prime) * dg)",
      "user-level parameter check drops TDLap's upper tail p(2 kappa) from delta",
      (f"{PRIV}/test_user_level_mechanism.py",)),
    M("U02", "user-level", "dpjax/user_level/mechanisms.py",
      "noise = sigma * jax.random.normal(key_noise, centres.shape[1:], centres.dtype)",
      "noise = sigma**2 * jax.random.normal(key_noise, centres.shape[1:], centres.dtype)",
      "Algorithm 1 releases with the variance as std", (f"{PRIV}/test_user_level_mechanism.py",)),
    M("U03", "user-level", "dpjax/user_level/mechanisms.py", "bot = bottom[r1]", "bot = bottom[jnp.minimum(r1 + 1, 2 * kappa)]",
      "Algorithm 1 reads the stability table one entry off", (f"{PRIV}/test_user_level_mechanism.py",)),
)


def _check(mutants) -> None:
    for m in mutants:
        text = (REPO / m.file).read_text()
        if text.count(m.old) != 1:
            raise SystemExit(f"run_mutants: error: mutant {m.id}: the old snippet occurs {text.count(m.old)} times "
                             f"in {m.file} (needs exactly 1)")


def _copy_base(base: Path) -> None:
    if base.exists():
        shutil.rmtree(base)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.splitlines()
    for f in files:
        src = REPO / f
        if src.is_file() and (f.startswith(("dpjax/", "tests/")) or f in ("pyproject.toml", "README.md")):
            (base / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, base / f)


def _workdir(base: Path, work: Path, mutant: Mutant | None) -> None:
    if work.exists():
        shutil.rmtree(work)
    subprocess.run(["cp", "-al", str(base), str(work)], check=True)
    if mutant is not None:
        target = work / mutant.file
        text = target.read_text()
        target.unlink()  # break the hard link before writing
        target.write_text(text.replace(mutant.old, mutant.new))


_FAIL = re.compile(r"^(FAILED|ERROR) (\S+)", re.M)


def _run(work: Path, paths, timeout: float, cache: Path | None) -> tuple[str, str, float]:
    env = dict(os.environ, PYTHONPATH=str(work), JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    if cache is not None:
        env.update(JAX_COMPILATION_CACHE_DIR=str(cache), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    cmd = [sys.executable, "-m", "pytest", *paths, "-x", "-q", "-rfE", "-p", "no:cacheprovider",
           "-m", "privacy and not slow"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", "", time.perf_counter() - start
    seconds = time.perf_counter() - start
    out = proc.stdout + proc.stderr
    if proc.returncode == 0:
        return "missed", "", seconds
    if proc.returncode == 5:  # nothing collected
        return "error", "no tests collected", seconds
    found = _FAIL.search(out)
    return "caught", found.group(2) if found else f"pytest exit {proc.returncode}", seconds


# Every privacy-marked path of the default suite (tests/conftest.py), tests/privacy first: pytest runs
# the paths in this order and -x stops at the first failure.
FULL_PATHS = ("tests/privacy", "tests/pins", "tests/accounting", "tests/auditing", "tests/user_level", "tests/primitives/test_clipping.py",
              "tests/primitives/test_noise.py", "tests/primitives/test_sampling.py", "tests/primitives/test_ghost_clipping.py", "tests/engine/test_contract.py",
              "tests/algorithms", "tests/parts", "tests/reproduce/diff2", "tests/reproduce/shuffle_sco",
              "tests/reproduce/test_batch_clipping_privacy.py", "tests/reproduce/test_dpsgd_mnist_authors.py",
              "tests/reproduce/test_dpsgd_mnist_report.py")


# -- the rotating sample (CI's slow pass) ------------------------------------------------------------------
#: Seed of the ONE fixed order of the catalogue that every rotation slices: a rotation's sample is one chunk of K
#: consecutive mutants of it, so any ceil(N / K) consecutive rotations cover every mutant (a seed per rotation
#: would not). Adding a mutant reshuffles the order (N changes): a cycle in progress restarts, nothing is lost.
ORDER_SEED = 20261203


def rotation_order(ids) -> list[str]:
    """The catalogue's fixed shuffled order (``ORDER_SEED``, independent of the rotation)."""
    order = list(ids)
    random.Random(f"{ORDER_SEED}:{len(order)}").shuffle(order)
    return order


def rotating_sample(ids, k: int, rotation: int) -> tuple[list[str], int, int]:
    """Rotation ``rotation``'s sample of ``k`` of ``ids``: ``(sample, chunk, chunks)``. The fixed order is cut into
    ``chunks = ceil(N / k)`` chunks of ``k``; rotation r takes chunk ``r mod chunks`` (the last, shorter chunk filled
    up from the first), so consecutive rotations take consecutive chunks and every ``chunks`` of them cover all."""
    ids = list(ids)
    if not ids:
        raise ValueError("ids=[] must name at least one mutant")
    if k < 1:
        raise ValueError(f"k={k} must be >= 1")
    if rotation < 0:
        raise ValueError(f"rotation={rotation} must be >= 0")
    k = min(k, len(ids))
    chunks = math.ceil(len(ids) / k)
    chunk = rotation % chunks
    order = rotation_order(ids)
    picked = order[chunk * k:(chunk + 1) * k]
    return picked + order[:k - len(picked)], chunk, chunks


def resolve_rotation(spec: str, today: datetime.date | None = None) -> tuple[int, str]:
    """``--rotation``: an integer >= 0; ``date`` (default): days since 1970-01-01 UTC (one chunk a day: a CI run a
    day covers the catalogue in ``chunks`` days); ``commits``: the number of commits of HEAD (one chunk a commit).
    Returns ``(rotation, how it was derived)``."""
    if spec == "date":
        today = today or datetime.datetime.now(datetime.timezone.utc).date()
        return (today - datetime.date(1970, 1, 1)).days, f"UTC date {today.isoformat()}"
    if spec == "commits":
        out = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=REPO, capture_output=True, text=True)
        if out.returncode != 0:
            raise ValueError(f"rotation={spec!r}: git rev-list --count HEAD failed: {out.stderr.strip()}")
        return int(out.stdout), "commits of HEAD"
    try:
        value = int(spec)
    except ValueError:
        raise ValueError(f"rotation={spec!r} must be an integer >= 0, 'date' or 'commits'") from None
    if value < 0:
        raise ValueError(f"rotation={value} must be >= 0")
    return value, "given"


def run_in_budget(mutants, run_one, budget_s: float, clock=time.perf_counter):
    """Runs ``run_one(m)`` for the mutants IN ORDER while they fit ``budget_s`` seconds: before each mutant after the
    first, if the time spent plus the longest mutant so far would pass the budget, it and the rest are skipped (the
    order is the rotation's, so a skipped tail is the next thing to cover, never a reshuffled choice).
    Returns ``(results, skipped)``: ``results`` the ``(mutant, run_one's result, seconds)`` of those that ran."""
    results, start, longest = [], clock(), 0.0
    for i, m in enumerate(mutants):
        if results and (clock() - start) + longest > budget_s:
            return results, list(mutants[i:])
        t0 = clock()
        got = run_one(m)
        secs = clock() - t0
        longest = max(longest, secs)
        results.append((m, got, secs))
    return results, []


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true", help="run every privacy-marked test of the default suite (-x)")
    p.add_argument("--only", nargs="*", default=None, metavar="ID")
    p.add_argument("--sample", type=int, default=None, metavar="K",
                   help="run the rotation's K mutants only (CI's slow pass; see --rotation)")
    p.add_argument("--rotation", default="date", metavar="R",
                   help="which rotation --sample takes: an integer, 'date' (days since 1970, UTC; default) or "
                        "'commits' (git rev-list --count HEAD); printed")
    p.add_argument("--budget-s", type=float, default=math.inf, metavar="S",
                   help="stop starting mutants when the next would pass S seconds (estimate: the longest so far)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    p.add_argument("--scratch", default="/tmp/dpjax-mutants")
    p.add_argument("--no-cache", action="store_true", help="no JAX persistent compilation cache")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--list", action="store_true")
    args = p.parse_args(argv)
    mutants = [m for m in MUTANTS if args.only is None or m.id in args.only]
    if args.only is not None and len(mutants) != len(set(args.only)):
        unknown = sorted(set(args.only) - {m.id for m in MUTANTS})
        print(f"run_mutants: error: --only names unknown mutants: {' '.join(unknown)}", file=sys.stderr)
        return 2
    if args.sample is not None:
        try:
            rotation, how = resolve_rotation(args.rotation)
            ids, chunk, chunks = rotating_sample([m.id for m in mutants], args.sample, rotation)
        except ValueError as e:
            print(f"run_mutants: error: {e}", file=sys.stderr)
            return 2
        by_id = {m.id: m for m in mutants}
        mutants = [by_id[i] for i in ids]
        print(f"rotation {rotation} ({how}): chunk {chunk} of {chunks} (K = {len(ids)} of {len(by_id)} mutants; "
              f"every {chunks} consecutive rotations cover all): {' '.join(ids)}", flush=True)
    if args.list:
        for m in mutants:
            print(f"{m.id} [{m.kind}] {m.file}: {m.why}")
        return 0
    _check(mutants)
    scratch = Path(args.scratch)
    base, work = scratch / "base", scratch / "work"
    cache = None if args.no_cache else scratch / "jax-cache"
    _copy_base(base)
    all_paths = sorted({t for m in mutants for t in m.targets})
    if not args.no_baseline:
        _workdir(base, work, None)
        status, test, secs = _run(work, FULL_PATHS if args.full else all_paths, args.timeout * 2, cache)
        print(f"baseline (no mutant): {status} {test} ({secs:.0f} s)", flush=True)
        if status != "missed":
            print("run_mutants: error: the unmutated tests do not pass; no mutant can be judged", file=sys.stderr)
            return 2

    def run_one(m):
        _workdir(base, work, m)
        status, test, secs = _run(work, FULL_PATHS if args.full else m.targets, args.timeout, cache)
        print(f"{m.id} {status:7s} {secs:6.0f} s  {test or '-'}  ({m.why})", flush=True)
        return status, test, secs

    start = time.perf_counter()
    results, skipped = run_in_budget(mutants, run_one, args.budget_s)
    rows = [{"id": m.id, "kind": m.kind, "file": m.file, "why": m.why, "status": status, "caught_by": test,
             "seconds": round(secs, 1)} for m, (status, test, secs), _ in results]
    total = time.perf_counter() - start
    caught = sum(r["status"] == "caught" for r in rows)
    survivors = [r for r in rows if r["status"] != "caught"]
    print(f"\nmutation score: {caught}/{len(rows)} caught ({'full privacy suite' if args.full else 'targeted tests'}, "
          f"{total:.0f} s" + (f"; {len(skipped)} not run, over the {args.budget_s:.0f} s budget: "
                               f"{' '.join(m.id for m in skipped)}" if skipped else "") + ")")
    for r in survivors:
        print(f"SURVIVED ({r['status']}): {r['id']} [{r['kind']}] {r['file']}: {r['why']}")
    print("\n| mutant | class | file | change | caught by |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['id']} | {r['kind']} | `{r['file']}` | {r['why']} | "
              f"{('`' + r['caught_by'] + '`') if r['status'] == 'caught' else '**' + r['status'].upper() + '**'} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"mode": "full" if args.full else "targeted", "seconds": total,
                                               "caught": caught, "total": len(rows),
                                               "skipped": [m.id for m in skipped], "mutants": rows}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0 if not survivors else 1


if __name__ == "__main__":
    raise SystemExit(main())
