"""P_vec (Cheu, Joseph, Mao & Peng, ICLR 2022, Algorithms 1-2) as parts: ``PvecRandomizer`` (every party's local
randomizers and the shuffler; a privatizer) and ``PvecAnalyzer`` (the analyzer on the shuffled messages, divided by the
public number of vectors; an aggregator). One implementation serves both protocols that use P_vec:

* ISRL-DP's one-pass silos (``SdpOnePassAccelerated``, ISRL-DP Algorithm 6): every silo randomizes its K
  clipped records; one (g, b, p) for every round (``per_round=False``; privacy event
  ``dpjax.accounting.pvec.PvecEvent``, composed over the rounds by the plan); the analyzer sums the
  available silos' reports and divides by ``M_r K`` (``batch_size``); keys ``"silo-streams"``.
* the shuffle-private SCO protocols' user stream (``ShuffleSgd``, ``ShuffleAcsa``): one silo holding
  the round's users; (g, b, p) per round (``per_round=True``: ``PvecParams`` of ``[T]`` arrays, privacy
  event ``dpjax.accounting.sco_transcript.PvecTranscriptEvent`` over the users' windows); the analyzer
  divides by the public ``batch_r`` (``batch_field``); keys ``"noise-stream"``.

The two differ in their key derivation (``KEY_SCHEMES``), kept as a parameter so that both keep the
draws their results were produced with, bit for bit.

Every party holds clipped vectors of norm <= L (the clipper's bound) and each of them sends ``g + b`` one-bit messages
per coordinate: the unary randomized rounding ``xhat`` of its coordinate and ``Bin(b, p)`` noise bits; the shuffler
hides who sent what, and the analyzer counts the ones per coordinate. Two simulations of the same protocol:

* ``"counts"`` (fast, default): since a sum of independent ``Bin(b, p)`` is ``Bin(m b, p)``, a party's m vectors'
  messages are simulated as one centred count per coordinate (equal in distribution to m separate randomizers; the
  binomial is drawn exactly on the host, ``shuffle_protocols.centred_binomial``). More than ``2^24 / max_granularity``
  vectors are summed in chunks so rounded sums stay exact in float32; a traced g above ``max_granularity`` makes the
  round NaN rather than silently inexact. ``trial_groups`` groups of ``b`` trials per vector represent trial counts
  beyond int32.
* ``"bits"``: every one-bit message is materialised, a uniform permutation shuffles them, the analyzer counts the ones
  per label (static buffers ``bit_buffer = (g_max, b_max)``; tests and small demonstrations).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from dpjax import keys
from dpjax.accounting import sco_transcript
from dpjax.accounting.pvec import PvecEvent
from dpjax.accounting.shuffle import ShuffleEvent
from dpjax.engine.roles import Batch, Context, Sensitive, Stateless
from dpjax.parts.aggregators import min_available
from dpjax.primitives import shuffle_protocols

_EXACT_F32 = 2**24
LEVELS = ("counts", "bits")


def round_params(pvec: shuffle_protocols.PvecParams, r) -> shuffle_protocols.PvecParams:
    """Round ``r``'s (g, b, p) of per-round parameters."""
    return shuffle_protocols.PvecParams(pvec.granularity[r], pvec.trials[r], pvec.probability[r])


# -- key derivation ------------------------------------------------------------------------------
def split_per_chunk(key, num_chunks: int):
    """``num_chunks`` rounding keys split from ``key`` (the user stream's derivation)."""
    return jax.random.split(key, num_chunks)


def own_key_if_one_chunk(key, num_chunks: int):
    """``key`` itself when one chunk holds every vector (always for ISRL-DP's silos, whose family
    checks ``K max_granularity < 2^24``), else ``num_chunks`` keys split from it."""
    return key[None] if num_chunks == 1 else jax.random.split(key, num_chunks)


@dataclasses.dataclass(frozen=True)
class SiloStreamKeys:
    """Keys ``"silo-streams"``: per silo, its key of the round's ``"rounding"``, ``"noise"`` (and, at the
    bit level, ``"shuffle"``) streams (the computed silos' rows, ``batch.select``)."""

    chunk_keys = staticmethod(own_key_if_one_chunk)

    def party_keys(self, ctx: Context, batch: Batch, level: str) -> tuple:
        streams = ("rounding", "noise") + (("shuffle",) if level == "bits" else ())
        return tuple(batch.select(keys.silo_keys(keys.stream_key(ctx.key, s), batch.num_silos)) for s in streams)


