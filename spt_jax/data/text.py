"""IMDB (LRA "Text"): byte-level movie reviews from TFDS `imdb_reviews`, read without TensorFlow.

LRA trains on `train` and evaluates on `test` for both validation and test (`imdb_reviews` has no
validation split), so `val` here is the TFDS `test` split. Each review's UTF-8 bytes become
`BYTE_VOCAB` ids (byte b -> 3 + b), truncated to `max_length` and padded with PAD_ID.

TFDS datasets are read in either of the formats `tfds build` writes, without TensorFlow: TFRecord
(its default, as most users have `~/tensorflow_datasets/imdb_reviews` and `cifar10`) through
`tfrecord.TfdsTFRecordSource` (the framing read and CRC-checked here, the examples deserialised by
TFDS's own numpy parser), and `array_record` through `builder.as_data_source`. Loading never
downloads: a dataset that is not prepared raises FileNotFoundError saying how to prepare it
(`python -m spt_jax.data.prepare --task=text --data_dir=DIR` checks one). The TFDS helpers here are
shared with `image.py`, the check of a TFDS dataset (`TfdsDataset`) included.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
from typing import Any, Callable, Sequence

from absl import logging
import ml_collections
import numpy as np

from spt_jax.data import checks, tfrecord
from spt_jax.data.vocab import BYTE_VOCAB, PAD_ID
from spt_jax.data.base import LRA_SMOKE_MODEL, Task, TaskData, lra_smoke_phase

TFDS_NAME = "imdb_reviews"
SPLITS = ("train", "val", "test")
# LRA validates and tests on the same TFDS split.
TFDS_SPLITS = {"train": "train", "val": "test", "test": "test"}
DEFAULT_MAX_LENGTH = 4096
NUM_CLASSES = 2

# Id of byte value 0; byte b has id FIRST_BYTE_ID + b.
FIRST_BYTE_ID = BYTE_VOCAB.id_of("<0x00>")
# Documents per vectorised conversion: bounds the temporaries to a few tens of MB.
_CHUNK_ROWS = 4096


def encode_bytes(docs: Sequence[bytes], max_length: int) -> np.ndarray:
  """BYTE_VOCAB ids of each document, truncated to max_length: uint16 [len(docs), max_length]."""
  if max_length < 1:
    raise ValueError(f"max_length must be >= 1, got {max_length}.")
  out = np.full((len(docs), max_length), PAD_ID, np.uint16)
  for begin in range(0, len(docs), _CHUNK_ROWS):
    chunk = [doc[:max_length] for doc in docs[begin:begin + _CHUNK_ROWS]]
    counts = np.fromiter(map(len, chunk), np.int64, count=len(chunk))
    ids = np.frombuffer(b"".join(chunk), np.uint8).astype(np.uint16) + FIRST_BYTE_ID
    # A boolean mask assignment fills row-major order, which is exactly the order of ids.
    filled = np.arange(max_length) < counts[:, None]
    out[begin:begin + len(chunk)][filled] = ids
  return out


def tfds_builder(name: str, data_dir: str | None = None) -> Any:
  """tfds.builder(name, data_dir=...), without the empty directory TFDS leaves in /tmp each time
  it builds one for a directory where the dataset is not prepared (`DatasetInfo.
  initialize_from_bucket` makes a `tempfile.mkdtemp("tfds")` it never removes): TFDS gets a
  private temporary root for the call, removed after it."""
  import tensorflow_datasets as tfds

  with tempfile.TemporaryDirectory(prefix="spt_jax_tfds_") as private:
    saved, tempfile.tempdir = tempfile.tempdir, private
    try:
      return tfds.builder(name, data_dir=data_dir)
    finally:
      tempfile.tempdir = saved


def open_tfds_split(name: str, split: str, data_dir: str | None = None) -> Any:
  """Random-access view of a prepared TFDS split: `len(source)`, `source[i]` -> dict of numpy.

  data_dir defaults to TFDS's own default ($TFDS_DATA_DIR, else ~/tensorflow_datasets). A dataset
  prepared as array_record is read through TFDS's data source, one prepared as TFRecord (and not
  also as array_record) through spt_jax's TFRecord reader.
  """
  # Imported here so that tasks which never touch TFDS don't pay for importing it.
  import tensorflow_datasets as tfds

  if data_dir is not None:
    data_dir = os.path.expanduser(data_dir)
  builder = tfds_builder(name, data_dir=data_dir)
  if builder.is_prepared() and _reads_as_tfrecord(builder):
    builder.info.set_file_format(tfds.core.FileFormat.TFRECORD, override=True,
                                 override_if_initialized=True)
    try:
      return tfrecord.TfdsTFRecordSource(builder.info, split)
    except FileNotFoundError as e:
      raise FileNotFoundError(
          f"TFDS dataset {name!r} at {builder.data_dir} is prepared in the tfrecord format, but "
          f"{e} Copy the dataset again, or convert a complete copy with `tfds convert_format "
          f"--dataset_dir={builder.data_dir} --out_file_format=array_record`.") from None
  try:
    # Never downloads (tfds.data_source does by default): there is no network here, and preparing
    # needs TensorFlow (the tfds CLI imports it; CIFAR-10's PNG encoding runs on it).
    return builder.as_data_source(split=split)
  except Exception as e:
    # TFDS reports a missing or unreadable dataset with varied exception types (KeyError,
    # NotImplementedError, ...), so the builder's state decides whether this is our case.
    reason = _not_readable_reason(builder)
    if reason is None:
      raise
    raise FileNotFoundError(
        f"TFDS dataset {name!r} cannot be read from {builder.data_dir}: {reason}. Reading needs "
        f"neither network nor TensorFlow, but preparing does: on a machine with network and "
        f"TensorFlow run `tfds build {name} --data_dir=<dir>` (TFRecord, its default) or "
        f"`tfds build {name} --file_format=array_record --data_dir=<dir>`, copy <dir> here and "
        f"pass it as data_dir (`python -m spt_jax.data.prepare --task=<task> --data_dir=<dir>` "
        f"checks it).") from e


def _reads_as_tfrecord(builder: Any) -> bool:
  """Prepared in TFRecord and in no format TFDS's own data sources read (array_record first)."""
  import tensorflow_datasets as tfds

  formats = builder.info.available_file_formats()
  return (tfds.core.FileFormat.TFRECORD in formats
          and not formats & tfds.core.FileFormat.with_random_access())


