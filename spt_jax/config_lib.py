"""Shared config pieces and validation. Task configs in `configs/` assemble these.

Every config is an ml_collections ConfigDict that is locked after construction, so a misspelt key on
the command line (`--config.modle.d_model=...`) or in code is an error instead of a silently new field.
"""
from __future__ import annotations

import ml_collections

from spt_jax import objectives, optim
from spt_jax.models import attention, transformer


def transformer_config(**overrides) -> ml_collections.ConfigDict:
  """Amos et al.'s LRA Transformer: pre-LN, sinusoidal positions, mean pooling, no dropout."""
  c = ml_collections.ConfigDict(dict(
      num_layers=6, d_model=512, num_heads=8, d_ff=2048, dropout_rate=0.0,
      position="sinusoidal", pooling="mean", activation="gelu", dtype="float32",
      attention="dense",            # see spt_jax.models.attention.IMPLEMENTATIONS
      attention_block_size=512))
  c.update(overrides)
  return c


def phase_config(objective: str, **overrides) -> ml_collections.ConfigDict:
  """One training phase (pretraining or fine-tuning)."""
  c = ml_collections.ConfigDict(dict(
      objective=objective,          # 'mlm' (SPT) or 'classification'
      mask_rate=0.1,                # mlm only: probability that a real token is masked
      bert_mix=False,               # mlm only: BERT's 80/10/10 replacement instead of always <mask>
      batch_size=32,                # global batch, split over all devices
      eval_batch_size=0,            # 0: same as batch_size
      num_epochs=1.0,               # used when num_steps == 0
      num_steps=0,
      learning_rate=1e-3,
      warmup_steps=1000,
      schedule="constant",          # 'constant' | 'cosine' | 'linear' after the linear warmup
      end_lr_ratio=0.0,             # final lr / peak lr for cosine and linear
      weight_decay=0.01,
      b1=0.9, b2=0.999, eps=1e-8,
      grad_clip_norm=0.0,           # 0: no clipping (as Amos et al.)
      log_every_steps=50,
      eval_every_steps=1000,
      checkpoint_every_steps=1000,
      max_eval_batches=0,           # 0: the whole split
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
          rescale=1.0,              # != 1: multiply rescale_paths by this (relative layer scale)
          rescale_paths=())),
  ))
  c.update(overrides)
  return c


def _one_of(value, allowed, key):
  if value not in allowed:
    raise ValueError(f"config.{key}={value!r} must be one of {tuple(allowed)}.")


def _positive(value, key, *, allow_zero=False):
  if value < 0 or (value == 0 and not allow_zero):
    raise ValueError(f"config.{key}={value!r} must be {'>= 0' if allow_zero else '> 0'}.")


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
  m = config.model
  _one_of(m.position, transformer.POSITIONS, "model.position")
  _one_of(m.pooling, transformer.POOLINGS, "model.pooling")
  _one_of(m.activation, tuple(transformer.ACTIVATIONS), "model.activation")
  _one_of(m.dtype, ("float32", "bfloat16"), "model.dtype")
  _one_of(m.attention, attention.IMPLEMENTATIONS, "model.attention")
  for key in ("num_layers", "d_model", "num_heads", "d_ff"):
    _positive(m[key], f"model.{key}")
  if m.d_model % m.num_heads:
    raise ValueError(f"config.model.d_model={m.d_model} is not divisible by "
                     f"config.model.num_heads={m.num_heads}.")
  if m.position == "sinusoidal" and m.d_model % 2:
    raise ValueError(f"config.model.d_model={m.d_model} must be even for sinusoidal positions.")
  if not 0 <= m.dropout_rate < 1:
    raise ValueError(f"config.model.dropout_rate={m.dropout_rate} must be in [0, 1).")
  _positive(config.data.max_length, "data.max_length")
  names = phase_names(config)
  for name in names:
    p = config[name]
    _one_of(p.objective, objectives.OBJECTIVES, f"{name}.objective")
    _one_of(p.schedule, optim.SCHEDULES, f"{name}.schedule")
    if p.objective == "mlm" and not 0 < p.mask_rate < 1:
      raise ValueError(f"config.{name}.mask_rate={p.mask_rate} must be in (0, 1).")
    for key in ("batch_size", "learning_rate", "log_every_steps", "eval_every_steps",
                "checkpoint_every_steps"):
      _positive(p[key], f"{name}.{key}")
    for key in ("num_steps", "num_epochs", "warmup_steps", "eval_batch_size", "weight_decay",
                "grad_clip_norm", "max_eval_batches"):
      _positive(p[key], f"{name}.{key}", allow_zero=True)
    if p.num_steps == 0 and p.num_epochs == 0:
      raise ValueError(f"config.{name}: set num_steps or num_epochs (both are 0).")
    for key in ("batch_size", "eval_batch_size"):
      if p[key] % device_count:
        raise ValueError(f"config.{name}.{key}={p[key]} must be divisible by the {device_count} "
                         f"devices the batch is split over.")
    source = p.init_from.source
    if source in names and names.index(source) >= names.index(name):
      raise ValueError(f"config.{name}.init_from.source={source!r} is a phase that runs after "
                       f"{name!r}; phases run in the order {names}.")


