"""The supervised phase: cross-entropy of pooled class logits (`objective='classification'`)."""
from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import optax

from spt_jax.models.transformer import SequenceModel
from spt_jax.objectives import register
from spt_jax import platform
from spt_jax.objectives.base import Objective, predicted


@register
@dataclasses.dataclass(frozen=True)
class Classification(Objective):
  name = "classification"

  @classmethod
  def from_config(cls, config, phase, task, model_config):
    return cls(SequenceModel(model_config, head="classifier"))

  def loss(self, params, batch, rng, *, train: bool):
    w = batch["weights"].astype(jnp.float32)
    n, inputs = platform.count_before_forward(w.sum(), batch["inputs"])
    logits = self.model.apply({"params": params}, inputs, train=train, rngs={"dropout": rng})
    ce = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), batch["labels"])
    loss = (ce * w).sum() / jnp.maximum(n, 1.0)
    correct = ((predicted(logits) == batch["labels"]) * w).sum()
    return loss, {"loss": ((ce * w).sum(), n), "accuracy": (correct, n)}
