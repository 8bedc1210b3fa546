"""The toy event-sequence task (GraP's `toy-markovian`, spt_jax/data/markov_events.py) and the
composite objective's time loss on it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import load_config
from spt_jax import config_lib, experiment, train
from spt_jax.data import markov_events, tasks
from spt_jax.objectives import composite


def test_presets_are_the_authors_matrices():
  """make-dataset.py seeds numpy's global generator with 0 and then draws each of its 10 presets
  with np.random.rand(3, 3), rows normalised: the same matrices, in the same order."""
  legacy = np.random.RandomState(0)
  theirs = []
  for _ in range(10):
    probs = legacy.rand(3, 3)
    theirs.append(probs / np.sum(probs, axis=1, keepdims=True))
  np.testing.assert_array_equal(markov_events.presets(markov_events.Spec()), np.stack(theirs))


def test_sequences_follow_their_preset():
  spec = markov_events.Spec(num_train=4000, num_val=10, num_test=10)
  data = markov_events.load_splits(spec)
  train_split = data["train"]
  assert train_split["inputs"].shape == (4000, 64) and train_split["inputs"].dtype == np.uint8
  events = train_split["inputs"].astype(int) - spec.vocab.first_regular_id
  assert events.min() == 0 and events.max() == 2
  labels = train_split["labels"]
  assert set(labels) == set(range(10)) and np.bincount(labels).min() > 300  # uniform presets
  np.testing.assert_array_equal(train_split["time_deltas"], 1.0)  # the constant time field
  matrices = markov_events.presets(spec)
  for preset in range(10):
    seqs = events[labels == preset]
    counts = np.zeros((3, 3))
    np.add.at(counts, (seqs[:, :-1].ravel(), seqs[:, 1:].ravel()), 1)
    # ~25,000 transitions per preset: frequencies within 0.02 of the matrix (a few standard errors).
    np.testing.assert_allclose(counts / counts.sum(1, keepdims=True), matrices[preset], atol=0.02)
  # One stream per split: a split's size never changes another split's sequences.
  other = markov_events.load_splits(markov_events.Spec(num_train=4000, num_val=50, num_test=10))
  np.testing.assert_array_equal(other["train"]["inputs"], train_split["inputs"])
  np.testing.assert_array_equal(other["test"]["inputs"], data["test"]["inputs"])


def test_task_entry_config_and_errors():
  cfg = config_lib.data_config("markov_events")
  assert (cfg.max_length, cfg.markov.num_train, cfg.markov.num_val, cfg.markov.num_test) == (
      64, 8000, 1000, 1000)
  assert tasks.signature(cfg)["vocab"] == ("e0", "e1", "e2")
  cfg.markov.update(num_train=32, num_val=8, num_test=8)
  task = tasks.load(cfg)
  assert task.num_classes == 10 and set(task.splits) == {"train", "val", "test"}
  cfg.markov.length = 65
  with pytest.raises(ValueError, match="markov.length=65 exceeds config.data.max_length"):
    tasks.load(cfg)
  with pytest.raises(ValueError, match="markov.num_states"):
    markov_events.Spec(num_states=1)
  for name in ("markov_spt", "markov_scratch", "markov_grap"):
    for arg in (None, "smoke"):
      config_lib.validate(load_config(name, arg), 1)
  grap = load_config("markov_grap")
  assert grap.pretrain.composite.losses == ("mlm", "span", "random")
  assert grap.pretrain.num_steps == 2500 and grap.finetune.init_from.exclude == ("pretrain_heads/.*",)


def test_time_loss_is_the_l1_error_of_the_deltas():
  """The time head regresses every real position's delta (all 1): with its kernel at 0 and bias b
  the loss is |b − 1| and its "accuracy" (within half a unit) is 1 exactly when |b − 1| < 0.5."""
  config = load_config("markov_grap", "smoke")
  config.pretrain.composite.losses = ("mlm", "time")
  config.data.markov.update(num_train=32, num_val=8, num_test=8)
  task = tasks.load(config.data)
  comp = train.make_objective(config, "pretrain", task)
  assert "time_deltas" in comp.splits(task)["train"]
  params = jax.jit(comp.init_params)(jax.random.PRNGKey(0), jnp.zeros((1, 64), jnp.int32))
  batch = {k: jnp.asarray(v[:4]) for k, v in comp.splits(task)["train"].items()}
  batch = dict(batch, inputs=batch["inputs"].astype(jnp.int32), weights=jnp.ones(4))
  views = comp.views(jax.random.PRNGKey(1), batch)
  z, mask = comp.encode(params["encoder"], views["view1"], train=False, rng=jax.random.PRNGKey(0))
  heads = params[composite.HEADS]
  for bias, accurate in ((0.7, 1.0), (2.0, 0.0)):
    time = {"kernel": jnp.zeros_like(heads["time"]["kernel"]), "bias": jnp.full((1,), bias)}
    loss, metrics = comp.head_loss("time", z, mask, dict(heads, time=time), views, batch)
    np.testing.assert_allclose(loss, abs(bias - 1.0), rtol=1e-5)
    assert float(metrics["time_accuracy"][0] / metrics["time_accuracy"][1]) == accurate


def test_grap_phase_on_event_sequences_with_the_time_loss(tmp_path):
  config = load_config("markov_grap", "smoke")
  config.phases = "pretrain"
  config.data.markov.update(num_train=64, num_val=32, num_test=16, length=16)
  config.data.max_length = 16
  config.model.update(num_layers=1, d_model=16, num_heads=2, d_ff=32)
  config.pretrain.update(num_steps=10, batch_size=16, eval_every_steps=10,
                         checkpoint_every_steps=10, log_every_steps=5)
  config.pretrain.composite.update(losses=("mlm", "random", "time"), log_weights_every=5)
  config.pretrain.grap.probe = "token_mlp"
  pre = experiment.run(config, str(tmp_path))["pretrain"]
  assert tuple(pre["final_weights"]) == ("mlm", "random", "time")
  assert np.isfinite(pre["test_of_best"]["time_loss"])
  report = pre["grap"]
  assert report["chance"] == pytest.approx(np.bincount(
      tasks.load(config.data).splits["val"]["labels"]).max() / 32)
  assert 0 <= report["probe_val_accuracy"] <= 1 and "verdict" in report
