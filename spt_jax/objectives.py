"""Training objectives: masked-token prediction (SPT) and sequence classification.

An objective maps (apply_fn, params, batch, rng) to a scalar loss and metrics. Metrics are returned as
(numerator, denominator) pairs so that evaluation can sum them over batches and divide once: that counts
every example (or masked token) exactly once however the data is batched, padded or sharded.
Batches are dicts with `inputs` [B, L] int, `labels` [B] int and `weights` [B] float (0 for padding
examples that only fill the last evaluation batch).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from spt_jax import masking


def ratio(metrics: dict) -> dict[str, float]:
  """{name: (numerator, denominator)} → {name: numerator / denominator}."""
  return {k: float(n) / max(float(d), 1e-12) for k, (n, d) in metrics.items()}


@dataclasses.dataclass(frozen=True)
class MaskedTokenPrediction:
  """Cross-entropy on the masked positions only; pads are never masked or scored."""
  mask_rate: float
  bert_mix: bool
  first_regular_id: int
  vocab_size: int
  head: str = "mlm"
  selection_metric: str = "accuracy"  # best checkpoint = highest masked-token accuracy on validation

  def __call__(self, apply_fn, params, batch, rng, *, train: bool):
    mask_rng, corrupt_rng, dropout_rng = jax.random.split(rng, 3)
    tokens = batch["inputs"]
    mask = masking.draw_mask(mask_rng, tokens, self.mask_rate) & (batch["weights"][:, None] > 0)
    inputs = masking.corrupt(corrupt_rng, tokens, mask, bert_mix=self.bert_mix,
                             first_regular_id=self.first_regular_id, vocab_size=self.vocab_size)
    logits = apply_fn({"params": params}, inputs, train=train, rngs={"dropout": dropout_rng})
    return self.loss_from_logits(logits, tokens, mask)

  @staticmethod
  def loss_from_logits(logits, targets, mask):
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    weight = mask.astype(jnp.float32)
    num_masked = weight.sum()
    loss = (ce * weight).sum() / jnp.maximum(num_masked, 1.0)
    correct = ((logits.argmax(-1) == targets) * weight).sum()
    metrics = {"loss": ((ce * weight).sum(), num_masked), "accuracy": (correct, num_masked),
               "mask_rate": (num_masked, ((targets != 0) * 1.0).sum())}
    return loss, metrics


@dataclasses.dataclass(frozen=True)
class Classification:
  head: str = "classifier"
  selection_metric: str = "accuracy"

  def __call__(self, apply_fn, params, batch, rng, *, train: bool):
    logits = apply_fn({"params": params}, batch["inputs"], train=train, rngs={"dropout": rng})
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch["labels"])
    w = batch["weights"].astype(jnp.float32)
    n = w.sum()
    loss = (ce * w).sum() / jnp.maximum(n, 1.0)
    correct = ((logits.argmax(-1) == batch["labels"]) * w).sum()
    return loss, {"loss": ((ce * w).sum(), n), "accuracy": (correct, n)}


OBJECTIVES = ("mlm", "classification")


def make(phase_config, vocab):
  if phase_config.objective == "mlm":
    return MaskedTokenPrediction(mask_rate=phase_config.mask_rate, bert_mix=phase_config.bert_mix,
                                 first_regular_id=vocab.first_regular_id, vocab_size=vocab.size)
  if phase_config.objective == "classification":
    return Classification()
  raise ValueError(f"objective={phase_config.objective!r} must be one of {OBJECTIVES}.")
