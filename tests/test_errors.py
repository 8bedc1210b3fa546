"""Bad input gets an error that names the culprit, and nothing on disk is overwritten."""
import os
import shutil

import pytest

from conftest import load_config, run_main, tiny, tiny_flags
from spt_jax import experiment
from spt_jax.data import listops


def _snapshot(directory):
  return {os.path.join(d, f): os.path.getmtime(os.path.join(d, f))
          for d, _, files in os.walk(directory) for f in files}


def test_unknown_config_key_is_rejected(tmp_path, cache_dir):
  workdir = tmp_path / "w"
  out = run_main(["--config=configs/listops_spt.py", f"--workdir={workdir}",
                  *tiny_flags(cache_dir), "--config.model.d_modle=8"])
  assert out.returncode != 0 and "d_modle" in out.stderr
  assert not workdir.exists()
  config = load_config("listops_spt")
  with pytest.raises(AttributeError, match="d_modle"):
    config.model.d_modle  # noqa: B018
  with pytest.raises(ValueError, match="Unknown variant 'smok'"):
    load_config("listops_spt", "smok")


def test_bad_config_value_names_the_key(tmp_path, tiny_spt):
  tiny_spt.model.position = "rotary"
  with pytest.raises(ValueError, match=r"config.model.position='rotary' must be one of"):
    experiment.run(tiny_spt, str(tmp_path / "w"))
  tiny_spt.model.position = "sinusoidal"
  tiny_spt.pretrain.batch_size = 0
  with pytest.raises(ValueError, match=r"config.pretrain.batch_size=0 must be > 0"):
    experiment.run(tiny_spt, str(tmp_path / "w"))


def test_missing_data_with_generation_disabled(tmp_path, tiny_spt):
  tiny_spt.data.data_dir = str(tmp_path / "lra_release")
  tiny_spt.data.generate = False
  with pytest.raises(FileNotFoundError, match=r"lra_release/listops-1000/basic_train.tsv"):
    experiment.run(tiny_spt, str(tmp_path / "w"))


def test_malformed_tsv_row_names_file_and_line(tmp_path, tiny_spt, spt_run):
  source = spt_run[2]["pretrain"]["data_source"]
  data_dir = tmp_path / "data"
  shutil.copytree(source, data_dir)
  path = listops.split_path(str(data_dir), "train")
  lines = open(path).read().splitlines()
  lines[4] = lines[4].replace("\t", " ")  # line 5 of the file: the two fields run together
  open(path, "w").write("\n".join(lines) + "\n")
  tiny_spt.data.data_dir = str(data_dir)
  with pytest.raises(ValueError, match=r"basic_train.tsv:5: "):
    experiment.run(tiny_spt, str(tmp_path / "w"))


def test_workdir_with_another_model_is_refused_untouched(tmp_path, cache_dir, spt_run):
  workdir = str(tmp_path / "w")
  shutil.copytree(spt_run[0], workdir)
  before = _snapshot(workdir)
  config = tiny(load_config("listops_spt"), cache_dir)
  config.model.d_model = 32
  with pytest.raises(ValueError, match=r"model.d_model: 16 in the workdir, 32 now"):
    experiment.run(config, workdir)
  # Without the recorded config (e.g. a workdir from elsewhere), the checkpoint's shapes still guard it.
  os.remove(os.path.join(workdir, "pretrain", "results.json"))
  os.remove(os.path.join(workdir, "pretrain", "config.json"))
  os.remove(os.path.join(workdir, "finetune", "config.json"))
  before = _snapshot(workdir)
  with pytest.raises(ValueError, match=r"encoder/final_norm/bias: the configured model has \(32,\) "
                                       r"float32, checkpoint .* has \(16,\) float32"):
    experiment.run(config, workdir)
  assert _snapshot(workdir) == before


def test_non_finite_loss_stops_the_run(tmp_path, tiny_spt):
  tiny_spt.phases = "pretrain"
  tiny_spt.pretrain.update(learning_rate=1e30, warmup_steps=0)
  with pytest.raises(FloatingPointError, match=r"\[pretrain\] non-finite training loss .* step"):
    experiment.run(tiny_spt, str(tmp_path / "w"))
