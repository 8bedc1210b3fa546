r"""Validation-accuracy curves of a sweep's arms: mean ± std over seeds against the fine-tuning step.

  python scripts/sweep_curves.py --workdir=runs/lra_cpu/listops --runs=spt,scratch \
      --out=docs/results/lra_cpu/listops/spt_vs_scratch/curves.png --title="ListOps (cpu)"

Reads only each run's `<phase>/metrics.jsonl` (validation records), so it works on killed, resumed
and copied runs; seeds are the `seed_<s>` directories every listed run has. A sweep draws every
phase's curves of its arms itself (`curves.png`, spt_jax.analysis.report.sweep_curves).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spt_jax.analysis import plots, report  # noqa: E402


def val_curve(run_dir: str, phase: str, metric: str) -> dict[int, float]:
  return report.curve(report.read_metrics(os.path.join(run_dir, phase, report.METRICS)), "val",
                      metric)


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
    common, mean, std = report.seed_band([val_curve(d, args.phase, args.metric) for d in seeds])
    common = common.tolist()
    if steps is not None and common != steps:
      raise ValueError(f"{name}: validation steps {common} differ from the other runs' {steps}.")
    steps = common
    series[f"{name} ({len(seeds)} seeds)"] = (mean, std)
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  plots.lines(steps, series, args.out, xlabel=f"{args.phase} step",
              ylabel=f"validation {args.metric}", title=args.title)
  print(f"wrote {args.out}")


if __name__ == "__main__":
  main()