@dataclasses.dataclass(frozen=True)
class NoiseStreamKeys:
    """Keys ``"noise-stream"``: one party (the round's users); the round's ``"noise"`` stream key split
    into the rounding and binomial keys (three keys, the third the shuffler's, at the bit level), the
    rounding key split once per chunk: the draws of the protocol simulation the shuffle-SCO
    reproductions were run with (``pvec_chunked_sum`` / ``pvec_bits_sum`` on one key)."""

    chunk_keys = staticmethod(split_per_chunk)

    def party_keys(self, ctx: Context, batch: Batch, level: str) -> tuple:
        if batch.num_silos != 1:
            raise ValueError(f"keys='noise-stream' derives one party's keys; the batch has {batch.num_silos} silos")
        split = jax.random.split(keys.stream_key(ctx.key, "noise"), 3 if level == "bits" else 2)
        return tuple(k[None] for k in split)


KEY_SCHEMES = {"silo-streams": SiloStreamKeys(), "noise-stream": NoiseStreamKeys()}


# -- the protocol ------------------------------------------------------------------------------------
def pvec_counts(round_key, noise_key, vectors, mask, params, bound, max_granularity: int, trial_groups: int = 1,
                chunk_keys=split_per_chunk):
    """The count-level reports of ``vectors [m, d]`` (rows with ``mask`` False send nothing): per
    coordinate the rounded sum minus its public offset m g/2 (exact int32 -> float32 in chunks of
    < 2^24/max_granularity vectors, rounded with ``chunk_keys(round_key, chunks)``) plus
    ``Bin(m trial_groups b, p)`` centred (``noise_key``). Each vector runs ``trial_groups * b`` trials
    (``trial_groups > 1`` represents trial counts above the int32 range of ``PvecParams.trials``)."""
    m, d = vectors.shape
    chunk = max(1, min(m, (_EXACT_F32 - 1) // max_granularity))
    pad = -m % chunk
    vec = jnp.pad(vectors, ((0, pad), (0, 0))).reshape(-1, chunk, d)
    msk = jnp.pad(mask, (0, pad)).reshape(-1, chunk)
    g = jnp.asarray(params.granularity, jnp.float32)

    def chunk_report(k, v, mk):
        xhat = jnp.where(mk[:, None], shuffle_protocols.randomized_rounding(k, v, params, bound), 0)
        return jnp.sum(xhat, axis=0).astype(jnp.float32) - jnp.sum(mk).astype(jnp.float32) * (g / 2.0)

    rounded = jnp.sum(jax.vmap(chunk_report)(chunk_keys(round_key, vec.shape[0]), vec, msk), axis=0)
    count = jnp.sum(mask.astype(jnp.int32)) * trial_groups
    total = rounded + shuffle_protocols.centred_binomial(noise_key, count, params, d)
    return jnp.where(jnp.asarray(params.granularity) <= max_granularity, total, jnp.nan)


def pvec_bit_counts(round_key, noise_key, shuffle_key, vectors, mask, params, bound, g_max: int, b_max: int):
    """Bit level: every vector sends g + b labelled one-bit messages per coordinate (``xhat`` ones then
    ``Bin(b, p)`` ones, as unary bits), a uniform permutation shuffles all messages, and the ones
    are counted per label: ``[d]`` (what the analyzer reads off the shuffled list)."""
    m, d = vectors.shape
    g = jnp.asarray(params.granularity, jnp.int32)
    b = jnp.asarray(params.trials, jnp.int32)
    p = jnp.asarray(params.probability, jnp.float32)
    xhat = shuffle_protocols.randomized_rounding(round_key, vectors, params, bound)
    jg, jb = jnp.arange(g_max), jnp.arange(b_max)
    round_bits = (jg < xhat[..., None]) & (jg < g)
    noise_bits = jax.random.bernoulli(noise_key, p, (m, d, b_max)) & (jb < b)
    bits = jnp.concatenate([round_bits, noise_bits], axis=-1)
    sent = jnp.concatenate([jnp.broadcast_to(jg < g, (m, d, g_max)), jnp.broadcast_to(jb < b, (m, d, b_max))], -1)
    sent = sent & mask.astype(bool)[:, None, None]
    labels = jnp.broadcast_to(jnp.arange(d)[None, :, None], bits.shape)
    order = jax.random.permutation(shuffle_key, bits.size)  # the shuffler
    bits, sent, labels = (a.reshape(-1)[order] for a in (bits, sent, labels))
    return jax.ops.segment_sum((bits & sent).astype(jnp.float32), labels, num_segments=d)


def analyze_bit_counts(ones, count, params, bound):
    """The analyzer on the ones per label of ``count`` vectors: ``(2L/g)(ones - p b count) - count L``."""
    gf = jnp.asarray(params.granularity, jnp.int32).astype(jnp.float32)
    b = jnp.asarray(params.trials, jnp.int32)
    p = jnp.asarray(params.probability, jnp.float32)
    return (2.0 * bound / gf) * (ones - p * b.astype(jnp.float32) * count) - count * bound


def pvec_chunked_sum(key, vectors, mask, params, bound, max_granularity: int, trial_groups: int = 1):
    """P_vec's estimate of the sum of ``vectors [m, d]`` at the count level (``pvec_counts`` then the
    analyzer ``shuffle_protocols.pvec_analyze``) with the ``"noise-stream"`` derivation from ``key``: what
    ``PvecRandomizer`` + ``PvecAnalyzer`` of the shuffle-SCO families compute before dividing by the batch."""
    kr, kn = jax.random.split(key)
    counts = pvec_counts(kr, kn, vectors, mask, params, bound, max_granularity, trial_groups)
    return shuffle_protocols.pvec_analyze(counts, params, bound)


def pvec_bits_sum(key, vectors, mask, params, bound, g_max: int, b_max: int):
    """P_vec's estimate of the sum of ``vectors [m, d]`` at the bit level (``pvec_bit_counts`` then
    ``analyze_bit_counts``), keys split from ``key`` as ``"noise-stream"`` does."""
    ones = pvec_bit_counts(*jax.random.split(key, 3), vectors, mask, params, bound, g_max, b_max)
    return analyze_bit_counts(ones, jnp.sum(mask.astype(jnp.float32)), params, bound)


class _PvecPart(Stateless):
    """What the randomizer and the analyzer share: stateless, and the (g, b, p) of the round from hparams
    ``params_field`` (one for the run, or round ``r``'s of per-round arrays with ``per_round``) at a
    ``level`` of the simulation."""

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"level={self.level!r} must be one of {LEVELS}")

    def round_pvec(self, ctx: Context) -> shuffle_protocols.PvecParams:
        pv = getattr(ctx.hparams, self.params_field)
        return round_params(pv, ctx.round) if self.per_round else pv


def _flat_units(tree):
    """``[M, U, P]``: every unit of a ``[M, U, ...]`` pytree as one flat vector (``ravel_pytree`` order)."""
    return jax.vmap(jax.vmap(lambda t: ravel_pytree(t)[0]))(tree)


@dataclasses.dataclass(frozen=True)
class PvecRandomizer(_PvecPart):
    """Every party's P_vec randomizers and the shuffler (privatizer, ``placement="silo"``).

    Takes every computed party's clipped vectors ``[M, U, ...]`` (norm <= the message's bound L, the P_vec range; units
    of weight 0 send nothing) and returns, per party, what the analyzer reads off the shuffled messages, ``[M, ...]``
    shaped like one unit: the centred counts (``"counts"``) or the ones per label (``"bits"``).

    Args:
      dim: d, the number of parameters (every input's dimension; for the accountant).
      max_granularity: static bound on a traced g (the float32-exact chunks; a larger g gives NaN).
      params_field: the hparams field holding the ``PvecParams`` (g, b, p).
      per_round: False: one (g, b, p) for every round (event ``PvecEvent``); True: per-round ``[T]`` arrays over the
        user stream's windows (hparams ``start``/``batch``/``stage_round``; event ``PvecTranscriptEvent``).
      keys: the key derivation, a name of ``KEY_SCHEMES`` (module docstring).
      level: ``"counts"`` or ``"bits"`` (module docstring).
      trial_groups: each vector runs ``trial_groups`` groups of ``trials`` (count level; per_round only).
      honest_frac: robust shuffle privacy: the fraction of parties assumed honest (accounting only; per_round only).
      bit_buffer: ``(g_max, b_max)``, the static bit buffers of the bit level."""

    dim: int
    max_granularity: int = 2**12
    params_field: str = "pvec"
    per_round: bool = False
    keys: str = "silo-streams"
    level: str = "counts"
    trial_groups: int = 1
    honest_frac: float = 1.0
    bit_buffer: tuple[int, int] | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.keys not in KEY_SCHEMES:
            raise ValueError(f"keys={self.keys!r} must be one of {tuple(KEY_SCHEMES)}")
        if self.level == "bits" and self.bit_buffer is None:
            raise ValueError("bit_buffer=None: the bit level needs static (g_max, b_max) bit buffers")
        if not self.per_round and (self.trial_groups != 1 or self.honest_frac != 1.0):
            raise ValueError(f"trial_groups={self.trial_groups}, honest_frac={self.honest_frac}: only the per-round "
                             "transcript accountant (per_round=True) accounts for them")

    roles = ("privatizer",)

    def update(self, message: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        batch = ctx.batch
        params = self.round_pvec(ctx)
        scheme = KEY_SCHEMES[self.keys]
        vectors = _flat_units(message.value)
        party_keys = scheme.party_keys(ctx, batch, self.level)
        if self.level == "counts":
            def report(v, m, kr, kn):
                return pvec_counts(kr, kn, v, m, params, message.contribution_bound, self.max_granularity, self.trial_groups,
                                   scheme.chunk_keys)
        else:
            def report(v, m, kr, kn, ks):
                return pvec_bit_counts(kr, kn, ks, v, m, params, message.contribution_bound, *self.bit_buffer)
        reports = jax.vmap(report)(vectors, batch.weights, *party_keys)
        unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: t[0, 0], message.value))[1]
        return message.replace(value=jax.vmap(unravel)(reports)), state

    def events(self, hparams, num_rounds: int) -> tuple:
        pv = getattr(hparams, self.params_field)
        if not self.per_round:
            g, b, p = pv.numbers()
            return (PvecEvent(self.params_field, g, b, p, self.dim, self.max_granularity,
                              shuffle_protocols.PvecParams.from_calculator),)
        windows = sco_transcript.RoundWindows.of(hparams.start, hparams.batch, hparams.stage_round)
        event = sco_transcript.PvecTranscriptEvent(self.params_field, windows, (), (), (), self.trial_groups, self.dim,
                                                   self.honest_frac, self.max_granularity,
                                                   lambda g, b, p: shuffle_protocols.PvecParams.create(g, b, p))
        return (event.holding(pv),)


