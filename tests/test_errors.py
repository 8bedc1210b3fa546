"""Bad input gets an error that names the culprit, and nothing on disk is overwritten."""
import json
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
  with pytest.raises(ValueError,
                     match=r"Unknown variant\(s\) \['smok'\] for configs/listops_spt.py"):
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


@pytest.mark.parametrize("key, value, match", [
    ("pretrain.learning_rate", float("nan"), r"config.pretrain.learning_rate=nan must be a finite"),
    ("finetune.weight_decay", float("inf"), r"config.finetune.weight_decay=inf must be a finite"),
    ("finetune.freeze", 3, r"config.finetune.freeze=3 must be a preset name, a regex, or a tuple"),
    ("finetune.init_from.include", ("qk", 7), r"config.finetune.init_from.include=\('qk', 7\)"),
    ("finetune.init_from.checkpoint", "bogus", r"config.finetune.init_from.checkpoint='bogus' must"),
])
def test_bad_values_are_refused_before_anything_is_written(tmp_path, tiny_spt, key, value, match):
  section, _, field = key.rpartition(".")
  target = tiny_spt
  for part in section.split("."):
    target = target[part]
  with target.ignore_type():
    target[field] = value
  with pytest.raises(ValueError, match=match):
    experiment.run(tiny_spt, str(tmp_path / "w"))
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize("key, value, match", [
    ("finetune.freeze", ("encoder/layer_0/attention/nope/.*",), r"config.finetune.freeze"),
    ("finetune.init_from.include", ("encoder/nope/.*",), r"init_from .* include"),
    ("finetune.init_from.exclude", ("nope/.*",), r"init_from .* exclude"),
    ("finetune.init_from.source", "/no/such/checkpoint",
     r"config.finetune.init_from.source='/no/such/checkpoint' is neither a phase"),
    ("finetune.init_from.rescale_paths", ("nope",), r"config.finetune.init_from.rescale_paths"),
])
def test_a_later_phase_pattern_error_comes_before_any_training(tmp_path, tiny_spt, key, value, match):
  section, _, field = key.rpartition(".")
  target = tiny_spt
  for part in section.split("."):
    target = target[part]
  target[field] = value
  if field == "rescale_paths":
    tiny_spt.finetune.init_from.rescale = 0.5
  workdir = tmp_path / "w"
  with pytest.raises((ValueError, FileNotFoundError), match=match):
    experiment.run(tiny_spt, str(workdir))
  assert not (workdir / "pretrain").exists(), "pretraining ran before the error"


def test_unusable_workdir_is_one_error_naming_it(tmp_path, tiny_spt):
  as_file = tmp_path / "a_file"
  as_file.write_text("mine")
  with pytest.raises(NotADirectoryError, match=rf"--workdir={as_file} is a file"):
    experiment.run(tiny_spt, str(as_file))
  assert as_file.read_text() == "mine"
  read_only = tmp_path / "read_only"
  read_only.mkdir()
  read_only.chmod(0o500)
  try:
    # Root writes through permission bits; /proc refuses everyone.
    unwritable = read_only / "w" if not os.access(read_only, os.W_OK) else "/proc/spt_jax_w"
    with pytest.raises(PermissionError, match=rf"--workdir={unwritable} cannot be written: "):
      experiment.run(tiny_spt, str(unwritable))
  finally:
    read_only.chmod(0o700)


def test_unusable_workdir_through_main_is_one_line(tmp_path, cache_dir):
  as_file = tmp_path / "a_file"
  as_file.write_text("mine")
  out = run_main(["--config=configs/listops_spt.py", f"--workdir={as_file}", "--cpu_devices=1",
                  *tiny_flags(cache_dir)])
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-2] == f"error: --workdir={as_file} is a file, not a directory."
  assert "Traceback" not in out.stderr


@pytest.mark.parametrize("flag, message", [
    ("--cpu_threads=-2", "error: --cpu_threads=-2: must be a positive number of threads"),
    ("--cores=4096", "error: --cores='4096': core(s) [4096] are not among the cores"),
])
def test_bad_placement_flags_are_one_line_before_anything_is_written(tmp_path, flag, message):
  workdir = tmp_path / "w"
  out = run_main(["--config=configs/listops_spt.py:smoke", f"--workdir={workdir}",
                  "--cpu_processes=1", flag])
  assert out.returncode == 1 and out.stderr.strip().startswith(message), out.stderr[-2000:]
  assert "Traceback" not in out.stderr and not workdir.exists()


def test_a_workdir_refuses_other_data(tmp_path, cache_dir, spt_run):
  workdir = str(tmp_path / "w")
  shutil.copytree(spt_run[0], workdir)
  for name in ("results.json", "pretrain/results.json", "finetune/results.json"):
    os.remove(os.path.join(workdir, name))
  before = _snapshot(workdir)
  config = tiny(load_config("listops_spt"), cache_dir)
  # Same config, other labels: a copy of the data with one label changed, named by data_dir.
  data_dir = tmp_path / "data"
  shutil.copytree(spt_run[2]["pretrain"]["data_source"], data_dir)
  path = listops.split_path(str(data_dir), "train")
  lines = open(path).read().splitlines()
  source, label = lines[1].split("\t")
  lines[1] = f"{source}\t{(int(label) + 1) % 10}"
  open(path, "w").write("\n".join(lines) + "\n")
  config.data.data_dir = str(data_dir)
  with pytest.raises(ValueError, match=r"was run on other data than phase 'pretrain' has now"):
    experiment.run(config, workdir)
  assert _snapshot(workdir) == before


def test_an_empty_split_is_refused_naming_it(tmp_path, tiny_spt):
  tiny_spt.data.generator.num_val = 0
  with pytest.raises(ValueError, match=r"The val split of listops data \(.*\) has no examples"):
    experiment.run(tiny_spt, str(tmp_path / "w"))


def test_a_workdir_from_before_a_new_field_still_matches(tmp_path, cache_dir, spt_run):
  """`model.remat` came later: a workdir recorded without it is the config with remat='none'."""
  workdir = str(tmp_path / "w")
  shutil.copytree(spt_run[0], workdir)
  for phase in ("pretrain", "finetune"):
    path = os.path.join(workdir, phase, "config.json")
    saved = json.load(open(path))
    del saved["model"]["remat"]
    json.dump(saved, open(path, "w"))
  config = tiny(load_config("listops_spt"), cache_dir)
  assert experiment.run(config, workdir)["finetune"] == spt_run[2]["finetune"]
  config.model.remat = "layer"
  with pytest.raises(ValueError, match=r"model.remat: 'none' in the workdir, 'layer' now"):
    experiment.run(config, workdir)
