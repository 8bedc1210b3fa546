"""The mixed-precision policy of `model.dtype='bfloat16'`: bfloat16 compute; float32 parameters,
gradients, optimiser state, attention softmax (every implementation) and loss.

The tests marked `accelerator` need a GPU or TPU and are skipped elsewhere;
benchmarks/accelerator_check.sh runs them (`-m accelerator`) on such a machine.
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from jax.extend import core as jax_core

from conftest import load_config, tiny
from spt_jax import config_lib, experiment, optim, platform, train
from spt_jax.data.tasks import TaskData
from spt_jax.data.vocab import BYTE_VOCAB
from spt_jax.models import attention, transformer

ON_ACCELERATOR = jax.default_backend() != "cpu"
ON_CUDA = ON_ACCELERATOR and platform.backend_name() in platform.CUDA_BACKENDS
needs_accelerator = pytest.mark.skipif(not ON_ACCELERATOR, reason="needs a GPU or TPU")
needs_cuda = pytest.mark.skipif(not ON_CUDA, reason="needs a CUDA GPU (cuDNN)")

# The bf16 smoke run's loss against float32's, relative, at every logged step. Measured on CPU
# (2 cores, tiny listops_spt, 6 + 6 steps): at most 1.2e-3; bfloat16's rounding step is 2^-8 = 3.9e-3.
LOSS_RTOL = 1e-2

TOKENS = np.array([[5, 9, 7, 8, 6, 0, 0, 0], [4, 4, 6, 9, 5, 7, 8, 3], [6, 3, 0, 0, 0, 0, 0, 0]],
                  np.int32)


def _objective(objective: str, dtype: str = "bfloat16", attention_impl: str = "dense"):
  config = ml_collections.ConfigDict(dict(
      model=config_lib.transformer_config(num_layers=1, d_model=16, num_heads=2, d_ff=32,
                                          dtype=dtype, attention=attention_impl),
      phase=config_lib.phase_config(objective, mask_rate=0.5, num_steps=4)))
  task = TaskData("t", BYTE_VOCAB, 2, TOKENS.shape[1], {"train": {"inputs": TOKENS}}, "test")
  objective = train.make_objective(config, "phase", task)
  # jit: one compilation instead of op-by-op dispatch, most of the time otherwise.
  params = jax.jit(objective.init_params)(jax.random.PRNGKey(0), jnp.asarray(TOKENS[:1]))
  batch = {"inputs": jnp.asarray(TOKENS), "labels": jnp.asarray([0, 1, 0], jnp.int32),
           "weights": jnp.ones(3, jnp.float32)}
  return config, objective, params, batch


def _float_dtypes(tree) -> set[str]:
  return {str(x.dtype) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)}


def test_parameters_gradients_and_optimiser_state_are_float32_under_bfloat16():
  config, obj, params, batch = _objective("mlm")
  assert obj.model.cfg.compute_dtype == jnp.bfloat16
  tx, _ = optim.make_optimizer(config.phase, 4, params)
  opt_state = jax.jit(tx.init)(params)
  grads, _, out, _ = jax.jit(obj.train_grads)(params, None, batch, jax.random.PRNGKey(1))
  updates, opt_state = jax.jit(tx.update)(grads, opt_state, params)
  new_params = jax.tree.map(lambda p, u: p + u, params, updates)
  for name, tree in [("params", params), ("grads", grads), ("opt_state", opt_state),
                     ("updated params", new_params)]:
    assert _float_dtypes(tree) == {"float32"}, name
  # The optimiser's moments are there (and float32): Adam's mu and nu, one per parameter.
  assert len(jax.tree.leaves(opt_state)) > 2 * len(jax.tree.leaves(params))
  assert out["loss"].dtype == jnp.float32


def test_compute_is_bfloat16_and_heads_and_loss_float32():
  _, obj, params, batch = _objective("mlm")
  logits, state = jax.jit(lambda p, x: obj.model.apply(
      {"params": p}, x, capture_intermediates=True, mutable=["intermediates"]))(params,
                                                                                batch["inputs"])
  seen = {"/".join(str(getattr(k, "key", k)) for k in path): leaf for path, leaf in
          jax.tree_util.tree_flatten_with_path(state["intermediates"])[0]}
  dtype_of = lambda part: {str(v.dtype) for k, v in seen.items() if part in k}
  # The encoder's matmuls run in bfloat16 ...
  for module in ("attention/query", "attention/key", "attention/value", "attention/out",
                 "mlp/dense_in", "mlp/dense_out"):
    assert dtype_of(f"layer_0/{module}/__call__") == {"bfloat16"}, module
  # ... its attention weights (the softmax), final norm, heads and losses in float32.
  assert dtype_of("attention_weights") == {"float32"}
  assert dtype_of("final_norm/__call__") == {"float32"}
  assert logits.dtype == jnp.float32
  for objective in ("mlm", "classification"):
    _, obj, params, batch = _objective(objective)
    loss, sums = jax.jit(lambda p, b: obj.loss(p, b, jax.random.PRNGKey(1), train=False))(params,
                                                                                         batch)
    assert loss.dtype == jnp.float32 and sums["loss"][0].dtype == jnp.float32, objective


def _equations(jaxpr):
  """Every equation of `jaxpr`, those of its sub-jaxprs (scan bodies, custom VJPs) included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (tuple, list)) else (value,):
        if isinstance(sub, jax_core.ClosedJaxpr):
          yield from _equations(sub.jaxpr)
        elif isinstance(sub, jax_core.Jaxpr):
          yield from _equations(sub)


