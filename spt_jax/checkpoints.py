"""Orbax checkpoints of one training phase: the latest full states (to resume) and the best parameters.

Layout (Orbax writes each step under a temporary name and renames it when complete):
  <phase>/checkpoints/latest/<step>/{params,opt_state,meta,checksums}   the two most recent states
  <phase>/checkpoints/best/<step>/{params,meta,checksums}     meta: the validation metrics that won
  <phase>/checkpoints/init/0/{params,meta,checksums}          the exact parameters training started from
  <phase>/checkpoints/damaged/latest_<step>                   a latest step that failed verification

Consistency across kills: a `latest` save is the commit point. Its meta names the best step of that
moment, and a best checkpoint is deleted only once no kept latest checkpoint names it; a best step newer
than the latest checkpoint a run resumes from is uncommitted and is discarded, because the resumed run
recomputes it bit-identically.

Verification: `checksums` holds a CRC-32 of every array leaf of every item (and of `meta`), computed
from the host values at save time. Every restore of a latest checkpoint is checked against it before
the state is used; a damaged one is reported and the previous one is tried. `params` is saved from host
memory (no sharding recorded), so plain `orbax.checkpoint.StandardCheckpointer().restore(path)` reads
it with no target on any device count (README: "Parameters and checkpoints").

Paths: a checkpoint directory is local or any etils.epath URL (gs://); every access goes through
epath, and Orbax is handed the same path (metric_writers.workdir_path: a URL as it is, a local path
made absolute). On an object store Orbax writes a step under its final name and marks it complete with
commit_success.txt, so a step directory counts only once Orbax calls it finalized.
"""
from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import sys
import time
import zlib
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from etils import epath

from spt_jax import faults, tree
from spt_jax.metric_writers import workdir_path

LATEST, BEST, INIT = "latest", "best", "init"
KINDS = (BEST, LATEST, INIT)
CHECKSUMS = "checksums"
DAMAGED = "damaged"  # where damaged latest steps are moved (checkpoints/damaged/latest_<step>)
KEEP_LATEST = 2
LATEST_META_KEYS = ("step", "best_value", "best_step", "wall_time_sec")


class DamagedCheckpointError(ValueError):
  """A checkpoint that cannot be read back exactly as it was written; `path` and `reason` say why."""

  def __init__(self, path: str, reason: str):
    super().__init__(f"{path}: {reason}")
    self.path, self.reason = path, reason
    _quiet_orbax_coroutines()


def _short(error: BaseException) -> str:
  """The first line of an exception, cut short: Orbax and TensorStore messages run to pages."""
  text = str(error).strip().splitlines()[0] if str(error).strip() else ""
  text = text.split(" See full TensorStore details")[0]
  text = f"{type(error).__name__}: {text}" if text else type(error).__name__
  return text if len(text) <= 240 else text[:237] + "..."


def _quiet_orbax_coroutines() -> None:
  """A failed restore leaves Orbax's other read coroutines with exceptions nobody retrieves; when they
  are collected Python prints each with a page of TensorStore spec ("Exception ignored in:
  <coroutine ...>"). The failure is already reported once, with its path: drop those echoes only."""
  previous = sys.unraisablehook
  if getattr(previous, "spt_jax_quiet", False):
    return

  def hook(unraisable):
    code = getattr(unraisable.object, "cr_code", None)
    if code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename:
      return
    previous(unraisable)
  hook.spt_jax_quiet = True
  sys.unraisablehook = hook


@contextlib.contextmanager
def _echoes_of_failed_reads_dropped(settle_s: float = 0.3):
  """When a read fails, TensorStore's callbacks for the reads it abandoned still arrive, on their
  own threads, into the event loop Orbax has closed, and Python prints a traceback for each. The
  failure itself is reported once, with its path; what the read printed is kept only if it
  succeeded."""
  captured = io.StringIO()
  original = sys.stderr
  sys.stderr = captured
  try:
    yield
  except BaseException:
    time.sleep(settle_s)  # Let the stray callbacks land while they are still captured.
    raise
  else:
    original.write(captured.getvalue())
  finally:
    sys.stderr = original


# ------------------------------------------------------------------------------------- Checksums
def host_copy(x) -> np.ndarray:
  """One host copy of a (replicated) leaf; this process's replica on a multi-process mesh."""
  if isinstance(x, jax.Array):
    return np.asarray(x.addressable_data(0) if x.is_fully_replicated else jax.device_get(x))
  return np.asarray(x)


