"""Masked-token corruption for self-pretraining, drawn inside the jitted step.

Amos et al. mask each real position independently with probability `rate` and replace it by `<mask>`;
BERT's 80/10/10 mix (mask / random token / unchanged) is available as an option, and contiguous
spans (SpanBERT-style geometric lengths) replace independent positions for the span objectives.
Padding is never masked, so it is never a prediction target either.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from spt_jax.data.vocab import MASK_ID, PAD_ID


def draw_mask(rng, tokens, rate: float):
  """Boolean [B, L]: True where a real (non-pad) token is selected for prediction."""
  return jax.random.bernoulli(rng, rate, tokens.shape) & (tokens != PAD_ID)


def corrupt(rng, tokens, mask, *, bert_mix: bool, first_regular_id: int, vocab_size: int):
  """The encoder input: selected positions replaced by <mask> (or BERT's 80/10/10 mix)."""
  if not bert_mix:
    return jnp.where(mask, MASK_ID, tokens)
  kind_rng, token_rng = jax.random.split(rng)
  kind = jax.random.uniform(kind_rng, tokens.shape)
  random_tokens = jax.random.randint(token_rng, tokens.shape, first_regular_id, vocab_size,
                                     tokens.dtype)
  replacement = jnp.where(kind < 0.8, MASK_ID, jnp.where(kind < 0.9, random_tokens, tokens))
  return jnp.where(mask, replacement, tokens)


def span_mask(rng, tokens, rate: float, mean_length: float):
  """Boolean [B, L]: spans starting i.i.d. with probability rate/mean_length, geometric lengths of
  mean `mean_length`; pads never masked."""
  start_rng, length_rng = jax.random.split(rng)
  starts = jax.random.bernoulli(start_rng, rate / mean_length, tokens.shape)
  if mean_length <= 1:
    lengths = jnp.ones(tokens.shape, jnp.int32)
  else:
    u = jax.random.uniform(length_rng, tokens.shape, minval=1e-7, maxval=1.0)
    lengths = jnp.floor(jnp.log(u) / jnp.log1p(-1.0 / mean_length)).astype(jnp.int32) + 1
  positions = jnp.arange(tokens.shape[-1])
  ends = jnp.where(starts, positions + lengths, 0)
  # A position is masked when some span that starts at or before it reaches past it.
  reach = jax.lax.cummax(ends, axis=tokens.ndim - 1)
  return (reach > positions) & (tokens != PAD_ID)
