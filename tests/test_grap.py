"""GraP loss weighting and composite SPT: the algorithm's maths, its dynamics, and one tiny phase.

The composite objective is spt_jax/objectives/composite/, trained by the one phase trainer.
"""
from __future__ import annotations

import functools
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import load_config
from spt_jax import checkpoints, experiment, grap, init_from, train, tree
from spt_jax.objectives import composite
from spt_jax.data import synthetic
from spt_jax.data.tasks import TaskData


# ---------------------------------------------------------------------------------------- helpers
def _toy_problem(seed=0, b=4, length=5, d=6, classes=3):
  """A fixed z, three heads (two cross-entropies, one quadratic) and a mean-pooled linear probe."""
  rng = np.random.default_rng(seed)  # numpy draws: nothing to compile
  z = jnp.asarray(rng.normal(size=(b, length, d)), jnp.float32)
  heads = [jnp.asarray(rng.normal(size=(d, n)), jnp.float32) for n in (7, classes)]
  targets = [jnp.asarray(rng.integers(0, n, (b, length))) for n in (7, classes)]
  quad_target = jnp.asarray(rng.normal(size=(b, length, d)), jnp.float32)
  probe = jnp.asarray(rng.normal(size=(d, 2)), jnp.float32)
  labels = jnp.asarray(rng.integers(0, 2, b))

  def ce(x, w, t):
    return optax.softmax_cross_entropy_with_integer_labels(x @ w, t).mean()

  losses = [lambda z: ce(z, heads[0], targets[0]), lambda z: ce(z, heads[1], targets[1]),
            lambda z: 0.5 * jnp.mean((z - quad_target) ** 2) * 10.0]
  downstream = lambda z: ce(z.mean(1), probe, labels)
  return z, losses, downstream


def _cos(a, b):
  a, b = np.ravel(a), np.ravel(b)
  return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------------------------------- algorithm
def _first_update(parametrisation, logits, scales=(1.0, 1.0, 1.0)):
  """GraP's first update on the toy problem, its losses multiplied by `scales`: (z, the raw
  per-loss gradients, the downstream loss, new state, z-gradient, coefficients, info)."""
  z, losses, downstream = _toy_problem()
  scales = jnp.asarray(scales)[:, None, None, None]
  grads, down = jax.jit(lambda z: (jnp.stack([jax.grad(f)(z) for f in losses]) * scales,
                                  jax.grad(downstream)(z)))(z)
  weighting = grap.Weighting("grap", len(losses), ema=0.9, warmup=10,
                             parametrisation=parametrisation)
  state = dict(weighting.init(), logits=logits)
  new_state, z_grad, coef, info = jax.jit(weighting)(state, grads, jnp.zeros(3), down,
                                                     jnp.asarray(True))
  return z, grads, downstream, new_state, z_grad, coef, info


def _lookahead_checks(z, downstream, step, logits, direction, eta=1e-4):
  """GraP's ascent direction against −d/dl L_down(z − η step(l)), by autodiff and by central finite
  differences (float64: the look-ahead changes L_down by ~η·h, below float32 resolution)."""
  hyper = -jax.jit(jax.grad(lambda l: downstream(z - eta * step(l, jnp))))(logits)
  cosine = _cos(direction, hyper)
  print(f"hypergradient cosine: {cosine:.6f}")
  assert cosine > 0.99
  with jax.enable_x64(True):
    z64 = jnp.asarray(np.asarray(z), jnp.float64)
    ahead = jax.jit(jax.vmap(lambda l: downstream(z64 - eta * step(l, jnp, jnp.float64))))
    h = 1e-4 * np.eye(3)
    values = np.asarray(ahead(jnp.asarray(np.concatenate([logits + h, logits - h]), jnp.float64)))
    fd = (values[:3] - values[3:]) / 2e-4
  assert _cos(direction, -fd) > 0.99


def test_logit_update_is_the_lookahead_hypergradient_scaled_sgd():
  """'scaled-sgd': GraP's ascent direction on pᵀw(l) equals −d/dl L_down(z − η Σ_i w_i(l) g_i) as
  η → 0, with the steps along the normalised gradients g_i = ∇L_i / m_i that GraP sends to the
  encoder (on the first update m_i = ||∇L_i||) and w(l) = |l| / sqrt(|l|ᵀ C |l|), C the cosines of
  the g_i, differentiated through in both. GraP's p uses the unit downstream gradient: that rescales
  the hypergradient by 1/||∇L_down||, a positive factor that leaves the direction unchanged."""
  logits = jnp.array([1.0, 0.4, 1.7])  # Not all equal, so the direction is not degenerate.
  z, grads, downstream, new_state, z_grad, coef, info = _first_update("scaled-sgd", logits)
  norms = np.linalg.norm(np.asarray(grads).reshape(3, -1), axis=1)

  def step(l, xp, dtype=jnp.float32):
    g = xp.asarray(np.asarray(grads) / norms[:, None, None, None], dtype)
    cos = xp.einsum("i...,j...->ij", g, g)
    return xp.tensordot(grap.weights(l, cos), g, 1)

  _lookahead_checks(z, downstream, step, logits, info["direction"])
  # The step taken is Σ w_i g_i with unit norm, and the coefficients on the raw losses are w_i/m_i.
  np.testing.assert_allclose(jnp.linalg.norm(z_grad), 1.0, rtol=1e-5)
  np.testing.assert_allclose(coef * norms, info["weight"], rtol=1e-5)
  np.testing.assert_allclose(z_grad, step(logits, jnp), rtol=1e-4, atol=1e-7)
  # Ascent: the logits move along the direction (Adam with b1 = 0 keeps each component's sign).
  np.testing.assert_array_equal(np.sign(new_state["logits"] - logits), np.sign(info["direction"]))


