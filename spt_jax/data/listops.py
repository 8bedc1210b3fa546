"""ListOps-1000 (LRA): a TensorFlow-free generator, the official file layout and a loader.

The generator follows google-research/long-range-arena `lra_benchmarks/data/listops.py` call for
call (same random draws in the same order, same spelling, same labels), but draws from a local
`random.Random(seed)` so that a spec fully determines its data set. Files are written in LRA's
layout (`<root>/listops-1000/basic_{train,val,test}.tsv`) so that the official `lra_release`
files and generated ones go through the same loader.
"""
from __future__ import annotations

import dataclasses
import os
import random
import sys
import uuid

from absl import logging
import jax
import ml_collections
import numpy as np
import tqdm

from spt_jax.data import DATA_DIR_HINT, checks
from spt_jax.data.base import SMOKE_PHASE, Task, TaskData, data_root
from spt_jax.data.vocab import PAD_ID, Vocabulary

OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VOCAB = Vocabulary(tokens=OPERATORS + (END,) + tuple(str(d) for d in range(10)))
SPLITS = ("train", "val", "test")
SUBDIR = "listops-1000"
# Examples per split of the published files (LRA's generator defaults): a check reports another
# count as a note, not a refusal.
RELEASE_SIZES = {"train": 96_000, "val": 2_000, "test": 2_000}

_MIN, _MAX, _MED, _SM = OPERATORS
_VALUES = range(10)
# A node is a leaf with probability 1 - _VALUE_P (LRA's VALUE_P).
_VALUE_P = 0.25
_HEADER = "Source\tTarget"
_PARENS = frozenset(("(", ")"))
# Rows per vectorised tokenisation chunk: bounds the temporaries to a few tens of MB.
_CHUNK_ROWS = 2048


@dataclasses.dataclass(frozen=True)
class GeneratorSpec:
  """Everything that determines a generated ListOps data set (defaults: LRA's)."""
  num_train: int = 96_000
  num_val: int = 2_000
  num_test: int = 2_000
  min_length: int = 500  # Kept iff min_length < length < max_length (strict, as LRA).
  max_length: int = 2000
  max_depth: int = 10
  max_args: int = 10
  seed: int = 0

  def __post_init__(self):
    for name in ("num_train", "num_val", "num_test", "min_length"):
      if getattr(self, name) < 0:
        raise ValueError(f"GeneratorSpec.{name} must be >= 0, got {getattr(self, name)}.")
    if self.max_depth < 1 or self.max_args < 2:
      raise ValueError(f"GeneratorSpec needs max_depth >= 1 and max_args >= 2, got {self}.")
    if self.max_length - self.min_length < 2:
      raise ValueError(f"No length satisfies {self.min_length} < length < {self.max_length}.")
    # Fail fast instead of looping forever when no tree can be long enough.
    longest = 1
    for _ in range(self.max_depth - 1):
      longest = 2 + self.max_args * longest
    if longest <= self.min_length:
      raise ValueError(f"Trees with max_depth={self.max_depth}, max_args={self.max_args} have at "
                       f"most {longest} tokens, never more than min_length={self.min_length}.")

  @property
  def num_total(self) -> int:
    return self.num_train + self.num_val + self.num_test

  def cache_name(self) -> str:
    """A readable directory name that differs whenever any field differs."""
    return (f"listops_s{self.seed}_n{self.num_train}-{self.num_val}-{self.num_test}"
            f"_len{self.min_length}-{self.max_length}_d{self.max_depth}_a{self.max_args}")


# A generated node is either a value 0..9 or (operator, [children]). LRA builds nested pairs
# ((((op, c0), c1), ...), END) instead; the flat form spells and evaluates identically and is
# cheaper to build, which matters because a third of the generated nodes belong to trees that the
# length filter rejects.
_Node = int | tuple[str, list["_Node"]]


def _generate_tree(rng: random.Random, depth: int, max_depth: int,
                   max_args: int) -> tuple[_Node, int]:
  """LRA's `generate_tree`: returns (node, number of non-parenthesis tokens)."""
  r = rng.random() if depth < max_depth else 1
  if r > _VALUE_P:
    return rng.choice(_VALUES), 1
  length = 2
  children = []
  for _ in range(rng.randint(2, max_args)):
    child, child_length = _generate_tree(rng, depth + 1, max_depth, max_args)
    children.append(child)
    length += child_length
  # Drawn after the children, as in LRA, so the random stream matches.
  return (rng.choice(OPERATORS), children), length


