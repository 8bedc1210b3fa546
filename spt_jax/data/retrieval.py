"""AAN (LRA "Retrieval"): byte-level document pairs from the official `lra_release` tsv files.

Files: `<root>/tsv_data/new_aan_pairs.{train,eval,test}.tsv`. In the released archive they sit at
`lra_release/lra_release/tsv_data/`, so a root that has `tsv_data/` one level down is searched too:
either `lra_release` directory works as root. The `val` split reads the `eval` file.

Each line is `label<TAB>id1<TAB>id2<TAB>text1<TAB>text2` with no header; the label is `1.0`/`0.0`
in the release (any number equal to 0 or 1 is accepted). Like LRA, which read the files with
`make_csv_dataset(field_delim="\\t", use_quote_delim=False)`, fields are split on tabs only, with
no quote handling, and each text field's raw bytes are the document, exactly what LRA's byte
encoder saw: nothing is unescaped (third-party readers `ast.literal_eval` the release's texts, so
they appear to be Python bytes literals `b'...'`). Documents are truncated to `max_length` bytes
each and padded with PAD_ID.
"""
from __future__ import annotations

import glob
import os

from absl import logging
import ml_collections
import numpy as np

from spt_jax.data import checks, text
from spt_jax.data.base import LRA_SMOKE_MODEL, Task, TaskData, lra_smoke_phase
from spt_jax.data.vocab import BYTE_VOCAB

SPLITS = ("train", "val", "test")
FILE_SPLITS = {"train": "train", "val": "eval", "test": "test"}
SUBDIR = "tsv_data"
DEFAULT_MAX_LENGTH = 4000
NUM_CLASSES = 2
_FIELDS = ("label", "id1", "id2", "text1", "text2")


def file_name(split: str) -> str:
  if split not in FILE_SPLITS:
    raise ValueError(f"Unknown AAN split {split!r}; expected one of {SPLITS}.")
  return f"new_aan_pairs.{FILE_SPLITS[split]}.tsv"


def split_path(root: str, split: str) -> str:
  """The split's file under `root/tsv_data/` or, failing that, `root/*/tsv_data/`."""
  name = file_name(split)
  root = os.path.expanduser(root)
  direct = os.path.join(root, SUBDIR, name)
  if os.path.isfile(direct):
    return direct
  pattern = os.path.join(root, "*", SUBDIR, name)
  nested = sorted(p for p in glob.glob(os.path.join(glob.escape(root), "*", SUBDIR, name))
                  if os.path.isfile(p))
  if len(nested) == 1:
    return nested[0]
  if nested:
    raise ValueError(f"Several AAN {split} files match {pattern}: {', '.join(nested)}. "
                     f"Point --config.data.data_dir at the one `lra_release` directory to use.")
  raise FileNotFoundError(
      f"AAN {split} file not found: neither {direct} nor {pattern} exists. Point "
      f"--config.data.data_dir at the `lra_release` directory (the one that contains "
      f"`{SUBDIR}/`, or the directory above it, as unpacked from lra_release.gz).")


def _parse_label(field: bytes, where: str) -> int:
  try:
    value = float(field)
  except ValueError:
    raise ValueError(f"{where}: label {field!r} is not a number.") from None
  if value not in (0.0, 1.0):
    raise ValueError(f"{where}: label {field!r} is not 0 or 1.")
  return int(value)


def _read_rows(path: str, max_length: int) -> tuple[list[bytes], list[int]]:
  """Parses a pairs file into (documents text1, text2 interleaved and truncated, labels)."""
  docs, labels = [], []
  # Binary mode: byte-level documents need no decoding, lines split only on "\n" (so line numbers
  # match an editor's), and a line has no length limit (unlike the csv module's 128 KiB fields).
  with open(path, "rb") as f:
    for lineno, raw in enumerate(f, start=1):
      line = raw.removesuffix(b"\n").removesuffix(b"\r")
      if not line:
        continue
      where = f"{path}:{lineno}"
      fields = line.split(b"\t")
      if len(fields) != len(_FIELDS):
        raise ValueError(f"{where}: expected {len(_FIELDS)} tab-separated fields "
                         f"({', '.join(_FIELDS)}), got {len(fields)}.")
      labels.append(_parse_label(fields[0], where))
      for name, doc in zip(_FIELDS[3:], fields[3:]):
        if not doc.strip():
          raise ValueError(f"{where}: empty {name}.")
        docs.append(doc[:max_length])
  if not labels:
    raise ValueError(f"{path}: no examples.")
  return docs, labels


