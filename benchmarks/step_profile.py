r"""Where one train step's time goes on the CPU backend: cores used, and XLA's thunks by concurrency.

  python benchmarks/step_profile.py                                  # cpu shape, both kinds
  python benchmarks/step_profile.py --shapes cpu,pathfinder --steps 5 --out /tmp/profile.json

The step is `benchmarks/train_step.py`'s (the real spt_jax train step on the same devices as
main.py: one CPU device unless --cpu-devices). For each shape and kind it reports

- the step's wall time and the cores it kept busy (user + system CPU time of this process over
  wall time, from getrusage, over --steps untraced steps);
- from a `jax.profiler` trace of --steps more steps, with XLA:CPU's per-thunk trace events on
  (`--xla_cpu_enable_xprof_traceme`, set here before JAX starts): how much of the step each pool
  thread spent running a thunk, the share of the step during which 0, 1, 2... thunks ran at once,
  and the thunks that took the most thread time.

It answers the question the throughput table cannot: whether a slow step is slow work or idle
cores. benchmarks/README.md ("Where the one-device step's time goes") has the measured output.
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import resource
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

# The per-thunk events exist only with this flag, and XLA reads its flags once, at start-up.
if "xla_cpu_enable_xprof_traceme" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                             " --xla_cpu_enable_xprof_traceme=true").strip()

import jax  # noqa: E402

from spt_jax import host_memory  # noqa: E402
from spt_jax import platform as spt_platform  # noqa: E402
import train_step  # noqa: E402  (benchmarks/train_step.py: the shapes and the real step)

# Events that bracket thunks (the executor, thread-pool bookkeeping) rather than being one.
NOT_A_THUNK = ("ThunkExecutor", "end:", "ThreadpoolListener", "SlinkyThreadPool")
STEP_EVENT = "spt_profile_step"


def cores_used(step, steps: int) -> tuple[float, float]:
  """(seconds per step, cores busy: CPU time / wall time) over `steps` calls."""
  r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
  for _ in range(steps):
    step()
  wall = time.perf_counter() - t0
  r1 = resource.getrusage(resource.RUSAGE_SELF)
  cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
  return wall / steps, cpu / wall


def trace_events(step, steps: int) -> list[tuple[str, int, int, str]]:
  """(thread, start ns, end ns, name) of every event in a trace of `steps` calls."""
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
      for _ in range(steps):
        with jax.profiler.TraceAnnotation(STEP_EVENT):
          step()
    path = glob.glob(os.path.join(d, "**", "*.xplane.pb"), recursive=True)[0]
    data = jax.profiler.ProfileData.from_file(path)
  return [(f"{plane.name}/{line.name}", e.start_ns, e.start_ns + e.duration_ns, e.name)
          for plane in data.planes for line in plane.lines for e in line.events]


def thunk_report(events, top: int) -> dict:
  """Per-thread thunk time, the concurrency histogram and the top thunks, within the steps."""
  steps = sorted((a, b) for _, a, b, n in events if n == STEP_EVENT)
  if not steps:
    raise RuntimeError("the trace holds no step annotation: the profiler recorded nothing")
  wall = sum(b - a for a, b in steps)

  def in_steps(a, b):
    return any(s <= a and b <= e for s, e in steps)

  per_thread = collections.defaultdict(list)
  for thread, a, b, name in events:
    # XLA's threads only (its intra-op pool and the client's): the Python thread's events are
    # the dispatch, not work.
    if ("XLA" in thread and not name.startswith(NOT_A_THUNK) and in_steps(a, b)):
      per_thread[thread].append((a, b, name))
  # Outermost thunks only: a while loop's body thunks are inside its own event on the same thread.
  outer = []
  for thread, evs in per_thread.items():
    end = -1
    for a, b, name in sorted(evs, key=lambda e: (e[0], -e[1])):
      if a >= end:
        outer.append((thread, a, b, name))
        end = b
  busy = collections.Counter()
  for thread, a, b, _ in outer:
    busy[thread] += b - a
  histogram = collections.Counter()
  for s, e in steps:
    edges = sorted([(max(a, s), 1) for _, a, b, _ in outer if a < e and b > s] +
                   [(min(b, e), -1) for _, a, b, _ in outer if a < e and b > s])
    running, last = 0, s
    for t, delta in edges:
      histogram[running] += t - last
      running, last = running + delta, t
    histogram[running] += e - last
  by_name, count = collections.Counter(), collections.Counter()
  for _, a, b, name in outer:
    kind = name.split(".")[0]
    by_name[kind] += b - a
    count[kind] += 1
  n = len(steps)
  return {
      "traced_steps": n,
      "traced_step_ms": wall / n / 1e6,
      "thread_busy_share": sorted((t / wall for t in busy.values()), reverse=True),
      "thunks_at_once_share": {k: v / wall for k, v in sorted(histogram.items())},
      "thunk_ms_per_step": sum(busy.values()) / n / 1e6,
      "top_thunks": [dict(name=k, ms_per_step=v / n / 1e6, per_step=count[k] / n)
                     for k, v in by_name.most_common(top)],
  }


def profile(shape_name: str, kind: str, batch: int | None, steps: int, top: int) -> dict:
  shape = train_step.SHAPES[shape_name]
  batch = batch or shape.cpu_batch
  step = train_step.JaxStep(shape, kind, batch, train_step.synthetic_arrays(shape, 64))
  for _ in range(3):  # warm: the heap settles and every buffer exists
    step()
  seconds, cores = cores_used(step, steps)
  report = dict(shape=shape_name, kind=kind, batch=batch, length=shape.length,
                devices=step.devices, step_ms=seconds * 1e3, tokens_per_s=batch * shape.length /
                seconds, cores_busy=cores, usable_cores=spt_platform.usable_cores())
  report.update(thunk_report(trace_events(step, steps), top))
  return report


def render(r: dict) -> str:
  at_once = ", ".join(f"{k}: {v:.0%}" for k, v in r["thunks_at_once_share"].items())
  lines = [f"{r['shape']} {r['kind']} (L {r['length']}, batch {r['batch']}, {r['devices']} "
           f"device(s)): {r['step_ms']:.0f} ms/step, {r['tokens_per_s']:,.0f} tok/s, "
           f"{r['cores_busy']:.2f} of {r['usable_cores']} cores busy",
           f"  traced: {r['traced_step_ms']:.0f} ms/step; thunk time {r['thunk_ms_per_step']:.0f} "
           f"ms/step; each pool thread in a thunk: "
           + ", ".join(f"{s:.0%}" for s in r["thread_busy_share"]),
           f"  share of the step with N thunks running at once: {at_once}",
           "  thunks by thread time (ms per step, calls per step):"]
  lines += [f"    {t['name'][:48]:48s} {t['ms_per_step']:8.1f}  {t['per_step']:6.0f}"
            for t in r["top_thunks"]]
  return "\n".join(lines)


def main(argv=None) -> list[dict]:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--shapes", default="cpu", help=f"comma-separated, of {sorted(train_step.SHAPES)}")
  parser.add_argument("--kinds", default="pretrain,finetune")
  parser.add_argument("--batch", type=int, default=None, help="default: the shape's CPU batch")
  parser.add_argument("--steps", type=int, default=5, help="timed steps, then as many traced")
  parser.add_argument("--top", type=int, default=12)
  parser.add_argument("--tiny", action="store_true", help="shrunk shapes: a dry run in seconds")
  parser.add_argument("--cpu-devices", type=int, default=1, help="as main.py's --cpu_devices")
  parser.add_argument("--cores", default="",
                      help="confine the process to these cores first ('0': one-core mode)")
  parser.add_argument("--out", help="also write the reports as JSON here")
  args = parser.parse_args(argv)
  names = [s for s in args.shapes.split(",") if s]
  if set(names) - set(train_step.SHAPES):
    parser.error(f"--shapes {args.shapes!r}: unknown {sorted(set(names) - set(train_step.SHAPES))}")
  if args.tiny:
    train_step.SHAPES.update({n: train_step.tiny_shape(train_step.SHAPES[n]) for n in names})
  if args.cores:  # before the backend sizes its thread pools by the cores this process may use
    spt_platform.pin_to_cores(spt_platform.parse_cores(args.cores))
  host_memory.retain_freed_memory()  # as main.py, before the backend starts its threads
  spt_platform.use_cpu_devices(
      spt_platform.usable_cores() if args.cpu_devices < 0 else args.cpu_devices)
  reports = []
  for name in names:
    for kind in args.kinds.split(","):
      reports.append(profile(name, kind, args.batch, args.steps, args.top))
      print(render(reports[-1]), flush=True)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(reports, f, indent=1)
  return reports


if __name__ == "__main__":
  main()
