"""P_vec (Cheu, Joseph, Mao & Peng, ICLR 2022, Algorithms 1-2) on a round's users of the shuffle-private
SCO protocols: the randomizers with the shuffler (``UserPvec``, a privatizer part) and the analyzer
(``UserPvecAnalyzer``, an aggregator part).

Beside ``dpjax.parts.privatizers.PvecRandomizer`` / ``aggregators.PvecAnalyzer`` (ISRL-DP's one-pass
silos: one (g, b, p) per run, a silo's K records per report): here the (g, b, p) are per round, a
round may hold more users than one float32-exact count (chunked), each user may run several groups of
trials (``trial_groups``: trial counts beyond int32), the bit level is simulated too, and the draws
are those of the protocol simulation the reproductions were run with (one ``"noise"`` stream key,
split into the rounding and binomial keys).

Every user of the round holds a clipped vector of norm <= L (the clipper's bound)
and sends ``g + b`` one-bit messages per coordinate: the unary randomized
rounding ``xhat`` of its coordinate and ``Bin(b, p)`` noise bits; the shuffler
hides who sent what, and the analyzer counts the ones per coordinate. Two
simulations of the same protocol:

* ``"counts"`` (fast, default): since a sum of independent ``Bin(b, p)`` is
  ``Bin(m b, p)``, the round's users' messages are simulated as one centred
  count per coordinate (equal in distribution to m separate randomizers; the
  binomial is drawn exactly on the host, ``shuffle_protocols.centred_binomial``).
  Rounds with more than ``2^24 / g`` users are summed in chunks so rounded sums
  stay exact in float32; a traced g above ``max_granularity`` makes the round NaN
  rather than silently inexact.
* ``"bits"``: every one-bit message is materialised, a uniform permutation
  shuffles them, the analyzer counts the ones per label (static buffers
  ``bit_buffer = (g_max, b_max)``; tests and small demonstrations).

The round's (g, b, p) are per-round hparams (``PvecParams`` of ``[T]`` arrays,
field ``pvec``). Host-side, the privatizer's event is
``dpjax.accounting.sco_transcript.PvecTranscriptEvent``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from dpjax import keys
from dpjax.accounting import sco_transcript
from dpjax.engine.roles import Batch, Context, Sensitive
from dpjax.primitives import shuffle_protocols

_EXACT_F32 = 2**24
LEVELS = ("counts", "bits")


def round_params(pvec: shuffle_protocols.PvecParams, r) -> shuffle_protocols.PvecParams:
    """Round ``r``'s (g, b, p) of per-round parameters."""
    return shuffle_protocols.PvecParams(pvec.granularity[r], pvec.trials[r], pvec.probability[r])


