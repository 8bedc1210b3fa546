"""Memory-efficient attention: the same numbers as dense (or banded dense), in memory linear in L."""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spt_jax import platform
from spt_jax.models import attention
from spt_jax.models import transformer

# float32 throughout; blockwise reorders the softmax sums, so agreement is to rounding, not bitwise.
TOL = dict(atol=1e-5, rtol=1e-4)


def _inputs(length: int, batch: int = 4, heads: int = 2, dim: int = 8, seed: int = 0):
  """q, k, v, a cotangent and a key mask with every kind of row: full, padded, holey, empty."""
  rng = np.random.default_rng(seed)
  q, k, v, cot = rng.standard_normal((4, batch, length, heads, dim), np.float32)
  mask = rng.random((batch, length)) < 0.7
  mask[0] = True
  mask[1] = np.arange(length) < max(1, length - 5)
  mask[3] = False
  return q, k, v, cot, mask


def _grads(fn, q, k, v, cot, row_weight=None):
  """Outputs and d<out·cot>/d(q, k, v); `row_weight` [B, L] drops rows from the loss."""
  w = 1.0 if row_weight is None else np.asarray(row_weight, np.float32)[:, :, None, None]

  @jax.jit  # One compilation instead of op-by-op dispatch: most of this file's runtime otherwise.
  def run(q, k, v):
    out, vjp = jax.vjp(fn, q, k, v)
    return out, vjp(cot * w)

  return run(q, k, v)


@pytest.mark.parametrize("length,block_size", [(32, 8), (37, 8), (10, 64)],
                         ids=["multiple", "not_multiple", "block_larger_than_L"])
def test_blockwise_matches_dense(length, block_size):
  q, k, v, cot, mask = _inputs(length)
  dense = lambda q, k, v: attention.dense_attention(q, k, v, mask)[0]
  blockwise = lambda q, k, v: attention.attend(q, k, v, mask, implementation="blockwise",
                                               block_size=block_size)[0]
  out_d, grads_d = _grads(dense, q, k, v, cot)
  out_b, grads_b = _grads(blockwise, q, k, v, cot)
  # Every row, the all-padding one included: blockwise reproduces dense's uniform row there.
  np.testing.assert_allclose(out_b, out_d, **TOL)
  for name, g_b, g_d in zip("qkv", grads_b, grads_d):
    np.testing.assert_allclose(g_b, g_d, **TOL, err_msg=f"d{name}")
  assert attention.blockwise_attention(q, k, v, mask, block_size=block_size)[1] is None


def _t5_table_bias(heads: int):
  from spt_jax.models import positions
  return positions.BucketBias(jax.random.normal(jax.random.PRNGKey(7), (heads, 32)),
                              bidirectional=True)


@pytest.mark.parametrize("rule", ["none", "alibi_causal", "t5_relative"])
def test_blockwise_loop_over_the_batch_changes_no_number(rule):
  """sequence_chunk (the CPU's cache-sized steps through the batch): the same outputs and gradients
  as the whole batch at once, the learned bias's included; a chunk that does not divide the batch
  (3 of 4) takes the largest one that does."""
  q, k, v, cot, mask = _inputs(21, heads=2)
  modifier = {"none": attention.NO_MODIFIER,
              "alibi_causal": attention.ScoreModifier(alibi=attention.alibi_slopes(2), causal=True),
              "t5_relative": attention.ScoreModifier(learned_bias=_t5_table_bias(2))}[rule]

  @functools.partial(jax.jit, static_argnums=4)
  def run(q, k, v, modifier, chunk):
    fn = lambda q, k, v, m: attention.blockwise_attention(
        q, k, v, mask, block_size=8, sequence_chunk=chunk, modifier=m)[0]
    out, vjp = jax.vjp(fn, q, k, v, modifier)
    return out, vjp(cot)
  whole, whole_grads = run(q, k, v, modifier, 0)
  for chunk in (1, 3):
    out, grads = run(q, k, v, modifier, chunk)
    np.testing.assert_allclose(out, whole, **TOL)
    for g, g_whole in zip(jax.tree.leaves(grads), jax.tree.leaves(whole_grads)):
      np.testing.assert_allclose(g, g_whole, **TOL)
  with pytest.raises(ValueError, match="sequence_chunk=-1"):
    attention.blockwise_attention(q, k, v, mask, block_size=8, sequence_chunk=-1)


