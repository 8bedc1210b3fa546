"""A checkpoint save that runs out of disk: one message naming the directory, nothing lost, and
the same command resumes bit-identically once there is space."""
import errno
import os

import numpy as np
import orbax.checkpoint as ocp
import pytest

from conftest import load_config, tiny
from spt_jax import checkpoints, experiment, tree


def _final(workdir):
  latest = os.path.join(workdir, "finetune", "checkpoints", "latest")
  return tree.flatten(checkpoints.restore_item(
      os.path.join(latest, max(os.listdir(latest), key=int), "params")))


def test_a_full_disk_is_one_message_and_the_run_resumes(tmp_path, cache_dir, monkeypatch):
  config = tiny(load_config("listops_scratch"), cache_dir, 9)
  reference = str(tmp_path / "reference")
  experiment.run(config, reference)
  real_save = ocp.CheckpointManager.save

  def full_at_step_6(self, step, *args, **kwargs):
    if step == 6:  # how TensorStore's OCDBT driver reports it, wrapped by Orbax
      raise ValueError("Error writing \"d/ocdbt.process_0/manifest\": [Errno 28] No space left "
                       "on device") from OSError(errno.ENOSPC, "No space left on device")
    return real_save(self, step, *args, **kwargs)

  workdir = str(tmp_path / "run")
  monkeypatch.setattr(ocp.CheckpointManager, "save", full_at_step_6)
  with pytest.raises(checkpoints.DiskFullError) as error:
    experiment.run(config, workdir)
  message = str(error.value)
  assert f"{workdir}/finetune/checkpoints: no space left on the device" in message
  assert "the last committed checkpoint is step 3" in message and "resumes" in message
  monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
  experiment.run(config, workdir)
  a, b = _final(reference), _final(workdir)
  assert all(np.array_equal(a[k], b[k]) for k in a)
