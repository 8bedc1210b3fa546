"""Tests for the ListOps generator, file layout and loader (tiny specs; runs in seconds)."""
from __future__ import annotations

import dataclasses
import os
import random

import numpy as np
import pytest

from spt_jax.data import listops
from spt_jax.data.vocab import PAD_ID

TINY = listops.GeneratorSpec(num_train=60, num_val=10, num_test=10, min_length=10,
                             max_length=120, max_depth=6, max_args=5, seed=3)
HEADER = "Source\tTarget\n"
# LRA's spelling: every pair of the nested-tuple tree gets its own parentheses.
MAX_EXAMPLE = "( ( ( [MAX 2 ) 9 ) ] )"
SM_EXAMPLE = "( ( ( ( [SM 1 ) ( ( [MIN 3 ) 4 ) ] ) ) 5 ) ] )"


def stack_evaluate(source: str) -> int:
  """Evaluates a ListOps source with a stack machine, independently of the module."""
  frames = []  # [operator, arguments] of every open operator.
  result = None
  for word in source.split():
    if word in ("(", ")"):
      continue
    if word.startswith("["):
      frames.append((word, []))
      continue
    if word == "]":
      op, args = frames.pop()
      assert args, source
      value = {"[MIN": min, "[MAX": max, "[MED": lambda a: int(np.median(a)),
               "[SM": lambda a: sum(a) % 10}[op](args)
    else:
      value = int(word)
    if frames:
      frames[-1][1].append(value)
    else:
      assert result is None, f"more than one top-level expression in {source}"
      result = value
  assert not frames and result is not None, source
  return result


def lra_reference(spec: listops.GeneratorSpec) -> list[tuple[str, int]]:
  """A line-by-line port of LRA's generate_tree/to_string/to_value on a local Random."""
  rng = random.Random(spec.seed)
  ops = ["[MIN", "[MAX", "[MED", "[SM"]

  def generate_tree(depth):
    r = rng.random() if depth < spec.max_depth else 1
    if r > 0.25:
      return rng.choice(range(10)), 1
    length = 2
    values = []
    for _ in range(rng.randint(2, spec.max_args)):
      sub_t, sub_l = generate_tree(depth + 1)
      values.append(sub_t)
      length += sub_l
    t = (rng.choice(ops), values[0])
    for value in values[1:]:
      t = (t, value)
    return (t, "]"), length

  def to_string(t):
    if isinstance(t, (str, int)):
      return str(t)
    return "( " + to_string(t[0]) + " " + to_string(t[1]) + " )"

  def to_value(t):
    if not isinstance(t, tuple):
      return t
    l, r = to_value(t[0]), to_value(t[1])
    if l in ops:
      return (l, [r])
    if r == "]":
      return {"[MIN": min, "[MAX": max, "[MED": lambda a: int(np.median(a)),
              "[SM": lambda a: int(np.sum(a) % 10)}[l[0]](l[1])
    return (l[0], l[1] + [r])

  examples, seen = [], set()
  while len(examples) < spec.num_total:
    tree, length = generate_tree(1)
    if spec.min_length < length < spec.max_length and to_string(tree) not in seen:
      seen.add(to_string(tree))
      examples.append((to_string(tree), to_value(tree)))
  return examples


def write(path, text: str) -> str:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)
  return str(path)


def train_file(root) -> str:
  return listops.split_path(str(root), "train")


@pytest.fixture(scope="module")
def tiny_examples():
  return listops.generate_examples(TINY, progress=False)


def test_labels_match_independent_evaluator(tiny_examples):
  assert len(tiny_examples) == TINY.num_total == 80
  assert len({source for source, _ in tiny_examples}) == len(tiny_examples)
  for source, label in tiny_examples:
    assert isinstance(label, int) and 0 <= label <= 9
    assert label == stack_evaluate(source), source
    num_tokens = sum(w not in ("(", ")") for w in source.split())
    assert TINY.min_length < num_tokens < TINY.max_length
    assert len(listops.tokenize(source)) == num_tokens
  # All four operators and all ten values actually occur.
  words = {w for source, _ in tiny_examples for w in source.split()}
  assert set(listops.OPERATORS) | {str(d) for d in range(10)} <= words


def test_stack_evaluator_on_known_examples():
  assert stack_evaluate(MAX_EXAMPLE) == 9
  assert stack_evaluate(SM_EXAMPLE) == (1 + 3 + 5) % 10
  assert stack_evaluate("( ( ( ( ( [MED 1 ) 2 ) 8 ) 9 ) ] )") == 5


def test_matches_lra_reference_generator(tiny_examples):
  assert tiny_examples == lra_reference(TINY)


def test_generation_is_deterministic(tiny_examples):
  assert listops.generate_examples(TINY, progress=False) == tiny_examples
  other = listops.generate_examples(dataclasses.replace(TINY, seed=TINY.seed + 1), progress=False)
  assert other != tiny_examples
  assert len(other) == len(tiny_examples)


