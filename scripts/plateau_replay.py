r"""What a plateau rule would have decided for finished runs: replays `stop_on_plateau` settings on
each run's logged validation curve (metrics.jsonl) with the rule's own code (spt_jax.stopping).

  python scripts/plateau_replay.py --runs=docs/results/lra_plateau/records/pathfinder \
      --patience=12 --min_delta=0.005 --after_passing=0.55 --differences

For every `<runs>/<arm>/seed_<s>/<phase>/metrics.jsonl`, the step the phase trained to and its best
validation value; then, under the rule without `after_passing` and with it, the step the rule
stops at and the best value up to that step. "≥ s" means the rule had not stopped by the last
logged step s (the run ended first: its cap, its own rule or its compute budget). A rule "loses"
a run when its best up to the stop is worse than the run's best by more than `min_delta`.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from spt_jax import stopping  # noqa: E402
from spt_jax.analysis import report  # noqa: E402
from spt_jax.objectives.base import higher_is_better  # noqa: E402


class Decision(NamedTuple):
  stop: int       # the step the rule stops at, or the last logged step
  stopped: bool   # False: the run ended before the rule stopped it
  best: float     # the best validation value up to `stop`


def validation_curve(metrics_path: str, metric: str) -> list[tuple[int, float]]:
  """(step, value) of every validation of `metric` in a phase's metrics.jsonl, in step order (a
  resumed run's last record per step; report.read_metrics' handling of a cut-short line)."""
  return sorted(report.curve(report.read_metrics(metrics_path), "val", metric).items())


def replay(curve, metric: str, patience: int, min_delta: float,
           after_passing: float | None = None) -> Decision:
  """Where stopping.Plateau(metric, patience, min_delta, after_passing) stops `curve`."""
  rule = stopping.Plateau(metric, patience, min_delta, after_passing)
  best = max if higher_is_better(metric) else min
  for step, value in curve:
    if rule.observe(step, {metric: value}):
      return Decision(step, True, best(v for s, v in curve if s <= step))
  return Decision(curve[-1][0], False, best(v for _, v in curve))


def loses(decision: Decision, run_best: float, metric: str, min_delta: float) -> bool:
  gap = run_best - decision.best if higher_is_better(metric) else decision.best - run_best
  return gap > min_delta


def rows(runs: str, phase: str, metric: str, patience: int, min_delta: float,
         after_passing: float):
  """(arm, seed, last step, run's best, Decision without, Decision with after_passing) per run."""
  pattern = os.path.join(runs, "*", "seed_*", phase, "metrics.jsonl")
  for path in sorted(glob.glob(pattern)):
    curve = validation_curve(path, metric)
    if not curve:
      continue
    seed_dir = os.path.dirname(os.path.dirname(path))
    arm, seed = os.path.basename(os.path.dirname(seed_dir)), os.path.basename(seed_dir)
    run_best = (max if higher_is_better(metric) else min)(v for _, v in curve)
    yield (arm, seed.removeprefix("seed_"), curve[-1][0], run_best,
           replay(curve, metric, patience, min_delta),
           replay(curve, metric, patience, min_delta, after_passing))


def _cell(d: Decision) -> str:
  return f"{d.stop:,} | {d.best:.4f}" if d.stopped else f"≥ {d.stop:,} | {d.best:.4f}"


def markdown(table, metric: str, min_delta: float, after_passing: float,
             differences: bool) -> str:
  lines = [f"| arm | seed | trained to | best val {metric} | rule: stop | best | with "
           f"after_passing={after_passing:g}: stop | best |", "|---" * 8 + "|"]
  lost = [0, 0]
  for arm, seed, last, run_best, plain, passing in table:
    lost_here = (loses(plain, run_best, metric, min_delta),
                 loses(passing, run_best, metric, min_delta))
    lost = [n + here for n, here in zip(lost, lost_here)]
    same = (plain.stop, plain.stopped) == (passing.stop, passing.stopped)
    if differences and same and not any(lost_here):
      continue
    lines.append(f"| {arm} | {seed} | {last:,} | {run_best:.4f} | {_cell(plain)} | "
                 f"{_cell(passing)} |")
  lines += ["", f"{len(table)} runs; the rule loses {lost[0]} (its best falls short of the run's by "
            f"more than {min_delta:g}), with after_passing={after_passing:g} {lost[1]}."]
  return "\n".join(lines)


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--runs", required=True, help="a folder of <arm>/seed_<s>/<phase> runs")
  parser.add_argument("--phase", default="finetune")
  parser.add_argument("--metric", default="accuracy")
  parser.add_argument("--patience", type=int, required=True)
  parser.add_argument("--min_delta", type=float, default=0.0)
  parser.add_argument("--after_passing", type=float, required=True)
  parser.add_argument("--differences", action="store_true",
                      help="list only the runs where the two rules stop differently or either "
                           "loses the run's best")
  args = parser.parse_args()
  if args.patience <= 0:
    parser.error(f"--patience={args.patience} must be > 0")
  table = list(rows(os.path.expanduser(args.runs), args.phase, args.metric, args.patience,
                    args.min_delta, args.after_passing))
  if not table:
    parser.error(f"--runs={args.runs} has no <arm>/seed_<s>/{args.phase}/metrics.jsonl with "
                 f"validation {args.metric!r}")
  print(markdown(table, args.metric, args.min_delta, args.after_passing, args.differences))
  return 0


if __name__ == "__main__":
  sys.exit(main())
