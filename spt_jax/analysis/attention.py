"""Attention maps from any checkpoint, proximity metrics, and the figures of the model's position
encoding (`position_figures`); and `tracker`, the trainer's hook that logs the metrics during
training.

Maps come from the 'intermediates' collection the attention layers `sow` into: the forward pass is the
same computation as in training (nothing is re-implemented), so the numerics are the model's own.
"""
from __future__ import annotations

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from spt_jax.data import pipeline
from spt_jax.models import attention as attention_lib


# Implementations that compute exactly dense attention without keeping the weights: their maps are
# the dense model's, with the same parameters.
EXACT = ("auto", "blockwise", "cudnn")


def _sown_by_layer(model, params, tokens, collection: str, name: str) -> list[jax.Array]:
  """Per layer, the [B, H, L, L] array the attention layers sow as `collection`/`name`, from dense
  attention with the model's parameters, its CLS row and column dropped."""
  if model.cfg.attention in EXACT:
    model = model.with_options(attention="dense")
  elif model.cfg.attention != "dense":
    raise ValueError(f"attention maps need exact attention; model.attention={model.cfg.attention!r} "
                     f"is a different model (maps would not be the ones it computes).")
  _, state = model.apply({"params": params}, tokens, train=False, mutable=[collection])
  encoder = state[collection]["encoder"]
  layers = sorted((k for k in encoder if k.startswith("layer_")), key=lambda k: int(k.split("_")[1]))
  maps = [encoder[k]["attention"][name][0] for k in layers]
  if model.cfg.pooling == "cls":  # Drop the model's own CLS row and column: maps align with the data.
    maps = [m[..., 1:, 1:] for m in maps]
  return maps


def attention_maps(model, params, tokens) -> list[jax.Array]:
  """Per layer, [B, H, L, L] attention weights (rows: queries) for `tokens` [B, L]."""
  return _sown_by_layer(model, params, tokens, "intermediates", "attention_weights")


def attention_logits(model, params, tokens) -> list[jax.Array]:
  """Per layer, [B, H, L, L] float32 scores that the softmax turns into `attention_maps`: q kᵀ/√d of
  q and k as the position encoding leaves them (rotated: rope), with its bias on the scores (alibi,
  a learned one); padded keys at finfo.min."""
  return _sown_by_layer(model, params, tokens, "attention_logits", "logits")


def distances(length: int, grid_width: int = 0) -> np.ndarray:
  """[L, L] distances between positions: |i − j|, or with `grid_width` > 0 the Euclidean distance
  between the two pixels of an image read row by row, `grid_width` pixels a row."""
  i = np.arange(length)
  if not grid_width:
    return np.abs(i[:, None] - i[None, :]).astype(np.float32)
  rows, cols = np.divmod(i, grid_width)
  return np.hypot(rows[:, None] - rows[None, :], cols[:, None] - cols[None, :]).astype(np.float32)


def grid_width_of(task) -> int:
  """The width of a task's images read row by row (a square number of pixels), else 0."""
  side = math.isqrt(task.max_length)
  return side if task.input_kind == "pixels" and side * side == task.max_length else 0


GRID_BAND = 1.5  # grid band mass on images: the pixel itself and its 8 neighbours


def proximity_metrics(weights, mask=None, band: float = 1, grid_width: int = 0
                      ) -> dict[str, jax.Array]:
  """Proximity of attention [..., L, L] over real query rows (mask [..., L], True = real token).

  mean_distance: attention-weighted mean |i - j|.
  band_mass: attention mass within |i - j| <= band.
  diagonality: 1 - mean_distance / (the mean distance of uniform attention over the same real keys);
    1 for attention to self only, 0 for uniform attention, negative for attention that avoids
    neighbours.
  With grid_width > 0 the same three on an image's grid (`distances`): the distance between two
  pixels is √(Δrow² + Δcolumn²), so the pixel below is as near as the one to the right (band 1.5:
  the 8 neighbours and the pixel itself).
  """
  length = weights.shape[-1]
  dist = jnp.asarray(distances(length, grid_width))
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