def leaf_checksums(host_tree) -> dict[str, int]:
  """CRC-32 of each leaf's bytes (plus its shape and dtype), keyed by its '/'-joined path: the same
  whether a node is a named tuple (as optax builds its state) or the dict or list Orbax restores it
  as without a target."""
  out = {}
  for path, leaf in tree.flatten(host_tree).items():
    leaf = np.ascontiguousarray(leaf)
    crc = zlib.crc32(f"{leaf.shape}{leaf.dtype.name}".encode())
    out[path] = zlib.crc32(leaf.reshape(-1).view(np.uint8), crc)
  return out


def _json_checksum(obj) -> int:
  return zlib.crc32(json.dumps(obj, sort_keys=True).encode())


def _checksums(arrays: dict[str, Any], meta: dict) -> dict:
  return {"arrays": {name: leaf_checksums(t) for name, t in arrays.items()},
          "meta": _json_checksum(meta)}


def verify_leaves(host_tree, expected: dict[str, int], where: str) -> None:
  """Raises DamagedCheckpointError naming the first leaves whose bytes differ from the saved CRCs."""
  got = leaf_checksums(host_tree)
  if got.keys() != expected.keys():
    raise DamagedCheckpointError(where, "its arrays do not match the checksummed tree")
  bad = [p for p in got if got[p] != expected[p]]
  if bad:
    raise DamagedCheckpointError(
        where, f"checksum mismatch in {len(bad)} array(s), e.g. {', '.join(bad[:3])}")


# Items are read with their handlers, not a Checkpointer: a Checkpointer expects the step's own
# _CHECKPOINT_METADATA inside the item directory and warns on every read that it is missing.
def _read_json_item(directory: str):
  return ocp.JsonCheckpointHandler().restore(workdir_path(directory))


def _join(*parts) -> str:
  """os.path.join for local paths and URLs alike (it never normalises, so gs:// stays gs://)."""
  return os.fspath(epath.Path(os.fspath(parts[0])).joinpath(*map(str, parts[1:])))


def _isdir(path) -> bool:
  return workdir_path(path).is_dir()


def read_checksums(step_dir: str) -> dict | None:
  """The checksums item of a step directory; None when it has none (not written by spt_jax)."""
  path = _join(step_dir, CHECKSUMS)
  if not _isdir(path):
    return None
  try:
    sums = _read_json_item(path)
    if not isinstance(sums, dict) or not isinstance(sums.get("arrays"), dict):
      raise ValueError("not a checksums record")
    return sums
  except Exception as e:  # Any unreadable record is damage, whatever Orbax raises.
    raise DamagedCheckpointError(path, f"unreadable checksums ({_short(e)})") from None


# ------------------------------------------------------------------------------------- Items
def _manager(directory: str, *, keep: int | None = None) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                         cleanup_tmp_directories=True)
  return ocp.CheckpointManager(workdir_path(directory), options=options)


def item_abstract(item_dir: str, sharding=None) -> Any:
  """ShapeDtypeStructs of a saved StandardCheckpointer item, read from its metadata (no array I/O)."""
  if not _isdir(item_dir):
    raise FileNotFoundError(f"No checkpoint item at {item_dir}.")
  try:
    meta = ocp.StandardCheckpointHandler().metadata(workdir_path(item_dir)).tree
  except Exception as e:  # Orbax raises several types for "not a checkpoint"; name the path instead.
    raise DamagedCheckpointError(item_dir, f"not a readable Orbax checkpoint item ({_short(e)})"
                                 ) from None
  if sharding is None:
    sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  return jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype, sharding=sharding),
                      meta, is_leaf=lambda m: hasattr(m, "shape") and hasattr(m, "dtype"))


def restore_item(item_dir: str, abstract=None, sharding=None):
  """Restores one params-like item; without `abstract` the saved shapes/dtypes are used. An item
  written by spt_jax is verified against its step's checksums (DamagedCheckpointError on damage)."""
  item = workdir_path(item_dir)
  sums = read_checksums(os.fspath(item.parent))
  if abstract is None:
    abstract = item_abstract(item_dir, sharding)
  try:
    restored = ocp.StandardCheckpointHandler().restore(item, args=ocp.args.StandardRestore(abstract))
  except Exception as e:
    raise DamagedCheckpointError(item_dir, f"unreadable ({_short(e)})") from None
  name = item.name
  if sums is not None and name in sums["arrays"]:
    verify_leaves(jax.tree.map(host_copy, restored), sums["arrays"][name], item_dir)
  return restored


