"""Position encodings: what each one adds to the model, and the analysis figures that show it."""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from conftest import load_config, tiny
from test_attention import TOL, _grads, _inputs

from spt_jax import experiment, platform, tree
from spt_jax.analysis import attention as analysis
from spt_jax.analysis.__main__ import analyse
from spt_jax.models import attention, positions, transformer


def _model_and_tokens(position: str, pooling: str = "mean", **fields):
  fields = dict(dict(vocab_size=12, max_length=10, num_layers=2, d_model=16, num_heads=2, d_ff=32,
                     position=position, pooling=pooling), **fields)
  model = transformer.build(**fields)
  tokens = np.random.default_rng(0).integers(3, 12, (3, 10))
  tokens[1, 6:] = 0
  # Op by op, not jitted: the initialisers' small programs serve every model of these shapes, where
  # a jitted init is one large program per model (docs/testing.md).
  params = model.init(jax.random.PRNGKey(0), tokens)["params"]
  return model, params, tokens


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_interaction_figure_uses_the_learned_table_at_the_data_positions(pooling, tmp_path):
  model, params, tokens = _model_and_tokens("learned", pooling)
  layers = analysis.position_figures(model, params, tokens, tokens != 0, str(tmp_path), "t")
  assert [entry["figure"] for entry in layers] == ["position_layer0.png", "position_layer1.png"]
  assert all((tmp_path / entry["figure"]).stat().st_size > 0 for entry in layers)
  # The data's first position is the table's row 1 when the model's CLS token takes row 0.
  table = np.asarray(params["encoder"]["position_embedding"])
  codes = table[int(pooling == "cls"):][:10]
  expected = analysis.position_interaction(params, 1, codes)
  np.testing.assert_allclose(
      layers[1]["heads"][0]["mean_interaction"][9], np.diagonal(expected[0]).mean(), rtol=1e-5)
  json.dumps(layers, allow_nan=False)  # metrics.json stays strict JSON


def test_no_position_figures_without_positions(tmp_path):
  model, params, tokens = _model_and_tokens("none")
  assert analysis.position_figures(model, params, tokens, tokens != 0, str(tmp_path), "t") == []


# ------------------------------------------------------------------------------------------ attention


def test_alibi_slopes_are_press_et_al_s():
  assert attention.alibi_slopes(8) == tuple(2.0 ** -e for e in range(1, 9))
  assert attention.alibi_slopes(2) == (2.0 ** -4, 2.0 ** -8)
  # Not a power of 2: the 4-head slopes, then every other one of the 8-head slopes.
  assert attention.alibi_slopes(6) == tuple(2.0 ** -e for e in (2, 4, 6, 8, 1, 3))


def test_rope_scores_depend_only_on_the_offset():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((2, 2, 8), np.float32)  # one query and one key vector per head

  def score(i, j, length=24):
    q = np.zeros((1, length, 2, 8), np.float32)
    k = np.zeros((1, length, 2, 8), np.float32)
    q[0, i], k[0, j] = a, b
    rq, rk = attention.rotary(q), attention.rotary(k)
    return np.einsum("hd,hd->h", rq[0, i], rk[0, j])

  base = score(3, 7)
  for shift in (1, 5, 16):
    np.testing.assert_allclose(score(3 + shift, 7 + shift), base, rtol=1e-5, atol=1e-5)
  assert np.abs(score(3, 8) - base).max() > 1e-2
  np.testing.assert_allclose(score(5, 5), np.einsum("hd,hd->h", a, b), rtol=1e-5)  # offset 0: q·k


def test_grid_alibi_bias_is_a_function_of_grid_distance():
  slopes = attention.alibi_slopes(2)
  width = 5
  bias = np.asarray(attention.ScoreModifier(alibi=slopes, grid_width=width).bias(
      np.arange(25), np.arange(25)))
  rows, cols = np.divmod(np.arange(25), width)
  distance = np.hypot(rows[:, None] - rows[None, :], cols[:, None] - cols[None, :])
  for h, slope in enumerate(slopes):
    np.testing.assert_allclose(bias[h], -slope * distance, rtol=1e-6)
  # The pixel below is as near as the one to the right (1D ALiBi puts it `width` times further).
  assert bias[0, 7, 12] == bias[0, 7, 8] == bias[0, 12, 7]
  assert bias[0, 7, 13] == pytest.approx(-slopes[0] * np.sqrt(2))