def _query_mask(shape, mask) -> np.ndarray:
  """`mask` ([B, L] for maps [B, (H,) L, L], [L] for one [L, L] map; None: all real) shaped to
  broadcast over the maps' query rows."""
  length = shape[-1]
  if mask is None:
    mask = np.ones(shape[:1] + (length,) if len(shape) > 2 else (length,), bool)
  mask = np.asarray(mask)
  if len(shape) > 2:
    mask = mask.reshape(mask.shape[:1] + (1,) * (len(shape) - 3) + (length,))
  return mask


def normalised_entropy(weights, mask=None) -> float:
  """Mean over real query rows of the attention's entropy ÷ log(the row's real keys): 1 for uniform
  attention, 0 for attention to one key. Proximity metrics cannot tell uniform attention from sharp
  attention to distant keys (both have a uniform-like band mass and mean distance); this can.
  weights [..., L, L]; mask as in `proximity_metrics`."""
  weights = np.asarray(weights, np.float64)
  mask = _query_mask(weights.shape, mask)
  keys = np.broadcast_to(mask[..., None, :], weights.shape).sum(-1)
  entropy = -(weights * np.log(np.maximum(weights, 1e-30))).sum(-1)
  rows = np.broadcast_to(mask, weights.shape[:-1]) & (keys > 1)
  return float((entropy / np.log(np.maximum(keys, 2)))[rows].mean())


def logit_alignment(reference, logits, mask=None) -> dict:
  """How attention `logits` relate to `reference` logits on the same inputs (e.g. after and before
  rescaling the parameters): the least-squares slope and the correlation of their scores, each
  row centred over its real keys first, since the softmax ignores a row's constant. Slope a with
  correlation near 1 means `logits` ≈ a × `reference` (the same pattern at temperature 1/a); a low
  correlation means another pattern. [..., L, L] each (as `attention_logits` gives them); mask as
  in `proximity_metrics`."""
  ref, new = np.asarray(reference, np.float64), np.asarray(logits, np.float64)
  if ref.shape != new.shape:
    raise ValueError(f"logit_alignment needs logits of one shape, got {ref.shape} and {new.shape}.")
  mask = _query_mask(ref.shape, mask)
  keys = np.broadcast_to(mask[..., None, :], ref.shape)
  pairs = keys & np.broadcast_to(mask[..., :, None], ref.shape)
  centre = lambda x: np.where(keys, x - (np.where(keys, x, 0).sum(-1, keepdims=True)
                                         / np.maximum(keys.sum(-1, keepdims=True), 1)), 0)
  ref, new = centre(ref)[pairs], centre(new)[pairs]
  ref_sq, new_sq, cross = (ref * ref).sum(), (new * new).sum(), (ref * new).sum()
  return {"slope": float(cross / max(ref_sq, 1e-300)),
          "correlation": float(cross / max(np.sqrt(ref_sq * new_sq), 1e-300))}


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
  table = cfg.encoding.codes(cfg, _position_params(model, params))
  if table is None:
    raise ValueError(f"model.position={cfg.position!r} has no additive position codes.")
  return np.asarray(table)[start:start + length]


def _position_params(model, params) -> dict:
  """The position encoding's own parameters in `params` (models/positions.py)."""
  return model.cfg.encoding.saved_params(model.cfg, params["encoder"])


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