def test_logit_update_is_the_lookahead_hypergradient_sgd():
  """'sgd' (the reference's default): the logits weigh the RAW losses. The look-ahead is written on
  the raw gradients alone, with no reference to GraP's normalisation: the unit step along
  Σ_i |l_i| ∇L_i, i.e. L_down(z − η Σ|l_i|∇L_i / ||Σ|l_i|∇L_i||); GraP's direction (computed from
  its normalised statistics and u = |l|·m) is minus its hypergradient, and the z-gradient it sends
  is exactly that unit step, so that at l = 1 it is the plain sum of the losses, rescaled."""
  logits = jnp.array([1.0, 0.4, 1.7])
  scales = (1.0, 0.5, 20.0)  # gradient norms 0.6, 0.3 and 27: raw and normalised weights differ
  z, grads, downstream, new_state, z_grad, coef, info = _first_update("sgd", logits, scales)

  def step(l, xp, dtype=jnp.float32):
    raw = xp.tensordot(grap.magnitude(l), xp.asarray(np.asarray(grads), dtype), 1)
    return raw / xp.linalg.norm(raw)

  _lookahead_checks(z, downstream, step, logits, info["direction"])
  np.testing.assert_allclose(z_grad, step(logits, jnp), rtol=1e-4, atol=1e-7)
  # The coefficients on the raw losses are the logits, up to the one normalising factor.
  np.testing.assert_allclose(coef / coef[0], logits / logits[0], rtol=1e-5)
  np.testing.assert_array_equal(np.sign(new_state["logits"] - logits), np.sign(info["direction"]))
  # With gradient norms this unequal, 'scaled-sgd' takes another step, so its logit direction is
  # not this look-ahead's hypergradient.
  scaled = _first_update("scaled-sgd", logits, scales)
  assert _cos(scaled[4], z_grad) < 0.95
  assert _cos(scaled[-1]["direction"], info["direction"]) < 0.95


def test_start_points_are_the_two_uniform_baselines():
  """At logits 1, GraP-'sgd' steps along the raw sum (the 'raw_sum' baseline) and GraP-'scaled-sgd'
  along the equal-norm sum (the 'equal_norm' baseline), each rescaled to a unit step."""
  _, grads, _, _, z_sgd, _, _ = _first_update("sgd", jnp.ones(3))
  _, _, _, _, z_scaled, _, _ = _first_update("scaled-sgd", jnp.ones(3))
  _, raw, raw_coef, raw_info = grap.Weighting("raw_sum", 3)({}, grads, jnp.zeros(3))
  norm_w = grap.Weighting("equal_norm", 3)
  state, equal, equal_coef, equal_info = norm_w(norm_w.init(), grads, jnp.zeros(3))
  np.testing.assert_allclose(raw, grads.sum(0), rtol=1e-6)
  np.testing.assert_allclose(raw_coef, 1.0)
  norms = np.linalg.norm(np.asarray(grads).reshape(3, -1), axis=1)
  np.testing.assert_allclose(equal_coef, 1 / norms, rtol=1e-5)
  np.testing.assert_allclose(raw_info["grad_norm"], norms, rtol=1e-5)
  assert int(state["norm_updates"]) == 1
  for unit, sum_ in ((z_sgd, raw), (z_scaled, equal)):
    np.testing.assert_allclose(unit, sum_ / jnp.linalg.norm(sum_), rtol=1e-4, atol=1e-7)
  with pytest.raises(ValueError, match="'raw_sum' sums the raw losses"):
    grap.Weighting("uniform", 3)


def test_start_delay_freezes_the_logits_only():
  """With `delay` K the logits (and their Adam state) stay at 1 for the first K steps while the
  statistics accumulate; from step K + 1 they move."""
  weighting = grap.Weighting("grap", 3, delay=4)
  g = jax.random.normal(jax.random.PRNGKey(0), (3, 16)) * jnp.array([[1.0], [2.0], [3.0]])
  d = g[0] + 0.1 * jax.random.normal(jax.random.PRNGKey(1), (16,))
  state = weighting.init()
  step = jax.jit(lambda s: weighting(s, g, jnp.zeros(3), d, jnp.asarray(True))[0])
  for i in range(4):
    state = step(state)
    np.testing.assert_array_equal(state["logits"], 1.0)
    assert int(state["updates"]) == i + 1
  state = step(state)
  assert (state["logits"] != 1.0).all()


def test_statistics_warm_up_then_follow_an_ema():
  prev, new = jnp.array(2.0), jnp.array(4.0)
  assert grap.smooth(prev, new, jnp.array(0), 0.9, 10) == 4.0            # first: the value
  np.testing.assert_allclose(grap.smooth(prev, new, jnp.array(3), 0.9, 10), (2 * 3 + 4) / 4)
  np.testing.assert_allclose(grap.smooth(prev, new, jnp.array(10), 0.9, 10), 0.9 * 2 + 0.1 * 4)


