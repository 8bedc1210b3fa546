r"""The plateau-budget study's summary figure: each arm's fine-tuning test accuracy, one dot per seed
and a bar at the mean, one panel per task (docs/lra_cpu.md).

  python scripts/lra_plateau_figure.py --workdir=~/spt_runs/lra_plateau \
      --out=docs/results/lra_plateau/summary.png

Arms are read from `<workdir>/<task>/<arm>/seed_<s>/results.json` for the arms and seeds of
configs/sweeps/lra_plateau.py's stages; an arm with no finished seed yet is left out, and a panel
says how many seeds each arm has. The dashed line is chance.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from spt_jax import config_lib, sweep  # noqa: E402
from spt_jax.analysis import plots  # noqa: E402

CHANCE = {"listops": 0.1, "pathfinder": 0.5}


def arms(task: str) -> list[str]:
  """Every arm of the task's stages, in stage order, each once."""
  names = []
  for stage in "abcd":
    sw = config_lib.load_config(f"configs/sweeps/lra_plateau.py:{task},{stage}")
    names += [sweep.parse_run(r)[0] for r in sw.runs]
  return list(dict.fromkeys(names))


def accuracies(workdir: str, task: str, arm: str) -> list[float]:
  sw = config_lib.load_config(f"configs/sweeps/lra_plateau.py:{task},a")
  out = []
  for seed in sw.seeds:
    path = os.path.join(workdir, task, arm, f"seed_{seed}", "results.json")
    if os.path.exists(path):
      results = json.load(open(path))
      if "finetune" in results:
        out.append(results["finetune"]["test_of_best"]["accuracy"])
  return out


def draw(workdir: str, path: str) -> dict:
  tasks = [t for t in ("pathfinder", "listops") if os.path.isdir(os.path.join(workdir, t))]
  data = {t: {a: accuracies(workdir, t, a) for a in arms(t)} for t in tasks}
  data = {t: {a: v for a, v in d.items() if v} for t, d in data.items()}
  fig, axes = plots.plt.subplots(1, max(1, len(tasks)), figsize=(6.5 * max(1, len(tasks)), 4.2),
                                 squeeze=False)
  for ax, task in zip(axes[0], tasks):
    names = list(data[task])
    for i, name in enumerate(names):
      values = 100 * np.asarray(data[task][name])
      ax.bar(i, values.mean(), color="tab:blue" if name.startswith("spt") else "tab:orange",
             alpha=0.45, width=0.7)
      ax.scatter(np.full(len(values), i) + np.linspace(-0.15, 0.15, len(values)), values,
                 color="black", s=14, zorder=3)
    ax.axhline(100 * CHANCE[task], color="grey", linestyle="--", linewidth=0.8)
    if not names:  # the task's runs have started but none has finished
      ax.set_ylim(0, 100)
      ax.text(0.5, 0.5, "no finished run yet", transform=ax.transAxes, ha="center", va="center",
              color="grey")
    ax.set_xlim(-0.6, max(len(names), 4) - 0.4)  # a bar keeps its width with few arms
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels([f"{n}\n({len(data[task][n])} seeds)" for n in names], rotation=45,
                       ha="right", fontsize=7)
    ax.set_ylabel("fine-tuning test accuracy (%)")
    ax.set_title(f"{task} (cpu), plateau budgets", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=120)
  plots.plt.close(fig)
  return data


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--workdir", required=True)
  parser.add_argument("--out", default="docs/results/lra_plateau/summary.png")
  args = parser.parse_args(argv)
  data = draw(os.path.expanduser(args.workdir), args.out)
  for task, values in data.items():
    for arm, accs in values.items():
      # ± the sample standard deviation over seeds, as docs/lra_cpu.md's plateau tables give it.
      std = np.std(accs, ddof=1) if len(accs) > 1 else 0.0
      print(f"{task:10s} {arm:26s} {100 * np.mean(accs):5.1f} ± {100 * std:4.1f}% "
            f"({len(accs)} seeds: {', '.join(f'{100 * a:.1f}' for a in accs)})")
  print(f"Written to {args.out}.")


if __name__ == "__main__":
  main()