def mean_by_grid_offset(values: np.ndarray, pairs: np.ndarray, grid_width: int):
  """(row offsets, column offsets, [H, rows, columns] means of `values` [..., H, L, L] over the
  (query i, key j) pairs where `pairs` [..., L, L] is True, by the grid offset of query minus key,
  (Δrow, Δcolumn)); offsets no pair has are NaN."""
  length = values.shape[-1]
  rows, cols = np.divmod(np.arange(length), grid_width)
  height = int(rows.max()) + 1
  d_row = rows[:, None] - rows[None, :] + height - 1
  d_col = cols[:, None] - cols[None, :] + grid_width - 1
  index = np.broadcast_to(d_row * (2 * grid_width - 1) + d_col, pairs.shape)[pairs]
  size = (2 * height - 1) * (2 * grid_width - 1)
  counts = np.bincount(index, minlength=size)
  heads = np.moveaxis(values, -3, 0)
  sums = np.stack([np.bincount(index, weights=h[pairs], minlength=size) for h in heads])
  with np.errstate(invalid="ignore", divide="ignore"):
    means = (sums / counts).reshape(len(heads), 2 * height - 1, 2 * grid_width - 1)
  return np.arange(1 - height, height), np.arange(1 - grid_width, grid_width), means


def _grid_figure(means, row_offsets, col_offsets, path: str, title: str) -> None:
  """One panel per head: a value by (Δrow, Δcolumn), the query's own pixel at the centre."""
  from spt_jax.analysis import plots  # Here, not at the top: training imports this module.
  plots.heatmaps(means, path, title, symmetric=True, xlabel="Δcolumn (query − key)",
                 ylabel="Δrow (query − key)",
                 extent=(col_offsets[0] - 0.5, col_offsets[-1] + 0.5, row_offsets[-1] + 0.5,
                         row_offsets[0] - 0.5))


def grid_position_figures(model, params, tokens, mask, grid_width: int, out: str,
                          title: str) -> list[dict]:
  """For image data: per layer, what positions do by grid offset (Δrow, Δcolumn), as a heatmap
  `position_grid_layer<l>.png` per head: the code interaction (P W_Q)(P W_K)ᵀ/√d of additive codes,
  or the mean attention logit of rope / alibi models, averaged over pixel pairs with that offset.
  A proximity learnt on the image shows up as a peak at the grid neighbours, where a 1D offset
  plot shows it split between i − j = ±1 and ±width."""
  mask = np.asarray(mask, bool)
  length = int(mask.sum(1).max())
  if model.cfg.encoding.adds_codes:
    codes = position_codes(model, params, length)
    values = [position_interaction(params, layer, codes) for layer in range(model.cfg.num_layers)]
    pairs, what = np.ones((length, length), bool), f"(P W_Q)(P W_K)^T / sqrt(d), {model.cfg.position} P"
  elif model.cfg.encoding.in_attention:
    values = [np.asarray(l)[..., :length, :length] for l in attention_logits(model, params, tokens)]
    real = mask[:, :length]
    pairs, what = real[:, :, None] & real[:, None, :], f"mean attention logit, {model.cfg.position}"
  else:
    return []
  layers = []
  for layer, v in enumerate(values):
    rows, cols, means = mean_by_grid_offset(v, pairs, grid_width)
    name = f"position_grid_layer{layer}.png"
    _grid_figure(means, rows, cols, os.path.join(out, name),
                 f"{title} layer {layer}: {what}, by grid offset")
    layers.append({"figure": name, "row_offsets": rows.tolist(), "column_offsets": cols.tolist(),
                   "heads": [[_json_floats(r) for r in m] for m in means]})
  return layers


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