@pytest.mark.parametrize("parametrisation", grap.PARAMETRISATIONS)
def test_grap_drives_an_unaligned_loss_weight_down(parametrisation):
  """Three losses whose gradients share direction with the downstream gradient (cosine 0.2-0.3, at
  very different scales) and one whose gradient is independent noise, fresh every step: with the
  default settings (Adam 0.01, betas (0, 0.99), EMA 0.9, 10 warm-up updates) the noise loss falls
  below 5% of the largest weight within a bounded number of steps, and the aligned ones keep theirs."""
  weighting = grap.Weighting("grap", 4, parametrisation=parametrisation)
  cosines = jnp.array([0.3, 0.2, 0.3, 0.0])
  scales = jnp.array([1.0, 10.0, 0.1, 5.0])

  def step(state, key):
    kd, kn = jax.random.split(key)
    d = jax.random.normal(kd, (256,))
    d = d / jnp.linalg.norm(d)
    noise = jax.random.normal(kn, (4, 256)) / 16.0
    g = (cosines[:, None] * d + jnp.sqrt(1 - cosines[:, None] ** 2) * noise) * scales[:, None]
    state, _, _, info = weighting(state, g, jnp.zeros(4), 3.0 * d, jnp.asarray(True))
    return state, info["weight"]

  _, history = jax.jit(lambda s, k: jax.lax.scan(step, s, k))(
      weighting.init(), jax.random.split(jax.random.PRNGKey(0), 400))
  history = np.asarray(history)
  below = np.flatnonzero(history[:, 3] < 0.05 * history.max(1))
  print(f"unaligned loss below 5% of the largest weight from step {below[0] + 1}")
  assert below.size and below[0] + 1 <= 300
  assert (history[-1, :3] > 0.3).all()


def test_baselines():
  g = jnp.array([[1.0, 0.0], [-1.0, 1.0]])
  projected, conflicts = grap.pcgrad(g, jax.random.PRNGKey(0))
  # g0 loses its component along g1 and vice versa; the result conflicts with neither.
  np.testing.assert_allclose(projected, [0.5 + 0.0, 0.5 + 1.0], atol=1e-6)
  assert conflicts.tolist() == [1, 1]
  assert all(float(projected @ gi) >= 0 for gi in g)
  weighting = grap.Weighting("gradnorm", 2, gradnorm_lr=0.1)
  grads = jnp.stack([jnp.ones(4), 10 * jnp.ones(4)])
  step = lambda state, _: (weighting(state, grads, jnp.array([1.0, 1.0]))[0], None)
  state, _ = jax.jit(lambda s: jax.lax.scan(step, s, length=20))(weighting.init())
  # Equal training rates: GradNorm moves towards equal weighted gradient norms, sum kept at K.
  assert state["weights"][0] > state["weights"][1]
  np.testing.assert_allclose(state["weights"].sum(), 2.0, rtol=1e-5)
  assert "grad_norm" in weighting({**state}, grads, jnp.ones(2))[3]
  fixed = grap.Weighting("fixed", 2, fixed=(0.25, 2.0))
  _, z_grad, coef, _ = fixed({}, grads, jnp.zeros(2))
  np.testing.assert_allclose(z_grad, 0.25 + 20.0)
  with pytest.raises(ValueError, match="needs 2 fixed weights"):
    grap.Weighting("fixed", 2, fixed=(1.0,))


# ---------------------------------------------------------------------------------------- losses
def test_span_mask_and_random_targets():
  tokens = jnp.full((64, 200), 5).at[:, -20:].set(0)  # 20 pads at the end of every row
  mask = jax.jit(composite.span_mask, static_argnums=(2, 3))(jax.random.PRNGKey(0), tokens, 0.15,
                                                            3.0)
  assert not mask[:, -20:].any()
  coverage = float(mask[:, :-20].mean())
  assert 0.10 < coverage < 0.17, coverage
  row = np.asarray(mask[:, :-20]).astype(int)
  runs = [len(r) for line in row for r in "".join(map(str, line)).split("0") if r]
  assert 2.3 < np.mean(runs) < 3.7  # overlapping spans merge, so slightly above 3 is fine
  a = jax.jit(composite.random_targets, static_argnums=(1, 2, 3))(jnp.array([0, 1, 0]), 10, 16, 0)
  np.testing.assert_array_equal(a[0], a[2])  # a function of (seed, index, position) only
  assert (a[0] != a[1]).any() and int(a.max()) < 16


def test_label_fraction_hides_the_other_labels():
  arrays = {"inputs": np.zeros((10, 4), np.uint8), "labels": np.ones(10, np.int32)}
  task = TaskData("t", synthetic.vocabulary(4), 2, 4, {"train": arrays, "val": arrays}, "test")
  splits = composite.prepare_splits(task, grap.Weighting("grap", 2), 0.3)
  assert splits["train"]["label_weights"].tolist() == [1] * 3 + [0] * 7
  assert splits["train"]["labels"].tolist() == [1] * 3 + [0] * 7
  assert splits["val"]["label_weights"].all()
  plain = composite.prepare_splits(task, grap.Weighting("raw_sum", 2), 0.3)
  assert "labels" not in plain["train"]  # no downstream signal: labels are never read


