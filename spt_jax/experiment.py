"""A whole run: load the task once, run its phases in order, collect `<workdir>/results.json`.

A phase whose `results.json` exists is finished and is not re-run; a phase with checkpoints but no
results resumes from its latest checkpoint.
"""
from __future__ import annotations

import json
import os

import jax
from absl import logging

from spt_jax import config_lib, train
from spt_jax.data import tasks
from spt_jax.metric_writers import write_json


def make_mesh() -> jax.sharding.Mesh:
  # Auto axes: the compiler propagates shardings from the batch (pure data parallelism); JAX 0.10's
  # make_mesh default (Explicit) would demand an out_sharding on every gather.
  return jax.make_mesh((jax.device_count(),), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def run(config, workdir: str) -> dict:
  config_lib.validate(config, jax.device_count())
  names = config_lib.phase_names(config)
  os.makedirs(workdir, exist_ok=True)
  mesh = make_mesh()
  results, task = {}, None
  for name in names:
    done = os.path.join(workdir, name, "results.json")
    if os.path.exists(done):
      with open(done) as f:
        results[name] = json.load(f)
      logging.info("[%s] already finished (%s); not re-running it.", name, done)
      continue
    task = task or tasks.load(config.data)
    results[name] = train.train_phase(config, name, task, workdir, mesh)
    write_json(os.path.join(workdir, "results.json"), results)
  write_json(os.path.join(workdir, "results.json"), results)
  return results
