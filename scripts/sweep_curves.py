r"""Validation-accuracy curves of a sweep's arms: mean ± std over seeds against the fine-tuning step.

  python scripts/sweep_curves.py --workdir=runs/lra_cpu/listops --runs=spt,scratch \
      --out=docs/results/lra_cpu/listops/spt_vs_scratch/curves.png --title="ListOps (cpu)"

Reads only each run's `<phase>/metrics.jsonl` (validation records), so it works on killed, resumed
and copied runs; seeds are the `seed_<s>` directories every listed run has.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spt_jax.analysis import plots  # noqa: E402


def val_curve(run_dir: str, phase: str, metric: str) -> dict[int, float]:
  with open(os.path.join(run_dir, phase, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f if line.strip()]
  return {r["step"]: r[metric] for r in records if r.get("split") == "val" and metric in r}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--runs", required=True, help="comma-separated run names")
  parser.add_argument("--out", required=True)
  parser.add_argument("--title", default="")
  parser.add_argument("--phase", default="finetune")
  parser.add_argument("--metric", default="accuracy")
  args = parser.parse_args()
  series, steps = {}, None
  for name in args.runs.split(","):
    seeds = sorted(glob.glob(os.path.join(args.workdir, name, "seed_*")))
    curves = [val_curve(d, args.phase, args.metric) for d in seeds]
    common = sorted(set.intersection(*(set(c) for c in curves)))
    if steps is not None and common != steps:
      raise ValueError(f"{name}: validation steps {common} differ from the other runs' {steps}.")
    steps = common
    values = np.array([[c[s] for s in steps] for c in curves])
    series[f"{name} ({len(seeds)} seeds)"] = (values.mean(0), values.std(0))
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  plots.lines(steps, series, args.out, xlabel=f"{args.phase} step",
              ylabel=f"validation {args.metric}", title=args.title)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
