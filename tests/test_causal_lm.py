"""The causal-LM SPT objective (`objective='clm'`, spt_jax/objectives/causal.py)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
import pytest

from conftest import load_config, tiny
from spt_jax import config_lib, experiment, train
from spt_jax.data.tasks import TaskData
from spt_jax.data.vocab import BYTE_VOCAB, PAD_ID

TOKENS = np.array([[5, 9, 7, 8, 6, 0, 0, 0], [4, 4, 6, 9, 5, 7, 8, 3], [6, 0, 0, 0, 0, 0, 0, 0]],
                  np.int32)


def _objective(input_kind="tokens", pixel_loss="l1", **model):
  config = ml_collections.ConfigDict(dict(
      model=config_lib.transformer_config(num_layers=2, d_model=16, num_heads=2, d_ff=32, **model),
      pretrain=config_lib.phase_config("clm", pixel_loss=pixel_loss)))
  task = TaskData("t", BYTE_VOCAB, 2, TOKENS.shape[1], {"train": {"inputs": TOKENS}}, "test",
                  input_kind=input_kind, pixel_mean=127.5, pixel_std=127.5)
  objective = train.make_objective(config, "pretrain", task)
  params = objective.init_params(jax.random.PRNGKey(0), jnp.asarray(TOKENS[:1]))
  return objective, params


def _batch(inputs=TOKENS, weights=(1.0, 1.0, 1.0)):
  return {"inputs": jnp.asarray(inputs), "labels": jnp.zeros(len(inputs), jnp.int32),
          "weights": jnp.asarray(weights, jnp.float32)}


def test_next_token_loss_scores_every_real_next_token_and_no_pad():
  objective, params = _objective()
  loss, sums = objective.loss(params, _batch(), jax.random.PRNGKey(1), train=False)
  logits = np.asarray(objective.model.apply({"params": params}, jnp.asarray(TOKENS)), np.float64)
  # By hand: position t predicts token t+1, wherever token t+1 is real.
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  rows, steps = np.nonzero(TOKENS[:, 1:] != PAD_ID)
  ce = -log_p[rows, steps, TOKENS[rows, steps + 1]]
  assert len(ce) == 4 + 7 + 0 and float(sums["loss"][1]) == len(ce)
  np.testing.assert_allclose(float(loss), ce.mean(), rtol=1e-5)
  assert set(sums) == {"loss", "accuracy"}
  # A padding example (weight 0) contributes nothing.
  _, without = objective.loss(params, _batch(weights=(1.0, 0.0, 1.0)), jax.random.PRNGKey(1),
                              train=False)
  assert float(without["loss"][1]) == 4


def test_pretraining_model_is_causal_whatever_the_model_config_says():
  objective, params = _objective(causal=False)
  assert objective.model.cfg.causal
  changed = TOKENS.copy()
  changed[1, 5:] = [3, 3, 3]  # inputs after position 4 of row 1
  a = objective.model.apply({"params": params}, jnp.asarray(TOKENS))
  b = objective.model.apply({"params": params}, jnp.asarray(changed))
  np.testing.assert_allclose(a[1, :5], b[1, :5], rtol=1e-6, atol=1e-6)
  assert not np.allclose(a[1, 5:], b[1, 5:])


@pytest.mark.parametrize("pixel_loss", ["l1", "ce"])
def test_next_pixel_prediction(pixel_loss):
  objective, params = _objective("pixels", pixel_loss)
  pixels = (np.arange(24).reshape(3, 8) * 11 % 256).astype(np.uint8)
  batch = _batch(pixels)
  loss, sums = objective.loss(params, batch, jax.random.PRNGKey(1), train=False)
  out = np.asarray(objective.model.apply({"params": params}, jnp.asarray(pixels)))
  target = pixels[:, 1:]
  if pixel_loss == "l1":
    assert out.shape[-1] == 1 and objective.selection_metric == "r2"
    expected = np.abs(out[:, :-1, 0] - (target - 127.5) / 127.5).mean()
  else:
    assert out.shape[-1] == 256 and objective.selection_metric == "accuracy"
    expected = optax.softmax_cross_entropy_with_integer_labels(out[:, :-1], target).mean()
  np.testing.assert_allclose(float(loss), float(expected), rtol=1e-5)
  assert float(sums["loss"][1]) == 3 * 7  # every pixel is real; the last one has no target
  summary = objective.summarize(jax.device_get(sums))
  assert np.isfinite(summary["r2" if pixel_loss == "l1" else "accuracy"])


def test_cls_pooling_is_refused_for_a_causal_lm():
  with pytest.raises(ValueError, match=r"objective='clm'.*pooling='last'"):
    _objective(pooling="cls")


def test_listops_clm_pretrains_causally_then_fine_tunes_causally_on_the_last_token(tmp_path,
                                                                                  cache_dir):
  config = tiny(load_config("listops_clm"), cache_dir)
  assert (config.pretrain.objective, config.model.causal, config.model.pooling) == (
      "clm", True, "last")
  results = experiment.run(config, str(tmp_path))
  pre, fine = results["pretrain"], results["finetune"]
  assert pre["objective"] == "clm" and pre["selection_metric"] == "accuracy"
  assert 0 <= pre["test_of_best"]["accuracy"] <= 1 and np.isfinite(pre["test_of_best"]["loss"])
  assert 0 <= fine["test_of_best"]["accuracy"] <= 1
  report = (tmp_path / "finetune" / "init_from.json").read_text()
  assert "mlm_head/kernel" in report  # the LM head stays behind; the encoder is loaded