@dataclasses.dataclass(frozen=True)
class PvecAnalyzer(_PvecPart):
    """The P_vec analyzer on what ``PvecRandomizer`` delivers (aggregator): the available parties' reports summed per
    coordinate (the multiset of messages is all the analyzer uses, so this is the shuffled protocol's output), analyzed
    (``(2L/g) counts``, ``shuffle_protocols.pvec_analyze``, or ``analyze_bit_counts``) and divided by the public number
    of vectors: ``M_r batch_size`` (the available silos times their K records) or the round's ``batch_field`` entry (a
    user stream's ``batch_r``). Returns the mean shaped like one unit.

    Args:
      batch_size: K, the vectors each silo randomized (public); or None with ``batch_field``.
      availability: the silos' availability model (``event``: the shuffler over silos, ``ShuffleEvent`` at
        ``min_available x K`` vectors); None for one user stream (its transcript event covers the shuffler).
      params_field: the hparams field of (g, b, p), as ``PvecRandomizer``'s (so are ``per_round`` and ``level``).
      batch_field: the hparams field of the per-round public number of vectors (instead of batch_size)."""

    batch_size: int | None = None
    availability: Any = None
    params_field: str = "pvec"
    per_round: bool = False
    level: str = "counts"
    batch_field: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if (self.batch_size is None) == (self.batch_field is None):
            raise ValueError(f"batch_size={self.batch_size!r}, batch_field={self.batch_field!r}: "
                             "exactly one gives the public number of vectors")

    roles = ("aggregator",)

    def update(self, messages: Sensitive, state, ctx: Context) -> tuple[Sensitive, tuple]:
        batch = ctx.batch
        params = self.round_pvec(ctx)
        reports = jax.vmap(lambda t: ravel_pytree(t)[0])(messages.value)
        unravel = ravel_pytree(jax.tree_util.tree_map(lambda t: t[0], messages.value))[1]
        weights = batch.available.astype(jnp.float32)
        summed = jnp.tensordot(weights, reports, axes=1)
        if self.level == "counts":
            total = shuffle_protocols.pvec_analyze(summed, params, messages.contribution_bound)
        else:
            count = jnp.tensordot(weights, jnp.sum(batch.weights.astype(jnp.float32), axis=1), axes=1)
            total = analyze_bit_counts(summed, count, params, messages.contribution_bound)
        if self.batch_field is not None:
            vectors = getattr(ctx.hparams, self.batch_field)[ctx.round].astype(jnp.float32)
        else:
            vectors = jnp.maximum(jnp.sum(weights), 1.0) * self.batch_size  # M_r K, public
        mean = Sensitive(total, messages.contribution_bound, messages.neighboring).divided(vectors)
        return mean.replace(value=unravel(mean.value)), state

    def aggregation_event(self, silo_sizes):
        if self.availability is None:
            return None
        n = len(silo_sizes)
        return ShuffleEvent(min_available(self.availability, n), n)
