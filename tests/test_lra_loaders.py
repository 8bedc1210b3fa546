"""Tests for the IMDB, AAN and CIFAR-10 loaders (no network, no TensorFlow; runs in seconds).

TFDS is exercised two ways: `tfds.testing.mock_data`, which replaces `as_data_source` with random
examples, and the committed `array_record` datasets of tests/fixtures/tfds (prepared by TFDS from
builders that subclass the real ones with tiny in-memory examples), which go through TFDS's actual
reading and decoding.
"""
from __future__ import annotations

import os
import tempfile
import shutil
import socket

import numpy as np
import pytest
import tensorflow_datasets as tfds

from spt_jax.data import image, pathfinder, retrieval, text
from spt_jax.data.vocab import BYTE_VOCAB, PAD_ID

from conftest import TFDS_ARRAY_RECORD, tfds_fixtures

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
LRA_RELEASE = os.path.join(FIXTURES, "lra_release")
AAN_SIZES = {"train": 4, "val": 2, "test": 3}


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
  """Any connection attempt fails at once instead of hanging (this machine has no network)."""
  def refuse(*args, **kwargs):
    raise OSError("network access attempted in a test")
  monkeypatch.setattr(socket, "getaddrinfo", refuse)
  monkeypatch.setattr(socket.socket, "connect", refuse)
  monkeypatch.setattr(socket, "create_connection", refuse)


def byte_ids(data: bytes) -> list[int]:
  return [b + 3 for b in data]


def decode_bytes(row: np.ndarray) -> bytes:
  """Inverse of the byte encoding, through BYTE_VOCAB's own token names."""
  return bytes(int(token[3:5], 16) for token in BYTE_VOCAB.decode(row))


def aan_rows(path: str) -> list[list[bytes]]:
  with open(path, "rb") as f:
    return [line.rstrip(b"\n").split(b"\t") for line in f if line.strip()]


def write_bytes(path, data: bytes) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "wb") as f:
    f.write(data)
  return str(path)


def aan_tmp_copy(tmp_path, extra_train_lines: list[bytes]) -> str:
  """An lra_release copy whose train file gets extra lines appended (after the 4 fixture lines)."""
  root = tmp_path / "lra_release"
  shutil.copytree(LRA_RELEASE, root)
  train = root / retrieval.SUBDIR / retrieval.file_name("train")
  with open(train, "ab") as f:
    f.write(b"".join(extra_train_lines))
  return str(root)


# ---------------------------------------------------------------------------------------------
# AAN (retrieval)


@pytest.mark.parametrize("split", retrieval.SPLITS)
def test_aan_fixture_in_official_layout(split):
  batch = retrieval.load_split(LRA_RELEASE, split)
  path = os.path.join(LRA_RELEASE, "tsv_data", f"new_aan_pairs.{retrieval.FILE_SPLITS[split]}.tsv")
  rows = aan_rows(path)
  assert len(rows) == AAN_SIZES[split]
  assert batch["inputs"].dtype == np.uint16
  assert batch["inputs"].shape == (len(rows), 2, retrieval.DEFAULT_MAX_LENGTH)
  assert batch["labels"].dtype == np.int32
  assert batch["labels"].tolist() == [int(float(row[0])) for row in rows]
  assert set(batch["labels"].tolist()) == {0, 1}
  for pair, row in zip(batch["inputs"], rows):
    for doc, field in zip(pair, row[3:]):
      # The raw field, quotes and backslash escapes included, as LRA's byte encoder saw it.
      assert decode_bytes(doc) == field
      assert doc[:len(field)].tolist() == byte_ids(field)
      assert (doc[len(field):] == PAD_ID).all()


def test_aan_fixture_is_like_the_release():
  rows = [row for split in retrieval.SPLITS
          for row in aan_rows(retrieval.split_path(LRA_RELEASE, split))]
  assert all(len(row) == 5 for row in rows)  # Tabs only as separators.
  assert {row[0] for row in rows} == {b"1.0", b"0.0"}
  texts = [field for row in rows for field in row[3:]]
  assert all(t.startswith((b"b'", b'b"')) for t in texts)  # Python bytes literals.
  assert any(b'"' in t for t in texts) and any(b"\\'" in t for t in texts)
  assert all(b"\\n" in t for t in texts) and max(map(len, texts)) > 200


