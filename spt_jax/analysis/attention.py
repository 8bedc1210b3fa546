"""Attention maps from any checkpoint, proximity metrics, and the figures of the model's position
encoding (`position_figures`); and `tracker`, the trainer's hook that logs the metrics during
training.

Maps come from the 'intermediates' collection the attention layers `sow` into: the forward pass is the
same computation as in training (nothing is re-implemented), so the numerics are the model's own.
"""
from __future__ import annotations

import os

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


def position_interaction(params, layer: int, codes: np.ndarray) -> np.ndarray:
  """(P W_Q)(P W_K)ᵀ / √d_head per head, [H, L, L], for additive position codes P [L, D] (as in the
  paper).

  It shows what the query-key weights make of absolute positions alone: a band around the diagonal
  means they have turned absolute codes into a relative (proximity) preference.
  """
  attention = params["encoder"][f"layer_{layer}"]["attention"]
  wq = np.asarray(attention["query"]["kernel"])   # [D, H, Dh]
  wk = np.asarray(attention["key"]["kernel"])
  q = np.einsum("ld,dhk->hlk", codes, wq)
  k = np.einsum("ld,dhk->hlk", codes, wk)
  return np.einsum("hqk,hlk->hql", q, k) / np.sqrt(wq.shape[-1])


def position_codes(model, params, length: int) -> np.ndarray:
  """The additive codes [length, D] the encoder adds at the data's first `length` positions (after
  the model's CLS token, whose position the maps drop too)."""
  cfg = model.cfg
  start = int(cfg.pooling == "cls")
  if cfg.position == "sinusoidal":
    table = sinusoidal_encoding(cfg.encoder_length, cfg.d_model)
  elif cfg.position == "learned":
    table = np.asarray(params["encoder"]["position_embedding"])
  else:
    raise ValueError(f"model.position={cfg.position!r} has no additive position codes.")
  return table[start:start + length]


def mean_by_offset(values: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(offsets i − j, [H, offsets] means of `values` [..., H, L, L] over the (query i, key j) pairs
  where `pairs` [..., L, L] is True); offsets no pair has are NaN."""
  length = values.shape[-1]
  i = np.arange(length)
  offset = np.broadcast_to(i[:, None] - i[None, :] + length - 1, pairs.shape)[pairs]
  counts = np.bincount(offset, minlength=2 * length - 1)
  heads = np.moveaxis(values, -3, 0)  # [H, ..., L, L]
  sums = np.stack([np.bincount(offset, weights=h[pairs], minlength=2 * length - 1) for h in heads])
  with np.errstate(invalid="ignore", divide="ignore"):
    return np.arange(1 - length, length), sums / counts


def _json_floats(values) -> list:
  """floats for metrics.json, NaN (no data) as null: json.dump would write a non-JSON NaN."""
  return [None if np.isnan(v) else float(v) for v in np.asarray(values, np.float64)]


def _interaction_figures(model, params, mask, out: str, title: str) -> list[dict]:
  from spt_jax.analysis import plots  # Here, not at the top: training imports this module.
  length = int(mask.sum(1).max())
  codes = position_codes(model, params, length)
  layers = []
  for layer in range(model.cfg.num_layers):
    interaction = position_interaction(params, layer, codes)
    name = f"position_layer{layer}.png"
    plots.heatmaps(interaction, os.path.join(out, name),
                   f"{title} layer {layer}: (P W_Q)(P W_K)^T / sqrt(d), {model.cfg.position} P",
                   symmetric=True)
    offsets, means = mean_by_offset(interaction, np.ones((length, length), bool))
    layers.append({"figure": name, "kind": "code_interaction", "offsets": offsets.tolist(),
                   "heads": [{"mean_interaction": _json_floats(m)} for m in means]})
  return layers


def position_figures(model, params, tokens, mask, out: str, title: str) -> list[dict]:
  """Draws the figures of `model`'s position encoding into `out`, one PNG per layer, for `tokens`
  (mask [B, L], True = real), and returns per layer the numbers they show (for metrics.json); []
  for position='none'.

  sinusoidal, learned: `position_layer<l>.png`, `position_interaction` per head for the model's own
    codes (the trained table for learned), and its mean per offset i − j.
  """
  del tokens  # The additive codes' figures depend on the parameters alone.
  if model.cfg.position in ("sinusoidal", "learned"):
    return _interaction_figures(model, params, np.asarray(mask), out, title)
  return []


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