def load_split(root: str, split: str,
               max_length: int = DEFAULT_MAX_LENGTH) -> dict[str, np.ndarray]:
  """{"inputs": uint16 [N, 2, max_length] byte ids of (text1, text2), "labels": int32 [N]}."""
  if max_length < 1:
    raise ValueError(f"max_length must be >= 1, got {max_length}.")
  path = split_path(root, split)
  docs, labels = _read_rows(path, max_length)
  inputs = text.encode_bytes(docs, max_length).reshape(len(labels), 2, max_length)
  logging.info("AAN %s: %d pairs from %s (max_length %d per document)", split, len(labels), path,
               max_length)
  return {"inputs": inputs, "labels": np.array(labels, np.int32)}


# ---------------------------------------------------------------------------------------- Task
def data_config(**overrides) -> ml_collections.ConfigDict:
  """AAN document pairs from the LRA release (`data_dir` holds tsv_data/), bytes, per document."""
  c = ml_collections.ConfigDict(dict(task="retrieval", data_dir="", max_length=DEFAULT_MAX_LENGTH))
  c.update(overrides)
  return c


def load(cfg) -> TaskData:
  if not cfg.data_dir:
    raise FileNotFoundError("config.data.data_dir must point at the LRA release directory holding "
                            "tsv_data/new_aan_pairs.{train,eval,test}.tsv (no download exists).")
  splits = {s: load_split(cfg.data_dir, s, cfg.max_length) for s in SPLITS}
  return TaskData("retrieval", BYTE_VOCAB, NUM_CLASSES, cfg.max_length, splits,
                  split_path(cfg.data_dir, "train"))


def signature(cfg) -> dict:
  return {"task": "retrieval", "input_kind": "tokens", "vocab": BYTE_VOCAB.tokens,
          "max_length": cfg.max_length}


def smoke(cfg) -> dict:
  # Batch 2: the bundled AAN fixture (tests/fixtures/lra_release) has 4 training pairs.
  return {"data": dict(max_length=128), "model": LRA_SMOKE_MODEL,
          "phase": lra_smoke_phase(batch_size=2)}


def check_files(data_dir: str, **_) -> checks.Report:
  """The release's AAN files under data_dir, every row parsed as the loader parses it."""
  report = checks.Report(f"Retrieval (AAN pairs, LRA release) under {data_dir}")
  root = checks.locate(report, data_dir, SUBDIR, "lra_release/lra_release/tsv_data/")
  if root is None:
    return report
  for split in SPLITS:
    path = os.path.join(root, SUBDIR, file_name(split))
    if not os.path.isfile(path):
      report.add(checks.ERROR, f"{path}: missing (the loader reads "
                               f"new_aan_pairs.{{train,eval,test}}.tsv; `val` is the eval file).")
      continue
    try:
      # Documents cut to 1 byte: the checks are the loader's, without holding the texts.
      _, labels = _read_rows(path, 1)
    except ValueError as e:
      message = str(e)
      if f"{path}:1: label" in message:
        message += (" The AAN files have no header line: the loader reads line 1 as a pair.")
      report.add(checks.ERROR, message)
      continue
    positive = sum(labels)
    report.add(checks.OK, f"{path}: {len(labels):,} pairs, no header (as the loader expects), "
                          f"{positive:,} labelled 1 and {len(labels) - positive:,} labelled 0")
    checks.final_newline(report, path)
  report.flags = [checks.flag("data_dir", os.path.abspath(root))]
  return report


TASK = Task("retrieval", data_config, load, signature, smoke, check=check_files)
