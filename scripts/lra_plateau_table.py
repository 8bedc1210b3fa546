r"""A stage's per-seed table of the plateau-budget study (docs/lra_cpu.md's "Pathfinder, seeds 0–2:
stage (d)" and the like): per arm of configs/sweeps/lra_plateau.py's stage, the test accuracy at
each seed, their mean ± sample std (ddof 1), where and why each fine-tuning stopped, the first
step its validation accuracy reached the study's STEPS_TO threshold, and the training compute.

  python scripts/lra_plateau_table.py --workdir=docs/results/lra_plateau/records \
      --task=pathfinder --stage=lr --seeds=0,1,2 --difference=spt,scratch_lr1e-3

`--difference=A,B` (repeatable) adds, for arms A and B (any arms of the task), A's test accuracy
minus B's per seed and their mean ± sample std over the seeds both have finished; `A:final`
stands for A's "final" row (below).

Reads `<workdir>/<task>/<arm>/seed_<s>/results.json` and `finetune/metrics.jsonl`, which the
committed records keep, so the tables regenerate without the runs' checkpoints. A seed that has
not finished is shown as "—" and left out of the mean. Stops read "cap" (the step cap, or a
compute-matched arm's budget) or "plateau"; "at chance" marks a run whose best validation accuracy
is within 3 points of the task's chance level.

An arm with a run to the cap (`<arm>_to_cap` in the same stage) gets a second row, "final": the
study's procedure, each seed's run under the plateau rule, or where the rule stopped it at chance,
that seed's run to the cap (marked †).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from spt_jax import config_lib, sweep  # noqa: E402
from spt_jax.analysis import report  # noqa: E402

STUDY = "configs/sweeps/lra_plateau.py"
NEAR_CHANCE = 0.03
TO_CAP = "_to_cap"  # the suffix of an arm's run to the cap without the plateau rule


def stage_arms(task: str, stage: str) -> list[str]:
  """The arms of the study's `stage` on `task`, in the stage's order."""
  if stage not in config_lib.load_module(STUDY).stage_names(task):
    raise ValueError(f"--stage={stage!r}: {task}'s stages are "
                     f"{config_lib.load_module(STUDY).stage_names(task)}.")
  return [sweep.parse_run(spec)[0]
          for spec in config_lib.load_config(f"{STUDY}:{task},{stage}").runs]


def first_step_reaching(metrics_path: str, threshold: float) -> int | None:
  """The first fine-tuning step whose validation accuracy is ≥ threshold (None: never)."""
  val = report.curve(report.read_metrics(metrics_path), "val", "accuracy")
  return next((step for step, value in sorted(val.items()) if value >= threshold), None)


def seed_row(workdir: str, task: str, arm: str, seed: int) -> dict | None:
  """One finished run's figures (None: no fine-tuning results yet)."""
  run = os.path.join(workdir, task, arm, f"seed_{seed}")
  path = os.path.join(run, "results.json")
  if not os.path.exists(path):
    return None
  results = json.load(open(path))
  finetune = results.get("finetune")
  if finetune is None:
    return None
  study = config_lib.load_module(STUDY)
  metrics = os.path.join(run, "finetune", "metrics.jsonl")
  flops = sum(phase.get("train_flops", 0.0) for phase in results.values()
              if isinstance(phase, dict))
  stop = finetune["stopped_at_step"]
  reason = "cap" if finetune["stop_reason"] == "cap" else "plateau"
  if finetune["best_val"]["accuracy"] <= study.CHANCE[task] + NEAR_CHANCE:
    reason += " at chance"
  return {"test": finetune["test_of_best"]["accuracy"], "stop": f"{stop:,} {reason}",
          "reached": (first_step_reaching(metrics, study.STEPS_TO[task]) if os.path.exists(metrics)
                      else None), "tflop": flops / 1e12}


def _per_seed(values: list[str]) -> str:
  """'a, b, c', or 'a ×3' when every seed has the same value."""
  if len(values) > 1 and len(set(values)) == 1:
    return f"{values[0]} ×{len(values)}"
  return ", ".join(values)


def final_row(workdir: str, task: str, arm: str, seed: int) -> dict | None:
  """The arm's run at `seed` as the study's procedure counts it: where the plateau rule stopped it
  at chance, its run to the cap (`<arm>_to_cap`, marked †) once that has finished."""
  row = seed_row(workdir, task, arm, seed)
  if row is not None and row["stop"].endswith("plateau at chance"):
    capped = seed_row(workdir, task, f"{arm}{TO_CAP}", seed)
    if capped is not None:
      return {**capped, "replaced": True}
  return row