@pytest.mark.parametrize("rule", ["alibi_causal", "t5_relative"])
def test_one_block_with_kept_probabilities_matches_dense(rule):
  """A sequence taken as one block keeps its probabilities for the backward (`_one_block`): the
  same outputs and gradients as dense, the learned bias's included, for every kind of row."""
  q, k, v, cot, mask = _inputs(21, heads=2, seed=2)
  modifier = {"alibi_causal": attention.ScoreModifier(alibi=attention.alibi_slopes(2), causal=True),
              "t5_relative": attention.ScoreModifier(learned_bias=_t5_table_bias(2))}[rule]

  @functools.partial(jax.jit, static_argnums=4)
  def run(q, k, v, modifier, implementation):
    fn = lambda q, k, v, m: attention.attend(q, k, v, mask, implementation=implementation,
                                             block_size=32, modifier=m)[0]
    out, vjp = jax.vjp(fn, q, k, v, modifier)
    return out, vjp(cot)
  out_d, grads_d = run(q, k, v, modifier, "dense")
  out_b, grads_b = run(q, k, v, modifier, "blockwise")
  np.testing.assert_allclose(out_b, out_d, **TOL)
  for g_b, g_d in zip(jax.tree.leaves(grads_b), jax.tree.leaves(grads_d)):
    np.testing.assert_allclose(g_b, g_d, **TOL)


def test_one_block_backward_reuses_the_forwards_probabilities(monkeypatch):
  """What makes it faster: within KEPT_PROBABILITIES_MAX_BYTES the backward computes no second
  exp of the [B, H, L, L] scores; beyond it (here: the budget lowered under the batch's scores)
  it recomputes them from the softmax statistics and stays linear in L."""
  q, k, v, cot, mask = _inputs(16, heads=2)

  def exps(budget):
    monkeypatch.setattr(attention, "KEPT_PROBABILITIES_MAX_BYTES", budget)
    fn = lambda q, k, v: attention.blockwise_attention(q, k, v, mask, block_size=16)[0]
    jaxpr = jax.make_jaxpr(lambda q, k, v: jax.vjp(fn, q, k, v)[1](cot))(q, k, v)
    return sum(eqn.primitive.name == "exp" and eqn.outvars[0].aval.shape[-2:] == (16, 16)
               for eqn in _all_eqns(jaxpr.jaxpr))
  scores_bytes = 4 * 2 * 16 * 16 * 4
  assert exps(scores_bytes) == 1
  assert exps(scores_bytes - 1) == 2


def _transposed_lhs_dots(hlo: str) -> list[str]:
  """Batched dots ([B, H, ...] tiles) of a compiled program that contract their lhs on an axis other
  than its last: XLA:CPU runs those outside YNNPACK."""
  return [line for line in re.findall(r" dot\([^\n]*", hlo)
          if "lhs_batch_dims={0,1}" in line and "lhs_contracting_dims={3}" not in line]


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="what XLA:CPU hands to YNNPACK")
def test_one_block_backward_multiplies_row_major_tiles(monkeypatch):
  """What keeps the kept-probabilities backward fast on CPU: dVᵀ = (dO/l)ᵀ·e takes dOᵀ as a
  transposed copy rather than as a transposed operand folded into the product."""
  q, k, v, cot, mask = _inputs(64, heads=4, dim=16)

  def hlo():
    fn = lambda q, k, v: attention.blockwise_attention(q, k, v, mask, block_size=64)[0]
    grad = jax.jit(lambda q, k, v: jax.vjp(fn, q, k, v)[1](cot))
    return grad.lower(q, k, v).compile().as_text()
  assert not _transposed_lhs_dots(hlo())
  # The check itself must see the folded product when nothing stops XLA from folding it.
  monkeypatch.setattr(jax.lax, "optimization_barrier", lambda x: x)
  assert _transposed_lhs_dots(hlo())


