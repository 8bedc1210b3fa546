"""Training objectives: masked-token prediction (SPT) and sequence classification.

An objective maps (apply_fn, params, batch, rng) to a scalar loss and metrics. Metrics are returned as
tuples of sums (by default (numerator, denominator)) so that evaluation can sum them over batches and
finish once with `objective.summarize`: that counts every example (or masked position) exactly once
however the data is batched, padded or sharded.
Batches are dicts with `inputs` [B, L] int, `labels` [B] int and `weights` [B] float (0 for padding
examples that only fill the last evaluation batch).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from spt_jax import masking


def ratio(metrics: dict) -> dict:
  """{name: (numerator, denominator)} → {name: numerator / denominator} (jnp or numpy)."""
  return {k: n / jnp.maximum(d, 1e-12) for k, (n, d) in metrics.items()}


def count_before_forward(count, inputs):
  """(count, inputs) with `count` computed before anything that reads the returned `inputs`.

  Under data parallelism a count over the global batch (the loss's denominator) is an all-reduce,
  a rendezvous of all devices. XLA:CPU runs it as soon as its operands are ready, so on a host split
  into per-core devices one device's thread sat blocked in it while the other device was still in
  its forward pass: the classification step of the benchmark's cpu shape took 455 ms instead of
  340 ms. With the forward pass waiting for the count, both devices meet at the start of the step.
  """
  return jax.lax.optimization_barrier((count, inputs))


def _example_weights(batch, like):
  """[B] example weights broadcast against per-position arrays [B, ...]."""
  w = batch["weights"]
  return w.reshape(w.shape + (1,) * (like.ndim - 1))


class _Objective:
  def summarize(self, sums: dict) -> dict:
    return ratio(sums)


@dataclasses.dataclass(frozen=True)
class MaskedTokenPrediction(_Objective):
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
    mask = masking.draw_mask(mask_rng, tokens, self.mask_rate) & (_example_weights(batch, tokens) > 0)
    inputs = masking.corrupt(corrupt_rng, tokens, mask, bert_mix=self.bert_mix,
                             first_regular_id=self.first_regular_id, vocab_size=self.vocab_size)
    num_masked, inputs = count_before_forward(mask.astype(jnp.float32).sum(), inputs)
    logits = apply_fn({"params": params}, inputs, train=train, rngs={"dropout": dropout_rng})
    return self.loss_from_logits(logits, tokens, mask, num_masked)

  @staticmethod
  def loss_from_logits(logits, targets, mask, num_masked=None):
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
    weight = mask.astype(jnp.float32)
    num_masked = weight.sum() if num_masked is None else num_masked
    loss = (ce * weight).sum() / jnp.maximum(num_masked, 1.0)
    correct = ((logits.argmax(-1) == targets) * weight).sum()
    metrics = {"loss": ((ce * weight).sum(), num_masked), "accuracy": (correct, num_masked),
               "mask_rate": (num_masked, ((targets != 0) * 1.0).sum())}
    return loss, metrics


@dataclasses.dataclass(frozen=True)
class MaskedPixelPrediction(_Objective):
  """Amos et al.'s pixel SPT: masked pixels are zeroed and flagged in a second input channel; the
  head predicts the normalised value (L1 loss; R² reported and used to select the checkpoint) or the
  raw 8-bit value (256-way cross-entropy; accuracy). Loss on masked positions only. The L1 target is
  normalised as the model's input is: (pixel - pixel_mean) / pixel_std."""
  mask_rate: float
  loss: str = "l1"
  head: str = "mlm"
  pixel_mean: float = 0.0
  pixel_std: float = 255.0

  @property
  def selection_metric(self) -> str:
    return "r2" if self.loss == "l1" else "accuracy"

  @property
  def outputs(self) -> int:
    return 1 if self.loss == "l1" else 256

  def __call__(self, apply_fn, params, batch, rng, *, train: bool):
    mask_rng, dropout_rng = jax.random.split(rng)
    pixels = batch["inputs"]
    mask = jax.random.bernoulli(mask_rng, self.mask_rate, pixels.shape) & (
        _example_weights(batch, pixels) > 0)
    n, (pixels, mask) = count_before_forward(mask.astype(jnp.float32).sum(), (pixels, mask))
    out = apply_fn({"params": params}, pixels, train=train, pixel_mask=mask,
                   rngs={"dropout": dropout_rng})
    return self.loss_from_outputs(out, pixels, mask, n)

  def loss_from_outputs(self, out, pixels, mask, n=None):
    w = mask.astype(jnp.float32)
    n = w.sum() if n is None else n
    if self.loss == "l1":
      target = (pixels.astype(jnp.float32) - self.pixel_mean) / self.pixel_std
      err = out[..., 0].astype(jnp.float32) - target
      l1 = (jnp.abs(err) * w).sum()
      metrics = {"loss": (l1, n), "r2": ((err**2 * w).sum(), (target * w).sum(),
                                         (target**2 * w).sum(), n)}
      return l1 / jnp.maximum(n, 1.0), metrics
    ce = optax.softmax_cross_entropy_with_integer_labels(out.astype(jnp.float32),
                                                         pixels.astype(jnp.int32))
    correct = ((out.argmax(-1) == pixels) * w).sum()
    return (ce * w).sum() / jnp.maximum(n, 1.0), {"loss": ((ce * w).sum(), n),
                                                   "accuracy": (correct, n)}

  def summarize(self, sums: dict) -> dict:
    out = ratio({k: v for k, v in sums.items() if k != "r2"})
    if "r2" in sums:
      sse, s, s2, n = sums["r2"]
      # R² = 1 − SSE/SST over all masked pixels seen, with SST from the same running sums.
      sst = s2 - s * s / jnp.maximum(n, 1.0)
      out["r2"] = 1.0 - sse / jnp.maximum(sst, 1e-12)
    return out


@dataclasses.dataclass(frozen=True)
class Classification(_Objective):
  head: str = "classifier"
  selection_metric: str = "accuracy"

  def __call__(self, apply_fn, params, batch, rng, *, train: bool):
    w = batch["weights"].astype(jnp.float32)
    n, inputs = count_before_forward(w.sum(), batch["inputs"])
    logits = apply_fn({"params": params}, inputs, train=train, rngs={"dropout": rng})
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch["labels"])
    loss = (ce * w).sum() / jnp.maximum(n, 1.0)
    correct = ((logits.argmax(-1) == batch["labels"]) * w).sum()
    return loss, {"loss": ((ce * w).sum(), n), "accuracy": (correct, n)}


