"""Orbax checkpoints of one training phase: the latest full state (to resume) and the best parameters.

Layout (each step directory is written under a temporary name and renamed when complete, so a kill
mid-save never leaves a half-written checkpoint in place):
  <phase>/checkpoints/latest/<step>/{params,opt_state,meta}   meta: {"step", "best_value", ...}
  <phase>/checkpoints/best/<step>/{params,meta}               meta: the validation metrics that won
  <phase>/checkpoints/init/0/{params,meta}                    the exact parameters training started from
`params` is a plain StandardCheckpointer item, readable without spt_jax (README: "Parameters and
checkpoints"); restoring it with a target built from its own metadata works on any device count.
"""
from __future__ import annotations

import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from spt_jax import tree

LATEST, BEST, INIT = "latest", "best", "init"
KINDS = (BEST, LATEST, INIT)


def _manager(directory: str, *, read_only: bool = False) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=1, create=not read_only, read_only=read_only)
  return ocp.CheckpointManager(os.path.abspath(directory), options=options)


def item_abstract(item_dir: str, sharding=None) -> Any:
  """ShapeDtypeStructs of a saved StandardCheckpointer item, read from its metadata (no array I/O)."""
  if not os.path.isdir(item_dir):
    raise FileNotFoundError(f"No checkpoint item at {item_dir}.")
  try:
    with ocp.StandardCheckpointer() as ckptr:
      meta = ckptr.metadata(os.path.abspath(item_dir)).item_metadata.tree
  except Exception as e:  # Orbax raises several types for "not a checkpoint"; name the path instead.
    raise ValueError(f"{item_dir} is not a readable Orbax checkpoint item: {e}") from e
  if sharding is None:
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=sharding),
                      meta, is_leaf=lambda m: hasattr(m, "shape") and hasattr(m, "dtype"))


def restore_item(item_dir: str, abstract=None, sharding=None):
  """Restores one params-like item; without `abstract` the saved shapes/dtypes are used."""
  if abstract is None:
    abstract = item_abstract(item_dir, sharding)
  with ocp.StandardCheckpointer() as ckptr:
    return ckptr.restore(os.path.abspath(item_dir), abstract)


class PhaseCheckpoints:
  """The latest (resumable) and best (selected on validation) checkpoints of one phase."""

  def __init__(self, directory: str):
    self.directory = directory
    self._latest = _manager(os.path.join(directory, LATEST))
    self._best = _manager(os.path.join(directory, BEST))
    self._init = _manager(os.path.join(directory, INIT))

  # ---- latest: full training state
  def latest_step(self) -> int | None:
    return self._latest.latest_step()

  def latest_params_dir(self) -> str:
    return os.path.join(self.directory, LATEST, str(self.latest_step()), "params")

  def _finish_pending(self) -> None:
    # Orbax names its multi-process "async write complete" barrier after the step, so a `best` and a
    # `latest` save of the same step in flight together collide ("barrier already ongoing") and
    # hang. One save at a time across this phase's managers avoids it.
    self.wait()

  def save_latest(self, step: int, params, opt_state, meta: dict) -> None:
    self._finish_pending()
    self._latest.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(params), opt_state=ocp.args.StandardSave(opt_state),
        meta=ocp.args.JsonSave(meta)), force=True)

  def restore_latest(self, params, opt_state):
    """Restores onto the shardings of the given (possibly abstract) trees after a strict shape check."""
    step = self.latest_step()
    where = os.path.join(self.directory, LATEST, str(step))
    tree.check_compatible(params, item_abstract(os.path.join(where, "params")),
                          expected_name="the configured model", found_name=f"checkpoint {where}")
    abstract = lambda t: jax.tree.map(ocp.utils.to_shape_dtype_struct, t)
    restored = self._latest.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(abstract(params)),
        opt_state=ocp.args.StandardRestore(abstract(opt_state)), meta=ocp.args.JsonRestore()))
    return step, restored["params"], restored["opt_state"], restored["meta"]

  # ---- best: parameters only
  def best(self) -> tuple[int, dict] | None:
    step = self._best.latest_step()
    if step is None:
      return None
    return step, self._best.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]

  def best_params_dir(self) -> str | None:
    step = self._best.latest_step()
    return None if step is None else os.path.join(self.directory, BEST, str(step), "params")

  def save_best(self, step: int, params, metrics: dict) -> None:
    self._finish_pending()
    self._best.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(params),
        meta=ocp.args.JsonSave({k: float(v) for k, v in metrics.items()})), force=True)

  # ---- init: the starting point (fresh, handed off or hybrid), for inspection and exact comparisons
  def save_init(self, params, meta: dict) -> None:
    if self._init.latest_step() is None:
      self._finish_pending()
      self._init.save(0, args=ocp.args.Composite(
          params=ocp.args.StandardSave(params), meta=ocp.args.JsonSave(meta)), force=True)

  def _managers(self):
    return (self._latest, self._best, self._init)

  def wait(self) -> None:
    for m in self._managers():
      m.wait_until_finished()

  def close(self) -> None:
    for m in self._managers():
      m.close()


def resolve_params_dir(path: str, checkpoint: str = BEST) -> str:
  """Finds a params item from a phase directory, a checkpoints directory, a step directory or the item.

  `checkpoint` is `best`, `latest`, `init` or a step number; it applies when `path` is a phase directory.
  """
  if not os.path.exists(path):
    raise FileNotFoundError(f"Checkpoint path {path} does not exist.")
  if checkpoint not in KINDS and not str(checkpoint).isdigit():
    raise ValueError(f"checkpoint={checkpoint!r} must be one of {KINDS} or a step number.")
  candidates = [path, os.path.join(path, "params")]
  if os.path.isdir(os.path.join(path, "checkpoints")):
    path = os.path.join(path, "checkpoints")
  kind = checkpoint if checkpoint in KINDS else LATEST
  if os.path.isdir(os.path.join(path, kind)):
    steps = sorted(int(s) for s in os.listdir(os.path.join(path, kind)) if s.isdigit())
    if checkpoint not in KINDS:
      wanted = int(checkpoint)
      # A specific step may survive in any of the directories.
      for k in KINDS:
        d = os.path.join(path, k, str(wanted), "params")
        if os.path.isdir(d):
          return d
      raise FileNotFoundError(f"No step {wanted} under {path} (latest: {steps}).")
    if not steps:
      raise FileNotFoundError(f"No finished {kind} checkpoint under {os.path.join(path, kind)}.")
    candidates.insert(0, os.path.join(path, kind, str(steps[-1]), "params"))
  for c in candidates:
    if os.path.isfile(os.path.join(c, "_METADATA")) or os.path.isfile(
        os.path.join(c, "_sharding")) or os.path.isfile(os.path.join(c, "manifest.ocdbt")):
      return c
  raise ValueError(
      f"{path} is not an Orbax parameter checkpoint: expected a phase directory (with checkpoints/"
      f"{{best,latest}}/<step>/params), a step directory with params/, or a params item directory.")

