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
shared with `image.py`.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

from absl import logging
import ml_collections
import numpy as np

from spt_jax.data import tfrecord
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


TASK = Task("text", data_config, load, signature, smoke)