def test_configs_and_validation():
  for name in ("synthetic_grap", "synthetic_uniform"):
    for arg in ("smoke", "cpu", "count", "count,cpu", "count,smoke"):
      config = load_config(name, arg)
      composite.validate_phase(config.pretrain, "pretrain")
      assert config.finetune.init_from.exclude == ("pretrain_heads/.*",)
      assert config.data.synthetic.get("count_markers", 0) == (5 if "count" in arg else 0)
  # The adjacency configs lack the count field: their workdirs keep matching.
  assert "count_markers" not in load_config("synthetic_grap").data.synthetic
  assert load_config("synthetic_uniform", "cpu").pretrain.composite.weighting == "raw_sum"
  grap_defaults = load_config("synthetic_grap").pretrain.grap
  assert (grap_defaults.parametrisation, grap_defaults.probe_optimizer) == ("sgd", "own")
  listops = load_config("listops_grap", "smoke")
  composite.validate_phase(listops.pretrain, "pretrain")
  assert listops.pretrain.num_steps == 60 and listops.data.max_length == 128
  config = load_config("synthetic_grap", "smoke")
  for section, key, value, message in [
      ("composite", "losses", ("mlm", "bogus"), "composite.losses"),
      ("composite", "weighting", "nope", "composite.weighting"),
      ("composite", "weighting", "uniform", "'raw_sum' sums the raw losses"),
      ("composite", "temperature", 0.0, "composite.temperature"),
      ("grap", "parametrisation", "adam", "grap.parametrisation"),
      ("grap", "probe", "mlp", "grap.probe="),
      ("grap", "probe_optimizer", "sgd", "grap.probe_optimizer"),
      ("grap", "probe_lr", 0.0, "grap.probe_lr"),
      ("grap", "delay_steps", -1, "grap.delay_steps")]:
    bad = load_config("synthetic_grap", "smoke")
    bad.pretrain[section][key] = value
    with pytest.raises(ValueError, match=message):
      composite.validate_phase(bad.pretrain, "pretrain")
  from spt_jax.data import tasks
  bad = load_config("synthetic_grap", "smoke")
  bad.pretrain.composite.losses = ("mlm", "time")
  with pytest.raises(ValueError, match="composite.losses=.*no time field"):
    train.make_objective(bad, "pretrain", tasks.load(bad.data))
  config.pretrain.grap.label_fraction = 0.0
  with pytest.raises(ValueError, match="grap.label_fraction"):
    composite.validate_phase(config.pretrain, "pretrain")


# ---------------------------------------------------------------------------------------- count task
def _fingerprint(splits) -> str:
  """experiment.data_fingerprint's hash of every array of every split."""
  return experiment.data_fingerprint(TaskData("t", synthetic.vocabulary(2), 2, 1, splits, ""))


def test_count_variant_and_the_adjacency_task_unchanged():
  """count_markers = 0 (or absent) generates the adjacency task bit for bit as before the count
  variant existed (the hashes are of the generator's output before it); count_markers = m puts m
  A/B markers at distinct positions and labels the A majority, balanced."""
  small = dict(num_train=300, num_val=50, num_test=50, length=24, seed=3)
  before = {"small": "3b2c02ef54803a783d2a02bf6e2f9786", "default": "4111e259ddc98fa3ed7fdaa5b05e35ba"}
  for name, fields in (("small", small), ("default", {})):
    for off in ({}, {"count_markers": 0}):
      assert _fingerprint(synthetic.load_splits(synthetic.Spec(**fields, **off))) == before[name]
  spec = synthetic.Spec(**dict(small, count_markers=5))
  data = synthetic.load_splits(spec)["train"]
  a = (data["inputs"] == spec.vocab.id_of("A")).sum(1)
  b = (data["inputs"] == spec.vocab.id_of("B")).sum(1)
  assert ((a + b) == 5).all() and ((a > b) == (data["labels"] == 1)).all()
  assert data["labels"].mean() == 0.5 and set(a) == {0, 1, 2, 3, 4, 5}
  for bad in (2, 25):
    with pytest.raises(ValueError, match="count_markers"):
      synthetic.Spec(**dict(small, count_markers=bad))


# ---------------------------------------------------------------------------------------- objective
# The 'own' probe's learning rate in the objective tests: not the default, so that the probe test
# sees the configured one; the heads test uses it too, so that both compile one GraP train_grads.
PROBE_LR = 0.05


def _tiny_objective(weighting="grap", **grap_fields):
  """A tiny composite objective on the count task: (objective, params, state, one labelled batch)."""
  from spt_jax.data import pipeline, tasks
  config = load_config("synthetic_grap", "count,smoke")
  config.data.synthetic.update(length=16, num_train=64, num_val=16, num_test=16)
  config.data.max_length = 16
  config.model.update(d_model=16, num_heads=2, d_ff=32)
  config.pretrain.composite.weighting = weighting
  if weighting == "fixed":
    config.pretrain.composite.fixed_weights = grap_fields.pop("fixed_weights")
  config.pretrain.grap.update(grap_fields)
  task = tasks.load(config.data)
  comp = train.make_objective(config, "pretrain", task)
  # Op by op, not jitted: the initialisers' small programs serve every model of these shapes, where
  # a jitted init is one large program per model (docs/testing.md).
  params = comp.init_params(jax.random.PRNGKey(0), jnp.zeros((1, 16), jnp.int32))
  batch = next(pipeline.train_batches(comp.splits(task)["train"], 16, seed=0))
  batch = jax.tree.map(jnp.asarray, dict(batch, inputs=batch["inputs"].astype(np.int32)))
  return comp, params, jax.jit(comp.init_state)(), batch


