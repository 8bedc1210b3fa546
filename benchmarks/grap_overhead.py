r"""Step-time overhead of GraP over the same composite loss with fixed weights, measured interleaved.

  python benchmarks/grap_overhead.py                                   # synthetic cpu shapes
  python benchmarks/grap_overhead.py --config=configs/synthetic_grap.py:smoke --rounds=20
  python benchmarks/grap_overhead.py --d_model=128 --num_layers=2 --out=/tmp/grap_overhead.json

Three jitted, donated, data-parallel train steps on the same batches (the composite phase's losses,
by default mlm, span, contrastive and random on configs/synthetic_grap.py's model):
  fused   Σ_i L_i with fixed weights, one jax.value_and_grad through encoder and heads: the plain
          composite run (the paper's reference point for the ~30% overhead)
  fixed   the trainer's composite step (train.make_steps) with weighting='fixed' (detached z, per-loss z-gradients,
          one encoder VJP): the decomposition GraP needs, without GraP
  grap    the trainer's composite step (train.make_steps) with weighting='grap' (plus the probe's loss and gradient,
          the cosine statistics and the logit update)
Each round runs one step of each, in a rotating order, each timed to completion, so load from other
processes hits all three alike; overheads are medians of the per-round ratios (grap/fused − 1 and
grap/fixed − 1), step times medians over rounds. Compilation is excluded (warm-up steps first).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from spt_jax import experiment, optim, sweep, train, tree  # noqa: E402
from spt_jax.objectives import composite  # noqa: E402
from spt_jax.objectives.composite import HEADS  # noqa: E402
from spt_jax.data import pipeline, tasks  # noqa: E402


def fused_step_fn(comp: composite.Composite, coef, tx, mesh):
  """The plain composite step: value_and_grad of Σ c_i L_i through the whole model at once."""
  replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  contrastive = "contrastive" in comp.losses

  def step(state, batch, rng):
    rng = jax.random.fold_in(rng, state.step)
    view_rng, drop1, drop2 = jax.random.split(rng, 3)
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    views = comp.views(view_rng, batch)

    def loss_fn(params):
      z, mask = comp.encode(params["encoder"], views["view1"], train=True, rng=drop1)
      z2 = (jax.lax.stop_gradient(comp.encode(params["encoder"], views["view2"], train=True,
                                              rng=drop2)[0]) if contrastive else None)
      losses = jnp.stack([comp.head_loss(n, z, mask, params[HEADS], views, batch, z2=z2)[0]
                          for n in comp.losses])
      return coef @ losses

    loss, grads = jax.value_and_grad(loss_fn)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    return train.TrainState(state.step + 1, optax.apply_updates(state.params, updates),
                            opt_state), {"loss": loss}

  return jax.jit(step, in_shardings=(replicated, sharded, replicated),
                 out_shardings=(replicated, replicated), donate_argnums=(0,))


def build(config, weighting: str, task, mesh, batches):
  """(step function, initial state) of one method."""
  config = config.copy_and_resolve_references()
  cfg = config.pretrain
  method = "fixed" if weighting == "fused" else weighting
  cfg.composite.weighting = method
  if method == "fixed":
    cfg.composite.fixed_weights = (1.0,) * len(cfg.composite.losses)
  replicated = NamedSharding(mesh, P())
  comp = train.make_objective(config, "pretrain", task)
  w = comp.weighting
  dummy = train.example_inputs(comp.splits(task))
  params = jax.jit(lambda r: comp.init_params(r, dummy), out_shardings=replicated)(
      jax.random.PRNGKey(0))
  tx, _ = optim.make_optimizer(cfg, 10_000, params)
  step0 = jax.device_put(jnp.asarray(0, jnp.int32), replicated)
  if weighting == "fused":
    state = train.TrainState(step0, params, jax.jit(tx.init, out_shardings=replicated)(params))
    return fused_step_fn(comp, w.constant(), tx, mesh), state
  opt_state = jax.jit(lambda p: {"model": tx.init(p), "weighting": w.init()},
                      out_shardings=replicated)(params)
  trainable = tree.map_with_path(lambda p, _: True, params)
  step, _ = train.make_steps(comp, tx, trainable, mesh)
  return (lambda s, b, r: step(s, b, r)[:2]), train.TrainState(step0, params, opt_state)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="configs/synthetic_grap.py:cpu")
  parser.add_argument("--rounds", type=int, default=30)
  parser.add_argument("--warmup", type=int, default=3)
  parser.add_argument("--batch_size", type=int, default=0, help="0: the config's")
  parser.add_argument("--d_model", type=int, default=0, help="0: the config's")
  parser.add_argument("--num_layers", type=int, default=0, help="0: the config's")
  parser.add_argument("--out", default="")
  args = parser.parse_args()

  config = sweep.load_config(args.config)
  if args.batch_size:
    config.pretrain.batch_size = args.batch_size
  if args.d_model:
    config.model.update(d_model=args.d_model, d_ff=2 * args.d_model)
  if args.num_layers:
    config.model.num_layers = args.num_layers
  task = tasks.load(config.data)
  mesh = experiment.make_mesh()
  sharded = NamedSharding(mesh, P("data"))
  arrays = composite.prepare_splits(
      task, composite.weighting_from_config(config.pretrain), 1.0)["train"]
  stream = pipeline.train_batches(arrays, config.pretrain.batch_size, seed=0)
  batches = [train.to_global(next(stream), sharded) for _ in range(4)]
  rng = jax.device_put(jax.random.PRNGKey(1), NamedSharding(mesh, P()))

  methods = ("fused", "fixed", "grap")
  steps, states = {}, {}
  for m in methods:
    steps[m], states[m] = build(config, m, task, mesh, batches)
    t = time.time()
    for i in range(args.warmup):
      states[m], out = steps[m](states[m], batches[i % len(batches)], rng)
      jax.block_until_ready(out)
    print(f"{m}: compiled and warmed up in {time.time() - t:.1f} s", flush=True)

  times = {m: [] for m in methods}
  for r in range(args.rounds):
    order = methods[r % 3:] + methods[:r % 3]
    for m in order:
      batch = batches[r % len(batches)]
      t = time.perf_counter()
      states[m], out = steps[m](states[m], batch, rng)
      jax.block_until_ready(out)
      times[m].append(time.perf_counter() - t)

  median = {m: statistics.median(v) for m, v in times.items()}
  ratio = lambda a, b: statistics.median(x / y for x, y in zip(times[a], times[b])) - 1.0
  result = {
      "config": args.config, "rounds": args.rounds, "devices": jax.device_count(),
      "backend": jax.default_backend(), "batch_size": config.pretrain.batch_size,
      "length": task.max_length, "model": config.model.to_dict(),
      "losses": list(config.pretrain.composite.losses),
      "median_step_ms": {m: 1e3 * v for m, v in median.items()},
      "overhead_grap_vs_fused": ratio("grap", "fused"),
      "overhead_grap_vs_fixed": ratio("grap", "fixed"),
      "overhead_fixed_vs_fused": ratio("fixed", "fused"),
  }
  print(json.dumps(result, indent=2))
  print(f"GraP overhead: {100 * result['overhead_grap_vs_fused']:+.1f}% vs the fused fixed-weight "
        f"step, {100 * result['overhead_grap_vs_fixed']:+.1f}% vs the decomposed fixed-weight step "
        f"(paper: ~30%).")
  if args.out:
    with open(args.out, "w") as f:
      json.dump(result, f, indent=2)


if __name__ == "__main__":
  main()