HEAD_DIM = 8


def _bf16_inputs(length=40, batch=3):
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.standard_normal((batch, length, 2, HEAD_DIM)), jnp.bfloat16)
             for _ in range(3))
  mask = jnp.asarray(np.arange(length)[None] < np.array([[length], [length - 9], [0]]))
  return q, k, v, mask


@pytest.mark.parametrize("implementation", ["dense", "blockwise", "local"])
@pytest.mark.parametrize("position", ["none", "alibi"])
def test_softmax_is_float32_in_every_implementation(implementation, position):
  """From the traced program, forward and backward: every exp (the softmax's) is float32, and every
  product that makes scores (output [..., queries, keys], not [..., head_dim]) accumulates in
  float32, from bfloat16 q, k, v. (cuDNN's kernel is opaque: tests below, on a GPU.)"""
  q, k, v, mask = _bf16_inputs()
  modifier = attention.ScoreModifier(alibi=attention.alibi_slopes(2) if position == "alibi" else ())
  fn = lambda q, k, v: attention.attend(q, k, v, mask, implementation=implementation,
                                        block_size=16, modifier=modifier)[0]
  backward = lambda q, k, v: jax.vjp(fn, q, k, v)[1](jnp.ones_like(q))
  forward_eqns = list(_equations(jax.make_jaxpr(fn)(q, k, v).jaxpr))
  backward_eqns = list(_equations(jax.make_jaxpr(backward)(q, k, v).jaxpr))
  exps = [e.outvars[0].aval.dtype for e in forward_eqns + backward_eqns if e.primitive.name == "exp"]
  assert exps and {str(d) for d in exps} == {"float32"}, exps
  scores = [e.outvars[0].aval for e in forward_eqns if e.primitive.name == "dot_general"
            and e.outvars[0].aval.ndim >= 3 and e.outvars[0].aval.shape[-1] != HEAD_DIM
            and e.outvars[0].aval.shape[-2] != HEAD_DIM]
  assert scores and {str(a.dtype) for a in scores} == {"float32"}, scores
  out = fn(q, k, v)
  assert out.dtype == jnp.bfloat16  # back in the compute dtype for the next layer


@pytest.mark.parametrize("implementation", ["dense", "blockwise", "local"])
def test_bf16_attention_is_within_output_rounding_of_float32(implementation):
  """The bf16 result against float32 attention of the same (bf16-valued) inputs: no more error than
  rounding the output to bfloat16 and the probabilities once, which a bfloat16 softmax would exceed."""
  q, k, v, mask = _bf16_inputs()
  run = lambda *x: attention.attend(*x, mask, implementation=implementation, block_size=16)[0]
  reference = np.asarray(run(*(x.astype(jnp.float32) for x in (q, k, v))), np.float32)
  got = np.asarray(run(q, k, v).astype(jnp.float32))
  scale = np.abs(reference).max()
  assert np.abs(got - reference).max() <= 2 * 2.0**-8 * scale, np.abs(got - reference).max()