def _not_readable_reason(builder: Any) -> str | None:
  import tensorflow_datasets as tfds

  if not builder.is_prepared():
    return "it is not prepared there"
  file_format = builder.info.file_format
  readable = tfds.core.FileFormat.with_random_access() | {tfds.core.FileFormat.TFRECORD}
  if file_format not in readable:
    return (f"it is prepared in the {file_format.value} format, which spt_jax does not read (an "
            f"existing copy converts with `tfds convert_format --dataset_dir={builder.data_dir} "
            f"--out_file_format=array_record`)")
  return None


def tfds_root(data_dir: str, name: str) -> str | None:
  """The TFDS data_dir holding `name`/: data_dir, a directory above it (if data_dir is inside the
  dataset) or below it; None if none has it."""
  parts = os.path.abspath(data_dir).split(os.sep)
  if name in parts:
    return os.sep.join(parts[:len(parts) - 1 - parts[::-1].index(name)]) or os.sep
  roots = checks.find_dirs(data_dir, name, max_depth=2)
  return roots[0] if roots else None


# eq=False: hashed by identity, as the Task holding its bound `check` must be hashable.
@dataclasses.dataclass(frozen=True, eq=False)
class TfdsDataset:
  """A TFDS dataset a task reads, as its check (`python -m spt_jax.data.prepare`) sees it."""
  title: str  # The task, as the report names it.
  name: str
  host: tuple[str, int]  # Where TFDS's builder downloads from: probed before `tfds build` runs.
  full_sizes: dict[str, int]  # Examples per TFDS split of the whole dataset; fewer is a note.
  splits: dict[str, tuple[str, str]]  # {split checked: (the TFDS split read for it, what it is)}
  load_split: Callable[[str, str], dict]  # (split, TFDS data_dir) → arrays, as the loader reads.
  num_classes: int

  def check(self, data_dir: str, *, build: Callable | None = None, **_) -> checks.Report:
    """Every split read whole through the loader (every TFRecord CRC checked). A dataset not
    prepared under data_dir is built there by build(self, data_dir) → None, or else the reason it
    cannot be (a string), which the report gives with the command to run elsewhere."""
    name = self.name
    report = checks.Report(f"{self.title} (TFDS {name}) under {data_dir}")
    root = tfds_root(data_dir, name)
    if root is None or not tfds_builder(name, data_dir=root).is_prepared():
      why = build(self, data_dir) if build else "building is off"
      if why is not None:
        report.add(checks.ERROR, f"{os.path.join(data_dir, name)}: TFDS {name} is not prepared "
                                 f"there, and it cannot be built here: {why}. On a machine with "
                                 f"network run `pip install tensorflow tensorflow-datasets && "
                                 f"tfds build {name} --data_dir=<dir>`, copy <dir>/{name} into "
                                 f"{data_dir}, and run this check again.")
        return report
      report.add(checks.NOTE, f"building TFDS {name} into {data_dir} (`tfds build {name} "
                              f"--data_dir={data_dir}`)")
      root = data_dir
    builder = tfds_builder(name, data_dir=root)
    info = builder.info
    formats = sorted(f.value for f in info.available_file_formats()) or ["unset (TFRecord)"]
    report.add(checks.NOTE, f"found {builder.data_dir}: version {info.version}, "
                            f"format {', '.join(formats)}")
    seen = set()
    for split, (tfds_split, what) in self.splits.items():
      # A TFDS split's size is noted once, with the first split cut from it.
      first = tfds_split not in seen
      seen.add(tfds_split)
      try:
        arrays = self.load_split(split, root)
      except (FileNotFoundError, ValueError, tfrecord.TFRecordError) as e:
        report.add(checks.ERROR, str(e))
        continue
      counts = np.bincount(arrays["labels"], minlength=self.num_classes)
      report.add(checks.OK if len(arrays["labels"]) else checks.ERROR,
                 f"{split}: {len(arrays['labels']):,} examples from {what}, every record read "
                 f"(labels: {', '.join(map(str, counts.tolist()))})")
      full = self.full_sizes[tfds_split]
      total = info.splits[tfds_split].num_examples
      if first and total != full:
        report.add(checks.NOTE, f"TFDS {name} {tfds_split}: {total:,} examples; the full dataset "
                                f"has {full:,}.")
    report.flags = [checks.flag("data_dir", os.path.abspath(root))]
    return report


