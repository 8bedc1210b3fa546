r"""Attention metrics of a study's checkpoints over seeds, as one markdown table.

  python scripts/attention_table.py --dir=runs/lra_cpu/pathfinder/attention > table.md

Reads `<dir>/<arm>_seed_<s>_<checkpoint>/metrics.json` (written by `python -m spt_jax.analysis
--run=... --out=...`, as scripts/lra_cpu_study.sh names them: arm `spt` or `scratch`, checkpoint
`pretrain`, `finetune` or `init`) and prints, per arm and checkpoint and per layer, each seed's
overall diagonality and mean attended distance and their mean ± std over the seeds (numpy's
default std, ddof=0, as the sweep tables). An entry for which no seed has metrics is absent.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys

import numpy as np

ENTRY = re.compile(r"^(?P<arm>.+)_seed_(?P<seed>\d+)_(?P<checkpoint>[a-z]+)$")
# The rows' order: what SPT learns, what fine-tuning keeps, and scratch before and after.
ORDER = [("spt", "pretrain"), ("spt", "finetune"), ("scratch", "init"), ("scratch", "finetune")]
LABEL = {("spt", "pretrain"): "SPT, after pretraining", ("spt", "finetune"): "SPT, after fine-tuning",
         ("scratch", "init"): "scratch, at initialisation",
         ("scratch", "finetune"): "scratch, after fine-tuning"}
METRICS = (("diagonality", "diagonality", 2), ("mean_distance", "mean attended distance", 1))


def collect(directory: str) -> dict:
  """{(arm, checkpoint): {seed: [per-layer overall metrics]}}."""
  found = collections.defaultdict(dict)
  for name in sorted(os.listdir(directory)):
    match = ENTRY.match(name)
    path = os.path.join(directory, name, "metrics.json")
    if not match or not os.path.exists(path):
      continue
    with open(path) as f:
      layers = [layer["overall"] for layer in json.load(f)["layers"]]
    found[(match["arm"], match["checkpoint"])][int(match["seed"])] = layers
  return found


def table(found: dict) -> str:
  if not found:
    raise ValueError("no <arm>_seed_<s>_<checkpoint>/metrics.json entries found")
  keys = [k for k in ORDER if k in found] + sorted(k for k in found if k not in ORDER)
  seeds = sorted({s for per_seed in found.values() for s in per_seed})
  num_layers = max(len(layers) for per_seed in found.values() for layers in per_seed.values())
  lines = []
  for metric, title, digits in METRICS:
    header = ["checkpoint", "layer"] + [f"seed {s}" for s in seeds] + ["mean ± std"]
    lines += [f"### {title}", "", "| " + " | ".join(header) + " |",
              "|" + "---|" * len(header)]
    for key in keys:
      for layer in range(num_layers):
        values = {s: found[key][s][layer][metric] for s in seeds
                  if s in found[key] and layer < len(found[key][s])}
        cells = [f"{values[s]:.{digits}f}" if s in values else "—" for s in seeds]
        v = np.array(list(values.values()))
        summary = f"{v.mean():.{digits}f} ± {v.std():.{digits}f} ({len(v)})"
        lines.append("| " + " | ".join([LABEL.get(key, " ".join(key)), str(layer)] + cells
                                       + [summary]) + " |")
    lines.append("")
  return "\n".join(lines)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dir", required=True, help="the attention directory of a study's task")
  args = parser.parse_args(argv)
  try:
    print(table(collect(args.dir)))
  except (OSError, ValueError) as e:
    sys.exit(f"error: {args.dir}: {e}")


if __name__ == "__main__":
  main()