def relative_bias(model, params, tokens, mask) -> list[dict]:
  """Per layer, the effective relative bias of an encoding that acts inside attention: each head's
  mean attention logit over the real (query i, key j) pairs of `tokens` (mask [B, L]) with the same
  offset i − j; for alibi also its explicit bias −m_h·|i − j| at those offsets, from the model's own
  rule, and for a learned bias its trained values at those offsets (`learned_bias`).

  Logits, not log weights: the weights of distant keys underflow to 0 under a steep ALiBi slope.
  """
  mask = np.asarray(mask, bool)
  length = int(mask.sum(1).max())
  real = mask[:, :length]
  pairs = real[:, :, None] & real[:, None, :]
  modifier = attention_lib.score_modifier(model.cfg, _position_params(model, params))
  layers = []
  for logits in attention_logits(model, params, tokens):
    offsets, means = mean_by_offset(np.asarray(logits)[..., :length, :length], pairs)
    heads = [{"mean_logit": m} for m in means]
    if modifier.alibi:
      explicit = np.asarray(modifier.bias(offsets, np.zeros(1, np.int32)))[..., 0]  # [H, offsets]
      for head, slope, bias in zip(heads, modifier.alibi, explicit):
        head.update(alibi_slope=slope, alibi_bias=bias)
    elif modifier.learned_bias is not None:
      explicit = np.asarray(modifier.bias(offsets, np.zeros(1, np.int32)))[..., 0]
      for head, bias in zip(heads, explicit):
        head.update(learned_bias=bias)
    layers.append({"offsets": offsets, "heads": heads})
  return layers


def _offset_panels(offsets, heads: list[dict], path: str, title: str) -> None:
  """One panel per head: the mean logit against i − j, and ALiBi's explicit bias if there is one."""
  from spt_jax.analysis import plots  # Here, not at the top: training imports this module.
  fig, axes = plots.plt.subplots(1, len(heads), figsize=(3.6 * len(heads), 3.2), squeeze=False)
  for h, (ax, head) in enumerate(zip(axes[0], heads)):
    ax.plot(offsets, head["mean_logit"], color="tab:blue", label="mean logit")
    if "alibi_bias" in head:
      ax.plot(offsets, head["alibi_bias"], color="tab:red", linestyle="--",
              label="ALiBi bias −m|i−j|")
      ax.set_title(f"head {h}: m = {head['alibi_slope']:.3g}", fontsize=9)
    elif "learned_bias" in head:
      ax.plot(offsets, head["learned_bias"], color="tab:red", linestyle="--", label="learned bias")
      ax.set_title(f"head {h}", fontsize=9)
    else:
      ax.set_title(f"head {h}", fontsize=9)
    ax.axvline(0, color="grey", linewidth=0.6)
    ax.set_xlabel("offset i − j (query − key position)", fontsize=8)
    ax.set_ylabel("attention logit", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
  fig.suptitle(title, fontsize=10)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plots.plt.close(fig)


def _relative_bias_figures(model, params, tokens, mask, out: str, title: str) -> list[dict]:
  layers = []
  for layer, numbers in enumerate(relative_bias(model, params, tokens, mask)):
    name = f"relative_bias_layer{layer}.png"
    _offset_panels(numbers["offsets"], numbers["heads"], os.path.join(out, name),
                   f"{title} layer {layer}: {model.cfg.position}, mean attention logit by offset "
                   f"over {len(tokens)} examples")
    heads = [{k: _json_floats(v) if k in ("mean_logit", "alibi_bias", "learned_bias") else float(v)
              for k, v in head.items()} for head in numbers["heads"]]
    layers.append({"figure": name, "kind": "relative_bias",
                   "offsets": numbers["offsets"].tolist(), "heads": heads})
  return layers


def position_figures(model, params, tokens, mask, out: str, title: str) -> list[dict]:
  """Draws the figures of `model`'s position encoding into `out`, one PNG per layer, for `tokens`
  (mask [B, L], True = real), and returns per layer the numbers they show (for metrics.json); []
  for position='none'.

  Codes added to the input (sinusoidal, learned): `position_layer<l>.png`, `position_interaction`
    per head for the model's own codes (the trained table for learned), and its mean per offset
    i − j.
  Acting inside attention (rope, alibi, a learned bias): `relative_bias_layer<l>.png`,
    `relative_bias` per head (the mean logit per offset i − j, with the explicit bias where there is
    one).
  """
  encoding = model.cfg.encoding
  if encoding.adds_codes:
    return _interaction_figures(model, params, np.asarray(mask), out, title)
  if encoding.in_attention:
    return _relative_bias_figures(model, params, tokens, mask, out, title)
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
