"""Masked prediction, Amos et al.'s SPT objective: `objective='mlm'` on tokens or pixels."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax

from spt_jax import masking, platform
from spt_jax.models.transformer import SequenceModel
from spt_jax.objectives import register
from spt_jax.objectives.base import Objective, example_weights, predicted, ratio

PIXEL_LOSSES = ("l1", "ce")
MASKED_PIXEL = 256  # a masked pixel, as `corrupted` reports what the encoder sees (values are 0-255)


def token_loss(logits, targets, mask, num_masked=None):
  """Cross-entropy of `logits` [B, L, V] against `targets` where `mask`: (mean, sums)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), targets)
  weight = mask.astype(jnp.float32)
  num_masked = weight.sum() if num_masked is None else num_masked
  loss = (ce * weight).sum() / jnp.maximum(num_masked, 1.0)
  correct = ((predicted(logits) == targets) * weight).sum()
  metrics = {"loss": ((ce * weight).sum(), num_masked), "accuracy": (correct, num_masked),
             "mask_rate": (num_masked, ((targets != 0) * 1.0).sum())}
  return loss, metrics


def pixel_loss(kind: str, out, pixels, mask, pixel_mean: float, pixel_std: float, n=None):
  """The pixel head's loss where `mask`: L1 on the normalised value (with R²'s running sums) or
  256-way cross-entropy on the 8-bit value. (mean, sums)."""
  w = mask.astype(jnp.float32)
  n = w.sum() if n is None else n
  if kind == "l1":
    target = (pixels.astype(jnp.float32) - pixel_mean) / pixel_std
    err = out[..., 0].astype(jnp.float32) - target
    l1 = (jnp.abs(err) * w).sum()
    metrics = {"loss": (l1, n), "r2": ((err**2 * w).sum(), (target * w).sum(),
                                       (target**2 * w).sum(), n)}
    return l1 / jnp.maximum(n, 1.0), metrics
  ce = optax.softmax_cross_entropy_with_integer_labels(out.astype(jnp.float32),
                                                       pixels.astype(jnp.int32))
  correct = ((predicted(out) == pixels) * w).sum()
  return (ce * w).sum() / jnp.maximum(n, 1.0), {"loss": ((ce * w).sum(), n),
                                                 "accuracy": (correct, n)}


def summarize_pixels(sums: dict) -> dict:
  out = ratio({k: v for k, v in sums.items() if k != "r2"})
  if "r2" in sums:
    sse, s, s2, n = sums["r2"]
    # R² = 1 − SSE/SST over all masked pixels seen, with SST from the same running sums.
    sst = s2 - s * s / jnp.maximum(n, 1.0)
    out["r2"] = 1.0 - sse / jnp.maximum(sst, 1e-12)
  return out


def pixel_outputs(kind: str) -> int:
  return 1 if kind == "l1" else 256


@register
@dataclasses.dataclass(frozen=True)
class MaskedPrediction(Objective):
  """`objective='mlm'`: on token data, `MaskedTokenPrediction`; on pixel data,
  `MaskedPixelPrediction` (the task's input kind decides)."""
  name = "mlm"

  @staticmethod
  def config_fields() -> dict:
    return dict(
        mask_rate=0.1,              # probability that a real token (or pixel) is masked
        bert_mix=False,             # BERT's 80/10/10 replacement instead of always <mask>
        pixel_loss="l1")            # on pixels: 'l1' (normalised value, R²) or 'ce' (256-way)

  @staticmethod
  def validate(p, phase: str) -> None:
    if not 0 < p.mask_rate < 1:
      raise ValueError(f"config.{phase}.mask_rate={p.mask_rate} must be in (0, 1).")
    if p.pixel_loss not in PIXEL_LOSSES:
      raise ValueError(f"config.{phase}.pixel_loss={p.pixel_loss!r} must be one of "
                       f"{PIXEL_LOSSES}.")

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    p = config[phase]
    if task.input_kind == "pixels":
      return MaskedPixelPrediction(
          SequenceModel(model_config, head="mlm", mlm_outputs=pixel_outputs(p.pixel_loss)),
          selection_metric="r2" if p.pixel_loss == "l1" else "accuracy", mask_rate=p.mask_rate,
          pixel_loss=p.pixel_loss, pixel_mean=task.pixel_mean, pixel_std=task.pixel_std)
    return MaskedTokenPrediction(SequenceModel(model_config, head="mlm"), mask_rate=p.mask_rate,
                                 bert_mix=p.bert_mix, first_regular_id=task.vocab.first_regular_id,
                                 vocab_size=task.vocab.size)