def test_cpu_blockwise_steps_through_the_batch_while_a_sequence_fits_the_cache():
  # The study's model (4 heads, L=256): 1 MiB of scores per sequence, one sequence per device.
  assert platform.sequence_chunk(256, 4, backend="cpu", devices=1) == 1
  assert platform.sequence_chunk(256, 4, backend="cpu", devices=2) == 2
  # Pathfinder's 8 heads at L=1024 (32 MiB per sequence): the batch at once, as on accelerators.
  assert platform.sequence_chunk(1024, 8, backend="cpu", devices=1) == 0
  # 4 MiB per sequence: worth the loop on a core of its own, not on a device with several cores.
  assert platform.sequence_chunk(512, 4, backend="cpu", devices=1, cores_per_device=1) == 1
  assert platform.sequence_chunk(512, 4, backend="cpu", devices=1, cores_per_device=2) == 0
  assert platform.sequence_chunk(256, 4, backend="cpu", devices=1, cores_per_device=2) == 1
  assert platform.sequence_chunk(256, 4, backend="cuda") == 0
  cfg = transformer.ModelConfig(vocab_size=20, max_length=256, num_layers=2, d_model=64,
                                num_heads=4, d_ff=256)
  chosen = platform.specialise(cfg, backend="cpu")
  assert (chosen.attention, chosen.attention_block_size,
          chosen.attention_sequence_chunk) == ("blockwise", 256, jax.device_count())
  # The speed comes from the tiles: no [B, H, L, L] score array is ever traced, only one
  # sequence's [1, H, L, L] per step of the loop.
  tokens = jnp.ones((8, 256), jnp.int32)
  model = transformer.SequenceModel(chosen.replace(attention_sequence_chunk=1))
  params = jax.eval_shape(model.init, jax.random.PRNGKey(0), tokens)
  jaxpr = jax.make_jaxpr(jax.grad(lambda p: model.apply(p, tokens).sum()))(params)
  shapes = {tuple(v.aval.shape) for eqn in _all_eqns(jaxpr.jaxpr) for v in eqn.outvars}
  assert (1, 4, 256, 256) in shapes and (8, 4, 256, 256) not in shapes
  assert "attention_sequence_chunk" not in transformer.section_defaults()  # not a config key


def _all_eqns(jaxpr):
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      for sub in (param if isinstance(param, (list, tuple)) else [param]):
        inner = getattr(sub, "jaxpr", None)
        if inner is not None:
          yield from _all_eqns(getattr(inner, "jaxpr", inner))


@pytest.mark.parametrize("length,block_size", [(37, 8), (16, 4)])
def test_local_matches_banded_dense(length, block_size):
  q, k, v, cot, mask = _inputs(length, seed=1)
  block = np.arange(length) // block_size
  band = np.abs(block[:, None] - block[None, :]) <= 1
  allowed = band[None] & np.asarray(mask)[:, None, :]  # [B, Lq, Lk]

  def banded_dense(q, k, v):
    scores = jnp.einsum("bqhd,bkhd->bhqk", q * q.shape[-1] ** -0.5, k)
    scores = jnp.where(allowed[:, None], scores, jnp.finfo(jnp.float32).min)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)

  local = lambda q, k, v: attention.attend(q, k, v, mask, implementation="local",
                                           block_size=block_size)[0]
  # A query that sees no real key is defined differently (dense: uniform over all L keys; local:
  # uniform over its window), so those rows are left out of the comparison and the loss.
  sees_a_key = allowed.any(-1)
  assert sees_a_key.sum() > length and not sees_a_key.all()
  out_d, grads_d = _grads(banded_dense, q, k, v, cot, sees_a_key)
  out_l, grads_l = _grads(local, q, k, v, cot, sees_a_key)
  assert np.isfinite(out_l).all()
  np.testing.assert_allclose(np.asarray(out_l)[sees_a_key], np.asarray(out_d)[sees_a_key], **TOL)
  for name, g_l, g_d in zip("qkv", grads_l, grads_d):
    np.testing.assert_allclose(g_l, g_d, **TOL, err_msg=f"d{name}")


def test_sequence_model_blockwise_matches_dense():
  tokens = np.random.default_rng(0).integers(3, 12, (3, 21))
  tokens[1, 15:] = 0  # trailing padding
  make = lambda impl, block: transformer.build(vocab_size=12, max_length=21, head="mlm", num_layers=1,
                                           d_model=16, num_heads=2, d_ff=32, attention=impl,
                                           attention_block_size=block)
  # Op by op, not jitted: the initialisers' small programs serve every model of these shapes, where
  # a jitted init is one large program per model (docs/testing.md).
  params = make("dense", 8).init(jax.random.PRNGKey(1), tokens)["params"]
  logits = lambda impl, block: jax.jit(make(impl, block).apply)({"params": params}, tokens)
  dense = logits("dense", 8)
  np.testing.assert_allclose(logits("blockwise", 8), dense, **TOL)
  # A local window wider than the sequence is plain attention.
  np.testing.assert_allclose(logits("local", 32), dense, **TOL)


