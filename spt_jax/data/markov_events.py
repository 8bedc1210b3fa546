"""Toy event sequences from Markov chains: a port of the GraP authors' `toy-markovian` data.

Source: ivan-chai/pretpp, experiments/toy-markovian/scripts/make-dataset.py (the data of GraP's
event-sequence experiments). There, each of 10 presets is a random 3x3 transition matrix (uniform
entries, rows normalised, drawn after `np.random.seed(0)`); a sequence picks a preset uniformly, a
uniform initial event type, then 64 events, each drawn from the previous one's row of the matrix; its
label is the preset. Each event also has a timestamp: a random offset plus 1, 2, ..., 64, so the time
delta between events is always 1 (their max_time_delta is 1 too) and the time loss of their setup is
near-useless by construction. Splits are 80/10/10 as theirs (10,000 sequences by default).

Here: the presets are the same matrices (numpy's legacy generator seeded with `preset_seed`, 0 by
default, drawn in their order); the sequences are drawn vectorised from numpy's default generator, one
stream per split, so they follow the same distribution but are not the same sequences. Event types
are the tokens `e0`..`e{S-1}`. The time field cannot be a second token stream: every model input in
this codebase is one token per position (pairs are two documents, not two fields). Its content is
constant, so it is kept as the float array `time_deltas` [N, L] (all 1) next to the tokens: the
model does not read it (it would add nothing), and the composite objective's `time` loss regresses
it from each position's encoding, the counterpart of the authors' near-useless time loss.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from spt_jax.data.base import generated_splits, generated_task
from spt_jax.data.vocab import NUM_SPECIAL, Vocabulary


@dataclasses.dataclass(frozen=True)
class Spec:
  num_train: int = 8000
  num_val: int = 1000
  num_test: int = 1000
  length: int = 64
  num_states: int = 3      # event types
  num_presets: int = 10    # transition matrices = classes
  preset_seed: int = 0     # the authors' np.random.seed(0)
  seed: int = 0

  def __post_init__(self):
    for key in ("length", "num_train", "num_val", "num_test"):
      if getattr(self, key) < 1:
        raise ValueError(f"config.data.markov.{key}={getattr(self, key)} must be >= 1.")
    if self.num_states < 2:
      raise ValueError(f"config.data.markov.num_states={self.num_states} must be >= 2.")
    if self.num_presets < 2:
      raise ValueError(f"config.data.markov.num_presets={self.num_presets} must be >= 2.")

  @property
  def vocab(self) -> Vocabulary:
    return vocabulary(self.num_states)


def vocabulary(num_states: int) -> Vocabulary:
  return Vocabulary(tokens=tuple(f"e{i}" for i in range(num_states)))


def presets(spec: Spec) -> np.ndarray:
  """[P, S, S] row-stochastic transition matrices, as the authors' `Preset`s draw them."""
  draws = np.random.RandomState(spec.preset_seed).rand(spec.num_presets, spec.num_states,
                                                        spec.num_states)
  return draws / draws.sum(axis=2, keepdims=True)


def generate(spec: Spec, matrices: np.ndarray, num: int, rng: np.random.Generator
             ) -> dict[str, np.ndarray]:
  """`num` sequences: uint8 event tokens [num, length], int32 preset labels [num], float32
  `time_deltas` [num, length] (all 1)."""
  labels = rng.integers(0, spec.num_presets, num)
  state = rng.integers(0, spec.num_states, num)
  uniforms = rng.random((num, spec.length))
  cumulative = np.cumsum(matrices, axis=2)
  events = np.empty((num, spec.length), np.int64)
  for t in range(spec.length):  # As theirs, the first recorded event is one step from the start.
    rows = cumulative[labels, state]
    # Inverse-CDF draw; the clip guards against a last cumulative entry a rounding below 1.
    state = np.minimum((uniforms[:, t, None] >= rows).sum(1), spec.num_states - 1)
    events[:, t] = state
  return {"inputs": (events + NUM_SPECIAL).astype(np.uint8), "labels": labels.astype(np.int32),
          "time_deltas": np.ones((num, spec.length), np.float32)}


def _draw(spec: Spec, num: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
  return generate(spec, presets(spec), num, rng)


def load_splits(spec: Spec) -> dict[str, dict[str, np.ndarray]]:
  return generated_splits(spec, _draw)


TASK = generated_task("markov_events", "markov", Spec, _draw,
                      num_classes=lambda spec: spec.num_presets,
                      doc="The toy event-sequence task, generated in memory.")
