"""The training objectives, looked up by name: `config.<phase>.objective` is a key of the registry.

Each objective is one class in one module of this package, registered with `@register`; the modules
are found by listing the package, so a new objective is a new file and nothing else here changes.
An objective owns its config fields (`config_fields`: a phase is the shared fields plus its
objective's), its model and heads, its loss and metrics, its selection metric, the checks of those
fields and how a batch becomes gradients (spt_jax/objectives/base.py: the contract the
trainer, spt_jax/train.py, relies on).

  mlm             masked-token (or masked-pixel) prediction: Amos et al.'s SPT (masked.py)
  span            masked-token prediction of contiguous spans (span.py)
  clm             next-token (or next-pixel) prediction, causal attention (causal.py)
  classification  the supervised phase: pooled class logits (classification.py)
  composite       several pretraining heads on one encoder, weighted per step, GraP (composite/)
"""
from __future__ import annotations

import importlib
import pkgutil

from spt_jax.objectives.base import Objective

_REGISTRY: dict[str, type[Objective]] = {}
_INFRASTRUCTURE = ("base",)  # modules of this package that declare no objective


def register(cls: type[Objective]) -> type[Objective]:
  """Class decorator: `cls.name` becomes a valid `config.<phase>.objective`."""
  if not cls.name or cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
    raise ValueError(f"Objective {cls.__name__} needs a name no other objective has; "
                     f"{cls.name!r} is taken by {_REGISTRY.get(cls.name)}.")
  _REGISTRY[cls.name] = cls
  return cls


def _discover() -> None:
  for module in pkgutil.iter_modules(__path__):
    if module.name not in _INFRASTRUCTURE:
      importlib.import_module(f"{__name__}.{module.name}")


def names() -> tuple[str, ...]:
  _discover()
  return tuple(sorted(_REGISTRY))


def get(name: str) -> type[Objective]:
  _discover()
  if name not in _REGISTRY:
    raise ValueError(f"objective={name!r} must be one of {names()}.")
  return _REGISTRY[name]


def validate(phase_config, phase: str) -> None:
  """Checks phase `phase`'s objective name and that objective's own fields."""
  if phase_config.objective not in names():
    raise ValueError(f"config.{phase}.objective={phase_config.objective!r} must be one of "
                     f"{names()}.")
  objective = get(phase_config.objective)
  missing = [key for key in objective.config_fields() if key not in phase_config]
  if missing:
    raise ValueError(f"config.{phase}.objective={phase_config.objective!r} needs its fields "
                     f"{missing}, which config.{phase} lacks: build the phase with "
                     f"config_lib.phase_config({phase_config.objective!r}).")
  objective.validate(phase_config, phase)


def build(config, phase: str, task, model_config) -> Objective:
  """Phase `phase`'s objective for `task`, its model built from `model_config` (a
  models.transformer.ModelConfig with the task's and the platform's fields set)."""
  return get(config[phase].objective).from_config(config, phase, task, model_config)
