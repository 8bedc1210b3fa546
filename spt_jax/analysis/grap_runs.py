r"""GraP's weights across the seeds of a sweep: the per-seed verdict table, whether the alignments
that drove the weights were signal or noise, and one figure of every run's weight trajectories.

  python -m spt_jax.analysis.grap_runs --sweep=runs/grap_redundancy \
    --out=docs/results/grap_redundancy
  python -m spt_jax.analysis.grap_runs --sweep=runs/grap_compare \
    --arms=grap,labels_0.1,labels_0.01 --out=/tmp/grap_labels

Reads `<sweep>/<arm>/seed_<s>/pretrain/{results.json,metrics.jsonl}` of every GraP composite phase
(the `grap` entry and the 'weights' rows the phase writes) and writes into --out:

  grap_weights.md, .json  one row per run: probe validation accuracy and chance, applicability, each
                          loss's weight (median of the last quarter of the steps) relative to the
                          largest, the redundancy verdicts, and each loss's alignment with the probe
                          gradient with its signal-to-noise ratio (below)
  grap_weights.png        each arm's normalised weights against the step, one line per seed and loss

Signal or noise. GraP's logits follow Adam with β₁ = 0 and β₂ = 0.99, whose step has magnitude about
the learning rate whatever the size of the ascent direction: an alignment of 1e-4 moves a logit as
fast as one of 1e-1. Whether a weight's fate says something about its loss therefore depends on
whether its alignment p_i = cos(g_i, d) is distinguishable from zero. The 'weights' rows log p_i (an
EMA over steps) every few steps; the table gives its mean over the run and t = mean / standard
error, the standard error from the means of consecutive blocks of `--block` rows (the EMA makes
neighbouring rows correlated; blocks many EMA lengths long are nearly independent), over the first
quarter of the steps (where the weights usually settle) and over the whole run. |t| below ~2: the
alignments cannot be told from zero, and the weights moved on batch noise. A large |t| late in a run
can be the weights' consequence rather than their cause: the encoder follows the loss that won.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np
from absl import app, flags

from spt_jax.analysis import plots, report


def _weight_rows(phase_dir: str) -> list[dict]:
  rows = report.read_metrics(os.path.join(phase_dir, "metrics.jsonl"))
  return sorted((r for r in rows if r["split"] == "weights"), key=lambda r: r["step"])


def alignment_signal(values: np.ndarray, block: int) -> tuple[float, float]:
  """(mean, t = mean / standard error) of a logged alignment series, the standard error from the
  means of consecutive blocks of `block` values (NaN t when fewer than 2 blocks)."""
  values = np.asarray(values, np.float64)
  n_blocks = len(values) // block
  mean = float(values.mean())
  if n_blocks < 2:
    return mean, float("nan")
  means = values[:n_blocks * block].reshape(n_blocks, block).mean(1)
  se = means.std(ddof=1) / np.sqrt(n_blocks)
  return mean, float(mean / se) if se > 0 else float("inf")


def run_summary(phase_dir: str, block: int) -> dict:
  """The `grap` entry of one GraP phase plus its alignments' means and t-statistics."""
  with open(os.path.join(phase_dir, "results.json")) as f:
    result = json.load(f)
  entry = result.get("grap")
  if result.get("weighting") != "grap" or entry is None:
    raise ValueError(f"{phase_dir}: not a finished GraP composite phase (no 'grap' entry in "
                     f"results.json).")
  rows = _weight_rows(phase_dir)
  losses = list(result["losses"])
  early = rows[:max(1, len(rows) // 4)]
  align = {n: alignment_signal([r[f"align_{n}"] for r in rows], block) for n in losses}
  align_early = {n: alignment_signal([r[f"align_{n}"] for r in early], block) for n in losses}
  return {"losses": losses, "probe_val_accuracy": entry["probe_val_accuracy"],
          "chance": entry["chance"], "applicable": entry["applicable"],
          "relative_weight": entry["relative_weight"],
          "useless_below_5pct": entry.get("useless_below_5pct"),
          "useful_above_30pct": entry.get("useful_above_30pct"),
          "align_mean": {n: a[0] for n, a in align.items()},
          "align_t": {n: a[1] for n, a in align.items()},
          "align_mean_first_quarter": {n: a[0] for n, a in align_early.items()},
          "align_t_first_quarter": {n: a[1] for n, a in align_early.items()},
          "steps": [r["step"] for r in rows],
          "weights": {n: [r[n] for r in rows] for n in losses}}


def find_runs(sweep: str, arms: list[str]) -> dict[str, dict[int, str]]:
  """{arm: {seed: phase dir}} of the finished GraP phases under `sweep`."""
  found: dict[str, dict[int, str]] = {}
  for path in sorted(glob.glob(os.path.join(sweep, "*", "seed_*", "pretrain", "results.json"))):
    phase = os.path.dirname(path)
    arm = os.path.basename(os.path.dirname(os.path.dirname(phase)))
    seed = int(os.path.basename(os.path.dirname(phase)).split("_", 1)[1])
    with open(path) as f:
      if json.load(f).get("weighting") != "grap" or (arms and arm not in arms):
        continue
    found.setdefault(arm, {})[seed] = phase
  missing = sorted(set(arms) - set(found))
  if missing or not found:
    raise FileNotFoundError(f"{sweep}: no finished GraP pretraining for arm(s) "
                            f"{missing or '(any)'}; looked for "
                            f"<arm>/seed_<s>/pretrain/results.json.")
  return {arm: dict(sorted(seeds.items())) for arm, seeds in sorted(found.items())}


def _verdict(ok) -> str:
  return "—" if ok is None else ("yes" if ok else "no")


def markdown(summaries: dict[str, dict[int, dict]]) -> str:
  losses = []
  for seeds in summaries.values():
    for s in seeds.values():
      losses += [n for n in s["losses"] if n not in losses]
  head = (["arm", "seed", "probe val. acc. (chance)", "applicable"]
          + [f"{n} weight" for n in losses] + ["useless < 5%", "useful ≥ 30%"]
          + [f"{n} align ×1e4: first quarter (t), all (t)" for n in losses])
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for arm, seeds in summaries.items():
    for seed, s in seeds.items():
      weight = [f"{s['relative_weight'][n]:.3f}" if n in s["losses"] else "" for n in losses]
      align = [f"{1e4 * s['align_mean_first_quarter'][n]:+.1f} "
               f"({s['align_t_first_quarter'][n]:+.1f}), {1e4 * s['align_mean'][n]:+.1f} "
               f"({s['align_t'][n]:+.1f})" if n in s["losses"] else "" for n in losses]
      lines.append("| " + " | ".join(
          [arm, str(seed), f"{100 * s['probe_val_accuracy']:.1f}% ({100 * s['chance']:.0f}%)",
           "yes" if s["applicable"] else "no", *weight, _verdict(s["useless_below_5pct"]),
           _verdict(s["useful_above_30pct"]), *align]) + " |")
  lines += ["", "Per arm: seeds where random (and time) end below 5% of the largest weight / every "
            "useful loss keeps ≥ 30% / the probe reads the label (applicable):", ""]
  for arm, seeds in summaries.items():
    n = len(seeds)
    count = lambda key: sum(bool(s[key]) for s in seeds.values())
    lines.append(f"- {arm}: {count('useless_below_5pct')}/{n}, {count('useful_above_30pct')}/{n}, "
                 f"{count('applicable')}/{n}")
  return "\n".join(lines) + "\n"


def write(sweep: str, arms: list[str], out: str, block: int) -> str:
  """Writes grap_weights.{md,json,png} of the GraP runs under `sweep` into `out` (names that do not
  clash with the sweep's own table.md and plot.png); returns the markdown table."""
  runs = find_runs(sweep, arms)
  summaries = {arm: {seed: run_summary(phase, block) for seed, phase in seeds.items()}
               for arm, seeds in runs.items()}
  os.makedirs(out, exist_ok=True)
  table = markdown(summaries)
  with open(os.path.join(out, "grap_weights.md"), "w") as f:
    f.write(f"<!-- python -m spt_jax.analysis.grap_runs --sweep={sweep} "
            f"{'--arms=' + ','.join(arms) + ' ' if arms else ''}--block={block} --out={out} -->\n")
    f.write(table)
  with open(os.path.join(out, "grap_weights.json"), "w") as f:
    json.dump({arm: {str(seed): {k: v for k, v in s.items() if k not in ("steps", "weights")}
                     for seed, s in seeds.items()} for arm, seeds in summaries.items()},
              f, indent=1)
  plots.weight_grid({arm: {seed: (s["steps"], s["weights"]) for seed, s in seeds.items()}
                     for arm, seeds in summaries.items()},
                    os.path.join(out, "grap_weights.png"),
                    f"GraP's normalised loss weights, {os.path.basename(os.path.normpath(sweep))}")
  return table


# ---------------------------------------------------------------------------------------- CLI
FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command line's flags; defined only when run as a program, so that importing this module
  next to spt_jax.analysis.__main__ (which also has --out) does not clash."""
  flags.DEFINE_string("sweep", None, "A sweep workdir whose runs are <arm>/seed_<s>/pretrain.")
  flags.DEFINE_list("arms", [], "Arms (run names) to include; default: every GraP run found.")
  flags.DEFINE_string("out", None, "Directory for grap_weights.{md,json,png}.")
  flags.DEFINE_integer("block", 5, "Weight rows per block for the alignments' standard error.")
  flags.mark_flags_as_required(["sweep", "out"])


def main(argv):
  del argv
  print(write(FLAGS.sweep, FLAGS.arms, FLAGS.out, FLAGS.block))
  print(f"Wrote {FLAGS.out}/grap_weights.md, grap_weights.json, grap_weights.png")


if __name__ == "__main__":
  define_flags()
  app.run(main)