def test_axial_rope_scores_depend_only_on_the_grid_offset():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((2, 2, 8), np.float32)
  width, length = 6, 36

  def score(i, j):
    q = np.zeros((1, length, 2, 8), np.float32)
    k = np.zeros((1, length, 2, 8), np.float32)
    q[0, i], k[0, j] = a, b
    rq, rk = attention.rotary(q, width), attention.rotary(k, width)
    return np.einsum("hd,hd->h", rq[0, i], rk[0, j])

  base = score(7, 14)  # (1, 1) → (2, 2): one row down, one column right
  for shift in (1, width, width + 2, 2 * width + 3):  # grid translations that stay on the grid
    np.testing.assert_allclose(score(7 + shift, 14 + shift), base, rtol=1e-5, atol=1e-5)
  # A 1D offset that wraps to the next row is another grid offset: another score.
  assert np.abs(score(5, 6) - score(4, 5)).max() > 1e-2
  np.testing.assert_allclose(score(9, 9), np.einsum("hd,hd->h", a, b), rtol=1e-5)


def test_grid_positions_need_a_square_length_a_head_dimension_of_four_and_no_cls():
  section = ml_collections.ConfigDict(transformer.section_defaults())
  section.update(position="rope2d", d_model=24, num_heads=4)  # head dimension 6
  with pytest.raises(ValueError, match=r"position='rope2d' .*half by row.* must be a multiple "
                                       r"of 4"):
    transformer.validate_section(section)
  section.update(position="alibi2d", pooling="cls")
  with pytest.raises(ValueError, match="where a CLS token has no place"):
    transformer.validate_section(section)
  with pytest.raises(ValueError, match="the data's length is 10, not a square"):
    transformer.from_section(ml_collections.ConfigDict(dict(position="alibi2d")), max_length=10)
  assert transformer.from_section(ml_collections.ConfigDict(dict(position="alibi2d")),
                                  max_length=16).grid_width == 4


@pytest.mark.parametrize("position", ["rope2d", "alibi2d"])
def test_grid_positions_in_the_model_blockwise_matches_dense_and_they_matter(position):
  model, params, tokens = _model_and_tokens(position, max_length=16, num_layers=1)
  tokens = np.random.default_rng(2).integers(3, 12, (3, 16))
  logits = lambda impl: jax.jit(model.with_options(attention=impl, attention_block_size=8).apply)(
      {"params": params}, tokens)
  np.testing.assert_allclose(logits("blockwise"), logits("dense"), **TOL)
  one_d = model.with_options(position=position[:-2])
  assert np.abs(one_d.apply({"params": params}, tokens) - logits("dense")).max() > 1e-4


def test_dense_alibi_is_softmax_of_scores_plus_bias():
  q, k, v, _, mask = _inputs(11, heads=4)
  slopes = np.array(attention.alibi_slopes(4))
  i = np.arange(11)
  scores = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(8) - slopes[:, None, None] * np.abs(
      i[:, None] - i[None, :])
  scores = np.where(mask[:, None, None, :], scores, np.finfo(np.float32).min)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  out, got = attention.dense_attention(q, k, v, mask, modifier=attention.ScoreModifier(
      alibi=tuple(slopes)))
  np.testing.assert_allclose(got, weights, **TOL)
  np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", weights, v), **TOL)
  np.testing.assert_allclose(got[3], 1 / 11, rtol=1e-6)  # the all-padding row stays uniform
  assert (np.asarray(got)[:, :, :, ~mask[2]][2] == 0).all()  # a padded key never gets weight


GRID = 6  # the 2d positions' grid width in the attention-level tests (the last row may be partial)


def _t5_bias(heads: int, causal: bool = False) -> positions.BucketBias:
  """T5's bias with an N(0, 1) table: larger than its initial one, so that errors would show."""
  table = jax.random.normal(jax.random.PRNGKey(7), (heads, 32))
  return positions.BucketBias(table, bidirectional=not causal)


def _position_fn(position: str, heads: int, implementation: str, block: int, mask):
  """Attention as MultiHeadAttention runs it for `position`: q, k rotated, or the rule on scores
  (ALiBi's, T5's learned bias)."""
  grid = GRID if position.endswith("2d") else 0
  modifier = attention.ScoreModifier(
      alibi=attention.alibi_slopes(heads) if position.startswith("alibi") else (), grid_width=grid,
      learned_bias=_t5_bias(heads) if position == "t5_relative" else None)
  turn = ((lambda x: attention.rotary(x, grid)) if position.startswith("rope")
          else (lambda x: x))

  def fn(q, k, v):
    return attention.attend(turn(q), turn(k), v, mask, implementation=implementation,
                            block_size=block, modifier=modifier)[0]
  return fn, modifier, turn


