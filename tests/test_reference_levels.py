"""Reference levels of masked pretraining, on a task whose levels are known in closed form."""
import math

import numpy as np
import pytest

from spt_jax.analysis import reference_levels
from spt_jax.data import listops
from spt_jax.data.vocab import Vocabulary
from spt_jax.models import transformer
from spt_jax.objectives.masked import MaskedTokenPrediction

RATE = 0.3


def _cycles(n: int, length: int, rng) -> np.ndarray:
  """Sequences a b c a b c ... from a random phase: each token fixes both of its neighbours."""
  vocab = Vocabulary(tokens=("a", "b", "c"))
  first = vocab.first_regular_id
  phase = rng.integers(0, 3, (n, 1))
  return (first + (phase + np.arange(length)) % 3).astype(np.int32)


def test_levels_on_a_cyclic_task_match_their_closed_forms():
  rng = np.random.default_rng(0)
  length = 60
  splits = {s: {"inputs": _cycles(n, length, rng), "labels": np.zeros(n, np.int32)}
            for s, n in (("train", 400), ("val", 300))}
  vocab = Vocabulary(tokens=("a", "b", "c"))
  model = transformer.SequenceModel(transformer.ModelConfig(vocab_size=vocab.size,
                                                            max_length=length), head="mlm")
  objective = MaskedTokenPrediction(model, mask_rate=RATE, first_regular_id=vocab.first_regular_id,
                                    vocab_size=vocab.size)
  import jax
  out = reference_levels.levels(objective, splits, eval_batch_size=50,
                                eval_rng=jax.random.PRNGKey(3), vocab=vocab.size)
  n = out["positions"]
  assert abs(n / (300 * length) - RATE) < 0.02
  # Frequencies: each token is exactly a third of the training targets.
  assert out["frequencies"]["loss"] == pytest.approx(math.log(3), abs=1e-3)
  assert out["frequencies"]["accuracy"] == pytest.approx(1 / 3, abs=0.03)
  # ±1: a target is known unless both neighbours are masked too (r², or r at either end, where one
  # neighbour is the sequence's end); then it is a uniform guess among the three.
  unknown = ((length - 2) * RATE**2 + 2 * RATE) / length
  assert out["neighbours ±1"]["loss"] == pytest.approx(unknown * math.log(3), abs=0.02)
  assert out["neighbours ±1"]["accuracy"] == pytest.approx(1 - unknown * 2 / 3, abs=0.02)
  # ±2: unknown only when all four neighbours are hidden (about r⁴).
  assert out["neighbours ±2"]["loss"] < 0.3 * out["neighbours ±1"]["loss"]
  assert out["neighbours ±2"]["accuracy"] > 0.99
  # Read as an image 6 wide, the pixels above and below are 6 positions away: the same token in a
  # cycle of 3, so this level too is known unless all four neighbours are hidden.
  grid = reference_levels.levels(objective, splits, eval_batch_size=50,
                                 eval_rng=jax.random.PRNGKey(3), vocab=vocab.size, grid_width=6)
  assert grid["neighbours ±2"] == out["neighbours ±2"]
  assert grid["grid neighbours"]["accuracy"] > 0.99
  text = reference_levels.table(out, run_loss=0.5, run_accuracy=0.8)
  assert "| neighbours ±1 |" in text and "**this run**" in text


def test_listops_grammar_ceiling_knows_kinds_not_values():
  ids = [listops.VOCAB.id_of(t) for t in ("]", "3", "[MAX", "0")]
  nats, accuracy = listops.masked_ceiling(np.array(ids))
  np.testing.assert_allclose(nats, [0.0, math.log(10), math.log(4), math.log(10)])
  np.testing.assert_allclose(accuracy, [1.0, 0.1, 0.25, 0.1])