def listops_data(**generator_overrides) -> ml_collections.ConfigDict:
  """ListOps as in LRA: official files if `data_dir` is given, else generated once into `cache_dir`."""
  generator = ml_collections.ConfigDict(dict(
      num_train=96_000, num_val=2_000, num_test=2_000, min_length=500, max_length=2000,
      max_depth=10, max_args=10, seed=0))
  generator.update(generator_overrides)
  return ml_collections.ConfigDict(dict(
      task="listops",
      data_dir="",                  # a directory holding listops-1000/ (e.g. lra_release); '' = cache
      cache_dir="~/.cache/spt_jax",
      generate=True,                # generate the data when the files are absent
      max_length=2000,
      generator=generator))


def synthetic_data(**overrides) -> ml_collections.ConfigDict:
  """The synthetic proximity task (spt_jax/data/synthetic.py), generated in memory."""
  synthetic = ml_collections.ConfigDict(dict(
      num_train=8000, num_val=1000, num_test=1000, length=100, num_background=16,
      p_successor=0.8, seed=0))
  synthetic.update(overrides)
  return ml_collections.ConfigDict(dict(task="synthetic", max_length=synthetic.length,
                                        synthetic=synthetic))


def synthetic_finetune() -> ml_collections.ConfigDict:
  """Fine-tuning on the synthetic task, shared by the SPT and from-scratch configs."""
  return phase_config("classification", learning_rate=5e-4, num_epochs=20.0, warmup_steps=250,
                      eval_every_steps=250, checkpoint_every_steps=500)


def smoke(config) -> None:
  """Shrinks a config to a run that finishes in well under a minute on 2 CPU cores."""
  if config.data.task == "listops":
    config.data = listops_data(num_train=512, num_val=128, num_test=128, min_length=16,
                               max_length=128, max_depth=6, max_args=5)
    config.data.max_length = 128
    config.model.update(num_layers=2, d_model=64, num_heads=4, d_ff=128)
  elif config.data.task == "synthetic":
    config.data.synthetic.update(num_train=512, num_val=128, num_test=128)
  for name in phase_names(config):
    config[name].update(num_steps=60, warmup_steps=10, log_every_steps=10, eval_every_steps=20,
                        checkpoint_every_steps=20)


def listops_finetune() -> ml_collections.ConfigDict:
  """Amos et al.'s ListOps fine-tuning phase, shared by the SPT and from-scratch configs."""
  return phase_config("classification", learning_rate=1e-4, num_epochs=100.0, warmup_steps=1000,
                      eval_every_steps=3000, checkpoint_every_steps=1000)


def apply_variant(config, arg, filename: str) -> None:
  if arg == "smoke":
    smoke(config)
  elif arg:
    raise ValueError(f"Unknown variant {arg!r} for {filename}; known variants: 'smoke'.")
