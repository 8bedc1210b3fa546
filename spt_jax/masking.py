"""Masked-token corruption for self-pretraining, drawn inside the jitted step.

Amos et al. mask each real position independently with probability `rate` and replace it by `<mask>`;
BERT's 80/10/10 mix (mask / random token / unchanged) is available as an option. Padding is never
masked, so it is never a prediction target either.
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
