import re

import jax
import jax.numpy as jnp
import numpy as np

from spt_jax import masking
from spt_jax.data.vocab import MASK_ID, PAD_ID
from spt_jax.objectives.base import predicted
from spt_jax.objectives.masked import token_loss

RNG = jax.random.PRNGKey(0)


def _tokens(batch=64, length=512, real=300):
  toks = jax.random.randint(RNG, (batch, length), 3, 20)
  return jnp.where(jnp.arange(length)[None] < real, toks, PAD_ID)


def test_measured_rate_matches_config_and_pads_are_never_masked():
  tokens = _tokens()
  for rate in (0.1, 0.15, 0.5):
    mask = np.asarray(masking.draw_mask(jax.random.PRNGKey(1), tokens, rate))
    real = np.asarray(tokens != PAD_ID)
    assert not mask[~real].any()
    measured = mask[real].mean()
    # 19,200 Bernoulli draws: 5 standard deviations is < 0.02 for every rate here.
    assert abs(measured - rate) < 5 * np.sqrt(rate * (1 - rate) / real.sum())


def test_corrupt_replaces_only_masked_positions():
  tokens = _tokens()
  mask = masking.draw_mask(jax.random.PRNGKey(2), tokens, 0.15)
  out = masking.corrupt(RNG, tokens, mask, bert_mix=False, first_regular_id=3, vocab_size=20)
  assert (np.asarray(out)[np.asarray(mask)] == MASK_ID).all()
  assert (np.asarray(out)[~np.asarray(mask)] == np.asarray(tokens)[~np.asarray(mask)]).all()


def test_bert_mix_proportions():
  tokens = _tokens()
  mask = np.asarray(masking.draw_mask(jax.random.PRNGKey(3), tokens, 0.5))
  out = np.asarray(masking.corrupt(RNG, tokens, jnp.asarray(mask), bert_mix=True,
                                   first_regular_id=3, vocab_size=20))[mask]
  orig = np.asarray(tokens)[mask]
  assert abs((out == MASK_ID).mean() - 0.8) < 0.02
  assert ((out >= 3) & (out < 20)).sum() + (out == MASK_ID).sum() == out.size  # never pad or cls
  assert (out == orig).mean() > 0.09  # 10% kept + random draws that hit the original token


def test_loss_counts_masked_positions_only():
  tokens = jnp.array([[4, 5, 6, 7, PAD_ID]])
  mask = jnp.array([[False, True, False, True, False]])
  logits = jax.random.normal(RNG, (1, 5, 10))
  loss, metrics = token_loss(logits, tokens, mask)
  # By construction: the loss is the mean CE over exactly the two masked positions...
  logp = jax.nn.log_softmax(logits)
  expected = -(logp[0, 1, 5] + logp[0, 3, 7]) / 2
  np.testing.assert_allclose(loss, expected, rtol=1e-6)
  assert float(metrics["loss"][1]) == 2
  # ...and no other position receives gradient.
  grad = jax.grad(lambda l: token_loss(l, tokens, mask)[0])(logits)
  assert np.abs(np.asarray(grad)[0, [0, 2, 4]]).max() == 0
  assert np.abs(np.asarray(grad)[0, [1, 3]]).min() > 0


def test_predicted_is_argmax_ties_to_the_first():
  logits = jax.random.normal(jax.random.PRNGKey(0), (4, 32, 256))
  tied = jnp.round(logits)  # many rows with their maximum at several indices
  for x in (logits, tied, jnp.zeros((3, 5))):
    np.testing.assert_array_equal(predicted(x), jnp.argmax(x, -1))
  # Why it is faster on XLA:CPU: the masked-token loss reduces one array at a time, never
  # (value, index) pairs as argmax does.
  targets, mask = jnp.zeros((4, 32), jnp.int32), jnp.ones((4, 32), bool)
  text = jax.jit(token_loss).lower(logits, targets, mask).as_text()
  assert "stablehlo.reduce" in text
  assert not re.search(r"stablehlo\.reduce\(%[^)]*\), \(%", text), "a reduction over pairs"
