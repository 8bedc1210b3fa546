"""spt_jax/platform.py's Dense matmul: the same layer, with a kernel gradient XLA:CPU runs in YNNPACK."""
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from spt_jax import platform
from spt_jax.models import transformer


def _value_and_grads(layer, x):
  params = layer.init(jax.random.PRNGKey(0), x)["params"]
  cotangent = jax.random.normal(jax.random.PRNGKey(1), layer.apply({"params": params}, x).shape)
  loss = lambda p, x: (layer.apply({"params": p}, x) * cotangent).sum()
  return jax.value_and_grad(loss, argnums=(0, 1))(params, x)


# (input shape, features): both branches of the backward (the narrower operand is transposed).
@pytest.mark.parametrize("shape,features", [((2, 5, 3), 7), ((6, 8), 2), ((4, 9, 16), 16)])
def test_values_and_gradients_match_nn_dense(shape, features):
  x = jax.random.normal(jax.random.PRNGKey(2), shape)
  expected = _value_and_grads(nn.Dense(features), x)
  got = _value_and_grads(nn.Dense(features, dot_general=platform.kernel_grad_dot_general), x)
  for a, b in zip(jax.tree.leaves(expected), jax.tree.leaves(got)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _token_contracting_dots(dot_general):
  """Dots in the compiled kernel gradient that contract the leading (token) axis of their lhs."""
  layer = nn.Dense(32, dot_general=dot_general)
  x = jnp.ones((512, 128))
  params = layer.init(jax.random.PRNGKey(0), x)["params"]
  grad = jax.jit(jax.grad(lambda p: layer.apply({"params": p}, x).sum()))
  hlo = grad.lower(params).compile().as_text()
  return re.findall(r" dot\([^\n]*lhs_contracting_dims=\{0\}", hlo)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU code-generation guard")
def test_kernel_gradient_is_not_a_transposed_operand_dot_on_cpu():
  # XLA's transpose folding would merge our explicit transpose back into the dot; the barriers must
  # stop it. The check itself must see the default layer's transposed-operand dot.
  assert _token_contracting_dots(None), "the check no longer sees nn.Dense's own kernel-gradient dot"
  assert not _token_contracting_dots(platform.kernel_grad_dot_general)


def _transposed_operand(width_x: int, width_g: int) -> str:
  """'x' or 'g': the operand of the kernel gradient xᵀ·g that the backward transposes."""
  f = lambda x, k: platform.kernel_grad_dot_general(x, k, (((1,), (0,)), ((), ())))
  x, kernel, g = jnp.ones((32, width_x)), jnp.ones((width_x, width_g)), jnp.ones((32, width_g))
  jaxpr = jax.make_jaxpr(lambda x, k, g: jax.vjp(f, x, k)[1](g))(x, kernel, g).jaxpr
  origin = {jaxpr.invars[0]: "x", jaxpr.invars[2]: "g"}
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in ("reshape", "transpose") and eqn.invars[0] in origin:
      if eqn.primitive.name == "transpose":
        return origin[eqn.invars[0]]
      origin[eqn.outvars[0]] = origin[eqn.invars[0]]
  raise AssertionError(f"no transposed operand in the kernel gradient:\n{jaxpr}")


# The narrower operand; of two equally wide ones the gradient, which is in memory already, where x is
# often an activation XLA would recompute inside the transposed copy, in its strided order.
@pytest.mark.parametrize("width_x,width_g,expected", [(8, 16, "x"), (16, 8, "g"), (16, 16, "g")])
def test_kernel_gradient_transposes_the_narrower_operand_and_on_ties_the_gradient(
    width_x, width_g, expected):
  assert _transposed_operand(width_x, width_g) == expected


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="an XLA:CPU code-generation guard")
def test_pixel_input_projection_gradient_is_not_a_transposed_operand_dot_on_cpu():
  def token_contracting_dots(dot_general):
    model = transformer.build(head="mlm", mlm_outputs=256, input_kind="pixels", vocab_size=1,
                              max_length=64, num_layers=1, d_model=16, num_heads=2, d_ff=16,
                              attention="dense", dot_general=dot_general)
    pixels = jnp.ones((4, 64), jnp.int32)
    params = model.init(jax.random.PRNGKey(0), pixels)["params"]

    def loss(projection):  # only the input projection's gradient: XLA drops the other layers'
      encoder = {**params["encoder"], "input_projection": projection}
      return model.apply({"params": {**params, "encoder": encoder}}, pixels).sum()

    grad = jax.jit(jax.grad(loss)).lower(params["encoder"]["input_projection"]).compile()
    return re.findall(r" dot\([^\n]*lhs_contracting_dims=\{0[,}]", grad.as_text())

  assert token_contracting_dots(None), "the check no longer sees the default kernel-gradient dot"
  assert not token_contracting_dots(platform.kernel_grad_dot_general)


def test_refuses_what_nn_dense_never_asks_for():
  x, kernel = jnp.ones((4, 3)), jnp.ones((4, 5))
  with pytest.raises(ValueError, match=r"x @ kernel only.*\(4, 3\) and \(4, 5\)"):
    platform.kernel_grad_dot_general(x, kernel, (((0,), (0,)), ((), ())))


def test_model_uses_it_on_cpu_only(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
  cfg = transformer.ModelConfig(vocab_size=8, max_length=4)
  assert platform.dense_dot_general() is platform.kernel_grad_dot_general
  assert platform.specialise(cfg).dot_general is platform.kernel_grad_dot_general
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  assert platform.dense_dot_general() is None
  assert platform.specialise(cfg).dot_general is None