def as_bytes(text: Any) -> bytes:
  """A TFDS Text value as UTF-8 bytes (real data sources give bytes; mocked ones give str)."""
  if isinstance(text, np.ndarray):
    text = text.item()
  if isinstance(text, str):
    return text.encode("utf-8")
  return bytes(text)


def load_split(split: str, max_length: int = DEFAULT_MAX_LENGTH,
               data_dir: str | None = None) -> dict[str, np.ndarray]:
  """{"inputs": uint16 [N, max_length] byte ids, "labels": int32 [N]}; `val` is TFDS `test`."""
  if split not in TFDS_SPLITS:
    raise ValueError(f"Unknown IMDB split {split!r}; expected one of {SPLITS}.")
  if max_length < 1:
    raise ValueError(f"max_length must be >= 1, got {max_length}.")
  source = open_tfds_split(TFDS_NAME, TFDS_SPLITS[split], data_dir)
  num = len(source)
  docs = []
  labels = np.empty(num, np.int32)
  for i in range(num):
    example = source[i]
    # Truncated while reading so that only max_length bytes per review stay in memory.
    docs.append(as_bytes(example["text"])[:max_length])
    labels[i] = example["label"]
  if num and not (labels.min() >= 0 and labels.max() < NUM_CLASSES):
    raise ValueError(f"IMDB {split}: labels outside 0..{NUM_CLASSES - 1} "
                     f"(unique: {np.unique(labels).tolist()}).")
  logging.info("IMDB %s: %d reviews from TFDS %s[%s] (max_length %d)", split, num, TFDS_NAME,
               TFDS_SPLITS[split], max_length)
  return {"inputs": encode_bytes(docs, max_length), "labels": labels}


# ---------------------------------------------------------------------------------------- Task
def data_config(**overrides) -> ml_collections.ConfigDict:
  """IMDB reviews at byte level from TFDS (prepared as TFRecord or array_record under `data_dir`)."""
  c = ml_collections.ConfigDict(dict(task="text", data_dir="", max_length=DEFAULT_MAX_LENGTH))
  c.update(overrides)
  return c


def load(cfg) -> TaskData:
  splits = {s: load_split(s, cfg.max_length, cfg.data_dir or None) for s in SPLITS}
  return TaskData("text", BYTE_VOCAB, NUM_CLASSES, cfg.max_length, splits,
                  f"tfds {TFDS_NAME} ({cfg.data_dir or 'default data_dir'})")


def signature(cfg) -> dict:
  return {"task": "text", "input_kind": "tokens", "vocab": BYTE_VOCAB.tokens,
          "max_length": cfg.max_length}


def smoke(cfg) -> dict:
  return {"data": dict(max_length=256), "model": LRA_SMOKE_MODEL, "phase": lra_smoke_phase()}


TFDS = TfdsDataset(
    title="Text", name=TFDS_NAME, host=("ai.stanford.edu", 80),
    full_sizes={"train": 25_000, "test": 25_000},
    # `val` is LRA's second reading of `test`, so test is checked once.
    splits={"train": ("train", "TFDS train"), "test": ("test", "TFDS test (also val, as LRA)")},
    # Reviews cut to 16 bytes: every record is still read and parsed, without holding the texts.
    load_split=lambda split, data_dir: load_split(split, max_length=16, data_dir=data_dir),
    num_classes=NUM_CLASSES)

TASK = Task("text", data_config, load, signature, smoke, check=TFDS.check)
