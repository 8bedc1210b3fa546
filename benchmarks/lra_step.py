"""The LRA-size ListOps pretraining step on this machine: its compiled memory and its step time.

  python benchmarks/lra_step.py --remat=layer --batch=8 --steps=3

Builds the step exactly as main.py's trainer does (configs/listops_spt.py, the cached LRA ListOps data
in ~/.cache/spt_jax, one device, the retained heap of spt_jax/host_memory.py and its release), prints
XLA's memory analysis of the compiled step, then times `--steps` steps after one untimed one, each
waited for, and the process's peak resident memory. `--steps=0` compiles only: no memory beyond the
compiler's is needed, so this also reports steps that would not fit (benchmarks/README.md,
"LRA-size ListOps on 2 CPU cores").
"""
from __future__ import annotations

import argparse
import os
import resource
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from spt_jax import host_memory  # noqa: E402

host_memory.retain_freed_memory()  # As main.py: before the backend starts.


import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from spt_jax import config_lib, experiment, optim, preflight, train  # noqa: E402
from spt_jax.data import pipeline, tasks  # noqa: E402


def listops_config(remat: str, batch: int):
  config = config_lib.load_config(os.path.join(ROOT, "configs", "listops_spt.py"))
  config.model.remat = remat
  config.pretrain.batch_size = batch
  return config


def load() -> str:
  return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--remat", default="none", choices=("none", "layer"))
  parser.add_argument("--batch", type=int, default=32)
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args()
  print(f"load average before: {load()}", flush=True)
  config = listops_config(args.remat, args.batch)
  task = tasks.load(config.data)
  mesh = experiment.make_mesh(jax.devices()[:1])
  replicated, sharded = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  objective = train.make_objective(config, "pretrain", task)
  dummy = train.example_inputs(objective.splits(task))
  params = jax.jit(lambda r: objective.init_params(r, dummy),
                   out_shardings=replicated)(jax.random.PRNGKey(0))
  tx, _ = optim.make_optimizer(config.pretrain, 300_000, params, frozenset())
  opt_state = jax.jit(lambda p: train.join_opt_state(objective, tx.init(p), objective.init_state()),
                      out_shardings=replicated)(params)
  state = train.TrainState(jax.device_put(jnp.asarray(0, jnp.int32), replicated), params, opt_state)
  step, _ = train.make_steps(objective, tx, jax.tree.map(lambda _: True, params), mesh)
  batches = pipeline.train_batches(task.splits["train"], args.batch, seed=1)
  rng = jax.random.PRNGKey(1)
  start = time.time()
  compiled = step.lower(state, train.to_global(next(batches), sharded), rng).compile()
  memory = preflight.StepMemory.of(compiled, mesh.local_devices)
  print(f"remat={args.remat} batch={args.batch}: compile {time.time() - start:.1f} s, temporaries "
        f"{memory.temporaries / 2**30:.2f} GB, arguments {memory.arguments / 2**30:.2f} GB",
        flush=True)
  if args.steps <= 0:
    return
  host_memory.release_if_too_costly(memory.temporaries, devices=1)
  times = []
  for i in range(args.steps + 1):
    batch = train.to_global(next(batches), sharded)
    start = time.time()
    state, metrics, _ = step(state, batch, rng)
    jax.block_until_ready(metrics)
    times.append(time.time() - start)
    print(f"  step {i + 1}: {times[-1]:.1f} s, loss {float(metrics['loss']):.4f}", flush=True)
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  print(f"median of steps 2..{args.steps + 1}: {np.median(times[1:]):.1f} s; peak RSS {peak:.2f} GB; "
        f"load average after: {load()}")


if __name__ == "__main__":
  main()