def _render(node: _Node, words: list[str]) -> int:
  """Appends the node's LRA spelling to words and returns its value (one pass for both)."""
  if isinstance(node, int):
    words.append(str(node))
    return node
  op, children = node
  # LRA's to_string of ((((op, c0), c1), ...), END): one "(" per pair, then op c0 ) c1 ) ... ] ).
  words.extend(["("] * (len(children) + 1))
  words.append(op)
  args = []
  for child in children:
    args.append(_render(child, words))
    words.append(")")
  words.append(END)
  words.append(")")
  if op == _MIN:
    return min(args)
  if op == _MAX:
    return max(args)
  if op == _SM:
    return sum(args) % 10
  # int(np.median(args)) without numpy's per-call overhead: values are non-negative, so
  # truncating the mean of the two middle values is floor division.
  args.sort()
  mid = len(args) // 2
  return args[mid] if len(args) % 2 else (args[mid - 1] + args[mid]) // 2


def generate_examples(spec: GeneratorSpec, progress: bool = True) -> list[tuple[str, int]]:
  """Generates spec.num_total unique (source, label) pairs; train, val, test in that order."""
  rng = random.Random(spec.seed)
  # Recursion depth is bounded by max_depth; only raise the limit if a huge spec needs it.
  needed = spec.max_depth * 4 + 100
  if sys.getrecursionlimit() < needed:
    sys.setrecursionlimit(needed)
  seen = set()
  examples = []
  with tqdm.tqdm(total=spec.num_total, desc="Generating ListOps", unit="ex", file=sys.stderr,
                 disable=not progress) as bar:
    while len(examples) < spec.num_total:
      node, length = _generate_tree(rng, 1, spec.max_depth, spec.max_args)
      if not spec.min_length < length < spec.max_length:
        continue
      words = []
      label = _render(node, words)
      source = " ".join(words)
      if source in seen:
        continue
      seen.add(source)
      examples.append((source, label))
      bar.update(1)
  return examples


def split_path(root: str, split: str) -> str:
  """Path of a split's file in LRA's layout."""
  if split not in SPLITS:
    raise ValueError(f"Unknown ListOps split {split!r}; expected one of {SPLITS}.")
  return os.path.join(root, SUBDIR, f"basic_{split}.tsv")


def write_official_layout(root: str, spec: GeneratorSpec, progress: bool = True) -> None:
  """Generates the data set and writes the three split files in LRA's layout."""
  examples = generate_examples(spec, progress=progress)
  bounds = [0, spec.num_train, spec.num_train + spec.num_val, spec.num_total]
  directory = os.path.join(root, SUBDIR)
  os.makedirs(directory, exist_ok=True)
  # Every split goes to a temporary file first and is renamed into place only once all three are
  # complete, so an interrupted run never leaves a truncated file under the official name.
  temps = []
  try:
    for split, start, stop in zip(SPLITS, bounds[:-1], bounds[1:]):
      # Not tempfile.mkstemp: its 0600 mode would stick to the final file; "x" honours the umask.
      temp = os.path.join(directory, f".basic_{split}.{uuid.uuid4().hex}.tmp")
      with open(temp, "x", encoding="utf-8", newline="\n") as f:
        temps.append(temp)
        f.write(_HEADER + "\n")
        f.writelines(f"{source}\t{label}\n" for source, label in examples[start:stop])
    for split, temp in zip(SPLITS, temps):
      os.replace(temp, split_path(root, split))
  finally:
    for temp in temps:
      if os.path.exists(temp):
        os.remove(temp)


def ensure_files(root: str, spec: GeneratorSpec | None) -> None:
  """Makes sure the three split files exist under root, generating them if spec is given.

  root is written to: pass a cache directory, never a user's data_dir (see check_data_dir).
  """
  paths = [split_path(root, split) for split in SPLITS]
  missing = [p for p in paths if not os.path.isfile(p)]
  if not missing:
    return
  if spec is None:
    raise FileNotFoundError(
        f"ListOps files missing: {', '.join(missing)}. Generation is disabled; set "
        f"--config.data.generate=True to generate them, or point --config.data.data_dir at an "
        f"`lra_release` directory that contains `{SUBDIR}/`.")
  logging.info("Generating %d ListOps examples (%d/%d/%d) with %s into %s", spec.num_total,
               spec.num_train, spec.num_val, spec.num_test, spec, os.path.join(root, SUBDIR))
  # One progress bar per job, not per process.
  write_official_layout(root, spec, progress=jax.process_index() == 0)
  logging.info("Wrote %s", ", ".join(paths))


