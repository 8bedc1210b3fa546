"""One phase with objective 'composite': several pretraining heads on one encoder, weighted per step.

Same contract as `train.train_phase` (phase directory, Orbax latest/best/init checkpoints,
metrics.jsonl, results.json, resumable bit-identically), so a following fine-tune loads it with
`init_from.source=<phase>` and `init_from.exclude=("pretrain_heads/.*",)`. `experiment.run` sends
every phase with `objective == "composite"` here, and `config_lib.validate` checks such a phase with
`composite.validate_phase` (its fields come from `config_lib.composite_phase_config()`).

A step (spt_jax/composite.py for the views and heads, spt_jax/grap.py for the weighting):
  z = encoder(view 1) with its VJP kept; z2 = encoder(view 2), a constant (contrastive only)
  for each loss i, on the detached z: L_i, dL_i/dz and head i's parameter gradient
  GraP only: the probe's loss on the labelled examples and dL_down/dz
  weighting → z-gradient and per-loss coefficients λ_i
  ONE backward through the encoder with the z-gradient; heads get Σ λ_i (their gradients)
  (+ the probe its own gradient); AdamW on everything, the weighting's own state updated alongside.
The weighting state (GraP logits, their Adam moments, EMAs) lives in the optimiser state, so the
latest checkpoint resumes it too.

Written per phase beyond train.py's files: metrics.jsonl rows of split 'weights' every
`composite.log_weights_every` steps (one column per loss, plus `align_<loss>`, `logit_<loss>`, ...
for GraP) and `<phase>/weights.png` with their trajectories (drawn by the caller's
`train.AnalysisHooks.weights_figure`).
Validation selects the best checkpoint on `Composite.selection_metric` (the mlm head's masked-token
accuracy when mlm is among the losses). The reported training `loss` is the unweighted sum of the
head losses, comparable across weighting methods.
"""
from __future__ import annotations

import json
import os
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from spt_jax import composite, grap, platform, preflight, train
from spt_jax.composite import HEADS, PROBE
from spt_jax.data import pipeline
from spt_jax.data.tasks import TaskData
from spt_jax.metric_writers import MetricWriter


# ---------------------------------------------------------------------------------------- Model
def init_params(config, task: TaskData, comp: composite.Composite, rng, sharding):
  """{'encoder': ..., 'pretrain_heads': ...}. The encoder is drawn exactly as the classification
  model's (same module path and key), so its shapes are the fine-tune's and the same seed and phase
  name give the same encoder as a plain SPT phase."""
  classifier = train.build_model(config.model, task, types.SimpleNamespace(head="classifier"))
  length = task.splits["train"]["inputs"].shape[1]
  dummy = jnp.zeros((1, length), jnp.int32)
  z = jnp.zeros((1, length + (config.model.pooling == "cls"), config.model.d_model), jnp.float32)

  def init(r):
    encoder = classifier.init(r, dummy)["params"]["encoder"]
    heads = comp.heads.init(jax.random.fold_in(r, 2), z, z[:, 0])["params"]
    return {"encoder": encoder, HEADS: heads}
  return jax.jit(init, out_shardings=sharding)(rng)


def abstract_params(config, name: str, task: TaskData):
  """The phase's parameter shapes, traced (nothing computed): for the checks before training."""
  comp = composite.build(config, name, task)
  return jax.eval_shape(lambda r: init_params(config, task, comp, r, None), jax.random.PRNGKey(0))


