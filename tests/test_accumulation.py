"""Gradient accumulation: k micro-batches give the update of the whole batch, and a run that uses
them resumes bit-identically after a kill."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, as_flags, load_config, tiny
from spt_jax import checkpoints, experiment, tree


def _params(workdir):
  latest = os.path.join(workdir, "finetune", "checkpoints", "latest")
  step = max(os.listdir(latest), key=int)
  return tree.flatten(checkpoints.restore_item(os.path.join(latest, step, "params")))


def _config(cache_dir, accumulate):
  config = tiny(load_config("listops_scratch"), cache_dir, 6)
  config.finetune.update(accumulate_steps=accumulate, learning_rate=3e-3)
  return config


def test_micro_batches_give_the_whole_batch_update_and_resume_bit_identically(tmp_path,
                                                                             cache_dir):
  whole = str(tmp_path / "whole")
  experiment.run(_config(cache_dir, 1), whole)
  micro = str(tmp_path / "micro")
  results = experiment.run(_config(cache_dir, 4), micro)["finetune"]
  a, b = _params(whole), _params(micro)
  for path in a:  # the classification loss is a mean over equally weighted examples
    np.testing.assert_allclose(b[path], a[path], rtol=2e-5, atol=2e-6, err_msg=path)
  # Killed during its second latest save and run again: the same parameters, bit for bit.
  killed = str(tmp_path / "killed")
  args = ["--config=configs/listops_scratch.py", f"--workdir={killed}",
          *as_flags(_config(cache_dir, 4), load_config("listops_scratch"))]
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                       env=dict(os.environ, SPT_JAX_KILL_AT="latest_saving@6"),
                       capture_output=True, text=True, timeout=240)
  assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
  out = subprocess.run([sys.executable, os.path.join(ROOT, "main.py"), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=240)
  assert out.returncode == 0, out.stderr[-2000:]
  c = _params(killed)
  assert all(np.array_equal(b[p], c[p]) for p in b)
  got = json.load(open(os.path.join(killed, "results.json")))["finetune"]
  assert got["test_of_best"] == results["test_of_best"]


def test_accumulation_that_does_not_divide_the_batch_is_refused(tmp_path, cache_dir):
  config = _config(cache_dir, 3)  # batch 8
  with pytest.raises(ValueError, match=r"accumulate_steps=3 must be a whole number >= 1 that, "
                                       r"times the 1 device\(s\), divides "
                                       r"config.finetune.batch_size=8"):
    experiment.run(config, str(tmp_path))
