"""TFRecord files read without TensorFlow: the framing with its CRCs checked, and TFDS datasets in it.

A TFRecord file is a sequence of records, each framed as

  uint64 length             little-endian
  uint32 masked_crc32c(length bytes)
  byte   data[length]
  uint32 masked_crc32c(data)

with CRC-32C (Castagnoli, as iSCSI, RFC 3720) masked as ((crc >> 15 | crc << 17) + 0xa282ead8) mod
2**32 (TensorFlow's `tsl/lib/hash/crc32c.h`). `TFRecordFile` maps a file, walks its frames and checks
every length and data CRC once, vectorised over the records (~90 MB/s on one busy core), before
any record is served; a truncated or corrupt file is one error naming the file, the record and its
byte offset.

`TfdsTFRecordSource` is a prepared TFDS split in the TFRecord format (`tfds build`'s default) as a
random-access source like `builder.as_data_source`: `len(source)`, `source[i]` → the example as
numpy, deserialised and decoded by TFDS's own numpy parser (`features.deserialize_example_np`, the
one its array_record sources use), so both formats give identical examples.
"""
from __future__ import annotations

import mmap
import os
import struct
from typing import Any

import numpy as np

_POLY = 0x82F63B78  # CRC-32C, reflected.
_MASK_DELTA = 0xA282EAD8
_HEADER = 12  # uint64 length + uint32 crc of it
_FOOTER = 4  # uint32 crc of the data
# Bytes of records checked in one vectorised block: bounds the temporaries to tens of MB.
_BLOCK_BYTES = 1 << 22


def _tables() -> np.ndarray:
  """[4, 256] uint32 slicing-by-4 tables: row 0 is the byte-wise table, row k advances k bytes more."""
  t = np.arange(256, dtype=np.uint32)
  for _ in range(8):
    t = np.where(t & 1, (t >> 1) ^ np.uint32(_POLY), t >> 1).astype(np.uint32)
  tables = [t]
  for _ in range(3):
    prev = tables[-1]
    tables.append((prev >> 8) ^ t[prev & 0xFF])
  return np.stack(tables)


_T = _tables()
_T0, _T1, _T2, _T3 = _T


def crc32c(data) -> int:
  """CRC-32C of bytes (init and final xor 0xffffffff), byte by byte: the reference for short data."""
  crc = 0xFFFFFFFF
  for b in bytes(data):
    crc = int(_T0[(crc ^ b) & 0xFF]) ^ (crc >> 8)
  return crc ^ 0xFFFFFFFF


