"""Gradient accumulation: k micro-batches give the update of the whole batch."""
import os

import numpy as np
import pytest

from conftest import load_config, tiny
from spt_jax import checkpoints, experiment, tree


def _params(workdir):
  latest = os.path.join(workdir, "finetune", "checkpoints", "latest")
  step = max(os.listdir(latest), key=int)
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def _config(cache_dir, accumulate):
  config = tiny(load_config("listops_scratch"), cache_dir, 6)
  config.finetune.update(accumulate_steps=accumulate, learning_rate=3e-3)
  return config


def test_micro_batches_give_the_whole_batch_update(tmp_path, cache_dir):
  whole = str(tmp_path / "whole")
  experiment.run(_config(cache_dir, 1), whole)
  micro = str(tmp_path / "micro")
  results = experiment.run(_config(cache_dir, 4), micro)["finetune"]
  a, b = _params(whole), _params(micro)
  for path in a:  # the classification loss is a mean over equally weighted examples
    np.testing.assert_allclose(b[path], a[path], rtol=2e-5, atol=2e-6, err_msg=path)
  # Accumulation happens inside one jitted step: no state lives between micro-batches, so a kill
  # can only fall between steps, where the kill tests (test_resume_and_parallel.py) hold.
  assert results["stopped_at_step"] == 6


def test_accumulation_that_does_not_divide_the_batch_is_refused(tmp_path, cache_dir):
  config = _config(cache_dir, 3)  # batch 8
  with pytest.raises(ValueError, match=r"accumulate_steps=3 must be a whole number >= 1 that, "
                                       r"times the 1 device\(s\), divides "
                                       r"config.finetune.batch_size=8"):
    experiment.run(config, str(tmp_path))