def _per_loss_head_grads(comp, params, batch, rng):
  """Each head's gradient of its own loss, on the z that train_grads computes from `rng`."""
  view_rng, drop1, drop2, _ = jax.random.split(rng, 4)
  views = comp.views(view_rng, batch)
  z, mask = comp.encode(params["encoder"], views["view1"], train=True, rng=drop1)
  z2 = comp.encode(params["encoder"], views["view2"], train=True, rng=drop2)[0]
  return {name: jax.grad(lambda h: comp.head_loss(name, z, mask, h, views, batch, z2=z2)[0])(
      params[composite.HEADS])[name] for name in comp.losses}


def test_heads_train_on_their_unweighted_losses_whatever_the_weights():
  """Fix (b) of issue 18: under fixed weights far from 1 and under GraP, every head's gradient is
  its own loss's unweighted gradient; only the encoder's gradient depends on the weights."""
  rng = jax.random.PRNGKey(3)
  runs = {}
  for name, kwargs in {"fixed": dict(fixed_weights=(0.01, 5.0, 1e-3, 0.3)),
                       "grap": dict(probe_lr=PROBE_LR)}.items():
    comp, params, state, batch = _tiny_objective(name, **kwargs)
    grads, _, _, _ = jax.jit(comp.train_grads)(params, state, batch, rng)
    runs[name] = grads
  expected = jax.jit(lambda p, b: _per_loss_head_grads(comp, p, b, rng))(params, batch)
  for name, grads in runs.items():
    heads = grads[composite.HEADS]
    assert set(heads) == set(expected), name  # the 'own' probe is not a parameter
    for loss, want in expected.items():
      for path, value in tree.flatten(want).items():
        scale = np.abs(value).max()
        np.testing.assert_allclose(tree.flatten(heads[loss])[path], value, rtol=1e-4,
                                   atol=1e-5 * scale, err_msg=f"{name}: {loss}/{path}")
  flat = lambda g: np.concatenate([np.ravel(v) for v in tree.flatten(g["encoder"]).values()])
  assert _cos(flat(runs["fixed"]), flat(runs["grap"])) < 0.99  # the weights do act there


def test_probe_has_its_own_optimiser_and_never_reaches_the_encoder():
  """'own' probe: one step moves it by Adam's first step at grap.probe_lr (|Δ| = lr wherever its
  gradient is not 0), whatever the phase's schedule; a batch without labels leaves it as it is; the
  encoder's gradient is the pullback of the weighted pretraining losses alone. 'shared' gives the
  probe's gradient to the trainer as a parameter of pretrain_heads/ instead."""
  comp, params, state, batch = _tiny_objective(probe_lr=PROBE_LR)
  rng = jax.random.PRNGKey(1)
  train_grads = jax.jit(comp.train_grads)
  grads, new_state, out, info = train_grads(params, state, batch, rng)
  step = np.asarray(new_state["probe"]["out"]["kernel"] - state["probe"]["out"]["kernel"])
  moved = np.abs(step) > 1e-9
  assert moved.mean() > 0.9
  np.testing.assert_allclose(np.abs(step[moved]), PROBE_LR, rtol=1e-3)
  assert "grap_probe_accuracy" in out
  # The encoder's gradient: the VJP of Σ λ_i dL_i/dz, with the coefficients the weighting reported.
  @jax.jit
  def pullback(params, coef):
    view_rng, drop1, drop2, _ = jax.random.split(rng, 4)
    views = comp.views(view_rng, batch)
    z, vjp, mask = jax.vjp(lambda p: comp.encode(p, views["view1"], train=True, rng=drop1),
                           params["encoder"], has_aux=True)
    z2 = comp.encode(params["encoder"], views["view2"], train=True, rng=drop2)[0]
    dz = sum(c * jax.grad(lambda z_: comp.head_loss(n, z_, mask, params[composite.HEADS], views,
                                                   batch, z2=z2)[0])(z)
             for c, n in zip(coef, comp.losses))
    return vjp(dz)[0]
  for path, value in tree.flatten(pullback(params, info["coef"])).items():
    scale = np.abs(value).max()
    np.testing.assert_allclose(tree.flatten(grads["encoder"])[path], value, rtol=1e-4,
                               atol=1e-5 * scale, err_msg=path)
  unlabelled = dict(batch, label_weights=jnp.zeros_like(batch["label_weights"]))
  _, same, _, _ = train_grads(params, state, unlabelled, rng)
  for a, b in zip(jax.tree.leaves(same["probe"]), jax.tree.leaves(state["probe"])):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(same["logits"], state["logits"])

  shared, params, state, batch = _tiny_objective(probe_optimizer="shared")
  assert "probe" not in state and composite.PROBE in params[composite.HEADS]
  grads, _, _, _ = jax.jit(shared.train_grads)(params, state, batch, rng)
  assert np.abs(np.asarray(grads[composite.HEADS][composite.PROBE]["out"]["kernel"])).max() > 0