def crc32c_many(buffer: np.ndarray, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
  """CRC-32C of each `buffer[offsets[i]:offsets[i] + lengths[i]]`: uint32 [n].

  Vectorised across records: each record is right-aligned in a zero-padded row and all rows advance
  one 32-bit word per step (slicing-by-4). From a zero register, leading zero bytes leave it zero,
  and the standard initial register 0xffffffff is the same as xor-ing a record's first four bytes
  with 0xff, so the padding changes nothing. Records shorter than four bytes go byte by byte.
  """
  buffer = np.asarray(buffer, np.uint8).reshape(-1)
  offsets = np.asarray(offsets, np.int64)
  lengths = np.asarray(lengths, np.int64)
  out = np.empty(len(offsets), np.uint32)
  short = np.flatnonzero(lengths < 4)
  for i in short:
    out[i] = crc32c(buffer[offsets[i]:offsets[i] + lengths[i]])
  order = np.flatnonzero(lengths >= 4)
  order = order[np.argsort(lengths[order], kind="stable")]
  begin = 0
  while begin < len(order):
    # A block of records of similar length (sorted), as many as fit _BLOCK_BYTES of padded rows.
    width = int(lengths[order[begin]])
    end = begin + 1
    while end < len(order):
      next_width = int(lengths[order[end]])
      if next_width * (end + 1 - begin) > _BLOCK_BYTES and end > begin:
        break
      width, end = next_width, end + 1
    block = order[begin:end]
    out[block] = _crc_block(buffer, offsets[block], lengths[block], width)
    begin = end
  return out


def _crc_block(buffer, offsets, lengths, width) -> np.ndarray:
  words = -(-width // 4)
  row_bytes = 4 * words
  starts = row_bytes - lengths  # Right-aligned: the padding leads.
  rows = np.zeros((len(offsets), row_bytes), np.uint8)
  column = np.arange(row_bytes)
  inside = column >= starts[:, None]
  source = offsets[:, None] + (column - starts[:, None])
  rows[inside] = buffer[source[inside]]
  first = starts[:, None] + np.arange(4)
  rows[np.arange(len(offsets))[:, None], first] ^= 0xFF  # The initial register 0xffffffff.
  w = rows.view("<u4")
  crc = np.zeros(len(offsets), np.uint32)
  for k in range(words):
    crc ^= w[:, k]
    crc = _T3[crc & 0xFF] ^ _T2[(crc >> 8) & 0xFF] ^ _T1[(crc >> 16) & 0xFF] ^ _T0[crc >> 24]
  return crc ^ np.uint32(0xFFFFFFFF)


def mask(crc):
  """TFRecord's masked CRC (numpy arrays or ints)."""
  if isinstance(crc, np.ndarray):
    crc = crc.astype(np.uint32)
    return ((crc >> np.uint32(15)) | (crc << np.uint32(17))) + np.uint32(_MASK_DELTA)
  crc &= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
  """One record framed as TFRecord (for tests and tools that write small files)."""
  length = struct.pack("<Q", len(data))
  return (length + struct.pack("<I", mask(crc32c(length))) + data
          + struct.pack("<I", mask(crc32c(data))))


class TFRecordError(ValueError):
  """A TFRecord file that is truncated or fails a CRC check."""


class TFRecordFile:
  """The records of one TFRecord file, every CRC checked on opening: `len(f)`, `f[i]` → bytes."""

  def __init__(self, path: str):
    self.path = path
    with open(path, "rb") as f:
      size = os.fstat(f.fileno()).st_size
      self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    self.offsets, self.lengths = self._walk(size)
    self._check()

  def _walk(self, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets of each record's data and its length, from the frames (not yet CRC-checked)."""
    offsets, lengths = [], []
    position = 0
    unpack = struct.unpack_from
    while position < size:
      problem = None
      if size - position < _HEADER:
        after = f"after record {len(offsets) - 1}" if offsets else "before any record"
        problem = (f"truncated: {size - position} bytes at offset {position} {after}, less than "
                   f"a record header.")
      else:
        (length,) = unpack("<Q", self._map, position)
        if length > size - position - _HEADER - _FOOTER:
          problem = (f"truncated: record {len(offsets)} at offset {position} declares {length} "
                     f"data bytes (+{_FOOTER} of CRC), only {size - position - _HEADER} remain.")
      if problem:
        # A corrupt length earlier sends the walk astray: the first header that fails its CRC,
        # this one included, is the culprit.
        headers = np.array([o - _HEADER for o in offsets] + [position], np.int64)
        self._check_headers(headers[headers + _HEADER <= size])
        raise TFRecordError(f"{self.path}: {problem}")
      offsets.append(position + _HEADER)
      lengths.append(length)
      position += _HEADER + length + _FOOTER
    return np.array(offsets, np.int64), np.array(lengths, np.int64)

  def _check_headers(self, headers: np.ndarray) -> None:
    """Each header's length CRC (headers: their offsets)."""
    if not len(headers):
      return
    buffer = np.frombuffer(self._map, np.uint8)
    stored = buffer[headers[:, None] + np.arange(8, 12)].copy().view("<u4")[:, 0]
    bad = np.flatnonzero(mask(crc32c_many(buffer, headers, np.full(len(headers), 8))) != stored)
    if bad.size:
      i = int(bad[0])
      raise TFRecordError(f"{self.path}: record {i} at offset {headers[i]}: the length's CRC does "
                          f"not match (corrupt file, or not TFRecord)"
                          + (f"; {bad.size} records fail it" if bad.size > 1 else "") + ".")

  def _check(self) -> None:
    if not len(self.offsets):
      return
    headers = self.offsets - _HEADER
    self._check_headers(headers)
    buffer = np.frombuffer(self._map, np.uint8)
    ends = self.offsets + self.lengths
    stored = buffer[ends[:, None] + np.arange(4)].copy().view("<u4")[:, 0]
    bad = np.flatnonzero(mask(crc32c_many(buffer, self.offsets, self.lengths)) != stored)
    if bad.size:
      i = int(bad[0])
      raise TFRecordError(f"{self.path}: record {i} at offset {headers[i]} ({self.lengths[i]} "
                          f"bytes): the data's CRC does not match (corrupt file)"
                          + (f"; {bad.size} records fail it" if bad.size > 1 else "") + ".")

  def __len__(self) -> int:
    return len(self.offsets)

  def __getitem__(self, index: int) -> bytes:
    begin = int(self.offsets[index])
    return self._map[begin:begin + int(self.lengths[index])]

  def close(self) -> None:
    if isinstance(self._map, mmap.mmap):
      self._map.close()


def read_records(path: str) -> list[bytes]:
  """Every record of a TFRecord file, CRC-checked."""
  f = TFRecordFile(path)
  try:
    return [f[i] for i in range(len(f))]
  finally:
    f.close()


class TfdsTFRecordSource:
  """A prepared TFDS split stored as TFRecord shards, read like TFDS's random-access data sources.

  dataset_info: the builder's `info` (its file format must be, or be set to, tfrecord); split: a
  TFDS split name or slice ('train', 'train[:90%]'). The shards are those TFDS's own file
  instructions name; each is opened and CRC-checked when first read, and must hold the number of
  examples dataset_info records for it.
  """

  def __init__(self, dataset_info: Any, split: str):
    self.info = dataset_info
    self.split = split
    self.features = dataset_info.features
    self.instructions = list(dataset_info.splits[split].file_instructions)
    for instruction in self.instructions:
      if not os.path.isfile(instruction.filename):
        raise FileNotFoundError(f"TFDS {dataset_info.name} {split}: record file "
                                f"{instruction.filename} is missing (dataset_info.json lists "
                                f"{len(self.instructions)} shard(s) for this split).")
    self._ends = np.cumsum([i.take for i in self.instructions])
    self._files: dict[int, TFRecordFile] = {}

  def _file(self, shard: int) -> TFRecordFile:
    if shard not in self._files:
      instruction = self.instructions[shard]
      f = TFRecordFile(os.fspath(instruction.filename))
      if len(f) != instruction.examples_in_shard:
        raise TFRecordError(f"{instruction.filename}: {len(f)} records, but dataset_info.json "
                            f"records {instruction.examples_in_shard} for this shard (an "
                            f"incomplete copy?).")
      self._files[shard] = f
    return self._files[shard]

  def __len__(self) -> int:
    return int(self._ends[-1]) if len(self._ends) else 0

  def record(self, index: int) -> bytes:
    """The serialised example at `index` of the split."""
    if not -len(self) <= index < len(self):
      raise IndexError(f"index {index} out of range for {len(self)} examples")
    index %= len(self)
    shard = int(np.searchsorted(self._ends, index, side="right"))
    before = int(self._ends[shard - 1]) if shard else 0
    return self._file(shard)[self.instructions[shard].skip + index - before]

  def __getitem__(self, index: int) -> dict:
    return self.features.deserialize_example_np(self.record(index))

  def __iter__(self):
    return (self[i] for i in range(len(self)))

  def close(self) -> None:
    for f in self._files.values():
      f.close()
    self._files.clear()
