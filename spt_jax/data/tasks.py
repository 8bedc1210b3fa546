"""The task table: `config.data.task` → the `Task` its module declares (spt_jax/data/base.py)."""
from __future__ import annotations

from spt_jax.data import image, listops, pathfinder, retrieval, synthetic, text
from spt_jax.data import markov_events
from spt_jax.data.base import Task, TaskData

# In the order `python -m spt_jax.data.prepare --help` lists those with a check: the LRA release's,
# then TFDS's.
TASKS: dict[str, Task] = {t.name: t for t in (listops.TASK, retrieval.TASK, pathfinder.TASK,
                                              text.TASK, image.TASK, synthetic.TASK)}
# GraP's toy event sequences (docs/grap.md).
TASKS[markov_events.TASK.name] = markov_events.TASK

__all__ = ["TASKS", "Task", "TaskData", "get", "load", "signature", "variants"]


def get(name: str) -> Task:
  if name not in TASKS:
    raise ValueError(f"config.data.task={name!r} must be one of {sorted(TASKS)}.")
  return TASKS[name]


def variants() -> dict[str, tuple[Task, dict]]:
  """{name: (task, settings)}: every task under its own name (no settings), each followed by its
  variants (spt_jax/data/base.py), e.g. 'pathx': (the pathfinder task, {'resolution': 128})."""
  named = {}
  for task in TASKS.values():
    named[task.name] = (task, {})
    for name, settings in task.variants.items():
      if name in TASKS or name in named:
        raise ValueError(f"Task {task.name!r} declares the variant {name!r}, a name already taken.")
      named[name] = (task, dict(settings))
  return named


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