def test_aan_val_reads_eval_file():
  assert retrieval.split_path(LRA_RELEASE, "val").endswith(
      os.path.join("tsv_data", "new_aan_pairs.eval.tsv"))
  val = retrieval.load_split(LRA_RELEASE, "val")
  eval_rows = aan_rows(retrieval.split_path(LRA_RELEASE, "val"))
  assert decode_bytes(val["inputs"][0, 0]) == eval_rows[0][3]


def test_aan_root_one_level_above_tsv_data():
  # The release unpacks to lra_release/lra_release/tsv_data: the outer directory works as root.
  assert retrieval.split_path(FIXTURES, "test") == retrieval.split_path(LRA_RELEASE, "test")
  outer = retrieval.load_split(FIXTURES, "test", max_length=64)
  inner = retrieval.load_split(LRA_RELEASE, "test", max_length=64)
  np.testing.assert_array_equal(outer["inputs"], inner["inputs"])


def test_aan_truncation():
  full = retrieval.load_split(LRA_RELEASE, "train")
  short = retrieval.load_split(LRA_RELEASE, "train", max_length=16)
  assert short["inputs"].shape == (4, 2, 16)
  np.testing.assert_array_equal(short["inputs"], full["inputs"][:, :, :16])
  assert (short["inputs"] != PAD_ID).all()  # Every fixture text is longer than 16 bytes.
  assert decode_bytes(short["inputs"][0, 0]) == b"b'Coarse-To-Fine"


def test_aan_raw_fields_crlf_blank_lines_and_long_lines(tmp_path):
  long_text = b"x" * 300_000 + b"END"
  lines = [
      # Quotes at the start of a field mean nothing: csv quoting would have eaten them.
      b'0\tA00-0001\tA00-0002\t"Quoted" start, no csv quoting\tplain \xc3\xa9t\xc3\xa9 text\r\n',
      b"\n",
      b"1\tA00-0003\tA00-0004\t" + long_text + b"\tshort\n",
  ]
  root = aan_tmp_copy(tmp_path, lines)
  batch = retrieval.load_split(root, "train", max_length=32)
  assert batch["labels"].tolist() == [1, 0, 1, 0, 0, 1]
  assert decode_bytes(batch["inputs"][4, 0]) == b'"Quoted" start, no csv quoting'
  # Byte level: each UTF-8 byte of "é" is its own token.
  assert batch["inputs"][4, 1].tolist() == byte_ids("plain été text".encode()) + [PAD_ID] * 16
  assert decode_bytes(batch["inputs"][5, 0]) == b"x" * 32
  # Longer than the csv module's default field limit (128 KiB).
  wide = retrieval.load_split(root, "train", max_length=len(long_text))
  assert decode_bytes(wide["inputs"][5, 0]) == long_text


@pytest.mark.parametrize("line, message", [
    (b"1.0\tA\tB\tonly four fields\n", "expected 5 tab-separated fields"),
    (b"1.0\tA\tB\ta tab\tinside\ta text\n", "got 6"),
    (b"2.0\tA\tB\ttext one\ttext two\n", "label b'2.0' is not 0 or 1"),
    (b"x\tA\tB\ttext one\ttext two\n", "label b'x' is not a number"),
    (b"nan\tA\tB\ttext one\ttext two\n", "is not 0 or 1"),
    (b"1.0\tA\tB\t\ttext two\n", "empty text1"),
    (b"0.0\tA\tB\ttext one\t  \n", "empty text2"),
])
def test_aan_malformed_rows_name_file_and_line(tmp_path, line, message):
  # The fixture has 4 lines, then one good line, then the bad one: line 6.
  root = aan_tmp_copy(tmp_path, [b"0\tA\tB\tgood\tgood\n", line])
  with pytest.raises(ValueError, match=r"new_aan_pairs\.train\.tsv:6: ") as error:
    retrieval.load_split(root, "train")
  assert message in str(error.value)


