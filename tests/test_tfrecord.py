"""TFRecord without TensorFlow: CRC-32C, the framing (against tensorboardX's independent writer),
corruption named by file and record, and TFDS datasets in TFRecord loading exactly as their
array_record twins (tests/fixtures/tfds, written by tests/fixtures/tfds/make_fixtures.py)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import numpy as np
import pytest
from tensorboardX.crc32c import crc32c as tensorboardx_crc32c
from tensorboardX.record_writer import RecordWriter

from spt_jax.data import image, text, tfrecord

from conftest import TFDS_ARRAY_RECORD as ARRAY_RECORD, TFDS_FIXTURES, tfds_fixtures
TFRECORD = os.path.join(TFDS_FIXTURES, "tfrecord")
IMDB_TRAIN_SHARD = os.path.join("imdb_reviews", "plain_text", "1.0.0",
                                "imdb_reviews-train.tfrecord-00000-of-00001")


def test_crc32c_known_values():
  # RFC 3720 (iSCSI) B.4 and the customary check value of CRC-32C.
  assert tfrecord.crc32c(b"123456789") == 0xE3069283
  assert tfrecord.crc32c(bytes(32)) == 0x8A9136AA
  assert tfrecord.crc32c(b"\xff" * 32) == 0x62A8AB43
  assert tfrecord.crc32c(bytes(range(32))) == 0x46DD794E
  assert tfrecord.crc32c(bytes(range(31, -1, -1))) == 0x113FDB5C


def test_vectorised_crc_equals_bytewise_and_tensorboardx_at_every_length():
  rng = np.random.default_rng(0)
  lengths = list(range(0, 70)) + rng.integers(70, 5000, 40).tolist()
  datas = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in lengths]
  buffer = np.frombuffer(b"".join(datas), np.uint8)
  offsets = np.cumsum([0] + lengths[:-1])
  got = tfrecord.crc32c_many(buffer, offsets, lengths)
  assert [int(c) for c in got] == [tensorboardx_crc32c(d) for d in datas]
  assert [int(c) for c in got[:70]] == [tfrecord.crc32c(d) for d in datas[:70]]


def _write_with_tensorboardx(path, records):
  writer = RecordWriter(str(path))
  for record in records:
    writer.write(record)
  writer.close()


def test_reads_what_an_independent_writer_framed(tmp_path):
  rng = np.random.default_rng(1)
  records = [b"", b"a", b"abcd", *(rng.integers(0, 256, n, dtype=np.uint8).tobytes()
                                    for n in (5, 100, 3000, 17))]
  path = tmp_path / "x.tfrecord"
  _write_with_tensorboardx(path, records)
  assert tfrecord.read_records(str(path)) == records
  assert b"".join(tfrecord.frame(r) for r in records) == path.read_bytes()
  empty = tmp_path / "empty.tfrecord"
  empty.write_bytes(b"")
  assert tfrecord.read_records(str(empty)) == []


@pytest.mark.parametrize("damage, message", [
    # Frames: b"" at offset 0, b"ab" at 16, 3000 zero bytes at 34, b"end" at 3050; 3069 bytes.
    (lambda b: b[:-3], r"truncated: record 3 at offset 3050 declares 3 data bytes"),
    (lambda b: b + b"\x01\x02", r"truncated: 2 bytes at offset 3069 after record 3"),
    (lambda b: b[:100] + b"\x01" + b[101:], r"record 2 at offset 34 \(3000 bytes\): the data's "
                                            r"CRC does not match"),
    # A flipped length bit: named at its own record, not where the walk then lands.
    (lambda b: b[:34] + bytes([b[34] ^ 4]) + b[35:], r"record 2 at offset 34: the length's CRC "
                                                     r"does not match"),
    (lambda b: b[:34] + bytes([b[34] ^ 128]) + b[35:], r"record 2 at offset 34: the length's CRC "
                                                       r"does not match"),
])
def test_damage_is_named_by_file_record_and_offset(tmp_path, damage, message):
  path = tmp_path / "x.tfrecord"
  _write_with_tensorboardx(path, [b"", b"ab", bytes(3000), b"end"])
  path.write_bytes(damage(path.read_bytes()))
  with pytest.raises(tfrecord.TFRecordError, match=message) as error:
    tfrecord.read_records(str(path))
  assert str(path) in str(error.value)


class _Hiding:
  """A meta path finder that finds nothing named tensorflow and defers to `finder` otherwise."""

  def __init__(self, finder):
    self.finder = finder

  def find_spec(self, name, path=None, target=None):
    if name == "tensorflow" or name.startswith("tensorflow."):
      return None
    find = getattr(self.finder, "find_spec", None)
    return find(name, path, target) if find else None

  def invalidate_caches(self):
    if hasattr(self.finder, "invalidate_caches"):
      self.finder.invalidate_caches()


@pytest.fixture
def no_tensorflow(monkeypatch):
  """TensorFlow as if not installed, even where it is: no finder finds it, so importlib reports it
  absent and `import tensorflow` fails, as on this project's machines."""
  if "tensorflow" in sys.modules:
    pytest.fail("TensorFlow was imported before this test")
  monkeypatch.setattr(sys, "meta_path", [_Hiding(f) for f in sys.meta_path])
  assert importlib.util.find_spec("tensorflow") is None
  yield
  assert "tensorflow" not in sys.modules


