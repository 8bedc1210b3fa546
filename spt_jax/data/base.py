"""What every task module declares (`Task`) and returns (`TaskData`), and the helpers they share.

A task is one module of spt_jax/data (listops.py, synthetic.py, text.py, retrieval.py, image.py,
pathfinder.py) ending in `TASK = Task(...)`: its config section's defaults, its smoke sizes, its
loader and its signature, and for data a user downloads, the check of those files.
spt_jax/data/tasks.py is the table of them. A token task generated in memory from a dataclass of
its settings (synthetic.py, markov_events.py) gets the first four from `generated_task`.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from typing import Any

import ml_collections
import numpy as np

from spt_jax.data.vocab import NUM_SPECIAL, Vocabulary


@dataclasses.dataclass
class TaskData:
  name: str
  vocab: Vocabulary
  num_classes: int
  max_length: int
  splits: dict[str, dict[str, np.ndarray]]  # {"train"|"val"|"test": {"inputs", "labels"}}
  source: str  # where the data came from, for the logs and results
  input_kind: str = "tokens"  # 'tokens' (ids [N, L] or pairs [N, 2, L]) or 'pixels' (uint8 [N, L])
  # Pixel inputs enter the model as (pixel - pixel_mean) / pixel_std (8-bit units).
  pixel_mean: float = 0.0
  pixel_std: float = 255.0
  generated: bool = False  # made by spt_jax's generator, not read from an official release


@dataclasses.dataclass(frozen=True)
class Task:
  """One task, declared by its module.

  config(**overrides)  the `config.data` section with this task's defaults (an ml_collections
                       ConfigDict with `task` = name)
  load(cfg)            the data of a section → TaskData
  signature(cfg)       what a model trained on it fixes, from the config alone (nothing loaded):
                       {'task', 'input_kind', 'vocab' (tokens), 'max_length'}
  smoke(cfg)           the sizes of the `smoke` variant for a section (config_lib.smoke applies
                       them): {'data': {...}, 'model': {...}, 'phase': {...}} of field overrides,
                       nested dicts updating nested sections
  masked_ceiling       optional, for generated data whose grammar is known: masked_ceiling(targets)
                       → per masked position (nats, accuracy) of the best prediction a model can
                       make from the grammar (analysis/reference_levels.py); None: unknown
  check                optional, for data a user downloads: check(data_dir, **options) → a
                       checks.Report on the files under data_dir, read with the loader's own
                       parsers (`python -m spt_jax.data.prepare`). The options are the command
                       line's and a variant's settings (resolution, difficulty, images, build); a
                       check takes those it knows and ignores the rest. None: nothing to check
  variants             other names the task goes by, each with the settings that make it that
                       variant ({'pathx': {'resolution': 128}}): config(**settings) is its
                       `config.data`, and prepare passes them to check
  """
  name: str
  config: Callable[..., Any]
  load: Callable[[Any], TaskData]
  signature: Callable[[Any], dict]
  smoke: Callable[[Any], dict]
  masked_ceiling: Callable[[Any], tuple[Any, Any]] | None = None
  check: Callable[..., Any] | None = None
  # Left out of the hash, so that a Task stays hashable.
  variants: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict, hash=False)


def check_local(key: str, path: str) -> None:
  """Data is read from local directories only: a URL (gs://...) is refused, never rewritten to a
  local path (os.path.expanduser or abspath would make 'gs://b/x' the local '$PWD/gs:/b/x')."""
  if path and re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
    raise ValueError(f"{key}={path!r}: data is read from local directories only (reading "
                     f"from a URL is not supported); copy it to a local directory and pass that.")


def data_root(cfg, spec) -> str:
  """The user's data_dir, read as it is, or the cache directory generated data lives in.

  A user's directory is never written to: generating there could replace their files, and a
  mistyped path would silently train on generated data. The cache directory is named after every
  generator setting, so variants never collide. Both must be local (`check_local`).
  """
  check_local("config.data.data_dir", cfg.data_dir)
  check_local("config.data.cache_dir", cfg.cache_dir)
  if cfg.data_dir:
    return os.path.expanduser(cfg.data_dir)
  return os.path.join(os.path.expanduser(cfg.cache_dir), spec.cache_name())


PIXEL_REPRESENTATIONS = ("pixels", "tokens")


def as_representation(splits, representation: str):
  """Raw 8-bit pixels → continuous inputs (kept as uint8) or LRA's 256 pixel tokens (id 3 + value)."""
  if representation not in PIXEL_REPRESENTATIONS:
    raise ValueError(f"config.data.representation={representation!r} must be one of "
                     f"{PIXEL_REPRESENTATIONS}.")
  out = {}
  for name, arrays in splits.items():
    pixels = arrays["pixels"]
    inputs = pixels if representation == "pixels" else pixels.astype(np.uint16) + NUM_SPECIAL
    out[name] = {"inputs": inputs, "labels": arrays["labels"]}
  return out


def pixel_norm(cfg) -> dict:
  if not cfg.pixel_std > 0:
    raise ValueError(f"config.data.pixel_std={cfg.pixel_std} must be > 0.")
  return dict(pixel_mean=float(cfg.pixel_mean), pixel_std=float(cfg.pixel_std))


def pixel_kind(cfg) -> str:
  """The model's input kind for an image task's section: 'pixels' or 'tokens'."""
  return "pixels" if cfg.get("representation", "pixels") == "pixels" else "tokens"


# The `smoke` variants' sizes that several tasks share: the phases of a generated token task's
# smoke run, and the small model and short phases of the LRA tasks'.
SMOKE_PHASE = dict(num_steps=60, warmup_steps=10, log_every_steps=10, eval_every_steps=20,
                   checkpoint_every_steps=20)
LRA_SMOKE_MODEL = dict(num_layers=1, d_model=32, num_heads=2, d_ff=64)


def lra_smoke_phase(num_steps: int = 20, batch_size: int = 8, max_eval_batches: int = 4) -> dict:
  return dict(num_steps=num_steps, batch_size=batch_size, warmup_steps=2, log_every_steps=5,
              eval_every_steps=10, checkpoint_every_steps=10, max_eval_batches=max_eval_batches)


# ------------------------------------------------------------------ sequence tasks generated in memory
SPLITS = ("train", "val", "test")


def generated_splits(spec, generate: Callable) -> dict[str, dict[str, np.ndarray]]:
  """{split: generate(spec, spec.num_<split>, rng)}, one random stream per split from `spec.seed`:
  changing the size of one split never changes the others."""
  sizes = {"train": spec.num_train, "val": spec.num_val, "test": spec.num_test}
  return {s: generate(spec, sizes[s], np.random.default_rng([spec.seed, i]))
          for i, s in enumerate(SPLITS)}


def generated_task(name: str, section: str, spec_type, generate: Callable, *,
                   num_classes: Callable[[Any], int], doc: str,
                   optional_fields: tuple[str, ...] = ()) -> Task:
  """The Task of a token-sequence task generated in memory by `generate(spec, num, rng)`.

  `spec_type` is a frozen dataclass whose fields are `config.data.<section>` (checked by its
  `__post_init__`), with `num_train`, `num_val`, `num_test`, `length`, `seed` and a `vocab`
  property; `optional_fields` are left out of the config's defaults (absent = the dataclass
  default), so that configs written before a field existed stay as they were."""
  def config(**overrides) -> ml_collections.ConfigDict:
    defaults = {k: v for k, v in dataclasses.asdict(spec_type()).items()
                if k not in optional_fields}
    fields = ml_collections.ConfigDict(defaults)
    fields.update(overrides)
    return ml_collections.ConfigDict({"task": name, "max_length": fields.length, section: fields})

  def load(cfg) -> TaskData:
    spec = spec_type(**cfg[section].to_dict())
    if spec.length > cfg.max_length:
      raise ValueError(f"config.data.{section}.length={spec.length} exceeds config.data.max_length="
                       f"{cfg.max_length}.")
    return TaskData(name, spec.vocab, num_classes(spec), cfg.max_length,
                    generated_splits(spec, generate), f"{name} {spec}")

  def signature(cfg) -> dict:
    return {"task": name, "input_kind": "tokens",
            "vocab": spec_type(**cfg[section].to_dict()).vocab.tokens,
            "max_length": cfg.max_length}

  def smoke(cfg) -> dict:
    return {"data": {section: dict(num_train=512, num_val=128, num_test=128)},
            "phase": SMOKE_PHASE}

  config.__doc__ = doc
  return Task(name, config, load, signature, smoke)