def test_aan_integer_labels_accepted(tmp_path):
  root = aan_tmp_copy(tmp_path, [b"1\tA\tB\tone\ttwo\n", b"0\tA\tB\tone\ttwo\n"])
  assert retrieval.load_split(root, "train", max_length=8)["labels"].tolist()[-2:] == [1, 0]


def test_aan_missing_files(tmp_path):
  with pytest.raises(FileNotFoundError) as error:
    retrieval.load_split(str(tmp_path), "val")
  message = str(error.value)
  assert os.path.join(str(tmp_path), "tsv_data", "new_aan_pairs.eval.tsv") in message
  assert os.path.join(str(tmp_path), "*", "tsv_data", "new_aan_pairs.eval.tsv") in message
  assert "--config.data.data_dir" in message and "lra_release" in message


def test_aan_ambiguous_nested_roots(tmp_path):
  for name in ("a", "b"):
    write_bytes(tmp_path / name / "tsv_data" / "new_aan_pairs.test.tsv", b"1\tA\tB\tx\ty\n")
  with pytest.raises(ValueError, match="Several AAN test files"):
    retrieval.split_path(str(tmp_path), "test")


def test_aan_bad_arguments():
  with pytest.raises(ValueError, match="Unknown AAN split"):
    retrieval.load_split(LRA_RELEASE, "eval")
  with pytest.raises(ValueError, match="max_length"):
    retrieval.load_split(LRA_RELEASE, "train", max_length=0)


# ---------------------------------------------------------------------------------------------
# Byte encoding and grayscale conversion


def test_encode_bytes_chunks(monkeypatch):
  monkeypatch.setattr(text, "_CHUNK_ROWS", 3)
  docs = [bytes([i % 256]) * i for i in range(10)]  # Includes b"" and a NUL byte document.
  ids = text.encode_bytes(docs, max_length=6)
  assert ids.dtype == np.uint16 and ids.shape == (10, 6)
  for row, doc in zip(ids, docs):
    assert row.tolist() == byte_ids(doc[:6]) + [PAD_ID] * (6 - len(doc[:6]))
  assert text.FIRST_BYTE_ID == 3 == BYTE_VOCAB.id_of("<0x00>")
  assert BYTE_VOCAB.id_of("<0xFF>") == 258 == byte_ids(b"\xff")[0]


def test_grayscale_known_values():
  colours = np.array([[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 255, 0], [0, 0, 255],
                      [128, 128, 128], [1, 1, 1]], np.uint8)
  # floor(255.5 * luma / 255), TF's convert_image_dtype: e.g. red 0.2989 * 255.5 = 76.37.
  assert image.rgb_to_grayscale(colours).tolist() == [0, 255, 76, 149, 29, 128, 1]


def test_grayscale_within_one_level_of_exact_luma():
  rng = np.random.default_rng(0)
  colours = rng.integers(0, 256, (200_000, 3), dtype=np.uint8)
  exact = np.floor(colours.astype(np.float64) @ [0.2989, 0.5870, 0.1140] * 255.5 / 255)
  diff = image.rgb_to_grayscale(colours).astype(np.float64) - exact
  assert np.abs(diff).max() <= 1 and np.count_nonzero(diff) <= 10


def test_cifar_split_ranges_match_tfds_percent_slicing():
  assert image.split_range("train", 50_000) == range(0, 45_000)
  assert image.split_range("val", 50_000) == range(45_000, 50_000)
  # TFDS rounds to the closest integer with Python's round: 22.5 -> 22.
  assert image.split_range("train", 25) == range(0, 22)


# ---------------------------------------------------------------------------------------------
# TFDS through tfds.testing.mock_data


def mocked(num_examples: int):
  # USE_CODE: features come from the registered builders; nothing is read from disk.
  return tfds.testing.mock_data(num_examples=num_examples,
                                policy=tfds.testing.MockPolicy.USE_CODE)


