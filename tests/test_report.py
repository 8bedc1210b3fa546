"""The report per run (spt_jax/analysis/report.py): written after every phase, drawn from
metrics.jsonl alone (so killed, resumed and copied runs report too), and a sweep's arms overlaid
with their spread over seeds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from PIL import Image
import pytest

from conftest import ROOT
from spt_jax import sweep
from spt_jax.analysis import plots, report


def _png_size(path) -> tuple[int, int]:
  with Image.open(path) as image:
    assert image.format == "PNG"
    return image.size


def test_every_phase_of_a_smoke_run_ends_with_its_report(spt_run):
  workdir, _, results = spt_run
  for phase in ("pretrain", "finetune"):
    directory = os.path.join(workdir, phase)
    width, height = _png_size(os.path.join(directory, report.FIGURE))
    assert width > 800 and height > 300
    # What the report marks as best is what the trainer selected, and its test record is the one
    # results.json holds.
    drawn = report.read_phase(directory)
    assert drawn.best_from_test and drawn.best_step == results[phase]["best_val"]["step"]
    assert drawn.metric == results[phase]["selection_metric"]
    assert drawn.test["accuracy"] == pytest.approx(results[phase]["test_of_best"]["accuracy"])
    text = open(os.path.join(directory, report.SUMMARY)).read()
    step = results[phase]["best_val"]["step"]
    assert f"| test of best | {step} | " in text and f"| best validation | {step} | " in text
    assert f"{results[phase]['test_of_best']['loss']:.4g}" in text
    assert "masked-token accuracy" in text if phase == "pretrain" else "masked" not in text
  run_summary = open(os.path.join(workdir, report.SUMMARY)).read()
  assert run_summary.index("/ pretrain") < run_summary.index("/ finetune")
  assert "(pretrain/report.png)" in run_summary and "(finetune/report.png)" in run_summary


def test_a_killed_copy_of_metrics_alone_reports_its_best_so_far(spt_run, tmp_path):
  workdir, _, _ = spt_run
  records = [json.loads(line) for line in open(os.path.join(workdir, "finetune", report.METRICS))]
  copy = tmp_path / "elsewhere" / "finetune"
  copy.mkdir(parents=True)
  kept = [r for r in records if r["split"] != "test"]  # Killed before the test record...
  val = {r["step"]: r["accuracy"] for r in kept if r["split"] == "val"}
  (copy / report.METRICS).write_text("".join(json.dumps(r) + "\n" for r in kept)
                                     + '{"step": 7, "split": "tr')  # ...and mid-write.
  done = subprocess.run([sys.executable, "-m", "spt_jax.report", str(tmp_path / "elsewhere")],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
  assert done.returncode == 0, done.stderr
  assert f"wrote {copy / report.FIGURE}" in done.stdout
  best = max(val, key=lambda s: (val[s], -s))  # The first of equal highest values.
  text = (copy / report.SUMMARY).read_text()
  assert f"No test record: stopped or still running at step {max(val)}" in text
  assert f"| best validation so far | {best} | " in text and "test of best" not in text
  _png_size(copy / report.FIGURE)
  # A line damaged before the last is an error naming it; nothing is drawn from it.
  lines = (copy / report.METRICS).read_text().splitlines(keepends=True)
  (copy / report.METRICS).write_text(lines[0] + "{oops\n" + "".join(lines[1:]))
  assert report.main([str(copy)]) == 1
  with pytest.raises(ValueError, match=f"{copy / report.METRICS}:2: not a JSON record"):
    report.read_phase(str(copy))


def test_what_is_selected_follows_the_records(tmp_path):
  def phase(val, train_extra=None):
    records = [{"step": 1, "split": "train", "loss": 1.0, **(train_extra or {})}]
    records += [{"step": s, "split": "val", **m} for s, m in val]
    return records

  ties = phase([(10, {"accuracy": 0.5, "loss": 2}), (20, {"accuracy": 0.7, "loss": 1}),
                (30, {"accuracy": 0.7, "loss": 0.5})])
  assert report.selection_metric(ties) == "accuracy"
  (tmp_path / report.METRICS).write_text("".join(json.dumps(r) + "\n" for r in ties))
  drawn = report.read_phase(str(tmp_path))  # No test record: the first of the highest values.
  assert (drawn.best_step, drawn.best_from_test, drawn.last_step) == (20, False, 30)
  assert report.selection_metric(phase([(5, {"r2": 0.1, "loss": 1})])) == "r2"
  assert report.selection_metric(phase([(5, {"span_accuracy": 0.2, "mlm_accuracy": 0.1})])) == (
      "mlm_accuracy")
  assert report.selection_metric(phase([(5, {"loss": 1.0})])) == "loss"


def _fake_run(run_dir, phases, seed):
  """A finished run's files as the trainer writes them: metrics.jsonl per phase, results.json."""
  results = {}
  for phase, offset in phases:
    os.makedirs(os.path.join(run_dir, phase))
    lines = []
    for step in range(5, 31, 5):
      loss = 2.0 - step / 20 + offset + 0.1 * seed
      lines.append({"step": step, "split": "train", "loss": loss, "accuracy": 0.3})
      if step % 10 == 0:
        lines.append({"step": step, "split": "val", "loss": loss + 0.2,
                      "accuracy": 0.2 + step / 100 - offset + 0.05 * seed})
    lines.append({"step": 30, "split": "test", "loss": 1.0, "accuracy": 0.5 + 0.05 * seed})
    with open(os.path.join(run_dir, phase, "metrics.jsonl"), "w") as f:
      f.writelines(json.dumps(r) + "\n" for r in lines)
    results[phase] = {"test_of_best": {"accuracy": 0.5 + 0.05 * seed}}
  with open(os.path.join(run_dir, "results.json"), "w") as f:
    json.dump(results, f)