def test_token_probe_gradient_differs_across_positions():
  """The pooled linear probe's dL_down/dz is one vector per sequence, the same at every position
  (mean pooling): what GraP then aligns with sees only the pooled part of each loss's gradient. The
  per-token MLP probe's gradient differs from position to position."""
  for kind, same in (("pooled_linear", True), ("token_mlp", False)):
    comp, params, state, batch = _tiny_objective(probe=kind)

    @jax.jit  # One program: op by op, this compiles ~90 small ones.
    def probe_gradient(params, state, batch):
      views = comp.views(jax.random.PRNGKey(0), batch)
      z, mask = comp.encode(params["encoder"], views["view1"], train=False,
                            rng=jax.random.PRNGKey(0))
      return jax.grad(lambda z_: comp.probe_loss(z_, mask, state["probe"], views, batch)[0])(z)
    g = np.asarray(probe_gradient(params, state, batch))
    spread = np.abs(g - g[:, :1]).max() / np.abs(g).max()
    assert (spread < 1e-5) == same, (kind, spread)
    assert np.isfinite(comp.probe_accuracy(params["encoder"], state["probe"], comp.probe_val))


def test_grap_report_states_the_precondition_and_the_verdict():
  losses = ("mlm", "span", "random")
  rows = [{"step": s, "mlm": 1.0, "span": 0.5 + 0.1 * (s > 80), "random": 0.2 if s <= 75 else 0.01}
          for s in range(10, 110, 10)]
  report = composite.grap_report(losses, rows, 0.62, 0.5)
  assert report["applicable"] is False and report["verdict"].startswith(composite.NOT_APPLICABLE)
  report = composite.grap_report(losses, rows, 0.66, 0.5)
  assert report["applicable"] is True
  # The last quarter: steps above 75 (80, 90, 100): span 0.5, 0.6, 0.6; random 0.01.
  assert report["median_weight_last_quarter"] == {"mlm": 1.0, "span": 0.6, "random": 0.01}
  assert report["relative_weight"]["random"] == pytest.approx(0.01)
  assert report["useless_below_5pct"] is True and report["useful_above_30pct"] is True
  assert "random 0.010" in report["verdict"]
  rows = [dict(r, span=0.2) for r in rows]
  assert composite.grap_report(losses, rows, 0.66, 0.5)["useful_above_30pct"] is False
  assert composite.grap_report(losses, rows, None, 0.5)["applicable"] is None


# ---------------------------------------------------------------------------------------- phase
def _phase_config(**pretrain):
  """The tiny composite phase of the two tests below, its `pretrain` fields updated: how often it
  logs, validates and saves is the host's, so both train and evaluate with the same programs."""
  config = load_config("synthetic_grap", "smoke")
  config.phases = "pretrain"  # The fine-tune's loading is checked without training it.
  config.data.synthetic.update(length=24, num_train=128, num_val=32, num_test=32)
  config.data.max_length = 24
  config.model.update(d_model=16, num_heads=2, d_ff=32)
  config.pretrain.update(num_steps=30, batch_size=16, eval_every_steps=30,
                         checkpoint_every_steps=30, log_every_steps=10)
  config.pretrain.update(pretrain)
  config.pretrain.composite.log_weights_every = 5
  return config


def test_composite_phase_hands_its_encoder_to_the_finetune(tmp_path):
  config = _phase_config()
  pre = experiment.run(config, str(tmp_path))["pretrain"]

  losses = ("mlm", "span", "contrastive", "random")
  assert pre["weighting"] == "grap" and tuple(pre["final_weights"]) == losses
  assert pre["selection_metric"] == "mlm_accuracy" and pre["steps_per_sec"] > 0
  for key in ("mlm_accuracy", "span_accuracy", "contrastive_accuracy", "random_loss"):
    assert np.isfinite(pre["test_of_best"][key]), key
  # The 'own' probe is in the optimiser state, so evaluation does not score it; the phase's end does.
  assert "grap_probe_accuracy" not in pre["test_of_best"]
  report = pre["grap"]
  assert 0 <= report["probe_val_accuracy"] <= 1 and report["chance"] == 0.5
  assert report["verdict"].startswith(composite.NOT_APPLICABLE) != report["applicable"]
  assert set(report["median_weight_last_quarter"]) == set(losses)
  phase = tmp_path / "pretrain"
  rows = [json.loads(l) for l in open(phase / "metrics.jsonl")]
  weights = [r for r in rows if r["split"] == "weights"]
  assert [r["step"] for r in weights] == [5, 10, 15, 20, 25, 30]
  for r in weights:
    assert all(r[n] >= 0 and all(f"{k}_{n}" in r for k in ("align", "logit", "coef", "grad_norm"))
               for n in losses)
  assert os.path.getsize(phase / "weights.png") > 1000
  for kind in ("latest", "best", "init"):
    assert os.listdir(phase / "checkpoints" / kind)

  # The fine-tune's init_from (source=pretrain, exclude pretrain_heads/.*) into the classifier:
  # every encoder array loads with matching shapes, the heads stay behind, the classifier is fresh.
  task = TaskData("synthetic", synthetic.vocabulary(16), 2, 24, {}, "test")
  objective = train.make_objective(config, "finetune", task)
  params = objective.init_params(jax.random.PRNGKey(0), jnp.zeros((1, 24), jnp.int32))  # op by op
  loaded, report = init_from.load_into(params, config.finetune.init_from, workdir=str(tmp_path),
                                       phase_names=["pretrain", "finetune"], phase="finetune")
  assert report["fresh"] == ["classifier/bias", "classifier/kernel"]
  assert sorted(report["loaded"]) == sorted(p for p in tree.flatten(params) if p != "classifier/bias"
                                            and p != "classifier/kernel")
  assert report["ignored"] and all(p.startswith("pretrain_heads/") for p in report["ignored"])
  assert not any(p.startswith("pretrain_heads/grap_probe") for p in report["ignored"])
  best = checkpoints.restore_item(pre["selected_checkpoint"])
  np.testing.assert_array_equal(tree.flatten(loaded)["encoder/final_norm/scale"],
                                best["encoder"]["final_norm"]["scale"])


