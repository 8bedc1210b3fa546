"""Attention maps from any checkpoint, proximity metrics, and the position-code interaction; and
`tracker`, the trainer's hook that logs the metrics during training.

Maps come from the 'intermediates' collection the attention layers `sow` into: the forward pass is the
same computation as in training (nothing is re-implemented), so the numerics are the model's own.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from spt_jax.data import pipeline
from spt_jax.models.transformer import sinusoidal_encoding


# Implementations that compute exactly dense attention without keeping the weights: their maps are
# the dense model's, with the same parameters.
EXACT = ("auto", "blockwise", "cudnn")


def attention_maps(model, params, tokens) -> list[jax.Array]:
  """Per layer, [B, H, L, L] attention weights (rows: queries) for `tokens` [B, L]."""
  if model.cfg.attention in EXACT:
    model = model.with_options(attention="dense")
  elif model.cfg.attention != "dense":
    raise ValueError(f"attention maps need exact attention; model.attention={model.cfg.attention!r} "
                     f"is a different model (maps would not be the ones it computes).")
  _, state = model.apply({"params": params}, tokens, train=False, mutable=["intermediates"])
  encoder = state["intermediates"]["encoder"]
  layers = sorted((k for k in encoder if k.startswith("layer_")), key=lambda k: int(k.split("_")[1]))
  maps = [encoder[k]["attention"]["attention_weights"][0] for k in layers]
  if model.cfg.pooling == "cls":  # Drop the model's own CLS row and column: maps align with the data.
    maps = [m[..., 1:, 1:] for m in maps]
  return maps


def proximity_metrics(weights, mask=None, band: int = 1) -> dict[str, jax.Array]:
  """Proximity of attention [..., L, L] over real query rows (mask [..., L], True = real token).

  mean_distance: attention-weighted mean |i - j|.
  band_mass: attention mass within |i - j| <= band.
  diagonality: 1 - mean_distance / (the mean distance of uniform attention over the same real keys);
    1 for attention to self only, 0 for uniform attention, negative for attention that avoids
    neighbours.
  """
  length = weights.shape[-1]
  i = jnp.arange(length)
  dist = jnp.abs(i[:, None] - i[None, :]).astype(jnp.float32)
  if mask is None:
    mask = jnp.ones(weights.shape[:1] + (length,) if weights.ndim > 2 else (length,), bool)
  # mask is [B, L] for weights [B, (H,) L, L], or [L] for a single [L, L] map.
  if weights.ndim > 2:
    mask = mask.reshape(mask.shape[:1] + (1,) * (weights.ndim - 3) + (length,))
  query_mask = jnp.broadcast_to(mask, weights.shape[:-1]).astype(jnp.float32)
  key_mask = mask[..., None, :]
  mean_distance_rows = (weights * dist).sum(-1)
  band_rows = (weights * (dist <= band)).sum(-1)
  keys = jnp.broadcast_to(key_mask, weights.shape).astype(jnp.float32)
  uniform_rows = (keys * dist).sum(-1) / jnp.maximum(keys.sum(-1), 1)
  avg = lambda rows: (rows * query_mask).sum() / jnp.maximum(query_mask.sum(), 1)
  mean_distance, uniform = avg(mean_distance_rows), avg(uniform_rows)
  return {"mean_distance": mean_distance, "band_mass": avg(band_rows),
          "diagonality": 1.0 - mean_distance / jnp.maximum(uniform, 1e-9)}


def position_interaction(params, layer: int, length: int) -> np.ndarray:
  """(P W_Q)(P W_K)ᵀ / √d_head per head, [H, L, L], for the sinusoidal codes P (as in the paper).

  It shows what the query-key weights make of absolute positions alone: a band around the diagonal
  means they have turned absolute codes into a relative (proximity) preference.
  """
  attention = params["encoder"][f"layer_{layer}"]["attention"]
  wq = np.asarray(attention["query"]["kernel"])   # [D, H, Dh]
  wk = np.asarray(attention["key"]["kernel"])
  pe = sinusoidal_encoding(length, wq.shape[0])
  q = np.einsum("ld,dhk->hlk", pe, wq)
  k = np.einsum("ld,dhk->hlk", pe, wk)
  return np.einsum("hqk,hlk->hql", q, k) / np.sqrt(wq.shape[-1])


def tracker(name: str, cfg, model, task, writer, steps: int, replicated):
  """`after_step` hook logging proximity metrics of a fixed validation batch's attention every
  cfg.attention_metrics_every_steps (None when not tracking), for `train.AnalysisHooks`. The maps are
  dense attention's with the model's parameters, whichever exact implementation trains."""
  if cfg.attention_metrics_every_steps <= 0:
    return None
  if model.cfg.attention not in ("dense",) + EXACT:
    logging.warning("[%s] attention metrics need exact attention, not model.attention=%r; not "
                    "tracking them.", name, model.cfg.attention)
    return None
  probe = next(pipeline.eval_batches(task.splits["val"], cfg.eval_batch_size or cfg.batch_size))
  probe = jax.device_put(probe["inputs"].astype(np.int32), replicated)
  # Maps come per encoded sequence ([2B, ...] for document pairs); pixels are never padding.
  flat_probe = probe.reshape(-1, probe.shape[-1])
  probe_mask = flat_probe != 0 if task.input_kind == "tokens" else jnp.ones(flat_probe.shape, bool)

  @jax.jit
  def attention_metrics(params):
    out = {}
    for layer, m in enumerate(attention_maps(model, params, probe)):
      for key, value in proximity_metrics(m, probe_mask).items():
        out[f"layer{layer}/{key}"] = value
    return out

  def after_step(step, state):
    if step % cfg.attention_metrics_every_steps == 0 or step == steps:
      writer.write(step, "attention", jax.device_get(attention_metrics(state.params)))
  return after_step
