"""Metrics to `metrics.jsonl` (one JSON object per line) and TensorBoard event files.

Only process 0 writes. On resume the JSON lines past the restored step, and any test record (written
only as a phase ends), are dropped first: the resumed run recomputes them bit-identically, and the file
then reads as if the run had never stopped. TensorBoard is told the same (`purge_step`), and its events
are flushed at every checkpoint, so a kill loses none that a resumed run would not rewrite.
"""
from __future__ import annotations

import json
import math
import os

import jax


class MetricWriter:

  def __init__(self, directory: str, *, resume_step: int = 0):
    self.enabled = jax.process_index() == 0
    self.path = os.path.join(directory, "metrics.jsonl")
    self._tb = None
    if not self.enabled:
      return
    os.makedirs(directory, exist_ok=True)
    self._truncate_after(resume_step)
    from tensorboardX import SummaryWriter  # Imported lazily: it pulls in protobuf.
    self._tb = SummaryWriter(os.path.join(directory, "tensorboard"), purge_step=resume_step + 1)

  def _truncate_after(self, step: int) -> None:
    if not os.path.exists(self.path):
      return
    with open(self.path) as f:
      lines = [line for line in f if line.strip()]
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
    if len(kept) == len(lines):
      return
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      f.writelines(kept)
    os.replace(tmp, self.path)

  def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
    if not self.enabled:
      return
    record = {"step": int(step), "split": split}
    record.update({k: (float(v) if math.isfinite(float(v)) else str(float(v)))
                   for k, v in metrics.items()})
    with open(self.path, "a") as f:
      f.write(json.dumps(record) + "\n")
    for k, v in metrics.items():
      self._tb.add_scalar(f"{split}/{k}", float(v), int(step))

  def flush(self) -> None:
    if self._tb is not None:
      self._tb.flush()

  def close(self) -> None:
    if self._tb is not None:
      self._tb.close()


def write_json(path: str, obj) -> None:
  """Atomic JSON write (temporary file + rename), process 0 only."""
  if jax.process_index() != 0:
    return
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = path + ".tmp"
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2, sort_keys=True)
    f.write("\n")
  os.replace(tmp, path)