def test_auto_picks_blockwise_for_long_cpu_sequences_and_dense_otherwise(monkeypatch):
  monkeypatch.setattr(platform, "AUTO_CPU_MIN_LENGTH", 16)
  on_cpu = jax.default_backend() == "cpu"
  # Up to AUTO_CPU_ONE_BLOCK_MAX tokens as one block (AUTO_CPU_THREADED_ONE_BLOCK_MAX with several
  # cores per device), beyond it in blocks of AUTO_CPU_BLOCK.
  assert platform.resolve_auto_attention(16, dropout=False) == (
      ("blockwise", 16) if on_cpu else ("dense", None))
  for cores, block in ((1, platform.AUTO_CPU_BLOCK), (2, 600)):
    assert platform.resolve_auto_attention(600, dropout=False, cores_per_device=cores) == (
        ("blockwise", block) if on_cpu else ("dense", None))
  assert platform.resolve_auto_attention(2000, dropout=False, cores_per_device=2) == (
      ("blockwise", platform.AUTO_CPU_BLOCK) if on_cpu else ("dense", None))
  assert platform.resolve_auto_attention(15, dropout=False) == ("dense", None)
  # Only dense has dropout.
  assert platform.resolve_auto_attention(64, dropout=True) == ("dense", None)
  monkeypatch.setattr(platform, "AUTO_CPU_BLOCK", 8)
  monkeypatch.setattr(platform, "AUTO_CPU_ONE_BLOCK_MAX", 8)
  monkeypatch.setattr(platform, "AUTO_CPU_THREADED_ONE_BLOCK_MAX", 8)
  # The trainer's model: 'auto' resolved once, for the encoder's length (the CLS token counted).
  cfg = transformer.ModelConfig(vocab_size=12, max_length=15, pooling="cls", num_layers=1,
                                d_model=16, num_heads=2, d_ff=32)
  chosen = platform.specialise(cfg)
  assert (chosen.attention, chosen.attention_block_size) == (
      ("blockwise", 8) if on_cpu else ("dense", cfg.attention_block_size))
  assert platform.specialise(cfg.replace(max_length=14)).attention == "dense"
  assert platform.specialise(cfg.replace(dropout_rate=0.1)).attention == "dense"
  # The same numbers as dense; an unresolved 'auto' (a model built without the platform) is dense.
  tokens = np.random.default_rng(0).integers(3, 12, (2, 15))
  tokens[1, 9:] = 0
  params = transformer.SequenceModel(cfg).init(jax.random.PRNGKey(0), tokens)["params"]  # as above
  run = lambda c: transformer.SequenceModel(c).apply({"params": params}, tokens)
  np.testing.assert_allclose(run(chosen), run(cfg.replace(attention="dense")), **TOL)
  q, k, v, _, mask = _inputs(21)
  auto, weights = attention.attend(q, k, v, mask, implementation="auto", block_size=512)
  dense, _ = attention.attend(q, k, v, mask, implementation="dense", block_size=512)
  assert weights is not None
  np.testing.assert_array_equal(auto, dense)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cudnn is available on GPU")
def test_cudnn_off_gpu_names_backend_and_alternative():
  cfg = transformer.ModelConfig(vocab_size=12, max_length=8, attention="cudnn")
  with pytest.raises(ValueError, match=rf"backend is '{jax.default_backend()}'.*blockwise"):
    platform.specialise(cfg)


@pytest.mark.parametrize("implementation", ["blockwise", "local", "cudnn"])
def test_attention_dropout_is_rejected(implementation):
  q, k, v, _, mask = _inputs(8)
  with pytest.raises(ValueError, match="dropout"):
    attention.attend(q, k, v, mask, implementation=implementation, block_size=4,
                     dropout_fn=lambda w: w)


def test_unknown_implementation():
  q, k, v, _, mask = _inputs(8)
  with pytest.raises(ValueError, match="must be one of"):
    attention.attend(q, k, v, mask, implementation="flash", block_size=4)


def _train_temp_bytes(implementation: str, length: int) -> int:
  """XLA's temp buffer for value_and_grad of one attention call, from the compiled program."""
  x = jax.ShapeDtypeStruct((1, length, 1, 16), jnp.float32)
  mask = jax.ShapeDtypeStruct((1, length), jnp.bool_)
  loss = lambda q, k, v, m: attention.attend(q, k, v, m, implementation=implementation,
                                             block_size=128)[0].sum()
  step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
  return step.lower(x, x, x, mask).compile().memory_analysis().temp_size_in_bytes


def test_memory_is_linear_in_length():
  ratio = {impl: _train_temp_bytes(impl, 2048) / _train_temp_bytes(impl, 512)
           for impl in ("dense", "blockwise", "local")}
  assert ratio["dense"] > 12, ratio  # L×L scores: ~16x for 4x the length
  assert ratio["blockwise"] < 5, ratio
  assert ratio["local"] < 5, ratio


