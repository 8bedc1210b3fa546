"""Shared config pieces and validation. Task configs in `configs/` assemble these.

Every config is an ml_collections ConfigDict that is locked after construction, so a misspelt key on
the command line (`--config.modle.d_model=...`) or in code is an error instead of a silently new field.
"""
from __future__ import annotations

import copy
import importlib.util
import math
import os

import ml_collections
from ml_collections import config_dict

from spt_jax import checkpoints, objectives, optim
from spt_jax.data import tasks
from spt_jax.models import transformer


def transformer_config(**overrides) -> ml_collections.ConfigDict:
  """Amos et al.'s LRA Transformer: pre-LN, sinusoidal positions, mean pooling, no dropout. The
  fields, their defaults and what they mean: models.transformer.ModelConfig."""
  c = ml_collections.ConfigDict(transformer.section_defaults())
  c.update(overrides)
  return c


def phase_config(objective: str, **overrides) -> ml_collections.ConfigDict:
  """One training phase (pretraining or fine-tuning): the fields every phase has, plus the
  objective's own (`config_fields` of its class in spt_jax/objectives/)."""
  c = ml_collections.ConfigDict(dict(
      objective=objective,          # a name in spt_jax.objectives (its module docstring lists them)
      data="",                      # '' = config.data; else the name of another top-level data section
                                    # (cross-task SPT, e.g. pretrain on 'pretrain_data')
      batch_size=32,                # global batch, split over all devices
      accumulate_steps=1,           # > 1: each step's batch goes through the model in this many
                                    # micro-batches whose gradients are averaged (the same update,
                                    # less activation memory); batch_size must divide into them
      eval_batch_size=0,            # 0: same as batch_size
      train_examples=0,             # > 0: train on this many examples of the training split, a
                                    # subset fixed by config.seed (a data-size sweep); 0: all of it
      num_epochs=1.0,               # used when num_steps == 0
      num_steps=0,
      match_compute_of="",          # a run directory: instead of num_steps/num_epochs, train as many
                                    # steps as that run's training FLOPs (all its phases, its
                                    # results.json) buy at this phase's FLOPs per step (rounded up):
                                    # a compute-matched baseline (spt_jax/flops.py)
      learning_rate=1e-3,
      warmup_steps=1000,
      schedule="constant",          # 'constant' | 'cosine' | 'linear' after the linear warmup
      end_lr_ratio=0.0,             # final lr / peak lr for cosine and linear
      weight_decay=0.01,
      weight_decay_on="matrices",   # 'matrices' (kernels, embeddings) or 'all' (biases, norms too)
      b1=0.9, b2=0.999, eps=1e-8,
      grad_clip_norm=0.0,           # 0: no clipping (as Amos et al.)
      log_every_steps=50,
      eval_every_steps=1000,
      checkpoint_every_steps=1000,
      max_eval_batches=0,           # 0: the whole split
      select_on="",                 # validation metric whose best value picks the checkpoint that is
                                    # tested and handed off: '' = the objective's (masked accuracy or
                                    # R² for SPT, as Amos et al.; accuracy for classification), or
                                    # any it reports, e.g. 'loss' (a '*loss' metric: lowest wins)
      stop_on_plateau=ml_collections.ConfigDict(dict(
          patience=0,               # > 0: stop once this many validations in a row have not
                                    # improved `metric` by min_delta; 0: run to the cap. The cap
                                    # (num_steps / num_epochs) binds either way.
          min_delta=0.0,            # the least change that counts as an improvement (metric units)
          # validations count towards patience only once the best value has passed this one
          # (above it; below for a loss), e.g. a little above chance; None: from the first
          after_passing=config_dict.placeholder(float),
          metric="")),              # validation metric watched: '' = select_on's
      attention_metrics_every_steps=0,  # > 0: log proximity metrics of a fixed val batch's attention
      # Pattern lists below take presets (param_groups.PRESETS: qk, qkvo, attention, mlp, norms,
      # embeddings, encoder, all_but_heads, heads, all) or regexes over '/'-joined parameter paths.
      freeze=(),                    # no updates, no optimiser moments, no weight decay
      init_from=ml_collections.ConfigDict(dict(
          source="",                # '' (random init), a phase of this run, or a checkpoint path
          checkpoint="best",        # 'best', 'latest', 'init' or a step number
          include=(".*",),          # checkpoint paths to load ...
          exclude=(),               # ... minus these
          gamma_ft=-1.0,            # >= 0: re-draw gamma_ft_paths from N(0, gamma_ft²) (0 allowed)
          gamma_ft_paths=("classifier/kernel",),
          rescale=1.0,              # != 1: multiply rescale_paths by this (absolute layer scale)
          rescale_paths=(),
          # != 0: the theory's relative scale λ ∈ [-1, 1] of earlier vs later layers at a fixed
          # sum of squares: earlier × √(1+λ), later × √(1-λ) (docs/theory.md)
          relative_scale=0.0,
          relative_scale_earlier=("attention",),
          relative_scale_later=("mlp", "embeddings"))),
  ))
  c.update(objectives.get(objective).config_fields())
  c.update(overrides)
  return c