def test_generation_leaves_global_rng_alone():
  random.seed(123)
  expected = random.random()
  random.seed(123)
  listops.generate_examples(dataclasses.replace(TINY, num_train=5), progress=False)
  assert random.random() == expected


def test_cache_name_encodes_every_field():
  base = listops.GeneratorSpec()
  assert base.cache_name() == "listops_s0_n96000-2000-2000_len500-2000_d10_a10"
  names = {base.cache_name()}
  fields = dataclasses.fields(base)
  for field in fields:
    changed = dataclasses.replace(base, **{field.name: getattr(base, field.name) + 7})
    names.add(changed.cache_name())
  assert len(names) == 1 + len(fields)


def test_impossible_spec_is_rejected():
  with pytest.raises(ValueError, match="at most"):
    listops.GeneratorSpec(max_depth=2, max_args=3, min_length=10, max_length=20)


def test_reads_official_format(tmp_path):
  # csv.writer (used by LRA) ends lines with "\r\n"; a trailing blank line is tolerated.
  path = write(train_file(tmp_path),
               f"Source\tTarget\r\n{MAX_EXAMPLE}\t9\r\n{SM_EXAMPLE}\t9\r\n\r\n")
  assert listops.read_tsv(path) == [(MAX_EXAMPLE, 9), (SM_EXAMPLE, 9)]
  batch = listops.load_split(str(tmp_path), "train", max_length=12)
  assert batch["inputs"].dtype == np.uint8 and batch["inputs"].shape == (2, 12)
  assert batch["labels"].dtype == np.int32 and batch["labels"].tolist() == [9, 9]
  assert listops.VOCAB.decode(batch["inputs"][0]) == ["[MAX", "2", "9", "]"]
  assert listops.VOCAB.decode(batch["inputs"][1]) == ["[SM", "1", "[MIN", "3", "4", "]", "5", "]"]
  assert batch["inputs"][0].tolist() == listops.tokenize(MAX_EXAMPLE) + [PAD_ID] * 8
  assert listops.tokenize(MAX_EXAMPLE) == [listops.VOCAB.id_of(t) for t in ("[MAX", "2", "9", "]")]


def test_write_then_load_roundtrip(tmp_path, tiny_examples, monkeypatch):
  listops.write_official_layout(str(tmp_path), TINY, progress=False)
  # Small chunks exercise the chunk offsets of the vectorised tokeniser.
  monkeypatch.setattr(listops, "_CHUNK_ROWS", 7)
  offset = 0
  for split, size in zip(listops.SPLITS, (TINY.num_train, TINY.num_val, TINY.num_test)):
    expected = tiny_examples[offset:offset + size]
    offset += size
    assert listops.read_tsv(listops.split_path(str(tmp_path), split)) == expected
    batch = listops.load_split(str(tmp_path), split, max_length=TINY.max_length)
    assert batch["inputs"].shape == (size, TINY.max_length)
    assert batch["labels"].tolist() == [label for _, label in expected]
    for row, (source, _) in zip(batch["inputs"], expected):
      ids = listops.tokenize(source)
      assert row[:len(ids)].tolist() == ids
      assert not row[len(ids):].any()
  assert sorted(os.listdir(tmp_path / listops.SUBDIR)) == [
      "basic_test.tsv", "basic_train.tsv", "basic_val.tsv"]
  # Ordinary permissions (the umask's), not a temporary file's private 0600.
  umask = os.umask(0)
  os.umask(umask)
  assert os.stat(train_file(tmp_path)).st_mode & 0o777 == 0o666 & ~umask


def test_vectorised_and_slow_paths_agree(tmp_path):
  # A non-ASCII (no-break) space sends the row's chunk down the exact str.split() path; the other
  # file uses the vectorised path with unusual ASCII whitespace.
  slow = SM_EXAMPLE.replace(" ", "\u00a0", 2)
  fast = SM_EXAMPLE.replace(" ", "\x0b", 2).replace(" ", "  ", 1)
  for root, source in ((tmp_path / "slow", slow), (tmp_path / "fast", fast)):
    write(train_file(root), f"{HEADER}{source}\t9\n{MAX_EXAMPLE}\t9\n")
    batch = listops.load_split(str(root), "train", max_length=10)
    assert listops.VOCAB.decode(batch["inputs"][0]) == ["[SM", "1", "[MIN", "3", "4", "]", "5", "]"]
    assert listops.VOCAB.decode(batch["inputs"][1]) == ["[MAX", "2", "9", "]"]


GOOD = f"{HEADER}{MAX_EXAMPLE}\t9\n\n{SM_EXAMPLE}\t9\n"  # The next line is line 5.