def _step_dirs(directory: str) -> list[int]:
  """The finalized step directories under `directory` (an unfinished one on an object store has
  its final name already)."""
  path = workdir_path(directory)
  if not path.is_dir():
    return []
  return sorted(int(p.name) for p in path.iterdir()
                if p.name.isdigit() and ocp.path.step.is_path_finalized(p))


class DiskFullError(OSError):
  """A checkpoint save that failed for want of space: nothing committed is lost."""


def _is_disk_full(error: BaseException) -> bool:
  """Whether `error`, or anything in its chain, is the OS saying the device is full (Orbax and
  TensorStore pass it on as their own exceptions, with errno 28's text inside)."""
  seen = set()
  while error is not None and id(error) not in seen:
    seen.add(id(error))
    if isinstance(error, OSError) and error.errno == errno.ENOSPC:
      return True
    if "No space left on device" in str(error) or "ENOSPC" in str(error):
      return True
    error = error.__cause__ or error.__context__
  return False


class PhaseCheckpoints:
  """The latest (resumable) and best (selected on validation) checkpoints of one phase."""

  def __init__(self, directory: str):
    self.directory = directory
    self._latest = _manager(_join(directory, LATEST), keep=KEEP_LATEST)
    # Best and init are pruned here, not by Orbax: see _prune_best.
    self._best = _manager(_join(directory, BEST))
    self._init = _manager(_join(directory, INIT))
    self._best_named: dict[int, int | None] = {}  # latest step → the best step its meta names
    self._current_best: int | None = None

  def _path(self, kind: str, step: int) -> str:
    return _join(self.directory, kind, step)

  @contextlib.contextmanager
  def _saving(self):
    """A save (or the wait for one) that runs out of disk is one message that says what matters:
    where, that the last committed checkpoint is intact, and that the same command resumes."""
    try:
      yield
    except Exception as e:
      if not _is_disk_full(e) or isinstance(e, DiskFullError):
        raise
      committed = self._latest.latest_step()
      where = (f"step {committed}" if committed is not None
               else "none yet (the phase starts again from its beginning)")
      raise DiskFullError(
          errno.ENOSPC, f"{self.directory}: no space left on the device while saving a "
          f"checkpoint. Nothing was lost: the last committed checkpoint is "
          f"{where}, and the same command resumes from it once space is freed.") from None

  # ---- latest: full training state
  def latest_steps(self) -> list[int]:
    return sorted(self._latest.all_steps())

  def latest_step(self) -> int | None:
    return self._latest.latest_step()

  def latest_params_dir(self) -> str:
    return _join(self._path(LATEST, self.latest_step()), "params")

  def save_latest(self, step: int, params, opt_state, meta: dict) -> None:
    # One save at a time across this phase's managers: Orbax names its multi-process "async write
    # complete" barrier after the step, so a `best` and a `latest` save of one step in flight
    # together collide ("barrier already ongoing") and hang.
    self.wait()
    arrays = {"params": jax.tree.map(host_copy, params),
              "opt_state": jax.tree.map(host_copy, opt_state)}
    self._clear_stale(LATEST, step)
    with self._saving():
      self._latest.save(step, args=ocp.args.Composite(
          params=ocp.args.StandardSave(arrays["params"]),
          opt_state=ocp.args.StandardSave(arrays["opt_state"]), meta=ocp.args.JsonSave(meta),
          checksums=ocp.args.JsonSave(_checksums(arrays, meta))), force=True)
    self._best_named[step] = meta["best_step"]
    faults.point("latest_saving", step)

  def _clear_stale(self, kind: str, step: int) -> None:
    """A step directory that exists when this run saves that step is what a kill left of an earlier
    attempt (e.g. a deletion cut short): the run recomputes it, so it goes, instead of failing the
    save with Orbax's StepAlreadyExistsError."""
    path = self._path(kind, step)
    if workdir_path(path).exists():
      logging.warning("Replacing %s, left by an interrupted run; this run recomputes it.", path)
      if jax.process_index() == 0:
        workdir_path(path).rmtree()
      if jax.process_count() > 1:
        ocp.multihost.sync_global_processes(f"spt_jax_clear_{kind}_{step}")
      (self._latest if kind == LATEST else self._best).reload()

  def _read_latest(self, step: int, params, opt_state):
    where = self._path(LATEST, step)
    sums = read_checksums(where)
    if sums is None:
      raise DamagedCheckpointError(where, "no checksums item (unverifiable)")
    meta_dir = _join(where, "meta")
    try:
      meta = _read_json_item(meta_dir)
    except Exception as e:
      raise DamagedCheckpointError(meta_dir, f"unreadable ({_short(e)})") from None
    if not isinstance(meta, dict):
      raise DamagedCheckpointError(meta_dir, "not a JSON object")
    missing = [k for k in LATEST_META_KEYS if k not in meta]
    if missing:
      raise DamagedCheckpointError(meta_dir, f"lacks {missing}")
    if _json_checksum(meta) != sums.get("meta"):
      raise DamagedCheckpointError(meta_dir, "checksum mismatch")
    if meta["step"] != step:
      raise DamagedCheckpointError(meta_dir, f"says step {meta['step']}, its directory {step}")
    # A shape mismatch is a config problem, not damage: it is raised as it is.
    tree.check_compatible(params, item_abstract(_join(where, "params")),
                          expected_name="the configured model", found_name=f"checkpoint {where}")
    abstract = lambda t: jax.tree.map(ocp.utils.to_shape_dtype_struct, t)
    try:
      restored = self._latest.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore(abstract(params)),
          opt_state=ocp.args.StandardRestore(abstract(opt_state))))
    except Exception as e:
      raise DamagedCheckpointError(where, f"unreadable ({_short(e)})") from None
    for name in ("params", "opt_state"):
      verify_leaves(jax.tree.map(host_copy, restored[name]), sums["arrays"].get(name, {}),
                    _join(where, name))
    return restored["params"], restored["opt_state"], meta

  def restore_latest(self, params, opt_state):
    """The newest latest checkpoint that verifies, restored onto the shardings of the given
    (possibly abstract) trees after a strict shape check. Damaged ones are reported and moved to
    `checkpoints/damaged/`; best steps newer than the restored one are uncommitted and deleted."""
    damaged = []
    for step in reversed(self.latest_steps()):
      try:
        with _echoes_of_failed_reads_dropped():
          params_, opt_state_, meta = self._read_latest(step, params, opt_state)
      except DamagedCheckpointError as e:
        logging.warning("Checkpoint %s is damaged: %s; trying the previous one.", e.path, e.reason)
        damaged.append((step, e))
        continue
      self._quarantine(step for step, _ in damaged)
      self._best_named = {s: None for s in self.latest_steps() if s != step}
      self._best_named[step] = meta["best_step"]
      self._current_best = meta["best_step"]
      self.discard_uncommitted(step)
      return step, params_, opt_state_, meta
    lines = "\n  ".join(f"{e.path}: {e.reason}" for _, e in damaged)
    raise DamagedCheckpointError(
        _join(self.directory, LATEST),
        f"no intact latest checkpoint to resume from:\n  {lines}\nTo start this phase over, move "
        f"{os.fspath(epath.Path(self.directory).parent)} away (or use a new --workdir) and run the "
        f"same command.")

  def _quarantine(self, steps) -> None:
    """Moves damaged latest steps aside: kept for inspection, never in the way of a new save."""
    steps = list(steps)
    if not steps:
      return
    if jax.process_index() == 0:
      damaged = workdir_path(self.directory) / DAMAGED
      damaged.mkdir(parents=True, exist_ok=True)
      for step in steps:
        target = damaged / f"latest_{step}"
        suffix = 1
        while target.exists():
          target, suffix = damaged / f"latest_{step}.{suffix}", suffix + 1
        workdir_path(self._path(LATEST, step)).rename(target)
        logging.warning("Moved the damaged checkpoint %s to %s.", self._path(LATEST, step), target)
    if jax.process_count() > 1:
      ocp.multihost.sync_global_processes("spt_jax_quarantine")
    self._latest.reload()

  def discard_uncommitted(self, step: int) -> None:
    """Deletes best checkpoints newer than `step`, the state a run (re)starts from: no kept latest
    checkpoint names them, and the run recomputes them bit-identically."""
    for s in self._best.all_steps():
      if s > step:
        logging.warning("Discarding best checkpoint %s: it is newer than the state this run "
                        "starts from (step %d), which recomputes it.", self._path(BEST, s), step)
        self._best.delete(s)

  # ---- best: parameters only
  def best(self, step: int) -> dict:
    """The validation metrics saved with best checkpoint `step`."""
    where = _join(self._path(BEST, step), "meta")
    try:
      meta = _read_json_item(where)
    except Exception as e:
      raise DamagedCheckpointError(where, f"unreadable ({_short(e)})") from None
    sums = read_checksums(self._path(BEST, step))
    if sums is not None and _json_checksum(meta) != sums.get("meta"):
      raise DamagedCheckpointError(where, "checksum mismatch")
    return meta

  def best_params_dir(self, step: int) -> str:
    return _join(self._path(BEST, step), "params")

  def save_best(self, step: int, params, metrics: dict) -> None:
    self.wait()
    meta = {k: float(v) for k, v in metrics.items()}
    arrays = {"params": jax.tree.map(host_copy, params)}
    self._clear_stale(BEST, step)
    with self._saving():
      self._best.save(step, args=ocp.args.Composite(
          params=ocp.args.StandardSave(arrays["params"]), meta=ocp.args.JsonSave(meta),
          checksums=ocp.args.JsonSave(_checksums(arrays, meta))), force=True)
    self._current_best = step

  def _prune_best(self) -> None:
    """Deletes the best checkpoints that no kept latest checkpoint names and that are not the
    current best: after this, a kill at any point leaves the best of every kept state on disk."""
    kept = set(self.latest_steps())
    if self._current_best is None or any(self._best_named.get(s) is None for s in kept):
      return  # Nothing saved here yet, or a kept latest checkpoint whose meta was not read.
    named = {self._best_named[s] for s in kept}
    for s in self._best.all_steps():
      if s not in named and s != self._current_best:
        self._best.delete(s)

  # ---- init: the starting point (fresh, handed off or hybrid), for inspection and exact comparisons
  def has_init(self) -> bool:
    return self._init.latest_step() is not None

  def save_init(self, params, meta: dict) -> None:
    if not self.has_init():
      self.wait()
      arrays = {"params": jax.tree.map(host_copy, params)}
      with self._saving():
        self._init.save(0, args=ocp.args.Composite(
            params=ocp.args.StandardSave(arrays["params"]), meta=ocp.args.JsonSave(meta),
            checksums=ocp.args.JsonSave(_checksums(arrays, meta))), force=True)

  def existing(self) -> list[str]:
    """The best and init step directories (what a phase starting from step 0 sits next to)."""
    return [self._path(k, s) for k in (BEST, INIT)
            for s in _step_dirs(_join(self.directory, k))]

  def _managers(self):
    return (self._latest, self._best, self._init)

  def wait_for_saves(self) -> None:
    with self._saving():
      for m in self._managers():
        m.wait_until_finished()

  def wait(self) -> None:
    """Waits for every save in flight, then prunes the best checkpoints they made unnecessary."""
    self.wait_for_saves()
    self._prune_best()

  def close(self) -> None:
    self.wait()
    for m in self._managers():
      m.close()


