import os
import subprocess
import sys

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


def _sweep_file(tmp_path, fields: str) -> str:
  path = tmp_path / "my_sweep.py"
  path.write_text("import ml_collections\n\n\ndef get_config(arg=None):\n"
                  f"  return ml_collections.ConfigDict(dict({fields}))\n")
  return str(path)


@pytest.mark.parametrize("fields, problem", [
    ("base='b.py', seeds=(0,), metrics=('m',), title='t'", "missing required field(s) 'runs'"),
    ("runs=('a:',), seeds=(0,), metrics=('m',)", "missing required field(s) 'base', 'title'"),
    ("base='b.py', runs=('a:',), seeds=(0,), metrics=(), title='t'",
     "'metrics' must be a non-empty list of str, got ()"),
    ("base='b.py', runs='a: x=1', seeds=(0,), metrics=('m',), title='t'",
     "'runs' must be a non-empty list of str, got 'a: x=1'"),
    ("base='b.py', run=('a:',), seeds=(0,), metrics=('m',), title='t'",
     "missing required field(s) 'runs'; unknown field(s) 'run'"),
])
def test_incomplete_sweep_config_is_one_line_naming_field_and_file(tmp_path, fields, problem):
  path = _sweep_file(tmp_path, fields)
  with pytest.raises(ValueError) as error:
    sweep.run_sweep(sweep.load_config(path), str(tmp_path / "w"), source=path)
  assert str(error.value) == f"{path}: {problem} (fields: see spt_jax/sweep.py)."
  with pytest.raises(ValueError, match=r"^the sweep config: "):
    sweep.run_sweep(sweep.load_config(path), str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


def test_sweep_cli_without_runs_names_the_field_and_the_file(tmp_path):
  path = _sweep_file(tmp_path, "base='b.py', seeds=(0,), metrics=('m',), title='t'")
  done = subprocess.run([sys.executable, "-m", "spt_jax.sweep", f"--config={path}",
                         f"--workdir={tmp_path / 'w'}"], capture_output=True, text=True,
                        timeout=120, cwd=sweep.ROOT)
  assert done.returncode != 0
  assert done.stderr.strip().splitlines()[-1] == (
      f"ValueError: {path}: missing required field(s) 'runs' (fields: see spt_jax/sweep.py).")
  assert not (tmp_path / "w").exists()