@pytest.mark.parametrize("text, line, message", [
    (GOOD + f"{MAX_EXAMPLE}\n", 5, "expected 2 tab-separated fields"),
    (GOOD + f"{MAX_EXAMPLE}\t9\t1\n", 5, "expected 2 tab-separated fields"),
    (GOOD + f"{MAX_EXAMPLE}\tnine\n", 5, "not an integer"),
    (GOOD + f"{MAX_EXAMPLE}\t10\n", 5, "out of range"),
    (GOOD + f"{MAX_EXAMPLE}\t-1\n", 5, "out of range"),
    (GOOD + " \t3\n", 5, "empty source"),
    ("Source,Target\n" + f"{MAX_EXAMPLE}\t9\n", 1, "bad header"),
    (f"{MAX_EXAMPLE}\t9\n", 1, "bad header"),
    ("", 1, "bad header"),
])
def test_malformed_rows_name_file_and_line(tmp_path, text, line, message):
  path = write(train_file(tmp_path), text)
  with pytest.raises(ValueError, match=message) as read_error:
    listops.read_tsv(path)
  assert str(read_error.value).startswith(f"{path}:{line}: ")
  assert f"basic_train.tsv:{line}" in str(read_error.value)
  with pytest.raises(ValueError, match=f"basic_train.tsv:{line}: "):
    listops.load_split(str(tmp_path), "train", max_length=20)


def test_unknown_token_names_file_line_and_token(tmp_path, monkeypatch):
  monkeypatch.setattr(listops, "_CHUNK_ROWS", 2)  # The bad row sits in the second chunk.
  path = write(train_file(tmp_path), GOOD + f"{MAX_EXAMPLE}\t9\n( ( ( [FIRST 2 ) 9 ) ] )\t2\n")
  with pytest.raises(ValueError, match=r"basic_train\.tsv:6: .*'\[FIRST'"):
    listops.load_split(str(tmp_path), "train", max_length=20)
  assert len(listops.read_tsv(path)) == 4  # Reading does not tokenise.
  with pytest.raises(ValueError, match="'x'"):
    listops.tokenize("( ( [MAX x ) ] )")
  # LRA splits on whitespace only, so a parenthesis glued to a value is one unknown word.
  write(train_file(tmp_path), f"{HEADER}( ( ( [MAX 2 )9 ) ] )\t9\n")
  with pytest.raises(ValueError, match=r"basic_train\.tsv:2: .*'\)9'"):
    listops.load_split(str(tmp_path), "train", max_length=20)


def test_too_long_example_names_file_line_and_lengths(tmp_path):
  write(train_file(tmp_path), GOOD)
  with pytest.raises(ValueError, match=r"basic_train\.tsv:4: .*\b8 tokens.*max_length=7"):
    listops.load_split(str(tmp_path), "train", max_length=7)
  assert listops.load_split(str(tmp_path), "train", max_length=8)["inputs"].shape == (2, 8)


def test_missing_file(tmp_path):
  with pytest.raises(FileNotFoundError, match="basic_val.tsv"):
    listops.read_tsv(listops.split_path(str(tmp_path), "val"))
  with pytest.raises(FileNotFoundError, match="basic_test.tsv"):
    listops.load_split(str(tmp_path), "test", max_length=10)
  with pytest.raises(ValueError, match="Unknown ListOps split"):
    listops.split_path(str(tmp_path), "dev")


def test_ensure_files_without_spec_lists_missing_paths(tmp_path):
  with pytest.raises(FileNotFoundError) as error:
    listops.ensure_files(str(tmp_path), None)
  message = str(error.value)
  for split in listops.SPLITS:
    assert listops.split_path(str(tmp_path), split) in message
  assert "--config.data.generate=True" in message and "lra_release" in message
  # Only the files that are actually missing are listed.
  write(listops.split_path(str(tmp_path), "train"), GOOD)
  with pytest.raises(FileNotFoundError) as error:
    listops.ensure_files(str(tmp_path), None)
  assert "basic_train.tsv" not in str(error.value) and "basic_val.tsv" in str(error.value)


def test_ensure_files_generates_once(tmp_path, tiny_examples):
  root = str(tmp_path)
  listops.ensure_files(root, TINY)
  paths = [listops.split_path(root, split) for split in listops.SPLITS]
  mtimes = [os.stat(p).st_mtime_ns for p in paths]
  assert listops.read_tsv(paths[0]) == tiny_examples[:TINY.num_train]
  listops.ensure_files(root, TINY)
  listops.ensure_files(root, None)  # Present files need no spec.
  assert [os.stat(p).st_mtime_ns for p in paths] == mtimes
  assert sorted(os.listdir(tmp_path / listops.SUBDIR)) == sorted(os.path.basename(p) for p in paths)


def test_failed_write_leaves_no_files(tmp_path, monkeypatch):
  def fail(*args, **kwargs):
    raise KeyboardInterrupt

  monkeypatch.setattr(listops.os, "replace", fail)
  with pytest.raises(KeyboardInterrupt):
    listops.write_official_layout(str(tmp_path), TINY, progress=False)
  assert os.listdir(tmp_path / listops.SUBDIR) == []