def _train_losses(workdir: str, phase: str) -> dict[int, float]:
  with open(os.path.join(workdir, phase, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  return {r["step"]: r["loss"] for r in rows if r["split"] == "train"}


def _bf16_run_matches_float32(spt_run, cache_dir: str, workdir: str) -> dict:
  """A bf16 run of the shared tiny SPT config (`spt_run`, float32): every logged training loss of
  both phases within LOSS_RTOL of float32's. Returns the largest relative difference per phase."""
  f32_dir, f32_config, _ = spt_run
  config = tiny(load_config("listops_spt"), cache_dir)
  config.model.dtype = "bfloat16"
  assert f32_config.model.dtype == "float32"
  experiment.run(config, workdir)
  worst = {}
  for phase in config.phases.split(","):
    f32, bf16 = _train_losses(f32_dir, phase), _train_losses(workdir, phase)
    assert sorted(bf16) == sorted(f32) and len(f32) >= 3, (phase, f32, bf16)
    relative = {s: abs(bf16[s] - f32[s]) / abs(f32[s]) for s in f32}
    assert max(relative.values()) <= LOSS_RTOL, (phase, f32, bf16)
    worst[phase] = max(relative.values())
  return worst


def test_bf16_smoke_run_loss_matches_float32(spt_run, cache_dir, tmp_path):
  _bf16_run_matches_float32(spt_run, cache_dir, str(tmp_path))


# ------------------------------------------------------------------ on a GPU or TPU only


@pytest.mark.accelerator
@needs_accelerator
def test_bf16_loss_parity_on_the_device(spt_run, cache_dir, tmp_path):
  assert jax.default_backend() != "cpu"
  if ON_CUDA:  # the tiny model (head dimension 8) in bf16 runs cuDNN there, as this backend says
    cfg = transformer.ModelConfig(vocab_size=20, max_length=32, num_layers=1, d_model=16,
                                  num_heads=2, d_ff=32, dtype="bfloat16")
    assert platform.backend_name() == "cuda" and platform.specialise(cfg).attention == "cudnn"
  print("largest relative loss difference per phase:",
        _bf16_run_matches_float32(spt_run, cache_dir, str(tmp_path)))


def _padded_mask(length: int) -> np.ndarray:
  """Trailing padding, as SequenceModel's inputs have: full, padded, one key, none."""
  lengths = np.array([length, length - 13, 1, 0])
  return np.arange(length)[None] < lengths[:, None]


@pytest.mark.accelerator
@needs_cuda
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("alibi", [False, True], ids=["no_bias", "alibi"])
def test_cudnn_matches_dense_with_padding_and_causal_mask(causal, alibi):
  """cuDNN (bf16) against float32 dense attention of the same bf16-valued inputs: outputs and
  gradients, every kind of padded row. cuDNN may be off by what bfloat16 costs, no more: at most
  twice our own bf16 dense attention's error (or one bfloat16 rounding step, 2^-8), relative to the
  largest value."""
  length, heads, dim = 64, 4, 32
  rng = np.random.default_rng(1)
  q, k, v, cot = (jnp.asarray(rng.standard_normal((4, length, heads, dim)), jnp.bfloat16)
                  for _ in range(4))
  mask = jnp.asarray(_padded_mask(length))
  modifier = attention.ScoreModifier(alibi=attention.alibi_slopes(heads) if alibi else (),
                                     causal=causal)

  def grads(implementation, dtype):
    fn = lambda q, k, v: attention.attend(q, k, v, mask, implementation=implementation,
                                          block_size=16, modifier=modifier)[0]
    args = [x.astype(dtype) for x in (q, k, v)]
    out, vjp = jax.vjp(fn, *args)
    return [x.astype(jnp.float32) for x in (out, *vjp(cot.astype(dtype)))]

  run = lambda implementation, dtype: [np.asarray(x) for x in
                                       jax.jit(lambda: grads(implementation, dtype))()]
  reference, dense_bf16 = run("dense", jnp.float32), run("dense", jnp.bfloat16)
  fused = run("cudnn", jnp.bfloat16)
  for name, got, ours, want in zip(["out", "dq", "dk", "dv"], fused, dense_bf16, reference):
    assert np.isfinite(got).all(), name
    scale = np.abs(want).max()
    error, ours_error = np.abs(got - want).max() / scale, np.abs(ours - want).max() / scale
    assert error <= max(2 * ours_error, 2.0**-8), (name, error, ours_error)
