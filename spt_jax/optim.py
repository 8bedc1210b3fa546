"""Optimiser and learning-rate schedule from a phase config, with regex-driven freezing.

Frozen parameters go through `optax.set_to_zero` inside `optax.multi_transform` (as in big_vision's
optax.py): they get a zero update and the inner optimiser never sees them, so no Adam moments are
allocated for them and weight decay cannot move them.
"""
from __future__ import annotations

import jax
import numpy as np
import optax

from spt_jax import tree

SCHEDULES = ("constant", "cosine", "linear")
# Which parameters weight decay pulls toward zero: weight matrices and embedding tables only, or every
# parameter (biases and LayerNorm scales too), as torch.optim.AdamW without parameter groups does.
DECAY_TARGETS = ("matrices", "all")


def make_schedule(cfg, total_steps: int) -> optax.Schedule:
  """Linear warmup from 0 to `learning_rate`, then constant, cosine or linear decay to
  `learning_rate * end_lr_ratio` at `total_steps`."""
  lr, warmup = cfg.learning_rate, min(cfg.warmup_steps, total_steps)
  if cfg.schedule not in SCHEDULES:
    raise ValueError(f"schedule={cfg.schedule!r} must be one of {SCHEDULES}.")
  decay_steps = max(total_steps - warmup, 1)
  end = lr * cfg.end_lr_ratio
  if cfg.schedule == "constant":
    after = optax.constant_schedule(lr)
  elif cfg.schedule == "cosine":
    after = optax.cosine_decay_schedule(lr, decay_steps, alpha=cfg.end_lr_ratio)
  else:
    after = optax.linear_schedule(lr, end, decay_steps)
  if warmup == 0:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), after], [warmup])


def _decay_mask(target: str):
  if target == "all":
    return None
  if target == "matrices":
    return lambda params: jax.tree.map(lambda p: np.ndim(p) >= 2, params)
  raise ValueError(f"weight_decay_on={target!r} must be one of {DECAY_TARGETS}.")


def make_optimizer(cfg, total_steps: int, params, frozen: frozenset[str] = frozenset()):
  """Returns (optax transformation, schedule). `frozen` holds '/'-joined paths that must not move."""
  schedule = make_schedule(cfg, total_steps)
  parts = []
  if cfg.grad_clip_norm > 0:
    parts.append(optax.clip_by_global_norm(cfg.grad_clip_norm))
  parts.append(optax.adamw(schedule, b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                           weight_decay=cfg.weight_decay,
                           mask=_decay_mask(cfg.get("weight_decay_on", "matrices"))))
  tx = optax.chain(*parts)
  if frozen:
    labels = tree.map_with_path(lambda p, _: "frozen" if p in frozen else "trainable", params)
    tx = optax.multi_transform({"trainable": tx, "frozen": optax.set_to_zero()}, labels)
  return tx, schedule