def test_tfrecord_datasets_load_identically_to_array_record(no_tensorflow):
  for name, split in (("imdb_reviews", "train"), ("cifar10", "test")):
    source = text.open_tfds_split(name, split, TFRECORD)
    assert isinstance(source, tfrecord.TfdsTFRecordSource), type(source)
    assert not isinstance(text.open_tfds_split(name, split, ARRAY_RECORD),
                          tfrecord.TfdsTFRecordSource)
  for split in ("train", "val", "test"):
    a = text.load_split(split, max_length=64, data_dir=ARRAY_RECORD)
    t = text.load_split(split, max_length=64, data_dir=TFRECORD)
    np.testing.assert_array_equal(a["inputs"], t["inputs"])
    np.testing.assert_array_equal(a["labels"], t["labels"])
    a = image.load_split(split, data_dir=ARRAY_RECORD)
    t = image.load_split(split, data_dir=TFRECORD)
    np.testing.assert_array_equal(a["pixels"], t["pixels"])
    np.testing.assert_array_equal(a["labels"], t["labels"])
  # The records are the examples the fixture was made of (an empty review included).
  source = text.open_tfds_split("imdb_reviews", "test", TFRECORD)
  assert sorted(source[i]["text"] for i in range(len(source))) == sorted(
      t.encode("utf-8") for t, _ in tfds_fixtures().IMDB_TEXTS["test"])
  assert len(image.load_split("train", data_dir=TFRECORD)["labels"]) == 18  # train[:90%] of 20


def test_dataset_info_without_a_file_format_reads_as_tfrecord(tmp_path, no_tensorflow):
  # TFDS versions before file formats existed wrote no fileFormat: their data is TFRecord.
  shutil.copytree(os.path.join(TFRECORD, "imdb_reviews"), tmp_path / "imdb_reviews")
  info_path = tmp_path / "imdb_reviews" / "plain_text" / "1.0.0" / "dataset_info.json"
  info = json.loads(info_path.read_text())
  del info["fileFormat"]
  info_path.write_text(json.dumps(info))
  np.testing.assert_array_equal(text.load_split("train", 32, str(tmp_path))["inputs"],
                                text.load_split("train", 32, TFRECORD)["inputs"])


def test_missing_corrupt_or_incomplete_shards_are_named(tmp_path):
  shutil.copytree(os.path.join(TFRECORD, "imdb_reviews"), tmp_path / "imdb_reviews")
  shard = tmp_path / IMDB_TRAIN_SHARD
  original = shard.read_bytes()
  shard.write_bytes(original[:40] + bytes([original[40] ^ 0x10]) + original[41:])
  with pytest.raises(tfrecord.TFRecordError, match="the data's CRC does not match") as error:
    text.load_split("train", 16, str(tmp_path))
  assert str(shard) in str(error.value)
  shard.write_bytes(original + tfrecord.frame(b"one more"))
  with pytest.raises(tfrecord.TFRecordError, match="6 records, but dataset_info.json records 5"):
    text.load_split("train", 16, str(tmp_path))
  shard.unlink()
  with pytest.raises(FileNotFoundError, match="prepared in the tfrecord format") as error:
    text.load_split("train", 16, str(tmp_path))
  assert str(shard) in str(error.value) and "--out_file_format=array_record" in str(error.value)