@dataclasses.dataclass(frozen=True)
class MaskedTokenPrediction(MaskedPrediction):
  """Cross-entropy on the masked positions only; pads are never masked or scored. The best
  checkpoint has the highest masked-token accuracy on validation."""
  mask_rate: float = 0.1
  bert_mix: bool = False
  first_regular_id: int = 0
  vocab_size: int = 0

  def corrupted(self, batch, rng):
    """(mask [B, L]: the positions scored, the encoder's input ids [B, L]) as the loss draws them
    for `rng` (what a reference predictor sees, analysis/reference_levels.py)."""
    mask_rng, corrupt_rng, _ = jax.random.split(rng, 3)
    tokens = batch["inputs"]
    mask = masking.draw_mask(mask_rng, tokens, self.mask_rate) & (example_weights(batch, tokens) > 0)
    return mask, masking.corrupt(corrupt_rng, tokens, mask, bert_mix=self.bert_mix,
                                 first_regular_id=self.first_regular_id, vocab_size=self.vocab_size)

  def loss(self, params, batch, rng, *, train: bool):
    dropout_rng = jax.random.split(rng, 3)[2]
    tokens = batch["inputs"]
    mask, inputs = self.drawn(batch, rng)
    num_masked, inputs = platform.count_before_forward(mask.astype(jnp.float32).sum(), inputs)
    logits = self.model.apply({"params": params}, inputs, train=train, rngs={"dropout": dropout_rng})
    return token_loss(logits, tokens, mask, num_masked)


@dataclasses.dataclass(frozen=True)
class MaskedPixelPrediction(MaskedPrediction):
  """Amos et al.'s pixel SPT: masked pixels are zeroed and flagged in a second input channel; the
  head predicts the normalised value (L1 loss; R² reported and used to select the checkpoint) or the
  raw 8-bit value (256-way cross-entropy; accuracy). Loss on masked positions only. The L1 target is
  normalised as the model's input is: (pixel - pixel_mean) / pixel_std."""
  mask_rate: float = 0.1
  pixel_loss: str = "l1"
  pixel_mean: float = 0.0
  pixel_std: float = 255.0

  def corrupted(self, batch, rng):
    """(mask [B, L]: the pixels scored, what the encoder sees [B, L]: the 8-bit value, or
    MASKED_PIXEL where masked) as the loss draws them for `rng`."""
    pixels = batch["inputs"]
    mask = jax.random.bernoulli(jax.random.split(rng)[0], self.mask_rate, pixels.shape) & (
        example_weights(batch, pixels) > 0)
    return mask, jnp.where(mask, MASKED_PIXEL, pixels.astype(jnp.int32))

  def loss(self, params, batch, rng, *, train: bool):
    dropout_rng = jax.random.split(rng)[1]
    pixels = batch["inputs"]
    mask, _ = self.drawn(batch, rng)
    n, (pixels, mask) = platform.count_before_forward(mask.astype(jnp.float32).sum(),
                                                      (pixels, mask))
    out = self.model.apply({"params": params}, pixels, train=train, pixel_mask=mask,
                           rngs={"dropout": dropout_rng})
    return pixel_loss(self.pixel_loss, out, pixels, mask, self.pixel_mean, self.pixel_std, n)

  def summarize(self, sums: dict) -> dict:
    return summarize_pixels(sums)