def switch_objective(phase, objective: str) -> ml_collections.ConfigDict:
  """`phase` with another objective: its shared fields (and any field both objectives have, e.g.
  pixel_loss) carried over, the new objective's other fields at their defaults, the old objective's
  own fields gone."""
  new = phase_config(objective)
  for key in new:
    if key != "objective" and key in phase:
      new[key] = copy.deepcopy(phase[key])
  return new


def _one_of(value, allowed, key):
  if value not in allowed:
    raise ValueError(f"config.{key}={value!r} must be one of {tuple(allowed)}.")


def _positive(value, key, *, allow_zero=False):
  if value < 0 or (value == 0 and not allow_zero):
    raise ValueError(f"config.{key}={value!r} must be {'>= 0' if allow_zero else '> 0'}.")


PATTERN_FIELDS = ("freeze", "init_from.include", "init_from.exclude", "init_from.gamma_ft_paths",
                  "init_from.rescale_paths", "init_from.relative_scale_earlier",
                  "init_from.relative_scale_later")


def flat_items(d, prefix=""):
  """(dotted key, leaf value) of a nested dict or ConfigDict, e.g. ('finetune.init_from.source', '')."""
  for k, v in d.items():
    if isinstance(v, (dict, ml_collections.ConfigDict)):
      yield from flat_items(v, f"{prefix}{k}.")
    else:
      yield f"{prefix}{k}", v


def _check_finite(config) -> None:
  for key, value in flat_items(config):
    if isinstance(value, float) and not math.isfinite(value):
      raise ValueError(f"config.{key}={value} must be a finite number.")


def _check_patterns(phase, name: str) -> None:
  for key in PATTERN_FIELDS:
    value = phase
    for part in key.split("."):
      value = value[part]
    if isinstance(value, str):
      continue
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
      raise ValueError(f"config.{name}.{key}={value!r} must be a preset name, a regex, or a tuple of "
                       f"them, e.g. --config.{name}.{key}=\"('qk','mlp')\".")


def phase_names(config) -> list[str]:
  names = [p.strip() for p in config.phases.split(",") if p.strip()]
  if not names:
    raise ValueError("config.phases is empty; give e.g. 'pretrain,finetune'.")
  for name in names:
    if name not in config:
      raise ValueError(f"config.phases names {name!r} but the config has no section config.{name}.")
  return names


