import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from spt_jax import tree
from spt_jax.objectives import classification
from spt_jax.data.vocab import PAD_ID
from spt_jax.models import transformer

TOKENS = jnp.array([[5, 6, 7, 8, 0, 0], [3, 4, 5, 6, 7, 9]])


def small(**kw):
  kw = dict(dict(vocab_size=12, max_length=16, num_layers=2, d_model=16, num_heads=2, d_ff=32,
                 num_classes=3), **kw)
  return transformer.build(**kw)


def test_attention_projections_are_addressable_subtrees():
  params = small().init(jax.random.PRNGKey(0), TOKENS)["params"]
  paths = tree.flatten(params)
  for name in ("query", "key", "value", "out"):
    assert f"encoder/layer_1/attention/{name}/kernel" in paths
  assert {"classifier/kernel", "encoder/final_norm/scale", "encoder/token_embedding/embedding"} <= set(paths)
  mlm = small(head="mlm").init(jax.random.PRNGKey(0), TOKENS)["params"]
  assert "mlm_head/kernel" in tree.flatten(mlm) and "classifier/kernel" not in tree.flatten(mlm)


@pytest.mark.parametrize("pooling", ["mean", "max", "last", "cls"])
@pytest.mark.parametrize("position", ["sinusoidal", "learned", "none"])
def test_appending_padding_does_not_change_logits(pooling, position):
  model = small(pooling=pooling, position=position)
  params = model.init(jax.random.PRNGKey(1), TOKENS)["params"]
  padded = jnp.concatenate([TOKENS, jnp.full((2, 5), PAD_ID)], axis=1)
  np.testing.assert_allclose(model.apply({"params": params}, TOKENS),
                             model.apply({"params": params}, padded), rtol=1e-5, atol=1e-5)


def test_mlm_logits_at_real_positions_ignore_padding():
  model = small(head="mlm")
  params = model.init(jax.random.PRNGKey(2), TOKENS)["params"]
  padded = jnp.concatenate([TOKENS, jnp.full((2, 3), PAD_ID)], axis=1)
  a = model.apply({"params": params}, TOKENS)
  b = model.apply({"params": params}, padded)[:, :TOKENS.shape[1]]
  real = np.asarray(TOKENS != PAD_ID)
  np.testing.assert_allclose(np.asarray(a)[real], np.asarray(b)[real], rtol=1e-5, atol=1e-5)


def test_train_step_lowers_loss_on_a_fixed_batch():
  model = small(num_classes=3)
  labels = jnp.array([0, 2])
  batch = {"inputs": TOKENS, "labels": labels, "weights": jnp.ones(2)}
  objective = classification.Classification(model)
  params = model.init(jax.random.PRNGKey(3), TOKENS)["params"]
  tx = optax.adamw(3e-3)
  opt_state = tx.init(params)
  loss_fn = lambda p: objective.loss(p, batch, jax.random.PRNGKey(0), train=True)[0]

  @jax.jit
  def step(params, opt_state):
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  first = float(loss_fn(params))
  for _ in range(5):
    params, opt_state, _ = step(params, opt_state)
  assert float(loss_fn(params)) < first - 0.05


def test_sequence_longer_than_max_length_is_rejected():
  model = small(max_length=4)
  with pytest.raises(ValueError, match="exceeds the model's max_length 4"):
    model.init(jax.random.PRNGKey(0), TOKENS)
