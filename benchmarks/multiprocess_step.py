r"""The train step data-parallel over N local processes, one core each (jax.distributed on localhost):
what a two-core run would gain from one process per core, and where the time goes.

  python benchmarks/multiprocess_step.py                          # cpu and pathfinder shapes, 2 processes
  python benchmarks/multiprocess_step.py --shapes study_pathfinder --kinds finetune --steps 5

For each shape and step kind it runs, one after the other (the machine otherwise idle):
  processes   N processes joined through a coordinator on 127.0.0.1 (as launch/local.sh does), the
              i-th confined to core i before its backend starts, each feeding its slice of the
              global batch (the shape's CPU batch) to its one device: `train_step.JaxStep`, the
              real spt_jax step;
  one core    one process on core 0 with one process's slice of the batch: the step without
              communication or a partner to wait for;
  flat        the N processes again, with a prototype step whose gradient sum is one flat psum
              (`flat_step_ms`: timing only; its masked objectives' masks and normalisation are
              per process, not the global batch's);
and, once per shape, the gradient all-reduce alone between the N processes: the step's parameter
tree summed leaf by leaf (what the partitioned step does, one tuple all-reduce) against the same
numbers as one flat buffer. Medians over --steps steps after 2 warm-up steps, times from process 0.
Writes <out>/multiprocess_step.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("pretrain", "finetune")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def worker(args) -> None:
  """One process of a measurement; process 0 prints one JSON line."""
  sys.path.insert(0, os.path.dirname(HERE))
  sys.path.insert(0, HERE)
  from spt_jax import platform as spt_platform
  spt_platform.pin_to_cores((args.core,))
  import jax
  if args.processes > 1:
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{args.port}",
                               num_processes=args.processes, process_id=args.worker)
  import numpy as np
  import train_step
  from jax.sharding import NamedSharding, PartitionSpec as P
  shape = train_step.SHAPES[args.shape]
  local = args.global_batch // args.processes
  arrays = train_step.synthetic_arrays(shape, max(64, 8 * args.global_batch))
  out = {"shape": args.shape, "kind": args.kind, "processes": args.processes,
         "local_batch": local, "devices": None}
  if args.kind == "allreduce":
    jx = train_step.JaxStep(shape, "finetune", local, arrays)
    leaves = jax.tree.leaves(jx.state.params)
    mesh = jax.make_mesh((jax.device_count(),), ("d",), devices=jax.devices())
    spread, whole = NamedSharding(mesh, P("d")), NamedSharding(mesh, P())
    tree = [jax.make_array_from_process_local_data(spread, np.ones((1,) + x.shape, np.float32))
            for x in leaves]
    flat = jax.make_array_from_process_local_data(
        spread, np.ones((1, sum(x.size for x in leaves)), np.float32))
    total = jax.jit(lambda t: jax.tree.map(lambda x: x.sum(0), t), out_shardings=whole)
    for name, value in (("tree", tree), ("flat", flat)):
      jax.block_until_ready(total(value))
      times = []
      for _ in range(args.steps):
        start = time.perf_counter()
        jax.block_until_ready(total(value))
        times.append(time.perf_counter() - start)
      out[f"{name}_ms"] = 1e3 * statistics.median(times)
    out.update(leaves=len(leaves), floats=sum(x.size for x in leaves))
  elif args.flat:
    out.update(devices=jax.device_count(), step_ms=flat_step_ms(shape, args.kind, local, arrays,
                                                                 args.steps),
               tokens_per_step=local * args.processes * shape.sequences_per_example * shape.length)
    out["tok_s"] = out["tokens_per_step"] / (out["step_ms"] / 1e3)
  else:
    jx = train_step.JaxStep(shape, args.kind, local, arrays)
    for _ in range(2):
      jx()
    times = [jx() for _ in range(args.steps)]
    out.update(devices=jx.devices, step_ms=1e3 * statistics.median(times),
               tokens_per_step=local * args.processes * shape.sequences_per_example * shape.length)
    out["tok_s"] = out["tokens_per_step"] / (out["step_ms"] / 1e3)
  if args.worker == 0:
    print("RESULT " + json.dumps(out), flush=True)


def flat_step_ms(shape, kind: str, local: int, arrays, steps: int) -> float:
  """Median ms of a prototype train step whose gradient sum is one flat psum: each device's
  gradients under shard_map, raveled into one buffer with the loss, summed, divided by the device
  count. A timing prototype, not the trainer's step: each device draws its own masks and
  normalises its loss by its own count, so only a classification step computes the same numbers."""
  import jax
  import jax.numpy as jnp
  import ml_collections
  import optax
  from jax.flatten_util import ravel_pytree
  from jax.sharding import NamedSharding, PartitionSpec as P
  from spt_jax import config_lib, experiment, optim, train
  from spt_jax.data import pipeline
  from spt_jax.data.tasks import TaskData
  extra = ({"pixel_loss": shape.pixel_loss}
           if kind == "pretrain" and shape.input_kind == "pixels" else {})
  phase = config_lib.phase_config("mlm" if kind == "pretrain" else "classification",
                                  mask_rate=shape.mask_rate, batch_size=local, num_steps=1000,
                                  **extra)
  task = TaskData(shape.name, shape.vocab, shape.num_classes, shape.length, {"train": arrays},
                  "synthetic benchmark data", input_kind=shape.input_kind)
  model = config_lib.transformer_config(num_layers=shape.num_layers, d_model=shape.d_model,
                                        num_heads=shape.num_heads, d_ff=shape.d_ff, pooling="mean")
  objective = train.make_objective(ml_collections.ConfigDict(dict(model=model, phase=phase)),
                                   "phase", task)
  mesh = experiment.make_mesh(jax.devices())
  whole, split = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
  dummy = jnp.zeros((1,) + arrays["inputs"].shape[1:], jnp.int32)
  params = jax.jit(lambda r: objective.init_params(r, dummy), out_shardings=whole)(
      jax.random.PRNGKey(0))
  tx, _ = optim.make_optimizer(phase, 1000, params, frozenset())
  opt_state = jax.jit(tx.init, out_shardings=whole)(params)

  def device_grads(params, batch, rng):
    (loss, _), grads = jax.value_and_grad(
        lambda p: objective.loss(p, batch, rng, train=True), has_aux=True)(params)
    flat, unravel = ravel_pytree(grads)
    total = jax.lax.psum(jnp.concatenate([flat, loss[None]]), "data") / mesh.size
    return unravel(total[:-1]), total[-1]

  def step(params, opt_state, batch, rng):
    batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32))
    grads, loss = jax.shard_map(lambda p, b: device_grads(p, b, rng), mesh=mesh,
                                in_specs=(P(), P("data")), out_specs=(P(), P()),
                                check_vma=False)(params, batch)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  step = jax.jit(step, in_shardings=(whole, whole, split, whole),
                 out_shardings=(whole, whole, whole), donate_argnums=(0, 1))
  host = pipeline.train_batches(arrays, local, seed=0)
  batches = [train.to_global(next(host), split) for _ in range(4)]
  rng = jax.device_put(jax.random.PRNGKey(1), whole)
  times = []
  for i in range(steps + 2):
    start = time.perf_counter()
    params, opt_state, loss = step(params, opt_state, batches[i % len(batches)], rng)
    jax.block_until_ready(loss)
    times.append(time.perf_counter() - start)
  return 1e3 * statistics.median(times[2:])


def measure(script_args: list[str], processes: int, timeout: float) -> dict:
  """Runs `processes` workers (process i on core i) and returns process 0's result."""
  port = free_port()
  procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i), "--core", str(i),
                             "--port", str(port), "--processes", str(processes)] + script_args,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(processes)]
  outputs = [p.communicate(timeout=timeout)[0] for p in procs]
  for p, text in zip(procs, outputs):
    if p.returncode:
      raise RuntimeError(f"worker exited {p.returncode}:\n{text[-2000:]}")
  lines = [l for l in outputs[0].splitlines() if l.startswith("RESULT ")]
  return json.loads(lines[-1][len("RESULT "):])


