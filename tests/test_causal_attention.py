"""Causal attention (model.causal): query i sees keys j <= i only, in every implementation, with
padding and with every position option; blockwise skips the block pairs wholly in the future."""
from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from test_attention import TOL, _grads, _inputs

from spt_jax.models import attention, transformer

LENGTH = 37
# (implementation, block size): blockwise at a block that divides nothing and one that divides
# into several blocks, local with more than two blocks (real windows).
IMPLEMENTATIONS = [("dense", 8), ("blockwise", 8), ("blockwise", 5), ("local", 8)]


def _causal_fn(implementation: str, block: int, position: str, mask, heads: int = 2):
  """Causal attention of (q, k, v) as MultiHeadAttention runs it for `position`."""
  modifier = attention.ScoreModifier(
      alibi=attention.alibi_slopes(heads) if position == "alibi" else (), causal=True)
  turn = attention.rotary if position == "rope" else (lambda x: x)

  def fn(q, k, v):
    return attention.attend(turn(q), turn(k), v, mask, implementation=implementation,
                            block_size=block, modifier=modifier)[0]
  return fn, modifier, turn


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
@pytest.mark.parametrize("implementation,block", IMPLEMENTATIONS,
                         ids=[f"{i}_{b}" for i, b in IMPLEMENTATIONS])
def test_outputs_up_to_t_ignore_everything_after_t(implementation, block, position):
  q, k, v, _, mask = _inputs(LENGTH)
  t = 20
  rng = np.random.default_rng(5)
  changed = [x.copy() for x in (q, k, v)]
  for x in changed:
    x[:, t + 1:] = rng.standard_normal(x[:, t + 1:].shape)
  changed_mask = mask.copy()
  changed_mask[:, t + 1:] = ~mask[:, t + 1:]
  # The mask an argument, not a constant of each program: one compilation for both calls.
  run = jax.jit(lambda m, q, k, v: _causal_fn(implementation, block, position, m)[0](q, k, v))
  before = run(mask, q, k, v)
  after = run(changed_mask, *changed)
  np.testing.assert_allclose(np.asarray(after)[:, :t + 1], np.asarray(before)[:, :t + 1],
                             rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(after)[:, t + 1:] - np.asarray(before)[:, t + 1:]).max() > 1e-3


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
@pytest.mark.parametrize("block", [8, 64], ids=["blocks_not_dividing", "block_larger_than_L"])
def test_blockwise_matches_dense(block, position):
  q, k, v, cot, mask = _inputs(LENGTH)
  out_b, grads_b = _grads(_causal_fn("blockwise", block, position, mask)[0], q, k, v, cot)
  out_d, grads_d = _grads(_causal_fn("dense", block, position, mask)[0], q, k, v, cot)
  np.testing.assert_allclose(out_b, out_d, **TOL)  # every row, the all-padding one included
  for name, g_b, g_d in zip("qkv", grads_b, grads_d):
    np.testing.assert_allclose(g_b, g_d, **TOL, err_msg=f"d{name}")


