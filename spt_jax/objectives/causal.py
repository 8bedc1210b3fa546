"""Causal-LM self-pretraining, Amos et al.'s second SPT objective: `objective='clm'`.

Next-token prediction with causal attention: the output at position t sees inputs 0..t only and is
scored on token t+1; padding is never a target (so neither is anything after a sequence's end).
On pixel data, next-pixel prediction of the normalised value (L1, R² selects the checkpoint) or of
the 8-bit value (256-way cross-entropy), as `pixel_loss` says. The model is the phase's
SequenceModel with `causal=True` whatever `config.model.causal` is; a fine-tuning phase after it uses
`config.model.causal` (False: bidirectional; True: causal, e.g. with pooling='last').
The prediction head is `mlm_head/...`, as for masked SPT, so fine-tunes load the same way.
"""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from spt_jax.data.vocab import PAD_ID
from spt_jax.models.transformer import SequenceModel
from spt_jax.objectives import register
from spt_jax import platform
from spt_jax.objectives.base import Objective, example_weights
from spt_jax.objectives.masked import (PIXEL_LOSSES, pixel_loss, pixel_outputs, summarize_pixels,
                                       token_loss)


@register
@dataclasses.dataclass(frozen=True)
class CausalLM(Objective):
  name = "clm"
  input_kind: str = "tokens"
  pixel_loss: str = "l1"
  pixel_mean: float = 0.0
  pixel_std: float = 255.0

  @staticmethod
  def config_fields() -> dict:
    return dict(pixel_loss="l1")   # on pixels: 'l1' (normalised value, R²) or 'ce' (256-way)

  @staticmethod
  def validate(p, phase: str) -> None:
    if p.pixel_loss not in PIXEL_LOSSES:
      raise ValueError(f"config.{phase}.pixel_loss={p.pixel_loss!r} must be one of "
                       f"{PIXEL_LOSSES}.")

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    if model_config.pooling == "cls":
      raise ValueError(f"config.{phase}.objective='clm' attends causally, so the CLS token at "
                       f"position 0 would see only itself: use config.model.pooling='last' or "
                       f"'mean' (not 'cls').")
    p = config[phase]
    pixels = task.input_kind == "pixels"
    model = SequenceModel(model_config.replace(causal=True), head="mlm",
                          mlm_outputs=pixel_outputs(p.pixel_loss) if pixels else 0)
    selection = "r2" if pixels and p.pixel_loss == "l1" else "accuracy"
    return cls(model, selection_metric=selection, input_kind=task.input_kind,
               pixel_loss=p.pixel_loss, pixel_mean=task.pixel_mean, pixel_std=task.pixel_std)

  def loss(self, params, batch, rng, *, train: bool):
    inputs = batch["inputs"]
    if inputs.ndim != 2:
      raise ValueError(f"objective='clm' needs sequences [B, L]; got inputs of shape "
                       f"{inputs.shape}.")
    real = jnp.broadcast_to(example_weights(batch, inputs) > 0, inputs.shape)
    if self.input_kind == "tokens":
      real = real & (inputs != PAD_ID)
    target_mask = real[:, 1:]  # position t is scored on input t+1 where that one is real
    n, inputs = platform.count_before_forward(target_mask.astype(jnp.float32).sum(), inputs)
    out = self.model.apply({"params": params}, inputs, train=train, rngs={"dropout": rng})
    if self.input_kind == "tokens":
      loss, sums = token_loss(out[:, :-1], inputs[:, 1:], target_mask, n)
      sums.pop("mask_rate")
      return loss, sums
    return pixel_loss(self.pixel_loss, out[:, :-1], inputs[:, 1:], target_mask, self.pixel_mean,
                      self.pixel_std, n)

  def summarize(self, sums: dict) -> dict:
    return summarize_pixels(sums) if self.input_kind == "pixels" else super().summarize(sums)
