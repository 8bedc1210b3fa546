r"""Why label supervision cannot find proximity attention from uniform attention (Coser et al. 2026).

One attention layer at uniform attention (W_Q = W_K = 0, so the scores S are 0): A = softmax(S) row-wise,
outputs o_i = Σ_j A_ij v_j. For a mean-pooled supervised loss ℓ(ȳ), ȳ = (1/T) Σ_i o_i and g = dℓ/dȳ,

    dL/dS_ik = (1/T²) gᵀ(v_k − v̄)        — the same for every query i,

so ∇_S L = 1 uᵀ with u ⟂ 1, and ⟨∇_S L, Δ⟩ = uᵀ(Δᵀ1) = 0 for every score direction Δ whose columns all
sum to the same value (e.g. a banded proximity pattern with its column means removed). A per-token
masked-reconstruction loss gives query i its own (1/T) g_iᵀ(v_k − v̄), so those directions get signal.
Everything here is computed by autodiff, not from the formula, so the test checks the claim itself.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax


def _attend(scores, values):
  return jax.nn.softmax(scores, axis=-1) @ values


def supervised_loss(scores, values, readout, label):
  """Mean pooling → linear classifier → cross-entropy."""
  pooled = _attend(scores, values).mean(0)
  return optax.softmax_cross_entropy_with_integer_labels(pooled @ readout, label)


def masked_loss(scores, values, readout, targets, mask):
  """Per-token vocabulary logits → cross-entropy on the masked positions only."""
  logits = _attend(scores, values) @ readout
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return (ce * mask).sum() / jnp.maximum(mask.sum(), 1)


def proximity_direction(length: int, bandwidth: int = 1) -> np.ndarray:
  """A banded |i-j| <= bandwidth pattern minus its column means: every column then sums to 0."""
  i = np.arange(length)
  band = (np.abs(i[:, None] - i[None, :]) <= bandwidth).astype(np.float64)
  return band - band.mean(0, keepdims=True)


def score_gradients(rng, *, length: int = 32, d_model: int = 16, num_classes: int = 2,
                    vocab_size: int = 12, mask_rate: float = 0.3):
  """Gradients w.r.t. the scores at uniform attention, for both losses, on random data."""
  k_values, k_cls, k_rec, k_label, k_targets, k_mask = jax.random.split(rng, 6)
  values = jax.random.normal(k_values, (length, d_model))
  scores = jnp.zeros((length, length))  # = (X W_Q)(X W_K)ᵀ with W_Q = W_K = 0
  label = jax.random.randint(k_label, (), 0, num_classes)
  targets = jax.random.randint(k_targets, (length,), 0, vocab_size)
  mask = jax.random.bernoulli(k_mask, mask_rate, (length,)).astype(jnp.float32).at[0].set(1.0)
  g_sup = jax.grad(supervised_loss)(scores, values,
                                    jax.random.normal(k_cls, (d_model, num_classes)), label)
  g_mlm = jax.grad(masked_loss)(scores, values, jax.random.normal(k_rec, (d_model, vocab_size)),
                                targets, mask)
  return np.asarray(g_sup, np.float64), np.asarray(g_mlm, np.float64)


def report(g_sup: np.ndarray, g_mlm: np.ndarray, bandwidth: int = 1) -> dict[str, float]:
  """The quantities the claim is about, each normalised to be scale-free."""
  delta = proximity_direction(g_sup.shape[0], bandwidth)
  cos = lambda g: float(np.sum(g * delta) / (np.linalg.norm(g) * np.linalg.norm(delta)))
  return {
      # ∇_S L = 1 uᵀ: every row equals the first, and u ⟂ 1 (each row sums to 0).
      "supervised_row_spread": float(np.abs(g_sup - g_sup[:1]).max() / np.abs(g_sup).max()),
      "supervised_row_sum": float(np.abs(g_sup.sum(1)).max() / np.abs(g_sup).max()),
      "supervised_cosine_with_proximity": cos(g_sup),
      "masked_row_spread": float(np.abs(g_mlm - g_mlm[:1]).max() / np.abs(g_mlm).max()),
      "masked_cosine_with_proximity": cos(g_mlm),
  }