def validate(config, device_count: int) -> None:
  """Checks values that the type system cannot; every message names the offending key."""
  transformer.validate_section(config.model)
  _positive(config.data.max_length, "data.max_length")
  _check_finite(config)
  names = phase_names(config)
  for name in names:
    p = config[name]
    _check_patterns(p, name)
    try:
      checkpoints.check_checkpoint_name(p.init_from.checkpoint)
    except ValueError as e:
      raise ValueError(f"config.{name}.init_from.{e}") from None
    objectives.validate(p, name)
    _one_of(p.schedule, optim.SCHEDULES, f"{name}.schedule")
    _one_of(p.weight_decay_on, optim.DECAY_TARGETS, f"{name}.weight_decay_on")
    if p.data and (p.data not in config or "task" not in config[p.data]):
      raise ValueError(f"config.{name}.data={p.data!r} must name a top-level data section of the "
                       f"config (one with a 'task' field), e.g. config.pretrain_data.")
    for key in ("batch_size", "learning_rate", "log_every_steps", "eval_every_steps",
                "checkpoint_every_steps"):
      _positive(p[key], f"{name}.{key}")
    plateau = p.stop_on_plateau
    if not isinstance(plateau.patience, int) or isinstance(plateau.patience, bool):
      raise ValueError(f"config.{name}.stop_on_plateau.patience={plateau.patience!r} must be a "
                       f"whole number of validations (0: no plateau stopping).")
    _positive(plateau.patience, f"{name}.stop_on_plateau.patience", allow_zero=True)
    _positive(plateau.min_delta, f"{name}.stop_on_plateau.min_delta", allow_zero=True)
    if plateau.after_passing is not None and (
        isinstance(plateau.after_passing, bool) or not isinstance(plateau.after_passing,
                                                                  (int, float))):
      raise ValueError(f"config.{name}.stop_on_plateau.after_passing={plateau.after_passing!r} "
                       f"must be a number (a level of the watched metric) or None.")
    if plateau.after_passing is not None and not plateau.patience:
      raise ValueError(f"config.{name}.stop_on_plateau.after_passing={plateau.after_passing!r} "
                       f"needs stop_on_plateau.patience > 0 (patience 0 runs to the cap).")
    for key in ("num_steps", "num_epochs", "warmup_steps", "eval_batch_size", "weight_decay",
                "grad_clip_norm", "max_eval_batches"):
      _positive(p[key], f"{name}.{key}", allow_zero=True)
    if not isinstance(p.train_examples, int) or isinstance(p.train_examples, bool) or (
        p.train_examples < 0):
      raise ValueError(f"config.{name}.train_examples={p.train_examples!r} must be a whole number "
                       f">= 0 (0: the whole training split).")
    if not -1.0 <= p.init_from.relative_scale <= 1.0:
      raise ValueError(f"config.{name}.init_from.relative_scale={p.init_from.relative_scale!r} "
                       f"must be in [-1, 1] (earlier layers × √(1+λ), later × √(1-λ)).")
    if p.num_steps == 0 and p.num_epochs == 0:
      raise ValueError(f"config.{name}: set num_steps or num_epochs (both are 0).")
    for key in ("batch_size", "eval_batch_size"):
      if p[key] % device_count:
        raise ValueError(f"config.{name}.{key}={p[key]} must be divisible by the {device_count} "
                         f"devices the batch is split over.")
    if not isinstance(p.accumulate_steps, int) or p.accumulate_steps < 1 or (
        p.batch_size % (p.accumulate_steps * device_count)):
      raise ValueError(f"config.{name}.accumulate_steps={p.accumulate_steps!r} must be a whole "
                       f"number >= 1 that, times the {device_count} device(s), divides "
                       f"config.{name}.batch_size={p.batch_size}.")
    source = p.init_from.source
    if source in names and names.index(source) >= names.index(name):
      raise ValueError(f"config.{name}.init_from.source={source!r} is a phase that runs after "
                       f"{name!r}; phases run in the order {names}.")


def data_config(task: str, *args, **overrides) -> ml_collections.ConfigDict:
  """The `config.data` section of `task` with its module's defaults (spt_jax/data/<task>.py)."""
  return tasks.get(task).config(*args, **overrides)


