"""A finished (or running) run as Python objects: its config, data, model, objective and the
parameters of a checkpoint, to predict, evaluate or probe it from a notebook.

  from spt_jax.runs import load_run
  run = load_run("runs/listops_spt", phase="finetune", checkpoint="best")
  run.evaluate("test")                      # == results.json's test_of_best, bit for bit
  logits = run.predict(run.splits["test"]["inputs"][:8])
  run.params = surgery.transplant(...)      # then evaluate again

Evaluation is the trainer's own (`train.evaluate_split` with the phase's eval step, batch size and
evaluation keys, so masked objectives draw the same masks), on a mesh over this process's devices;
the data are the task's, reloaded from the phase's recorded config and checked against the
fingerprint the phase trained on. The workdir may be a gs:// URL, as for every other run file.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from spt_jax import checkpoints, experiment, train
from spt_jax.data import tasks
from spt_jax.metric_writers import read_json, workdir_path


@dataclasses.dataclass
class Run:
  """One phase of a run at one checkpoint. `params` may be replaced (surgery) before evaluating."""
  workdir: str
  phase: str
  config: ml_collections.ConfigDict
  task: Any                 # data.tasks.TaskData
  objective: Any            # objectives.Objective (owns the model)
  params: Any
  checkpoint_dir: str
  mesh: Any = None

  @property
  def model(self):
    return self.objective.model

  @property
  def splits(self) -> dict:
    """The arrays the phase reads, per split (the objective's view of the task's data)."""
    return self.objective.splits(self.task)

  @property
  def results(self) -> dict | None:
    """The phase's results.json, None while it has not finished."""
    path = workdir_path(self.workdir) / self.phase / "results.json"
    return read_json(path) if path.exists() else None

  def evaluate(self, split: str = "test") -> dict[str, float]:
    """The phase's metrics on `split`, computed exactly as the trainer computes them."""
    sharding = NamedSharding(self.mesh, P("data"))
    params = jax.device_put(self.params, NamedSharding(self.mesh, P()))
    return train.evaluate_split(train.make_eval_step(self.objective, self.mesh), self.objective,
                                params, self.splits[split], self.config[self.phase],
                                train.evaluation_rng(self.config.seed, self.phase), sharding)

  def predict(self, inputs, batch_size: int = 64) -> np.ndarray:
    """The model's outputs for `inputs` [n, ...] (class logits, or per-position logits for a
    pretraining head), in eval mode, without corruption."""
    apply = jax.jit(lambda p, x: self.model.apply({"params": p}, x))
    inputs = np.asarray(inputs)
    return np.concatenate([np.asarray(apply(self.params, jnp.asarray(inputs[i:i + batch_size],
                                                                      jnp.int32)))
                           for i in range(0, len(inputs), batch_size)])


def load_run(workdir: str, phase: str | None = None, checkpoint: str = "best") -> Run:
  """Phase `phase` (default: the run's last) of the run in `workdir` at `checkpoint` ('best',
  'latest', 'init' or a step number)."""
  workdir = os.fspath(workdir)
  config_path = None
  if phase is None:
    names = None
    for candidate in ("finetune", "pretrain"):  # the usual last phase first; else any phase dir
      if (workdir_path(workdir) / candidate / "config.json").exists():
        names = read_json(workdir_path(workdir) / candidate / "config.json")["phases"]
        break
    if names is None:
      raise FileNotFoundError(f"{workdir} holds no phase with a config.json: not a run directory.")
    phase = [n.strip() for n in names.split(",") if n.strip()][-1]
  config_path = workdir_path(workdir) / phase / "config.json"
  if not config_path.exists():
    raise FileNotFoundError(f"{config_path} not found: {workdir} has no phase {phase!r} (yet).")
  config = ml_collections.ConfigDict(read_json(config_path))
  section = experiment.data_section(config, phase)
  task = tasks.load(config[section])
  record = workdir_path(workdir) / phase / experiment.DATA_RECORD
  if record.exists():
    trained_on = read_json(record).get("fingerprint")
    if trained_on != experiment.data_fingerprint(task):
      raise ValueError(f"The data config.{section} loads now ({task.source}) is not what phase "
                       f"{phase!r} trained on (fingerprint {trained_on} in {record}); point "
                       f"data_dir/cache_dir at that data.")
  objective = train.make_objective(config, phase, task)
  params_dir = checkpoints.resolve_params_dir(os.fspath(workdir_path(workdir) / phase), checkpoint)
  return Run(workdir, phase, config, task, objective, checkpoints.restore_item(params_dir),
             params_dir, experiment.make_mesh())
