r"""The plateau-budget study's summary figure: each arm's fine-tuning test accuracy, one dot per seed
and a bar at the mean, one row per task, the arms grouped by the study's stages (docs/lra_cpu.md).

  python scripts/lra_plateau_figure.py --workdir=~/spt_runs/lra_plateau \
      --out=docs/results/lra_plateau/summary.png

Arms are read from `<workdir>/<task>/<arm>/seed_<s>/results.json` for the arms and seeds of
configs/sweeps/lra_plateau.py's stages, each arm under the first stage that lists it; an arm with
no finished seed yet is left out, and each label says how many seeds the arm has. A bar's colour
says what its fine-tuning starts from (every pretrained weight, some of them, or none); the dashed
line is chance.
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

STUDY = "configs/sweeps/lra_plateau.py"
# What the fine-tuning run starts from, by the colour of its bar.
KINDS = {"spt": ("tab:blue", "every pretrained weight loaded"),
         "partial": ("tab:purple", "some pretrained weights loaded"),
         "scratch": ("tab:orange", "from scratch")}
INCH_PER_ARM = 0.42


def stage_arms(task: str) -> dict[str, list[tuple[str, str]]]:
  """Per stage, in the study's stage order, its arms not listed by an earlier stage, each with
  its kind (a key of KINDS)."""
  out, seen = {}, set()
  for stage in config_lib.load_module(STUDY).stage_names(task):
    sw = config_lib.load_config(f"{STUDY}:{task},{stage}")
    out[stage] = []
    for name, overrides in map(sweep.parse_run, sw.runs):
      if name not in seen:
        seen.add(name)
        out[stage].append((name, kind(task, overrides)))
  return out


def kind(task: str, overrides: dict) -> str:
  if str(overrides.get("config", "")).startswith(f"configs/{task}_scratch.py"):
    return "scratch"
  return "partial" if "finetune.init_from.include" in overrides else "spt"


def arms(task: str) -> list[str]:
  """Every arm of the task's stages, in stage order, each once."""
  return [name for names in stage_arms(task).values() for name, _ in names]


def accuracies(workdir: str, task: str, arm: str) -> list[float]:
  sw = config_lib.load_config(f"{STUDY}:{task},a")
  out = []
  for seed in sw.seeds:
    path = os.path.join(workdir, task, arm, f"seed_{seed}", "results.json")
    if os.path.exists(path):
      results = json.load(open(path))
      if "finetune" in results:
        out.append(results["finetune"]["test_of_best"]["accuracy"])
  return out


def draw(workdir: str, path: str) -> dict:
  """One row per task, a bar per finished arm grouped by stage; returns {task: {arm: [acc]}}."""
  tasks = [t for t in ("pathfinder", "listops") if os.path.isdir(os.path.join(workdir, t))]
  layout = {t: {} for t in tasks}  # task → stage → its finished arms: (name, kind, accuracies)
  for t in tasks:
    for stage, names in stage_arms(t).items():
      finished = [(a, k, accs) for a, k in names if (accs := accuracies(workdir, t, a))]
      if finished:
        layout[t][stage] = finished
  widest = max([sum(map(len, s.values())) for s in layout.values()] + [4])
  fig, axes = plots.plt.subplots(max(1, len(tasks)), 1, squeeze=False,
                                 figsize=(max(6.5, 1.2 + INCH_PER_ARM * widest),
                                          3.9 * max(1, len(tasks))))
  for ax, task in zip(axes[:, 0], tasks):
    i = 0
    labels = []
    for stage, names in layout[task].items():
      if i:
        ax.axvline(i - 0.5, color="grey", linewidth=0.6, alpha=0.6)
      ax.text(i - 0.4, 1.01, f"stage {stage}", transform=ax.get_xaxis_transform(), fontsize=8,
              color="dimgrey", va="bottom")
      for name, arm_kind, accs in names:
        values = 100 * np.asarray(accs)
        ax.bar(i, values.mean(), color=KINDS[arm_kind][0], alpha=0.45, width=0.7)
        ax.scatter(np.full(len(values), i) + np.linspace(-0.15, 0.15, len(values)), values,
                   color="black", s=12, zorder=3)
        labels.append(f"{name} ({len(values)})")
        i += 1
    chance = config_lib.load_module(STUDY).CHANCE[task]
    ax.axhline(100 * chance, color="grey", linestyle="--", linewidth=0.8)
    if not i:  # the task's runs have started but none has finished
      ax.set_ylim(0, 100)
      ax.text(0.5, 0.5, "no finished run yet", transform=ax.transAxes, ha="center", va="center",
              color="grey")
    ax.set_xlim(-0.6, widest - 0.4)  # one scale for every row: a bar has the same width in each
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("fine-tuning test accuracy (%)")
    ax.set_title(f"{task} (cpu), plateau budgets", fontsize=10, pad=14)
    ax.grid(axis="y", alpha=0.3)
  handles = [plots.plt.Rectangle((0, 0), 1, 1, color=c, alpha=0.45) for c, _ in KINDS.values()]
  fig.legend(handles, [label for _, label in KINDS.values()], loc="lower center", ncol=3,
             fontsize=8, frameon=False,
             title="one dot per seed (the seeds in brackets), bar at the mean, dashed line chance",
             title_fontsize=8)
  fig.tight_layout(rect=(0, 0.06, 1, 1))
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=120)
  plots.plt.close(fig)
  return {t: {name: accs for names in stages.values() for name, _, accs in names}
          for t, stages in layout.items()}


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