def test_an_all_padding_row_is_uniform_over_its_past():
  q, k, v, _, mask = _inputs(LENGTH)
  modifier = attention.ScoreModifier(causal=True)
  out, weights = attention.dense_attention(q, k, v, mask, modifier=modifier)
  rows = np.arange(LENGTH)
  expected = (rows[None, :] <= rows[:, None]) / (rows[:, None] + 1.0)
  np.testing.assert_allclose(weights[3], np.broadcast_to(expected, weights[3].shape), rtol=1e-6)
  blockwise = attention.blockwise_attention(q, k, v, mask, block_size=8, modifier=modifier)[0]
  np.testing.assert_allclose(blockwise[3], out[3], **TOL)


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
def test_local_matches_banded_causal_dense(position):
  block = 8
  q, k, v, cot, mask = _inputs(LENGTH, seed=1)
  local, modifier, turn = _causal_fn("local", block, position, mask)
  blocks = np.arange(LENGTH) // block
  allowed = ((np.abs(blocks[:, None] - blocks[None, :]) <= 1)
             & (np.arange(LENGTH)[None, :] <= np.arange(LENGTH)[:, None]))[None] & mask[:, None, :]

  def banded_dense(q, k, v):
    scores = attention.dense_scores(turn(q), turn(k), mask, modifier)
    scores = jnp.where(allowed[:, None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

  # Rows that see no real key in their window are defined differently (test_attention.py).
  sees_a_key = allowed.any(-1)
  assert not sees_a_key.all()
  out_l, grads_l = _grads(local, q, k, v, cot, sees_a_key)
  out_d, grads_d = _grads(banded_dense, q, k, v, cot, sees_a_key)
  np.testing.assert_allclose(np.asarray(out_l)[sees_a_key], np.asarray(out_d)[sees_a_key], **TOL)
  for name, g_l, g_d in zip("qkv", grads_l, grads_d):
    np.testing.assert_allclose(g_l, g_d, **TOL, err_msg=f"d{name}")


def test_local_with_at_most_two_blocks_is_causal_dense():
  q, k, v, _, mask = _inputs(LENGTH)
  local = _causal_fn("local", 32, "alibi", mask)[0](q, k, v)
  np.testing.assert_allclose(local, _causal_fn("dense", 32, "alibi", mask)[0](q, k, v), **TOL)


def _block_products(fn, *args) -> int:
  """dot_generals executed by `fn`, each counted as often as its enclosing scans run it."""
  def count(jaxpr) -> int:
    total = 0
    for eqn in jaxpr.eqns:
      inner = sum(count(sub) for sub in jax.extend.core.jaxprs_in_params(eqn.params))
      if eqn.primitive.name == "while":  # the block loops are scans; a while would hide its count
        raise AssertionError("a while loop: its trip count is not in the program")
      total += inner * (eqn.params["length"] if eqn.primitive.name == "scan" else 1)
      total += eqn.primitive.name == "dot_general"
    return total
  return count(jax.make_jaxpr(fn)(*args).jaxpr)


def test_causal_blockwise_skips_the_future_block_pairs():
  q, k, v, cot, mask = _inputs(64)
  n = 64 // 8
  products = {}
  for causal in (False, True):
    modifier = attention.ScoreModifier(causal=causal)
    forward = lambda q, k, v: attention.blockwise_attention(q, k, v, mask, block_size=8,
                                                            modifier=modifier)[0]
    train = lambda q, k, v: jax.vjp(forward, q, k, v)[1](cot)
    products[causal] = (_block_products(forward, q, k, v), _block_products(train, q, k, v))
  # Two products per block pair forward (q·kᵀ, p·v), five more backward (the scores recomputed, dV,
  # dP, dK, dQ); the difference leaves out the few products outside the loops.
  pairs = {False: n * n, True: n * (n + 1) // 2}
  assert products[False][0] == 2 * pairs[False] and products[True][0] == 2 * pairs[True]
  assert products[False][1] - products[True][1] == 7 * (pairs[False] - pairs[True])


@pytest.mark.parametrize("attention_impl", ["dense", "blockwise"])
@pytest.mark.parametrize("position", list(transformer.POSITIONS))
def test_sequence_model_is_causal_and_blockwise_matches_dense(position, attention_impl):
  model = transformer.build(vocab_size=12, max_length=21, head="mlm", num_layers=2, d_model=16,
                            num_heads=2, d_ff=32, position=position, causal=True, pooling="last",
                            attention=attention_impl, attention_block_size=8)
  tokens = np.random.default_rng(0).integers(3, 12, (3, 21))
  tokens[1, 15:] = 0  # trailing padding
  # Op by op, not jitted: the initialisers' small programs serve every model of these shapes, where
  # a jitted init is one large program per model (docs/testing.md).
  params = model.init(jax.random.PRNGKey(1), tokens)["params"]
  run = jax.jit(model.apply)
  logits = run({"params": params}, tokens)
  t = 9
  changed = tokens.copy()
  changed[:, t + 1:] = np.random.default_rng(1).integers(0, 12, changed[:, t + 1:].shape)
  np.testing.assert_allclose(run({"params": params}, changed)[:, :t + 1], logits[:, :t + 1],
                             rtol=1e-5, atol=1e-5)
  if attention_impl != "dense":
    dense = jax.jit(model.with_options(attention="dense").apply)({"params": params}, tokens)
    np.testing.assert_allclose(logits, dense, **TOL)


def test_validation_rejects_causal_with_cls_pooling():
  section = ml_collections.ConfigDict(transformer.section_defaults())
  section.causal = True
  transformer.validate_section(section)  # mean pooling
  section.pooling = "cls"
  with pytest.raises(ValueError, match=r"config.model.causal=True with config.model.pooling='cls'"):
    transformer.validate_section(section)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cuDNN runs on a CUDA GPU only")
@pytest.mark.parametrize("position", ["none", "alibi"])
def test_cudnn_matches_dense(position):
  q, k, v, _, mask = _inputs(LENGTH, dim=16)
  mask = np.arange(LENGTH)[None] < np.array([LENGTH, 30, 1, 0])[:, None]  # cuDNN: prefixes only
  cudnn = _causal_fn("cudnn", 8, position, mask)[0](q, k, v)
  dense = _causal_fn("dense", 8, position, mask)[0](q, k, v)
  np.testing.assert_allclose(cudnn, dense, atol=3e-2, rtol=3e-2)  # cuDNN computes in bfloat16