def _line(label: str, rows: list[dict | None]) -> str | None:
  done = [r for r in rows if r is not None]
  if not done:
    return None
  tests = np.array([100 * r["test"] for r in done])
  mean = (f"{tests.mean():.1f} ± {tests.std(ddof=1):.1f}%" if len(done) > 1
          else f"{tests[0]:.1f}% (1 seed)")
  return "| " + " | ".join([
      label,
      ", ".join("—" if r is None else f"{100 * r['test']:.1f}" + ("†" if r.get("replaced") else "")
                for r in rows),
      mean,
      _per_seed(["—" if r is None else r["stop"] for r in rows]),
      _per_seed(["—" if r is None else "never" if r["reached"] is None
                 else f"{r['reached']:,}" for r in rows]),
      f"{np.mean([r['tflop'] for r in done]):.1f}"]) + " |"


def markdown(workdir: str, task: str, stage: str, seeds: list[int]) -> str:
  threshold = config_lib.load_module(STUDY).STEPS_TO[task]
  lines = [f"| arm | test accuracy (per seed) | mean ± std | stopped at (per seed) | "
           f"≥ {threshold:.0%} at (per seed) | TFLOP (mean) |", "|---" * 6 + "|"]
  arms = stage_arms(task, stage)
  lines += [line for arm in arms
            if (line := _line(f"`{arm}`", [seed_row(workdir, task, arm, s) for s in seeds]))]
  lines += [line for arm in arms if f"{arm}{TO_CAP}" in arms
            and (line := _line(f"`{arm}`, final", [final_row(workdir, task, arm, s)
                                                   for s in seeds]))]
  return "\n".join(lines)


FINAL = ":final"  # `--difference=A:final,B`: A's final row (final_row)


def _row_of(workdir: str, task: str, arm: str, seed: int) -> dict | None:
  if arm.endswith(FINAL):
    return final_row(workdir, task, arm.removesuffix(FINAL), seed)
  return seed_row(workdir, task, arm, seed)


def difference(workdir: str, task: str, a: str, b: str, seeds: list[int]) -> str:
  """`a − b` in test accuracy points, per seed both finished, and their mean ± sample std."""
  pairs = [(s, _row_of(workdir, task, a, s), _row_of(workdir, task, b, s)) for s in seeds]
  diffs = [(s, 100 * (ra["test"] - rb["test"])) for s, ra, rb in pairs if ra and rb]
  if not diffs:
    return f"{a} − {b}: no seed has both finished"
  values = np.array([d for _, d in diffs])
  spread = f" ± {values.std(ddof=1):.1f}" if len(values) > 1 else ""
  signed = lambda x: f"{x:+.1f}".replace("-", "−")
  return (f"{a} − {b}: {', '.join(signed(d) for _, d in diffs)} (seeds "
          f"{', '.join(str(s) for s, _ in diffs)}) → {signed(values.mean())}{spread} points")


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", required=True, help="the study's workdir, or its records")
  parser.add_argument("--task", required=True, choices=config_lib.load_module(STUDY).TASKS)
  parser.add_argument("--stage", required=True)
  parser.add_argument("--seeds", default="0,1,2", help="comma-separated")
  parser.add_argument("--difference", action="append", default=[], metavar="A,B",
                      help="arm A's test accuracy minus arm B's, per seed (repeatable)")
  args = parser.parse_args()
  workdir = os.path.expanduser(args.workdir)
  pairs = []
  for pair in args.difference:  # every pair checked before anything is printed
    a, sep, b = pair.partition(",")
    if not (sep and a and b):
      parser.error(f"--difference={pair!r} must be two arms joined by ',', e.g. spt,scratch")
    for arm in (a, b):
      if not os.path.isdir(os.path.join(workdir, args.task, arm.removesuffix(FINAL))):
        parser.error(f"--difference={pair!r}: {args.task} has no arm {arm!r} in {workdir}")
    pairs.append((a, b))
  try:
    seeds = [int(s) for s in args.seeds.split(",")]
    print(markdown(workdir, args.task, args.stage, seeds))
  except ValueError as e:
    parser.error(str(e))
  for a, b in pairs:
    print(difference(workdir, args.task, a, b, seeds))
  return 0


if __name__ == "__main__":
  sys.exit(main())