# "composite" phases run in spt_jax/train_composite.py (heads and losses in spt_jax/composite.py).
OBJECTIVES = ("mlm", "classification", "composite")
PIXEL_LOSSES = ("l1", "ce")


def make(phase_config, vocab, input_kind: str = "tokens", pixel_norm=(0.0, 255.0)):
  """pixel_norm: the data's (pixel_mean, pixel_std), for pixel inputs."""
  if phase_config.objective == "mlm" and input_kind == "pixels":
    return MaskedPixelPrediction(mask_rate=phase_config.mask_rate, loss=phase_config.pixel_loss,
                                 pixel_mean=pixel_norm[0], pixel_std=pixel_norm[1])
  if phase_config.objective == "mlm":
    return MaskedTokenPrediction(mask_rate=phase_config.mask_rate, bert_mix=phase_config.bert_mix,
                                 first_regular_id=vocab.first_regular_id, vocab_size=vocab.size)
  if phase_config.objective == "classification":
    return Classification()
  if phase_config.objective == "composite":
    raise ValueError("objective='composite' is trained by spt_jax.train_composite, which builds "
                     "its heads with spt_jax.composite.build; it has no single-loss objective.")
  raise ValueError(f"objective={phase_config.objective!r} must be one of {OBJECTIVES}.")
