r"""The train step data-parallel over N local processes, one core each (jax.distributed on localhost):
what a two-core run would gain from one process per core, and where the time goes.

  python benchmarks/multiprocess_step.py                          # cpu and pathfinder shapes, 2 processes
  python benchmarks/multiprocess_step.py --shapes study_pathfinder --kinds finetune --steps 5

For each shape and step kind it runs, one after the other (the machine otherwise idle):
  processes   N processes joined through a coordinator on 127.0.0.1 (as `main.py --cpu_processes`
              and launch/local.sh do), the i-th confined to core i before its backend starts, each
              feeding its slice of the global batch (the shape's CPU batch) to its one device:
              `train_step.JaxStep`, the real spt_jax step, which sums its gradients as one flat
              buffer there (train.flat_summed_grads);
  tree        the same with the gradients summed as XLA partitions the step (one tuple
              all-reduce, which gloo runs as one collective per parameter array);
  one device  one process on all N cores at the global batch (main.py's one-device mode);
  eager       torch eager with N threads on the N cores at the global batch (SDPA attention);
  one core    one process on core 0 with one process's slice of the batch: the step without
              communication or a partner to wait for;
and, once per shape, the gradient all-reduce alone between the N processes: the step's parameter
tree summed leaf by leaf against the same numbers as one flat buffer. Medians over --steps steps
after 2 warm-up steps, times from process 0. Writes <out>/multiprocess_step.{md,json}.
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
  spt_platform.pin_to_cores(spt_platform.parse_cores(args.cores))
  if args.tree:
    spt_platform.flat_gradient_all_reduce = lambda mesh: False
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
  elif args.kind.startswith("eager:"):
    import torch
    torch.set_num_threads(len(spt_platform.parse_cores(args.cores)))
    kind = args.kind.split(":")[1]
    mlm_outputs = train_step.JaxStep(shape, kind, local, arrays).mlm_outputs if (
        kind == "pretrain") else 0
    host = train_step.pipeline.train_batches(arrays, local, seed=0)
    eager = train_step.TorchStep(shape, kind, [next(host) for _ in range(4)], mlm_outputs,
                                 compile=False)
    for _ in range(2):
      eager()
    times = [eager() for _ in range(args.steps)]
    out.update(step_ms=1e3 * statistics.median(times),
               tokens_per_step=local * shape.sequences_per_example * shape.length)
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


def measure(script_args: list[str], processes: int, timeout: float, cores=None) -> dict:
  """Runs `processes` workers (process i on core i, or the one process on `cores`) and returns
  process 0's result."""
  port = free_port()
  procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(i),
                             "--cores", cores or str(i), "--port", str(port),
                             "--processes", str(processes)] + script_args,
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
           f"all {n} cores, torch eager with {n} threads, and one process on one core at one "
           f"process's slice of the batch. Median of {report['steps']} steps; tokens/s of the "
           f"global batch.", "",
           f"| shape | step | global batch | {n} processes (flat all-reduce): ms | tok/s | "
           f"{n} processes, tree all-reduce: ms | one device, {n} cores: ms | eager, {n} threads: "
           f"ms | tok/s | eager÷JAX, speed ({n} processes; ≤ 1: JAX as fast or faster) | one core, batch/{n}: ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
  for r in report["rows"]:
    multi, eager = r["processes"], r["eager"]
    lines.append(f"| {r['shape']} | {r['kind']} | {r['global_batch']} | {multi['step_ms']:.0f} | "
                 f"{multi['tok_s']:,.0f} | {r['tree']['step_ms']:.0f} | "
                 f"{r['one_device']['step_ms']:.0f} | {eager['step_ms']:.0f} | "
                 f"{eager['tok_s']:,.0f} | {multi['step_ms'] / eager['step_ms']:.2f} | "
                 f"{r['one_core']['step_ms']:.0f} |")
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
  parser.add_argument("--cores", default="0", help=argparse.SUPPRESS)
  parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--shape", default="", help=argparse.SUPPRESS)
  parser.add_argument("--kind", default="", help=argparse.SUPPRESS)
  parser.add_argument("--global-batch", type=int, default=0, help=argparse.SUPPRESS)
  parser.add_argument("--tree", action="store_true", help=argparse.SUPPRESS)
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
      all_cores = ",".join(map(str, sorted(os.sched_getaffinity(0))[:args.processes]))
      multi = measure(common + ["--kind", kind], args.processes, args.timeout)
      tree = measure(common + ["--kind", kind, "--tree"], args.processes, args.timeout)
      whole = measure(common + ["--kind", kind], 1, args.timeout, cores=all_cores)
      eager = measure(common + ["--kind", f"eager:{kind}"], 1, args.timeout, cores=all_cores)
      alone = measure(common + ["--kind", kind, "--global-batch", str(batch // args.processes)],
                      1, args.timeout)
      report["rows"].append(dict(shape=name, kind=kind, global_batch=batch, processes=multi,
                                 tree=tree, one_device=whole, eager=eager, one_core=alone))
      print(f"[{name}/{kind}] {args.processes} processes {multi['step_ms']:.0f} ms (tree "
            f"all-reduce {tree['step_ms']:.0f} ms), one device {whole['step_ms']:.0f} ms, eager "
            f"{eager['step_ms']:.0f} ms, one core at batch {alone['local_batch']} "
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
