import os

import pytest

from spt_jax import config_lib, sweep

TINY = ("pretrain.num_steps=4 finetune.num_steps=4 pretrain.eval_every_steps=2 "
        "finetune.eval_every_steps=2 data.synthetic.num_train=64 data.synthetic.num_val=16 "
        "data.synthetic.num_test=16 pretrain.batch_size=8 finetune.batch_size=8")


def _sweep():
  return config_lib.sweep_config(
      base="configs/synthetic_spt.py:smoke", seeds=(0,), title="tiny",
      runs=[f"spt: {TINY}", f"scratch: {TINY} phases=finetune finetune.init_from.source="],
      steps_to=0.5)


def test_sweep_writes_table_and_plot_and_skips_finished_runs(tmp_path):
  rows = sweep.run_sweep(_sweep(), str(tmp_path))
  assert [r["run"] for r in rows] == ["spt", "scratch"]
  for name in ("table.md", "table.csv", "plot.png", "results.json"):
    assert os.path.getsize(tmp_path / name) > 0
  table = open(tmp_path / "table.md").read()
  assert "| spt |" in table and "finetune.test_of_best.accuracy" in table
  assert not os.path.exists(tmp_path / "scratch/seed_0/pretrain")
  stamps = {d: os.path.getmtime(tmp_path / d / "seed_0/results.json") for d in ("spt", "scratch")}
  assert sweep.run_sweep(_sweep(), str(tmp_path)) == rows
  assert stamps == {d: os.path.getmtime(tmp_path / d / "seed_0/results.json") for d in stamps}


def test_bad_run_specs_are_refused():
  with pytest.raises(ValueError, match="must look like 'name: key=value"):
    sweep.parse_run("no colon here")
  with pytest.raises(ValueError, match="is not key=value"):
    sweep.parse_run("x: model.num_layers")
  config = sweep.load_config("configs/synthetic_spt.py")
  with pytest.raises(KeyError, match="no field 'model.num_layerz'"):
    sweep.apply_overrides(config, {"model.num_layerz": 2})
  assert sweep.parse_run("a: b.c=2 d=x e=") == ("a", {"b.c": 2, "d": "x", "e": ""})