# attention='auto' per backend, decided with the backend's name passed in, so no GPU is needed.
# (length, dropout, dtype, head dim, alibi) → implementation and a word of the logged reason.
AUTO_CASES = {
    "cuda bf16": ("cuda", 2000, False, "bfloat16", 64, False, "cudnn", "cuDNN"),
    "jax's 'gpu' is CUDA": ("gpu", 2000, False, "bfloat16", 64, False, "cudnn", "cuDNN"),
    "cuda short bf16": ("cuda", 16, False, "bfloat16", 8, False, "cudnn", "cuDNN"),
    "cuda float32": ("cuda", 2000, False, "float32", 64, False, "dense", "float32"),
    "cuda head dim 12": ("cuda", 2000, False, "bfloat16", 12, False, "dense", "multiple of 8"),
    "cuda head dim 256": ("cuda", 2000, False, "bfloat16", 256, False, "dense", "at most 128"),
    "cuda alibi": ("cuda", 2000, False, "bfloat16", 64, True, "dense", "ALiBi"),
    "cuda dropout": ("cuda", 2000, True, "bfloat16", 64, False, "dense", "dropout"),
    "rocm": ("rocm", 2000, False, "bfloat16", 64, False, "dense", "rocm"),
    "tpu": ("tpu", 2000, False, "bfloat16", 64, False, "dense", "tpu"),
    "cpu long": ("cpu", 2000, False, "bfloat16", 64, False, "blockwise", "faster"),
    "cpu short": ("cpu", 100, False, "float32", 64, False, "dense", "L=100"),
    "cpu dropout": ("cpu", 2000, True, "float32", 64, False, "dense", "dropout"),
}


@pytest.mark.parametrize("case", AUTO_CASES.values(), ids=AUTO_CASES.keys())
def test_auto_attention_choice_per_backend(case):
  backend, length, dropout, dtype, head_dim, alibi, implementation, reason = case
  choice = platform.choose_auto_attention(length, dropout, dtype=dtype, head_dim=head_dim,
                                          alibi=alibi, backend=backend)
  assert choice.implementation == implementation, choice
  assert reason in choice.reason, choice
  assert choice.block_size == (platform.AUTO_CPU_BLOCK if implementation == "blockwise" else None)
  assert platform.resolve_auto_attention(length, dropout, dtype=dtype, head_dim=head_dim,
                                         alibi=alibi, backend=backend) == (
                                             choice.implementation, choice.block_size)


def test_specialise_for_a_cuda_gpu_picks_cudnn_where_it_supports_the_model(caplog, monkeypatch):
  monkeypatch.setattr(platform, "_logged_choices", set())  # what earlier tests logged
  # The LRA ListOps model (6x512, 8 heads: head dimension 64) in bfloat16.
  cfg = transformer.ModelConfig(vocab_size=20, max_length=2000, num_layers=6, d_model=512,
                                num_heads=8, d_ff=2048, dtype="bfloat16")
  caplog.set_level("INFO")
  for c in (cfg, cfg.replace(position="rope"), cfg.replace(causal=True),
            cfg.replace(pooling="cls")):
    chosen = platform.specialise(c, backend="cuda")
    assert chosen.attention == "cudnn" and chosen.dot_general is None, c
  assert platform.specialise(cfg.replace(position="alibi"), backend="cuda").attention == "dense"
  assert platform.specialise(cfg.replace(dtype="float32"), backend="cuda").attention == "dense"
  assert platform.specialise(cfg.replace(num_heads=2), backend="cuda").attention == "dense"  # 256
  on_cpu = platform.specialise(cfg, backend="cpu")
  assert (on_cpu.attention, on_cpu.dot_general) == ("blockwise", platform.kernel_grad_dot_general)
  # Logged with its reason, once per distinct choice however often the trainer specialises.
  platform.specialise(cfg, backend="cuda")
  logged = [r.getMessage() for r in caplog.records if "attention='auto'" in r.getMessage()]
  cudnn_2000 = [m for m in logged if "'cudnn'" in m and "L=2000" in m]
  assert len(cudnn_2000) == 1 and "cuDNN" in cudnn_2000[0], logged
  assert any("'dense'" in m and "float32" in m for m in logged), logged
  # An explicit 'cudnn' needs a CUDA GPU, by the backend's name.
  explicit = cfg.replace(attention="cudnn")
  assert platform.specialise(explicit, backend="cuda").attention == "cudnn"
  with pytest.raises(ValueError, match="needs a CUDA GPU.*'tpu'"):
    platform.specialise(explicit, backend="tpu")
