"""spt_jax.analysis.grap_runs: per-seed GraP tables and the alignment signal-to-noise."""
import json
import os

import numpy as np
import pytest

from spt_jax.analysis import grap_runs


def test_alignment_signal_separates_a_drift_from_noise():
  rng = np.random.default_rng(0)
  noise = rng.normal(0.0, 1e-3, 400)
  mean, t = grap_runs.alignment_signal(noise, 10)
  assert mean == pytest.approx(noise.mean())
  assert abs(t) < 3.0
  _, t_drift = grap_runs.alignment_signal(noise + 1e-3, 10)
  assert t_drift > 8.0
  # Standard error from block means: 4 blocks of 3 values, the tail that fills no block dropped.
  values = np.array([1, 1, 1, 2, 2, 2, 3, 3, 3, 6, 6, 6, 100.0])
  block_means = np.array([1.0, 2.0, 3.0, 6.0])
  expected = values.mean() / (block_means.std(ddof=1) / 2.0)
  assert grap_runs.alignment_signal(values, 3)[1] == pytest.approx(expected)
  assert np.isnan(grap_runs.alignment_signal(values[:5], 3)[1])


def _fake_phase(root, arm, seed, weighting="grap", random_weight=0.01):
  phase = os.path.join(root, arm, f"seed_{seed}", "pretrain")
  os.makedirs(phase)
  losses = ["mlm", "random"]
  grap_entry = {"probe_val_accuracy": 0.8, "chance": 0.5, "applicable": True,
                "relative_weight": {"mlm": 1.0, "random": random_weight},
                "useless_below_5pct": random_weight < 0.05, "useful_above_30pct": True}
  with open(os.path.join(phase, "results.json"), "w") as f:
    json.dump({"weighting": weighting, "losses": losses,
               **({"grap": grap_entry} if weighting == "grap" else {})}, f)
  with open(os.path.join(phase, "metrics.jsonl"), "w") as f:
    for step in range(10, 410, 10):
      f.write(json.dumps({"step": step, "split": "train", "loss": 1.0}) + "\n")
      f.write(json.dumps({"step": step, "split": "weights", "mlm": 0.9, "random": random_weight,
                          "align_mlm": 1e-3 + 1e-4 * np.sin(step), "align_random": 0.0}) + "\n")


def test_tables_and_figure_from_a_sweep(tmp_path):
  sweep = str(tmp_path / "sweep")
  _fake_phase(sweep, "arm_a", 0)
  _fake_phase(sweep, "arm_a", 1, random_weight=0.2)
  _fake_phase(sweep, "arm_b", 0)
  _fake_phase(sweep, "raw_sum", 0, weighting="raw_sum")  # not GraP: left out
  out = str(tmp_path / "out")
  table = grap_runs.write(sweep, [], out, block=5)
  assert table in open(os.path.join(out, "grap_weights.md")).read()
  assert "| arm_a | 1 | 80.0% (50%) | yes | 1.000 | 0.200 | no | yes |" in table
  assert "- arm_a: 1/2, 2/2, 2/2" in table
  assert "raw_sum" not in table
  summary = json.load(open(os.path.join(out, "grap_weights.json")))
  assert set(summary) == {"arm_a", "arm_b"}
  assert summary["arm_a"]["0"]["align_t"]["mlm"] > 10
  assert os.path.getsize(os.path.join(out, "grap_weights.png")) > 10_000


def test_a_missing_arm_is_named(tmp_path):
  sweep = str(tmp_path / "sweep")
  _fake_phase(sweep, "arm_a", 0)
  with pytest.raises(FileNotFoundError, match="arm_z"):
    grap_runs.find_runs(sweep, ["arm_a", "arm_z"])


def test_importable_next_to_the_attention_cli():
  """Flags are defined only when run as a program: importing it beside spt_jax.analysis.__main__
  (which has --out too) must not clash."""
  import importlib
  importlib.import_module("spt_jax.analysis.__main__")
  importlib.reload(grap_runs)
