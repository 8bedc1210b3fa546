"""What a composite phase writes beyond the common files: metrics.jsonl rows of split 'weights'
(each loss's weight and the weighting's per-loss statistics) and results.json's `grap` verdict."""
from __future__ import annotations

import json
import os

import jax
import numpy as np

from spt_jax.objectives.composite.losses import USELESS

PRECONDITION_MARGIN = 0.15
NOT_APPLICABLE = "GraP not applicable (probe reads nothing)"


def grap_report(losses, rows: list[dict], probe_accuracy: float | None, chance: float) -> dict:
  """results.json's `grap`: the precondition (the probe's validation accuracy against chance +
  PRECONDITION_MARGIN) and, when it holds, the weight verdict: each loss's normalised weight as the
  median over the last quarter of the 'weights' rows, relative to the largest; whether the useless
  losses (USELESS) are below 5% of it and every other loss keeps at least 30% (the
  redundancy test of docs/grap.md)."""
  steps = [r["step"] for r in rows]
  tail = [r for r in rows if r["step"] > 0.75 * max(steps)] if rows else []
  median = {n: float(np.median([r[n] for r in tail])) for n in losses} if tail else {}
  largest = max(median.values()) if median else 0.0
  relative = {n: v / largest for n, v in median.items()} if largest > 0 else {}
  useless = [n for n in losses if n in USELESS]
  useful = [n for n in losses if n not in USELESS]
  report = {"probe_val_accuracy": probe_accuracy, "chance": chance,
            "margin": PRECONDITION_MARGIN, "median_weight_last_quarter": median,
            "relative_weight": relative}
  if probe_accuracy is None:
    report.update(applicable=None, verdict="GraP precondition not measured (no latest checkpoint)")
    return report
  report["applicable"] = probe_accuracy >= chance + PRECONDITION_MARGIN
  if not report["applicable"]:
    report["verdict"] = (f"{NOT_APPLICABLE}: probe validation accuracy {probe_accuracy:.3f} < "
                         f"chance {chance:.3f} + {PRECONDITION_MARGIN:.2f}")
    return report
  report["useless_below_5pct"] = (all(relative[n] < 0.05 for n in useless) if useless and relative
                                  else None)
  report["useful_above_30pct"] = (all(relative[n] >= 0.3 for n in useful) if useful and relative
                                  else None)
  shares = ", ".join(f"{n} {relative[n]:.3f}" for n in losses) if relative else "no weight rows"
  report["verdict"] = (f"GraP weights (median of the last quarter, relative to the largest): "
                       f"{shares}; probe validation accuracy {probe_accuracy:.3f} (chance "
                       f"{chance:.3f})")
  return report


def weight_row(losses, info) -> dict[str, float]:
  """One metrics.jsonl row of split 'weights': `<loss>` = reported weight, `<key>_<loss>` others."""
  row = {}
  for key, vector in info.items():
    for name, value in zip(losses, np.asarray(vector).reshape(-1)):
      row[name if key == "weight" else f"{key}_{name}"] = float(value)
  return row


def read_weight_rows(phase_dir: str) -> list[dict]:
  path = os.path.join(phase_dir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [r for r in map(json.loads, filter(str.strip, f)) if r.get("split") == "weights"]


class WeightsReporter:
  """Keeps every `log_every`-th step's weighting info and writes it as 'weights' rows at each log."""

  def __init__(self, losses, log_every: int, steps: int, writer):
    self.losses, self.log_every, self.steps, self.writer = losses, log_every, steps, writer
    self.pending = []

  def after_step(self, step: int, info) -> None:
    if step % self.log_every == 0 or step == self.steps:
      self.pending.append((step, info))

  def on_log(self, step: int):
    rows = [(s, weight_row(self.losses, jax.device_get(i))) for s, i in self.pending]
    self.pending.clear()
    for s, row in rows:
      self.writer.write(s, "weights", row)
    return {"w": "/".join(f"{rows[-1][1][n]:.2f}" for n in self.losses)} if rows else None