def test_interrupted_composite_phase_resumes_bit_identically(tmp_path,
                                                             monkeypatch):
  # The phase of the test above, saved every 10 steps: its programs serve all three runs here.
  def config():
    return _phase_config(eval_every_steps=10, checkpoint_every_steps=10, log_every_steps=5)

  reference = experiment.run(config(), str(tmp_path / "reference"))["pretrain"]

  original = train.make_steps

  def crashing_make_steps(*args):
    step, evaluate = original(*args)

    def crash_after_first_checkpoint(state, *rest):
      if int(state.step) == 13:
        raise KeyboardInterrupt("simulated crash")
      return step(state, *rest)
    crash_after_first_checkpoint.lower = step.lower  # The trainer's memory check compiles through it.
    return crash_after_first_checkpoint, evaluate
  workdir = str(tmp_path / "interrupted")
  monkeypatch.setattr(train, "make_steps", crashing_make_steps)
  with pytest.raises(KeyboardInterrupt):
    experiment.run(config(), workdir)
  latest = os.path.join(workdir, "pretrain", "checkpoints", "latest")
  deadline = time.time() + 60  # The crashed run's asynchronous save of step 10 may still be writing.
  while "10" not in os.listdir(latest) and time.time() < deadline:
    time.sleep(0.05)
  assert max(os.listdir(latest), key=int) == "10"
  monkeypatch.setattr(train, "make_steps", original)
  resumed = experiment.run(config(), workdir)["pretrain"]

  assert resumed["test_of_best"] == reference["test_of_best"]
  assert resumed["final_weights"] == reference["final_weights"]
  for path, value in tree.flatten(checkpoints.restore_item(reference["selected_checkpoint"])).items():
    np.testing.assert_array_equal(
        tree.flatten(checkpoints.restore_item(resumed["selected_checkpoint"]))[path], value,
        err_msg=path)

  def rows(d):
    out = [json.loads(l) for l in open(os.path.join(d, "pretrain", "metrics.jsonl"))]
    return [{k: v for k, v in r.items() if k != "steps_per_sec"} for r in out]
  assert rows(workdir) == rows(tmp_path / "reference")


def test_alignment_analysis_of_a_grap_checkpoint(tmp_path):
  """spt_jax.analysis.grap_alignment: the encoder-space cosine is the one of the gradients taken
  straight through the encoder, every cosine is finite and in [-1, 1], and a non-GraP phase is
  refused with the key named."""
  from spt_jax.analysis import grap_alignment
  from spt_jax.objectives.composite import HEADS, PROBE
  from spt_jax.data import pipeline, tasks
  config = load_config("synthetic_grap", "smoke")
  config.phases = "pretrain"
  config.data.synthetic.update(length=16, num_train=64, num_val=16, num_test=16)
  config.data.max_length = 16
  config.model.update(d_model=16, num_heads=2, d_ff=32)
  config.pretrain.update(num_steps=10, batch_size=16, eval_every_steps=10,
                         checkpoint_every_steps=10, log_every_steps=5)
  # The tool reads the probe from the parameters: the 'shared' probe (the 'own' one is refused).
  config.pretrain.grap.probe_optimizer = "shared"
  experiment.run(config, str(tmp_path))
  result = grap_alignment.analyse(str(tmp_path / "pretrain"), "latest", num_batches=3)
  losses = ["mlm", "span", "contrastive", "random"]
  assert result["losses"] == losses and set(result["spaces"]) == {"z", "encoder", "attention_qk"}
  for per_loss in result["spaces"].values():
    for name in losses:
      values = np.asarray(per_loss[name]["per_batch"])
      assert values.shape == (3,) and np.all(np.abs(values) <= 1 + 1e-6), (name, values)
      assert np.isfinite(per_loss[name]["se"])
  assert 0 <= result["probe_accuracy"] <= 1 and result["labelled_examples"] == 48
  assert "| z |" in grap_alignment.table(result)

  # One batch by hand: grad of (loss ∘ encoder) w.r.t. the encoder, for mlm and for the probe.
  task = tasks.load(config.data)
  comp = train.make_objective(config, "pretrain", task)
  splits = comp.splits(task)
  batch = next(pipeline.train_batches(splits["train"], 16, seed=3, start_step=0))
  params = checkpoints.restore_item(str(tmp_path / "pretrain/checkpoints/latest/10/params"))
  rng = jax.random.PRNGKey(7)
  cosines, _ = grap_alignment.make_batch_statistics(comp)(params, batch, rng)
  b = dict(batch, inputs=jnp.asarray(batch["inputs"], jnp.int32))
  views = comp.views(rng, b)

  @jax.jit  # One program for both gradients: op by op, they compile ~200 small ones.
  def through_encoder(encoder):
    def loss(name, encoder):
      z, mask = comp.encode(encoder, views["view1"], train=False, rng=rng)
      z2 = comp.encode(encoder, views["view2"], train=False, rng=rng)[0]
      return comp.head_loss(name, z, mask, params[HEADS], views, b,
                            z2=jax.lax.stop_gradient(z2))[0]
    return {name: jax.grad(functools.partial(loss, name))(encoder) for name in ("mlm", PROBE)}
  grads = {name: np.concatenate([np.ravel(v) for _, v in sorted(tree.flatten(g).items())])
           for name, g in through_encoder(params["encoder"]).items()}
  direct = _cos(grads["mlm"], grads[PROBE])
  np.testing.assert_allclose(float(cosines["encoder"][0]), direct, rtol=1e-4, atol=1e-6)

  config.pretrain.composite.weighting = "raw_sum"
  with pytest.raises(ValueError, match="composite.weighting='raw_sum'"):
    grap_alignment.measure(config, "pretrain", params, num_batches=1)
  config.pretrain.composite.weighting = "grap"
  config.pretrain.grap.probe_optimizer = "own"
  own = {"encoder": params["encoder"], HEADS: {k: v for k, v in params[HEADS].items()
                                               if k != PROBE}}
  with pytest.raises(ValueError, match="probe_optimizer='own'"):
    grap_alignment.measure(config, "pretrain", own, num_batches=1)


