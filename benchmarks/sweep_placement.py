r"""Throughput of concurrent sweep runs with and without each placed on cores of its own.

  python benchmarks/sweep_placement.py                       # ListOps cpu fine-tuning, ~12 min
  python benchmarks/sweep_placement.py --config=configs/pathfinder_scratch.py:cpu --steps=300

Runs the same short from-scratch study run (`--config`, `--steps` fine-tuning steps) five ways, one
after the other, through main.py as the sweep runner starts it:
  alone            seed 0, one process on the idle machine, all cores
  alone, 1 core    seed 0, one process confined to one core (main.py --cores)
  2 concurrent, unpinned  the sweep runner, --processes=2 --nopin_cores, seeds 0 and 1
  2 concurrent, pinned    the sweep runner, --processes=2 (its default: each run on a core of its
                          own with as many XLA threads as an unconfined run, --run_threads=all)
  2 concurrent, pinned, slot threads   the same with --run_threads=slot (one thread per core)
and reports each process's training throughput (results.json's steps_per_sec: training steps only,
without compilation, evaluation and checkpoints) and whether the runs' final parameters and test
metrics are bit-identical across placements (else by how much they differ): XLA:CPU's results
depend on its thread count (main.py --cpu_threads, by default one per core), so runs with as many
threads agree whatever their cores. Out: `<out>/sweep_placement.json` and `.md`.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from spt_jax import checkpoints, config_lib, sweep, tree  # noqa: E402


def final_params(run_dir: str, phase: str = "finetune") -> dict:
  latest = os.path.join(run_dir, phase, "checkpoints", "latest")
  step = max(os.listdir(latest), key=int)
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def compare(a_dir: str, b_dir: str) -> dict:
  """Whether two runs' final parameters and test metrics are bit-identical, and if not by how much
  the parameters differ (largest absolute difference, share of values that differ)."""
  a, b = final_params(a_dir), final_params(b_dir)
  results = [json.load(open(os.path.join(d, "results.json")))["finetune"]["test_of_best"]
             for d in (a_dir, b_dir)]
  if a.keys() != b.keys():
    return {"identical": False, "why": "different parameter names"}
  differ = sum(int((a[k] != b[k]).sum()) for k in a)
  return {"identical": differ == 0 and results[0] == results[1],
          "max_abs_diff": max(float(np.abs(a[k] - b[k]).max()) for k in a),
          "share_differing": differ / sum(a[k].size for k in a),
          "test_metrics_equal": results[0] == results[1]}


def throughput(run_dir: str, tokens_per_step: int) -> dict:
  r = json.load(open(os.path.join(run_dir, "results.json")))["finetune"]
  return {"steps_per_sec": r["steps_per_sec"], "tokens_per_sec": r["steps_per_sec"] * tokens_per_step,
          "wall_time_sec": r["wall_time_sec"]}


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="configs/listops_scratch.py:cpu")
  parser.add_argument("--steps", type=int, default=600)
  parser.add_argument("--workdir", default="/tmp/sweep_placement")
  parser.add_argument("--out", default="benchmarks/results")
  args = parser.parse_args(argv)
  overrides = (f"finetune.num_steps={args.steps} finetune.eval_every_steps={args.steps} "
               f"finetune.checkpoint_every_steps={args.steps}")
  config = config_lib.load_config(args.config)
  tokens_per_step = config.finetune.batch_size * config.data.max_length
  os.makedirs(args.out, exist_ok=True)
  rows, started = {}, time.time()

  def run_alone(name, cores):
    run_dir = os.path.join(args.workdir, name, "seed_0")
    if not os.path.exists(os.path.join(run_dir, "results.json")):
      spec = dict(sweep.parse_run(f"x: {overrides}")[1], config=args.config)
      sweep._run_subprocess(spec, 0, run_dir, cores)
    rows[name] = [throughput(run_dir, tokens_per_step)]

  run_alone("alone", None)
  run_alone("alone_1core", (max(os.sched_getaffinity(0)),))
  for name, pin, threads in (("concurrent_unpinned", False, "all"),
                             ("concurrent_pinned", True, "all"),
                             ("concurrent_pinned_slot_threads", True, "slot")):
    cfg = config_lib.sweep_config(base=args.config, seeds=(0, 1), title=name, output="table",
                                  metrics=("finetune.test_of_best.accuracy",),
                                  runs=[f"run: {overrides}"])
    sweep.run_sweep(cfg, os.path.join(args.workdir, name), processes=2, pin_cores=pin,
                    run_threads=threads)
    rows[name] = [throughput(os.path.join(args.workdir, name, "run", f"seed_{s}"), tokens_per_step)
                  for s in (0, 1)]
  run = lambda name, seed=0: (os.path.join(args.workdir, name, f"seed_{seed}") if name.startswith("alone")
                              else os.path.join(args.workdir, name, "run", f"seed_{seed}"))
  # XLA:CPU splits some operations by its thread pool's size: runs with as many threads agree bit
  # for bit whatever their cores, runs with different counts differ by float rounding.
  identical = {f"seed {s}: pinned vs unpinned": compare(run("concurrent_pinned", s),
                                                        run("concurrent_unpinned", s))
               for s in (0, 1)}
  identical["seed 0: pinned vs alone"] = compare(run("concurrent_pinned"), run("alone"))
  identical["seed 0: pinned, slot threads vs alone on 1 core"] = compare(
      run("concurrent_pinned_slot_threads"), run("alone_1core"))
  identical["seed 0: unpinned vs alone"] = compare(run("concurrent_unpinned"), run("alone"))
  identical["seed 0: alone vs alone on 1 core"] = compare(run("alone"), run("alone_1core"))
  alone = rows["alone"][0]["tokens_per_sec"]
  report = {"config": args.config, "steps": args.steps, "tokens_per_step": tokens_per_step,
            "cores": sorted(os.sched_getaffinity(0)), "rows": rows, "bit_identical": identical,
            "seconds": time.time() - started}
  lines = [f"Concurrent sweep runs, `{args.config}` fine-tuning, {args.steps} steps "
           f"({tokens_per_step} tokens per step), cores {report['cores']}:", "",
           "| placement | tokens/s per process | vs alone |", "|---|---|---|"]
  for name, per_process in rows.items():
    values = [r["tokens_per_sec"] for r in per_process]
    lines.append(f"| {name.replace('_', ' ')} | {', '.join(f'{v:,.0f}' for v in values)} | "
                 f"{', '.join(f'{v / alone:.2f}' for v in values)} |")
  lines += ["", "Bit-identical (final parameters and test metrics), else the largest parameter "
            "difference and the share of values that differ:", ""]
  lines += [f"- {k}: " + ("yes" if v["identical"] else
                           f"NO (max |diff| {v.get('max_abs_diff', float('nan')):.1e}, "
                           f"{v.get('share_differing', float('nan')):.0%} of values; test metrics "
                           f"{'equal' if v.get('test_metrics_equal') else 'differ'})")
            for k, v in identical.items()]
  text = "\n".join(lines) + "\n"
  print(text)
  with open(os.path.join(args.out, "sweep_placement.json"), "w") as f:
    json.dump(report, f, indent=1)
  with open(os.path.join(args.out, "sweep_placement.md"), "w") as f:
    f.write(text)
  return report


if __name__ == "__main__":
  main()
