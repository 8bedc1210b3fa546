"""Workdir files: metrics to `metrics.jsonl` (one JSON object per line), TensorBoard event files,
JSON and text files; and the paths they live at.

A workdir is a local directory or any etils.epath URL (`gs://bucket/run`): every file of it is
reached through `epath`, never `open()` or `os.path`, and a URL is never made absolute
(`os.path.abspath("gs://b/x")` is the local path `$PWD/gs:/b/x`). Orbax is handed the same paths.

Optionally (`enable_wandb`, main.py's --wandb_project) the same scalars go to Weights & Biases: one
W&B run per phase, its id derived from the phase directory, so a resumed phase continues the same
W&B run; values it logged past the restored step before a kill are logged again with the same
steps and values (the resumed run is bit-identical), which W&B keeps once. Test records, written
at the best step after the last step, go to the W&B run's summary.

Only process 0 writes. On resume the JSON lines past the restored step, and any test record (written
only as a phase ends), are dropped first: the resumed run recomputes them bit-identically, and the file
then reads as if the run had never stopped. TensorBoard is told the same (`purge_step`), and its events
are flushed at every checkpoint, so a kill loses none that a resumed run would not rewrite.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import tempfile

import jax
from absl import logging
from etils import epath

_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(path) -> bool:
  """Whether `path` is a URL (`gs://...`, `s3://...`) rather than a local path."""
  return bool(_URL.match(os.fspath(path)))


def workdir_path(path) -> epath.Path:
  """`path` as an epath.Path: a URL as it is, a local path made absolute (Orbax requires it).
  A URL of a scheme epath has no backend for is a ValueError naming it."""
  path = os.fspath(path)
  if is_url(path):
    try:
      return epath.Path(path)
    except KeyError:  # etils' registry of URL schemes
      raise ValueError(f"{path}: etils.epath does not reach {path.split(':', 1)[0]}:// URLs "
                       f"(it does gs://, s3://, az://, hf://).") from None
  return epath.Path(os.path.abspath(os.path.expanduser(path)))


def write_text(path, text: str) -> None:
  """Writes `text` to `path` whole, process 0 only: a local file through a temporary file and a
  rename; an object store's object directly, since its objects appear whole or not at all (and a
  rename there is a copy)."""
  if jax.process_index() != 0:
    return
  path = workdir_path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  if is_url(path):
    path.write_text(text)
    return
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_text(text)
  tmp.replace(path)


def write_json(path, obj) -> None:
  """Atomic JSON write, process 0 only."""
  write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def read_json(path):
  return json.loads(workdir_path(path).read_text())


_tensorboard_warned = False


def _summary_writer(logdir: epath.Path, purge_step: int):
  """tensorboardX's writer for `logdir`, or None (with one warning per process) where it cannot
  write: metrics.jsonl holds every value either way."""
  from tensorboardX import SummaryWriter, record_writer  # Imported lazily: it pulls in protobuf.
  global _tensorboard_warned
  if not is_url(logdir):
    return SummaryWriter(os.fspath(logdir), purge_step=purge_step)
  scheme = os.fspath(logdir).split(":", 1)[0]
  # tensorboardX writes URLs through its own per-scheme writers (gs:// with google-cloud-storage,
  # s3:// with boto3); any other scheme it would os.makedirs as a local directory named 'scheme:'.
  needs = {"gs": ("GCS_ENABLED", "google-cloud-storage"), "s3": ("S3_ENABLED", "boto3")}
  if scheme not in record_writer.REGISTERED_FACTORIES:
    reason = f"tensorboardX has no writer for {scheme}://"
  elif scheme in needs and not getattr(record_writer, needs[scheme][0], False):
    reason = f"tensorboardX writes {scheme}:// with {needs[scheme][1]}, which is not installed"
  else:
    try:
      return SummaryWriter(os.fspath(logdir), purge_step=purge_step)
    except Exception as e:  # noqa: BLE001 - a missing client library or credentials
      reason = f"{type(e).__name__}: {e}"
  if not _tensorboard_warned:
    _tensorboard_warned = True
    logging.warning("TensorBoard events are not written to %s (%s; pip install -e '.[gcs]' adds "
                    "gs://'s); metrics.jsonl has every value.", logdir, reason)
  return None


_wandb_settings: dict | None = None


def enable_wandb(project: str, *, entity: str = "", mode: str = "online") -> None:
  """Every MetricWriter of this process also logs to W&B (`pip install -e '.[wandb]'`). Checked
  here, before any run starts: an unknown mode or a missing package is one error."""
  global _wandb_settings
  if mode not in ("online", "offline"):
    raise ValueError(f"--wandb_mode={mode!r} must be 'online' or 'offline'.")
  try:
    import wandb  # noqa: F401 - the optional extra
  except ImportError:
    raise ValueError("--wandb_project needs W&B: pip install -e '.[wandb]'.") from None
  _wandb_settings = {"project": project, "entity": entity or None, "mode": mode}


def disable_wandb() -> None:
  global _wandb_settings
  _wandb_settings = None


def wandb_run_id(directory) -> str:
  """The W&B run id of a phase directory: the same for every attempt, resumed or not."""
  return hashlib.blake2b(os.fspath(workdir_path(directory)).encode(), digest_size=8).hexdigest()


def _wandb_run(directory: epath.Path, config: dict | None):
  import wandb
  name = f"{directory.parent.name}/{directory.name}"
  # W&B keeps its own files locally: next to the phase on a local workdir, in a temporary
  # directory for a URL one (the run's files there are W&B's copies, not the workdir's).
  local = (os.fspath(directory) if not is_url(directory)
           else tempfile.mkdtemp(prefix="spt_jax_wandb_"))
  return wandb.init(project=_wandb_settings["project"], entity=_wandb_settings["entity"],
                    mode=_wandb_settings["mode"], id=wandb_run_id(directory), resume="allow",
                    name=name, group=directory.parent.name, dir=local, config=config,
                    reinit="finish_previous")


class MetricWriter:

  def __init__(self, directory, *, resume_step: int = 0, config: dict | None = None):
    self.enabled = jax.process_index() == 0
    self.directory = workdir_path(directory)
    self.path = os.fspath(self.directory / "metrics.jsonl")
    # An object store has no append: there the file's lines are kept here and the whole file is
    # rewritten at every flush (each checkpoint) and at the end.
    self._remote = is_url(self.directory)
    self._lines: list[str] = []
    self._tb = self._wandb = None
    if not self.enabled:
      return
    self.directory.mkdir(parents=True, exist_ok=True)
    self._truncate_after(resume_step)
    self._tb = _summary_writer(self.directory / "tensorboard", purge_step=resume_step + 1)
    if _wandb_settings is not None:
      self._wandb = _wandb_run(self.directory, config)

  def _truncate_after(self, step: int) -> None:
    path = epath.Path(self.path)
    if not path.exists():
      return
    lines = [line + "\n" for line in path.read_text().splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, start=1):
      try:
        records.append((line, json.loads(line)))
      except json.JSONDecodeError:
        if number < len(lines):
          raise ValueError(f"{self.path}:{number}: not a JSON record; the metrics file is damaged "
                           f"(use a new --workdir).") from None
        # The last line of a run killed mid-write: the resumed run rewrites it.
    kept = [line for line, r in records if r.get("step", 0) <= step and r.get("split") != "test"]
    if self._remote:
      self._lines = kept
    if len(kept) != len(lines):
      write_text(path, "".join(kept))

  def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "split": split}
    record.update({k: (float(v) if math.isfinite(float(v)) else str(float(v)))
                   for k, v in metrics.items()})
    line = json.dumps(record) + "\n"
    if self._remote:
      self._lines.append(line)
    else:
      with epath.Path(self.path).open("a") as f:
        f.write(line)
    if self._tb is not None:
      for k, v in metrics.items():
        self._tb.add_scalar(f"{split}/{k}", float(v), int(step))
    if self._wandb is not None:
      values = {f"{split}/{k}": float(v) for k, v in metrics.items()}
      if split == "test":  # the best checkpoint's, logged last at an earlier step
        self._wandb.summary.update(values)
      else:
        self._wandb.log(values, step=int(step))

  def flush(self) -> None:
    if self.enabled and self._remote:
      write_text(self.path, "".join(self._lines))
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    if self.enabled and self._remote:
      write_text(self.path, "".join(self._lines))
    if self._tb is not None:
      self._tb.close()
    if self._wandb is not None:
      self._wandb.finish()
      self._wandb = None