# ---------------------------------------------------------------------------------------- sweeps
def test_issue18_sweeps_resolve_rerun_the_best_search_and_stay_resumable(tmp_path):
  """Every run of the prepared sweeps builds a valid config; every override survives the JSON round
  trip of run_spec.json (so a re-invoked sweep recognises its runs); the comparison reruns the 3
  search settings best on validation (never test), read from the search's results.json."""
  from spt_jax import config_lib, sweep
  search = config_lib.load_config("configs/sweeps/grap_compare.py:markov,search")
  assert len(search.runs) == 12 and search.seeds == (0,)
  rows = [{"run": f"search_{i:02d}", "finetune.best_val.accuracy_mean": v,
           "finetune.test_of_best.accuracy_mean": 1 - v}
          for i, v in enumerate([0.3, 0.9, 0.5, 0.8, 0.1, 0.7, 0.2, 0.6, 0.4, 0.05, 0.15, 0.25])]
  os.makedirs(tmp_path / "markov_search")
  with open(tmp_path / "markov_search" / "results.json", "w") as f:
    json.dump(rows, f)
  compare = config_lib.load_config(f"configs/sweeps/grap_compare.py:markov,from={tmp_path}")
  names = [sweep.parse_run(r)[0] for r in compare.runs]
  assert names == ["grap", "raw_sum", "equal_norm", "search_01", "search_03", "search_05", "spt",
                   "scratch", "grap_msr", "raw_sum_msr"]
  with pytest.raises(FileNotFoundError, match="run the search first"):
    config_lib.load_config(f"configs/sweeps/grap_compare.py:count,from={tmp_path}")
  # Saturated validation accuracy (count): ties go to the lower final validation loss, not the name.
  tied = [{"run": f"search_{i:02d}", "finetune.best_val.accuracy_mean": 1.0 if i < 5 else 0.9,
           "finetune.final_val.loss_mean": loss}
          for i, loss in enumerate([0.5, 0.1, 0.4, 0.05, 0.3, 0.01, 0.2, 0.3, 0.3, 0.3, 0.3, 0.3])]
  os.makedirs(tmp_path / "count_search")
  with open(tmp_path / "count_search" / "results.json", "w") as f:
    json.dump(tied, f)
  count = config_lib.load_config(f"configs/sweeps/grap_compare.py:count,from={tmp_path}")
  assert [sweep.parse_run(r)[0] for r in count.runs][3:6] == ["search_03", "search_01", "search_04"]
  assert count.steps_to == 0.99 and compare.steps_to == 0.0
  ablation = config_lib.load_config("configs/sweeps/grap_compare.py:markov,ablation")
  assert [sweep.parse_run(r)[0] for r in ablation.runs] == [
      "spt", "raw_sum_ms", "raw_sum_mc", "raw_sum_mr", "raw_sum_msr", "raw_sum"]
  with pytest.raises(ValueError, match="at most one of the stages"):
    config_lib.load_config("configs/sweeps/grap_compare.py:markov,labels,ablation")
  sweeps = [search, compare, ablation,
            config_lib.load_config("configs/sweeps/grap_compare.py:count,labels"),
            config_lib.load_config("configs/sweeps/grap_redundancy.py:methods"),
            config_lib.load_config("configs/sweeps/grap_redundancy.py")]
  for sw in sweeps:
    sweep.check_sweep(sw)
    for spec in sw.runs:
      name, overrides = sweep.parse_run(spec)
      assert json.loads(json.dumps(overrides)) == overrides, (name, overrides)
      config = config_lib.load_config(overrides["config"])
      sweep.apply_overrides(config, {k: v for k, v in overrides.items() if k != "config"})
      config_lib.validate(config, 1)
      if name.startswith("search_"):
        assert config.pretrain.composite.weighting == "fixed"
        assert all(0.01 <= w <= 1 for w in config.pretrain.composite.fixed_weights)
  assert len(sweeps[-1].runs) == 4 and sweeps[-1].seeds == (0, 1, 2, 3, 4)
  methods = {sweep.parse_run(r)[0]: sweep.parse_run(r)[1] for r in sweeps[-2].runs}
  assert sweeps[-2].output == "methods" and {o.get("pretrain.grap.probe") for o in
                                             methods.values()} == {"token_mlp", None}
  with pytest.raises(ValueError, match="fixed= gives 2 weights"):
    config_lib.load_config("configs/sweeps/grap_arms.py:count,msr,fixed=0.1/0.2")