def test_a_sweep_overlays_its_arms_with_their_seed_spread(tmp_path):
  seeds = (0, 1, 2)
  config = sweep.config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=seeds, title="overlay",
      runs=["spt: ", "scratch: phases=finetune"], metrics=["finetune.test_of_best.accuracy"])
  for seed in seeds:  # Finished runs: the sweep only summarises and draws.
    _fake_run(str(tmp_path / "spt" / f"seed_{seed}"), [("pretrain", 0.5), ("finetune", 0.0)], seed)
    _fake_run(str(tmp_path / "scratch" / f"seed_{seed}"), [("finetune", 0.3)], seed)
  sweep.run_sweep(config, str(tmp_path))
  # The table says which standard deviation its ± is (docs quote sample std elsewhere).
  assert "mean ± std over the seeds (numpy's default std, ddof 0)" in (
      tmp_path / "table.md").read_text()
  _png_size(tmp_path / "plot.png")
  width, height = _png_size(tmp_path / report.SWEEP_FIGURE)
  assert width > 1000 and height > 500  # Two rows of phases.
  fig = report.sweep_figure(str(tmp_path), ["spt", "scratch"], seeds, "overlay")
  axes = np.array(fig.axes).reshape(2, 3)
  assert [ax.get_title() for ax in axes[1]] == [
      "finetune: training loss", "finetune: validation loss", "finetune: validation accuracy"]
  ax = axes[1][2]
  (spt, scratch) = ax.get_lines()
  assert spt.get_label() == "spt (3 seeds)" and scratch.get_label() == "scratch (3 seeds)"
  np.testing.assert_allclose(spt.get_xdata(), [10, 20, 30])
  np.testing.assert_allclose(spt.get_ydata(), [0.35, 0.45, 0.55])  # Mean over the 3 seeds.
  assert len(ax.collections) == 2
  for band in ax.collections:  # ± std over seeds: 0.05 * std(0, 1, 2) either side of the mean.
    vertices = band.get_paths()[0].vertices
    at_20 = vertices[np.isclose(vertices[:, 0], 20), 1]
    assert at_20.max() - at_20.min() == pytest.approx(2 * 0.05 * np.std(seeds))
  assert [line.get_label() for line in axes[0][0].get_lines()] == ["spt (3 seeds)"]  # pretrain
  # One legend, for the figure, naming every arm once; none inside a panel.
  assert [text.get_text() for legend in fig.legends for text in legend.get_texts()] == [
      "spt (3 seeds)", "scratch (3 seeds)"]
  assert all(ax.get_legend() is None for ax in fig.axes)
  plots.plt.close(fig)


def test_arms_past_the_colour_cycle_differ_by_line_style(tmp_path):
  names = [f"arm{i}" for i in range(12)]
  for name in names:
    _fake_run(str(tmp_path / name / "seed_0"), [("finetune", 0.0)], 0)
  fig = report.sweep_figure(str(tmp_path), names, (0,), "many arms")
  lines = fig.axes[2].get_lines()
  seen = {(line.get_color(), line.get_linestyle()) for line in lines}
  assert len(lines) == len(seen) == 12  # no two arms look alike
  assert lines[0].get_color() == lines[10].get_color() and lines[10].get_linestyle() == "--"
  plots.plt.close(fig)


def test_step_ticks_stay_apart_on_long_runs():
  """A 30,000-step axis gets a handful of short labels ('12k'), not five-digit numbers that
  run into each other."""
  assert [report.step_label(s) for s in (0, 250, 750, 1500, 12_000, 30_141)] == [
      "0", "250", "750", "1.5k", "12k", "30.141k"]
  fig, ax = plots.plt.subplots(figsize=(4.5, 3))
  ax.plot([0, 30_141], [0, 1])
  report._axes_finish(ax, "loss")
  fig.canvas.draw()
  low, high = ax.get_xlim()
  labels = [t.get_text() for t in ax.get_xticklabels() if low <= t.get_position()[0] <= high]
  assert 3 <= len(labels) <= 8 and all(len(text) <= 4 for text in labels), labels
  plots.plt.close(fig)