def pvec_counts(key, vectors, mask, params, bound, max_granularity: int, trial_groups: int = 1):
    """The count-level reports of ``vectors [m, d]`` (rows with ``mask`` False send nothing): per
    coordinate the rounded sum minus its public offset m g/2 (exact int32 -> float32 in chunks of
    < 2^24/max_granularity users) plus ``Bin(m trial_groups b, p)`` centred. Each user runs
    ``trial_groups * b`` trials (``trial_groups > 1`` represents trial counts above the int32 range
    of ``PvecParams.trials``)."""
    m, d = vectors.shape
    chunk = max(1, min(m, (_EXACT_F32 - 1) // max_granularity))
    pad = -m % chunk
    vec = jnp.pad(vectors, ((0, pad), (0, 0))).reshape(-1, chunk, d)
    msk = jnp.pad(mask, (0, pad)).reshape(-1, chunk)
    kr, kn = jax.random.split(key)
    g = jnp.asarray(params.granularity, jnp.float32)

    def chunk_report(k, v, mk):
        xhat = jnp.where(mk[:, None], shuffle_protocols.randomized_rounding(k, v, params, bound), 0)
        return jnp.sum(xhat, axis=0).astype(jnp.float32) - jnp.sum(mk).astype(jnp.float32) * (g / 2.0)

    rounded = jnp.sum(jax.vmap(chunk_report)(jax.random.split(kr, vec.shape[0]), vec, msk), axis=0)
    count = jnp.sum(mask.astype(jnp.int32)) * trial_groups
    total = rounded + shuffle_protocols.centred_binomial(kn, count, params, d)
    return jnp.where(jnp.asarray(params.granularity) <= max_granularity, total, jnp.nan)


def pvec_bit_counts(key, vectors, mask, params, bound, g_max: int, b_max: int):
    """Bit level: every user sends g + b labelled one-bit messages per coordinate (``xhat`` ones then
    ``Bin(b, p)`` ones, as unary bits), a uniform permutation shuffles all messages, and the ones
    are counted per label: ``[d]`` (what the analyzer reads off the shuffled list)."""
    m, d = vectors.shape
    k_round, k_noise, k_shuffle = jax.random.split(key, 3)
    g = jnp.asarray(params.granularity, jnp.int32)
    b = jnp.asarray(params.trials, jnp.int32)
    p = jnp.asarray(params.probability, jnp.float32)
    xhat = shuffle_protocols.randomized_rounding(k_round, vectors, params, bound)
    jg, jb = jnp.arange(g_max), jnp.arange(b_max)
    round_bits = (jg < xhat[..., None]) & (jg < g)
    noise_bits = jax.random.bernoulli(k_noise, p, (m, d, b_max)) & (jb < b)
    bits = jnp.concatenate([round_bits, noise_bits], axis=-1)
    sent = jnp.concatenate([jnp.broadcast_to(jg < g, (m, d, g_max)), jnp.broadcast_to(jb < b, (m, d, b_max))], -1)
    sent = sent & mask[:, None, None]
    labels = jnp.broadcast_to(jnp.arange(d)[None, :, None], bits.shape)
    order = jax.random.permutation(k_shuffle, bits.size)  # the shuffler
    bits, sent, labels = (a.reshape(-1)[order] for a in (bits, sent, labels))
    return jax.ops.segment_sum((bits & sent).astype(jnp.float32), labels, num_segments=d)


def analyze_bit_counts(ones, count, params, bound):
    """The analyzer on the ones per label of ``count`` users: ``(2L/g)(ones - p b count) - count L``."""
    gf = jnp.asarray(params.granularity, jnp.int32).astype(jnp.float32)
    b = jnp.asarray(params.trials, jnp.int32)
    p = jnp.asarray(params.probability, jnp.float32)
    return (2.0 * bound / gf) * (ones - p * b.astype(jnp.float32) * count) - count * bound


def pvec_chunked_sum(key, vectors, mask, params, bound, max_granularity: int, trial_groups: int = 1):
    """P_vec's estimate of the sum of ``vectors [m, d]`` at the count level (``pvec_counts`` then the
    analyzer ``shuffle_protocols.pvec_analyze``): what ``UserPvec("counts")`` + ``UserPvecAnalyzer``
    compute before dividing by the batch."""
    counts = pvec_counts(key, vectors, mask, params, bound, max_granularity, trial_groups)
    return shuffle_protocols.pvec_analyze(counts, params, bound)


def pvec_bits_sum(key, vectors, mask, params, bound, g_max: int, b_max: int):
    """P_vec's estimate of the sum of ``vectors [m, d]`` at the bit level (``pvec_bit_counts`` then
    ``analyze_bit_counts``)."""
    ones = pvec_bit_counts(key, vectors, mask, params, bound, g_max, b_max)
    return analyze_bit_counts(ones, jnp.sum(mask.astype(jnp.float32)), params, bound)


@dataclasses.dataclass(frozen=True)
class UserPvec:
    """The round's users' P_vec randomizers and the shuffler (privatizer, ``placement="silo"``).

    Takes the clipped user vectors ``[1, m, P]`` (bound L, the P_vec range) and the
    round's window (``batch.weights``: users outside it send nothing); returns what
    the analyzer reads off the shuffled messages, ``[1, P]``: the centred counts
    (``"counts"``) or the ones per label (``"bits"``). Draws from the round's
    ``"noise"`` stream.

    Args:
      dim: d, the number of parameters (for the accountant).
      level: ``"counts"`` or ``"bits"`` (module docstring).
      max_granularity: static bound on a traced g (count level: the chunking).
      trial_groups: each user runs ``trial_groups`` groups of ``trials`` (count level).
      honest_frac: robust shuffle privacy: the fraction of users assumed honest (accounting only).
      bit_buffer: ``(g_max, b_max)``, the static bit buffers of the bit level.
      params_field: the hparams field holding the per-round ``PvecParams``.
    """

    dim: int
    level: str = "counts"
    max_granularity: int = 2**12
    trial_groups: int = 1
    honest_frac: float = 1.0
    bit_buffer: tuple[int, int] | None = None
    params_field: str = "pvec"

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"level={self.level!r} must be one of {LEVELS}")
        if self.level == "bits" and self.bit_buffer is None:
            raise ValueError("bit_buffer=None: the bit level needs static (g_max, b_max) bit buffers")

    def init(self, params):
        return ()

    def update(self, message: Sensitive, batch: Batch, state, ctx: Context) -> tuple[Sensitive, tuple]:
        mask = batch.weights[0]
        vectors = message.value[0] * mask[:, None]
        params = round_params(getattr(ctx.hparams, self.params_field), ctx.round)
        key = keys.stream_key(ctx.key, "noise")
        if self.level == "counts":
            report = pvec_counts(key, vectors, mask, params, message.bound, self.max_granularity, self.trial_groups)
        else:
            report = pvec_bit_counts(key, vectors, mask, params, message.bound, *self.bit_buffer)
        return message.replace(value=report[None]), state

    def events(self, hparams, num_rounds: int) -> tuple:
        pv = getattr(hparams, self.params_field)
        windows = sco_transcript.RoundWindows.of(hparams.start, hparams.batch, hparams.stage_round)
        event = sco_transcript.PvecTranscriptEvent(self.params_field, windows, (), (), (), self.trial_groups, self.dim,
                                                   self.honest_frac, self.max_granularity,
                                                   lambda g, b, p: shuffle_protocols.PvecParams.create(g, b, p))
        return (event.holding(pv),)


@dataclasses.dataclass(frozen=True)
class UserPvecAnalyzer:
    """The P_vec analyzer on what ``UserPvec`` delivers, divided by the public number of users
    ``batch_r`` (aggregator): ``(2L/g) counts`` at the count level (``pvec_analyze``), or
    ``analyze_bit_counts`` at the bit level; returns the flat ``[P]`` mean gradient."""

    level: str = "counts"
    params_field: str = "pvec"
    batch_field: str = "batch"

    def __post_init__(self):
        if self.level not in LEVELS:
            raise ValueError(f"level={self.level!r} must be one of {LEVELS}")

    def init(self, params):
        return ()

    def update(self, messages: Sensitive, batch: Batch, state, ctx: Context) -> tuple[Sensitive, tuple]:
        params = round_params(getattr(ctx.hparams, self.params_field), ctx.round)
        report = messages.value[0]
        if self.level == "counts":
            total = shuffle_protocols.pvec_analyze(report, params, messages.bound)
        else:
            total = analyze_bit_counts(report, jnp.sum(batch.weights[0].astype(jnp.float32)), params, messages.bound)
        users = getattr(ctx.hparams, self.batch_field)[ctx.round].astype(jnp.float32)
        return Sensitive(total, messages.bound, messages.relation).divided(users), state
