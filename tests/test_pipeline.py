import numpy as np
import pytest

from conftest import load_config
from spt_jax import config_lib
from spt_jax.data import pipeline

ARRAYS = {"inputs": np.arange(50)[:, None] * np.ones((1, 3), int), "labels": np.arange(50)}


def _take(it, n):
  return [next(it) for _ in range(n)]


def test_batches_are_a_function_of_seed_and_step():
  full = _take(pipeline.train_batches(ARRAYS, 8, seed=3), 13)  # crosses two epoch boundaries
  resumed = _take(pipeline.train_batches(ARRAYS, 8, seed=3, start_step=7), 6)
  for a, b in zip(full[7:], resumed):
    np.testing.assert_array_equal(a["labels"], b["labels"])
  other = next(pipeline.train_batches(ARRAYS, 8, seed=4))
  assert not np.array_equal(full[0]["labels"], other["labels"])


def test_an_epoch_visits_distinct_examples_and_processes_split_each_batch():
  epoch = np.concatenate([b["labels"] for b in _take(pipeline.train_batches(ARRAYS, 8, seed=0), 6)])
  assert len(set(epoch)) == 48  # 50 // 8 full batches; the remainder of 2 is dropped
  whole = next(pipeline.train_batches(ARRAYS, 8, seed=0))["labels"]
  parts = [next(pipeline.train_batches(ARRAYS, 8, seed=0, process_index=i, process_count=2))["labels"]
           for i in range(2)]
  assert sorted(np.concatenate(parts)) == sorted(whole) and len(parts[0]) == 4


def test_eval_counts_every_example_exactly_once_across_processes():
  seen = []
  for i in range(2):
    for b in pipeline.eval_batches(ARRAYS, 16, process_index=i, process_count=2):
      seen += list(b["labels"][b["weights"] > 0])
  assert sorted(seen) == list(range(50))


def test_errors_name_the_problem():
  with pytest.raises(ValueError, match="not divisible by the number of processes 3"):
    next(pipeline.train_batches(ARRAYS, 8, seed=0, process_count=3))
  with pytest.raises(ValueError, match="fewer than one batch of 64"):
    next(pipeline.train_batches(ARRAYS, 64, seed=0))


def test_a_training_subset_is_fixed_by_the_seed_and_refuses_impossible_sizes():
  part = pipeline.subset(ARRAYS, 10, seed=0)
  labels = part["labels"]
  assert len(labels) == 10 and len(set(labels)) == 10 and list(labels) == sorted(labels)
  np.testing.assert_array_equal(part["inputs"][:, 0], labels)  # rows stay together
  np.testing.assert_array_equal(pipeline.subset(ARRAYS, 10, seed=0)["labels"], labels)
  assert not np.array_equal(pipeline.subset(ARRAYS, 10, seed=1)["labels"], labels)
  # A smaller subset of the same seed is not required to nest; the whole split is itself.
  np.testing.assert_array_equal(pipeline.subset(ARRAYS, 50, seed=3)["labels"], ARRAYS["labels"])
  for bad in (0, 51):
    with pytest.raises(ValueError, match=f"config.finetune.train_examples={bad} must be between 1 "
                                         f"and the split's 50 examples"):
      pipeline.subset(ARRAYS, bad, seed=0, what="config.finetune.train_examples")


@pytest.mark.parametrize("value", [-5, True])  # a float is refused by the ConfigDict itself
def test_a_bad_training_subset_size_is_refused_with_the_config_checks(value):
  config = load_config("synthetic_scratch")
  config.finetune.train_examples = value
  with pytest.raises(ValueError, match=rf"config.finetune.train_examples={value!r} must be a whole "
                                       r"number >= 0 \(0: the whole training split\)"):
    config_lib.validate(config, 1)