def check_data_dir(data_dir: str) -> None:
  """A data_dir the user named is read, never written: missing files are an error, not generated."""
  paths = [split_path(data_dir, split) for split in SPLITS]
  missing = [os.path.relpath(p, data_dir) for p in paths if not os.path.isfile(p)]
  if os.path.isdir(data_dir) and not missing:
    return
  problem = f"lacks {', '.join(missing)}" if os.path.isdir(data_dir) else "does not exist"
  raise FileNotFoundError(f"ListOps data_dir {data_dir} {problem}; expected {', '.join(paths)}. "
                          f"{DATA_DIR_HINT}.")


def _read_rows(path: str) -> list[tuple[int, str, int]]:
  """Parses an LRA ListOps tsv into (line number, source, label) rows."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"ListOps file not found: {path}")
  rows = []
  # Binary mode splits only on "\n", so line numbers match what an editor shows, and a "\r"
  # from csv.writer's default "\r\n" terminator is stripped explicitly.
  with open(path, "rb") as f:
    lineno = 0
    for lineno, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not valid UTF-8 ({e}).") from None
      line = line.removesuffix("\n").removesuffix("\r")
      if lineno == 1:
        if line != _HEADER:
          raise ValueError(f"{path}:1: bad header {line!r}, expected {_HEADER!r}.")
        continue
      if not line:
        continue
      fields = line.split("\t")
      if len(fields) != 2:
        raise ValueError(f"{path}:{lineno}: expected 2 tab-separated fields (Source, Target), "
                         f"got {len(fields)}.")
      source, target = fields
      if not source.strip():
        raise ValueError(f"{path}:{lineno}: empty source.")
      try:
        label = int(target)
      except ValueError:
        raise ValueError(f"{path}:{lineno}: label {target!r} is not an integer.") from None
      if not 0 <= label <= 9:
        raise ValueError(f"{path}:{lineno}: label {label} out of range 0..9.")
      rows.append((lineno, source, label))
    if lineno == 0:
      raise ValueError(f"{path}:1: bad header: the file is empty, expected {_HEADER!r}.")
  return rows


def read_tsv(path: str) -> list[tuple[str, int]]:
  """Reads an official (or generated) ListOps tsv into (source, label) pairs."""
  return [(source, label) for _, source, label in _read_rows(path)]


def tokenize(source: str) -> list[int]:
  """LRA tokenisation: whitespace split, drop parentheses, map through VOCAB."""
  ids = []
  for word in source.split():
    if word in _PARENS:
      continue
    try:
      ids.append(VOCAB.id_of(word))
    except KeyError:
      raise ValueError(f"Unknown ListOps token {word!r}.") from None
  return ids


def _pack(word: bytes) -> int:
  # The length is part of the key so that trailing NUL bytes cannot alias a shorter word.
  return int.from_bytes(word, "little") | len(word) << 32


# Vectorised tokenisation tables. Parentheses are recognised byte-wise and treated as gaps, which
# leaves a third of the words; of those, one-byte tokens (values and END) are looked up by their
# byte and only the few operators by a packed key.
_SINGLE_BYTE_IDS = np.full(256, -1, np.int16)  # -1: not a one-byte token.
_SINGLE_BYTE_IDS[[ord(t) for t in VOCAB.tokens if len(t) == 1]] = [
    VOCAB.id_of(t) for t in VOCAB.tokens if len(t) == 1]
_LONG_KEYS, _LONG_IDS = (np.array(column, np.int64) for column in zip(*sorted(
    (_pack(t.encode("ascii")), VOCAB.id_of(t)) for t in VOCAB.tokens if len(t) > 1)))
# Every valid word is at most this many bytes, so longer words are unknown.
_MAX_WORD_BYTES = max(len(t) for t in VOCAB.tokens)


def _in_range(text: np.ndarray, low: int, high: int) -> np.ndarray:
  # uint8 subtraction wraps around, so one comparison tests low <= text <= high.
  return text - np.uint8(low) <= high - low


def _tokenize_chunk(sources: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
  """Tokenises ASCII sources at once: (ids, ids per row), or None if any word is unknown."""
  # Rows joined by "\n" (whitespace), so words never straddle two rows.
  text = np.frombuffer("\n".join(sources).encode("ascii"), np.uint8)
  # What str.split() treats as whitespace in ASCII: \t\n\x0b\x0c\r and \x1c-\x1f and space.
  space = _in_range(text, 9, 13) | _in_range(text, 28, 32)
  paren = _in_range(text, ord("("), ord(")"))
  # A parenthesis glued to anything (e.g. "(5") is an unknown word for str.split(): let the slow
  # path report it.
  padded_space = np.concatenate(([True], space, [True]))
  if np.any(paren & ~(padded_space[:-2] & padded_space[2:])):
    return None
  word = np.concatenate(([False], ~(space | paren), [False]))
  inner = word[1:-1]
  starts = np.flatnonzero(inner & ~word[:-2])
  stops = np.flatnonzero(inner & ~word[2:]) + 1
  lengths = stops - starts
  ids = _SINGLE_BYTE_IDS[text[starts]]
  long = np.flatnonzero(lengths > 1)
  if long.size:
    long_lengths = lengths[long]
    if np.any(long_lengths > _MAX_WORD_BYTES):
      return None
    padded = np.concatenate((text, np.zeros(_MAX_WORD_BYTES, np.uint8)))
    keys = long_lengths.astype(np.int64) << 32
    for k in range(_MAX_WORD_BYTES):
      byte = padded[starts[long] + k].astype(np.int64)
      keys |= np.where(k < long_lengths, byte, 0) << (8 * k)
    where = np.minimum(np.searchsorted(_LONG_KEYS, keys), len(_LONG_KEYS) - 1)
    if np.any(_LONG_KEYS[where] != keys):
      return None
    ids[long] = _LONG_IDS[where]
  if np.any(ids < 0):
    return None
  row_starts = np.cumsum([0] + [len(s) + 1 for s in sources])
  return ids, np.diff(np.searchsorted(starts, row_starts))


def load_split(root: str, split: str, max_length: int) -> dict[str, np.ndarray]:
  """Loads a split as {"inputs": uint8 [N, max_length] PAD-padded ids, "labels": int32 [N]}."""
  path = split_path(root, split)
  rows = _read_rows(path)
  inputs = np.full((len(rows), max_length), PAD_ID, np.uint8)
  labels = np.array([label for _, _, label in rows], np.int32)
  for begin in range(0, len(rows), _CHUNK_ROWS):
    chunk = rows[begin:begin + _CHUNK_ROWS]
    sources = [source for _, source, _ in chunk]
    fast = _tokenize_chunk(sources) if all(s.isascii() for s in sources) else None
    if fast is None:
      # Slow path: exact str.split() semantics for non-ASCII text, and per-row error messages.
      per_row = []
      for lineno, source, _ in chunk:
        try:
          per_row.append(tokenize(source))
        except ValueError as e:
          raise ValueError(f"{path}:{lineno}: {e}") from None
      counts = np.array([len(t) for t in per_row], np.int64)
      ids = np.fromiter((i for t in per_row for i in t), np.int64, count=int(counts.sum()))
    else:
      ids, counts = fast
    too_long = np.flatnonzero(counts > max_length)
    if too_long.size:
      i = int(too_long[0])
      raise ValueError(f"{path}:{chunk[i][0]}: example has {counts[i]} tokens, longer than "
                       f"max_length={max_length}.")
    # A boolean mask assignment fills row-major order, which is exactly the order of ids.
    filled = np.arange(max_length) < counts[:, None]
    inputs[begin:begin + len(chunk)][filled] = ids
  return {"inputs": inputs, "labels": labels}


# ---------------------------------------------------------------------------------------- Task
def data_config(**generator_overrides) -> ml_collections.ConfigDict:
  """ListOps as in LRA: official files if `data_dir` is given (only read), else generated once into
  `cache_dir`."""
  generator = ml_collections.ConfigDict(dict(
      num_train=96_000, num_val=2_000, num_test=2_000, min_length=500, max_length=2000,
      max_depth=10, max_args=10, seed=0))
  generator.update(generator_overrides)
  return ml_collections.ConfigDict(dict(
      task="listops",
      data_dir="",                  # a directory holding listops-1000/ (e.g. lra_release), only read
                                    # (missing files are an error); '' = generated data in cache_dir
      cache_dir="~/.cache/spt_jax",
      generate=True,                # generate into cache_dir when absent there (never into data_dir)
      max_length=2000,
      generator=generator))


def load(cfg) -> TaskData:
  gen = cfg.generator
  spec = GeneratorSpec(
      num_train=gen.num_train, num_val=gen.num_val, num_test=gen.num_test,
      min_length=gen.min_length, max_length=gen.max_length, max_depth=gen.max_depth,
      max_args=gen.max_args, seed=gen.seed)
  if gen.max_length > cfg.max_length + 1:
    raise ValueError(f"config.data.generator.max_length={gen.max_length} produces sequences longer "
                     f"than config.data.max_length={cfg.max_length}.")
  root = data_root(cfg, spec)
  if cfg.data_dir:
    check_data_dir(root)
  else:
    ensure_files(root, spec if cfg.generate else None)
  splits = {s: load_split(root, s, cfg.max_length) for s in SPLITS}
  for s, arrays in splits.items():
    logging.info("ListOps %s: %d examples from %s", s, len(arrays["labels"]), split_path(root, s))
  return TaskData("listops", VOCAB, 10, cfg.max_length, splits, root, generated=not cfg.data_dir)


def signature(cfg) -> dict:
  return {"task": "listops", "input_kind": "tokens", "vocab": VOCAB.tokens,
          "max_length": cfg.max_length}


def smoke(cfg) -> dict:
  return {"data": dict(max_length=128, generator=dict(
              num_train=512, num_val=128, num_test=128, min_length=16, max_length=128,
              max_depth=6, max_args=5)),
          "model": dict(num_layers=2, d_model=64, num_heads=4, d_ff=128),
          "phase": SMOKE_PHASE}


def masked_ceiling(targets):
  """Per masked position, (nats, accuracy) of a model that knows which kind of token it holds (an
  operator, a digit or `]`) and nothing more: the generator draws operators and digits uniformly
  (`_generate_tree`), so within its kind the value is a uniform guess, and `]` is certain. Ids of
  any other token (none are ever masked) count as certain."""
  targets = np.asarray(targets)
  choices = np.ones(targets.shape)
  choices[np.isin(targets, [VOCAB.id_of(o) for o in OPERATORS])] = len(OPERATORS)
  choices[np.isin(targets, [VOCAB.id_of(str(d)) for d in range(10)])] = 10
  return np.log(choices), 1.0 / choices


def check_files(data_dir: str, **_) -> checks.Report:
  """The release's ListOps files under data_dir, read with the loader's parser and tokeniser."""
  cfg = data_config()
  report = checks.Report(f"ListOps (LRA release) under {data_dir}")
  root = checks.locate(report, data_dir, SUBDIR, "lra_release/listops-1000/")
  if root is None:
    return report
  for split in SPLITS:
    path = split_path(root, split)
    if not os.path.isfile(path):
      report.add(checks.ERROR, f"{path}: missing (the loader reads basic_{{train,val,test}}.tsv).")
      continue
    try:
      arrays = load_split(root, split, cfg.max_length)
    except ValueError as e:
      report.add(checks.ERROR, str(e))
      continue
    count = len(arrays["labels"])
    if not count:
      report.add(checks.ERROR, f"{path}: no examples after the header.")
      continue
    longest = int((arrays["inputs"] != PAD_ID).sum(axis=1).max())
    report.add(checks.OK, f"{path}: {count:,} examples after the header 'Source\\tTarget' (as the "
                          f"loader expects), up to {longest:,} tokens (max_length "
                          f"{cfg.max_length})")
    checks.final_newline(report, path)
    if count != RELEASE_SIZES[split]:
      report.add(checks.NOTE, f"{path}: the release's file has {RELEASE_SIZES[split]:,} examples.")
  report.flags = [checks.flag("data_dir", os.path.abspath(root))]
  return report


TASK = Task("listops", data_config, load, signature, smoke, masked_ceiling=masked_ceiling,
            check=check_files)