def synthetic_finetune() -> ml_collections.ConfigDict:
  """Fine-tuning on the synthetic task, shared by the SPT and from-scratch configs."""
  return phase_config("classification", learning_rate=5e-4, num_epochs=20.0, warmup_steps=250,
                      eval_every_steps=250, checkpoint_every_steps=500)


def _update(section, overrides: dict) -> None:
  for key, value in overrides.items():
    if isinstance(value, dict):
      _update(section[key], value)
    else:
      section[key] = value


def smoke(config) -> None:
  """Shrinks a config to a run that finishes in well under a minute on 2 CPU cores: the sizes its
  task declares (`Task.smoke`) for data, model and every phase; other data sections too."""
  sizes = tasks.get(config.data.task).smoke(config.data)
  _update(config.data, sizes.get("data", {}))
  _update(config.model, sizes.get("model", {}))
  for name in phase_names(config):
    _update(config[name], sizes.get("phase", {}))
  for name in phase_names(config):
    other = config[name].data  # cross-task SPT's data section
    if other and other != "data":
      _update(config[other], tasks.get(config[other].task).smoke(config[other]).get("data", {}))


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_module(path: str):
  """A config file as a module, from 'configs/x.py' (a relative path is looked up from the working
  directory, then from the repository root), for what a config file declares besides get_config."""
  full = path if os.path.isabs(path) or os.path.exists(path) else os.path.join(REPO_ROOT, path)
  if not os.path.isfile(full):
    raise FileNotFoundError(f"Config file {path!r} not found (looked in {os.getcwd()} and "
                            f"{REPO_ROOT}).")
  spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-len(".py")], full)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def load_config(path_and_arg: str, **kwargs) -> ml_collections.ConfigDict:
  """`get_config(arg, **kwargs)` of a config file, from 'configs/x.py' or 'configs/x.py:variant':
  the one loader that sweeps, tests and config files use."""
  path, _, arg = path_and_arg.partition(":")
  return load_module(path).get_config(arg or None, **kwargs)


def parse_variants(arg, known, name: str) -> set[str]:
  """The comma-separated variants in a config's `arg` (e.g. 'smoke,from_pathfinder'); an unknown
  one is an error naming the config."""
  variants = set(filter(None, (arg or "").split(",")))
  if variants - set(known):
    raise ValueError(f"Unknown variant(s) {sorted(variants - set(known))} for {name}; known: "
                     f"{sorted(known)} (combine with commas, e.g. 'smoke,from_pathfinder').")
  return variants


def apply_variant(config, arg, filename: str) -> None:
  known = ("smoke", "cpu") if config.data.task == "synthetic" else ("smoke",)
  variants = parse_variants(arg, known, filename)
  if len(variants) > 1:
    raise ValueError(f"{filename} takes one variant at a time, got {arg!r}.")
  if "smoke" in variants:
    smoke(config)
  elif "cpu" in variants:
    # Sweep-sized: fine-tuning stops at 1500 steps, where SPT and scratch differ most; 5 SPT epochs
    # is the shortest pretraining that reached 90% within that budget for every seed
    # (docs/synthetic_task.md, pretraining-length sweep).
    config.finetune.num_steps = 1500
    if "pretrain" in config:
      config.pretrain.num_epochs = 5.0


def sweep_config(*, base: str, runs, title: str, seeds=(0, 1, 2), x_values=(), x_label: str = "",
                 metrics=("finetune.test_of_best.accuracy",), steps_to: float = 0.9,
                 output: str = "", run_seeds=None):
  """A sweep config for `python -m spt_jax.sweep` (fields: see spt_jax/sweep.py's docstring)."""
  return ml_collections.ConfigDict(dict(
      base=base, runs=tuple(runs), title=title, seeds=tuple(seeds), x_values=tuple(x_values),
      x_label=x_label, metrics=tuple(metrics), steps_to=float(steps_to), output=output,
      run_seeds={name: tuple(s) for name, s in (run_seeds or {}).items()}))