def numpy_grayscale(rgb: np.ndarray) -> np.ndarray:
  """tf.image.rgb_to_grayscale written out independently: float32 luma, x255.5, truncate."""
  x = rgb.astype(np.float32) / np.float32(255)
  luma = np.zeros(rgb.shape[:-1], np.float32)
  for channel, weight in enumerate((0.2989, 0.5870, 0.1140)):
    luma += x[..., channel] * np.float32(weight)
  return np.trunc(luma * np.float32(255.5)).astype(np.uint8)


def test_imdb_with_mock_data():
  with mocked(6):
    batch = text.load_split("train", max_length=16, data_dir="/nonexistent")
    source = text.tfds_builder("imdb_reviews").as_data_source(split="train")
    expected = [source[i] for i in range(6)]
    val = text.load_split("val", max_length=16)
  assert batch["inputs"].dtype == np.uint16 and batch["inputs"].shape == (6, 16)
  assert batch["labels"].dtype == np.int32
  assert batch["labels"].tolist() == [int(e["label"]) for e in expected]
  for row, example in zip(batch["inputs"], expected):
    data = example["text"].encode("utf-8")[:16]  # The mock's texts are 10..19 characters.
    assert row.tolist() == byte_ids(data) + [PAD_ID] * (16 - len(data))
  assert any(len(e["text"]) > 16 for e in expected)  # Truncation was exercised.
  assert val["inputs"].shape == (6, 16)


def test_cifar_with_mock_data():
  with mocked(20):
    splits = {split: image.load_split(split) for split in image.SPLITS}
    source = text.tfds_builder("cifar10").as_data_source(split="train")
    rgb = np.stack([source[i]["image"] for i in range(20)])
    labels = [int(source[i]["label"]) for i in range(20)]
  assert {s: len(b["labels"]) for s, b in splits.items()} == {"train": 18, "val": 2, "test": 20}
  for split, rows in (("train", slice(0, 18)), ("val", slice(18, 20))):
    batch = splits[split]
    assert batch["pixels"].dtype == np.uint8 and batch["pixels"].shape == (rows.stop - rows.start,
                                                                         1024)
    assert batch["labels"].dtype == np.int32 and batch["labels"].tolist() == labels[rows]
    np.testing.assert_array_equal(batch["pixels"], numpy_grayscale(rgb[rows]).reshape(-1, 1024))
  # The mock yields the same examples for every split.
  np.testing.assert_array_equal(splits["test"]["pixels"][:18], splits["train"]["pixels"])


# ---------------------------------------------------------------------------------------------
# TFDS through real, locally prepared array_record datasets


# The committed TFDS fixtures (tests/fixtures/tfds/array_record), prepared by TFDS itself from the
# real builders fed with tiny examples; their examples come from make_fixtures.py.
MADE = tfds_fixtures()
IMDB_TEXTS = MADE.IMDB_TEXTS


@pytest.fixture(scope="module")
def tfds_dir():
  return TFDS_ARRAY_RECORD


def test_imdb_from_prepared_array_record(tfds_dir):
  # LRA validates on the test split: imdb_reviews has no validation split.
  for split, tfds_split in {"train": "train", "val": "test", "test": "test"}.items():
    batch = text.load_split(split, max_length=24, data_dir=tfds_dir)
    # Reading order is TFDS's (shuffled at preparation): compare with its own data source.
    source = tfds.data_source("imdb_reviews", split=tfds_split, data_dir=tfds_dir, download=False)
    examples = [source[i] for i in range(len(source))]
    assert sorted(e["text"] for e in examples) == sorted(
        t.encode("utf-8") for t, _ in IMDB_TEXTS[tfds_split])
    assert batch["inputs"].shape == (len(examples), 24) and batch["inputs"].dtype == np.uint16
    assert batch["labels"].tolist() == [e["label"] for e in examples]
    for row, example in zip(batch["inputs"], examples):
      data = example["text"][:24]
      assert isinstance(example["text"], bytes)  # Real sources give bytes, mocked ones str.
      assert row.tolist() == byte_ids(data) + [PAD_ID] * (24 - len(data))
      assert decode_bytes(row) == data