def markdown(report: dict) -> str:
  n = report["processes"]
  lines = [f"{n} processes, one core each (jax.distributed on 127.0.0.1), against one process on "
           f"one core at one process's slice of the batch. Median of {report['steps']} steps.", "",
           f"| shape | step | global batch | {n} processes: ms | tok/s | one core, batch/{n}: ms | "
           f"overhead ms | speed-up over one core at the whole batch | {n} processes, flat "
           f"all-reduce (prototype): ms | tok/s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for r in report["rows"]:
    multi, alone = r["processes"], r["one_core"]
    # One core at the whole batch takes n × the half-batch step (the step is linear in the batch).
    lines.append(f"| {r['shape']} | {r['kind']} | {r['global_batch']} | {multi['step_ms']:.0f} | "
                 f"{multi['tok_s']:,.0f} | {alone['step_ms']:.0f} | "
                 f"{multi['step_ms'] - alone['step_ms']:.0f} | "
                 f"{n * alone['step_ms'] / multi['step_ms']:.2f} | "
                 f"{r['flat']['step_ms']:.0f} | {r['flat']['tok_s']:,.0f} |")
  lines += ["", "| shape | parameter arrays | floats | all-reduce as a tree of arrays, ms | "
            "as one flat buffer, ms |", "|---|---|---|---|---|"]
  for r in report["allreduce"]:
    lines.append(f"| {r['shape']} | {r['leaves']} | {r['floats']:,} | {r['tree_ms']:.1f} | "
                 f"{r['flat_ms']:.1f} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shapes", default="cpu,pathfinder")
  parser.add_argument("--kinds", default=",".join(KINDS))
  parser.add_argument("--processes", type=int, default=2)
  parser.add_argument("--steps", type=int, default=8)
  parser.add_argument("--out", default=os.path.join(HERE, "results"))
  parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
  # Worker-side arguments (set by the parent).
  parser.add_argument("--worker", type=int, default=-1, help=argparse.SUPPRESS)
  parser.add_argument("--core", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--shape", default="", help=argparse.SUPPRESS)
  parser.add_argument("--kind", default="", help=argparse.SUPPRESS)
  parser.add_argument("--global-batch", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--flat", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker >= 0:
    worker(args)
    return {}
  sys.path.insert(0, HERE)
  import train_step  # only for the shapes' batches; the parent starts no backend
  if args.processes < 2 or args.processes > len(os.sched_getaffinity(0)):
    parser.error(f"--processes must be between 2 and the usable cores "
                 f"({len(os.sched_getaffinity(0))})")
  report = {"processes": args.processes, "steps": args.steps, "rows": [], "allreduce": [],
            "load_before": os.getloadavg()[0], "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                        time.gmtime())}
  for name in filter(None, args.shapes.split(",")):
    batch = train_step.SHAPES[name].cpu_batch
    if batch % args.processes:
      parser.error(f"shape {name}: its CPU batch {batch} does not divide over "
                   f"{args.processes} processes")
    common = ["--shape", name, "--global-batch", str(batch), "--steps", str(args.steps)]
    for kind in filter(None, args.kinds.split(",")):
      multi = measure(common + ["--kind", kind], args.processes, args.timeout)
      alone = measure(common + ["--kind", kind, "--global-batch", str(batch // args.processes)],
                      1, args.timeout)
      flat = measure(common + ["--kind", kind, "--flat"], args.processes, args.timeout)
      report["rows"].append(dict(shape=name, kind=kind, global_batch=batch, processes=multi,
                                 one_core=alone, flat=flat))
      print(f"[{name}/{kind}] {args.processes} processes {multi['step_ms']:.0f} ms (flat gradient "
            f"all-reduce {flat['step_ms']:.0f} ms), one core at batch {alone['local_batch']} "
            f"{alone['step_ms']:.0f} ms", flush=True)
    report["allreduce"].append(measure(common + ["--kind", "allreduce"],
                                       args.processes, args.timeout))
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "multiprocess_step.json"), "w") as f:
    json.dump(report, f, indent=1)
  text = markdown(report)
  with open(os.path.join(args.out, "multiprocess_step.md"), "w") as f:
    f.write(text)
  print(text)
  return report


if __name__ == "__main__":
  main()
