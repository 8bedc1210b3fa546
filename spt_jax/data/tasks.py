"""The task table: `config.data.task` → the `Task` its module declares (spt_jax/data/base.py)."""
from __future__ import annotations

from spt_jax.data import image, listops, pathfinder, retrieval, synthetic, text
from spt_jax.data import markov_events
from spt_jax.data.base import Task, TaskData

TASKS: dict[str, Task] = {t.name: t for t in (listops.TASK, synthetic.TASK, text.TASK,
                                              retrieval.TASK, image.TASK, pathfinder.TASK)}
# GraP's toy event sequences (docs/grap.md).
TASKS[markov_events.TASK.name] = markov_events.TASK

__all__ = ["TASKS", "Task", "TaskData", "get", "load", "signature"]


def get(name: str) -> Task:
  if name not in TASKS:
    raise ValueError(f"config.data.task={name!r} must be one of {sorted(TASKS)}.")
  return TASKS[name]


def signature(cfg) -> dict:
  """What a model trained on this data fixes, computed from the config alone (no data loaded):
  the input kind and the vocabulary. Pretraining and fine-tuning data must agree on it."""
  return get(cfg.task).signature(cfg)


def load(data_config) -> TaskData:
  task = get(data_config.task).load(data_config)
  for split, arrays in task.splits.items():  # Training or evaluating on nothing is never meant.
    if not len(arrays["labels"]):
      raise ValueError(f"The {split} split of {data_config.task} data ({task.source}) has no "
                       f"examples.")
  return task