def test_cifar_from_prepared_array_record(tfds_dir):
  source = tfds.data_source("cifar10", split="train", data_dir=tfds_dir, download=False)
  rgb = np.stack([source[i]["image"] for i in range(len(source))])
  assert sorted(map(bytes, rgb)) == sorted(map(bytes, MADE.cifar_images(20, 0)))  # Lossless PNG.
  train = image.load_split("train", data_dir=tfds_dir)
  val = image.load_split("val", data_dir=tfds_dir)
  test = image.load_split("test", data_dir=tfds_dir)
  assert (len(train["labels"]), len(val["labels"]), len(test["labels"])) == (18, 2, 5)
  pixels = np.concatenate([train["pixels"], val["pixels"]])
  np.testing.assert_array_equal(pixels, numpy_grayscale(rgb).reshape(20, 1024))
  assert np.concatenate([train["labels"], val["labels"]]).tolist() == [
      source[i]["label"] for i in range(20)]
  # The black image is there as 1024 zero pixels.
  assert sum(not row.any() for row in pixels) == 1
  assert sum(not row.any() for row in test["pixels"]) == 1


@pytest.mark.parametrize("load, name", [
    (lambda data_dir: text.load_split("train", data_dir=data_dir), "imdb_reviews"),
    (lambda data_dir: image.load_split("val", data_dir=data_dir), "cifar10"),
])
def test_missing_tfds_dataset_says_how_to_prepare(tmp_path, load, name):
  with pytest.raises(FileNotFoundError) as error:
    load(str(tmp_path))
  message = str(error.value)
  assert f"`tfds build {name} --file_format=array_record --data_dir=<dir>`" in message
  assert "not prepared" in message and str(tmp_path) in message and "data_dir" in message


def test_tfrecord_dataset_without_its_shards_is_refused_with_the_remedy(tfds_dir, tmp_path):
  # Metadata that says TFRecord (read by spt_jax/data/tfrecord.py) over array_record shards only:
  # the TFRecord shards it names are missing, which the error says, with the two ways out.
  shutil.copytree(os.path.join(tfds_dir, "imdb_reviews"), tmp_path / "imdb_reviews")
  info = tmp_path / "imdb_reviews" / "plain_text" / "1.0.0" / "dataset_info.json"
  info.write_text(info.read_text().replace('"array_record"', '"tfrecord"'))
  with pytest.raises(FileNotFoundError, match="prepared in the tfrecord format") as error:
    text.load_split("test", data_dir=str(tmp_path))
  assert "--out_file_format=array_record" in str(error.value)


def test_bad_tfds_arguments():
  with pytest.raises(ValueError, match="Unknown IMDB split"):
    text.load_split("validation")
  with pytest.raises(ValueError, match="max_length"):
    text.load_split("train", max_length=0)
  with pytest.raises(ValueError, match="Unknown CIFAR-10 split"):
    image.load_split("dev")


def test_pathfinder_downsample_is_the_block_mean_and_the_signature_follows():
  from spt_jax import config_lib
  from spt_jax.data import tasks
  image = np.arange(16, dtype=np.uint8).reshape(1, 16) * 10  # one 4x4 image
  small = pathfinder.downsample(image, 4, 2)
  assert small.tolist() == [[25, 45, 105, 125]]  # e.g. mean(0, 10, 40, 50) = 25
  with pytest.raises(ValueError, match="downsample=3 must be a positive divisor"):
    pathfinder.downsample(image, 4, 3)
  cfg = config_lib.data_config("pathfinder", 32, downsample=2)
  assert tasks.signature(cfg)["max_length"] == 256


def test_a_builder_for_an_unprepared_dir_leaves_nothing_in_tmp(tmp_path):
  # TFDS's DatasetInfo.initialize_from_bucket makes a mkdtemp("tfds") it never removes.
  leaked = lambda: {n for n in os.listdir(tempfile.gettempdir()) if n.endswith("tfds")}
  before, saved = leaked(), tempfile.tempdir
  builder = text.tfds_builder("imdb_reviews", data_dir=str(tmp_path))
  assert not builder.is_prepared()
  assert leaked() == before and tempfile.tempdir == saved
