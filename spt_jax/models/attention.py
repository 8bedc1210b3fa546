"""Multi-head self-attention whose projections are separate, addressable parameter subtrees.

`query`, `key`, `value` and `out` are their own Dense modules so that W_Q and W_K can be frozen, loaded
or inspected by path (`.../attention/query/kernel`), which the mechanism ablations depend on.
"""
from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp


def dense_attention(q, k, v, key_mask, *, dropout_fn=None):
  """softmax(q kᵀ/√d) v with padded keys excluded. q,k,v: [B, L, H, D]; key_mask: [B, L] (True = real).

  Returns (output [B, L, H, D], weights [B, H, Lq, Lk]). Scores and softmax are float32 whatever the
  compute dtype, because the softmax is where low precision first breaks long sequences.
  """
  scale = q.shape[-1] ** -0.5
  scores = jnp.einsum("bqhd,bkhd->bhqk", q * scale, k).astype(jnp.float32)
  # `where`, not an additive bias: adding finfo.min to a negative score overflows to -inf, and a query
  # whose keys are all padding would then produce NaN instead of a harmless uniform row.
  scores = jnp.where(key_mask[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1)
  if dropout_fn is not None:
    weights = dropout_fn(weights)
  out = jnp.einsum("bhqk,bkhd->bqhd", weights.astype(v.dtype), v)
  return out, weights


IMPLEMENTATIONS = ("dense",)


def attend(q, k, v, key_mask, *, implementation: str, block_size: int, dropout_fn=None):
  """Dispatches to an attention implementation; all take and return the same shapes."""
  if implementation == "dense":
    return dense_attention(q, k, v, key_mask, dropout_fn=dropout_fn)
  raise ValueError(f"attention implementation {implementation!r} must be one of {IMPLEMENTATIONS}.")


class MultiHeadAttention(nn.Module):
  num_heads: int
  dropout_rate: float = 0.0
  dtype: jnp.dtype = jnp.float32
  implementation: str = "dense"
  block_size: int = 512

  @nn.compact
  def __call__(self, x, key_mask, *, train: bool):
    d_model = x.shape[-1]
    if d_model % self.num_heads:
      raise ValueError(f"d_model={d_model} is not divisible by num_heads={self.num_heads}.")
    head_dim = d_model // self.num_heads
    project = functools.partial(nn.DenseGeneral, features=(self.num_heads, head_dim), dtype=self.dtype)
    q = project(name="query")(x)
    # No key bias: it adds q·b_k equally to every score of a query, which softmax ignores, so its true
    # gradient is exactly zero and Adam would only turn float noise into lr-sized random steps.
    k = project(name="key", use_bias=False)(x)
    v = project(name="value")(x)
    dropout_fn = None
    if train and self.dropout_rate > 0:
      dropout_fn = nn.Dropout(self.dropout_rate, deterministic=False)
    out, weights = attend(q, k, v, key_mask, implementation=self.implementation,
                          block_size=self.block_size, dropout_fn=dropout_fn)
    # Recorded only when the caller asks for the 'intermediates' collection (attention analysis);
    # otherwise `sow` is a no-op and costs nothing inside jit. Memory-efficient implementations
    # never materialise the weights and return None.
    if weights is not None:
      self.sow("intermediates", "attention_weights", weights)
    return nn.DenseGeneral(features=d_model, axis=(-2, -1), dtype=self.dtype, name="out")(out)