def make_steps(comp: composite.Composite, weighting: grap.Weighting, tx, trainable, mesh):
  """Jitted (train_step, eval_step), data-parallel like train.make_steps."""
  replicated = NamedSharding(mesh, P())
  batch_sharded = NamedSharding(mesh, P("data"))
  contrastive = "contrastive" in comp.losses

  def encode(params, inputs, rng, train_mode):
    return comp.encode(params, inputs, train=train_mode, rng=rng)[0]

  def train_step(state: train.TrainState, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    view_rng, drop1, drop2, weight_rng = jax.random.split(rng, 4)
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    views = comp.views(view_rng, batch)
    params = state.params
    # z is computed once; its VJP is the single backward pass through the encoder.
    z, encoder_vjp = jax.vjp(lambda p: encode(p, views["view1"], drop1, True), params["encoder"])
    z2 = (jax.lax.stop_gradient(encode(params["encoder"], views["view2"], drop2, True))
          if contrastive else None)

    def head(name):
      fn = lambda z_, h: comp.loss(name, z_, h, views, batch, z2=z2)
      (loss, metrics), (gz, gh) = jax.value_and_grad(fn, argnums=(0, 1), has_aux=True)(
          z, params[HEADS])
      return loss, metrics, gz, gh

    per_loss = [head(name) for name in comp.losses]
    losses = jnp.stack([r[0] for r in per_loss])
    metrics = {k: v for r in per_loss for k, v in r[1].items()}
    down_z = has_down = None
    if comp.probe:
      _, down_metrics, down_z, down_heads = head(PROBE)
      metrics.update(down_metrics)
      has_down = down_metrics[f"{PROBE}_loss"][1] > 0
    weight_state, z_grad, coef, info = weighting(
        state.opt_state["weighting"], jnp.stack([r[2] for r in per_loss]), losses, down_z,
        has_down, weight_rng)
    (encoder_grads,) = encoder_vjp(z_grad.astype(z.dtype))
    head_grads = jax.tree.map(lambda *g: sum(c * x for c, x in zip(coef, g)),
                              *[r[3] for r in per_loss])
    if comp.probe:  # The probe learns from its own loss only; it never reaches the encoder.
      head_grads = jax.tree.map(jnp.add, head_grads, down_heads)
    grads = {"encoder": encoder_grads, HEADS: head_grads}
    updates, model_opt = tx.update(grads, state.opt_state["model"], params)
    params = optax.apply_updates(params, updates)
    grad_sq = sum(jnp.sum(jnp.square(g)) for g, t in
                  zip(jax.tree.leaves(grads), jax.tree.leaves(trainable)) if t)
    out = comp.summarize(metrics)
    out["loss"] = losses.sum()
    out["weighted_loss"] = coef @ losses
    out["grad_norm"] = jnp.sqrt(grad_sq)
    opt_state = {"model": model_opt, "weighting": weight_state}
    return train.TrainState(state.step + 1, params, opt_state), out, info

  def eval_step(params, batch, rng):
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    views = comp.views(rng, batch)
    z = encode(params["encoder"], views["view1"], rng, False)
    z2 = encode(params["encoder"], views["view2"], rng, False) if contrastive else None
    metrics = {}
    for name in comp.losses + ((PROBE,) if comp.probe else ()):
      metrics.update(comp.loss(name, z, params[HEADS], views, batch, z2=z2)[1])
    return metrics

  train_fn = jax.jit(train_step, in_shardings=(replicated, batch_sharded, replicated),
                     out_shardings=(replicated, replicated, replicated), donate_argnums=(0,),
                     compiler_options=platform.step_compiler_options(comp.encoder.remat))
  eval_fn = jax.jit(eval_step, in_shardings=(replicated, batch_sharded, replicated),
                    out_shardings=replicated)
  return train_fn, eval_fn


# ---------------------------------------------------------------------------------------- Weights
def weight_row(losses, info) -> dict[str, float]:
  """One metrics.jsonl row of split 'weights': `<loss>` = reported weight, `<key>_<loss>` others."""
  row = {}
  for key, vector in info.items():
    for name, value in zip(losses, np.asarray(vector).reshape(-1)):
      row[name if key == "weight" else f"{key}_{name}"] = float(value)
  return row


def read_weight_rows(phase_dir: str) -> list[dict]:
  path = os.path.join(phase_dir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [r for r in map(json.loads, filter(str.strip, f)) if r.get("split") == "weights"]


# ---------------------------------------------------------------------------------------- Phase
def train_phase(config, name: str, task: TaskData, workdir: str, mesh,
                hooks: train.AnalysisHooks = train.AnalysisHooks()) -> dict:
  """Runs (or resumes) composite phase `name` of `config` in `<workdir>/<name>`; its results.
  `hooks.weights_figure`, if any, draws `<phase>/weights.png`."""
  cfg = config[name]
  composite.validate_phase(cfg, name)
  phase_dir = os.path.join(workdir, name)
  replicated = NamedSharding(mesh, P())
  batch_sharding = NamedSharding(mesh, P("data"))
  wall_start = time.time()

  # ---------------------------------------------------------------- Data, model and objective
  weighting = composite.weighting_from_config(cfg)
  comp = composite.build(config, name, task)
  splits = composite.prepare_splits(task, weighting, cfg.grap.label_fraction)
  steps = train.total_steps(cfg, pipeline.num_examples(splits["train"]))
  init_rng, train_rng, eval_rng = jax.random.split(train.phase_rng(config.seed, name), 3)

  # ---------------------------------------------------------------- Parameters and optimiser
  # The weighting's own state rides in the optimiser state, so it is checkpointed and resumed too.
  setup = train.setup_phase(
      config, name, init_params(config, task, comp, init_rng, replicated), init_rng, workdir, mesh,
      steps,
      init_opt_state=lambda tx, p: {"model": tx.init(p), "weighting": weighting.init()})
  logging.info("[%s] composite %s weighted %s", name, comp.losses, weighting.method)
  if cfg.attention_metrics_every_steps > 0:
    logging.warning("[%s] attention metrics are not tracked in composite phases.", name)

  # ---------------------------------------------------------------- Steps
  train_step, eval_step = make_steps(comp, weighting, setup.tx, setup.trainable, mesh)
  train_step = train.first_call_checks_memory(
      train_step, mesh, config, name,
      rebuild=lambda changed: make_steps(composite.build(changed, name, task), weighting, setup.tx,
                                         setup.trainable, mesh)[0])
  batches = pipeline.train_batches(splits["train"], cfg.batch_size, seed=config.seed + 1,
                                   start_step=setup.start, process_index=jax.process_index(),
                                   process_count=jax.process_count())
  writer = MetricWriter(phase_dir, resume_step=setup.start)
  log_weights_every = cfg.composite.log_weights_every
  pending_weights = []

  def evaluate(params, split):
    return train.evaluate_split(eval_step, comp, params, splits[split], cfg, eval_rng,
                                batch_sharding)

  def step_fn(state, batch, step):
    state, metrics, info = train_step(state, train.to_global(batch, batch_sharding), train_rng)
    if step % log_weights_every == 0 or step == steps:
      pending_weights.append((step, info))
    return state, metrics

  def on_log(step, summary):
    rows = [(s, weight_row(comp.losses, jax.device_get(i))) for s, i in pending_weights]
    pending_weights.clear()
    for s, row in rows:
      writer.write(s, "weights", row)
    return {"w": "/".join(f"{rows[-1][1][n]:.2f}" for n in comp.losses)} if rows else None

  # ---------------------------------------------------------------- Train loop and final test
  loop = train.train_loop(name, cfg, steps, setup, step_fn, batches, evaluate, writer,
                          comp.selection_metric, wall_start, on_log=on_log,
                          eta_check=preflight.EtaCheck(config, name, steps, workdir))
  weight_rows = read_weight_rows(phase_dir)
  if jax.process_index() == 0 and weight_rows and hooks.weights_figure is not None:
    hooks.weights_figure(weight_rows, comp.losses, os.path.join(phase_dir, "weights.png"),
                         f"{name}: {weighting.method} weights")
  return train.finish_phase(
      name, cfg, steps, setup, loop, evaluate, writer, comp.selection_metric, wall_start,
      phase_dir, task, losses=list(comp.losses), weighting=weighting.method,
      final_weights=({n: weight_rows[-1][n] for n in comp.losses} if weight_rows else None))
