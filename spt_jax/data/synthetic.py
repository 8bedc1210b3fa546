"""A synthetic task that isolates the SPT mechanism: the label depends on relative position only.

Background: a first-order Markov chain over `num_background` tokens x0..x{n-1} that steps to the
cyclic successor (x_i → x_{i+1 mod n}) with probability `p_successor` and to a uniformly random token
otherwise. A masked token is therefore best predicted from its immediate neighbours, so masked
reconstruction rewards attention to nearby positions (the proximity pattern of Coser et al.).

Label: every sequence contains exactly one `A` and one `B`, written over the background at random
positions. Positives have `A` immediately followed by `B`; negatives have them at least two positions
apart (in either order). Token counts are identical in distribution across the classes, so any
bag-of-tokens classifier is at chance: the model must compare neighbouring positions, which a
mean-pooled classifier can only do through its query-key attention.

Count variant (`count_markers` = m > 0, odd; absent or 0 = the adjacency task above, generated bit for
bit as before): m markers, each `A` or `B`, at distinct random positions; label 1 when `A`s are the
majority. A bag of tokens reads this label, so a probe on mean-pooled features can too: the setting in
which GraP's downstream gradient carries a signal (docs/grap.md). Labels are balanced as above; given the
label, the number of `A`s is Binomial(m, 1/2) restricted to that side of m/2 (i.i.d. fair markers
conditioned on the majority).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from spt_jax.data.vocab import NUM_SPECIAL, Vocabulary
from spt_jax.data.base import generated_splits, generated_task

@dataclasses.dataclass(frozen=True)
class Spec:
  num_train: int = 8000
  num_val: int = 1000
  num_test: int = 1000
  length: int = 100
  num_background: int = 16
  p_successor: float = 0.8
  seed: int = 0
  count_markers: int = 0

  def __post_init__(self):
    if self.length < 4:
      raise ValueError(f"synthetic length={self.length} must be >= 4 to place a non-adjacent pair.")
    if not 0 <= self.p_successor <= 1:
      raise ValueError(f"synthetic p_successor={self.p_successor} must be in [0, 1].")
    if self.num_background < 2:
      raise ValueError(f"synthetic num_background={self.num_background} must be >= 2.")
    if self.count_markers and (self.count_markers % 2 == 0 or not
                               0 < self.count_markers <= self.length):
      raise ValueError(f"synthetic count_markers={self.count_markers} must be 0 (the adjacency "
                       f"task) or odd (no ties) and at most length={self.length}.")

  @property
  def vocab(self) -> Vocabulary:
    return vocabulary(self.num_background)


def vocabulary(num_background: int) -> Vocabulary:
  return Vocabulary(tokens=tuple(f"x{i}" for i in range(num_background)) + ("A", "B"))


def generate(spec: Spec, num: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
  """`num` examples: {"inputs": uint8 [num, length] token ids, "labels": int32 [num]} (balanced):
  the adjacency task, or the count variant when `spec.count_markers` > 0."""
  n, length = spec.num_background, spec.length
  # Background chain, vectorised over examples.
  steps = rng.random((num, length)) < spec.p_successor
  jumps = rng.integers(0, n, (num, length))
  states = np.empty((num, length), np.int64)
  states[:, 0] = jumps[:, 0]
  for t in range(1, length):
    states[:, t] = np.where(steps[:, t], (states[:, t - 1] + 1) % n, jumps[:, t])
  tokens = states + NUM_SPECIAL
  labels = np.zeros(num, np.int32)
  labels[: num // 2] = 1
  labels = rng.permutation(labels)
  vocab = spec.vocab
  # The count variant draws after the background and the labels, so that the adjacency task's draws
  # (and data) stay exactly as they were.
  if spec.count_markers:
    m = spec.count_markers
    positions = np.argsort(rng.random((num, length)), axis=1)[:, :m]  # distinct, in random order
    a_count = rng.binomial(m, 0.5, num)
    a_count = np.where((2 * a_count > m) == (labels == 1), a_count, m - a_count)
    # The first a_count of the randomly ordered positions are A: a random subset of them.
    markers = np.where(np.arange(m) < a_count[:, None], vocab.id_of("A"), vocab.id_of("B"))
    tokens[np.arange(num)[:, None], positions] = markers
    return {"inputs": tokens.astype(np.uint8), "labels": labels}
  # Positives: A at i, B at i + 1. Negatives: B anywhere with |j - i| >= 2.
  a_pos = rng.integers(0, length - 1, num)
  b_pos = a_pos + 1
  neg = labels == 0
  for idx in np.flatnonzero(neg):
    i = rng.integers(0, length)
    allowed = np.setdiff1d(np.arange(length), [i - 1, i, i + 1])
    a_pos[idx], b_pos[idx] = i, rng.choice(allowed)
  rows = np.arange(num)
  tokens[rows, a_pos] = vocab.id_of("A")
  tokens[rows, b_pos] = vocab.id_of("B")
  return {"inputs": tokens.astype(np.uint8), "labels": labels}


def load_splits(spec: Spec) -> dict[str, dict[str, np.ndarray]]:
  return generated_splits(spec, generate)


TASK = generated_task("synthetic", "synthetic", Spec, generate, num_classes=lambda spec: 2,
                      doc="The synthetic proximity task, generated in memory.",
                      optional_fields=("count_markers",))
