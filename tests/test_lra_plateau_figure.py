"""scripts/lra_plateau_figure.py: the plateau study's summary figure covers every stage's arms, in
the study's stage order, coloured by what their fine-tuning starts from; scripts/lra_plateau_table.py:
a stage's per-seed table from the runs' results and validation curves."""
import json

import pytest
from PIL import Image
from conftest import load_script

from spt_jax import config_lib


def _finish(workdir, task, arm, seed, accuracy):
  run = workdir / task / arm / f"seed_{seed}"
  run.mkdir(parents=True)
  results = {"finetune": {"test_of_best": {"accuracy": accuracy}}}
  (run / "results.json").write_text(json.dumps(results))


def test_every_stage_of_the_study_has_its_arms_in_stage_order():
  script = load_script("lra_plateau_figure")
  study = config_lib.load_module(script.STUDY)
  for task in ("pathfinder", "listops"):
    stages = script.stage_arms(task)
    assert tuple(stages) == study.stage_names(task)
    names = script.arms(task)
    assert len(names) == len(set(names))  # an arm two stages share is listed once, first stage
    assert names[:2] == ["spt", "scratch"]
  assert "lr" in script.stage_arms("pathfinder") and "lr" not in script.stage_arms("listops")
  kinds = dict(kv for names in script.stage_arms("pathfinder").values() for kv in names)
  assert kinds["spt"] == kinds["spt_frozen_attention"] == kinds["spt_lr1e-3"] == "spt"
  assert kinds["qk"] == kinds["qkvo_to_cap"] == "partial"
  assert kinds["scratch_frozen_attention"] == kinds["scratch_lr1e-4"] == "scratch"
  assert kinds["scratch_matched"] == kinds["scratch_rope2d_matched"] == "scratch"


def test_figure_draws_the_finished_arms_of_every_stage(tmp_path):
  script = load_script("lra_plateau_figure")
  for seed, acc in enumerate((0.78, 0.79, 0.77)):
    _finish(tmp_path, "pathfinder", "spt", seed, acc)
  _finish(tmp_path, "pathfinder", "scratch_lr1e-3", 0, 0.7)  # stage lr, the study's last
  _finish(tmp_path, "pathfinder", "qk", 1, 0.73)  # stage d
  _finish(tmp_path, "pathfinder", "not_an_arm", 0, 0.9)  # no stage lists it: left out
  (tmp_path / "pathfinder" / "scratch" / "seed_0").mkdir(parents=True)  # not finished: left out
  _finish(tmp_path, "listops", "scratch", 0, 0.36)
  out = tmp_path / "figure" / "summary.png"
  data = script.draw(str(tmp_path), str(out))
  assert list(data["pathfinder"]) == ["spt", "qk", "scratch_lr1e-3"]
  assert data["pathfinder"]["spt"] == [0.78, 0.79, 0.77]
  assert data["listops"] == {"scratch": [0.36]}
  width, height = Image.open(out).size
  assert width > 600 and height > 2 * 300  # one row per task


def _finish_run(workdir, arm, seed, test, stop, reason, best_val, curve, flops=(2e13, 3e13)):
  run = workdir / "pathfinder" / arm / f"seed_{seed}"
  (run / "finetune").mkdir(parents=True)
  results = {"finetune": {"test_of_best": {"accuracy": test}, "stopped_at_step": stop,
                          "stop_reason": reason, "best_val": {"accuracy": best_val},
                          "train_flops": flops[1]},
             "pretrain": {"train_flops": flops[0]}}
  (run / "results.json").write_text(json.dumps(results))
  records = [{"split": "val", "step": 250 * (i + 1), "accuracy": a} for i, a in enumerate(curve)]
  (run / "finetune" / "metrics.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")


def test_stage_table_gives_each_seed_its_stop_and_first_step_past_the_threshold(tmp_path):
  script = load_script("lra_plateau_table")
  assert script.stage_arms("pathfinder", "lr")[:2] == ["spt", "scratch"]
  _finish_run(tmp_path, "spt", 0, 0.80, 10_000, "cap", 0.81, [0.5, 0.61, 0.7])
  _finish_run(tmp_path, "spt", 2, 0.78, 8_750, "plateau: …", 0.79, [0.5, 0.5, 0.65])
  _finish_run(tmp_path, "scratch", 1, 0.503, 3_500, "plateau: …", 0.52, [0.5, 0.52])
  text = script.markdown(str(tmp_path), "pathfinder", "lr", [0, 1, 2])
  assert ("| `spt` | 80.0, —, 78.0 | 79.0 ± 1.4% | 10,000 cap, —, 8,750 plateau | 500, —, 750 "
          "| 50.0 |") in text
  assert ("| `scratch` | —, 50.3, — | 50.3% (1 seed) | —, 3,500 plateau at chance, — | —, never, — "
          "| 50.0 |") in text
  assert "spt_lr1e-4" not in text  # no finished seed: no row
  _finish_run(tmp_path, "scratch", 0, 0.75, 10_000, "cap", 0.76, [0.5, 0.6])
  _finish_run(tmp_path, "scratch", 2, 0.70, 10_000, "cap", 0.71, [0.5, 0.6])
  assert script.difference(str(tmp_path), "pathfinder", "spt", "scratch", [0, 1, 2]) == (
      "spt − scratch: +5.0, +8.0 (seeds 0, 2) → +6.5 ± 2.1 points")  # seed 1: SPT unfinished
  assert "no seed" in script.difference(str(tmp_path), "pathfinder", "spt", "qk", [0, 1, 2])
  with pytest.raises(ValueError, match="stages are"):
    script.stage_arms("listops", "lr")


def test_stage_table_final_row_takes_the_run_to_the_cap_where_the_rule_stopped_at_chance(tmp_path):
  script = load_script("lra_plateau_table")
  _finish_run(tmp_path, "qkvo", 0, 0.72, 10_000, "cap", 0.73, [0.5, 0.6])
  _finish_run(tmp_path, "qkvo", 1, 0.503, 3_500, "plateau: …", 0.52, [0.5, 0.52])
  _finish_run(tmp_path, "qkvo", 2, 0.505, 3_500, "plateau: …", 0.52, [0.5, 0.52])
  _finish_run(tmp_path, "qkvo_to_cap", 1, 0.70, 10_000, "cap", 0.71, [0.5, 0.52, 0.61])
  text = script.markdown(str(tmp_path), "pathfinder", "d", [0, 1, 2])
  # Seed 1 from its run to the cap; seed 2's has not finished, so the rule's run stands.
  assert ("| `qkvo`, final | 72.0, 70.0†, 50.5 | 64.2 ± 11.9% | 10,000 cap, 10,000 cap, 3,500 "
          "plateau at chance | 500, 750, never | 50.0 |") in text
  assert "`qk`, final" not in text  # no run to the cap in the stage
  _finish_run(tmp_path, "scratch", 1, 0.72, 10_000, "cap", 0.73, [0.5, 0.6])
  assert script.difference(str(tmp_path), "pathfinder", "qkvo:final", "scratch", [0, 1, 2]) == (
      "qkvo:final − scratch: −2.0 (seeds 1) → −2.0 points")