def resolve_params_dir(path: str, checkpoint: str = BEST) -> str:
  """Finds a params item from a phase directory, a checkpoints directory, a step directory or the item.

  `checkpoint` is `best`, `latest`, `init` or a step number; it applies when `path` is a phase directory.
  """
  check_checkpoint_name(checkpoint)
  if not workdir_path(path).exists():
    raise FileNotFoundError(f"Checkpoint path {path} does not exist.")
  candidates = [path, _join(path, "params")]
  if _isdir(_join(path, "checkpoints")):
    path = _join(path, "checkpoints")
  kind = checkpoint if checkpoint in KINDS else LATEST
  if _isdir(_join(path, kind)):
    steps = _step_dirs(_join(path, kind))
    if checkpoint not in KINDS:
      wanted = int(checkpoint)
      # A specific step may survive in any of the directories.
      for k in KINDS:
        d = _join(path, k, wanted, "params")
        if _isdir(d):
          return d
      raise FileNotFoundError(f"No step {wanted} under {path} (latest: {steps}).")
    if not steps:
      raise FileNotFoundError(f"No finished {kind} checkpoint under {_join(path, kind)}.")
    candidates.insert(0, _join(path, kind, steps[-1], "params"))
  for c in candidates:
    if any(workdir_path(_join(c, marker)).is_file()
           for marker in ("_METADATA", "_sharding", "manifest.ocdbt")):
      return c
  raise ValueError(
      f"{path} is not an Orbax parameter checkpoint: expected a phase directory (with checkpoints/"
      f"{{best,latest}}/<step>/params), a step directory with params/, or a params item directory.")


def check_checkpoint_name(checkpoint) -> None:
  if str(checkpoint) not in KINDS and not str(checkpoint).isdigit():
    raise ValueError(f"checkpoint={checkpoint!r} must be one of {KINDS} or a step number.")
