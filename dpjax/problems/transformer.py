"""A small transformer classifier (flax linen) shared by the ghost-clipping tests and benchmarks.

Pre-LayerNorm encoder (Vaswani et al. 2017; pre-norm as in Xiong et al. 2020): token embedding + learned position
embedding, ``num_layers`` blocks of ``x + MHA(LN(x))`` and ``x + MLP(LN(x))`` (GELU), a final LayerNorm, mean pooling
over positions and a dense read-out. Every parametrised layer is one ghost clipping handles without per-example
gradients (``Embed``, the ``DenseGeneral`` projections inside ``MultiHeadDotProductAttention``, ``Dense``) or
materialises layer by layer (``LayerNorm``, biases).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp

from dpjax.problems.flax_model import FlaxProblem


class TransformerClassifier(nn.Module):
    """Classifies a token sequence ``[T]`` (or a batch ``[B, T]``) into ``num_classes``.

    ``tied_readout=True`` reads the logits out with the token embedding (``Embed.attend``; then ``num_classes`` must
    equal ``vocab_size``).
    """
    vocab_size: int = 256
    max_len: int = 32
    width: int = 64
    num_heads: int = 4
    mlp_width: int = 128
    num_layers: int = 2
    num_classes: int = 10
    tied_readout: bool = False

    @nn.compact
    def __call__(self, tokens):
        tokens = tokens.astype(jnp.int32)
        embed = nn.Embed(self.vocab_size, self.width, name="token_embed")
        positions = jnp.arange(tokens.shape[-1])
        h = embed(tokens) + nn.Embed(self.max_len, self.width, name="position_embed")(positions)
        for i in range(self.num_layers):
            a = nn.LayerNorm(name=f"ln_attn_{i}")(h)
            h = h + nn.MultiHeadDotProductAttention(num_heads=self.num_heads, deterministic=True,
                                                    name=f"attn_{i}")(a)
            m = nn.LayerNorm(name=f"ln_mlp_{i}")(h)
            m = nn.Dense(self.width, name=f"mlp_out_{i}")(nn.gelu(nn.Dense(self.mlp_width, name=f"mlp_in_{i}")(m)))
            h = h + m
        pooled = jnp.mean(nn.LayerNorm(name="ln_final")(h), axis=-2)
        if self.tied_readout:
            return embed.attend(pooled)
        return nn.Dense(self.num_classes, name="readout")(pooled)


def transformer_problem(seq_len: int = 32, **kwargs) -> FlaxProblem:
    """``FlaxProblem`` (softmax cross-entropy) of a ``TransformerClassifier`` on integer token sequences of length
    ``seq_len``."""
    kwargs.setdefault("max_len", seq_len)
    return FlaxProblem(TransformerClassifier(**kwargs), (seq_len,), "softmax", input_dtype=jnp.int32)
