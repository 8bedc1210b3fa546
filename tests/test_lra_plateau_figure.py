"""scripts/lra_plateau_figure.py: the plateau study's summary figure covers every stage's arms, in
the study's stage order, coloured by what their fine-tuning starts from."""
import json

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
