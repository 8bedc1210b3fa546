"""From `config.data` to arrays: one entry per task, all returning the same `TaskData`."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
from absl import logging

from spt_jax.data import listops, synthetic
from spt_jax.data.vocab import Vocabulary


@dataclasses.dataclass
class TaskData:
  name: str
  vocab: Vocabulary
  num_classes: int
  max_length: int
  splits: dict[str, dict[str, np.ndarray]]  # {"train"|"val"|"test": {"inputs", "labels"}}
  source: str  # where the data came from, for the logs and results


def _listops(cfg) -> TaskData:
  gen = cfg.generator
  spec = listops.GeneratorSpec(
      num_train=gen.num_train, num_val=gen.num_val, num_test=gen.num_test,
      min_length=gen.min_length, max_length=gen.max_length, max_depth=gen.max_depth,
      max_args=gen.max_args, seed=gen.seed)
  if gen.max_length > cfg.max_length + 1:
    raise ValueError(f"config.data.generator.max_length={gen.max_length} produces sequences longer "
                     f"than config.data.max_length={cfg.max_length}.")
  # An explicit data_dir (e.g. an lra_release directory) is used as it is; otherwise generated data
  # lives in a cache directory named after every generator setting, so variants never collide.
  root = cfg.data_dir or os.path.join(os.path.expanduser(cfg.cache_dir), spec.cache_name())
  listops.ensure_files(root, spec if cfg.generate else None)
  splits = {s: listops.load_split(root, s, cfg.max_length) for s in listops.SPLITS}
  for s, arrays in splits.items():
    logging.info("ListOps %s: %d examples from %s", s, len(arrays["labels"]),
                 listops.split_path(root, s))
  return TaskData("listops", listops.VOCAB, 10, cfg.max_length, splits, root)


def _synthetic(cfg) -> TaskData:
  spec = synthetic.Spec(**cfg.synthetic.to_dict())
  if spec.length > cfg.max_length:
    raise ValueError(f"config.data.synthetic.length={spec.length} exceeds config.data.max_length="
                     f"{cfg.max_length}.")
  return TaskData("synthetic", spec.vocab, 2, cfg.max_length, synthetic.load_splits(spec),
                  f"synthetic {spec}")


TASKS = {"listops": _listops, "synthetic": _synthetic}


def load(data_config) -> TaskData:
  if data_config.task not in TASKS:
    raise ValueError(f"config.data.task={data_config.task!r} must be one of {sorted(TASKS)}.")
  return TASKS[data_config.task](data_config)