@pytest.mark.parametrize("position", ["rope", "alibi", "rope2d", "alibi2d", "t5_relative"])
@pytest.mark.parametrize("implementation,block", [("blockwise", 8), ("blockwise", 64), ("local", 32)],
                         ids=["blockwise_not_dividing", "blockwise_larger_than_L", "local_whole"])
def test_memory_efficient_implementations_match_dense(position, implementation, block):
  q, k, v, cot, mask = _inputs(37, heads=4)
  fast, _, _ = _position_fn(position, 4, implementation, block, mask)
  dense, _, _ = _position_fn(position, 4, "dense", block, mask)
  out_f, grads_f = _grads(fast, q, k, v, cot)
  out_d, grads_d = _grads(dense, q, k, v, cot)
  np.testing.assert_allclose(out_f, out_d, **TOL)  # every row kind, all-padding included
  for name, g_f, g_d in zip("qkv", grads_f, grads_d):
    np.testing.assert_allclose(g_f, g_d, **TOL, err_msg=f"d{name}")


@pytest.mark.parametrize("position", ["rope", "alibi", "alibi2d", "t5_relative"])
def test_local_windows_match_banded_dense(position):
  length, block = 37, 8
  q, k, v, cot, mask = _inputs(length, heads=4, seed=1)
  local, modifier, turn = _position_fn(position, 4, "local", block, mask)
  blocks = np.arange(length) // block
  allowed = (np.abs(blocks[:, None] - blocks[None, :]) <= 1)[None] & mask[:, None, :]

  def banded_dense(q, k, v):
    scores = attention.dense_scores(turn(q), turn(k), mask, modifier)
    scores = jnp.where(allowed[:, None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

  # Rows that see no real key in their window are defined differently (test_attention.py).
  sees_a_key = allowed.any(-1)
  out_l, grads_l = _grads(local, q, k, v, cot, sees_a_key)
  out_d, grads_d = _grads(banded_dense, q, k, v, cot, sees_a_key)
  np.testing.assert_allclose(np.asarray(out_l)[sees_a_key], np.asarray(out_d)[sees_a_key], **TOL)
  for name, g_l, g_d in zip("qkv", grads_l, grads_d):
    np.testing.assert_allclose(g_l, g_d, **TOL, err_msg=f"d{name}")


def _train_temp_bytes(implementation: str, length: int, modifier) -> int:
  x = jax.ShapeDtypeStruct((1, length, 2, 16), jnp.float32)
  mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
  loss = lambda q, k, v, m: attention.attend(q, k, v, m, implementation=implementation,
                                             block_size=128, modifier=modifier)[0].sum()
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
  return step.lower(x, x, x, mask).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("implementation", ["blockwise", "local"])
def test_alibi_keeps_memory_linear_in_length(implementation):
  alibi = attention.ScoreModifier(alibi=attention.alibi_slopes(2))
  assert _train_temp_bytes(implementation, 2048, alibi) / _train_temp_bytes(
      implementation, 512, alibi) < 5  # an L×L bias would make it ~16


# ------------------------------------------------------------------------------------------ model


# Each position with one pooling (the CLS token shifts every position by one: covered once each way).
@pytest.mark.parametrize("position,pooling", [("rope", "cls"), ("alibi", "mean")])
def test_appending_padding_changes_nothing_at_real_positions(position, pooling):
  model, params, tokens = _model_and_tokens(position, pooling, max_length=16)
  padded = np.concatenate([tokens, np.zeros((3, 6), tokens.dtype)], axis=1)
  run = jax.jit(model.apply)
  np.testing.assert_allclose(run({"params": params}, tokens), run({"params": params}, padded),
                             rtol=1e-5, atol=1e-5)
  mlm = model.clone(head="mlm")
  mlm_params = mlm.init(jax.random.PRNGKey(1), tokens)["params"]
  real = tokens != 0
  a = jax.jit(mlm.apply)({"params": mlm_params}, tokens)
  b = jax.jit(mlm.apply)({"params": mlm_params}, padded)[:, :10]
  np.testing.assert_allclose(np.asarray(a)[real], np.asarray(b)[real], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_no_new_parameters_and_the_positions_matter(position):
  model, params, tokens = _model_and_tokens(position)
  none, none_params, _ = _model_and_tokens("none")
  assert tree.flatten(params).keys() == tree.flatten(none_params).keys()
  # The same parameters give other outputs than without positions: they are in effect.
  assert np.abs(model.apply({"params": params}, tokens)
                - none.apply({"params": params}, tokens)).max() > 1e-4


# t5_relative: test_t5_relative_sequence_model_gradients_blockwise_match_dense.
@pytest.mark.parametrize("position", ["rope", "alibi"])
def test_sequence_model_blockwise_matches_dense(position):
  model, params, tokens = _model_and_tokens(position, "cls", max_length=21, num_layers=1)
  tokens = np.random.default_rng(2).integers(3, 12, (3, 21))
  tokens[1, 15:] = 0
  logits = lambda impl: jax.jit(model.with_options(attention=impl, attention_block_size=8).apply)(
      {"params": params}, tokens)
  np.testing.assert_allclose(logits("blockwise"), logits("dense"), **TOL)


def test_validation_accepts_the_new_positions_and_names_the_key_for_an_odd_head_dimension():
  section = ml_collections.ConfigDict(transformer.section_defaults())
  for position in ("rope", "alibi"):
    section.position = position
    transformer.validate_section(section)
  section.update(position="rope", d_model=12, num_heads=4)
  with pytest.raises(ValueError, match=r"config.model.position='rope'.*config.model.d_model / "
                                       r"config.model.num_heads = 3 must be a multiple of 2"):
    transformer.validate_section(section)
  section.position = "alibi"  # any head count: non-powers of 2 have their own slopes
  transformer.validate_section(section)


# ------------------------------------------------------------------------------------------ analysis


@pytest.mark.parametrize("position", ["rope", "alibi", "t5_relative"])
def test_relative_bias_figure_and_numbers(position, tmp_path):
  model, params, tokens = _model_and_tokens(position)
  layers = analysis.position_figures(model, params, tokens, tokens != 0, str(tmp_path), "t")
  assert [entry["figure"] for entry in layers] == [f"relative_bias_layer{i}.png" for i in (0, 1)]
  assert all((tmp_path / entry["figure"]).stat().st_size > 0 for entry in layers)
  assert layers[0]["offsets"] == list(range(-9, 10))
  head = layers[0]["heads"][1]
  assert len(head["mean_logit"]) == 19 and all(np.isfinite(head["mean_logit"]))
  if position == "alibi":
    slope = attention.alibi_slopes(2)[1]
    assert head["alibi_slope"] == slope
    np.testing.assert_allclose(head["alibi_bias"], -slope * np.abs(np.arange(-9, 10)), rtol=1e-6)
  if position == "t5_relative":  # the trained table at each offset's bucket (key − query = −offset)
    table = np.asarray(params["encoder"]["relative_position_bias"])
    buckets = np.asarray(positions.relative_position_bucket(-np.arange(-9, 10)))
    np.testing.assert_allclose(head["learned_bias"], table[1, buckets], rtol=1e-6)
  json.dumps(layers, allow_nan=False)


def test_relative_bias_of_alibi_without_content_is_its_explicit_bias():
  """With W_K = 0 every q·k is 0, so the mean logit per offset is exactly ALiBi's bias."""
  model, params, tokens = _model_and_tokens("alibi", num_layers=1)
  params = jax.tree_util.tree_map(lambda x: x, params)
  params["encoder"]["layer_0"]["attention"]["key"]["kernel"] *= 0
  head = analysis.relative_bias(model, params, tokens, tokens != 0)[0]["heads"][0]
  np.testing.assert_allclose(head["mean_logit"], head["alibi_bias"], atol=1e-6)


def test_cli_writes_the_relative_bias_figure_of_a_tiny_alibi_run(tmp_path, cache_dir):
  config = tiny(load_config("listops_scratch"), cache_dir, steps=2)
  config.model.position = "alibi"
  experiment.run(config, str(tmp_path / "run"))
  out = tmp_path / "analysis"
  result = analyse(str(tmp_path / "run" / "finetune"), "best", str(out), "val", 4, 1)
  assert {"attention_layer0.png", "relative_bias_layer0.png", "metrics.json"} <= set(os.listdir(out))
  saved = json.load(open(out / "metrics.json"))
  assert saved["layers"][0]["position"] == result["layers"][0]["position"]
  assert saved["layers"][0]["position"]["kind"] == "relative_bias"
  assert len(saved["layers"][0]["position"]["heads"]) == 2


def test_grid_proximity_sees_the_pixel_below_as_near_as_the_one_to_the_right():
  width, length = 4, 16
  below, right = np.zeros((length, length)), np.zeros((length, length))
  for i in range(length):
    below[i, (i + width) % length] = 1.0
    right[i, i - i % width + (i + 1) % width] = 1.0
  one_d = {k: float(v) for k, v in analysis.proximity_metrics(below).items()}
  grid_below = {k: float(v) for k, v in analysis.proximity_metrics(below, grid_width=width,
                                                                   band=1.5).items()}
  assert one_d["band_mass"] == 0.0 and one_d["mean_distance"] > 4
  rows_wrap = np.arange(length) >= length - width  # the last row's "below" wraps to the top
  assert grid_below["band_mass"] == pytest.approx(1 - rows_wrap.mean())
  grid_right = analysis.proximity_metrics(right, grid_width=width, band=1.5)
  assert float(grid_right["mean_distance"]) == pytest.approx(1.5)  # 3 × 1, then a wrap of 3
  rows, cols, means = analysis.mean_by_grid_offset(
      np.stack([below, right]), np.ones((length, length), bool), width)
  assert means.shape == (2, 2 * width - 1, 2 * width - 1)
  # Attention to the pixel below is all at (Δrow, Δcolumn) = (−1, 0): query minus key.
  assert means[0, list(rows).index(-1), list(cols).index(0)] == pytest.approx(1.0)


# ------------------------------------------------------------------------------------------ t5_relative


def _reference_buckets(offsets, bidirectional: bool = True, num_buckets: int = 32,
                       max_distance: int = 128) -> np.ndarray:
  """T5's bucket of each key − query offset, from the paper's description and t5x's rule, one offset
  at a time (float32 logarithms, as t5x computes them)."""
  out = []
  for offset in offsets:
    half = num_buckets // 2 if bidirectional else num_buckets
    side = half if bidirectional and offset > 0 else 0  # keys after the query: the upper half
    distance = abs(offset) if bidirectional else max(-offset, 0)
    exact = half // 2
    if distance < exact:
      out.append(side + distance)
      continue
    ratio = np.float32(distance) / np.float32(exact) + np.finfo(np.float32).eps
    scaled = np.log(np.float32(ratio)) / np.float32(np.log(max_distance / exact)) * (half - exact)
    out.append(side + min(exact + int(np.float32(scaled)), half - 1))
  return np.array(out)


def test_t5_buckets_are_t5s():
  offsets = np.arange(-300, 301)
  got = np.asarray(positions.relative_position_bucket(offsets))
  np.testing.assert_array_equal(got, _reference_buckets(offsets))
  # Keys at or before the query in buckets 0-15, after it in 16-31; offsets below 8 have a bucket
  # each, longer ones log-spaced buckets up to 128, beyond which they share the last one.
  anchors = {0: 0, -1: 1, -7: 7, -8: 8, -15: 9, -16: 10, -32: 12, -64: 14, -127: 15, -128: 15,
             -300: 15, 1: 17, 7: 23, 8: 24, 16: 26, 64: 30, 127: 31, 300: 31}
  assert {o: int(got[o + 300]) for o in anchors} == anchors
  one_sided = np.asarray(positions.relative_position_bucket(offsets, bidirectional=False))
  np.testing.assert_array_equal(one_sided, _reference_buckets(offsets, bidirectional=False))
  assert (one_sided[offsets >= 0] == 0).all() and one_sided.max() == 31
  small = positions.relative_position_bucket(offsets, num_buckets=12, max_distance=10)
  np.testing.assert_array_equal(small, _reference_buckets(offsets, num_buckets=12, max_distance=10))


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("block", [8, 64], ids=["blocks_not_dividing", "block_larger_than_L"])
def test_t5_table_gradient_of_blockwise_is_dense_attentions(block, causal):
  """The blockwise backward differentiates the learned bias per block pair: the table's gradient
  (and q, k, v's) equal to dense attention's, all-padding rows included."""
  q, k, v, cot, mask = _inputs(37, heads=4)
  table = _t5_bias(4).table

  def grads(implementation):
    def loss(table, q, k, v):
      modifier = attention.ScoreModifier(
          causal=causal, learned_bias=positions.BucketBias(table, bidirectional=not causal))
      out = attention.attend(q, k, v, mask, implementation=implementation, block_size=block,
                             modifier=modifier)[0]
      return (out * cot).sum()
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))(table, q, k, v)

  (value_b, grads_b), (value_d, grads_d) = grads("blockwise"), grads("dense")
  np.testing.assert_allclose(value_b, value_d, **TOL)
  assert np.abs(grads_d[0]).max() > 1e-3  # the table gets a gradient at all
  for name, g_b, g_d in zip(["table", "q", "k", "v"], grads_b, grads_d):
    np.testing.assert_allclose(g_b, g_d, **TOL, err_msg=f"d{name}")


def test_t5_relative_is_one_table_shared_by_every_layer_and_only_it_matters():
  model, params, tokens = _model_and_tokens("t5_relative")
  none, none_params, _ = _model_and_tokens("none")
  flat = tree.flatten(params)
  assert set(flat) - set(tree.flatten(none_params)) == {"encoder/relative_position_bias"}
  assert flat["encoder/relative_position_bias"].shape == (2, 32)  # [heads, buckets]
  without = {**params, "encoder": {k: v for k, v in params["encoder"].items()
                                   if k != "relative_position_bias"}}
  zero = {**params, "encoder": {**params["encoder"], "relative_position_bias":
                                jnp.zeros((2, 32))}}
  np.testing.assert_allclose(model.apply({"params": zero}, tokens),
                             none.apply({"params": without}, tokens), rtol=1e-6, atol=1e-6)
  assert np.abs(model.apply({"params": params}, tokens)
                - none.apply({"params": without}, tokens)).max() > 1e-4


def test_t5_relative_sequence_model_gradients_blockwise_match_dense():
  model, params, tokens = _model_and_tokens("t5_relative", "cls", max_length=21, num_layers=2)
  tokens = np.random.default_rng(2).integers(3, 12, (3, 21))
  tokens[1, 15:] = 0

  def grads(implementation):
    run = model.with_options(attention=implementation, attention_block_size=8)
    return jax.jit(jax.grad(lambda p: (run.apply({"params": p}, tokens) ** 2).sum()))(params)

  blockwise, dense = tree.flatten(grads("blockwise")), tree.flatten(grads("dense"))
  for path, g in dense.items():
    np.testing.assert_allclose(blockwise[path], g, **TOL, err_msg=path)


def test_t5_relative_config_flags_and_the_platforms_choice():
  section = ml_collections.ConfigDict(transformer.section_defaults())
  section.update(position="t5_relative", d_model=12, num_heads=4)  # any head dimension
  transformer.validate_section(section)
  section.position = "t5"
  with pytest.raises(ValueError, match=r"config.model.position='t5' must be one of .*'t5_relative'"):
    transformer.validate_section(section)
  encoding = positions.get("t5_relative")
  assert not encoding.length_bound and not encoding.adds_codes and encoding.in_attention
  # A learned bias would reach cuDNN as an L×L operand: 'auto' keeps such a model on dense.
  cfg = transformer.ModelConfig(vocab_size=20, max_length=2000, num_layers=1, d_model=512,
                                num_heads=8, d_ff=64, dtype="bfloat16", position="t5_relative")
  choice = platform.auto_attention(cfg, backend="cuda")
  assert choice.implementation == "dense" and "T5" in choice.reason, choice
  assert platform.auto_attention(cfg.replace(position="rope"), backend="cuda").implementation == (
      "cudnn")


def test_t5_bias_and_its_gradient_keep_blockwise_memory_linear_in_length():
  def temp_bytes(length):
    x = jax.ShapeDtypeStruct((1, length, 2, 16), jnp.float32)
    mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
    table = jax.ShapeDtypeStruct((2, 32), jnp.float32)

    def loss(table, q, k, v, m):
      modifier = attention.ScoreModifier(learned_bias=positions.BucketBias(table))
      return attention.attend(q, k, v, m, implementation="blockwise", block_size=128,
                              modifier=modifier)[0].sum()
    step = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))
    return step.lower(table, x, x, x, mask).compile().memory_analysis().temp_size_in_bytes

  assert temp_bytes(2048) / temp_bytes(512) < 5  # an L×L bias or its gradient would make it ~16
