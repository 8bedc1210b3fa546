"""A damaged checkpoint is detected, reported with its path, never trained on; an intact earlier one
is used instead, and when there is none the run stops with one short error."""
import glob
import json
import logging
import os
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import load_config, run_main, tiny, tiny_flags
from spt_jax import checkpoints, experiment, optim, tree

PHASE = "pretrain"


def _data_files(item_dir):
  """Every OCDBT data file of an item: the arrays' bytes sit in the per-process files or, once
  Orbax has merged them, in the item's own `d/` (which one varies from save to save)."""
  return sorted(glob.glob(os.path.join(item_dir, "**", "d", "*"), recursive=True))


def _truncate(step_dir):
  for path in _data_files(os.path.join(step_dir, "params")):
    with open(path, "r+b") as f:
      f.truncate(os.path.getsize(path) // 2)


def _flip_bit(step_dir):
  for path in _data_files(os.path.join(step_dir, "params")):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x10
    open(path, "wb").write(bytes(data))


def _random_bytes(step_dir):
  for path in _data_files(os.path.join(step_dir, "params")):
    data = bytearray(open(path, "rb").read())
    start = len(data) // 3
    count = min(64, len(data) - start)
    data[start:start + count] = np.random.default_rng(0).bytes(count)
    open(path, "wb").write(bytes(data))


def _silently_rewritten(step_dir):
  """Valid Orbax data with one value changed: only the checksums can tell."""
  item = os.path.abspath(os.path.join(step_dir, "params"))
  params = ocp.StandardCheckpointer().restore(item)
  params["encoder"]["final_norm"]["bias"] = params["encoder"]["final_norm"]["bias"] + 1e-3
  shutil.rmtree(item)
  with ocp.StandardCheckpointer() as ckptr:
    ckptr.save(item, params)


def _garbage_meta(step_dir):
  (path,) = [p for p in glob.glob(os.path.join(step_dir, "meta", "*")) if os.path.isfile(p)
             and not p.endswith("commit_success.txt")]
  open(path, "wb").write(np.random.default_rng(1).bytes(64))


def _meta_without_key(step_dir):
  (path,) = [p for p in glob.glob(os.path.join(step_dir, "meta", "*")) if os.path.isfile(p)
             and not p.endswith("commit_success.txt")]
  meta = json.load(open(path))
  del meta["best_value"]
  json.dump(meta, open(path, "w"))


DAMAGES = {
    "truncated data files": (_truncate, "unreadable|not a readable"),
    "manifest.ocdbt deleted": (lambda d: os.remove(os.path.join(d, "params", "manifest.ocdbt")),
                               "unreadable|not a readable Orbax checkpoint item"),
    "_METADATA deleted": (lambda d: os.remove(os.path.join(d, "params", "_METADATA")), "params"),
    "garbage meta": (_garbage_meta, "meta is damaged: unreadable"),
    "meta lacking a key": (_meta_without_key, "lacks ['best_value']"),
    "one flipped bit": (_flip_bit, "checksum mismatch|unreadable|not a readable"),
    "64 random bytes": (_random_bytes, "checksum mismatch|unreadable|not a readable"),
    "params silently rewritten": (_silently_rewritten, "checksum mismatch in 1 array(s), e.g. "
                                                       "encoder/final_norm/bias"),
    "checksums deleted": (lambda d: shutil.rmtree(os.path.join(d, "checksums")), "no checksums"),
}


@pytest.fixture
def phase_copy(tmp_path, spt_run):
  """A copy of a finished tiny run's pretraining checkpoints (latest steps 3 and 6)."""
  directory = str(tmp_path / "checkpoints")
  shutil.copytree(os.path.join(spt_run[0], PHASE, "checkpoints"), directory)
  assert sorted(os.listdir(os.path.join(directory, "latest"))) == ["3", "6"]
  return directory


def _targets(config, directory):
  params = checkpoints.item_abstract(os.path.join(directory, "latest", "3", "params"))
  tx, _ = optim.make_optimizer(config[PHASE], 6, params)
  return params, jax.eval_shape(tx.init, params)


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_damaged_latest_falls_back_to_the_previous_one_with_a_warning(damage, phase_copy, spt_run,
                                                                      caplog):
  damage_fn, reason = DAMAGES[damage]
  damage_fn(os.path.join(phase_copy, "latest", "6"))
  ckpts = checkpoints.PhaseCheckpoints(phase_copy)
  with caplog.at_level(logging.WARNING):
    step, params, _, meta = ckpts.restore_latest(*_targets(spt_run[1], phase_copy))
  ckpts.close()
  assert step == 3 and meta["step"] == 3
  warning = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
  assert os.path.join(phase_copy, "latest", "6") in warning and "damaged" in warning
  assert any(part in warning for part in reason.split("|")), warning
  # Moved aside, kept for inspection, and out of the way of the resumed run's own step 6.
  assert os.listdir(os.path.join(phase_copy, "latest")) == ["3"]
  assert os.listdir(os.path.join(phase_copy, "damaged")) == ["latest_6"]
  expected = tree.flatten(checkpoints.restore_item(os.path.join(phase_copy, "latest/3/params")))
  for path, value in tree.flatten(params).items():
    assert np.array_equal(np.asarray(value), expected[path]), path


def test_every_latest_damaged_is_one_short_error_naming_each(phase_copy, spt_run):
  _flip_bit(os.path.join(phase_copy, "latest", "6"))
  _garbage_meta(os.path.join(phase_copy, "latest", "3"))
  ckpts = checkpoints.PhaseCheckpoints(phase_copy)
  with pytest.raises(checkpoints.DamagedCheckpointError) as error:
    ckpts.restore_latest(*_targets(spt_run[1], phase_copy))
  message = str(error.value)
  assert os.path.join(phase_copy, "latest", "6") in message
  assert os.path.join(phase_copy, "latest", "3", "meta") in message
  assert "To start this phase over, move" in message and len(message.splitlines()) <= 5


def test_damaged_resume_through_main_is_a_short_error_without_thread_dumps(tmp_path, spt_run,
                                                                           cache_dir):
  workdir = str(tmp_path / "w")
  shutil.copytree(spt_run[0], workdir)
  os.remove(os.path.join(workdir, PHASE, "results.json"))
  for step in ("3", "6"):
    _truncate(os.path.join(workdir, PHASE, "checkpoints", "latest", step))
  out = run_main(["--config=configs/listops_spt.py", f"--workdir={workdir}", "--cpu_devices=1",
                  *tiny_flags(cache_dir)])
  assert out.returncode == 1
  tail = out.stderr.strip().splitlines()
  error = [i for i, line in enumerate(tail) if line.startswith("error: ")]
  assert error and len(tail) - error[-1] <= 6, out.stderr[-3000:]
  # No traceback of any thread: the message is the whole report.
  assert "Traceback" not in out.stderr and 'File "' not in out.stderr, out.stderr[-3000:]
  assert "latest/3" in tail[-4] + tail[-3] + tail[-2] and "To start this phase over" in out.stderr


def test_a_flipped_bit_in_the_newest_latest_resumes_from_the_previous_one_identically(
    tmp_path, spt_run, cache_dir):
  reference, config, results = spt_run
  workdir = str(tmp_path / "w")
  shutil.copytree(reference, workdir)
  for name in ("results.json", os.path.join("finetune", "results.json")):
    os.remove(os.path.join(workdir, name))
  _flip_bit(os.path.join(workdir, "finetune", "checkpoints", "latest", "6"))
  resumed = experiment.run(tiny(load_config("listops_spt"), cache_dir), workdir)
  assert resumed["finetune"]["test_of_best"] == results["finetune"]["test_of_best"]
  for item in ("params", "opt_state"):
    a = tree.flatten(checkpoints.restore_item(
        os.path.join(reference, "finetune", "checkpoints", "latest", "6", item)))
    b = tree.flatten(checkpoints.restore_item(
        os.path.join(workdir, "finetune", "checkpoints", "latest", "6", item)))
    assert all(np.array_equal(a[p], b[p]) for p in a), item


def test_no_latest_left_starts_over_saying_what_exists(tmp_path, spt_run, cache_dir, caplog):
  workdir = str(tmp_path / "w")
  shutil.copytree(spt_run[0], workdir)
  for name in ("results.json", os.path.join(PHASE, "results.json")):
    os.remove(os.path.join(workdir, name))
  shutil.rmtree(os.path.join(workdir, PHASE, "checkpoints", "latest"))
  config = tiny(load_config("listops_spt"), cache_dir)
  config.phases = PHASE
  with caplog.at_level(logging.WARNING):
    resumed = experiment.run(config, workdir)
  warning = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
  assert "starting from step 0 next to" in warning and "checkpoints/init/0" in warning, warning
  assert resumed[PHASE]["test_of_best"] == spt_run[2][PHASE]["test_of_best"]


def test_a_damaged_best_checkpoint_is_never_evaluated(tmp_path, spt_run):
  best = os.path.join(spt_run[0], PHASE, "checkpoints", "best")
  step_dir = str(tmp_path / "best")
  shutil.copytree(os.path.join(best, max(os.listdir(best), key=int)), step_dir)
  _silently_rewritten(step_dir)
  with pytest.raises(checkpoints.DamagedCheckpointError, match="checksum mismatch"):
    checkpoints.restore_item(os.path.join(step_dir, "params"))
  _flip_bit(step_dir)
  with pytest.raises(checkpoints.DamagedCheckpointError):
    checkpoints.restore_item(os.path.join(step_dir, "params"))


def test_params_restore_with_plain_orbax_and_no_target(spt_run):
  """Saved from host memory: no sharding recorded, so any device count reads them without spt_jax."""
  for kind in ("best", "init", "latest"):
    directory = os.path.join(spt_run[0], PHASE, "checkpoints", kind)
    step = max(os.listdir(directory), key=int)
    restored = ocp.StandardCheckpointer().restore(os.path.join(directory, step, "params"))
    assert tree.count(restored) == spt_run[2][PHASE]["num_parameters"]


def test_opening_and_reading_checkpoints_changes_nothing(spt_run):
  directory = os.path.join(spt_run[0], PHASE, "checkpoints")
  before = sorted((d, f, os.path.getmtime(os.path.join(d, f)))
                  for d, _, files in os.walk(directory) for f in files)
  ckpts = checkpoints.PhaseCheckpoints(directory)
  ckpts.restore_latest(*_targets(spt_run[1], directory))
  ckpts.close()
  checkpoints.PhaseCheckpoints(directory).close()
  after = sorted((d, f, os.path.getmtime(os.path.join(d, f)))
                 for d, _, files in os.walk(directory) for f in files)
  assert after == before


def test_a_step_directory_left_by_an_interrupted_run_is_replaced_not_fatal(tmp_path):
  params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
  ckpts = checkpoints.PhaseCheckpoints(str(tmp_path / "checkpoints"))
  for kind in ("best", "latest"):  # e.g. a deletion cut short by a kill
    os.makedirs(tmp_path / "checkpoints" / kind / "5" / "params")
    (tmp_path / "checkpoints" / kind / "5" / "params" / "leftover").write_text("x")
  ckpts.save_best(5, params, {"accuracy": 0.5})
  ckpts.save_latest(5, params, {"count": np.zeros((), np.int32)},
                    {"step": 5, "best_value": 0.5, "best_step": 5, "wall_time_sec": 1.0})
  ckpts.close()
  for kind in ("best", "latest"):
    restored = checkpoints.restore_item(str(tmp_path / "checkpoints" / kind / "5" / "params"))
    assert np.array_equal(restored["w"], params["w"])
